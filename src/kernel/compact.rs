//! GatherElements, ScatterElements and Gather with wide indices: the check before the first
//! write also copies every index, normalized, into the narrowest unsigned type that holds the
//! axis (u8, u16 or u32), and the apply pass of a sibling kernel keyed on that type reads the
//! copy. The indices are then read once from their own memory, not twice: the copy is an
//! eighth to a half of their bytes.

use std::sync::Arc;

use scatterjit_ir::{checked_numel, DType, KernelKey, OpKind};

use super::Kernel;
use crate::alloc;
use crate::check;
use crate::codegen::Bounds;
use crate::error::Result;
use crate::tensor::{TensorView, TensorViewMut};

/// The index dtypes wide indices compact to, narrowest first.
pub(super) const NARROW: [DType; 3] = [DType::U8, DType::U16, DType::U32];

/// Checked indices copied to a narrower type, and the kernel whose apply pass reads them.
pub(super) struct Compacted<'k> {
    sibling: &'k Kernel,
    dtype: DType,
    shape: Vec<usize>,
    /// The copy.
    buffer: Vec<u8>,
}

// A fresh copy buffer costs a fill with zeros (or as many page faults) before the copy
// writes it again, which at two threads took more time than the copy saves (BENCHMARKS.md):
// copies reuse earlier calls' scratch (`alloc::reused`).
impl Drop for Compacted<'_> {
    fn drop(&mut self) {
        alloc::keep(std::mem::take(&mut self.buffer));
    }
}

impl Compacted<'_> {
    /// The copy, as the sibling's row-major indices.
    pub(super) fn view(&self) -> Result<TensorView<'_>> {
        Ok(TensorView::contiguous(
            self.dtype,
            &self.shape,
            &self.buffer,
        )?)
    }

    /// The kernel of the same op on the narrow indices.
    pub(super) fn sibling(&self) -> &Kernel {
        self.sibling
    }
}

impl Kernel {
    /// The narrower index dtype the `count` indices of this call compact to, if any:
    /// GatherElements, a ScatterElements other than `mean` (whose scratch is bound from its
    /// own index) or a Gather, with indices wider than it (or as wide, where `reordered`:
    /// indices that are not row-major, which the copy lays out row-major), enough of them
    /// to be worth a copy (at least two parallel grains), and an axis of `size` it holds.
    ///
    /// A Gather compacts to u8 or u16 only. Its apply picks whole rows of data along the
    /// axis; with more than 2^16 of them the picks miss the cache and hide the second read
    /// of the indices, and the copy's writes cost more than they save (one thread, 8M i64
    /// indices into 1M f32: 10-11 ms without a u32 copy, 11-13 with; into 65536 f32, 12 ms
    /// without a u16 copy, 7-8.5 with). GatherElements and ScatterElements pick one element
    /// per index, and a u32 copy pays (GatherElements of [64, 262144] f32: 39 ms without,
    /// 30 with). A u8 copy, on axes of up to 256, halves a u16 copy's bytes again
    /// (GatherElements of f16 [16, 512, 256] from i32 indices along the last axis, one
    /// thread: 18% fewer last-level misses under cachegrind's 8 MiB cache; timed, within
    /// this machine's noise, BENCHMARKS.md).
    fn compact_dtype(&self, count: usize, size: usize, reordered: bool) -> Option<DType> {
        let key = &self.plan.key;
        let width = key.index_dtype().size();
        let many = count as i64 >= 2 * super::schedule::parallel_grain();
        let widest = match key.kind() {
            OpKind::GatherElements => Some(DType::U32),
            OpKind::ScatterElements => self.plan.mean_accumulator().is_none().then_some(DType::U32),
            OpKind::Gather => Some(DType::U16),
        };
        let widest = widest.filter(|_| many)?;
        NARROW
            .into_iter()
            .filter(|to| to.size() <= widest.size())
            .find(|to| {
                let narrower = to.size() < width || (reordered && to.size() == width);
                narrower && size as u64 <= 1 << (8 * to.size())
            })
    }

    /// Checks the indices of a call on data of `data_shape` and copies them, row-major, to a
    /// narrower type (see [`Self::compact_dtype`]); a broadcast index is left alone.
    /// `Ok(None)` where they do not compact, the copy is refused, or they hold a bad index:
    /// nothing is written, and the caller's own check then names it.
    pub(super) fn compact(
        &self,
        data_shape: &[usize],
        indices: &TensorView<'_>,
    ) -> Result<Option<Compacted<'_>>> {
        let key = &self.plan.key;
        let size = data_shape[key.axis()];
        let dense = indices.dense_bytes();
        // None with a zero dim, whatever the others (whose product may overflow); too many
        // to count only in a broadcast view, which is not copied.
        let Ok(count) = checked_numel(indices.shape()) else {
            return Ok(None);
        };
        // A broadcast index keeps its own paths, which read one element per slice.
        let broadcast = indices
            .shape()
            .iter()
            .zip(indices.strides())
            .any(|(&d, &stride)| d > 1 && stride == 0);
        if dense.is_none() && broadcast {
            return Ok(None);
        }
        let Some(to) = self.compact_dtype(count, size, dense.is_none()) else {
            return Ok(None);
        };
        let len = count * to.size();
        // The copy only saves time: refused, the call reads the indices twice.
        let Ok(mut buffer) = alloc::reused(key.kind(), len) else {
            return Ok(None);
        };
        let in_range = match dense {
            Some(dense) => {
                check::compact_into(key.index_dtype(), dense, size, to.size(), &mut buffer)
            }
            None => check::compact_strided(indices, size, to.size(), &mut buffer),
        };
        if !in_range {
            alloc::keep(buffer);
            return Ok(None);
        }
        let sibling = self.narrow_sibling(to)?;
        Ok(Some(Compacted {
            sibling,
            dtype: to,
            shape: indices.shape().to_vec(),
            buffer,
        }))
    }

    /// The kernel of the same op on indices of `to`, one of [`NARROW`]: this kernel if its
    /// indices are `to` already, else a sibling compiled on first use whose passes do not
    /// check their indices (`Bounds::InRange`). Only for indices scatterjit made and
    /// checked: a compacted copy ([`Self::compact`]) or the engine's keys.
    pub(super) fn narrow_sibling(&self, to: DType) -> Result<&Kernel> {
        let key = &self.plan.key;
        if key.index_dtype() == to {
            return Ok(self);
        }
        let slot = NARROW.iter().position(|&d| d == to).expect("one of NARROW");
        let sibling = self.compact[slot].get_or_try_init(|| {
            let (rank, axis) = (key.rank(), key.axis() as i64);
            let narrow = match key.kind() {
                OpKind::ScatterElements => KernelKey::scatter_elements(
                    key.dtype(),
                    to,
                    rank,
                    axis,
                    key.reduction(),
                    key.use_init_val(),
                ),
                OpKind::GatherElements => KernelKey::gather_elements(key.dtype(), to, rank, axis),
                OpKind::Gather => KernelKey::gather(key.dtype(), to, rank, key.index_rank(), axis),
            }?;
            let mut sibling = Kernel::compile_with(narrow, Bounds::InRange)?;
            if let Some(counter) = &self.compile_counter {
                sibling.count_compiles_into(Arc::clone(counter));
            }
            Ok::<_, crate::Error>(Box::new(sibling))
        })?;
        Ok(sibling)
    }

    /// Runs a GatherElements or Gather call whose indices compact (see [`Self::compact`]): checks and
    /// copies them, then runs the sibling kernel's apply pass on the copy. `Ok(false)`
    /// where they do not compact, or hold a bad index (nothing is written).
    pub(super) fn gather_compacted(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
    ) -> Result<bool> {
        let Some(compacted) = self.compact(data.shape(), indices)? else {
            return Ok(false);
        };
        let view = compacted.view()?;
        compacted
            .sibling()
            .apply_gather(self, (data, &view, out), (data.shape(), indices))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use scatterjit_ir::{DType, KernelKey, Reduction, Tensor};

    use super::*;
    use crate::Geometry;

    /// A sibling compiled for indices in range computes what the checked kernel of its key
    /// does, duplicates included: in `Strided` code (a small call into a new output, which
    /// runs the compiled passes without the host's check) and in the `Contiguous` variant
    /// (a prepared call, which compiles it at once).
    #[test]
    fn siblings_on_indices_in_range_compute_what_checked_kernels_do() {
        let (rows, len, picks) = (3, 300, 700);
        let key = KernelKey::scatter_elements(DType::F32, DType::U16, 2, 1, Reduction::Add, true)
            .unwrap();
        let checked = Arc::new(Kernel::compile(key).unwrap());
        let in_range = Arc::new(Kernel::compile_with(key, Bounds::InRange).unwrap());
        let data: Vec<f32> = (0..rows * len).map(|i| (i % 7) as f32 * 0.5).collect();
        let at: Vec<u16> = (0..rows * picks).map(|i| (i * 37 % len) as u16).collect();
        let updates: Vec<f32> = (0..rows * picks).map(|i| i as f32 * 0.25).collect();
        let data = Tensor::from_slice(&[rows, len], &data).unwrap();
        let at = Tensor::from_slice(&[rows, picks], &at).unwrap();
        let updates = Tensor::from_slice(&[rows, picks], &updates).unwrap();
        let (d, i, u) = (
            TensorView::from(&data),
            TensorView::from(&at),
            TensorView::from(&updates),
        );
        let want = checked.run(&d, &i, Some(&u)).unwrap();
        assert_eq!(in_range.run(&d, &i, Some(&u)).unwrap(), want);

        let (whole, picked) = (
            Geometry::row_major(&[rows, len]),
            Geometry::row_major(&[rows, picks]),
        );
        let prepared = in_range
            .prepare(&whole, &whole, &picked, Some(&picked))
            .unwrap();
        let mut out = vec![0u8; want.bytes().len()];
        prepared
            .run_into(&mut out, data.bytes(), at.bytes(), Some(updates.bytes()))
            .unwrap();
        assert_eq!(out, want.bytes());
    }
}
