//! Compiled kernels by key: each key compiles once, however many threads ask at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use scatterjit_ir::KernelKey;

use crate::error::Result;
use crate::kernel::Kernel;

/// One key's slot: filled once by the first thread that asks; others wait on it.
type Slot = Arc<OnceLock<Result<Arc<Kernel>>>>;

/// A thread-safe cache of compiled kernels.
///
/// ```
/// use scatterjit::{DType, KernelCache, KernelKey, Reduction};
/// let cache = KernelCache::new();
/// let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 1, Reduction::Add, true).unwrap();
/// let a = cache.get(&key).unwrap();
/// let b = cache.get(&key).unwrap();
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// let stats = cache.stats();
/// assert_eq!((stats.misses, stats.hits), (1, 1));
/// ```
#[derive(Default)]
pub struct KernelCache {
    slots: Mutex<HashMap<KernelKey, Slot>>,
    hits: AtomicU64,
    misses: AtomicU64,
    compile_nanos: AtomicU64,
}

/// Counters of a [`KernelCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered by an existing kernel (or one another thread was compiling).
    pub hits: u64,
    /// Lookups that compiled.
    pub misses: u64,
    /// Total time spent compiling.
    pub compile_time: Duration,
    /// Kernels held.
    pub kernels: usize,
}

impl KernelCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide cache used by the free functions ([`crate::run`] and friends).
    pub fn global() -> &'static KernelCache {
        static GLOBAL: OnceLock<KernelCache> = OnceLock::new();
        GLOBAL.get_or_init(KernelCache::new)
    }

    /// The kernel for `key`, compiling it on first use. Concurrent first requests for one
    /// key compile it exactly once; the others wait for that result.
    pub fn get(&self, key: &KernelKey) -> Result<Arc<Kernel>> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.entry(*key).or_default().clone()
        };
        if let Some(result) = slot.get() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return result.clone();
        }
        let mut compiled_here = false;
        let result = slot.get_or_init(|| {
            compiled_here = true;
            let kernel = Kernel::compile(*key).map(Arc::new);
            if let Ok(k) = &kernel {
                let nanos = u64::try_from(k.compile_time().as_nanos()).unwrap_or(u64::MAX);
                self.compile_nanos.fetch_add(nanos, Ordering::Relaxed);
            }
            kernel
        });
        let counter = if compiled_here {
            &self.misses
        } else {
            &self.hits
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result.clone()
    }

    /// Hit and miss counts and total compile time so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            compile_time: Duration::from_nanos(self.compile_nanos.load(Ordering::Relaxed)),
            kernels: self.slots.lock().unwrap_or_else(|e| e.into_inner()).len(),
        }
    }
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{DType, Reduction};

    #[test]
    fn concurrent_first_requests_compile_once() {
        let cache = KernelCache::new();
        let key = KernelKey::scatter_elements(DType::I32, DType::I64, 3, 1, Reduction::Max, false)
            .unwrap();
        let kernels: Vec<Arc<Kernel>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| cache.get(&key).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(kernels.iter().all(|k| Arc::ptr_eq(k, &kernels[0])));
        let stats = cache.stats();
        assert_eq!((stats.misses, stats.hits, stats.kernels), (1, 7, 1));
    }
}
