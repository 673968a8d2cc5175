//! Many threads requesting and running overlapping keys through one cache: exactly one
//! compile per key while nothing is evicted, correct results and untouched outputs on bad
//! indices, and no crash when a small cache evicts kernels other threads are running.

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
