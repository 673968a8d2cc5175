//! The host steps of `mean` around its compiled apply pass: start every sum from data (or
//! zero) before, divide the sums of targeted elements after. Both are `O(output)` passes,
//! dispatched on the dtype once per call.

use half::{bf16, f16};
use rayon::prelude::*;
use scatterjit_ir::{checked_numel, DType, Element, OpKind, Reduction};

use crate::alloc;
use crate::error::Buffer;
use crate::error::{Error, Result};
use crate::tensor::TensorViewMut;

/// Elements per parallel block of the host steps on a row-major output: enough to pay
/// for a task, and every block's sums and counts line up with its elements.
const BLOCK: usize = 1 << 14;

/// Per-element sums and counts, contiguous in the output's row-major order, laid out as the
/// compiled apply pass reads them (accumulators little-endian, counts i64).
pub(crate) struct MeanScratch {
    pub acc: Vec<u8>,
    pub count: Vec<i64>,
}

/// A value of one of the accumulator types, stored little-endian as the JIT stores it.
trait Accumulator: Copy {
    const WIDTH: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, out: &mut [u8]);
}

macro_rules! accumulators {
    ($($t:ty),*) => {$(
        impl Accumulator for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$t>()];
                raw.copy_from_slice(&bytes[..Self::WIDTH]);
                <$t>::from_le_bytes(raw)
            }
            fn write(self, out: &mut [u8]) {
                out[..Self::WIDTH].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

accumulators!(f32, f64, i64, i128);

/// A dtype `mean` applies to, with its accumulator.
trait MeanElement: Element {
    type Acc: Accumulator;
    /// The sum an element starts from without `use_init_val` (-0.0: IEEE addition's identity).
    const START: Self::Acc;
    fn widen(self) -> Self::Acc;
    /// `sum / n`, rounded as SPEC.md says (floats once, integers toward negative infinity).
    fn finish(sum: Self::Acc, n: i64) -> Self;
}

macro_rules! float_means {
    ($($t:ty => $acc:ty, $widen:expr, $narrow:expr;)*) => {$(
        impl MeanElement for $t {
            type Acc = $acc;
            const START: $acc = -0.0;
            fn widen(self) -> $acc {
                $widen(self)
            }
            fn finish(sum: $acc, n: i64) -> Self {
                $narrow(sum / n as $acc)
            }
        }
    )*};
}

float_means! {
    f16 => f32, f16::to_f32, f16::from_f32;
    bf16 => f32, bf16::to_f32, bf16::from_f32;
    f32 => f32, std::convert::identity, std::convert::identity;
    f64 => f64, std::convert::identity, std::convert::identity;
}

macro_rules! int_means {
    ($($t:ty => $acc:ty;)*) => {$(
        impl MeanElement for $t {
            type Acc = $acc;
            const START: $acc = 0;
            fn widen(self) -> $acc {
                self as $acc
            }
            fn finish(sum: $acc, n: i64) -> Self {
                // The floor of a mean of values of this type is again in its range.
                sum.div_euclid(n as $acc) as $t
            }
        }
    )*};
}

int_means! {
    i8 => i64; i16 => i64; i32 => i64; u8 => i64; u16 => i64; u32 => i64;
    i64 => i128; u64 => i128;
}

/// Runs `$body` with `$t` bound to the Rust type of a dtype `mean` supports.
macro_rules! with_mean_type {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::F16 => {
                type $t = f16;
                $body
            }
            DType::BF16 => {
                type $t = bf16;
                $body
            }
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::I8 => {
                type $t = i8;
                $body
            }
            DType::I16 => {
                type $t = i16;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
            DType::U16 => {
                type $t = u16;
                $body
            }
            DType::U32 => {
                type $t = u32;
                $body
            }
            DType::U64 => {
                type $t = u64;
                $body
            }
            other => unreachable!("keys reject mean for {other}"),
        }
    };
}

impl MeanScratch {
    /// Checks the scratch an output of `dtype` and `shape` needs against the cap
    /// ([`crate::Limits`]) without allocating it.
    pub(crate) fn check(op: OpKind, dtype: DType, shape: &[usize]) -> Result<()> {
        alloc::check(op, Buffer::Scratch, Self::bytes(dtype, shape))
    }

    /// Bytes of one sum: the accumulator's size.
    fn sum_size(dtype: DType) -> usize {
        let acc = Reduction::mean_accumulator(dtype);
        acc.expect("keys admit mean only with an accumulator")
            .size()
    }

    /// Sums and counts: a sum and an i64 count per element.
    fn bytes(dtype: DType, shape: &[usize]) -> u128 {
        let per_element = Self::sum_size(dtype) + std::mem::size_of::<i64>();
        // A validated shape's element count fits usize (a zero dim makes it 0).
        checked_numel(shape).map_or(u128::MAX, |n| n as u128 * per_element as u128)
    }

    /// Zeroed sums and counts for an output of `dtype` and `shape`, within the scratch cap;
    /// allocated before the call writes anything, so running out of memory leaves the
    /// caller's tensors as they were.
    pub(crate) fn alloc(op: OpKind, dtype: DType, shape: &[usize]) -> Result<MeanScratch> {
        Self::check(op, dtype, shape)?;
        let n = checked_numel(shape)?;
        let len = n
            .checked_mul(Self::sum_size(dtype))
            .ok_or(Error::OutOfMemory {
                op,
                buffer: Buffer::Scratch,
                bytes: Self::bytes(dtype, shape),
            })?;
        Ok(MeanScratch {
            acc: alloc::zeroed(op, Buffer::Scratch, len)?,
            count: alloc::zeroed(op, Buffer::Scratch, n)?,
        })
    }

    /// Sums start from the output's current values (`use_init_val`) or zero; counts from 0.
    pub(crate) fn init(&mut self, out: &mut TensorViewMut<'_>, use_init_val: bool) {
        let dtype = out.dtype();
        if let Some(bytes) = out.dense_bytes_mut() {
            with_mean_type!(dtype, T => {
                let width = <<T as MeanElement>::Acc as Accumulator>::WIDTH;
                let size = std::mem::size_of::<T>();
                bytes
                    .par_chunks(BLOCK * size)
                    .zip(self.acc.par_chunks_mut(BLOCK * width))
                    .for_each(|(from, sums)| {
                        for (e, sum) in from.chunks_exact(size).zip(sums.chunks_exact_mut(width)) {
                            let start = if use_init_val { T::read_le(e).widen() } else { <T as MeanElement>::START };
                            start.write(sum);
                        }
                    });
            });
            return;
        }
        with_mean_type!(dtype, T => {
            let width = <<T as MeanElement>::Acc as Accumulator>::WIDTH;
            debug_assert_eq!(self.acc.len(), self.count.len() * width);
            let mut chunks = self.acc.chunks_exact_mut(width);
            out.for_each_element(|bytes| {
                let start = if use_init_val { T::read_le(bytes).widen() } else { <T as MeanElement>::START };
                start.write(chunks.next().expect("one sum per element"));
            });
        });
    }
}

/// Writes `sum / (count + use_init_val)` into every element that received an update.
pub(crate) fn finish(out: &mut TensorViewMut<'_>, scratch: &MeanScratch, use_init_val: bool) {
    let extra = i64::from(use_init_val);
    let dtype = out.dtype();
    if let Some(bytes) = out.dense_bytes_mut() {
        with_mean_type!(dtype, T => {
            let width = <<T as MeanElement>::Acc as Accumulator>::WIDTH;
            let size = std::mem::size_of::<T>();
            bytes
                .par_chunks_mut(BLOCK * size)
                .zip(scratch.acc.par_chunks(BLOCK * width))
                .zip(scratch.count.par_chunks(BLOCK))
                .for_each(|((to, sums), counts)| {
                    let each = to.chunks_exact_mut(size).zip(sums.chunks_exact(width)).zip(counts);
                    for ((e, sum), &count) in each {
                        if count > 0 {
                            let sum = <<T as MeanElement>::Acc as Accumulator>::read(sum);
                            T::finish(sum, count + extra).write_le(e);
                        }
                    }
                });
        });
        return;
    }
    with_mean_type!(dtype, T => {
        let width = <<T as MeanElement>::Acc as Accumulator>::WIDTH;
        let mut sums = scratch.acc.chunks_exact(width);
        let mut counts = scratch.count.iter();
        out.for_each_element(|bytes| {
            let sum = <<T as MeanElement>::Acc as Accumulator>::read(sums.next().expect("one sum per element"));
            let count = *counts.next().expect("one count per element");
            if count > 0 {
                T::finish(sum, count + extra).write_le(bytes);
            }
        });
    });
}
