//! The thread pool large calls split over, settable from Python.

use std::sync::{Arc, RwLock};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use rayon::ThreadPool;

/// The pool set by `set_num_threads`; `None` is rayon's global pool.
static POOL: RwLock<Option<Arc<ThreadPool>>> = RwLock::new(None);

fn current() -> Option<Arc<ThreadPool>> {
    POOL.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Calls whose passes cover fewer elements than this run on the calling thread with the
/// GIL held. Handing a call to the pool's thread and back costs a wake-up each way (tiny
/// calls took 15 to 40 us that way against 1.1 to 1.7 us inline, `python -m
/// scatterjit.bench --tiny`), more than the work of a few thousand elements; and the
/// library splits no pass this small (it splits from twice its parallel grain), so the
/// pool would run it on one thread anyway.
const INLINE_BELOW: usize = 4096;

/// The elements a call's passes cover, for [`compute`]: the result's (or, in place, none)
/// plus the indices'.
pub(crate) fn work(out: Option<&[usize]>, indices: &[usize]) -> usize {
    let numel = |shape: &[usize]| shape.iter().fold(1usize, |n, &d| n.saturating_mul(d));
    out.map_or(0, numel).saturating_add(numel(indices))
}

/// Runs `f` without the GIL, on the pool set by `set_num_threads`, so that other Python
/// threads run meanwhile; a call of less than [`INLINE_BELOW`] elements of `work` runs
/// right here instead.
pub(crate) fn compute<T: Send>(py: Python<'_>, work: usize, f: impl FnOnce() -> T + Send) -> T {
    if work < INLINE_BELOW {
        return f();
    }
    let pool = current();
    py.detach(move || match pool {
        Some(pool) => pool.install(f),
        None => f(),
    })
}

/// Sets how many threads a large call splits over: ``n`` threads in a pool of
/// scatterjit's own, or with ``n = 0`` rayon's global pool (as many threads as cores,
/// or ``RAYON_NUM_THREADS``). Results are bit-identical whatever the count.
#[pyfunction]
pub(crate) fn set_num_threads(n: usize) -> PyResult<()> {
    let pool = if n == 0 {
        None
    } else {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("scatterjit-{i}"))
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start {n} threads: {e}")))?;
        Some(Arc::new(pool))
    };
    *POOL.write().unwrap_or_else(|e| e.into_inner()) = pool;
    Ok(())
}

/// The number of threads a large call splits over (see ``set_num_threads``).
#[pyfunction]
pub(crate) fn get_num_threads() -> usize {
    current().map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
}
