//! Gather (ONNX) along the last axis of data whose rows are wide: every row of data picks
//! the same elements, so the picks can be made in increasing address order instead of the
//! index's order. Then the hardware prefetches each row, where in the index's order every
//! cache line of the row is a demand miss. The output row is written in the index's order,
//! for the same reason: each row's picks go through a buffer of one row, read in sorted
//! order and written out in order. (`gather_cols_f32`, 1024 picks from each of 4096 rows
//! of 4096 f32, 2-vCPU machine, 2026-11-25, `run_into` ms per call: 15-22 in the index's
//! order, 8.7-10.6 this way on one thread; 7.6-10.3 and 4.7-4.9 on two.)
//!
//! The picks move as bytes in a host loop, so results are the compiled kernel's bit for
//! bit; every index is checked before the first write, and a bad one sends the call to
//! the ordinary path, which names it.

use rayon::prelude::*;
use scatterjit_ir::{checked_numel, match_integer, OpKind};

use super::schedule::parallel_grain;
use super::Kernel;
use crate::error::Result;
use crate::tensor::{for_each_offset, offset_of, TensorView, TensorViewMut};

/// Rows of data narrower than this stay in the cache lines their first picks bring in.
const MIN_ROW_BYTES: usize = 4096;

/// Fewer picks per row than this gain little from their order.
const MIN_PICKS: usize = 16;

/// At most this many picks, so that a call's lists and per-thread buffers stay under a few
/// MiB whatever its input (they are not counted against the scratch cap).
const MAX_PICKS: usize = 1 << 16;

/// A row's picks: element offsets in a data row, in increasing order; per pick in the
/// index's order, where it sits among them (`rank`, a permutation of `0..count`, which
/// `move_row`'s unchecked reads rely on) and its element offset in an output row.
struct Order {
    reads: Vec<isize>,
    rank: Vec<usize>,
    writes: Vec<isize>,
}

impl Kernel {
    /// Runs a Gather along data's last axis in sorted order where it pays (see the module)
    /// and returns `true`; `false`, having written nothing, to take the compiled kernel:
    /// another op or axis, narrow rows, few picks, or a bad index.
    pub(super) fn gather_columns(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
    ) -> Result<bool> {
        let key = &self.plan.key;
        let axis = key.axis();
        let size = key.dtype().size();
        let (shape, strides) = (data.shape(), data.strides());
        let Some((count, rows)) = self.takes_columns(shape, strides, indices.shape()) else {
            return Ok(false);
        };
        let (s, step) = (shape[axis], strides[axis]);
        let Some(order) = self.order(indices, s, step, &out.strides()[axis..]) else {
            return Ok(false);
        };
        // Where row `r` starts, in elements from the start of data's and out's buffers.
        let row_start = |r: usize, offset: usize, strides: &[isize]| {
            offset as isize + offset_of(r, &shape[..axis], strides)
        };
        let data_bytes = data.buffer();
        let data_row = |r| row_start(r, data.offset(), &strides[..axis]);
        let picks_bytes = count * size;
        let grain = parallel_grain().max(1) as usize;
        let parallel =
            crate::threads::available() > 1 && rows >= 2 && rows.saturating_mul(count) >= 2 * grain;
        let row = |buffer: &mut Vec<u8>, r: usize, to: Row<'_>| {
            move_row(size, data_bytes, data_row(r), &order, buffer, to);
        };
        let buffer = || vec![0u8; picks_bytes];
        match out.dense_bytes_mut() {
            // Row `r` of a row-major output is its `r`th run of picks.
            Some(dense) if parallel => dense
                .par_chunks_mut(picks_bytes)
                .enumerate()
                .with_min_len(grain.div_ceil(count))
                .for_each_init(buffer, |buffer, (r, to)| row(buffer, r, Row::Dense(to))),
            Some(dense) => {
                let mut buffer = buffer();
                for (r, to) in dense.chunks_mut(picks_bytes).enumerate() {
                    row(&mut buffer, r, Row::Dense(to));
                }
            }
            None => {
                let (out_offset, out_strides) = (out.offset(), out.strides()[..axis].to_vec());
                let bytes = out.buffer_mut();
                let mut buffer = buffer();
                for r in 0..rows {
                    let start = row_start(r, out_offset, &out_strides);
                    row(&mut buffer, r, Row::Strided { bytes, start });
                }
            }
        }
        Ok(true)
    }

    /// The picks per row and the rows of a call with data of `shape` and `strides` and
    /// indices of `index_shape` if it takes the sorted picks (see the module): a Gather
    /// along data's last axis, rows of at least [`MIN_ROW_BYTES`], [`MIN_PICKS`] to
    /// [`MAX_PICKS`] picks, some rows.
    pub(super) fn takes_columns(
        &self,
        shape: &[usize],
        strides: &[isize],
        index_shape: &[usize],
    ) -> Option<(usize, usize)> {
        let key = &self.plan.key;
        let axis = key.axis();
        if key.kind() != OpKind::Gather || axis + 1 != shape.len() {
            return None;
        }
        // Element counts of views fit, but an empty view's other dims may multiply past
        // usize::MAX: `checked_numel` counts 0 for it.
        let count = checked_numel(index_shape).ok()?;
        let rows = checked_numel(&shape[..axis]).ok()?;
        let row_bytes = shape[axis]
            .saturating_mul(key.dtype().size())
            .saturating_mul(strides[axis].unsigned_abs());
        let takes =
            row_bytes >= MIN_ROW_BYTES && (MIN_PICKS..=MAX_PICKS).contains(&count) && rows > 0;
        takes.then_some((count, rows))
    }

    /// The [`Order`] of the picks of `indices` (each normalized and checked against `s`)
    /// along a data axis of stride `step` into output dims of `out_strides`; `None` at a
    /// bad index.
    fn order(
        &self,
        indices: &TensorView<'_>,
        s: usize,
        step: isize,
        out_strides: &[isize],
    ) -> Option<Order> {
        let count = checked_numel(indices.shape()).ok()?;
        // A position of the view: each product fits.
        let reads: Vec<isize> = normalized_picks(indices, s)?
            .into_iter()
            .map(|k| k as isize * step)
            .collect();
        // The output's dims after the outer ones are the index's, walked in the same order.
        let mut writes = Vec::with_capacity(count);
        for_each_offset(indices.shape(), out_strides, |at| writes.push(at));
        let mut sorted: Vec<(isize, usize)> = reads.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        let mut rank = vec![0usize; count];
        for (r, &(_, j)) in sorted.iter().enumerate() {
            rank[j] = r;
        }
        Some(Order {
            reads: sorted.into_iter().map(|(read, _)| read).collect(),
            rank,
            writes,
        })
    }
}

/// The positions along an axis of `s` elements that `indices` pick, in row-major order,
/// each normalized (a negative index counts from the end); `None` at a bad index, or if
/// the list is refused memory.
pub(super) fn normalized_picks(indices: &TensorView<'_>, s: usize) -> Option<Vec<usize>> {
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

/// Where a row of the output goes.
enum Row<'a> {
    /// The row itself, row-major: pick `j` at element `j`.
    Dense(&'a mut [u8]),
    /// The output's buffer, the row's position 0 at element `start`.
    Strided { bytes: &'a mut [u8], start: isize },
}

/// Copies one row's picks: from the data row starting at element `start` of `data` into
/// `buffer` in sorted order, then into the output row in the index's order.
fn move_row(size: usize, data: &[u8], start: isize, order: &Order, buffer: &mut [u8], to: Row<'_>) {
    fn typed<const N: usize>(
        data: &[u8],
        start: isize,
        order: &Order,
        buffer: &mut [u8],
        to: Row<'_>,
    ) {
        let count = order.reads.len();
        // The sorted reads' first and last bound all of them: checked once per row, so
        // that no pick pays a check of its own (which took about half of each pick's
        // instructions).
        let inside = |read: isize| {
            let end = usize::try_from(start + read)
                .ok()
                .and_then(|at| at.checked_add(1));
            end.and_then(|end| end.checked_mul(N))
                .is_some_and(|end| end <= data.len())
        };
        assert!(
            count > 0 && inside(order.reads[0]) && inside(order.reads[count - 1]),
            "a row's picks lie inside data"
        );
        assert_eq!(buffer.len(), count * N, "the buffer holds one row of picks");
        for (element, &read) in buffer.chunks_exact_mut(N).zip(&order.reads) {
            // SAFETY: `reads` is sorted, so `start + read` lies between the first and the
            // last read's elements, whose N bytes were checked above to lie inside `data`.
            let from = unsafe {
                std::slice::from_raw_parts(data.as_ptr().offset((start + read) * N as isize), N)
            };
            element.copy_from_slice(from);
        }
        let picked = |rank: usize| {
            debug_assert!(rank < count);
            // SAFETY: `rank` is a permutation of 0..count (see `Kernel::order`) and `buffer`
            // holds `count` elements of N bytes (checked above).
            unsafe { std::slice::from_raw_parts(buffer.as_ptr().add(rank * N), N) }
        };
        match to {
            Row::Dense(row) => {
                for (element, &rank) in row.chunks_exact_mut(N).zip(&order.rank) {
                    element.copy_from_slice(picked(rank));
                }
            }
            Row::Strided { bytes, start } => {
                for (&rank, &write) in order.rank.iter().zip(&order.writes) {
                    let at = (start + write) as usize * N;
                    bytes[at..at + N].copy_from_slice(picked(rank));
                }
            }
        }
    }
    match size {
        1 => typed::<1>(data, start, order, buffer, to),
        2 => typed::<2>(data, start, order, buffer, to),
        4 => typed::<4>(data, start, order, buffer, to),
        8 => typed::<8>(data, start, order, buffer, to),
        16 => typed::<16>(data, start, order, buffer, to),
        _ => unreachable!("element sizes are 1, 2, 4, 8 or 16 bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scatterjit_ir::{DType, KernelKey};

    #[test]
    fn empty_views_with_huge_dims_decline_and_run() {
        // Dims that multiply past usize::MAX beside a 0: valid, empty views.
        let huge = 1usize << 33;
        let key = KernelKey::gather(DType::F32, DType::I64, 4, 1, 3).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let data = TensorView::new(DType::F32, &[huge, huge, 0, 2048], &[0; 4], 0, &[]).unwrap();
        let picks = [0u8; 16 * 8];
        let indices = TensorView::new(DType::I64, &[16], &[1], 0, &picks).unwrap();
        let out_shape = [huge, huge, 0, 16];
        let mut out = TensorViewMut::new(DType::F32, &out_shape, &[0; 4], 0, &mut []).unwrap();
        assert!(!kernel.gather_columns(&mut out, &data, &indices).unwrap());
        // Twice, so that the second call may keep a binding of the geometry.
        for _ in 0..3 {
            kernel.run_into(&mut out, &data, &indices, None).unwrap();
        }
        let no_picks = TensorView::new(DType::I64, &[huge, huge, 0], &[0; 3], 0, &[]).unwrap();
        let data =
            TensorView::new(DType::F32, &[2, 2048], &[2048, 1], 0, &[0; 2 * 2048 * 4]).unwrap();
        let key = KernelKey::gather(DType::F32, DType::I64, 2, 3, 1).unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let out_shape = [2, huge, huge, 0];
        let mut out = TensorViewMut::new(DType::F32, &out_shape, &[0; 4], 0, &mut []).unwrap();
        assert!(!kernel.gather_columns(&mut out, &data, &no_picks).unwrap());
        for _ in 0..3 {
            kernel.run_into(&mut out, &data, &no_picks, None).unwrap();
        }
    }
}
