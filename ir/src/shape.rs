//! The shape rules of each op, as one table: which dims of which tensors must compare how.
//! [`crate::Op::validate`] checks the rules between inputs and infers the output's shape
//! from the rules on it; the C ABI and ahead-of-time entries check all of them against the
//! dims a caller describes, and generated headers print them.

use std::fmt;

use crate::kind::{OpKind, Operand};

/// How a rule compares a dim with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Relation {
    /// `<=`
    AtMost,
    /// `>=`
    AtLeast,
    /// `==`
    Equal,
}

impl Relation {
    /// The operator as C and the messages write it.
    pub const fn symbol(self) -> &'static str {
        match self {
            Relation::AtMost => "<=",
            Relation::AtLeast => ">=",
            Relation::Equal => "==",
        }
    }

    /// Whether `a relation b`.
    pub const fn holds(self, a: usize, b: usize) -> bool {
        match self {
            Relation::AtMost => a <= b,
            Relation::AtLeast => a >= b,
            Relation::Equal => a == b,
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// Which dims a row of the table relates, as pairs (dim of the tensor, dim of the other),
/// for data of rank `r`, indices of rank `q` and the normalized axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dims {
    /// `(d, d)` for every `d < r`.
    All,
    /// `(d, d)` for every `d < r` but the axis.
    OffAxis,
    /// `(d, d)` for `d < axis`: Gather's output dims before the indices' dims.
    BeforeAxis,
    /// `(axis + j, j)` for `j < q`: Gather's output dims that are the indices' dims.
    IndexDims,
    /// `(d + q - 1, d)` for `axis < d < r`: Gather's output dims after the indices' dims.
    AfterAxis,
}

impl Dims {
    /// The pairs for data of rank `r`, indices of rank `q` and `axis`, in increasing order.
    pub fn pairs(self, r: usize, q: usize, axis: usize) -> impl Iterator<Item = (usize, usize)> {
        let (range, shift): (std::ops::Range<usize>, isize) = match self {
            Dims::All | Dims::OffAxis => (0..r, 0),
            Dims::BeforeAxis => (0..axis, 0),
            Dims::IndexDims => (0..q, axis as isize),
            Dims::AfterAxis => (axis + 1..r, q as isize - 1),
        };
        range
            .filter(move |&d| !(self == Dims::OffAxis && d == axis))
            .map(move |d| ((d as isize + shift) as usize, d))
    }
}

/// One row of an op's table: `tensor.shape[i] relation other.shape[j]` for each pair
/// `(i, j)` of `dims`. A row on the output is always `Equal` with the output on the left:
/// it defines those dims of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The tensor whose dims are compared.
    pub tensor: Operand,
    /// Which dims.
    pub dims: Dims,
    /// How they compare.
    pub relation: Relation,
    /// The tensor they are compared with.
    pub other: Operand,
}

const fn rule(tensor: Operand, dims: Dims, relation: Relation, other: Operand) -> Rule {
    Rule {
        tensor,
        dims,
        relation,
        other,
    }
}

use Dims::{AfterAxis, All, BeforeAxis, IndexDims, OffAxis};
use Operand::{Data, Indices, Output, Updates};
use Relation::{AtLeast, AtMost, Equal};

/// SPEC: indices fit in data off the axis, updates cover indices, the output is data's shape.
const SCATTER_ELEMENTS: &[Rule] = &[
    rule(Indices, OffAxis, AtMost, Data),
    rule(Updates, All, AtLeast, Indices),
    rule(Output, All, Equal, Data),
];

/// SPEC: indices fit in data off the axis, the output is indices' shape.
const GATHER_ELEMENTS: &[Rule] = &[
    rule(Indices, OffAxis, AtMost, Data),
    rule(Output, All, Equal, Indices),
];

/// SPEC: any indices shape; the output is data's shape with the axis replaced by indices'.
const GATHER: &[Rule] = &[
    rule(Output, BeforeAxis, Equal, Data),
    rule(Output, IndexDims, Equal, Indices),
    rule(Output, AfterAxis, Equal, Data),
];

impl OpKind {
    /// The op's shape rules, in the order validation checks them.
    pub const fn shape_rules(self) -> &'static [Rule] {
        match self {
            OpKind::ScatterElements => SCATTER_ELEMENTS,
            OpKind::GatherElements => GATHER_ELEMENTS,
            OpKind::Gather => GATHER,
        }
    }
}

/// One rule on two dims: `tensor.shape[dim] relation other.shape[other_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimRule {
    /// The tensor whose dim is compared.
    pub tensor: Operand,
    /// Its dim.
    pub dim: usize,
    /// How it compares.
    pub relation: Relation,
    /// The tensor it is compared with.
    pub other: Operand,
    /// That tensor's dim.
    pub other_dim: usize,
}

/// The rules of `kind` on two dims each, for data of rank `r`, indices of rank `q` and the
/// normalized `axis`, in the table's order.
pub fn dim_rules(kind: OpKind, r: usize, q: usize, axis: usize) -> impl Iterator<Item = DimRule> {
    kind.shape_rules().iter().flat_map(move |rule| {
        rule.dims
            .pairs(r, q, axis)
            .map(move |(dim, other_dim)| DimRule {
                tensor: rule.tensor,
                dim,
                relation: rule.relation,
                other: rule.other,
                other_dim,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_dims_place_indices_at_the_axis() {
        let pairs = |dims: Dims| dims.pairs(3, 2, 1).collect::<Vec<_>>();
        assert_eq!(pairs(BeforeAxis), [(0, 0)]);
        assert_eq!(pairs(IndexDims), [(1, 0), (2, 1)]);
        assert_eq!(pairs(AfterAxis), [(3, 2)]);
        assert_eq!(pairs(OffAxis), [(0, 0), (2, 2)]);
        // A scalar index removes the axis.
        assert_eq!(AfterAxis.pairs(3, 0, 1).collect::<Vec<_>>(), [(1, 2)]);
    }

    /// Every output dim is defined by exactly one `Equal` rule, and only output rules
    /// relate different dims (validation's messages name one dim for both tensors).
    #[test]
    fn each_output_dim_has_one_definition() {
        for &kind in OpKind::ALL {
            for r in 1..=4 {
                let qs = if kind == OpKind::Gather { 0..=3 } else { r..=r };
                for q in qs {
                    for axis in 0..r {
                        let out_rank = if kind == OpKind::Gather { r + q - 1 } else { r };
                        let mut defined = vec![0; out_rank];
                        for rule in dim_rules(kind, r, q, axis) {
                            if rule.tensor == Output {
                                assert_eq!(rule.relation, Equal);
                                defined[rule.dim] += 1;
                            } else {
                                assert_ne!(rule.other, Output);
                                assert_eq!(rule.dim, rule.other_dim);
                            }
                        }
                        assert!(defined.iter().all(|&n| n == 1), "{kind} r{r} q{q} a{axis}");
                    }
                }
            }
        }
    }
}
