//! The arithmetic of SPEC.md's reduction table, one implementation per element type.

use half::{bf16, f16};

use crate::element::{Complex128, Complex64, Element};

/// The arithmetic of SPEC.md's reduction table, for one element type.
pub(super) trait Arith: Element {
    /// add / sum: floats in the type (f16/bf16 via f32), integers wrap, bool OR.
    fn add(self, other: Self) -> Self;
    /// mul / prod: floats in the type (f16/bf16 via f32), integers wrap, bool AND.
    fn mul(self, other: Self) -> Self;
    /// IEEE 754-2019 `maximum`, plain max for integers, OR for bool; `None` for complex.
    fn maximum(self, other: Self) -> Option<Self>;
    /// IEEE 754-2019 `minimum`, plain min for integers, AND for bool; `None` for complex.
    fn minimum(self, other: Self) -> Option<Self>;
    /// The mean of `start` (data, when `use_init_val`) and `updates`, summed in order in the
    /// accumulator type of [`crate::Reduction::mean_accumulator`]; `None` for bool and complex.
    fn mean(start: Option<Self>, updates: &[Self]) -> Option<Self>;
}

/// Defines IEEE 754-2019 `maximum` / `minimum` for one float type: NaN wins (the first NaN
/// operand), then the larger (smaller) value, and of two equal zeros the positive (negative)
/// one.
macro_rules! ieee_min_max {
    ($t:ty, $max:ident, $min:ident) => {
        fn $max(a: $t, b: $t) -> $t {
            if a.is_nan() {
                a
            } else if b.is_nan() {
                b
            } else if a > b {
                a
            } else if b > a {
                b
            } else if a.is_sign_positive() {
                a
            } else {
                b
            }
        }

        fn $min(a: $t, b: $t) -> $t {
            if a.is_nan() {
                a
            } else if b.is_nan() {
                b
            } else if a < b {
                a
            } else if b < a {
                b
            } else if a.is_sign_negative() {
                a
            } else {
                b
            }
        }
    };
}

ieee_min_max!(f32, maximum_f32, minimum_f32);
ieee_min_max!(f64, maximum_f64, minimum_f64);

/// `Arith` for a binary float type: IEEE arithmetic in the type itself, sums from -0.0.
macro_rules! float_arith {
    ($t:ty, $max:ident, $min:ident) => {
        impl Arith for $t {
            fn add(self, other: Self) -> Self {
                self + other
            }
            fn mul(self, other: Self) -> Self {
                self * other
            }
            fn maximum(self, other: Self) -> Option<Self> {
                Some($max(self, other))
            }
            fn minimum(self, other: Self) -> Option<Self> {
                Some($min(self, other))
            }
            fn mean(start: Option<Self>, updates: &[Self]) -> Option<Self> {
                let mut acc = start.unwrap_or(-0.0);
                for &u in updates {
                    acc += u;
                }
                let divisor = updates.len() + usize::from(start.is_some());
                Some(acc / divisor as $t)
            }
        }
    };
}

float_arith!(f32, maximum_f32, minimum_f32);
float_arith!(f64, maximum_f64, minimum_f64);

/// f16 and bf16: every combine in f32, rounded once to the 16-bit type; means accumulate in
/// f32 and round once at the end.
macro_rules! half_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(self, other: Self) -> Self {
                <$t>::from_f32(self.to_f32() + other.to_f32())
            }
            fn mul(self, other: Self) -> Self {
                <$t>::from_f32(self.to_f32() * other.to_f32())
            }
            fn maximum(self, other: Self) -> Option<Self> {
                Some(<$t>::from_f32(maximum_f32(self.to_f32(), other.to_f32())))
            }
            fn minimum(self, other: Self) -> Option<Self> {
                Some(<$t>::from_f32(minimum_f32(self.to_f32(), other.to_f32())))
            }
            fn mean(start: Option<Self>, updates: &[Self]) -> Option<Self> {
                let mut acc = start.map_or(-0.0, <$t>::to_f32);
                for &u in updates {
                    acc += u.to_f32();
                }
                let divisor = updates.len() + usize::from(start.is_some());
                Some(<$t>::from_f32(acc / divisor as f32))
            }
        }
    )*};
}

half_arith!(f16, bf16);

/// Integers: wrapping add and mul, plain max and min; means sum in `$acc` (i64 for up to
/// 32 bits, i128 for 64) and round toward negative infinity.
macro_rules! int_arith {
    ($($t:ty => $acc:ty),* $(,)?) => {$(
        impl Arith for $t {
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            fn maximum(self, other: Self) -> Option<Self> {
                Some(Ord::max(self, other))
            }
            fn minimum(self, other: Self) -> Option<Self> {
                Some(Ord::min(self, other))
            }
            fn mean(start: Option<Self>, updates: &[Self]) -> Option<Self> {
                let mut acc = start.map_or(0, <$acc>::from);
                for &u in updates {
                    acc = acc.wrapping_add(<$acc>::from(u));
                }
                let divisor = (updates.len() + usize::from(start.is_some())) as $acc;
                if divisor <= 0 {
                    return start;
                }
                // The floor of a mean of values of the type always fits the type.
                Some(acc.div_euclid(divisor) as $t)
            }
        }
    )*};
}

int_arith! {
    i8 => i64, i16 => i64, i32 => i64, u8 => i64, u16 => i64, u32 => i64,
    i64 => i128, u64 => i128,
}

impl Arith for bool {
    fn add(self, other: Self) -> Self {
        self || other
    }
    fn mul(self, other: Self) -> Self {
        self && other
    }
    fn maximum(self, other: Self) -> Option<Self> {
        Some(self || other)
    }
    fn minimum(self, other: Self) -> Option<Self> {
        Some(self && other)
    }
    fn mean(_: Option<Self>, _: &[Self]) -> Option<Self> {
        None
    }
}

/// Complex: componentwise add; the schoolbook product in exactly this expression order (no
/// fused multiply-add); max, min and mean are undefined.
macro_rules! complex_arith {
    ($($t:ident),*) => {$(
        impl Arith for $t {
            fn add(self, other: Self) -> Self {
                $t {
                    re: self.re + other.re,
                    im: self.im + other.im,
                }
            }
            fn mul(self, other: Self) -> Self {
                $t {
                    re: self.re * other.re - self.im * other.im,
                    im: self.re * other.im + self.im * other.re,
                }
            }
            fn maximum(self, _: Self) -> Option<Self> {
                None
            }
            fn minimum(self, _: Self) -> Option<Self> {
                None
            }
            fn mean(_: Option<Self>, _: &[Self]) -> Option<Self> {
                None
            }
        }
    )*};
}

complex_arith!(Complex64, Complex128);

#[cfg(test)]
mod tests {
    use super::super::run;
    use super::super::tests::{scatter, scatter_1d, t};
    use super::*;
    use crate::error::Error;
    use crate::reduction::Reduction;

    fn h(v: f32) -> f16 {
        f16::from_f32(v)
    }

    #[test]
    fn none_assigns_and_last_duplicate_wins() {
        let out = scatter_1d(Reduction::None, true, &[0i32; 4], &[1, 3, 1], &[7, 8, 9]);
        assert_eq!(out, [0, 9, 0, 8]);
        // use_init_val has no effect with none.
        let out = scatter_1d(Reduction::None, false, &[5i32; 4], &[1], &[7]);
        assert_eq!(out, [5, 7, 5, 5]);
    }

    #[test]
    fn integer_add_and_mul_wrap() {
        assert_eq!(
            scatter_1d(Reduction::Add, true, &[127i8, 0], &[0], &[1]),
            [-128, 0]
        );
        assert_eq!(
            scatter_1d(Reduction::Mul, true, &[16u8, 3], &[0, 1], &[16, 5]),
            [0, 15]
        );
        assert_eq!(
            scatter_1d(Reduction::Add, true, &[u64::MAX], &[0], &[2]),
            [1]
        );
        assert_eq!(
            scatter_1d(Reduction::Mul, true, &[i64::MIN], &[0], &[-1]),
            [i64::MIN]
        );
    }

    #[test]
    fn integer_max_min() {
        assert_eq!(
            scatter_1d(Reduction::Max, true, &[3i16, 3], &[0, 1, 0], &[5, -7, 4]),
            [5, 3]
        );
        assert_eq!(
            scatter_1d(Reduction::Min, true, &[3u32, 3], &[0, 1], &[5, 1]),
            [3, 1]
        );
    }

    #[test]
    fn use_init_val_false_starts_from_the_identity_and_keeps_untouched_elements() {
        let data = [100i32, 100, 100];
        assert_eq!(
            scatter_1d(Reduction::Add, false, &data, &[0, 0], &[1, 2]),
            [3, 100, 100]
        );
        assert_eq!(
            scatter_1d(Reduction::Mul, false, &data, &[2, 2], &[3, 4]),
            [100, 100, 12]
        );
        assert_eq!(
            scatter_1d(Reduction::Max, false, &data, &[1], &[-5]),
            [100, -5, 100]
        );
        assert_eq!(
            scatter_1d(Reduction::Min, false, &data, &[1], &[500]),
            [100, 500, 100]
        );
        let out = scatter_1d(Reduction::Max, false, &[5.0f32, 5.0], &[0], &[1.0]);
        assert_eq!(out, [1.0, 5.0]);
        // The float additive identity is -0.0, so -0.0 alone sums to -0.0.
        let out = scatter_1d(Reduction::Add, false, &[7.0f64], &[0], &[-0.0]);
        assert!(out[0] == 0.0 && out[0].is_sign_negative());
        // With use_init_val, +7 + -7 is +0.
        let out = scatter_1d(Reduction::Add, true, &[7.0f64], &[0], &[-7.0]);
        assert!(out[0] == 0.0 && out[0].is_sign_positive());
    }

    #[test]
    fn bool_reductions() {
        let data = [false, true];
        assert_eq!(
            scatter_1d(Reduction::Add, true, &data, &[0, 1], &[true, false]),
            [true, true]
        );
        assert_eq!(
            scatter_1d(Reduction::Mul, true, &data, &[0, 1], &[true, false]),
            [false, false]
        );
        assert_eq!(
            scatter_1d(Reduction::Max, true, &data, &[0, 1], &[true, false]),
            [true, true]
        );
        assert_eq!(
            scatter_1d(Reduction::Min, true, &data, &[0, 1], &[true, false]),
            [false, false]
        );
        // Identities: OR starts from false, AND from true.
        assert_eq!(
            scatter_1d(Reduction::Add, false, &[true, true], &[0], &[false]),
            [false, true]
        );
        assert_eq!(
            scatter_1d(Reduction::Min, false, &[false, false], &[0], &[true]),
            [true, false]
        );
    }

    #[test]
    fn complex_add_and_mul() {
        let c = |re, im| Complex64 { re, im };
        assert_eq!(
            scatter_1d(Reduction::Mul, true, &[c(1.0, 2.0)], &[0], &[c(3.0, 4.0)]),
            [c(-5.0, 10.0)]
        );
        assert_eq!(
            scatter_1d(
                Reduction::Add,
                true,
                &[c(1.0, 2.0)],
                &[0, 0],
                &[c(3.0, 4.0), c(0.5, 0.5)]
            ),
            [c(4.5, 6.5)]
        );
        let c = |re, im| Complex128 { re, im };
        assert_eq!(
            scatter_1d(Reduction::Mul, false, &[c(9.0, 9.0)], &[0], &[c(3.0, 4.0)]),
            [c(3.0, 4.0)]
        );
        let e = run(
            &scatter(0, Reduction::Max, true),
            &t(&[1], &[c(1.0, 0.0)]),
            &t(&[1], &[0i64]),
            Some(&t(&[1], &[c(1.0, 0.0)])),
        )
        .unwrap_err();
        assert!(matches!(e, Error::UnsupportedReduction { .. }), "{e}");
    }

    #[test]
    fn signed_zeros_in_max_and_min() {
        for (a, b) in [(-0.0f32, 0.0f32), (0.0, -0.0)] {
            let max = scatter_1d(Reduction::Max, true, &[a], &[0], &[b])[0];
            assert!(max == 0.0 && max.is_sign_positive(), "max({a}, {b})");
            let min = scatter_1d(Reduction::Min, true, &[a], &[0], &[b])[0];
            assert!(min == 0.0 && min.is_sign_negative(), "min({a}, {b})");
        }
        for (a, b) in [(-0.0f64, 0.0f64), (0.0, -0.0)] {
            assert!(scatter_1d(Reduction::Max, true, &[a], &[0], &[b])[0].is_sign_positive());
            assert!(scatter_1d(Reduction::Min, true, &[a], &[0], &[b])[0].is_sign_negative());
        }
        let (nz, pz) = (bf16::from_f32(-0.0), bf16::from_f32(0.0));
        assert!(scatter_1d(Reduction::Max, true, &[nz], &[0], &[pz])[0].is_sign_positive());
        assert!(scatter_1d(Reduction::Min, true, &[pz], &[0], &[nz])[0].is_sign_negative());
    }

    #[test]
    fn nan_wins_max_and_min() {
        for r in [Reduction::Max, Reduction::Min] {
            let out = scatter_1d(r, true, &[1.0f32, f32::NAN], &[0, 1], &[f32::NAN, 1.0]);
            assert!(out[0].is_nan() && out[1].is_nan(), "{r}");
            // NaN stays, whatever comes after it.
            let out = scatter_1d(r, true, &[1.0f64], &[0, 0], &[f64::NAN, 5.0]);
            assert!(out[0].is_nan(), "{r}");
            let out = scatter_1d(r, true, &[h(1.0)], &[0], &[f16::NAN]);
            assert!(out[0].is_nan(), "{r}");
            let out = scatter_1d(r, false, &[h(1.0)], &[0], &[f16::NAN]);
            assert!(out[0].is_nan(), "{r}");
        }
        // Infinities are ordinary values.
        let out = scatter_1d(Reduction::Max, false, &[0.0f32], &[0], &[f32::NEG_INFINITY]);
        assert_eq!(out, [f32::NEG_INFINITY]);
    }

    #[test]
    fn half_precision_rounds_every_combine() {
        // 2048 + 1 rounds back to 2048 in f16, eight times over.
        let out = scatter_1d(Reduction::Add, true, &[h(2048.0)], &[0; 8], &[h(1.0); 8]);
        assert_eq!(out, [h(2048.0)]);
        let b = bf16::from_f32;
        let out = scatter_1d(Reduction::Add, true, &[b(256.0)], &[0; 4], &[b(1.0); 4]);
        assert_eq!(out, [b(256.0)]);
        let out = scatter_1d(Reduction::Mul, true, &[h(1.5)], &[0], &[h(3.0)]);
        assert_eq!(out, [h(4.5)]);
        let out = scatter_1d(
            Reduction::Max,
            true,
            &[h(1.5), h(1.5)],
            &[0, 1],
            &[h(3.0), h(-3.0)],
        );
        assert_eq!(out, [h(3.0), h(1.5)]);
    }

    #[test]
    fn half_precision_mean_accumulates_in_f32() {
        // (2048 + 8 * 1) / 9 computed in f32, then rounded once to f16.
        let out = scatter_1d(Reduction::Mean, true, &[h(2048.0)], &[0; 8], &[h(1.0); 8]);
        assert_eq!(out, [h(2056.0 / 9.0)]);
        let out = scatter_1d(Reduction::Mean, false, &[h(5.0)], &[0; 8], &[h(2048.0); 8]);
        assert_eq!(out, [h(2048.0)]);
    }

    #[test]
    fn integer_mean_is_exact_and_floors() {
        // PyTorch and OpenVINO wrap in i8 and give 14; SPEC: 100.
        let out = scatter_1d(Reduction::Mean, false, &[0i8], &[0, 0, 0], &[100, 100, 100]);
        assert_eq!(out, [100]);
        // With use_init_val the data element counts: (1 + -2) / 2 = -0.5, floored to -1.
        let out = scatter_1d(Reduction::Mean, true, &[1i32, 9], &[0], &[-2]);
        assert_eq!(out, [-1, 9]);
        let out = scatter_1d(Reduction::Mean, false, &[0i32], &[0, 0], &[-1, -2]);
        assert_eq!(out, [-2]);
        let out = scatter_1d(Reduction::Mean, false, &[0u8], &[0, 0], &[255, 254]);
        assert_eq!(out, [254]);
        let out = scatter_1d(
            Reduction::Mean,
            true,
            &[u64::MAX],
            &[0, 0],
            &[u64::MAX, u64::MAX],
        );
        assert_eq!(out, [u64::MAX]);
        let out = scatter_1d(
            Reduction::Mean,
            false,
            &[0i64],
            &[0, 0],
            &[i64::MIN, i64::MIN],
        );
        assert_eq!(out, [i64::MIN]);
        let out = scatter_1d(
            Reduction::Mean,
            false,
            &[0i64],
            &[0, 0],
            &[i64::MIN, i64::MAX],
        );
        assert_eq!(out, [-1]);
    }

    #[test]
    fn float_mean() {
        let out = scatter_1d(Reduction::Mean, true, &[1.0f32, 7.0], &[0, 0], &[2.0, 3.0]);
        assert_eq!(out, [2.0, 7.0]);
        let out = scatter_1d(Reduction::Mean, false, &[1.0f64, 7.0], &[0, 0], &[2.0, 3.0]);
        assert_eq!(out, [2.5, 7.0]);
        let out = scatter_1d(Reduction::Mean, false, &[1.0f32], &[0], &[-0.0]);
        assert!(out[0] == 0.0 && out[0].is_sign_negative());
        let e = run(
            &scatter(0, Reduction::Mean, true),
            &t(&[1], &[true]),
            &t(&[0], &[0i64; 0]),
            Some(&t(&[0], &[true; 0])),
        )
        .unwrap_err();
        assert!(matches!(e, Error::UnsupportedReduction { .. }), "{e}");
    }
}
