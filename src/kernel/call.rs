//! The one entry into machine code: a bound call of a compiled pass, run whole, as one
//! chunk of a split (see `super::schedule`), or on one bucket of the engine.

use scatterjit_ir::OPERAND_SLOTS;

use super::bind::Operands;
use super::schedule::Split;
use crate::abi::{ParamLayout, MAX_PARAMS, STATUS_OK};
use crate::engine::Buckets;
use crate::jit::PassFn;
use crate::tensor::Address;

/// One bound call of a compiled pass: entry, operand addresses and parameter block.
pub(super) struct Call {
    pub(super) entry: PassFn,
    pub(super) pointers: [*mut u8; OPERAND_SLOTS],
    pub(super) params: Vec<i64>,
}

// SAFETY: the pointers are operand addresses valid for the whole call (see `enter`).
// Chunks that run on other threads write disjoint elements (see `schedule::split`; the
// engine's buckets own disjoint destination ranges) or each their own partial output
// (`schedule::partial_split`), and only read `Call` itself.
unsafe impl Sync for Call {}

/// The operands' addresses by slot (null where unbound), as passes take them. An input's
/// address becomes `*mut` only because the ABI has one pointer type for every slot; see
/// `enter` for why nothing is stored through it.
pub(super) fn pointers(ops: &Operands<'_>) -> [*mut u8; OPERAND_SLOTS] {
    let mut pointers = [std::ptr::null_mut::<u8>(); OPERAND_SLOTS];
    for (slot, raw) in ops.slots.iter().enumerate() {
        if let Some(raw) = raw {
            pointers[slot] = match raw.address {
                Address::Read(p) => p.cast_mut(),
                Address::Write(p) => p,
            };
        }
    }
    pointers
}

/// Calls `entry` on `pointers` and `params`; returns its status. The one place the runtime
/// enters machine code.
///
/// Callers pass the pointers of a bound call (`Call`, `super::prepared`), or those of one
/// chunk of a split: bases moved to the start of a sub-range of one loop, so the chunk
/// reaches a subset of the positions of the whole pass; and the parameters bound for them,
/// with that loop's extent narrowed, or with a bucket's row list (axis coordinates below
/// the bound dim), which likewise reaches a subset of the positions.
pub(super) fn enter(entry: PassFn, pointers: &[*mut u8; OPERAND_SLOTS], params: &mut [i64]) -> i64 {
    // SAFETY: `entry` was compiled from the nest whose parameter layout filled `params`
    // (`bind`), from operands whose views prove every position of their shapes lies inside
    // their memory (or, for a prepared call, whose buffers are at least as long as the
    // geometry the views would have checked needs); the caller validated the shapes
    // against the op (`Op::validate`), so every position the loop nest reaches is a
    // position of the accessed operand, and indexed coordinates are bounds-checked in the
    // code against `s`. Generated code stores only through the slots of a pass's
    // destination and count (`Output`, `Sums`, `Counts`: see `Plan::new`), which hold
    // `Address::Write`s from exclusive borrows (`TensorViewMut`s, `&mut [u8]`) or scratch
    // buffers owned by this call; input slots (`Data`, `Indices`, `Updates`) come from
    // shared borrows and are only loaded from, so making them `*mut` for the ABI writes
    // nothing through a shared borrow. Writable operands alias no input
    // (`Kernel::check_disjoint`); concurrent chunks write disjoint elements (`split`, the
    // engine's buckets) or their own partial output, an output-sized row-major buffer in
    // place of a row-major output (`partial_split`). The code lives as long as the kernel,
    // which every caller borrows or holds an `Arc` of.
    unsafe { entry(pointers.as_ptr(), params.as_mut_ptr()) }
}

/// Runs `f` on a copy of `params` on the stack (a pass writes its error slots, and bound
/// calls are shared by threads); short blocks, the usual ones, in a short buffer.
pub(super) fn on_stack<R>(params: &[i64], f: impl FnOnce(&mut [i64]) -> R) -> R {
    const SHORT: usize = 32;
    if params.len() <= SHORT {
        let mut buffer = [0i64; SHORT];
        let copy = &mut buffer[..params.len()];
        copy.copy_from_slice(params);
        f(copy)
    } else {
        let mut buffer = [0i64; MAX_PARAMS];
        let copy = &mut buffer[..params.len()];
        copy.copy_from_slice(params);
        f(copy)
    }
}

impl Call {
    /// Runs the whole pass, or chunk `c` of `split`; on a bad index, the loop counters (in
    /// loop order, relative to the whole pass).
    pub(super) fn run(
        &self,
        layout: &ParamLayout,
        chunk: Option<(&Split, usize)>,
    ) -> std::result::Result<(), Vec<usize>> {
        on_stack(&self.params, |params| {
            let mut pointers = self.pointers;
            let mut first = 0i64;
            if let Some((split, c)) = chunk {
                let dim = params[split.level];
                let phase = split.phase(&pointers);
                first = split.start(dim, c, phase);
                params[split.level] = split.start(dim, c + 1, phase) - first;
                for &(slot, step) in &split.steps {
                    // wrapping_offset: a zero-size operand has a dangling base; nothing is
                    // dereferenced unless the chunk visits an element, which is in bounds.
                    pointers[slot] = pointers[slot].wrapping_offset(first as isize * step);
                }
            }
            if enter(self.entry, &pointers, params) == STATUS_OK {
                return Ok(());
            }
            let mut counters = error_counters(layout, params);
            if let Some((split, _)) = chunk {
                counters[split.level] += first as usize;
            }
            Err(counters)
        })
    }

    /// Runs the listed form of the pass on bucket `b` of `buckets` (see `crate::engine`);
    /// on a bad index, the loop counters (in loop order, the first one an axis coordinate).
    pub(super) fn run_listed(
        &self,
        layout: &ParamLayout,
        buckets: &Buckets,
        b: usize,
    ) -> std::result::Result<(), Vec<usize>> {
        let (rows, len) = buckets.bucket(b);
        if len == 0 {
            return Ok(());
        }
        on_stack(&self.params, |params| {
            params[0] = len as i64;
            // The list lives in `buckets`, borrowed for the call.
            params[layout.list_at] = rows as i64;
            if enter(self.entry, &self.pointers, params) == STATUS_OK {
                return Ok(());
            }
            let mut counters = error_counters(layout, params);
            counters[0] = buckets.row(b, counters[0]);
            Err(counters)
        })
    }
}

/// The loop counters a pass wrote into its error slots at a bad index.
pub(super) fn error_counters(layout: &ParamLayout, params: &[i64]) -> Vec<usize> {
    params[layout.err_at..layout.err_at + layout.depth]
        .iter()
        .map(|&c| c as usize)
        .collect()
}

#[cfg(test)]
mod tests {
    use scatterjit_ir::{DType, KernelKey, Operand, Plan, Reduction};

    /// What `enter`'s safety rests on: no pass stores through an input's slot.
    #[test]
    fn passes_write_only_outputs_and_scratch() {
        let mut keys = vec![
            KernelKey::gather_elements(DType::F32, DType::I64, 2, 1).unwrap(),
            KernelKey::gather(DType::F32, DType::I32, 2, 2, 0).unwrap(),
        ];
        for reduction in [Reduction::None, Reduction::Add, Reduction::Mean] {
            for init in [false, true] {
                let key =
                    KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, reduction, init);
                keys.push(key.unwrap());
            }
        }
        for key in keys {
            for nest in Plan::new(key).passes {
                for written in nest.dest.iter().chain(&nest.count) {
                    let operand = written.operand;
                    assert!(
                        matches!(operand, Operand::Output | Operand::Sums | Operand::Counts),
                        "{key}: {} writes {operand:?}",
                        nest.pass.name()
                    );
                }
            }
        }
    }
}
