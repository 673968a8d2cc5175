//! Element values from plain numbers, for every numeric dtype: the value generators and
//! comparisons of the tests, the suite and the fuzz bodies dispatch on a dtype through
//! [`match_element!`] here, instead of each matching dtypes to Rust types by hand.

use half::{bf16, f16};
use scatterjit::ir::{match_element, Complex128, Complex64, DType, DTypeClass, Element};

/// A number to store as an element of any numeric dtype: floats take `re` (rounded to
/// nearest), complex numbers `re` and `im`, integers `bits` wrapped into the type (two's
/// complement), bools the lowest bit of `bits`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// The value of a float, the real part of a complex number.
    pub re: f64,
    /// The imaginary part of a complex number.
    pub im: f64,
    /// The value of an integer or bool.
    pub bits: u64,
}

impl Sample {
    /// One number for every dtype: `value` for floats and both parts of complex numbers,
    /// `value` truncated toward zero (saturating at the `i64` range) for integers, and
    /// its parity for bools.
    pub fn number(value: f64) -> Sample {
        Sample {
            re: value,
            im: value,
            bits: value as i64 as u64,
        }
    }
}

/// An element type built from a [`Sample`] and read back as floats.
pub trait FromSample: Element {
    /// The element `sample` stands for in this type (see [`Sample`]).
    fn from_sample(sample: Sample) -> Self;
    /// The real and imaginary parts as f64 (exact), or `None` for integers and bools.
    fn float_parts(self) -> Option<[f64; 2]>;
}

macro_rules! float_samples {
    ($($t:ty => $from:expr, $to:expr;)*) => {$(
        impl FromSample for $t {
            fn from_sample(sample: Sample) -> Self {
                $from(sample.re)
            }
            fn float_parts(self) -> Option<[f64; 2]> {
                Some([$to(self), 0.0])
            }
        }
    )*};
}

float_samples! {
    f16 => f16::from_f64, f16::to_f64;
    bf16 => bf16::from_f64, bf16::to_f64;
    f32 => |x| x as f32, f64::from;
    f64 => std::convert::identity, std::convert::identity;
}

macro_rules! integer_samples {
    ($($t:ty),*) => {$(
        impl FromSample for $t {
            fn from_sample(sample: Sample) -> Self {
                sample.bits as $t
            }
            fn float_parts(self) -> Option<[f64; 2]> {
                None
            }
        }
    )*};
}

integer_samples!(i8, i16, i32, i64, u8, u16, u32, u64);

impl FromSample for bool {
    fn from_sample(sample: Sample) -> Self {
        sample.bits & 1 == 1
    }
    fn float_parts(self) -> Option<[f64; 2]> {
        None
    }
}

impl FromSample for Complex64 {
    fn from_sample(sample: Sample) -> Self {
        Complex64 {
            re: sample.re as f32,
            im: sample.im as f32,
        }
    }
    fn float_parts(self) -> Option<[f64; 2]> {
        Some([self.re.into(), self.im.into()])
    }
}

impl FromSample for Complex128 {
    fn from_sample(sample: Sample) -> Self {
        Complex128 {
            re: sample.re,
            im: sample.im,
        }
    }
    fn float_parts(self) -> Option<[f64; 2]> {
        Some([self.re, self.im])
    }
}

/// Writes `sample` as one element of `dtype` into the first `dtype.size()` bytes of `out`.
///
/// # Panics
/// For strings, which have no bytes of their own, and when `out` is too short.
pub fn write(dtype: DType, sample: Sample, out: &mut [u8]) {
    match_element!(dtype,
        T => T::from_sample(sample).write_le(out),
        other => panic!("no element bytes of dtype {other}"),
    )
}

/// The bytes of `samples` as elements of `dtype`, in order.
///
/// # Panics
/// For strings.
pub fn bytes(dtype: DType, samples: impl IntoIterator<Item = Sample>) -> Vec<u8> {
    let size = dtype.size();
    let mut out = Vec::new();
    for sample in samples {
        let at = out.len();
        out.resize(at + size, 0);
        write(dtype, sample, &mut out[at..]);
    }
    out
}

/// The float parts of every element of `bytes` (real, then imaginary for complex), or
/// `None` for integer, bool and string dtypes, whose elements compare exactly.
pub fn float_parts(dtype: DType, bytes: &[u8]) -> Option<Vec<f64>> {
    let size = dtype.size();
    let parts = if dtype.class() == DTypeClass::Complex {
        2
    } else {
        1
    };
    match_element!(dtype,
        T => bytes
            .chunks_exact(size)
            .map(|x| T::read_le(x).float_parts().map(|p| p[..parts].to_vec()))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat()),
        _ => None,
    )
}

/// Element-wise equality of two byte buffers of `dtype`: bit-identical, except that a NaN
/// equals any NaN in the same place (NaN payloads of results are unspecified).
pub fn same_values(dtype: DType, a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let same = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
    match_element!(dtype,
        T => a
            .chunks_exact(dtype.size())
            .zip(b.chunks_exact(dtype.size()))
            .all(|(x, y)| {
                x == y
                    || match (T::read_le(x).float_parts(), T::read_le(y).float_parts()) {
                        (Some(p), Some(q)) => same(p[0], q[0]) && same(p[1], q[1]),
                        _ => false,
                    }
            }),
        _ => a == b,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_through_every_dtype() {
        for &dtype in DType::ALL {
            if dtype == DType::String {
                continue;
            }
            let raw = bytes(dtype, [Sample::number(-3.0), Sample::number(2.5)]);
            assert_eq!(raw.len(), 2 * dtype.size(), "{dtype}");
            match float_parts(dtype, &raw) {
                Some(parts) if dtype.class() == DTypeClass::Complex => {
                    assert_eq!(parts, [-3.0, -3.0, 2.5, 2.5])
                }
                Some(parts) => assert_eq!(parts, [-3.0, 2.5], "{dtype}"),
                None if dtype == DType::Bool => assert_eq!(raw, [1, 0]),
                None => {
                    let mut want = (-3i64).to_le_bytes()[..dtype.size()].to_vec();
                    want.extend(&2i64.to_le_bytes()[..dtype.size()]);
                    assert_eq!(raw, want, "{dtype}");
                }
            }
        }
    }

    #[test]
    fn nan_equals_nan_and_signed_zeros_differ() {
        let nan = bytes(DType::F32, [Sample::number(f64::NAN)]);
        let other_nan = f32::from_bits(0x7fc0_0001).to_le_bytes();
        assert!(same_values(DType::F32, &nan, &other_nan));
        let zero = bytes(DType::F16, [Sample::number(0.0)]);
        let negative_zero = bytes(DType::F16, [Sample::number(-0.0)]);
        assert!(!same_values(DType::F16, &zero, &negative_zero));
        // Complex numbers compare part by part: a NaN part does not hide the other.
        let a = bytes(
            DType::Complex64,
            [Sample {
                re: f64::NAN,
                im: 1.0,
                bits: 0,
            }],
        );
        let b = bytes(
            DType::Complex64,
            [Sample {
                re: f64::NAN,
                im: 2.0,
                bits: 0,
            }],
        );
        assert!(same_values(DType::Complex64, &a, &a));
        assert!(!same_values(DType::Complex64, &a, &b));
        assert!(!same_values(DType::I32, &[1, 0, 0, 0], &[2, 0, 0, 0]));
    }
}
