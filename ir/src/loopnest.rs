//! Ops described as loop nests: an iteration domain, direct and indexed accesses, and a
//! combine step. One generic lowering turns any of these into machine code, so a new op
//! (ScatterND, index_select) is a new description here, not a new code generator.

use std::fmt;

use crate::key::KernelKey;
use crate::kind::{OpKind, Operand};
use crate::reduction::{MeanAccumulator, Reduction};

/// Where one dimension of an accessed tensor gets its coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coord {
    /// The loop variable of domain dimension `n`.
    Loop(usize),
    /// The index value read at this point of the domain, normalized and bounds-checked.
    Index,
}

/// A read or write of one tensor: one coordinate per dimension of that tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// The tensor.
    pub operand: Operand,
    /// Its coordinates, outermost first.
    pub coords: Vec<Coord>,
}

impl Access {
    /// An access whose coordinates are the loop variables `first..first + rank` in order,
    /// except that coordinate `indexed` (if any) is the index value.
    pub fn new(operand: Operand, rank: usize, first: usize, indexed: Option<usize>) -> Self {
        let coords = (0..rank)
            .map(|d| {
                if Some(d) == indexed {
                    Coord::Index
                } else {
                    Coord::Loop(first + d)
                }
            })
            .collect();
        Access { operand, coords }
    }

    /// The dimension addressed by the index value, if any.
    pub fn indexed_dim(&self) -> Option<usize> {
        self.coords.iter().position(|c| *c == Coord::Index)
    }
}

/// The value a pass combines into its destination.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A value read from a tensor.
    Read(Access),
    /// The reduction's identity (for `use_init_val = false`).
    Identity(Reduction),
}

/// How the source value meets the destination element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combine {
    /// `dest = value`.
    Assign,
    /// `dest = reduction(dest, value)` in the element type (f16/bf16 via f32).
    Reduce(Reduction),
    /// `dest += widen(value); count += 1` in the mean accumulator type.
    Accumulate(MeanAccumulator),
    /// Mean's start: `dest = widen(value)` in the accumulator type (its zero for an
    /// identity source) and `count = 0`.
    Start(MeanAccumulator),
    /// Mean's end: where `count > 0`, `dest = value / (count + 1)` with `use_init_val`
    /// (`value / count` without), rounded once to the element type (integers toward
    /// negative infinity); elements with `count = 0` keep their value.
    Finish {
        /// The type of the sums read.
        acc: MeanAccumulator,
        /// Whether the sums include the initial value (`use_init_val`).
        with_init: bool,
    },
}

/// The role of a pass in a kernel; passes run in the order of this enum, which is the
/// order of [`Plan::passes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PassKind {
    /// Validate every index before anything is written; writes nothing.
    Check,
    /// Out-of-place scatter: copy data into the output.
    Copy,
    /// `use_init_val = false`: reset every targeted element to the identity; for `mean`,
    /// start every sum and count.
    Init,
    /// The op itself.
    Apply,
    /// `mean`: divide the sums into the output.
    Finish,
}

impl PassKind {
    /// Every kind, in order; [`PassKind::index`] numbers them.
    pub const ALL: [PassKind; 5] = [
        PassKind::Check,
        PassKind::Copy,
        PassKind::Init,
        PassKind::Apply,
        PassKind::Finish,
    ];

    /// A dense number for this kind, below `PassKind::ALL.len()`.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name used for symbols and printing.
    pub const fn name(self) -> &'static str {
        match self {
            PassKind::Copy => "copy",
            PassKind::Check => "check",
            PassKind::Init => "init",
            PassKind::Apply => "apply",
            PassKind::Finish => "finish",
        }
    }
}

/// One loop nest: `for p in domain { k = normalize(index[p]); dest[..] = combine(dest[..], source[..]) }`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoopNest {
    /// What this pass is for.
    pub pass: PassKind,
    /// The operand whose shape is the iteration domain.
    pub domain: Operand,
    /// Rank of the domain (0 runs the body once).
    pub depth: usize,
    /// Where the index is read, if the pass reads one.
    pub index: Option<Access>,
    /// The operand and dimension whose size `s` bounds the index.
    pub bound: Option<(Operand, usize)>,
    /// The value combined into the destination.
    pub source: Option<Source>,
    /// The element written, if any.
    pub dest: Option<Access>,
    /// Mean's per-element count: incremented where `dest` is accumulated, zeroed by
    /// [`Combine::Start`], read by [`Combine::Finish`].
    pub count: Option<Access>,
    /// How source meets dest.
    pub combine: Combine,
}

impl LoopNest {
    /// Whether the pass writes through the index (a scatter's writing passes): its
    /// destination coordinate along the indexed dim comes from the data, so two positions
    /// of the axis's loop may write one element.
    pub fn writes_through_index(&self) -> bool {
        self.dest
            .as_ref()
            .is_some_and(|d| d.indexed_dim().is_some())
    }
}

/// Everything a key computes: its passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The key planned.
    pub key: KernelKey,
    /// The loop nests, in [`PassKind`] order; each kind at most once.
    pub passes: Vec<LoopNest>,
}

impl Plan {
    /// Describes the passes of `key` as loop nests.
    pub fn new(key: KernelKey) -> Plan {
        let r = key.rank();
        let axis = key.axis();
        let all = |operand, rank| Access::new(operand, rank, 0, None);
        let indexed = |operand, rank| Access::new(operand, rank, 0, Some(axis));
        let check = LoopNest {
            pass: PassKind::Check,
            domain: Operand::Indices,
            depth: key.index_rank(),
            index: Some(all(Operand::Indices, key.index_rank())),
            bound: Some((Operand::Data, axis)),
            source: None,
            dest: None,
            count: None,
            combine: Combine::Assign,
        };
        // The check comes first: nothing is written before every index is known good.
        let mut passes = vec![check];
        match key.kind() {
            OpKind::ScatterElements => {
                passes.push(LoopNest {
                    pass: PassKind::Copy,
                    domain: Operand::Data,
                    depth: r,
                    index: None,
                    bound: None,
                    source: Some(Source::Read(all(Operand::Data, r))),
                    dest: Some(all(Operand::Output, r)),
                    count: None,
                    combine: Combine::Assign,
                });
                let reduction = key.reduction();
                let scatter = |source, dest, count, combine| LoopNest {
                    pass: PassKind::Apply,
                    domain: Operand::Indices,
                    depth: r,
                    index: Some(all(Operand::Indices, r)),
                    bound: Some((Operand::Output, axis)),
                    source: Some(source),
                    dest: Some(dest),
                    count,
                    combine,
                };
                let updates = Source::Read(all(Operand::Updates, r));
                match reduction {
                    Reduction::None => passes.push(scatter(
                        updates,
                        indexed(Operand::Output, r),
                        None,
                        Combine::Assign,
                    )),
                    Reduction::Mean => {
                        let acc = Reduction::mean_accumulator(key.dtype())
                            .expect("keys only admit mean for dtypes with an accumulator");
                        // Sums and counts are shaped like out, and walked with it.
                        let each = |pass, source, dest, combine| LoopNest {
                            pass,
                            domain: Operand::Output,
                            depth: r,
                            index: None,
                            bound: None,
                            source: Some(source),
                            dest: Some(all(dest, r)),
                            count: Some(all(Operand::Counts, r)),
                            combine,
                        };
                        let start = match key.use_init_val() {
                            true => Source::Read(all(Operand::Output, r)),
                            false => Source::Identity(Reduction::Mean),
                        };
                        passes.push(each(
                            PassKind::Init,
                            start,
                            Operand::Sums,
                            Combine::Start(acc),
                        ));
                        passes.push(scatter(
                            updates,
                            indexed(Operand::Sums, r),
                            Some(indexed(Operand::Counts, r)),
                            Combine::Accumulate(acc),
                        ));
                        passes.push(each(
                            PassKind::Finish,
                            Source::Read(all(Operand::Sums, r)),
                            Operand::Output,
                            Combine::Finish {
                                acc,
                                with_init: key.use_init_val(),
                            },
                        ));
                    }
                    _ => {
                        if !key.use_init_val() {
                            let mut init = scatter(
                                Source::Identity(reduction),
                                indexed(Operand::Output, r),
                                None,
                                Combine::Assign,
                            );
                            init.pass = PassKind::Init;
                            passes.push(init);
                        }
                        passes.push(scatter(
                            updates,
                            indexed(Operand::Output, r),
                            None,
                            Combine::Reduce(reduction),
                        ));
                    }
                }
            }
            OpKind::GatherElements => {
                passes.push(LoopNest {
                    pass: PassKind::Apply,
                    domain: Operand::Indices,
                    depth: r,
                    index: Some(all(Operand::Indices, r)),
                    bound: Some((Operand::Data, axis)),
                    source: Some(Source::Read(indexed(Operand::Data, r))),
                    dest: Some(all(Operand::Output, r)),
                    count: None,
                    combine: Combine::Assign,
                });
            }
            OpKind::Gather => {
                let q = key.index_rank();
                let depth = key.out_rank();
                // out[a, i, b] = data[a, idx[i], b]: a = loops 0..axis, i = axis..axis+q, b = the rest.
                let mut data_coords: Vec<Coord> = (0..axis).map(Coord::Loop).collect();
                data_coords.push(Coord::Index);
                data_coords.extend((axis + q..depth).map(Coord::Loop));
                passes.push(LoopNest {
                    pass: PassKind::Apply,
                    domain: Operand::Output,
                    depth,
                    index: Some(Access::new(Operand::Indices, q, axis, None)),
                    bound: Some((Operand::Data, axis)),
                    source: Some(Source::Read(Access {
                        operand: Operand::Data,
                        coords: data_coords,
                    })),
                    dest: Some(all(Operand::Output, depth)),
                    count: None,
                    combine: Combine::Assign,
                });
            }
        }
        Plan { key, passes }
    }

    /// For `mean`: the type of the sums, which with the counts need scratch shaped like
    /// the output (see [`Operand::Sums`], [`Operand::Counts`]).
    pub fn mean_accumulator(&self) -> Option<MeanAccumulator> {
        self.passes.iter().find_map(|p| match p.combine {
            Combine::Accumulate(acc) => Some(acc),
            _ => None,
        })
    }

    /// The pass of the given kind, if the plan has one.
    pub fn pass(&self, kind: PassKind) -> Option<&LoopNest> {
        self.passes.iter().find(|p| p.pass == kind)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.operand.name())?;
        for (i, c) in self.coords.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match c {
                Coord::Loop(n) => write!(f, "p{n}")?,
                Coord::Index => f.write_str("k")?,
            }
        }
        f.write_str("]")
    }
}

impl fmt::Display for LoopNest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let loops: Vec<String> = (0..self.depth).map(|n| format!("p{n}")).collect();
        writeln!(
            f,
            "{}: for ({}) in shape({})",
            self.pass.name(),
            loops.join(", "),
            self.domain.name()
        )?;
        if let (Some(index), Some((operand, dim))) = (&self.index, self.bound) {
            writeln!(
                f,
                "    k = normalize({index}, s = {}.shape[{dim}])  // error if k not in [-s, s)",
                operand.name()
            )?;
        }
        let value = match &self.source {
            Some(Source::Read(a)) => a.to_string(),
            Some(Source::Identity(r)) => format!("identity({r})"),
            None => return Ok(()),
        };
        let Some(dest) = &self.dest else {
            return Ok(());
        };
        match self.combine {
            Combine::Assign => writeln!(f, "    {dest} = {value}"),
            Combine::Reduce(r) => writeln!(f, "    {dest} = {r}({dest}, {value})"),
            Combine::Accumulate(acc) => {
                writeln!(f, "    {dest} += {acc:?}({value})")?;
                if let Some(count) = &self.count {
                    writeln!(f, "    {count} += 1")?;
                }
                Ok(())
            }
            Combine::Start(acc) => {
                match &self.source {
                    Some(Source::Identity(_)) => writeln!(f, "    {dest} = {acc:?}(0)")?,
                    _ => writeln!(f, "    {dest} = {acc:?}({value})")?,
                }
                if let Some(count) = &self.count {
                    writeln!(f, "    {count} = 0")?;
                }
                Ok(())
            }
            Combine::Finish { with_init, .. } => {
                let count = self.count.as_ref().map(ToString::to_string);
                let count = count.unwrap_or_default();
                let extra = if with_init { " + 1" } else { "" };
                writeln!(
                    f,
                    "    if {count} > 0: {dest} = {value} / ({count}{extra})  // integers round toward -inf"
                )
            }
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {}", self.key)?;
        for pass in &self.passes {
            write!(f, "{pass}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn gather_reads_data_through_the_index() {
        let key = KernelKey::gather(DType::F32, DType::I64, 3, 2, 1).unwrap();
        let plan = Plan::new(key);
        let apply = plan.pass(PassKind::Apply).unwrap();
        assert_eq!(apply.depth, 4);
        assert_eq!(
            apply.index.as_ref().unwrap().coords,
            [Coord::Loop(1), Coord::Loop(2)]
        );
        let Some(Source::Read(data)) = &apply.source else {
            panic!("gather reads data")
        };
        assert_eq!(data.coords, [Coord::Loop(0), Coord::Index, Coord::Loop(3)]);
    }

    #[test]
    fn scatter_passes_follow_the_reduction() {
        let kinds = |key: KernelKey| -> Vec<PassKind> {
            Plan::new(key).passes.iter().map(|p| p.pass).collect()
        };
        let none =
            KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::None, false)
                .unwrap();
        assert_eq!(
            kinds(none),
            [PassKind::Check, PassKind::Copy, PassKind::Apply]
        );
        let noinit =
            KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Max, false)
                .unwrap();
        assert_eq!(
            kinds(noinit),
            [
                PassKind::Check,
                PassKind::Copy,
                PassKind::Init,
                PassKind::Apply
            ]
        );
        let mean = KernelKey::scatter_elements(DType::I8, DType::I64, 2, 1, Reduction::Mean, true)
            .unwrap();
        let plan = Plan::new(mean);
        assert_eq!(plan.mean_accumulator(), Some(MeanAccumulator::I64));
        assert_eq!(
            kinds(mean),
            [
                PassKind::Check,
                PassKind::Copy,
                PassKind::Init,
                PassKind::Apply,
                PassKind::Finish
            ]
        );
        let text = plan.to_string();
        for line in [
            "sums[p0, p1] = I64(output[p0, p1])",
            "counts[p0, p1] = 0",
            "sums[p0, k] += I64(updates[p0, p1])",
            "if counts[p0, p1] > 0: output[p0, p1] = sums[p0, p1] / (counts[p0, p1] + 1)",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let noinit =
            KernelKey::scatter_elements(DType::U64, DType::I32, 1, 0, Reduction::Mean, false)
                .unwrap();
        let text = Plan::new(noinit).to_string();
        assert!(text.contains("sums[p0] = I128(0)"), "{text}");
        assert!(
            text.contains("output[p0] = sums[p0] / (counts[p0])"),
            "{text}"
        );
    }
}
