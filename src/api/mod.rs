//! The public entry points: out-of-place ops on owned tensors, PyTorch's in-place
//! `scatter_`, the kernel for an op's operands, and `explain`.

mod kept;

use std::fmt::Write as _;
use std::sync::Arc;

use scatterjit_ir::{DType, KernelKey, Meta, Op, Plan, Reduction, Tensor};

use crate::cache::KernelCache;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::strings;
use crate::tensor::{TensorView, TensorViewMut};

/// Runs `op` out of place on owned tensors with the process-wide kernel cache.
/// `updates` is required for ScatterElements and must be `None` for the gather ops.
///
/// A small call that repeats one of its thread's recent calls (same op, dtypes and shapes,
/// new values) runs on what that call bound, without validating the op or finding the
/// kernel again; results and errors are the same either way.
///
/// ```
/// use scatterjit::{Op, Tensor};
/// let data = Tensor::from_slice(&[3, 2], &[1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7])?;
/// let indices = Tensor::from_slice(&[2, 2], &[0i64, 1, 1, 2])?;
/// let out = scatterjit::run(&Op::Gather { axis: 0 }, &data, &indices, None)?;
/// assert_eq!(out.shape(), [2, 2, 2]);
/// assert_eq!(out.to_vec::<f32>()?, [1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
///
/// String tensors work with the gather ops and with ScatterElements whose reduction is
/// `none`; the strings travel through the same compiled kernels as integer handles.
///
/// ```
/// use scatterjit::{Op, Reduction, Tensor};
/// let data = Tensor::from_strings(&[3], ["a", "b", "c"])?;
/// let indices = Tensor::from_slice(&[2], &[-1i64, 0])?;
/// let updates = Tensor::from_strings(&[2], ["zé", "日本"])?;
/// let op = Op::ScatterElements { axis: 0, reduction: Reduction::None, use_init_val: true };
/// let out = scatterjit::run(&op, &data, &indices, Some(&updates))?;
/// assert_eq!(out.strings()?, ["日本", "b", "zé"]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn run(op: &Op, data: &Tensor, indices: &Tensor, updates: Option<&Tensor>) -> Result<Tensor> {
    let miss = match kept::run(op, data, indices, updates) {
        Ok(done) => return done,
        Err(miss) => miss,
    };
    let validated = op.validate(data.meta(), indices.meta(), updates.map(|u| u.meta()))?;
    if validated.key.dtype() == DType::String {
        return strings::run(op, data, indices, updates);
    }
    let kernel = KernelCache::global().get(&validated.key)?;
    let (dv, iv) = (TensorView::from(data), TensorView::from(indices));
    let uv = updates.map(TensorView::from);
    let out = kernel.run_validated(validated.out_shape, &dv, &iv, uv.as_ref())?;
    kept::missed(miss, op, (data, indices, updates), &kernel, || {
        kernel.keep_new(out.shape(), &dv, &iv, uv.as_ref())
    });
    Ok(out)
}

/// How many calls of [`run`] and [`kernel_for`] (and the functions that call them) this
/// thread keeps, and how many of its calls have found one of them (including calls of
/// `run` whose binding then declined); for tests (see `api::kept`).
#[doc(hidden)]
pub fn kept_calls() -> (usize, u64) {
    kept::count()
}

/// ONNX ScatterElements (and OpenVINO ScatterElementsUpdate-12): a copy of `data` with
/// `updates` combined in at `indices` along `axis`.
///
/// ```
/// use scatterjit::{Reduction, Tensor};
/// let data = Tensor::from_slice(&[3], &[0i32, 0, 0])?;
/// let indices = Tensor::from_slice(&[3], &[2i64, -1, 0])?;
/// let updates = Tensor::from_slice(&[3], &[5i32, 6, 7])?;
/// let out = scatterjit::scatter_elements(&data, &indices, &updates, 0, Reduction::Add, true)?;
/// assert_eq!(out.to_vec::<i32>()?, [7, 0, 11]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn scatter_elements(
    data: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    axis: i64,
    reduction: Reduction,
    use_init_val: bool,
) -> Result<Tensor> {
    let op = Op::ScatterElements {
        axis,
        reduction,
        use_init_val,
    };
    run(&op, data, indices, Some(updates))
}

/// ONNX GatherElements: `out[p] = data[p with coordinate axis replaced by indices[p]]`.
///
/// ```
/// use scatterjit::Tensor;
/// let data = Tensor::from_slice(&[2, 2], &[1u8, 2, 3, 4])?;
/// let indices = Tensor::from_slice(&[2, 2], &[0i32, 0, 1, 0])?;
/// let out = scatterjit::gather_elements(&data, &indices, 1)?;
/// assert_eq!(out.to_vec::<u8>()?, [1, 1, 4, 3]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn gather_elements(data: &Tensor, indices: &Tensor, axis: i64) -> Result<Tensor> {
    run(&Op::GatherElements { axis }, data, indices, None)
}

/// ONNX Gather: `out[a, i, b] = data[a, indices[i], b]`.
///
/// ```
/// use scatterjit::Tensor;
/// let data = Tensor::from_slice(&[2, 3], &[1i64, 2, 3, 4, 5, 6])?;
/// let indices = Tensor::from_slice(&[2], &[-1i64, 0])?;
/// let out = scatterjit::gather(&data, &indices, 1)?;
/// assert_eq!(out.to_vec::<i64>()?, [3, 1, 6, 4]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn gather(data: &Tensor, indices: &Tensor, axis: i64) -> Result<Tensor> {
    run(&Op::Gather { axis }, data, indices, None)
}

/// PyTorch `self.scatter_(dim, index, src, reduce)` / `scatter_reduce_(..., include_self)`:
/// updates `data` in place. `src` may be larger than `index` (only the part `index` covers
/// is read) or a broadcast scalar (a view with all strides zero, see [`TensorView::new`]).
/// Unlike PyTorch, negative indices are accepted and count from the back. Every index is
/// checked before the first write: on error `data` is unchanged. A call that repeats one of
/// its thread's recent calls (same dtypes and shapes) finds its kernel without validating
/// the op again ([`kernel_for`]); results and errors are the same. Views hold no strings, so
/// string tensors take [`scatter_elements`] instead (here they are an
/// [`UnsupportedDType`](scatterjit_ir::Error::UnsupportedDType) error).
///
/// ```
/// use scatterjit::{Reduction, Tensor, TensorView, TensorViewMut};
/// let mut data = Tensor::from_slice(&[2, 4], &[0.0f64; 8])?;
/// let index = Tensor::from_slice(&[2, 1], &[1i64, 3])?;
/// let value = 1.25f64.to_le_bytes();
/// let src = TensorView::new(scatterjit::DType::F64, &[2, 1], &[0, 0], 0, &value)?;
/// scatterjit::scatter_(&mut TensorViewMut::from(&mut data), 1, &(&index).into(), &src, Reduction::None, true)?;
/// assert_eq!(data.to_vec::<f64>()?, [0.0, 1.25, 0.0, 0.0, 0.0, 0.0, 0.0, 1.25]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn scatter_(
    data: &mut TensorViewMut<'_>,
    dim: i64,
    index: &TensorView<'_>,
    src: &TensorView<'_>,
    reduce: Reduction,
    include_self: bool,
) -> Result<()> {
    let op = Op::ScatterElements {
        axis: dim,
        reduction: reduce,
        use_init_val: include_self,
    };
    kernel_for(&op, data.meta(), index.meta(), Some(src.meta()))?
        .scatter_in_place_validated(data, index, src)
}

/// The kernel that runs `op` on operands of these dtypes and shapes (`updates` for
/// ScatterElements alone), from the process-wide cache: what validating the op on them
/// ([`Op::validate`]) and then asking [`KernelCache::global`] for the key gives, or the
/// error either gives. A thread finds the kernels of the calls it repeats (op, dtypes and
/// shapes) without validating or asking again; [`scatter_`] and the Python package find
/// their kernels so.
///
/// ```
/// use scatterjit::{ir::Meta, DType, Op, Tensor, TensorView};
/// let data = Tensor::from_slice(&[3, 2], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// let indices = Tensor::from_slice(&[2], &[2i64, -3])?;
/// let op = Op::Gather { axis: 0 };
/// let kernel = scatterjit::kernel_for(&op, data.meta(), indices.meta(), None)?;
/// let out = kernel.run(&TensorView::from(&data), &TensorView::from(&indices), None)?;
/// assert_eq!(out.to_vec::<f32>()?, [5.0, 6.0, 1.0, 2.0]);
/// // Operands the op does not take are its error.
/// let bad = Meta::new(DType::F32, &[2]);
/// assert!(scatterjit::kernel_for(&op, data.meta(), bad, None).is_err());
/// # Ok::<(), scatterjit::Error>(())
/// ```
pub fn kernel_for(
    op: &Op,
    data: Meta<'_>,
    indices: Meta<'_>,
    updates: Option<Meta<'_>>,
) -> Result<Arc<Kernel>> {
    let tensors = [Some(data), Some(indices), updates];
    let miss = match kept::kernel(op, &tensors) {
        Ok(kernel) => return Ok(kernel),
        Err(miss) => miss,
    };
    let validated = op.validate(data, indices, updates)?;
    let kernel = KernelCache::global().get(&validated.key)?;
    kept::validated(miss, op, &tensors, &kernel);
    Ok(kernel)
}

/// Describes how `key` is compiled: the op IR's loop nests, then for every pass and each
/// variant of its innermost loop (see [`Kernel::listings`]) the CLIF as built, the CLIF
/// after optimization, and the machine code.
pub fn explain(key: &KernelKey) -> Result<String> {
    let mut text = String::new();
    let _ = writeln!(text, "== op IR\n{}", Plan::new(*key));
    for listing in Kernel::listings(*key)? {
        let pass = listing.pass.map_or("?", |p| p.name());
        let head = format!("== {pass} ({})", listing.variant);
        let _ = writeln!(text, "{head}: CLIF as built\n{}", listing.clif);
        let _ = writeln!(text, "{head}: CLIF optimized\n{}", listing.optimized);
        let _ = writeln!(text, "{head}: machine code\n{}", listing.asm);
    }
    Ok(text)
}
