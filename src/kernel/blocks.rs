//! Gather (ONNX) of narrow rows, in blocks of rows; and GatherElements whose index is one
//! line along the axis expanded over the other dims, which is such a Gather from data cut
//! to the index's extent. Where each output row is short (a few picks along the last
//! axis, or picks of a few elements each along an inner one), the compiled loop nest pays
//! its row setup (about 25 instructions) every few elements and normalizes and
//! bounds-checks every index again in every row. Every row picks the same elements, so a
//! block of R rows is one list of element offsets: a table, checked and normalized once
//! per call, that a rank-2 Gather (data viewed as `[blocks, span]`, the table as its
//! index) walks block by block with one loop. (Gather of 4 of 4 f32 from [65536, 4], one
//! thread, 2026-11-27: 200 us in rows, 63-66 us in blocks of 16 to 128 rows; 8 of 8 u8
//! from [131072, 8]: 740 us, 231-235 us.)
//!
//! Elements only move, so the blocks move them as units of the widest size (up to 16
//! bytes) that a pick's contiguous elements, and every step between them, divide into:
//! a pick of two f32 is one 8-byte unit. The table's entries count units from the block's
//! first, so it is a u16 index for spans of up to 2^16 units and a u32 one past that;
//! the sibling kernel keyed on the unit and the table's type runs the apply pass alone,
//! its check done here. The results are the ordinary call's bit for bit.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use scatterjit_ir::{checked_numel, match_integer, DType, KernelKey, OpKind};

use super::tier::{repaid, specialize_after};
use super::Kernel;
use crate::error::Result;
use crate::once::OnceOk;
use crate::tensor::{for_each_offset, TensorView, TensorViewMut};

/// The units blocks move, by size: 1, 2, 4, 8 and 16 bytes.
const UNITS: [DType; 5] = [
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Complex128,
];

/// The index dtypes of a block's table, narrowest first.
const TABLES: [DType; 2] = [DType::U16, DType::U32];

/// The rank-2 Gathers that run blocks: per unit of [`UNITS`], per table of [`TABLES`].
pub(super) type Siblings = [[OnceOk<Box<Kernel>>; TABLES.len()]; UNITS.len()];

/// Picks whose elements are not contiguous move element by element in blocks; from this
/// many bytes a pick, the ordinary loop nest's row setup is a small part of its cost
/// (picks of 4 f32 moved element by element: 397 us in rows, 478 us in blocks).
const VECTOR_BYTES: usize = 16;

/// Picks of contiguous elements up to this many bytes run in blocks, as units of up to 16
/// bytes. The ordinary loop nest spends 63 to 73 instructions on a pick of 32 to 128
/// bytes; blocks 21 on 32 bytes, 42 on 64 (f32) and 83 on 128 (callgrind, one thread).
const MAX_PICK_BYTES: usize = 64;

/// A block's table holds about this many entries (R rows of `picks` each, at least one
/// row): enough that a block's setup is a small part of it, few enough to stay in the
/// first-level cache. Blocks of 16 to 128 narrow rows ran alike; 256 and more, slower.
const TABLE_ENTRIES: usize = 512;

/// At most this many elements per output row: longer rows gain little from blocks.
const MAX_ROW: usize = 1 << 12;

/// Calls with fewer elements than this (or than [`set_specialize_after`] asks, if fewer:
/// tests ask 0) spend more on a table and its views than blocks save them.
///
/// [`set_specialize_after`]: super::set_specialize_after
const BLOCKS_FROM: u64 = 1 << 12;

/// A call that runs in blocks: `blocks` blocks of `rows` rows of data (each `row_step`
/// units after the last, the first at unit `start` of data's buffer), then one block of
/// `tail_rows`; in units of `unit`.
struct Blocks {
    unit: DType,
    /// Per unit of an output row, its offset from its data row's start.
    offsets: Vec<isize>,
    start: isize,
    row_step: isize,
    rows: usize,
    blocks: usize,
    tail_rows: usize,
}

/// Which of its index's elements a call picks with along the axis (see
/// `Kernel::picks_line`).
#[derive(Clone, Copy)]
enum Picks {
    /// Every element, in row-major order (a Gather).
    All,
    /// The `count` elements of the line along the axis, `stride` apart (a GatherElements
    /// whose index is the same off the axis).
    Line { count: usize, stride: isize },
}

/// One block's table: its entries as index bytes, their dtype, the unit the entries count
/// from (relative to the block's first row's start) and the span they reach.
struct Table {
    bytes: Vec<u8>,
    dtype: DType,
    from: isize,
    span: usize,
}

impl Blocks {
    /// The table of a block of `rows` rows, `None` where its span passes u32.
    fn table(&self, rows: usize) -> Option<Table> {
        let entry = |r: usize, &offset: &isize| r as isize * self.row_step + offset;
        let entries = || (0..rows).flat_map(|r| self.offsets.iter().map(move |o| entry(r, o)));
        let from = entries().min()?;
        let span = usize::try_from(entries().max()? - from)
            .ok()?
            .checked_add(1)?;
        let dtype = *TABLES.iter().find(|t| span as u64 <= 1 << (8 * t.size()))?;
        let mut bytes = Vec::with_capacity(rows * self.offsets.len() * dtype.size());
        for e in entries() {
            // Below `span`, which the dtype holds.
            let e = (e - from) as u64;
            bytes.extend_from_slice(&e.to_le_bytes()[..dtype.size()]);
        }
        Some(Table {
            bytes,
            dtype,
            from,
            span,
        })
    }
}

impl Kernel {
    /// Runs a Gather of narrow rows in blocks (see the module), or a GatherElements that is
    /// one (see [`Self::picks_line`]), and returns `true`; `false`, having written
    /// nothing, to take the ordinary path: another op or index, rows that are not narrow
    /// or not evenly spaced, an output that is not row-major, too little work so far to
    /// repay the siblings' compile, or a bad index.
    pub(super) fn gather_blocks(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
    ) -> Result<bool> {
        if out.dense_place().is_none() {
            return Ok(false);
        }
        let Some(picks) = self.picks_line(indices.shape(), indices.strides()) else {
            return Ok(false);
        };
        let Some(blocks) = self.blocks_of(data, indices, picks) else {
            return Ok(false);
        };
        let unit = blocks.unit;
        // A place, not a slice: a new output is unwritten until the siblings write it.
        let dense = out.dense_place().expect("row-major, as found above");
        // Every table and view first, so that a refusal leaves the output unwritten.
        let mut runs = Vec::with_capacity(2);
        let mut rest = dense;
        for (count, rows, first_row) in [
            (blocks.blocks, blocks.rows, 0),
            (1, blocks.tail_rows, blocks.blocks * blocks.rows),
        ] {
            if count == 0 || rows == 0 {
                continue;
            }
            let Some(table) = blocks.table(rows) else {
                return Ok(false);
            };
            let picks = rows * blocks.offsets.len();
            let start = blocks.start + first_row as isize * blocks.row_step + table.from;
            let Ok(start) = usize::try_from(start) else {
                return Ok(false);
            };
            let step = rows as isize * blocks.row_step;
            let shape = [count, table.span];
            let Ok(view) = TensorView::new(unit, &shape, &[step, 1], start, data.buffer()) else {
                return Ok(false);
            };
            let Some((head, tail)) = rest.split_at(count * picks * unit.size()) else {
                return Ok(false);
            };
            rest = tail;
            let Ok(to) = TensorViewMut::over(head, unit, &[count, picks], &[picks as isize, 1], 0)
            else {
                return Ok(false);
            };
            runs.push((table, view, to));
        }
        for (table, view, mut to) in runs {
            let sibling = self.block_sibling(unit, table.dtype)?;
            let entries = table.bytes.len() / table.dtype.size();
            let index = TensorView::contiguous(table.dtype, &[entries], &table.bytes)?;
            sibling.apply_gather(self, (&view, &index, &mut to), (data.shape(), indices))?;
        }
        Ok(true)
    }

    /// Whether a Gather (or a GatherElements whose index is a Gather's, see
    /// [`Self::picks_line`]) on data of `shape` and `strides` with indices of
    /// `index_shape` and `index_strides` has narrow, evenly spaced rows and enough of them
    /// to run in blocks (its calls do once they have repaid the siblings' compile; see
    /// [`Self::gather_blocks`]).
    pub(super) fn takes_blocks(
        &self,
        shape: &[usize],
        strides: &[isize],
        index_shape: &[usize],
        index_strides: &[isize],
    ) -> bool {
        self.picks_line(index_shape, index_strides)
            .and_then(|picks| self.narrow_rows(shape, strides, index_shape, picks))
            .is_some()
    }

    /// How the index picks along the axis: for a Gather, all its elements in row-major
    /// order; for a GatherElements whose index is the same at every position off the axis
    /// (stride 0 along every other dim of more than one position: an expanded line), that
    /// line, so that the call is the Gather of it from data cut to the index's extent.
    /// `None` for any other index.
    fn picks_line(&self, index_shape: &[usize], index_strides: &[isize]) -> Option<Picks> {
        let axis = self.plan.key.axis();
        match self.plan.key.kind() {
            OpKind::Gather => Some(Picks::All),
            OpKind::GatherElements => {
                let expanded = index_shape
                    .iter()
                    .zip(index_strides)
                    .enumerate()
                    .all(|(d, (&n, &stride))| d == axis || n <= 1 || stride == 0);
                expanded.then_some(Picks::Line {
                    count: index_shape[axis],
                    stride: index_strides[axis],
                })
            }
            OpKind::ScatterElements => None,
        }
    }

    /// The rows, the elements per output row and the step between rows of a call that
    /// [`Self::takes_blocks`], its index picking as `picks` says.
    fn narrow_rows(
        &self,
        shape: &[usize],
        strides: &[isize],
        index_shape: &[usize],
        picks: Picks,
    ) -> Option<(usize, usize, isize)> {
        let key = &self.plan.key;
        if self.unspecialized.load(Ordering::Relaxed) {
            return None;
        }
        let axis = key.axis();
        let size = key.dtype().size();
        // A GatherElements reads data only within the index's extent off the axis.
        let (outer, within, count) = match picks {
            Picks::All => (
                &shape[..axis],
                &shape[axis + 1..],
                checked_numel(index_shape).ok()?,
            ),
            Picks::Line { count, .. } => (&index_shape[..axis], &index_shape[axis + 1..], count),
        };
        let inner = checked_numel(within).ok()?;
        let rows = checked_numel(outer).ok()?;
        let row_len = count.checked_mul(inner)?;
        // The counts first: every Gather call (tiny ones included) asks.
        let work = rows.saturating_mul(row_len) as u64;
        let enough = work >= BLOCKS_FROM.min(specialize_after());
        if !(1..=MAX_ROW).contains(&row_len) || rows < 2 || !enough {
            return None;
        }
        let contiguous = inner == 1 || row_step(within, &strides[axis + 1..]) == Some(1);
        let pick_bytes = inner.saturating_mul(size);
        let narrow = match contiguous {
            true => pick_bytes <= MAX_PICK_BYTES,
            false => pick_bytes < VECTOR_BYTES,
        };
        if !narrow {
            return None;
        }
        Some((rows, row_len, row_step(outer, &strides[..axis])?))
    }

    /// The blocks a Gather (or GatherElements, see [`Self::picks_line`]) on `data` with
    /// `indices` runs in (see [`Self::gather_blocks`]), its picks checked; `None` where it
    /// does not.
    fn blocks_of(
        &self,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        picks: Picks,
    ) -> Option<Blocks> {
        let (shape, strides) = (data.shape(), data.strides());
        let index_shape = indices.shape();
        let (rows, row_len, row_step) = self.narrow_rows(shape, strides, index_shape, picks)?;
        // The siblings compile once the calls that would run on them repay it.
        let compiled = self.blocks.iter().flatten().any(|s| s.get().is_some());
        if !compiled && !repaid(&self.blocks_rent, (rows * row_len) as u64) {
            return None;
        }
        let axis = self.plan.key.axis();
        let (picks, within_shape) = match picks {
            Picks::All => (normalized_picks(indices, shape[axis])?, &shape[axis + 1..]),
            Picks::Line { count, stride } => {
                let (dtype, offset) = (indices.dtype(), indices.offset());
                let line = TensorView::new(dtype, &[count], &[stride], offset, indices.buffer());
                let picks = normalized_picks(&line.ok()?, shape[axis])?;
                (picks, &index_shape[axis + 1..])
            }
        };
        let mut within = Vec::with_capacity(row_len / picks.len().max(1));
        for_each_offset(within_shape, &strides[axis + 1..], |at| within.push(at));
        // Bytes of a unit: the widest that a pick's contiguous elements and every step
        // (between rows, picks, and from the buffer's start) divide into.
        let size = self.plan.key.dtype().size();
        let contiguous = within.iter().zip(0..).all(|(&at, i)| at == i);
        let run = if contiguous {
            within.len() * size
        } else {
            size
        };
        // A dim of one position takes no step, whatever stride its view keeps.
        let axis_step = if shape[axis] > 1 { strides[axis] } else { 0 };
        let steps = [data.offset() as isize, row_step, axis_step];
        let unit = UNITS
            .into_iter()
            .rev()
            .find(|u| {
                let bytes = u.size() as isize;
                run as isize % bytes == 0 && steps.iter().all(|s| s * size as isize % bytes == 0)
            })
            .expect("one byte divides every step");
        let in_units = |elements: isize| elements * size as isize / unit.size() as isize;
        let per_pick: Vec<isize> = match contiguous {
            true => (0..(run / unit.size()) as isize).collect(),
            false => within,
        };
        let offsets: Vec<isize> = picks
            .iter()
            .flat_map(|&k| {
                let pick = in_units(k as isize * axis_step);
                per_pick.iter().map(move |&at| pick + at)
            })
            .collect();
        let per_block = (TABLE_ENTRIES / offsets.len()).clamp(1, rows);
        Some(Blocks {
            unit,
            offsets,
            start: in_units(data.offset() as isize),
            row_step: in_units(row_step),
            rows: per_block,
            blocks: rows / per_block,
            tail_rows: rows % per_block,
        })
    }

    /// The rank-2 Gather of `unit` (one of [`UNITS`]) on indices of `table` (one of
    /// [`TABLES`]) that runs blocks, compiled on first use with its specialized code.
    fn block_sibling(&self, unit: DType, table: DType) -> Result<&Kernel> {
        let at = |dtypes: &[DType], d: DType| dtypes.iter().position(|&x| x == d);
        let slot = &self.blocks[at(&UNITS, unit).expect("one of UNITS")];
        let sibling = slot[at(&TABLES, table).expect("one of TABLES")].get_or_try_init(|| {
            let key = KernelKey::gather(unit, table, 2, 1, 1)?;
            let mut sibling = Kernel::compile(key)?;
            if let Some(counter) = &self.compile_counter {
                sibling.count_compiles_into(Arc::clone(counter));
            }
            // Its calls are this kernel's, whose work has repaid its variants already.
            sibling.repay_all();
            Ok::<_, crate::Error>(Box::new(sibling))
        })?;
        Ok(sibling)
    }
}

/// The positions along an axis of `s` elements that `indices` pick, in row-major order,
/// each normalized (a negative index counts from the end); `None` at a bad index, or if
/// the list is refused memory.
fn normalized_picks(indices: &TensorView<'_>, s: usize) -> Option<Vec<usize>> {
    let count = checked_numel(indices.shape()).ok()?;
    let mut picks = Vec::new();
    picks.try_reserve_exact(count).ok()?;
    let mut bad = false;
    match_integer!(
        indices.dtype(),
        T => for_each_offset(indices.shape(), indices.strides(), |at| {
            let raw = T::from_le_bytes(indices.element_bytes(at).try_into().expect("one index"));
            // Every index type widens to i128 exactly.
            #[allow(clippy::unnecessary_cast)]
            let k = raw as i128;
            let k = if k < 0 { k + s as i128 } else { k };
            match (0..s as i128).contains(&k) {
                true => picks.push(k as usize),
                false => bad = true,
            }
        }),
        _ => unreachable!("validation admits only integer index dtypes"),
    );
    (!bad).then_some(picks)
}

/// The element step between consecutive rows of dims `shape` with `strides` walked
/// row-major, where one step takes every row to the next (0 for a single row); `None`
/// where the rows are not evenly spaced.
fn row_step(shape: &[usize], strides: &[isize]) -> Option<isize> {
    let mut step = None;
    let mut below = 1isize;
    for (&d, &stride) in shape.iter().zip(strides).rev().filter(|(&d, _)| d > 1) {
        match step {
            None => step = Some(stride),
            Some(s) if s.checked_mul(below) == Some(stride) => {}
            Some(_) => return None,
        }
        below = below.checked_mul(d as isize)?;
    }
    Some(step.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{interp, Error as IrError, Op, Reduction, Tensor};

    /// Gathers `picks` (i64) along `axis` of a view of data of `dtype`: a buffer of
    /// `len` elements (values from their position) seen as `shape` with `strides` from
    /// `offset`; into a row-major output, with a kernel fresh enough that this one call
    /// decides whether blocks are compiled (it brings 2^18 elements or more). Checks the
    /// output against the interpreter's and returns the blocks' siblings compiled, as
    /// (unit, table) dtypes.
    fn gather(
        dtype: DType,
        len: usize,
        (shape, strides, offset): (&[usize], &[isize], usize),
        axis: usize,
        picks: &[i64],
    ) -> Vec<(DType, DType)> {
        let bytes: Vec<u8> = (0..len * dtype.size())
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let data = TensorView::new(dtype, shape, strides, offset, &bytes).unwrap();
        let index_bytes: Vec<u8> = picks.iter().flat_map(|p| p.to_le_bytes()).collect();
        let indices = TensorView::contiguous(DType::I64, &[picks.len()], &index_bytes).unwrap();
        let key = KernelKey::gather(dtype, DType::I64, shape.len(), 1, axis as i64).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let got = kernel.run(&data, &indices, None).unwrap();
        let op = Op::new(OpKind::Gather, axis as i64, Reduction::None, false);
        let indices = Tensor::from_bytes(DType::I64, vec![picks.len()], index_bytes).unwrap();
        let want = interp::run(&op, &data.to_tensor().unwrap(), &indices, None).unwrap();
        let view = format!("{shape:?} {strides:?} axis {axis}");
        assert_eq!(got.bytes(), want.bytes(), "{view}");
        compiled_siblings(&kernel)
    }

    /// The siblings `kernel` has compiled for blocks, as (unit, table) dtypes.
    fn compiled_siblings(kernel: &Kernel) -> Vec<(DType, DType)> {
        let mut compiled = Vec::new();
        for (unit, tables) in UNITS.iter().zip(&kernel.blocks) {
            for (table, sibling) in TABLES.iter().zip(tables) {
                if sibling.get().is_some() {
                    compiled.push((*unit, *table));
                }
            }
        }
        compiled
    }

    /// A row-major view of `shape` from element `offset`.
    fn dense(shape: &[usize], offset: usize) -> (&[usize], Vec<isize>, usize) {
        let mut strides = vec![1isize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1] as isize;
        }
        (shape, strides, offset)
    }

    #[test]
    fn blocks_agree_with_the_interpreter() {
        use DType::*;
        let picks = [3, -1, 0, 3, -4];
        // The last axis of narrow rows, with a tail block (65537 rows), as 4-byte units.
        let (shape, strides, at) = dense(&[65_537, 4], 0);
        let last = gather(F32, 65_537 * 4, (shape, &strides, at), 1, &picks);
        assert_eq!(last, [(U32, U16)]);
        // Picks of two i16 along an inner axis, from rows walked backwards: 4-byte units.
        let (rows, n) = (32_768, 6);
        let back = [-(2 * n as isize), 2, 1];
        let last_row = (rows - 1) * 2 * n;
        let view = (&[rows, n, 2][..], &back[..], last_row);
        assert_eq!(gather(I16, rows * n * 2, view, 1, &picks), [(U32, U16)]);
        // Picks of eight f32: 32 bytes, two 16-byte units each.
        let (shape, strides, at) = dense(&[32_768, 4, 8], 0);
        let wide = gather(F32, 32_768 * 32, (shape, &strides, at), 1, &picks);
        assert_eq!(wide, [(Complex128, U16)]);
        // ... from one element past the buffer's start: 4-byte units.
        let (shape, strides, at) = dense(&[32_768, 4, 8], 1);
        let off = gather(F32, 32_768 * 32 + 1, (shape, &strides, at), 1, &picks);
        assert_eq!(off, [(U32, U16)]);
        // Rows of three outer dims, one of them of one row, and a transposed inner part:
        // element by element.
        let shape = [256, 1, 128, 6, 2];
        let strides = [128 * 12, 5, 12, 1, 6];
        let outer = gather(U8, 256 * 128 * 12, (&shape, &strides, 0), 3, &picks);
        assert_eq!(outer, [(U8, U16)]);
        // Blocks of 256 rows of 300 span past u16: a table of u32 entries.
        let (shape, strides, at) = dense(&[131_072, 300], 0);
        let far = gather(U8, 131_072 * 300, (shape, &strides, at), 1, &[-1, 7]);
        assert_eq!(far, [(U8, U32)]);
    }

    /// A GatherElements along `axis` of row-major `data_shape` f32 with the index line
    /// `picks` (i64) expanded to `index_shape` by `index_strides`, checked against the
    /// interpreter; the siblings compiled, as [`gather`] returns them.
    fn gather_elements(
        data_shape: &[usize],
        index_shape: &[usize],
        index_strides: &[isize],
        axis: usize,
        picks: &[i64],
    ) -> Vec<(DType, DType)> {
        let len: usize = data_shape.iter().product();
        let bytes: Vec<u8> = (0..len * 4).map(|i| (i * 7 % 251) as u8).collect();
        let data = TensorView::contiguous(DType::F32, data_shape, &bytes).unwrap();
        let index_bytes: Vec<u8> = picks.iter().flat_map(|p| p.to_le_bytes()).collect();
        let indices =
            TensorView::new(DType::I64, index_shape, index_strides, 0, &index_bytes).unwrap();
        let rank = data_shape.len();
        let key = KernelKey::gather_elements(DType::F32, DType::I64, rank, axis as i64).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let got = kernel.run(&data, &indices, None).unwrap();
        let op = Op::new(OpKind::GatherElements, axis as i64, Reduction::None, false);
        let (data, indices) = (data.to_tensor().unwrap(), indices.to_tensor().unwrap());
        let want = interp::run(&op, &data, &indices, None).unwrap();
        assert_eq!(got.bytes(), want.bytes(), "{data_shape:?} {index_shape:?}");
        compiled_siblings(&kernel)
    }

    #[test]
    fn gather_elements_of_an_expanded_line_run_in_blocks() {
        use DType::*;
        let picks = [3, -1, 0, 5];
        // The same four picks in every row.
        let rows = gather_elements(&[65_536, 6], &[65_536, 4], &[0, 1], 1, &picks);
        assert_eq!(rows, [(U32, U16)]);
        // An index shorter than data off the axis: data is read within its extent.
        let short = gather_elements(&[70_000, 6, 3], &[65_536, 4, 2], &[0, 1, 0], 1, &picks);
        assert_eq!(short, [(U32, U16)]);
        // Along the first axis: every row of the output one row of data, of 8 bytes.
        let first = gather_elements(&[6, 65_536, 2], &[4, 65_536, 2], &[1, 0, 0], 0, &picks);
        assert_eq!(first, []);
        // An index that differs off the axis is not a line.
        let all: Vec<i64> = (0..65_536 * 4).map(|i| i % 11 - 5).collect();
        let dense = gather_elements(&[65_536, 6], &[65_536, 4], &[4, 1], 1, &all);
        assert_eq!(dense, []);
    }

    #[test]
    fn other_gathers_take_the_ordinary_path() {
        let picks = [1, 0];
        // Picks of four f32 with gaps between them: vectors in the ordinary loop nest.
        let (rows, n) = (65_536, 2);
        let view = (&[rows, n, 4][..], &[16, 8, 2][..], 0);
        assert_eq!(gather(DType::F32, rows * n * 8, view, 1, &picks), []);
        // Picks of 128 contiguous bytes.
        let (shape, strides, at) = dense(&[65_536, 2, 32], 0);
        let long = gather(DType::F32, rows * n * 32, (shape, &strides, at), 1, &picks);
        assert_eq!(long, []);
        // Rows that are not evenly spaced (a gap after every 64).
        let view = (&[1024, 64, 4][..], &[64 * 4 + 1, 4, 1][..], 0);
        assert_eq!(gather(DType::F32, 1024 * (64 * 4 + 1), view, 2, &picks), []);
    }

    #[test]
    fn empty_views_with_huge_dims_take_the_ordinary_path() {
        // Dims that multiply past usize::MAX beside a 0: valid, empty views.
        let huge = 1usize << 33;
        let key = KernelKey::gather(DType::F32, DType::I64, 4, 1, 3).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let data = TensorView::new(DType::F32, &[huge, huge, 0, 4], &[0; 4], 0, &[]).unwrap();
        let picks = [0u8; 2 * 8];
        let indices = TensorView::new(DType::I64, &[2], &[1], 0, &picks).unwrap();
        let mut out =
            TensorViewMut::new(DType::F32, &[huge, huge, 0, 2], &[0; 4], 0, &mut []).unwrap();
        assert!(!kernel.gather_blocks(&mut out, &data, &indices).unwrap());
        // Twice more, so that a call may keep a binding of the geometry.
        for _ in 0..3 {
            kernel.run_into(&mut out, &data, &indices, None).unwrap();
        }
        let no_picks = TensorView::new(DType::I64, &[huge, huge, 0], &[0; 3], 0, &[]).unwrap();
        let data = TensorView::new(DType::F32, &[2, 4], &[4, 1], 0, &[0; 2 * 4 * 4]).unwrap();
        let key = KernelKey::gather(DType::F32, DType::I64, 2, 3, 1).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let out_shape = [2, huge, huge, 0];
        let mut out = TensorViewMut::new(DType::F32, &out_shape, &[0; 4], 0, &mut []).unwrap();
        assert!(!kernel.gather_blocks(&mut out, &data, &no_picks).unwrap());
        for _ in 0..3 {
            kernel.run_into(&mut out, &data, &no_picks, None).unwrap();
        }
    }

    #[test]
    fn a_bad_index_writes_nothing_and_is_named() {
        let (rows, n) = (65_536, 4);
        let bytes = vec![1u8; rows * n * 4];
        let data = TensorView::contiguous(DType::F32, &[rows, n], &bytes).unwrap();
        let picks: Vec<u8> = [0i64, 1, 2, 4]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        let indices = TensorView::contiguous(DType::I64, &[4], &picks).unwrap();
        let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 1).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let mut out_bytes = vec![7u8; rows * 4 * 4];
        let mut out =
            TensorViewMut::new(DType::F32, &[rows, 4], &[4, 1], 0, &mut out_bytes).unwrap();
        let e = kernel
            .run_into(&mut out, &data, &indices, None)
            .unwrap_err();
        let named = matches!(
            e.as_invalid(),
            Some(IrError::IndexOutOfBounds { index: 4, position, .. }) if position == &[3]
        );
        assert!(named, "{e}");
        assert!(out_bytes.iter().all(|&b| b == 7));
    }

    #[test]
    fn rows_are_evenly_spaced_when_dims_nest() {
        assert_eq!(row_step(&[4, 3], &[3, 1]), Some(1));
        assert_eq!(row_step(&[4, 3], &[-30, -10]), Some(-10));
        assert_eq!(row_step(&[4, 1, 3], &[3, 77, 1]), Some(1));
        assert_eq!(row_step(&[4, 3], &[4, 1]), None);
        assert_eq!(row_step(&[1, 1], &[5, 9]), Some(0));
        assert_eq!(row_step(&[5], &[0]), Some(0));
        assert_eq!(row_step(&[], &[]), Some(0));
    }
}
