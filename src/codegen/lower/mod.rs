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
//! No calls and no per-element dispatch: every type and combine is fixed at build time.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, Variable};
use scatterjit_ir::{
    Combine, Coord, DType, DTypeClass, KernelKey, LoopNest, Operand, PassKind, Reduction, Source,
};

use super::combine::{self, data_flags, raw_type};
use crate::abi::{self, ParamLayout, Variant, STATUS_BAD_INDEX, STATUS_OK};

/// Rows of at least this many bytes are copied with `memcpy`; shorter ones inline.
const MEMCPY_FROM: i64 = 128;

/// What the lowering may emit on the machine it compiles for. Everything else it emits is
/// target-neutral CLIF: integer and float scalars, loads and stores of the target's pointer
/// type, and calls to `memcpy`.
#[derive(Clone, Copy)]
pub(crate) struct Machine {
    /// The target's pointer type and calling convention.
    pub(crate) config: TargetFrontendConfig,
    /// Whether the target has 16-byte vector registers: without them, whole-row combines and
    /// the uniform-row test run element by element, and short rows are copied 8 bytes at a
    /// time.
    pub(crate) vectors: bool,
}

/// Elements per iteration of the contiguous variant's element loop, for short bodies:
/// amortizes the loop's counter, compare and branch, and lets independent elements'
/// loads overlap.
const UNROLL: i64 = 4;

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
    bad: Block,
    variant: Variant,
    machine: Machine,
    listed: bool,
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
) {
    let ptr = machine.config.pointer_type();
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
        bad,
        variant,
        machine,
        listed,
    };
    let bases: Vec<Value> = lowering.accesses.iter().map(|a| a.base).collect();
    if layout.depth == 0 {
        lowering.enter_innermost();
    }
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
        if n == self.depth {
            self.body(ptrs);
            return;
        }
        if n == 0 && self.listed {
            self.listed_level(ptrs);
            return;
        }
        let innermost = n + 1 == self.depth;
        if innermost {
            self.enter_innermost();
            if self.variant.rows() {
                self.inner_dim = Some(self.param(n));
                self.contiguous_inner(ptrs);
                return;
            }
        }
        // The innermost loop keeps its dim and strides in registers; outer loops reload
        // theirs from the parameter block at each step.
        let steady = innermost.then(|| (self.param(n), self.byte_strides(n)));
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

        let (dim, strides) = match &steady {
            Some((dim, strides)) => (*dim, strides.clone()),
            None => (self.param(n), self.byte_strides(n)),
        };
        let i = self.b.use_var(counter);
        let next = self.b.ins().iadd_imm_s(i, 1);
        self.b.def_var(counter, next);
        for (a, &var) in ptr_vars.iter().enumerate() {
            let p = self.b.use_var(var);
            let stepped = self.b.ins().iadd(p, strides[a]);
            self.b.def_var(var, stepped);
        }
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, next, dim);
        self.b.ins().brif(more, header, &[], exit, &[]);
        self.b.switch_to_block(exit);
    }

    /// The outermost loop of a listed pass: `j` counts to `dim_0` and the loop's position
    /// is `list[j]`, each access's pointer recomputed from its base at every step.
    fn listed_level(&mut self, ptrs: &[Value]) {
        let counter = self.b.declare_var(types::I64);
        self.counters.push(counter);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(counter, zero);
        let header = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let j = self.b.use_var(counter);
        let list = self.param(self.layout.list_at);
        let offset = self.b.ins().ishl_imm_s(j, 3);
        let at = self.b.ins().iadd(list, offset);
        // The list is the engine's own buffer: aligned and valid for `dim_0` entries.
        let position = self
            .b
            .ins()
            .load(types::I64, MemFlagsData::trusted(), at, 0);
        let strides = self.byte_strides(0);
        let current: Vec<Value> = ptrs
            .iter()
            .zip(strides)
            .map(|(&p, stride)| {
                let step = self.b.ins().imul(position, stride);
                self.b.ins().iadd(p, step)
            })
            .collect();
        if self.depth == 1 {
            self.enter_innermost();
            self.body(&current);
        } else {
            self.level(1, &current);
        }
        let dim = self.param(0);
        let j = self.b.use_var(counter);
        let next = self.b.ins().iadd_imm_s(j, 1);
        self.b.def_var(counter, next);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, next, dim);
        self.b.ins().brif(more, header, &[], exit, &[]);
        self.b.switch_to_block(exit);
    }

    /// Loads parameter `slot` (an i64) here.
    fn param(&mut self, slot: usize) -> Value {
        // Not `readonly`: the load must stay where it is put, not be hoisted to the entry.
        let flags = MemFlagsData::trusted();
        self.b
            .ins()
            .load(types::I64, flags, self.params, (slot * 8) as i32)
    }

    /// Every access's byte stride along loop `n`, loaded here.
    fn byte_strides(&mut self, n: usize) -> Vec<Value> {
        (0..self.accesses.len())
            .map(|a| {
                let elems = self.param(self.accesses[a].strides_at + n);
                self.b.ins().ishl_imm_s(elems, self.accesses[a].shift)
            })
            .collect()
    }

    /// Loads what the innermost statement needs: the index bound and the byte strides
    /// along indexed dims.
    fn enter_innermost(&mut self) {
        self.bound = self.layout.bound_at.map(|slot| self.param(slot));
        for a in 0..self.accesses.len() {
            self.accesses[a].indexed_stride = self.accesses[a].indexed_stride_at.map(|slot| {
                let elems = self.param(slot);
                self.b.ins().ishl_imm_s(elems, self.accesses[a].shift)
            });
        }
    }

    /// The innermost loop of the contiguous variant (see [`Variant::Contiguous`]).
    fn contiguous_inner(&mut self, ptrs: &[Value]) {
        let counter = self.b.declare_var(types::I64);
        self.counters.push(counter);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(counter, zero);
        let index = self
            .nest
            .index
            .as_ref()
            .map(|index| self.access_of(index.operand));
        match index {
            // The index depends only on outer loops (Gather's trailing dims): read and
            // check it once, then the row is a plain combine.
            Some(ix) if !self.accesses[ix].uses_inner => {
                let raw = self.load_index(ptrs[ix]);
                let k = self.check_index(raw);
                // A check pass has nothing to do along the row.
                if self.nest.dest.is_some() {
                    let bases = self.moved(ptrs, k);
                    self.row(&bases);
                }
            }
            // The index may be constant along the row (GNN message passing repeats one
            // destination across the features): if it is, combine whole rows.
            Some(ix) if self.rows_can_be_uniform() => {
                let first = self.load_index(ptrs[ix]);
                let uniform = self.row_is_uniform(ptrs[ix], first);
                let (whole, each, exit) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                self.b.ins().brif(uniform, whole, &[], each, &[]);
                self.b.switch_to_block(whole);
                let k = self.check_index(first);
                let bases = self.moved(ptrs, k);
                self.row(&bases);
                self.b.ins().jump(exit, &[]);
                self.b.switch_to_block(each);
                // The fallback for rows that are not uniform: kept short to compile fast.
                self.elements(ptrs, counter, 1);
                self.b.ins().jump(exit, &[]);
                self.b.switch_to_block(exit);
            }
            _ => {
                let unroll = self.unroll();
                self.elements(ptrs, counter, unroll);
            }
        }
    }

    /// Whether a row whose indices are all equal can be combined as a whole: the index
    /// walks the row, and every access moved by the index walks it too.
    fn rows_can_be_uniform(&self) -> bool {
        self.nest.dest.is_some()
            && self
                .accesses
                .iter()
                .all(|a| a.indexed_stride_at.is_none() || a.uses_inner)
    }

    /// `ptrs` with every indexed access moved to coordinate `k` along its indexed dim.
    fn moved(&mut self, ptrs: &[Value], k: Value) -> Vec<Value> {
        (0..ptrs.len())
            .map(|a| match self.accesses[a].indexed_stride {
                Some(stride) => {
                    let offset = self.b.ins().imul(k, stride);
                    self.b.ins().iadd(ptrs[a], offset)
                }
                None => ptrs[a],
            })
            .collect()
    }

    /// The addresses of element `i` of the row starting at `ptrs`.
    fn at_element(&mut self, ptrs: &[Value], i: Value) -> Vec<Value> {
        (0..ptrs.len())
            .map(|a| {
                if self.accesses[a].uses_inner {
                    let offset = self.b.ins().ishl_imm_s(i, self.accesses[a].shift);
                    self.b.ins().iadd(ptrs[a], offset)
                } else {
                    ptrs[a]
                }
            })
            .collect()
    }

    /// Emits `i = start; while i + step <= end { body(i); i += step }` as one test in
    /// front and a bottom-tested loop (one taken branch per iteration); returns the
    /// final `i`.
    fn for_range(
        &mut self,
        start: Value,
        end: Value,
        step: i64,
        mut body: impl FnMut(&mut Self, Value),
    ) -> Value {
        let var = self.b.declare_var(types::I64);
        self.b.def_var(var, start);
        let (work, exit) = (self.b.create_block(), self.b.create_block());
        // `i + step <= end` as `i <= end - step`: one compare per iteration, no add. Ends
        // are dims or byte counts, far from i64's bounds.
        let last = self.b.ins().iadd_imm_s(end, -step);
        let any = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, start, last);
        self.b.ins().brif(any, work, &[], exit, &[]);
        self.b.switch_to_block(work);
        let i = self.b.use_var(var);
        body(self, i);
        let i = self.b.use_var(var);
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.def_var(var, next);
        let more = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, next, last);
        self.b.ins().brif(more, work, &[], exit, &[]);
        self.b.switch_to_block(exit);
        self.b.use_var(var)
    }

    /// The row element by element: the full body (index read and checked) at each `i`,
    /// `unroll` elements per iteration, then one at a time for the rest.
    fn elements(&mut self, ptrs: &[Value], counter: Variable, unroll: i64) {
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let zero = self.b.ins().iconst(types::I64, 0);
        let mut rest = zero;
        if unroll > 1 {
            // Only the check pass's counters name the bad index; other passes report
            // somewhere in the row and the caller asks the check for the first one, so
            // their counter is set once per iteration.
            let exact = self.nest.pass == PassKind::Check;
            rest = self.for_range(zero, dim, unroll, |s, i| {
                s.b.def_var(counter, i);
                let at = s.at_element(ptrs, i);
                for u in 0..unroll {
                    if exact && u > 0 {
                        let iu = s.b.ins().iadd_imm_s(i, u);
                        s.b.def_var(counter, iu);
                    }
                    // Constant offsets fold into the loads' and stores' addressing.
                    let at_u: Vec<Value> = (0..at.len())
                        .map(|a| match s.accesses[a].uses_inner {
                            true if u > 0 => s.b.ins().iadd_imm_s(at[a], u << s.accesses[a].shift),
                            _ => at[a],
                        })
                        .collect();
                    s.body(&at_u);
                }
            });
        }
        self.for_range(rest, dim, 1, |s, i| {
            s.b.def_var(counter, i);
            let at = s.at_element(ptrs, i);
            s.body(&at);
        });
    }

    /// Elements per iteration of [`Self::elements`]: [`UNROLL`] when the body is a few
    /// instructions (a move, or an integer, bool, f32 or f64 reduction), else 1, which keeps
    /// long bodies (f16/bf16 arithmetic, complex, mean) from growing compile time.
    fn unroll(&self) -> i64 {
        let dtype = self.key.dtype();
        let short = match self.nest.combine {
            Combine::Assign => true,
            Combine::Reduce(_) => match dtype.class() {
                DTypeClass::Float => matches!(dtype.size(), 4 | 8),
                DTypeClass::SignedInt | DTypeClass::UnsignedInt | DTypeClass::Bool => true,
                DTypeClass::Complex | DTypeClass::String => false,
            },
            // A widening move, unless the element is f16/bf16.
            Combine::Start(_) => !matches!(dtype, DType::F16 | DType::BF16),
            // A divide and a branch.
            Combine::Accumulate(_) | Combine::Finish { .. } => false,
        };
        if short {
            UNROLL
        } else {
            1
        }
    }

    /// Whether every index of the row at `at` equals `first` (raw bits): 16 bytes at a
    /// time where the machine has vectors, then element by element. Returns an I8 truth
    /// value.
    fn row_is_uniform(&mut self, at: Value, first: Value) -> Value {
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let size = self.key.index_dtype().size() as i64;
        let raw = raw_type(size as usize);
        let vectors = self.machine.vectors.then(|| {
            let lanes = 16 / size;
            let vector = raw.by(lanes as u32).expect("16-byte vectors exist");
            let pattern = self.b.ins().splat(vector, first);
            let zero_v = self.b.ins().bxor(pattern, pattern);
            let diff_v = self.b.declare_var(vector);
            self.b.def_var(diff_v, zero_v);
            (lanes, vector, pattern, diff_v)
        });
        let zero = self.b.ins().iconst(types::I64, 0);
        let shift = size.trailing_zeros() as i64;
        let end = match vectors {
            Some((lanes, vector, pattern, diff_v)) => self.for_range(zero, dim, lanes, |s, i| {
                let offset = s.b.ins().ishl_imm_s(i, shift);
                let p = s.b.ins().iadd(at, offset);
                let v = s.b.ins().load(vector, data_flags(), p, 0);
                let x = s.b.ins().bxor(v, pattern);
                let d = s.b.use_var(diff_v);
                let d = s.b.ins().bor(d, x);
                s.b.def_var(diff_v, d);
            }),
            None => zero,
        };
        let zero_s = self.b.ins().iconst(raw, 0);
        let diff = self.b.declare_var(raw);
        self.b.def_var(diff, zero_s);
        self.for_range(end, dim, 1, |s, i| {
            let offset = s.b.ins().ishl_imm_s(i, shift);
            let p = s.b.ins().iadd(at, offset);
            let v = s.b.ins().load(raw, data_flags(), p, 0);
            let x = s.b.ins().bxor(v, first);
            let d = s.b.use_var(diff);
            let d = s.b.ins().bor(d, x);
            s.b.def_var(diff, d);
        });
        let any_v = vectors.map(|(_, _, _, diff_v)| {
            let d_v = self.b.use_var(diff_v);
            self.b.ins().vany_true(d_v)
        });
        let d = self.b.use_var(diff);
        let any_s = self.b.ins().icmp_imm_s(IntCC::NotEqual, d, 0);
        let any = match any_v {
            Some(any_v) => self.b.ins().bor(any_v, any_s),
            None => any_s,
        };
        self.b.ins().icmp_imm_s(IntCC::Equal, any, 0)
    }

    /// A whole row at `bases` (indexed accesses already moved): `memcpy` or 16-byte moves
    /// for copies, 16-byte vector combines where the reduction has them, then element by
    /// element for the rest.
    fn row(&mut self, bases: &[Value]) {
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let dtype = self.key.dtype();
        let shift = dtype.size().trailing_zeros() as i64;
        let zero = self.b.ins().iconst(types::I64, 0);
        let dest = self.nest.dest.as_ref().map(|d| self.access_of(d.operand));
        let source = match &self.nest.source {
            Some(Source::Read(src)) => Some(self.access_of(src.operand)),
            _ => None,
        };
        let walks = |s: &Self, a: Option<usize>| a.is_some_and(|a| s.accesses[a].uses_inner);
        if let (Combine::Assign, Some(d), Some(src)) = (self.nest.combine, dest, source) {
            if walks(self, dest) && walks(self, source) {
                let bytes = self.b.ins().ishl_imm_s(dim, shift);
                self.copy_row(bases[d], bases[src], bytes);
                return;
            }
        }
        let mut start = zero;
        if let Some(lanes) = self.vector_lanes() {
            if walks(self, dest) {
                // A still (broadcast) source is one value for the whole row: load it once.
                let splat = match source {
                    Some(src) if !walks(self, Some(src)) => Some(self.splat_source(bases[src])),
                    _ => None,
                };
                start = self.for_range(zero, dim, lanes, |s, i| {
                    let at = s.at_element(bases, i);
                    s.combine_vector(&at, splat);
                });
            }
        }
        self.for_range(start, dim, 1, |s, i| {
            let at = s.at_element(bases, i);
            s.combine(&at, None);
        });
    }

    /// Copies `bytes` bytes from `src` to `dest` (distinct tensors): `memcpy` for long
    /// rows, inline 16-byte moves (8-byte ones on a machine without vectors) and a byte
    /// tail for short ones.
    fn copy_row(&mut self, dest: Value, src: Value, bytes: Value) {
        let (long, short, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let is_long = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, bytes, MEMCPY_FROM);
        self.b.ins().brif(is_long, long, &[], short, &[]);
        self.b.switch_to_block(long);
        self.b.call_memcpy(self.machine.config, dest, src, bytes);
        self.b.ins().jump(exit, &[]);
        self.b.switch_to_block(short);
        let zero = self.b.ins().iconst(types::I64, 0);
        let chunk = if self.machine.vectors {
            types::I8X16
        } else {
            types::I64
        };
        let end = self.for_range(zero, bytes, i64::from(chunk.bytes()), |s, i| {
            let from = s.b.ins().iadd(src, i);
            let to = s.b.ins().iadd(dest, i);
            let v = s.b.ins().load(chunk, data_flags(), from, 0);
            s.b.ins().store(data_flags(), v, to, 0);
        });
        self.for_range(end, bytes, 1, |s, i| {
            let from = s.b.ins().iadd(src, i);
            let to = s.b.ins().iadd(dest, i);
            let v = s.b.ins().load(types::I8, data_flags(), from, 0);
            s.b.ins().store(data_flags(), v, to, 0);
        });
        self.b.ins().jump(exit, &[]);
        self.b.switch_to_block(exit);
    }

    /// Elements per 16-byte vector when the machine has vectors and this nest's combine has a
    /// vector form for its dtype: float add/mul/max/min (f32, f64), integer add and bool or/and (any width),
    /// integer max/min and mul up to 32 bits, and `mean`'s accumulate where the sum has
    /// the element's own type (f32, f64).
    fn vector_lanes(&self) -> Option<i64> {
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
    fn splat_source(&mut self, at: Value) -> Value {
        let (scalar, vector) = self.vector_types();
        let x = self.b.ins().load(scalar, data_flags(), at, 0);
        self.b.ins().splat(vector, x)
    }

    /// The vector form of [`Self::combine`] on 16 bytes of elements at `at` (indexed
    /// accesses already moved), the source read there or given as `splat`; `mean`'s
    /// counts advance by one per element.
    fn combine_vector(&mut self, at: &[Value], splat: Option<Value>) {
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
        if let Some(count) = &self.nest.count {
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
            let at = self.address(ptrs, index.operand, None);
            let raw = self.load_index(at);
            self.check_index(raw)
        });
        self.combine(ptrs, k);
    }

    /// Loads the raw index at `at` (in the index dtype's own width).
    fn load_index(&mut self, at: Value) -> Value {
        let size = self.key.index_dtype().size();
        self.b.ins().load(raw_type(size), data_flags(), at, 0)
    }

    /// Widens a raw index to i64, normalizes it and branches to `bad` unless it is in
    /// `[0, s)`; returns the normalized index.
    fn check_index(&mut self, raw: Value) -> Value {
        let index_dtype = self.key.index_dtype();
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
    }

    /// `dest = combine(dest, source)` at the accesses' addresses `ptrs`, each moved along
    /// its indexed dim by `k` (or already moved, when `k` is `None`).
    fn combine(&mut self, ptrs: &[Value], k: Option<Value>) {
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
            (Combine::Start(acc), Some(source)) => {
                let sum = match source {
                    Source::Read(src) => {
                        let src_ptr = self.address(ptrs, src.operand, k);
                        let v = combine::load(self.b, dtype, src_ptr);
                        combine::widen(self.b, dtype, acc, v)
                    }
                    Source::Identity(_) => self.constant(&acc.identity_bytes()),
                };
                self.b.ins().store(data_flags(), sum, dest_ptr, 0);
                let count_ptr = self.address(ptrs, Operand::Count, k);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.ins().store(data_flags(), zero, count_ptr, 0);
            }
            (Combine::Finish { acc, with_init }, Some(Source::Read(src))) => {
                let count_ptr = self.address(ptrs, Operand::Count, k);
                let count = self.b.ins().load(types::I64, data_flags(), count_ptr, 0);
                // Elements no update reached keep their value (and are never divided by 0).
                let (divide, next) = (self.b.create_block(), self.b.create_block());
                let reached = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, count, 0);
                self.b.ins().brif(reached, divide, &[], next, &[]);
                self.b.switch_to_block(divide);
                let n = match with_init {
                    true => self.b.ins().iadd_imm_s(count, 1),
                    false => count,
                };
                let src_ptr = self.address(ptrs, src.operand, k);
                let sum = self
                    .b
                    .ins()
                    .load(combine::acc_type(acc), data_flags(), src_ptr, 0);
                let v = combine::finish(self.b, dtype, acc, sum, n);
                combine::store(self.b, dtype, v, dest_ptr);
                self.b.ins().jump(next, &[]);
                self.b.switch_to_block(next);
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
