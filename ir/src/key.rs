//! Kernel keys: everything a compiled kernel specializes on, with one printed name.

use std::fmt;
use std::str::FromStr;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kind::{OpKind, Operand, MAX_RANK};
use crate::reduction::Reduction;

/// What a kernel is specialized on: op, dtypes, ranks, axis and reduction. Shapes and strides
/// are not part of the key; they arrive at call time. Keys of string data exist (validation
/// yields them) but name no compiled kernel: strings travel through the kernels as integer
/// handles.
///
/// A key prints one stable way, which names symbols, golden files and benchmark rows:
///
/// ```
/// use scatterjit_ir::{DType, KernelKey, Reduction};
/// let key = KernelKey::scatter_elements(DType::F32, DType::I64, 3, 1, Reduction::Add, true).unwrap();
/// assert_eq!(key.to_string(), "scatter_elements.f32.i64.r3.a1.add");
/// assert_eq!(key.to_string().parse::<KernelKey>().unwrap(), key);
/// let key = KernelKey::gather(DType::BF16, DType::I32, 2, 1, -1).unwrap();
/// assert_eq!(key.to_string(), "gather.bf16.i32.r2.q1.a1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelKey {
    kind: OpKind,
    dtype: DType,
    index_dtype: DType,
    rank: u8,
    index_rank: u8,
    axis: u8,
    reduction: Reduction,
    use_init_val: bool,
}

impl KernelKey {
    /// A ScatterElements key. `use_init_val` is ignored (stored as `true`) with `none`.
    pub fn scatter_elements(
        dtype: DType,
        index_dtype: DType,
        rank: usize,
        axis: i64,
        reduction: Reduction,
        use_init_val: bool,
    ) -> Result<Self> {
        let op = OpKind::ScatterElements;
        if !reduction.supports(dtype) {
            return Err(Error::UnsupportedReduction {
                op,
                reduction,
                dtype,
            });
        }
        Self::build(
            op,
            dtype,
            index_dtype,
            rank,
            rank,
            axis,
            reduction,
            use_init_val || reduction == Reduction::None,
        )
    }

    /// A GatherElements key.
    pub fn gather_elements(
        dtype: DType,
        index_dtype: DType,
        rank: usize,
        axis: i64,
    ) -> Result<Self> {
        Self::build(
            OpKind::GatherElements,
            dtype,
            index_dtype,
            rank,
            rank,
            axis,
            Reduction::None,
            true,
        )
    }

    /// A Gather key; `index_rank` is the rank of `indices` (0 for a scalar index).
    pub fn gather(
        dtype: DType,
        index_dtype: DType,
        rank: usize,
        index_rank: usize,
        axis: i64,
    ) -> Result<Self> {
        Self::build(
            OpKind::Gather,
            dtype,
            index_dtype,
            rank,
            index_rank,
            axis,
            Reduction::None,
            true,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        kind: OpKind,
        dtype: DType,
        index_dtype: DType,
        rank: usize,
        index_rank: usize,
        axis: i64,
        reduction: Reduction,
        use_init_val: bool,
    ) -> Result<Self> {
        let rank_error = |tensor, rank: usize, min: usize| Error::Rank {
            op: kind,
            tensor,
            rank,
            expected: format!("{min} to {MAX_RANK}"),
        };
        if !(1..=MAX_RANK).contains(&rank) {
            return Err(rank_error(Operand::Data, rank, 1));
        }
        if index_rank > MAX_RANK {
            return Err(rank_error(Operand::Indices, index_rank, 0));
        }
        let axis = normalize_axis(kind, axis, rank)?;
        if !index_dtype.is_integer() {
            return Err(Error::IndexDType {
                op: kind,
                dtype: index_dtype,
            });
        }
        Ok(KernelKey {
            kind,
            dtype,
            index_dtype,
            rank: rank as u8,
            index_rank: index_rank as u8,
            axis: axis as u8,
            reduction,
            use_init_val,
        })
    }

    /// The op family.
    pub const fn kind(&self) -> OpKind {
        self.kind
    }
    /// Element type of data, updates and output.
    pub const fn dtype(&self) -> DType {
        self.dtype
    }
    /// Element type of indices.
    pub const fn index_dtype(&self) -> DType {
        self.index_dtype
    }
    /// Rank of data.
    pub const fn rank(&self) -> usize {
        self.rank as usize
    }
    /// Rank of indices (equal to `rank` except for Gather).
    pub const fn index_rank(&self) -> usize {
        self.index_rank as usize
    }
    /// The normalized axis, in `[0, rank)`.
    pub const fn axis(&self) -> usize {
        self.axis as usize
    }
    /// The reduction (`none` for the gather ops).
    pub const fn reduction(&self) -> Reduction {
        self.reduction
    }
    /// Whether targeted elements start from data (always true with `none`).
    pub const fn use_init_val(&self) -> bool {
        self.use_init_val
    }
    /// Rank of the output.
    pub const fn out_rank(&self) -> usize {
        match self.kind {
            OpKind::ScatterElements => self.rank as usize,
            OpKind::GatherElements => self.rank as usize,
            OpKind::Gather => self.rank as usize + self.index_rank as usize - 1,
        }
    }
}

impl fmt::Display for KernelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.r{}",
            self.kind, self.dtype, self.index_dtype, self.rank
        )?;
        if self.kind == OpKind::Gather {
            write!(f, ".q{}", self.index_rank)?;
        }
        write!(f, ".a{}", self.axis)?;
        if self.kind == OpKind::ScatterElements {
            write!(f, ".{}", self.reduction)?;
            if !self.use_init_val {
                f.write_str(".noinit")?;
            }
        }
        Ok(())
    }
}

impl FromStr for KernelKey {
    type Err = Error;

    /// Parses the printed name back into a key.
    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidKey {
            key: s.to_string(),
            reason: reason.to_string(),
        };
        let parts: Vec<&str> = s.split('.').collect();
        let kind = OpKind::ALL
            .iter()
            .copied()
            .find(|k| Some(&k.name()) == parts.first())
            .ok_or_else(|| invalid("unknown op"))?;
        let field = |i: usize, prefix: &str| -> Result<usize> {
            parts
                .get(i)
                .and_then(|p| p.strip_prefix(prefix))
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| invalid(&format!("field {i} should be {prefix}<number>")))
        };
        let dtype: DType = parts
            .get(1)
            .ok_or_else(|| invalid("missing dtype"))?
            .parse()?;
        let index_dtype: DType = parts
            .get(2)
            .ok_or_else(|| invalid("missing index dtype"))?
            .parse()?;
        let rank = field(3, "r")?;
        let (key, used) = match kind {
            OpKind::Gather => {
                let q = field(4, "q")?;
                let axis = field(5, "a")? as i64;
                (KernelKey::gather(dtype, index_dtype, rank, q, axis)?, 6)
            }
            OpKind::GatherElements => {
                let axis = field(4, "a")? as i64;
                (
                    KernelKey::gather_elements(dtype, index_dtype, rank, axis)?,
                    5,
                )
            }
            OpKind::ScatterElements => {
                let axis = field(4, "a")? as i64;
                let reduction: Reduction = parts
                    .get(5)
                    .ok_or_else(|| invalid("missing reduction"))?
                    .parse()?;
                let noinit = parts.get(6) == Some(&"noinit");
                let key = KernelKey::scatter_elements(
                    dtype,
                    index_dtype,
                    rank,
                    axis,
                    reduction,
                    !noinit,
                )?;
                (key, 6 + usize::from(noinit))
            }
        };
        if parts.len() != used || key.to_string() != s {
            return Err(invalid("not in canonical form"));
        }
        Ok(key)
    }
}

/// Normalizes an axis against a rank: `[-rank, rank)` maps to `[0, rank)`.
pub fn normalize_axis(op: OpKind, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(Error::AxisOutOfRange { op, axis, rank })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_normalization() {
        assert_eq!(normalize_axis(OpKind::Gather, -1, 3).unwrap(), 2);
        assert_eq!(normalize_axis(OpKind::Gather, -3, 3).unwrap(), 0);
        assert!(normalize_axis(OpKind::Gather, -4, 3).is_err());
        assert!(normalize_axis(OpKind::Gather, 3, 3).is_err());
        assert!(normalize_axis(OpKind::Gather, i64::MIN, 3).is_err());
    }

    #[test]
    fn names_round_trip() {
        let keys = [
            KernelKey::scatter_elements(DType::F16, DType::U8, 5, -2, Reduction::Mean, false)
                .unwrap(),
            KernelKey::scatter_elements(DType::Bool, DType::I32, 1, 0, Reduction::None, false)
                .unwrap(),
            KernelKey::gather_elements(DType::Complex128, DType::I64, 4, 3).unwrap(),
            KernelKey::gather(DType::U16, DType::I16, 3, 0, 2).unwrap(),
            KernelKey::scatter_elements(DType::String, DType::I64, 2, 1, Reduction::None, true)
                .unwrap(),
        ];
        let names = [
            "scatter_elements.f16.u8.r5.a3.mean.noinit",
            "scatter_elements.bool.i32.r1.a0.none",
            "gather_elements.c128.i64.r4.a3",
            "gather.u16.i16.r3.q0.a2",
            "scatter_elements.string.i64.r2.a1.none",
        ];
        for (key, name) in keys.iter().zip(names) {
            assert_eq!(key.to_string(), name);
            assert_eq!(name.parse::<KernelKey>().unwrap(), *key);
        }
    }

    #[test]
    fn bad_keys_are_errors() {
        for bad in [
            "",
            "scatter",
            "gather.f32.i64.r2.a0",
            "gather.f32.f32.r2.q1.a0",
            "scatter_elements.f32.i64.r2.a2.add",
            "scatter_elements.c64.i64.r2.a0.max",
            "scatter_elements.string.i64.r2.a0.add",
            "gather.f32.string.r2.q1.a0",
            "scatter_elements.f32.i64.r2.a0.sum",
            "gather_elements.f32.i64.r2.a0.extra",
            "gather_elements.f32.i64.r9.a0",
        ] {
            assert!(bad.parse::<KernelKey>().is_err(), "{bad}");
        }
    }
}
