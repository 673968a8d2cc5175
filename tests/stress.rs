//! Many threads requesting and running overlapping keys through one cache: exactly one
//! compile per key while nothing is evicted, correct results and untouched outputs on bad
//! indices, and no crash when a small cache evicts kernels other threads are running. Then
//! 16 threads running problems large enough to split over a pool, some from inside rayon
//! pools of their own and from inside parallel iterators (nested pools), with no deadlock.

use scatterjit::ir::{self, interp};
use scatterjit::{Error, KernelCache, Tensor, TensorView, TensorViewMut};
use scatterjit_testkit::suite::{Problem, SplitMix64, WORKLOADS};

/// Threads hammering the cache at once (more than the cores, so they interleave).
pub const THREADS: usize = 8;
/// Lookups and runs per thread.
pub const ITERATIONS: usize = 150;

/// A suite workload at a tiny size, its expected output, and a copy whose first index is
/// out of range.
struct Case {
    problem: Problem,
    want: Tensor,
    bad_indices: Tensor,
}

fn cases() -> Vec<Case> {
    WORKLOADS
        .iter()
        .map(|w| {
            let problem = w.problem(w.small_div * 64, 11);
            let want = interp::run(
                &problem.op,
                &problem.data,
                &problem.indices,
                problem.updates.as_ref(),
            )
            .unwrap();
            let mut bad_indices = problem.indices.clone();
            let axis_len = problem.data.shape()[w.axis] as i64;
            set_first_index(&mut bad_indices, axis_len);
            Case {
                problem,
                want,
                bad_indices,
            }
        })
        .collect()
}

/// Cases whose domains are large enough to be split over a pool: `small_div / 4` (a
/// quarter of the suite's test size divisor), 256k to 1M elements each.
fn large_cases() -> Vec<Case> {
    WORKLOADS
        .iter()
        .map(|w| {
            let problem = w.problem((w.small_div / 4).max(1), 13);
            let want = interp::run(
                &problem.op,
                &problem.data,
                &problem.indices,
                problem.updates.as_ref(),
            )
            .unwrap();
            let mut bad_indices = problem.indices.clone();
            set_first_index(&mut bad_indices, problem.data.shape()[w.axis] as i64);
            Case {
                problem,
                want,
                bad_indices,
            }
        })
        .collect()
}

/// Writes `value` into the first element of an i32 or i64 index tensor.
fn set_first_index(indices: &mut Tensor, value: i64) {
    let size = indices.dtype().size();
    let bytes = indices.bytes_mut();
    bytes[..size].copy_from_slice(&value.to_le_bytes()[..size]);
}

/// One lookup and one run of a random case; panics on any wrong result.
fn run_one(cache: &KernelCache, cases: &[Case], rng: &mut SplitMix64) {
    let case = &cases[rng.below(cases.len())];
    let p = &case.problem;
    let kernel = cache.get(&p.key()).unwrap();
    let data = TensorView::from(&p.data);
    let updates = p.updates.as_ref().map(TensorView::from);
    let mut out = Tensor::zeros(case.want.dtype(), case.want.shape().to_vec()).unwrap();
    let bad = rng.below(4) == 0;
    let indices = TensorView::from(if bad { &case.bad_indices } else { &p.indices });
    let result = kernel.run_into(
        &mut TensorViewMut::from(&mut out),
        &data,
        &indices,
        updates.as_ref(),
    );
    if bad {
        assert!(
            matches!(
                result,
                Err(Error::Invalid(ir::Error::IndexOutOfBounds { ref position, .. }))
                    if position.iter().all(|&i| i == 0)
            ),
            "{}: {result:?}",
            kernel.key()
        );
        assert!(out.bytes().iter().all(|&b| b == 0), "a failed call wrote");
    } else {
        result.unwrap();
        assert_eq!(out.bytes(), case.want.bytes(), "{}", kernel.key());
    }
}

fn hammer(cache: &KernelCache, cases: &[Case]) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let mut rng = SplitMix64(t as u64 + 1);
                for _ in 0..ITERATIONS {
                    run_one(cache, cases, &mut rng);
                }
            });
        }
    });
}

#[test]
fn overlapping_keys_compile_once_each() {
    let cases = cases();
    let cache = KernelCache::new();
    hammer(&cache, &cases);
    let mut keys: Vec<_> = cases.iter().map(|c| c.problem.key()).collect();
    keys.sort();
    keys.dedup();
    let stats = cache.stats();
    assert_eq!(stats.misses, keys.len() as u64, "{stats:?}");
    assert_eq!(stats.hits + stats.misses, (THREADS * ITERATIONS) as u64);
    assert_eq!((stats.kernels, stats.evictions), (keys.len(), 0));
}

#[test]
fn eviction_under_load_is_safe() {
    let cases = cases();
    let cache = KernelCache::with_capacity(2);
    hammer(&cache, &cases);
    let stats = cache.stats();
    assert!(stats.kernels <= 2, "{stats:?}");
    assert!(stats.evictions > 0, "{stats:?}");
    assert_eq!(stats.hits + stats.misses, (THREADS * ITERATIONS) as u64);
}

/// Threads of the nested-pool stress test (the target machine has 16 cores).
pub const LARGE_THREADS: usize = 16;
/// Runs per thread of the nested-pool stress test.
pub const LARGE_ITERATIONS: usize = 6;

/// 16 threads share one cache and run large problems, which split over a pool, a quarter
/// with a bad first index. Thread `t` runs them: from the global pool's callers (t % 4 ==
/// 0); inside a 2-thread pool of its own (1); inside a parallel iterator of a 3-thread pool
/// of its own (2); inside a parallel iterator of the global pool (3). Every result is
/// checked, each key compiles once, and a deadlock fails the test after ten minutes.
#[test]
fn sixteen_threads_with_nested_pools() {
    use rayon::prelude::*;
    use std::sync::mpsc;
    use std::time::Duration;

    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let cases = large_cases();
        let cache = KernelCache::new();
        std::thread::scope(|s| {
            for t in 0..LARGE_THREADS {
                let (cache, cases) = (&cache, &cases);
                s.spawn(move || {
                    let seed = 100 + t as u64;
                    let one = |i: usize| {
                        run_one(cache, cases, &mut SplitMix64(seed * 1000 + i as u64));
                    };
                    let pool = |n| {
                        rayon::ThreadPoolBuilder::new()
                            .num_threads(n)
                            .build()
                            .unwrap()
                    };
                    match t % 4 {
                        0 => (0..LARGE_ITERATIONS).for_each(one),
                        1 => pool(2).install(|| (0..LARGE_ITERATIONS).for_each(one)),
                        2 => {
                            pool(3).install(|| (0..LARGE_ITERATIONS).into_par_iter().for_each(one))
                        }
                        _ => (0..LARGE_ITERATIONS).into_par_iter().for_each(one),
                    }
                });
            }
        });
        let mut keys: Vec<_> = cases.iter().map(|c| c.problem.key()).collect();
        keys.sort();
        keys.dedup();
        let _ = done.send((cache.stats(), keys.len()));
    });
    let (stats, keys) = match finished.recv_timeout(Duration::from_secs(600)) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // A panic in a thread: report it.
            std::panic::resume_unwind(worker.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("no progress in 10 minutes: a deadlock"),
    };
    worker.join().unwrap();
    assert_eq!(stats.misses, keys as u64, "one compile per key: {stats:?}");
    assert_eq!(
        stats.hits + stats.misses,
        (LARGE_THREADS * LARGE_ITERATIONS) as u64
    );
    assert_eq!(stats.evictions, 0);
}
