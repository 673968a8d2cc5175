//! Owned, contiguous tensors: the values ops consume and produce.

use crate::dtype::DType;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::{checked_nbytes, checked_numel, Meta};

/// An owned tensor: dtype, shape, and its elements in row-major (C) order, little-endian.
///
/// String tensors hold their elements as `String`s ([`Tensor::from_strings`],
/// [`Tensor::strings`]) and have no bytes: [`Tensor::bytes`] is empty for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Storage,
}

/// Where the elements live: one byte buffer, or one `String` per element.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Storage {
    Bytes(Vec<u8>),
    Strings(Vec<String>),
}

impl Tensor {
    /// Wraps a byte buffer. Fails if its length does not match `dtype` and `shape`, if a
    /// bool byte is not 0 or 1, or for string dtypes (which are not stored as bytes).
    ///
    /// ```
    /// use scatterjit_ir::{DType, Tensor};
    /// let t = Tensor::from_bytes(DType::U8, vec![2, 2], vec![1, 2, 3, 4]).unwrap();
    /// assert_eq!(t.to_vec::<u8>().unwrap(), [1, 2, 3, 4]);
    /// assert!(Tensor::from_bytes(DType::U8, vec![2, 2], vec![1, 2, 3]).is_err());
    /// ```
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self> {
        if dtype == DType::String {
            return Err(Error::UnknownDType {
                name: "string (not stored as bytes)".into(),
            });
        }
        let expected = checked_nbytes(dtype, &shape)?;
        if data.len() != expected {
            return Err(Error::BufferSize {
                expected,
                actual: data.len(),
            });
        }
        if dtype == DType::Bool {
            if let Some((offset, &byte)) = data.iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(Error::InvalidBool { offset, byte });
            }
        }
        Ok(Tensor {
            dtype,
            shape,
            data: Storage::Bytes(data),
        })
    }

    /// A tensor of zero bytes (0, +0.0, false) of the given dtype and shape; of empty
    /// strings for the string dtype. Fails with [`Error::OutOfMemory`] rather than
    /// aborting if the allocator refuses the bytes.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<Self> {
        let n = checked_nbytes(dtype, &shape)?;
        if dtype == DType::String {
            return Self::from_strings(&shape, vec![String::new(); n]);
        }
        Self::from_bytes(dtype, shape, zero_bytes(n)?)
    }

    /// A string tensor from its elements in row-major order.
    ///
    /// ```
    /// use scatterjit_ir::{DType, Tensor};
    /// let t = Tensor::from_strings(&[2], ["zwei", "二"]).unwrap();
    /// assert_eq!(t.dtype(), DType::String);
    /// assert_eq!(t.strings().unwrap(), ["zwei", "二"]);
    /// assert!(Tensor::from_strings(&[3], ["a"]).is_err());
    /// ```
    pub fn from_strings<S: Into<String>>(
        shape: &[usize],
        values: impl IntoIterator<Item = S>,
    ) -> Result<Self> {
        let n = checked_numel(shape)?;
        let values: Vec<String> = values.into_iter().map(Into::into).collect();
        if values.len() != n {
            return Err(Error::ElementCount {
                expected: n,
                actual: values.len(),
            });
        }
        Ok(Tensor {
            dtype: DType::String,
            shape: shape.to_vec(),
            data: Storage::Strings(values),
        })
    }

    /// Builds a tensor from typed values in row-major order.
    ///
    /// ```
    /// use scatterjit_ir::Tensor;
    /// let t = Tensor::from_slice(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    /// assert_eq!(t.shape(), [2, 3]);
    /// ```
    pub fn from_slice<T: Element>(shape: &[usize], values: &[T]) -> Result<Self> {
        let n = checked_numel(shape)?;
        let size = T::DTYPE.size();
        if values.len() != n {
            return Err(Error::BufferSize {
                expected: n.saturating_mul(size),
                actual: values.len().saturating_mul(size),
            });
        }
        let mut data = zero_bytes(checked_nbytes(T::DTYPE, shape)?)?;
        for (chunk, v) in data.chunks_exact_mut(size).zip(values) {
            v.write_le(chunk);
        }
        Ok(Tensor {
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            data: Storage::Bytes(data),
        })
    }

    /// A rank-0 tensor holding one value.
    pub fn scalar<T: Element>(value: T) -> Self {
        let mut data = vec![0u8; T::DTYPE.size()];
        value.write_le(&mut data);
        Tensor {
            dtype: T::DTYPE,
            shape: Vec::new(),
            data: Storage::Bytes(data),
        }
    }

    /// The elements as typed values; fails if `T` is not this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::UnknownDType {
                name: format!("{} (tensor holds {})", T::DTYPE, self.dtype),
            });
        }
        Ok(self
            .bytes()
            .chunks_exact(self.dtype.size())
            .map(T::read_le)
            .collect())
    }

    /// The elements of a string tensor; fails for other dtypes.
    pub fn strings(&self) -> Result<&[String]> {
        match &self.data {
            Storage::Strings(values) => Ok(values),
            Storage::Bytes(_) => Err(not_strings(self.dtype)),
        }
    }

    /// The elements of a string tensor, writable (their number is fixed by the shape);
    /// fails for other dtypes.
    pub fn strings_mut(&mut self) -> Result<&mut [String]> {
        match &mut self.data {
            Storage::Strings(values) => Ok(values),
            Storage::Bytes(_) => Err(not_strings(self.dtype)),
        }
    }

    /// Gives up a string tensor, keeping its elements; fails for other dtypes.
    pub fn into_strings(self) -> Result<Vec<String>> {
        match self.data {
            Storage::Strings(values) => Ok(values),
            Storage::Bytes(_) => Err(not_strings(self.dtype)),
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // A shape with a zero dim has no elements however large the others (no overflow).
        checked_numel(&self.shape).expect("counted when the tensor was made")
    }

    /// The dtype and shape, for validation.
    pub fn meta(&self) -> Meta<'_> {
        Meta::new(self.dtype, &self.shape)
    }

    /// Row-major element strides of this contiguous tensor.
    pub fn strides(&self) -> Vec<usize> {
        row_major_strides(&self.shape)
    }

    /// The raw little-endian bytes (none for a string tensor).
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Storage::Bytes(bytes) => bytes,
            Storage::Strings(_) => &[],
        }
    }

    /// The raw bytes, writable (the length is fixed by dtype and shape; none for a string
    /// tensor).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.data {
            Storage::Bytes(bytes) => bytes,
            Storage::Strings(_) => &mut [],
        }
    }

    /// Gives up the tensor, keeping its bytes (none for a string tensor).
    pub fn into_bytes(self) -> Vec<u8> {
        match self.data {
            Storage::Bytes(bytes) => bytes,
            Storage::Strings(_) => Vec::new(),
        }
    }
}

/// The error for asking a tensor of `dtype` for strings (worded like [`Tensor::to_vec`]'s).
fn not_strings(dtype: DType) -> Error {
    Error::UnknownDType {
        name: format!("string (tensor holds {dtype})"),
    }
}

/// `n` zero bytes, or [`Error::OutOfMemory`] if the allocator refuses them.
fn zero_bytes(n: usize) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(n)
        .map_err(|_| Error::OutOfMemory { bytes: n })?;
    bytes.resize(n, 0);
    Ok(bytes)
}

/// Row-major (C order) element strides of `shape`.
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    fill_row_major_strides(shape, &mut strides);
    strides
}

/// Writes the row-major element strides of `shape` into `strides` (of the same length),
/// for callers that keep them inline.
#[inline]
pub fn fill_row_major_strides(shape: &[usize], strides: &mut [usize]) {
    let mut step = 1usize;
    for (stride, &d) in strides.iter_mut().zip(shape).rev() {
        *stride = step;
        step = step.saturating_mul(d);
    }
}

/// The multi-index of row-major offset `flat` in `shape` (dims of size 0 contribute 0).
///
/// ```
/// assert_eq!(scatterjit_ir::unravel(7, &[2, 4]), [1, 3]);
/// ```
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut position = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            position[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    position
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_are_row_major() {
        assert_eq!(row_major_strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(row_major_strides(&[]), Vec::<usize>::new());
    }

    #[test]
    fn bool_bytes_are_checked() {
        assert!(matches!(
            Tensor::from_bytes(DType::Bool, vec![2], vec![0, 2]),
            Err(Error::InvalidBool { offset: 1, byte: 2 })
        ));
    }

    // Miri stops at an allocation this large instead of failing it.
    #[cfg(not(miri))]
    #[test]
    fn allocation_failure_is_an_error() {
        // Under isize::MAX, so the shape is valid, but no allocator has 2^62 bytes.
        let e = Tensor::zeros(DType::U8, vec![1 << 62]).unwrap_err();
        assert_eq!(e, Error::OutOfMemory { bytes: 1 << 62 });
    }

    #[test]
    fn string_tensors_hold_strings_not_bytes() {
        let t = Tensor::from_strings(&[2, 1], ["", "é🦀"]).unwrap();
        assert_eq!(t.strings().unwrap(), ["", "é🦀"]);
        assert!(t.bytes().is_empty());
        assert!(t.to_vec::<u8>().is_err());
        assert_eq!(t.clone().into_strings().unwrap(), ["", "é🦀"]);
        assert_eq!(
            Tensor::zeros(DType::String, vec![2])
                .unwrap()
                .strings()
                .unwrap(),
            ["", ""]
        );
        assert!(matches!(
            Tensor::from_strings(&[2, 2], ["a"; 3]),
            Err(Error::ElementCount {
                expected: 4,
                actual: 3
            })
        ));
        let numbers = Tensor::from_slice(&[1], &[1u8]).unwrap();
        assert!(numbers.strings().is_err());
        assert!(numbers.into_strings().is_err());
    }

    #[test]
    fn typed_round_trip() {
        let t = Tensor::from_slice(&[3], &[1i16, -2, 3]).unwrap();
        assert_eq!(t.dtype(), DType::I16);
        assert_eq!(t.to_vec::<i16>().unwrap(), [1, -2, 3]);
        assert!(t.to_vec::<u16>().is_err());
        assert!(Tensor::from_slice(&[2], &[1u8]).is_err());
    }
}
