//! How many threads a call may split over: the current rayon pool's, or one inside
//! [`serial`]. Every parallel step of a call asks [`available`] first, so that a call
//! inside [`serial`] hands nothing to a pool.

use std::any::Any;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

thread_local! {
    /// Whether this thread is inside [`serial`].
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every scatterjit call it makes on this thread run on this thread alone:
/// no step is handed to a rayon pool, whatever the pool's size. Results are the same bits
/// as on any pool.
///
/// A call from a thread outside a pool reaches it by a hand-off and a wake-up each way,
/// several microseconds, which a one-thread pool never repays, nor a call too small to
/// split. A framework that runs its own threads, or one op per thread, wants this too.
/// Other threads keep their pools; the previous setting returns when `f` returns or
/// panics.
///
/// ```
/// use scatterjit::Tensor;
/// let data = Tensor::from_slice(&[3, 2], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// let indices = Tensor::from_slice(&[2], &[2i64, 0])?;
/// let out = scatterjit::serial(|| scatterjit::gather(&data, &indices, 0))?;
/// assert_eq!(out.to_vec::<f32>()?, [5.0, 6.0, 1.0, 2.0]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn serial<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Bytes per task of a parallel copy or fill of memory; shorter ones than two stay on the
/// calling thread.
pub(crate) const STREAM_CHUNK: usize = 1 << 20;

/// The threads a call on this thread may split over: 1 inside [`serial`], else the
/// current rayon pool's.
pub(crate) fn available() -> usize {
    match SERIAL.with(Cell::get) {
        true => 1,
        false => rayon::current_num_threads(),
    }
}

/// `f(c)` for every `c` in `0..count`, split over the pool where [`available`] says more
/// than one thread, else in order on this thread: the error of the lowest `c` that fails.
/// Chunks after a failing one may run or not. A panic in any chunk reaches the caller
/// once no chunk runs any more.
///
/// With `caller_helps`, from a thread outside every pool, this thread takes chunks too,
/// beside helpers handed to the global pool ([`Chunks`]), rather than sleeping until the
/// pool's threads have woken, run every chunk and woken it again: a pool that wakes late
/// costs at most the chunks its threads took, and a helper that starts late leaves its
/// chunks to this thread.
pub(crate) fn try_each<E: Send + 'static>(
    count: usize,
    caller_helps: bool,
    f: impl Fn(usize) -> Result<(), E> + Sync + Send,
) -> Result<(), E> {
    use rayon::prelude::*;
    if available() < 2 || count < 2 {
        return (0..count).try_for_each(f);
    }
    match rayon::current_thread_index() {
        // Chunks counts them in 32 bits.
        None if caller_helps && u32::try_from(count).is_ok() => Chunks::run(count, &f),
        _ => (0..count)
            .into_par_iter()
            .map(f)
            .find_first(Result::is_err)
            .unwrap_or(Ok(())),
    }
}

/// A chunk's closure, borrowed for `'a` (`'static` once [`Chunks::run`] erases it).
type ChunkFn<'a, E> = dyn Fn(usize) -> Result<(), E> + Sync + 'a;

/// The chunks of one [`try_each`] from a thread outside every pool, shared by that thread
/// and the helpers it hands to the global pool: each takes the next chunk until none is
/// left. Two-vCPU Xeon, 2026-11-29, eight chunks of spinning from the main thread, two
/// threads, medians of 50 calls: rayon's own hand-off 7-29 us with no work and 51-159
/// for 40 us of it (one thread 41), chunks taken by the caller too 0.6-1.3 and 23-42.
struct Chunks<E> {
    /// The chunks left, `front..back` (`front` in the low 32 bits): the caller takes from
    /// the front, helpers from the back, so that each runs a contiguous run of chunks,
    /// as rayon's halving gives each thread.
    left: AtomicU64,
    /// Chunks taken and done (run, skipped or panicked); the caller returns once all are.
    finished: AtomicUsize,
    /// The lowest chunk that failed or panicked so far: higher ones are skipped.
    failed: AtomicUsize,
    /// The lowest failing chunk and its error.
    error: Mutex<Option<(usize, E)>>,
    /// The first panic's payload.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The caller's closure, valid until every chunk is finished.
    f: *const ChunkFn<'static, E>,
}

// SAFETY: `f` points to a `Sync` closure, called only from chunks taken before the caller
// sees every chunk finished (see `Chunks::run`); every other field is `Send + Sync` for an
// `E: Send`.
unsafe impl<E: Send> Send for Chunks<E> {}
// SAFETY: as for `Send`: shared access only calls `f` (which is `Sync`) and locks or
// updates atomics.
unsafe impl<E: Send> Sync for Chunks<E> {}

impl<E: Send + 'static> Chunks<E> {
    /// Runs `f` on every chunk from this thread and `threads - 1` helpers of the global
    /// pool, and returns once every chunk is done.
    fn run(count: usize, f: &ChunkFn<'_, E>) -> Result<(), E> {
        let f: *const ChunkFn<'_, E> = f;
        // SAFETY: only the lifetime changes. The pointer is dereferenced only for a chunk
        // taken below `count`, and this function returns only after every such chunk has
        // finished (`finished == count`), while `f` is still borrowed; a helper that
        // starts later takes no chunk and never reads it.
        let f =
            unsafe { std::mem::transmute::<*const ChunkFn<'_, E>, *const ChunkFn<'static, E>>(f) };
        let chunks = Arc::new(Chunks {
            left: AtomicU64::new((count as u64) << 32),
            finished: AtomicUsize::new(0),
            failed: AtomicUsize::new(usize::MAX),
            error: Mutex::new(None),
            panic: Mutex::new(None),
            f,
        });
        for _ in 1..rayon::current_num_threads().min(count) {
            let helper = Arc::clone(&chunks);
            rayon::spawn(move || helper.take_all(true));
        }
        chunks.take_all(false);
        // What is left runs on helpers now: at most one chunk each.
        let mut spins = 0u32;
        while chunks.finished.load(Ordering::Acquire) < count {
            match spins < 1 << 10 {
                true => std::hint::spin_loop(),
                false => std::thread::yield_now(),
            }
            spins += 1;
        }
        let panic = lock(&chunks.panic).take();
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
        let error = lock(&chunks.error).take();
        error.map_or(Ok(()), |(_, e)| Err(e))
    }

    /// The next chunk left, from the back or the front, or `None`.
    fn take(&self, from_back: bool) -> Option<usize> {
        let mut left = self.left.load(Ordering::Relaxed);
        loop {
            let (front, back) = (left & u64::from(u32::MAX), left >> 32);
            if front >= back {
                return None;
            }
            let (rest, c) = match from_back {
                true => (left - (1 << 32), back - 1),
                false => (left + 1, front),
            };
            match self
                .left
                .compare_exchange_weak(left, rest, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(c as usize),
                Err(now) => left = now,
            }
        }
    }

    /// Takes chunks, from the back or the front, until none is left.
    fn take_all(&self, from_back: bool) {
        while let Some(c) = self.take(from_back) {
            if c < self.failed.load(Ordering::Relaxed) {
                // SAFETY: chunk `c` is taken and not yet finished, so the caller
                // is still inside `run`, where `f` is borrowed (see there).
                let f = unsafe { &*self.f };
                match std::panic::catch_unwind(AssertUnwindSafe(|| f(c))) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        let mut error = lock(&self.error);
                        if error.as_ref().is_none_or(|&(at, _)| c < at) {
                            *error = Some((c, e));
                        }
                        self.failed.fetch_min(c, Ordering::Relaxed);
                    }
                    Err(payload) => {
                        lock(&self.panic).get_or_insert(payload);
                        self.failed.fetch_min(c, Ordering::Relaxed);
                    }
                }
            }
            // Release: the chunk's writes before the caller's return.
            self.finished.fetch_add(1, Ordering::Release);
        }
    }
}

/// `mutex` locked, whether or not a chunk panicked while holding it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("threads start")
    }

    #[test]
    fn serial_allows_one_thread_until_it_returns_or_panics() {
        pool(3).install(|| {
            assert_eq!(available(), 3);
            assert_eq!(serial(|| serial(available) + available()), 2);
            assert_eq!(available(), 3);
            let panicked = std::panic::catch_unwind(|| serial(|| panic!("inside")));
            assert!(panicked.is_err());
            assert_eq!(available(), 3);
        });
    }

    #[test]
    fn chunks_from_outside_a_pool_run_each_once_and_report_the_lowest_failure() {
        // From this test's thread, outside every pool: the caller and the global pool's
        // threads share the chunks.
        assert!(rayon::current_thread_index().is_none());
        for count in [1, 2, 3, 7, 64, 1000] {
            let runs: Vec<AtomicUsize> = (0..count).map(|_| AtomicUsize::new(0)).collect();
            let each = |c: usize| {
                runs[c].fetch_add(1, Ordering::Relaxed);
                Ok::<(), usize>(())
            };
            assert_eq!(Chunks::run(count, &each), Ok(()));
            assert!(
                runs.iter().all(|n| n.load(Ordering::Relaxed) == 1),
                "{count}"
            );
        }
        let fails = |c: usize| match c % 7 {
            3 => Err(c),
            _ => Ok(()),
        };
        for _ in 0..100 {
            assert_eq!(Chunks::run(100, &fails), Err(3));
            assert_eq!(try_each(100, true, fails), Err(3));
        }
    }

    #[test]
    fn a_chunk_that_panics_outside_a_pool_panics_the_caller_after_the_rest() {
        let ran = AtomicUsize::new(0);
        let each = |c: usize| {
            if c == 5 {
                panic!("chunk 5");
            }
            ran.fetch_add(1, Ordering::Relaxed);
            Ok::<(), ()>(())
        };
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| Chunks::run(50, &each)));
        let payload = caught.expect_err("the panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"chunk 5"));
        // No chunk runs once the caller is back.
        let after = ran.load(Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(ran.load(Ordering::Relaxed), after);
        assert!(after >= 5);
    }

    #[test]
    fn try_each_reports_the_lowest_failing_chunk_on_any_pool() {
        let fails = |c: usize| match c % 7 {
            3 => Err(c),
            _ => Ok(()),
        };
        for threads in [1, 3] {
            pool(threads).install(|| {
                for helps in [false, true] {
                    assert_eq!(try_each(100, helps, fails), Err(3));
                    assert_eq!(serial(|| try_each(100, helps, fails)), Err(3));
                    assert_eq!(try_each(3, helps, fails), Ok(()));
                    assert_eq!(try_each(0, helps, fails), Ok(()));
                }
            });
        }
    }
}
