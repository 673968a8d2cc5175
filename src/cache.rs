//! Compiled kernels by key: each key compiles once, however many threads ask at once, and
//! the least recently used kernel makes room when the cache is full.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use scatterjit_ir::KernelKey;

use crate::error::Result;
use crate::kernel::Kernel;
use crate::once::OnceOk;

/// One key's slot: filled by the first thread whose compile succeeds; others wait on it. A
/// failed compile is returned to the threads that asked and not kept, so the key is
/// compiled again on its next use.
#[derive(Default)]
struct Slot {
    kernel: OnceOk<Arc<Kernel>>,
    /// Lookup tick of the last use; the smallest is evicted first.
    last_used: AtomicU64,
}

/// A key is a dozen bytes of enums; SipHash would be most of a cache hit's cost, and the
/// keys are not attacker-chosen hash-flooding material (they come from validated ops).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // FxHash's step: rotate, mix in, multiply by a large odd constant.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

type Slots = HashMap<KernelKey, Arc<Slot>, BuildHasherDefault<KeyHasher>>;

/// A thread-safe cache of compiled kernels, bounded by a number of kernels.
///
/// A hit takes a shared lock only. When a new key arrives at a full cache, the least
/// recently used compiled kernel is dropped from the cache; a caller still running it keeps
/// it alive through its `Arc`, so eviction never pulls code from under a running call.
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
pub struct KernelCache {
    slots: RwLock<Slots>,
    capacity: AtomicUsize,
    /// Ticks of the LRU clock; every lookup advances it.
    lookups: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    /// Shared with every kernel this cache compiled, which adds its later compiles.
    compile_nanos: Arc<AtomicU64>,
}

/// Counters of a [`KernelCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered by an existing kernel (or one another thread was compiling).
    pub hits: u64,
    /// Lookups that compiled.
    pub misses: u64,
    /// Kernels dropped to make room for another key.
    pub evictions: u64,
    /// Total wall time spent compiling its kernels, in every thread together: each
    /// kernel's [`Kernel::compile_time`](crate::Kernel::compile_time), and what its calls
    /// have compiled since ([`Kernel::first_use_compile_time`](crate::Kernel::first_use_compile_time)),
    /// after eviction too.
    pub compile_time: Duration,
    /// Kernels held.
    pub kernels: usize,
}

impl Default for KernelCache {
    fn default() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }
}

impl KernelCache {
    /// Kernels a cache holds unless told otherwise. A kernel's code takes a few pages; a
    /// thousand is a few tens of MiB at most, and a workload with more distinct keys than
    /// that should size its cache explicitly.
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// An empty cache holding at most [`Self::DEFAULT_CAPACITY`] kernels.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache holding at most `capacity` kernels (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        KernelCache {
            slots: RwLock::default(),
            capacity: AtomicUsize::new(capacity.max(1)),
            lookups: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            compile_nanos: Arc::default(),
        }
    }

    /// The process-wide cache used by the free functions ([`crate::run`] and friends).
    pub fn global() -> &'static KernelCache {
        static GLOBAL: OnceLock<KernelCache> = OnceLock::new();
        GLOBAL.get_or_init(KernelCache::new)
    }

    /// The most kernels this cache holds at once.
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Holds at most `capacity` kernels (at least one) from now on, for a process that
    /// learns its number of distinct keys late, such as [`Self::global`]'s user. Shrinking
    /// takes effect as new keys arrive: each evicts until the cache fits again.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity.max(1), Ordering::Relaxed);
    }

    /// The kernel for `key`, compiling it on first use. Concurrent first requests for one
    /// key compile it exactly once; the others wait for that result. A key evicted earlier
    /// compiles again.
    pub fn get(&self, key: &KernelKey) -> Result<Arc<Kernel>> {
        let tick = self.lookups.fetch_add(1, Ordering::Relaxed);
        let slot = {
            let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
            match slots.get(key) {
                Some(slot) => {
                    slot.last_used.store(tick, Ordering::Relaxed);
                    if let Some(kernel) = slot.kernel.get() {
                        return Ok(kernel.clone());
                    }
                    slot.clone()
                }
                None => {
                    drop(slots);
                    self.insert(key, tick)
                }
            }
        };
        let kernel = slot.kernel.get_or_try_init(|| -> Result<_> {
            self.misses.fetch_add(1, Ordering::Relaxed);
            let mut kernel = compile(key)?;
            kernel.count_compiles_into(Arc::clone(&self.compile_nanos));
            Ok(Arc::new(kernel))
        })?;
        Ok(kernel.clone())
    }

    /// The slot for a key not found under the shared lock, making room if the cache is full.
    fn insert(&self, key: &KernelKey, tick: u64) -> Arc<Slot> {
        let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get(key) {
            return slot.clone(); // another thread inserted it meanwhile
        }
        while slots.len() >= self.capacity() {
            // A slot still compiling has waiters that hold it; evicting it is safe too, but
            // a compiled one is the better victim, so prefer those.
            let victim = slots
                .iter()
                .min_by_key(|(_, s)| {
                    (
                        s.kernel.get().is_none(),
                        s.last_used.load(Ordering::Relaxed),
                    )
                })
                .map(|(k, _)| *k);
            let Some(victim) = victim else { break };
            slots.remove(&victim);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
        let slot = Arc::new(Slot {
            kernel: OnceOk::default(),
            last_used: AtomicU64::new(tick),
        });
        slots.insert(*key, slot.clone());
        slot
    }

    /// Hit, miss and eviction counts and total compile time so far.
    pub fn stats(&self) -> CacheStats {
        let misses = self.misses.load(Ordering::Relaxed);
        CacheStats {
            hits: self.lookups.load(Ordering::Relaxed).saturating_sub(misses),
            misses,
            evictions: self.evictions.load(Ordering::Relaxed),
            compile_time: Duration::from_nanos(self.compile_nanos.load(Ordering::Relaxed)),
            kernels: self.slots.read().unwrap_or_else(|e| e.into_inner()).len(),
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Makes this thread's next compile through a cache fail, as a transient failure would.
    static FAIL_NEXT_COMPILE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn compile(key: &KernelKey) -> Result<Kernel> {
    #[cfg(test)]
    if FAIL_NEXT_COMPILE.with(|f| f.replace(false)) {
        return Err(crate::Error::Codegen {
            key: key.to_string(),
            message: "injected failure".into(),
            clif: String::new(),
        });
    }
    Kernel::compile(*key)
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("capacity", &self.capacity())
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{DType, Reduction};

    fn key(dtype: DType) -> KernelKey {
        KernelKey::scatter_elements(dtype, DType::I64, 3, 1, Reduction::Max, false).unwrap()
    }

    #[test]
    fn concurrent_first_requests_compile_once() {
        let cache = KernelCache::new();
        let key = key(DType::I32);
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

    #[test]
    fn a_failed_compile_is_retried() {
        let cache = KernelCache::new();
        let key = key(DType::F64);
        FAIL_NEXT_COMPILE.with(|f| f.set(true));
        assert!(matches!(cache.get(&key), Err(crate::Error::Codegen { .. })));
        assert!(cache.get(&key).is_ok(), "the next use compiles again");
        let stats = cache.stats();
        assert_eq!((stats.misses, stats.kernels), (2, 1));
    }

    #[test]
    fn compile_time_counts_what_calls_compile_later_even_after_eviction() {
        let cache = KernelCache::with_capacity(1);
        let kernel = cache.get(&key(DType::F32)).unwrap();
        assert_eq!(cache.stats().compile_time, kernel.compile_time());
        // Preparing compiles the variant for the prepared layout now.
        let g = crate::Geometry::row_major(&[2, 3, 4]);
        kernel.prepare(&g, &g, &g, Some(&g)).unwrap();
        let later = kernel.first_use_compile_time();
        assert!(later > Duration::ZERO);
        assert_eq!(cache.stats().compile_time, kernel.compile_time() + later);
        let other = cache.get(&key(DType::I32)).unwrap();
        assert_eq!(cache.stats().evictions, 1);
        // An evicted kernel's calls still compile, and the cache counts them.
        let broadcast = crate::Geometry::new(&[2, 3, 4], &[3, 1, 0], 0);
        kernel.prepare(&g, &g, &broadcast, Some(&g)).unwrap();
        assert!(kernel.first_use_compile_time() > later);
        assert_eq!(
            cache.stats().compile_time,
            kernel.compile_time() + kernel.first_use_compile_time() + other.compile_time()
        );
    }

    #[test]
    fn full_cache_evicts_the_least_recently_used() {
        let cache = KernelCache::with_capacity(2);
        let (a, b, c) = (key(DType::I32), key(DType::F32), key(DType::U8));
        let first_a = cache.get(&a).unwrap();
        cache.get(&b).unwrap();
        cache.get(&a).unwrap(); // b is now the least recently used
        cache.get(&c).unwrap();
        let stats = cache.stats();
        assert_eq!((stats.kernels, stats.evictions, stats.misses), (2, 1, 3));
        assert!(Arc::ptr_eq(&first_a, &cache.get(&a).unwrap()), "a stayed");
        cache.get(&b).unwrap(); // compiles again, evicting c
        assert_eq!(cache.stats().misses, 4);
        assert_eq!(KernelCache::with_capacity(0).capacity(), 1);
    }

    #[test]
    fn a_new_capacity_holds_more_or_evicts_down_to_it() {
        let cache = KernelCache::with_capacity(1);
        let (a, b, c) = (key(DType::I32), key(DType::F32), key(DType::U8));
        cache.get(&a).unwrap();
        cache.set_capacity(3);
        cache.get(&b).unwrap();
        cache.get(&c).unwrap();
        assert_eq!((cache.stats().kernels, cache.stats().evictions), (3, 0));
        cache.set_capacity(1);
        assert_eq!(
            cache.stats().kernels,
            3,
            "nothing is evicted until a new key arrives"
        );
        cache.get(&key(DType::F64)).unwrap();
        assert_eq!((cache.stats().kernels, cache.stats().evictions), (1, 3));
        cache.set_capacity(0);
        assert_eq!(cache.capacity(), 1);
    }
}
