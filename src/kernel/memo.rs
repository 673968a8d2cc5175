//! The geometries a kernel's ordinary calls repeat, each with its binding (what a prepared
//! call decides once: validation, loop orders, variants, parameter blocks), so that a
//! framework calling the same node again pays for none of it. Only small calls are kept:
//! there the binding is most of a call's time.
//!
//! A geometry is bound on its second call among the last few misses (the first only leaves
//! its hash), so that calls whose shapes never repeat pay a hash, not a binding. A call
//! runs on a kept binding only where its geometry matches exactly (dtype, shape, strides
//! and offset of every operand, and the form, in place or not), which makes every check
//! the ordinary path would repeat (shapes against the op, the output's shape) a check it
//! already passed; and only where the binding runs whole on the calling thread (see
//! [`Binding::run`]), otherwise the call takes the ordinary path.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use scatterjit_ir::checked_numel;

use super::prepared::Binding;
use super::Kernel;
use crate::abi;
use crate::error::Result;
use crate::tensor::{TensorView, TensorViewMut, Unbuffered};

/// How many geometries one kernel keeps: a model may call one kernel at a few nodes of
/// different shapes.
const KEPT: usize = 4;

/// A kernel's kept bindings.
#[derive(Default)]
pub(super) struct Memo {
    state: Mutex<State>,
}

/// Calls with at least this many elements in an operand spend far more time on their work
/// than on binding it, and are not kept.
const KEPT_BELOW: usize = 1 << 16;

#[derive(Default)]
struct State {
    kept: [Option<Arc<Binding>>; KEPT],
    /// Where the next binding goes, round robin.
    next: usize,
    /// The hashes of the geometries of the latest misses, round robin.
    misses: [Option<u64>; KEPT],
    next_miss: usize,
}

/// One call's operands, as the memo sees them.
pub(super) struct Operands<'c, 'o> {
    pub(super) in_place: bool,
    pub(super) out: &'c mut TensorViewMut<'o>,
    /// `None` in place, where `out` holds data.
    pub(super) data: Option<&'c TensorView<'c>>,
    pub(super) indices: &'c TensorView<'c>,
    pub(super) updates: Option<&'c TensorView<'c>>,
}

impl Memo {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic cannot leave `State` half-updated: every update is one assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the call on a kept binding of its geometry, or else `ordinary`ly (with every
    /// check and decision made now), then keeps its geometry if it succeeded (see
    /// [`Self::missed`]).
    pub(super) fn call<'o>(
        &self,
        kernel: &Kernel,
        mut ops: Operands<'_, 'o>,
        ordinary: impl FnOnce(&mut TensorViewMut<'o>) -> Result<()>,
    ) -> Result<()> {
        if let Some(done) = self.run(kernel, &mut ops) {
            return done;
        }
        ordinary(&mut *ops.out)?;
        self.missed(kernel, &ops);
        Ok(())
    }

    /// Runs the call on a kept binding of its geometry, or `None`, having written nothing,
    /// where it must take the ordinary path (see [`Binding::run`]).
    fn run(&self, kernel: &Kernel, ops: &mut Operands<'_, '_>) -> Option<Result<()>> {
        let binding = {
            let state = self.state();
            let found =
                state.kept.iter().flatten().find(|b| {
                    b.describes(ops.in_place, ops.out, ops.data, ops.indices, ops.updates)
                });
            Arc::clone(found?)
        };
        binding.run(
            kernel,
            ops.out.buffer_mut(),
            ops.data.map(TensorView::buffer),
            ops.indices.buffer(),
            ops.updates.map(TensorView::buffer),
        )
    }

    /// After a call that took the ordinary path and succeeded: binds its geometry if it is
    /// small and among the latest misses. Binding may compile a variant; failing to bind
    /// only leaves the geometry unkept.
    fn missed(&self, kernel: &Kernel, ops: &Operands<'_, '_>) {
        if !is_small(kernel, ops) {
            return;
        }
        // The geometry `Binding::describes` compares.
        let mut hasher = DefaultHasher::new();
        ops.in_place.hash(&mut hasher);
        let out = &*ops.out;
        (out.dtype(), out.shape(), out.strides(), out.offset()).hash(&mut hasher);
        for view in [ops.data, Some(ops.indices), ops.updates] {
            view.map(|v| (v.dtype(), v.shape(), v.strides(), v.offset()))
                .hash(&mut hasher);
        }
        let hash = hasher.finish();
        {
            let mut state = self.state();
            match state.misses.iter().position(|&h| h == Some(hash)) {
                Some(seen) => state.misses[seen] = None,
                None => {
                    let slot = state.next_miss;
                    state.misses[slot] = Some(hash);
                    state.next_miss = (slot + 1) % KEPT;
                    return;
                }
            }
        }
        let out = Unbuffered::of_mut(ops.out);
        let data = ops.data.map_or_else(|| out.clone(), Unbuffered::of);
        let indices = Unbuffered::of(ops.indices);
        let updates = ops.updates.map(Unbuffered::of);
        let Ok(binding) = kernel.bind(ops.in_place, out, data, indices, updates) else {
            return;
        };
        let mut state = self.state();
        // A binding of this geometry that no longer runs (the grain changed since) is
        // replaced, not kept beside the new one.
        let stale = state.kept.iter().position(|kept| {
            kept.as_ref().is_some_and(|b| {
                b.describes(ops.in_place, ops.out, ops.data, ops.indices, ops.updates)
            })
        });
        let slot = stale.unwrap_or(state.next);
        if stale.is_none() {
            state.next = (slot + 1) % KEPT;
        }
        state.kept[slot] = Some(Arc::new(binding));
    }

    /// How many bindings are kept.
    pub(super) fn kept(&self) -> usize {
        self.state().kept.iter().flatten().count()
    }
}

/// Whether a call is small enough to keep: no scratch (`mean`, whose calls run on views),
/// no operand of [`KEPT_BELOW`] elements.
fn is_small(kernel: &Kernel, ops: &Operands<'_, '_>) -> bool {
    let shapes = [
        Some(ops.out.shape()),
        ops.data.map(TensorView::shape),
        Some(ops.indices.shape()),
        ops.updates.map(TensorView::shape),
    ];
    // `checked_numel`: an empty view's other dims may multiply past usize::MAX.
    abi::scratch_per_element(&kernel.plan) == 0
        && shapes
            .into_iter()
            .flatten()
            .all(|shape| checked_numel(shape).is_ok_and(|n| n < KEPT_BELOW))
}
