//! `mean`'s scratch: the counts and sums its init, apply and finish nests walk (laid out
//! as `abi::scratch_per_element` says, or with one count per destination row, see
//! [`Counts::PerRow`]), allocated under the scratch cap before the first write, so that
//! running out of memory leaves the output as it was.

use rayon::prelude::*;
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
    /// One per row of the output's last dim: every element of a row gets the same number
    /// of updates when each update row lands whole on one destination row (see
    /// [`Kernel::counts`]). The counts are bound with stride 0 along the last dim, so the
    /// init and finish nests read them as they read per-element ones, and the apply nest's
    /// row variant counts each row once.
    PerRow,
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

/// The counts' strides: row-major, or per row (row-major over all dims but the last,
/// stride 0 along it).
fn count_strides(out_shape: &[usize], counts: Counts) -> Vec<isize> {
    match (counts, out_shape.split_last()) {
        (Counts::PerRow, Some((_, rows))) => {
            let mut strides = strides_of(rows);
            strides.push(0);
            strides
        }
        _ => strides_of(out_shape),
    }
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
        match (counts, out_shape.last()) {
            (Counts::PerRow, Some(&last)) if last > 0 && per_element > 0 => {
                let sums = numel * (per_element - COUNT_SIZE as u128);
                sums + numel / last as u128 * COUNT_SIZE as u128
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

    /// Which counts this call's passes can keep (see [`Counts::PerRow`]): per row when the
    /// apply pass, bound as it will run (`axis_first` on the engine), takes the broadcast
    /// variant with the index and per-row counts both still along the innermost loop, that
    /// loop is the output's last dim (not the axis), and the index spans that whole dim.
    /// Then each update row is read with one index and combined whole into one destination
    /// row, and bumps that row's count once. `ops` holds the indices, updates and output.
    pub(super) fn counts(&self, ops: &Operands<'_>, axis_first: bool) -> Counts {
        let key = &self.plan.key;
        let (out, indices) = (ops.get(Operand::Output), ops.get(Operand::Indices));
        let rank = out.shape.len();
        let spans_rows = rank >= 2
            && key.axis() != rank - 1
            && indices.shape[rank - 1] == out.shape[rank - 1]
            && out.shape[rank - 1] > 0;
        let Some(apply) = self.plan.pass(PassKind::Apply) else {
            return Counts::PerElement;
        };
        if abi::scratch_per_element(&self.plan) == 0 || !spans_rows {
            return Counts::PerElement;
        }
        let per_row = count_strides(out.shape, Counts::PerRow);
        let sums = match self.sums_in_output() {
            true => out.strides.to_vec(),
            false => strides_of(out.shape),
        };
        // Only strides are read: no address is bound.
        let piece = |strides| RawOperand {
            address: Address::Read(std::ptr::null()),
            shape: out.shape,
            strides,
        };
        let mut probe = Operands::default()
            .with(Operand::Sums, piece(&sums))
            .with(Operand::Counts, piece(&per_row));
        for operand in [Operand::Indices, Operand::Updates, Operand::Output] {
            let raw = ops.get(operand);
            probe = probe.with(
                operand,
                RawOperand {
                    address: Address::Read(std::ptr::null()),
                    shape: raw.shape,
                    strides: raw.strides,
                },
            );
        }
        let layout = self.layout(PassKind::Apply);
        let (params, order) = bind(key, apply, layout, &probe, axis_first);
        let Variant::Broadcast(still) = variant_of(layout, key, &params, &order) else {
            return Counts::PerElement;
        };
        let position = |operand| {
            layout
                .accesses
                .iter()
                .position(|a| a.operand == operand)
                .expect("mean's apply reads the index and counts")
        };
        match still.contains(position(Operand::Indices))
            && still.contains(position(Operand::Counts))
        {
            true => Counts::PerRow,
            false => Counts::PerElement,
        }
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
        true => bytes.par_chunks_mut(CHUNK).for_each(|chunk| chunk.fill(0)),
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
