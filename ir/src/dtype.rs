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

/// The one dtype table, grouped by [`DTypeClass`]: variant, name, size in bytes, `.npy`
/// descr and Rust element type (see [`crate::Element`]). Everything else about a dtype is
/// derived from it: the [`DType`] enum and its facts here, and the dispatch macros
/// [`match_element!`](crate::match_element) and [`match_integer!`](crate::match_integer).
/// `dtype_table!(($rule ...))` hands the table to `__dtype_rule!`'s rule `$rule`.
#[doc(hidden)]
#[macro_export]
macro_rules! dtype_table {
    ($rule:tt) => {
        $crate::__dtype_rule! { $rule
            Float {
                /// IEEE 754 binary16.
                F16 => "f16", 2, "<f2", $crate::element::f16;
                /// bfloat16: the top half of an f32 (saved by numpy as `<V2`).
                BF16 => "bf16", 2, "<V2", $crate::element::bf16;
                /// IEEE 754 binary32.
                F32 => "f32", 4, "<f4", f32;
                /// IEEE 754 binary64.
                F64 => "f64", 8, "<f8", f64;
            }
            SignedInt {
                /// Signed 8-bit integer.
                I8 => "i8", 1, "|i1", i8;
                /// Signed 16-bit integer.
                I16 => "i16", 2, "<i2", i16;
                /// Signed 32-bit integer.
                I32 => "i32", 4, "<i4", i32;
                /// Signed 64-bit integer.
                I64 => "i64", 8, "<i8", i64;
            }
            UnsignedInt {
                /// Unsigned 8-bit integer.
                U8 => "u8", 1, "|u1", u8;
                /// Unsigned 16-bit integer.
                U16 => "u16", 2, "<u2", u16;
                /// Unsigned 32-bit integer.
                U32 => "u32", 4, "<u4", u32;
                /// Unsigned 64-bit integer.
                U64 => "u64", 8, "<u8", u64;
            }
            Bool {
                /// Boolean, one byte, 0 or 1.
                Bool => "bool", 1, "|b1", bool;
            }
            Complex {
                /// Two f32 (real, imaginary).
                Complex64 => "c64", 8, "<c8", $crate::element::Complex64;
                /// Two f64 (real, imaginary).
                Complex128 => "c128", 16, "<c16", $crate::element::Complex128;
            }
            String {
                /// Text, one `String` per element: the gather ops and `none` scatter only.
                String => "string", 0, "<U", ::std::string::String;
            }
        }
    };
}

/// The rules that read the table of [`dtype_table!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __dtype_rule {
    // The `DType` enum and its facts.
    ((define)
     $( $class:ident { $( $(#[$doc:meta])* $variant:ident => $name:literal, $size:literal,
                          $npy:literal, $rust:ty; )* } )*) => {
        /// An element type: the 16 ONNX tensor types.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DType {
            $( $( $(#[$doc])* $variant, )* )*
        }

        impl DType {
            /// Every dtype, in table order.
            pub const ALL: &'static [DType] = &[$( $( DType::$variant, )* )*];

            /// The short name used in kernel keys, error messages and the CLI (`f32`, `bf16`, `c64`).
            pub const fn name(self) -> &'static str {
                match self { $( $( DType::$variant => $name, )* )* }
            }

            /// Bytes per element in a tensor's byte buffer (0 for strings, which live out of line).
            pub const fn size(self) -> usize {
                match self { $( $( DType::$variant => $size, )* )* }
            }

            /// The little-endian `.npy` descr of this dtype (`<U` is a prefix for strings).
            pub const fn npy_descr(self) -> &'static str {
                match self { $( $( DType::$variant => $npy, )* )* }
            }

            /// The arithmetic class.
            pub const fn class(self) -> DTypeClass {
                match self { $( $( DType::$variant => DTypeClass::$class, )* )* }
            }
        }
    };
    // `match` with an arm per numeric dtype (every class but strings).
    ((element $dtype:expr, $T:ident, $body:expr, [$($other:pat => $fallback:expr),+])
     Float { $( $(#[$fd:meta])* $fv:ident => $fn:literal, $fs:literal, $fnpy:literal, $ft:ty; )* }
     SignedInt { $( $(#[$sd:meta])* $sv:ident => $sn:literal, $ss:literal, $snpy:literal, $st:ty; )* }
     UnsignedInt { $( $(#[$ud:meta])* $uv:ident => $un:literal, $us:literal, $unpy:literal, $ut:ty; )* }
     Bool { $( $(#[$bd:meta])* $bv:ident => $bn:literal, $bs:literal, $bnpy:literal, $bt:ty; )* }
     Complex { $( $(#[$cd:meta])* $cv:ident => $cn:literal, $cs:literal, $cnpy:literal, $ct:ty; )* }
     $($strings:tt)*) => {
        match $dtype {
            $( $crate::DType::$fv => { type $T = $ft; $body } )*
            $( $crate::DType::$sv => { type $T = $st; $body } )*
            $( $crate::DType::$uv => { type $T = $ut; $body } )*
            $( $crate::DType::$bv => { type $T = $bt; $body } )*
            $( $crate::DType::$cv => { type $T = $ct; $body } )*
            $( $other => $fallback, )+
        }
    };
    // `match` with an arm per integer dtype.
    ((integer $dtype:expr, $T:ident, $body:expr, [$($other:pat => $fallback:expr),+])
     Float { $($floats:tt)* }
     SignedInt { $( $(#[$sd:meta])* $sv:ident => $sn:literal, $ss:literal, $snpy:literal, $st:ty; )* }
     UnsignedInt { $( $(#[$ud:meta])* $uv:ident => $un:literal, $us:literal, $unpy:literal, $ut:ty; )* }
     $($others:tt)*) => {
        match $dtype {
            $( $crate::DType::$sv => { type $T = $st; $body } )*
            $( $crate::DType::$uv => { type $T = $ut; $body } )*
            $( $other => $fallback, )+
        }
    };
}

/// Evaluates `$body` with the type `$T` set to the Rust element type of `$dtype` (the
/// table's column: `f32`, `half::bf16`, `bool`, [`crate::Complex64`], ...); strings go to
/// the arms after it. One `match`, written by the table.
///
/// ```
/// use scatterjit_ir::{match_element, DType, Element};
/// let size = |dtype: DType| match_element!(dtype, T => std::mem::size_of::<T>(), _ => 0);
/// assert_eq!(size(DType::BF16), 2);
/// assert_eq!(size(DType::String), 0);
/// let named = match_element!(DType::I16, T => T::DTYPE, other => other);
/// assert_eq!(named, DType::I16);
/// ```
#[macro_export]
macro_rules! match_element {
    ($dtype:expr, $T:ident => $body:expr, $($other:pat => $fallback:expr),+ $(,)?) => {
        $crate::dtype_table!((element $dtype, $T, $body, [$($other => $fallback),+]))
    };
}

/// [`match_element!`] over the integer dtypes only (the index dtypes); the arms after it
/// take the rest.
///
/// ```
/// use scatterjit_ir::{match_integer, DType};
/// let max = |dtype: DType| match_integer!(dtype, T => Some(T::MAX as u128), _ => None);
/// assert_eq!(max(DType::I8), Some(127));
/// assert_eq!(max(DType::F32), None);
/// ```
#[macro_export]
macro_rules! match_integer {
    ($dtype:expr, $T:ident => $body:expr, $($other:pat => $fallback:expr),+ $(,)?) => {
        $crate::dtype_table!((integer $dtype, $T, $body, [$($other => $fallback),+]))
    };
}

dtype_table!((define));

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

    /// The table's Rust type of each dtype is the `Element` type of that dtype.
    #[test]
    fn element_types_are_the_tables() {
        use crate::Element;
        for &d in DType::ALL {
            let of_type = crate::match_element!(d, T => Some(T::DTYPE), _ => None);
            assert_eq!(of_type, (d != DType::String).then_some(d));
            let integer = crate::match_integer!(d, T => Some(T::DTYPE), _ => None);
            assert_eq!(integer, d.is_integer().then_some(d));
        }
    }

    #[test]
    fn unknown_name_is_an_error() {
        assert!(matches!(
            "f128".parse::<DType>(),
            Err(Error::UnknownDType { .. })
        ));
    }
}
