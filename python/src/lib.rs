//! The `scatterjit` Python module: the library's ops on numpy arrays and DLPack tensors,
//! without copies, the GIL released while a kernel runs.

mod errors;
mod kernel;
mod operand;
mod pool;
mod strings;

use std::sync::Arc;

use std::ffi::{c_int, c_void};

use numpy::npyffi::{
    get_type_object, npy_intp, NpyTypes, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE, PY_ARRAY_API,
};
use numpy::{PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use scatterjit::ir;
use scatterjit::{Kernel, KernelCache, KernelKey, Op, OpKind, Reduction, Tensor};

use errors::IntoPy;
use operand::{Access, Operand, Raw};
use pool::compute;

/// A reduction by any name the library accepts; `None` is `"none"`.
fn reduction(name: Option<&str>) -> PyResult<Reduction> {
    name.map_or(Ok(Reduction::None), |n| n.parse::<Reduction>().py_err())
}

/// The compiled kernel of `key` from the process-wide cache.
fn cached(key: &KernelKey) -> PyResult<Arc<Kernel>> {
    KernelCache::global().get(key).py_err()
}

/// An owned result as a C-contiguous numpy array of `dtype` over the same bytes (no
/// copy), made with one call of numpy's C-API rather than Python-level `view` and
/// `reshape` (which were half the time of a tiny out-of-place call).
fn to_numpy<'py>(
    py: Python<'py>,
    tensor: Tensor,
    dtype: Bound<'py, PyArrayDescr>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut dims = tensor
        .shape()
        .iter()
        .map(|&d| npy_intp::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| PyValueError::new_err("result shape does not fit numpy's npy_intp"))?;
    let rank = c_int::try_from(dims.len())
        .map_err(|_| PyValueError::new_err("result rank does not fit a C int"))?;
    // The bytes' owner: a 1-D uint8 array over the tensor's `Vec`, which frees it.
    let owner = PyArray1::from_vec(py, tensor.into_bytes());
    let data = owner.data() as *mut c_void;
    // SAFETY: the GIL is held; `descr` is a new reference that `PyArray_NewFromDescr`
    // steals; `dims` holds `rank` sizes whose product times the item size is the byte
    // length of `owner` (the tensor's shape and dtype describe its bytes), so the new
    // C-contiguous array (NULL strides) reads only `owner`'s memory, which stays alive
    // because `PyArray_SetBaseObject` makes `owner` the array's base (stealing the
    // reference `into_ptr` hands over) before anything else can see the array.
    unsafe {
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            get_type_object(py, NpyTypes::PyArray_Type),
            dtype.into_dtype_ptr(),
            rank,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data,
            NPY_ARRAY_WRITEABLE | NPY_ARRAY_C_CONTIGUOUS,
            std::ptr::null_mut(),
        );
        let array = Bound::from_owned_ptr_or_err(py, array)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr().cast(), owner.into_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

/// Where an out-of-place call's result goes.
enum Target<'a, 'py> {
    /// A new numpy array.
    New,
    /// The caller's writable array or tensor, returned.
    Into(&'a Bound<'py, PyAny>),
}

/// Runs `kernel` out of place into `target`.
fn run<'py>(
    py: Python<'py>,
    kernel: &Kernel,
    data: &Raw,
    indices: &Raw,
    updates: Option<&Raw>,
    target: Target<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let work = kernel.work(&data.shape, &indices.shape);
    let out_obj = match target {
        Target::Into(out) => out,
        Target::New => {
            // The dtype first: a missing ml_dtypes must fail before the kernel runs.
            let dtype = operand::numpy_dtype(py, kernel.key().dtype())?;
            let tensor = compute(py, work, || {
                let updates = updates.map(Raw::view).transpose()?;
                kernel.run(&data.view()?, &indices.view()?, updates.as_ref())
            })
            .py_err()?;
            return to_numpy(py, tensor, dtype);
        }
    };
    let mut out = Operand::new(out_obj, "out", Access::Write)?;
    let mut inputs = vec![(ir::Operand::Data, data), (ir::Operand::Indices, indices)];
    inputs.extend(updates.map(|u| (ir::Operand::Updates, u)));
    operand::disjoint(kernel.key().kind(), &out.raw, &inputs).py_err()?;
    let raw = &mut out.raw;
    compute(py, work, || {
        let updates = updates.map(Raw::view).transpose()?;
        kernel.run_into(
            &mut raw.view_mut()?,
            &data.view()?,
            &indices.view()?,
            updates.as_ref(),
        )
    })
    .py_err()?;
    Ok(out_obj.clone())
}

/// Updates `data` in place with `kernel` (a scatter_elements kernel).
fn scatter_in_place(
    py: Python<'_>,
    kernel: &Kernel,
    data: &mut Raw,
    indices: &Raw,
    updates: &Raw,
) -> PyResult<()> {
    let inputs = [
        (ir::Operand::Indices, indices),
        (ir::Operand::Updates, updates),
    ];
    operand::disjoint(OpKind::ScatterElements, data, &inputs).py_err()?;
    compute(py, pool::work(None, &indices.shape), || {
        kernel.scatter_in_place(&mut data.view_mut()?, &indices.view()?, &updates.view()?)
    })
    .py_err()
}

/// A gather op on Python objects: string arrays through the string path, anything else as
/// raw operands.
fn run_gather<'py>(
    py: Python<'py>,
    op: Op,
    data: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if strings::is_text(data) {
        return strings::run(py, op, data, indices, None, out);
    }
    let data = Operand::new(data, "data", Access::Read)?;
    let indices = Operand::new(indices, "indices", Access::Read)?;
    run_op(py, op, &data, &indices, None, out)
}

/// Runs `op` out of place on the operands with the kernel the library finds for them.
fn run_op<'py>(
    py: Python<'py>,
    op: Op,
    data: &Operand<'py>,
    indices: &Operand<'py>,
    updates: Option<&Operand<'py>>,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let updates = updates.map(|u| &u.raw);
    let kernel = scatterjit::kernel_for(
        &op,
        data.raw.meta(),
        indices.raw.meta(),
        updates.map(Raw::meta),
    )
    .py_err()?;
    let target = out.map_or(Target::New, Target::Into);
    run(py, &kernel, &data.raw, &indices.raw, updates, target)
}

/// ONNX ScatterElements (and OpenVINO ScatterElementsUpdate-12): a copy of ``data`` with
/// ``updates`` combined in at ``indices`` along ``axis``.
///
/// ``reduction`` is ``"none"`` (assign; with duplicate indices the last update in row-major
/// order wins), ``"add"``, ``"mul"``, ``"max"``, ``"min"`` or ``"mean"``, or an alias:
/// ``"sum"``, ``"prod"``, ``"multiply"``, ``"amax"``, ``"amin"``. With ``use_init_val``
/// false, every element that an index targets starts from the reduction's identity instead
/// of from ``data``. Negative indices count from the back. Inputs may be numpy arrays of any
/// strides (zero and negative included) or tensors with ``__dlpack__``, and are not copied.
/// numpy unicode arrays (``<U``) work with reduction ``"none"`` (copied, as strings are);
/// the result keeps data's width and byte order, wider only for a longer update.
///
/// Returns a new numpy array, or writes ``out`` (an array or DLPack tensor of data's dtype
/// and shape) and returns it. Every index is checked before ``out`` is written: on error
/// it is unchanged.
///
/// Raises ``IndexError`` for an index out of bounds (naming its value and position),
/// ``TypeError`` for a dtype the op does not take, ``ValueError`` for anything else.
///
/// >>> import numpy as np, scatterjit
/// >>> data = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=np.float32)
/// >>> scatterjit.scatter_elements(data, np.array([[1, -4]]), np.array([[1.5, 2.5]], dtype=np.float32), axis=1, reduction="add")
/// array([[1., 6., 3., 4., 5.]], dtype=float32)
#[pyfunction]
#[pyo3(signature = (data, indices, updates, axis = 0, reduction = "none", use_init_val = true, *, out = None))]
#[allow(clippy::too_many_arguments)]
fn scatter_elements<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    updates: &Bound<'py, PyAny>,
    axis: i64,
    reduction: &str,
    use_init_val: bool,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let op = Op::ScatterElements {
        axis,
        reduction: self::reduction(Some(reduction))?,
        use_init_val,
    };
    if strings::is_text(data) {
        return strings::run(py, op, data, indices, Some(updates), out);
    }
    let data = Operand::new(data, "data", Access::Read)?;
    let indices = Operand::new(indices, "indices", Access::Read)?;
    let updates = Operand::new(updates, "updates", Access::Read)?;
    run_op(py, op, &data, &indices, Some(&updates), out)
}

/// ONNX GatherElements: ``out[p] = data[p with coordinate axis replaced by indices[p]]``
/// (numpy's ``take_along_axis``), with negative indices counting from the back.
///
/// Returns a new numpy array shaped like ``indices``, or writes ``out`` and returns it.
/// numpy unicode arrays work too. Errors as in ``scatter_elements``.
///
/// >>> import numpy as np, scatterjit
/// >>> scatterjit.gather_elements(np.array([[1, 2], [3, 4]]), np.array([[0, 0], [1, 0]]), axis=1)
/// array([[1, 1],
///        [4, 3]])
#[pyfunction]
#[pyo3(signature = (data, indices, axis = 0, *, out = None))]
fn gather_elements<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    axis: i64,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    run_gather(py, Op::GatherElements { axis }, data, indices, out)
}

/// ONNX Gather: ``out[a, i, b] = data[a, indices[i], b]`` (numpy's ``take``), with
/// negative indices counting from the back.
///
/// Returns a new numpy array of shape ``data.shape[:axis] + indices.shape +
/// data.shape[axis + 1:]``, or writes ``out`` and returns it. Errors as in
/// ``scatter_elements``.
///
/// >>> import numpy as np, scatterjit
/// >>> scatterjit.gather(np.array([[1, 2, 3], [4, 5, 6]]), np.array([-1, 0]), axis=1)
/// array([[3, 1],
///        [6, 4]])
#[pyfunction]
#[pyo3(signature = (data, indices, axis = 0, *, out = None))]
fn gather<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    axis: i64,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    run_gather(py, Op::Gather { axis }, data, indices, out)
}

/// `src` as the updates of an in-place scatter into `dtype`: a scalar broadcast to the
/// index shape without a copy of any tensor, or a tensor (which may be larger than index).
fn source<'py>(
    src: &Bound<'py, PyAny>,
    dtype: scatterjit::DType,
    index: &Raw,
) -> PyResult<Operand<'py>> {
    match Operand::scalar(src, "src", dtype, &index.shape)? {
        Some(scalar) => Ok(scalar),
        None => Operand::new(src, "src", Access::Read),
    }
}

/// PyTorch's ``tensor.scatter_(dim, index, src, reduce)`` and
/// ``tensor.scatter_reduce_(dim, index, src, reduce, include_self=...)``: updates
/// ``tensor`` in place and returns it.
///
/// ``tensor`` is a writable numpy array or a CPU tensor with ``__dlpack__`` (a PyTorch
/// tensor is written in its own memory: its ``data_ptr()`` stays the same). ``src`` is a
/// tensor at least as large as ``index`` in every dim (only the part ``index`` covers is
/// read), or a Python or numpy scalar, converted to tensor's dtype and broadcast without a
/// copy. ``reduce`` is ``None`` (assign), or any reduction name or alias the library
/// accepts (``"add"``/``"sum"``, ``"mul"``/``"prod"``/``"multiply"``,
/// ``"max"``/``"amax"``, ``"min"``/``"amin"``, ``"mean"``); ``include_self=False``
/// starts every targeted element from the reduction's identity. Unlike PyTorch, negative
/// indices are accepted and count from the back.
///
/// Every index is checked before the first write: on error ``tensor`` is unchanged. A
/// read-only array is an error, never written. Raises ``IndexError`` for an index out of
/// bounds, ``TypeError`` for a dtype the op does not take, ``ValueError`` otherwise.
///
/// >>> import numpy as np, scatterjit
/// >>> t = np.zeros((2, 4))
/// >>> _ = scatterjit.scatter_(t, 1, np.array([[1], [-1]]), 1.25)
/// >>> t
/// array([[0.  , 1.25, 0.  , 0.  ],
///        [0.  , 0.  , 0.  , 1.25]])
#[pyfunction]
#[pyo3(signature = (tensor, dim, index, src, reduce = None, include_self = true))]
fn scatter_<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, PyAny>,
    dim: i64,
    index: &Bound<'py, PyAny>,
    src: &Bound<'py, PyAny>,
    reduce: Option<&str>,
    include_self: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let op = Op::ScatterElements {
        axis: dim,
        reduction: reduction(reduce)?,
        use_init_val: include_self,
    };
    let mut data = Operand::new(tensor, "tensor", Access::Write)?;
    let index = Operand::new(index, "index", Access::Read)?;
    let src = source(src, data.raw.dtype, &index.raw)?;
    let kernel =
        scatterjit::kernel_for(&op, data.raw.meta(), index.raw.meta(), Some(src.raw.meta()))
            .py_err()?;
    scatter_in_place(py, &kernel, &mut data.raw, &index.raw, &src.raw)?;
    Ok(tensor.clone())
}

/// Statistics of the process-wide kernel cache: ``hits``, ``misses`` (kernels compiled),
/// ``evictions``, ``compile_time`` (seconds spent compiling) and ``kernels`` (held now).
#[pyfunction]
fn cache_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let stats = KernelCache::global().stats();
    let dict = PyDict::new(py);
    dict.set_item("hits", stats.hits)?;
    dict.set_item("misses", stats.misses)?;
    dict.set_item("evictions", stats.evictions)?;
    dict.set_item("compile_time", stats.compile_time.as_secs_f64())?;
    dict.set_item("kernels", stats.kernels)?;
    Ok(dict)
}

/// The kernel of a key such as ``"scatter_elements.f32.i64.r2.a1.add"`` from the
/// process-wide cache, compiled on first use (see ``Kernel``).
#[pyfunction]
#[pyo3(name = "kernel")]
fn get_kernel(key: &str) -> PyResult<kernel::PyKernel> {
    let key: KernelKey = key.parse().py_err()?;
    Ok(kernel::PyKernel::new(cached(&key)?))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(scatter_elements, m)?)?;
    m.add_function(wrap_pyfunction!(gather_elements, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_, m)?)?;
    m.add_function(wrap_pyfunction!(get_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(pool::set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(pool::get_num_threads, m)?)?;
    m.add_class::<kernel::PyKernel>()?;
    Ok(())
}
