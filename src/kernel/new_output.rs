//! Calls into a new output ([`Kernel::run`], the free functions): how the output starts,
//! and the kept calls of the free functions (`crate::api`): a geometry bound once, run
//! again from owned tensors alone.

use scatterjit_ir::{checked_nbytes, DType, OpKind, Tensor};

use super::memo;
use super::prepared::Binding;
use super::Kernel;
use crate::alloc;
use crate::error::{Buffer, Result};
use crate::tensor::{row_major, Place, TensorView, TensorViewMut, Unbuffered};

/// How a new output starts, before the kernel runs on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Unwritten: a gather's kernels write every element. Not for bool, whose bytes
    /// `Tensor` checks, which a view of data does not.
    Unwritten,
    /// As data's copy (data row-major), the scatter then running in place on it.
    CopyOfData,
    /// Zeroed, the kernel reading data as it writes: bool gathers, and scatters of data
    /// that is not row-major.
    Zeroed,
}

/// A call into a new output bound to its geometry ([`Kernel::keep_new`]): what running it
/// again needs, given owned tensors of the same dtypes and shapes (whose views have the
/// same geometry, being row-major).
pub(crate) struct KeptCall {
    binding: Binding,
    start: Start,
    out_shape: Vec<usize>,
    out_bytes: usize,
}

impl Kernel {
    /// [`Self::run`] on operands that `Op::validate` accepted with this kernel's key and
    /// output shape `out_shape` (the free functions validate once, to find the key).
    pub(crate) fn run_validated(
        &self,
        out_shape: Vec<usize>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<Tensor> {
        let (op, dtype) = (self.plan.key.kind(), self.plan.key.dtype());
        let len = checked_nbytes(dtype, &out_shape)?;
        // Both caps before either allocation.
        alloc::check(op, Buffer::Output, len as u128)?;
        self.check_scratch(&out_shape)?;
        let copy_of_data = match op {
            OpKind::ScatterElements => data.dense_bytes(),
            _ => None,
        };
        if self.start(copy_of_data.is_some()) == Start::Unwritten {
            let mut bytes = alloc::unwritten(op, Buffer::Output, len)?;
            // SAFETY: the view goes to a gather's call only, whose kernels (compiled or
            // in blocks, any split) write every element before anything reads it.
            let mut view = unsafe { TensorViewMut::unwritten(bytes.place(), dtype, &out_shape) }?;
            self.run_new(&mut view, Some(data), indices, updates)?;
            // SAFETY: the call succeeded, so every byte has been written (above); a bad
            // index returned early and dropped `bytes` unread.
            let bytes = unsafe { bytes.written() };
            return Ok(Tensor::from_bytes(dtype, out_shape, bytes)?);
        }
        let bytes = match copy_of_data {
            Some(from) => alloc::copied(op, Buffer::Output, from)?,
            None => alloc::zeroed(op, Buffer::Output, len)?,
        };
        let mut out = Tensor::from_bytes(dtype, out_shape, bytes)?;
        let data = copy_of_data.is_none().then_some(data);
        self.run_new(&mut TensorViewMut::from(&mut out), data, indices, updates)?;
        Ok(out)
    }

    /// How this kernel's new outputs start, given whether data is row-major.
    fn start(&self, data_row_major: bool) -> Start {
        match (self.plan.key.kind(), self.plan.key.dtype()) {
            (OpKind::ScatterElements, _) if data_row_major => Start::CopyOfData,
            (OpKind::ScatterElements, _) | (_, DType::Bool) => Start::Zeroed,
            _ => Start::Unwritten,
        }
    }

    /// A call into a new output of [`Self::run`] (in place on it when `data` is `None`):
    /// without the check before the first write, as the output is ours; a bad index may
    /// stop a pass midway, and the output is dropped.
    fn run_new(
        &self,
        out: &mut TensorViewMut<'_>,
        data: Option<&TensorView<'_>>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<()> {
        let ops = memo::Operands {
            in_place: data.is_none(),
            out,
            data,
            indices,
            updates,
        };
        self.memo.call(self, ops, |out| {
            self.execute(out, data, indices, updates, false)
        })
    }

    /// Binds a call of [`Self::run_validated`] that succeeded on these views of owned
    /// tensors (row-major) with output shape `out_shape`, for [`Self::run_kept`]; `None`
    /// where the kernel's memo would not keep it either (not small, `mean`), where it runs
    /// on views alone (Gathers in blocks), or where binding fails.
    pub(crate) fn keep_new(
        &self,
        out_shape: &[usize],
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Option<KeptCall> {
        let shapes = [
            Some(out_shape),
            Some(data.shape()),
            Some(indices.shape()),
            updates.map(TensorView::shape),
        ];
        if !memo::is_small(self, shapes) {
            return None;
        }
        let dtype = self.plan.key.dtype();
        let start = self.start(match self.plan.key.kind() {
            OpKind::ScatterElements => data.dense_bytes().is_some(),
            _ => false,
        });
        let out = Unbuffered::new(dtype, out_shape, &row_major(out_shape), 0, true).ok()?;
        let in_place = start == Start::CopyOfData;
        let data = if in_place {
            out.clone()
        } else {
            Unbuffered::of(data)
        };
        let indices = Unbuffered::of(indices);
        let updates = updates.map(Unbuffered::of);
        let binding = self.bind(in_place, out, data, indices, updates).ok()?;
        if !binding.runs_on_buffers() {
            return None;
        }
        Some(KeptCall {
            binding,
            start,
            out_shape: out_shape.to_vec(),
            out_bytes: checked_nbytes(dtype, out_shape).ok()?,
        })
    }

    /// Runs `kept`, a call of this kernel, again on owned tensors of the dtypes and shapes
    /// it was bound for: the output [`Self::run_validated`] returns, with the same bytes,
    /// or the same error. `None` where the call must take the ordinary path, which then
    /// makes every decision, and reports every error, itself: where the binding declines
    /// (see [`Binding::run`]: a grain changed since, a bad index, which its check finds
    /// before any write) or the output cannot be allocated (the limits in force).
    pub(crate) fn run_kept(
        &self,
        kept: &KeptCall,
        data: &Tensor,
        indices: &Tensor,
        updates: Option<&Tensor>,
    ) -> Option<Result<Tensor>> {
        let buffers = (data.bytes(), indices.bytes(), updates.map(Tensor::bytes));
        let out = (&kept.out_shape[..], kept.out_bytes);
        self.run_bound(&kept.binding, kept.start, out, buffers)
    }

    /// [`Self::run`] on a binding the memo kept of a call on views of these geometries,
    /// without validating the op again (see [`Binding::describes_new`]); `None`, as
    /// [`Self::run_kept`], where the call must take the ordinary path, or where the memo
    /// keeps no such binding.
    pub(super) fn run_kept_views(
        &self,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Option<Result<Tensor>> {
        let copy_of_data = match self.plan.key.kind() {
            OpKind::ScatterElements => data.dense_bytes(),
            _ => None,
        };
        let start = self.start(copy_of_data.is_some());
        let in_place = start == Start::CopyOfData;
        let binding = self.memo.find_new(in_place, data, indices, updates)?;
        let out_shape = binding.out_shape();
        let out_bytes = checked_nbytes(self.plan.key.dtype(), out_shape).ok()?;
        // In place, the binding reads data as the output's copy of it.
        let data = copy_of_data.unwrap_or_else(|| data.buffer());
        let buffers = (data, indices.buffer(), updates.map(TensorView::buffer));
        self.run_bound(&binding, start, (out_shape, out_bytes), buffers)
    }

    /// A new output of `shape` and `bytes`, started as `start` says, with `binding` run on
    /// it; `data` is what a copy of data copies or else what the binding reads. `None`
    /// where the binding declines or the output cannot be allocated.
    fn run_bound(
        &self,
        binding: &Binding,
        start: Start,
        (shape, len): (&[usize], usize),
        (data, indices, updates): (&[u8], &[u8], Option<&[u8]>),
    ) -> Option<Result<Tensor>> {
        let (op, dtype) = (self.plan.key.kind(), self.plan.key.dtype());
        let run =
            |out: Place<'_>, data: Option<&[u8]>| binding.run(self, out, data, indices, updates);
        let bytes = match start {
            Start::Unwritten => {
                let mut bytes = alloc::unwritten(op, Buffer::Output, len).ok()?;
                if let Err(e) = run(bytes.place(), Some(data))? {
                    return Some(Err(e));
                }
                // SAFETY: the binding ran a gather's passes whole on the geometry of the
                // output it was bound for, so every byte has been written.
                unsafe { bytes.written() }
            }
            Start::CopyOfData | Start::Zeroed => {
                let (mut bytes, data) = match start {
                    Start::CopyOfData => (alloc::copied(op, Buffer::Output, data).ok()?, None),
                    _ => (alloc::zeroed(op, Buffer::Output, len).ok()?, Some(data)),
                };
                if let Err(e) = run(Place::from(&mut bytes[..]), data)? {
                    return Some(Err(e));
                }
                bytes
            }
        };
        Some(Tensor::from_bytes(dtype, shape.to_vec(), bytes).map_err(Into::into))
    }
}
