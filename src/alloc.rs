//! The memory a call allocates, outputs and scratch: capped by the process-wide [`Limits`],
//! and obtained fallibly, so that a huge or hostile shape is an error and never an abort.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use scatterjit_ir::OpKind;

use crate::error::{Buffer, Error, Result};
use crate::tensor::Place;
use crate::threads::{self, STREAM_CHUNK};

/// Caps on what one call may allocate, checked on the calling thread before allocating.
/// They apply to every entry point: the free functions, kernels of any
/// [`crate::KernelCache`], and the command line (`--max-output-bytes`,
/// `--max-scratch-bytes`). Set the process-wide caps once with [`set_limits`] (like rayon's
/// global pool, which the calls also use), or run some calls under other caps with
/// [`with_limits`] (e.g. a session serving a model it does not trust).
///
/// The defaults (16 GiB of output, 64 GiB of scratch) lie above any single tensor of the
/// models these ops serve, and far below what a hostile shape asks for: Gather multiplies
/// the size of data's rows by the number of indices, so a few KiB of indices can ask for
/// terabytes, which the system might grant (overcommit) and then kill the process when the
/// kernel touches them. Scratch gets four times the output's cap because `mean` keeps a
/// sum and an 8-byte count per output element: three times the output for f32, twice for
/// f64 (16-bit floats and integers need up to 16 times; f32 and f64 starting from data's
/// values sum in the output and keep only the counts).
///
/// ```
/// let mut limits = scatterjit::limits();
/// assert_eq!(limits.max_output_bytes, 16 << 30);
/// limits.max_output_bytes = 1 << 40;
/// scatterjit::set_limits(limits);
/// assert_eq!(scatterjit::limits().max_output_bytes, 1 << 40);
/// # scatterjit::set_limits(scatterjit::Limits::default());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest output tensor a call allocates, in bytes ([`crate::Kernel::run`] and the
    /// free functions; `run_into` and in-place calls write caller memory and allocate none).
    pub max_output_bytes: u64,
    /// The most scratch memory a call allocates, in bytes (`mean`'s per-element sums and
    /// counts, the partial outputs of a reduction split along its axis, the copy of a
    /// destination small beside its indices, the narrow copy of wide indices).
    pub max_scratch_bytes: u64,
}

const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 << 30;
const DEFAULT_MAX_SCRATCH_BYTES: u64 = 4 * DEFAULT_MAX_OUTPUT_BYTES;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            max_scratch_bytes: DEFAULT_MAX_SCRATCH_BYTES,
        }
    }
}

static MAX_OUTPUT_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_OUTPUT_BYTES);
static MAX_SCRATCH_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_SCRATCH_BYTES);

thread_local! {
    /// The caps of the innermost [`with_limits`] running on this thread.
    static SCOPED: Cell<Option<Limits>> = const { Cell::new(None) };
}

/// Sets the process-wide [`Limits`]; calls that start afterwards obey them (except inside
/// [`with_limits`]).
pub fn set_limits(limits: Limits) {
    MAX_OUTPUT_BYTES.store(limits.max_output_bytes, Ordering::Relaxed);
    MAX_SCRATCH_BYTES.store(limits.max_scratch_bytes, Ordering::Relaxed);
}

/// The [`Limits`] in force on this thread: those of the innermost [`with_limits`], else
/// the process-wide ones.
pub fn limits() -> Limits {
    SCOPED.with(Cell::get).unwrap_or_else(|| Limits {
        max_output_bytes: MAX_OUTPUT_BYTES.load(Ordering::Relaxed),
        max_scratch_bytes: MAX_SCRATCH_BYTES.load(Ordering::Relaxed),
    })
}

/// Runs `f` with `limits` in force for the calls it makes on this thread; other threads
/// keep theirs. The previous caps return when `f` returns or panics.
///
/// ```
/// use scatterjit::{Limits, Tensor};
/// let data = Tensor::from_slice(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
/// let indices = Tensor::from_slice(&[3], &[0i64, 1, 0])?;
/// let small = Limits { max_output_bytes: 16, ..Limits::default() };
/// let e = scatterjit::with_limits(small, || scatterjit::gather(&data, &indices, 0)).unwrap_err();
/// assert_eq!(e.to_string(), "gather: the output needs 24 bytes, over the limit of 16 bytes");
/// assert!(scatterjit::gather(&data, &indices, 0).is_ok());
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn with_limits<T>(limits: Limits, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Limits>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SCOPED.with(|s| s.replace(Some(limits))));
    f()
}

/// The cap [`Limits`] sets on an allocation of this kind.
fn limit_of(buffer: Buffer) -> u64 {
    let limits = limits();
    match buffer {
        Buffer::Output => limits.max_output_bytes,
        Buffer::Scratch => limits.max_scratch_bytes,
    }
}

/// Element types whose all-zero bit pattern is a valid value.
pub(crate) trait Zeroable: Copy {}
impl Zeroable for u8 {}
impl Zeroable for i64 {}

/// `Ok` if `bytes` (possibly more than `usize` holds) are within the cap for `buffer`.
pub(crate) fn check(op: OpKind, buffer: Buffer, bytes: u128) -> Result<()> {
    let limit = limit_of(buffer);
    if bytes > u128::from(limit) {
        return Err(Error::LimitExceeded {
            op,
            buffer,
            bytes,
            limit,
        });
    }
    Ok(())
}

/// `len` zeroed elements, after checking their size against the cap for `buffer`; an
/// allocation the system refuses is [`Error::OutOfMemory`]. On one thread, zeroed memory
/// comes from `alloc_zeroed` (`calloc`), whose fresh pages cost nothing until written,
/// where the safe fallible route (`try_reserve` and `resize`) would write every byte first.
/// Where the pool has threads and the buffer spans [`STREAM_CHUNK`]s, they zero it: an
/// allocator serves a size freed before from memory it keeps (glibc, after the first call
/// of a size), and `calloc` then clears it on the calling thread, which took most of a
/// call that writes the buffer in parallel (16-core Xeon, a 16 MiB row gather at 16
/// threads: 2.29 ms into a new output cleared by `calloc`, 0.44 zeroed by the pool, 0.25
/// into a reused output; BENCHMARKS.md).
pub(crate) fn zeroed<T: Zeroable>(op: OpKind, buffer: Buffer, len: usize) -> Result<Vec<T>> {
    let bytes = len as u128 * std::mem::size_of::<T>() as u128;
    check(op, buffer, bytes)?;
    let oom = || Error::OutOfMemory { op, buffer, bytes };
    let layout = Layout::array::<T>(len).map_err(|_| oom())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    let in_parallel = fills_in_parallel(layout.size());
    // SAFETY: `layout` has a non-zero size (checked above).
    let ptr = unsafe {
        match in_parallel {
            true => alloc::alloc(layout),
            false => alloc::alloc_zeroed(layout),
        }
    } as *mut T;
    if ptr.is_null() {
        return Err(oom());
    }
    advise_huge_pages(ptr as *mut u8, layout.size());
    if in_parallel {
        in_chunks(ptr as *mut u8, layout.size(), |to, _, n| {
            // SAFETY: `in_chunks` gives each call its own `n` bytes of the allocation at
            // `to`, which nothing else references; writing through a raw pointer creates
            // no reference to uninitialized memory.
            unsafe { std::ptr::write_bytes(to, 0, n) }
        });
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[T; len]`,
    // which is the layout a `Vec<T>` of capacity `len` uses; its `len` elements are
    // zero bytes (from `calloc` or the fill above), a valid `T` (`Zeroable`).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// A new buffer holding a copy of `from`, after checking its size against the cap for
/// `buffer`; an allocation the system refuses is [`Error::OutOfMemory`]. The copy is its
/// first write (no zeroing before it), split over the pool where it has threads and
/// `from` spans [`STREAM_CHUNK`]s: a new scatter output that starts as data's copy.
pub(crate) fn copied(op: OpKind, buffer: Buffer, from: &[u8]) -> Result<Vec<u8>> {
    let mut bytes = unwritten(op, buffer, from.len())?;
    let source = from.as_ptr() as usize;
    in_chunks(bytes.place().as_mut_ptr(), from.len(), |to, at, n| {
        // SAFETY: `in_chunks` gives each call its own `n` bytes of the new allocation at
        // `to`, at offset `at`; `from` holds `at + n` bytes or more and, being borrowed,
        // cannot overlap an allocation made here.
        unsafe { std::ptr::copy_nonoverlapping((source + at) as *const u8, to, n) }
    });
    // SAFETY: every byte was written above.
    Ok(unsafe { bytes.written() })
}

/// A new buffer that nothing has written yet: an output whose first write covers every
/// byte (a Gather's or GatherElements' output, a scatter's copy of data), so that neither
/// `calloc` nor a fill clears it first. It is held by address ([`Place`]) until written,
/// then becomes a `Vec` ([`Unwritten::written`]); dropped unwritten (after a bad index),
/// it is freed unread.
pub(crate) struct Unwritten {
    start: *mut u8,
    layout: Layout,
}

impl Unwritten {
    /// The bytes, to be written whole (by kernels or a copy) before [`Self::written`].
    pub(crate) fn place(&mut self) -> Place<'_> {
        // SAFETY: the allocation of `layout.size()` bytes at `start` is this value's alone,
        // and `Place`'s borrow of `self` keeps it from being freed or handed out twice.
        // Its users only write through it: `written` is the one way to read it.
        unsafe { Place::unwritten(self.start, self.layout.size()) }
    }

    /// The bytes, once kernels wrote every one.
    ///
    /// # Safety
    /// Every byte of [`Self::place`] has been written.
    pub(crate) unsafe fn written(self) -> Vec<u8> {
        let this = std::mem::ManuallyDrop::new(self);
        let len = this.layout.size();
        if len == 0 {
            return Vec::new();
        }
        // SAFETY: `start` was allocated by the global allocator with the layout of
        // `[u8; len]`, a `Vec<u8>`'s of capacity `len`; every byte is initialized (this
        // function's contract); `ManuallyDrop` keeps `Drop` from freeing it.
        unsafe { Vec::from_raw_parts(this.start, len, len) }
    }
}

impl Drop for Unwritten {
    fn drop(&mut self) {
        if self.layout.size() > 0 {
            // SAFETY: allocated by the global allocator with `layout` in `unwritten`, and
            // not given away (`written` does not drop).
            unsafe { alloc::dealloc(self.start, self.layout) }
        }
    }
}

/// `len` bytes that nothing has written yet, after checking their size against the cap
/// for `buffer`; an allocation the system refuses is [`Error::OutOfMemory`]. A gather's
/// output written whole by its kernels needs no zeros first: where the allocator reuses
/// memory (glibc, for sizes freed before), `calloc` cleared it on the calling thread, about
/// a quarter of a one-thread gather into 16 MiB (BENCHMARKS.md).
pub(crate) fn unwritten(op: OpKind, buffer: Buffer, len: usize) -> Result<Unwritten> {
    check(op, buffer, len as u128)?;
    let oom = || Error::OutOfMemory {
        op,
        buffer,
        bytes: len as u128,
    };
    let layout = Layout::array::<u8>(len).map_err(|_| oom())?;
    if len == 0 {
        return Ok(Unwritten {
            start: std::ptr::NonNull::dangling().as_ptr(),
            layout,
        });
    }
    // SAFETY: `layout` has a non-zero size (checked above).
    let start = unsafe { alloc::alloc(layout) };
    if start.is_null() {
        return Err(oom());
    }
    advise_huge_pages(start, len);
    if cfg!(debug_assertions) {
        // Debug builds fill it with a pattern, so that a test of a kernel that skipped an
        // element fails on it, rather than pass on the zeros a reused block may hold.
        // SAFETY: the `len` bytes at `start` were just allocated, and nothing else has them.
        unsafe { std::ptr::write_bytes(start, 0xA5, len) };
    }
    Ok(Unwritten { start, layout })
}

/// Whether [`in_chunks`] spreads `size` bytes over the pool: two chunks or more, and a
/// pool of threads.
fn fills_in_parallel(size: usize) -> bool {
    size >= 2 * STREAM_CHUNK && threads::available() > 1
}

/// `fill(address, offset, bytes)` for each [`STREAM_CHUNK`] of the `size` bytes at
/// `start`: over the pool where it has threads and there are two chunks or more, else
/// once for the whole on this thread. Each call gets a range of its own.
fn in_chunks(start: *mut u8, size: usize, fill: impl Fn(*mut u8, usize, usize) + Sync) {
    if !fills_in_parallel(size) {
        fill(start, 0, size);
        return;
    }
    // An address, which unlike the pointer may cross to the pool's threads.
    let base = start as usize;
    let chunk = |c: usize| {
        let at = c * STREAM_CHUNK;
        fill((base + at) as *mut u8, at, STREAM_CHUNK.min(size - at));
        Ok::<(), std::convert::Infallible>(())
    };
    let Ok(()) = threads::try_each(size.div_ceil(STREAM_CHUNK), false, chunk);
}

/// Scratch buffers of earlier calls (compacted indices, partial outputs, `mean`'s
/// counts), for later ones: at most [`KEPT_UP_TO`] bytes in all. A fresh buffer costs a
/// page fault per page on its first touch, and where a pass reads a page before writing
/// it (a reduction into zeroed scratch), the write then replaces the shared zero page,
/// which flushes the TLB of every thread of the process: at 16 threads those flushes took
/// about 40% of a histogram's call (its partial outputs; perf, BENCHMARKS.md).
static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// The most bytes of scratch [`KEPT`] holds between calls.
const KEPT_UP_TO: usize = 128 << 20;

/// The lock on the kept buffers (a poisoned lock still holds valid `Vec`s).
fn kept() -> MutexGuard<'static, Vec<Vec<u8>>> {
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `len` bytes of scratch with unspecified (initialized) contents: a kept buffer that
/// holds them (see [`keep`]), else a new zeroed one under the cap for scratch.
pub(crate) fn reused(op: OpKind, len: usize) -> Result<Vec<u8>> {
    check(op, Buffer::Scratch, len as u128)?;
    let taken = {
        let mut kept = kept();
        // The smallest that holds `len`, so that large buffers stay for large calls.
        let fit = (0..kept.len())
            .filter(|&at| kept[at].capacity() >= len)
            .min_by_key(|&at| kept[at].capacity());
        fit.map(|at| kept.swap_remove(at))
    };
    match taken {
        Some(mut buffer) => {
            // Within capacity: no allocation; the bytes past the old length are zeroed.
            buffer.resize(len, 0);
            Ok(buffer)
        }
        None => zeroed(op, Buffer::Scratch, len),
    }
}

/// Keeps `buffer` (a call's scratch, done with) for a later [`reused`], as long as the
/// kept buffers stay within [`KEPT_UP_TO`] bytes; else it is freed.
pub(crate) fn keep(buffer: Vec<u8>) {
    let mut kept = kept();
    let held: usize = kept.iter().map(Vec::capacity).sum();
    if buffer.capacity() > 0 && held + buffer.capacity() <= KEPT_UP_TO {
        kept.push(buffer);
    }
}

/// Allocations from this size on ask for transparent huge pages.
const HUGE_PAGES_FROM: usize = 4 << 20;

/// Asks Linux to back the 2 MiB-aligned part of a fresh allocation of `len` bytes at `ptr`
/// with transparent huge pages (`MADV_HUGEPAGE`). A large output is written whole right
/// after it is allocated, and on a virtual machine each 4 KiB page's first write costs a
/// fault of about 1.5 us: a 205 MB output took 73 ms to fault in with small pages and 18 ms
/// with huge ones (BENCHMARKS.md). Where transparent huge pages are off (`never`) this is
/// a no-op; where they are `always`, it changes nothing. Advice only: an error is ignored.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    const HUGE_PAGE: usize = 2 << 20;
    if len < HUGE_PAGES_FROM {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: `start..end` lies inside the allocation of `len` bytes at `ptr`, which
        // nothing else references yet. The advice changes only how the kernel backs those
        // pages, never their contents (zeros) or the mapping's extent.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _len: usize) {}

/// Whether the pages holding `addresses` are all mapped already (Linux's `mincore`): memory
/// a caller allocated just before a call (a large `np.empty`, fresh pages from `mmap`) is
/// not, and its first store to each page has the system fill it with zeros through the
/// caches. `true` where the system does not say, and on other systems.
#[cfg(target_os = "linux")]
pub(crate) fn mapped(addresses: impl IntoIterator<Item = *const u8>) -> bool {
    // SAFETY: `sysconf` reads a constant of the system.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        size if size > 0 => size as usize,
        _ => return true,
    };
    addresses.into_iter().all(|at| {
        let start = (at as usize) & !(page - 1);
        let mut state = 0u8;
        // SAFETY: `mincore` reads no memory of ours and writes one byte per page of the
        // one page-aligned page asked, into `state`; a page that is not mapped at all is
        // an error, not a fault.
        let status = unsafe { libc::mincore(start as *mut libc::c_void, 1, &mut state) };
        status != 0 || state & 1 == 1
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn mapped(_addresses: impl IntoIterator<Item = *const u8>) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn pages_are_mapped_once_written() {
        let len = 4 << 20;
        // SAFETY: a fresh private anonymous mapping, unmapped below; only its own pages are
        // written and asked about.
        unsafe {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let start = libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0).cast::<u8>();
            assert_ne!(start.cast::<libc::c_void>(), libc::MAP_FAILED);
            let middle = start.add(len / 2);
            assert!(!mapped([middle.cast_const()]));
            middle.write(1);
            assert!(mapped([middle.cast_const()]));
            // Another huge page, if the system backs the mapping with them.
            assert!(!mapped([middle.cast_const(), start.cast_const()]));
            libc::munmap(start.cast(), len);
        }
        assert!(mapped([]));
    }

    #[test]
    fn kept_scratch_is_reused_within_its_bound_and_the_cap() {
        let op = OpKind::ScatterElements;
        let mut buffer = reused(op, 1000).unwrap();
        assert_eq!(buffer.len(), 1000);
        buffer.fill(7);
        keep(buffer);
        // Any buffer may come back (tests run in parallel), at the length asked for.
        let buffer = reused(op, 10).unwrap();
        assert_eq!(buffer.len(), 10);
        keep(buffer);
        keep(Vec::with_capacity(KEPT_UP_TO + 1));
        assert!(kept().iter().map(Vec::capacity).sum::<usize>() <= KEPT_UP_TO);
        let small = crate::Limits {
            max_scratch_bytes: 100,
            ..crate::Limits::default()
        };
        crate::with_limits(small, || {
            let e = reused(op, 101).unwrap_err();
            assert!(matches!(e, Error::LimitExceeded { bytes: 101, .. }), "{e}");
        });
    }

    #[test]
    fn memory_zeroed_by_a_pool_is_zero() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let len = 2 * STREAM_CHUNK + 5;
        for _ in 0..3 {
            let mut v: Vec<u8> = pool
                .install(|| zeroed(OpKind::Gather, Buffer::Output, len))
                .unwrap();
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0));
            // Memory the allocator may hand back next time, not zero.
            v.fill(0xA5);
        }
    }

    #[test]
    fn copied_memory_holds_its_source_on_any_pool_and_is_checked() {
        let op = OpKind::ScatterElements;
        let from: Vec<u8> = (0..2 * STREAM_CHUNK + 7).map(|i| (i % 251) as u8).collect();
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let v = pool.install(|| copied(op, Buffer::Output, &from)).unwrap();
            assert_eq!(v, from);
            assert_eq!(copied(op, Buffer::Output, &from[..5]).unwrap(), from[..5]);
        }
        assert!(copied(op, Buffer::Output, &[]).unwrap().is_empty());
        let small = crate::Limits {
            max_output_bytes: 10,
            ..crate::Limits::default()
        };
        crate::with_limits(small, || {
            let e = copied(op, Buffer::Output, &from[..11]).unwrap_err();
            assert!(matches!(e, Error::LimitExceeded { bytes: 11, .. }), "{e}");
        });
    }

    #[test]
    fn zeroed_memory_is_zero_and_checked() {
        let v: Vec<i64> = zeroed(OpKind::Gather, Buffer::Scratch, 1000).unwrap();
        assert!(v.iter().all(|&x| x == 0));
        assert_eq!(v.capacity(), 1000);
        let v: Vec<u8> = zeroed(OpKind::Gather, Buffer::Output, 0).unwrap();
        assert!(v.is_empty());
        // Above isize::MAX bytes: no layout exists.
        let e = zeroed::<i64>(OpKind::Gather, Buffer::Scratch, usize::MAX / 4);
        assert!(
            matches!(
                e,
                Err(Error::LimitExceeded { .. } | Error::OutOfMemory { .. })
            ),
            "{e:?}"
        );
    }

    /// The `VmFlags` of the mapping of `/proc/self/smaps` that holds `addr`.
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
            let bounds = range.and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            });
            if let Some((start, end)) = bounds {
                inside = (start..end).contains(&addr);
            } else if let Some(flags) = line.strip_prefix("VmFlags:") {
                if inside {
                    return flags.to_string();
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_allocations_ask_for_huge_pages() {
        let len = 3 * HUGE_PAGES_FROM + 12_345;
        let v: Vec<u8> = zeroed(OpKind::Gather, Buffer::Output, len).unwrap();
        assert!(v.iter().all(|&x| x == 0));
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            // The first whole 2 MiB page inside the allocation carries the advice ("hg").
            let first = (v.as_ptr() as usize).next_multiple_of(2 << 20);
            let flags = vm_flags(first);
            assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
        }
    }

    #[test]
    fn scoped_limits_nest_and_restore() {
        let outer = limits();
        let tiny = Limits {
            max_output_bytes: 8,
            max_scratch_bytes: 0,
        };
        with_limits(tiny, || {
            assert_eq!(limits(), tiny);
            assert!(check(OpKind::Gather, Buffer::Output, 8).is_ok());
            assert!(check(OpKind::Gather, Buffer::Output, 9).is_err());
            assert!(check(OpKind::Gather, Buffer::Scratch, 1).is_err());
            with_limits(Limits::default(), || {
                assert_eq!(limits(), Limits::default())
            });
            assert_eq!(limits(), tiny);
            // A panic inside restores the caps too.
            let caught = std::panic::catch_unwind(|| with_limits(Limits::default(), || panic!()));
            assert!(caught.is_err());
            assert_eq!(limits(), tiny);
        });
        assert_eq!(limits(), outer);
    }

    // Miri stops at an allocation this large instead of failing it.
    #[cfg(not(miri))]
    #[test]
    fn a_refused_allocation_is_an_error() {
        let huge = Limits {
            max_output_bytes: u64::MAX,
            max_scratch_bytes: u64::MAX,
        };
        with_limits(huge, || {
            // Under isize::MAX, within the caps, beyond any address space.
            let e = zeroed::<i64>(OpKind::Gather, Buffer::Scratch, 1 << 59).unwrap_err();
            let expected = Error::OutOfMemory {
                op: OpKind::Gather,
                buffer: Buffer::Scratch,
                bytes: 1 << 62,
            };
            assert_eq!(e, expected);
        });
    }

    #[test]
    fn caps_compare_bytes_without_overflow() {
        let limit = limits().max_output_bytes;
        assert!(check(OpKind::Gather, Buffer::Output, u128::from(limit)).is_ok());
        let e = check(OpKind::Gather, Buffer::Output, u128::MAX).unwrap_err();
        assert_eq!(
            e,
            Error::LimitExceeded {
                op: OpKind::Gather,
                buffer: Buffer::Output,
                bytes: u128::MAX,
                limit
            }
        );
    }
}
