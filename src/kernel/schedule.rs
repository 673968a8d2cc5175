//! How a pass runs over the current rayon pool: whole, split into chunks along one loop
//! ([`split`]), in tiles of a loop after the axis it picks along ([`tiles`]), reduced into
//! per-thread partial outputs ([`partial_split`]), or bucket by bucket on the parallel
//! engine (`crate::engine`).

use std::sync::atomic::{AtomicI64, Ordering};

use scatterjit_ir::{
    checked_numel, Combine, DTypeClass, KernelKey, LoopNest, OpKind, Operand, PassKind, Reduction,
};

use super::bind::{bind, variant_of, Operands};
use super::call::{pointers, Call};
use super::report::{domain_position, Stop};
use super::{Demand, Kernel};
use crate::abi::{self, ParamLayout, Variant};
use crate::engine::{self, Buckets, Sorted};
use crate::jit;
use crate::partials;
use crate::tensor::{self, RawOperand, TensorView};
use crate::threads::{self, caller_helps, MOVED_PER_UNIT};

/// A chunk of a parallel pass has at least this many elements, so a pass splits from
/// twice this ([`splits_from`]): below it, waking the pool costs more than the work.
static PARALLEL_GRAIN: AtomicI64 = AtomicI64::new(1 << 15);

/// Sets the smallest chunk of a parallel pass, in elements (default 32768). Results do not
/// depend on it; tests lower it so that small problems exercise the parallel split.
#[doc(hidden)]
pub fn set_parallel_grain(elements: usize) {
    PARALLEL_GRAIN.store(elements.clamp(1, 1 << 40) as i64, Ordering::Relaxed);
}

/// The smallest chunk of a parallel pass now (see [`set_parallel_grain`]).
pub(super) fn parallel_grain() -> i64 {
    PARALLEL_GRAIN.load(Ordering::Relaxed)
}

/// The least work a pass has before it may split over the current rayon pool: twice the
/// parallel grain (65,536 by default; see [`set_parallel_grain`]), in units of about one
/// element picked (see [`Kernel::work`](crate::Kernel::work)). A call whose passes all
/// have less runs whole on the calling thread, so a caller that hands calls to a pool of
/// its own (as the Python package does) gains nothing by handing it one.
///
/// ```
/// assert_eq!(scatterjit::splits_from(), 1 << 16);
/// ```
pub fn splits_from() -> usize {
    2 * parallel_grain() as usize
}

/// The units of work of a whole row a pass combines, besides its bytes: reading, checking
/// and turning its index into an address, and starting the row.
const ROW_UNITS: i64 = 8;

/// How many times a pass that combines whole rows moves each row's bytes: a copy reads
/// the source row and writes the destination row; a reduction (`mean`'s sums included)
/// also reads the destination row. `None` for mean's start and finish, which read no
/// index. Reductions measured 1.1-1.5x a copy's time per row for add and 2-2.4x for
/// max, 1.8-2.2x for mean (f32 rows of 256 bytes to 4 KiB through an expanded index, one
/// thread, 2-vCPU Xeon, 2026-11-29; BENCHMARKS.md, "Mid-size GNN scatters on two
/// threads"): the weight errs low for max and mean, which then split later rather than
/// sooner.
fn row_moves(combine: Combine) -> Option<i64> {
    match combine {
        Combine::Assign => Some(2),
        Combine::Reduce(_) | Combine::Accumulate(_) => Some(3),
        Combine::Start(_) | Combine::Finish { .. } => None,
    }
}

/// The work of combining `rows` rows of `row_len` contiguous elements of `size` bytes
/// each, moving each row's bytes `moves` times ([`row_moves`]), in the units of
/// [`splits_from`] (one for an element picked): [`ROW_UNITS`] a row and one per
/// [`MOVED_PER_UNIT`] bytes moved, or one an element where that is less (rows of a few
/// elements: f32 rows under about 40 bytes). Gathers of whole f32 rows from the
/// second-level cache, one thread, 2-vCPU Xeon, 2026-11-29: 4-6 ns a row of 16 or 64
/// bytes, 14 of 256, 37-46 of 1 KiB, 122-150 of 4 KiB, 460-550 of 16 KiB (about 4 ns and
/// 32 bytes a ns), where picks along the last axis took 0.5-0.8 ns an element
/// (BENCHMARKS.md, "Whole rows counted by their bytes"). Weighed by their rows, narrow
/// rows split sooner and slower: 8,192 rows of 16 bytes (32 KiB, 30-47 us on one thread)
/// took 97-111 us on two threads against 30-52 unsplit.
fn row_work(rows: i64, row_len: i64, size: i64, moves: i64) -> i64 {
    let moved = row_len.saturating_mul(size).saturating_mul(moves);
    let by_rows = rows.saturating_mul(ROW_UNITS.saturating_add(moved / MOVED_PER_UNIT));
    by_rows.min(rows.saturating_mul(row_len))
}

/// The work of `nest` bound to `params` in `variant`, in the units of [`splits_from`]: one
/// a loop step (an element picked or combined), or where it combines whole rows (its
/// innermost loop is contiguous and no index moves along it: Gather's rows, a copy, a
/// scatter through a broadcast index or the engine's keys) their [`row_work`]. `None`
/// where the dims' product overflows.
pub(super) fn pass_work(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    params: &[i64],
    variant: Variant,
) -> Option<i64> {
    let depth = layout.depth;
    let dims = &params[..depth];
    let steps = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    let inner = depth.checked_sub(1)?;
    let whole_rows = matches!(
        variant,
        Variant::Contiguous(_) | Variant::Broadcast(..) | Variant::Streamed
    ) && layout
        .accesses
        .iter()
        .all(|a| a.operand != Operand::Indices || params[a.strides_at + inner] == 0);
    match row_moves(nest.combine) {
        Some(moves) if whole_rows && dims[inner] != 0 => {
            let size = key.dtype().size() as i64;
            Some(row_work(steps / dims[inner], dims[inner], size, moves))
        }
        _ => Some(steps),
    }
}

/// The fewest threads per position before the axis that the engine spreads buckets over
/// (default 2); below, a scatter whose index is uniform by value runs the ordinary passes
/// on the sort's keys, and one uniform by layout the ordinary passes alone. At two threads
/// the ordinary split can only cut each slice into chunks of two cache lines or more
/// (halves of a 256-byte row), which the buckets beat. Two-vCPU Xeon, f32 [400000, 64]
/// into [50000, 64] along axis 0, two threads, split against buckets (ms): an expanded
/// index, at 8e74bd0, add 20.3-23.1 and 18.4-21.1, max 27.5-28.3 and 19.1-25.1, mean
/// 22.2-25.2 and 19.4; a materialized one, after the rows' prefetch of 4168c20, add
/// 39.0-45.9 and 29.0-29.5, max 42.3-44.8 and 29.3-31.2, mean 30.6-30.7 and 28.5-30.2
/// (BENCHMARKS.md).
static ENGINE_THREADS: AtomicI64 = AtomicI64::new(2);

/// Sets the fewest threads the parallel engine spreads its buckets over (default 2).
/// Results do not depend on it; tests lower it so that small pools exercise the engine.
#[doc(hidden)]
pub fn set_engine_threads(threads: usize) {
    ENGINE_THREADS.store(threads.clamp(1, 1 << 20) as i64, Ordering::Relaxed);
}

/// How a pass is cut into chunks that run in parallel: loop `level` (in the bound loop
/// order) is split into `chunks` contiguous ranges.
pub(super) struct Split {
    pub(super) level: usize,
    chunks: usize,
    /// Per access: `(operand slot, byte stride along the split loop)`.
    pub(super) steps: Vec<(usize, isize)>,
    /// Chunks start at multiples of this many counters (a cache line of the aligned access
    /// when the split cuts rows), so that no two threads write one line.
    align: i64,
    /// The entry of `steps` whose addresses chunks start on a cache line of (see
    /// [`Split::phase`]): the written access where it moves along the split loop.
    aligned: Option<usize>,
    /// Whether a caller outside every pool takes chunks too (see [`threads::caller_helps`]).
    caller_helps: bool,
}

/// How many times the ordinary pass's work a listed pass's rows cost, for the caller's
/// chunks: a bucket reads its rows through its list, with gaps, and prefetches them where
/// they span past the second-level cache. F32 slices of 256 bytes through an expanded
/// index, one thread, 2-vCPU Xeon, 2026-11-29: 4,096 of them (no prefetch) 1.2-1.8x the
/// ordinary pass's time on the engine, the sort included. Counted so, 65,536 such slices
/// (prefetched) on two threads keep rayon's hand-off, each bucket about a millisecond: the
/// caller's chunks ran them 1.1-1.4x slower (medians of five alternations, BENCHMARKS.md).
const LISTED_COST: i64 = 2;

/// The share of a core's private cache ([`jit::private_cache`]) under which a destination
/// takes one thread's ordinary pass rather than two threads' buckets (see
/// `Kernel::sorted`). On a 2-vCPU Xeon (2 MiB second-level cache), expanded scatters of
/// 256-byte slices: one thread beat two threads' buckets below 256 KiB for every cheap
/// combine, and lost from 512 KiB for `mean` and the copy (BENCHMARKS.md, the table of
/// "A pool for C callers"; `examples/gnn_mid.rs` measures it again).
const BUCKETS_CACHED_SHARE: i64 = 8;

/// [`caller_helps`] for the engine's steps of a call whose listed apply weighs `work`
/// ([`pass_work`]'s weight on the ordinary pass): the sort's two passes and the buckets
/// decide alike, by the buckets' cost.
fn listed_caller_helps(work: i64, threads: usize) -> bool {
    caller_helps(work.saturating_mul(LISTED_COST), threads)
}

impl Split {
    /// Counters from the split loop's first to the first at which the aligned access
    /// starts a cache line, with the operands' base addresses `pointers`: chunks start
    /// that many counters past multiples of `align`. A buffer's rows need not start on a
    /// line (a large `malloc` or numpy buffer starts 16 bytes past one): starting chunks
    /// at multiples of `align` from the row's start had two threads write one line at
    /// every chunk boundary of every row (two threads cutting 256-byte rows: 26-29 ms
    /// against 13.6-14.8 into a line-aligned output).
    pub(super) fn phase(&self, pointers: &[*mut u8]) -> i64 {
        let Some((slot, step)) = self.aligned.map(|a| self.steps[a]) else {
            return 0;
        };
        let at = pointers[slot] as usize % LINE;
        // A positive step walks towards higher addresses, a negative one lower.
        let to_line = match step > 0 {
            true => (LINE - at) % LINE,
            false => at,
        };
        let step = step.unsigned_abs();
        match step != 0 && to_line % step == 0 {
            true => (to_line / step) as i64 % self.align,
            false => 0,
        }
    }

    /// The first counter of chunk `c` along the split loop of extent `dim`, chunks
    /// starting `phase` counters past multiples of `align` (see [`Split::phase`]).
    pub(super) fn start(&self, dim: i64, c: usize, phase: i64) -> i64 {
        if c >= self.chunks {
            return dim;
        }
        let even = (dim as i128 * c as i128 / self.chunks as i128) as i64;
        match c {
            0 => 0,
            _ => ((even - phase).div_euclid(self.align) * self.align + phase).clamp(0, dim),
        }
    }
}

/// Bytes of a cache line (see [`abi::CACHE_LINE`]).
const LINE: usize = abi::CACHE_LINE as usize;

/// A split of the innermost loop whose elements do not pick one by one (its index, if any,
/// stays put along it: a row picked whole) gives each chunk at least this many bytes of
/// its widest access: a page, the span the hardware's stream prefetcher works in, so that
/// no thread's prefetches pull in lines another thread reads. A scatter's rows are the
/// exception, see [`MIN_SCATTER_ROW_CHUNK`].
const MIN_ROW_CHUNK: usize = 4096;

/// A split of the innermost loop of a scatter that writes whole rows through its index (an
/// index broadcast along them, where the engine does not take the call: one thread per
/// position before the axis, slices too wide for it, or a sort that declines) gives each
/// chunk at least two cache lines, as for picks: such a scatter has no other split.
/// Two-vCPU Xeon, f32 [400000, 64] into [50000, 64] along axis 0, index `expand_as`, two
/// threads, before that call took buckets ([`ENGINE_THREADS`]): in 256-byte rows
/// (whole) max 32.0 ms, add 17.7, mean 18.1 against 31-33, 19-20 and 19 at one thread; in
/// two chunks of 128 bytes 22.0, 17.3 and 18.1; in four of 64 bytes 31.6, 29.1 and 20.1
/// (one run each, BENCHMARKS.md). An older two-vCPU EPYC had put the halves of 256-byte
/// rows at 1.5-1.7x one thread's time.
const MIN_SCATTER_ROW_CHUNK: usize = 2 * LINE;

/// A split of the innermost loop whose elements pick one by one gives each chunk at least
/// this many bytes of its widest access (two cache lines), where that leaves each thread
/// [`PICKS_CHUNKS_PER_THREAD`] chunks: a scatter along an outer axis with rows too narrow
/// for tiles has no other split (ScatterElements add of f32 [262144, 64] along axis 0, i64
/// indices, two threads: 98 ms with whole rows, one thread's time, 56 ms in chunks;
/// BENCHMARKS.md).
const MIN_PICKS_CHUNK: usize = 2 * LINE;

/// Where chunks of [`MIN_PICKS_CHUNK`] are too few, a split of picks gives each thread this
/// many chunks, of at least [`MIN_SHARED_PICKS_CHUNK`] bytes: threads then share the lines
/// of the rows they cut, which costs less than idle threads. (16-core Xeon, ScatterElements
/// add along axis 0 of f32 [131072, 64] from i64 indices: 42.5 ms at 16 threads in four
/// chunks of two lines, 16.9 in 32 chunks of 16 bytes, 17.9 in 64; at 8 threads 37.1, 14.3
/// in 16 chunks, 20.9 in 32; [524288, 16] 55.8 in one chunk, 20.8-22.3 in 16 or 32; i32
/// indices, [131072, 64], 42.0 in two chunks, 9.8-11.1 in 16 or 32. Two vCPUs: [262144,
/// 32] 69.2 ms in two chunks, 34.2 in four. One chunk per thread left threads idle about
/// half the time in every case. BENCHMARKS.md.)
const PICKS_CHUNKS_PER_THREAD: usize = 2;

/// The fewest bytes of the widest access in a chunk of picks that threads' chunks share
/// lines in: one 16-byte vector (8-byte chunks were up to 1.4x slower where rows are wider
/// than 128 bytes, and at most 1.2x faster on narrower ones).
const MIN_SHARED_PICKS_CHUNK: usize = 16;

/// Chunks per thread, so that a thread that finishes early takes another.
const CHUNKS_PER_THREAD: usize = 4;

/// Chooses how to split `nest` over the current rayon pool, or `None` to run it whole: a
/// pass of [`splits_from`] units of work ([`pass_work`]) or more, in chunks of at least a
/// grain of loop steps. A chunk of a split costs a steal, not a wake-up, and chunks of a
/// grain of work rather than of steps were too few where rows are wide: a thread that
/// woke late found none left (Gathers of 1,024 rows of 1 KiB, two threads, 2-vCPU Xeon,
/// 2026-11-29: 137-184 us in 2 chunks, 31-88 in 8, 86-100 whole).
///
/// Only loops whose chunks own disjoint destination elements may be split: any loop of a
/// pass without an indexed destination (copy, check, the gathers) and, for scatter passes,
/// any loop but the axis; and no loop along which a pass's written counts stay put (`mean`'s
/// per-row counts). Each chunk runs the same loop nest on a sub-range in the same
/// order, so every destination element sees the same updates in the same order as on one
/// thread, and results are bit-identical.
fn split(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    (params, order): (&[i64], &[usize]),
    variant: Variant,
) -> Option<Split> {
    let threads = threads::available();
    let grain = PARALLEL_GRAIN.load(Ordering::Relaxed);
    let depth = layout.depth;
    let dims = &params[..depth];
    let loop_steps = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    let work = pass_work(key, nest, layout, params, variant)?;
    if threads < 2 || work < splits_from() as i64 {
        return None;
    }
    let axis_of_indexed = |n: usize| nest.writes_through_index() && order[n] == key.axis();
    let splittable =
        |n: usize| !axis_of_indexed(n) && !count_still(nest, layout, params, n) && dims[n] >= 2;
    let level = (0..depth).find(|&n| splittable(n))?;
    // Inside a scatter's axis loop, every chunk writes part of each destination slice.
    if (0..level).any(axis_of_indexed)
        && picked_extent(key, layout, params).is_some_and(|e| e < jit::private_cache())
    {
        return None;
    }
    let steps = steps(key, layout, params, level);
    let max_chunks = (loop_steps / grain) as usize;
    let mut chunks = (threads * CHUNKS_PER_THREAD)
        .min(dims[level] as usize)
        .min(max_chunks);
    let mut align = 1;
    let mut aligned = None;
    if level + 1 == depth {
        // Innermost splits cut rows: chunks of at least a page, or of two lines where
        // elements pick (down to a vector where that leaves threads idle) or a scatter
        // writes whole rows.
        let widest = steps
            .iter()
            .map(|s| s.1.unsigned_abs())
            .max()
            .unwrap_or(1)
            .max(1);
        let picks_elements = layout
            .accesses
            .iter()
            .any(|a| a.operand == Operand::Indices && params[a.strides_at + level] != 0);
        let bytes = (dims[level] as usize).saturating_mul(widest);
        let least = match picks_elements {
            true if bytes / MIN_PICKS_CHUNK >= PICKS_CHUNKS_PER_THREAD * threads => MIN_PICKS_CHUNK,
            true => {
                chunks = chunks.min(PICKS_CHUNKS_PER_THREAD * threads);
                MIN_SHARED_PICKS_CHUNK.max(bytes / chunks.max(1))
            }
            false if nest.writes_through_index() => MIN_SCATTER_ROW_CHUNK,
            false => MIN_ROW_CHUNK,
        };
        chunks = chunks.min(bytes / least);
        // Chunks start where the written access's elements fill a line (or the power of
        // two under a narrower chunk of picks that shares lines), on a line of it, where
        // every chunk still spans that many; else where the widest access's elements do.
        let unit = 1 << least.min(LINE).ilog2();
        let per_chunk = dims[level] / chunks.max(1) as i64;
        let written = abi::source_and_dest(nest)
            .1
            .map(|d| (d, steps[d].1.unsigned_abs()))
            .filter(|&(_, step)| {
                step.is_power_of_two() && step <= unit && (unit / step) as i64 <= per_chunk
            });
        if let Some((d, step)) = written {
            align = (unit / step) as i64;
            aligned = Some(d);
        } else if widest.is_power_of_two() && widest <= unit {
            align = (unit / widest) as i64;
        }
    }
    (chunks >= 2).then_some(Split {
        level,
        chunks,
        steps,
        align,
        aligned,
        caller_helps: caller_helps(work, threads),
    })
}

/// Bytes along the indexed dim of the tensor a pass picks from or into: the axis's size
/// times the tensor's stride along it. `None` where the pass picks nothing.
///
/// A split of a loop inside a scatter's axis loop gives each thread a part of every
/// destination slice, and threads then write lines of the same slices at random. Where the
/// destination stays in one core's private cache (below [`jit::private_cache`], its
/// second-level cache), that costs more than the split saves. 2-vCPU Xeon (2 MiB
/// second-level cache), one thread against two in halves of rows, along axis 0 into
/// [R, 128] f32 from i64 indices, max element by element, three runs each: R = 512
/// (256 KiB) 121-191 us against 241-247, 1,024 252-268 against 295-364, 2,048 577-606
/// against 638-701; 4,096 (2 MiB) 1,284-2,296 against 960-1,461, 8,192 3,323-5,862 against
/// 2,875-3,152. Whole 256-byte rows through an expanded index, where the engine does not
/// take them, into [E / 4, 64]: add of E = 4,096 (256 KiB) 74.5 us against 153, 16,384
/// (1 MiB) 416 against 766; 65,536 (4 MiB) 2,260 against 2,091. The same picks in C, two
/// threads writing disjoint lines of the rows (padded apart by up to a line): 1.1-1.6x one
/// thread's time below 1 MiB, 1.7-1.8x faster from 4 MiB (BENCHMARKS.md).
fn picked_extent(key: &KernelKey, layout: &ParamLayout, params: &[i64]) -> Option<i64> {
    let picked = layout
        .accesses
        .iter()
        .find(|a| a.indexed_stride_at.is_some())?;
    let stride = params[picked.indexed_stride_at?].saturating_abs();
    let size = abi::element_size(key, picked.operand) as i64;
    Some(
        params[layout.bound_at?]
            .saturating_mul(stride)
            .saturating_mul(size),
    )
}

/// Whether `nest` writes per-row counts that stay put (stride 0) along loop `n`: every
/// chunk of that loop would share them.
fn count_still(nest: &LoopNest, layout: &ParamLayout, params: &[i64], n: usize) -> bool {
    matches!(nest.combine, Combine::Start(_) | Combine::Accumulate(_))
        && layout
            .accesses
            .iter()
            .any(|a| a.operand == Operand::Counts && params[a.strides_at + n] == 0)
}

/// The most bytes the picks of one tile may reach (see [`tiles`]): a quarter of a 1 MiB
/// second-level cache, so that they stay in it. (One thread, GatherElements along axis 0
/// of f32 [64, 131072]: 20.5 ms with a reach of 4 MiB, 15.2-15.8 with 256 KiB; of i8
/// [256, 32768]: 22.2 and 17.6; ScatterElements add along axis 0 of f32 [256, 32768]: 26.8
/// and 24.6; shapes whose bands are [`MIN_BAND`] either way unchanged. BENCHMARKS.md.)
static TILE_PICKS: AtomicI64 = AtomicI64::new(256 << 10);

/// The narrowest band of a tile, in contiguous bytes of a picked slice: narrower bands cut
/// the streams of the index and the output into runs too short for the hardware's
/// prefetcher.
const MIN_BAND: i64 = 1024;

/// Sets the most bytes one tile's picks may reach (default 256 KiB; see `tiles` in the
/// runtime's schedule). Results do not depend on it; tests lower it so that small problems
/// run in tiles.
#[doc(hidden)]
pub fn set_tile_picks(bytes: usize) {
    TILE_PICKS.store(bytes.clamp(1, 1 << 40) as i64, Ordering::Relaxed);
}

/// How to cut a pass that picks element by element along an outer dim (GatherElements or
/// ScatterElements along an axis before the last: `data[idx[i][j][k]][j][k]`) into tiles
/// of the loops after that dim's, or `None`.
///
/// Each step of the axis's loop picks, at every position of the loops after it (the band
/// loops), from any of the `s` slices of the picked tensor along the axis: untiled, those
/// picks reach `s` times a whole slice and miss the caches once that is larger than they
/// are. A tile runs the whole nest on a band of the outermost band loop whose single step
/// keeps the reach under [`TILE_PICKS`] (the innermost loop if none does), as wide as keeps
/// it there but at least [`MIN_BAND`] contiguous bytes. (A probe of `data[idx[i][j]][j]`
/// on [4096, 2048] f32, one thread: 68 ms untiled, 36 ms in bands of 1 KiB, 62 ms in bands
/// of 64 bytes, whose short runs of index and output the prefetcher does not follow.)
/// Where [`MIN_BAND`] keeps a gather's tile's reach over the budget and the untiled reach is
/// at most `resident` bytes (which stay in the last-level cache), tiles only cut the streams:
/// GatherElements along axis 0 of [2048, 2048] f16, one thread, 8.7-9.3 ms untiled, 12.0
/// in bands of 1 KiB reaching 2 MiB (of f32, 16 MiB in all, 11.1-12.0 and 10.6-10.7).
/// Tiles own disjoint positions of the band loops and every element sees its picks in the
/// order of one thread, so they run in parallel like any chunks.
fn tiles(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    params: &[i64],
    resident: i64,
) -> Option<Split> {
    let depth = layout.depth;
    let grain = PARALLEL_GRAIN.load(Ordering::Relaxed);
    let dims = &params[..depth];
    let work = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    if work < 2 * grain {
        return None;
    }
    let moves = |a: &abi::AccessSlots, l: usize| params[a.strides_at + l] != 0;
    let index = layout
        .accesses
        .iter()
        .find(|a| a.operand == Operand::Indices)?;
    // The access the index moves; along the axis's loop it stays put (the index gives
    // its coordinate there), along the band loops it moves with the index.
    let picked = layout
        .accesses
        .iter()
        .find(|a| a.indexed_stride_at.is_some())?;
    let first = (0..depth).rev().find(|&l| !moves(picked, l))? + 1;
    let bands_loops = first..depth;
    if bands_loops.is_empty()
        || bands_loops
            .clone()
            .any(|l| !moves(index, l) || !moves(picked, l) || count_still(nest, layout, params, l))
    {
        return None;
    }
    let size = abi::element_size(key, picked.operand) as i64;
    let s = params[layout.bound_at?].max(1);
    // Bytes of one step of band loop `l`: the loops inside it, whole.
    let slice = |l: usize| {
        dims[l + 1..]
            .iter()
            .try_fold(size, |acc, &d| acc.checked_mul(d))
    };
    let most = TILE_PICKS.load(Ordering::Relaxed);
    let reach = s.checked_mul(slice(first - 1)?)?;
    if reach <= most {
        return None;
    }
    let level = bands_loops
        .clone()
        .find(|&l| {
            slice(l)
                .and_then(|b| b.checked_mul(s))
                .is_some_and(|r| r <= most)
        })
        .unwrap_or(depth - 1);
    let step = slice(level)?;
    let fits = (most / s / step).max(1);
    let band = fits.max((MIN_BAND.min(most) + step - 1) / step);
    // A scatter keeps its tiles: they are also its only parallel split.
    if !nest.writes_through_index() && band > fits && reach <= resident {
        return None;
    }
    // A loop of a band or less is picked whole; more chunks than bands only feed threads.
    let bands = dims[level] / band;
    if bands < 2 {
        return None;
    }
    let threads = threads::available() as i64;
    let chunks = bands
        .max(threads * CHUNKS_PER_THREAD as i64)
        .min(dims[level]);
    let line = LINE as i64;
    // Chunks start on a cache line of the picked tensor where its steps divide one.
    let align = match step < line && line % step == 0 && band * step >= line {
        true => line / step,
        false => 1,
    };
    (chunks >= 2).then(|| Split {
        level,
        chunks: chunks as usize,
        steps: steps(key, layout, params, level),
        align,
        aligned: None,
        caller_helps: caller_helps(work, threads as usize),
    })
}

/// `count` partial outputs of `nest`'s reduction shaped like `out`, or `None` where the
/// scratch cap or the allocator refuses them (partial outputs only speed a pass up).
fn partial_buffers(
    key: &KernelKey,
    nest: &LoopNest,
    out: &RawOperand<'_>,
    count: usize,
) -> Option<Vec<Vec<u8>>> {
    let Combine::Reduce(reduction) = nest.combine else {
        unreachable!("partial_split takes reductions only")
    };
    let bytes = out.shape.iter().product::<usize>() * key.dtype().size();
    partials::identity_buffers(key.kind(), reduction, key.dtype(), bytes, count).ok()
}

impl Call {
    /// The chunks of `split` in parallel, chunk `c` reducing into partial output
    /// `c - 1` after the first, which reduces into the output, when `first_into_out`;
    /// else into partial output `c`: the loop counters of the lowest chunk that stopped.
    fn run_partials(
        &self,
        layout: &ParamLayout,
        split: &Split,
        buffers: &mut [Vec<u8>],
        first_into_out: bool,
    ) -> std::result::Result<(), Vec<usize>> {
        let first = first_into_out.then_some(None);
        let calls: Vec<Call> = first
            .into_iter()
            .chain(buffers.iter_mut().map(Some))
            .map(|buffer| {
                let mut pointers = self.pointers;
                if let Some(buffer) = buffer {
                    pointers[Operand::Output as usize] = buffer.as_mut_ptr();
                }
                Call {
                    entry: self.entry,
                    pointers,
                    params: self.params.clone(),
                }
            })
            .collect();
        threads::try_each(split.chunks, split.caller_helps, |c| {
            calls[c].run(layout, Some((split, c)))
        })
    }
}

/// Per access: `(operand slot, byte stride along loop level)`.
fn steps(
    key: &KernelKey,
    layout: &ParamLayout,
    params: &[i64],
    level: usize,
) -> Vec<(usize, isize)> {
    layout
        .accesses
        .iter()
        .map(|slots| {
            let bytes = abi::element_size(key, slots.operand) as isize;
            let stride = params[slots.strides_at + level] as isize;
            (slots.operand as usize, stride * bytes)
        })
        .collect()
}

/// How to cut a scatter's apply pass along its axis into at least `least` chunks that
/// reduce into partial outputs (see `crate::partials`); for when [`split`] found no other
/// loop to split.
///
/// Each partial output costs an output-sized fill and fold, so the output must be small
/// beside the work: at most a quarter of a chunk's elements.
fn partial_split(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    (params, order): (&[i64], &[usize]),
    out: &RawOperand<'_>,
    least: i64,
) -> Option<Split> {
    let Combine::Reduce(reduction) = nest.combine else {
        return None;
    };
    if nest.pass != PassKind::Apply
        || !partials::qualifies(reduction, key.dtype())
        || !tensor::is_dense(out.shape, out.strides)
    {
        return None;
    }
    let threads = threads::available() as i64;
    let grain = PARALLEL_GRAIN.load(Ordering::Relaxed);
    let dims = &params[..layout.depth];
    let work = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    let out_numel = out
        .shape
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d as i64))?
        .max(1);
    let level = order.iter().position(|&d| d == key.axis())?;
    let chunks = threads.min(dims[level] / grain).min(work / (4 * out_numel));
    (chunks >= least.max(1)).then(|| Split {
        level,
        chunks: chunks as usize,
        steps: steps(key, layout, params, level),
        align: 1,
        aligned: None,
        caller_helps: caller_helps(work, threads as usize),
    })
}

impl Kernel {
    /// The work of the largest pass of an out-of-place call of this kernel on row-major
    /// operands of these shapes, in the units of [`splits_from`]: a call with less runs
    /// whole on the calling thread. A caller that hands calls to a pool of its own (as the
    /// Python package does) asks this first, as the library does before each pass.
    ///
    /// A Gather copies whole rows (the dims after its axis), which weigh their bytes and
    /// a few units each where that is less than their elements, as a split weighs them
    /// (but for narrow rows that it moves in blocks); other passes weigh one unit an
    /// element of the output or the indices, whichever has more. Shapes that do not fit
    /// the kernel (which the call itself refuses) weigh their elements too.
    ///
    /// ```
    /// use scatterjit::{DType, Kernel, KernelKey};
    /// let gather = Kernel::compile(KernelKey::gather(DType::F32, DType::I64, 2, 1, 0)?)?;
    /// // 128 rows of 4 KiB: 2^17 elements, but less work than 2^16 picks.
    /// assert!(gather.work(&[512, 1024], &[128]) < scatterjit::splits_from());
    /// // 2^17 picks along the last axis.
    /// let picks = Kernel::compile(KernelKey::gather(DType::F32, DType::I64, 2, 1, 1)?)?;
    /// assert_eq!(picks.work(&[1024, 512], &[128]), 1 << 17);
    /// # Ok::<(), scatterjit::Error>(())
    /// ```
    pub fn work(&self, data_shape: &[usize], indices_shape: &[usize]) -> usize {
        let key = &self.plan.key;
        let product = |dims: &[usize]| dims.iter().fold(1usize, |n, &d| n.saturating_mul(d));
        let indices = product(indices_shape);
        let axis = key.axis();
        if data_shape.len() != key.rank() || indices_shape.len() != key.index_rank() {
            return product(data_shape).max(indices);
        }
        let (before, after) = (
            product(&data_shape[..axis]),
            product(&data_shape[axis + 1..]),
        );
        let rows = before.saturating_mul(indices);
        let out = match key.kind() {
            // Whole rows, as a split weighs them.
            OpKind::Gather
                if after > 1
                    && !self.takes_blocks(
                        data_shape,
                        &tensor::row_major(data_shape),
                        indices_shape,
                        &tensor::row_major(indices_shape),
                    ) =>
            {
                let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
                let size = key.dtype().size() as i64;
                let apply = self.plan.pass(PassKind::Apply).expect("every plan applies");
                let moves = row_moves(apply.combine).expect("a Gather's apply assigns");
                let work = row_work(as_i64(rows), as_i64(after), size, moves);
                usize::try_from(work).unwrap_or(usize::MAX)
            }
            // Picks, and narrow rows that run in blocks, weigh their elements (the blocks'
            // units of up to 16 bytes may weigh less: then a hand-off the library does not
            // split, as before `Kernel::work`).
            OpKind::Gather => rows.saturating_mul(after),
            OpKind::GatherElements => indices,
            OpKind::ScatterElements => product(data_shape),
        };
        out.max(indices)
    }

    /// The engine's sort (see `crate::engine`) for a scatter into data of `data_shape`
    /// whose only parallelism is along its axis: few positions before the axis, slices
    /// after it of at least a cache line and not so wide that they split well themselves,
    /// many slices. `None` to take the ordinary split, and when the index is not uniform per
    /// slice or holds a bad index.
    ///
    /// Narrower slices (a histogram's single elements) stay off the engine: each bucket
    /// would walk every cache line of indices and updates to use a few bytes of each.
    ///
    /// A bucket reads its slices' updates with gaps, so per slice it takes longer than one
    /// thread streaming every slice in order (about 3x on the 2-vCPU EPYC, 2026-11-24;
    /// about 1.6x on the 2-vCPU Xeon with the listed passes' prefetch, 2026-11-27,
    /// expanded GNN add 18 ms on one thread, 15 on two threads' buckets), but it beats
    /// the ordinary split of the same threads ([`ENGINE_THREADS`]). So the engine lists
    /// buckets from [`set_engine_threads`] threads (2), times the positions before the
    /// axis, along which the ordinary passes split in order
    /// (16-core Xeon, 2026-11-27, an expanded add along axis 1 of [4, 50000, 16] from
    /// [4, 400000, 16]: buckets 19.5 ms at 4 threads and 4.8 at 16, the ordinary split
    /// 7.4 and 7.8; a mean 15.6 and 5.7 against 10.2 and 10.6). With
    /// fewer, an index uniform by value is sorted for its keys alone: the sort's one read
    /// of each index checks it, and the ordinary passes read one dense key per slice, as
    /// they read an expanded index. An index uniform by layout (a broadcast view) gains
    /// nothing from keys, since the ordinary check and passes already read it once per
    /// slice: with fewer threads (one) it takes the ordinary path; the sort and the row
    /// list cost its add, max and mean about a quarter of their time (2-vCPU machine,
    /// 2026-11-25, `scatterjit bench --threads 1`, three runs each, expanded add 18.4-21.2
    /// ms with one bucket, 13.9-15.8 without).
    pub(super) fn sorted(&self, data_shape: &[usize], indices: &TensorView<'_>) -> Option<Sorted> {
        /// A bucket reads its slices' updates with gaps between them, the wider the more
        /// buckets there are. Buckets hold about as many slices each (see
        /// `crate::engine::sort`), so one per thread balances the load (the expanded GNN
        /// add at 2 threads, 2-vCPU Xeon, 2026-11-28, medians of 15 in three runs: 11.5-12.5
        /// ms with one bucket per thread, 13.1-14.4 with two; one thread 16-18.8). Before
        /// buckets were balanced, two per thread made up for power-of-two ranges of
        /// unequal counts.
        const BUCKETS_PER_THREAD: usize = 1;
        /// Slices at least this wide split well along their own loops.
        const WIDE_SLICE: usize = 16 << 10;
        let key = &self.plan.key;
        let threads = threads::available();
        let shape = indices.shape();
        let axis = key.axis();
        let work = checked_numel(shape).ok()?;
        if key.kind() != OpKind::ScatterElements || work < splits_from() {
            return None;
        }
        // No dim is 0 now, so every product of dims is at most `work` (an empty index may
        // have dims whose product overflows).
        let outer: usize = shape[..axis].iter().product();
        let slice_bytes = shape[axis + 1..]
            .iter()
            .product::<usize>()
            .checked_mul(key.dtype().size())?;
        let wanted = outer < 4 * threads
            && shape[axis] >= 2 * threads
            && (LINE..WIDE_SLICE).contains(&slice_bytes);
        if !wanted {
            return None;
        }
        // Positions before the axis split the ordinary passes that many ways, in order;
        // the engine pays off only with as many more threads again.
        let by_layout = engine::uniform_by_layout(shape, indices.strides(), axis);
        let least = ENGINE_THREADS.load(Ordering::Relaxed);
        // Buckets repay their sort and hand-offs only where the apply would split: its rows
        // (the dims after the axis end in the last) weigh what the ordinary split weighs.
        let row_len = shape[shape.len() - 1];
        let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let apply = self.plan.pass(PassKind::Apply)?;
        let apply_work = row_moves(apply.combine).map_or(as_i64(work), |moves| {
            let size = key.dtype().size() as i64;
            row_work(as_i64(work / row_len), as_i64(row_len), size, moves)
        });
        // Into a destination well inside one core's private cache (an eighth of it,
        // [`BUCKETS_CACHED_SHARE`]), the ordinary passes of an index uniform by layout run
        // on one thread per position at that cache's speed (`split` declines to cut its
        // slices, see `picked_extent`), while a bucket's rows cost [`LISTED_COST`] times
        // theirs: buckets repay that, and their sort, only on more threads than that.
        // Float max and min, whose rows cost about twice an add's (NaNs kept, see
        // [`row_moves`]), still gain from buckets on two, as does an index uniform by
        // value, whose sort is its check.
        let extent = data_shape[axis..]
            .iter()
            .fold(key.dtype().size(), |n, &d| n.saturating_mul(d));
        let costly = matches!(
            apply.combine,
            Combine::Reduce(Reduction::Max | Reduction::Min)
        ) && key.dtype().class() == DTypeClass::Float;
        let cached = as_i64(extent) < jit::private_cache() / BUCKETS_CACHED_SHARE;
        let least = match by_layout && !costly && cached {
            true => least.max(LISTED_COST + 1),
            false => least,
        };
        let spread = apply_work >= as_i64(splits_from())
            && threads as u64 >= (least as u64).saturating_mul(outer as u64);
        let target = match spread {
            true => Some(BUCKETS_PER_THREAD * threads),
            false if by_layout => return None,
            false => None,
        };
        let helps = listed_caller_helps(apply_work, threads);
        engine::sort(indices, axis, data_shape[axis], target, helps)
    }

    /// Fills the parameter block of `pass` from the operands' shapes and strides and calls it,
    /// split over the current rayon pool when the pass is large enough (see [`split`]).
    pub(super) fn run_pass(
        &self,
        pass: PassKind,
        ops: &Operands<'_>,
    ) -> std::result::Result<(), Stop> {
        self.run_pass_with(pass, ops, None, None)
    }

    /// [`Self::run_pass`], and when `partial_outputs` is given, an apply pass that can be
    /// split only along the axis may reduce into partial outputs (see [`partial_split`]),
    /// which it leaves there for the caller to fold into the output. With `buckets`, a pass
    /// that writes through the index runs on the engine (see `crate::engine`): each bucket
    /// is one chunk, the listed form of the pass with the axis as its outermost loop.
    pub(super) fn run_pass_with(
        &self,
        pass: PassKind,
        ops: &Operands<'_>,
        partial_outputs: Option<&mut Vec<Vec<u8>>>,
        buckets: Option<&Buckets>,
    ) -> std::result::Result<(), Stop> {
        let Some(nest) = self.plan.pass(pass) else {
            return Ok(());
        };
        let layout = self.layout(pass);
        if let Some(buckets) = buckets.filter(|_| nest.writes_through_index()) {
            return self.run_buckets(pass, nest, layout, ops, buckets);
        }
        let (params, order) = bind(&self.plan.key, nest, layout, ops, false);
        let variant = match variant_of(layout, &self.plan.key, &params, &order) {
            // A new output's pages come through the caches as they are first mapped:
            // streamed rows measured 1.3-1.9x slower there (Gathers of 1 KiB rows into
            // 97 to 256 MB, one thread).
            Variant::Streamed
                if ops.writes_new_output(abi::element_size(&self.plan.key, Operand::Output)) =>
            {
                Variant::Contiguous(layout.picks(&params))
            }
            variant => variant,
        };
        let entry = self.entry(
            pass,
            variant,
            false,
            Demand::Once(layout.domain_size(&params)),
        )?;
        let call = Call {
            entry,
            pointers: pointers(ops),
            params,
        };
        let key = &self.plan.key;
        let plan = tiles(key, nest, layout, &call.params, jit::cache_resident())
            .or_else(|| split(key, nest, layout, (&call.params, &order), variant));
        let partial = match (&plan, partial_outputs) {
            (None, Some(partial_outputs)) => {
                let out = ops.get(Operand::Output);
                partial_split(key, nest, layout, (&call.params, &order), out, 2).and_then(|split| {
                    // The first chunk reduces into the output itself.
                    let buffers = partial_buffers(key, nest, out, split.chunks - 1)?;
                    Some((split, buffers, partial_outputs))
                })
            }
            _ => None,
        };
        let status = match plan {
            None => match partial {
                None => call.run(layout, None),
                Some((split, mut buffers, partial_outputs)) => {
                    let status = call.run_partials(layout, &split, &mut buffers, true);
                    partial_outputs.extend(buffers);
                    status
                }
            },
            Some(split) => {
                let chunk = |c| call.run(layout, Some((&split, c)));
                match threads::try_each(split.chunks, split.caller_helps, chunk) {
                    // Chunks of the check pass may fail out of row-major order: the
                    // sequential rerun names the first bad index.
                    Err(_) if pass == PassKind::Check => call.run(layout, None),
                    status => status,
                }
            }
        };
        status.map_err(|counters| Stop::BadIndex(domain_position(counters, &order)))
    }

    /// The apply pass of a scatter reducing every chunk into a partial output of its own,
    /// where [`partial_split`] takes it (on any pool, down to one chunk), its bounds checks
    /// the call's only check: the output is not written, so a bad index leaves it as it
    /// was, and the indices are read once, where a check pass and the apply read them
    /// twice. `None` where the pass would not reduce into partial outputs (nothing ran);
    /// else the partial outputs, for the caller to fold into the output in order, or where
    /// a chunk stopped.
    pub(super) fn apply_into_partials(
        &self,
        ops: &Operands<'_>,
    ) -> Option<std::result::Result<Vec<Vec<u8>>, Stop>> {
        let key = &self.plan.key;
        let nest = self.plan.pass(PassKind::Apply)?;
        // Before binding, which the call's ordinary passes would do again: most scatters
        // (float ones) never reduce into partial outputs.
        match nest.combine {
            Combine::Reduce(reduction) if partials::qualifies(reduction, key.dtype()) => {}
            _ => return None,
        }
        let layout = self.layout(PassKind::Apply);
        let (params, order) = bind(key, nest, layout, ops, false);
        let variant = variant_of(layout, key, &params, &order);
        let other_split = tiles(key, nest, layout, &params, jit::cache_resident())
            .or_else(|| split(key, nest, layout, (&params, &order), variant));
        if other_split.is_some() {
            return None;
        }
        let out = ops.get(Operand::Output);
        let split = partial_split(key, nest, layout, (&params, &order), out, 1)?;
        let mut buffers = partial_buffers(key, nest, out, split.chunks)?;
        let demand = Demand::Once(layout.domain_size(&params));
        let entry = match self.entry(PassKind::Apply, variant, false, demand) {
            Ok(entry) => entry,
            Err(e) => return Some(Err(Stop::Failed(e))),
        };
        let call = Call {
            entry,
            pointers: pointers(ops),
            params,
        };
        let status = call.run_partials(layout, &split, &mut buffers, false);
        Some(
            status
                .map(|()| buffers)
                .map_err(|counters| Stop::BadIndex(domain_position(counters, &order))),
        )
    }

    /// A writing pass of a scatter on the engine: every bucket in parallel.
    fn run_buckets(
        &self,
        pass: PassKind,
        nest: &LoopNest,
        layout: &ParamLayout,
        ops: &Operands<'_>,
        buckets: &Buckets,
    ) -> std::result::Result<(), Stop> {
        let (params, order) = bind(&self.plan.key, nest, layout, ops, true);
        // A one-loop listed pass has no row to compile a variant for.
        let variant = match layout.depth {
            1 => Variant::Strided,
            _ => variant_of(layout, &self.plan.key, &params, &order),
        };
        let call = Call {
            entry: self.entry(
                pass,
                variant,
                true,
                Demand::Once(layout.domain_size(&params)),
            )?,
            pointers: pointers(ops),
            params,
        };
        let work =
            pass_work(&self.plan.key, nest, layout, &call.params, variant).unwrap_or(i64::MAX);
        let helps = listed_caller_helps(work, threads::available());
        threads::try_each(buckets.len(), helps, |b| {
            call.run_listed(layout, buckets, b)
        })
        .map_err(|counters| Stop::BadIndex(domain_position(counters, &order)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::bind::Order;
    use super::*;
    use crate::tensor::TensorViewMut;
    use scatterjit_ir::{DType, Plan, Reduction};

    /// Row-major element strides of `shape`.
    fn row_major(shape: &[usize]) -> Vec<isize> {
        scatterjit_ir::row_major_strides(shape)
            .iter()
            .map(|&x| x as isize)
            .collect()
    }

    /// `f()` in a pool of `threads` threads.
    fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(f)
    }

    /// The parameters and loop order the apply pass of `key` (ScatterElements or
    /// GatherElements, i64 indices) binds for row-major data and indices of these shapes.
    fn bind_apply(key: KernelKey, data: &[usize], indices: &[usize]) -> (Plan, Vec<i64>, Order) {
        bind_apply_strided(key, data, indices, &row_major(indices))
    }

    /// [`bind_apply`] with indices of element strides `index_strides`.
    fn bind_apply_strided(
        key: KernelKey,
        data: &[usize],
        indices: &[usize],
        index_strides: &[isize],
    ) -> (Plan, Vec<i64>, Order) {
        let dtype = key.dtype();
        let plan = Plan::new(key);
        let nest = plan.pass(PassKind::Apply).unwrap();
        let numel = |s: &[usize]| s.iter().product::<usize>();
        let scatters = key.kind() == OpKind::ScatterElements;
        let out_shape = if scatters { data } else { indices };
        let mut out = vec![0u8; numel(out_shape) * dtype.size()];
        let idx = vec![0u8; numel(indices) * 8];
        let read = vec![0u8; numel(if scatters { indices } else { data }) * dtype.size()];
        let (ds, is) = (row_major(data), row_major(indices));
        let mut ov =
            TensorViewMut::new(dtype, out_shape, &row_major(out_shape), 0, &mut out).unwrap();
        let iv = TensorView::new(DType::I64, indices, index_strides, 0, &idx).unwrap();
        let ops = Operands::default()
            .with(Operand::Indices, iv.raw())
            .with(Operand::Output, ov.raw());
        let (read_view, operand) = match scatters {
            true => (
                TensorView::new(dtype, indices, &is, 0, &read),
                Operand::Updates,
            ),
            false => (TensorView::new(dtype, data, &ds, 0, &read), Operand::Data),
        };
        let read_view = read_view.unwrap();
        let ops = ops.with(operand, read_view.raw());
        let (params, order) = bind(&key, nest, &ParamLayout::of(nest), &ops, false);
        (plan, params, order)
    }

    /// The split on `threads` threads of the apply pass of `key` bound as `bind_apply`
    /// binds it.
    fn apply_split(
        threads: usize,
        key: KernelKey,
        (plan, params, order): (Plan, Vec<i64>, Order),
    ) -> Option<Split> {
        let nest = plan.pass(PassKind::Apply).unwrap();
        let layout = ParamLayout::of(nest);
        let variant = variant_of(&layout, &key, &params, &order);
        on_threads(threads, || {
            split(&key, nest, &layout, (&params, &order), variant)
        })
    }

    #[test]
    fn chunks_start_on_lines_of_the_written_access() {
        // Four-byte elements, 16 to a line; the written access (entry 1) steps forward
        // from 16 bytes past a line, entry 0 eight bytes per counter.
        let line = [0u8; 3 * LINE];
        let base = line
            .as_ptr()
            .wrapping_add(LINE - line.as_ptr() as usize % LINE);
        for (step, offset) in [(4isize, 16usize), (-4, 16), (4, 0), (4, 2), (8, 40)] {
            let split = Split {
                level: 0,
                chunks: 5,
                steps: vec![(0, 8), (1, step)],
                align: 16,
                aligned: Some(1),
                caller_helps: false,
            };
            let written = base.wrapping_add(offset) as *mut u8;
            let phase = split.phase(&[std::ptr::null_mut(), written]);
            for dim in [0i64, 1, 17, 100, 1000] {
                let starts: Vec<i64> = (0..=5).map(|c| split.start(dim, c, phase)).collect();
                assert_eq!((starts[0], starts[5]), (0, dim));
                assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
                for &at in &starts[1..5] {
                    let address = written as isize + at as isize * step;
                    // Elements that cannot start a line (2 bytes off) keep plain multiples.
                    if at > 0 && at < dim && offset % 4 == 0 {
                        assert_eq!(
                            address as usize % LINE,
                            0,
                            "{step} {offset} {dim} {starts:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn only_small_integer_outputs_of_axis_only_scatters_take_partials() {
        // The chunks of partial outputs on `threads` threads, at least `least` of them.
        let decide_on = |threads: usize,
                         least: i64,
                         dtype: DType,
                         data: &[usize],
                         indices: &[usize]|
         -> Option<usize> {
            let key = KernelKey::scatter_elements(
                dtype,
                DType::I64,
                data.len(),
                -1,
                Reduction::Add,
                true,
            )
            .unwrap();
            let (plan, params, order) = bind_apply(key, data, indices);
            let (key, nest) = (plan.key, plan.pass(PassKind::Apply).unwrap());
            let layout = ParamLayout::of(nest);
            let ds = row_major(data);
            on_threads(threads, || {
                let variant = variant_of(&layout, &key, &params, &order);
                assert!(split(&key, nest, &layout, (&params, &order), variant).is_none());
                let out = RawOperand {
                    address: crate::tensor::Address::Read(std::ptr::null()),
                    shape: data,
                    strides: &ds,
                };
                partial_split(&key, nest, &layout, (&params, &order), &out, least).map(|s| s.chunks)
            })
        };
        let decide =
            |dtype, data: &[usize], indices: &[usize]| decide_on(2, 2, dtype, data, indices);
        let grain = 1 << 15;
        assert_eq!(decide(DType::I64, &[1, 1000], &[1, 4 * grain]), Some(2));
        assert_eq!(decide(DType::Bool, &[1000], &[4 * grain]), Some(2));
        // Float sums must stay in order; a big output costs more to fold than it saves.
        assert_eq!(decide(DType::F32, &[1, 1000], &[1, 4 * grain]), None);
        assert_eq!(decide(DType::I64, &[1, grain], &[1, 2 * grain]), None);
        // One thread's apply reduces into one partial output where it checks as it reads.
        assert_eq!(
            decide_on(1, 1, DType::I64, &[1, 1000], &[1, 4 * grain]),
            Some(1)
        );
        assert_eq!(
            decide_on(1, 2, DType::I64, &[1, 1000], &[1, 4 * grain]),
            None
        );
    }

    #[test]
    fn rows_that_pick_element_by_element_split_in_lines_or_shared_vectors() {
        // (level, chunks, align) of the split of a scatter add along axis 0 on `threads`
        // threads, whose rows are too narrow for tiles: its only split cuts each row.
        let split_of = |threads: usize, data: &[usize], indices: &[usize]| {
            let key =
                KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Add, true)
                    .unwrap();
            apply_split(threads, key, bind_apply(key, data, indices))
                .map(|s| (s.level, s.chunks, s.align))
        };
        // Rows of 64 i64 indices (512 bytes, the widest access): chunks of two cache lines
        // of it, starting on a line of the f32 output they write.
        assert_eq!(split_of(2, &[65536, 64], &[65536, 64]), Some((1, 4, 16)));
        // Of 256: four chunks per thread.
        assert_eq!(split_of(2, &[65536, 256], &[65536, 256]), Some((1, 8, 16)));
        // Of 16 (128 bytes), two chunks per thread, sharing lines.
        assert_eq!(split_of(2, &[262144, 16], &[262144, 16]), Some((1, 4, 4)));
        // Two lines a chunk would leave 16 threads idle: 32 chunks of 16 bytes.
        assert_eq!(split_of(16, &[65536, 64], &[65536, 64]), Some((1, 32, 2)));
        // A row narrower than a vector per thread gives each chunk one vector.
        assert_eq!(split_of(16, &[262144, 8], &[262144, 8]), Some((1, 4, 2)));
        // Picks into a destination that stays in a core's private cache (16 KiB) run on
        // one thread, however many updates.
        let small = jit::private_cache() > 16 << 10;
        assert_eq!(split_of(2, &[64, 64], &[4096, 64]).is_none(), small);
        assert_eq!(split_of(16, &[64, 64], &[65536, 64]).is_none(), small);
    }

    #[test]
    fn scattered_whole_rows_split_in_pairs_of_lines() {
        // (level, chunks) of the split of a scatter `reduction` along axis 0 whose index
        // is broadcast along each row (`expand_as`): a row is picked whole, and cut only
        // into chunks of at least two lines of its widest access.
        let split_into = |rows: usize, reduction: Reduction, threads: usize, width: usize| {
            let key =
                KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, reduction, true).unwrap();
            let (data, indices) = ([rows, width], [65536, width]);
            let bound = bind_apply_strided(key, &data, &indices, &[1, 0]);
            apply_split(threads, key, bound).map(|s| (s.level, s.chunks))
        };
        // Into a destination past any second-level cache (16 MiB and more).
        let split_of = |reduction, threads, width| split_into(65536, reduction, threads, width);
        // Rows of 64 f32 (256 bytes): two chunks, on any pool.
        assert_eq!(split_of(Reduction::Max, 2, 64), Some((1, 2)));
        assert_eq!(split_of(Reduction::Add, 3, 64), Some((1, 2)));
        // Of 32 (128 bytes): whole.
        assert_eq!(split_of(Reduction::Add, 2, 32), None);
        // Of 1024 (4 KiB): four chunks per thread.
        assert_eq!(split_of(Reduction::Add, 2, 1024), Some((1, 8)));
        // Into a destination that stays in a core's private cache (64 KiB): whole.
        let small = jit::private_cache() > 64 << 10;
        assert_eq!(split_into(256, Reduction::Add, 2, 64).is_none(), small);
    }

    /// The work and split (level, chunks) on `threads` threads of the apply pass of a
    /// Gather of f32 along `axis` on row-major operands, and what [`Kernel::work`] says.
    fn gather_work(
        threads: usize,
        data: &[usize],
        indices: &[usize],
        axis: usize,
    ) -> (i64, Option<(usize, usize)>, usize) {
        let key = KernelKey::gather(
            DType::F32,
            DType::I64,
            data.len(),
            indices.len(),
            axis as i64,
        )
        .unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let out_shape: Vec<usize> = [&data[..axis], indices, &data[axis + 1..]].concat();
        let numel = |s: &[usize]| s.iter().product::<usize>();
        let mut out = vec![0u8; numel(&out_shape) * 4];
        let (bytes, idx) = (vec![0u8; numel(data) * 4], vec![0u8; numel(indices) * 8]);
        let mut ov =
            TensorViewMut::new(DType::F32, &out_shape, &row_major(&out_shape), 0, &mut out)
                .unwrap();
        let dv = TensorView::new(DType::F32, data, &row_major(data), 0, &bytes).unwrap();
        let iv = TensorView::new(DType::I64, indices, &row_major(indices), 0, &idx).unwrap();
        let ops = Operands::default()
            .with(Operand::Data, dv.raw())
            .with(Operand::Indices, iv.raw())
            .with(Operand::Output, ov.raw());
        let nest = kernel.plan.pass(PassKind::Apply).unwrap();
        let layout = ParamLayout::of(nest);
        let (params, order) = bind(&key, nest, &layout, &ops, false);
        let variant = variant_of(&layout, &key, &params, &order);
        let work = pass_work(&key, nest, &layout, &params, variant).unwrap();
        let split = on_threads(threads, || {
            split(&key, nest, &layout, (&params, &order), variant).map(|s| (s.level, s.chunks))
        });
        (work, split, kernel.work(data, indices))
    }

    #[test]
    fn whole_rows_count_their_bytes_and_picks_their_elements() {
        // 128 rows of 4 KiB (2^17 elements): 8 units a row and one per 16 bytes, under
        // the 2^16 a pass splits from.
        let (work, split, said) = gather_work(2, &[512, 1024], &[128], 0);
        assert_eq!((work, split), (128 * (8 + 256), None));
        // 4096 rows of 1 KiB: four chunks per thread.
        let (work, split, _) = gather_work(2, &[4096, 256], &[4096], 0);
        assert_eq!((work, split), (4096 * (8 + 64), Some((0, 8))));
        // 2^17 picks along the last axis: an element each.
        let (work, split, picks_said) = gather_work(2, &[1024, 512], &[128], 1);
        assert_eq!((work, split), (1 << 17, Some((0, 4))));
        // What a caller with a pool of its own is told, for row-major operands.
        assert_eq!((said, picks_said), (128 * (8 + 256), 1 << 17));
        for (data, indices, axis) in [
            (&[64, 100, 32][..], &[3, 50][..], 1),
            (&[1000, 16], &[40000], 0),
            (&[8, 4096, 3], &[2], 2),
        ] {
            let (work, _, said) = gather_work(1, data, indices, axis);
            assert_eq!(said as i64, work, "{data:?} {indices:?} {axis}");
        }
        // Narrow rows that run in blocks (picks of 16 bytes) weigh their elements.
        let key = KernelKey::gather(DType::F32, DType::I64, 3, 1, 1).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let (data, indices) = ([4096, 64, 4], [2]);
        let (ds, is) = (row_major(&data), row_major(&indices));
        assert!(kernel.takes_blocks(&data, &ds, &indices, &is));
        assert_eq!(kernel.work(&data, &indices), 4096 * 2 * 4);
    }

    #[test]
    fn rows_combined_through_a_broadcast_index_count_their_bytes() {
        // The apply's work and whether the engine lists buckets on two threads, for a
        // scatter of `rows` rows of 64 `dtype` (256 bytes of f32) along axis 0 into
        // `rows / 4`.
        let decide_as = |dtype: DType, reduction: Reduction, rows: usize, expanded: bool| {
            let key =
                KernelKey::scatter_elements(dtype, DType::I64, 2, 0, reduction, true).unwrap();
            let shape = [rows, 64];
            let strides = if expanded {
                vec![1, 0]
            } else {
                row_major(&shape)
            };
            let (plan, params, order) = bind_apply_strided(key, &[rows / 4, 64], &shape, &strides);
            let nest = plan.pass(PassKind::Apply).unwrap();
            let layout = ParamLayout::of(nest);
            let variant = variant_of(&layout, &key, &params, &order);
            let work = pass_work(&key, nest, &layout, &params, variant).unwrap();
            let kernel = Kernel::compile(key).unwrap();
            let idx = vec![0u8; rows * 64 * 8];
            let view = TensorView::new(DType::I64, &shape, &strides, 0, &idx).unwrap();
            let sorted = on_threads(2, || kernel.sorted(&[rows / 4, 64], &view));
            (work, sorted.is_some_and(|s| s.buckets.is_some()))
        };
        let decide = |reduction, rows, expanded| decide_as(DType::F32, reduction, rows, expanded);
        // A reduction moves each row's bytes three times: 8 units and 256 * 3 / 32 a row.
        // 1,024 rows weigh less than a split's 2^16 (as 2^16 elements they weighed more):
        // no buckets. 4,096 rows weigh more.
        assert_eq!(decide(Reduction::Add, 1024, true), (1024 * (8 + 24), false));
        assert_eq!(decide(Reduction::Max, 4096, true), (4096 * (8 + 24), true));
        // A copy (`none`) moves them twice.
        assert_eq!(decide(Reduction::None, 4096, true).0, 4096 * (8 + 16));
        // A materialized index moves along the row: its elements, which weigh more.
        assert_eq!(decide(Reduction::Add, 1024, false).0, 1024 * 64);
        // Into a destination well inside a core's private cache (128 KiB), an add through
        // an expanded index takes one thread's ordinary pass, as does an integer max;
        // float max, and a materialized index, still bucket; past any such cache (4 MiB),
        // all bucket.
        let small = jit::private_cache() / BUCKETS_CACHED_SHARE > 128 << 10;
        assert_eq!(decide(Reduction::Add, 2048, true).1, !small);
        assert_eq!(decide_as(DType::I32, Reduction::Max, 2048, true).1, !small);
        assert!(decide(Reduction::Max, 2048, true).1);
        assert!(decide(Reduction::Add, 2048, false).1);
        assert!(decide(Reduction::Add, 65536, true).1);
        assert!(decide(Reduction::Max, 65536, true).1);
    }

    #[test]
    fn element_picks_along_an_outer_dim_run_in_tiles() {
        // (level, chunks) of the tiles of the apply pass of `key` on one thread, where the
        // last-level cache holds 8 MiB of picks.
        let tiles_of = |key: KernelKey, data: &[usize], indices: &[usize]| {
            let (plan, params, _) = bind_apply(key, data, indices);
            let nest = plan.pass(PassKind::Apply).unwrap();
            let layout = ParamLayout::of(nest);
            on_threads(1, || tiles(&key, nest, &layout, &params, 8 << 20))
                .map(|s| (s.level, s.chunks))
        };
        let add = |axis: i64, rank: usize| {
            KernelKey::scatter_elements(DType::F32, DType::I64, rank, axis, Reduction::Add, true)
                .unwrap()
        };
        let decide = |axis: i64, data: &[usize], indices: &[usize]| {
            tiles_of(add(axis, data.len()), data, indices)
        };
        // 4096 rows of 4 KiB picked from: bands of 1 KiB, each reaching 4 MiB.
        assert_eq!(decide(0, &[4096, 1024], &[64, 1024]), Some((1, 4)));
        // 2048 of them: bands of 1 KiB reach 2 MiB, over the budget. A scatter keeps them
        // (its only parallel split); a gather, whose picks reach 8 MiB untiled, which stay
        // in the last-level cache, runs untiled.
        assert_eq!(decide(0, &[2048, 1024], &[64, 1024]), Some((1, 4)));
        let gather = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
        assert_eq!(tiles_of(gather, &[2048, 1024], &[64, 1024]), None);
        assert_eq!(tiles_of(gather, &[4096, 1024], &[64, 1024]), Some((1, 4)));
        // 256 rows of 64 KiB: bands of 1 KiB reach 256 KiB.
        assert_eq!(decide(0, &[256, 16384], &[8, 16384]), Some((1, 64)));
        // Along axis 0 of rank 3, the last two loops merge (`bind::coalesce`) into rows
        // of 32 KiB, after the merged loop and the axis's: 256 slices of 32 KiB, cut into
        // bands of 1 KiB.
        assert_eq!(decide(0, &[256, 128, 64], &[8, 128, 64]), Some((2, 32)));
        // Along the middle axis of rank 3, only the last loop picks.
        assert_eq!(decide(1, &[2, 256, 16384], &[2, 8, 16384]), Some((2, 64)));
        // Picks within a row (the Touched variant's case), from 256 KiB, or from rows of
        // a band (GNN messages) need none.
        assert_eq!(decide(1, &[64, 4096], &[64, 1024]), None);
        assert_eq!(decide(0, &[64, 1024], &[64, 1024]), None);
        assert_eq!(decide(0, &[50000, 64], &[1024, 64]), None);
    }

    #[test]
    fn empty_indices_with_huge_dims_are_not_sorted() {
        // The dims before the axis multiply past usize::MAX; the 0 makes them empty.
        let huge = 1usize << 33;
        let shape = [huge, huge, 0];
        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 3, 2, Reduction::Add, true)
            .unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let indices = crate::TensorView::new(DType::I64, &shape, &[0, 0, 0], 0, &[]).unwrap();
        assert!(on_threads(3, || kernel.sorted(&shape, &indices)).is_none());
    }
}
