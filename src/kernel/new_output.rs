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
        let copy_of_data = self.copy_of_data(data);
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

    /// The bytes a scatter's new output starts as: data's, where data is row-major.
    fn copy_of_data<'v>(&self, data: &'v TensorView<'_>) -> Option<&'v [u8]> {
        match self.plan.key.kind() {
            OpKind::ScatterElements => data.dense_bytes(),
            _ => None,
        }
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
        let start = self.start(self.copy_of_data(data).is_some());
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
        let copy_of_data = self.copy_of_data(data);
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

#[cfg(test)]
mod tests {
    use scatterjit_ir::{interp, KernelKey, Op, Reduction};

    use super::*;

    const ADD: Op = Op::ScatterElements {
        axis: 0,
        reduction: Reduction::Add,
        use_init_val: true,
    };

    /// f32 values from `seed`, `n` of them.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 + seed) % 23) as f32 * 0.25)
            .collect()
    }

    /// Little-endian bytes of `values`, after `pad` zero elements.
    fn f32_bytes(pad: usize, values: &[f32]) -> Vec<u8> {
        let mut bytes = vec![0u8; pad * 4];
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        bytes
    }

    /// `Kernel::run` on the views, checked against the interpreter on their tensors.
    fn runs_as_interpreted(
        kernel: &Kernel,
        op: &Op,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) {
        let tensors = [Some(data), Some(indices), updates].map(|v| v.map(|v| v.to_tensor()));
        let [data_t, indices_t, updates_t] = tensors.map(|t| t.transpose().unwrap());
        let want = interp::run(
            op,
            &data_t.unwrap(),
            &indices_t.unwrap(),
            updates_t.as_ref(),
        );
        let got = kernel.run(data, indices, updates);
        assert_eq!(got.map_err(|e| e.as_invalid().cloned()), want.map_err(Some));
    }

    #[test]
    fn a_kept_binding_runs_new_data_of_its_shape_wherever_it_lies() {
        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Add, true);
        let kernel = Kernel::compile(key.unwrap()).unwrap();
        let picks: Vec<i64> = (0..15).map(|i| (i * 5) % 6 - 3).collect();
        let index_bytes: Vec<u8> = picks.iter().flat_map(|i| i.to_le_bytes()).collect();
        let indices = TensorView::contiguous(DType::I64, &[3, 5], &index_bytes).unwrap();
        let update_bytes = f32_bytes(0, &values(15, 1));
        let updates = TensorView::contiguous(DType::F32, &[3, 5], &update_bytes).unwrap();
        // Bound from row-major data at offset 0: the output starts as data's copy.
        let first = f32_bytes(0, &values(30, 2));
        let data = TensorView::contiguous(DType::F32, &[6, 5], &first).unwrap();
        for _ in 0..2 {
            runs_as_interpreted(&kernel, &ADD, &data, &indices, Some(&updates));
        }
        assert_eq!(kernel.kept_bindings(), 1);
        // Row-major data of the same shape at an offset, then transposed data (no copy:
        // the output starts zeroed, a geometry of its own).
        let shifted = f32_bytes(3, &values(30, 5));
        let data = TensorView::new(DType::F32, &[6, 5], &[5, 1], 3, &shifted).unwrap();
        runs_as_interpreted(&kernel, &ADD, &data, &indices, Some(&updates));
        let data = TensorView::new(DType::F32, &[6, 5], &[1, 6], 0, &shifted).unwrap();
        runs_as_interpreted(&kernel, &ADD, &data, &indices, Some(&updates));
        // A data view of another shape or dtype is not the binding's: the op's checks
        // name it.
        let data = TensorView::contiguous(DType::F32, &[5, 5], &first[..100]).unwrap();
        runs_as_interpreted(&kernel, &ADD, &data, &indices, Some(&updates));
        let data = TensorView::contiguous(DType::I32, &[6, 5], &first).unwrap();
        assert!(kernel.run(&data, &indices, Some(&updates)).is_err());
    }

    #[test]
    fn a_bad_index_or_a_limit_on_a_kept_binding_is_the_ordinary_paths_error() {
        let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let table = f32_bytes(0, &values(40, 3));
        let data = TensorView::contiguous(DType::F32, &[10, 4], &table).unwrap();
        let good: Vec<u8> = [3i64, -1, 0].iter().flat_map(|i| i.to_le_bytes()).collect();
        let indices = TensorView::contiguous(DType::I64, &[3], &good).unwrap();
        let op = Op::Gather { axis: 0 };
        for _ in 0..2 {
            runs_as_interpreted(&kernel, &op, &data, &indices, None);
        }
        assert_eq!(kernel.kept_bindings(), 1);
        for bad in [10i64, -11, i64::MIN] {
            let picks: Vec<u8> = [3i64, bad, 0]
                .iter()
                .flat_map(|i| i.to_le_bytes())
                .collect();
            let indices = TensorView::contiguous(DType::I64, &[3], &picks).unwrap();
            runs_as_interpreted(&kernel, &op, &data, &indices, None);
        }
        let small = crate::Limits {
            max_output_bytes: 16,
            ..crate::limits()
        };
        let e = crate::with_limits(small, || kernel.run(&data, &indices, None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gather: the output needs 48 bytes, over the limit of 16 bytes"
        );
        runs_as_interpreted(&kernel, &op, &data, &indices, None);
    }
}
