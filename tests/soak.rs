//! Eviction soak: a serving process meets thousands of distinct kernel keys through one
//! small cache. Resident memory must stay flat once the cache is full, and every evicted
//! kernel's JIT code must be freed (counted by `scatterjit::live_code`, process-wide, which
//! is why this is a test binary of its own).
//!
//! `cargo test` runs 20,000 calls; `SOAK_CALLS` sets how many, so the long soak is
//! `SOAK_CALLS=1000000 cargo test --release --test soak -- --nocapture`.

use std::time::Instant;

use scatterjit::ir::interp;
use scatterjit::{
    live_code, DType, KernelCache, KernelKey, LiveCode, OpKind, Reduction, Tensor, TensorView,
};
use scatterjit_testkit::suite::SplitMix64;

/// The most JIT modules one kernel holds: passes (copy, check, update or gather) times two
/// variants of their innermost loop.
const MODULES_PER_KERNEL: usize = 8;

/// Distinct keys enough for the soak: every value dtype and integer index dtype with
/// gather elements (ranks 1 to 3, every axis), gather (ranks 1 and 2, index ranks 0 to 2)
/// and scatter `none` (ranks 1 and 2).
fn keys(n: usize) -> Vec<KernelKey> {
    let values = DType::ALL.iter().copied().filter(|&d| d != DType::String);
    let mut keys = Vec::new();
    for dtype in values {
        for index in DType::ALL.iter().copied().filter(|d| d.is_integer()) {
            for rank in 1..=3usize {
                for axis in 0..rank as i64 {
                    keys.push(KernelKey::gather_elements(dtype, index, rank, axis).unwrap());
                    if rank <= 2 {
                        for q in 0..=2 {
                            keys.push(KernelKey::gather(dtype, index, rank, q, axis).unwrap());
                        }
                        keys.push(
                            KernelKey::scatter_elements(
                                dtype,
                                index,
                                rank,
                                axis,
                                Reduction::None,
                                true,
                            )
                            .unwrap(),
                        );
                    }
                }
            }
        }
    }
    assert!(keys.len() >= n, "only {} keys", keys.len());
    keys.truncate(n);
    keys
}

/// Runs `key` once on small zero tensors (index 0 everywhere) and checks the result.
fn call(cache: &KernelCache, key: &KernelKey) {
    let dims = vec![2; key.rank()];
    let data = Tensor::zeros(key.dtype(), dims.clone()).unwrap();
    let indices = Tensor::zeros(key.index_dtype(), vec![2; key.index_rank()]).unwrap();
    let updates =
        (key.kind() == OpKind::ScatterElements).then(|| Tensor::zeros(key.dtype(), dims).unwrap());
    let kernel = cache.get(key).unwrap();
    let updates_view = updates.as_ref().map(TensorView::from);
    let got = kernel
        .run(&(&data).into(), &(&indices).into(), updates_view.as_ref())
        .unwrap();
    let want = interp::run(&key.op(), &data, &indices, updates.as_ref()).unwrap();
    assert_eq!(got.bytes(), want.bytes(), "{key}");
}

/// Resident memory in bytes (`VmRSS` of /proc/self/status).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// `calls` calls on keys drawn uniformly from `distinct`, through a cache of `capacity`
/// (so nearly every call compiles and evicts). Memory is measured once the cache is full
/// and has turned over (after a tenth of the calls) and at the end.
fn soak(calls: usize, distinct: usize, capacity: usize) {
    let keys = keys(distinct);
    let start = Instant::now();
    let before = live_code();
    let cache = KernelCache::with_capacity(capacity);
    let mut rng = SplitMix64(0x50a6);
    let warm_up = (calls / 10).max(capacity * 4);
    let mut most = LiveCode::default();
    let (mut rss_full, mut code_full) = (0, LiveCode::default());
    for i in 0..calls {
        call(&cache, &keys[rng.below(keys.len())]);
        let live = live_code();
        most.modules = most.modules.max(live.modules);
        most.code_bytes = most.code_bytes.max(live.code_bytes);
        if i + 1 == warm_up {
            (rss_full, code_full) = (resident(), live);
        }
    }
    let (rss_end, code_end) = (resident(), live_code());
    let stats = cache.stats();
    drop(cache);
    let after = live_code();
    let growth = rss_end as f64 / rss_full as f64 - 1.0;
    eprintln!(
        "soak: {calls} calls over {distinct} keys, cache {capacity}: {} compiles, {} evictions \
         in {:.1} s; resident {:.1} MiB when full, {:.1} MiB at the end ({:+.2}%); live JIT \
         code {code_full:?} when full, {code_end:?} at the end, at most {most:?}, {after:?} \
         after dropping the cache",
        stats.misses,
        stats.evictions,
        start.elapsed().as_secs_f64(),
        rss_full as f64 / (1 << 20) as f64,
        rss_end as f64 / (1 << 20) as f64,
        growth * 100.0,
    );
    assert_eq!(stats.hits + stats.misses, calls as u64);
    assert!(
        stats.evictions >= stats.misses - capacity as u64,
        "{stats:?}"
    );
    // Only the cached kernels hold code (each call drops its handle before the next).
    assert!(
        most.modules <= before.modules + capacity * MODULES_PER_KERNEL,
        "evicted kernels kept their code: {most:?}"
    );
    assert_eq!(after, before, "dropping the cache freed all its code");
    assert!(growth < 0.10, "resident memory grew {:.1}%", growth * 100.0);
}

#[test]
fn eviction_keeps_memory_flat() {
    let calls = match std::env::var("SOAK_CALLS") {
        Ok(n) => n.parse().expect("SOAK_CALLS is a count of calls"),
        Err(_) => 20_000,
    };
    soak(calls, 2_000, 64);
}
