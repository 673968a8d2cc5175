//! The one generic lowering: a [`LoopNest`] becomes a loop nest in CLIF.
//!
//! Shape of the generated function (see `crate::abi` for the parameters):
//! ```text
//! entry:   load dims, byte strides, base pointers and the bound once
//!          if any dim is 0: return OK
//! level n: do { <level n+1> ; i_n += 1; p_a += stride_a[n] for every access a } while i_n < dim_n
//! body:    k = load index; k += s & (k >> 63) (signed types); if !(k <u s) goto bad
//!          dest = combine(dest, source) at p_a (+ k * indexed_stride_a)
//! bad:     store i_0..i_{depth-1} into the error slots; return BAD_INDEX
//! ```
//! No calls and no per-element dispatch: every type and combine is fixed at build time.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use scatterjit_ir::{Combine, KernelKey, LoopNest, Operand, Reduction, Source};

use super::combine::{self, data_flags, raw_type};
use crate::abi::{self, ParamLayout, STATUS_BAD_INDEX, STATUS_OK};

/// Bytes of one element of `operand` under `key`.
pub(crate) fn element_size(key: &KernelKey, operand: Operand) -> usize {
    match operand {
        Operand::Data | Operand::Updates | Operand::Out => key.dtype().size(),
        Operand::Indices => key.index_dtype().size(),
        Operand::Acc => Reduction::mean_accumulator(key.dtype()).map_or(0, |acc| acc.size()),
        Operand::Count => 8,
    }
}

/// Call-invariant state of one access, loaded in the entry block.
struct AccessState {
    operand: Operand,
    base: Value,
    /// Byte strides along each domain dim.
    strides: Vec<Value>,
    /// Byte stride along the indexed dim.
    indexed_stride: Option<Value>,
}

struct Lowering<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    key: &'a KernelKey,
    nest: &'a LoopNest,
    ptr: Type,
    dims: Vec<Value>,
    accesses: Vec<AccessState>,
    bound: Option<Value>,
    counters: Vec<Variable>,
    bad: Block,
}

/// Emits `nest` as the body of the function `b` builds. The function's signature must be
/// `(ptr, ptr) -> i64`; blocks are sealed and the builder is left ready to finalize.
pub(crate) fn build_pass(b: &mut FunctionBuilder, key: &KernelKey, nest: &LoopNest, ptr: Type) {
    let layout = ParamLayout::of(nest);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let operands = b.block_params(entry)[0];
    let params = b.block_params(entry)[1];
    // The parameter block and operand array are ours: aligned, valid, never written by others.
    let meta = MemFlagsData::trusted();
    let param = |b: &mut FunctionBuilder, slot: usize| {
        b.ins().load(types::I64, meta, params, (slot * 8) as i32)
    };
    let dims: Vec<Value> = (0..layout.depth).map(|n| param(b, n)).collect();
    let accesses = layout
        .accesses
        .iter()
        .map(|slots| {
            let shift = element_size(key, slots.operand).trailing_zeros() as i64;
            let base = b
                .ins()
                .load(ptr, meta, operands, (slots.operand as usize * 8) as i32);
            let byte_stride = |b: &mut FunctionBuilder, slot: usize| {
                let elems = param(b, slot);
                b.ins().ishl_imm_s(elems, shift)
            };
            let strides = (0..layout.depth)
                .map(|n| byte_stride(b, slots.strides_at + n))
                .collect();
            let indexed_stride = slots.indexed_stride_at.map(|s| byte_stride(b, s));
            AccessState {
                operand: slots.operand,
                base,
                strides,
                indexed_stride,
            }
        })
        .collect();
    let bound = layout.bound_at.map(|s| param(b, s));

    let done = b.create_block();
    let bad = b.create_block();
    if !dims.is_empty() {
        let mut empty = b.ins().icmp_imm_s(IntCC::Equal, dims[0], 0);
        for &d in &dims[1..] {
            let zero = b.ins().icmp_imm_s(IntCC::Equal, d, 0);
            empty = b.ins().bor(empty, zero);
        }
        let start = b.create_block();
        b.ins().brif(empty, done, &[], start, &[]);
        b.switch_to_block(start);
    }

    let mut lowering = Lowering {
        b,
        key,
        nest,
        ptr,
        dims,
        accesses,
        bound,
        counters: Vec::new(),
        bad,
    };
    let bases: Vec<Value> = lowering.accesses.iter().map(|a| a.base).collect();
    lowering.level(0, &bases);
    let Lowering { b, counters, .. } = lowering;
    b.ins().jump(done, &[]);

    b.switch_to_block(bad);
    for (n, &counter) in counters.iter().enumerate() {
        let i = b.use_var(counter);
        b.ins()
            .store(meta, i, params, ((layout.err_at + n) * 8) as i32);
    }
    let status = b.ins().iconst(types::I64, STATUS_BAD_INDEX);
    b.ins().return_(&[status]);

    b.switch_to_block(done);
    let status = b.ins().iconst(types::I64, STATUS_OK);
    b.ins().return_(&[status]);
    b.seal_all_blocks();
}

impl Lowering<'_, '_> {
    /// Emits loop `n` (or the body once all loops are open); `ptrs` are the accesses'
    /// addresses at the start of this level.
    fn level(&mut self, n: usize, ptrs: &[Value]) {
        if n == self.dims.len() {
            self.body(ptrs);
            return;
        }
        let counter = self.b.declare_var(types::I64);
        self.counters.push(counter);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(counter, zero);
        let ptr_vars: Vec<Variable> = ptrs
            .iter()
            .map(|&p| {
                let var = self.b.declare_var(self.ptr);
                self.b.def_var(var, p);
                var
            })
            .collect();
        let header = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let current: Vec<Value> = ptr_vars.iter().map(|&v| self.b.use_var(v)).collect();
        self.level(n + 1, &current);

        let i = self.b.use_var(counter);
        let next = self.b.ins().iadd_imm_s(i, 1);
        self.b.def_var(counter, next);
        for (a, &var) in ptr_vars.iter().enumerate() {
            let p = self.b.use_var(var);
            let stepped = self.b.ins().iadd(p, self.accesses[a].strides[n]);
            self.b.def_var(var, stepped);
        }
        let more = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThan, next, self.dims[n]);
        self.b.ins().brif(more, header, &[], exit, &[]);
        self.b.switch_to_block(exit);
    }

    /// Position of `operand`'s access in [`abi::accesses`] order.
    fn access_of(&self, operand: Operand) -> usize {
        self.accesses
            .iter()
            .position(|a| a.operand == operand)
            .expect("the nest accesses this operand")
    }

    /// The address of `operand`'s element at this point of the domain.
    fn address(&mut self, ptrs: &[Value], operand: Operand, k: Option<Value>) -> Value {
        let a = self.access_of(operand);
        match (self.accesses[a].indexed_stride, k) {
            (Some(stride), Some(k)) => {
                let offset = self.b.ins().imul(k, stride);
                self.b.ins().iadd(ptrs[a], offset)
            }
            _ => ptrs[a],
        }
    }

    /// The innermost statement: read and check the index, then combine.
    fn body(&mut self, ptrs: &[Value]) {
        debug_assert_eq!(abi::accesses(self.nest).count(), ptrs.len());
        let k = self.nest.index.as_ref().map(|index| {
            let index_dtype = self.key.index_dtype();
            let at = self.address(ptrs, index.operand, None);
            let raw = self
                .b
                .ins()
                .load(raw_type(index_dtype.size()), data_flags(), at, 0);
            let signed = index_dtype.is_signed_integer();
            let wide = match (index_dtype.size(), signed) {
                (8, _) => raw,
                (_, true) => self.b.ins().sextend(types::I64, raw),
                (_, false) => self.b.ins().uextend(types::I64, raw),
            };
            let bound = self.bound.expect("a nest that reads an index has a bound");
            // Negative k becomes k + s without a branch; the unsigned compare then rejects
            // anything outside [0, s), including what is still negative (k < -s).
            let k = if signed {
                let sign = self.b.ins().sshr_imm_s(wide, 63);
                let shift = self.b.ins().band(sign, bound);
                self.b.ins().iadd(wide, shift)
            } else {
                wide
            };
            let in_bounds = self.b.ins().icmp(IntCC::UnsignedLessThan, k, bound);
            let next = self.b.create_block();
            self.b.ins().brif(in_bounds, next, &[], self.bad, &[]);
            self.b.switch_to_block(next);
            k
        });
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
                let bytes = reduction
                    .identity_bytes(dtype)
                    .expect("init passes exist only for reductions with an identity");
                let v = self.constant(&bytes);
                self.b.ins().store(data_flags(), v, dest_ptr, 0);
            }
            (Combine::Reduce(reduction), Some(Source::Read(src))) => {
                let src_ptr = self.address(ptrs, src.operand, k);
                let old = combine::load(self.b, dtype, dest_ptr);
                let new = combine::load(self.b, dtype, src_ptr);
                let v = combine::reduce(self.b, reduction, dtype, old, new);
                combine::store(self.b, dtype, v, dest_ptr);
            }
            (Combine::Accumulate(acc), Some(Source::Read(src))) => {
                let src_ptr = self.address(ptrs, src.operand, k);
                let new = combine::load(self.b, dtype, src_ptr);
                let wide = combine::widen(self.b, dtype, acc, new);
                let sum = self
                    .b
                    .ins()
                    .load(combine::acc_type(acc), data_flags(), dest_ptr, 0);
                let sum = combine::accumulate(self.b, acc, sum, wide);
                self.b.ins().store(data_flags(), sum, dest_ptr, 0);
                let count_ptr = self.address(ptrs, Operand::Count, k);
                let count = self.b.ins().load(types::I64, data_flags(), count_ptr, 0);
                let count = self.b.ins().iadd_imm_s(count, 1);
                self.b.ins().store(data_flags(), count, count_ptr, 0);
            }
            (combine, source) => unreachable!("no lowering for {combine:?} of {source:?}"),
        }
    }

    /// An integer constant holding `bytes` (little-endian) in the raw type of their size.
    fn constant(&mut self, bytes: &[u8]) -> Value {
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
