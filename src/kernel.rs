//! Compiled kernels and their safe calls: check operands against the key, bind strides into
//! the parameter block, run the passes in order.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

use scatterjit_ir::{
    checked_nbytes, checked_numel, unravel, Combine, Coord, DType, Error as IrError, KernelKey,
    LoopNest, Meta, OpKind, Operand, PassKind, Plan, Tensor, TensorRole, OPERAND_SLOTS,
};

use crate::abi::{self, ParamLayout, Still, Variant, STATUS_OK};
use crate::alloc;
use crate::check;
use crate::codegen;
use crate::engine::{self, Buckets};
use crate::error::Buffer;
use crate::error::{Error, Result};
use crate::jit::{self, Code, Listing, PassFn};
use crate::mean::{self, MeanScratch};
use crate::once::OnceOk;
use crate::partials;
use crate::tensor::{self, RawOperand, TensorView, TensorViewMut};

/// A compiled kernel: native code for every pass of one [`KernelKey`]. Its code stays
/// mapped as long as any handle (`Arc<Kernel>`) to it lives.
///
/// Kernels work on byte views, so none exists for a string key: [`Kernel::compile`] (and
/// so [`crate::KernelCache::get`]) refuses one with
/// [`UnsupportedDType`](scatterjit_ir::Error::UnsupportedDType). String tensors go through
/// [`crate::run`] and the other owned-tensor functions, which run these kernels on integer
/// handles of the strings.
pub struct Kernel {
    plan: Plan,
    /// Per pass of the plan (same order), per [`Variant`] (at `Variant::slot`, then again
    /// for the listed form at `Variant::COUNT + slot`): the code, compiled on first use (a failed compile
    /// is retried by the next call).
    code: Vec<Vec<OnceOk<Code>>>,
    compile_time: Duration,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("key", &self.plan.key.to_string())
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

/// The operands of one call, by [`Operand`] slot.
#[derive(Default)]
struct Operands<'a> {
    slots: [Option<RawOperand<'a>>; OPERAND_SLOTS],
}

impl<'a> Operands<'a> {
    fn with(mut self, operand: Operand, raw: RawOperand<'a>) -> Self {
        self.slots[operand as usize] = Some(raw);
        self
    }

    fn get(&self, operand: Operand) -> &RawOperand<'a> {
        self.slots[operand as usize]
            .as_ref()
            .expect("every operand a pass accesses is bound before it runs")
    }
}

/// Why a pass stopped early.
enum Stop {
    /// At a bad index; the domain position (loop counters by domain dim) at that point.
    BadIndex(Vec<usize>),
    /// The pass could not be compiled.
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

/// Domains with fewer elements than twice this run on the calling thread: below it, waking
/// the pool costs more than the work. A chunk has at least this many elements.
static PARALLEL_GRAIN: AtomicI64 = AtomicI64::new(1 << 15);

/// Sets the smallest chunk of a parallel pass, in elements (default 32768). Results do not
/// depend on it; tests lower it so that small problems exercise the parallel split.
#[doc(hidden)]
pub fn set_parallel_grain(elements: usize) {
    PARALLEL_GRAIN.store(elements.clamp(1, 1 << 40) as i64, Ordering::Relaxed);
}

/// How a pass is cut into chunks that run in parallel: loop `level` (in the bound loop
/// order) is split into `chunks` contiguous ranges.
struct Split {
    level: usize,
    chunks: usize,
    /// Per access: `(operand slot, byte stride along the split loop)`.
    steps: Vec<(usize, isize)>,
    /// Chunks start at multiples of this many counters (a cache line of the widest access
    /// when the split cuts rows), so that no two threads write one line.
    align: i64,
}

impl Split {
    /// The first counter of chunk `c` along the split loop of extent `dim`.
    fn start(&self, dim: i64, c: usize) -> i64 {
        if c >= self.chunks {
            return dim;
        }
        let even = (dim as i128 * c as i128 / self.chunks as i128) as i64;
        even / self.align * self.align
    }
}

/// A split of the innermost loop gives each chunk at least this many bytes of its widest
/// access: whole pages, never slivers of a short row.
const MIN_ROW_CHUNK: usize = 4096;

/// Chunks per thread, so that a thread that finishes early takes another.
const CHUNKS_PER_THREAD: usize = 4;

/// Chooses how to split `nest` over the current rayon pool, or `None` to run it whole.
///
/// Only loops whose chunks own disjoint destination elements may be split: any loop of a
/// pass without an indexed destination (copy, check, the gathers) and, for scatter passes,
/// any loop but the axis. Each chunk runs the same loop nest on a sub-range in the same
/// order, so every destination element sees the same updates in the same order as on one
/// thread, and results are bit-identical.
fn split(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    params: &[i64],
    order: &[usize],
) -> Option<Split> {
    let threads = rayon::current_num_threads();
    let grain = PARALLEL_GRAIN.load(Ordering::Relaxed);
    let depth = layout.depth;
    let dims = &params[..depth];
    let work = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    if threads < 2 || work < 2 * grain {
        return None;
    }
    let indexed_dest = nest
        .dest
        .as_ref()
        .is_some_and(|dest| dest.indexed_dim().is_some());
    let splittable = |n: usize| !(indexed_dest && order[n] == key.axis()) && dims[n] >= 2;
    let level = (0..depth).find(|&n| splittable(n))?;
    let steps = steps(key, layout, params, level);
    let max_chunks = (work / grain) as usize;
    let mut chunks = (threads * CHUNKS_PER_THREAD)
        .min(dims[level] as usize)
        .min(max_chunks);
    let mut align = 1;
    if level + 1 == depth {
        // Innermost splits cut rows: chunks of whole pages, starting on cache lines.
        let widest = steps
            .iter()
            .map(|s| s.1.unsigned_abs())
            .max()
            .unwrap_or(1)
            .max(1);
        chunks = chunks.min(dims[level] as usize * widest / MIN_ROW_CHUNK);
        if widest.is_power_of_two() && widest <= 64 {
            align = (64 / widest) as i64;
        }
    }
    (chunks >= 2).then_some(Split {
        level,
        chunks,
        steps,
        align,
    })
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
            let bytes = codegen::element_size(key, slots.operand) as isize;
            let stride = params[slots.strides_at + level] as isize;
            (slots.operand as usize, stride * bytes)
        })
        .collect()
}

/// How to cut a scatter's apply pass along its axis into chunks that reduce into partial
/// outputs (see `crate::partials`); for when [`split`] found no other loop to split.
///
/// Each chunk but the first costs an output-sized fill and fold, so the output must be
/// small beside the work: at most a quarter of a chunk's elements.
fn partial_split(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    params: &[i64],
    order: &[usize],
    out: &RawOperand<'_>,
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
    let threads = rayon::current_num_threads() as i64;
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
    (chunks >= 2).then(|| Split {
        level,
        chunks: chunks as usize,
        steps: steps(key, layout, params, level),
        align: 1,
    })
}

/// One bound call of a compiled pass: entry, operand addresses and parameter block.
struct Call {
    entry: PassFn,
    pointers: [*mut u8; OPERAND_SLOTS],
    params: Vec<i64>,
}

// SAFETY: the pointers are operand addresses valid for the whole call (see `Call::run`).
// Chunks that run on other threads write disjoint elements (see `split`; the engine's
// buckets own disjoint destination ranges) or each their own partial output
// (`partial_split`), and only read `Call` itself.
unsafe impl Sync for Call {}

impl Call {
    /// Runs the whole pass, or chunk `c` of `split`; on a bad index, the loop counters (in
    /// loop order, relative to the whole pass).
    fn run(
        &self,
        layout: &ParamLayout,
        chunk: Option<(&Split, usize)>,
    ) -> std::result::Result<(), Vec<usize>> {
        let mut params = self.params.clone();
        let mut pointers = self.pointers;
        let mut first = 0i64;
        if let Some((split, c)) = chunk {
            let dim = params[split.level];
            first = split.start(dim, c);
            params[split.level] = split.start(dim, c + 1) - first;
            for &(slot, step) in &split.steps {
                // wrapping_offset: a zero-size operand has a dangling base; nothing is
                // dereferenced unless the chunk visits an element, which is in bounds.
                pointers[slot] = pointers[slot].wrapping_offset(first as isize * step);
            }
        }
        // SAFETY: `entry` was compiled from the nest whose parameter layout is `layout`, and
        // `bind` filled `params` from operands whose views prove every position of their
        // shapes lies inside their memory; the caller validated the shapes against the op
        // (`Op::validate`), so every position the loop nest reaches is a position of the
        // accessed view, and indexed coordinates are bounds-checked in the code against
        // `s`. A chunk is a sub-range of one loop, its bases moved to the range's start,
        // so it reaches a subset of those positions. Writable operands come from
        // `TensorViewMut`s or scratch buffers owned by this call, which alias no input, and
        // concurrent chunks write disjoint elements (`split`) or their own partial output,
        // an output-sized row-major buffer in place of a row-major output
        // (`partial_split`).
        let status = unsafe { (self.entry)(pointers.as_ptr(), params.as_mut_ptr()) };
        if status == STATUS_OK {
            return Ok(());
        }
        let mut counters: Vec<usize> = params[layout.err_at..layout.err_at + layout.depth]
            .iter()
            .map(|&c| c as usize)
            .collect();
        if let Some((split, _)) = chunk {
            counters[split.level] += first as usize;
        }
        Err(counters)
    }

    /// Runs the listed form of the pass on bucket `b` of `buckets` (see `crate::engine`);
    /// on a bad index, the loop counters (in loop order, the first one an axis coordinate).
    fn run_listed(
        &self,
        layout: &ParamLayout,
        buckets: &Buckets,
        b: usize,
    ) -> std::result::Result<(), Vec<usize>> {
        let (rows, len) = buckets.bucket(b);
        if len == 0 {
            return Ok(());
        }
        let mut params = self.params.clone();
        params[0] = len as i64;
        params[layout.list_at] = rows as i64;
        // SAFETY: as in `Call::run`, with the outermost loop (the axis) walking the bucket's
        // rows, which are axis coordinates below the dim bound in `self.params[0]`, so the
        // pass reaches a subset of the positions of the whole pass; the list lives in
        // `buckets`, borrowed for the call. Buckets own disjoint destination ranges, so
        // concurrent buckets write disjoint elements.
        let status = unsafe { (self.entry)(self.pointers.as_ptr(), params.as_mut_ptr()) };
        if status == STATUS_OK {
            return Ok(());
        }
        let mut counters: Vec<usize> = params[layout.err_at..layout.err_at + layout.depth]
            .iter()
            .map(|&c| c as usize)
            .collect();
        counters[0] = buckets.row(b, counters[0]);
        Err(counters)
    }
}

impl Kernel {
    /// Compiles `key`: the passes that write (init and apply) for contiguous operands. The
    /// other passes and variants (strided operands, the compiled copy and check) compile on
    /// first use. Prefer [`crate::KernelCache::get`], which compiles each key once.
    pub fn compile(key: KernelKey) -> Result<Kernel> {
        refuse_strings(&key)?;
        let start = Instant::now();
        let plan = Plan::new(key);
        let kernel = Kernel {
            code: plan
                .passes
                .iter()
                .map(|_| (0..2 * Variant::COUNT).map(|_| OnceOk::default()).collect())
                .collect(),
            plan,
            compile_time: Duration::ZERO,
        };
        for pass in [PassKind::Init, PassKind::Apply] {
            if kernel.plan.pass(pass).is_some() {
                kernel.entry(pass, Variant::Contiguous, false)?;
            }
        }
        Ok(Kernel {
            compile_time: start.elapsed(),
            ..kernel
        })
    }

    /// Compiles every pass of `key` in both variants and returns their text: CLIF as
    /// built, CLIF optimized, machine code.
    pub fn listings(key: KernelKey) -> Result<Vec<Listing>> {
        refuse_strings(&key)?;
        let plan = Plan::new(key);
        let mut out = Vec::new();
        for nest in &plan.passes {
            for variant in Variant::ALL {
                let (_, listing) = jit::compile(&plan, nest.pass, variant, false, true)?;
                out.extend(listing);
            }
        }
        Ok(out)
    }

    /// The code of `pass` in `variant` (its outermost loop `listed` or not), compiled now if
    /// it is the first use.
    fn entry(&self, pass: PassKind, variant: Variant, listed: bool) -> Result<PassFn> {
        let n = self
            .plan
            .passes
            .iter()
            .position(|p| p.pass == pass)
            .expect("callers ask only for planned passes");
        let v = variant.slot() + usize::from(listed) * Variant::COUNT;
        self.code[n][v]
            .get_or_try_init(|| {
                jit::compile(&self.plan, pass, variant, listed, false).map(|(code, _)| code)
            })
            .map(Code::entry)
    }

    /// The key this kernel computes.
    pub fn key(&self) -> &KernelKey {
        &self.plan.key
    }

    /// Its loop-nest plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Wall time spent compiling it.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Validates operands against this kernel's key; returns the output shape.
    fn validate(
        &self,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<Vec<usize>> {
        self.validate_meta(data.meta(), indices.meta(), updates.map(|u| u.meta()))
    }

    /// [`Self::validate`] on dtypes and shapes alone.
    pub(crate) fn validate_meta(
        &self,
        data: Meta<'_>,
        indices: Meta<'_>,
        updates: Option<Meta<'_>>,
    ) -> Result<Vec<usize>> {
        let v = self.plan.key.op().validate(data, indices, updates)?;
        if v.key != self.plan.key {
            return Err(Error::Invalid(IrError::InvalidKey {
                key: self.plan.key.to_string(),
                reason: format!("the operands need kernel {}", v.key),
            }));
        }
        Ok(v.out_shape)
    }

    /// Refuses an output that shares memory with an input. Safe code cannot build one (a
    /// `&mut [u8]` never aliases a `&[u8]`), but views made from raw buffers could, and the
    /// passes read inputs after writing the output.
    fn check_disjoint(
        &self,
        out: &TensorViewMut<'_>,
        inputs: [(TensorRole, Option<&TensorView<'_>>); 3],
    ) -> Result<()> {
        for (tensor, input) in inputs {
            if input.is_some_and(|input| tensor::overlaps(out.span(), input.span())) {
                return Err(Error::Invalid(IrError::Overlap {
                    op: self.plan.key.kind(),
                    tensor,
                }));
            }
        }
        Ok(())
    }

    /// `mean`'s scratch for an output shaped like `out` (`None` for other reductions),
    /// allocated before the first write.
    fn mean_scratch(&self, out: &TensorViewMut<'_>) -> Result<Option<MeanScratch>> {
        if self.plan.mean_accumulator().is_none() {
            return Ok(None);
        }
        let key = &self.plan.key;
        MeanScratch::alloc(key.kind(), key.dtype(), out.shape()).map(Some)
    }

    /// Runs the op out of place: a new output tensor. The inputs may be any strided views.
    pub fn run(
        &self,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<Tensor> {
        let out_shape = self.validate(data, indices, updates)?;
        let (op, dtype) = (self.plan.key.kind(), self.plan.key.dtype());
        let len = checked_nbytes(dtype, &out_shape)?;
        // Both caps before either allocation.
        alloc::check(op, Buffer::Output, len as u128)?;
        if self.plan.mean_accumulator().is_some() {
            MeanScratch::check(op, dtype, &out_shape)?;
        }
        let bytes = alloc::zeroed(op, Buffer::Output, len)?;
        let mut out = Tensor::from_bytes(dtype, out_shape, bytes)?;
        let mut view = TensorViewMut::from(&mut out);
        // The output is ours: a bad index may stop a pass midway, and the tensor is dropped.
        self.execute(&mut view, data, indices, updates, false)?;
        Ok(out)
    }

    /// Runs the op into a caller's output view (the ONNX Runtime / OpenVINO style of
    /// reusing buffers). All indices are checked before the first write, so on error `out`
    /// is unchanged.
    pub fn run_into(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<()> {
        let out_shape = self.validate(data, indices, updates)?;
        self.check_out(out.meta(), &out_shape)?;
        let inputs = [
            (TensorRole::Data, Some(data)),
            (TensorRole::Indices, Some(indices)),
            (TensorRole::Updates, updates),
        ];
        self.check_disjoint(out, inputs)?;
        self.execute(out, data, indices, updates, true)
    }

    /// An error unless a caller's output has this kernel's dtype and `out_shape`.
    pub(crate) fn check_out(&self, out: Meta<'_>, out_shape: &[usize]) -> Result<()> {
        if out.shape != out_shape || out.dtype != self.plan.key.dtype() {
            return Err(Error::Invalid(IrError::InvalidView {
                tensor: TensorRole::Output,
                reason: format!(
                    "expected {} {:?}, got {} {:?}",
                    self.plan.key.dtype(),
                    out_shape,
                    out.dtype,
                    out.shape
                ),
            }));
        }
        Ok(())
    }

    /// ScatterElements in place (PyTorch `scatter_`): `data` is input and output. All
    /// indices are checked before the first write, so on error `data` is unchanged.
    pub fn scatter_in_place(
        &self,
        data: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
    ) -> Result<()> {
        if self.plan.key.kind() != OpKind::ScatterElements {
            return Err(Error::Invalid(IrError::InvalidKey {
                key: self.plan.key.to_string(),
                reason: "in-place calls need a scatter_elements kernel".into(),
            }));
        }
        self.validate(&data.as_view(), indices, Some(updates))?;
        let inputs = [
            (TensorRole::Indices, Some(indices)),
            (TensorRole::Updates, Some(updates)),
            (TensorRole::Data, None),
        ];
        self.check_disjoint(data, inputs)?;
        // A successful sort has checked every index.
        let buckets = self.buckets(data.shape(), indices);
        if buckets.is_none() {
            self.check_indices(data.shape(), indices)?;
        }
        let scratch = self.mean_scratch(data)?;
        self.update(data, indices, updates, scratch, buckets.as_ref())
    }

    /// Copy (scatter), check if asked, then the passes that write.
    fn execute(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
        check_first: bool,
    ) -> Result<()> {
        let apply = self.plan.pass(PassKind::Apply).expect("every plan applies");
        // A successful sort has checked every index.
        let buckets = updates.and_then(|_| self.buckets(data.shape(), indices));
        // Gather visits indices only where its output is non-empty; check them all anyway.
        let out_empty = out.shape().contains(&0);
        if (check_first || (apply.domain == Operand::Out && out_empty)) && buckets.is_none() {
            self.check_indices(data.shape(), indices)?;
        }
        match updates {
            Some(updates) => {
                let scratch = self.mean_scratch(out)?;
                self.copy(out, data)?;
                self.update(out, indices, updates, scratch, buckets.as_ref())
            }
            None => {
                let ops = Operands::default()
                    .with(Operand::Data, data.raw())
                    .with(Operand::Indices, indices.raw())
                    .with(Operand::Out, out.raw());
                self.run_pass(PassKind::Apply, &ops)
                    .map_err(|stop| self.bad_index(PassKind::Apply, stop, data.shape(), indices))
            }
        }
    }

    /// Out-of-place scatter's first step, `out = data`: a parallel `memcpy` when both are
    /// row-major, the compiled copy pass otherwise.
    fn copy(&self, out: &mut TensorViewMut<'_>, data: &TensorView<'_>) -> Result<()> {
        if let (Some(from), Some(to)) = (data.dense_bytes(), out.dense_bytes_mut()) {
            const CHUNK: usize = 1 << 20;
            if to.len() >= 2 * CHUNK && rayon::current_num_threads() > 1 {
                to.par_chunks_mut(CHUNK)
                    .zip(from.par_chunks(CHUNK))
                    .for_each(|(to, from)| to.copy_from_slice(from));
            } else {
                to.copy_from_slice(from);
            }
            return Ok(());
        }
        let ops = Operands::default()
            .with(Operand::Data, data.raw())
            .with(Operand::Out, out.raw());
        self.run_pass(PassKind::Copy, &ops)
            .map_err(|stop| match stop {
                Stop::Failed(e) => e,
                // Invariant: the copy pass reads no index, so it has no bad-index exit.
                Stop::BadIndex(_) => unreachable!("the copy pass reads no index"),
            })
    }

    /// The engine's buckets (see `crate::engine`) for a scatter into data of `data_shape`
    /// whose only parallelism is along its axis: few positions before the axis, slices
    /// after it of at least a cache line and not so wide that they split well themselves,
    /// many slices. `None` to take the ordinary split, and when the index is not uniform per
    /// slice or holds a bad index.
    ///
    /// Narrower slices (a histogram's single elements) stay off the engine: each bucket
    /// would walk every cache line of indices and updates to use a few bytes of each.
    fn buckets(&self, data_shape: &[usize], indices: &TensorView<'_>) -> Option<Buckets> {
        const CACHE_LINE: usize = 64;
        /// A bucket reads its slices' updates with gaps between them, the wider the more
        /// buckets there are; two per thread balance load for little extra CPU time
        /// (`scatter_add_gnn_expanded_f32` at 2 threads, CPU time per call over one
        /// thread's: about +31% with 1 bucket per thread, +37% with 2, +59% with 4, +76%
        /// with 8).
        const BUCKETS_PER_THREAD: usize = 2;
        /// Slices at least this wide split well along their own loops.
        const WIDE_SLICE: usize = 16 << 10;
        let key = &self.plan.key;
        let threads = rayon::current_num_threads();
        let grain = PARALLEL_GRAIN.load(Ordering::Relaxed) as usize;
        let shape = indices.shape();
        let axis = key.axis();
        let work = checked_numel(shape).ok()?;
        let outer: usize = shape[..axis].iter().product();
        let slice_bytes = shape[axis + 1..].iter().product::<usize>() * key.dtype().size();
        let wanted = key.kind() == OpKind::ScatterElements
            && threads >= 2
            && work >= 2 * grain
            && outer < 4 * threads
            && shape[axis] >= 2 * threads
            && (CACHE_LINE..WIDE_SLICE).contains(&slice_bytes);
        if !wanted {
            return None;
        }
        engine::sort(
            indices,
            axis,
            data_shape[axis],
            BUCKETS_PER_THREAD * threads,
        )
    }

    /// The scatter passes after the copy: init (if any) and apply, with `mean`'s host steps
    /// in `scratch` (from [`Kernel::mean_scratch`]), on the engine when `buckets` are given.
    fn update(
        &self,
        out: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
        scratch: Option<MeanScratch>,
        buckets: Option<&Buckets>,
    ) -> Result<()> {
        let key = self.plan.key;
        let data_shape = out.shape().to_vec();
        let bad = |pass, stop: Stop| self.bad_index(pass, stop, &data_shape, indices);
        // Slices the sort found uniform are read one index each, as an expanded index is.
        let uniform = buckets
            .filter(|b| b.uniform_by_value)
            .map(|_| indices.broadcast_off(key.axis()));
        let indices = uniform.as_ref().unwrap_or(indices);
        if let Some(mut scratch) = scratch {
            scratch.init(out, key.use_init_val());
            let acc_ptr = scratch.acc.as_mut_ptr();
            let count_ptr = scratch.count.as_mut_ptr() as *mut u8;
            let strides: Vec<isize> = scatterjit_ir::row_major_strides(&data_shape)
                .iter()
                .map(|&s| s as isize)
                .collect();
            // Out is not accessed, but bounds the index.
            let ops = Operands::default()
                .with(Operand::Indices, indices.raw())
                .with(Operand::Updates, updates.raw())
                .with(Operand::Out, out.raw())
                .with(
                    Operand::Acc,
                    RawOperand {
                        ptr: acc_ptr,
                        shape: &data_shape,
                        strides: &strides,
                    },
                )
                .with(
                    Operand::Count,
                    RawOperand {
                        ptr: count_ptr,
                        shape: &data_shape,
                        strides: &strides,
                    },
                );
            self.run_pass_with(PassKind::Apply, &ops, None, buckets)
                .map_err(|b| bad(PassKind::Apply, b))?;
            mean::finish(out, &scratch, key.use_init_val());
            return Ok(());
        }
        let ops = Operands::default()
            .with(Operand::Indices, indices.raw())
            .with(Operand::Updates, updates.raw())
            .with(Operand::Out, out.raw());
        let mut partial_outputs = Vec::new();
        for pass in [PassKind::Init, PassKind::Apply] {
            if self.plan.pass(pass).is_some() {
                self.run_pass_with(pass, &ops, Some(&mut partial_outputs), buckets)
                    .map_err(|b| bad(pass, b))?;
            }
        }
        if !partial_outputs.is_empty() {
            let out = out
                .dense_bytes_mut()
                .expect("partial outputs are made for dense outputs only");
            partials::fold(key.reduction(), key.dtype(), out, &partial_outputs);
        }
        Ok(())
    }

    /// Every index in bounds, or the first bad one (row-major) as an error: a host scan for
    /// indices that are row-major once their broadcast dims are dropped (each distinct
    /// index is scanned once), the compiled check pass for other strided ones.
    fn check_indices(&self, data_shape: &[usize], indices: &TensorView<'_>) -> Result<()> {
        let size = data_shape[self.plan.key.axis()];
        let (compact, kept) = indices.compacted();
        if let Some(bytes) = compact.dense_bytes() {
            return match check::first_bad(indices.dtype(), bytes, size) {
                None => Ok(()),
                Some(flat) => {
                    // The first occurrence of that element: 0 along the dropped dims.
                    let mut position = vec![0; indices.shape().len()];
                    for (&d, p) in kept.iter().zip(unravel(flat, compact.shape())) {
                        position[d] = p;
                    }
                    Err(self.index_error(indices, position, size))
                }
            };
        }
        // The check reads only indices; the bound comes from data's shape.
        let strides = vec![0isize; data_shape.len()];
        let ops = Operands::default()
            .with(Operand::Indices, indices.raw())
            .with(
                Operand::Data,
                RawOperand {
                    ptr: std::ptr::null_mut(),
                    shape: data_shape,
                    strides: &strides,
                },
            );
        self.run_pass(PassKind::Check, &ops)
            .map_err(|stop| self.bad_index(PassKind::Check, stop, data_shape, indices))
    }

    /// Fills the parameter block of `pass` from the operands' shapes and strides and calls it,
    /// split over the current rayon pool when the pass is large enough (see [`split`]).
    fn run_pass(&self, pass: PassKind, ops: &Operands<'_>) -> std::result::Result<(), Stop> {
        self.run_pass_with(pass, ops, None, None)
    }

    /// [`Self::run_pass`], and when `partial_outputs` is given, an apply pass that can be
    /// split only along the axis may reduce into partial outputs (see [`partial_split`]),
    /// which it leaves there for the caller to fold into the output. With `buckets`, a pass
    /// that writes through the index runs on the engine (see `crate::engine`): each bucket
    /// is one chunk, the listed form of the pass with the axis as its outermost loop.
    fn run_pass_with(
        &self,
        pass: PassKind,
        ops: &Operands<'_>,
        partial_outputs: Option<&mut Vec<Vec<u8>>>,
        buckets: Option<&Buckets>,
    ) -> std::result::Result<(), Stop> {
        let Some(nest) = self.plan.pass(pass) else {
            return Ok(());
        };
        let layout = ParamLayout::of(nest);
        let indexed_dest = nest
            .dest
            .as_ref()
            .is_some_and(|dest| dest.indexed_dim().is_some());
        if let Some(buckets) = buckets.filter(|_| indexed_dest) {
            return self.run_buckets(pass, nest, &layout, ops, buckets);
        }
        let (params, order) = bind(&self.plan.key, nest, &layout, ops, false);
        let entry = self.entry(pass, variant_of(nest, &layout, &params, &order), false)?;
        let call = Call {
            entry,
            pointers: pointers(ops),
            params,
        };
        let key = &self.plan.key;
        let plan = split(key, nest, &layout, &call.params, &order);
        let partial = match (&plan, partial_outputs) {
            (None, Some(partial_outputs)) => {
                let out = ops.get(Operand::Out);
                partial_split(key, nest, &layout, &call.params, &order, out)
                    .map(|split| (split, partial_outputs))
            }
            _ => None,
        };
        let status = match plan {
            None => match partial {
                None => call.run(&layout, None),
                Some((split, partial_outputs)) => {
                    let Combine::Reduce(reduction) = nest.combine else {
                        unreachable!("partial_split takes reductions only")
                    };
                    let out = ops.get(Operand::Out);
                    let bytes = out.shape.iter().product::<usize>() * key.dtype().size();
                    let mut buffers: Vec<Vec<u8>> = (1..split.chunks)
                        .map(|_| partials::identity_buffer(reduction, key.dtype(), bytes))
                        .collect();
                    let calls: Vec<Call> = std::iter::once(None)
                        .chain(buffers.iter_mut().map(Some))
                        .map(|buffer| {
                            let mut pointers = call.pointers;
                            if let Some(buffer) = buffer {
                                pointers[Operand::Out as usize] = buffer.as_mut_ptr();
                            }
                            Call {
                                entry: call.entry,
                                pointers,
                                params: call.params.clone(),
                            }
                        })
                        .collect();
                    let status = (0..split.chunks)
                        .into_par_iter()
                        .map(|c| calls[c].run(&layout, Some((&split, c))))
                        .find_first(|status| status.is_err())
                        .unwrap_or(Ok(()));
                    drop(calls);
                    partial_outputs.extend(buffers);
                    status
                }
            },
            Some(split) => {
                let chunks = split.chunks;
                let first_bad = (0..chunks)
                    .into_par_iter()
                    .map(|c| call.run(&layout, Some((&split, c))))
                    .find_first(|status| status.is_err());
                match first_bad {
                    // Chunks of the check pass may fail out of row-major order: the
                    // sequential rerun names the first bad index.
                    Some(Err(_)) if pass == PassKind::Check => call.run(&layout, None),
                    Some(status) => status,
                    None => Ok(()),
                }
            }
        };
        status.map_err(|counters| Stop::BadIndex(domain_position(counters, &order)))
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
            _ => variant_of(nest, layout, &params, &order),
        };
        let call = Call {
            entry: self.entry(pass, variant, true)?,
            pointers: pointers(ops),
            params,
        };
        (0..buckets.len())
            .into_par_iter()
            .map(|b| call.run_listed(layout, buckets, b))
            .find_first(|status| status.is_err())
            .unwrap_or(Ok(()))
            .map_err(|counters| Stop::BadIndex(domain_position(counters, &order)))
    }

    /// The error for a bad index met by `pass` at loop counters `bad`. Passes other than
    /// the check may run in another loop order, so the check pass (row-major over indices)
    /// names the first bad index, as the reference interpreter does.
    fn bad_index(
        &self,
        pass: PassKind,
        stop: Stop,
        data_shape: &[usize],
        indices: &TensorView<'_>,
    ) -> Error {
        let bad = match stop {
            Stop::Failed(e) => return e,
            Stop::BadIndex(bad) => bad,
        };
        if pass != PassKind::Check {
            if let Err(first) = self.check_indices(data_shape, indices) {
                return first;
            }
        }
        let nest = self
            .plan
            .pass(pass)
            .expect("the pass that failed is planned");
        let index = nest
            .index
            .as_ref()
            .expect("only passes that read indices fail");
        let position: Vec<usize> = index
            .coords
            .iter()
            .map(|c| match c {
                Coord::Loop(d) => bad[*d],
                Coord::Index => unreachable!("indices are not read through an index"),
            })
            .collect();
        self.index_error(indices, position, data_shape[self.plan.key.axis()])
    }

    /// The error naming the index at `position` of `indices`, out of bounds for `size`.
    fn index_error(&self, indices: &TensorView<'_>, position: Vec<usize>, size: usize) -> Error {
        let key = self.plan.key;
        Error::Invalid(IrError::IndexOutOfBounds {
            op: key.kind(),
            index: read_index(indices, &position),
            position,
            axis: key.axis(),
            size,
        })
    }
}

/// The operands' addresses by slot (null where unbound).
fn pointers(ops: &Operands<'_>) -> [*mut u8; OPERAND_SLOTS] {
    let mut pointers = [std::ptr::null_mut::<u8>(); OPERAND_SLOTS];
    for (slot, raw) in ops.slots.iter().enumerate() {
        if let Some(raw) = raw {
            pointers[slot] = raw.ptr;
        }
    }
    pointers
}

/// Loop counters (in loop `order`) as a position by domain dim.
fn domain_position(mut counters: Vec<usize>, order: &[usize]) -> Vec<usize> {
    let mut position = vec![0usize; order.len()];
    for (n, &d) in order.iter().enumerate() {
        position[d] = std::mem::take(&mut counters[n]);
    }
    position
}

/// Kernels move bytes; strings have none (see [`Kernel`]).
fn refuse_strings(key: &KernelKey) -> Result<()> {
    if key.dtype() == DType::String {
        return Err(Error::Invalid(IrError::UnsupportedDType {
            op: key.kind(),
            dtype: key.dtype(),
        }));
    }
    Ok(())
}

/// The parameter block of `nest` for these operands (see `crate::abi`), and the loop order
/// chosen: `order[n]` is the domain dim that loop `n` walks.
///
/// Loops run outermost-first by decreasing byte stride summed over the accesses (stable, so
/// row-major tensors keep row-major order), which puts a contiguous dim innermost wherever
/// the views have one; `axis_first` moves the axis loop outermost (the engine's listed
/// loop). Any order is correct: two updates can meet only if they differ in the axis
/// coordinate alone, and every loop order visits those in increasing order.
fn bind(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    ops: &Operands<'_>,
    axis_first: bool,
) -> (Vec<i64>, Vec<usize>) {
    let depth = nest.depth;
    let mut dims = vec![0i64; depth];
    for (n, &d) in ops.get(nest.domain).shape.iter().enumerate() {
        dims[n] = d as i64;
    }
    let mut strides = vec![vec![0i64; depth]; layout.accesses.len()];
    let mut indexed = vec![0i64; layout.accesses.len()];
    for (a, access) in abi::accesses(nest).enumerate() {
        let raw = ops.get(access.operand);
        for (j, coord) in access.coords.iter().enumerate() {
            match coord {
                Coord::Loop(d) => strides[a][*d] += raw.strides[j] as i64,
                Coord::Index => indexed[a] = raw.strides[j] as i64,
            }
        }
    }
    let cost = |d: usize| -> u128 {
        abi::accesses(nest)
            .zip(&strides)
            .map(|(access, s)| {
                s[d].unsigned_abs() as u128 * codegen::element_size(key, access.operand) as u128
            })
            .sum()
    };
    let mut order: Vec<usize> = (0..depth).collect();
    // The check pass stays row-major: the first bad index it meets is the one to report.
    if nest.pass != PassKind::Check {
        order.sort_by_key(|&d| std::cmp::Reverse(cost(d)));
    }
    if axis_first {
        order.sort_by_key(|&d| d != key.axis());
    }

    let mut params = vec![0i64; layout.len];
    for (n, &d) in order.iter().enumerate() {
        params[n] = dims[d];
    }
    for (a, slots) in layout.accesses.iter().enumerate() {
        for (n, &d) in order.iter().enumerate() {
            params[slots.strides_at + n] = strides[a][d];
        }
        if let Some(at) = slots.indexed_stride_at {
            params[at] = indexed[a];
        }
    }
    if let (Some(at), Some((operand, dim))) = (layout.bound_at, nest.bound) {
        params[at] = ops.get(operand).shape[dim] as i64;
    }
    (params, order)
}

/// The variant whose condition the bound parameters meet (see [`Variant::Contiguous`] and
/// [`Variant::Broadcast`]): read from the strides alone, whatever the shapes.
fn variant_of(nest: &LoopNest, layout: &ParamLayout, params: &[i64], order: &[usize]) -> Variant {
    let Some(inner) = layout.depth.checked_sub(1) else {
        return Variant::Strided;
    };
    if order[inner] != inner {
        return Variant::Strided;
    }
    let mut still = 0u8;
    for (a, (access, slots)) in abi::accesses(nest).zip(&layout.accesses).enumerate() {
        let walks = access.coords.contains(&Coord::Loop(inner));
        match params[slots.strides_at + inner] {
            stride if stride == i64::from(walks) => {}
            0 => still |= 1 << a,
            _ => return Variant::Strided,
        }
    }
    match still {
        0 => Variant::Contiguous,
        _ => Variant::Broadcast(Still(still)),
    }
}

/// The index stored at `position` of `indices`, widened to i128.
fn read_index(indices: &TensorView<'_>, position: &[usize]) -> i128 {
    let offset: isize = position
        .iter()
        .zip(indices.strides())
        .map(|(&p, &s)| p as isize * s)
        .sum();
    let bytes = indices.element_bytes(offset);
    let mut raw = [0u8; 8];
    raw[..bytes.len()].copy_from_slice(bytes);
    let unused_bits = 64 - 8 * bytes.len() as u32;
    if indices.dtype().is_signed_integer() {
        // Shift the sign bit to the top and back to sign-extend.
        ((i64::from_le_bytes(raw) << unused_bits) >> unused_bits) as i128
    } else {
        u64::from_le_bytes(raw) as i128
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::Reduction;

    fn loop_order(data_strides: &[isize], index_strides: &[isize]) -> Vec<usize> {
        let key = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
        let plan = Plan::new(key);
        let nest = plan.pass(PassKind::Apply).unwrap();
        let data = vec![0u8; 4 * 12];
        let idx = vec![0u8; 8 * 12];
        let mut out = vec![0u8; 4 * 12];
        let dv = TensorView::new(DType::F32, &[3, 4], data_strides, 0, &data).unwrap();
        let iv = TensorView::new(DType::I64, &[3, 4], index_strides, 0, &idx).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[3, 4], data_strides, 0, &mut out).unwrap();
        let ops = Operands::default()
            .with(Operand::Data, dv.raw())
            .with(Operand::Indices, iv.raw())
            .with(Operand::Out, ov.raw());
        bind(&key, nest, &ParamLayout::of(nest), &ops, false).1
    }

    #[test]
    fn only_small_integer_outputs_of_axis_only_scatters_take_partials() {
        let decide = |dtype: DType, data: &[usize], indices: &[usize]| -> Option<usize> {
            let key = KernelKey::scatter_elements(
                dtype,
                DType::I64,
                data.len(),
                -1,
                Reduction::Add,
                true,
            )
            .unwrap();
            let plan = Plan::new(key);
            let nest = plan.pass(PassKind::Apply).unwrap();
            let layout = ParamLayout::of(nest);
            let numel = |s: &[usize]| s.iter().product::<usize>();
            let mut out = vec![0u8; numel(data) * dtype.size()];
            let idx = vec![0u8; numel(indices) * 8];
            let upd = vec![0u8; numel(indices) * dtype.size()];
            let strides = |s: &[usize]| -> Vec<isize> {
                scatterjit_ir::row_major_strides(s)
                    .iter()
                    .map(|&x| x as isize)
                    .collect()
            };
            let (ds, is) = (strides(data), strides(indices));
            let mut ov = TensorViewMut::new(dtype, data, &ds, 0, &mut out).unwrap();
            let iv = TensorView::new(DType::I64, indices, &is, 0, &idx).unwrap();
            let uv = TensorView::new(dtype, indices, &is, 0, &upd).unwrap();
            let ops = Operands::default()
                .with(Operand::Indices, iv.raw())
                .with(Operand::Updates, uv.raw())
                .with(Operand::Out, ov.raw());
            let (params, order) = bind(&key, nest, &layout, &ops, false);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            pool.install(|| {
                assert!(split(&key, nest, &layout, &params, &order).is_none());
                let out = RawOperand {
                    ptr: std::ptr::null_mut(),
                    shape: data,
                    strides: &ds,
                };
                partial_split(&key, nest, &layout, &params, &order, &out).map(|s| s.chunks)
            })
        };
        let grain = 1 << 15;
        assert_eq!(decide(DType::I64, &[1, 1000], &[1, 4 * grain]), Some(2));
        assert_eq!(decide(DType::Bool, &[1000], &[4 * grain]), Some(2));
        // Float sums must stay in order; a big output costs more to fold than it saves.
        assert_eq!(decide(DType::F32, &[1, 1000], &[1, 4 * grain]), None);
        assert_eq!(decide(DType::I64, &[1, grain], &[1, 2 * grain]), None);
    }

    #[test]
    fn the_smallest_stride_runs_innermost() {
        assert_eq!(loop_order(&[4, 1], &[4, 1]), [0, 1]);
        assert_eq!(loop_order(&[1, 3], &[1, 3]), [1, 0]);
        // Bytes decide: the 8-byte indices outweigh the two transposed f32 tensors.
        assert_eq!(loop_order(&[1, 3], &[4, 1]), [0, 1]);
    }
}
