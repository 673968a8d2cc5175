//! The one error type of the compiler crate.

use std::fmt;

use scatterjit_ir::OpKind;

/// Why a call failed: invalid input (the op IR's error), or a bug in code generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The inputs are invalid for the op (bad rank, shape, axis, dtype or index).
    Invalid(scatterjit_ir::Error),
    /// Cranelift rejected generated code. Always a bug in scatterjit; carries the CLIF.
    Codegen {
        /// The kernel key being compiled.
        key: String,
        /// Cranelift's message.
        message: String,
        /// The function as built, or as far as Cranelift got with it.
        clif: String,
    },
    /// A call would allocate more than the cap [`crate::Limits`] sets; nothing was allocated.
    LimitExceeded {
        /// The op.
        op: OpKind,
        /// Which allocation.
        buffer: Buffer,
        /// Bytes it needs.
        bytes: u128,
        /// The cap in force.
        limit: u64,
    },
    /// The system refused memory for the output or scratch of a call.
    OutOfMemory {
        /// The op.
        op: OpKind,
        /// Which allocation.
        buffer: Buffer,
        /// Bytes asked for.
        bytes: u128,
    },
    /// Cranelift cannot generate code for a machine: the host (no back end for its
    /// architecture, or a CPU without a feature every back end needs), or an ahead-of-time
    /// target (an unsupported triple, or a CPU feature its architecture does not know).
    Target {
        /// The triple as given, or `host`.
        target: String,
        /// What is wrong, and what would be accepted.
        message: String,
    },
}

impl Error {
    /// The input error, if this is one.
    pub fn as_invalid(&self) -> Option<&scatterjit_ir::Error> {
        match self {
            Error::Invalid(e) => Some(e),
            _ => None,
        }
    }
}

impl From<scatterjit_ir::Error> for Error {
    fn from(e: scatterjit_ir::Error) -> Self {
        Error::Invalid(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(e) => e.fmt(f),
            Error::Codegen { key, message, .. } => write!(
                f,
                "internal error: cranelift rejected the code generated for {key}: {message}"
            ),
            Error::LimitExceeded {
                op,
                buffer,
                bytes,
                limit,
            } => write!(
                f,
                "{op}: the {buffer} needs {bytes} bytes, over the limit of {limit} bytes"
            ),
            Error::OutOfMemory { op, buffer, bytes } => write!(
                f,
                "{op}: out of memory: cannot allocate {bytes} bytes for the {buffer}"
            ),
            Error::Target { target, message } => write!(f, "target {target}: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Invalid(e) => Some(e),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which allocation of a call a limit or an allocation failure concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// The output tensor.
    Output,
    /// Scratch memory (`mean`'s sums and counts, partial outputs of a split reduction).
    Scratch,
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buffer::Output => "output",
            Buffer::Scratch => "scratch",
        })
    }
}
