//! Per-thread partial outputs for a scatter whose only parallelism is along its axis (one
//! long row of updates into a small output, like a histogram).
//!
//! Each chunk of the row reduces into its own output-sized buffer that starts at the
//! reduction's identity (the first chunk into the output itself); the buffers are then
//! folded into the output in chunk order. Only integer and bool reductions qualify: their
//! combines (wrapping add and mul, max, min, or, and) are associative and commutative, so
//! the result is bit-identical to one thread. Float reductions never take this path.

use rayon::prelude::*;

use scatterjit_ir::{DType, DTypeClass, Reduction};

/// Whether `reduction` on `dtype` may be split into partial outputs.
pub(crate) fn qualifies(reduction: Reduction, dtype: DType) -> bool {
    matches!(
        reduction,
        Reduction::Add | Reduction::Mul | Reduction::Max | Reduction::Min
    ) && matches!(
        dtype.class(),
        DTypeClass::SignedInt | DTypeClass::UnsignedInt | DTypeClass::Bool
    )
}

/// An output-sized buffer of `bytes` bytes holding the reduction's identity everywhere.
pub(crate) fn identity_buffer(reduction: Reduction, dtype: DType, bytes: usize) -> Vec<u8> {
    let identity = reduction
        .identity_bytes(dtype)
        .expect("qualifying reductions have an identity");
    identity.iter().copied().cycle().take(bytes).collect()
}

/// `out = out ⊕ partial` for each partial in order, element by element.
pub(crate) fn fold(reduction: Reduction, dtype: DType, out: &mut [u8], partials: &[Vec<u8>]) {
    // Big enough blocks that waking the pool pays; a multiple of every element size.
    const BLOCK: usize = 1 << 16;
    let size = dtype.size();
    out.par_chunks_mut(BLOCK).enumerate().for_each(|(n, out)| {
        for partial in partials {
            let from = &partial[n * BLOCK..n * BLOCK + out.len()];
            fold_block(reduction, dtype, size, out, from);
        }
    });
}

fn fold_block(reduction: Reduction, dtype: DType, size: usize, out: &mut [u8], from: &[u8]) {
    macro_rules! each {
        ($t:ty, $f:expr) => {{
            let f: fn($t, $t) -> $t = $f;
            for (o, p) in out.chunks_exact_mut(size).zip(from.chunks_exact(size)) {
                let a = <$t>::from_le_bytes(o.try_into().expect("element-sized"));
                let b = <$t>::from_le_bytes(p.try_into().expect("element-sized"));
                o.copy_from_slice(&f(a, b).to_le_bytes());
            }
        }};
    }
    macro_rules! integer {
        ($t:ty) => {
            match reduction {
                Reduction::Add => each!($t, |a, b| a.wrapping_add(b)),
                Reduction::Mul => each!($t, |a, b| a.wrapping_mul(b)),
                Reduction::Max => each!($t, |a, b| a.max(b)),
                Reduction::Min => each!($t, |a, b| a.min(b)),
                _ => unreachable!("{reduction} does not qualify"),
            }
        };
    }
    match dtype {
        DType::I8 => integer!(i8),
        DType::I16 => integer!(i16),
        DType::I32 => integer!(i32),
        DType::I64 => integer!(i64),
        DType::U8 => integer!(u8),
        DType::U16 => integer!(u16),
        DType::U32 => integer!(u32),
        DType::U64 => integer!(u64),
        // Bools are 0 or 1: add and max are or, mul and min are and.
        DType::Bool => match reduction {
            Reduction::Add | Reduction::Max => each!(u8, |a, b| a | b),
            Reduction::Mul | Reduction::Min => each!(u8, |a, b| a & b),
            _ => unreachable!("{reduction} does not qualify"),
        },
        _ => unreachable!("{dtype} does not qualify"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_each_partial_in_order() {
        let mut out: Vec<u8> = [5i16, -3, i16::MAX]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let partial: Vec<u8> = [1i16, 4, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        fold(
            Reduction::Add,
            DType::I16,
            &mut out,
            &[partial.clone(), partial],
        );
        let got: Vec<i16> = out
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got, [7, 5, i16::MIN + 1]);
        assert_eq!(identity_buffer(Reduction::Min, DType::U8, 3), [255; 3]);
        assert!(!qualifies(Reduction::Add, DType::F32));
        assert!(qualifies(Reduction::Max, DType::Bool));
    }
}
