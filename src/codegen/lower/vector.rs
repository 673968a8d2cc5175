//! 16-byte vector combines of a whole row, where the machine has vectors and the combine a
//! vector form.

use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use scatterjit_ir::{Combine, DTypeClass, Reduction, Source};

use super::Lowering;
use crate::codegen::combine::{self, data_flags, raw_type};

impl Lowering<'_, '_> {
    /// Elements per 16-byte vector when the machine has vectors and this nest's combine has a
    /// vector form for its dtype: float add/mul/max/min (f32, f64), integer add and bool or/and (any width),
    /// integer max/min and mul up to 32 bits, and `mean`'s accumulate where the sum has
    /// the element's own type (f32, f64).
    pub(super) fn vector_lanes(&self) -> Option<i64> {
        use DTypeClass as C;
        let dtype = self.key.dtype();
        let size = dtype.size() as i64;
        let class = dtype.class();
        let vectorizes = match self.nest.combine {
            Combine::Reduce(r) => match (r, class) {
                (_, C::Float) => matches!(dtype.size(), 4 | 8) && r != Reduction::Mean,
                (Reduction::Add, C::SignedInt | C::UnsignedInt) => true,
                (
                    Reduction::Max | Reduction::Min | Reduction::Mul,
                    C::SignedInt | C::UnsignedInt,
                ) => size <= 4 && !(r == Reduction::Mul && size == 1),
                (_, C::Bool) => r != Reduction::Mean,
                _ => false,
            },
            Combine::Accumulate(acc) => {
                class == C::Float
                    && matches!(dtype.size(), 4 | 8)
                    && combine::acc_type(acc).bytes() as i64 == size
            }
            Combine::Assign | Combine::Start(_) | Combine::Finish { .. } => false,
        };
        (self.machine.vectors && vectorizes && size <= 8).then_some(16 / size)
    }

    /// The element type of [`Self::combine_vector`]'s vectors and their type.
    fn vector_types(&self) -> (Type, Type) {
        let dtype = self.key.dtype();
        let lanes = 16 / dtype.size() as u32;
        let scalar = match dtype.class() {
            DTypeClass::Float if dtype.size() == 4 => types::F32,
            DTypeClass::Float => types::F64,
            _ => raw_type(dtype.size()),
        };
        (scalar, scalar.by(lanes).expect("16-byte vectors exist"))
    }

    /// The source element at `at`, splat into a vector.
    pub(super) fn splat_source(&mut self, at: Value) -> Value {
        let (scalar, vector) = self.vector_types();
        let x = self.b.ins().load(scalar, data_flags(), at, 0);
        self.b.ins().splat(vector, x)
    }

    /// The vector form of [`Self::combine`] on 16 bytes of elements at `at` (indexed
    /// accesses already moved), the source read there or given as `splat`; `mean`'s
    /// per-element counts advance by one per element.
    pub(super) fn combine_vector(&mut self, at: &[Value], splat: Option<Value>) {
        let dtype = self.key.dtype();
        let lanes = 16 / dtype.size() as u32;
        let (_, vector) = self.vector_types();
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
        let old = self.b.ins().load(vector, data_flags(), dest_ptr, 0);
        let new = match splat {
            Some(v) => v,
            None => {
                let src_ptr = at[self.access_of(src.operand)];
                self.b.ins().load(vector, data_flags(), src_ptr, 0)
            }
        };
        let v = match self.nest.combine {
            Combine::Reduce(r) => combine::reduce(
                self.b,
                r,
                dtype,
                combine::Val::Scalar(old),
                combine::Val::Scalar(new),
            ),
            Combine::Accumulate(acc) => {
                combine::Val::Scalar(combine::accumulate(self.b, acc, old, new))
            }
            Combine::Assign | Combine::Start(_) | Combine::Finish { .. } => {
                unreachable!("copies and mean's ends are not vector combines")
            }
        };
        combine::store(self.b, dtype, v, dest_ptr);
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
