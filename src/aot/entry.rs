//! The exported entry of one key in an object file, built in CLIF: it does for a C caller
//! what `Kernel::run_into` does on the host. It validates the call's [`SjArgs`] (pointers,
//! device, ranks, dtypes, the op's shape rules, overlap of the output with the inputs),
//! fills each pass's parameter block from the descriptors' dims and strides, picks the
//! variant whose condition the strides meet, and calls the passes: check first (so a bad
//! index leaves the output unchanged), then the others in the plan's order (copy skipped
//! in place).
//!
//! A plan with `mean`'s sums and counts ([`Operand::Sums`], [`Operand::Counts`]) takes them
//! from the caller's `SjArgs::workspace`, laid out as `abi::scratch_per_element` says. The
//! entry checks its size and that it shares no memory with the operands before anything
//! runs.
//!
//! Everything the entry decides comes from the same plan, parameter layouts and shape rules
//! as the JIT's host code; loops run in row-major order on the calling thread.

use std::mem::offset_of;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, Block, FuncRef, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type, Value,
};
use cranelift_frontend::FunctionBuilder;
use scatterjit_ir::{Coord, KernelKey, LoopNest, OpKind, Operand, PassKind, Plan, Relation};

use crate::abi::{self, ParamLayout, Picks, Variant};
use crate::cabi::{self, SjArgs, SjTensor, Status, DEVICE_CPU};

/// The compiled functions of one pass: its [`Variant::ALL`] variants, in that order, and
/// for a pass that picks by its index, `Contiguous` with [`Picks::Adjacent`].
pub(super) struct PassRefs {
    pub kind: PassKind,
    pub variants: [FuncRef; 2],
    pub adjacent: Option<FuncRef>,
}

/// One operand of the call, loaded and checked, or a piece of the workspace.
struct Tensor {
    /// Address of element 0 (`data + byte_offset`).
    base: Value,
    /// Dims and element strides (row-major ones when the descriptor has none), as i64.
    dims: Vec<Value>,
    strides: Vec<Value>,
    /// Whether it has elements (an I8 truth value).
    nonempty: Value,
    /// Bytes per element.
    size: i64,
}

struct Entry<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    ptr: Type,
    args: Value,
    /// Returns its one I32 parameter.
    fail: Block,
}

/// Caller memory: no trap or alignment guarantees are assumed.
fn caller() -> MemFlagsData {
    MemFlagsData::new()
}

/// Emits the entry `int32_t (sj_args *args)` of `plan`, calling `passes`. The function's
/// signature must be `(ptr) -> i32`; blocks are sealed and the builder is left ready to
/// finalize.
pub(super) fn build_entry(b: &mut FunctionBuilder, plan: &Plan, passes: &[PassRefs], ptr: Type) {
    let key = plan.key;
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let fail = b.create_block();
    b.append_block_param(fail, types::I32);
    b.set_cold_block(fail);
    let mut e = Entry { b, ptr, args, fail };

    let null = e.b.ins().icmp_imm_s(IntCC::Equal, args, 0);
    e.fail_if(null, Status::NullPointer);
    let tensors: Vec<(Operand, Tensor)> = cabi::operands(&key)
        .into_iter()
        .map(|(operand, rank)| (operand, e.tensor(&key, operand, rank)))
        .collect();
    let get = |operand: Operand| {
        tensors
            .iter()
            .find(|t| t.0 == operand)
            .map(|t| &t.1)
            .expect("the key's operands are loaded")
    };
    for rule in key.shape_rules() {
        let a = get(rule.tensor).dims[rule.dim];
        let c = get(rule.other).dims[rule.other_dim];
        let broken = match rule.relation {
            Relation::AtMost => IntCC::SignedGreaterThan,
            Relation::AtLeast => IntCC::SignedLessThan,
            Relation::Equal => IntCC::NotEqual,
        };
        let broken = e.b.ins().icmp(broken, a, c);
        e.fail_if(broken, Status::Shape);
    }

    let out = get(Operand::Output);
    let in_place = (key.kind() == OpKind::ScatterElements).then(|| e.same(out, get(Operand::Data)));
    for (operand, input) in tensors.iter().filter(|t| t.0 != Operand::Output) {
        let mut overlap = e.overlap(out, input);
        if let (Operand::Data, Some(same)) = (operand, in_place) {
            let not_same = e.b.ins().icmp_imm_s(IntCC::Equal, same, 0);
            overlap = e.b.ins().band(overlap, not_same);
        }
        e.fail_if(overlap, Status::Overlap);
    }
    let mut bound: Vec<(Operand, &Tensor)> = tensors.iter().map(|(o, t)| (*o, t)).collect();
    let scratch = plan.mean_accumulator().map(|acc| {
        e.workspace(
            out,
            acc.size() as i64,
            abi::scratch_per_element(plan) as i64,
        )
    });
    if let Some([counts, sums]) = &scratch {
        for (_, t) in &tensors {
            for piece in [counts, sums] {
                let overlap = e.overlap(piece, t);
                e.fail_if(overlap, Status::Overlap);
            }
        }
        bound.push((Operand::Counts, counts));
        bound.push((Operand::Sums, sums));
    }

    let operands = e.slot(8 * scatterjit_ir::OPERAND_SLOTS as u32);
    let null_ptr = e.b.ins().iconst(ptr, 0);
    for slot in 0..scatterjit_ir::OPERAND_SLOTS {
        e.b.ins().store(
            MemFlagsData::trusted(),
            null_ptr,
            operands,
            (slot * 8) as i32,
        );
    }
    for (operand, t) in &bound {
        e.b.ins().store(
            MemFlagsData::trusted(),
            t.base,
            operands,
            (operand.slot() * 8) as i32,
        );
    }

    // The plan's order: the check before the first write.
    for nest in &plan.passes {
        let kind = nest.pass;
        let refs = passes
            .iter()
            .find(|p| p.kind == kind)
            .expect("every pass of the plan is compiled");
        let after = e.b.create_block();
        if let (PassKind::Copy, Some(same)) = (kind, in_place) {
            let run = e.b.create_block();
            e.b.ins().brif(same, after, &[], run, &[]);
            e.b.switch_to_block(run);
        }
        e.call_pass(nest, refs, &bound, operands);
        e.b.ins().jump(after, &[]);
        e.b.switch_to_block(after);
    }
    let ok = e.b.ins().iconst(types::I32, Status::Ok as i64);
    e.b.ins().return_(&[ok]);

    e.b.switch_to_block(fail);
    let status = e.b.block_params(fail)[0];
    e.b.ins().return_(&[status]);
    e.b.seal_all_blocks();
}

impl Entry<'_, '_> {
    /// Returns `status` if `cond` (an I8 truth value) holds.
    fn fail_if(&mut self, cond: Value, status: Status) {
        let next = self.b.create_block();
        let code = self.b.ins().iconst(types::I32, status as i64);
        self.b
            .ins()
            .brif(cond, self.fail, &[code.into()], next, &[]);
        self.b.switch_to_block(next);
    }

    /// A fresh 8-byte aligned stack slot of `bytes` bytes; its address.
    fn slot(&mut self, bytes: u32) -> Value {
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            bytes.max(8),
            3,
        ));
        self.b.ins().stack_addr(self.ptr, slot, 0)
    }

    fn field(&mut self, ty: Type, at: Value, offset: usize) -> Value {
        self.b.ins().load(ty, caller(), at, offset as i32)
    }

    /// Loads and checks the descriptor of `operand`: not null, on the CPU, of `rank` dims
    /// and the key's dtype for it, dims not negative, data not null if it has elements.
    fn tensor(&mut self, key: &KernelKey, operand: Operand, rank: usize) -> Tensor {
        let at = cabi::descriptor_offset(operand);
        let args = self.args;
        let t = self.field(self.ptr, args, at);
        let null = self.b.ins().icmp_imm_s(IntCC::Equal, t, 0);
        self.fail_if(null, Status::NullPointer);

        let device = self.field(types::I32, t, offset_of!(SjTensor, device_type));
        let bad = self
            .b
            .ins()
            .icmp_imm_s(IntCC::NotEqual, device, i64::from(DEVICE_CPU));
        self.fail_if(bad, Status::Device);
        let ndim = self.field(types::I32, t, offset_of!(SjTensor, ndim));
        let bad = self.b.ins().icmp_imm_s(IntCC::NotEqual, ndim, rank as i64);
        self.fail_if(bad, Status::Rank);
        let dtype = match operand {
            Operand::Indices => key.index_dtype(),
            _ => key.dtype(),
        };
        let code = cabi::dtype_code(dtype).expect("keys have dtypes with a DLPack code");
        let actual = self.field(types::I32, t, offset_of!(SjTensor, dtype));
        let bad = self
            .b
            .ins()
            .icmp_imm_s(IntCC::NotEqual, actual, i64::from(code as i32));
        self.fail_if(bad, Status::DType);

        let shape = self.field(self.ptr, t, offset_of!(SjTensor, shape));
        if rank > 0 {
            let null = self.b.ins().icmp_imm_s(IntCC::Equal, shape, 0);
            self.fail_if(null, Status::NullPointer);
        }
        let dims: Vec<Value> = (0..rank)
            .map(|d| self.field(types::I64, shape, 8 * d))
            .collect();
        let mut nonempty = self.b.ins().iconst(types::I8, 1);
        for &d in &dims {
            let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, d, 0);
            self.fail_if(negative, Status::Shape);
            let some = self.b.ins().icmp_imm_s(IntCC::NotEqual, d, 0);
            nonempty = self.b.ins().band(nonempty, some);
        }

        // Null strides mean row-major: those are written to a slot, read like given ones.
        let row_major = self.slot(8 * rank as u32);
        let mut step = self.b.ins().iconst(types::I64, 1);
        for d in (0..rank).rev() {
            self.b
                .ins()
                .store(MemFlagsData::trusted(), step, row_major, (8 * d) as i32);
            step = self.b.ins().imul(step, dims[d]);
        }
        let given = self.field(self.ptr, t, offset_of!(SjTensor, strides));
        let none = self.b.ins().icmp_imm_s(IntCC::Equal, given, 0);
        let from = self.b.ins().select(none, row_major, given);
        let strides: Vec<Value> = (0..rank)
            .map(|d| self.field(types::I64, from, 8 * d))
            .collect();

        let data = self.field(self.ptr, t, offset_of!(SjTensor, data));
        let null = self.b.ins().icmp_imm_s(IntCC::Equal, data, 0);
        let bad = self.b.ins().band(null, nonempty);
        self.fail_if(bad, Status::NullPointer);
        let offset = self.field(types::I64, t, offset_of!(SjTensor, byte_offset));
        let base = self.b.ins().iadd(data, offset);
        Tensor {
            base,
            dims,
            strides,
            nonempty,
            size: dtype.size() as i64,
        }
    }

    /// The workspace's two pieces for an output `out`: its counts and its sums (of
    /// `sum_size` bytes each), row-major in out's shape. Fails the call unless the
    /// workspace holds `per_element` bytes per element of out (not null if out has any).
    fn workspace(&mut self, out: &Tensor, sum_size: i64, per_element: i64) -> [Tensor; 2] {
        let args = self.args;
        let at = self.field(self.ptr, args, offset_of!(SjArgs, workspace));
        let bytes = self.field(types::I64, args, offset_of!(SjArgs, workspace_bytes));
        // Whether out's element count fits `bytes / per_element`, without the overflow a
        // product of hostile dims could have: divide the room by each dim instead.
        let per = self.b.ins().iconst(types::I64, per_element);
        let mut room = self.b.ins().udiv(bytes, per);
        let one = self.b.ins().iconst(types::I64, 1);
        for &d in &out.dims {
            let zero = self.b.ins().icmp_imm_s(IntCC::Equal, d, 0);
            let d = self.b.ins().select(zero, one, d);
            room = self.b.ins().udiv(room, d);
        }
        let short = self.b.ins().icmp_imm_s(IntCC::Equal, room, 0);
        let short = self.b.ins().band(short, out.nonempty);
        self.fail_if(short, Status::Resource);
        let null = self.b.ins().icmp_imm_s(IntCC::Equal, at, 0);
        let null = self.b.ins().band(null, out.nonempty);
        self.fail_if(null, Status::NullPointer);

        // Row-major strides; the element count is known to fit now.
        let mut strides = vec![one; out.dims.len()];
        let mut numel = one;
        for d in (0..out.dims.len()).rev() {
            strides[d] = numel;
            numel = self.b.ins().imul(numel, out.dims[d]);
        }
        let count_size = abi::COUNT_SIZE as i64;
        let counts_bytes = self.b.ins().imul_imm_s(numel, count_size);
        let sums = self.b.ins().iadd(at, counts_bytes);
        let piece = |base, size| Tensor {
            base,
            dims: out.dims.clone(),
            strides: strides.clone(),
            nonempty: out.nonempty,
            size,
        };
        [piece(at, count_size), piece(sums, sum_size)]
    }

    /// The lowest address and one past the highest byte `t`'s elements reach.
    fn extent(&mut self, t: &Tensor) -> (Value, Value) {
        let (mut lo, mut hi) = (t.base, t.base);
        let zero = self.b.ins().iconst(types::I64, 0);
        for (&d, &s) in t.dims.iter().zip(&t.strides) {
            let last = self.b.ins().iadd_imm_s(d, -1);
            let reach = self.b.ins().imul(last, s);
            let reach = self.b.ins().imul_imm_s(reach, t.size);
            let negative = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, reach, 0);
            let down = self.b.ins().select(negative, reach, zero);
            let up = self.b.ins().select(negative, zero, reach);
            lo = self.b.ins().iadd(lo, down);
            hi = self.b.ins().iadd(hi, up);
        }
        (lo, self.b.ins().iadd_imm_s(hi, t.size))
    }

    /// Whether two tensors with elements share a byte of memory (an I8 truth value).
    fn overlap(&mut self, a: &Tensor, c: &Tensor) -> Value {
        let (a_lo, a_hi) = self.extent(a);
        let (c_lo, c_hi) = self.extent(c);
        let before = self.b.ins().icmp(IntCC::UnsignedLessThan, a_lo, c_hi);
        let after = self.b.ins().icmp(IntCC::UnsignedLessThan, c_lo, a_hi);
        let both = self.b.ins().band(a.nonempty, c.nonempty);
        let meet = self.b.ins().band(before, after);
        self.b.ins().band(both, meet)
    }

    /// Whether `a` and `c` (of equal dims) are the same elements: same base, and equal
    /// strides along every dim longer than 1.
    fn same(&mut self, a: &Tensor, c: &Tensor) -> Value {
        let mut same = self.b.ins().icmp(IntCC::Equal, a.base, c.base);
        for ((&d, &s), &t) in a.dims.iter().zip(&a.strides).zip(&c.strides) {
            let equal = self.b.ins().icmp(IntCC::Equal, s, t);
            let short = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, d, 1);
            let fine = self.b.ins().bor(equal, short);
            same = self.b.ins().band(same, fine);
        }
        same
    }

    /// The sum of `t`'s element strides over `dims` (0 for none).
    fn stride_sum(&mut self, t: &Tensor, dims: abi::Dims) -> Value {
        let mut strides = dims.iter().map(|j| t.strides[j]);
        let first = strides.next();
        let first = first.unwrap_or_else(|| self.b.ins().iconst(types::I64, 0));
        strides.fold(first, |sum, s| self.b.ins().iadd(sum, s))
    }

    /// Fills `nest`'s parameter block from the tensors as its recipe (`ParamLayout`) says,
    /// loops in row-major order, calls the variant the strides allow, and on a bad index
    /// writes its position into `args.bad_index` and returns [`Status::IndexOutOfBounds`].
    fn call_pass(
        &mut self,
        nest: &LoopNest,
        refs: &PassRefs,
        tensors: &[(Operand, &Tensor)],
        operands: Value,
    ) {
        let get = |operand: Operand| {
            tensors
                .iter()
                .find(|t| t.0 == operand)
                .map(|t| t.1)
                .expect("passes reach only the call's operands and workspace")
        };
        let layout = ParamLayout::of(nest);
        let params = self.slot(8 * layout.len as u32);
        let store = |e: &mut Self, v: Value, slot: usize| {
            e.b.ins()
                .store(MemFlagsData::trusted(), v, params, (8 * slot) as i32);
        };
        for (n, &d) in get(layout.domain).dims.iter().enumerate() {
            store(self, d, n);
        }
        let depth = layout.depth;
        let mut contiguous = self.b.ins().iconst(types::I8, 1);
        // The adjacent form's condition (see `ParamLayout::picks`).
        let mut adjacent = self.b.ins().iconst(types::I8, 1);
        for slots in &layout.accesses {
            let t = get(slots.operand);
            if let Some(at) = slots.indexed_stride_at {
                let stride = self.stride_sum(t, slots.indexed);
                store(self, stride, at);
                let unit = self.b.ins().icmp_imm_s(IntCC::Equal, stride, 1);
                adjacent = self.b.ins().band(adjacent, unit);
            }
            for n in 0..depth {
                let stride = self.stride_sum(t, slots.along[n]);
                store(self, stride, slots.strides_at + n);
                if n + 1 == depth {
                    // The contiguous variant's condition (see `Variant::Contiguous`).
                    let unit =
                        self.b
                            .ins()
                            .icmp_imm_s(IntCC::Equal, stride, slots.contiguous_stride(n));
                    contiguous = self.b.ins().band(contiguous, unit);
                }
            }
        }
        if let (Some(at), Some((operand, dim))) = (layout.bound_at, layout.bound) {
            store(self, get(operand).dims[dim], at);
        }

        let done = self.b.create_block();
        self.b.append_block_param(done, types::I64);
        let variant = |v: Variant| {
            let n = Variant::ALL
                .iter()
                .position(|&x| x == v)
                .expect("ALL lists every variant");
            refs.variants[n]
        };
        let call = |e: &mut Self, f: FuncRef| {
            let inst = e.b.ins().call(f, &[operands, params]);
            let status = e.b.inst_results(inst)[0];
            e.b.ins().jump(done, &[status.into()]);
        };
        if depth == 0 {
            call(self, variant(Variant::Strided));
        } else {
            let (fast, slow) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(contiguous, fast, &[], slow, &[]);
            self.b.switch_to_block(fast);
            if let Some(adjacent_fn) = refs.adjacent {
                let (shifted, multiplied) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(adjacent, shifted, &[], multiplied, &[]);
                self.b.switch_to_block(shifted);
                call(self, adjacent_fn);
                self.b.switch_to_block(multiplied);
            }
            call(self, variant(Variant::Contiguous(Picks::Strided)));
            self.b.switch_to_block(slow);
            call(self, variant(Variant::Strided));
        }
        self.b.switch_to_block(done);
        let status = self.b.block_params(done)[0];

        let (bad, next) = (self.b.create_block(), self.b.create_block());
        self.b.set_cold_block(bad);
        let failed = self
            .b
            .ins()
            .icmp_imm_s(IntCC::NotEqual, status, abi::STATUS_OK);
        self.b.ins().brif(failed, bad, &[], next, &[]);
        self.b.switch_to_block(bad);
        if let Some(index) = &nest.index {
            let first = offset_of!(SjArgs, bad_index);
            for (j, coord) in index.coords.iter().enumerate() {
                let Coord::Loop(d) = coord else {
                    unreachable!("indices are not read through an index")
                };
                let counter = self.b.ins().load(
                    types::I64,
                    MemFlagsData::trusted(),
                    params,
                    (8 * (layout.err_at + d)) as i32,
                );
                self.b
                    .ins()
                    .store(caller(), counter, self.args, (first + 8 * j) as i32);
            }
        }
        let code = self
            .b
            .ins()
            .iconst(types::I32, Status::IndexOutOfBounds as i64);
        self.b.ins().jump(self.fail, &[code.into()]);
        self.b.switch_to_block(next);
    }
}
