//! Compiled kernels and their safe calls. A call reads top-down through this folder: the
//! public calls here check operands against the key; [`passes`] runs the plan's passes in
//! the plan's order; [`bind`] fills a pass's parameter block from shapes and strides and
//! picks the loop order and variant; [`schedule`] splits a pass over threads; [`call`] is
//! the one entry into machine code; [`report`] turns a bad-index exit into the error.
//! [`mean`] allocates the sums and counts that `mean`'s passes walk; [`compact`] checks
//! wide indices into a narrow copy the apply reads; [`blocks`] runs Gathers of narrow
//! rows a block of rows at a time; [`prepared`] binds a call once and runs it on new
//! buffers; [`memo`] keeps such bindings for the small geometries a kernel's ordinary
//! calls repeat; [`new_output`] makes a new output's call, and runs one that ran on a
//! kept binding again from owned tensors.

mod bind;
mod blocks;
mod call;
mod compact;
mod distinct;
mod mean;
mod memo;
mod new_output;
mod passes;
mod prepared;
mod report;
mod schedule;
mod tier;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scatterjit_ir::{
    Coord, DType, Error as IrError, KernelKey, Meta, OpKind, Operand, PassKind, Plan, Tensor,
};

use crate::abi::{ParamLayout, Picks, Still, Variant};
use crate::codegen::Bounds;
use crate::error::{Error, Result};
use crate::jit::{self, Code, Listing, PassFn};
use crate::once::OnceOk;
use crate::tensor::{self, TensorView, TensorViewMut};

pub use distinct::set_distinct_from;
pub(crate) use new_output::KeptCall;
pub use prepared::{Geometry, Prepared};
pub use schedule::{set_engine_threads, set_parallel_grain, set_tile_picks, splits_from};
use tier::Demand;
pub use tier::{set_specialize_after, SPECIALIZE_AFTER};

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
    /// Per [`PassKind`] (at [`PassKind::index`]; `None` where the plan has no such pass),
    /// per [`Variant`] (at `Variant::slot`, then again for the listed form at
    /// `Variant::COUNT + slot`): the code, compiled on first use (a failed compile is
    /// retried by the next call).
    code: [Option<Box<[OnceOk<Code>]>>; PassKind::ALL.len()],
    /// Per [`PassKind`], like `code`: where the pass's parameters go.
    layouts: [Option<ParamLayout>; PassKind::ALL.len()],
    /// Per [`PassKind`]: the elements its ordinary calls have run on `Strided` code while
    /// they wanted a specialized variant not yet compiled (see [`Kernel::entry`]).
    rent: [AtomicU64; PassKind::ALL.len()],
    /// Whether every call runs `Strided` code unless its binding needs a row variant (see
    /// [`Kernel::stay_unspecialized`]).
    unspecialized: AtomicBool,
    /// Nanoseconds spent compiling on calls (see [`Kernel::first_use_compile_time`]).
    first_use_nanos: AtomicU64,
    /// Where the cache that compiled it counts every compile, later ones included (see
    /// [`crate::CacheStats::compile_time`]).
    compile_counter: Option<Arc<AtomicU64>>,
    /// The same op on indices of each of `compact::NARROW`, at its position there,
    /// compiled on first use: for indices compacted to it (which one a call takes depends
    /// on its axis size, so one kernel may need several), and u32 for the engine's keys.
    compact: [OnceOk<Box<Kernel>>; compact::NARROW.len()],
    /// Gather of narrow rows: the rank-2 Gathers that run them in blocks (see
    /// `blocks::Siblings`), compiled on first use.
    blocks: blocks::Siblings,
    /// The elements of the calls that would have run in blocks before those Gathers were
    /// compiled (see `tier::repaid`).
    blocks_rent: AtomicU64,
    /// The bindings of the small geometries its calls repeat.
    memo: memo::Memo,
    compile_time: Duration,
    /// Whether its passes check their indices: `Bounds::InRange` only for the siblings in
    /// `compact`, which run on indices scatterjit made and checked itself.
    bounds: Bounds,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("key", &self.plan.key.to_string())
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl Kernel {
    /// Compiles `key`: the passes that write through the index or into scratch (init,
    /// apply, finish) in their `Strided` variant, which runs operands of any strides. The
    /// other passes (the compiled copy and check) compile on first use, and so do the
    /// variants specialized for a call's layout (contiguous rows, broadcast indices): on the
    /// first call that brings their pass [`SPECIALIZE_AFTER`] elements of work, on the
    /// call that brings the total of a pass's earlier calls there, or when a call is
    /// prepared ([`Kernel::prepare`]) or repeats a small geometry. Until then the
    /// `Strided` code runs: the same results, in fewer microseconds of compiling than a
    /// specialized variant costs on calls too small to repay it. Prefer
    /// [`crate::KernelCache::get`], which compiles each key once.
    pub fn compile(key: KernelKey) -> Result<Kernel> {
        Kernel::compile_with(key, Bounds::Checked)
    }

    /// [`Self::compile`], its passes checking their indices or not (`Bounds::InRange`: for
    /// indices scatterjit made, which a caller's never reach).
    fn compile_with(key: KernelKey, bounds: Bounds) -> Result<Kernel> {
        refuse_strings(&key)?;
        let start = Instant::now();
        let plan = Plan::new(key);
        let code = PassKind::ALL.map(|kind| {
            plan.pass(kind)
                .map(|_| (0..2 * Variant::COUNT).map(|_| OnceOk::default()).collect())
        });
        let layouts = PassKind::ALL.map(|kind| plan.pass(kind).map(ParamLayout::of));
        let kernel = Kernel {
            code,
            layouts,
            compact: Default::default(),
            blocks: Default::default(),
            blocks_rent: AtomicU64::new(0),
            memo: Default::default(),
            plan,
            rent: Default::default(),
            unspecialized: AtomicBool::new(false),
            first_use_nanos: AtomicU64::new(0),
            compile_counter: None,
            compile_time: Duration::ZERO,
            bounds,
        };
        // One pass after another on the calling thread: a compile may run under a lock (the
        // cache's slot), where waiting on the rayon pool could run a task that takes it.
        for pass in [PassKind::Init, PassKind::Apply, PassKind::Finish] {
            if kernel.runs(pass) {
                kernel.compiled(pass, Variant::Strided, false)?;
            }
        }
        // `compiled` counted the eager passes as first-use time: they are `compile_time`.
        kernel.first_use_nanos.store(0, Ordering::Relaxed);
        Ok(Kernel {
            compile_time: start.elapsed(),
            ..kernel
        })
    }

    /// Compiles every pass of `key` in the `Strided` and `Contiguous` variants, in
    /// `Broadcast` with the index still where the index walks the innermost loop, in
    /// `Touched` where the pass reads lines ahead and in `Streamed` where it streams its
    /// row copies (`Contiguous` and `Touched` in both forms of their picks where an index
    /// moves an access), and returns their text: CLIF as built, CLIF optimized, machine
    /// code. Broadcasts of other accesses (a still source) are left out: which ones a call
    /// holds still depends on its strides.
    pub fn listings(key: KernelKey) -> Result<Vec<Listing>> {
        refuse_strings(&key)?;
        let plan = Plan::new(key);
        let mut out = Vec::new();
        for nest in &plan.passes {
            // `Touched` where the pass has a line to read ahead (see `ParamLayout::read_ahead`),
            // `Streamed` where it copies rows into a destination it writes in order, and
            // `Broadcast` with the index still where it walks the innermost loop (PyTorch
            // Geometric's `index.view(-1, 1).expand_as(src)`).
            let layout = ParamLayout::of(nest);
            let touched = layout.read_ahead != 0;
            let streamed = layout.streams_into.is_some();
            let picks = layout.picks_by_index();
            let innermost = nest.depth.checked_sub(1).map(Coord::Loop);
            let index_walks = nest
                .index
                .as_ref()
                .zip(innermost)
                .is_some_and(|(index, inner)| index.coords.contains(&inner));
            let index_still = layout
                .accesses
                .iter()
                .position(|a| a.operand == Operand::Indices)
                .filter(|_| index_walks)
                .map(|at| Variant::Broadcast(Still(1 << at), Picks::Strided));
            let variants = Variant::ALL
                .into_iter()
                .chain(index_still)
                .chain(picks.then_some(Variant::Contiguous(Picks::Adjacent)))
                .chain(touched.then_some(Variant::Touched(Picks::Strided)))
                .chain((touched && picks).then_some(Variant::Touched(Picks::Adjacent)))
                .chain(streamed.then_some(Variant::Streamed));
            for variant in variants {
                let (_, listing) =
                    jit::compile(&plan, nest.pass, variant, false, Bounds::Checked, true)?;
                out.extend(listing);
            }
        }
        Ok(out)
    }

    /// The code cell of `pass` in `variant`, its outermost loop `listed` or not.
    fn slot(&self, pass: PassKind, variant: Variant, listed: bool) -> &OnceOk<Code> {
        let slots = self.code[pass.index()]
            .as_ref()
            .expect("callers ask only for planned passes");
        &slots[variant.slot() + usize::from(listed) * Variant::COUNT]
    }

    /// The code of `pass` in `variant`, compiled now if it is the first use.
    fn compiled(&self, pass: PassKind, variant: Variant, listed: bool) -> Result<PassFn> {
        self.slot(pass, variant, listed)
            .get_or_try_init(|| {
                let start = Instant::now();
                let code = jit::compile(&self.plan, pass, variant, listed, self.bounds, false);
                let nanos = nanos_of(start.elapsed());
                self.first_use_nanos.fetch_add(nanos, Ordering::Relaxed);
                self.count_compile(nanos);
                code.map(|(code, _)| code)
            })
            .map(Code::entry)
    }

    /// Makes this kernel, compiled by a cache, count its compile time and every later
    /// compile of its calls (and of its siblings) into `counter` too.
    pub(crate) fn count_compiles_into(&mut self, counter: Arc<AtomicU64>) {
        self.compile_counter = Some(counter);
        self.count_compile(nanos_of(self.compile_time));
    }

    /// Adds `nanos` of compiling to the counter of the cache that compiled this kernel.
    fn count_compile(&self, nanos: u64) {
        if let Some(counter) = &self.compile_counter {
            counter.fetch_add(nanos, Ordering::Relaxed);
        }
    }

    /// The pass variants compiled so far, as `pass.variant` (`apply.contiguous`, and
    /// `.listed` after the variant for the parallel engine's form), in pass and slot order;
    /// for tests of which code calls compile.
    #[cfg(test)]
    pub(super) fn compiled_variants(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (pass, slots) in PassKind::ALL.iter().zip(&self.code) {
            for (v, slot) in slots.iter().flat_map(|s| s.iter()).enumerate() {
                if slot.get().is_none() {
                    continue;
                }
                let Some(variant) = Variant::from_slot(v % Variant::COUNT) else {
                    continue;
                };
                let listed = if v >= Variant::COUNT { ".listed" } else { "" };
                names.push(format!("{}.{}{listed}", pass.name(), variant.name()));
            }
        }
        names
    }

    /// The parameter layout of `pass`.
    fn layout(&self, pass: PassKind) -> &ParamLayout {
        self.layouts[pass.index()]
            .as_ref()
            .expect("callers ask only for planned passes")
    }

    /// The key this kernel computes.
    pub fn key(&self) -> &KernelKey {
        &self.plan.key
    }

    /// Its loop-nest plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// How many geometries of its calls it keeps bound (see [`Kernel::run_into`]); for
    /// tests.
    #[doc(hidden)]
    pub fn kept_bindings(&self) -> usize {
        self.memo.kept()
    }

    /// Wall time spent compiling it: the passes [`Kernel::compile`] compiles before it
    /// returns.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Wall time its calls have spent compiling so far, in every thread together: the
    /// passes and variants compiled on first use (see [`Kernel::compile`]), the kernels of
    /// the same op that read narrow copies of wide indices, and the Gathers that run
    /// narrow rows in blocks.
    pub fn first_use_compile_time(&self) -> Duration {
        let blocks = self.blocks.iter().flatten();
        let siblings = self.compact.iter().chain(blocks).filter_map(OnceOk::get);
        siblings.fold(
            Duration::from_nanos(self.first_use_nanos.load(Ordering::Relaxed)),
            |sum, sibling| sum + sibling.compile_time + sibling.first_use_compile_time(),
        )
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
        Ok(self.plan.key.validate(data, indices, updates)?.out_shape)
    }

    /// Refuses an output that shares memory with an input. Safe code cannot build one (a
    /// `&mut [u8]` never aliases a `&[u8]`), but views made from raw buffers could, and the
    /// passes read inputs after writing the output.
    fn check_disjoint(
        &self,
        out: &TensorViewMut<'_>,
        inputs: [(Operand, Option<&TensorView<'_>>); 3],
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

    /// Runs the op out of place: a new output tensor. The inputs may be any strided views.
    pub fn run(
        &self,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<Tensor> {
        if let Some(done) = self.run_kept_views(data, indices, updates) {
            return done;
        }
        let out_shape = self.validate(data, indices, updates)?;
        self.run_validated(out_shape, data, indices, updates)
    }

    /// Runs the op into a caller's output view (the ONNX Runtime / OpenVINO style of
    /// reusing buffers). All indices are checked before the first write, so on error `out`
    /// is unchanged.
    ///
    /// A small call whose geometry (dtype, shape, strides and offset of every view) repeats
    /// one of the kernel's recent calls runs on a binding kept from then, as a
    /// [`Prepared`] call does: no validation, loop order or parameter block is worked out
    /// again. The same holds for [`Kernel::scatter_in_place`], for [`Kernel::run`] (whose
    /// new output the binding of its inputs' geometries shapes) and for the free
    /// functions. Results and errors are the same either way.
    pub fn run_into(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<()> {
        let ops = memo::Operands {
            in_place: false,
            out,
            data: Some(data),
            indices,
            updates,
        };
        self.memo.call(self, ops, |out| {
            self.run_into_unbound(out, data, indices, updates)
        })
    }

    /// [`Self::run_into`] without the memo's bindings: every check and decision made now.
    pub(crate) fn run_into_unbound(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<()> {
        let out_shape = self.validate(data, indices, updates)?;
        self.check_out(out.meta(), &out_shape)?;
        let inputs = [
            (Operand::Data, Some(data)),
            (Operand::Indices, Some(indices)),
            (Operand::Updates, updates),
        ];
        self.check_disjoint(out, inputs)?;
        self.execute(out, Some(data), indices, updates, true)
    }

    /// An error unless a caller's output has this kernel's dtype and `out_shape`.
    pub(crate) fn check_out(&self, out: Meta<'_>, out_shape: &[usize]) -> Result<()> {
        if out.shape != out_shape || out.dtype != self.plan.key.dtype() {
            return Err(Error::Invalid(IrError::InvalidView {
                tensor: Operand::Output,
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
        self.in_place_with_memo(data, indices, updates, Self::scatter_in_place_unbound)
    }

    /// [`Self::scatter_in_place`] without the memo's bindings: every check and decision
    /// made now.
    pub(crate) fn scatter_in_place_unbound(
        &self,
        data: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
    ) -> Result<()> {
        self.refuse_in_place_unless_scatter()?;
        self.validate(&data.as_view(), indices, Some(updates))?;
        self.scatter_in_place_checked(data, indices, updates)
    }

    /// [`Self::scatter_in_place`] on operands that `Op::validate` accepted with this
    /// kernel's key (a scatter's).
    pub(crate) fn scatter_in_place_validated(
        &self,
        data: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
    ) -> Result<()> {
        self.in_place_with_memo(data, indices, updates, Self::scatter_in_place_checked)
    }

    /// An in-place scatter on a kept binding of its geometry, or else by `ordinary`.
    fn in_place_with_memo(
        &self,
        data: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
        ordinary: InPlace,
    ) -> Result<()> {
        self.refuse_in_place_unless_scatter()?;
        let ops = memo::Operands {
            in_place: true,
            out: data,
            data: None,
            indices,
            updates: Some(updates),
        };
        let ran = self
            .memo
            .call(self, ops, |data| ordinary(self, data, indices, updates));
        ran.map(drop)
    }

    /// Only ScatterElements has an in-place form.
    fn refuse_in_place_unless_scatter(&self) -> Result<()> {
        match self.plan.key.kind() {
            OpKind::ScatterElements => Ok(()),
            op => Err(Error::Invalid(IrError::InPlaceUnsupported { op })),
        }
    }

    /// The in-place scatter on validated operands, without the memo.
    fn scatter_in_place_checked(
        &self,
        data: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
    ) -> Result<()> {
        let inputs = [
            (Operand::Indices, Some(indices)),
            (Operand::Updates, Some(updates)),
            (Operand::Data, None),
        ];
        self.check_disjoint(data, inputs)?;
        self.execute(data, None, indices, Some(updates), true)
    }
}

/// A way to run an in-place scatter on its operands (data, indices, updates).
type InPlace = fn(&Kernel, &mut TensorViewMut<'_>, &TensorView<'_>, &TensorView<'_>) -> Result<()>;

/// `d` in whole nanoseconds (saturating; a u64 holds 584 years).
fn nanos_of(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
