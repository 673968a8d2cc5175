//! The index check before the first write, on the host for row-major indices: one pass
//! over the index bytes that the compiler vectorizes, split over the rayon pool. Strided
//! indices go through the compiled check pass instead.

use rayon::prelude::*;
use scatterjit_ir::DType;

/// Elements per block: each block is scanned without early exit (so it vectorizes), and
/// the first block with a bad index is searched again element by element.
const BLOCK: usize = 4096;

/// Below this many indices the scan stays on the calling thread.
const PARALLEL_FROM: usize = 1 << 17;

/// The flat position of the first index in `bytes` (row-major, of `dtype`) that is not in
/// `[-s, s)` (signed types) or `[0, s)` (unsigned types).
pub(crate) fn first_bad(dtype: DType, bytes: &[u8], s: usize) -> Option<usize> {
    macro_rules! scan {
        ($t:ty, $bad:expr) => {{
            let size = std::mem::size_of::<$t>();
            let bad = $bad;
            let read = |e: &[u8]| <$t>::from_le_bytes(e.try_into().expect("one element"));
            let block_bad = |block: &[u8]| {
                block
                    .chunks_exact(size)
                    .fold(false, |any, e| any | bad(read(e)))
            };
            let first_block = if bytes.len() / size >= PARALLEL_FROM {
                bytes.par_chunks(BLOCK * size).position_first(block_bad)
            } else {
                bytes.chunks(BLOCK * size).position(block_bad)
            };
            first_block.map(|n| {
                let block = &bytes[n * BLOCK * size..];
                let at = block
                    .chunks_exact(size)
                    .position(|e| bad(read(e)))
                    .expect("the block holds a bad index");
                n * BLOCK + at
            })
        }};
    }
    // Signed: k + s for negative k, then one unsigned compare rejects the rest (as in the
    // compiled code). `s` fits i64: it is a dimension of a tensor in memory.
    let si = s as i64;
    let signed = |k: i64| (k.wrapping_add(si & (k >> 63)) as u64) >= s as u64;
    let unsigned = |k: u64| k >= s as u64;
    match dtype {
        DType::I8 => scan!(i8, |k: i8| signed(k.into())),
        DType::I16 => scan!(i16, |k: i16| signed(k.into())),
        DType::I32 => scan!(i32, |k: i32| signed(k.into())),
        DType::I64 => scan!(i64, signed),
        DType::U8 => scan!(u8, |k: u8| unsigned(k.into())),
        DType::U16 => scan!(u16, |k: u16| unsigned(k.into())),
        DType::U32 => scan!(u32, |k: u32| unsigned(k.into())),
        DType::U64 => scan!(u64, unsigned),
        _ => unreachable!("validation admits only integer index dtypes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_i64(v: &[i64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn finds_the_first_bad_index() {
        assert_eq!(first_bad(DType::I64, &bytes_i64(&[0, -3, 2, -1]), 3), None);
        assert_eq!(first_bad(DType::I64, &bytes_i64(&[0, 3, -4]), 3), Some(1));
        assert_eq!(first_bad(DType::I64, &bytes_i64(&[i64::MIN]), 3), Some(0));
        assert_eq!(first_bad(DType::U8, &[0, 2, 255, 3], 3), Some(2));
        let mut many = vec![1i64; 3 * PARALLEL_FROM];
        many[2 * PARALLEL_FROM + 5] = -9;
        many[2 * PARALLEL_FROM + 7] = 9;
        assert_eq!(
            first_bad(DType::I64, &bytes_i64(&many), 4),
            Some(2 * PARALLEL_FROM + 5)
        );
    }
}
