//! Reading and writing NumPy `.npy` files as [`Tensor`]s.
//!
//! Reading accepts format versions 1.0, 2.0 and 3.0, little-endian C-order arrays of the
//! dtypes in [`DType`](scatterjit::ir::DType)'s table (`<V2` reads as bfloat16, which is how numpy saves an
//! `ml_dtypes.bfloat16` array). The payload is read in one piece into a buffer of exactly the
//! size the header announces, which becomes the tensor's storage: no per-element conversion
//! and no copy. Unicode arrays (`<U{n}`) are the exception: they become string tensors.
//!
//! Decisions a user should know:
//! - The header is parsed here rather than by `npyz::NpyHeader`: npyz allocates whatever
//!   header length the file claims, multiplies the shape without overflow checks (a hostile
//!   header panics in debug builds) and rejects the `=` byte-order spelling. Our parser
//!   accepts the Python literal subset numpy writes (dict, strings, integers with an optional
//!   Python 2 `L` suffix, tuples, lists, `True`/`False`/`None`), nested at most
//!   [`MAX_HEADER_DEPTH`] deep, and headers of at most [`MAX_HEADER_LEN`] bytes.
//! - The header must have exactly the keys `descr`, `fortran_order` and `shape` (as numpy
//!   requires); a key given twice is refused rather than letting the last one win.
//! - Byte order: `<`, `=` (and `|` for one-byte types) as [`DType::from_npy_descr`](scatterjit::ir::DType::from_npy_descr) accepts;
//!   one-byte types written with `>` (`>u1`) are accepted too, since numpy reads them as the
//!   same type. Big-endian multi-byte types are refused, as are byte strings (`|S…`),
//!   structured dtypes and Fortran-order arrays.
//! - Unicode arrays (`<U{n}`, `=U{n}`, and big-endian `>U{n}`) are read as string tensors:
//!   each element is `n` UTF-32 code units, and trailing NULs are dropped as numpy does (so
//!   a string that ends in NUL characters does not survive a round trip). A unit that is
//!   not a Unicode scalar value is an error naming the element. numpy never writes `U0`,
//!   which is refused. Writing a string tensor takes any unicode descr: its byte order is
//!   kept, and so is its width when every string fits in it (`<U3` data gathered stays
//!   `<U3`, as with numpy's `take`). A longer string widens the output to the longest one
//!   in code points, where numpy's assignment would truncate it; a descr without a width
//!   (`<U`) gives the longest string's width (at least 1), as `np.array` does.
//! - The byte size of the shape is checked against the bytes actually left in the file
//!   before anything is allocated, and bytes after the payload are an error.
//! - [`NpyArray::descr`] keeps the descr string exactly as read, so a result can be written
//!   with its input's spelling (a `<V2` bfloat16 input gives a `<V2` output).
//! - [`write()`] is atomic, through [`crate::atomic::write`]: on error the target is
//!   untouched.
//!
//! The parts, one job each: [`NpyError`] and its kinds (`error`), the header's Python literal
//! parser (`header`), the unicode codec (`unicode`), the reader (`read`) and the writer
//! (`write`).

mod error;
mod header;
mod read;
mod unicode;
mod write;

#[cfg(test)]
pub(crate) mod test_support;

pub use error::{NpyError, NpyErrorKind, NpyPart};
pub use read::{from_bytes, read, read_from};
pub use write::{to_bytes, write};

use scatterjit::ir::Tensor;

/// The six bytes every `.npy` file starts with.
pub(crate) const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Headers are padded so the payload starts at a multiple of this (as numpy does).
pub(crate) const ALIGN: usize = 64;

/// The longest header read, in bytes; a real header is a few hundred bytes at most.
pub const MAX_HEADER_LEN: usize = 1 << 20;

/// The deepest nesting of brackets accepted in a header.
pub const MAX_HEADER_DEPTH: usize = 16;

/// A tensor read from a `.npy` file, with the dtype descr exactly as the file spelled it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyArray {
    /// The array's elements, dtype and shape.
    pub tensor: Tensor,
    /// The descr string from the header (`<f4`, `|b1`, `<V2`, `=i8`, ...).
    pub descr: String,
}
