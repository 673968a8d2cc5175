//! The element types: one table, everything else derived from it.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// What arithmetic a dtype supports; reductions are defined per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DTypeClass {
    /// IEEE binary floats (f16, bf16, f32, f64).
    Float,
    /// Two's-complement signed integers.
    SignedInt,
    /// Unsigned integers.
    UnsignedInt,
    /// One byte holding 0 (false) or 1 (true).
    Bool,
    /// A pair of floats (real, imaginary).
    Complex,
    /// Variable-length text, stored out of line.
    String,
}

macro_rules! dtype_table {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, $size:literal, $npy:literal, $class:ident; )*) => {
        /// An element type: the 16 ONNX tensor types.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DType {
            $( $(#[$doc])* $variant, )*
        }

        impl DType {
            /// Every dtype, in table order.
            pub const ALL: &'static [DType] = &[$( DType::$variant, )*];

            /// The short name used in kernel keys, error messages and the CLI (`f32`, `bf16`, `c64`).
            pub const fn name(self) -> &'static str {
                match self { $( DType::$variant => $name, )* }
            }

            /// Bytes per element in a tensor's byte buffer (0 for strings, which live out of line).
            pub const fn size(self) -> usize {
                match self { $( DType::$variant => $size, )* }
            }

            /// The little-endian `.npy` descr of this dtype (`<U` is a prefix for strings).
            pub const fn npy_descr(self) -> &'static str {
                match self { $( DType::$variant => $npy, )* }
            }

            /// The arithmetic class.
            pub const fn class(self) -> DTypeClass {
                match self { $( DType::$variant => DTypeClass::$class, )* }
            }
        }
    };
}

dtype_table! {
    /// IEEE 754 binary16.
    F16 => "f16", 2, "<f2", Float;
    /// bfloat16: the top half of an f32 (saved by numpy as `<V2`).
    BF16 => "bf16", 2, "<V2", Float;
    /// IEEE 754 binary32.
    F32 => "f32", 4, "<f4", Float;
    /// IEEE 754 binary64.
    F64 => "f64", 8, "<f8", Float;
    /// Signed 8-bit integer.
    I8 => "i8", 1, "|i1", SignedInt;
    /// Signed 16-bit integer.
    I16 => "i16", 2, "<i2", SignedInt;
    /// Signed 32-bit integer.
    I32 => "i32", 4, "<i4", SignedInt;
    /// Signed 64-bit integer.
    I64 => "i64", 8, "<i8", SignedInt;
    /// Unsigned 8-bit integer.
    U8 => "u8", 1, "|u1", UnsignedInt;
    /// Unsigned 16-bit integer.
    U16 => "u16", 2, "<u2", UnsignedInt;
    /// Unsigned 32-bit integer.
    U32 => "u32", 4, "<u4", UnsignedInt;
    /// Unsigned 64-bit integer.
    U64 => "u64", 8, "<u8", UnsignedInt;
    /// Boolean, one byte, 0 or 1.
    Bool => "bool", 1, "|b1", Bool;
    /// Two f32 (real, imaginary).
    Complex64 => "c64", 8, "<c8", Complex;
    /// Two f64 (real, imaginary).
    Complex128 => "c128", 16, "<c16", Complex;
    /// Text, one `String` per element: the gather ops and `none` scatter only.
    String => "string", 0, "<U", String;
}

impl DType {
    /// True for the integer dtypes, the only ones allowed as indices.
    pub const fn is_integer(self) -> bool {
        matches!(
            self.class(),
            DTypeClass::SignedInt | DTypeClass::UnsignedInt
        )
    }

    /// True for signed integers (their negative values are normalized against the axis size).
    pub const fn is_signed_integer(self) -> bool {
        matches!(self.class(), DTypeClass::SignedInt)
    }

    /// Looks a dtype up by its `.npy` descr (`<f4`, `|b1`; `<V2` reads as bf16).
    /// Single-byte types accept `|`, `<` and `=`; wider ones `<` or `=`.
    pub fn from_npy_descr(descr: &str) -> Option<DType> {
        // Byte order marks `=` (native, little here) and `|` (not applicable) read as `<`.
        let canon = |s: &str| match s.strip_prefix(['=', '|']) {
            Some(rest) => format!("<{rest}"),
            None => s.to_string(),
        };
        let wanted = canon(descr);
        DType::ALL
            .iter()
            .copied()
            .find(|d| *d != DType::String && canon(d.npy_descr()) == wanted)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;

    /// Parses the short name (`f32`), also accepting the long ONNX-style names
    /// (`float32`, `float16`, `bfloat16`, `int64`, `uint8`, `complex64`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let alias = match lower.as_str() {
            "float16" | "half" => "f16",
            "bfloat16" => "bf16",
            "float32" | "float" => "f32",
            "float64" | "double" => "f64",
            "int8" => "i8",
            "int16" => "i16",
            "int32" => "i32",
            "int64" => "i64",
            "uint8" => "u8",
            "uint16" => "u16",
            "uint32" => "u32",
            "uint64" => "u64",
            "complex64" => "c64",
            "complex128" => "c128",
            "str" => "string",
            other => other,
        };
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == alias)
            .ok_or_else(|| Error::UnknownDType {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert_eq!(DType::ALL.len(), 16);
    }

    #[test]
    fn npy_descrs() {
        assert_eq!(DType::from_npy_descr("<f4"), Some(DType::F32));
        assert_eq!(DType::from_npy_descr("|b1"), Some(DType::Bool));
        assert_eq!(DType::from_npy_descr("<V2"), Some(DType::BF16));
        assert_eq!(DType::from_npy_descr("|u1"), Some(DType::U8));
        assert_eq!(DType::from_npy_descr("<u1"), Some(DType::U8));
        assert_eq!(DType::from_npy_descr("=i8"), Some(DType::I64));
        assert_eq!(DType::from_npy_descr(">f4"), None);
        assert_eq!(DType::from_npy_descr("<U"), None);
    }

    #[test]
    fn unknown_name_is_an_error() {
        assert!(matches!(
            "f128".parse::<DType>(),
            Err(Error::UnknownDType { .. })
        ));
    }
}
