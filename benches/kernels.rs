//! Criterion benchmarks of scatterjit, in three groups:
//!
//! - `compile/<key>`: compiling one kernel from scratch (`Kernel::compile`: the `Strided`
//!   code of the passes that write; the rest compiles on first use).
//! - `cache_hit/<key>`: `KernelCache::get` on a warm cache.
//! - `workload/<key>/<engine>`: each workload of the standard suite at a small size
//!   (`scatterjit_testkit::suite`), run by the JIT out of place (`jit_run`), by the JIT into
//!   a preallocated output (`jit_run_into`), and by the reference interpreter (`interp`). Before timing,
//!   the JIT's outputs are checked byte for byte against the interpreter's.
//!
//! Rows are named by the kernel key's printed name; the workload each key stands for and its
//! sizes are printed to stderr when the run starts.
//!
//! ```text
//! cargo bench --bench kernels                  # everything (a few minutes)
//! cargo bench --bench kernels -- --quick       # a rough pass
//! cargo bench --bench kernels -- compile       # one group (any criterion filter)
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use scatterjit::{ir::interp, Kernel, KernelCache, KernelKey, Tensor, TensorView, TensorViewMut};

use scatterjit_testkit::suite::{SMALL_SEED, WORKLOADS};

/// Keys of the `compile` and `cache_hit` groups: the suite's, each once.
fn keys() -> Vec<KernelKey> {
    let mut keys: Vec<KernelKey> = WORKLOADS.iter().map(|w| w.key()).collect();
    keys.sort();
    keys.dedup();
    keys
}

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for key in keys() {
        group.bench_function(key.to_string(), |b| {
            // Unmapping the code is not compiling: drop the kernels outside the timing.
            b.iter_with_large_drop(|| Kernel::compile(black_box(key)).expect("key compiles"));
        });
    }
    group.finish();
}

fn cache_hit(c: &mut Criterion) {
    let keys = keys();
    let cache = KernelCache::new();
    for key in &keys {
        cache.get(key).expect("key compiles");
    }
    let mut group = c.benchmark_group("cache_hit");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for key in &keys {
        group.bench_function(key.to_string(), |b| {
            b.iter(|| cache.get(black_box(key)).expect("warm cache"));
        });
    }
    group.finish();
}

fn workload(c: &mut Criterion) {
    let mut group = c.benchmark_group("workload");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for w in WORKLOADS {
        let p = w.problem(w.small_div, SMALL_SEED);
        let key = p.key();
        eprintln!(
            "workload {} = {key}: data {:?}, indices {:?} (large dims / {})",
            w.name,
            p.data.shape(),
            p.indices.shape(),
            w.small_div
        );
        let kernel = Kernel::compile(key).expect("workload kernels compile");
        let data = TensorView::from(&p.data);
        let indices = TensorView::from(&p.indices);
        let updates = p.updates.as_ref().map(TensorView::from);

        let expected = interp::run(&p.op, &p.data, &p.indices, p.updates.as_ref())
            .expect("workload inputs are valid");
        let got = kernel
            .run(&data, &indices, updates.as_ref())
            .expect("jit run");
        assert_same(w.name, "run", &got, &expected);
        let mut out =
            Tensor::zeros(expected.dtype(), expected.shape().to_vec()).expect("output shape fits");
        kernel
            .run_into(
                &mut TensorViewMut::from(&mut out),
                &data,
                &indices,
                updates.as_ref(),
            )
            .expect("jit run_into");
        assert_same(w.name, "run_into", &out, &expected);

        group.throughput(Throughput::Elements(p.elements() as u64));
        let id = key.to_string();
        group.bench_function(BenchmarkId::new(&id, "jit_run"), |b| {
            b.iter(|| {
                kernel
                    .run(
                        black_box(&data),
                        black_box(&indices),
                        black_box(updates.as_ref()),
                    )
                    .expect("jit run")
            });
        });
        let mut out = TensorViewMut::from(&mut out);
        group.bench_function(BenchmarkId::new(&id, "jit_run_into"), |b| {
            b.iter(|| {
                kernel
                    .run_into(
                        black_box(&mut out),
                        black_box(&data),
                        black_box(&indices),
                        black_box(updates.as_ref()),
                    )
                    .expect("jit run_into")
            });
        });
        group.bench_function(BenchmarkId::new(&id, "interp"), |b| {
            b.iter(|| {
                interp::run(
                    black_box(&p.op),
                    black_box(&p.data),
                    black_box(&p.indices),
                    black_box(p.updates.as_ref()),
                )
                .expect("interp run")
            });
        });
    }
    group.finish();
}

/// Panics unless `got` has `expected`'s dtype, shape and bytes; names the first element
/// that differs.
fn assert_same(workload: &str, how: &str, got: &Tensor, expected: &Tensor) {
    assert_eq!(
        (got.dtype(), got.shape()),
        (expected.dtype(), expected.shape()),
        "{workload}: jit {how} output has the wrong dtype or shape"
    );
    let size = expected.dtype().size();
    let first = got
        .bytes()
        .chunks_exact(size)
        .zip(expected.bytes().chunks_exact(size))
        .position(|(g, e)| g != e);
    if let Some(element) = first {
        let at = element * size;
        panic!(
            "{workload}: jit {how} differs from the interpreter at flat element {element}: \
             bytes {:?}, expected {:?}",
            &got.bytes()[at..at + size],
            &expected.bytes()[at..at + size]
        );
    }
}

criterion_group!(benches, compile, cache_hit, workload);
criterion_main!(benches);
