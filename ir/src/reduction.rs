//! Reductions of ScatterElements: names, aliases, which dtypes they apply to, identities.

use std::fmt;
use std::str::FromStr;

use crate::dtype::{DType, DTypeClass};
use crate::error::Error;

/// How an update combines with the output element it targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reduction {
    /// Assign; with duplicate indices the last update in row-major order wins.
    None,
    /// Sum (`sum` in OpenVINO and PyTorch): integers wrap, bool is OR.
    Add,
    /// Product (`prod`, `multiply`): integers wrap, bool is AND.
    Mul,
    /// IEEE 754-2019 `maximum` (`amax`): NaN wins, +0 > -0; bool is OR.
    Max,
    /// IEEE 754-2019 `minimum` (`amin`): NaN wins, -0 < +0; bool is AND.
    Min,
    /// Mean of the updates (and of the initial value when `use_init_val`).
    Mean,
}

impl Reduction {
    /// Every reduction, in declaration order.
    pub const ALL: &'static [Reduction] = &[
        Reduction::None,
        Reduction::Add,
        Reduction::Mul,
        Reduction::Max,
        Reduction::Min,
        Reduction::Mean,
    ];

    /// The canonical name used in kernel keys (`none`, `add`, `mul`, `max`, `min`, `mean`).
    pub const fn name(self) -> &'static str {
        match self {
            Reduction::None => "none",
            Reduction::Add => "add",
            Reduction::Mul => "mul",
            Reduction::Max => "max",
            Reduction::Min => "min",
            Reduction::Mean => "mean",
        }
    }

    /// Whether this reduction is defined for `dtype` (SPEC: "Reductions").
    pub const fn supports(self, dtype: DType) -> bool {
        match dtype.class() {
            DTypeClass::String => matches!(self, Reduction::None),
            DTypeClass::Float | DTypeClass::SignedInt | DTypeClass::UnsignedInt => true,
            DTypeClass::Bool => !matches!(self, Reduction::Mean),
            DTypeClass::Complex => {
                matches!(self, Reduction::None | Reduction::Add | Reduction::Mul)
            }
        }
    }

    /// Little-endian bytes of the value an element starts from when `use_init_val` is false,
    /// or `None` where the reduction has no identity (none, mean) or does not apply to `dtype`.
    pub fn identity_bytes(self, dtype: DType) -> Option<Vec<u8>> {
        use DType as D;
        if !self.supports(dtype) {
            return None;
        }
        let one = matches!(self, Reduction::Mul);
        let lowest = matches!(self, Reduction::Max);
        let highest = matches!(self, Reduction::Min);
        if !(one || lowest || highest || matches!(self, Reduction::Add)) {
            return None;
        }
        // `pick(zero, one, lowest, highest)` in the dtype's own representation.
        macro_rules! pick {
            ($zero:expr, $one:expr, $lo:expr, $hi:expr) => {
                if one {
                    $one.to_le_bytes().to_vec()
                } else if lowest {
                    $lo.to_le_bytes().to_vec()
                } else if highest {
                    $hi.to_le_bytes().to_vec()
                } else {
                    $zero.to_le_bytes().to_vec()
                }
            };
        }
        Some(match dtype {
            // Floats start sums from -0.0, the true identity of IEEE addition (-0 + -0 = -0).
            D::F16 => pick!(
                half::f16::NEG_ZERO,
                half::f16::ONE,
                half::f16::NEG_INFINITY,
                half::f16::INFINITY
            ),
            D::BF16 => pick!(
                half::bf16::NEG_ZERO,
                half::bf16::ONE,
                half::bf16::NEG_INFINITY,
                half::bf16::INFINITY
            ),
            D::F32 => pick!(-0f32, 1f32, f32::NEG_INFINITY, f32::INFINITY),
            D::F64 => pick!(-0f64, 1f64, f64::NEG_INFINITY, f64::INFINITY),
            D::I8 => pick!(0i8, 1i8, i8::MIN, i8::MAX),
            D::I16 => pick!(0i16, 1i16, i16::MIN, i16::MAX),
            D::I32 => pick!(0i32, 1i32, i32::MIN, i32::MAX),
            D::I64 => pick!(0i64, 1i64, i64::MIN, i64::MAX),
            D::U8 => pick!(0u8, 1u8, u8::MIN, u8::MAX),
            D::U16 => pick!(0u16, 1u16, u16::MIN, u16::MAX),
            D::U32 => pick!(0u32, 1u32, u32::MIN, u32::MAX),
            D::U64 => pick!(0u64, 1u64, u64::MIN, u64::MAX),
            // OR has identity false, AND has identity true.
            D::Bool => vec![u8::from(one || highest)],
            D::Complex64 => [
                pick!(-0f32, 1f32, 0f32, 0f32),
                pick!(-0f32, 0f32, 0f32, 0f32),
            ]
            .concat(),
            D::Complex128 => [
                pick!(-0f64, 1f64, 0f64, 0f64),
                pick!(-0f64, 0f64, 0f64, 0f64),
            ]
            .concat(),
            D::String => return None,
        })
    }

    /// The dtype that `mean` accumulates `dtype` in: f32 for f16/bf16, the float itself
    /// otherwise, i64 for narrow integers and i128-like pairs for 64-bit ones (see
    /// [`MeanAccumulator`]).
    pub const fn mean_accumulator(dtype: DType) -> Option<MeanAccumulator> {
        use DType as D;
        match dtype {
            D::F16 | D::BF16 | D::F32 => Some(MeanAccumulator::F32),
            D::F64 => Some(MeanAccumulator::F64),
            D::I8 | D::I16 | D::I32 | D::U8 | D::U16 | D::U32 => Some(MeanAccumulator::I64),
            D::I64 | D::U64 => Some(MeanAccumulator::I128),
            _ => None,
        }
    }
}

/// The wide type a `mean` sums in, so that integer sums never overflow (SPEC: "mean").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MeanAccumulator {
    /// f32 (for f16, bf16 and f32).
    F32,
    /// f64.
    F64,
    /// i64 (for integers of 32 bits or fewer).
    I64,
    /// i128 (for i64 and u64).
    I128,
}

impl MeanAccumulator {
    /// Bytes per accumulator element.
    pub const fn size(self) -> usize {
        match self {
            MeanAccumulator::F32 => 4,
            MeanAccumulator::F64 | MeanAccumulator::I64 => 8,
            MeanAccumulator::I128 => 16,
        }
    }

    /// Little-endian bytes of the sum an element starts from without `use_init_val`: -0.0
    /// for floats (IEEE addition's identity, as for `add`), 0 for integers.
    pub fn identity_bytes(self) -> Vec<u8> {
        match self {
            MeanAccumulator::F32 => (-0f32).to_le_bytes().to_vec(),
            MeanAccumulator::F64 => (-0f64).to_le_bytes().to_vec(),
            MeanAccumulator::I64 | MeanAccumulator::I128 => vec![0; self.size()],
        }
    }
}

impl fmt::Display for Reduction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Reduction {
    type Err = Error;

    /// Parses a reduction name, accepting the OpenVINO and PyTorch spellings
    /// (`sum`, `prod`, `multiply`, `amax`, `amin`) as aliases.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" => Reduction::None,
            "add" | "sum" => Reduction::Add,
            "mul" | "prod" | "multiply" => Reduction::Mul,
            "max" | "amax" => Reduction::Max,
            "min" | "amin" => Reduction::Min,
            "mean" => Reduction::Mean,
            _ => {
                return Err(Error::UnknownReduction {
                    name: s.to_string(),
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_parse() {
        for (name, r) in [
            ("sum", Reduction::Add),
            ("prod", Reduction::Mul),
            ("multiply", Reduction::Mul),
            ("amax", Reduction::Max),
            ("amin", Reduction::Min),
            ("MEAN", Reduction::Mean),
        ] {
            assert_eq!(name.parse::<Reduction>().unwrap(), r);
        }
        for &r in Reduction::ALL {
            assert_eq!(r.name().parse::<Reduction>().unwrap(), r);
        }
        assert!(matches!(
            "median".parse::<Reduction>(),
            Err(Error::UnknownReduction { .. })
        ));
    }

    #[test]
    fn support_table() {
        assert!(!Reduction::Max.supports(DType::Complex64));
        assert!(!Reduction::Mean.supports(DType::Bool));
        assert!(Reduction::Mul.supports(DType::Complex128));
        assert!(!Reduction::Add.supports(DType::String));
        assert!(Reduction::None.supports(DType::String));
    }

    #[test]
    fn identities_have_the_dtype_size() {
        for &d in DType::ALL {
            for &r in Reduction::ALL {
                if let Some(bytes) = r.identity_bytes(d) {
                    assert_eq!(bytes.len(), d.size(), "{r} {d}");
                }
            }
        }
        assert_eq!(
            Reduction::Max.identity_bytes(DType::F32).unwrap(),
            f32::NEG_INFINITY.to_le_bytes()
        );
        assert_eq!(Reduction::Min.identity_bytes(DType::Bool).unwrap(), [1]);
        assert_eq!(Reduction::Add.identity_bytes(DType::Bool).unwrap(), [0]);
    }
}
