//! The prefetch helper that JIT code calls (see `codegen::lower::ahead`): Cranelift has no
//! prefetch instruction, so a row's lines are requested by this host function. Only code
//! that runs in this process calls it; object files never do.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::codegen::{FROM_DEST, FROM_SOURCE};

/// The name JIT code imports the helper by.
pub(crate) const SYMBOL: &str = "scatterjit_prefetch_row";

/// The name JIT code imports [`FROM_BYTES`] by.
pub(crate) const FROM_SYMBOL: &str = "scatterjit_prefetch_from";

/// The smallest extents (bytes along the indexed dim) of the tensors whose picks JIT code
/// prefetches: slot [`FROM_SOURCE`] for a tensor a pass reads picks from, [`FROM_DEST`]
/// for the destination it combines into. Smaller tensors stay close enough in the caches
/// that the helper's call costs more than the misses it saves. Read by the code at each
/// row, so that tests can lower them for kernels already compiled; [`UNSET`] until
/// [`from_address`] first hands them to a compile (or a caller sets them).
static FROM_BYTES: [AtomicI64; 2] = [AtomicI64::new(UNSET), AtomicI64::new(UNSET)];

/// [`FROM_BYTES`] before anything set it.
const UNSET: i64 = -1;

/// Sets the smallest extent (bytes) of a tensor whose picks are prefetched: `bytes` for the
/// tensors picked from, an eighth of it for destinations (defaults: [`default_from`]); a
/// scatter's picks into a smaller destination are not split across threads either (see
/// `split` in the runtime's schedule). Results do not depend on it; tests set 0 so that
/// small problems run the prefetching code and their splits.
#[doc(hidden)]
pub fn set_prefetch_from(bytes: usize) {
    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
    FROM_BYTES[FROM_SOURCE].store(bytes, Ordering::Relaxed);
    FROM_BYTES[FROM_DEST].store(bytes >> 3, Ordering::Relaxed);
}

/// The defaults of [`FROM_BYTES`] on this machine, by slot.
///
/// Picks read from a tensor: a third of the last-level cache, at least 1 MiB (8 MiB where
/// the cache's size is unknown). Gathering random rows on a machine with 32 MiB of it,
/// one thread, prefetch against none: tables of 3, 6 and 10 MB ran 15% slower, and tables
/// of 13, 20 and 64 MB 6-37% faster (BENCHMARKS.md).
///
/// A destination's picks: the size of the second-level cache, the last one private to a
/// core (an eighth of the source's where it is unknown). The shared level behind it can be
/// far: on a Xeon whose 480 MiB of it set the source's threshold at 160 MB, a scatter max
/// of 256-byte rows into outputs of 4 to 34 MB ran 1.3-1.4x faster with the prefetch of
/// its destination rows alone, and into 1 MB about even (one thread, BENCHMARKS.md).
fn default_from() -> [i64; 2] {
    const UNKNOWN: i64 = 8 << 20;
    let caches = caches();
    let last = caches.iter().max_by_key(|&&(level, _)| level);
    let source = last.map_or(UNKNOWN, |&(_, bytes)| (bytes / 3).max(1 << 20));
    let dest = caches
        .iter()
        .find(|&&(level, _)| level == 2)
        .map_or(source >> 3, |&(_, bytes)| bytes);
    let mut from = [0; 2];
    from[FROM_SOURCE] = source;
    from[FROM_DEST] = dest;
    from
}

/// The data and unified caches of CPU 0, as Linux describes them in sysfs (`level`, and
/// `size` such as `32768K`): `(level, bytes)` each, none elsewhere.
fn caches() -> Vec<(u32, i64)> {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache") else {
        return Vec::new();
    };
    let read = |path: &std::path::Path, name: &str| {
        std::fs::read_to_string(path.join(name))
            .ok()
            .map(|text| text.trim().to_string())
    };
    dir.filter_map(|entry| {
        let path = entry.ok()?.path();
        let kind = read(&path, "type")?;
        if kind != "Data" && kind != "Unified" {
            return None;
        }
        let level: u32 = read(&path, "level")?.parse().ok()?;
        let size = read(&path, "size")?;
        let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
        let scale = match unit {
            "K" => 1 << 10,
            "M" => 1 << 20,
            _ => return None,
        };
        Some((level, digits.parse::<i64>().ok()?.checked_mul(scale)?))
    })
    .collect()
}

/// Where [`FROM_BYTES`] lives, for JIT code to load (aligned 8-byte loads at `8 * slot`,
/// as atomic as the `Relaxed` stores that set them). Sets [`default_from`] first, unless a
/// caller has set values: no code can read them before it has this address.
pub(crate) fn from_address() -> *const u8 {
    static DEFAULT: std::sync::Once = std::sync::Once::new();
    DEFAULT.call_once(|| {
        for (slot, from) in FROM_BYTES.iter().zip(default_from()) {
            let _ = slot.compare_exchange(UNSET, from, Ordering::Relaxed, Ordering::Relaxed);
        }
    });
    FROM_BYTES.as_ptr().cast::<u8>()
}

/// The extent (bytes) below which a tensor's picks stay in the last-level cache, as the
/// prefetch of sources decides it ([`FROM_BYTES`], after its default is set).
pub(crate) fn cache_resident() -> i64 {
    from_address();
    FROM_BYTES[FROM_SOURCE].load(Ordering::Relaxed)
}

/// The extent (bytes) below which a destination's picks stay in one core's private
/// cache, as the prefetch of destinations decides it ([`FROM_BYTES`], after its default is
/// set).
pub(crate) fn private_cache() -> i64 {
    from_address();
    FROM_BYTES[FROM_DEST].load(Ordering::Relaxed)
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
    fn defaults_follow_the_last_level_and_the_second_level_caches() {
        let from = default_from();
        let (source, dest) = (from[FROM_SOURCE], from[FROM_DEST]);
        assert!(source >= 1 << 20, "{source}");
        let caches = caches();
        if let Some(&(_, last)) = caches.iter().max_by_key(|&&(level, _)| level) {
            assert!(last >= 1 << 10, "{last}");
            assert_eq!(source, (last / 3).max(1 << 20));
        }
        match caches.iter().find(|&&(level, _)| level == 2) {
            Some(&(_, second)) => assert_eq!(dest, second),
            None => assert_eq!(dest, source >> 3),
        }
    }

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
