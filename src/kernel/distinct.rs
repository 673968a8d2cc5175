//! The init pass of a reduction that starts from the identity (`use_init_val = false`,
//! PyTorch's `include_self=False`) over an index broadcast off the axis, PyTorch
//! Geometric's `index.view(-1, 1).expand_as(src)`, into fewer destination slices than the
//! index has: the pass fills a destination slice once for every update slice that lands
//! there, a GNN's max of messages eight times per node. It reads instead a copy of the
//! index that names each destination once, so it fills each slice once; the init writes
//! nothing but the identity, so which update named a slice, and how often, changes no bit.

use std::sync::atomic::{AtomicUsize, Ordering};

use scatterjit_ir::{match_integer, DType, PassKind};

use super::Kernel;
use crate::alloc;
use crate::engine;
use crate::error::Result;
use crate::tensor::TensorView;

/// The fewest update slices a copy is made for, and the fewest bytes of a slice (see
/// [`set_distinct_from`]).
static FROM: [AtomicUsize; 2] = [
    AtomicUsize::new(SLICES_FROM),
    AtomicUsize::new(SLICE_BYTES_FROM),
];

/// The default fewest slices: below, the init's fills cost little beside the call.
const SLICES_FROM: usize = 4096;

/// The default fewest bytes of a slice: the copy's scan costs about 22 instructions a
/// slice, which a fill of fewer bytes costs too (f32 max, 400,000 slices into 50,000, one
/// thread, with a scan of twice the instructions: slices of 1 and 8 elements 3x and 1.1x
/// slower with the copy, of 16 and 64 elements 1.1x and 1.3x faster; BENCHMARKS.md).
const SLICE_BYTES_FROM: usize = 64;

/// A copy is made where the destination has at most this fraction of the update slices
/// along the axis: at least half of the init's fills are then repeats.
const SLICES_PER_DESTINATION: usize = 2;

/// Sets the fewest update slices, and the fewest bytes of one, for which an init reads a
/// copy of the index naming each destination slice once (defaults 4096 and 64). Results do
/// not depend on it; tests lower it so that small problems take that path.
#[doc(hidden)]
pub fn set_distinct_from(slices: usize, slice_bytes: usize) {
    FROM[0].store(slices, Ordering::Relaxed);
    FROM[1].store(slice_bytes, Ordering::Relaxed);
}

/// An index naming each destination slice its call's index names, once, in the order of
/// first use: the raw elements (normalized by the pass as the call's own are), one per
/// position along the axis and broadcast along every other dim.
pub(super) struct Distinct {
    shape: Vec<usize>,
    strides: Vec<isize>,
    buffer: Vec<u8>,
    dtype: DType,
}

impl Drop for Distinct {
    fn drop(&mut self) {
        alloc::keep(std::mem::take(&mut self.buffer));
    }
}

impl Distinct {
    /// The copy as an index of the init pass.
    pub(super) fn view(&self) -> Result<TensorView<'_>> {
        Ok(TensorView::new(
            self.dtype,
            &self.shape,
            &self.strides,
            0,
            &self.buffer,
        )?)
    }
}

impl Kernel {
    /// Whether the init pass of a call into an output of `out_shape`, through an index of
    /// this shape and these strides, reads a [`Distinct`] copy: the plan's init writes
    /// through the index, the index is broadcast along every dim but the axis, and it has
    /// at least [`SLICES_FROM`] slices of at least [`SLICE_BYTES_FROM`] bytes (or as
    /// [`set_distinct_from`] sets), [`SLICES_PER_DESTINATION`] per destination slice.
    /// Geometry alone decides, so that prepared calls of such geometry run on views.
    pub(super) fn inits_distinct(
        &self,
        out_shape: &[usize],
        index_shape: &[usize],
        index_strides: &[isize],
    ) -> bool {
        let axis = self.plan.key.axis();
        let init_through_index = self
            .plan
            .pass(PassKind::Init)
            .is_some_and(|init| init.writes_through_index());
        // Only a scatter's init writes through its index, whose rank is the output's.
        if !init_through_index || axis >= index_shape.len().min(out_shape.len()) {
            return false;
        }
        let slices = index_shape[axis];
        let slice_bytes = (0..index_shape.len())
            .filter(|&d| d != axis)
            .fold(self.plan.key.dtype().size(), |n, d| {
                n.saturating_mul(index_shape[d])
            });
        engine::uniform_by_layout(index_shape, index_strides, axis)
            && !index_shape.contains(&0)
            && slices >= FROM[0].load(Ordering::Relaxed)
            && slice_bytes >= FROM[1].load(Ordering::Relaxed)
            && out_shape[axis].saturating_mul(SLICES_PER_DESTINATION) <= slices
    }

    /// The [`Distinct`] copy of `indices` for the init pass of a call into an output of
    /// `out_shape`, where [`Self::inits_distinct`] holds. `None`, having written nothing,
    /// where it does not, where the allocator refuses the copy, or at an index out of
    /// range: the init then reads the call's own index, and names a bad one as it would.
    pub(super) fn distinct(
        &self,
        out_shape: &[usize],
        indices: &TensorView<'_>,
    ) -> Option<Distinct> {
        let key = &self.plan.key;
        let axis = key.axis();
        let (shape, strides) = (indices.shape(), indices.strides());
        if !self.inits_distinct(out_shape, shape, strides) {
            return None;
        }
        let size = out_shape[axis];
        let dtype = indices.dtype();
        let width = dtype.size();
        let mut seen = alloc::reused(key.kind(), size).ok()?;
        seen.fill(0);
        let mut buffer = alloc::reused(key.kind(), size * width).ok()?;
        let mut count = 0;
        // Every position lies inside the buffer (the view checked it when made), so no
        // slice's offset is negative. Monomorphic per index type, each index read in place.
        let bytes = indices.buffer();
        let step = strides[axis] * width as isize;
        let first = indices.offset() as isize * width as isize;
        let in_range = match_integer!(
            dtype,
            T => {
                const W: usize = std::mem::size_of::<T>();
                (0..shape[axis] as isize).all(|e| {
                    let raw: &[u8; W] = bytes[(first + e * step) as usize..][..W]
                        .try_into()
                        .expect("one element");
                    let k = i128::from(T::from_le_bytes(*raw));
                    let k = if k < 0 { k + size as i128 } else { k };
                    let Some(seen) = usize::try_from(k).ok().and_then(|k| seen.get_mut(k)) else {
                        return false;
                    };
                    if *seen == 0 {
                        *seen = 1;
                        buffer[count * W..][..W].copy_from_slice(raw);
                        count += 1;
                    }
                    true
                })
            },
            _ => false,
        );
        alloc::keep(seen);
        if !in_range {
            alloc::keep(buffer);
            return None;
        }
        buffer.truncate(count * width);
        let mut distinct_shape = shape.to_vec();
        distinct_shape[axis] = count;
        let mut distinct_strides = vec![0; shape.len()];
        distinct_strides[axis] = 1;
        Some(Distinct {
            shape: distinct_shape,
            strides: distinct_strides,
            buffer,
            dtype,
        })
    }
}
