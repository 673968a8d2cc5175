//! The thread pool large calls split over, settable from Python.

use std::sync::RwLock;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use scatterjit::Pool;

/// The pool set by `set_num_threads`; `None` is rayon's global pool.
static POOL: RwLock<Option<Pool>> = RwLock::new(None);

fn current() -> Option<Pool> {
    POOL.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Calls with less work than this (in the units of [`scatterjit::splits_from`], about an
/// element each) run on the calling thread with the GIL held: releasing and taking it
/// back costs more than their work.
const INLINE_BELOW: usize = 4096;

/// The elements of a call's largest pass, for [`compute`], where no kernel weighs it
/// ([`scatterjit::Kernel::work`]: strings, whose passes go element by element, and
/// scatters in place, whose largest pass walks the indices): the result's (or, in place,
/// none) or the indices'.
pub(crate) fn work(out: Option<&[usize]>, indices: &[usize]) -> usize {
    let numel = |shape: &[usize]| shape.iter().fold(1usize, |n, &d| n.saturating_mul(d));
    out.map_or(0, numel).max(numel(indices))
}

/// Runs `f` without the GIL, so that other Python threads run meanwhile: split over the
/// pool set by `set_num_threads` (from this thread, [`scatterjit::Pool::run`], which
/// takes chunks of short steps here too) from [`scatterjit::splits_from`] units of `work`
/// where it has more than one thread, on this thread otherwise (below [`INLINE_BELOW`],
/// with the GIL held).
///
/// Below that count the library splits nothing, and handing a step to a pool costs a
/// wake-up, 7 to 20 us on the 2-vCPU machine of BENCHMARKS.md, which only a split
/// repays; so such calls, and every call on a one-thread pool, run here inside
/// [`scatterjit::serial`]. The pool's `install` (the whole call handed over and back)
/// took 1.1-3.6x longer than `Pool::run` at 1,024 and 4,096 GNN slices on two threads,
/// 1.1-1.5x at 16,384 (BENCHMARKS.md, "Calls lent a pool").
pub(crate) fn compute<T: Send>(py: Python<'_>, work: usize, f: impl FnOnce() -> T + Send) -> T {
    if work < INLINE_BELOW {
        return scatterjit::serial(f);
    }
    let pool = current();
    let threads = pool
        .as_ref()
        .map_or_else(rayon::current_num_threads, Pool::threads);
    py.detach(move || match pool {
        _ if threads < 2 || work < scatterjit::splits_from() => scatterjit::serial(f),
        Some(pool) => pool.run(f),
        None => f(),
    })
}

/// Sets how many threads a large call splits over: ``n`` threads in a pool of
/// scatterjit's own, or with ``n = 0`` rayon's global pool (as many threads as cores,
/// or ``RAYON_NUM_THREADS``). Results are bit-identical whatever the count. A
/// ``ValueError`` past the most threads a pool starts (the message says how many).
#[pyfunction]
pub(crate) fn set_num_threads(n: usize) -> PyResult<()> {
    let pool = if n == 0 {
        None
    } else {
        Some(Pool::new(n).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
            _ => PyRuntimeError::new_err(e.to_string()),
        })?)
    };
    *POOL.write().unwrap_or_else(|e| e.into_inner()) = pool;
    Ok(())
}

/// The number of threads a large call splits over (see ``set_num_threads``).
#[pyfunction]
pub(crate) fn get_num_threads() -> usize {
    current()
        .as_ref()
        .map_or_else(rayon::current_num_threads, Pool::threads)
}
