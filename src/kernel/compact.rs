//! GatherElements with wide indices: the check before the first write also copies every
//! index, normalized, into the narrowest unsigned type that holds the axis (u16 or u32),
//! and the apply pass of a sibling kernel keyed on that type reads the copy. The indices
//! are then read once from their own memory, not twice: the copy is a quarter (or half)
//! of their bytes.

use scatterjit_ir::{row_major_strides, DType, KernelKey, OpKind, Operand, PassKind};

use super::bind::Operands;
use super::Kernel;
use crate::alloc;
use crate::check;
use crate::error::{Buffer, Result};
use crate::tensor::{TensorView, TensorViewMut};

/// The index dtypes wide indices compact to, narrowest first.
pub(super) const NARROW: [DType; 2] = [DType::U16, DType::U32];

impl Kernel {
    /// The narrower index dtype the indices of this call compact to, if any: GatherElements
    /// with row-major indices (`dense`, their bytes) wider than it, enough of them to be
    /// worth a copy (at least two parallel grains), and an axis of `size` it holds.
    fn compact_dtype(&self, dense: &[u8], size: usize) -> Option<DType> {
        let key = &self.plan.key;
        let width = key.index_dtype().size();
        let many = (dense.len() / width) as i64 >= 2 * super::schedule::parallel_grain();
        if key.kind() != OpKind::GatherElements || !many {
            return None;
        }
        NARROW
            .into_iter()
            .find(|to| to.size() < width && size as u64 <= 1 << (8 * to.size()))
    }

    /// Runs a GatherElements call whose indices compact (see [`Self::compact_dtype`]):
    /// checks and copies them, then runs the sibling kernel's apply pass on the copy.
    /// `Ok(false)` where they do not compact, or hold a bad index (nothing is written:
    /// the caller's own check then names it).
    pub(super) fn gather_compacted(
        &self,
        out: &mut TensorViewMut<'_>,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
    ) -> Result<bool> {
        let key = &self.plan.key;
        let size = data.shape()[key.axis()];
        let Some((bytes, to)) = indices
            .dense_bytes()
            .and_then(|bytes| Some((bytes, self.compact_dtype(bytes, size)?)))
        else {
            return Ok(false);
        };
        let Ok(mut copy) = alloc::zeroed::<u8>(
            key.kind(),
            Buffer::Scratch,
            bytes.len() / key.index_dtype().size() * to.size(),
        ) else {
            // The copy only saves time: refused, the call reads the indices twice.
            return Ok(false);
        };
        if !check::compact_into(key.index_dtype(), bytes, size, to.size(), &mut copy) {
            return Ok(false);
        }
        let slot = NARROW.iter().position(|&d| d == to).expect("one of NARROW");
        let sibling = self.compact[slot].get_or_try_init(|| {
            let rank = key.rank();
            let narrow = KernelKey::gather_elements(key.dtype(), to, rank, key.axis() as i64)?;
            Kernel::compile(narrow).map(Box::new)
        })?;
        let strides: Vec<isize> = row_major_strides(indices.shape())
            .iter()
            .map(|&s| s as isize)
            .collect();
        let view = TensorView::new(to, indices.shape(), &strides, 0, &copy)?;
        let ops = Operands::default()
            .with(Operand::Data, data.raw())
            .with(Operand::Indices, view.raw())
            .with(Operand::Output, out.raw());
        sibling
            .run_pass(PassKind::Apply, &ops)
            .map_err(|stop| self.bad_index(PassKind::Apply, stop, data.shape(), indices))?;
        Ok(true)
    }
}
