//! Strided views over caller memory: what kernels read and write without copying.
//!
//! A view is a byte slice plus dtype, shape, element strides (may be zero or negative) and
//! the element offset of position 0. Constructors prove that every addressed element lies
//! inside the slice, so a kernel given a view never touches memory outside it.
//!
//! [`layout`] holds the geometry and its checks, [`view`] the views callers build,
//! [`unbuffered`] a geometry checked before its buffer exists, [`raw`] what a kernel call
//! is handed of an operand, [`walk`] the walk over a shape's positions, [`relayout`] the
//! copy of any view into row-major bytes.

mod layout;
mod raw;
mod relayout;
mod unbuffered;
mod view;
mod walk;

pub(crate) use layout::{is_dense, row_major, Dims};
pub use raw::overlaps;
pub(crate) use raw::{Address, Place, RawOperand};
pub(crate) use unbuffered::Unbuffered;
pub use view::{TensorView, TensorViewMut};
pub(crate) use walk::{for_each_offset, offset_of};
