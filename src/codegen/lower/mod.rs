//! The one generic lowering: a [`LoopNest`] becomes a loop nest in CLIF.
//!
//! Shape of the generated function (see `crate::abi` for the parameters):
//! ```text
//! entry:   load the base pointers; if any dim is 0: return OK
//!          (dims, strides and the bound are loaded from the parameter block where a loop
//!          needs them, so that few values stay live across loops and none spill)
//! level n: do { <level n+1> ; i_n += 1; p_a += stride_a[n] for every access a } while i_n < dim_n
//! body:    k = load index; k += s & (k >> 63) (signed types); if !(k <u s) goto bad
//!          dest = combine(dest, source) at p_a (+ k * indexed_stride_a)
//! bad:     store i_0..i_{depth-1} into the error slots; return BAD_INDEX
//! ```
//! A listed pass's outermost loop takes its positions from a row list instead of counting
//! (`for j in 0..dim_0 { i_0 = list[j]; p_a = base_a + i_0 * stride_a[0]; ... }`), so that
//! one thread can apply exactly the rows of its destination range (see `crate::engine`).
//! No per-element calls or dispatch: every type and combine is fixed at build time; the
//! only calls are `memcpy` for long row copies (the streaming helper instead in
//! [`Variant::Streamed`], which fences before it returns) and the prefetch helper, once
//! per row and prefetched access.
//!
//! [`loops`] emits the loops, [`row`] the contiguous variant's rows, [`vector`] their
//! vector combines, [`ahead`] the prefetch of rows an index picks further on, [`body`] the
//! innermost statement.

mod ahead;
mod body;
mod loops;
mod row;
mod vector;

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::immediates::Imm64;
use cranelift_codegen::ir::{
    types, Block, BlockArg, ExternalName, Function, GlobalValueData, InstBuilder, MemFlagsData,
    Type, UserExternalName, Value,
};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, Variable};
use scatterjit_ir::{Combine, Coord, DType, KernelKey, LoopNest, Operand, Source};

pub(crate) use ahead::{prefetch_helper_signature, FROM_DEST, FROM_SOURCE};
pub(crate) use row::stream_helper_signature;

use crate::abi::{self, ParamLayout, Picks, Variant, STATUS_BAD_INDEX, STATUS_OK};
use crate::codegen::combine::{self, data_flags};

/// What the lowering may emit on the machine it compiles for. Everything else it emits is
/// target-neutral CLIF: integer and float scalars, loads and stores of the target's pointer
/// type, calls to `memcpy`, and (in this process only) calls to the prefetch and streaming
/// helpers and loads from the f16 table.
#[derive(Clone, Copy)]
pub(crate) struct Machine {
    /// The target's pointer type and calling convention.
    pub(crate) config: TargetFrontendConfig,
    /// Whether the target has 16-byte vector registers: without them, whole-row combines and
    /// the uniform-row test run element by element, and short rows are copied 8 bytes at a
    /// time.
    pub(crate) vectors: bool,
    /// The host's prefetch helper and its threshold (see [`ahead`]), where the code runs in
    /// this process and the host has one; `None` in object files.
    pub(crate) prefetch: Option<Prefetch>,
    /// The number of the data object holding the host's f16 -> f32 table (65,536 f32 bit
    /// patterns), which scalar f16 elements are decoded through: in this process, for f16
    /// kernels; `None` elsewhere, where they are decoded arithmetically.
    pub(crate) f16_table: Option<u32>,
    /// The number of the host's streaming row copy, `(dest: ptr, src: ptr, bytes: i64)`,
    /// which [`Variant::Streamed`] code calls for its row copies: in this process, where the
    /// host has one; `None` elsewhere, where rows are copied with `memcpy`.
    pub(crate) stream: Option<u32>,
}

/// Whether a pass checks the indices it reads against their bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// Each index is normalized and compared with its bound; a bad one leaves the pass
    /// through its cold exit, which reports the loop counters.
    Checked,
    /// The indices are scatterjit's own, unsigned and in `[0, s)`: a compacted copy whose
    /// every index its scan checked (`kernel::compact`), or the engine's keys, which its
    /// sort checked. No compare or branch per index; a kernel compiled so is never handed
    /// a caller's indices.
    InRange,
}

/// What the prefetching code imports from the module it is compiled into (see [`ahead`]).
#[derive(Clone, Copy)]
pub(crate) struct Prefetch {
    /// The number of the helper function, `(address: ptr, bytes: i64)`.
    pub(crate) helper: u32,
    /// The number of the data object holding the smallest extent (bytes, an i64) whose
    /// picks are prefetched.
    pub(crate) from_bytes: u32,
}

/// Call-invariant state of one access, loaded in the entry block.
struct AccessState {
    operand: Operand,
    /// log2 of the element size.
    shift: i64,
    /// Whether the access moves along the innermost loop: its coordinates include it and
    /// the variant does not hold it still.
    uses_inner: bool,
    base: Value,
    /// Slot of the element strides along the domain dims (in loop order).
    strides_at: usize,
    /// Slot of the element stride along the indexed dim.
    indexed_stride_at: Option<usize>,
    /// Byte stride along the indexed dim, loaded when the innermost loop is entered.
    indexed_stride: Option<Value>,
}

struct Lowering<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    key: &'a KernelKey,
    nest: &'a LoopNest,
    ptr: Type,
    /// The parameter block.
    params: Value,
    layout: ParamLayout,
    depth: usize,
    accesses: Vec<AccessState>,
    /// The index bound and the innermost dim, loaded when the innermost loop is entered.
    bound: Option<Value>,
    inner_dim: Option<Value>,
    counters: Vec<Variable>,
    /// The counters and pointers of the loops around the one being emitted (see
    /// [`Self::open_loop`]).
    outer_vars: Vec<Variable>,
    bad: Block,
    variant: Variant,
    machine: Machine,
    listed: bool,
    /// Whether each index read is checked against its bound.
    bounds: Bounds,
    /// [`Machine::f16_table`], where this pass computes with f16 elements.
    f16_table: Option<u32>,
    /// Where a negative index leaves the unrolled loop being emitted, if its checks are
    /// out of line (see [`Resume`]); `None` elsewhere.
    resume: Option<Resume>,
    /// An init pass's last row filled with the identity (its destination address, 0
    /// before the first): a row that lands on it again is skipped (see `Lowering::row`).
    /// `None` in other passes.
    last_filled: Option<Variable>,
}

/// An unrolled element loop's checks out of line (the contiguous variants' rows): an index
/// in `[0, s)` passes one compare, and the first negative one leaves for the remainder
/// loop, which normalizes every index without a branch, from that element to the row's
/// end. Indices that are never negative pay no normalization (a histogram of 8M i64
/// indices, 11 instructions an element to 7: 1.2-1.5x faster), and rows that mix signs at
/// random pay no mispredicted branch per element (2.5x slower than branch-free, measured
/// with one out of line everywhere), only the remainder's one element an iteration (16%
/// more instructions there). The `Strided` loop keeps its branch-free checks: a copy of it
/// added a quarter to the instructions of every kernel's eager compile.
#[derive(Clone, Copy)]
struct Resume {
    /// The remainder loop's entry.
    block: Block,
    /// The variable that carries the element's position there.
    position: Variable,
    /// The unrolled loop's counter and the element's place in its iteration.
    counter: Value,
    offset: i64,
}

/// Emits `nest` as the body of the function `b` builds for `machine`, its innermost loop
/// compiled as `variant`, its outermost loop walking a row list if `listed`. The function's
/// signature must be `(ptr, ptr) -> i64`; blocks are sealed and the builder is left ready
/// to finalize.
pub(crate) fn build_pass(
    b: &mut FunctionBuilder,
    key: &KernelKey,
    nest: &LoopNest,
    variant: Variant,
    machine: Machine,
    listed: bool,
    bounds: Bounds,
) {
    debug_assert!(
        bounds == Bounds::Checked || !key.index_dtype().is_signed_integer(),
        "indices in range are unsigned: a negative one would not be normalized"
    );
    let ptr = machine.config.pointer_type();
    let layout = ParamLayout::of(nest);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let operands = b.block_params(entry)[0];
    let params = b.block_params(entry)[1];
    // The parameter block and operand array are ours: aligned, valid, never written by others.
    let meta = MemFlagsData::trusted();
    let param = |b: &mut FunctionBuilder, slot: usize| {
        b.ins().load(types::I64, meta, params, (slot * 8) as i32)
    };
    let dims: Vec<Value> = (0..layout.depth).map(|n| param(b, n)).collect();
    let inner = layout.depth.checked_sub(1);
    let accesses = layout
        .accesses
        .iter()
        .zip(abi::accesses(nest))
        .enumerate()
        .map(|(a, (slots, access))| {
            let shift = abi::element_size(key, slots.operand).trailing_zeros() as i64;
            let base = b
                .ins()
                .load(ptr, meta, operands, (slots.operand as usize * 8) as i32);
            AccessState {
                operand: slots.operand,
                shift,
                uses_inner: inner.is_some_and(|d| access.coords.contains(&Coord::Loop(d)))
                    && !variant.still(a),
                base,
                strides_at: slots.strides_at,
                indexed_stride_at: slots.indexed_stride_at,
                indexed_stride: None,
            }
        })
        .collect();

    // Only passes that compute with f16 elements read them as f32 (a copy moves bits, max
    // and min compare them as integers).
    let computes = match nest.combine {
        Combine::Assign => false,
        Combine::Reduce(reduction) => combine::half_extremum_of(reduction, key.dtype()).is_none(),
        _ => true,
    };
    let f16_table = machine
        .f16_table
        .filter(|_| key.dtype() == DType::F16 && computes);

    let done = b.create_block();
    let bad = b.create_block();
    // Out of line: the index check's branch falls through on the hot path.
    b.set_cold_block(bad);
    if !dims.is_empty() {
        let mut empty = b.ins().icmp_imm_s(IntCC::Equal, dims[0], 0);
        for &d in &dims[1..] {
            let zero = b.ins().icmp_imm_s(IntCC::Equal, d, 0);
            empty = b.ins().bor(empty, zero);
        }
        let start = b.create_block();
        b.ins().brif(empty, done, &[], start, &[]);
        b.switch_to_block(start);
        b.seal_block(start);
    }

    let mut lowering = Lowering {
        b,
        key,
        nest,
        ptr,
        params,
        depth: layout.depth,
        layout: layout.clone(),
        accesses,
        bound: None,
        inner_dim: None,
        counters: Vec::new(),
        outer_vars: Vec::new(),
        bad,
        variant,
        machine,
        listed,
        bounds,
        f16_table,
        resume: None,
        last_filled: None,
    };
    if matches!(nest.source, Some(Source::Identity(_))) && nest.writes_through_index() {
        let last = lowering.b.declare_var(ptr);
        let none = lowering.b.ins().iconst(ptr, 0);
        lowering.b.def_var(last, none);
        lowering.last_filled = Some(last);
    }
    let bases: Vec<Value> = lowering.accesses.iter().map(|a| a.base).collect();
    if layout.depth == 0 {
        lowering.enter_innermost();
    }
    lowering.level(0, &bases);
    let Lowering { b, counters, .. } = lowering;
    b.ins().jump(done, &[]);

    // Streamed stores are weakly ordered: fenced before the caller, or a thread that
    // synchronizes with it, reads what they wrote.
    let streams = machine.stream.is_some() && variant == Variant::Streamed;
    b.switch_to_block(bad);
    b.seal_block(bad);
    for (n, &counter) in counters.iter().enumerate() {
        let i = b.use_var(counter);
        b.ins()
            .store(meta, i, params, ((layout.err_at + n) * 8) as i32);
    }
    if streams {
        b.ins().fence();
    }
    let status = b.ins().iconst(types::I64, STATUS_BAD_INDEX);
    b.ins().return_(&[status]);

    b.switch_to_block(done);
    b.seal_block(done);
    if streams {
        b.ins().fence();
    }
    let status = b.ins().iconst(types::I64, STATUS_OK);
    b.ins().return_(&[status]);
    // Every block is sealed once its predecessors are all known (debug builds' `finalize`
    // checks it); a release build seals any a later edit misses, which stays correct.
    if !cfg!(debug_assertions) {
        b.seal_all_blocks();
    }
    debug_assert!(
        redundant_params(b.func).is_empty(),
        "block parameters {:?} always take one value:\n{}",
        redundant_params(b.func),
        b.func.display()
    );
}

/// The block parameters of `func` that every branch to their block passes the same value
/// (or the parameter itself): values a loop never changes, carried around it all the same.
/// The lowering's sealing order leaves none (see [`Lowering::open_loop`]); each one would
/// cost a register or a spill, and a move on every iteration.
fn redundant_params(func: &Function) -> Vec<Value> {
    // Per parameter: the one other value passed to it so far, or `None` once two differ.
    let mut passed: HashMap<Value, Option<Value>> = HashMap::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let dfg = &func.dfg;
            for call in dfg.insts[inst].branch_destination(&dfg.jump_tables, &dfg.exception_tables)
            {
                let params = dfg.block_params(call.block(&dfg.value_lists));
                for (&param, arg) in params.iter().zip(call.args(&dfg.value_lists)) {
                    let value = match arg {
                        BlockArg::Value(v) => Some(dfg.resolve_aliases(v)),
                        _ => None,
                    };
                    if value == Some(param) {
                        continue;
                    }
                    passed
                        .entry(param)
                        .and_modify(|seen| {
                            if *seen != value {
                                *seen = None;
                            }
                        })
                        .or_insert(value);
                }
            }
        }
    }
    let mut redundant: Vec<Value> = passed
        .into_iter()
        .filter_map(|(param, seen)| seen.map(|_| param))
        .collect();
    redundant.sort();
    redundant
}

/// The address of the module's data object number `id` (an import of the host's).
fn symbol_address(b: &mut FunctionBuilder, ptr: Type, id: u32) -> Value {
    // Namespace 1 holds a module's data objects, as `Module::declare_data_in_func` names
    // them.
    let name = b
        .func
        .declare_imported_user_function(UserExternalName::new(1, id));
    let symbol = b.create_global_value(GlobalValueData::Symbol {
        name: ExternalName::user(name),
        offset: Imm64::new(0),
        colocated: false,
        tls: false,
    });
    b.ins().symbol_value(ptr, symbol)
}

impl Lowering<'_, '_> {
    /// Loads the element of the kernel's dtype at `at` for arithmetic: f16 through the
    /// host's table where the code has it (one load of a 256 KiB table, mostly in cache),
    /// otherwise as [`combine::load`] does, with the same bits.
    pub(super) fn load_element(&mut self, at: Value) -> combine::Val {
        let Some(table) = self.f16_table else {
            return combine::load(self.b, self.key.dtype(), at);
        };
        // The address is an immediate: taken here, at each use, it holds no register
        // across the loops (taken once, it was moved or spilled on every element).
        let table = symbol_address(self.b, self.ptr, table);
        let bits = self.b.ins().uload16(types::I64, data_flags(), at, 0);
        let offset = self.b.ins().ishl_imm_u(bits, 2_i64);
        let entry = self.b.ins().iadd(table, offset);
        // The host's table: aligned, valid for the life of the process, never written.
        let flags = MemFlagsData::trusted().with_readonly();
        combine::Val::Scalar(self.b.ins().load(types::F32, flags, entry, 0))
    }

    /// Whether an unrolled loop's index checks go out of line (see [`Resume`]): where the
    /// pass checks signed indices, which a negative one must be normalized (an unsigned
    /// index's check is one compare already).
    pub(super) fn checks_out_of_line(&self) -> bool {
        self.bounds == Bounds::Checked
            && self.nest.index.is_some()
            && self.key.index_dtype().is_signed_integer()
    }

    /// Continues in `block`, sealed: every branch to it is emitted (a loop's header is
    /// sealed after its back edge instead, see [`Self::open_loop`]). Sealed as soon as its
    /// predecessors are known, a block passes the SSA construction's lookups straight to
    /// them instead of growing parameters that are resolved, or not, at the end.
    pub(super) fn enter(&mut self, block: Block) {
        self.b.switch_to_block(block);
        self.b.seal_block(block);
    }

    /// Continues in loop header `header` (sealed after its back edge), reading there every
    /// variable of the loops around it. Such a variable is defined outside this loop and
    /// never changed in it; read here first, every later read inside (a latch stepping an
    /// outer loop, the bad-index exit's counters) resolves to this definition when the
    /// header is sealed. Left to be found from deeper blocks, the SSA construction can
    /// commit to a parameter on a loop header before it learns that the back edge passes
    /// the same value, and never removes it.
    pub(super) fn open_loop(&mut self, header: Block) {
        self.b.switch_to_block(header);
        for &var in &self.outer_vars {
            self.b.use_var(var);
        }
    }

    /// Loads parameter `slot` (an i64) here.
    pub(super) fn param(&mut self, slot: usize) -> Value {
        // Not `readonly`: the load must stay where it is put, not be hoisted to the entry.
        let flags = MemFlagsData::trusted();
        self.b
            .ins()
            .load(types::I64, flags, self.params, (slot * 8) as i32)
    }

    /// `elems << shift`: a count of elements of `1 << shift` bytes as bytes (Cranelift
    /// keeps a shift by 0, an instruction per row where a row loop computes it).
    pub(super) fn in_bytes(&mut self, elems: Value, shift: i64) -> Value {
        match shift {
            0 => elems,
            _ => self.b.ins().ishl_imm_s(elems, shift),
        }
    }

    /// Every access's byte stride along loop `n`, loaded here.
    pub(super) fn byte_strides(&mut self, n: usize) -> Vec<Value> {
        (0..self.accesses.len())
            .map(|a| {
                let elems = self.param(self.accesses[a].strides_at + n);
                self.in_bytes(elems, self.accesses[a].shift)
            })
            .collect()
    }

    /// The address of indexed access `a`'s element `k` along its indexed dim, from `at`
    /// (its coordinate 0 there) and `stride` (its byte stride there): a shift where the
    /// variant's picks are one element apart (which x86-64 folds into the address),
    /// otherwise a multiply.
    pub(super) fn picked(&mut self, at: Value, a: usize, k: Value, stride: Value) -> Value {
        let offset = match self.variant.picks() {
            Picks::Adjacent => self.in_bytes(k, self.accesses[a].shift),
            Picks::Strided => self.b.ins().imul(k, stride),
        };
        self.b.ins().iadd(at, offset)
    }

    /// Loads what the innermost statement needs: the index bound and the byte strides
    /// along indexed dims.
    pub(super) fn enter_innermost(&mut self) {
        self.bound = self.layout.bound_at.map(|slot| self.param(slot));
        for a in 0..self.accesses.len() {
            self.accesses[a].indexed_stride = self.accesses[a].indexed_stride_at.map(|slot| {
                let elems = self.param(slot);
                self.in_bytes(elems, self.accesses[a].shift)
            });
        }
    }
}
