//! 16-byte vector combines of a whole row, where the machine has vectors and the combine a
//! vector form.

use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use scatterjit_ir::{Combine, DType, DTypeClass, Reduction, Source};

use super::Lowering;
use crate::codegen::combine::{self, data_flags, raw_type};
use crate::codegen::half;

impl Lowering<'_, '_> {
    /// Elements per 16-byte vector when the machine has vectors and this nest's combine has a
    /// vector form for its dtype: float add/mul/max/min (f32, f64; f16 and bf16 add and mul
    /// in f32 lanes, max and min on their bits), integer add and bool or/and (any width),
    /// integer max/min and mul up to 32 bits, and `mean`'s accumulate of floats (into f32
    /// or f64 sums).
    pub(super) fn vector_lanes(&self) -> Option<i64> {
        use DTypeClass as C;
        let dtype = self.key.dtype();
        let size = dtype.size() as i64;
        let class = dtype.class();
        let vectorizes = match self.nest.combine {
            Combine::Reduce(r) => match (r, class) {
                (_, C::Float) => r != Reduction::Mean,
                (Reduction::Add, C::SignedInt | C::UnsignedInt) => true,
                (
                    Reduction::Max | Reduction::Min | Reduction::Mul,
                    C::SignedInt | C::UnsignedInt,
                ) => size <= 4 && !(r == Reduction::Mul && size == 1),
                (_, C::Bool) => r != Reduction::Mean,
                _ => false,
            },
            Combine::Accumulate(_) => class == C::Float,
            Combine::Assign | Combine::Start(_) | Combine::Finish { .. } => false,
        };
        (self.machine.vectors && vectorizes && size <= 8).then_some(16 / size)
    }

    /// Whether this combine's vectors of f16 or bf16 are widened: their arithmetic (add, mul,
    /// `mean`'s sums) runs in two `F32X4` per `I16X8` (`Some(true)` for bf16); their max and
    /// min compare bits (`combine::half_extremum`) and stay `I16X8`.
    fn widened_halves(&self) -> Option<bool> {
        let dtype = self.key.dtype();
        let bitwise = match self.nest.combine {
            Combine::Reduce(r) => combine::half_extremum_of(r, dtype).is_some(),
            _ => false,
        };
        half::brain_of(dtype).filter(|_| !bitwise)
    }

    /// The type of 16 bytes of elements as [`Self::combine_vector`] loads them: float
    /// lanes for f32 and f64, integer lanes for the rest (f16 and bf16 bits included).
    fn vector_type(&self) -> Type {
        let dtype = self.key.dtype();
        let lanes = 16 / dtype.size() as u32;
        let scalar = match dtype {
            DType::F32 => types::F32,
            DType::F64 => types::F64,
            _ => raw_type(dtype.size()),
        };
        scalar.by(lanes).expect("16-byte vectors exist")
    }

    /// The source element at `at`, splat into a vector of its arithmetic type (f32 lanes
    /// for widened f16 and bf16, converted once).
    pub(super) fn splat_source(&mut self, at: Value) -> Value {
        let x = match self.widened_halves() {
            Some(_) => self.load_element(at).scalar(),
            None => {
                let lane = self.vector_type().lane_type();
                self.b.ins().load(lane, data_flags(), at, 0)
            }
        };
        let ty = self.b.func.dfg.value_type(x);
        let lanes = 16 / ty.bytes();
        self.b
            .ins()
            .splat(ty.by(lanes).expect("16-byte vectors exist"), x)
    }

    /// The 16 bytes at `ptr` in arithmetic vectors: one, or for widened f16 and bf16 the two
    /// `F32X4` of its eight elements.
    fn load_arithmetic(&mut self, ptr: Value) -> Vec<Value> {
        let ty = self.vector_type();
        let v = self.b.ins().load(ty, data_flags(), ptr, 0);
        match self.widened_halves() {
            Some(brain) => half::widen_halves(self.b, brain, v).to_vec(),
            None => vec![v],
        }
    }

    /// The vector form of [`Self::combine`] on 16 bytes of elements at `at` (indexed
    /// accesses already moved), the source read there or given as `splat`; `mean`'s
    /// per-element counts advance by one per element.
    pub(super) fn combine_vector(&mut self, at: &[Value], splat: Option<Value>) {
        let dtype = self.key.dtype();
        let lanes = 16 / dtype.size() as u32;
        let dest = self
            .nest
            .dest
            .as_ref()
            .expect("combines have a dest")
            .operand;
        let dest_ptr = at[self.access_of(dest)];
        let Some(Source::Read(src)) = &self.nest.source else {
            unreachable!("vector combines read their source")
        };
        // Widened halves are two vectors; a splat one holds the same value in both.
        let parts = 1 + usize::from(self.widened_halves().is_some());
        let new = match splat {
            Some(v) => vec![v; parts],
            None => {
                let src_ptr = at[self.access_of(src.operand)];
                self.load_arithmetic(src_ptr)
            }
        };
        match self.nest.combine {
            Combine::Reduce(r) => {
                let old = self.load_arithmetic(dest_ptr);
                let v: Vec<Value> = old
                    .into_iter()
                    .zip(new)
                    .map(|(old, new)| match combine::half_extremum_of(r, dtype) {
                        Some((maximum, brain)) => {
                            combine::half_extremum(self.b, maximum, brain, old, new)
                        }
                        None => {
                            let (old, new) = (combine::Val::Scalar(old), combine::Val::Scalar(new));
                            combine::reduce(self.b, r, dtype, old, new).scalar()
                        }
                    })
                    .collect();
                let v = match self.widened_halves() {
                    Some(brain) => half::narrow_halves(self.b, brain, [v[0], v[1]]),
                    None => v[0],
                };
                self.b.ins().store(data_flags(), v, dest_ptr, 0);
            }
            Combine::Accumulate(acc) => {
                // The sums: one vector per arithmetic vector of the source, in order.
                let scalar = combine::acc_type(acc);
                let sum_type = scalar
                    .by(16 / scalar.bytes())
                    .expect("16-byte vectors exist");
                for (part, new) in new.into_iter().enumerate() {
                    let offset = 16 * part as i32;
                    let sum = self.b.ins().load(sum_type, data_flags(), dest_ptr, offset);
                    let sum = combine::accumulate(self.b, acc, sum, new);
                    self.b.ins().store(data_flags(), sum, dest_ptr, offset);
                }
            }
            Combine::Assign | Combine::Start(_) | Combine::Finish { .. } => {
                unreachable!("copies and mean's ends are not vector combines")
            }
        }
        if let Some(count) = self
            .nest
            .count
            .as_ref()
            .filter(|_| self.count_per_row().is_none())
        {
            let count_ptr = at[self.access_of(count.operand)];
            let one = self.b.ins().iconst(types::I64, 1);
            let ones = self.b.ins().splat(types::I64X2, one);
            for pair in 0..(lanes / 2) as i32 {
                let c = self
                    .b
                    .ins()
                    .load(types::I64X2, data_flags(), count_ptr, pair * 16);
                let c = self.b.ins().iadd(c, ones);
                self.b.ins().store(data_flags(), c, count_ptr, pair * 16);
            }
        }
    }
}
