//! The ops, their attributes, and shape validation / inference.

use crate::dtype::DType;
use crate::error::{Error, Mismatch, Result};
use crate::key::KernelKey;
use crate::kind::{OpKind, Operand, MAX_RANK};
use crate::reduction::Reduction;
use crate::shape::{self, DimRule};

/// An op with its attributes, as a model or framework states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `out = copy(data); out[p[axis := idx[p]]] = combine(out[...], updates[p])`.
    ScatterElements {
        /// Axis along which indices point (negative counts from the back).
        axis: i64,
        /// How updates combine with the output.
        reduction: Reduction,
        /// Whether targeted elements start from data (`true`) or the reduction's identity.
        use_init_val: bool,
    },
    /// `out[p] = data[p[axis := idx[p]]]`.
    GatherElements {
        /// Axis along which indices point.
        axis: i64,
    },
    /// `out[a, i, b] = data[a, idx[i], b]`.
    Gather {
        /// Axis along which indices point.
        axis: i64,
    },
}

/// The dtype and shape of one operand: all validation needs.
#[derive(Clone, Copy, Debug)]
pub struct Meta<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: &'a [usize],
}

impl<'a> Meta<'a> {
    /// Bundles a dtype and a shape.
    pub fn new(dtype: DType, shape: &'a [usize]) -> Self {
        Meta { dtype, shape }
    }
}

/// What validation proves: the kernel key and the output shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validated {
    /// The kernel that computes this op on these dtypes and ranks.
    pub key: KernelKey,
    /// Shape of the result.
    pub out_shape: Vec<usize>,
}

impl Op {
    /// The op of family `kind` with these attributes; `reduction` and `use_init_val` matter
    /// only to ScatterElements.
    pub fn new(kind: OpKind, axis: i64, reduction: Reduction, use_init_val: bool) -> Op {
        match kind {
            OpKind::ScatterElements => Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            },
            OpKind::GatherElements => Op::GatherElements { axis },
            OpKind::Gather => Op::Gather { axis },
        }
    }

    /// The op family.
    pub const fn kind(&self) -> OpKind {
        match self {
            Op::ScatterElements { .. } => OpKind::ScatterElements,
            Op::GatherElements { .. } => OpKind::GatherElements,
            Op::Gather { .. } => OpKind::Gather,
        }
    }

    /// The axis attribute as given.
    pub const fn axis(&self) -> i64 {
        match *self {
            Op::ScatterElements { axis, .. }
            | Op::GatherElements { axis }
            | Op::Gather { axis } => axis,
        }
    }

    /// Checks dtypes, ranks, axis and shapes against SPEC.md and infers the output shape.
    /// `updates` is required for ScatterElements and must be `None` otherwise.
    ///
    /// ```
    /// use scatterjit_ir::{DType, Meta, Op, Reduction};
    /// let op = Op::ScatterElements { axis: -1, reduction: Reduction::Add, use_init_val: true };
    /// let v = op
    ///     .validate(
    ///         Meta::new(DType::F32, &[3, 5]),
    ///         Meta::new(DType::I64, &[2, 2]),
    ///         Some(Meta::new(DType::F32, &[2, 4])),
    ///     )
    ///     .unwrap();
    /// assert_eq!(v.key.to_string(), "scatter_elements.f32.i64.r2.a1.add");
    /// assert_eq!(v.out_shape, [3, 5]);
    /// ```
    pub fn validate(
        &self,
        data: Meta<'_>,
        indices: Meta<'_>,
        updates: Option<Meta<'_>>,
    ) -> Result<Validated> {
        let op = self.kind();
        let r = data.shape.len();
        let q = indices.shape.len();
        check_rank(op, Operand::Data, r, 1)?;
        check_rank(op, Operand::Indices, q, 0)?;
        let key = match *self {
            Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            } => KernelKey::scatter_elements(
                data.dtype,
                indices.dtype,
                r,
                axis,
                reduction,
                use_init_val,
            )?,
            Op::GatherElements { axis } => {
                KernelKey::gather_elements(data.dtype, indices.dtype, r, axis)?
            }
            Op::Gather { axis } => KernelKey::gather(data.dtype, indices.dtype, r, q, axis)?,
        };
        check_size(op, Operand::Data, data)?;
        check_size(op, Operand::Indices, indices)?;
        if op == OpKind::ScatterElements {
            let updates = updates.ok_or(Error::MissingUpdates { op })?;
            if updates.dtype != data.dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    tensor: Operand::Updates,
                    expected: data.dtype,
                    actual: updates.dtype,
                });
            }
        }
        if op != OpKind::Gather {
            check_same_rank(op, Operand::Indices, q, r)?;
        }
        if let (OpKind::ScatterElements, Some(updates)) = (op, updates) {
            check_same_rank(op, Operand::Updates, updates.shape.len(), r)?;
            check_size(op, Operand::Updates, updates)?;
        }
        // The rules between inputs in the table's order; the output's define its shape.
        let shape_of = |tensor: Operand| match tensor {
            Operand::Data => data.shape,
            Operand::Indices => indices.shape,
            Operand::Updates => updates.map_or(&[][..], |u| u.shape),
            Operand::Output | Operand::Sums | Operand::Counts => {
                unreachable!("rules compare inputs, or define the output by an input")
            }
        };
        // Not `vec![0; n]`: that asks `calloc`, about three times `malloc`'s instructions
        // for a few dims, and every call of a free function validates.
        #[allow(clippy::slow_vector_initialization)]
        let mut out_shape = Vec::with_capacity(key.out_rank());
        out_shape.resize(key.out_rank(), 0);
        for rule in key.shape_rules() {
            let other_size = shape_of(rule.other)[rule.other_dim];
            if rule.tensor == Operand::Output {
                out_shape[rule.dim] = other_size;
                continue;
            }
            let size = shape_of(rule.tensor)[rule.dim];
            if !rule.relation.holds(size, other_size) {
                return Err(Error::Shape {
                    op,
                    tensor: rule.tensor,
                    dim: rule.dim,
                    size,
                    relation: rule.relation,
                    other: rule.other,
                    other_size,
                });
            }
        }
        if let (false, Some(updates)) = (op == OpKind::ScatterElements, updates) {
            return Err(Error::UnexpectedUpdates {
                op,
                rank: updates.shape.len(),
            });
        }
        check_size(op, Operand::Output, Meta::new(data.dtype, &out_shape))?;
        Ok(Validated { key, out_shape })
    }
}

/// Number of elements of `shape`, or an error if it overflows (a shape with a zero dim
/// has no elements, however large the others).
pub fn checked_numel(shape: &[usize]) -> Result<usize> {
    numel(shape).ok_or_else(|| Error::ShapeOverflow {
        shape: shape.to_vec(),
    })
}

/// Bytes of a contiguous tensor, or an error if they exceed `isize::MAX` (Rust's allocation limit).
pub fn checked_nbytes(dtype: DType, shape: &[usize]) -> Result<usize> {
    nbytes(dtype, shape).ok_or_else(|| Error::ShapeOverflow {
        shape: shape.to_vec(),
    })
}

/// [`checked_numel`] without the error, which validation only builds on failure.
fn numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// [`checked_nbytes`] without the error.
fn nbytes(dtype: DType, shape: &[usize]) -> Option<usize> {
    numel(shape)?
        .checked_mul(dtype.size().max(1))
        .filter(|&n| n <= isize::MAX as usize)
}

fn check_size(op: OpKind, tensor: Operand, t: Meta<'_>) -> Result<()> {
    match nbytes(t.dtype, t.shape) {
        Some(_) => Ok(()),
        None => Err(Error::SizeOverflow {
            op,
            tensor,
            shape: t.shape.to_vec(),
        }),
    }
}

fn check_rank(op: OpKind, tensor: Operand, rank: usize, min: usize) -> Result<()> {
    if rank < min || rank > MAX_RANK {
        return Err(Error::Rank {
            op,
            tensor,
            rank,
            expected: format!("{min} to {MAX_RANK}"),
        });
    }
    Ok(())
}

fn check_same_rank(op: OpKind, tensor: Operand, rank: usize, data_rank: usize) -> Result<()> {
    if rank != data_rank {
        return Err(Error::Rank {
            op,
            tensor,
            rank,
            expected: format!("the rank of data ({data_rank})"),
        });
    }
    Ok(())
}

impl KernelKey {
    /// The shape rules of this key's op on two dims each (see [`crate::shape`]), in the
    /// order validation checks them.
    pub fn shape_rules(&self) -> impl Iterator<Item = DimRule> {
        shape::dim_rules(self.kind(), self.rank(), self.index_rank(), self.axis())
    }

    /// The op this key computes, with its axis normalized.
    pub fn op(&self) -> Op {
        Op::new(
            self.kind(),
            self.axis() as i64,
            self.reduction(),
            self.use_init_val(),
        )
    }

    /// Validates operands for the kernel of this key: [`Op::validate`] of [`Self::op`], then
    /// [`Error::KernelMismatch`] unless they have the dtypes and ranks the key fixes.
    ///
    /// ```
    /// use scatterjit_ir::{DType, Error, KernelKey, Meta, Mismatch, Operand};
    /// let key = KernelKey::gather_elements(DType::F32, DType::I64, 1, 0)?;
    /// let data = Meta::new(DType::F64, &[3]);
    /// let e = key.validate(data, Meta::new(DType::I64, &[2]), None).unwrap_err();
    /// let Error::KernelMismatch { tensor, mismatch, .. } = &e else { panic!("{e}") };
    /// assert_eq!(*tensor, Operand::Data);
    /// assert_eq!(*mismatch, Mismatch::DType { expected: DType::F32, actual: DType::F64 });
    /// # Ok::<(), Error>(())
    /// ```
    pub fn validate(
        &self,
        data: Meta<'_>,
        indices: Meta<'_>,
        updates: Option<Meta<'_>>,
    ) -> Result<Validated> {
        let v = self.op().validate(data, indices, updates)?;
        if v.key == *self {
            return Ok(v);
        }
        // The op fixes kind, axis and reduction: only dtypes and ranks can differ.
        let (tensor, mismatch) = if v.key.dtype() != self.dtype() {
            let (expected, actual) = (self.dtype(), v.key.dtype());
            (Operand::Data, Mismatch::DType { expected, actual })
        } else if v.key.rank() != self.rank() {
            let (expected, actual) = (self.rank(), v.key.rank());
            (Operand::Data, Mismatch::Rank { expected, actual })
        } else if v.key.index_dtype() != self.index_dtype() {
            let (expected, actual) = (self.index_dtype(), v.key.index_dtype());
            (Operand::Indices, Mismatch::DType { expected, actual })
        } else {
            let (expected, actual) = (self.index_rank(), v.key.index_rank());
            (Operand::Indices, Mismatch::Rank { expected, actual })
        };
        Err(Error::KernelMismatch {
            op: self.kind(),
            kernel: self.to_string(),
            tensor,
            mismatch,
            needed: v.key.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scatter(axis: i64, r: Reduction) -> Op {
        Op::ScatterElements {
            axis,
            reduction: r,
            use_init_val: true,
        }
    }

    #[test]
    fn gather_output_shape() {
        let v = Op::Gather { axis: 1 }
            .validate(
                Meta::new(DType::F32, &[2, 3, 4]),
                Meta::new(DType::I32, &[5, 6]),
                None,
            )
            .unwrap();
        assert_eq!(v.out_shape, [2, 5, 6, 4]);
        let v = Op::Gather { axis: 0 }
            .validate(
                Meta::new(DType::F32, &[3]),
                Meta::new(DType::I64, &[]),
                None,
            )
            .unwrap();
        assert_eq!(v.out_shape, Vec::<usize>::new());
    }

    #[test]
    fn scatter_shape_errors() {
        let e = scatter(0, Reduction::None)
            .validate(
                Meta::new(DType::F32, &[3, 3]),
                Meta::new(DType::I64, &[2, 4]),
                Some(Meta::new(DType::F32, &[2, 4])),
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Shape {
                    dim: 1,
                    size: 4,
                    ..
                }
            ),
            "{e}"
        );
        let e = scatter(0, Reduction::None)
            .validate(
                Meta::new(DType::F32, &[3, 3]),
                Meta::new(DType::I64, &[2, 3]),
                Some(Meta::new(DType::F32, &[2, 2])),
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Shape {
                    tensor: Operand::Updates,
                    ..
                }
            ),
            "{e}"
        );
        let e = scatter(2, Reduction::None)
            .validate(
                Meta::new(DType::F32, &[3, 3]),
                Meta::new(DType::I64, &[2, 3]),
                Some(Meta::new(DType::F32, &[2, 3])),
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::AxisOutOfRange {
                    axis: 2,
                    rank: 2,
                    ..
                }
            ),
            "{e}"
        );
        let e = scatter(0, Reduction::Max)
            .validate(
                Meta::new(DType::Complex64, &[0]),
                Meta::new(DType::I64, &[0]),
                Some(Meta::new(DType::Complex64, &[0])),
            )
            .unwrap_err();
        assert!(matches!(e, Error::UnsupportedReduction { .. }), "{e}");
        let e = scatter(0, Reduction::None)
            .validate(
                Meta::new(DType::F32, &[3]),
                Meta::new(DType::F32, &[3]),
                Some(Meta::new(DType::F32, &[3])),
            )
            .unwrap_err();
        assert!(matches!(e, Error::IndexDType { .. }), "{e}");
    }

    #[test]
    fn kernels_name_the_operand_they_do_not_take() {
        let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 1).unwrap();
        let f32s = |shape| Meta::new(DType::F32, shape);
        let i64s = |shape| Meta::new(DType::I64, shape);
        assert!(key.validate(f32s(&[3, 5]), i64s(&[4]), None).is_ok());
        let cases = [
            (
                key.validate(Meta::new(DType::U8, &[3, 5]), i64s(&[4]), None),
                Operand::Data,
                Mismatch::DType {
                    expected: DType::F32,
                    actual: DType::U8,
                },
            ),
            (
                key.validate(f32s(&[3, 5, 2]), i64s(&[4]), None),
                Operand::Data,
                Mismatch::Rank {
                    expected: 2,
                    actual: 3,
                },
            ),
            (
                key.validate(f32s(&[3, 5]), Meta::new(DType::I32, &[4]), None),
                Operand::Indices,
                Mismatch::DType {
                    expected: DType::I64,
                    actual: DType::I32,
                },
            ),
            (
                key.validate(f32s(&[3, 5]), i64s(&[2, 4]), None),
                Operand::Indices,
                Mismatch::Rank {
                    expected: 1,
                    actual: 2,
                },
            ),
        ];
        for (got, tensor, mismatch) in cases {
            let Err(Error::KernelMismatch {
                op: OpKind::Gather,
                kernel,
                tensor: t,
                mismatch: m,
                ..
            }) = &got
            else {
                panic!("{got:?}");
            };
            assert_eq!(
                (kernel.as_str(), *t, *m),
                ("gather.f32.i64.r2.q1.a1", tensor, mismatch)
            );
        }
        let e = key
            .validate(f32s(&[3, 5]), i64s(&[2, 4]), None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "gather: kernel gather.f32.i64.r2.q1.a1 takes indices of rank 1, got rank 2; \
             the operands need kernel gather.f32.i64.r2.q2.a1"
        );
    }

    /// Evaluating every rule of the table (the C ABI's and ahead-of-time entries' check)
    /// agrees with `Op::validate` and its output shape on every small shape combination.
    #[test]
    fn shape_rules_agree_with_validation() {
        let keys = [
            KernelKey::scatter_elements(DType::F32, DType::I64, 2, 1, Reduction::Add, true)
                .unwrap(),
            KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap(),
            KernelKey::gather(DType::F32, DType::I64, 2, 1, 1).unwrap(),
            KernelKey::gather(DType::F32, DType::I64, 2, 2, 0).unwrap(),
            KernelKey::gather(DType::F32, DType::I64, 1, 0, 0).unwrap(),
        ];
        for key in keys {
            let scatter = key.kind() == OpKind::ScatterElements;
            let mut roles = vec![
                (Operand::Data, key.rank()),
                (Operand::Indices, key.index_rank()),
                (Operand::Output, key.out_rank()),
            ];
            if scatter {
                roles.push((Operand::Updates, key.rank()));
            }
            let total: usize = roles.iter().map(|r| r.1).sum();
            // Every assignment of dims in 0..3 to every dim of every operand.
            for mut code in 0..3usize.pow(total as u32) {
                let mut shapes: Vec<Vec<usize>> = Vec::new();
                for &(_, rank) in &roles {
                    shapes.push(
                        (0..rank)
                            .map(|_| {
                                let d = code % 3;
                                code /= 3;
                                d
                            })
                            .collect(),
                    );
                }
                let shape =
                    |role: Operand| &shapes[roles.iter().position(|r| r.0 == role).unwrap()];
                let holds = key.shape_rules().all(|rule| {
                    let a = shape(rule.tensor)[rule.dim];
                    rule.relation.holds(a, shape(rule.other)[rule.other_dim])
                });
                let updates = scatter.then(|| Meta::new(key.dtype(), shape(Operand::Updates)));
                let valid = key
                    .op()
                    .validate(
                        Meta::new(key.dtype(), shape(Operand::Data)),
                        Meta::new(key.index_dtype(), shape(Operand::Indices)),
                        updates,
                    )
                    .is_ok_and(|v| v.key == key && v.out_shape == *shape(Operand::Output));
                assert_eq!(holds, valid, "{key} with shapes {shapes:?}");
            }
        }
    }

    #[test]
    fn overflowing_shapes_are_errors() {
        let huge = [usize::MAX / 2, 3];
        let e = Op::GatherElements { axis: 0 }
            .validate(
                Meta::new(DType::F32, &huge),
                Meta::new(DType::I64, &[1, 1]),
                None,
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::SizeOverflow {
                    op: OpKind::GatherElements,
                    tensor: Operand::Data,
                    ..
                }
            ),
            "{e}"
        );
    }
}
