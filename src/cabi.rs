//! The types C sees, shared by ahead-of-time entries (`crate::aot`) and the C ABI
//! (`crate::ffi`): the tensor descriptor, the argument struct of one call, status codes and
//! dtype codes. `include/scatterjit_abi.h` declares the same types for C; a test checks
//! that its offsets and constants agree with these.

use std::mem::offset_of;

use scatterjit_ir::{DType, DTypeClass, Error as IrError, Mismatch, OpKind, Operand, MAX_RANK};
use smallvec::{smallvec, SmallVec};

use crate::error::Error;

/// One operand: the fields and layout of DLPack's `DLTensor`, so a framework can pass its
/// `DLTensor*` as is. Element `(i_0, ..)` is at byte
/// `byte_offset + (Σ i_d * strides[d]) * size` from `data`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SjTensor {
    /// Base address of the memory.
    pub data: *mut u8,
    /// DLPack device type (must be [`DEVICE_CPU`]).
    pub device_type: i32,
    /// DLPack device id (ignored on the CPU).
    pub device_id: i32,
    /// Number of dimensions.
    pub ndim: i32,
    /// The element type as DLPack's `DLDataType` (code, bits, lanes), packed little-endian
    /// as `code | bits << 8 | lanes << 16` (see [`dtype_code`]).
    pub dtype: u32,
    /// `ndim` dims (may be null when `ndim` is 0).
    pub shape: *const i64,
    /// `ndim` element strides, or null for row-major.
    pub strides: *const i64,
    /// Bytes from `data` to element 0.
    pub byte_offset: u64,
}

/// The operands of one call and the position of a bad index.
#[repr(C)]
#[derive(Debug)]
pub struct SjArgs {
    /// The tensor read (gathers) or copied and updated (scatter).
    pub data: *const SjTensor,
    /// The integer positions along the axis.
    pub indices: *const SjTensor,
    /// The values scattered (scatter only; ignored by the gathers).
    pub updates: *const SjTensor,
    /// The result, written by the call. For scatter it may describe data's memory with
    /// data's strides: the update then happens in place.
    pub out: *const SjTensor,
    /// On [`Status::IndexOutOfBounds`], the position in `indices` of the first bad index
    /// in row-major order (its first `indices.ndim` entries).
    pub bad_index: [i64; MAX_RANK],
    /// Scratch memory for an ahead-of-time entry that needs it (`mean`: its per-element
    /// sums and counts, of the size its header states), used only during the call. Other
    /// entries and the shared library's `sj_kernel_run`, which allocates its own, ignore it.
    pub workspace: *mut u8,
    /// Bytes at `workspace`.
    pub workspace_bytes: u64,
}

/// DLPack's `kDLCPU`.
pub const DEVICE_CPU: i32 = 1;

/// What a call returns. Values are stable: C code compares against them.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The call succeeded.
    Ok = 0,
    /// A required pointer is null (an argument, a descriptor, a shape, the data of a
    /// tensor that has elements, or a workspace an ahead-of-time entry needs).
    NullPointer = 1,
    /// A tensor is not in CPU memory.
    Device = 2,
    /// A tensor's dtype is not the one the kernel takes.
    DType = 3,
    /// A tensor's rank is not the one the kernel takes.
    Rank = 4,
    /// Dims break the op's shape rules (or are negative).
    Shape = 5,
    /// An index is outside `[-s, s)`; its position is in [`SjArgs::bad_index`].
    IndexOutOfBounds = 6,
    /// The output overlaps an input (other than data for an in-place scatter), or an
    /// ahead-of-time entry's workspace overlaps a tensor.
    Overlap = 7,
    /// The kernel key does not parse or names an unsupported kernel.
    Key = 8,
    /// A bug in scatterjit (a compiler rejection or a caught panic).
    Internal = 9,
    /// A buffer the call needs is over its size limit or memory ran out, or a pool's
    /// threads are past their limit or do not start (C ABI); or the caller's
    /// [`SjArgs::workspace`] is smaller than the entry needs (ahead of time).
    Resource = 10,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 11] = [
        Status::Ok,
        Status::NullPointer,
        Status::Device,
        Status::DType,
        Status::Rank,
        Status::Shape,
        Status::IndexOutOfBounds,
        Status::Overlap,
        Status::Key,
        Status::Internal,
        Status::Resource,
    ];

    /// What the C ABI returns for a call that fails with `error`.
    pub fn of(error: &Error) -> Status {
        match error {
            Error::Invalid(invalid) => match invalid {
                IrError::IndexOutOfBounds { .. } => Status::IndexOutOfBounds,
                IrError::KernelMismatch { mismatch, .. } => match mismatch {
                    Mismatch::DType { .. } => Status::DType,
                    Mismatch::Rank { .. } => Status::Rank,
                },
                IrError::UnknownDType { .. }
                | IrError::IndexDType { .. }
                | IrError::DTypeMismatch { .. }
                | IrError::UnsupportedDType { .. }
                | IrError::UnsupportedReduction { .. } => Status::DType,
                // A missing or unexpected updates tensor is one of the wrong rank to C.
                IrError::Rank { .. }
                | IrError::MissingUpdates { .. }
                | IrError::UnexpectedUpdates { .. } => Status::Rank,
                IrError::Overlap { .. } => Status::Overlap,
                IrError::InvalidKey { .. }
                | IrError::InPlaceUnsupported { .. }
                | IrError::UnknownReduction { .. }
                | IrError::AxisOutOfRange { .. } => Status::Key,
                // Dims, sizes and views; any kind of invalid operand added later too.
                _ => Status::Shape,
            },
            Error::LimitExceeded { .. } | Error::OutOfMemory { .. } => Status::Resource,
            // Also a host Cranelift cannot target (the message says so); the C ABI offers no
            // ahead-of-time targets.
            Error::Codegen { .. } | Error::Target { .. } => Status::Internal,
        }
    }

    /// The name of its C constant (`SJ_OK`, `SJ_ERR_SHAPE`, ...).
    pub const fn c_name(self) -> &'static str {
        match self {
            Status::Ok => "SJ_OK",
            Status::NullPointer => "SJ_ERR_NULL_POINTER",
            Status::Device => "SJ_ERR_DEVICE",
            Status::DType => "SJ_ERR_DTYPE",
            Status::Rank => "SJ_ERR_RANK",
            Status::Shape => "SJ_ERR_SHAPE",
            Status::IndexOutOfBounds => "SJ_ERR_INDEX_OUT_OF_BOUNDS",
            Status::Overlap => "SJ_ERR_OVERLAP",
            Status::Key => "SJ_ERR_KEY",
            Status::Internal => "SJ_ERR_INTERNAL",
            Status::Resource => "SJ_ERR_RESOURCE",
        }
    }
}

/// DLPack's `DLDataType` of `dtype` packed as in [`SjTensor::dtype`]: the type code
/// (0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool) from the dtype's class, the bits
/// from its size, one lane. `None` for strings, which DLPack has no code for.
pub const fn dtype_code(dtype: DType) -> Option<u32> {
    let code = match (dtype, dtype.class()) {
        (DType::BF16, _) => 4,
        (_, DTypeClass::SignedInt) => 0,
        (_, DTypeClass::UnsignedInt) => 1,
        (_, DTypeClass::Float) => 2,
        (_, DTypeClass::Complex) => 5,
        (_, DTypeClass::Bool) => 6,
        (_, DTypeClass::String) => return None,
    };
    Some(code | ((dtype.size() as u32 * 8) << 8) | (1 << 16))
}

/// The dtype whose [`dtype_code`] is `code`.
pub fn dtype_of_code(code: u32) -> Option<DType> {
    DType::ALL
        .iter()
        .copied()
        .find(|&d| dtype_code(d) == Some(code))
}

/// The field of [`SjArgs`] that holds `operand`, as C code and messages name it: its
/// descriptor's, or for `mean`'s scratch the workspace.
pub(crate) const fn field(operand: Operand) -> &'static str {
    match operand {
        Operand::Data => "data",
        Operand::Indices => "indices",
        Operand::Updates => "updates",
        Operand::Output => "out",
        Operand::Sums | Operand::Counts => "workspace",
    }
}

/// The offset in [`SjArgs`] of the descriptor of `operand`, one of [`Operand::TENSORS`].
pub(crate) const fn descriptor_offset(operand: Operand) -> usize {
    match operand {
        Operand::Data => offset_of!(SjArgs, data),
        Operand::Indices => offset_of!(SjArgs, indices),
        Operand::Updates => offset_of!(SjArgs, updates),
        Operand::Output => offset_of!(SjArgs, out),
        Operand::Sums | Operand::Counts => panic!("scratch has no descriptor"),
    }
}

/// The tensors a kernel of `key` takes, each with its rank (in `SjArgs` order). Inline:
/// every `sj_kernel_run` that reads its descriptors asks.
pub(crate) fn operands(key: &scatterjit_ir::KernelKey) -> SmallVec<[(Operand, usize); 4]> {
    let r = key.rank();
    match key.kind() {
        OpKind::ScatterElements => smallvec![
            (Operand::Data, r),
            (Operand::Indices, r),
            (Operand::Updates, r),
            (Operand::Output, r),
        ],
        OpKind::GatherElements | OpKind::Gather => smallvec![
            (Operand::Data, r),
            (Operand::Indices, key.index_rank()),
            (Operand::Output, key.out_rank()),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_are_dlpack_codes() {
        assert_eq!(dtype_code(DType::F32), Some(2 | 32 << 8 | 1 << 16));
        assert_eq!(dtype_code(DType::BF16), Some(4 | 16 << 8 | 1 << 16));
        assert_eq!(dtype_code(DType::U8), Some(1 | 8 << 8 | 1 << 16));
        assert_eq!(dtype_code(DType::Complex64), Some(5 | 64 << 8 | 1 << 16));
        assert_eq!(dtype_code(DType::String), None);
        for &d in DType::ALL.iter().filter(|&&d| d != DType::String) {
            assert_eq!(dtype_of_code(dtype_code(d).unwrap()), Some(d));
        }
    }
}
