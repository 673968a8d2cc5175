//! `mean`'s scratch: the per-element counts and sums its init, apply and finish nests walk
//! (laid out as `abi::scratch_per_element` says), allocated under the scratch cap before
//! the first write, so that running out of memory leaves the output as it was.

use scatterjit_ir::{checked_numel, row_major_strides, Operand};

use super::bind::Operands;
use super::Kernel;
use crate::abi::{self, COUNT_SIZE};
use crate::alloc;
use crate::error::{Buffer, Error, Result};
use crate::tensor::{Address, RawOperand};

/// One call's counts and sums, shaped like its output.
pub(super) struct Scratch {
    bytes: Vec<u8>,
    shape: Vec<usize>,
    strides: Vec<isize>,
    numel: usize,
}

impl Kernel {
    /// Bytes of scratch for an output of `out_shape` (0 unless the plan is `mean`'s).
    fn scratch_bytes(&self, out_shape: &[usize]) -> u128 {
        let per_element = abi::scratch_per_element(&self.plan) as u128;
        // A validated shape's element count fits usize; saturate for the cap's sake.
        checked_numel(out_shape).map_or(u128::MAX, |n| n as u128 * per_element)
    }

    /// Checks the scratch the plan needs for an output of `out_shape` against the cap,
    /// before anything is allocated.
    pub(super) fn check_scratch(&self, out_shape: &[usize]) -> Result<()> {
        if abi::scratch_per_element(&self.plan) == 0 {
            return Ok(());
        }
        alloc::check(
            self.plan.key.kind(),
            Buffer::Scratch,
            self.scratch_bytes(out_shape),
        )
    }

    /// The scratch the plan needs for an output of `out_shape` (`None` unless `mean`).
    pub(super) fn scratch(&self, out_shape: &[usize]) -> Result<Option<Scratch>> {
        if abi::scratch_per_element(&self.plan) == 0 {
            return Ok(None);
        }
        self.check_scratch(out_shape)?;
        let op = self.plan.key.kind();
        let numel = checked_numel(out_shape)?;
        let bytes = self.scratch_bytes(out_shape);
        let len = usize::try_from(bytes).map_err(|_| Error::OutOfMemory {
            op,
            buffer: Buffer::Scratch,
            bytes,
        })?;
        Ok(Some(Scratch {
            bytes: alloc::zeroed(op, Buffer::Scratch, len)?,
            shape: out_shape.to_vec(),
            strides: row_major_strides(out_shape)
                .iter()
                .map(|&s| s as isize)
                .collect(),
            numel,
        }))
    }
}

impl Scratch {
    /// `ops` with the counts and sums bound.
    pub(super) fn bind<'a>(&'a mut self, ops: Operands<'a>) -> Operands<'a> {
        let (counts, sums) = self.bytes.split_at_mut(self.numel * COUNT_SIZE);
        let piece = |at: &mut [u8]| RawOperand {
            address: Address::Write(at.as_mut_ptr()),
            shape: &self.shape,
            strides: &self.strides,
        };
        ops.with(Operand::Counts, piece(counts))
            .with(Operand::Sums, piece(sums))
    }
}
