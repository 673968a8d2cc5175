//! Prefetching the rows an index picks, a few rows ahead. A row combined whole (a Gather
//! row, a GNN message row) lands at a random place of a large tensor; its lines miss the
//! cache, and the out-of-order core cannot run far enough ahead through a whole row's
//! work to start the next rows' misses itself. So the loop just outside the row reads the
//! index of the row [`ROWS_AHEAD`] steps on and asks the caches for the lines it picks,
//! and for the row of the source it reads there. Cranelift has no prefetch instruction:
//! the code calls the host's helper ([`super::Machine::prefetch`], in this process only),
//! once per row and prefetched access, where the row spans a cache line and the tensor it
//! picks from is large (the host's settings, `jit::set_prefetch_from`: by default a third
//! of the last-level cache for a tensor read, the second-level cache for a destination).
//!
//! The prefetch changes no result: it reads an index that the check has covered or will
//! (an out-of-range one is skipped) and requests lines without reading them.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, ExtFuncData, ExternalName, FuncRef, InstBuilder, MemFlagsData, Signature,
    UserExternalName, Value,
};
use cranelift_codegen::isa::TargetFrontendConfig;

use scatterjit_ir::Source;

use super::Lowering;
use crate::abi::{Variant, CACHE_LINE};

/// How many rows ahead to prefetch: far enough that the lines arrive before the row is
/// combined, near enough that they are still in the first-level cache then. In standalone
/// probes of random 256-byte GNN rows and 1 KiB embedding rows, 4 to 32 rows ahead gained
/// alike (BENCHMARKS.md).
pub(super) const ROWS_AHEAD: i64 = 8;

/// The most bytes of a row prefetched: the hardware's own prefetcher follows a long row
/// once its first lines are read, and more would push the current rows out of the cache.
const MOST_BYTES: i64 = 4096;

/// The slot (8 bytes each) of the host's thresholds object that holds the smallest extent
/// of a tensor whose picks a pass reads and prefetches (see `jit::set_prefetch_from`).
pub(crate) const FROM_SOURCE: usize = 0;

/// The slot of the smallest extent of a destination whose picks a pass prefetches: its
/// rows are read, combined and written back, so a miss stalls the combine and the store
/// behind it.
pub(crate) const FROM_DEST: usize = 1;

/// The helper's signature: `(address: ptr, bytes: i64)`, nothing returned.
pub(crate) fn prefetch_helper_signature(config: TargetFrontendConfig) -> Signature {
    let mut sig = Signature::new(config.default_call_conv);
    sig.params.push(AbiParam::new(config.pointer_type()));
    sig.params.push(AbiParam::new(types::I64));
    sig
}

impl Lowering<'_, '_> {
    /// Whether the rows of this pass are prefetched: the code runs in this process, the
    /// variant combines rows, the pass writes, its index stays put along the row (so each
    /// row picks one row: Gather's rows, a broadcast index, the engine's rows of an index
    /// uniform by value) and an indexed access walks the row. Not rows that may turn out
    /// uniform only when scanned: most such rows pick element by element, and a call in
    /// their function made the element loop spill (a random ScatterElements add along
    /// axis 0 ran 8% slower).
    fn prefetches(&self) -> bool {
        let reads_index_per_row = self.nest.index.as_ref().is_some_and(|index| {
            let ix = self.access_of(index.operand);
            !self.accesses[ix].uses_inner
        });
        self.machine.prefetch.is_some()
            && self.variant.rows()
            && self.nest.dest.is_some()
            && self.depth >= 2
            && reads_index_per_row
            && !self.prefetched(false).is_empty()
    }

    /// The accesses whose rows are prefetched, each with whether the index moves it: those
    /// that walk the row and the index moves, the source that a row reads where it walks
    /// the row (its rows follow in memory, but the hardware's prefetcher alone fell behind:
    /// a scatter max of 256-byte rows into 1 to 34 MB ran 1.2-1.3x faster with them beside
    /// the destination's, one thread, BENCHMARKS.md), and under a `listed` loop (whose rows
    /// come in the order of a list, not of memory) every access that walks the row.
    fn prefetched(&self, listed: bool) -> Vec<(usize, bool)> {
        let source = match &self.nest.source {
            Some(Source::Read(src)) => Some(self.access_of(src.operand)),
            _ => None,
        };
        self.accesses
            .iter()
            .enumerate()
            .filter(|&(a, access)| {
                access.uses_inner
                    && (listed || access.indexed_stride_at.is_some() || Some(a) == source)
            })
            .map(|(a, access)| (a, access.indexed_stride_at.is_some()))
            .collect()
    }

    /// The step of loop `n`, the loop just outside the row (`listed`: it walks a row list),
    /// below which each row prefetches the row [`ROWS_AHEAD`] steps on, computed once
    /// before that loop: its dim less [`ROWS_AHEAD`] where the rows are worth it, else 0.
    /// They are worth it where some prefetched access's row spans a cache line and, if the
    /// index moves it, its picks miss the caches ([`Self::picks_miss`], against the host's
    /// thresholds); outside a `listed` loop, only an access that the index moves decides
    /// (a source that follows in memory is prefetched beside it). `None` (and nothing
    /// emitted) where the pass does not prefetch.
    pub(super) fn prefetch_limit(&mut self, n: usize, listed: bool) -> Option<Value> {
        let imports = self.machine.prefetch.filter(|_| self.prefetches())?;
        let count = self.param(n);
        // A streamed row's stores leave the caches alone, and its picks are worth the
        // caches' time wherever they come from (see `jit::STREAM_FROM`): no thresholds.
        let thresholds = (self.variant != Variant::Streamed)
            .then(|| super::symbol_address(self.b, self.ptr, imports.from_bytes));
        let bound = self.param(self.bound_at());
        let inner_dim = self.param(self.depth - 1);
        let mut worth = None;
        for (a, indexed) in self.prefetched(listed) {
            if !indexed && !listed {
                continue;
            }
            let shift = self.accesses[a].shift;
            let bytes = self.in_bytes(inner_dim, shift);
            let mut wanted =
                self.b
                    .ins()
                    .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, bytes, CACHE_LINE);
            let large = match indexed {
                true => Some(self.picks_miss(a, n, count, bound, thresholds)),
                false => self.listed_rows_miss(a, count, thresholds),
            };
            if let Some(large) = large {
                wanted = self.b.ins().band(wanted, large);
            }
            worth = Some(match worth {
                Some(w) => self.b.ins().bor(w, wanted),
                None => wanted,
            });
        }
        let worth = worth?;
        let long = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThan, count, ROWS_AHEAD);
        let worth = self.b.ins().band(worth, long);
        let limit = self.b.ins().iadd_imm_s(count, -ROWS_AHEAD);
        let zero = self.b.ins().iconst(types::I64, 0);
        Some(self.b.ins().select(worth, limit, zero))
    }

    /// Whether the picks of indexed access `a` miss the caches, for the loop `n` just
    /// outside the row, which makes `count` picks among `bound` rows: the access's extent
    /// along the indexed dim reaches its threshold at `thresholds` (the host's settings,
    /// see `jit::set_prefetch_from`: the destination's or the sources'; always, where
    /// there are none to consult), or its whole span
    /// over the loops outside `n` does and `count` is at most `bound`. In the second case
    /// the picks of each outer step fall on rows that it picks about once and that an
    /// earlier step or call has not left in the cache (Gather along axis 1 of [64, 2048,
    /// 64] f32, 1024 picks: 512 KiB per step, 32 MiB in all, 1.5-1.7 ms without prefetch
    /// and 1.1-1.3 with, one thread).
    fn picks_miss(
        &mut self,
        a: usize,
        n: usize,
        count: Value,
        bound: Value,
        thresholds: Option<Value>,
    ) -> Value {
        let Some(thresholds) = thresholds else {
            return self.b.ins().iconst(types::I8, 1);
        };
        let dest = self.nest.dest.as_ref().map(|d| self.access_of(d.operand));
        let slot = if dest == Some(a) {
            FROM_DEST
        } else {
            FROM_SOURCE
        };
        let from_bytes = self.threshold(thresholds, slot);
        let stride = self.indexed_byte_stride(a);
        let extent = self.b.ins().imul(bound, stride);
        let large = self
            .b
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, extent, from_bytes);
        if n == 0 {
            return large;
        }
        let mut span = extent;
        for l in 0..n {
            let dim = self.param(l);
            let steps = self.b.ins().iadd_imm_s(dim, -1);
            let elems = self.param(self.accesses[a].strides_at + l);
            let elems = self.b.ins().iabs(elems);
            let bytes = self.in_bytes(elems, self.accesses[a].shift);
            let reach = self.b.ins().imul(steps, bytes);
            span = self.b.ins().iadd(span, reach);
        }
        let spread = self
            .b
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, span, from_bytes);
        let once = self
            .b
            .ins()
            .icmp(IntCC::SignedLessThanOrEqual, count, bound);
        let fresh = self.b.ins().band(spread, once);
        self.b.ins().bor(large, fresh)
    }

    /// Whether the rows of access `a` that a listed loop of `count` steps walks (the axis
    /// coordinates of its row list, in increasing order) miss the caches: they come out of
    /// the order of memory, so where they span less than the second-level cache (the
    /// destination's threshold at `thresholds`), they stay there between calls and
    /// requesting them costs more than it saves (slices of 256 bytes spanning 1 MiB, one
    /// thread: about 57 instructions a slice for the helper's calls). `None` (always)
    /// where there are no thresholds to consult.
    fn listed_rows_miss(
        &mut self,
        a: usize,
        count: Value,
        thresholds: Option<Value>,
    ) -> Option<Value> {
        let from_bytes = self.threshold(thresholds?, FROM_DEST);
        // A listed loop runs at least one step (the runtime skips empty buckets).
        let list = self.param(self.layout.list_at);
        let zero = self.b.ins().iconst(types::I64, 0);
        let first = self.listed_position(list, zero);
        let last_step = self.b.ins().iadd_imm_s(count, -1);
        let last = self.listed_position(list, last_step);
        let steps = self.b.ins().isub(last, first);
        let elems = self.param(self.accesses[a].strides_at);
        let elems = self.b.ins().iabs(elems);
        let stride = self.in_bytes(elems, self.accesses[a].shift);
        let span = self.b.ins().imul(steps, stride);
        Some(
            self.b
                .ins()
                .icmp(IntCC::SignedGreaterThanOrEqual, span, from_bytes),
        )
    }

    /// The host's threshold in `slot` ([`FROM_SOURCE`] or [`FROM_DEST`]) of the
    /// thresholds object at `thresholds`.
    fn threshold(&mut self, thresholds: Value, slot: usize) -> Value {
        // The host's own aligned static, valid for the life of the process.
        self.b.ins().load(
            types::I64,
            MemFlagsData::trusted(),
            thresholds,
            8 * slot as i32,
        )
    }

    /// Emits, in the loop just outside the row, the prefetch of what the row
    /// [`ROWS_AHEAD`] steps on picks: `position` is this row's step along that loop, `limit`
    /// the loop's [`Self::prefetch_limit`], `listed` whether the loop walks a row list, and
    /// `ahead(s, p)` returns the accesses' addresses at the start of the row at step `p`
    /// (called where `position` is below `limit`, so `p` is inside the loop).
    pub(super) fn prefetch_ahead(
        &mut self,
        position: Value,
        limit: Value,
        listed: bool,
        ahead: impl FnOnce(&mut Self, Value) -> Vec<Value>,
    ) {
        let imports = self
            .machine
            .prefetch
            .expect("`prefetch_limit` gave `limit`");
        let (fetch, call, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let go = self.b.ins().icmp(IntCC::UnsignedLessThan, position, limit);
        self.b.ins().brif(go, fetch, &[], done, &[]);

        self.enter(fetch);
        let later = self.b.ins().iadd_imm_s(position, ROWS_AHEAD);
        let at = ahead(self, later);
        let index = self
            .nest
            .index
            .as_ref()
            .expect("a prefetched pass reads an index");
        let ix = self.access_of(index.operand);
        let wide = self.load_wide_index(at[ix]);
        let bound = self.param(self.bound_at());
        let k = self.normalize_index(wide, bound);
        let valid = self.b.ins().icmp(IntCC::UnsignedLessThan, k, bound);
        self.b.ins().brif(valid, call, &[], done, &[]);

        self.enter(call);
        let signature = prefetch_helper_signature(self.machine.config);
        let helper = self.import_helper(imports.helper, signature);
        let inner_dim = self.param(self.depth - 1);
        let most = self.b.ins().iconst(types::I64, MOST_BYTES);
        for (a, indexed) in self.prefetched(listed) {
            let bytes = self.in_bytes(inner_dim, self.accesses[a].shift);
            let bytes = self.b.ins().smin(bytes, most);
            let row = match indexed {
                true => {
                    let stride = self.indexed_byte_stride(a);
                    let offset = self.b.ins().imul(k, stride);
                    self.b.ins().iadd(at[a], offset)
                }
                false => at[a],
            };
            self.b.ins().call(helper, &[row, bytes]);
        }
        self.b.ins().jump(done, &[]);
        self.enter(done);
    }

    /// The parameter slot of the index bound.
    fn bound_at(&self) -> usize {
        self.layout
            .bound_at
            .expect("a pass that reads an index has a bound")
    }

    /// Access `a`'s byte stride along its indexed dim, loaded here.
    fn indexed_byte_stride(&mut self, a: usize) -> Value {
        let slot = self.accesses[a].indexed_stride_at.expect("`a` is indexed");
        let elements = self.param(slot);
        self.in_bytes(elements, self.accesses[a].shift)
    }

    /// Imports a host helper, the module's function number `id` of `signature`, into this
    /// function (only functions that call it list it).
    pub(super) fn import_helper(&mut self, id: u32, signature: Signature) -> FuncRef {
        let signature = self.b.import_signature(signature);
        // Namespace 0 holds a module's functions, as `Module::declare_func_in_func` names them.
        let name = self
            .b
            .func
            .declare_imported_user_function(UserExternalName::new(0, id));
        self.b.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature,
            colocated: false,
            patchable: false,
        })
    }
}
