//! How many threads a call may split over: the current rayon pool's, or one inside
//! [`serial`]. Every parallel step of a call asks [`available`] first, so that a call
//! inside [`serial`] hands nothing to a pool.

use std::cell::Cell;

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
/// Chunks after a failing one may run or not.
pub(crate) fn try_each<E: Send>(
    count: usize,
    f: impl Fn(usize) -> Result<(), E> + Sync + Send,
) -> Result<(), E> {
    use rayon::prelude::*;
    match available() > 1 {
        true => (0..count)
            .into_par_iter()
            .map(f)
            .find_first(Result::is_err)
            .unwrap_or(Ok(())),
        false => (0..count).try_for_each(f),
    }
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
    fn try_each_reports_the_lowest_failing_chunk_on_any_pool() {
        let fails = |c: usize| match c % 7 {
            3 => Err(c),
            _ => Ok(()),
        };
        for threads in [1, 3] {
            pool(threads).install(|| {
                assert_eq!(try_each(100, fails), Err(3));
                assert_eq!(serial(|| try_each(100, fails)), Err(3));
                assert_eq!(try_each(3, fails), Ok(()));
                assert_eq!(try_each(0, fails), Ok(()));
            });
        }
    }
}
