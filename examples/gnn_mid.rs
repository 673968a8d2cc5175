//! Mid-size GNN scatters on one thread and on two: the calls a framework makes per graph
//! layer, where splitting pays least. ScatterElements along axis 0 of `[E / 8, 64]`, E
//! slices of 256 bytes (64 f32 or i32) into E / 8 rows, through a materialized i64 index
//! or PyTorch Geometric's expanded one (`index.view(-1, 1).expand_as(src)`, stride 0
//! along the features), for each reduction the suite runs on such scatters. Each call is
//! `Kernel::run_into` a reused output, inside `Pool::run` of a pool of one and a pool of
//! two; the two alternate round after round, and each prints the median time per call
//! (medians, not means, so that a call interrupted by another process does not count).
//! Both pools' outputs are first checked to be bit-identical.
//!
//! ```text
//! cargo run --release -p scatterjit --example gnn_mid [rounds] [calls per round] [E ...]
//! ```
//!
//! Defaults: 5 rounds of 1,000 calls, E = 2,048, 4,096, 8,192 and 16,384.

use std::time::Instant;

use scatterjit::{DType, KernelCache, KernelKey, Pool, Reduction, TensorView, TensorViewMut};

/// Features per slice: 256-byte slices of 4-byte elements.
const FEATURES: usize = 64;

/// Slices per destination row on average, as in a graph of mean degree 8.
const DEGREE: usize = 8;

/// One cell: the dtype, the reduction and its label.
const CELLS: [(DType, Reduction, &str); 5] = [
    (DType::F32, Reduction::Add, "f32 add"),
    (DType::F32, Reduction::Mean, "f32 mean"),
    (DType::F32, Reduction::None, "f32 copy (none)"),
    (DType::F32, Reduction::Max, "f32 max"),
    (DType::I32, Reduction::Max, "i32 max"),
];

/// Little-endian bytes of 4-byte values: `f(i)` for each flat position `i`.
fn values(dtype: DType, count: usize, f: impl Fn(usize) -> u32) -> Vec<u8> {
    (0..count)
        .flat_map(|i| match dtype {
            DType::F32 => (f(i) as f32).to_le_bytes(),
            _ => (f(i) as i32).to_le_bytes(),
        })
        .collect()
}

/// The writable row-major view of a `[rows, FEATURES]` output.
fn row_major_mut(dtype: DType, rows: usize, bytes: &mut [u8]) -> TensorViewMut<'_> {
    let strides = [FEATURES as isize, 1];
    TensorViewMut::new(dtype, &[rows, FEATURES], &strides, 0, bytes).expect("it fits")
}

/// Median nanoseconds per call of `call` for each of `pools`: each round times `calls`
/// calls one by one (after one untimed) and keeps their median, the pools alternating round
/// after round; the median of the rounds' medians.
fn medians(
    pools: &[Pool],
    rounds: usize,
    calls: usize,
    call: &mut (dyn FnMut() + Send),
) -> Vec<f64> {
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let mut times = vec![Vec::new(); pools.len()];
    for _ in 0..rounds {
        for (p, pool) in pools.iter().enumerate() {
            let round = pool.run(|| {
                call();
                let each = (0..calls).map(|_| {
                    let start = Instant::now();
                    call();
                    start.elapsed().as_nanos() as f64
                });
                median(each.collect())
            });
            times[p].push(round);
        }
    }
    times.into_iter().map(median).collect()
}

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let rounds = args.next().unwrap_or(5);
    let calls = args.next().unwrap_or(1_000);
    let slices: Vec<usize> = args.collect();
    let slices = match slices.is_empty() {
        true => vec![2_048, 4_096, 8_192, 16_384],
        false => slices,
    };
    let pools = [Pool::new(1), Pool::new(2)].map(|p| p.expect("threads start"));
    println!("{rounds} rounds of {calls} calls, one and two threads alternating; us per call");
    println!();
    println!("| E (destination) | index | reduction | one thread | two threads | one / two |");
    println!("|---|---|---|---|---|---|");
    for &edges in &slices {
        let nodes = (edges / DEGREE).max(1);
        // A linear congruential generator: the same destination rows on every run.
        let mut state = 1u32;
        let rows: Vec<i64> = (0..edges)
            .map(|_| {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                ((state >> 8) as usize % nodes) as i64
            })
            .collect();
        let materialized: Vec<u8> = (0..edges * FEATURES)
            .flat_map(|i| rows[i / FEATURES].to_le_bytes())
            .collect();
        let expanded: Vec<u8> = rows.iter().flat_map(|r| r.to_le_bytes()).collect();
        for expand in [false, true] {
            let indices = match expand {
                true => TensorView::new(DType::I64, &[edges, FEATURES], &[1, 0], 0, &expanded),
                false => TensorView::contiguous(DType::I64, &[edges, FEATURES], &materialized),
            }
            .expect("the index fits its bytes");
            for (dtype, reduction, label) in CELLS {
                let data = values(dtype, nodes * FEATURES, |i| (i % 13) as u32);
                let updates = values(dtype, edges * FEATURES, |i| (i % FEATURES) as u32);
                let data = TensorView::contiguous(dtype, &[nodes, FEATURES], &data).unwrap();
                let updates = TensorView::contiguous(dtype, &[edges, FEATURES], &updates).unwrap();
                let key = KernelKey::scatter_elements(dtype, DType::I64, 2, 0, reduction, true)
                    .expect("a supported key");
                let kernel = KernelCache::global().get(&key).expect("it compiles");
                let mut out = vec![0u8; nodes * FEATURES * 4];
                // Every pool computes the same bits.
                let outputs: Vec<Vec<u8>> = pools
                    .iter()
                    .map(|pool| {
                        let mut bytes = vec![0u8; out.len()];
                        let mut view = row_major_mut(dtype, nodes, &mut bytes);
                        pool.run(|| kernel.run_into(&mut view, &data, &indices, Some(&updates)))
                            .expect("the call runs");
                        bytes
                    })
                    .collect();
                assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{label}");
                let mut view = row_major_mut(dtype, nodes, &mut out);
                let mut call = || {
                    kernel
                        .run_into(&mut view, &data, &indices, Some(&updates))
                        .expect("the call runs");
                };
                let [one, two] = medians(&pools, rounds, calls, &mut call)[..] else {
                    unreachable!("two pools")
                };
                let layout = if expand { "expanded" } else { "materialized" };
                let kib = nodes * FEATURES * 4 / 1024;
                println!(
                    "| {edges} ({kib} KiB) | {layout} | {label} | {:.1} | {:.1} | {:.2} |",
                    one / 1e3,
                    two / 1e3,
                    one / two
                );
            }
        }
    }
}
