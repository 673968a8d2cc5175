//! Per-thread partial outputs for a scatter whose only parallelism is along its axis (one
//! long row of updates into a small output, like a histogram).
//!
//! Each chunk of the row reduces into its own output-sized buffer that starts at the
//! reduction's identity (the first chunk into the output itself); the buffers are then
//! folded into the output in chunk order. Only integer and bool reductions qualify: their
//! combines (wrapping add and mul, max, min, or, and) are associative and commutative, so
//! the result is bit-identical to one thread. Float reductions never take this path.

use scatterjit_ir::{DType, DTypeClass, Element, OpKind, Reduction};

use crate::alloc;
use crate::error::{Buffer, Result};
use crate::threads;

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

/// `count` output-sized buffers of `bytes` bytes each, holding the reduction's identity
/// everywhere: earlier calls' scratch where it is large enough (see [`keep`]), else new
/// buffers. They are the call's scratch: all of them together are checked against the
/// scratch cap of [`crate::Limits`] before any is taken, and each new one is allocated
/// fallibly. Partial
/// outputs only speed a call up: the kernel runs the pass unsplit instead when they are
/// refused.
pub(crate) fn identity_buffers(
    op: OpKind,
    reduction: Reduction,
    dtype: DType,
    bytes: usize,
    count: usize,
) -> Result<Vec<Vec<u8>>> {
    alloc::check(op, Buffer::Scratch, bytes as u128 * count as u128)?;
    let identity = reduction
        .identity_bytes(dtype)
        .expect("qualifying reductions have an identity");
    let mut buffers = Vec::with_capacity(count);
    for _ in 0..count {
        buffers.push(alloc::reused(op, bytes)?);
    }
    let fill = |buffer: &mut Vec<u8>| match identity.iter().all(|&b| b == 0) {
        true => buffer.fill(0),
        false => buffer
            .chunks_exact_mut(identity.len())
            .for_each(|element| element.copy_from_slice(&identity)),
    };
    let helps = threads::caller_helps_moving(bytes.saturating_mul(count));
    threads::each_item(buffers.iter_mut().collect(), helps, |_, buffer| {
        fill(buffer)
    });
    Ok(buffers)
}

/// Keeps `buffers` (a call's partial outputs, folded) for later calls' scratch.
pub(crate) fn keep(buffers: Vec<Vec<u8>>) {
    buffers.into_iter().for_each(alloc::keep);
}

/// `out = out ⊕ partial` for each partial in order, element by element.
pub(crate) fn fold(reduction: Reduction, dtype: DType, out: &mut [u8], partials: &[Vec<u8>]) {
    // Big enough blocks that waking the pool pays; a multiple of every element size.
    const BLOCK: usize = 1 << 16;
    let moved = out.len().saturating_mul(partials.len() + 2);
    let helps = threads::caller_helps_moving(moved);
    threads::each_item(out.chunks_mut(BLOCK).collect(), helps, |n, out| {
        for partial in partials {
            let from = &partial[n * BLOCK..n * BLOCK + out.len()];
            fold_block(reduction, dtype, out, from);
        }
    });
}

/// `out = out ⊕ from`, element by element.
fn fold_block(reduction: Reduction, dtype: DType, out: &mut [u8], from: &[u8]) {
    // A closure per reduction, not a function pointer, so that each loop inlines its
    // combine (an indirect call per element took a sixth of a 16-thread histogram, perf).
    fn each<T: Element>(out: &mut [u8], from: &[u8], f: impl Fn(T, T) -> T) {
        let size = std::mem::size_of::<T>();
        for (o, p) in out.chunks_exact_mut(size).zip(from.chunks_exact(size)) {
            f(T::read_le(o), T::read_le(p)).write_le(o);
        }
    }
    scatterjit_ir::match_integer!(
        dtype,
        T => match reduction {
            Reduction::Add => each(out, from, |a: T, b| a.wrapping_add(b)),
            Reduction::Mul => each(out, from, |a: T, b| a.wrapping_mul(b)),
            Reduction::Max => each(out, from, |a: T, b| a.max(b)),
            Reduction::Min => each(out, from, |a: T, b| a.min(b)),
            _ => unreachable!("{reduction} does not qualify"),
        },
        // Bools are 0 or 1: add and max are or, mul and min are and.
        DType::Bool => match reduction {
            Reduction::Add | Reduction::Max => each::<u8>(out, from, |a, b| a | b),
            Reduction::Mul | Reduction::Min => each::<u8>(out, from, |a, b| a & b),
            _ => unreachable!("{reduction} does not qualify"),
        },
        _ => unreachable!("{dtype} does not qualify"),
    )
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
        let buffers =
            identity_buffers(OpKind::ScatterElements, Reduction::Min, DType::U8, 3, 2).unwrap();
        assert_eq!(buffers, [[255; 3], [255; 3]]);
        let buffers =
            identity_buffers(OpKind::ScatterElements, Reduction::Mul, DType::I16, 4, 1).unwrap();
        assert_eq!(buffers, [[1, 0, 1, 0]]);
        assert!(!qualifies(Reduction::Add, DType::F32));
        assert!(qualifies(Reduction::Max, DType::Bool));
    }

    #[test]
    fn kept_buffers_come_back_filled_with_the_identity() {
        let op = OpKind::ScatterElements;
        // Other tests keep buffers too: whatever comes back, it holds the identity.
        let mut used = identity_buffers(op, Reduction::Min, DType::I16, 6, 3).unwrap();
        for buffer in &mut used {
            buffer.fill(0x5a);
        }
        keep(used);
        for (reduction, element) in [(Reduction::Min, [0xff, 0x7f]), (Reduction::Add, [0, 0])] {
            let buffers = identity_buffers(op, reduction, DType::I16, 6, 4).unwrap();
            assert_eq!(buffers.len(), 4);
            for buffer in &buffers {
                assert_eq!(buffer.len(), 6);
                assert!(buffer.chunks_exact(2).all(|e| e == element), "{buffer:?}");
            }
            keep(buffers);
        }
    }

    #[test]
    fn partial_outputs_are_scratch_under_its_cap() {
        let op = OpKind::ScatterElements;
        let small = crate::Limits {
            max_scratch_bytes: 1000,
            ..crate::Limits::default()
        };
        crate::with_limits(small, || {
            assert!(identity_buffers(op, Reduction::Add, DType::I32, 500, 2).is_ok());
            // Three buffers of 500 bytes together are over the cap: none is allocated.
            let e = identity_buffers(op, Reduction::Add, DType::I32, 500, 3).unwrap_err();
            assert_eq!(
                e,
                crate::Error::LimitExceeded {
                    op,
                    buffer: Buffer::Scratch,
                    bytes: 1500,
                    limit: 1000
                }
            );
        });
        // Within the caps and beyond any address space: refused, not an abort.
        #[cfg(not(miri))]
        crate::with_limits(
            crate::Limits {
                max_output_bytes: u64::MAX,
                max_scratch_bytes: u64::MAX,
            },
            || {
                let e = identity_buffers(op, Reduction::Max, DType::I64, 1 << 62, 1).unwrap_err();
                assert!(matches!(e, crate::Error::OutOfMemory { .. }), "{e}");
            },
        );
    }
}
