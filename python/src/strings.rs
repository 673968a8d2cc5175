//! numpy's unicode arrays (`<U…`): the gather ops and `none` scatter, through the
//! library's owned string tensors (strings have no bytes to view, so they are copied).

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use scatterjit::{Op, Tensor};

use crate::errors::IntoPy;
use crate::operand::{numpy_module, Access, Operand};
use crate::pool::compute;

/// Whether `obj` is a numpy unicode array.
pub(crate) fn is_text(obj: &Bound<'_, PyAny>) -> bool {
    obj.cast::<PyUntypedArray>()
        .is_ok_and(|a| a.dtype().kind() == b'U')
}

/// `obj` as an owned tensor: a string tensor for a unicode array, else a copy of its
/// elements (so that a numeric tensor beside strings gets the library's dtype error).
fn tensor(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Tensor> {
    if is_text(obj) {
        let array = obj.cast::<PyUntypedArray>()?;
        let shape = array.shape().to_vec();
        let flat: Vec<String> = obj
            .call_method1("reshape", (-1,))?
            .call_method0("tolist")?
            .extract()?;
        return Tensor::from_strings(&shape, flat).py_err();
    }
    let operand = Operand::new(obj, name, Access::Read)?;
    operand.raw.view().py_err()?.to_tensor().py_err()
}

/// Runs `op` on a unicode `data` array: a new unicode array.
pub(crate) fn run<'py>(
    py: Python<'py>,
    op: Op,
    data: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    updates: Option<&Bound<'py, PyAny>>,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if out.is_some() {
        return Err(PyTypeError::new_err(
            "out= takes numeric arrays; string results are always new arrays",
        ));
    }
    let data_dtype = data.getattr("dtype")?;
    let data = tensor(data, "data")?;
    let indices = tensor(indices, "indices")?;
    let updates = updates.map(|u| tensor(u, "updates")).transpose()?;
    // The result's shape, for the call's work (`scatterjit::run` validates it again).
    let updates_meta = updates.as_ref().map(Tensor::meta);
    let validated = op.validate(data.meta(), indices.meta(), updates_meta);
    let out_shape = validated.py_err()?.out_shape;
    let work = crate::pool::work(Some(&out_shape), indices.shape());
    let result = compute(py, work, || {
        scatterjit::run(&op, &data, &indices, updates.as_ref())
    })
    .py_err()?;
    let shape = PyTuple::new(py, result.shape())?;
    let strings = result.into_strings().py_err()?;
    let array = numpy_module(py)?
        .call_method1("array", (strings, "str"))?
        .call_method1("reshape", (shape,))?;
    keep_width(&array, &data_dtype)
}

/// `array` (unicode, as wide as its longest string) as wide as data's dtype and in its byte
/// order, as numpy's `take` and `put_along_axis` keep it; wider only where a scattered
/// string is longer than data's width, so that no character is dropped.
fn keep_width<'py>(
    array: &Bound<'py, PyAny>,
    data_dtype: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let itemsize = |dtype: &Bound<'py, PyAny>| dtype.getattr("itemsize")?.extract::<usize>();
    let dtype = array.getattr("dtype")?;
    let target = if itemsize(&dtype)? <= itemsize(data_dtype)? {
        data_dtype.clone()
    } else {
        dtype.call_method1("newbyteorder", (data_dtype.getattr("byteorder")?,))?
    };
    array.call_method1("astype", (target,))
}
