//! Binding a pass to one call's operands: shapes and strides into the parameter block (see
//! `crate::abi`), the loop order, and the variant the bound strides allow.

use scatterjit_ir::{KernelKey, LoopNest, Operand, PassKind, OPERAND_SLOTS};

use crate::abi::{self, ParamLayout, Still, Variant, MAX_ACCESSES, MAX_DEPTH};
use crate::tensor::{Address, RawOperand};
use crate::{alloc, jit};

/// The operands of one call, by [`Operand`] slot.
#[derive(Default)]
pub(super) struct Operands<'a> {
    pub(super) slots: [Option<RawOperand<'a>>; OPERAND_SLOTS],
}

/// How many pages of a caller's output [`Operands::writes_new_output`] asks about.
const OUTPUT_PAGES_SAMPLED: usize = 8;

impl<'a> Operands<'a> {
    pub(super) fn with(mut self, operand: Operand, raw: RawOperand<'a>) -> Self {
        self.slots[operand.slot()] = Some(raw);
        self
    }

    /// Whether the output is new memory, not mapped yet, as [`OUTPUT_PAGES_SAMPLED`] pages
    /// spread along its first dim tell (`alloc::mapped`): a large output that `Kernel::run`
    /// allocated, or a caller's fresh `np.empty`, alike.
    pub(super) fn writes_new_output(&self, element_size: usize) -> bool {
        let Some(out) = self.slots[Operand::Output.slot()] else {
            return false;
        };
        let at = match out.address {
            Address::Write(at) => at.cast_const(),
            Address::Read(at) => at,
        };
        let (Some(&rows), Some(&stride)) = (out.shape.first(), out.strides.first()) else {
            return false;
        };
        let bytes = stride.wrapping_mul(element_size as isize);
        let last = OUTPUT_PAGES_SAMPLED - 1;
        let samples = (0..OUTPUT_PAGES_SAMPLED).map(|k| {
            let row = rows.saturating_sub(1) as u128 * k as u128 / last as u128;
            // A row of the view: inside the memory the output's view proved.
            at.wrapping_offset((row as isize).wrapping_mul(bytes))
        });
        !alloc::mapped(samples)
    }

    pub(super) fn get(&self, operand: Operand) -> &RawOperand<'a> {
        self.slots[operand.slot()]
            .as_ref()
            .expect("every operand a pass accesses is bound before it runs")
    }
}

/// A loop order: `order[n]` is the domain dim that loop `n` walks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Order {
    dims: [usize; MAX_DEPTH],
    len: usize,
}

impl std::ops::Deref for Order {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        &self.dims[..self.len]
    }
}

/// The parameter block of `nest` for these operands, evaluated from `layout`, its recipe
/// (see `abi::ParamLayout`), and the loop order chosen: `order[n]` is the domain dim that
/// loop `n` walks.
///
/// Loops run outermost-first by decreasing byte stride summed over the accesses (stable, so
/// row-major tensors keep row-major order), which puts a contiguous dim innermost wherever
/// the views have one. Along a dim the index moves along, an access the index moves
/// (a scatter's destination, a gather's data) counts a stride across its indexed dim's
/// whole extent: where the index stays put along some dim (a Gather's row, an expanded
/// index), that dim runs inside the random picks even when another operand is transposed
/// (the table, the updates, the output), so that each pick still moves a row. A short dim
/// may then move inside the innermost one ([`reused_inside`]). `axis_first` moves the axis
/// loop outermost (the engine's listed loop). Any order is correct: two updates can meet
/// only if they differ in the axis coordinate alone, and every loop order visits those in
/// increasing order.
pub(super) fn bind(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    ops: &Operands<'_>,
    axis_first: bool,
) -> (Vec<i64>, Order) {
    let depth = layout.depth;
    // On the stack: tiny calls are counted in nanoseconds.
    let mut dims = [0i64; MAX_DEPTH];
    for (n, &d) in ops.get(layout.domain).shape.iter().enumerate() {
        dims[n] = d as i64;
    }
    let mut strides = [[0i64; MAX_DEPTH]; MAX_ACCESSES];
    let mut indexed = [0i64; MAX_ACCESSES];
    let mut sizes = [0u128; MAX_ACCESSES];
    // Per domain dim: bytes stepped over all accesses.
    let mut cost = [0u128; MAX_DEPTH];
    for (a, slots) in layout.accesses.iter().enumerate() {
        let raw = ops.get(slots.operand);
        sizes[a] = abi::element_size(key, slots.operand) as u128;
        for d in 0..depth {
            strides[a][d] = slots.along[d].sum(raw.strides);
            cost[d] += strides[a][d].unsigned_abs() as u128 * sizes[a];
        }
        indexed[a] = slots.indexed.sum(raw.strides);
    }
    // At each step of a loop the index moves along, an access it moves (`indexed` non-zero)
    // may land anywhere along its indexed dim: the step costs as much as a stride across
    // that dim.
    let index = layout
        .accesses
        .iter()
        .position(|s| s.operand == Operand::Indices);
    let index_moves = |d: usize| index.is_some_and(|ix| strides[ix][d] != 0);
    let bound = layout
        .bound
        .map_or(0, |(operand, dim)| ops.get(operand).shape[dim] as u128);
    for a in 0..layout.accesses.len() {
        let jump = (indexed[a].unsigned_abs() as u128)
            .saturating_mul(sizes[a])
            .saturating_mul(bound);
        for d in (0..depth).filter(|&d| index_moves(d)) {
            cost[d] = cost[d].saturating_add(jump);
        }
    }
    let mut order = Order {
        dims: std::array::from_fn(|d| d),
        len: depth,
    };
    // The check pass stays row-major: the first bad index it meets is the one to report.
    if nest.pass != PassKind::Check {
        order.dims[..depth].sort_by_key(|&d| std::cmp::Reverse(cost[d]));
        let moves = |a: usize, d: usize| {
            let bytes = strides[a][d].unsigned_abs() as u128 * sizes[a];
            (bytes, indexed[a] != 0 && index_moves(d))
        };
        if let Some(d) = reused_inside(&order, &dims, layout.accesses.len(), moves) {
            let at = order
                .iter()
                .position(|&e| e == d)
                .expect("a dim of the order");
            order.dims[at..depth].rotate_left(1);
        }
    }
    if axis_first {
        order.dims[..depth].sort_by_key(|&d| d != key.axis());
    }

    // Dims and strides per loop, in the order chosen.
    let mut loop_dims = [0i64; MAX_DEPTH];
    let mut loop_strides = [[0i64; MAX_DEPTH]; MAX_ACCESSES];
    for (n, &d) in order.iter().enumerate() {
        loop_dims[n] = dims[d];
        for (a, row) in loop_strides
            .iter_mut()
            .take(layout.accesses.len())
            .enumerate()
        {
            row[n] = strides[a][d];
        }
    }
    if nest.pass != PassKind::Check {
        // The engine's listed axis loop stays outermost: only the loops inside it merge.
        let accesses = layout.accesses.len();
        coalesce(
            &mut loop_dims[..depth],
            &mut loop_strides[..accesses],
            &mut order,
            usize::from(axis_first),
        );
    }
    let mut params = vec![0i64; layout.len];
    params[..depth].copy_from_slice(&loop_dims[..depth]);
    for (a, slots) in layout.accesses.iter().enumerate() {
        params[slots.strides_at..slots.strides_at + depth]
            .copy_from_slice(&loop_strides[a][..depth]);
        if let Some(at) = slots.indexed_stride_at {
            params[at] = indexed[a];
        }
    }
    if let (Some(at), Some((operand, dim))) = (layout.bound_at, layout.bound) {
        params[at] = ops.get(operand).shape[dim] as i64;
    }
    (params, order)
}

/// Bytes of the first-level cache that a short innermost loop's lines may fill and still
/// be read again by the next step of the loop outside it.
const REUSED_BYTES: u128 = 16 << 10;

/// The bytes of a cache line, as the loop order counts them.
const LINE: u128 = abi::CACHE_LINE as u128;

/// A short dim to run innermost instead of `order`'s innermost `c`, where `c` streams an
/// access a new cache line per element that it never reads again (its indices, say, 512
/// bytes apart) and the short dim walks that access within lines: every access that steps
/// a cache line or more along the short dim steps less along `c`, so its few lines stay
/// in the cache for `c`, now outside, to read again, and no access the index moves lands
/// at random along the short dim and not along `c`. A scatter of column-major updates
/// through a row-major index (bytes alone put the updates' contiguous dim innermost and
/// read each line of the index once per feature) then reads every line once. `moves(a,
/// d)`: access `a`'s bytes per step along dim `d`, and whether it lands at random there.
fn reused_inside(
    order: &Order,
    dims: &[i64],
    accesses: usize,
    moves: impl Fn(usize, usize) -> (u128, bool),
) -> Option<usize> {
    let (&c, outer) = order.split_last()?;
    // A dim past `i64::MAX` (an empty tensor's other dims may be that long) wraps negative
    // in `dims`; its bits as a `u64` are its length.
    let extent = |d: usize| u128::from(dims[d] as u64);
    let long = extent(c) * LINE > REUSED_BYTES;
    let streams = (0..accesses).any(|a| {
        let (bytes, random) = moves(a, c);
        !random && bytes >= LINE
    });
    if !(long && streams) {
        return None;
    }
    outer.iter().rev().copied().find(|&d| {
        let lines = (0..accesses).filter(|&a| moves(a, d).0 >= LINE).count() as u128;
        let fits = (0..accesses).all(|a| {
            let ((along_d, random_d), (along_c, random_c)) = (moves(a, d), moves(a, c));
            (!random_d || random_c) && (along_d < LINE || along_c < LINE)
        });
        let gains = (0..accesses).any(|a| {
            let ((along_d, random_d), (along_c, random_c)) = (moves(a, d), moves(a, c));
            !random_c && !random_d && along_c >= LINE && along_d < LINE
        });
        extent(d) > 1 && fits && gains && extent(d) * lines * LINE <= REUSED_BYTES
    })
}

/// Merges each loop from loop `from` on into the nearest unmerged loop inside it where every
/// access steps, per step of the outer loop, exactly over the inner loop's whole extent
/// (trailing dims that every tensor lays out row-major): the inner loop then walks both,
/// and the merged loop, left with one step and no stride, moves out to loop `from`, so that
/// the loop just outside the row is still the next one that steps. A rank-4 Gather of
/// [64, 4096, 2, 8] f16 along axis 0 then copies rows of 65536 elements, not of 8. Any
/// other loop of one step moves out too, so that no loop that steps runs a one-step loop
/// inside it per step (a Gather of one pick along the last axis walked its rows one
/// element at a time). Loops before `from` stay as they are (the engine's listed axis
/// loop, `from` 1). The check pass keeps its loops: a bad index's position is read from
/// its loop counters.
fn coalesce(dims: &mut [i64], strides: &mut [[i64; MAX_DEPTH]], order: &mut Order, from: usize) {
    let depth = dims.len();
    let Some(mut inner) = depth.checked_sub(1).filter(|&inner| inner > from) else {
        return;
    };
    for n in (from..inner).rev() {
        if dims[n] == 1 {
            continue;
        }
        let joins = strides
            .iter()
            .all(|s| dims[inner].checked_mul(s[inner]) == Some(s[n]));
        match dims[inner].checked_mul(dims[n]).filter(|_| joins) {
            Some(product) => {
                dims[inner] = product;
                dims[n] = 1;
                for s in strides.iter_mut() {
                    s[n] = 0;
                }
            }
            None => inner = n,
        }
    }
    // Loops of one step, merged or not, first (after the loops before `from`); then the
    // others, each in their order (on the stack: tiny calls bind too).
    let still = |n: usize| dims[n] == 1;
    let steps_from = (from..depth)
        .position(|n| !still(n))
        .map_or(depth, |p| from + p);
    if !(steps_from..depth).any(still) {
        return;
    }
    let mut sequence = [0usize; MAX_DEPTH];
    let firsts = (0..from).chain((from..depth).filter(|&n| still(n)));
    for (to, source) in firsts
        .chain((from..depth).filter(|&n| !still(n)))
        .enumerate()
    {
        sequence[to] = source;
    }
    let sequence = &sequence[..depth];
    let permute = |values: &mut [i64]| {
        let mut old = [0i64; MAX_DEPTH];
        old[..depth].copy_from_slice(&values[..depth]);
        for (to, &from) in sequence.iter().enumerate() {
            values[to] = old[from];
        }
    };
    permute(dims);
    for s in strides.iter_mut() {
        permute(s);
    }
    let old = *order;
    for (to, &from) in sequence.iter().enumerate() {
        order.dims[to] = old.dims[from];
    }
}

/// The variant whose condition the bound parameters meet (see [`Variant::Contiguous`],
/// [`Variant::Broadcast`], [`Variant::Touched`] and [`Variant::Streamed`]): read from the
/// strides, and for `Touched` and `Streamed` also from the dims.
pub(super) fn variant_of(
    layout: &ParamLayout,
    key: &KernelKey,
    params: &[i64],
    order: &[usize],
) -> Variant {
    let Some(inner) = layout.depth.checked_sub(1) else {
        return Variant::Strided;
    };
    if order[inner] != inner {
        return Variant::Strided;
    }
    let mut still = 0u8;
    for (a, slots) in layout.accesses.iter().enumerate() {
        match params[slots.strides_at + inner] {
            stride if stride == slots.contiguous_stride(inner) => {}
            0 => still |= 1 << a,
            _ => return Variant::Strided,
        }
    }
    match still {
        0 if layout.reads_ahead(key, params) => Variant::Touched(layout.picks(params)),
        0 if layout.streams(key, params, jit::stream_from()) => Variant::Streamed,
        0 => Variant::Contiguous(layout.picks(params)),
        _ => Variant::Broadcast(Still(still), layout.picks(params)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Picks;
    use crate::tensor::{TensorView, TensorViewMut};
    use scatterjit_ir::{DType, Plan, Reduction};

    /// The loop order `bind` picks for `key`'s apply pass on these operands.
    fn apply_order(key: KernelKey, ops: &Operands<'_>) -> Vec<usize> {
        let plan = Plan::new(key);
        let nest = plan.pass(PassKind::Apply).unwrap();
        bind(&key, nest, &ParamLayout::of(nest), ops, false)
            .1
            .to_vec()
    }

    fn loop_order(data_strides: &[isize], index_strides: &[isize]) -> Vec<usize> {
        let key = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
        let data = vec![0u8; 4 * 12];
        let idx = vec![0u8; 8 * 12];
        let mut out = vec![0u8; 4 * 12];
        let dv = TensorView::new(DType::F32, &[3, 4], data_strides, 0, &data).unwrap();
        let iv = TensorView::new(DType::I64, &[3, 4], index_strides, 0, &idx).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[3, 4], data_strides, 0, &mut out).unwrap();
        let ops = Operands::default()
            .with(Operand::Data, dv.raw())
            .with(Operand::Indices, iv.raw())
            .with(Operand::Output, ov.raw());
        apply_order(key, &ops)
    }

    /// The variant of a GatherElements apply along the last axis: data `[rows, len]` with
    /// strides `data_strides`, a packed index and output `[rows, picks]`.
    fn gather_variant(len: usize, picks: usize, data_strides: [isize; 2], dtype: DType) -> Variant {
        let rows = 2;
        let key = KernelKey::gather_elements(dtype, DType::I64, 2, 1).unwrap();
        let reach = (rows - 1) * data_strides[0].unsigned_abs()
            + (len - 1) * data_strides[1].unsigned_abs()
            + 1;
        let data = vec![0u8; dtype.size() * reach];
        let offset = if data_strides[1] < 0 { len - 1 } else { 0 };
        let idx = vec![0u8; 8 * rows * picks];
        let mut out = vec![0u8; dtype.size() * rows * picks];
        let dv = TensorView::new(dtype, &[rows, len], &data_strides, offset, &data).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[rows, picks], &idx).unwrap();
        let mut ov =
            TensorViewMut::new(dtype, &[rows, picks], &[picks as isize, 1], 0, &mut out).unwrap();
        let (layout, params, order) = bound_apply(key, &dv, &iv, &mut ov);
        variant_of(&layout, &key, &params, &order)
    }

    /// The layout, parameters and loop order of `key`'s apply pass (a gather's) bound to
    /// these views.
    fn bound_apply(
        key: KernelKey,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        out: &mut TensorViewMut<'_>,
    ) -> (ParamLayout, Vec<i64>, Vec<usize>) {
        let plan = Plan::new(key);
        let nest = plan.pass(PassKind::Apply).unwrap();
        let ops = Operands::default()
            .with(Operand::Data, data.raw())
            .with(Operand::Indices, indices.raw())
            .with(Operand::Output, out.raw());
        let layout = ParamLayout::of(nest);
        let (params, order) = bind(&key, nest, &layout, &ops, false);
        (layout, params, order.to_vec())
    }

    #[test]
    fn rows_read_ahead_lines_worth_reading() {
        let f32 = DType::F32;
        let (touched, contiguous) = (
            Variant::Touched(Picks::Adjacent),
            Variant::Contiguous(Picks::Adjacent),
        );
        // 16 KiB lines picked 4096 times each: read ahead.
        assert_eq!(gather_variant(4096, 4096, [4096, 1], f32), touched);
        // Every other element: an 8-byte stride, still within a cache line.
        assert_eq!(
            gather_variant(4096, 4096, [8192, 2], f32),
            Variant::Touched(Picks::Strided)
        );
        // Picks as many as the line's cache lines, and one fewer.
        assert_eq!(gather_variant(4096, 256, [4096, 1], f32), touched);
        assert_eq!(gather_variant(4096, 255, [4096, 1], f32), contiguous);
        // Lines of 1 KiB and 256 KiB, and just outside.
        assert_eq!(gather_variant(256, 256, [256, 1], f32), touched);
        assert_eq!(gather_variant(255, 255, [255, 1], f32), contiguous);
        assert_eq!(gather_variant(32768, 4096, [32768, 1], DType::F64), touched);
        assert_eq!(
            gather_variant(32769, 4096, [32769, 1], DType::F64),
            contiguous
        );
        // Strides past a cache line, and negative ones: picks at the stride.
        assert_eq!(
            gather_variant(4096, 4096, [4096 * 17, 17], f32),
            Variant::Contiguous(Picks::Strided)
        );
        assert_eq!(
            gather_variant(4096, 4096, [4096, -1], f32),
            Variant::Contiguous(Picks::Strided)
        );
    }

    /// Picks are one element apart only where the picked tensor's stride along the axis is
    /// one element, whatever its other strides (a column-major table's last axis is not).
    #[test]
    fn picks_are_adjacent_only_at_a_stride_of_one_element() {
        let f32 = DType::F32;
        let picks = |len, strides| gather_variant(len, 64, strides, f32).picks();
        assert_eq!(picks(64, [64, 1]), Picks::Adjacent);
        assert_eq!(picks(64, [1000, 1]), Picks::Adjacent);
        assert_eq!(picks(64, [128, 2]), Picks::Strided);
        assert_eq!(picks(64, [1, 2]), Picks::Strided);
        assert_eq!(picks(64, [64, -1]), Picks::Strided);
        // A pass whose index moves no access has no picks to address.
        let key = KernelKey::scatter_elements(f32, DType::I64, 2, 1, Reduction::Add, true).unwrap();
        let plan = Plan::new(key);
        for nest in &plan.passes {
            let layout = ParamLayout::of(nest);
            let params = vec![1; layout.len];
            let moved = layout
                .accesses
                .iter()
                .any(|a| a.indexed_stride_at.is_some());
            let want = if moved {
                Picks::Adjacent
            } else {
                Picks::Strided
            };
            assert_eq!(layout.picks(&params), want, "{:?}", nest.pass);
        }
    }

    /// Whether a Gather along axis 0 of a `[4, len]` table, `picks` rows picked into an
    /// output of stride `out_row` elements per row, streams its rows from `output` bytes
    /// of destination and `row` bytes of a row.
    fn gather_streams(len: usize, picks: usize, out_row: usize, (output, row): (u64, u64)) -> bool {
        let dtype = DType::F32;
        let key = KernelKey::gather(dtype, DType::I64, 2, 1, 0).unwrap();
        let data = vec![0u8; 4 * 4 * len];
        let idx = vec![0u8; 8 * picks];
        let mut out = vec![0u8; 4 * picks * out_row];
        let dv = TensorView::contiguous(dtype, &[4, len], &data).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[picks], &idx).unwrap();
        let strides = [out_row as isize, 1];
        let mut ov = TensorViewMut::new(dtype, &[picks, len], &strides, 0, &mut out).unwrap();
        let (layout, params, order) = bound_apply(key, &dv, &iv, &mut ov);
        let from = abi::StreamFrom { output, row };
        order.iter().enumerate().all(|(n, &d)| n == d) && layout.streams(&key, &params, from)
    }

    #[test]
    fn rows_stream_into_large_destinations_in_whole_chunks() {
        // 64 rows of 256 bytes: 16 KiB in all.
        assert!(gather_streams(64, 64, 64, (16 << 10, 256)));
        assert!(!gather_streams(64, 64, 64, ((16 << 10) + 1, 256)));
        assert!(!gather_streams(64, 64, 64, (0, 257)));
        // Rows of 60 bytes are not whole 16-byte chunks; padded rows still are.
        assert!(!gather_streams(15, 64, 15, (0, 0)));
        assert!(gather_streams(16, 64, 20, (0, 0)));
        // Only a copy whose destination the index does not move: not a scatter, not
        // GatherElements, not the check pass.
        let streams_into =
            |key: KernelKey, pass| ParamLayout::of(Plan::new(key).pass(pass).unwrap()).streams_into;
        let gather = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0).unwrap();
        assert_eq!(streams_into(gather, PassKind::Apply), Some(2));
        assert_eq!(streams_into(gather, PassKind::Check), None);
        let scatter =
            KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::None, true)
                .unwrap();
        assert_eq!(streams_into(scatter, PassKind::Apply), None);
        let elements = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
        assert_eq!(streams_into(elements, PassKind::Apply), None);
    }

    #[test]
    fn only_rows_that_pick_elements_read_ahead() {
        let layout = |key: KernelKey| {
            ParamLayout::of(Plan::new(key).pass(PassKind::Apply).unwrap()).read_ahead
        };
        // GatherElements along the last axis: the data access (index, data, out).
        let along_last = KernelKey::gather_elements(DType::F32, DType::I64, 2, 1).unwrap();
        assert_eq!(layout(along_last), 0b010);
        // A scatter along the last axis: the destination (index, updates, out).
        let scatter =
            KernelKey::scatter_elements(DType::F32, DType::I32, 2, 1, Reduction::Add, true)
                .unwrap();
        assert_eq!(layout(scatter), 0b100);
        // Along the first axis the rows walk the indexed tensor: nothing to read ahead.
        let along_first = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
        assert_eq!(layout(along_first), 0);
        let gnn = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Add, true)
            .unwrap();
        assert_eq!(layout(gnn), 0);
        // Gather along the first axis: its index is still along the row, copied whole.
        let gather = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0).unwrap();
        assert_eq!(layout(gather), 0);
    }

    #[test]
    fn the_smallest_stride_runs_innermost() {
        assert_eq!(loop_order(&[4, 1], &[4, 1]), [0, 1]);
        assert_eq!(loop_order(&[1, 3], &[1, 3]), [1, 0]);
        // Bytes decide: the 8-byte indices outweigh the two transposed f32 tensors.
        assert_eq!(loop_order(&[1, 3], &[4, 1]), [0, 1]);
    }

    /// The loop order of a Gather of 5 rows from a [8, 4] f32 table along axis 0, with
    /// these strides of the table and of the [5, 4] output.
    fn gather_rows_order(data_strides: &[isize], out_strides: &[isize]) -> Vec<usize> {
        let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0).unwrap();
        let (data, idx, mut out) = (vec![0u8; 4 * 32], vec![0u8; 8 * 5], vec![0u8; 4 * 20]);
        let dv = TensorView::new(DType::F32, &[8, 4], data_strides, 0, &data).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[5], &idx).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[5, 4], out_strides, 0, &mut out).unwrap();
        let ops = Operands::default()
            .with(Operand::Data, dv.raw())
            .with(Operand::Indices, iv.raw())
            .with(Operand::Output, ov.raw());
        apply_order(key, &ops)
    }

    /// The loop order of a scatter add of `[rows, 4]` f32 updates with these strides into
    /// a row-major [8, 4] output along axis 0, through a `[rows, 4]` index with these
    /// strides (elements).
    fn scatter_rows_order(rows: usize, index: &[isize], updates: &[isize]) -> Vec<usize> {
        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Add, true)
            .unwrap();
        let reach = |s: &[isize]| (rows - 1) * s[0].unsigned_abs() + 3 * s[1].unsigned_abs() + 1;
        let idx = vec![0u8; 8 * reach(index)];
        let (upd, mut out) = (vec![0u8; 4 * reach(updates)], vec![0u8; 4 * 32]);
        let iv = TensorView::new(DType::I64, &[rows, 4], index, 0, &idx).unwrap();
        let uv = TensorView::new(DType::F32, &[rows, 4], updates, 0, &upd).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[8, 4], &[4, 1], 0, &mut out).unwrap();
        let ops = Operands::default()
            .with(Operand::Indices, iv.raw())
            .with(Operand::Updates, uv.raw())
            .with(Operand::Output, ov.raw());
        apply_order(key, &ops)
    }

    /// Where the index stays put along a dim (a Gather's row, an expanded index), that dim
    /// runs inside the picks, whichever operand is transposed; where it moves along every
    /// dim, the smallest stride still runs innermost.
    #[test]
    fn rows_run_inside_the_picks_whatever_is_transposed() {
        assert_eq!(gather_rows_order(&[4, 1], &[4, 1]), [0, 1]);
        // The table, or the output, column-major.
        assert_eq!(gather_rows_order(&[1, 8], &[4, 1]), [0, 1]);
        assert_eq!(gather_rows_order(&[4, 1], &[1, 5]), [0, 1]);
        // An expanded index (PyTorch Geometric's) with column-major updates.
        assert_eq!(scatter_rows_order(5, &[1, 0], &[4, 1]), [0, 1]);
        assert_eq!(scatter_rows_order(5, &[1, 0], &[1, 5]), [0, 1]);
        // A materialized index moves along both dims: bytes decide, as without picks.
        assert_eq!(scatter_rows_order(5, &[4, 1], &[1, 5]), [0, 1]);
        assert_eq!(scatter_rows_order(5, &[4, 1], &[1, 100]), [1, 0]);
    }

    /// Bytes put a transposed operand's contiguous dim innermost; a short dim runs inside
    /// it instead where that dim would stream another access a new line per element,
    /// never read again, and the transposed operand's lines along the short dim fit the
    /// cache until the next step outside reads them again.
    #[test]
    fn a_short_dim_runs_inside_where_its_lines_are_read_again() {
        // Column-major updates of 400 rows, a row-major index 128 bytes per row.
        assert_eq!(scatter_rows_order(400, &[16, 1], &[1, 400]), [0, 1]);
        // 200 rows: the index's lines along them fit the cache, read again by each feature.
        assert_eq!(scatter_rows_order(200, &[16, 1], &[1, 200]), [1, 0]);
        // An index 32 bytes per row shares its lines between rows: bytes decide.
        assert_eq!(scatter_rows_order(400, &[4, 1], &[1, 400]), [1, 0]);
    }

    /// An empty tensor's other dims may pass `i64::MAX`, negative in `bind`'s dims: the
    /// rule reads them as the lengths they are, without overflow.
    #[test]
    fn a_dim_past_i64_max_is_long_not_negative() {
        let order = Order {
            dims: std::array::from_fn(|d| d),
            len: 2,
        };
        let huge = (1u64 << 63) as i64 + 5;
        // Access 0 streams a line per step along dim 1 and steps 8 bytes along dim 0;
        // access 1 steps a line along dim 0 and 4 bytes along dim 1. Dim 0 runs inside
        // where its lines fit the cache.
        let moves = |a: usize, d: usize| match (a, d) {
            (0, 1) | (1, 0) => (LINE, false),
            (0, _) => (8, false),
            _ => (4, false),
        };
        assert_eq!(reused_inside(&order, &[2, huge], 2, moves), Some(0));
        assert_eq!(reused_inside(&order, &[huge, huge], 2, moves), None);
    }

    /// `coalesce` of loops `from` on, with these dims and per-access strides: the dims,
    /// strides and loop order it leaves.
    fn merge_from(
        dims: &[i64],
        strides: &[&[i64]],
        from: usize,
    ) -> (Vec<i64>, Vec<Vec<i64>>, Vec<usize>) {
        let depth = dims.len();
        let mut d = dims.to_vec();
        let mut s: Vec<[i64; MAX_DEPTH]> = strides
            .iter()
            .map(|row| std::array::from_fn(|n| row.get(n).copied().unwrap_or(0)))
            .collect();
        let mut order = Order {
            dims: std::array::from_fn(|n| n),
            len: depth,
        };
        coalesce(&mut d, &mut s, &mut order, from);
        let s: Vec<Vec<i64>> = s.iter().map(|row| row[..depth].to_vec()).collect();
        (d, s, order.to_vec())
    }

    /// Loops merge into the nearest unmerged loop inside them only where every access
    /// steps over that loop's whole extent; merged loops move outermost with no stride,
    /// other loops of one step too, and the order follows.
    #[test]
    fn contiguous_trailing_loops_merge_into_one_row() {
        let merge = |dims: &[i64], strides: &[&[i64]]| merge_from(dims, strides, 0);
        // A Gather along axis 0 of [64, 4096, 2, 8]: data and output row-major past the
        // index loop (data's stride there is the index's, 0 here), the index still.
        let (dims, strides, order) = merge(
            &[16, 4096, 2, 8],
            &[&[0, 16, 8, 1], &[1, 0, 0, 0], &[65536, 16, 8, 1]],
        );
        assert_eq!(dims, [1, 1, 16, 65536]);
        assert_eq!(strides, [[0, 0, 0, 1], [0, 0, 1, 0], [0, 0, 65536, 1]]);
        assert_eq!(order, [1, 2, 0, 3]);
        // A padded dim stops the chain; a size-1 dim does not, and moves out; a stride-0
        // access merges only where it is still along both loops.
        let (dims, _, order) = merge(&[3, 1, 4, 5], &[&[24, 99, 5, 1], &[0, 0, 0, 0]]);
        assert_eq!((dims, order), (vec![1, 1, 3, 20], vec![1, 2, 0, 3]));
        // A Gather of one pick along the last axis of [256, 64, 16, 4]: the rows merge,
        // and the one-step pick loop moves out, leaving the rows innermost (output, data,
        // index).
        let (dims, strides, order) = merge(
            &[256, 64, 16, 1],
            &[&[1024, 16, 1, 1], &[4096, 64, 4, 0], &[0, 0, 0, 1]],
        );
        assert_eq!((dims, order), (vec![1, 1, 1, 262144], vec![0, 1, 3, 2]));
        assert_eq!(strides.iter().map(|s| s[3]).collect::<Vec<_>>(), [1, 4, 0]);
        // One-step loops already outermost: nothing moves.
        let (dims, _, order) = merge(&[1, 4, 5], &[&[7, 1, 4]]);
        assert_eq!((dims, order), (vec![1, 4, 5], vec![0, 1, 2]));
        let (dims, _, _) = merge(&[3, 4, 5], &[&[21, 5, 1]]);
        assert_eq!(dims, [1, 3, 20]);
        let (dims, _, _) = merge(&[4, 5], &[&[5, 1], &[1, 0]]);
        assert_eq!(dims, [4, 5]);
        // Nothing to merge: everything as it was.
        let (dims, strides, order) = merge(&[4, 5], &[&[1, 4]]);
        assert_eq!(
            (dims, strides, order),
            (vec![4, 5], vec![vec![1, 4]], vec![0, 1])
        );
    }

    /// Under the engine's listed loop (loop 0, the axis), only the loops inside it merge,
    /// and one-step loops move out to just inside it.
    #[test]
    fn a_listed_loop_stays_outermost_while_the_slice_merges_into_one_row() {
        // A scatter along axis 0 of [400000, 4, 16] updates with u32 keys broadcast over
        // the slice: keys, updates, output.
        let (dims, strides, order) = merge_from(
            &[400000, 4, 16],
            &[&[1, 0, 0], &[64, 16, 1], &[64, 16, 1]],
            1,
        );
        assert_eq!((dims, order), (vec![400000, 1, 64], vec![0, 1, 2]));
        assert_eq!(strides, [[1, 0, 0], [64, 0, 1], [64, 0, 1]]);
        // Loop 0 would merge into the row here; listed, it keeps its own steps.
        let (dims, _, order) = merge_from(&[3, 4, 5], &[&[20, 5, 1]], 1);
        assert_eq!((dims, order), (vec![3, 1, 20], vec![0, 1, 2]));
        let (dims, _, _) = merge_from(&[3, 4, 5], &[&[20, 5, 1]], 0);
        assert_eq!(dims, [1, 1, 60]);
        // A one-step loop inside moves out to loop 1, behind the listed loop.
        let (dims, _, order) = merge_from(&[3, 4, 1, 5], &[&[40, 10, 7, 1]], 1);
        assert_eq!((dims, order), (vec![3, 1, 4, 5], vec![0, 2, 1, 3]));
    }
}
