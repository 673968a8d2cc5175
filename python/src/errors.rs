//! The library's errors as Python exceptions, with the library's messages.

use pyo3::exceptions::{PyIndexError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::PyErr;
use scatterjit::ir::{Error as Invalid, Mismatch};
use scatterjit::Error;

/// `IndexError` for an out-of-bounds index, `TypeError` for a dtype the op does not take,
/// `MemoryError` when the system refuses memory, `RuntimeError` for a code generation bug or
/// a machine Cranelift cannot generate code for, `ValueError` for everything else that is
/// invalid.
pub(crate) fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::Invalid(Invalid::IndexOutOfBounds { .. }) => PyIndexError::new_err(message),
        Error::Invalid(
            Invalid::IndexDType { .. }
            | Invalid::DTypeMismatch { .. }
            | Invalid::UnknownDType { .. }
            | Invalid::UnsupportedDType { .. }
            | Invalid::UnsupportedReduction { .. }
            | Invalid::KernelMismatch {
                mismatch: Mismatch::DType { .. },
                ..
            },
        ) => PyTypeError::new_err(message),
        Error::Invalid(_) | Error::LimitExceeded { .. } => PyValueError::new_err(message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        // A host Cranelift cannot target; the package offers no ahead-of-time targets.
        Error::Codegen { .. } | Error::Target { .. } => PyRuntimeError::new_err(message),
    }
}

/// Shorthand: a library result as a Python one.
pub(crate) trait IntoPy<T> {
    fn py_err(self) -> pyo3::PyResult<T>;
}

impl<T, E: Into<Error>> IntoPy<T> for Result<T, E> {
    fn py_err(self) -> pyo3::PyResult<T> {
        self.map_err(|e| to_py(e.into()))
    }
}
