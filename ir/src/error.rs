//! The one error type of the op IR: every invalid input, with the values that make it invalid.

use std::fmt;

use crate::dtype::DType;
use crate::kind::{OpKind, Operand};
use crate::reduction::Reduction;
use crate::shape::Relation;

/// Everything that can be wrong with an op's inputs. Messages are lowercase, name the op
/// and the offending value and position, and end without a period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A dtype name that is not one of the 16 ONNX types.
    UnknownDType {
        /// The name given.
        name: String,
    },
    /// A reduction name that is neither canonical nor a known alias.
    UnknownReduction {
        /// The name given.
        name: String,
    },
    /// A kernel key string that does not parse.
    InvalidKey {
        /// The string given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor whose rank the op does not accept (too small, too large or unequal to another's).
    Rank {
        /// The op.
        op: OpKind,
        /// Which input.
        tensor: Operand,
        /// Its rank.
        rank: usize,
        /// What the op expects, in words (`"the rank of data (2)"`, `"at least 1"`).
        expected: String,
    },
    /// ScatterElements called without an updates tensor.
    MissingUpdates {
        /// The op.
        op: OpKind,
    },
    /// A gather op called with an updates tensor, which it does not take.
    UnexpectedUpdates {
        /// The op.
        op: OpKind,
        /// The rank of the updates given.
        rank: usize,
    },
    /// An axis outside `[-rank, rank)`.
    AxisOutOfRange {
        /// The op.
        op: OpKind,
        /// The axis given.
        axis: i64,
        /// The rank it is normalized against.
        rank: usize,
    },
    /// A dimension of one tensor that breaks one of the op's shape rules ([`crate::shape`])
    /// with the same dimension of another.
    Shape {
        /// The op.
        op: OpKind,
        /// The tensor whose dimension is wrong.
        tensor: Operand,
        /// Which dimension.
        dim: usize,
        /// Its size.
        size: usize,
        /// The relation that fails.
        relation: Relation,
        /// The tensor it is compared with.
        other: Operand,
        /// The size of that tensor's dimension `dim`.
        other_size: usize,
    },
    /// Indices of a non-integer dtype.
    IndexDType {
        /// The op.
        op: OpKind,
        /// The dtype given.
        dtype: DType,
    },
    /// A tensor whose dtype must equal data's.
    DTypeMismatch {
        /// The op.
        op: OpKind,
        /// Which tensor.
        tensor: Operand,
        /// data's dtype.
        expected: DType,
        /// Its dtype.
        actual: DType,
    },
    /// Operands the op accepts, given to a kernel compiled for other dtypes or ranks.
    KernelMismatch {
        /// The op.
        op: OpKind,
        /// The kernel's key, printed.
        kernel: String,
        /// The first operand (data, then indices) whose dtype or rank is not the kernel's.
        tensor: Operand,
        /// What differs.
        mismatch: Mismatch,
        /// The key of the kernel the operands need, printed.
        needed: String,
    },
    /// An in-place call to a kernel of an op other than ScatterElements.
    InPlaceUnsupported {
        /// The kernel's op.
        op: OpKind,
    },
    /// A reduction the dtype does not support (SPEC: "Reductions").
    UnsupportedReduction {
        /// The op.
        op: OpKind,
        /// The reduction.
        reduction: Reduction,
        /// The dtype.
        dtype: DType,
    },
    /// A dtype with no kernel over byte views: strings, which the owned-tensor functions
    /// run instead (`scatterjit::run` and friends).
    UnsupportedDType {
        /// The op.
        op: OpKind,
        /// The dtype.
        dtype: DType,
    },
    /// An index outside `[-s, s)` along the axis.
    IndexOutOfBounds {
        /// The op.
        op: OpKind,
        /// The index value as stored (any integer type fits an i128).
        index: i128,
        /// Its multi-index in `indices`.
        position: Vec<usize>,
        /// The (normalized) axis.
        axis: usize,
        /// `data.shape[axis]`.
        size: usize,
    },
    /// A shape whose element or byte count overflows `usize` or exceeds `isize::MAX` bytes.
    ShapeOverflow {
        /// The shape.
        shape: Vec<usize>,
    },
    /// An operand or the output of an op whose element or byte count overflows `usize` or
    /// exceeds `isize::MAX` bytes.
    SizeOverflow {
        /// The op.
        op: OpKind,
        /// Which tensor.
        tensor: Operand,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// The allocator could not provide the bytes of a tensor.
    OutOfMemory {
        /// Bytes asked for.
        bytes: usize,
    },
    /// A byte buffer whose length does not match its dtype and shape.
    BufferSize {
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A strided view that does not fit its buffer, or an output view whose elements overlap.
    InvalidView {
        /// Which tensor.
        tensor: Operand,
        /// What is wrong.
        reason: String,
    },
    /// An output view that shares memory with an input of the same call.
    Overlap {
        /// The op.
        op: OpKind,
        /// The input it overlaps.
        tensor: Operand,
    },
    /// A list of elements whose length does not match the shape it is given.
    ElementCount {
        /// Elements the shape has.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A bool element whose byte is neither 0 nor 1.
    InvalidBool {
        /// Its flat (row-major) position.
        offset: usize,
        /// The byte.
        byte: u8,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownDType { name } => write!(f, "unknown dtype {name:?}"),
            Error::UnknownReduction { name } => write!(
                f,
                "unknown reduction {name:?} (expected none, add, mul, max, min, mean, sum, prod, multiply, amax or amin)"
            ),
            Error::InvalidKey { key, reason } => write!(f, "invalid kernel key {key:?}: {reason}"),
            Error::Rank {
                op,
                tensor,
                rank,
                expected,
            } => write!(f, "{op}: {tensor} has rank {rank}, expected {expected}"),
            Error::MissingUpdates { op } => write!(f, "{op}: an updates tensor is required"),
            Error::UnexpectedUpdates { op, rank } => write!(
                f,
                "{op}: takes no updates tensor, but one of rank {rank} was given"
            ),
            Error::AxisOutOfRange { op, axis, rank } => write!(
                f,
                "{op}: axis {axis} is out of range for rank {rank} (expected {} to {})",
                -(*rank as i64),
                *rank as i64 - 1
            ),
            Error::Shape {
                op,
                tensor,
                dim,
                size,
                relation,
                other,
                other_size,
            } => write!(
                f,
                "{op}: {tensor}.shape[{dim}] = {size} must be {relation} {other}.shape[{dim}] = {other_size}"
            ),
            Error::IndexDType { op, dtype } => write!(
                f,
                "{op}: indices have dtype {dtype}, expected an integer dtype"
            ),
            Error::DTypeMismatch {
                op,
                tensor,
                expected,
                actual,
            } => write!(
                f,
                "{op}: {tensor} has dtype {actual}, expected data's dtype {expected}"
            ),
            Error::KernelMismatch {
                op,
                kernel,
                tensor,
                mismatch,
                needed,
            } => write!(
                f,
                "{op}: kernel {kernel} takes {tensor} of {mismatch}; the operands need kernel {needed}"
            ),
            Error::InPlaceUnsupported { op } => write!(
                f,
                "{op}: runs out of place only; in-place calls need a scatter_elements kernel"
            ),
            Error::UnsupportedReduction {
                op,
                reduction,
                dtype,
            } => write!(f, "{op}: reduction {reduction} is not supported for dtype {dtype}"),
            Error::UnsupportedDType { op, dtype } => {
                write!(
                    f,
                    "{op}: no kernel over byte views takes dtype {dtype} (pass {dtype} tensors to the owned-tensor functions, such as scatterjit::run)"
                )
            }
            Error::IndexOutOfBounds {
                op,
                index,
                position,
                axis,
                size,
            } => {
                let pos: Vec<String> = position.iter().map(|p| p.to_string()).collect();
                write!(
                    f,
                    "{op}: index {index} at indices[{}] is out of bounds for axis {axis} of size {size}",
                    pos.join(", ")
                )
            }
            Error::ShapeOverflow { shape } => {
                write!(f, "shape {shape:?} has more elements or bytes than fit in memory")
            }
            Error::SizeOverflow { op, tensor, shape } => write!(
                f,
                "{op}: {tensor} of shape {shape:?} has more elements or bytes than fit in memory"
            ),
            Error::OutOfMemory { bytes } => {
                write!(f, "out of memory: cannot allocate {bytes} bytes for a tensor")
            }
            Error::BufferSize { expected, actual } => write!(
                f,
                "buffer has {actual} bytes, but its dtype and shape need {expected}"
            ),
            Error::InvalidView { tensor, reason } => write!(f, "invalid view of {tensor}: {reason}"),
            Error::Overlap { op, tensor } => write!(
                f,
                "{op}: the output overlaps {tensor} in memory (an output may not alias an input)"
            ),
            Error::ElementCount { expected, actual } => write!(
                f,
                "{actual} elements given, but the shape has {expected}"
            ),
            Error::InvalidBool { offset, byte } => write!(
                f,
                "bool element {offset} has byte {byte}, expected 0 or 1"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// How an operand differs from what a kernel was compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Another dtype.
    DType {
        /// The kernel's.
        expected: DType,
        /// The operand's.
        actual: DType,
    },
    /// Another rank.
    Rank {
        /// The kernel's.
        expected: usize,
        /// The operand's.
        actual: usize,
    },
}

/// `dtype f32, got i32` / `rank 2, got rank 3`.
impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::DType { expected, actual } => write!(f, "dtype {expected}, got {actual}"),
            Mismatch::Rank { expected, actual } => write!(f, "rank {expected}, got rank {actual}"),
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
