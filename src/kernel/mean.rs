//! `mean`'s scratch: the counts and sums its init, apply and finish nests walk (laid out
//! as `abi::scratch_per_element` says, or with one count per destination slice, see
//! [`Counts::PerSlice`]), allocated under the scratch cap before the first write, so that
//! running out of memory leaves the output as it was.

use scatterjit_ir::{checked_numel, row_major_strides, DTypeClass, Operand, PassKind};

use super::bind::{bind, variant_of, Operands};
use super::Kernel;
use crate::abi::{self, Variant, COUNT_SIZE};
use crate::alloc;
use crate::error::{Buffer, Error, Result};
use crate::tensor::{Address, RawOperand};

/// How many counts one call keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Counts {
    /// One per output element, shaped like the output.
    PerElement,
    /// One per slice of the output's last `n` dims (`PerSlice(n)`, `n` at least 1): every
    /// element of a slice gets the same number of updates when each update slice lands
    /// whole on one destination slice (see [`Kernel::counts`]). The counts are bound with
    /// stride 0 along those dims, so the init and finish nests read them as they read
    /// per-element ones, and the apply nest's row variant, whose row is the whole slice,
    /// counts each slice once.
    PerSlice(usize),
}

/// One call's counts and sums.
pub(super) struct Scratch {
    bytes: Vec<u8>,
    shape: Vec<usize>,
    count_strides: Vec<isize>,
    /// `None` where the sums are the output itself (see [`Kernel::sums_in_output`]).
    sum_strides: Option<Vec<isize>>,
    count_bytes: usize,
}

/// Row-major element strides of `shape`.
fn strides_of(shape: &[usize]) -> Vec<isize> {
    row_major_strides(shape)
        .iter()
        .map(|&s| s as isize)
        .collect()
}

/// The counts' strides: row-major, or per slice of the last `n` dims (row-major over the
/// others, stride 0 along those).
fn count_strides(out_shape: &[usize], counts: Counts) -> Vec<isize> {
    match counts {
        Counts::PerSlice(n) if n <= out_shape.len() => {
            let mut strides = strides_of(&out_shape[..out_shape.len() - n]);
            strides.resize(out_shape.len(), 0);
            strides
        }
        _ => strides_of(out_shape),
    }
}

/// Elements in one slice of the last `n` dims of `shape`.
fn slice_len(shape: &[usize], n: usize) -> usize {
    shape[shape.len().saturating_sub(n)..].iter().product()
}

impl Kernel {
    /// Whether `mean`'s sums are the output itself: floats that sum in their own type (f32,
    /// f64) and start from data's values, which the output holds before the first update
    /// (copied, or in place). The init pass then has nothing to write (the counts are
    /// allocated zeroed) and the finish divides in place: the same additions in the same
    /// order as into separate sums, without their buffer, their fill and a second read.
    pub(super) fn sums_in_output(&self) -> bool {
        let key = &self.plan.key;
        key.use_init_val()
            && key.dtype().class() == DTypeClass::Float
            && self
                .plan
                .mean_accumulator()
                .is_some_and(|acc| acc.size() == key.dtype().size())
    }

    /// Whether calls run `pass`: every pass of the plan but `mean`'s init where the sums
    /// are the output (see [`Self::sums_in_output`]).
    pub(super) fn runs(&self, pass: PassKind) -> bool {
        self.plan.pass(pass).is_some() && !(pass == PassKind::Init && self.sums_in_output())
    }

    /// Bytes of scratch per output element: a count, and a sum unless the sums are the
    /// output (0 unless the plan is `mean`'s).
    fn scratch_per_element(&self) -> usize {
        match self.sums_in_output() {
            true => COUNT_SIZE,
            false => abi::scratch_per_element(&self.plan),
        }
    }

    /// Bytes of scratch for an output of `out_shape` (0 unless the plan is `mean`'s).
    fn scratch_bytes(&self, out_shape: &[usize], counts: Counts) -> u128 {
        let per_element = self.scratch_per_element() as u128;
        // A validated shape's element count fits usize; saturate for the cap's sake.
        let Ok(numel) = checked_numel(out_shape) else {
            return u128::MAX;
        };
        let numel = numel as u128;
        match counts {
            Counts::PerSlice(n) if slice_len(out_shape, n) > 0 && per_element > 0 => {
                let sums = numel * (per_element - COUNT_SIZE as u128);
                sums + numel / slice_len(out_shape, n) as u128 * COUNT_SIZE as u128
            }
            _ => numel * per_element,
        }
    }

    /// Checks the most scratch the plan may need for an output of `out_shape` (per-element
    /// counts) against the cap, before anything is allocated.
    pub(super) fn check_scratch(&self, out_shape: &[usize]) -> Result<()> {
        if abi::scratch_per_element(&self.plan) == 0 {
            return Ok(());
        }
        alloc::check(
            self.plan.key.kind(),
            Buffer::Scratch,
            self.scratch_bytes(out_shape, Counts::PerElement),
        )
    }

    /// Which counts this call's passes can keep (see [`Counts::PerSlice`]): per slice of
    /// the output's last `n` dims (all after the axis) when the index spans them whole and
    /// the apply pass, bound as it will run (`axis_first` on the engine), takes the
    /// broadcast variant with the index and the counts both still along its innermost
    /// loop, and that loop walks the whole slice (its dims merged into one row). Then each
    /// update slice is read with one index and combined whole into one destination slice,
    /// and bumps that slice's count once. The widest such slice is tried first (an index
    /// broadcast over all the dims after the axis, as PyTorch Geometric's `expand_as`
    /// gives at any rank), then rows of the last dim. `ops` holds the indices, updates and
    /// output.
    pub(super) fn counts(&self, ops: &Operands<'_>, axis_first: bool) -> Counts {
        let key = &self.plan.key;
        let (out, indices) = (ops.get(Operand::Output), ops.get(Operand::Indices));
        let rank = out.shape.len();
        let Some(apply) = self.plan.pass(PassKind::Apply) else {
            return Counts::PerElement;
        };
        if abi::scratch_per_element(&self.plan) == 0 || rank < 2 || key.axis() >= rank - 1 {
            return Counts::PerElement;
        }
        let spans = |k: usize| indices.shape[k] == out.shape[k] && out.shape[k] > 0;
        if !spans(rank - 1) {
            return Counts::PerElement;
        }
        // The trailing dims that the index spans and is broadcast along.
        let broadcast = (key.axis() + 1..rank)
            .rev()
            .take_while(|&k| spans(k) && indices.strides[k] == 0)
            .count();
        let sums = match self.sums_in_output() {
            true => out.strides.to_vec(),
            false => strides_of(out.shape),
        };
        let layout = self.layout(PassKind::Apply);
        let position = |operand| {
            layout
                .accesses
                .iter()
                .position(|a| a.operand == operand)
                .expect("mean's apply reads the index and counts")
        };
        /// Only strides are read: no address is bound.
        fn stripped<'a>(shape: &'a [usize], strides: &'a [isize]) -> RawOperand<'a> {
            RawOperand {
                address: Address::Read(std::ptr::null()),
                shape,
                strides,
            }
        }
        let operands = [Operand::Indices, Operand::Updates, Operand::Output].map(|operand| {
            let raw = ops.get(operand);
            (operand, stripped(raw.shape, raw.strides))
        });
        let fits = |n: usize| {
            let counts = count_strides(out.shape, Counts::PerSlice(n));
            let probe = operands.iter().fold(
                Operands::default()
                    .with(Operand::Sums, stripped(out.shape, &sums))
                    .with(Operand::Counts, stripped(out.shape, &counts)),
                |probe, &(operand, raw)| probe.with(operand, raw),
            );
            let (params, order) = bind(key, apply, layout, &probe, axis_first);
            let Variant::Broadcast(still, _) = variant_of(layout, key, &params, &order) else {
                return false;
            };
            let Some(row) = layout.depth.checked_sub(1).map(|inner| params[inner]) else {
                return false;
            };
            still.contains(position(Operand::Indices))
                && still.contains(position(Operand::Counts))
                && usize::try_from(row).is_ok_and(|row| row == slice_len(out.shape, n))
        };
        std::iter::once(broadcast)
            .filter(|&n| n > 1)
            .chain(std::iter::once(1))
            .find(|&n| fits(n))
            .map_or(Counts::PerElement, Counts::PerSlice)
    }

    /// The scratch the plan needs for an output of `out_shape` with `counts` (`None`
    /// unless `mean`).
    pub(super) fn scratch(&self, out_shape: &[usize], counts: Counts) -> Result<Option<Scratch>> {
        if abi::scratch_per_element(&self.plan) == 0 {
            return Ok(None);
        }
        let op = self.plan.key.kind();
        let bytes = self.scratch_bytes(out_shape, counts);
        alloc::check(op, Buffer::Scratch, bytes)?;
        let numel = checked_numel(out_shape)?;
        let len = usize::try_from(bytes).map_err(|_| Error::OutOfMemory {
            op,
            buffer: Buffer::Scratch,
            bytes,
        })?;
        let sums = numel * (self.scratch_per_element() - COUNT_SIZE);
        let mut bytes = alloc::reused(op, len)?;
        // The apply counts from 0: init, where it runs, starts every count (and sum);
        // without it, earlier calls' counts are cleared here.
        if !self.runs(PassKind::Init) {
            zero(&mut bytes[..len - sums]);
        }
        Ok(Some(Scratch {
            bytes,
            shape: out_shape.to_vec(),
            count_strides: count_strides(out_shape, counts),
            sum_strides: (!self.sums_in_output()).then(|| strides_of(out_shape)),
            count_bytes: len - sums,
        }))
    }
}

/// Sets `bytes` to 0, in parallel where it is large.
fn zero(bytes: &mut [u8]) {
    /// Bytes per task.
    const CHUNK: usize = 1 << 20;
    match bytes.len() >= 2 * CHUNK && crate::threads::available() > 1 {
        true => {
            let helps = crate::threads::caller_helps_moving(bytes.len());
            crate::threads::each_item(bytes.chunks_mut(CHUNK).collect(), helps, |_, chunk| {
                chunk.fill(0)
            });
        }
        false => bytes.fill(0),
    }
}

// Kept for later calls: fresh counts' pages are read (the zero page) before they are
// written, and each such write flushes every thread's TLB (see `alloc::reused`).
impl Drop for Scratch {
    fn drop(&mut self) {
        alloc::keep(std::mem::take(&mut self.bytes));
    }
}

impl Scratch {
    /// `ops` with the counts and sums bound (the sums as `ops`' output where they are it).
    pub(super) fn bind<'a>(&'a mut self, ops: Operands<'a>) -> Operands<'a> {
        let (counts, sums) = self.bytes.split_at_mut(self.count_bytes);
        let piece = |at: &mut [u8], strides| RawOperand {
            address: Address::Write(at.as_mut_ptr()),
            shape: &self.shape,
            strides,
        };
        let sums = match &self.sum_strides {
            Some(strides) => piece(sums, strides),
            None => *ops.get(Operand::Output),
        };
        ops.with(Operand::Counts, piece(counts, &self.count_strides))
            .with(Operand::Sums, sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{TensorView, TensorViewMut};
    use scatterjit_ir::{DType, KernelKey, Reduction};

    #[test]
    fn an_index_broadcast_over_every_dim_after_the_axis_counts_whole_slices() {
        // A mean along axis 0 of [6, 4, 16] f32 from [5, 4, 16] updates, as PyTorch
        // Geometric's `index.view(-1, 1, 1).expand_as(src)` passes it: the index's strides
        // are (1, 0, 0).
        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 3, 0, Reduction::Mean, true)
            .unwrap();
        let kernel = Kernel::compile(key).unwrap();
        let (out_shape, shape) = ([6, 4, 16], [5, 4, 16]);
        let mut out = vec![0u8; 6 * 64 * 4];
        let mut ov = TensorViewMut::new(DType::F32, &out_shape, &[64, 16, 1], 0, &mut out).unwrap();
        let index = vec![0u8; 5 * 64 * 8];
        let updates = vec![0u8; 5 * 64 * 4 * 2];
        let mut counts = |index_strides: &[isize], update_strides: &[isize]| {
            let iv = TensorView::new(DType::I64, &shape, index_strides, 0, &index).unwrap();
            let uv = TensorView::new(DType::F32, &shape, update_strides, 0, &updates).unwrap();
            let ops = Operands::default()
                .with(Operand::Indices, iv.raw())
                .with(Operand::Updates, uv.raw())
                .with(Operand::Output, ov.raw());
            kernel.counts(&ops, false)
        };
        // Contiguous updates: each update slice of 64 elements is one row of the apply.
        assert_eq!(counts(&[1, 0, 0], &[64, 16, 1]), Counts::PerSlice(2));
        // Updates padded between rows: the slice's dims do not merge, rows of 16 do.
        assert_eq!(counts(&[1, 0, 0], &[128, 32, 1]), Counts::PerSlice(1));
        // An index broadcast along the last dim only, and one that varies along it.
        assert_eq!(counts(&[4, 1, 0], &[64, 16, 1]), Counts::PerSlice(1));
        assert_eq!(counts(&[64, 16, 1], &[64, 16, 1]), Counts::PerElement);
    }
}
