//! `mean`'s host steps around its compiled apply pass, the one place a call knows that
//! mean sums into scratch (see `crate::mean`): the sums and counts are allocated before the
//! first write, start from the output (or zero), take the apply pass, and are divided into
//! the output.

use scatterjit_ir::{Operand, PassKind};

use super::bind::Operands;
use super::report::Stop;
use super::Kernel;
use crate::engine::Buckets;
use crate::error::Result;
use crate::mean::{self, MeanScratch};
use crate::tensor::{Address, RawOperand, TensorView, TensorViewMut};

impl Kernel {
    /// Checks the scratch `mean` needs for an output of `out_shape` against the cap, before
    /// anything is allocated; nothing for other reductions.
    pub(super) fn check_mean_scratch(&self, out_shape: &[usize]) -> Result<()> {
        if self.plan.mean.is_none() {
            return Ok(());
        }
        let key = &self.plan.key;
        MeanScratch::check(key.kind(), key.dtype(), out_shape)
    }

    /// `mean`'s scratch for an output shaped like `out` (`None` for other reductions),
    /// allocated before the first write.
    pub(super) fn mean_scratch(&self, out: &TensorViewMut<'_>) -> Result<Option<MeanScratch>> {
        if self.plan.mean.is_none() {
            return Ok(None);
        }
        let key = &self.plan.key;
        MeanScratch::alloc(key.kind(), key.dtype(), out.shape()).map(Some)
    }

    /// `mean`'s apply pass: sums start from the output (or zero), the compiled pass adds the
    /// updates and counts them, then targeted elements become `sum / count`.
    pub(super) fn apply_mean(
        &self,
        out: &mut TensorViewMut<'_>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
        mut scratch: MeanScratch,
        buckets: Option<&Buckets>,
    ) -> std::result::Result<(), Stop> {
        let key = self.plan.key;
        let data_shape = out.shape().to_vec();
        scratch.init(out, key.use_init_val());
        let acc_ptr = scratch.acc.as_mut_ptr();
        let count_ptr = scratch.count.as_mut_ptr() as *mut u8;
        let strides: Vec<isize> = scatterjit_ir::row_major_strides(&data_shape)
            .iter()
            .map(|&s| s as isize)
            .collect();
        // Out is not accessed, but bounds the index.
        let ops = Operands::default()
            .with(Operand::Indices, indices.raw())
            .with(Operand::Updates, updates.raw())
            .with(Operand::Out, out.raw())
            .with(
                Operand::Acc,
                RawOperand {
                    address: Address::Write(acc_ptr),
                    shape: &data_shape,
                    strides: &strides,
                },
            )
            .with(
                Operand::Count,
                RawOperand {
                    address: Address::Write(count_ptr),
                    shape: &data_shape,
                    strides: &strides,
                },
            );
        self.run_pass_with(PassKind::Apply, &ops, None, buckets)?;
        mean::finish(out, &scratch, key.use_init_val());
        Ok(())
    }
}
