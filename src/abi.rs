//! The calling convention of compiled passes, shared by the code generator (which reads
//! the parameters) and the callers that fill them in (the runtime, and ahead-of-time
//! entries), all from one [`ParamLayout`] per pass.
//!
//! Every pass is `extern "C" fn(operands: *const *mut u8, params: *mut i64) -> i64`:
//! - `operands[slot]` is the address of element 0 of each [`Operand`] (by [`Operand::slot`]);
//! - `params` holds, as i64, the domain dims, then for each access (index, source, dest,
//!   count, in that order) its element stride along every domain dim, followed by its
//!   element stride along the indexed dim when it has one, then the index bound `s`, then
//!   `depth` slots the pass writes the loop counters into when it meets a bad index;
//! - it returns [`STATUS_OK`] or [`STATUS_BAD_INDEX`].

use scatterjit_ir::{
    Access, Combine, Coord, KernelKey, LoopNest, Operand, Plan, Reduction, Source,
};

/// Every index was valid and the pass ran to the end.
pub(crate) const STATUS_OK: i64 = 0;
/// An index was out of bounds; the loop counters at that point are in the error slots.
pub(crate) const STATUS_BAD_INDEX: i64 = 1;

/// How a pass's innermost loop is compiled. The kernel picks one per call from the bound
/// strides ([`Variant::Contiguous`] or [`Variant::Broadcast`] whenever its condition holds)
/// and compiles each on first use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Any strides: every access keeps its own pointer, stepped by its stride.
    Strided,
    /// The innermost loop walks domain dim `depth - 1`, and along it every access moves by
    /// exactly one element if its coordinates use that loop and by none otherwise. Rows
    /// are addressed as `base + (i << log2(size))`, an index constant along the row is
    /// read and checked once per row, and whole-row combines use 16-byte vectors or
    /// `memcpy`. Element-wise picks are addressed as [`Picks`] says.
    Contiguous(Picks),
    /// [`Variant::Contiguous`], except that the accesses in the set stay put along the
    /// innermost loop (stride 0) although their coordinates use it: a broadcast view, such
    /// as PyTorch Geometric's `index.view(-1, 1).expand_as(src)`. A still index is read
    /// and checked once per row; a still source is loaded once and splat. Element-wise
    /// picks (under a still source) are addressed as [`Picks`] says.
    Broadcast(Still, Picks),
    /// [`Variant::Contiguous`], and before each row picks at random within a line of a
    /// tensor that the index moves along (GatherElements' data row, a scatter's
    /// destination row, along the innermost axis), the row reads one byte of each of the
    /// line's cache lines in address order: the hardware prefetcher streams them in, and
    /// the picks hit the cache where each line's first pick would otherwise wait for
    /// memory. Picked where [`ParamLayout::reads_ahead`] finds such a line worth reading
    /// for the call's shapes and strides.
    Touched(Picks),
    /// [`Variant::Contiguous`], for a pass that copies whole rows an index picks into a
    /// destination it writes in order (Gather's rows): each row is copied by the host's
    /// streaming helper, with non-temporal stores that write the destination's lines
    /// without reading them first, and the rows picked are prefetched whatever the size of
    /// the tensor they come from. Picked where [`ParamLayout::streams`] finds the rows and
    /// the destination long enough (`jit::STREAM_FROM`), in this process only.
    Streamed,
}

/// How the rows of [`Variant::Contiguous`], [`Variant::Broadcast`] and [`Variant::Touched`]
/// address the element an index picks, `k` along the indexed dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Picks {
    /// At the call's stride along the indexed dim: a multiply per pick.
    Strided,
    /// One element apart: every access the index moves has a stride of one element along
    /// its indexed dim (a row-major tensor's last axis), so a pick is
    /// `base + (k << log2(size))`, which x86-64 folds into the load's or store's address:
    /// no multiply, a fifth fewer instructions in the apply of element-wise scatters and
    /// GatherElements along a last axis (BENCHMARKS.md). Picked by [`ParamLayout::picks`].
    Adjacent,
}

/// A set of accesses (bit `a`: access `a` in [`accesses`] order) whose stride along the
/// innermost loop is 0. Never empty in a [`Variant::Broadcast`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Still(pub(crate) u8);

impl Still {
    /// Whether access `a` stays put.
    pub(crate) fn contains(self, a: usize) -> bool {
        self.0 >> a & 1 == 1
    }
}

/// The cache line size [`Variant::Touched`] reads lines at (x86-64, most AArch64).
pub(crate) const CACHE_LINE: i64 = 64;

/// A line of at least this many bytes is read ahead ([`Variant::Touched`]): shorter ones
/// are a few cache lines, warm after a row's first picks.
const READ_AHEAD_FROM: i64 = 1 << 10;

/// ... and of at most this many: a line read ahead must still be in a core's cache (L2
/// holds 256 KiB or more on the machines this targets) when the row picks from it.
const READ_AHEAD_UP_TO: i64 = 256 << 10;

/// Bytes of one element of `operand` under `key`: what a stride in the parameter block
/// (in elements) is multiplied by to move a pointer.
pub(crate) fn element_size(key: &KernelKey, operand: Operand) -> usize {
    match operand {
        Operand::Data | Operand::Updates | Operand::Output => key.dtype().size(),
        Operand::Indices => key.index_dtype().size(),
        Operand::Sums => Reduction::mean_accumulator(key.dtype()).map_or(0, |acc| acc.size()),
        Operand::Counts => COUNT_SIZE,
    }
}

/// Bytes of one of `mean`'s counts.
pub(crate) const COUNT_SIZE: usize = 8;

/// Bytes of `mean`'s scratch per output element under `plan`: a count and a sum (none for
/// other plans). The scratch is shaped like the output and holds all counts, then all
/// sums, both row-major: the buffer a call allocates and an ahead-of-time entry's
/// `SjArgs::workspace` alike.
pub(crate) fn scratch_per_element(plan: &Plan) -> usize {
    plan.mean_accumulator()
        .map_or(0, |acc| COUNT_SIZE + acc.size())
}

/// The sizes from which a call's row copies stream ([`Variant::Streamed`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamFrom {
    /// The fewest bytes of the call's destination.
    pub(crate) output: u64,
    /// The fewest bytes of one of its rows.
    pub(crate) row: u64,
}

/// The most accesses a pass has (index, source, dest, count).
pub(crate) const MAX_ACCESSES: usize = 4;

/// How many slots the variants with [`Picks::Strided`] take (see [`Variant::slot`]).
const ADJACENT_FROM: usize = 3 + (1 << MAX_ACCESSES);

impl Variant {
    /// The variants compiled ahead of time, in a fixed order.
    pub const ALL: [Variant; 2] = [Variant::Strided, Variant::Contiguous(Picks::Strided)];

    /// How many distinct variants exist; [`Variant::slot`] numbers them `0..COUNT`.
    pub(crate) const COUNT: usize = 2 * ADJACENT_FROM;

    /// A dense number for this variant, below [`Variant::COUNT`]: the variants with
    /// [`Picks::Strided`] (and those without a choice) below [`ADJACENT_FROM`], each with
    /// [`Picks::Adjacent`] that many slots on.
    pub(crate) const fn slot(self) -> usize {
        let (slot, picks) = match self {
            Variant::Strided => (0, Picks::Strided),
            Variant::Contiguous(picks) => (1, picks),
            Variant::Broadcast(still, picks) => (1 + still.0 as usize, picks),
            Variant::Touched(picks) => (1 + (1 << MAX_ACCESSES), picks),
            Variant::Streamed => (2 + (1 << MAX_ACCESSES), Picks::Strided),
        };
        match picks {
            Picks::Strided => slot,
            Picks::Adjacent => slot + ADJACENT_FROM,
        }
    }

    /// The variant at `slot` (see [`Variant::slot`]), for tests that list compiled code.
    /// Slots of variants that do not exist (`Strided` and `Streamed` with
    /// [`Picks::Adjacent`]) give `None`.
    #[cfg(test)]
    pub(crate) const fn from_slot(slot: usize) -> Option<Variant> {
        let (slot, picks) = match slot >= ADJACENT_FROM {
            false => (slot, Picks::Strided),
            true => (slot - ADJACENT_FROM, Picks::Adjacent),
        };
        let variant = match slot {
            0 => Variant::Strided,
            1 => Variant::Contiguous(picks),
            s if s == Variant::Touched(Picks::Strided).slot() => Variant::Touched(picks),
            s if s == Variant::Streamed.slot() => Variant::Streamed,
            s => Variant::Broadcast(Still((s - 1) as u8), picks),
        };
        match (variant, picks) {
            (Variant::Strided | Variant::Streamed, Picks::Adjacent) => None,
            _ => Some(variant),
        }
    }

    /// The name used in symbols and listings: `strided`, `contiguous`, `touched`,
    /// `streamed`, or `broadcast` followed by the still accesses' positions (`broadcast0`
    /// for a still index); then `.adjacent` for [`Picks::Adjacent`].
    pub fn name(self) -> String {
        let picks = |picks| match picks {
            Picks::Strided => "",
            Picks::Adjacent => ".adjacent",
        };
        match self {
            Variant::Strided => "strided".into(),
            Variant::Contiguous(p) => format!("contiguous{}", picks(p)),
            Variant::Touched(p) => format!("touched{}", picks(p)),
            Variant::Streamed => "streamed".into(),
            Variant::Broadcast(still, p) => {
                let mut name = String::from("broadcast");
                for a in (0..MAX_ACCESSES).filter(|&a| still.contains(a)) {
                    name.push_str(&a.to_string());
                }
                name + picks(p)
            }
        }
    }

    /// Whether access `a` stays put along the innermost loop although it uses it.
    pub(crate) fn still(self, a: usize) -> bool {
        matches!(self, Variant::Broadcast(still, _) if still.contains(a))
    }

    /// Whether the innermost loop is compiled as rows (every variant but `Strided`).
    pub(crate) fn rows(self) -> bool {
        self != Variant::Strided
    }

    /// How the rows address an index's picks ([`Picks::Strided`] but in the three
    /// variants that have a choice).
    pub(crate) fn picks(self) -> Picks {
        match self {
            Variant::Contiguous(picks) | Variant::Broadcast(_, picks) | Variant::Touched(picks) => {
                picks
            }
            _ => Picks::Strided,
        }
    }
}

/// A set of a tensor's dims (bit `j`: dim `j`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dims(u16);

// Every dim of every tensor has a bit.
const _: () = assert!(MAX_DEPTH <= u16::BITS as usize);

impl Dims {
    /// The set with `dim` added.
    fn with(self, dim: usize) -> Dims {
        Dims(self.0 | 1 << dim)
    }

    /// Whether the set has no dim.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The dims in the set, lowest first.
    pub(crate) fn iter(self) -> impl Iterator<Item = usize> {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            let dim = (rest != 0).then(|| rest.trailing_zeros() as usize)?;
            rest &= rest - 1;
            Some(dim)
        })
    }

    /// The sum of `strides` over the set (0 for the empty set).
    pub(crate) fn sum(self, strides: &[isize]) -> i64 {
        self.iter().map(|dim| strides[dim] as i64).sum()
    }
}

/// Where one access's strides live in the parameter block, and what they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccessSlots {
    /// The tensor accessed.
    pub operand: Operand,
    /// First of `depth` slots: element strides along each domain dim, in loop order.
    pub strides_at: usize,
    /// Per domain dim `d`: the dims of `operand` whose coordinate is loop variable `d`. The
    /// access's stride along `d` is the sum of their element strides (0 for none: the
    /// access stays put along `d`).
    pub along: [Dims; MAX_DEPTH],
    /// Slot of the element stride along the indexed dim, if the access has one.
    pub indexed_stride_at: Option<usize>,
    /// The dim of `operand` whose coordinate is the index value (empty if none): what
    /// `indexed_stride_at` holds the stride of.
    pub indexed: Dims,
}

impl AccessSlots {
    /// The stride along domain dim `d` that [`Variant::Contiguous`] needs of this access
    /// when `d` is the innermost loop: one element if its coordinates use `d`, none if not.
    pub(crate) fn contiguous_stride(&self, d: usize) -> i64 {
        i64::from(!self.along[d].is_empty())
    }
}

/// The parameter block of one pass: where each slot lives and what a call writes there,
/// from the shapes and strides of its operands. This is the binding recipe, derived once
/// per loop nest: the runtime evaluates it in Rust (`kernel::bind`), an ahead-of-time
/// entry emits CLIF that evaluates it (`aot::entry`).
///
/// The dims and each access's strides take one slot per loop, and are given here per
/// domain dim: the caller picks a loop order (`order[n]`: the domain dim loop `n` walks),
/// and slot `n` of each such run holds the value for domain dim `order[n]`. The other
/// slots are read by position: the indexed strides, the bound, and those the pass itself
/// writes (the error slots) or a listed call fills (the row list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamLayout {
    /// Rank of the iteration domain; dims live in slots `0..depth`.
    pub depth: usize,
    /// The operand whose dims the dim slots hold: domain dim `d` is its dim `d`.
    pub domain: Operand,
    /// One entry per access, in [`accesses`] order.
    pub accesses: Vec<AccessSlots>,
    /// Slot of the index bound `s`.
    pub bound_at: Option<usize>,
    /// What the bound slot holds: the size of this operand's dim.
    pub bound: Option<(Operand, usize)>,
    /// First of `depth` slots that receive the loop counters of a bad index.
    pub err_at: usize,
    /// Slot of the address of the row list that a listed pass's outermost loop walks
    /// (see `crate::engine`); unused by other passes.
    pub list_at: usize,
    /// Total number of slots.
    pub len: usize,
    /// The accesses (bit `a`: access `a`) whose line along the indexed dim a row of
    /// [`Variant::Touched`] reads ahead: moved by the index and still along the innermost
    /// loop, which the index walks (so rows pick element by element).
    pub read_ahead: u8,
    /// The destination access of a pass that copies rows an index picks into a
    /// destination it writes in order ([`Variant::Streamed`]'s passes): the pass assigns a
    /// source read, the index stays put along the innermost loop, the source and the
    /// destination walk it, and the index does not move the destination.
    pub streams_into: Option<usize>,
}

/// The accesses of a pass in parameter-block order: index, source, dest, count.
pub(crate) fn accesses(nest: &LoopNest) -> impl Iterator<Item = &Access> {
    let source = match &nest.source {
        Some(Source::Read(a)) => Some(a),
        _ => None,
    };
    nest.index
        .iter()
        .chain(source)
        .chain(nest.dest.iter())
        .chain(nest.count.iter())
}

/// Where a pass's read source and its destination sit in [`accesses`]' order, where it
/// has them.
pub(crate) fn source_and_dest(nest: &LoopNest) -> (Option<usize>, Option<usize>) {
    let after_index = usize::from(nest.index.is_some());
    let source = matches!(nest.source, Some(Source::Read(_))).then_some(after_index);
    let dest = nest
        .dest
        .is_some()
        .then_some(after_index + usize::from(source.is_some()));
    (source, dest)
}

/// The most slots a parameter block has: dims, strides and indexed strides of every
/// access, the bound, the error slots and the row list, at the deepest domain.
pub(crate) const MAX_PARAMS: usize = MAX_DEPTH + MAX_ACCESSES * (MAX_DEPTH + 1) + 1 + MAX_DEPTH + 1;

/// The deepest loop nest: Gather's output, of rank `2 * MAX_RANK - 1`.
pub(crate) const MAX_DEPTH: usize = 2 * scatterjit_ir::MAX_RANK - 1;

impl ParamLayout {
    /// The layout of `nest`'s parameter block.
    pub(crate) fn of(nest: &LoopNest) -> ParamLayout {
        let depth = nest.depth;
        let mut next = depth;
        let accesses: Vec<AccessSlots> = accesses(nest)
            .map(|a| {
                let strides_at = next;
                next += depth;
                let indexed_stride_at = a.indexed_dim().map(|_| {
                    next += 1;
                    next - 1
                });
                let mut along = [Dims::default(); MAX_DEPTH];
                let mut indexed = Dims::default();
                for (j, coord) in a.coords.iter().enumerate() {
                    match *coord {
                        Coord::Loop(d) => along[d] = along[d].with(j),
                        Coord::Index => indexed = indexed.with(j),
                    }
                }
                AccessSlots {
                    operand: a.operand,
                    strides_at,
                    along,
                    indexed_stride_at,
                    indexed,
                }
            })
            .collect();
        let bound_at = nest.bound.map(|_| {
            next += 1;
            next - 1
        });
        let len = next + depth + 1;
        debug_assert!(depth <= MAX_DEPTH && len <= MAX_PARAMS);
        let walks_inner = |a: &AccessSlots| depth > 0 && !a.along[depth - 1].is_empty();
        let index_walks = nest.index.is_some() && accesses.first().is_some_and(walks_inner);
        let read_ahead = accesses
            .iter()
            .enumerate()
            .filter(|(_, a)| index_walks && a.indexed_stride_at.is_some() && !walks_inner(a))
            .fold(0u8, |set, (a, _)| set | 1 << a);
        let walks = |a: usize| accesses.get(a).is_some_and(walks_inner);
        let streams_into = match source_and_dest(nest) {
            (Some(source), Some(dest))
                if nest.combine == Combine::Assign
                    && nest.index.is_some()
                    && !index_walks
                    && walks(source)
                    && walks(dest)
                    && accesses[dest].indexed_stride_at.is_none() =>
            {
                Some(dest)
            }
            _ => None,
        };
        ParamLayout {
            depth,
            domain: nest.domain,
            accesses,
            bound_at,
            bound: nest.bound,
            err_at: next,
            list_at: next + depth,
            len,
            read_ahead,
            streams_into,
        }
    }

    /// Whether a contiguous call with these parameters (in loop order, the innermost loop
    /// walking the innermost domain dim) streams its row copies ([`Variant::Streamed`]):
    /// the pass copies rows into a destination it writes in order
    /// ([`Self::streams_into`]), whose rows take at least `from.row` bytes, a multiple of
    /// 16 (the streaming helper's stores), and whose elements in all at least
    /// `from.output` (`jit::stream_from`).
    pub(crate) fn streams(&self, key: &KernelKey, params: &[i64], from: StreamFrom) -> bool {
        let (Some(dest), Some(inner)) = (self.streams_into, self.depth.checked_sub(1)) else {
            return false;
        };
        let size = element_size(key, self.accesses[dest].operand) as u64;
        let row = (params[inner] as u64).saturating_mul(size);
        let all = self.domain_size(params).saturating_mul(size);
        row >= from.row && row % 16 == 0 && all >= from.output
    }

    /// Whether a contiguous call with these parameters (in loop order, the innermost loop
    /// walking the innermost domain dim) reads lines ahead ([`Variant::Touched`]): some
    /// access in [`Self::read_ahead`] has a line of [`READ_AHEAD_FROM`] to
    /// [`READ_AHEAD_UP_TO`] bytes at a positive stride of at most a cache line, and a row
    /// picks at least once per cache line of it on average.
    pub(crate) fn reads_ahead(&self, key: &KernelKey, params: &[i64]) -> bool {
        let (Some(inner), Some(bound_at)) = (self.depth.checked_sub(1), self.bound_at) else {
            return false;
        };
        let (picks, bound) = (params[inner], params[bound_at]);
        self.accesses.iter().enumerate().any(|(a, slots)| {
            let Some(at) = slots
                .indexed_stride_at
                .filter(|_| self.read_ahead >> a & 1 == 1)
            else {
                return false;
            };
            let stride = params[at].saturating_mul(element_size(key, slots.operand) as i64);
            let span = bound.saturating_mul(stride);
            (1..=CACHE_LINE).contains(&stride)
                && (READ_AHEAD_FROM..=READ_AHEAD_UP_TO).contains(&span)
                && picks.saturating_mul(CACHE_LINE) >= span
        })
    }

    /// Whether the pass has an access the index moves (one that picks), whose rows come in
    /// both forms of [`Picks`].
    pub(crate) fn picks_by_index(&self) -> bool {
        self.accesses.iter().any(|a| a.indexed_stride_at.is_some())
    }

    /// How a contiguous call with these parameters addresses its picks: [`Picks::Adjacent`]
    /// where the pass picks ([`Self::picks_by_index`]) and every access the index moves has
    /// a stride of one element along its indexed dim, [`Picks::Strided`] otherwise (a pass
    /// that does not pick compiles the same code either way, so it keeps the one variant).
    pub(crate) fn picks(&self, params: &[i64]) -> Picks {
        let unit = |slots: &AccessSlots| slots.indexed_stride_at.is_none_or(|at| params[at] == 1);
        match self.picks_by_index() && self.accesses.iter().all(unit) {
            true => Picks::Adjacent,
            false => Picks::Strided,
        }
    }

    /// Whether a call bound for `variant` means what it computes in that variant only, so
    /// that no other may run it: a count still along the innermost loop is bumped once per
    /// row by the row code, and would be bumped once per element by `Strided` code.
    pub(crate) fn binds_rows(&self, variant: Variant) -> bool {
        self.accesses
            .iter()
            .enumerate()
            .any(|(a, slots)| slots.operand == Operand::Counts && variant.still(a))
    }

    /// The elements of the iteration domain bound in `params` (saturating).
    pub(crate) fn domain_size(&self, params: &[i64]) -> u64 {
        params[..self.depth]
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{DType, KernelKey, PassKind, Plan, Reduction};

    #[test]
    fn every_slot_names_its_variant() {
        let mut variants = Vec::new();
        for slot in 0..Variant::COUNT {
            if let Some(variant) = Variant::from_slot(slot) {
                assert_eq!(variant.slot(), slot);
                variants.push(variant);
            }
        }
        // All but `Strided` and `Streamed` in both forms of their picks, each once.
        assert_eq!(variants.len(), Variant::COUNT - 2);
        for (i, v) in variants.iter().enumerate() {
            assert!(!variants[..i].contains(v), "{v:?} twice");
        }
    }

    #[test]
    fn source_and_dest_name_their_accesses() {
        let keys = [
            KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Mean, false),
            KernelKey::scatter_elements(DType::I8, DType::U8, 3, 1, Reduction::None, true),
            KernelKey::gather(DType::F32, DType::I64, 2, 1, 0),
            KernelKey::gather(DType::F64, DType::I32, 3, 2, 1),
            KernelKey::gather_elements(DType::U16, DType::I32, 2, 1),
        ];
        for key in keys {
            let plan = Plan::new(key.unwrap());
            for nest in &plan.passes {
                let (source, dest) = source_and_dest(nest);
                let at = |n: Option<usize>| n.and_then(|n| accesses(nest).nth(n));
                let read = match &nest.source {
                    Some(Source::Read(a)) => Some(a),
                    _ => None,
                };
                assert_eq!(at(source), read, "{:?}", nest.pass);
                assert_eq!(at(dest), nest.dest.as_ref(), "{:?}", nest.pass);
            }
        }
    }

    #[test]
    fn scatter_apply_layout() {
        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 1, Reduction::Add, true)
            .unwrap();
        let plan = Plan::new(key);
        let layout = ParamLayout::of(plan.pass(PassKind::Apply).unwrap());
        // dims 0..2; indices 2..4; updates 4..6; out 6..8 + indexed 8; bound 9; err 10..12.
        assert_eq!(layout.accesses.len(), 3);
        assert_eq!(layout.accesses[2].strides_at, 6);
        assert_eq!(layout.accesses[2].indexed_stride_at, Some(8));
        assert_eq!(layout.bound_at, Some(9));
        assert_eq!(layout.err_at, 10);
        assert_eq!(layout.list_at, 12);
        assert_eq!(layout.len, 13);
        // What they hold: indices' dims, out's strides with dim 1 indexed, out's dim 1.
        assert_eq!(layout.domain, Operand::Indices);
        assert_eq!(layout.accesses[2].operand, Operand::Output);
        let along: Vec<Vec<usize>> = layout.accesses[2].along[..2]
            .iter()
            .map(|d| d.iter().collect())
            .collect();
        assert_eq!(along, [vec![0], vec![]]);
        assert_eq!(layout.accesses[2].indexed.iter().collect::<Vec<_>>(), [1]);
        assert_eq!(layout.bound, Some((Operand::Output, 1)));
    }

    #[test]
    fn gather_data_strides_skip_the_index_loops() {
        // out[a, i, j, b] = data[a, idx[i, j], b]: data's dims 0 and 2 follow loops 0 and 3.
        let key = KernelKey::gather(DType::F32, DType::I64, 3, 2, 1).unwrap();
        let plan = Plan::new(key);
        let layout = ParamLayout::of(plan.pass(PassKind::Apply).unwrap());
        let data = &layout.accesses[1];
        assert_eq!(data.operand, Operand::Data);
        let along: Vec<Vec<usize>> = data.along[..layout.depth]
            .iter()
            .map(|d| d.iter().collect())
            .collect();
        assert_eq!(along, [vec![0], vec![], vec![], vec![2]]);
        assert_eq!(data.indexed.iter().collect::<Vec<_>>(), [1]);
        assert_eq!(
            (0..4)
                .map(|d| data.contiguous_stride(d))
                .collect::<Vec<_>>(),
            [1, 0, 0, 1]
        );
        assert_eq!(layout.bound, Some((Operand::Data, 1)));
    }

    #[test]
    fn dims_sum_their_strides() {
        let dims = Dims::default().with(0).with(2).with(MAX_DEPTH - 1);
        assert_eq!(dims.iter().collect::<Vec<_>>(), [0, 2, MAX_DEPTH - 1]);
        let mut strides = [0isize; MAX_DEPTH];
        (strides[0], strides[1], strides[2], strides[MAX_DEPTH - 1]) = (5, 100, -3, 7);
        assert_eq!(dims.sum(&strides), 9);
        assert_eq!(Dims::default().sum(&strides), 0);
        assert!(Dims::default().is_empty() && !dims.is_empty());
    }
}
