//! Prepared calls: a kernel bound once to the shapes and strides of its operands (what
//! [`Kernel::run_into`] decides per call), then run on new buffers with only the checks
//! that depend on them: each buffer's length, overlap, and the indices' values.

use std::ops::Range;
use std::sync::Arc;

use scatterjit_ir::{DType, Error as IrError, Meta, OpKind, Operand, PassKind, OPERAND_SLOTS};

use super::bind::{bind, variant_of, Operands, Order};
use super::call::{enter, error_counters, on_stack};
use super::report::{domain_position, Stop};
use super::schedule::{parallel_grain, pass_work, splits_from};
use super::{Demand, Kernel};
use crate::abi::{self, ParamLayout, STATUS_OK};
use crate::check;
use crate::error::{Error, Result};
use crate::jit::PassFn;
use crate::tensor::{self, Address, Place, RawOperand, TensorView, TensorViewMut, Unbuffered};
use crate::threads::STREAM_CHUNK;

/// The geometry of one operand of a prepared call: its shape, element strides (zero and
/// negative allowed) and the element offset of position 0 in its buffer, as
/// [`crate::TensorView::new`] takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
}

impl Geometry {
    /// A strided geometry; checked when a call is prepared with it.
    pub fn new(shape: &[usize], strides: &[isize], offset: usize) -> Geometry {
        Geometry {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        }
    }

    /// Row-major elements from the start of the buffer.
    pub fn row_major(shape: &[usize]) -> Geometry {
        let strides: Vec<isize> = scatterjit_ir::row_major_strides(shape)
            .iter()
            .map(|&s| s as isize)
            .collect();
        Geometry::new(shape, &strides, 0)
    }
}

/// A call of a kernel bound to the geometry of its operands, to run again and again on new
/// buffers of that geometry (what a framework does for a graph node whose shapes are
/// fixed). Everything that depends only on shapes and strides is decided once, by
/// [`Kernel::prepare`]: validation of shapes against the op, the output's shape, each
/// pass's loop order, variant (compiled then) and parameter block, and how the index check
/// and the copy are done. [`Prepared::run_into`] then checks each buffer's length against
/// its geometry (O(1)), that the output overlaps no input, and every index, and runs the
/// passes. Results are bit-identical to [`Kernel::run_into`] on views of the same buffers,
/// at any thread count, and so are the errors: when a check fails, or when the call is
/// large enough to split over the current rayon pool, the buffers take that path. The
/// in-place form ([`Kernel::prepare_in_place`], [`Prepared::scatter_in_place`]) is the
/// same for [`Kernel::scatter_in_place`].
///
/// ```
/// use scatterjit::{DType, Geometry, KernelCache, KernelKey};
/// let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0)?;
/// let kernel = KernelCache::global().get(&key)?;
/// // Gather rows of a [4, 2] table with 3 indices: the output is [3, 2].
/// let call = kernel.prepare(
///     &Geometry::row_major(&[3, 2]),
///     &Geometry::row_major(&[4, 2]),
///     &Geometry::row_major(&[3]),
///     None,
/// )?;
/// let table: Vec<u8> = (0..8).flat_map(|v| (v as f32).to_le_bytes()).collect();
/// let mut out = [0u8; 3 * 2 * 4];
/// for indices in [[3i64, 0, -1], [1, 1, 2]] {
///     let indices: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
///     call.run_into(&mut out, &table, &indices, None)?;
/// }
/// let rows: Vec<f32> = out.chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
/// assert_eq!(rows, [2.0, 3.0, 2.0, 3.0, 4.0, 5.0]);
/// // A buffer too short for its geometry is an error, and nothing is written.
/// let e = call.run_into(&mut out, &table[..8], &[0u8; 24], None).unwrap_err();
/// assert!(e.to_string().contains("needs 32 bytes"), "{e}");
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub struct Prepared {
    kernel: Arc<Kernel>,
    binding: Binding,
}

/// What a call decides once for the geometry of its operands: a prepared call's, and
/// those a kernel keeps for the geometries its ordinary calls repeat (`super::memo`).
pub(super) struct Binding {
    /// Bound for an in-place scatter: `out` is data, and there is no copy.
    in_place: bool,
    out: Unbuffered,
    data: Unbuffered,
    indices: Unbuffered,
    updates: Option<Unbuffered>,
    /// The plan's passes as this geometry runs them, in the plan's order; none for `mean`,
    /// whose scratch each call allocates, and for Gathers that run in blocks (see
    /// `super::blocks`): their calls run on views.
    steps: Vec<Step>,
    /// Whether the steps are the whole call whatever the rayon pool: no pass or copy large
    /// enough to split, at a grain of `grain` (tests change it); never for `mean`.
    small: Option<i64>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("key", &self.kernel.key().to_string())
            .field("out", &self.binding.out.shape())
            .finish()
    }
}

/// One pass of the plan for a prepared geometry.
enum Step {
    /// The check on the host, over these bytes of the indices buffer (row-major once
    /// broadcast dims are dropped), against the axis dim `size`.
    Scan { bytes: Range<usize>, size: usize },
    /// `out[to] = data[from]`: the copy of a row-major scatter.
    Memcpy {
        from: Range<usize>,
        to: Range<usize>,
    },
    /// A compiled pass, bound.
    Pass(Box<BoundPass>),
}

/// A compiled pass with its parameter block filled for the prepared geometry.
struct BoundPass {
    pass: PassKind,
    entry: PassFn,
    params: Vec<i64>,
    /// The operand slots the pass is given (others stay null, as in an ordinary call).
    slots: [bool; OPERAND_SLOTS],
    layout: ParamLayout,
    order: Order,
}

impl Kernel {
    /// Binds a call of this kernel to the geometry of its operands, for
    /// [`Prepared::run_into`]: the same operands, in the same order, as
    /// [`Kernel::run_into`] takes, without their buffers. `updates` is for ScatterElements
    /// only. Every pass the call needs is compiled now. Errors are those `run_into` (and
    /// the views' constructors) would give for this geometry.
    pub fn prepare(
        self: &Arc<Self>,
        out: &Geometry,
        data: &Geometry,
        indices: &Geometry,
        updates: Option<&Geometry>,
    ) -> Result<Prepared> {
        let key = self.plan.key;
        let (dtype, index_dtype) = (key.dtype(), key.index_dtype());
        let data = unbuffered(data, dtype, false)?;
        let indices = unbuffered(indices, index_dtype, false)?;
        let updates = updates.map(|u| unbuffered(u, dtype, false)).transpose()?;
        let out = unbuffered(out, dtype, true)?;
        let out_shape = self.validate_meta(
            Meta::new(dtype, data.shape()),
            Meta::new(index_dtype, indices.shape()),
            updates.as_ref().map(|u| Meta::new(dtype, u.shape())),
        )?;
        self.check_out(Meta::new(dtype, out.shape()), &out_shape)?;
        let binding = self.bind(false, out, data, indices, updates)?;
        Ok(Prepared {
            kernel: Arc::clone(self),
            binding,
        })
    }

    /// Binds an in-place scatter (PyTorch `scatter_`) to the geometry of its operands, for
    /// [`Prepared::scatter_in_place`]: the same operands as [`Kernel::scatter_in_place`]
    /// takes, without their buffers. Errors are those `scatter_in_place` (and the views'
    /// constructors) would give for this geometry.
    pub fn prepare_in_place(
        self: &Arc<Self>,
        data: &Geometry,
        indices: &Geometry,
        updates: &Geometry,
    ) -> Result<Prepared> {
        let key = self.plan.key;
        if key.kind() != OpKind::ScatterElements {
            return Err(Error::Invalid(IrError::InPlaceUnsupported {
                op: key.kind(),
            }));
        }
        let (dtype, index_dtype) = (key.dtype(), key.index_dtype());
        let out = unbuffered(data, dtype, true)?;
        let indices = unbuffered(indices, index_dtype, false)?;
        let updates = unbuffered(updates, dtype, false)?;
        self.validate_meta(
            Meta::new(dtype, out.shape()),
            Meta::new(index_dtype, indices.shape()),
            Some(Meta::new(dtype, updates.shape())),
        )?;
        let binding = self.bind(true, out.clone(), out, indices, Some(updates))?;
        Ok(Prepared {
            kernel: Arc::clone(self),
            binding,
        })
    }

    /// The binding of a call on validated geometry (`data` is `out` in place); every pass
    /// it needs is compiled now.
    pub(super) fn bind(
        &self,
        in_place: bool,
        out: Unbuffered,
        data: Unbuffered,
        indices: Unbuffered,
        updates: Option<Unbuffered>,
    ) -> Result<Binding> {
        let key = self.plan.key;

        // The check's `Data` only bounds the index.
        let zero_strides = vec![0isize; data.shape().len()];
        let bound_only = RawOperand {
            address: Address::Read(std::ptr::null()),
            shape: data.shape(),
            strides: &zero_strides,
        };
        let mut steps = Vec::new();
        let (mut most_work, mut copy_bytes) = (0i64, 0usize);
        // `mean`'s scratch is allocated per call: its calls run on views.
        let needs_scratch = abi::scratch_per_element(&self.plan) != 0;
        // Gathers that run in blocks do so on views too, and so do inits that read a
        // distinct copy of the index, made per call.
        let (shape, strides) = (data.shape(), data.raw().strides);
        let index = indices.raw();
        let in_blocks = self.takes_blocks(shape, strides, index.shape, index.strides);
        let distinct = self.inits_distinct(out.shape(), index.shape, index.strides);
        let on_views = needs_scratch || in_blocks || distinct;
        for nest in self.plan.passes.iter().filter(|_| !on_views) {
            let pass = nest.pass;
            let ops = match pass {
                PassKind::Check => {
                    if let Some(bytes) = indices.compacted_dense_range() {
                        let size = data.shape()[key.axis()];
                        steps.push(Step::Scan { bytes, size });
                        continue;
                    }
                    Operands::default()
                        .with(Operand::Indices, indices.raw())
                        .with(Operand::Data, bound_only)
                }
                PassKind::Copy if in_place => continue,
                PassKind::Copy => {
                    if let (Some(from), Some(to)) = (data.dense_range(), out.dense_range()) {
                        copy_bytes = to.len();
                        steps.push(Step::Memcpy { from, to });
                        continue;
                    }
                    Operands::default()
                        .with(Operand::Data, data.raw())
                        .with(Operand::Output, out.raw())
                }
                PassKind::Init | PassKind::Apply | PassKind::Finish => match &updates {
                    Some(updates) => Operands::default()
                        .with(Operand::Indices, indices.raw())
                        .with(Operand::Updates, updates.raw())
                        .with(Operand::Output, out.raw()),
                    None => Operands::default()
                        .with(Operand::Data, data.raw())
                        .with(Operand::Indices, indices.raw())
                        .with(Operand::Output, out.raw()),
                },
            };
            let layout = ParamLayout::of(nest);
            let (params, order) = bind(&key, nest, &layout, &ops, false);
            let variant = variant_of(&layout, &key, &params, &order);
            let work = pass_work(&key, nest, &layout, &params, variant).unwrap_or(i64::MAX);
            most_work = most_work.max(work);
            let mut slots = [false; OPERAND_SLOTS];
            for (slot, raw) in ops.slots.iter().enumerate() {
                let placeholder = pass == PassKind::Check && slot == Operand::Data.slot();
                slots[slot] = raw.is_some() && !placeholder;
            }
            steps.push(Step::Pass(Box::new(BoundPass {
                pass,
                entry: self.entry(pass, variant, false, Demand::Repeated)?,
                params,
                slots,
                layout,
                order,
            })));
        }
        // Whether the steps are the whole call at any thread count, at today's grain.
        let grain = parallel_grain();
        let is_small =
            !on_views && most_work < splits_from() as i64 && copy_bytes < 2 * STREAM_CHUNK;
        Ok(Binding {
            in_place,
            small: is_small.then_some(grain),
            out,
            data,
            indices,
            updates,
            steps,
        })
    }
}

/// `g` checked as a view of `dtype` (writable or not) would be, without its buffer.
fn unbuffered(g: &Geometry, dtype: DType, writable: bool) -> Result<Unbuffered> {
    Ok(Unbuffered::new(
        dtype, &g.shape, &g.strides, g.offset, writable,
    )?)
}

impl Prepared {
    /// The kernel this call runs.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    /// Whether this call was prepared in place ([`Kernel::prepare_in_place`]): it runs
    /// with [`Prepared::scatter_in_place`], not [`Prepared::run_into`].
    pub fn is_in_place(&self) -> bool {
        self.binding.in_place
    }

    /// Runs the op into `out` from these buffers, laid out as the geometry given to
    /// [`Kernel::prepare`] says: the same as [`Kernel::run_into`] on views of them, with
    /// the same errors. All indices are checked before the first write, so on error `out`
    /// is unchanged.
    pub fn run_into(
        &self,
        out: &mut [u8],
        data: &[u8],
        indices: &[u8],
        updates: Option<&[u8]>,
    ) -> Result<()> {
        if self.binding.in_place {
            return Err(self.wrong_form("Prepared::scatter_in_place"));
        }
        self.call(out, Some(data), indices, updates)
    }

    /// ScatterElements in place (PyTorch `scatter_`) on these buffers, laid out as the
    /// geometry given to [`Kernel::prepare_in_place`] says: the same as
    /// [`Kernel::scatter_in_place`] on views of them, with the same errors. All indices are
    /// checked before the first write, so on error `data` is unchanged.
    pub fn scatter_in_place(&self, data: &mut [u8], indices: &[u8], updates: &[u8]) -> Result<()> {
        if !self.binding.in_place {
            return Err(self.wrong_form("Prepared::run_into"));
        }
        self.call(data, None, indices, Some(updates))
    }

    /// The error for a call of the form this one was not prepared for.
    fn wrong_form(&self, right: &str) -> Error {
        Error::Invalid(IrError::InvalidKey {
            key: self.kernel.key().to_string(),
            reason: format!("this call was prepared for {right}"),
        })
    }

    /// The call on buffers; `data` is `None` in place (`out` holds data).
    fn call(
        &self,
        out: &mut [u8],
        data: Option<&[u8]>,
        indices: &[u8],
        updates: Option<&[u8]>,
    ) -> Result<()> {
        if updates.is_some() != self.binding.updates.is_some() {
            return Err(Error::Invalid(IrError::InvalidView {
                tensor: Operand::Updates,
                reason: match updates {
                    Some(_) => "the call was prepared without updates".into(),
                    None => "the call was prepared with updates".into(),
                },
            }));
        }
        match self
            .binding
            .run(&self.kernel, Place::from(&mut *out), data, indices, updates)
        {
            Some(done) => done,
            None => self.run_views(out, data, indices, updates),
        }
    }

    /// The call on views of the buffers: the ordinary path, for calls large enough to
    /// split, for `mean`, and for every error.
    fn run_views(
        &self,
        out: &mut [u8],
        data: Option<&[u8]>,
        indices: &[u8],
        updates: Option<&[u8]>,
    ) -> Result<()> {
        let g = &self.binding;
        let data = data.map(|d| g.data.view(d)).transpose()?;
        let indices = g.indices.view(indices)?;
        let updates = match (updates, &g.updates) {
            (Some(bytes), Some(g)) => Some(g.view(bytes)?),
            _ => None,
        };
        let mut out = g.out.view_mut(out)?;
        match (data, updates) {
            (Some(data), updates) => {
                self.kernel
                    .run_into_unbound(&mut out, &data, &indices, updates.as_ref())
            }
            (None, Some(updates)) => self
                .kernel
                .scatter_in_place_unbound(&mut out, &indices, &updates),
            (None, None) => unreachable!("in-place calls are prepared with updates"),
        }
    }
}

impl Binding {
    /// Whether this binding is for calls of this form (`in_place`) on views of these
    /// geometries: dtype, shape, strides and offset of each.
    pub(super) fn describes(
        &self,
        in_place: bool,
        out: &TensorViewMut<'_>,
        data: Option<&TensorView<'_>>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> bool {
        self.in_place == in_place
            && self.out.describes_mut(out)
            && data.is_none_or(|d| self.data.describes(d))
            && self.describes_index_and_updates(indices, updates)
    }

    /// Whether this binding runs a call of [`Kernel::run`] on views of these geometries:
    /// into a new output (row-major from its buffer's start) or, `in_place`, on such an
    /// output holding a copy of `data`, which must then be row-major. Every view it
    /// matches has the dtype and shape of a call that passed validation when it was
    /// bound, so the op's checks would pass again.
    pub(super) fn describes_new(
        &self,
        in_place: bool,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> bool {
        let data_matches = if in_place {
            data.dtype() == self.out.dtype() && data.shape() == self.out.shape()
        } else {
            self.data.describes(data)
        };
        self.in_place == in_place
            && self.out.is_fresh()
            && data_matches
            && self.describes_index_and_updates(indices, updates)
    }

    /// Whether the indices' and updates' views have this binding's geometries.
    fn describes_index_and_updates(
        &self,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> bool {
        let updates_match = match (updates, &self.updates) {
            (Some(view), Some(g)) => g.describes(view),
            (None, None) => true,
            _ => false,
        };
        updates_match && self.indices.describes(indices)
    }

    /// The shape of its output.
    pub(super) fn out_shape(&self) -> &[usize] {
        self.out.shape()
    }

    /// Whether it runs on buffers at all: not for `mean` and Gathers in blocks, whose calls
    /// run on views (see `steps`).
    pub(super) fn runs_on_buffers(&self) -> bool {
        !self.steps.is_empty()
    }

    /// Runs the bound steps on buffers of this geometry (`data` is `None` in place), or
    /// `None`, having written nothing, where the call must take the ordinary path: a buffer
    /// too short or overlapping, a call large enough to split, `mean`, a bad index (whose
    /// error the ordinary path names).
    pub(super) fn run(
        &self,
        kernel: &Kernel,
        mut out: Place<'_>,
        data: Option<&[u8]>,
        indices: &[u8],
        updates: Option<&[u8]>,
    ) -> Option<Result<()>> {
        let fits = out.len() >= self.out.needed
            && data.is_none_or(|d| d.len() >= self.data.needed)
            && indices.len() >= self.indices.needed
            && updates
                .zip(self.updates.as_ref())
                .is_none_or(|(u, g)| u.len() >= g.needed);
        let span = out.span();
        let disjoint = [data, Some(indices), updates]
            .into_iter()
            .flatten()
            .all(|input| !tensor::overlaps(span.clone(), input.as_ptr_range()));
        let serial = self.small == Some(parallel_grain()) || crate::threads::available() < 2;
        if !(fits && disjoint && serial && !self.steps.is_empty()) {
            return None;
        }
        let bases = [
            (
                Operand::Data,
                data.map_or(std::ptr::null(), |d| {
                    d.as_ptr().wrapping_add(self.data.start())
                })
                .cast_mut(),
            ),
            (
                Operand::Indices,
                indices
                    .as_ptr()
                    .wrapping_add(self.indices.start())
                    .cast_mut(),
            ),
            (
                Operand::Updates,
                updates
                    .map_or(std::ptr::null(), |u| {
                        let start = self.updates.as_ref().map_or(0, |g| g.start());
                        u.as_ptr().wrapping_add(start)
                    })
                    .cast_mut(),
            ),
            (
                Operand::Output,
                out.as_mut_ptr().wrapping_add(self.out.start()),
            ),
        ];
        let mut all = [std::ptr::null_mut::<u8>(); OPERAND_SLOTS];
        for (operand, base) in bases {
            all[operand.slot()] = base;
        }
        let index_dtype = kernel.plan.key.index_dtype();
        for step in &self.steps {
            match step {
                Step::Scan { bytes, size } => {
                    if check::first_bad(index_dtype, &indices[bytes.clone()], *size).is_some() {
                        return None;
                    }
                }
                Step::Memcpy { from, to } => {
                    let data = data.expect("in-place calls have no copy");
                    out.write(to.start, &data[from.clone()])
                        .expect("inside `out`: its length was checked against the geometry");
                }
                Step::Pass(bound) => {
                    let mut pointers = [std::ptr::null_mut::<u8>(); OPERAND_SLOTS];
                    for (slot, &given) in bound.slots.iter().enumerate() {
                        if given {
                            pointers[slot] = all[slot];
                        }
                    }
                    let failed = on_stack(&bound.params, |params| {
                        let status = enter(bound.entry, &pointers, params);
                        (status != STATUS_OK).then(|| error_counters(&bound.layout, params))
                    });
                    let Some(counters) = failed else {
                        continue;
                    };
                    if bound.pass == PassKind::Check {
                        return None;
                    }
                    // Unreachable after the check; reported as an ordinary call would.
                    let stop = Stop::BadIndex(domain_position(counters, &bound.order));
                    let indices = match self.indices.view(indices) {
                        Ok(indices) => indices,
                        Err(e) => return Some(Err(e.into())),
                    };
                    let data_shape = self.data.shape();
                    return Some(Err(kernel.bad_index(bound.pass, stop, data_shape, &indices)));
                }
            }
        }
        Some(Ok(()))
    }
}
