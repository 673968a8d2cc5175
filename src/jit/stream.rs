//! The streaming row copy that JIT code calls in [`Variant::Streamed`] (see
//! `codegen::lower::row`): rows copied with non-temporal stores, which write whole cache
//! lines to memory without first reading them into the caches and without pushing what
//! the caches hold out. Cranelift has no such store, so the code calls this host function
//! once per row, where it would call `memcpy`. Only code that runs in this process calls
//! it; object files never do.
//!
//! [`Variant::Streamed`]: crate::abi::Variant::Streamed

use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::StreamFrom;

/// The name JIT code imports the helper by.
pub(crate) const SYMBOL: &str = "scatterjit_stream_row";

/// The fewest bytes a call's destination takes for its row copies to stream, by default.
///
/// Measured on a Xeon (2 MiB of second-level cache per core, a last level that a virtual
/// machine shares), Gathers of random rows into a reused buffer, one thread, streamed
/// against `memcpy`: 16 MB outputs 10% slower from tables of 0.5 and 51 MB and 15% faster
/// along axis 1 of a 32 MB table; 32 MB about even but for the axis-1 case (1.8x); 64 MB
/// and more 1.3-2.2x faster (256 MB of 1 KiB rows 29 -> 14 ms). Below it a reused output
/// stays in the caches, where `memcpy`'s stores hit.
pub const STREAM_FROM: u64 = 32 << 20;

/// The fewest bytes of a row that streams, by default (rows stream only in multiples of 16
/// bytes, see [`stream_row`]). 256-byte rows measured 1.7x faster streamed (195 MB from a
/// 12.8 MB table, one thread).
pub(crate) const STREAM_ROW_FROM: u64 = 256;

static STREAM_FROM_NOW: AtomicU64 = AtomicU64::new(STREAM_FROM);

/// Sets the fewest bytes a call's destination takes for its row copies to stream (default
/// [`STREAM_FROM`]), process-wide; rows stream from [`STREAM_ROW_FROM`] bytes, or from
/// `bytes` if fewer. Results do not depend on it; tests set 0 so that small problems run
/// the streaming code.
#[doc(hidden)]
pub fn set_stream_from(bytes: u64) {
    STREAM_FROM_NOW.store(bytes, Ordering::Relaxed);
}

/// The fewest bytes of a call's destination, and of its rows, from which its row copies
/// stream (see [`set_stream_from`]); never, where this machine has no helper.
pub(crate) fn stream_from() -> StreamFrom {
    if address().is_none() {
        return StreamFrom {
            output: u64::MAX,
            row: u64::MAX,
        };
    }
    let output = STREAM_FROM_NOW.load(Ordering::Relaxed);
    StreamFrom {
        output,
        row: STREAM_ROW_FROM.min(output),
    }
}

/// The helper's address on this machine, or `None` where this crate has no non-temporal
/// store for it.
pub(crate) fn address() -> Option<*const u8> {
    if cfg!(target_arch = "x86_64") {
        Some(stream_row as *const u8)
    } else {
        None
    }
}

/// Copies `bytes` bytes from `src` to `dest`: with non-temporal 16-byte stores where
/// `dest` and `bytes` are multiples of 16 bytes, so that every store is aligned and rows
/// that follow each other fill their shared lines with streamed stores alone; with
/// `memcpy` otherwise. (Ordinary stores into the lines at a row's ends, beside streamed
/// ones, measured as slow as `memcpy` or 1.4-2.7x slower: 256 MB of 1 KiB rows, one thread.)
/// The stores are weakly ordered: the code that calls this fences before it returns (see
/// `codegen::lower`), so its caller, and any thread that later synchronizes with it, sees
/// them.
///
/// # Safety
///
/// `src` must be valid for reads of `bytes` bytes and `dest` for writes of as many, and
/// the two must not overlap; `bytes` must not be negative.
unsafe extern "C" fn stream_row(dest: *mut u8, src: *const u8, bytes: i64) {
    let bytes = bytes as usize;
    if (dest as usize | bytes) % 16 != 0 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dest, bytes) };
        return;
    }
    // SAFETY: the caller's contract, and `dest` and `bytes` are multiples of 16.
    unsafe { stream_chunks(dest, src, bytes) }
}

/// Copies `bytes` (a multiple of 16) from `src` to `dest` (16-byte aligned) with
/// non-temporal stores, a cache line's four at a time.
///
/// # Safety
///
/// As [`stream_row`]'s, with `dest` and `bytes` multiples of 16.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_chunks(dest: *mut u8, src: *const u8, bytes: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let (from, to) = (src.cast::<__m128i>(), dest.cast::<__m128i>());
    let chunks = bytes / 16;
    let mut k = 0;
    // SAFETY: every chunk `k < chunks` lies inside both rows; the loads are unaligned, the
    // stores 16-byte aligned (`dest` is); SSE2 is part of x86-64.
    unsafe {
        while k + 4 <= chunks {
            let lanes = [0, 1, 2, 3].map(|j| _mm_loadu_si128(from.add(k + j)));
            for (j, lane) in lanes.into_iter().enumerate() {
                _mm_stream_si128(to.add(k + j), lane);
            }
            k += 4;
        }
        while k < chunks {
            _mm_stream_si128(to.add(k), _mm_loadu_si128(from.add(k)));
            k += 1;
        }
    }
}

/// Never called: [`address`] gives no helper on other machines. A plain copy, so that
/// the function is defined everywhere.
///
/// # Safety
///
/// As [`stream_row`]'s.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_chunks(dest: *mut u8, src: *const u8, bytes: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dest, bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fences the streamed stores, as JIT code does before it returns.
    fn fence() {
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    #[test]
    fn rows_of_any_length_and_alignment_copy_exactly() {
        let src: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 15, 16, 63, 64, 65, 127, 128, 200, 256, 300, 777] {
            for (from, to) in [(0, 0), (1, 0), (0, 1), (5, 63), (17, 33)] {
                let mut dest = vec![0xAAu8; 1024 + 64];
                // SAFETY: both ranges lie inside their buffers and do not overlap.
                unsafe {
                    stream_row(
                        dest.as_mut_ptr().add(to),
                        src.as_ptr().add(from),
                        len as i64,
                    )
                };
                fence();
                assert_eq!(
                    &dest[to..to + len],
                    &src[from..from + len],
                    "{len} {from} {to}"
                );
                assert!(dest[..to].iter().all(|&b| b == 0xAA), "{len} {from} {to}");
                assert!(
                    dest[to + len..].iter().all(|&b| b == 0xAA),
                    "{len} {from} {to}"
                );
            }
        }
    }
}
