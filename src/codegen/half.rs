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
//! [`widen_halves`] and [`narrow_halves`] convert eight elements at once in 16-byte vector
//! lanes for whole-row combines, by the same methods and so with the same bits as the
//! scalar emitters (which the tests check for every input of the widening), so that a row's
//! vector part and its tail, and the variants that run a row one way or the other, agree.
//!
//! The emitters assume the default floating-point environment (round to nearest even,
//! no flush-to-zero / denormals-are-zero), which is what Cranelift-generated code runs
//! under in a normal Rust process.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::types::{F32, F32X4, I16, I32, I32X4};
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use scatterjit_ir::DType;

use super::combine::splat_constant;

/// f16 bits (an `I16` value, or an `I32` holding them sign-extended) -> the exactly equal
/// `F32`.
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
    // Sign-extending puts the f16 sign bit into bit 31 directly; an `I32` comes
    // sign-extended already (`sload16`).
    let s = match b.func.dfg.value_type(bits) {
        I32 => bits,
        _ => b.ins().sextend(I32, bits),
    };
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

/// [`f16_to_f32`]'s method run on the host: the same integer steps and the same float
/// multiply and subtract, so on the machine that runs the JIT code the same bits for every
/// input, NaN payloads included. It fills the table that JIT code decodes scalar f16
/// elements through (`crate::jit`'s `f16_table`).
pub(crate) fn f16_to_f32_bits(h: u16) -> u32 {
    let s = h as i16 as i32 as u32;
    let sign = s & 0x8000_0000;
    let two_w = s << 17;
    let n = (two_w >> 4).wrapping_add(0x7000_0000);
    let normal = (f32::from_bits(n) * f32::from_bits(0x0780_0000)).to_bits();
    let d = (two_w >> 17) | 0x3f00_0000;
    let subnormal = (f32::from_bits(d) - 0.5).to_bits();
    let magnitude = match two_w < 1 << 27 {
        true => subnormal,
        false => normal,
    };
    magnitude | sign
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

/// bf16 bits (`I16`, or an `I32` holding them zero-extended) -> `F32`, exactly: the 16
/// bits shifted into the top half of the f32
/// (so a NaN keeps its sign and payload, and a signalling NaN stays signalling).
///
/// 3 CLIF instructions.
pub(crate) fn bf16_to_f32(b: &mut FunctionBuilder, bits: Value) -> Value {
    // An `I32` comes zero-extended already (`uload16`).
    let w = match b.func.dfg.value_type(bits) {
        I32 => bits,
        _ => b.ins().uextend(I32, bits),
    };
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

/// For f16 and bf16, whether bf16 (the vector emitters' `brain`); `None` for other dtypes.
pub(crate) fn brain_of(dtype: DType) -> Option<bool> {
    match dtype {
        DType::F16 => Some(false),
        DType::BF16 => Some(true),
        _ => None,
    }
}

/// A vector of four I32 lanes, each `value` (see [`splat_constant`]).
fn lanes(b: &mut FunctionBuilder, value: u32) -> Value {
    splat_constant(b, I32X4, u64::from(value))
}

/// Reinterprets the 16 bytes of `v` as `ty` (lanes of equal size).
fn reinterpret(b: &mut FunctionBuilder, ty: Type, v: Value) -> Value {
    b.ins().bitcast(
        ty,
        MemFlagsData::new().with_endianness(Endianness::Little),
        v,
    )
}

/// Eight f16 (or, with `brain`, bf16) elements as `I16X8` bits -> two `F32X4` (lanes 0-3,
/// then 4-7), each lane bit-identical to [`f16_to_f32`] (or [`bf16_to_f32`]) of its
/// element, so that a row combined with vectors gives the bits of one combined element
/// by element.
///
/// f16 follows [`f16_to_f32`]'s method on each lane's magnitude `m` (15 bits, zero
/// extended, so that signed lane compares, which every vector unit has, are exact):
/// `(m << 13) + (224 << 23)` times 2^-112 for normals, infinities and NaNs, `m` under the
/// exponent of 0.5 minus 0.5 for zeros and subnormals (`m < 0x400`), the sign OR-ed in.
pub(crate) fn widen_halves(b: &mut FunctionBuilder, brain: bool, bits: Value) -> [Value; 2] {
    let words = [b.ins().uwiden_low(bits), b.ins().uwiden_high(bits)];
    words.map(|w| {
        if brain {
            let w = b.ins().ishl_imm_u(w, 16_i64);
            return reinterpret(b, F32X4, w);
        }
        let magnitude_mask = lanes(b, 0x7fff);
        let m = b.ins().band(w, magnitude_mask);
        let sign_mask = lanes(b, 0x8000);
        let sign = b.ins().band(w, sign_mask);
        let sign = b.ins().ishl_imm_u(sign, 16_i64);

        let n = b.ins().ishl_imm_u(m, 13_i64);
        let rebias = lanes(b, 0x7000_0000);
        let n = b.ins().iadd(n, rebias);
        let n = reinterpret(b, F32X4, n);
        let scale = lanes(b, 0x0780_0000); // 2^-112
        let scale = reinterpret(b, F32X4, scale);
        let normal = b.ins().fmul(n, scale);
        let normal = reinterpret(b, I32X4, normal);

        let half_bits = lanes(b, 0x3f00_0000); // 0.5
        let d = b.ins().bor(m, half_bits);
        let d = reinterpret(b, F32X4, d);
        let half = reinterpret(b, F32X4, half_bits);
        let subnormal = b.ins().fsub(d, half);
        let subnormal = reinterpret(b, I32X4, subnormal);

        let smallest_normal = lanes(b, 0x400);
        let is_subnormal = b.ins().icmp(IntCC::SignedLessThan, m, smallest_normal);
        let magnitude = b.ins().bitselect(is_subnormal, subnormal, normal);
        let r = b.ins().bor(magnitude, sign);
        reinterpret(b, F32X4, r)
    })
}

/// Two `F32X4` (lanes 0-3, then 4-7) -> eight f16 (or, with `brain`, bf16) elements as
/// `I16X8` bits, each bit-identical to [`f32_to_f16`] (or [`f32_to_bf16`]) of its lane, by
/// the same method. Every lane ends in `[0, 0xffff]`, which the narrowing (saturating
/// from signed lanes) keeps exactly; lane compares are signed where both sides are below
/// 2^31.
pub(crate) fn narrow_halves(b: &mut FunctionBuilder, brain: bool, halves: [Value; 2]) -> Value {
    let [lo, hi] = halves.map(|x| {
        let xi = reinterpret(b, I32X4, x);
        let is_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
        if brain {
            let high = b.ins().ushr_imm_u(xi, 16_i64);
            let r = shift_rounding_to_even(b, xi, 16, 0x7fff);
            let quiet = lanes(b, 0x0040);
            let qnan = b.ins().bor(high, quiet);
            return b.ins().bitselect(is_nan, qnan, r);
        }
        let magnitude_mask = lanes(b, 0x7fff_ffff);
        let a = b.ins().band(xi, magnitude_mask);

        let af = reinterpret(b, F32X4, a);
        let half_bits = lanes(b, 0x3f00_0000); // 0.5
        let half = reinterpret(b, F32X4, half_bits);
        let sum = b.ins().fadd(af, half);
        let sum = reinterpret(b, I32X4, sum);
        let low_bits = lanes(b, 0xffff);
        let subnormal = b.ins().band(sum, low_bits);
        let smallest_normal = lanes(b, 0x3880_0000);
        let is_subnormal = b.ins().icmp(IntCC::SignedLessThan, a, smallest_normal);

        // (15 - 127) << 23 folded into the rounding bias 0xfff, as in `f32_to_f16`.
        let n = shift_rounding_to_even(b, a, 13, 0xc800_0fff);
        let inf = lanes(b, 0x7c00);
        let n = b.ins().smin(n, inf);

        let r = b.ins().bitselect(is_subnormal, subnormal, n);
        let qnan = lanes(b, 0x7e00);
        let r = b.ins().bitselect(is_nan, qnan, r);
        let sign = b.ins().ushr_imm_u(xi, 16_i64);
        let sign_mask = lanes(b, 0x8000);
        let sign = b.ins().band(sign, sign_mask);
        b.ins().bor(r, sign)
    });
    b.ins().unarrow(lo, hi)
}

/// `(v + bias + lsb) >> shift` in each I32 lane, `lsb` the bit that becomes the result's
/// lowest: with `bias` ending in `(1 << (shift - 1)) - 1`, a right shift rounding half to
/// even (a carry out of the mantissa bumps the exponent).
fn shift_rounding_to_even(b: &mut FunctionBuilder, v: Value, shift: i64, bias: u32) -> Value {
    let lsb = b.ins().ushr_imm_u(v, shift);
    let one = lanes(b, 1);
    let lsb = b.ins().band(lsb, one);
    let bias = lanes(b, bias);
    let r = b.ins().iadd(v, bias);
    let r = b.ins().iadd(r, lsb);
    b.ins().ushr_imm_u(r, shift)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::test_jit::{compile, Jitted};
    use cranelift_codegen::ir::types::{I16X8, I64};
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
            let arg = match arg_ty {
                I16 => b.ins().ireduce(I16, p),
                // Bits widened as `sload16` / `uload16` widen them.
                I32 => p,
                _ => {
                    assert_eq!(arg_ty, F32);
                    b.ins().bitcast(F32, MemFlagsData::new(), p)
                }
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

    /// The vector conversions, eight elements a call: `fn(from: *const u8, to: *mut u8)`
    /// reads eight halves (or 32 bytes of f32) and writes 32 bytes of f32 (or eight halves).
    struct VectorConverter {
        _code: Jitted,
        f: extern "C" fn(*const u8, *mut u8),
        widens: bool,
    }

    fn jit_vector(widens: bool, brain: bool) -> VectorConverter {
        let flags = MemFlagsData::new();
        let code = compile(&[I64, I64], &[], |b, args| {
            let (from, to) = (args[0], args[1]);
            if widens {
                let bits = b.ins().load(I16X8, flags, from, 0);
                let [lo, hi] = widen_halves(b, brain, bits);
                b.ins().store(flags, lo, to, 0);
                b.ins().store(flags, hi, to, 16);
            } else {
                let lo = b.ins().load(F32X4, flags, from, 0);
                let hi = b.ins().load(F32X4, flags, from, 16);
                let bits = narrow_halves(b, brain, [lo, hi]);
                b.ins().store(flags, bits, to, 0);
            }
            vec![]
        });
        // SAFETY: the entry of a function of signature (i64, i64) in the platform C ABI,
        // which matches the pointer pair; `VectorConverter` keeps the code alive beside it.
        let f = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(*const u8, *mut u8)>(code.entry)
        };
        VectorConverter {
            _code: code,
            f,
            widens,
        }
    }

    /// Checks that the vector conversion gives the scalar one's bits for every input, in
    /// every lane (each input is converted in the lane `position % 8`).
    fn vector_matches_scalar(
        scalar: &Converter,
        vector: &VectorConverter,
        inputs: &[u32],
        what: &str,
    ) {
        let mut fails = Failures::default();
        for chunk in inputs.chunks(8) {
            let mut lanes = [0u32; 8];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let got: Vec<u32> = if vector.widens {
                let from: Vec<u16> = lanes.iter().map(|&x| x as u16).collect();
                let mut to = [0u32; 8];
                (vector.f)(from.as_ptr().cast(), to.as_mut_ptr().cast());
                to.to_vec()
            } else {
                let mut to = [0u16; 8];
                (vector.f)(lanes.as_ptr().cast(), to.as_mut_ptr().cast());
                to.iter().map(|&h| u32::from(h)).collect()
            };
            for (&x, &got) in chunk.iter().zip(&got) {
                let want = (scalar.f)(x);
                if got != want {
                    fails.add(format!("{x:#010x}: got {got:#010x}, want {want:#010x}"));
                }
            }
        }
        fails.finish(what, inputs.len());
    }

    #[test]
    fn vector_widening_matches_scalar_on_all_patterns() {
        let every: Vec<u32> = (0..=u32::from(u16::MAX)).collect();
        let cases = [
            (false, f16_to_f32 as Emitter, "f16 x8 -> f32"),
            (true, bf16_to_f32, "bf16 x8 -> f32"),
        ];
        for (brain, emit, what) in cases {
            vector_matches_scalar(&jit(emit, I16), &jit_vector(true, brain), &every, what);
        }
    }

    #[test]
    fn vector_narrowing_matches_scalar() {
        let mut inputs = specials();
        for h in 0..=u16::MAX {
            // Every f16 and bf16 value, and the midpoints after them, ±1 ulp.
            push_around(&mut inputs, f16::from_bits(h).to_f32().to_bits());
            push_around(&mut inputs, u32::from(h) << 16 | 0x8000);
            push_around(
                &mut inputs,
                (f16::from_bits(h).to_f32().to_bits()) + (1 << 12),
            );
        }
        inputs.extend(xorshift(1 << 20));
        let cases = [
            (false, f32_to_f16 as Emitter, "f32 -> f16 x8"),
            (true, f32_to_bf16, "f32 -> bf16 x8"),
        ];
        for (brain, emit, what) in cases {
            vector_matches_scalar(&jit(emit, F32), &jit_vector(false, brain), &inputs, what);
        }
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
    fn host_decoding_matches_the_emitter_bit_for_bit() {
        let j = jit(f16_to_f32, I16);
        for h in 0..=u16::MAX {
            let (got, want) = (f16_to_f32_bits(h), (j.f)(u32::from(h)));
            assert_eq!(
                got, want,
                "{h:#06x}: host {got:#010x}, emitter {want:#010x}"
            );
        }
    }

    #[test]
    fn widened_bits_convert_as_narrow_ones() {
        let (f16_narrow, f16_wide) = (jit(f16_to_f32, I16), jit(f16_to_f32, I32));
        let (bf16_narrow, bf16_wide) = (jit(bf16_to_f32, I16), jit(bf16_to_f32, I32));
        for h in 0..=u16::MAX {
            let signed = h as i16 as i32 as u32;
            assert_eq!(
                (f16_wide.f)(signed),
                (f16_narrow.f)(u32::from(h)),
                "{h:#06x}"
            );
            let zero = u32::from(h);
            assert_eq!((bf16_wide.f)(zero), (bf16_narrow.f)(zero), "{h:#06x}");
        }
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
