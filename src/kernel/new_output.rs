//! Calls into a new output ([`Kernel::run`], the free functions): how the output starts,
//! and the call that runs a repeated geometry again from owned tensors alone, on the
//! binding the kernel's memo kept for it (the free functions' kept calls, `crate::api`).

use std::sync::Arc;

use scatterjit_ir::{checked_nbytes, DType, OpKind, Tensor};

use super::memo;
use super::prepared::Binding;
use super::Kernel;
use crate::alloc;
use crate::error::{Buffer, Result};
use crate::tensor::{Place, TensorView, TensorViewMut};

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

/// A call into a new output that ran on one of its kernel's kept bindings: what running
/// the same geometry again needs, given owned tensors of the same dtypes and shapes (whose
/// views have the same geometry, being row-major).
pub(crate) struct KeptCall {
    binding: Arc<Binding>,
    start: Start,
    out_shape: Vec<usize>,
    out_bytes: usize,
}

impl Kernel {
    /// [`Self::run`] on operands that `Op::validate` accepted with this kernel's key and
    /// output shape `out_shape` (the free functions validate once, to find the key). Also
    /// returns, where the call ran on a binding the kernel kept, what running it again from
    /// owned tensors needs ([`Self::run_kept`]).
    pub(crate) fn run_validated(
        &self,
        out_shape: Vec<usize>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<(Tensor, Option<KeptCall>)> {
        let (op, dtype) = (self.plan.key.kind(), self.plan.key.dtype());
        let len = checked_nbytes(dtype, &out_shape)?;
        // Both caps before either allocation.
        alloc::check(op, Buffer::Output, len as u128)?;
        self.check_scratch(&out_shape)?;
        let copy_of_data = match op {
            OpKind::ScatterElements => data.dense_bytes(),
            _ => None,
        };
        let start = self.start(copy_of_data.is_some());
        let kept = |binding: Option<Arc<Binding>>, out_shape: &[usize]| {
            binding.map(|binding| KeptCall {
                binding,
                start,
                out_shape: out_shape.to_vec(),
                out_bytes: len,
            })
        };
        if start == Start::Unwritten {
            let mut bytes = alloc::unwritten(op, Buffer::Output, len)?;
            // SAFETY: the view goes to a gather's call only, whose kernels (compiled or
            // in blocks, any split) write every element before anything reads it.
            let mut view = unsafe { TensorViewMut::unwritten(bytes.place(), dtype, &out_shape) }?;
            let binding = self.run_new(&mut view, Some(data), indices, updates)?;
            // SAFETY: the call succeeded, so every byte has been written (above); a bad
            // index returned early and dropped `bytes` unread.
            let bytes = unsafe { bytes.written() };
            let kept = kept(binding, &out_shape);
            return Ok((Tensor::from_bytes(dtype, out_shape, bytes)?, kept));
        }
        let bytes = match copy_of_data {
            Some(from) => alloc::copied(op, Buffer::Output, from)?,
            None => alloc::zeroed(op, Buffer::Output, len)?,
        };
        let mut out = Tensor::from_bytes(dtype, out_shape, bytes)?;
        let data = copy_of_data.is_none().then_some(data);
        let binding = self.run_new(&mut TensorViewMut::from(&mut out), data, indices, updates)?;
        let kept = kept(binding, out.shape());
        Ok((out, kept))
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
    /// stop a pass midway, and the output is dropped. Returns the binding it ran on, if the
    /// memo kept one for its geometry.
    fn run_new(
        &self,
        out: &mut TensorViewMut<'_>,
        data: Option<&TensorView<'_>>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Result<Option<Arc<Binding>>> {
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

    /// Runs `kept`, a call of this kernel, again on owned tensors of the dtypes and shapes
    /// it ran on: the output it returned then, with the same bytes, or the same error. `None`
    /// where the call must take the ordinary path ([`Self::run_validated`]), which then
    /// makes every decision, and reports every error, itself: where the binding declines
    /// (see [`Binding::run`]: a grain changed since, a bad index it leaves to that path) or
    /// the output cannot be allocated.
    pub(crate) fn run_kept(
        &self,
        kept: &KeptCall,
        data: &Tensor,
        indices: &Tensor,
        updates: Option<&Tensor>,
    ) -> Option<Result<Tensor>> {
        let (op, dtype) = (self.plan.key.kind(), self.plan.key.dtype());
        let data = data.bytes();
        let run = |out: Place<'_>, data: Option<&[u8]>| {
            let updates = updates.map(Tensor::bytes);
            kept.binding.run(self, out, data, indices.bytes(), updates)
        };
        let bytes = match kept.start {
            Start::Unwritten => {
                let mut bytes = alloc::unwritten(op, Buffer::Output, kept.out_bytes).ok()?;
                if let Err(e) = run(bytes.place(), Some(data))? {
                    return Some(Err(e));
                }
                // SAFETY: the binding ran a gather's passes whole on the geometry of the
                // call it was kept from, so every byte has been written.
                unsafe { bytes.written() }
            }
            Start::CopyOfData | Start::Zeroed => {
                let (mut bytes, data) = match kept.start {
                    Start::CopyOfData => (alloc::copied(op, Buffer::Output, data).ok()?, None),
                    _ => (
                        alloc::zeroed(op, Buffer::Output, kept.out_bytes).ok()?,
                        Some(data),
                    ),
                };
                if let Err(e) = run(Place::from(&mut bytes[..]), data)? {
                    return Some(Err(e));
                }
                bytes
            }
        };
        Some(Tensor::from_bytes(dtype, kept.out_shape.clone(), bytes).map_err(Into::into))
    }
}
