//! Binding a pass to one call's operands: shapes and strides into the parameter block (see
//! `crate::abi`), the loop order, and the variant the bound strides allow.

use scatterjit_ir::{KernelKey, LoopNest, Operand, PassKind, OPERAND_SLOTS};

use crate::abi::{self, ParamLayout, Still, Variant, MAX_ACCESSES, MAX_DEPTH};
use crate::tensor::RawOperand;

/// The operands of one call, by [`Operand`] slot.
#[derive(Default)]
pub(super) struct Operands<'a> {
    pub(super) slots: [Option<RawOperand<'a>>; OPERAND_SLOTS],
}

impl<'a> Operands<'a> {
    pub(super) fn with(mut self, operand: Operand, raw: RawOperand<'a>) -> Self {
        self.slots[operand.slot()] = Some(raw);
        self
    }

    pub(super) fn get(&self, operand: Operand) -> &RawOperand<'a> {
        self.slots[operand.slot()]
            .as_ref()
            .expect("every operand a pass accesses is bound before it runs")
    }
}

/// A loop order: `order[n]` is the domain dim that loop `n` walks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Order {
    dims: [usize; MAX_DEPTH],
    len: usize,
}

impl std::ops::Deref for Order {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        &self.dims[..self.len]
    }
}

/// The parameter block of `nest` for these operands, evaluated from `layout`, its recipe
/// (see `abi::ParamLayout`), and the loop order chosen: `order[n]` is the domain dim that
/// loop `n` walks.
///
/// Loops run outermost-first by decreasing byte stride summed over the accesses (stable, so
/// row-major tensors keep row-major order), which puts a contiguous dim innermost wherever
/// the views have one; `axis_first` moves the axis loop outermost (the engine's listed
/// loop). Any order is correct: two updates can meet only if they differ in the axis
/// coordinate alone, and every loop order visits those in increasing order.
pub(super) fn bind(
    key: &KernelKey,
    nest: &LoopNest,
    layout: &ParamLayout,
    ops: &Operands<'_>,
    axis_first: bool,
) -> (Vec<i64>, Order) {
    let depth = layout.depth;
    // On the stack: tiny calls are counted in nanoseconds.
    let mut dims = [0i64; MAX_DEPTH];
    for (n, &d) in ops.get(layout.domain).shape.iter().enumerate() {
        dims[n] = d as i64;
    }
    let mut strides = [[0i64; MAX_DEPTH]; MAX_ACCESSES];
    let mut indexed = [0i64; MAX_ACCESSES];
    // Per domain dim: bytes stepped over all accesses.
    let mut cost = [0u128; MAX_DEPTH];
    for (a, slots) in layout.accesses.iter().enumerate() {
        let raw = ops.get(slots.operand);
        let size = abi::element_size(key, slots.operand) as u128;
        for d in 0..depth {
            strides[a][d] = slots.along[d].sum(raw.strides);
            cost[d] += strides[a][d].unsigned_abs() as u128 * size;
        }
        indexed[a] = slots.indexed.sum(raw.strides);
    }
    let mut order = Order {
        dims: std::array::from_fn(|d| d),
        len: depth,
    };
    // The check pass stays row-major: the first bad index it meets is the one to report.
    if nest.pass != PassKind::Check {
        order.dims[..depth].sort_by_key(|&d| std::cmp::Reverse(cost[d]));
    }
    if axis_first {
        order.dims[..depth].sort_by_key(|&d| d != key.axis());
    }

    let mut params = vec![0i64; layout.len];
    for (n, &d) in order.iter().enumerate() {
        params[n] = dims[d];
    }
    for (a, slots) in layout.accesses.iter().enumerate() {
        for (n, &d) in order.iter().enumerate() {
            params[slots.strides_at + n] = strides[a][d];
        }
        if let Some(at) = slots.indexed_stride_at {
            params[at] = indexed[a];
        }
    }
    if let (Some(at), Some((operand, dim))) = (layout.bound_at, layout.bound) {
        params[at] = ops.get(operand).shape[dim] as i64;
    }
    (params, order)
}

/// The variant whose condition the bound parameters meet (see [`Variant::Contiguous`] and
/// [`Variant::Broadcast`]): read from the strides alone, whatever the shapes.
pub(super) fn variant_of(layout: &ParamLayout, params: &[i64], order: &[usize]) -> Variant {
    let Some(inner) = layout.depth.checked_sub(1) else {
        return Variant::Strided;
    };
    if order[inner] != inner {
        return Variant::Strided;
    }
    let mut still = 0u8;
    for (a, slots) in layout.accesses.iter().enumerate() {
        match params[slots.strides_at + inner] {
            stride if stride == slots.contiguous_stride(inner) => {}
            0 => still |= 1 << a,
            _ => return Variant::Strided,
        }
    }
    match still {
        0 => Variant::Contiguous,
        _ => Variant::Broadcast(Still(still)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{TensorView, TensorViewMut};
    use scatterjit_ir::{DType, Plan};

    fn loop_order(data_strides: &[isize], index_strides: &[isize]) -> Vec<usize> {
        let key = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
        let plan = Plan::new(key);
        let nest = plan.pass(PassKind::Apply).unwrap();
        let data = vec![0u8; 4 * 12];
        let idx = vec![0u8; 8 * 12];
        let mut out = vec![0u8; 4 * 12];
        let dv = TensorView::new(DType::F32, &[3, 4], data_strides, 0, &data).unwrap();
        let iv = TensorView::new(DType::I64, &[3, 4], index_strides, 0, &idx).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[3, 4], data_strides, 0, &mut out).unwrap();
        let ops = Operands::default()
            .with(Operand::Data, dv.raw())
            .with(Operand::Indices, iv.raw())
            .with(Operand::Output, ov.raw());
        bind(&key, nest, &ParamLayout::of(nest), &ops, false)
            .1
            .to_vec()
    }

    #[test]
    fn the_smallest_stride_runs_innermost() {
        assert_eq!(loop_order(&[4, 1], &[4, 1]), [0, 1]);
        assert_eq!(loop_order(&[1, 3], &[1, 3]), [1, 0]);
        // Bytes decide: the 8-byte indices outweigh the two transposed f32 tensors.
        assert_eq!(loop_order(&[1, 3], &[4, 1]), [0, 1]);
    }
}
