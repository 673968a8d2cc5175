//! The geometries a kernel's ordinary calls repeat, each with its binding (what a prepared
//! call decides once: validation, loop orders, variants, parameter blocks), so that a
//! framework calling the same node again pays for none of it. Only small calls are kept:
//! there the binding is most of a call's time. Which geometries are kept, and when they
//! are bound, is [`Recent`]'s rule.
//!
//! A call runs on a kept binding only where its geometry matches exactly (dtype, shape,
//! strides and offset of every operand, and the form, in place or not), which makes every
//! check the ordinary path would repeat (shapes against the op, the output's shape) a check
//! it already passed; and only where the binding runs whole on the calling thread (see
//! [`Binding::run`]), otherwise the call takes the ordinary path.

use std::sync::Arc;

use scatterjit_ir::checked_numel;

use super::prepared::Binding;
use super::Kernel;
use crate::abi;
use crate::error::Result;
use crate::recent::{geometry_hash, Recent, KEPT_BELOW};
use crate::tensor::{TensorView, TensorViewMut, Unbuffered};

/// A kernel's kept bindings.
#[derive(Default)]
pub(super) struct Memo {
    recent: Recent<Binding>,
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
        let binding = self
            .recent
            .find(|b| b.describes(ops.in_place, ops.out, ops.data, ops.indices, ops.updates))?;
        binding.run(
            kernel,
            ops.out.buffer_mut(),
            ops.data.map(TensorView::buffer),
            ops.indices.buffer(),
            ops.updates.map(TensorView::buffer),
        )
    }

    /// The binding kept for a call of [`Kernel::run`] on views of these geometries (see
    /// [`Binding::describes_new`]), if any.
    pub(super) fn find_new(
        &self,
        in_place: bool,
        data: &TensorView<'_>,
        indices: &TensorView<'_>,
        updates: Option<&TensorView<'_>>,
    ) -> Option<Arc<Binding>> {
        self.recent
            .find(|b| b.describes_new(in_place, data, indices, updates))
    }

    /// After a call that took the ordinary path and succeeded: binds its geometry if it is
    /// small and among the latest misses. Binding may compile a variant; failing to bind
    /// only leaves the geometry unkept.
    fn missed(&self, kernel: &Kernel, ops: &Operands<'_, '_>) {
        let shapes = [
            Some(ops.out.shape()),
            ops.data.map(TensorView::shape),
            Some(ops.indices.shape()),
            ops.updates.map(TensorView::shape),
        ];
        if !is_small(kernel, shapes) {
            return;
        }
        // The geometry `Binding::describes` compares.
        let out = &*ops.out;
        let inputs = [ops.data, Some(ops.indices), ops.updates]
            .map(|view| view.map(|v| (v.dtype(), v.shape(), v.strides(), v.offset())));
        let geometry = (
            ops.in_place,
            (out.dtype(), out.shape(), out.strides(), out.offset()),
            inputs,
        );
        if !self.recent.missed(geometry_hash(&geometry)) {
            return;
        }
        let out = Unbuffered::of_mut(ops.out);
        let data = ops.data.map_or_else(|| out.clone(), Unbuffered::of);
        let indices = Unbuffered::of(ops.indices);
        let updates = ops.updates.map(Unbuffered::of);
        let Ok(binding) = kernel.bind(ops.in_place, out, data, indices, updates) else {
            return;
        };
        // A binding of this geometry that no longer runs (the grain changed since) is
        // replaced, not kept beside the new one.
        self.recent.keep(binding, |b| {
            b.describes(ops.in_place, ops.out, ops.data, ops.indices, ops.updates)
        });
    }

    /// How many bindings are kept.
    pub(super) fn kept(&self) -> usize {
        self.recent.kept()
    }
}

/// Whether a call of operands of these shapes is small enough to keep: no scratch
/// (`mean`, whose calls run on views), no operand of [`KEPT_BELOW`] elements.
pub(super) fn is_small(kernel: &Kernel, shapes: [Option<&[usize]>; 4]) -> bool {
    // `checked_numel`: an empty view's other dims may multiply past usize::MAX.
    abi::scratch_per_element(&kernel.plan) == 0
        && shapes
            .into_iter()
            .flatten()
            .all(|shape| checked_numel(shape).is_ok_and(|n| n < KEPT_BELOW))
}
