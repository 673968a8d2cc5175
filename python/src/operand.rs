//! Python objects as strided views over their own memory: numpy arrays through numpy's
//! C-API, anything else with `__dlpack__` through DLPack, scalars broadcast with zero
//! strides. Nothing is copied but Python scalars and objects that are not arrays at all
//! (lists), which `numpy.asarray` turns into arrays first.

use std::ops::Range;

use dlpark::ffi::{DLDataTypeCode, DLDeviceType};
use dlpark::python::{from_dlpack, ImportedDlpack};
use dlpark::DlpackFlags;
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyComplex, PyFloat, PyInt, PyType};
use scatterjit::ir::Meta;
use scatterjit::{DType, TensorView, TensorViewMut};

/// The memory of one operand: dtype, shape, element strides, and the byte range that its
/// positions reach. The Python object that owns the memory is kept by [`Operand`].
pub(crate) struct Raw {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub strides: Vec<isize>,
    /// The lowest byte any position reaches (dangling when there are no elements).
    start: *mut u8,
    /// Bytes from `start` through the last byte of the highest element.
    len: usize,
    /// Elements from `start` to position 0.
    offset: usize,
}

// SAFETY: `Raw` is only an address range and a layout; it moves to the thread that runs
// the kernel while the Python object owning the memory stays alive in the caller's frame
// (`Operand` keeps it), and the views made from it live only inside that call.
unsafe impl Send for Raw {}
// SAFETY: a shared `Raw` only makes read-only views (`view_mut` takes `&mut self`).
unsafe impl Sync for Raw {}

impl Raw {
    /// The operand whose position 0 is at `origin`, with element `strides`.
    fn new(
        name: &str,
        dtype: DType,
        origin: *mut u8,
        shape: Vec<usize>,
        strides: Vec<isize>,
    ) -> PyResult<Raw> {
        if shape.contains(&0) {
            let zeros = vec![0; shape.len()];
            return Ok(Raw {
                dtype,
                shape,
                strides: zeros,
                start: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
                offset: 0,
            });
        }
        let too_far = || {
            PyValueError::new_err(format!(
                "{name}: shape {shape:?} with strides {strides:?} reaches beyond any buffer"
            ))
        };
        let (mut lo, mut hi) = (0i128, 0i128);
        for (&d, &s) in shape.iter().zip(&strides) {
            let reach = (d as i128 - 1) * s as i128;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        let size = dtype.size() as i128;
        let before = usize::try_from(-lo * size).map_err(|_| too_far())?;
        let len = usize::try_from((hi - lo + 1) * size).map_err(|_| too_far())?;
        if len > isize::MAX as usize {
            return Err(too_far());
        }
        Ok(Raw {
            dtype,
            start: origin.wrapping_sub(before),
            len,
            offset: (-lo) as usize,
            shape,
            strides,
        })
    }

    /// The dtype and shape, for validation.
    pub fn meta(&self) -> Meta<'_> {
        Meta::new(self.dtype, &self.shape)
    }

    /// The addresses of the bytes the positions reach.
    pub fn span(&self) -> Range<*const u8> {
        let start = self.start as *const u8;
        start..start.wrapping_add(self.len)
    }

    /// A read-only view of the operand.
    ///
    /// The caller must keep the owning [`Operand`] alive while the view lives and must not
    /// hold a [`Self::view_mut`] of overlapping memory at the same time.
    pub fn view(&self) -> scatterjit::Result<TensorView<'_>> {
        let bytes: &[u8] = if self.len == 0 {
            &[]
        } else {
            // SAFETY: `start..start + len` lies inside the memory of the Python object
            // `Operand` keeps alive (numpy and DLPack describe every position of the shape
            // as addressable; `Raw::new` computed the lowest and highest of them), and no
            // writable view of these bytes exists during the call (see `disjoint`).
            unsafe { std::slice::from_raw_parts(self.start, self.len) }
        };
        Ok(TensorView::new(
            self.dtype,
            &self.shape,
            &self.strides,
            self.offset,
            bytes,
        )?)
    }

    /// A writable view of the operand, under the conditions of [`Self::view`]; the operand
    /// was checked to be writable when it was made with [`Access::Write`].
    pub fn view_mut(&mut self) -> scatterjit::Result<TensorViewMut<'_>> {
        let bytes: &mut [u8] = if self.len == 0 {
            &mut []
        } else {
            // SAFETY: as in `view`; the memory is writable (numpy's WRITEABLE flag, or a
            // DLPack tensor not marked read-only), and no other view of these bytes exists
            // during the call: `disjoint` refused overlapping inputs.
            unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
        };
        Ok(TensorViewMut::new(
            self.dtype,
            &self.shape,
            &self.strides,
            self.offset,
            bytes,
        )?)
    }
}

/// What keeps an operand's memory alive.
enum Owner<'py> {
    Object(#[allow(dead_code)] Bound<'py, PyAny>),
    Dlpack(#[allow(dead_code)] ImportedDlpack),
    Bytes(#[allow(dead_code)] Box<[u8]>),
}

/// An operand and the Python object (or DLPack tensor, or scalar bytes) that owns it.
pub(crate) struct Operand<'py> {
    pub raw: Raw,
    _owner: Owner<'py>,
}

/// Whether a call reads an operand or writes it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

impl<'py> Operand<'py> {
    /// `obj` as an operand named `name` in messages. A written operand must be a numpy
    /// array or a DLPack tensor, writable; a read one may be anything `numpy.asarray` takes.
    pub fn new(obj: &Bound<'py, PyAny>, name: &str, access: Access) -> PyResult<Operand<'py>> {
        if let Ok(array) = obj.cast::<PyUntypedArray>() {
            return from_numpy(array, name, access);
        }
        if obj.hasattr(pyo3::intern!(obj.py(), "__dlpack__"))? {
            return from_dlpack_object(obj, name, access);
        }
        if access == Access::Write {
            return Err(PyTypeError::new_err(format!(
                "{name} must be a numpy array or a tensor with __dlpack__, got {}",
                type_name(obj)
            )));
        }
        let array = numpy_module(obj.py())?.call_method1("asarray", (obj,))?;
        from_numpy(array.cast::<PyUntypedArray>()?, name, access)
    }

    /// `value` converted to `dtype` and broadcast to `shape` with zero strides, if it is a
    /// scalar (a Python number, a numpy scalar or a 0-d array); `None` otherwise.
    pub fn scalar(
        value: &Bound<'py, PyAny>,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> PyResult<Option<Operand<'py>>> {
        let py = value.py();
        // Arrays first: the common case, and the cheapest to tell.
        let scalar = match value.cast::<PyUntypedArray>() {
            Ok(array) => array.ndim() == 0 && !shape.is_empty(),
            Err(_) => {
                value.is_instance_of::<PyBool>()
                    || value.is_instance_of::<PyInt>()
                    || value.is_instance_of::<PyFloat>()
                    || value.is_instance_of::<PyComplex>()
                    || value.is_instance(numpy_generic(py)?)?
            }
        };
        if !scalar {
            return Ok(None);
        }
        let np = numpy_module(py)?;
        let bytes: Box<[u8]> = if dtype == DType::BF16 {
            // Like PyTorch: the value rounds to f32, then to bfloat16.
            let f: f32 = np.call_method1("float32", (value,))?.extract::<f64>()? as f32;
            Box::new(bf16_bits(f).to_le_bytes())
        } else {
            let array = np.call_method1("asarray", (value, numpy_dtype(py, dtype)?))?;
            let array = array.cast::<PyUntypedArray>()?;
            array.call_method0("tobytes")?.extract::<Vec<u8>>()?.into()
        };
        let raw = Raw::new(
            name,
            dtype,
            bytes.as_ptr() as *mut u8,
            shape.to_vec(),
            vec![0; shape.len()],
        )?;
        Ok(Some(Operand {
            raw,
            _owner: Owner::Bytes(bytes),
        }))
    }
}

/// The nearest bfloat16 to `f` (ties to even), as bits; NaN stays NaN.
fn bf16_bits(f: f32) -> u16 {
    let bits = f.to_bits();
    if f.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

/// The `numpy` module, imported once (the import machinery's dictionary lookups showed in
/// profiles of tiny calls).
pub(crate) fn numpy_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    NUMPY
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("numpy")?.unbind()))
        .map(|m| m.bind(py).clone())
}

/// `numpy.generic`, the base class of numpy's scalars.
fn numpy_generic(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static GENERIC: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    GENERIC.import(py, "numpy", "generic")
}

/// The numpy dtype of `dtype` (bfloat16 is ml_dtypes' type), made once per dtype.
pub(crate) fn numpy_dtype(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyArrayDescr>> {
    static DESCRS: [PyOnceLock<Py<PyArrayDescr>>; DType::ALL.len()] =
        [const { PyOnceLock::new() }; DType::ALL.len()];
    DESCRS[dtype as usize]
        .get_or_try_init(py, || {
            let descr = make_numpy_dtype(py, dtype)?.cast_into::<PyArrayDescr>()?;
            Ok::<_, PyErr>(descr.unbind())
        })
        .map(|d| d.bind(py).clone())
}

fn make_numpy_dtype(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    let name = match dtype {
        DType::BF16 => {
            let ml_dtypes = py.import("ml_dtypes").map_err(|_| {
                PyTypeError::new_err(
                    "bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)",
                )
            })?;
            return numpy_module(py)?.call_method1("dtype", (ml_dtypes.getattr("bfloat16")?,));
        }
        DType::String => {
            return Err(PyTypeError::new_err(
                "string tensors are not supported by the Python package",
            ))
        }
        // The `.npy` descr of every other dtype is numpy's own spelling of it.
        other => other.npy_descr(),
    };
    numpy_module(py)?.call_method1("dtype", (name,))
}

/// The scatterjit dtype of a numpy dtype: the numeric kinds in native (little-endian) byte
/// order, and ml_dtypes' bfloat16.
fn dtype_of_numpy(descr: &Bound<'_, PyArrayDescr>, name: &str) -> PyResult<DType> {
    let size = descr.itemsize();
    let dtype = match (descr.kind(), size) {
        (b'f', 2) => Some(DType::F16),
        (b'f', 4) => Some(DType::F32),
        (b'f', 8) => Some(DType::F64),
        (b'i', 1) => Some(DType::I8),
        (b'i', 2) => Some(DType::I16),
        (b'i', 4) => Some(DType::I32),
        (b'i', 8) => Some(DType::I64),
        (b'u', 1) => Some(DType::U8),
        (b'u', 2) => Some(DType::U16),
        (b'u', 4) => Some(DType::U32),
        (b'u', 8) => Some(DType::U64),
        (b'b', 1) => Some(DType::Bool),
        (b'c', 8) => Some(DType::Complex64),
        (b'c', 16) => Some(DType::Complex128),
        (_, 2) if descr.typeobj().name()? == "bfloat16" => Some(DType::BF16),
        _ => None,
    };
    let Some(dtype) = dtype else {
        return Err(PyTypeError::new_err(format!(
            "{name} has numpy dtype {}, which scatterjit does not take",
            descr.str()?
        )));
    };
    if descr.byteorder() == b'>' && cfg!(target_endian = "little") {
        return Err(PyTypeError::new_err(format!(
            "{name} has big-endian dtype {}; scatterjit takes native byte order (use .astype)",
            descr.str()?
        )));
    }
    Ok(dtype)
}

/// Byte strides as element strides. A dim of size 0 or 1 is never stepped, so its stride
/// may be anything; the others must be whole elements.
fn element_strides(
    name: &str,
    shape: &[usize],
    bytes: &[isize],
    size: usize,
) -> PyResult<Vec<isize>> {
    shape
        .iter()
        .zip(bytes)
        .map(|(&d, &s)| {
            if d <= 1 {
                Ok(0)
            } else if s % size as isize == 0 {
                Ok(s / size as isize)
            } else {
                Err(PyValueError::new_err(format!(
                    "{name} has a stride of {s} bytes, not a multiple of its element size {size}"
                )))
            }
        })
        .collect()
}

fn from_numpy<'py>(
    array: &Bound<'py, PyUntypedArray>,
    name: &str,
    access: Access,
) -> PyResult<Operand<'py>> {
    let dtype = dtype_of_numpy(&array.dtype(), name)?;
    // SAFETY: `array` is a live numpy array object (the cast checked its type), so its
    // `PyArrayObject` header can be read while the GIL is held.
    let (data, flags) = unsafe {
        let header = &*array.as_array_ptr();
        (header.fields.data as *mut u8, header.fields.flags)
    };
    if access == Access::Write && flags & numpy::npyffi::NPY_ARRAY_WRITEABLE == 0 {
        return Err(read_only(name));
    }
    let shape = array.shape().to_vec();
    let strides = element_strides(name, &shape, array.strides(), dtype.size())?;
    Ok(Operand {
        raw: Raw::new(name, dtype, data, shape, strides)?,
        _owner: Owner::Object(array.clone().into_any()),
    })
}

fn read_only(name: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{name} is read-only; an in-place call or out= needs a writable array"
    ))
}

fn dtype_of_dlpack(dt: dlpark::ffi::DLDataType, name: &str) -> PyResult<DType> {
    let dtype = match (dt.code, dt.bits, dt.lanes) {
        (DLDataTypeCode::INT, 8, 1) => Some(DType::I8),
        (DLDataTypeCode::INT, 16, 1) => Some(DType::I16),
        (DLDataTypeCode::INT, 32, 1) => Some(DType::I32),
        (DLDataTypeCode::INT, 64, 1) => Some(DType::I64),
        (DLDataTypeCode::UINT, 8, 1) => Some(DType::U8),
        (DLDataTypeCode::UINT, 16, 1) => Some(DType::U16),
        (DLDataTypeCode::UINT, 32, 1) => Some(DType::U32),
        (DLDataTypeCode::UINT, 64, 1) => Some(DType::U64),
        (DLDataTypeCode::FLOAT, 16, 1) => Some(DType::F16),
        (DLDataTypeCode::FLOAT, 32, 1) => Some(DType::F32),
        (DLDataTypeCode::FLOAT, 64, 1) => Some(DType::F64),
        (DLDataTypeCode::BFLOAT, 16, 1) => Some(DType::BF16),
        (DLDataTypeCode::COMPLEX, 64, 1) => Some(DType::Complex64),
        (DLDataTypeCode::COMPLEX, 128, 1) => Some(DType::Complex128),
        (DLDataTypeCode::BOOL, 8, 1) => Some(DType::Bool),
        _ => None,
    };
    dtype.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{name} has DLPack dtype (code {}, {} bits, {} lanes), which scatterjit does not take",
            dt.code.0, dt.bits, dt.lanes
        ))
    })
}

fn from_dlpack_object<'py>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    access: Access,
) -> PyResult<Operand<'py>> {
    // Autograd does not see a write through DLPack, and PyTorch refuses in-place writes
    // to a leaf that requires grad.
    if access == Access::Write
        && obj
            .getattr("requires_grad")
            .is_ok_and(|r| r.is_truthy().unwrap_or(false))
    {
        return Err(PyValueError::new_err(format!(
            "{name} requires grad; an in-place call or out= needs a tensor that does not (use .detach())"
        )));
    }
    // A written tensor must be the caller's memory, never a copy the producer made.
    let copy = (access == Access::Write).then_some(false);
    let imported = from_dlpack(obj.as_borrowed(), None, copy)?;
    let flags = imported.flags();
    let raw = {
        let tensor = imported
            .validate()
            .map_err(|e| PyValueError::new_err(format!("{name}: invalid DLPack tensor: {e}")))?;
        let device = tensor.device();
        if device.device_type != DLDeviceType::CPU {
            return Err(PyTypeError::new_err(format!(
                "{name} lives on DLPack device type {} (id {}); scatterjit runs on the CPU",
                device.device_type.0, device.device_id
            )));
        }
        let dtype = dtype_of_dlpack(tensor.dtype(), name)?;
        let to_usize = |v: &[i64]| -> PyResult<Vec<usize>> {
            v.iter()
                .map(|&d| {
                    usize::try_from(d).map_err(|_| {
                        PyValueError::new_err(format!("{name} has a negative dim {d}"))
                    })
                })
                .collect()
        };
        let shape = to_usize(tensor.shape())?;
        let strides = tensor
            .strides_or_compact()
            .map_err(|e| PyValueError::new_err(format!("{name}: invalid DLPack strides: {e}")))?;
        let strides: Vec<isize> = strides.iter().map(|&s| s as isize).collect();
        let origin = (tensor.data_ptr() as *mut u8).wrapping_add(tensor.byte_offset() as usize);
        Raw::new(name, dtype, origin, shape, strides)?
    };
    if access == Access::Write {
        if flags.contains(DlpackFlags::READ_ONLY) {
            return Err(read_only(name));
        }
        if flags.contains(DlpackFlags::IS_COPIED) {
            return Err(PyValueError::new_err(format!(
                "{name}: the DLPack producer handed over a copy, so a write would be lost"
            )));
        }
    }
    Ok(Operand {
        raw,
        _owner: Owner::Dlpack(imported),
    })
}

/// Refuses an output whose bytes overlap an input's: the kernel would read what it wrote,
/// and Rust may not hold a shared and a mutable view of the same bytes.
pub(crate) fn disjoint(
    op: scatterjit::OpKind,
    out: &Raw,
    inputs: &[(scatterjit::ir::Operand, &Raw)],
) -> scatterjit::Result<()> {
    for (role, input) in inputs {
        if scatterjit::overlaps(out.span(), input.span()) {
            return Err(scatterjit::ir::Error::Overlap { op, tensor: *role }.into());
        }
    }
    Ok(())
}
