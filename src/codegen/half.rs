//! f16/bf16 <-> f32 conversions in CLIF.
//!
//! Cranelift's `F16` type only supports loads, stores and constants, so half-precision
//! values are kept as their `I16` bit patterns and converted to and from `F32` with
//! integer bit operations (plus one float add/subtract/multiply where the FPU does the
//! rounding or normalization for us). Every emitter is branch-free: it appends a
//! straight-line sequence of integer/float ops and selects to the current block, with no
//! calls and no new blocks, so it can sit in the body of a hot per-element loop.
//!
//! For every non-NaN input the results are bit-identical to the `half` crate
//! (`half::f16::{from_bits(h).to_f32(), from_f32(x).to_bits()}` and the `bf16`
//! equivalents); NaN inputs give a NaN of the same sign (see each function).
//!
//! The emitters assume the default floating-point environment (round to nearest even,
//! no flush-to-zero / denormals-are-zero), which is what Cranelift-generated code runs
//! under in a normal Rust process.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::types::{F32, I16, I32};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

/// f16 bits (an `I16` value) -> the exactly equal `F32`.
///
/// Normals, subnormals, ±0 and ±inf convert exactly; a NaN becomes a quiet NaN with the
/// same sign (the payload is kept where the hardware keeps it).
///
/// Method: with `two_w = bits << 17` (sign shifted out, the 5-bit exponent at bits
/// 27..31, the mantissa at bits 17..26):
/// * normal/inf/NaN: `two_w >> 4` puts exponent and mantissa into the f32 fields; adding
///   224 to the exponent and multiplying by 2^-112 re-biases by 127 - 15 = 112 exactly
///   (exponent 31 becomes 255, so inf stays inf and NaN stays NaN, quieted by the
///   multiply; the multiply's NaN result is positive on x86-64, aarch64 and riscv64, as its
///   NaN operand is, so OR-ing the sign in afterwards gives the input's sign);
/// * zero/subnormal (exponent field 0): the mantissa `m` placed under the exponent of 0.5
///   is the float `0.5 + m * 2^-24`; subtracting 0.5 leaves exactly `m * 2^-24`;
/// * the two candidates are selected as integers (a float `select` lowers to a branch
///   on x86-64, an integer one to `cmov`) and the sign bit is OR-ed in.
///
/// 17 CLIF instructions plus constants; 20 x86-64 instructions (register moves included),
/// no branches.
pub(crate) fn f16_to_f32(b: &mut FunctionBuilder, bits: Value) -> Value {
    let flags = MemFlagsData::new();
    // Sign-extending puts the f16 sign bit into bit 31 directly.
    let s = b.ins().sextend(I32, bits);
    let sign = b.ins().band_imm_u(s, 0x8000_0000_i64);
    let two_w = b.ins().ishl_imm_u(s, 17_i64);

    // Normal numbers, infinities and NaNs.
    let n = b.ins().ushr_imm_u(two_w, 4_i64);
    let n = b.ins().iadd_imm_u(n, 0x7000_0000_i64); // +224 in the exponent field
    let n = b.ins().bitcast(F32, flags, n);
    let scale = b.ins().f32const(Ieee32::with_bits(0x0780_0000)); // 2^-112
    let normal = b.ins().fmul(n, scale);
    let normal = b.ins().bitcast(I32, flags, normal);

    // Zero and subnormals.
    let d = b.ins().ushr_imm_u(two_w, 17_i64);
    let d = b.ins().bor_imm_u(d, 0x3f00_0000_i64); // exponent of 0.5
    let d = b.ins().bitcast(F32, flags, d);
    let half = b.ins().f32const(Ieee32::with_bits(0x3f00_0000)); // 0.5
    let subnormal = b.ins().fsub(d, half);
    let subnormal = b.ins().bitcast(I32, flags, subnormal);

    let is_subnormal = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedLessThan, two_w, 1_i64 << 27);
    let magnitude = b.ins().select(is_subnormal, subnormal, normal);
    let r = b.ins().bor(magnitude, sign);
    b.ins().bitcast(F32, flags, r)
}

/// `F32` -> f16 bits (`I16`), rounding to nearest, ties to even.
///
/// Values at or above the f16 overflow threshold (65520 in magnitude) and ±inf give ±inf
/// (0x7c00 | sign); values in the f16 subnormal range are correctly rounded to
/// subnormals, ±0 or the smallest normal; a NaN gives the quiet NaN `0x7e00 | sign`.
///
/// Method, on the magnitude bits `a` of `x`:
/// * subnormal range (`a` below 2^-14): the float add `|x| + 0.5` lets the FPU round at
///   the ulp of 0.5, 2^-24, which is the f16 subnormal spacing, so the low mantissa bits of
///   the sum are the rounded f16 bits (up to 0x400, the smallest normal). The high bits of
///   the sum are 0x3f00, which the final truncation to 16 bits drops;
/// * normal range: `(a - (112 << 23) + 0xfff + lsb) >> 13` re-biases the exponent and
///   rounds half to even (`lsb` is the bit that becomes the f16 mantissa's lowest bit),
///   a mantissa carry correctly bumps the exponent; `umin` with 0x7c00 turns every overflow
///   (and ±inf) into inf;
/// * NaN is selected last, then the sign is OR-ed in.
///
/// 19 CLIF instructions plus constants; 21 x86-64 instructions, no branches.
pub(crate) fn f32_to_f16(b: &mut FunctionBuilder, x: Value) -> Value {
    let flags = MemFlagsData::new();
    let xi = b.ins().bitcast(I32, flags, x);
    let a = b.ins().band_imm_u(xi, 0x7fff_ffff_i64);

    // Zero and subnormal results (|x| < 2^-14).
    let af = b.ins().bitcast(F32, flags, a);
    let half = b.ins().f32const(Ieee32::with_bits(0x3f00_0000)); // 0.5
    let sum = b.ins().fadd(af, half);
    let subnormal = b.ins().bitcast(I32, flags, sum); // 0x3f00_0000 + rounded f16 bits
    let is_subnormal = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedLessThan, a, 0x3880_0000_i64);

    // Normal results, overflow and infinity.
    let lsb = b.ins().ushr_imm_u(a, 13_i64);
    let lsb = b.ins().band_imm_u(lsb, 1_i64);
    // (15 - 127) << 23 plus the rounding bias 0xfff, as a wrapping 32-bit constant.
    let n = b.ins().iadd_imm_u(a, 0xc800_0fff_i64);
    let n = b.ins().iadd(n, lsb);
    let n = b.ins().ushr_imm_u(n, 13_i64);
    let inf = b.ins().iconst(I32, 0x7c00_i64);
    let n = b.ins().umin(n, inf);

    let r = b.ins().select(is_subnormal, subnormal, n);
    let is_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    let qnan = b.ins().iconst(I32, 0x7e00_i64);
    let r = b.ins().select(is_nan, qnan, r);

    let sign = b.ins().ushr_imm_u(xi, 16_i64);
    let sign = b.ins().band_imm_u(sign, 0x8000_i64);
    let r = b.ins().bor(r, sign);
    b.ins().ireduce(I16, r)
}

/// bf16 bits (`I16`) -> `F32`, exactly: the 16 bits shifted into the top half of the f32
/// (so a NaN keeps its sign and payload, and a signalling NaN stays signalling).
///
/// 3 CLIF instructions.
pub(crate) fn bf16_to_f32(b: &mut FunctionBuilder, bits: Value) -> Value {
    let w = b.ins().uextend(I32, bits);
    let w = b.ins().ishl_imm_u(w, 16_i64);
    b.ins().bitcast(F32, MemFlagsData::new(), w)
}

/// `F32` -> bf16 bits (`I16`), rounding to nearest, ties to even.
///
/// Overflow rounds to ±inf, f32 subnormals round like any other value (no flushing); a NaN
/// gives the quiet NaN `(x_bits >> 16) | 0x0040` (sign and top payload bits kept).
///
/// Method: `(x_bits + 0x7fff + lsb) >> 16`, where `lsb` is bit 16 of `x_bits` (the bf16
/// mantissa's lowest bit), rounds half to even; a mantissa carry bumps the exponent,
/// up to inf. It cannot carry out of the sign bit for any non-NaN input.
///
/// 10 CLIF instructions plus constants; 10 x86-64 instructions, no branches.
pub(crate) fn f32_to_bf16(b: &mut FunctionBuilder, x: Value) -> Value {
    let xi = b.ins().bitcast(I32, MemFlagsData::new(), x);
    let hi = b.ins().ushr_imm_u(xi, 16_i64);
    let lsb = b.ins().band_imm_u(hi, 1_i64);
    let r = b.ins().iadd_imm_u(xi, 0x7fff_i64);
    let r = b.ins().iadd(r, lsb);
    let r = b.ins().ushr_imm_u(r, 16_i64);
    let qnan = b.ins().bor_imm_u(hi, 0x0040_i64);
    let is_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    let r = b.ins().select(is_nan, qnan, r);
    b.ins().ireduce(I16, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::test_jit::{compile, Jitted};
    use cranelift_codegen::ir::Type;
    use half::{bf16, f16};

    type Emitter = fn(&mut FunctionBuilder, Value) -> Value;
    type Conv = extern "C" fn(u32) -> u32;

    /// Compiles `extern "C" fn(u32) -> u32` that narrows/bitcasts its argument to `arg_ty`
    /// (I16 or F32), applies `emit`, and widens/bitcasts the result back to I32.
    /// A compiled conversion; `_code` keeps it mapped.
    struct Converter {
        _code: Jitted,
        f: Conv,
    }

    fn jit(emit: Emitter, arg_ty: Type) -> Converter {
        let code = compile(&[I32], &[I32], |b, args| {
            let p = args[0];
            let arg = if arg_ty == I16 {
                b.ins().ireduce(I16, p)
            } else {
                assert_eq!(arg_ty, F32);
                b.ins().bitcast(F32, MemFlagsData::new(), p)
            };
            let out = emit(b, arg);
            let ret = match b.func.dfg.value_type(out) {
                I16 => b.ins().uextend(I32, out),
                F32 => b.ins().bitcast(I32, MemFlagsData::new(), out),
                t => panic!("unexpected result type {t}"),
            };
            vec![ret]
        });
        // SAFETY: the entry of a function of signature (i32) -> i32 in the platform C
        // ABI, which matches `Conv`; `Converter` keeps the code alive beside it.
        let f = unsafe { std::mem::transmute::<*const u8, Conv>(code.entry) };
        Converter { _code: code, f }
    }

    /// Fixed-seed xorshift32.
    fn xorshift(n: usize) -> impl Iterator<Item = u32> {
        let mut s: u32 = 0x9e37_79b9;
        (0..n).map(move |_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        })
    }

    /// Collects failure messages and panics with the first few at the end.
    #[derive(Default)]
    struct Failures {
        count: usize,
        first: Vec<String>,
    }

    impl Failures {
        fn add(&mut self, msg: String) {
            self.count += 1;
            if self.first.len() < 20 {
                self.first.push(msg);
            }
        }

        fn finish(self, what: &str, checked: usize) {
            assert!(
                self.count == 0,
                "{what}: {} of {checked} inputs wrong, first ones:\n{}",
                self.count,
                self.first.join("\n")
            );
        }
    }

    /// Pushes `bits` and its neighbours ±1 ulp (in bit space), for both signs.
    fn push_around(v: &mut Vec<u32>, bits: u32) {
        for b in [bits.wrapping_sub(1), bits, bits.wrapping_add(1)] {
            v.push(b);
            v.push(b ^ 0x8000_0000);
        }
    }

    /// Special f32 inputs shared by both narrowing tests: zeros, infinities, NaNs of both
    /// kinds and signs, f32 extremes.
    fn specials() -> Vec<u32> {
        let mut v = Vec::new();
        for bits in [
            0x0000_0000, // +0
            0x0000_0001, // smallest f32 subnormal
            0x007f_ffff, // largest f32 subnormal
            0x0080_0000, // smallest f32 normal
            0x3f80_0000, // 1.0
            0x7f7f_ffff, // f32::MAX
            0x7f80_0000, // inf
            0x7f80_0001, // signalling NaN, payload only in the lowest bit
            0x7f80_2000, // signalling NaN
            0x7fbf_ffff, // signalling NaN, full payload
            0x7fc0_0000, // quiet NaN
            0x7fc0_0001, // quiet NaN with payload
            0x7fff_ffff, // quiet NaN, full payload
        ] {
            push_around(&mut v, bits);
        }
        v
    }

    #[test]
    fn f16_to_f32_all_patterns() {
        let j = jit(f16_to_f32, I16);
        let mut fails = Failures::default();
        for h in 0..=u16::MAX {
            let got = (j.f)(u32::from(h));
            let want = f16::from_bits(h).to_f32();
            if want.is_nan() {
                let ok = f32::from_bits(got).is_nan()
                    && (got >> 31) == u32::from(h >> 15)
                    && got & 0x0040_0000 != 0;
                if !ok {
                    fails.add(format!(
                        "{h:#06x}: got {got:#010x}, want a quiet NaN of the same sign"
                    ));
                }
            } else if got != want.to_bits() {
                fails.add(format!(
                    "{h:#06x}: got {got:#010x}, want {:#010x}",
                    want.to_bits()
                ));
            }
        }
        fails.finish("f16_to_f32", 1 << 16);
    }

    #[test]
    fn bf16_to_f32_all_patterns() {
        let j = jit(bf16_to_f32, I16);
        let mut fails = Failures::default();
        for h in 0..=u16::MAX {
            let got = (j.f)(u32::from(h));
            let want = bf16::from_bits(h).to_f32();
            let exact = u32::from(h) << 16;
            if got != exact || (!want.is_nan() && got != want.to_bits()) {
                fails.add(format!("{h:#06x}: got {got:#010x}, want {exact:#010x}"));
            }
        }
        fails.finish("bf16_to_f32", 1 << 16);
    }

    /// Checks the f32 -> f16 conversion of every input against the `half` crate.
    fn check_f32_to_f16(j: &Converter, inputs: impl IntoIterator<Item = u32>, what: &str) {
        let mut fails = Failures::default();
        let mut checked = 0;
        for x in inputs {
            checked += 1;
            let got = (j.f)(x);
            let xf = f32::from_bits(x);
            let want = if xf.is_nan() {
                0x7e00 | ((x >> 16) & 0x8000)
            } else {
                u32::from(f16::from_f32(xf).to_bits())
            };
            if got != want {
                fails.add(format!(
                    "{x:#010x} ({xf:e}): got {got:#06x}, want {want:#06x}"
                ));
            }
        }
        fails.finish(what, checked);
    }

    /// Checks the f32 -> bf16 conversion of every input against the `half` crate.
    fn check_f32_to_bf16(j: &Converter, inputs: impl IntoIterator<Item = u32>, what: &str) {
        let mut fails = Failures::default();
        let mut checked = 0;
        for x in inputs {
            checked += 1;
            let got = (j.f)(x);
            let xf = f32::from_bits(x);
            let want = if xf.is_nan() {
                (x >> 16) | 0x0040
            } else {
                u32::from(bf16::from_f32(xf).to_bits())
            };
            if got != want {
                fails.add(format!(
                    "{x:#010x} ({xf:e}): got {got:#06x}, want {want:#06x}"
                ));
            }
        }
        fails.finish(what, checked);
    }

    #[test]
    fn f32_to_f16_edges() {
        let j = jit(f32_to_f16, F32);
        let mut v = specials();
        // The f32 image of every f16 (NaNs included), ±1 ulp.
        for h in 0..=u16::MAX {
            push_around(&mut v, f16::from_bits(h).to_f32().to_bits());
        }
        // Every exact midpoint between neighbouring non-negative finite f16 values, the one
        // between f16::MAX and 2^16 (the overflow threshold 65520), ±1 ulp, both signs.
        for h in 0..0x7c00_u16 {
            let lo = f64::from(f16::from_bits(h).to_f32());
            let hi = if h == 0x7bff {
                65536.0
            } else {
                f64::from(f16::from_bits(h + 1).to_f32())
            };
            let mid = (lo + hi) / 2.0;
            let m = mid as f32;
            assert_eq!(
                f64::from(m),
                mid,
                "midpoint after {h:#06x} not exact in f32"
            );
            push_around(&mut v, m.to_bits());
        }
        // Thresholds, spelled out (f32 bit patterns).
        for bits in [
            0x477f_e000, // 65504 = f16::MAX
            0x477f_f000, // 65520: overflow threshold (tie between f16::MAX and 2^16)
            0x4780_0000, // 65536 = 2^16
            0x3880_0000, // 2^-14, smallest f16 normal
            0x387f_e000, // 2^-14 - 2^-25: tie between largest subnormal and smallest normal
            0x387f_c000, // 2^-14 - 2^-24, largest f16 subnormal
            0x3380_0000, // 2^-24, smallest f16 subnormal
            0x3300_0000, // 2^-25: underflow tie (rounds to 0)
            0x33c0_0000, // 1.5 * 2^-24: tie, rounds up to 2 * 2^-24
        ] {
            push_around(&mut v, bits);
        }
        check_f32_to_f16(&j, v, "f32_to_f16 edges");
    }

    #[test]
    fn f32_to_f16_random() {
        let j = jit(f32_to_f16, F32);
        check_f32_to_f16(&j, xorshift(1 << 22), "f32_to_f16 random");
    }

    #[test]
    fn f32_to_bf16_edges() {
        let j = jit(f32_to_bf16, F32);
        let mut v = specials();
        for h in 0..=u16::MAX {
            let bits = u32::from(h) << 16;
            // The f32 image of every bf16 (NaNs included), ±1 ulp.
            push_around(&mut v, bits);
            // The exact midpoint between `h` and the next bf16 pattern (for 0x7f7f: the
            // overflow threshold between bf16::MAX and 2^128), ±1 ulp.
            if h & 0x7fff < 0x7f80 {
                push_around(&mut v, bits | 0x8000);
            }
        }
        check_f32_to_bf16(&j, v, "f32_to_bf16 edges");
    }

    #[test]
    fn f32_to_bf16_random() {
        let j = jit(f32_to_bf16, F32);
        check_f32_to_bf16(&j, xorshift(1 << 22), "f32_to_bf16 random");
    }
}
