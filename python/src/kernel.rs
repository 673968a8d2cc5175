//! `scatterjit.Kernel`: one compiled kernel, for frameworks that manage their own buffers.

use std::sync::Arc;

use pyo3::prelude::*;
use scatterjit::Kernel;

use crate::errors::IntoPy;
use crate::operand::{Access, Operand};
use crate::Target;

/// A compiled kernel of one key (op, dtype, index dtype, ranks, axis, reduction,
/// use_init_val), from ``scatterjit.kernel(key)``. Shapes and strides arrive with each
/// call, so one kernel serves every shape and layout of its key.
///
/// >>> import numpy as np, scatterjit
/// >>> k = scatterjit.kernel("gather_elements.f32.i64.r1.a0")
/// >>> k.run(np.array([7, 8, 9], dtype=np.float32), np.array([2, 0]))
/// array([9., 7.], dtype=float32)
#[pyclass(name = "Kernel", module = "scatterjit", frozen)]
pub(crate) struct PyKernel {
    inner: Arc<Kernel>,
}

impl PyKernel {
    pub(crate) fn new(inner: Arc<Kernel>) -> Self {
        PyKernel { inner }
    }
}

#[pymethods]
impl PyKernel {
    /// The key, e.g. ``"scatter_elements.f32.i64.r2.a1.add"``.
    #[getter]
    fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// Seconds spent compiling this kernel's first passes: the code that runs any strides.
    #[getter]
    fn compile_time(&self) -> f64 {
        self.inner.compile_time().as_secs_f64()
    }

    /// Seconds its calls have spent compiling so far: the passes and the variants
    /// specialized for their layouts, compiled once their work repays it.
    #[getter]
    fn first_use_compile_time(&self) -> f64 {
        self.inner.first_use_compile_time().as_secs_f64()
    }

    /// How the key is compiled: the op IR's loop nests, then for every pass the CLIF as
    /// built, the CLIF after optimization, and the machine code.
    fn explain(&self) -> PyResult<String> {
        scatterjit::explain(self.inner.key()).py_err()
    }

    /// Runs the kernel out of place and returns a new numpy array. ``updates`` is given
    /// for scatter_elements keys only. Inputs are numpy arrays or DLPack tensors of any
    /// strides; their dtypes and ranks must be the key's.
    #[pyo3(signature = (data, indices, updates = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        indices: &Bound<'py, PyAny>,
        updates: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, None, data, indices, updates)
    }

    /// Runs the kernel into ``out`` (a writable array or DLPack tensor of the result's
    /// dtype and shape) and returns ``out``. Every index is checked before the first
    /// write: on error ``out`` is unchanged.
    #[pyo3(signature = (out, data, indices, updates = None))]
    fn run_into<'py>(
        &self,
        py: Python<'py>,
        out: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
        indices: &Bound<'py, PyAny>,
        updates: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call(py, Some(out), data, indices, updates)
    }

    /// A scatter_elements kernel in place (PyTorch's ``scatter_``): updates ``data`` and
    /// returns it. ``updates`` may be larger than ``indices``, or a scalar broadcast without
    /// a copy. Every index is checked before the first write: on error ``data`` is
    /// unchanged.
    fn scatter_in_place<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        indices: &Bound<'py, PyAny>,
        updates: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut target = Operand::new(data, "data", Access::Write)?;
        let index = Operand::new(indices, "indices", Access::Read)?;
        let src = match Operand::scalar(updates, "updates", target.raw.dtype, &index.raw.shape)? {
            Some(scalar) => scalar,
            None => Operand::new(updates, "updates", Access::Read)?,
        };
        crate::scatter_in_place(py, &self.inner, &mut target.raw, &index.raw, &src.raw)?;
        Ok(data.clone())
    }

    fn __repr__(&self) -> String {
        format!("scatterjit.kernel({:?})", self.inner.key().to_string())
    }
}

impl PyKernel {
    fn call<'py>(
        &self,
        py: Python<'py>,
        out: Option<&Bound<'py, PyAny>>,
        data: &Bound<'py, PyAny>,
        indices: &Bound<'py, PyAny>,
        updates: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = Operand::new(data, "data", Access::Read)?;
        let indices = Operand::new(indices, "indices", Access::Read)?;
        let updates = updates
            .map(|u| Operand::new(u, "updates", Access::Read))
            .transpose()?;
        let updates = updates.as_ref().map(|u| &u.raw);
        let (data, indices) = (&data.raw, &indices.raw);
        let target = out.map_or(Target::New, Target::Into);
        crate::run(py, &self.inner, data, indices, updates, target)
    }
}
