//! Owned, contiguous tensors: the values ops consume and produce.

use crate::dtype::DType;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::{checked_nbytes, checked_numel, Meta};

/// An owned tensor: dtype, shape, and its elements in row-major (C) order, little-endian.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
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
        Ok(Tensor { dtype, shape, data })
    }

    /// A tensor of zero bytes (0, +0.0, false) of the given dtype and shape.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<Self> {
        let n = checked_nbytes(dtype, &shape)?;
        Self::from_bytes(dtype, shape, vec![0; n])
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
        let mut data = vec![0u8; checked_nbytes(T::DTYPE, shape)?];
        for (chunk, v) in data.chunks_exact_mut(size).zip(values) {
            v.write_le(chunk);
        }
        Ok(Tensor {
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            data,
        })
    }

    /// A rank-0 tensor holding one value.
    pub fn scalar<T: Element>(value: T) -> Self {
        let mut data = vec![0u8; T::DTYPE.size()];
        value.write_le(&mut data);
        Tensor {
            dtype: T::DTYPE,
            shape: Vec::new(),
            data,
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
            .data
            .chunks_exact(self.dtype.size())
            .map(T::read_le)
            .collect())
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

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The raw bytes, writable (the length is fixed by dtype and shape).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Gives up the tensor, keeping its bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }
}

/// Row-major (C order) element strides of `shape`.
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].saturating_mul(shape[d + 1]);
    }
    strides
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

    #[test]
    fn typed_round_trip() {
        let t = Tensor::from_slice(&[3], &[1i16, -2, 3]).unwrap();
        assert_eq!(t.dtype(), DType::I16);
        assert_eq!(t.to_vec::<i16>().unwrap(), [1, -2, 3]);
        assert!(t.to_vec::<u16>().is_err());
        assert!(Tensor::from_slice(&[2], &[1u8]).is_err());
    }
}
