//! The prefetch helper that JIT code calls (see `codegen::lower::ahead`): Cranelift has no
//! prefetch instruction, so a row's lines are requested by this host function. Only code
//! that runs in this process calls it; object files never do.

use std::sync::atomic::{AtomicI64, Ordering};

/// The name JIT code imports the helper by.
pub(crate) const SYMBOL: &str = "scatterjit_prefetch_row";

/// The name JIT code imports [`FROM_BYTES`] by.
pub(crate) const FROM_SYMBOL: &str = "scatterjit_prefetch_from";

/// The smallest tensor (its extent along the indexed dim, in bytes) whose picks JIT code
/// prefetches: a smaller one stays in a core's second-level cache once picked, and there
/// the call costs more than the miss it saves. Read by the code at each row, so that tests
/// can lower it for kernels already compiled.
static FROM_BYTES: AtomicI64 = AtomicI64::new(1 << 20);

/// Sets the smallest extent (bytes) of a tensor whose picks are prefetched (default
/// 1 MiB). Results do not depend on it; tests set 0 so that small problems run the
/// prefetching code.
#[doc(hidden)]
pub fn set_prefetch_from(bytes: usize) {
    FROM_BYTES.store(i64::try_from(bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
}

/// Where [`FROM_BYTES`] lives, for JIT code to load (an aligned 8-byte load, as atomic as
/// the `Relaxed` store that sets it).
pub(crate) fn from_address() -> *const u8 {
    FROM_BYTES.as_ptr().cast::<u8>().cast_const()
}

/// The helper's address on this machine, or `None` where the machine has no prefetch
/// instruction that this crate emits.
pub(crate) fn address() -> Option<*const u8> {
    if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        Some(prefetch_row as *const u8)
    } else {
        None
    }
}

/// Asks the caches for the lines of `bytes` bytes at `at`, one request per cache line.
/// Reads and writes nothing the program sees, and a prefetch never faults, so any address
/// is fine (JIT code passes a row that an index not yet checked picks).
extern "C" fn prefetch_row(at: *const u8, bytes: i64) {
    let Some(reach) = usize::try_from(bytes).ok().and_then(|b| b.checked_sub(1)) else {
        return;
    };
    let line_of = |p: usize| p & !(crate::abi::CACHE_LINE as usize - 1);
    let last = line_of((at as usize).saturating_add(reach));
    let mut p = line_of(at as usize);
    loop {
        request_line(p as *const u8);
        if p >= last {
            break;
        }
        p += crate::abi::CACHE_LINE as usize;
    }
}

#[cfg(target_arch = "x86_64")]
fn request_line(at: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch is a hint: it reads nothing into the program, never faults and
    // needs only SSE, which every x86-64 has.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>()) }
}

#[cfg(target_arch = "aarch64")]
fn request_line(at: *const u8) {
    // SAFETY: `prfm` is a hint: it reads nothing into the program, never faults and
    // touches neither the stack nor the flags.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{at}]", at = in(reg) at, options(nostack, preserves_flags, readonly))
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn request_line(_: *const u8) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_address_is_fine() {
        let row = [1u8; 300];
        prefetch_row(row.as_ptr(), row.len() as i64);
        // Addresses nothing owns, and lengths that mean nothing.
        prefetch_row(std::ptr::null(), 4096);
        prefetch_row(usize::MAX as *const u8, 64);
        prefetch_row(row.as_ptr(), -1);
        assert_eq!(row[299], 1);
    }
}
