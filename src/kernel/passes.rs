//! One call's passes, in the order of [`Plan::passes`](scatterjit_ir::Plan): the check
//! before the first write, the copy of an out-of-place scatter, then the passes that write.

use std::borrow::Cow;

use scatterjit_ir::{unravel, DType, Error as IrError, KernelKey, Operand, PassKind};

use super::bind::Operands;
use super::mean::Counts;
use super::report::Stop;
use super::Kernel;
use crate::alloc;
use crate::check;
use crate::error::{Error, Result};
use crate::partials;
use crate::tensor::{row_major, Address, RawOperand, TensorView, TensorViewMut};

/// [`Kernel::execute_into_copy`] takes destinations of at most this fraction of the
/// indices' bytes: the copy in and out costs four passes over the destination (in the
/// caches, where it is this small), against a second pass over the indices.
const COPY_UP_TO: usize = 8;

impl Kernel {
    /// Runs the plan's passes into `out`, reading `data` (`None` in place: `out` holds
    /// data). With `check_first`, every index is checked before the first write, so a bad
    /// one leaves `out` unchanged; without, `out` is the call's own and a bad index may stop
    /// a pass midway.
    pub(super) fn execute(
        &self,
        out: &mut TensorViewMut<'_>,
        data: Option<&TensorView<'_>>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
        check_first: bool,
    ) -> Result<()> {
        let key = self.plan.key;
        if let (None, Some(data)) = (updates, data) {
            // Checks every index before its first write, as the check pass would.
            if self.gather_blocks(out, data, indices)? {
                return Ok(());
            }
        }
        // In place, data is `out`, which the passes borrow mutably.
        let data_shape: Cow<'_, [usize]> = match data {
            Some(data) => Cow::Borrowed(data.shape()),
            None => Cow::Owned(out.shape().to_vec()),
        };
        // A successful sort has checked every index.
        let sorted = updates.and_then(|_| self.sorted(&data_shape, indices));
        let buckets = sorted.as_ref().and_then(|sorted| sorted.buckets.as_ref());
        let apply = self.plan.pass(PassKind::Apply).expect("every plan applies");
        // Gather visits indices only where its output is non-empty; check them all anyway.
        let out_empty = out.shape().contains(&0);
        let check =
            (check_first || (apply.domain == Operand::Output && out_empty)) && sorted.is_none();
        let bad = |pass, stop: Stop| self.bad_index(pass, stop, &data_shape, indices);
        // A scatter that can check its indices as it reads them, into scratch, writes the
        // output (copied, folded into) only once every index has passed: an integer
        // reduction that splits into partial outputs, else one whose destination is small
        // enough to copy.
        if let Some(updates) = updates.filter(|_| check) {
            if self.plan.pass(PassKind::Init).is_none() {
                let ops = Operands::default()
                    .with(Operand::Indices, indices.raw())
                    .with(Operand::Updates, updates.raw())
                    .with(Operand::Output, out.raw());
                match self.apply_into_partials(&ops) {
                    None => {}
                    Some(Err(stop)) => return Err(bad(PassKind::Apply, stop)),
                    Some(Ok(partial_outputs)) => {
                        if let Some(data) = data {
                            self.copy(out, data)?;
                        }
                        fold_into(out, &partial_outputs, key);
                        partials::keep(partial_outputs);
                        return Ok(());
                    }
                }
            }
            if let Some(done) = self.execute_into_copy(out, data, indices, updates) {
                return done;
            }
        }
        // A sorted call's passes read its u32 keys, one per slice, through the kernel keyed
        // on them.
        let keys = match &sorted {
            Some(sorted) => Some(sorted.keys_view(indices.shape(), key.axis())?),
            None => None,
        };
        let (read_indices, runner) = match &keys {
            Some(keys) => (keys, self.narrow_sibling(DType::U32)?),
            None => (indices, self),
        };
        let mut partial_outputs = Vec::new();
        let counts = match updates {
            Some(updates) if self.plan.mean_accumulator().is_some() => {
                let ops = Operands::default()
                    .with(Operand::Indices, read_indices.raw())
                    .with(Operand::Updates, updates.raw())
                    .with(Operand::Output, out.raw());
                runner.counts(&ops, buckets.is_some())
            }
            _ => Counts::PerElement,
        };
        let mut scratch = None;
        // Scatter indices the check copied to a narrower type, for the apply pass.
        let mut compacted = None;
        for nest in &self.plan.passes {
            let pass = nest.pass;
            if !self.runs(pass) {
                continue;
            }
            if pass != PassKind::Check && scratch.is_none() {
                // Before the first write, so that running out of memory leaves `out` as it was.
                scratch = self.scratch(out.shape(), counts)?;
            }
            match pass {
                // Without a check, indices that are not row-major are still copied
                // row-major (checked as they are copied) for the passes that read them.
                PassKind::Check if check || indices.dense_bytes().is_none() => {
                    if let (None, Some(data)) = (updates, data) {
                        // The compacted gather checks, then runs its own apply.
                        if self.gather_compacted(out, data, indices)? {
                            return Ok(());
                        }
                    } else {
                        compacted = self.compact(&data_shape, indices)?;
                    }
                    if compacted.is_none() && check {
                        self.check_indices(&data_shape, indices)?
                    }
                }
                PassKind::Check => {}
                PassKind::Copy => {
                    // In place, out holds data already.
                    if let Some(data) = data {
                        self.copy(out, data)?;
                    }
                }
                PassKind::Init | PassKind::Apply | PassKind::Finish => match updates {
                    // `compact` leaves `mean` (the only plan with init and finish) alone.
                    Some(updates) if compacted.is_some() => {
                        let compacted = compacted.as_ref().expect("checked");
                        let narrow = compacted.view()?;
                        let ops = Operands::default()
                            .with(Operand::Indices, narrow.raw())
                            .with(Operand::Updates, updates.raw())
                            .with(Operand::Output, out.raw());
                        let partials = Some(&mut partial_outputs);
                        compacted
                            .sibling()
                            .run_pass_with(pass, &ops, partials, None)
                            .map_err(|stop| bad(pass, stop))?;
                    }
                    Some(updates) => {
                        // An init that would fill destination slices again and again reads
                        // a copy of the index naming each once (a sorted call's keys are
                        // listed by bucket instead).
                        let distinct = (pass == PassKind::Init && sorted.is_none())
                            .then(|| self.distinct(out.shape(), indices))
                            .flatten();
                        let distinct_view = distinct.as_ref().map(|d| d.view()).transpose()?;
                        let mut ops = Operands::default()
                            .with(
                                Operand::Indices,
                                distinct_view.as_ref().unwrap_or(read_indices).raw(),
                            )
                            .with(Operand::Updates, updates.raw())
                            .with(Operand::Output, out.raw());
                        if let Some(scratch) = scratch.as_mut() {
                            ops = scratch.bind(ops);
                        }
                        let partials = Some(&mut partial_outputs);
                        runner
                            .run_pass_with(pass, &ops, partials, buckets)
                            .map_err(|stop| bad(pass, stop))?;
                    }
                    None => {
                        let data = data.expect("gathers read data");
                        self.apply_gather(self, (data, indices, out), (&data_shape, indices))?;
                    }
                },
            }
        }
        if !partial_outputs.is_empty() {
            fold_into(out, &partial_outputs, key);
            partials::keep(partial_outputs);
        }
        Ok(())
    }

    /// A scatter whose destination is small beside its indices (a histogram) runs into a
    /// row-major copy of the destination, its passes checking each index as they read it
    /// (as `Kernel::run`'s do), and the copy is written out only once every index has
    /// passed: the indices are read once, where the check before the first write would
    /// read them (or their compacted copy) a second time. Any reduction and dtype, float
    /// sums and `mean` included: the copy sees the same updates in the same order as the
    /// output would, so the bits are the same. `None`, having done nothing, where it does
    /// not apply: indices or a destination that are not row-major, a destination larger
    /// than [`COPY_UP_TO`]'s share of the indices' bytes, or whose copy the allocator
    /// refuses; a call on the copy that fails but for a bad index. On a bad index the
    /// output is untouched.
    fn execute_into_copy(
        &self,
        out: &mut TensorViewMut<'_>,
        data: Option<&TensorView<'_>>,
        indices: &TensorView<'_>,
        updates: &TensorView<'_>,
    ) -> Option<Result<()>> {
        let key = self.plan.key;
        let index_bytes = indices.dense_bytes()?.len();
        let dest = out.dense_bytes_mut()?;
        let len = dest.len();
        if len > index_bytes / COPY_UP_TO {
            return None;
        }
        // The copy only saves time: refused, the call checks first.
        let mut copy = alloc::reused(key.kind(), len).ok()?;
        match data {
            Some(data) => data.copy_row_major(&mut copy),
            None => copy.copy_from_slice(dest),
        }
        let shape = out.shape().to_vec();
        let result = TensorViewMut::new(key.dtype(), &shape, &row_major(&shape), 0, &mut copy)
            .map_err(Error::from)
            .and_then(|mut view| self.execute(&mut view, None, indices, Some(updates), false));
        let done = match result {
            Ok(()) => {
                out.dense_bytes_mut()
                    .expect("row-major, as above")
                    .copy_from_slice(&copy);
                Some(Ok(()))
            }
            Err(e @ Error::Invalid(IrError::IndexOutOfBounds { .. })) => Some(Err(e)),
            // Another failure (scratch refused) left the output as it was: the ordinary
            // path meets it again, after its check, so a bad index still comes first.
            Err(_) => None,
        };
        alloc::keep(copy);
        done
    }

    /// The apply pass of a Gather or GatherElements kernel (this one, or a sibling that
    /// `caller` runs a call on) reading `data` at `picks` into `out`; a bad index is named
    /// as `caller`'s check names it in the call, whose data has `call_shape` and whose
    /// indices are `call_indices`.
    pub(super) fn apply_gather(
        &self,
        caller: &Kernel,
        (data, picks, out): (&TensorView<'_>, &TensorView<'_>, &mut TensorViewMut<'_>),
        (call_shape, call_indices): (&[usize], &TensorView<'_>),
    ) -> Result<()> {
        let ops = Operands::default()
            .with(Operand::Data, data.raw())
            .with(Operand::Indices, picks.raw())
            .with(Operand::Output, out.raw());
        self.run_pass(PassKind::Apply, &ops)
            .map_err(|stop| caller.bad_index(PassKind::Apply, stop, call_shape, call_indices))
    }

    /// Out-of-place scatter's first step, `out = data`: into a row-major `out` from
    /// row-major or transposed data, the host's copy (`memcpy`, or tiles where the
    /// compiled pass would walk the output's order, a line of data per element); the
    /// compiled copy pass otherwise.
    fn copy(&self, out: &mut TensorViewMut<'_>, data: &TensorView<'_>) -> Result<()> {
        if let Some(to) = out.dense_bytes_mut() {
            if data.dense_bytes().is_some() || data.is_transposed() {
                data.copy_row_major(to);
                return Ok(());
            }
        }
        let ops = Operands::default()
            .with(Operand::Data, data.raw())
            .with(Operand::Output, out.raw());
        self.run_pass(PassKind::Copy, &ops)
            .map_err(|stop| match stop {
                Stop::Failed(e) => e,
                // Invariant: the copy pass reads no index, so it has no bad-index exit.
                Stop::BadIndex(_) => unreachable!("the copy pass reads no index"),
            })
    }

    /// Every index in bounds, or the first bad one (row-major) as an error: a host scan for
    /// indices that are row-major once their broadcast dims are dropped (each distinct
    /// index is scanned once), the compiled check pass for other strided ones.
    pub(super) fn check_indices(
        &self,
        data_shape: &[usize],
        indices: &TensorView<'_>,
    ) -> Result<()> {
        let size = data_shape[self.plan.key.axis()];
        if let Some(bytes) = indices.dense_bytes() {
            // Its own compacted form, but for dims of size 1, where `unravel` puts 0.
            return match check::first_bad(indices.dtype(), bytes, size) {
                None => Ok(()),
                Some(flat) => Err(self.index_error(indices, unravel(flat, indices.shape()), size)),
            };
        }
        let (compact, kept) = indices.compacted();
        if let Some(bytes) = compact.dense_bytes() {
            return match check::first_bad(indices.dtype(), bytes, size) {
                None => Ok(()),
                Some(flat) => {
                    // The first occurrence of that element: 0 along the dropped dims.
                    let mut position = vec![0; indices.shape().len()];
                    for (&d, p) in kept.iter().zip(unravel(flat, compact.shape())) {
                        position[d] = p;
                    }
                    Err(self.index_error(indices, position, size))
                }
            };
        }
        // The check reads only indices; the bound comes from data's shape.
        let strides = vec![0isize; data_shape.len()];
        let ops = Operands::default()
            .with(Operand::Indices, indices.raw())
            .with(
                Operand::Data,
                RawOperand {
                    address: Address::Read(std::ptr::null()),
                    shape: data_shape,
                    strides: &strides,
                },
            );
        self.run_pass(PassKind::Check, &ops)
            .map_err(|stop| self.bad_index(PassKind::Check, stop, data_shape, indices))
    }
}

/// `out = out ⊕ partial` for each of a call's partial outputs in order.
fn fold_into(out: &mut TensorViewMut<'_>, partial_outputs: &[Vec<u8>], key: KernelKey) {
    let out = out
        .dense_bytes_mut()
        .expect("partial outputs are made for dense outputs only");
    partials::fold(key.reduction(), key.dtype(), out, partial_outputs);
}
