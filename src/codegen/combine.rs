//! Element values in CLIF: typed loads and stores, the one `match` from
//! (reduction, dtype class) to Cranelift instructions, and `mean`'s steps in its
//! accumulator type (widen, accumulate, divide).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use scatterjit_ir::{DType, DTypeClass, MeanAccumulator, Reduction};

use super::{divide, half};

/// One element as Cranelift values: a scalar, or a complex number's two parts.
/// f16/bf16 elements are held as F32 (converted on load, rounded on store).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Val {
    /// A scalar.
    Scalar(Value),
    /// Real and imaginary parts.
    Complex(Value, Value),
}

impl Val {
    pub(crate) fn scalar(self) -> Value {
        match self {
            Val::Scalar(v) => v,
            Val::Complex(..) => unreachable!("complex value where a scalar is expected"),
        }
    }

    fn parts(self) -> (Value, Value) {
        match self {
            Val::Complex(re, im) => (re, im),
            Val::Scalar(_) => unreachable!("scalar value where a complex is expected"),
        }
    }
}

/// Flags of element accesses: caller memory is valid (checked before the call) but not
/// necessarily aligned.
pub(crate) fn data_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// The integer type that moves `size` bytes unchanged.
pub(crate) fn raw_type(size: usize) -> Type {
    match size {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        8 => types::I64,
        16 => types::I128,
        _ => unreachable!("no element has {size} bytes"),
    }
}

/// The bits [`store`] writes for the real float `x` of `dtype` (f16 and bf16 rounded to
/// nearest even, f32 and f64 as they are), as the integer type of the element's size;
/// `None` for the other dtypes.
pub(crate) fn real_float_bits(b: &mut FunctionBuilder, dtype: DType, x: Value) -> Option<Value> {
    let flags = MemFlagsData::new().with_endianness(Endianness::Little);
    match dtype {
        DType::F16 => Some(half::f32_to_f16(b, x)),
        DType::BF16 => Some(half::f32_to_bf16(b, x)),
        DType::F32 | DType::F64 => Some(b.ins().bitcast(raw_type(dtype.size()), flags, x)),
        _ => None,
    }
}

/// A vector of type `ty` whose every lane holds the low bits of `value`: a constant in the
/// function's pool, which x86-64 loads with one instruction where a splat of a register
/// takes three.
pub(crate) fn splat_constant(b: &mut FunctionBuilder, ty: Type, value: u64) -> Value {
    let lane = ty.lane_bits() as usize / 8;
    let bytes: Vec<u8> = (0..ty.lane_count())
        .flat_map(|_| value.to_le_bytes()[..lane].to_vec())
        .collect();
    let constant = b.func.dfg.constants.insert(bytes.into());
    b.ins().vconst(ty, constant)
}

/// The Cranelift type of one scalar part of `dtype` as it is computed with.
fn part_type(dtype: DType) -> Type {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 | DType::Complex64 => types::F32,
        DType::F64 | DType::Complex128 => types::F64,
        _ => raw_type(dtype.size()),
    }
}

/// The accumulator's Cranelift type.
pub(crate) fn acc_type(acc: MeanAccumulator) -> Type {
    match acc {
        MeanAccumulator::F32 => types::F32,
        MeanAccumulator::F64 => types::F64,
        MeanAccumulator::I64 => types::I64,
        MeanAccumulator::I128 => types::I128,
    }
}

/// Loads the element at `ptr` for arithmetic.
pub(crate) fn load(b: &mut FunctionBuilder, dtype: DType, ptr: Value) -> Val {
    let f = data_flags();
    match dtype {
        // Widening loads: a 16-bit load and a separate extension took two moves on x86-64.
        DType::F16 => {
            let bits = b.ins().sload16(types::I32, f, ptr, 0);
            Val::Scalar(half::f16_to_f32(b, bits))
        }
        DType::BF16 => {
            let bits = b.ins().uload16(types::I32, f, ptr, 0);
            Val::Scalar(half::bf16_to_f32(b, bits))
        }
        DType::Complex64 | DType::Complex128 => {
            let ty = part_type(dtype);
            let re = b.ins().load(ty, f, ptr, 0);
            let im = b.ins().load(ty, f, ptr, ty.bytes() as i32);
            Val::Complex(re, im)
        }
        _ => Val::Scalar(b.ins().load(part_type(dtype), f, ptr, 0)),
    }
}

/// Stores an arithmetic value of `dtype` at `ptr` (f16/bf16 rounded to nearest even).
pub(crate) fn store(b: &mut FunctionBuilder, dtype: DType, v: Val, ptr: Value) {
    let f = data_flags();
    match (dtype, v) {
        (DType::F16 | DType::BF16, Val::Scalar(x)) => {
            let bits = real_float_bits(b, dtype, x).expect("16-bit floats are real floats");
            b.ins().store(f, bits, ptr, 0);
        }
        (_, Val::Complex(re, im)) => {
            let offset = part_type(dtype).bytes() as i32;
            b.ins().store(f, re, ptr, 0);
            b.ins().store(f, im, ptr, offset);
        }
        (_, Val::Scalar(x)) => {
            b.ins().store(f, x, ptr, 0);
        }
    }
}

/// `reduction(old, new)` for one element of `dtype`: the table of SPEC.md "Reductions".
pub(crate) fn reduce(
    b: &mut FunctionBuilder,
    reduction: Reduction,
    dtype: DType,
    old: Val,
    new: Val,
) -> Val {
    use DTypeClass as C;
    use Reduction as R;
    let class = dtype.class();
    if class == C::Complex {
        let (a, c) = (old.parts(), new.parts());
        return match reduction {
            R::Add => Val::Complex(fadd(b, a.0, c.0), fadd(b, a.1, c.1)),
            R::Mul => {
                // (a.re c.re - a.im c.im) + (a.re c.im + a.im c.re) i, no fused multiply-add.
                let rr = fmul(b, a.0, c.0);
                let ii = fmul(b, a.1, c.1);
                let ri = fmul(b, a.0, c.1);
                let ir = fmul(b, a.1, c.0);
                Val::Complex(b.ins().fsub(rr, ii), fadd(b, ri, ir))
            }
            _ => unreachable!("keys reject {reduction} for complex"),
        };
    }
    let (x, y) = (old.scalar(), new.scalar());
    Val::Scalar(match (reduction, class) {
        (R::Add, C::Float) => fadd(b, x, y),
        (R::Mul, C::Float) => fmul(b, x, y),
        (R::Max, C::Float) => maximum_or_minimum(b, true, x, y),
        (R::Min, C::Float) => maximum_or_minimum(b, false, x, y),
        (R::Add, C::SignedInt | C::UnsignedInt) => b.ins().iadd(x, y),
        (R::Mul, C::SignedInt | C::UnsignedInt) => b.ins().imul(x, y),
        (R::Max, C::SignedInt) => b.ins().smax(x, y),
        (R::Min, C::SignedInt) => b.ins().smin(x, y),
        (R::Max, C::UnsignedInt) => b.ins().umax(x, y),
        (R::Min, C::UnsignedInt) => b.ins().umin(x, y),
        (R::Add | R::Max, C::Bool) => b.ins().bor(x, y),
        (R::Mul | R::Min, C::Bool) => b.ins().band(x, y),
        _ => unreachable!("no combine for {reduction} on {dtype}"),
    })
}

/// IEEE 754-2019 maximum (or minimum) of `x` and `y` (F32, F64 or vectors of them): a NaN
/// in either gives the positive quiet NaN, whatever its payload, so that the bits of a
/// result do not depend on which loop ran it (and so on the thread count); -0 < +0.
///
/// Built from two compare-selects, `y < x ? x : y` and `x < y ? y : x` (for the minimum,
/// `x < y ? x : y` and `y < x ? y : x`), which x86-64 lowers to one `maxps` (`minps`)
/// each. They differ only where the operands are zeros of opposite signs (each picks its
/// second operand), where their bitwise and (or) is +0 (-0), or where one is a NaN, which
/// the last select replaces: five instructions a vector, where Cranelift's `fmax` and a
/// canonicalization take ten.
fn maximum_or_minimum(b: &mut FunctionBuilder, maximum: bool, x: Value, y: Value) -> Value {
    let ty = b.func.dfg.value_type(x);
    let pick = |b: &mut FunctionBuilder, first: Value, second: Value| {
        let (lo, hi) = if maximum {
            (second, first)
        } else {
            (first, second)
        };
        let first_wins = b.ins().fcmp(FloatCC::LessThan, lo, hi);
        select_lanes(b, ty, first_wins, first, second)
    };
    let xy = pick(b, x, y);
    let yx = pick(b, y, x);
    let both = if maximum {
        b.ins().band(xy, yx)
    } else {
        b.ins().bor(xy, yx)
    };
    let nan = if ty.lane_type() == types::F32 {
        b.ins().f32const(Ieee32::with_bits(f32::NAN.to_bits()))
    } else {
        b.ins().f64const(Ieee64::with_bits(f64::NAN.to_bits()))
    };
    let nan = if ty.is_vector() {
        b.ins().splat(ty, nan)
    } else {
        nan
    };
    let either_nan = b.ins().fcmp(FloatCC::Unordered, x, y);
    select_lanes(b, ty, either_nan, nan, both)
}

/// The maximum (or minimum) of f16 (or, with `brain`, bf16) values as [`reduce`] takes it
/// (a NaN in either gives the positive quiet NaN; -0 < +0), computed on their bits (`I16`,
/// or `I16X8` lanes) without converting them: the result is always one of the two
/// operands or the quiet NaN, which converting to f32 and back leaves unchanged, so the
/// bits are those of the float path. Each value's order key is its bits as a signed
/// integer with the magnitude flipped where the sign is set, so that integer order is
/// float order; the key of a key is the value again.
pub(crate) fn half_extremum(
    b: &mut FunctionBuilder,
    maximum: bool,
    brain: bool,
    x: Value,
    y: Value,
) -> Value {
    let vector = b.func.dfg.value_type(x).is_vector();
    // Scalars in I32 lanes (sign-extended), which every back end compares and selects.
    let (x, y) = match vector {
        true => (x, y),
        false => (
            b.ins().sextend(types::I32, x),
            b.ins().sextend(types::I32, y),
        ),
    };
    let ty = b.func.dfg.value_type(x);
    let constant = |b: &mut FunctionBuilder, v: u16| match vector {
        true => splat_constant(b, ty, u64::from(v)),
        false => b.ins().iconst(ty, i64::from(v)),
    };
    let magnitude = constant(b, 0x7fff);
    let key = |b: &mut FunctionBuilder, v: Value| {
        let sign = b.ins().sshr_imm_u(v, i64::from(ty.lane_bits() - 1));
        let flip = b.ins().band(sign, magnitude);
        b.ins().bxor(v, flip)
    };
    let (kx, ky) = (key(b, x), key(b, y));
    let picked = match vector {
        // Lanes: one max (or min) instruction, and the key of the key.
        true => {
            let k = match maximum {
                true => b.ins().smax(kx, ky),
                false => b.ins().smin(kx, ky),
            };
            key(b, k)
        }
        // Scalars: the operand whose key wins (equal keys are equal bits), a compare and
        // a select where the key of the key took three more instructions.
        false => {
            let order = match maximum {
                true => IntCC::SignedGreaterThan,
                false => IntCC::SignedLessThan,
            };
            let y_wins = b.ins().icmp(order, ky, kx);
            b.ins().select(y_wins, y, x)
        }
    };
    let infinity = constant(b, if brain { 0x7f80 } else { 0x7c00 });
    let is_nan = |b: &mut FunctionBuilder, v: Value| {
        let m = b.ins().band(v, magnitude);
        b.ins().icmp(IntCC::SignedGreaterThan, m, infinity)
    };
    let (nan_x, nan_y) = (is_nan(b, x), is_nan(b, y));
    let either_nan = b.ins().bor(nan_x, nan_y);
    let quiet_nan = constant(b, if brain { 0x7fc0 } else { 0x7e00 });
    match vector {
        true => b.ins().bitselect(either_nan, quiet_nan, picked),
        false => {
            let r = b.ins().select(either_nan, quiet_nan, picked);
            b.ins().ireduce(types::I16, r)
        }
    }
}

/// For f16 and bf16 `max` and `min`, which [`half_extremum`] computes on bits: whether it
/// is the maximum, and whether bf16.
pub(crate) fn half_extremum_of(reduction: Reduction, dtype: DType) -> Option<(bool, bool)> {
    let brain = half::brain_of(dtype)?;
    match reduction {
        Reduction::Max => Some((true, brain)),
        Reduction::Min => Some((false, brain)),
        _ => None,
    }
}

/// `x + y` in floats (scalars or vectors), with `x` kept as the instruction's first
/// operand: where both are NaNs, x86-64 returns the first operand's NaN, and Cranelift
/// swaps the operands to fold `x` when it is a load. Whether it can fold depends on the
/// loop around it, so the NaN's bits would depend on the variant that ran (see
/// [`first_operand`]).
fn fadd(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    let x = first_operand(b, x);
    b.ins().fadd(x, y)
}

/// `x * y` in floats, `x` kept first (see [`fadd`]).
fn fmul(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    let x = first_operand(b, x);
    b.ins().fmul(x, y)
}

/// `x`, as a value no instruction can fold as a load: a bitcast to its own type, which
/// emits nothing (a register stays the register).
fn first_operand(b: &mut FunctionBuilder, x: Value) -> Value {
    let ty = b.func.dfg.value_type(x);
    b.ins().bitcast(
        ty,
        MemFlagsData::new().with_endianness(Endianness::Little),
        x,
    )
}

/// `mask ? a : b` per lane of `ty`, `mask` an `fcmp` of that type.
fn select_lanes(b: &mut FunctionBuilder, ty: Type, mask: Value, a: Value, c: Value) -> Value {
    if ty.is_vector() {
        // The lane mask as the float vector type; the lanes keep their size, so the byte
        // order only has to be stated.
        let flags = MemFlagsData::new().with_endianness(Endianness::Little);
        let mask = b.ins().bitcast(ty, flags, mask);
        b.ins().bitselect(mask, a, c)
    } else {
        b.ins().select(mask, a, c)
    }
}

/// Converts a loaded element to `mean`'s accumulator type.
pub(crate) fn widen(b: &mut FunctionBuilder, dtype: DType, acc: MeanAccumulator, v: Val) -> Value {
    let x = v.scalar();
    let to = acc_type(acc);
    match dtype.class() {
        DTypeClass::Float => x,
        DTypeClass::SignedInt => b.ins().sextend(to, x),
        DTypeClass::UnsignedInt => b.ins().uextend(to, x),
        _ => unreachable!("keys reject mean for {dtype}"),
    }
}

/// `acc + wide` in the accumulator type.
pub(crate) fn accumulate(
    b: &mut FunctionBuilder,
    acc: MeanAccumulator,
    sum: Value,
    wide: Value,
) -> Value {
    match acc {
        MeanAccumulator::F32 | MeanAccumulator::F64 => fadd(b, sum, wide),
        MeanAccumulator::I64 | MeanAccumulator::I128 => b.ins().iadd(sum, wide),
    }
}

/// `sum / n` for `mean`'s end, `sum` in the accumulator type and `n >= 1` an I64, rounded
/// once to `dtype` (stored with [`store`]): floats divide by `n` converted to the sum's
/// type, integers round toward negative infinity (the mean of values of the type is again
/// in its range, so the quotient's low bits are the result).
pub(crate) fn finish(
    b: &mut FunctionBuilder,
    dtype: DType,
    acc: MeanAccumulator,
    sum: Value,
    n: Value,
) -> Val {
    let narrow = |b: &mut FunctionBuilder, q: Value| match dtype.size() {
        8 => q,
        size => b.ins().ireduce(raw_type(size), q),
    };
    Val::Scalar(match acc {
        MeanAccumulator::F32 | MeanAccumulator::F64 => {
            let n = b.ins().fcvt_from_sint(acc_type(acc), n);
            b.ins().fdiv(sum, n)
        }
        MeanAccumulator::I64 => {
            let q = divide::floor_div_i64(b, sum, n);
            narrow(b, q)
        }
        MeanAccumulator::I128 => {
            let (lo, hi) = b.ins().isplit(sum);
            let (q, _) = divide::floor_div_i128(b, lo, hi, n);
            narrow(b, q)
        }
    })
}
