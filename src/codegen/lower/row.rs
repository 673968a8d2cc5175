//! The contiguous variant's innermost loop (see `Variant::Contiguous`): a row checked once
//! for an index that is constant along it, then combined whole (`memcpy`, vector or
//! scalar), or element by element, unrolled for short bodies.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, Signature, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::Variable;
use scatterjit_ir::{Combine, DType, DTypeClass, PassKind, Reduction, Source};

use super::{Lowering, Resume};
use crate::abi::{Variant, CACHE_LINE};
use crate::codegen::combine::{self, data_flags, raw_type};
use crate::codegen::half;

/// Rows of at least this many bytes are copied with `memcpy`; shorter ones inline.
const MEMCPY_FROM: i64 = 128;

/// Elements per iteration of the contiguous variant's element loop, for short bodies:
/// amortizes the loop's counter, compare and branch, and lets independent elements'
/// loads overlap.
const UNROLL: i64 = 4;

/// The streaming row copy's signature (see [`Variant::Streamed`]): `(dest: ptr, src: ptr,
/// bytes: i64)`, nothing returned.
pub(crate) fn stream_helper_signature(config: TargetFrontendConfig) -> Signature {
    let mut sig = Signature::new(config.default_call_conv);
    sig.params.push(AbiParam::new(config.pointer_type()));
    sig.params.push(AbiParam::new(config.pointer_type()));
    sig.params.push(AbiParam::new(types::I64));
    sig
}

impl Lowering<'_, '_> {
    /// The innermost loop of the contiguous variant (see
    /// [`Variant::Contiguous`]).
    pub(super) fn contiguous_inner(&mut self, ptrs: &[Value]) {
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
                let (scan, whole, each, exit) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                // Most rows that are not uniform differ at their ends: one compare spares
                // them the scan.
                let last = self.last_index(ptrs[ix]);
                let ends_equal = self.b.ins().icmp(IntCC::Equal, first, last);
                self.b.ins().brif(ends_equal, scan, &[], each, &[]);
                self.enter(scan);
                let uniform = self.row_is_uniform(ptrs[ix], first);
                self.b.ins().brif(uniform, whole, &[], each, &[]);
                self.enter(whole);
                let k = self.check_index(first);
                let bases = self.moved(ptrs, k);
                self.row(&bases);
                self.b.ins().jump(exit, &[]);
                self.enter(each);
                // The fallback for rows that are not uniform: kept short to compile fast
                // (unrolled by four, compiling the variant took about 40% more instructions).
                self.elements(ptrs, counter, 1);
                self.b.ins().jump(exit, &[]);
                self.enter(exit);
            }
            _ => match self.count_per_row() {
                Some(count) => self.mean_row(ptrs, count, counter),
                None => {
                    let unroll = self.unroll();
                    self.elements(ptrs, counter, unroll);
                }
            },
        }
    }

    /// Reads, in address order, one byte of each cache line of the line that the row at
    /// `ptrs` picks from in each access of [`ParamLayout::read_ahead`] (see
    /// [`Variant::Touched`]): from the row's position 0 along the indexed dim to the first
    /// byte of its last element, which may be followed by memory outside the tensor when
    /// the stride is wider than an element. The variant is picked only where the line is
    /// at least a KiB long, so position 0 lies inside it. Emitted before the row's own
    /// parameters are loaded, so that few values live across its loop.
    ///
    /// [`ParamLayout::read_ahead`]: crate::abi::ParamLayout::read_ahead
    /// [`Variant::Touched`]: crate::abi::Variant::Touched
    pub(super) fn read_lines_ahead(&mut self, ptrs: &[Value]) {
        let bound_at = self
            .layout
            .bound_at
            .expect("a read-ahead access is indexed");
        for (a, &base) in ptrs.iter().enumerate() {
            let Some(stride_at) = self.accesses[a].indexed_stride_at else {
                continue;
            };
            if self.layout.read_ahead >> a & 1 == 0 {
                continue;
            }
            let stride = self.param(stride_at);
            let stride = self.in_bytes(stride, self.accesses[a].shift);
            let bound = self.param(bound_at);
            let last = self.b.ins().iadd_imm_s(bound, -1);
            let last = self.b.ins().imul(last, stride);
            let last = self.b.ins().iadd(base, last);
            let (touch, exit) = (self.b.create_block(), self.b.create_block());
            let at = self.b.declare_var(self.ptr);
            self.b.def_var(at, base);
            self.b.ins().jump(touch, &[]);
            self.open_loop(touch);
            // Plain loads whose values go unused: nothing at this optimization level removes
            // a load.
            let p = self.b.use_var(at);
            self.b.ins().load(types::I8, data_flags(), p, 0);
            let next = self.b.ins().iadd_imm_s(p, CACHE_LINE);
            self.b.def_var(at, next);
            let more = self.b.ins().icmp(IntCC::UnsignedLessThan, next, last);
            self.b.ins().brif(more, touch, &[], exit, &[]);
            self.b.seal_block(touch);
            self.enter(exit);
            self.b.ins().load(types::I8, data_flags(), last, 0);
        }
    }

    /// `mean`'s init or finish of a row that shares one count (see
    /// [`Self::count_per_row`]): init zeroes the count once and widens the row (a copy
    /// where the sum has the element's own float type, f16 and bf16 eight at a time);
    /// finish reads the count once, leaves a row no update reached as it is, and divides
    /// the others, 16 bytes of sums at a time for floats.
    fn mean_row(&mut self, ptrs: &[Value], count: usize, counter: Variable) {
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let dtype = self.key.dtype();
        let shift = dtype.size().trailing_zeros() as i64;
        let zero = self.b.ins().iconst(types::I64, 0);
        let own_float = |acc| {
            dtype.class() == DTypeClass::Float
                && combine::acc_type(acc).bytes() as usize == dtype.size()
        };
        let dest = self
            .nest
            .dest
            .as_ref()
            .map(|d| self.access_of(d.operand))
            .expect("mean's nests write");
        let source = match &self.nest.source {
            Some(Source::Read(src)) => Some(self.access_of(src.operand)),
            _ => None,
        };
        // f16 and bf16 sum in f32: eight elements at a time are two f32 vectors of sums.
        let halves = half::brain_of(dtype).filter(|_| self.machine.vectors);
        match self.nest.combine {
            Combine::Start(acc) => {
                self.b.ins().store(data_flags(), zero, ptrs[count], 0);
                match (source, halves) {
                    (Some(src), _) if own_float(acc) => {
                        let bytes = self.in_bytes(dim, shift);
                        self.copy_row(ptrs[dest], ptrs[src], bytes);
                    }
                    (Some(src), Some(brain)) => {
                        let start = self.for_range(zero, dim, 8, |s, i| {
                            let at = s.at_element(ptrs, i);
                            let bits = s.b.ins().load(types::I16X8, data_flags(), at[src], 0);
                            let [lo, hi] = half::widen_halves(s.b, brain, bits);
                            s.b.ins().store(data_flags(), lo, at[dest], 0);
                            s.b.ins().store(data_flags(), hi, at[dest], 16);
                        });
                        self.for_range(start, dim, 1, |s, i| {
                            let at = s.at_element(ptrs, i);
                            s.combine(&at, None);
                        });
                    }
                    _ => {
                        let unroll = self.unroll();
                        self.elements(ptrs, counter, unroll);
                    }
                }
            }
            Combine::Finish { acc, with_init } => {
                let src = source.expect("finish reads the sums");
                let (n, exit) = self.divisor(ptrs[count], with_init);
                let mut start = zero;
                if self.machine.vectors && own_float(acc) {
                    let scalar = combine::acc_type(acc);
                    let vector = scalar
                        .by(16 / scalar.bytes())
                        .expect("16-byte vectors exist");
                    let lanes = i64::from(vector.lane_count());
                    // Lane by lane the same IEEE division as the scalar form.
                    let nf = self.b.ins().fcvt_from_sint(scalar, n);
                    let nv = self.b.ins().splat(vector, nf);
                    start = self.for_range(zero, dim, lanes, |s, i| {
                        let at = s.at_element(ptrs, i);
                        let sum = s.b.ins().load(vector, data_flags(), at[src], 0);
                        let q = s.b.ins().fdiv(sum, nv);
                        s.b.ins().store(data_flags(), q, at[dest], 0);
                    });
                } else if let Some(brain) = halves {
                    // The same division in f32 lanes, rounded as the scalar form rounds.
                    let nf = self.b.ins().fcvt_from_sint(types::F32, n);
                    let nv = self.b.ins().splat(types::F32X4, nf);
                    start = self.for_range(zero, dim, 8, |s, i| {
                        let at = s.at_element(ptrs, i);
                        let quotients = [0, 16].map(|offset| {
                            let sum = s.b.ins().load(types::F32X4, data_flags(), at[src], offset);
                            s.b.ins().fdiv(sum, nv)
                        });
                        let bits = half::narrow_halves(s.b, brain, quotients);
                        s.b.ins().store(data_flags(), bits, at[dest], 0);
                    });
                }
                self.for_range(start, dim, 1, |s, i| {
                    let at = s.at_element(ptrs, i);
                    let ty = combine::acc_type(acc);
                    let sum = s.b.ins().load(ty, data_flags(), at[src], 0);
                    let v = combine::finish(s.b, dtype, acc, sum, n);
                    combine::store(s.b, dtype, v, at[dest]);
                });
                self.b.ins().jump(exit, &[]);
                self.enter(exit);
            }
            // The apply nest's per-row count is bumped by `Self::row`.
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
                Some(stride) => self.picked(ptrs[a], a, k, stride),
                None => ptrs[a],
            })
            .collect()
    }

    /// The addresses of element `i` of the row starting at `ptrs`.
    fn at_element(&mut self, ptrs: &[Value], i: Value) -> Vec<Value> {
        (0..ptrs.len())
            .map(|a| {
                if self.accesses[a].uses_inner {
                    let offset = self.in_bytes(i, self.accesses[a].shift);
                    self.b.ins().iadd(ptrs[a], offset)
                } else {
                    ptrs[a]
                }
            })
            .collect()
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
            // A negative index leaves for the remainder loop below, which takes it from
            // that element on (see `Resume`).
            let from = self.b.declare_var(types::I64);
            let tail = self.b.create_block();
            let out_of_line = self.checks_out_of_line();
            let unrolled_end = self.for_range(zero, dim, unroll, |s, i| {
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
                    s.resume = out_of_line.then_some(Resume {
                        block: tail,
                        position: from,
                        counter: i,
                        offset: u,
                    });
                    s.body(&at_u);
                    s.resume = None;
                }
            });
            self.b.def_var(from, unrolled_end);
            self.b.ins().jump(tail, &[]);
            self.enter(tail);
            rest = self.b.use_var(from);
        }
        self.for_range(rest, dim, 1, |s, i| {
            s.b.def_var(counter, i);
            let at = s.at_element(ptrs, i);
            s.body(&at);
        });
    }

    /// Elements per iteration of [`Self::elements`]: [`UNROLL`] when the body is a move or a
    /// reduction of integers, bools or real floats, else 1, which keeps long bodies
    /// (complex, mean) from growing compile time. f16 and bf16 reductions (about 30
    /// instructions an element, most of them the rounding back to 16 bits) are unrolled:
    /// 3-15% faster than one at a time along a last axis (BENCHMARKS.md).
    fn unroll(&self) -> i64 {
        let dtype = self.key.dtype();
        let short = match self.nest.combine {
            Combine::Assign => true,
            Combine::Reduce(_) => match dtype.class() {
                DTypeClass::Float => true,
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

    /// The raw last index of the row at `at` (rows are never empty: a pass with an empty
    /// dim returns before its loops).
    fn last_index(&mut self, at: Value) -> Value {
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let shift = self.key.index_dtype().size().trailing_zeros() as i64;
        let last = self.b.ins().iadd_imm_s(dim, -1);
        let offset = self.in_bytes(last, shift);
        let p = self.b.ins().iadd(at, offset);
        self.load_index(p)
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
                let offset = s.in_bytes(i, shift);
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
            let offset = s.in_bytes(i, shift);
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
    /// for copies, 16-byte stores of an init pass's identity, 16-byte vector combines where
    /// the reduction has them, then element by element for the rest; a per-row count (see
    /// [`Self::count_per_row`]) is bumped once.
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
        let accumulates = matches!(self.nest.combine, Combine::Accumulate(_));
        if let Some(count) = self.count_per_row().filter(|_| accumulates) {
            // Rows are never empty: a pass with an empty dim returns before its loops.
            self.bump_count(bases[count]);
        }
        if let (Combine::Assign, Some(d), Some(src)) = (self.nest.combine, dest, source) {
            if walks(self, dest) && walks(self, source) {
                let bytes = self.in_bytes(dim, shift);
                self.copy_row(bases[d], bases[src], bytes);
                return;
            }
        }
        let mut start = zero;
        // An init pass's identity (`mean` starts its sums in passes without an index,
        // which never come here).
        if let (Combine::Assign, Some(d), Some(Source::Identity(r))) =
            (self.nest.combine, dest, &self.nest.source)
        {
            if walks(self, dest) {
                self.fill_row_once(bases, d, *r);
                return;
            }
        }
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

    /// An init pass's row at `bases` (its destination access `d`) filled with the identity
    /// of `reduction`, unless it is the row this call filled last: a run of updates into
    /// one destination row (a sorted index, as PyTorch Geometric's batch vector for pooling
    /// is) fills it once. Every row of a call has the same length and the pass writes
    /// nothing but the identity, so a row at the same address holds it still.
    fn fill_row_once(&mut self, bases: &[Value], d: usize, reduction: Reduction) {
        let dest = bases[d];
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let last = self
            .last_filled
            .expect("declared for init passes that write rows");
        let (fill, exit) = (self.b.create_block(), self.b.create_block());
        let previous = self.b.use_var(last);
        let again = self.b.ins().icmp(IntCC::Equal, previous, dest);
        self.b.ins().brif(again, exit, &[], fill, &[]);
        self.enter(fill);
        let bytes = self.identity_bytes(reduction);
        let start = self.fill_row(dest, &bytes);
        self.for_range(start, dim, 1, |s, i| {
            let at = s.at_element(bases, i);
            s.combine(&at, None);
        });
        self.b.def_var(last, dest);
        self.b.ins().jump(exit, &[]);
        self.enter(exit);
    }

    /// Stores the element `bytes` (little-endian) at each position of the row at `base` that
    /// whole 16-byte vectors cover, where the machine has vectors and the element fits
    /// several times in one; returns the first position left for the element loop (0
    /// without vectors). An init pass's identity: one store per 16 bytes instead of one
    /// per element, two per iteration (a loop of one store behind `fill_row_once`'s branch
    /// ran the GNN init 1.1-1.2x slower than before the branch; BENCHMARKS.md).
    fn fill_row(&mut self, base: Value, bytes: &[u8]) -> Value {
        let zero = self.b.ins().iconst(types::I64, 0);
        let size = bytes.len() as i64;
        if !self.machine.vectors || size > 8 {
            return zero;
        }
        let dim = self.inner_dim.expect("set on entering the innermost loop");
        let shift = size.trailing_zeros() as i64;
        let lanes = 16 / size;
        let element = self.constant(bytes);
        let vector = raw_type(bytes.len())
            .by(lanes as u32)
            .expect("16-byte vectors exist");
        let fill = self.b.ins().splat(vector, element);
        let start = self.for_range(zero, dim, 2 * lanes, |s, i| {
            let offset = s.in_bytes(i, shift);
            let at = s.b.ins().iadd(base, offset);
            s.b.ins().store(data_flags(), fill, at, 0);
            s.b.ins().store(data_flags(), fill, at, 16);
        });
        self.for_range(start, dim, lanes, |s, i| {
            let offset = s.in_bytes(i, shift);
            let at = s.b.ins().iadd(base, offset);
            s.b.ins().store(data_flags(), fill, at, 0);
        })
    }

    /// Copies `bytes` bytes from `src` to `dest` (distinct tensors): `memcpy` for long rows;
    /// inline for short ones, in chunks of 16 bytes (8 on a machine without vectors) and a
    /// last chunk that ends at the row's end, overlapping the one before; below a chunk,
    /// two moves of the widest power of two that fits, the second ending at the row's end.
    /// Every row of a call has the same length, so the branches on it are predicted. (A
    /// Gather of 100,000 u8 rows of 24 bytes: 60 instructions a row with a 16-byte loop and
    /// then moves of 8, 4, 2 and 1 bytes, 46 with these; callgrind, BENCHMARKS.md.)
    fn copy_row(&mut self, dest: Value, src: Value, bytes: Value) {
        if let Some(id) = self
            .machine
            .stream
            .filter(|_| self.variant == Variant::Streamed)
        {
            // Rows long enough that a call per row is nothing beside them (`bind` picks
            // the variant for them; tests lower that to any row).
            let helper = self.import_helper(id, stream_helper_signature(self.machine.config));
            self.b.ins().call(helper, &[dest, src, bytes]);
            return;
        }
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
        self.enter(long);
        self.b.call_memcpy(self.machine.config, dest, src, bytes);
        self.b.ins().jump(exit, &[]);
        self.enter(short);
        let chunk = if self.machine.vectors {
            types::I8X16
        } else {
            types::I64
        };
        let zero = self.b.ins().iconst(types::I64, 0);
        let narrower = [types::I64, types::I32, types::I16, types::I8];
        let widths = std::iter::once(chunk)
            .chain(narrower.into_iter().filter(|ty| ty.bytes() < chunk.bytes()));
        for ty in widths {
            let width = i64::from(ty.bytes());
            let (fits, next) = (self.b.create_block(), self.b.create_block());
            let at_least = self
                .b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, bytes, width);
            self.b.ins().brif(at_least, fits, &[], next, &[]);
            self.enter(fits);
            let last = self.b.ins().iadd_imm_s(bytes, -width);
            if ty == chunk {
                self.copy_chunks(ty, dest, src, bytes);
            } else if ty != types::I8 {
                self.move_bytes(ty, dest, src, zero);
            }
            // The move that ends at the row's end (a one-byte row's only move).
            self.move_bytes(ty, dest, src, last);
            self.b.ins().jump(exit, &[]);
            self.enter(next);
        }
        // No bytes.
        self.b.ins().jump(exit, &[]);
        self.enter(exit);
    }

    /// The chunks of [`Self::copy_row`] for rows of at least one chunk, but the one that
    /// ends at the row's end: up to four chunks without a loop (the first and last two,
    /// which may overlap), a loop from 0 past that.
    fn copy_chunks(&mut self, ty: types::Type, dest: Value, src: Value, bytes: Value) {
        let width = i64::from(ty.bytes());
        let zero = self.b.ins().iconst(types::I64, 0);
        let (few, pair, many, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let is_few = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThanOrEqual, bytes, 4 * width);
        self.b.ins().brif(is_few, few, &[], many, &[]);
        self.enter(few);
        self.move_bytes(ty, dest, src, zero);
        let is_pair = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThan, bytes, 2 * width);
        self.b.ins().brif(is_pair, pair, &[], done, &[]);
        self.enter(pair);
        // Over two chunks: the second, and the one before the last.
        let second = self.b.ins().iconst(types::I64, width);
        self.move_bytes(ty, dest, src, second);
        let before_last = self.b.ins().iadd_imm_s(bytes, -2 * width);
        self.move_bytes(ty, dest, src, before_last);
        self.b.ins().jump(done, &[]);
        self.enter(many);
        // Chunks at 0, width, ... below the last; the last one may overlap them.
        let end = self.b.ins().iadd_imm_s(bytes, -1);
        self.for_range(zero, end, width, |s, i| s.move_bytes(ty, dest, src, i));
        self.b.ins().jump(done, &[]);
        self.enter(done);
    }

    /// Moves one `ty` from `src + at` to `dest + at`.
    fn move_bytes(&mut self, ty: types::Type, dest: Value, src: Value, at: Value) {
        let from = self.b.ins().iadd(src, at);
        let to = self.b.ins().iadd(dest, at);
        let v = self.b.ins().load(ty, data_flags(), from, 0);
        self.b.ins().store(data_flags(), v, to, 0);
    }
}
