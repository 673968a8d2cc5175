//! `scatterjit bench`: the standard suite, timed side by side in one process.
//!
//! For every workload ([`suite::WORKLOADS`]) it generates the inputs from a fixed seed,
//! checks the JIT (at 1 thread and at all threads) and the interpreted baseline against the
//! reference interpreter, then times four engines in interleaved rounds (so a noisy
//! neighbour hurts them alike), each timed call right after an untimed one of its own
//! engine, and reports medians:
//!
//! - `interp`: [`interpreted::run_into`], the dispatch-once loop of a framework without a JIT;
//! - `jit x1`, `jit xN`: [`scatterjit::Kernel::run_into`] into a reused output buffer, in a rayon
//!   pool of 1 and of N threads (data is left unchanged, as in an out-of-place op);
//! - `copy`: the bandwidth floor of the peers' tables, a copy of an output-sized buffer plus
//!   one read of indices and updates.
//!
//! GB/s counts the essential traffic: bytes of data, indices, updates and output.

mod error;
pub mod interpreted;
pub mod plot;
pub mod report;

use std::hint::black_box;
use std::time::{Duration, Instant};

use scatterjit::ir::{interp, Tensor};
use scatterjit::{Kernel, KernelCache, TensorView, TensorViewMut};
use scatterjit_testkit::suite::{self, Problem, Workload, WORKLOADS};

pub use error::{Error, Result};

/// What to run and how long.
#[derive(Clone, Debug)]
pub struct Options {
    /// Smaller sizes ([`Workload::small_div`]) and fewer rounds: seconds, not minutes.
    pub quick: bool,
    /// Run only the workloads with these names (all when empty).
    pub only: Vec<String>,
    /// Threads of the parallel JIT column (the machine's parallelism by default).
    pub threads: usize,
    /// Seed of the inputs.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            quick: false,
            only: Vec::new(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            seed: suite::SMALL_SEED,
        }
    }
}

/// The timed engines, in table order.
pub const ENGINES: [&str; 4] = ["interp", "jit x1", "jit xN", "copy"];

/// Timings of one engine on one workload.
#[derive(Clone, Debug, Default)]
pub struct Timing {
    /// Every timed run, in the order taken.
    pub samples: Vec<Duration>,
}

impl Timing {
    /// The median run.
    pub fn median(&self) -> Duration {
        let mut s = self.samples.clone();
        s.sort();
        s.get(s.len() / 2).copied().unwrap_or_default()
    }

    /// The fastest run.
    pub fn min(&self) -> Duration {
        self.samples.iter().min().copied().unwrap_or_default()
    }
}

/// The results of one workload.
#[derive(Clone, Debug)]
pub struct Row {
    /// The suite's name.
    pub workload: &'static str,
    /// The kernel's printed key.
    pub key: String,
    /// Shapes run: data, indices.
    pub shapes: (Vec<usize>, Vec<usize>),
    /// Essential traffic in bytes (data + indices + updates + output).
    pub bytes: usize,
    /// Median of fresh compiles of the kernel (what [`Kernel::compile`] compiles).
    pub compile: Duration,
    /// What the first calls (on 1 and N threads, at this size) compiled on first use: the
    /// check and copy passes and the variants specialized for the layout.
    pub first_use_compile: Duration,
    /// Per engine, in [`ENGINES`] order.
    pub timings: [Timing; 4],
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct Report {
    /// Threads of the `jit xN` column.
    pub threads: usize,
    /// Whether sizes were reduced.
    pub quick: bool,
    /// Median of a warm [`KernelCache::get`].
    pub cache_hit: Duration,
    /// One row per workload run.
    pub rows: Vec<Row>,
}

/// Progress messages while the suite runs.
pub trait Progress {
    /// Called when a step starts: workload `n` of `of`, what runs now.
    fn step(&mut self, n: usize, of: usize, workload: &str, what: &str);
}

impl<F: FnMut(usize, usize, &str, &str)> Progress for F {
    fn step(&mut self, n: usize, of: usize, workload: &str, what: &str) {
        self(n, of, workload, what)
    }
}

/// Runs the suite.
pub fn run(options: &Options, progress: &mut dyn Progress) -> Result<Report> {
    let workloads: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| options.only.is_empty() || options.only.iter().any(|n| n == w.name))
        .collect();
    if let Some(unknown) = options
        .only
        .iter()
        .find(|n| !WORKLOADS.iter().any(|w| w.name == n.as_str()))
    {
        let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        return Err(Error::Run(format!(
            "no workload named {unknown:?}; the suite has {}",
            names.join(", ")
        )));
    }
    let pool = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::Run(format!("cannot start {threads} threads: {e}")))
    };
    let threads = options.threads.max(1);
    let pools = [pool(1)?, pool(threads)?];
    let mut rows = Vec::new();
    for (n, w) in workloads.iter().enumerate() {
        let step = |what: &str, progress: &mut dyn Progress| {
            progress.step(n + 1, workloads.len(), w.name, what)
        };
        step("generating inputs", progress);
        let div = if options.quick { w.small_div } else { 1 };
        let problem = w.problem(div, options.seed);
        rows.push(run_workload(w, &problem, options, &pools, &mut |what| {
            step(what, progress)
        })?);
    }
    Ok(Report {
        threads,
        quick: options.quick,
        cache_hit: cache_hit(),
        rows,
    })
}

/// Median of a warm cache lookup, over batches of lookups.
fn cache_hit() -> Duration {
    let cache = KernelCache::new();
    let key = suite::WORKLOADS[0].key();
    if cache.get(&key).is_err() {
        return Duration::ZERO;
    }
    const BATCH: u32 = 10_000;
    let mut batches: Vec<Duration> = (0..31)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                black_box(cache.get(black_box(&key)).ok());
            }
            start.elapsed() / BATCH
        })
        .collect();
    batches.sort();
    batches[batches.len() / 2]
}

fn run_workload(
    w: &Workload,
    p: &Problem,
    options: &Options,
    pools: &[rayon::ThreadPool; 2],
    step: &mut dyn FnMut(&str),
) -> Result<Row> {
    let key = p.key();
    step("compiling");
    let mut compiles: Vec<Duration> = Vec::new();
    let mut kernel = None;
    for _ in 0..if options.quick { 5 } else { 21 } {
        let k = Kernel::compile(key)?;
        compiles.push(k.compile_time());
        kernel = Some(k);
    }
    compiles.sort();
    let kernel = kernel.expect("compiled at least once");

    step("checking against the reference interpreter");
    let expected = interp::run(&p.op, &p.data, &p.indices, p.updates.as_ref())?;
    let data = TensorView::from(&p.data);
    let indices = p.index_view()?;
    let updates = p.updates.as_ref().map(TensorView::from);
    let mut outs: Vec<Tensor> = (0..3)
        .map(|_| Tensor::zeros(expected.dtype(), expected.shape().to_vec()))
        .collect::<std::result::Result<_, _>>()?;
    interpreted::run_into(&p.op, &mut outs[0], &p.data, &p.indices, p.updates.as_ref())?;
    for (pool, out) in pools.iter().zip(&mut outs[1..]) {
        pool.install(|| {
            kernel.run_into(
                &mut TensorViewMut::from(&mut *out),
                &data,
                &indices,
                updates.as_ref(),
            )
        })?;
    }
    let first_use_compile = kernel.first_use_compile_time();
    for (engine, out) in ENGINES.iter().zip(&outs) {
        if out.bytes() != expected.bytes() {
            return Err(Error::Run(format!(
                "{}: {engine} differs from the reference interpreter",
                w.name
            )));
        }
    }

    // The copy's source is output-sized too (a gather's output can outgrow data).
    let copy_from = vec![1u8; expected.bytes().len()];
    let mut copy_out = vec![0u8; expected.bytes().len()];
    let [interp_out, jit1_out, jitn_out] = &mut outs[..] else {
        unreachable!("three outputs")
    };
    let mut timings: [Timing; 4] = Default::default();
    let (min_rounds, min_time) = if options.quick {
        (5, Duration::from_millis(200))
    } else {
        (11, Duration::from_secs(2))
    };
    let started = Instant::now();
    let mut round = 0;
    while round < min_rounds || (started.elapsed() < min_time && round < 200) {
        round += 1;
        step(&format!("round {round}"));
        // Each timed call follows an untimed one of its own engine, so that it finds the
        // caches as that engine leaves them. After a call on another thread count, a call
        // finds its scratch (compacted indices, partial outputs) in other cores' caches: the
        // histogram at 2 threads ran as slowly as at 1 (12 ms against 6-7 ms).
        let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<Duration> {
            f()?;
            let start = Instant::now();
            f()?;
            Ok(start.elapsed())
        };
        // Round 1 warms every engine up (its first calls compile) and is not recorded.
        let samples = [
            time(&mut || {
                interpreted::run_into(
                    black_box(&p.op),
                    black_box(&mut *interp_out),
                    black_box(&p.data),
                    black_box(&p.indices),
                    black_box(p.updates.as_ref()),
                )
                .map_err(Error::from)
            })?,
            time(&mut || {
                jit(
                    &pools[0],
                    &kernel,
                    &mut *jit1_out,
                    &data,
                    &indices,
                    &updates,
                )
            })?,
            time(&mut || {
                jit(
                    &pools[1],
                    &kernel,
                    &mut *jitn_out,
                    &data,
                    &indices,
                    &updates,
                )
            })?,
            time(&mut || {
                copy_baseline(
                    black_box(&mut copy_out),
                    black_box(&copy_from),
                    black_box(p),
                );
                Ok(())
            })?,
        ];
        if round > 1 {
            for (t, s) in timings.iter_mut().zip(samples) {
                t.samples.push(s);
            }
        }
    }
    Ok(Row {
        workload: w.name,
        key: key.to_string(),
        shapes: (p.data.shape().to_vec(), p.indices.shape().to_vec()),
        bytes: p.traffic_bytes(expected.bytes().len()),
        compile: compiles[compiles.len() / 2],
        first_use_compile,
        timings,
    })
}

/// One JIT call inside `pool`.
fn jit(
    pool: &rayon::ThreadPool,
    kernel: &Kernel,
    out: &mut Tensor,
    data: &TensorView<'_>,
    indices: &TensorView<'_>,
    updates: &Option<TensorView<'_>>,
) -> Result<()> {
    pool.install(|| {
        kernel.run_into(
            black_box(&mut TensorViewMut::from(out)),
            black_box(data),
            black_box(indices),
            black_box(updates.as_ref()),
        )
    })?;
    Ok(())
}

/// The bandwidth floor: copy an output-sized buffer, read indices and updates.
fn copy_baseline(out: &mut [u8], from: &[u8], p: &Problem) {
    out.copy_from_slice(from);
    let mut sum = 0u64;
    for t in std::iter::once(&p.indices).chain(p.updates.as_ref()) {
        for chunk in t.bytes().chunks_exact(8) {
            sum = sum.wrapping_add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
    }
    black_box(sum);
}
