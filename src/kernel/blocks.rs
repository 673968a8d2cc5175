//! Gather (ONNX) of narrow rows, in blocks of rows. Where each output row is short (a few
//! picks along the last axis, or picks of a few elements each along an inner one), the
//! compiled loop nest pays its row setup (about 25 instructions) every few elements and
//! normalizes and bounds-checks every index again in every row. Every row picks the same
//! elements, so a block of R rows is one list of element offsets: a table, checked and
//! normalized once per call, that a rank-2 Gather (data viewed as `[blocks, span]`, the
//! table as its index) walks block by block with one loop. (Gather of 4 of 4 f32 from
//! [65536, 4], one thread, 2026-11-27: 200 us in rows, 63-66 us in blocks of 16 to 128
//! rows; 8 of 8 u8 from [131072, 8]: 740 us, 231-235 us.)
//!
//! The table's entries are element offsets from the block's first element, so it is a
//! u16 index for spans of up to 2^16 elements and a u32 one past that; the sibling kernel
//! keyed on that type runs the apply pass alone, its check done here. The results are the
//! ordinary call's: elements move, nothing is computed.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use scatterjit_ir::{checked_numel, DType, KernelKey, OpKind, Operand, PassKind};

use super::bind::Operands;
use super::columns::normalized_picks;
use super::tier::specialize_after;
use super::Kernel;
use crate::error::Result;
use crate::tensor::{for_each_offset, TensorView, TensorViewMut};

/// The index dtypes of a block's table, narrowest first: the sibling kernels at these
/// positions of `Kernel::blocks`.
pub(super) const TABLES: [DType; 2] = [DType::U16, DType::U32];

/// Picks along an inner axis move this many bytes each, or more, as vectors in the
/// ordinary loop nest, which then beats element-wise copies (4 f32 a pick: 397 us in rows,
/// 478 us in blocks).
const VECTOR_BYTES: usize = 16;

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
/// elements after the last), then one block of `tail_rows`, each output row `picks` long.
struct Blocks {
    /// Per position of an output row, its element's offset from its data row's start.
    offsets: Vec<isize>,
    row_step: isize,
    rows: usize,
    blocks: usize,
    tail_rows: usize,
}

/// One block's table: its entries as index bytes, their dtype, the element the entries
/// count from (relative to the block's first row) and the span they reach.
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
    /// Runs a Gather of narrow rows in blocks (see the module) and returns `true`;
    /// `false`, having written nothing, to take the ordinary path: another op, rows that
    /// are not narrow or not evenly spaced, an output that is not row-major, too little
    /// work so far to repay the sibling's compile, or a bad index.
    pub(super) fn gather_blocks(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
    ) -> Result<bool> {
        if out.dense_bytes_mut().is_none() {
            return Ok(false);
        }
        let Some(blocks) = self.blocks_of(data, indices) else {
            return Ok(false);
        };
        let size = self.plan.key.dtype().size();
        let dense = out.dense_bytes_mut().expect("row-major, as found above");
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
            let start = data.offset() as isize + first_row as isize * blocks.row_step + table.from;
            let Ok(start) = usize::try_from(start) else {
                return Ok(false);
            };
            let step = rows as isize * blocks.row_step;
            let (dtype, buffer) = (data.dtype(), data.buffer());
            let Ok(view) = TensorView::new(dtype, &[count, table.span], &[step, 1], start, buffer)
            else {
                return Ok(false);
            };
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(count * picks * size);
            rest = tail;
            let Ok(to) = TensorViewMut::new(dtype, &[count, picks], &[picks as isize, 1], 0, head)
            else {
                return Ok(false);
            };
            runs.push((table, view, to));
        }
        for (table, view, mut to) in runs {
            let sibling = self.block_sibling(table.dtype)?;
            let entries = table.bytes.len() / table.dtype.size();
            let index = TensorView::contiguous(table.dtype, &[entries], &table.bytes)?;
            let ops = Operands::default()
                .with(Operand::Data, view.raw())
                .with(Operand::Indices, index.raw())
                .with(Operand::Output, to.raw());
            sibling
                .run_pass(PassKind::Apply, &ops)
                .map_err(|stop| self.bad_index(PassKind::Apply, stop, data.shape(), indices))?;
        }
        Ok(true)
    }

    /// Whether a Gather on data of `shape` and `strides` with indices of `index_shape`
    /// has narrow, evenly spaced rows and enough of them to run in blocks (its calls do
    /// once they have repaid the sibling's compile; see [`Self::gather_blocks`]).
    pub(super) fn takes_blocks(
        &self,
        shape: &[usize],
        strides: &[isize],
        index_shape: &[usize],
    ) -> bool {
        self.narrow_rows(shape, strides, index_shape).is_some()
    }

    /// The rows, the elements per output row and the step between rows of a Gather that
    /// [`Self::takes_blocks`].
    fn narrow_rows(
        &self,
        shape: &[usize],
        strides: &[isize],
        index_shape: &[usize],
    ) -> Option<(usize, usize, isize)> {
        let key = &self.plan.key;
        if key.kind() != OpKind::Gather || self.unspecialized.load(Ordering::Relaxed) {
            return None;
        }
        let axis = key.axis();
        let size = key.dtype().size();
        let inner = checked_numel(&shape[axis + 1..]).ok()?;
        let rows = checked_numel(&shape[..axis]).ok()?;
        let row_len = checked_numel(index_shape).ok()?.checked_mul(inner)?;
        let narrow = inner == 1 || inner * size < VECTOR_BYTES;
        let work = rows.saturating_mul(row_len) as u64;
        let enough = work >= BLOCKS_FROM.min(specialize_after());
        if !narrow || !(1..=MAX_ROW).contains(&row_len) || rows < 2 || !enough {
            return None;
        }
        Some((rows, row_len, row_step(&shape[..axis], &strides[..axis])?))
    }

    /// The blocks a Gather on `data` with `indices` runs in (see [`Self::gather_blocks`]),
    /// its indices checked; `None` where it does not.
    fn blocks_of(&self, data: &TensorView<'_>, indices: &TensorView<'_>) -> Option<Blocks> {
        let (shape, strides) = (data.shape(), data.strides());
        let (rows, row_len, row_step) = self.narrow_rows(shape, strides, indices.shape())?;
        // The sibling compiles once the calls that would run on it repay it.
        let compiled = self.blocks.iter().any(|s| s.get().is_some());
        if !compiled && !self.repaid(&self.blocks_rent, (rows * row_len) as u64) {
            return None;
        }
        let axis = self.plan.key.axis();
        let picks = normalized_picks(indices, shape[axis])?;
        let mut within = Vec::with_capacity(row_len / picks.len().max(1));
        for_each_offset(&shape[axis + 1..], &strides[axis + 1..], |at| {
            within.push(at)
        });
        let offsets = picks
            .iter()
            .flat_map(|&k| {
                within
                    .iter()
                    .map(move |&at| k as isize * strides[axis] + at)
            })
            .collect();
        let per_block = (TABLE_ENTRIES / row_len).clamp(1, rows);
        Some(Blocks {
            offsets,
            row_step,
            rows: per_block,
            blocks: rows / per_block,
            tail_rows: rows % per_block,
        })
    }

    /// The rank-2 Gather on indices of `dtype` (one of [`TABLES`]) that runs blocks,
    /// compiled on first use with its specialized code.
    fn block_sibling(&self, dtype: DType) -> Result<&Kernel> {
        let slot = TABLES
            .iter()
            .position(|&d| d == dtype)
            .expect("one of TABLES");
        let sibling = self.blocks[slot].get_or_try_init(|| {
            let key = KernelKey::gather(self.plan.key.dtype(), dtype, 2, 1, 1)?;
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
    /// output against the interpreter's and returns which tables' blocks ran (see
    /// [`TABLES`]).
    #[allow(clippy::too_many_arguments)]
    fn gather(
        dtype: DType,
        len: usize,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        axis: usize,
        picks: &[i64],
    ) -> [bool; 2] {
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
        assert_eq!(
            got.bytes(),
            want.bytes(),
            "{shape:?} {strides:?} axis {axis}"
        );
        kernel.blocks.each_ref().map(|s| s.get().is_some())
    }

    const U16: [bool; 2] = [true, false];
    const NONE: [bool; 2] = [false, false];

    #[test]
    fn blocks_agree_with_the_interpreter() {
        let picks = [3, -1, 0, 3, -4];
        // The last axis of narrow rows, with a tail block (65537 rows).
        let (rows, n) = (65_537, 4);
        let last = gather(
            DType::F32,
            rows * n,
            &[rows, n],
            &[n as isize, 1],
            0,
            1,
            &picks,
        );
        assert_eq!(last, U16);
        // Rows walked backwards, and an inner axis whose picks move two i16 each.
        let (rows, n) = (32_768, 6);
        let shape = [rows, n, 2];
        let back = [-(2 * n as isize), 2, 1];
        let last_row = (rows - 1) * 2 * n;
        let back = gather(DType::I16, rows * n * 2, &shape, &back, last_row, 1, &picks);
        assert_eq!(back, U16);
        // Rows of three outer dims, one of them of one row, and a transposed inner part.
        let shape = [256, 1, 128, 6, 2];
        let strides = [128 * 12, 5, 12, 1, 6];
        let outer = gather(DType::U8, 256 * 128 * 12, &shape, &strides, 0, 3, &picks);
        assert_eq!(outer, U16);
        // Blocks of 256 rows of 300 span past u16: a table of u32 entries.
        let (rows, n) = (131_072, 300);
        let far = gather(
            DType::U8,
            rows * n,
            &[rows, n],
            &[n as isize, 1],
            0,
            1,
            &[-1, 7],
        );
        assert_eq!(far, [false, true]);
    }

    #[test]
    fn other_gathers_take_the_ordinary_path() {
        let picks = [1, 0];
        // Picks of 16 bytes: vectors in the ordinary loop nest.
        let (rows, n) = (65_536, 2);
        let shape = [rows, n, 4];
        let wide = gather(DType::F32, rows * n * 4, &shape, &[8, 4, 1], 0, 1, &picks);
        assert_eq!(wide, NONE);
        // Rows that are not evenly spaced (a gap after every 64).
        let shape = [1024, 64, 4];
        let strides = [64 * 4 + 1, 4, 1];
        let len = 1024 * (64 * 4 + 1);
        assert_eq!(
            gather(DType::F32, len, &shape, &strides, 0, 2, &picks),
            NONE
        );
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
