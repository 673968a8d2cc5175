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

/// Runs `f` without the GIL, on the pool set by `set_num_threads`, so that other Python
/// threads run meanwhile.
pub(crate) fn compute<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
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
