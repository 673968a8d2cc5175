//! How many threads a call may split over, and how its parallel steps run: the current
//! rayon pool's threads, a [`Pool`]'s inside [`Pool::run`], or one inside [`serial`].
//! Every parallel step of a call goes through [`try_each`] (or asks [`available`] first),
//! so that a call inside [`serial`] hands nothing to a pool and one inside [`Pool::run`]
//! hands work only to that pool.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

thread_local! {
    /// Whether this thread is inside [`serial`].
    static SERIAL: Cell<bool> = const { Cell::new(false) };
    /// The pool of the innermost [`Pool::run`] this thread is inside, if any.
    static LENT: RefCell<Option<Arc<rayon::ThreadPool>>> = const { RefCell::new(None) };
}

/// Threads of scatterjit's own that calls split over, with the calling thread: every
/// call made inside [`Pool::run`] splits over this pool's threads rather than the
/// current rayon pool's, and its short steps are taken by the calling thread too, as a
/// call from outside every pool takes the global pool's (see README, "Threads").
///
/// A framework that sets its own thread count wants this rather than handing each call
/// to a pool with rayon's `install`, which costs a wake-up each way (7 to 29 us on the
/// 2-vCPU machine of BENCHMARKS.md), more than the whole of a short call's work.
/// Results are the same bits on any pool, as on one thread.
///
/// ```
/// use scatterjit::{Pool, Tensor};
/// let pool = Pool::new(2)?;
/// assert_eq!(pool.threads(), 2);
/// let data = Tensor::from_slice(&[3, 2], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// let indices = Tensor::from_slice(&[2], &[2i64, 0])?;
/// let out = pool.run(|| scatterjit::gather(&data, &indices, 0))?;
/// assert_eq!(out.to_vec::<f32>()?, [5.0, 6.0, 1.0, 2.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Pool {
    threads: Arc<rayon::ThreadPool>,
}

impl Pool {
    /// The most threads [`Pool::new`] starts. Each reserves a stack, and far more threads
    /// than cores only wait on each other; a count past this is taken for a mistake (a
    /// negative count cast to unsigned, say) rather than spending seconds starting them.
    pub const MAX_THREADS: usize = 1024;

    /// A pool of `threads` threads (`0`: as many as rayon's global pool would start, the
    /// cores or `RAYON_NUM_THREADS`); calls inside [`Pool::run`] split over that many,
    /// the calling thread counting as one of them where it takes chunks. An error
    /// (`InvalidInput`) past [`Pool::MAX_THREADS`], or if the system does not start the
    /// threads.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        if threads > Pool::MAX_THREADS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a pool of {threads} threads: at most {} are started",
                    Pool::MAX_THREADS
                ),
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("scatterjit-{i}"))
            .build()
            .map_err(|e| std::io::Error::other(format!("cannot start {threads} threads: {e}")))?;
        Ok(Pool {
            threads: Arc::new(pool),
        })
    }

    /// How many threads a call inside [`Pool::run`] splits over.
    pub fn threads(&self) -> usize {
        self.threads.current_num_threads()
    }

    /// Runs `f` on this thread, with every scatterjit call it makes on this thread split
    /// over this pool (this thread taking chunks too). From a thread of a rayon pool,
    /// `f` runs on this pool's threads instead (rayon's `install`). Inside [`serial`],
    /// calls stay on one thread. The previous pool returns when `f` returns or panics.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        if rayon::current_thread_index().is_some() {
            return self.threads.install(f);
        }
        struct Restore(Option<Arc<rayon::ThreadPool>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                lend(self.0.take());
            }
        }
        let _restore = Restore(lend(Some(Arc::clone(&self.threads))));
        f()
    }

    /// Makes `pool` the one this thread's calls split over from now on (`None`: the
    /// current rayon pool again), as inside [`Pool::run`], until the next such call on
    /// this thread or its end; for the C ABI (`sj_use_pool`), where no closure marks the
    /// calls' extent. The pool's threads live while a thread uses it.
    pub(crate) fn use_on_this_thread(pool: Option<&Pool>) {
        drop(lend(pool.map(|p| Arc::clone(&p.threads))));
    }
}

/// Makes `pool` the one this thread's calls split over (see [`lent`]); the one before.
fn lend(pool: Option<Arc<rayon::ThreadPool>>) -> Option<Arc<rayon::ThreadPool>> {
    LENT.with(|l| l.replace(pool))
}

// A panic inside `run` leaves the pool as it was: rayon's threads catch their jobs' panics.
impl std::panic::UnwindSafe for Pool {}
impl std::panic::RefUnwindSafe for Pool {}

/// Runs `f` on the pool this thread's calls split over: where it is outside every rayon
/// pool but inside [`Pool::run`], on that pool's threads (rayon's `install`, a hand-off);
/// otherwise here, where rayon's parallel iterators use the current pool.
pub(crate) fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match lent() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// Hands `job` to the pool this thread's calls split over (see [`on_pool`]).
fn spawn(job: impl FnOnce() + Send + 'static) {
    match lent() {
        Some(pool) => pool.spawn(job),
        None => rayon::spawn(job),
    }
}

/// The pool of [`Pool::run`] where this thread is inside one and outside every rayon
/// pool: a rayon thread's calls split over its own pool.
fn lent() -> Option<Arc<rayon::ThreadPool>> {
    match rayon::current_thread_index() {
        Some(_) => None,
        None => LENT.with(|l| l.borrow().clone()),
    }
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

/// How many chunks a parallel step over `bytes` bytes, cut into at most `most` pieces,
/// takes: four per thread, or more of at most [`STREAM_CHUNK`] bytes, so that a thread
/// that starts late leaves the others chunks to take; at least one.
pub(crate) fn stream_chunks(bytes: usize, most: usize) -> usize {
    (available() * 4)
        .max(bytes.div_ceil(STREAM_CHUNK))
        .min(most)
        .max(1)
}

/// The threads a call on this thread may split over: 1 inside [`serial`], else the
/// current rayon pool's, or outside every rayon pool the [`Pool`] of [`Pool::run`].
pub(crate) fn available() -> usize {
    if SERIAL.with(Cell::get) {
        return 1;
    }
    let lent = match rayon::current_thread_index() {
        Some(_) => None,
        None => LENT.with(|l| l.borrow().as_ref().map(|p| p.current_num_threads())),
    };
    lent.unwrap_or_else(rayon::current_num_threads)
}

/// `f(c)` for every `c` in `0..count`, split over the pool where [`available`] says more
/// than one thread, else in order on this thread: the error of the lowest `c` that fails.
/// Chunks after a failing one may run or not. A panic in any chunk reaches the caller
/// once no chunk runs any more.
///
/// With `caller_helps`, from a thread outside every pool, this thread takes chunks too,
/// beside helpers handed to the global pool or the [`Pool`] of [`Pool::run`]
/// ([`Chunks`]), rather than sleeping until the
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
        _ => on_pool(|| {
            (0..count)
                .into_par_iter()
                .map(f)
                .find_first(Result::is_err)
                .unwrap_or(Ok(()))
        }),
    }
}

/// [`try_each`] over owned `items`: `f(c, item)` for the `c`-th, each item moved into
/// the one run of its chunk. Items that borrow disjoint parts of one buffer (slices of an
/// output) so reach the pool's threads without unsafe code: each sits behind a lock
/// taken once, by its chunk.
pub(crate) fn try_each_item<T: Send, E: Send + 'static>(
    items: Vec<T>,
    caller_helps: bool,
    f: impl Fn(usize, T) -> Result<(), E> + Sync + Send,
) -> Result<(), E> {
    if available() < 2 || items.len() < 2 {
        return items
            .into_iter()
            .enumerate()
            .try_for_each(|(c, item)| f(c, item));
    }
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
    try_each(slots.len(), caller_helps, |c| {
        let item = lock(&slots[c]).take().expect("each chunk runs once");
        f(c, item)
    })
}

/// [`try_each_item`] for steps that cannot fail.
pub(crate) fn each_item<T: Send>(
    items: Vec<T>,
    caller_helps: bool,
    f: impl Fn(usize, T) + Sync + Send,
) {
    let Ok(()) = try_each_item(items, caller_helps, |c, item| {
        f(c, item);
        Ok::<(), std::convert::Infallible>(())
    });
}

/// Bytes a step moves through memory (each byte read or written counts once) per unit of
/// work, the unit of [`crate::splits_from`] (about an element picked): a copied
/// element's 16 bytes, read and written.
pub(crate) const MOVED_PER_UNIT: i64 = 32;

/// The most work per thread, in the units of [`crate::splits_from`], of a step whose
/// chunks a caller outside every pool takes beside the pool's threads ([`try_each`])
/// rather than waiting for them: about a millisecond of one thread's work.
const CALLER_HELPS_BELOW: i64 = 1 << 21;

/// Whether a caller outside every pool takes chunks of a step of `work` units split over
/// `threads` threads. It saves the pool's wake-ups (a split of 2^16 picks along the last
/// axis, two threads, 2-vCPU Xeon: 21.7-31.7 us instead of 70.0-93.0; one thread 50.7),
/// but a helper the system starts late leaves its chunks to the caller: a late helper, now
/// and then milliseconds late, cost longer passes more than the wake-ups it saves
/// (GatherElements of [2048, 4096] f32 and the f32 shuffle of the suite, two threads:
/// medians of nine 10.65 and 5.98 ms with the caller helping, 9.06 and 4.75 without).
pub(crate) fn caller_helps(work: i64, threads: usize) -> bool {
    work / (threads.max(1) as i64) < CALLER_HELPS_BELOW
}

/// [`caller_helps`] for a host step on this thread's threads ([`available`]) that moves
/// `bytes` through memory: a scan, copy or fill of a buffer.
pub(crate) fn caller_helps_moving(bytes: usize) -> bool {
    let work = i64::try_from(bytes).unwrap_or(i64::MAX) / MOVED_PER_UNIT;
    caller_helps(work, available())
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
        for _ in 1..available().min(count) {
            let helper = Arc::clone(&chunks);
            spawn(move || helper.take_all(true));
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
    fn a_pool_lends_its_threads_until_run_returns_or_panics() {
        let lent = Pool::new(3).expect("threads start");
        assert_eq!(lent.threads(), 3);
        let outside = available();
        lent.run(|| {
            assert_eq!(available(), 3);
            assert_eq!(serial(available), 1);
            // The innermost pool lends its threads.
            let two = Pool::new(2).expect("threads start");
            assert_eq!(two.run(available), 2);
            assert_eq!(available(), 3);
        });
        assert_eq!(available(), outside);
        let panicked = std::panic::catch_unwind(|| lent.run(|| panic!("inside")));
        assert!(panicked.is_err());
        assert_eq!(available(), outside);
        // From a thread of another pool, `f` runs on the lent pool's threads.
        pool(2).install(|| assert_eq!(lent.run(available), 3));
    }

    #[test]
    fn a_pool_used_on_a_thread_serves_its_calls_until_replaced() {
        // On a thread of its own: the setting is this thread's alone.
        std::thread::spawn(|| {
            let outside = available();
            let three = Pool::new(3).expect("threads start");
            Pool::use_on_this_thread(Some(&three));
            drop(three); // its threads live while a thread uses it
            assert_eq!(available(), 3);
            assert_eq!(serial(available), 1);
            let two = Pool::new(2).expect("threads start");
            assert_eq!(two.run(available), 2);
            assert_eq!(available(), 3, "run returns the pool used before");
            assert_eq!(std::thread::spawn(available).join().unwrap(), outside);
            // Chunks run on the pool's threads and this one's.
            let here = std::thread::current().id();
            let strangers = AtomicUsize::new(0);
            let each = |_: usize| {
                let on = std::thread::current();
                let ours = on.name().is_some_and(|n| n.starts_with("scatterjit-"));
                if !ours && on.id() != here {
                    strangers.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
                Ok::<(), ()>(())
            };
            try_each(64, true, each).expect("no chunk fails");
            assert_eq!(strangers.load(Ordering::Relaxed), 0);
            Pool::use_on_this_thread(None);
            assert_eq!(available(), outside);
        })
        .join()
        .expect("the checks pass");
    }

    #[test]
    fn a_pool_past_the_most_threads_is_refused() {
        let e = Pool::new(Pool::MAX_THREADS + 1).expect_err("too many threads");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("1025 threads"), "{e}");
        assert!(Pool::new(0).expect("the default count").threads() >= 1);
    }

    #[test]
    fn chunks_inside_a_pool_run_on_its_threads_and_the_callers() {
        let lent = Pool::new(3).expect("threads start");
        let caller = std::thread::current().id();
        for helps in [false, true] {
            let strangers = AtomicUsize::new(0);
            let ran = AtomicUsize::new(0);
            let each = |_: usize| {
                let here = std::thread::current();
                let ours = here.name().is_some_and(|n| n.starts_with("scatterjit-"));
                if !ours && (here.id() != caller || !helps) {
                    strangers.fetch_add(1, Ordering::Relaxed);
                }
                ran.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(50));
                Ok::<(), ()>(())
            };
            lent.run(|| try_each(64, helps, each))
                .expect("no chunk fails");
            assert_eq!(ran.load(Ordering::Relaxed), 64);
            assert_eq!(
                strangers.load(Ordering::Relaxed),
                0,
                "caller helps: {helps}"
            );
        }
    }

    #[test]
    fn items_reach_their_chunks_once_on_any_pool() {
        let lent = Pool::new(3).expect("threads start");
        for count in [0, 1, 2, 5, 100] {
            let mut out = vec![0u32; count * 7];
            let fill = |out: &mut Vec<u32>| {
                each_item(out.chunks_mut(7).collect(), true, |c, chunk| {
                    chunk.iter_mut().for_each(|x| *x += c as u32 + 1)
                })
            };
            fill(&mut out);
            lent.run(|| fill(&mut out));
            pool(3).install(|| fill(&mut out));
            let want: Vec<u32> = (0..count * 7).map(|i| 3 * (i / 7) as u32 + 3).collect();
            assert_eq!(out, want);
            let items: Vec<usize> = (0..count).collect();
            let odd = |_: usize, item: usize| match item % 2 {
                1 => Err(item),
                _ => Ok(()),
            };
            let first = (count > 1).then_some(1).ok_or(());
            assert_eq!(try_each_item(items.clone(), true, odd).err(), first.ok());
            assert_eq!(
                lent.run(|| try_each_item(items, false, odd)).err(),
                first.ok()
            );
        }
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
