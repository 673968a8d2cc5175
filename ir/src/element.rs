//! Rust scalar types for each numeric dtype, for building and reading tensors.

use std::fmt::Debug;

use crate::dtype::DType;

/// The element types of f16 and bf16 (from the `half` crate).
pub use half::{bf16, f16};

/// A complex number of two f32 (ONNX `complex64`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Complex64 {
    /// Real part.
    pub re: f32,
    /// Imaginary part.
    pub im: f32,
}

/// A complex number of two f64 (ONNX `complex128`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Complex128 {
    /// Real part.
    pub re: f64,
    /// Imaginary part.
    pub im: f64,
}

/// A Rust type whose values are the elements of one dtype, stored little-endian.
pub trait Element: Copy + Debug + PartialEq + Send + Sync + 'static {
    /// The dtype this type represents.
    const DTYPE: DType;
    /// Reads one element from the first `DTYPE.size()` bytes.
    fn read_le(bytes: &[u8]) -> Self;
    /// Writes one element into the first `DTYPE.size()` bytes.
    fn write_le(self, out: &mut [u8]);
}

macro_rules! primitive_elements {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            // Inline across crates: host loops over elements (the partial outputs' fold)
            // called these once per element.
            #[inline]
            fn read_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$t>()];
                raw.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(raw)
            }
            #[inline]
            fn write_le(self, out: &mut [u8]) {
                out[..std::mem::size_of::<$t>()].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

primitive_elements! {
    f32 => F32, f64 => F64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    half::f16 => F16, half::bf16 => BF16,
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn write_le(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
}

impl Element for Complex64 {
    const DTYPE: DType = DType::Complex64;
    fn read_le(bytes: &[u8]) -> Self {
        Complex64 {
            re: f32::read_le(&bytes[..4]),
            im: f32::read_le(&bytes[4..8]),
        }
    }
    fn write_le(self, out: &mut [u8]) {
        self.re.write_le(&mut out[..4]);
        self.im.write_le(&mut out[4..8]);
    }
}

impl Element for Complex128 {
    const DTYPE: DType = DType::Complex128;
    fn read_le(bytes: &[u8]) -> Self {
        Complex128 {
            re: f64::read_le(&bytes[..8]),
            im: f64::read_le(&bytes[8..16]),
        }
    }
    fn write_le(self, out: &mut [u8]) {
        self.re.write_le(&mut out[..8]);
        self.im.write_le(&mut out[8..16]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Element>(v: T) {
        let mut buf = vec![0u8; T::DTYPE.size()];
        v.write_le(&mut buf);
        assert_eq!(T::read_le(&buf), v);
    }

    #[test]
    fn elements_round_trip() {
        round_trip(-1.5f32);
        round_trip(i64::MIN);
        round_trip(u16::MAX);
        round_trip(true);
        round_trip(half::bf16::from_f32(3.0));
        round_trip(Complex64 { re: 1.0, im: -2.0 });
        round_trip(Complex128 { re: 1.0, im: -2.0 });
    }
}
