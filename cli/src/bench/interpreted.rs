//! The interpreted baseline: the kernel a framework without a JIT writes. The element type,
//! index type and reduction are dispatched once per call to a monomorphized loop (as
//! PyTorch's and ONNX Runtime's CPU kernels do with templates); rank, shape, axis and
//! strides stay run-time values, walked by an odometer over all dims but the last, with the
//! last dim as the inner loop. Gather copies whole inner blocks with `copy_from_slice`.
//!
//! It is a fair opponent, not the oracle: it covers the dtypes and index types the suite
//! uses most (f16, bf16, f32, f64, i32, i64 data; i32, i64 indices) on contiguous tensors,
//! and reports anything else as an error. Every result is checked against the reference
//! interpreter before it is timed.

use half::{bf16, f16};
use scatterjit::ir::{
    row_major_strides, unravel, DType, Element, Error as IrError, Op, OpKind, Operand, Reduction,
    Tensor,
};

use scatterjit::{Error, Result};

/// A plain numeric element type: every bit pattern is a valid value (unlike `bool`'s).
trait Plain: Element {}

/// An element type of the baseline: arithmetic as SPEC.md defines it.
trait Value: Plain {
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    /// The running sum of `mean`, in SPEC's accumulator type.
    type Sum: Copy;
    fn start_sum(self) -> Self::Sum;
    fn zero_sum() -> Self::Sum;
    fn add_sum(sum: Self::Sum, value: Self) -> Self::Sum;
    fn mean(sum: Self::Sum, count: u64) -> Self;
}

/// IEEE 754-2019 maximum and minimum: NaN wins, and +0 is above -0.
macro_rules! float_value {
    ($t:ty, $sum:ty, $to:expr, $from:expr) => {
        impl Plain for $t {}
        impl Value for $t {
            type Sum = $sum;
            fn add(self, other: Self) -> Self {
                $from($to(self) + $to(other))
            }
            fn mul(self, other: Self) -> Self {
                $from($to(self) * $to(other))
            }
            fn max(self, other: Self) -> Self {
                let (a, b) = ($to(self), $to(other));
                if a.is_nan() || b.is_nan() {
                    $from(<$sum>::NAN)
                } else if a == b {
                    if a.is_sign_negative() {
                        other
                    } else {
                        self
                    }
                } else if a > b {
                    self
                } else {
                    other
                }
            }
            fn min(self, other: Self) -> Self {
                let (a, b) = ($to(self), $to(other));
                if a.is_nan() || b.is_nan() {
                    $from(<$sum>::NAN)
                } else if a == b {
                    if a.is_sign_negative() {
                        self
                    } else {
                        other
                    }
                } else if a < b {
                    self
                } else {
                    other
                }
            }
            fn start_sum(self) -> $sum {
                $to(self)
            }
            fn zero_sum() -> $sum {
                -0.0
            }
            fn add_sum(sum: $sum, value: Self) -> $sum {
                sum + $to(value)
            }
            fn mean(sum: $sum, count: u64) -> Self {
                $from(sum / count as $sum)
            }
        }
    };
}

float_value!(f32, f32, std::convert::identity, std::convert::identity);
float_value!(f64, f64, std::convert::identity, std::convert::identity);
float_value!(f16, f32, f16::to_f32, f16::from_f32);
float_value!(bf16, f32, bf16::to_f32, bf16::from_f32);

macro_rules! int_value {
    ($t:ty, $sum:ty) => {
        impl Plain for $t {}
        impl Value for $t {
            type Sum = $sum;
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            fn max(self, other: Self) -> Self {
                Ord::max(self, other)
            }
            fn min(self, other: Self) -> Self {
                Ord::min(self, other)
            }
            fn start_sum(self) -> $sum {
                self as $sum
            }
            fn zero_sum() -> $sum {
                0
            }
            fn add_sum(sum: $sum, value: Self) -> $sum {
                sum + value as $sum
            }
            fn mean(sum: $sum, count: u64) -> Self {
                sum.div_euclid(count as $sum) as $t
            }
        }
    };
}

int_value!(i32, i64);
int_value!(i64, i128);

/// An index type of the baseline.
trait IndexValue: Plain {
    fn widen(self) -> i64;
}

impl IndexValue for i32 {
    fn widen(self) -> i64 {
        self.into()
    }
}

impl IndexValue for i64 {
    fn widen(self) -> i64 {
        self
    }
}

/// A reduction as a type, so each one gets its own loop.
trait Combine<T: Value> {
    fn combine(old: T, new: T) -> T;
}

macro_rules! combines {
    ($($name:ident => |$o:ident, $n:ident| $e:expr;)*) => {$(
        struct $name;
        impl<T: Value> Combine<T> for $name {
            #[inline(always)]
            fn combine($o: T, $n: T) -> T {
                $e
            }
        }
    )*};
}

combines! {
    Assign => |_old, new| new;
    Add => |old, new| old.add(new);
    Mul => |old, new| old.mul(new);
    Max => |old, new| old.max(new);
    Min => |old, new| old.min(new);
}

/// Runs `op` into `out` (a contiguous tensor of the output's dtype and shape). Inputs must
/// be contiguous; `updates` is required for ScatterElements.
pub fn run_into(
    op: &Op,
    out: &mut Tensor,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
) -> Result<()> {
    let validated = op.validate(data.meta(), indices.meta(), updates.map(Tensor::meta))?;
    if out.dtype() != data.dtype() || out.shape() != validated.out_shape.as_slice() {
        return Err(Error::Invalid(IrError::InvalidView {
            tensor: Operand::Output,
            reason: format!(
                "expected {} {:?}, got {} {:?}",
                data.dtype(),
                validated.out_shape,
                out.dtype(),
                out.shape()
            ),
        }));
    }
    let axis = validated.key.axis();
    let unsupported = |dtype| {
        Err(Error::Invalid(IrError::UnsupportedDType {
            op: op.kind(),
            dtype,
        }))
    };
    macro_rules! by_index {
        ($t:ty) => {
            match indices.dtype() {
                DType::I32 => typed::<$t, i32>(op, axis, out, data, indices, updates),
                DType::I64 => typed::<$t, i64>(op, axis, out, data, indices, updates),
                other => unsupported(other),
            }
        };
    }
    match data.dtype() {
        DType::F16 => by_index!(f16),
        DType::BF16 => by_index!(bf16),
        DType::F32 => by_index!(f32),
        DType::F64 => by_index!(f64),
        DType::I32 => by_index!(i32),
        DType::I64 => by_index!(i64),
        other => unsupported(other),
    }
}

/// The error for storage that is not aligned for its element type (the allocator gives
/// every tensor of this crate 16-byte alignment; this guards the assumption).
fn misaligned(dtype: DType) -> Error {
    Error::Invalid(IrError::InvalidView {
        tensor: Operand::Data,
        reason: format!("storage is not aligned for {dtype}"),
    })
}

/// Views `t`'s bytes as a slice of `T`.
fn cast<T: Plain>(t: &Tensor) -> Result<&[T]> {
    let bytes = t.bytes();
    // SAFETY: `Plain` is implemented only for numeric types (and `half`'s
    // `repr(transparent)` u16 wrappers), for which every bit pattern is valid; the dtype
    // was checked against `T::DTYPE` by the dispatch, so the length is a multiple of
    // `size_of::<T>()`; `align_to` handles alignment and the assertion below rejects any
    // misaligned remainder.
    let (head, values, tail) = unsafe { bytes.align_to::<T>() };
    if head.is_empty() && tail.is_empty() {
        Ok(values)
    } else {
        Err(misaligned(T::DTYPE))
    }
}

/// Mutable [`cast`].
fn cast_mut<T: Plain>(t: &mut Tensor) -> Result<&mut [T]> {
    let bytes = t.bytes_mut();
    // SAFETY: as in `cast`; every bit pattern written back is a valid `T`.
    let (head, values, tail) = unsafe { bytes.align_to_mut::<T>() };
    if head.is_empty() && tail.is_empty() {
        Ok(values)
    } else {
        Err(misaligned(T::DTYPE))
    }
}

/// The monomorphized kernel; `op` was validated by the caller, `axis` is normalized.
fn typed<T: Value, I: IndexValue>(
    op: &Op,
    axis: usize,
    out: &mut Tensor,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
) -> Result<()> {
    debug_assert_eq!(data.dtype(), T::DTYPE);
    let (d, idx) = (cast::<T>(data)?, cast::<I>(indices)?);
    match *op {
        Op::ScatterElements {
            reduction,
            use_init_val,
            ..
        } => {
            let u = cast::<T>(updates.expect("validated: scatter has updates"))?;
            let o = cast_mut::<T>(out)?;
            o.copy_from_slice(d);
            let geometry = Geometry::new(data.shape(), indices.shape(), axis);
            geometry.check(op.kind(), idx)?;
            if reduction == Reduction::Mean {
                return scatter_mean(&geometry, o, idx, u, use_init_val);
            }
            if !use_init_val && reduction != Reduction::None {
                let identity = reduction
                    .identity_bytes(T::DTYPE)
                    .expect("validated: the reduction applies to the dtype");
                // SAFETY: `identity` holds exactly one little-endian `T` (its dtype's size),
                // and `T` is a plain numeric type, valid for every bit pattern.
                let identity: T = unsafe { std::ptr::read_unaligned(identity.as_ptr().cast()) };
                geometry.scatter::<T, I, Assign>(o, idx, &vec![identity; u.len()]);
            }
            match reduction {
                Reduction::None => geometry.scatter::<T, I, Assign>(o, idx, u),
                Reduction::Add => geometry.scatter::<T, I, Add>(o, idx, u),
                Reduction::Mul => geometry.scatter::<T, I, Mul>(o, idx, u),
                Reduction::Max => geometry.scatter::<T, I, Max>(o, idx, u),
                Reduction::Min => geometry.scatter::<T, I, Min>(o, idx, u),
                Reduction::Mean => unreachable!("handled above"),
            }
            Ok(())
        }
        Op::GatherElements { .. } => {
            let geometry = Geometry::new(data.shape(), indices.shape(), axis);
            geometry.check(op.kind(), idx)?;
            geometry.gather_elements(cast_mut::<T>(out)?, d, idx);
            Ok(())
        }
        Op::Gather { .. } => {
            let shape = data.shape();
            let size = shape[axis];
            for (flat, &i) in idx.iter().enumerate() {
                normalize(i.widen(), size).ok_or_else(|| {
                    bad_index(op.kind(), indices.shape(), flat, i.widen(), axis, size)
                })?;
            }
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            let o = cast_mut::<T>(out)?;
            let mut at = 0;
            for a in 0..outer {
                for &i in idx {
                    let k = normalize(i.widen(), size).expect("checked above");
                    let from = (a * size + k) * inner;
                    o[at..at + inner].copy_from_slice(&d[from..from + inner]);
                    at += inner;
                }
            }
            Ok(())
        }
    }
}

/// `k + s` for negative `k`; `None` outside `[0, s)`.
#[inline(always)]
fn normalize(k: i64, s: usize) -> Option<usize> {
    let k = if k < 0 { k.wrapping_add(s as i64) } else { k };
    (k >= 0 && (k as u64) < s as u64).then_some(k as usize)
}

fn bad_index(
    op: OpKind,
    shape: &[usize],
    flat: usize,
    index: i64,
    axis: usize,
    size: usize,
) -> Error {
    Error::Invalid(IrError::IndexOutOfBounds {
        op,
        index: index.into(),
        position: unravel(flat, shape),
        axis,
        size,
    })
}

/// The element-wise ops' walk: rows of the index tensor (all dims but the last), with the
/// offsets of the matching data element.
struct Geometry {
    index_shape: Vec<usize>,
    index_strides: Vec<usize>,
    data_strides: Vec<usize>,
    axis: usize,
    size: usize,
}

impl Geometry {
    fn new(data_shape: &[usize], index_shape: &[usize], axis: usize) -> Geometry {
        Geometry {
            index_shape: index_shape.to_vec(),
            index_strides: row_major_strides(index_shape),
            data_strides: row_major_strides(data_shape),
            axis,
            size: data_shape[axis],
        }
    }

    /// Every index in bounds, or the first bad one in row-major order.
    fn check<I: IndexValue>(&self, op: OpKind, idx: &[I]) -> Result<()> {
        match idx
            .iter()
            .position(|i| normalize(i.widen(), self.size).is_none())
        {
            None => Ok(()),
            Some(flat) => Err(bad_index(
                op,
                &self.index_shape,
                flat,
                idx[flat].widen(),
                self.axis,
                self.size,
            )),
        }
    }

    /// Calls `row(index_offset, data_offset_without_axis, len)` for every row of indices,
    /// in row-major order.
    fn rows(&self, mut row: impl FnMut(usize, usize, usize)) {
        let rank = self.index_shape.len();
        if self.index_shape.contains(&0) {
            return;
        }
        if rank == 0 {
            row(0, 0, 1);
            return;
        }
        let len = self.index_shape[rank - 1];
        let mut position = vec![0usize; rank - 1];
        loop {
            let mut index_at = 0;
            let mut data_at = 0;
            for (d, &p) in position.iter().enumerate() {
                index_at += p * self.index_strides[d];
                if d != self.axis {
                    data_at += p * self.data_strides[d];
                }
            }
            row(index_at, data_at, len);
            // Odometer step over the outer dims.
            let mut d = rank - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                position[d] += 1;
                if position[d] < self.index_shape[d] {
                    break;
                }
                position[d] = 0;
            }
        }
    }

    /// Calls `f(p, t)` for every position of indices in row-major order, with `p` its
    /// offset in indices and `t` the offset of `data[p[axis := normalize(indices[p])]]`.
    /// Indices are checked beforehand ([`Geometry::check`]).
    #[inline(always)]
    fn each<I: IndexValue>(&self, idx: &[I], mut f: impl FnMut(usize, usize)) {
        let rank = self.index_shape.len();
        let axis_stride = self.data_strides[self.axis];
        // The last dim is the axis (k replaces j) or a plain coordinate (stride 1).
        let step = usize::from(rank == 0 || self.axis != rank - 1);
        let size = self.size;
        self.rows(|index_at, data_at, len| {
            for j in 0..len {
                let k = normalize(idx[index_at + j].widen(), size).expect("checked");
                f(index_at + j, data_at + k * axis_stride + j * step);
            }
        });
    }

    /// `out[p[axis := k]] = C(out[..], updates[p])` in row-major order.
    fn scatter<T: Value, I: IndexValue, C: Combine<T>>(
        &self,
        out: &mut [T],
        idx: &[I],
        updates: &[T],
    ) {
        self.each(idx, |p, t| out[t] = C::combine(out[t], updates[p]));
    }

    /// `out[p] = data[p[axis := k]]`.
    fn gather_elements<T: Value, I: IndexValue>(&self, out: &mut [T], data: &[T], idx: &[I]) {
        self.each(idx, |p, t| out[p] = data[t]);
    }
}

/// `mean`: sums in SPEC's accumulator type and counts per output element, then one divide.
fn scatter_mean<T: Value, I: IndexValue>(
    geometry: &Geometry,
    out: &mut [T],
    idx: &[I],
    updates: &[T],
    use_init_val: bool,
) -> Result<()> {
    let mut sums: Vec<T::Sum> = out
        .iter()
        .map(|&v| {
            if use_init_val {
                v.start_sum()
            } else {
                T::zero_sum()
            }
        })
        .collect();
    let mut counts = vec![0u64; out.len()];
    geometry.each(idx, |p, t| {
        sums[t] = T::add_sum(sums[t], updates[p]);
        counts[t] += 1;
    });
    for ((o, &sum), &count) in out.iter_mut().zip(&sums).zip(&counts) {
        if count > 0 {
            *o = T::mean(sum, count + u64::from(use_init_val));
        }
    }
    Ok(())
}
