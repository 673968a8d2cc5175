//! Floor division of `mean`'s integer sums by a positive count, in CLIF from 64-bit
//! operations only: Cranelift has no 128-bit division on x86-64, AArch64 or RISC-V, and
//! i64 and u64 means sum in i128.
//!
//! Both emitters are branch-free (unsigned divides, multiplies, shifts and selects) and
//! need a divisor `n >= 1` (a zero divisor traps, as `udiv` does). Signs use
//! `floor(s / n) = !(!s / n)` for `s < 0`: `!s = -s - 1` is not negative, and its quotient
//! rounds toward zero, so the outer `!` rounds toward negative infinity.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

/// `floor(s / n)` for an I64 `s` and an I64 `n >= 1`.
pub(crate) fn floor_div_i64(b: &mut FunctionBuilder, s: Value, n: Value) -> Value {
    let mask = b.ins().sshr_imm_s(s, 63);
    let magnitude = b.ins().bxor(s, mask);
    let q = b.ins().udiv(magnitude, n);
    b.ins().bxor(q, mask)
}

/// `floor(s / n)` for the i128 `s = hi:lo` (two I64 halves) and an I64 `n >= 1`; the
/// quotient's halves `(lo, hi)`.
pub(crate) fn floor_div_i128(
    b: &mut FunctionBuilder,
    lo: Value,
    hi: Value,
    n: Value,
) -> (Value, Value) {
    let mask = b.ins().sshr_imm_s(hi, 63);
    let hi = b.ins().bxor(hi, mask);
    let lo = b.ins().bxor(lo, mask);
    // Long division by 64-bit digits: the high digit's remainder is below n, so the low
    // digit's quotient fits 64 bits.
    let q_hi = b.ins().udiv(hi, n);
    let taken = b.ins().imul(q_hi, n);
    let r = b.ins().isub(hi, taken);
    let q_lo = divlu(b, r, lo, n);
    (b.ins().bxor(q_lo, mask), b.ins().bxor(q_hi, mask))
}

/// The quotient of the unsigned 128-bit `u1:u0` by the 64-bit `v`, for `u1 < v` (so it
/// fits 64 bits): Hacker's Delight's `divlu` (Warren, 2nd ed., figure 9-3), dividing the
/// normalized dividend by 32-bit digits with two 64-by-64 divides. Each digit's estimate
/// is at most two too large; the two correction steps are unrolled into selects.
fn divlu(b: &mut FunctionBuilder, u1: Value, u0: Value, v: Value) -> Value {
    const DIGIT: i64 = 1 << 32;
    const LOW: i64 = DIGIT - 1;
    // Normalize: the divisor's top bit set, the dividend shifted along.
    let s = b.ins().clz(v);
    let v = b.ins().ishl(v, s);
    let vn1 = b.ins().ushr_imm_s(v, 32);
    let vn0 = b.ins().band_imm_s(v, LOW);
    // u0 >> (64 - s) is u0 >> 0 for s = 0 (shift amounts are taken mod 64): mask it off.
    let neg_s = b.ins().ineg(s);
    let keep = b.ins().sshr_imm_s(neg_s, 63);
    let sixty_four = b.ins().iconst(types::I64, 64);
    let back = b.ins().isub(sixty_four, s);
    let carried = b.ins().ushr(u0, back);
    let carried = b.ins().band(carried, keep);
    let high = b.ins().ishl(u1, s);
    let un32 = b.ins().bor(high, carried);
    let un10 = b.ins().ishl(u0, s);
    let un1 = b.ins().ushr_imm_s(un10, 32);
    let un0 = b.ins().band_imm_s(un10, LOW);

    // One 32-bit digit of the quotient: estimate from the divisor's high digit, correct.
    let digit = |b: &mut FunctionBuilder, top: Value, next: Value| {
        let mut q = b.ins().udiv(top, vn1);
        let taken = b.ins().imul(q, vn1);
        let mut rhat = b.ins().isub(top, taken);
        for _ in 0..2 {
            let big = b
                .ins()
                .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, q, DIGIT);
            let product = b.ins().imul(q, vn0);
            let shifted = b.ins().ishl_imm_s(rhat, 32);
            let bound = b.ins().iadd(shifted, next);
            let over = b.ins().icmp(IntCC::UnsignedGreaterThan, product, bound);
            // Only while rhat < 2^32; then `rhat << 32` did not wrap.
            let small = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, rhat, DIGIT);
            let wrong = b.ins().bor(big, over);
            let fix = b.ins().band(small, wrong);
            let fix = b.ins().uextend(types::I64, fix);
            q = b.ins().isub(q, fix);
            let step = b.ins().imul(fix, vn1);
            rhat = b.ins().iadd(rhat, step);
        }
        q
    };
    let q1 = digit(b, un32, un1);
    // The partial remainder; its true value is below v, so wrapping arithmetic gives it.
    let shifted = b.ins().ishl_imm_s(un32, 32);
    let with_next = b.ins().iadd(shifted, un1);
    let taken = b.ins().imul(q1, v);
    let un21 = b.ins().isub(with_next, taken);
    let q0 = digit(b, un21, un0);
    let high = b.ins().ishl_imm_s(q1, 32);
    b.ins().bor(high, q0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::test_jit::{compile, Jitted};

    /// `(lo, hi, n, out) -> ()`: writes the quotient's low and high halves to `out`.
    type Div128 = extern "C" fn(u64, u64, i64, *mut u64);
    /// `(s, n) -> floor(s / n)`.
    type Div64 = extern "C" fn(i64, i64) -> i64;

    fn div128() -> (Jitted, Div128) {
        let code = compile(&[types::I64; 4], &[], |b, args| {
            let (lo, hi) = floor_div_i128(b, args[0], args[1], args[2]);
            let flags = cranelift_codegen::ir::MemFlagsData::trusted();
            b.ins().store(flags, lo, args[3], 0);
            b.ins().store(flags, hi, args[3], 8);
            vec![]
        });
        // SAFETY: the entry of a function of signature (i64, i64, i64, i64) -> () in the
        // platform C ABI, which matches `Div128` on a 64-bit host; the caller keeps `code`
        // (and so the code) alive while it calls.
        let f = unsafe { std::mem::transmute::<*const u8, Div128>(code.entry) };
        (code, f)
    }

    fn div64() -> (Jitted, Div64) {
        let code = compile(&[types::I64; 2], &[types::I64], |b, args| {
            vec![floor_div_i64(b, args[0], args[1])]
        });
        // SAFETY: as in `div128`, for the signature (i64, i64) -> i64.
        let f = unsafe { std::mem::transmute::<*const u8, Div64>(code.entry) };
        (code, f)
    }

    /// Fixed-seed SplitMix64.
    fn splitmix(n: usize) -> impl Iterator<Item = u64> {
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..n).map(move |_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
    }

    /// Sums of i64 or u64 values reach `[i64::MIN * n, u64::MAX * n]`; the extremes of
    /// i128 are there too.
    fn sums() -> Vec<i128> {
        let mut sums = vec![
            0,
            1,
            -1,
            2,
            -2,
            3,
            -3,
            i64::MAX as i128,
            i64::MIN as i128,
            u64::MAX as i128,
            -(u64::MAX as i128),
            i64::MIN as i128 * i64::MAX as i128,
            i64::MIN as i128 * (1 << 40),
            u64::MAX as i128 * (1 << 40),
            u64::MAX as i128 * (i64::MAX as i128),
            i128::MAX,
            i128::MIN,
            i128::MIN + 1,
            i128::MAX - 1,
            1 << 64,
            -(1 << 64),
            (1 << 64) - 1,
            1 << 96,
            -(1 << 96) - 1,
        ];
        let random: Vec<u64> = splitmix(400).collect();
        for pair in random.chunks(2) {
            let wide = ((pair[0] as u128) << 64 | pair[1] as u128) as i128;
            sums.push(wide);
            // Small magnitudes, and mixed ones.
            sums.push(pair[0] as i64 as i128);
            sums.push(wide >> (pair[1] % 127));
        }
        sums
    }

    fn counts() -> Vec<i64> {
        let mut counts = vec![
            1,
            2,
            3,
            4,
            5,
            7,
            10,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            (1 << 32) - 1,
            1 << 32,
            (1 << 32) + 1,
            (1 << 33) + 3,
            1 << 62,
            i64::MAX - 1,
            i64::MAX,
        ];
        for r in splitmix(60) {
            counts.push((r >> (r % 63)).max(1) as i64 & i64::MAX);
            counts.push((r % 1000 + 1) as i64);
        }
        counts.retain(|&n| n >= 1);
        counts
    }

    #[test]
    fn i128_floor_division_matches_rust() {
        let (_code, div) = div128();
        for &n in &counts() {
            for &s in &sums() {
                let mut out = [0u64; 2];
                div(s as u64, (s >> 64) as u64, n, out.as_mut_ptr());
                let got = (out[1] as u128) << 64 | out[0] as u128;
                let want = s.div_euclid(n as i128);
                assert_eq!(got as i128, want, "floor({s} / {n})");
            }
        }
    }

    #[test]
    fn i64_floor_division_matches_rust() {
        let (_code, div) = div64();
        for &n in &counts() {
            for &s in &sums() {
                let s = s as i64;
                assert_eq!(div(s, n), s.div_euclid(n), "floor({s} / {n})");
            }
            for s in [i64::MIN, i64::MIN + 1, i64::MAX, -1, 0, 1] {
                assert_eq!(div(s, n), s.div_euclid(n), "floor({s} / {n})");
            }
        }
    }
}
