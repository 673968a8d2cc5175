//! The innermost statement: an access's address, reading and checking the index, and the
//! combine of each pass kind.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, Value};
use scatterjit_ir::{Combine, MeanAccumulator, Operand, Reduction, Source};

use super::{Bounds, Lowering};
use crate::abi;
use crate::codegen::combine::{self, data_flags, raw_type};

impl Lowering<'_, '_> {
    /// Position of `operand`'s access in [`abi::accesses`] order.
    pub(super) fn access_of(&self, operand: Operand) -> usize {
        self.accesses
            .iter()
            .position(|a| a.operand == operand)
            .expect("the nest accesses this operand")
    }

    /// The address of `operand`'s element at this point of the domain.
    fn address(&mut self, ptrs: &[Value], operand: Operand, k: Option<Value>) -> Value {
        let a = self.access_of(operand);
        match (self.accesses[a].indexed_stride, k) {
            (Some(stride), Some(k)) => self.picked(ptrs[a], a, k, stride),
            _ => ptrs[a],
        }
    }

    /// The innermost statement: read and check the index, then combine.
    pub(super) fn body(&mut self, ptrs: &[Value]) {
        debug_assert_eq!(abi::accesses(self.nest).count(), ptrs.len());
        let k = self.nest.index.as_ref().map(|index| {
            let at = self.address(ptrs, index.operand, None);
            let wide = self.load_wide_index(at);
            self.check_wide_index(wide)
        });
        self.combine(ptrs, k);
    }

    /// Loads the raw index at `at` (in the index dtype's own width).
    pub(super) fn load_index(&mut self, at: Value) -> Value {
        let size = self.key.index_dtype().size();
        self.b.ins().load(raw_type(size), data_flags(), at, 0)
    }

    /// Loads the index at `at` widened to i64 (sign- or zero-extended as its dtype says) by
    /// the load itself: a narrow load and an extend were two instructions on x86-64.
    pub(super) fn load_wide_index(&mut self, at: Value) -> Value {
        let index_dtype = self.key.index_dtype();
        let flags = data_flags();
        let ins = self.b.ins();
        match (index_dtype.size(), index_dtype.is_signed_integer()) {
            (1, true) => ins.sload8(types::I64, flags, at, 0),
            (1, false) => ins.uload8(types::I64, flags, at, 0),
            (2, true) => ins.sload16(types::I64, flags, at, 0),
            (2, false) => ins.uload16(types::I64, flags, at, 0),
            (4, true) => ins.sload32(flags, at, 0),
            (4, false) => ins.uload32(flags, at, 0),
            _ => ins.load(types::I64, flags, at, 0),
        }
    }

    /// Widens a raw index to i64, normalizes it and branches to `bad` unless it is in
    /// `[0, s)`; returns the normalized index.
    pub(super) fn check_index(&mut self, raw: Value) -> Value {
        let index_dtype = self.key.index_dtype();
        let wide = match (index_dtype.size(), index_dtype.is_signed_integer()) {
            (8, _) => raw,
            (_, true) => self.b.ins().sextend(types::I64, raw),
            (_, false) => self.b.ins().uextend(types::I64, raw),
        };
        self.check_wide_index(wide)
    }

    /// [`Self::check_index`] of an index already widened to i64.
    fn check_wide_index(&mut self, wide: Value) -> Value {
        if self.bounds == Bounds::InRange {
            // Unsigned and below the bound already (see `Bounds::InRange`).
            return wide;
        }
        let bound = self.bound.expect("a nest that reads an index has a bound");
        if let Some(resume) = self.resume {
            let (next, negative) = (self.b.create_block(), self.b.create_block());
            self.b.set_cold_block(negative);
            let in_bounds = self.b.ins().icmp(IntCC::UnsignedLessThan, wide, bound);
            self.b.ins().brif(in_bounds, next, &[], negative, &[]);
            self.enter(negative);
            let position = match resume.offset {
                0 => resume.counter,
                offset => self.b.ins().iadd_imm_s(resume.counter, offset),
            };
            self.b.def_var(resume.position, position);
            self.b.ins().jump(resume.block, &[]);
            self.enter(next);
            return wide;
        }
        let k = self.normalize_index(wide, bound);
        let in_bounds = self.b.ins().icmp(IntCC::UnsignedLessThan, k, bound);
        let next = self.b.create_block();
        self.b.ins().brif(in_bounds, next, &[], self.bad, &[]);
        self.enter(next);
        k
    }

    /// A widened index with `bound` added where it is negative, without a branch; an
    /// unsigned compare with `bound` then rejects anything outside `[0, bound)`, including
    /// what is still negative (below `-bound`).
    pub(super) fn normalize_index(&mut self, wide: Value, bound: Value) -> Value {
        if self.key.index_dtype().is_signed_integer() {
            let sign = self.b.ins().sshr_imm_s(wide, 63);
            let shift = self.b.ins().band(sign, bound);
            self.b.ins().iadd(wide, shift)
        } else {
            wide
        }
    }

    /// `dest = combine(dest, source)` at the accesses' addresses `ptrs`, each moved along
    /// its indexed dim by `k` (or already moved, when `k` is `None`).
    pub(super) fn combine(&mut self, ptrs: &[Value], k: Option<Value>) {
        let Some(dest) = &self.nest.dest else {
            return;
        };
        let dest_ptr = self.address(ptrs, dest.operand, k);
        let dtype = self.key.dtype();
        match (self.nest.combine, &self.nest.source) {
            (Combine::Assign, Some(Source::Read(src))) => {
                let src_ptr = self.address(ptrs, src.operand, k);
                let ty = raw_type(dtype.size());
                let v = self.b.ins().load(ty, data_flags(), src_ptr, 0);
                self.b.ins().store(data_flags(), v, dest_ptr, 0);
            }
            (Combine::Assign, Some(Source::Identity(reduction))) => {
                let v = self.constant(&self.identity_bytes(*reduction));
                self.b.ins().store(data_flags(), v, dest_ptr, 0);
            }
            (Combine::Reduce(reduction), Some(Source::Read(src))) => {
                let src_ptr = self.address(ptrs, src.operand, k);
                if let Some((maximum, brain)) = combine::half_extremum_of(reduction, dtype) {
                    let old = self.b.ins().load(types::I16, data_flags(), dest_ptr, 0);
                    let new = self.b.ins().load(types::I16, data_flags(), src_ptr, 0);
                    let v = combine::half_extremum(self.b, maximum, brain, old, new);
                    self.b.ins().store(data_flags(), v, dest_ptr, 0);
                    return;
                }
                let old = self.load_element(dest_ptr);
                let new = self.load_element(src_ptr);
                let v = combine::reduce(self.b, reduction, dtype, old, new);
                combine::store(self.b, dtype, v, dest_ptr);
            }
            (Combine::Accumulate(acc), Some(Source::Read(src))) => {
                let src_ptr = self.address(ptrs, src.operand, k);
                let new = self.load_element(src_ptr);
                let wide = combine::widen(self.b, dtype, acc, new);
                let sum = self
                    .b
                    .ins()
                    .load(combine::acc_type(acc), data_flags(), dest_ptr, 0);
                let sum = combine::accumulate(self.b, acc, sum, wide);
                self.b.ins().store(data_flags(), sum, dest_ptr, 0);
                if self.count_per_row().is_none() {
                    let count_ptr = self.address(ptrs, Operand::Counts, k);
                    self.bump_count(count_ptr);
                }
            }
            (Combine::Start(acc), Some(source)) => {
                let sum = match source {
                    Source::Read(src) => {
                        let src_ptr = self.address(ptrs, src.operand, k);
                        let v = self.load_element(src_ptr);
                        combine::widen(self.b, dtype, acc, v)
                    }
                    Source::Identity(_) => self.constant(&acc.identity_bytes()),
                };
                self.b.ins().store(data_flags(), sum, dest_ptr, 0);
                if self.count_per_row().is_none() {
                    let count_ptr = self.address(ptrs, Operand::Counts, k);
                    let zero = self.b.ins().iconst(types::I64, 0);
                    self.b.ins().store(data_flags(), zero, count_ptr, 0);
                }
            }
            (Combine::Finish { acc, with_init }, Some(Source::Read(src)))
                if matches!(acc, MeanAccumulator::F32 | MeanAccumulator::F64) =>
            {
                // Floats: divide every element and keep the quotient only where an update
                // reached it, in integer registers (a conditional move; a float select is
                // a branch on x86-64). A branch per element mispredicts where about a third
                // of the elements are unreached at random (random indices, as many as the
                // axis): 3.5 ns per element of [1024, 1024] f32, one thread.
                let count_ptr = self.address(ptrs, Operand::Counts, k);
                let count = self.b.ins().load(types::I64, data_flags(), count_ptr, 0);
                let n = self.mean_divisor(count, with_init);
                let src_ptr = self.address(ptrs, src.operand, k);
                let ty = combine::acc_type(acc);
                let sum = self.b.ins().load(ty, data_flags(), src_ptr, 0);
                // Unreached and without data's value, `n` is 0 and the quotient unused.
                let quotient = combine::finish(self.b, dtype, acc, sum, n).scalar();
                let quotient = combine::real_float_bits(self.b, dtype, quotient)
                    .expect("float accumulators serve real floats");
                let bits = raw_type(dtype.size());
                let old = self.b.ins().load(bits, data_flags(), dest_ptr, 0);
                let reached = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, count, 0);
                let v = self.b.ins().select(reached, quotient, old);
                self.b.ins().store(data_flags(), v, dest_ptr, 0);
            }
            (Combine::Finish { acc, with_init }, Some(Source::Read(src))) => {
                let count_ptr = self.address(ptrs, Operand::Counts, k);
                let (n, next) = self.divisor(count_ptr, with_init);
                let src_ptr = self.address(ptrs, src.operand, k);
                let sum = self
                    .b
                    .ins()
                    .load(combine::acc_type(acc), data_flags(), src_ptr, 0);
                let v = combine::finish(self.b, dtype, acc, sum, n);
                combine::store(self.b, dtype, v, dest_ptr);
                self.b.ins().jump(next, &[]);
                self.enter(next);
            }
            (combine, source) => unreachable!("no lowering for {combine:?} of {source:?}"),
        }
    }

    /// The position of `mean`'s count among the accesses when the nest keeps one count per
    /// row: the count stays put along the innermost loop, and the row is counted, started
    /// or finished once (see `Self::row` and `Self::mean_row`) instead of per element.
    /// The runtime binds such counts only where the apply nest's index stays put too (one
    /// index per row), so every update row is combined whole into one destination row.
    pub(super) fn count_per_row(&self) -> Option<usize> {
        let count = self.nest.count.as_ref()?;
        let a = self.access_of(count.operand);
        self.variant.still(a).then_some(a)
    }

    /// `mean`'s finish of what the i64 count at `at` covers (an element, or a row): goes on
    /// in a new block only if an update reached it, with the divisor (the count, plus one
    /// for data's own value `with_init`); returns the divisor and the block to jump to when
    /// done, where an unreached element also goes (it keeps its value, never divided by 0).
    pub(super) fn divisor(&mut self, at: Value, with_init: bool) -> (Value, Block) {
        let count = self.b.ins().load(types::I64, data_flags(), at, 0);
        let (divide, done) = (self.b.create_block(), self.b.create_block());
        let reached = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, count, 0);
        self.b.ins().brif(reached, divide, &[], done, &[]);
        self.enter(divide);
        (self.mean_divisor(count, with_init), done)
    }

    /// What `mean` divides by: the `count` of updates, plus one for data's own value
    /// `with_init`.
    fn mean_divisor(&mut self, count: Value, with_init: bool) -> Value {
        match with_init {
            true => self.b.ins().iadd_imm_s(count, 1),
            false => count,
        }
    }

    /// `count += 1` for the i64 count at `at`.
    pub(super) fn bump_count(&mut self, at: Value) {
        let count = self.b.ins().load(types::I64, data_flags(), at, 0);
        let count = self.b.ins().iadd_imm_s(count, 1);
        self.b.ins().store(data_flags(), count, at, 0);
    }

    /// The bytes of `reduction`'s identity in the kernel's dtype, which an init pass stores.
    pub(super) fn identity_bytes(&self, reduction: Reduction) -> Vec<u8> {
        reduction
            .identity_bytes(self.key.dtype())
            .expect("init passes exist only for reductions with an identity")
    }

    /// An integer constant holding `bytes` (little-endian) in the raw type of their size.
    pub(super) fn constant(&mut self, bytes: &[u8]) -> Value {
        let word = |chunk: &[u8]| {
            let mut raw = [0u8; 8];
            raw[..chunk.len()].copy_from_slice(chunk);
            i64::from_le_bytes(raw)
        };
        if bytes.len() == 16 {
            let lo = self.b.ins().iconst(types::I64, word(&bytes[..8]));
            let hi = self.b.ins().iconst(types::I64, word(&bytes[8..]));
            return self.b.ins().iconcat(lo, hi);
        }
        let ty = raw_type(bytes.len());
        // iconst takes the value's bits zero-extended to 64 for narrow types.
        let value = word(bytes);
        self.b.ins().iconst(ty, value)
    }
}
