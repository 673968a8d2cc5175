//! The reference interpreter: SPEC.md written out plainly, element by element.
//!
//! It is the oracle of every test, so it is written for clarity, not speed: it reads the
//! tensors into typed vectors, walks positions in row-major order exactly as SPEC.md states
//! the ops, and builds a new output tensor. It never panics; every invalid input is an
//! [`Error`].
//!
//! ```
//! use scatterjit_ir::{interp, Op, Reduction, Tensor};
//! let op = Op::ScatterElements { axis: 1, reduction: Reduction::Add, use_init_val: true };
//! let data = Tensor::from_slice(&[1, 5], &[1.0f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
//! let indices = Tensor::from_slice(&[1, 2], &[1i64, -4]).unwrap();
//! let updates = Tensor::from_slice(&[1, 2], &[1.0f32, 2.0]).unwrap();
//! let out = interp::run(&op, &data, &indices, Some(&updates)).unwrap();
//! assert_eq!(out.to_vec::<f32>().unwrap(), [1.0, 5.0, 3.0, 4.0, 5.0]);
//! ```

use crate::element::Element;
use crate::error::{Error, Result};
use crate::kind::OpKind;
use crate::op::{Op, Validated};
use crate::reduction::Reduction;
use crate::tensor::{unravel, Tensor};

mod arith;
use arith::Arith;

/// Runs `op` on owned tensors exactly as SPEC.md states: the oracle of every test.
///
/// Validation ([`Op::validate`]) comes first, then every index is checked in row-major order
/// of `indices` (the first bad one is reported as [`Error::IndexOutOfBounds`]), and only then
/// is the output computed. `updates` is required for ScatterElements and must be `None` for
/// the gather ops.
pub fn run(op: &Op, data: &Tensor, indices: &Tensor, updates: Option<&Tensor>) -> Result<Tensor> {
    let validated = op.validate(data.meta(), indices.meta(), updates.map(|u| u.meta()))?;
    let axis = validated.key.axis();
    let positions = normalized_indices(op.kind(), indices, axis, data.shape()[axis])?;
    let inputs = Inputs {
        validated: &validated,
        data,
        index_shape: indices.shape(),
        positions: &positions,
        updates,
    };
    crate::match_element!(data.dtype(), T => run_typed::<T>(&inputs), _ => run_strings(&inputs))
}

/// Everything the typed part needs, after validation and the index check.
struct Inputs<'a> {
    validated: &'a Validated,
    data: &'a Tensor,
    index_shape: &'a [usize],
    /// `normalize(indices[p], s)` for every position `p`, in row-major order of `indices`.
    positions: &'a [usize],
    updates: Option<&'a Tensor>,
}

/// `normalize(k, s)` of SPEC.md: `k + s` for negative `k`, valid iff the result is in `[0, s)`.
fn normalize(k: i128, s: usize) -> Option<usize> {
    let s = s as i128;
    let k = if k < 0 { k + s } else { k };
    if (0..s).contains(&k) {
        Some(k as usize)
    } else {
        None
    }
}

/// Reads every index widened to i128 and normalizes it against `size`, in row-major order;
/// the first index out of bounds is the error.
fn normalized_indices(
    op: OpKind,
    indices: &Tensor,
    axis: usize,
    size: usize,
) -> Result<Vec<usize>> {
    fn widen<T: Element + Into<i128>>(indices: &Tensor) -> Result<Vec<i128>> {
        Ok(indices.to_vec::<T>()?.into_iter().map(Into::into).collect())
    }
    let raw = crate::match_integer!(
        indices.dtype(),
        T => widen::<T>(indices)?,
        dtype => return Err(Error::IndexDType { op, dtype }),
    );
    raw.iter()
        .enumerate()
        .map(|(flat, &index)| {
            normalize(index, size).ok_or_else(|| Error::IndexOutOfBounds {
                op,
                index,
                position: unravel(flat, indices.shape()),
                axis,
                size,
            })
        })
        .collect()
}

/// The flat offset of `position` under `strides`.
fn offset(position: &[usize], strides: &[usize]) -> usize {
    position.iter().zip(strides).map(|(p, s)| p * s).sum()
}

fn run_typed<T: Arith>(inputs: &Inputs<'_>) -> Result<Tensor> {
    let data = inputs.data.to_vec::<T>()?;
    let out = match inputs.validated.key.kind() {
        OpKind::ScatterElements => scatter_elements::<T>(inputs, &data)?,
        OpKind::GatherElements => gather_elements(inputs, &data),
        OpKind::Gather => gather(inputs, &data),
    };
    Tensor::from_slice(&inputs.validated.out_shape, &out)
}

/// Strings: the gather ops and ScatterElements with `none` (SPEC: "Types"), the elements
/// moved as they are.
fn run_strings(inputs: &Inputs<'_>) -> Result<Tensor> {
    let key = &inputs.validated.key;
    let data = inputs.data.strings()?;
    let out = match key.kind() {
        OpKind::ScatterElements => {
            if key.reduction() != Reduction::None {
                return Err(Error::UnsupportedReduction {
                    op: key.kind(),
                    reduction: key.reduction(),
                    dtype: key.dtype(),
                });
            }
            let updates = updates_of(inputs)?;
            let values = updates.strings()?;
            let mut out = data.to_vec();
            for (target, from) in scatter_pairs(inputs, updates) {
                out[target].clone_from(&values[from]);
            }
            out
        }
        OpKind::GatherElements => gather_elements(inputs, data),
        OpKind::Gather => gather(inputs, data),
    };
    Tensor::from_strings(&inputs.validated.out_shape, out)
}

/// The updates tensor of a ScatterElements (validation requires it).
fn updates_of<'a>(inputs: &Inputs<'a>) -> Result<&'a Tensor> {
    inputs.updates.ok_or(Error::MissingUpdates {
        op: inputs.validated.key.kind(),
    })
}

/// `(offset of out[p[axis := k]], offset of updates[p])` for every position `p` of
/// indices, in row-major order.
fn scatter_pairs(inputs: &Inputs<'_>, updates: &Tensor) -> Vec<(usize, usize)> {
    let axis = inputs.validated.key.axis();
    let data_strides = inputs.data.strides();
    let updates_strides = updates.strides();
    inputs
        .positions
        .iter()
        .enumerate()
        .map(|(flat, &k)| {
            let mut p = unravel(flat, inputs.index_shape);
            let from = offset(&p, &updates_strides);
            p[axis] = k;
            (offset(&p, &data_strides), from)
        })
        .collect()
}

/// `out = copy(data)`; for every position `p` of indices in row-major order:
/// `out[p[axis := k]] = combine(out[p[axis := k]], updates[p])`.
fn scatter_elements<T: Arith>(inputs: &Inputs<'_>, data: &[T]) -> Result<Vec<T>> {
    let key = &inputs.validated.key;
    let (op, dtype) = (key.kind(), key.dtype());
    let reduction = key.reduction();
    let updates_tensor = updates_of(inputs)?;
    let updates = updates_tensor.to_vec::<T>()?;
    let pairs = scatter_pairs(inputs, updates_tensor);

    let mut out = data.to_vec();
    let unsupported = Error::UnsupportedReduction {
        op,
        reduction,
        dtype,
    };
    if reduction == Reduction::Mean {
        // Every targeted element's updates, in row-major order of indices.
        let mut hits: Vec<Vec<T>> = vec![Vec::new(); out.len()];
        for &(target, from) in &pairs {
            hits[target].push(updates[from]);
        }
        for (target, list) in hits.iter().enumerate() {
            if !list.is_empty() {
                let start = key.use_init_val().then_some(data[target]);
                out[target] = T::mean(start, list).ok_or_else(|| unsupported.clone())?;
            }
        }
        return Ok(out);
    }
    if !key.use_init_val() && reduction != Reduction::None {
        let identity = reduction
            .identity_bytes(dtype)
            .ok_or_else(|| unsupported.clone())?;
        let identity = T::read_le(&identity);
        for &(target, _) in &pairs {
            out[target] = identity;
        }
    }
    for &(target, from) in &pairs {
        let (o, u) = (out[target], updates[from]);
        out[target] = match reduction {
            Reduction::None => u,
            Reduction::Add => o.add(u),
            Reduction::Mul => o.mul(u),
            Reduction::Max => o.maximum(u).ok_or_else(|| unsupported.clone())?,
            Reduction::Min => o.minimum(u).ok_or_else(|| unsupported.clone())?,
            Reduction::Mean => return Err(unsupported),
        };
    }
    Ok(out)
}

/// `out[p] = data[p[axis := normalize(indices[p])]]`, with the shape of indices.
fn gather_elements<T: Clone>(inputs: &Inputs<'_>, data: &[T]) -> Vec<T> {
    let axis = inputs.validated.key.axis();
    let strides = inputs.data.strides();
    inputs
        .positions
        .iter()
        .enumerate()
        .map(|(flat, &k)| {
            let mut p = unravel(flat, inputs.index_shape);
            p[axis] = k;
            data[offset(&p, &strides)].clone()
        })
        .collect()
}

/// `out[a, i, b] = data[a, normalize(indices[i]), b]`, where `a` ranges over the dims of data
/// before the axis, `i` over indices and `b` over the dims of data after the axis.
fn gather<T: Clone>(inputs: &Inputs<'_>, data: &[T]) -> Vec<T> {
    let axis = inputs.validated.key.axis();
    let shape = inputs.data.shape();
    if inputs.validated.out_shape.contains(&0) {
        // The dims of data around the axis may be huge when the output is empty.
        return Vec::new();
    }
    let outer: usize = shape[..axis].iter().product();
    let s = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * inputs.positions.len() * inner);
    for a in 0..outer {
        for &k in inputs.positions {
            for b in 0..inner {
                out.push(data[(a * s + k) * inner + b].clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    pub(super) fn scatter(axis: i64, reduction: Reduction, use_init_val: bool) -> Op {
        Op::ScatterElements {
            axis,
            reduction,
            use_init_val,
        }
    }

    pub(super) fn t<T: Element>(shape: &[usize], values: &[T]) -> Tensor {
        Tensor::from_slice(shape, values).unwrap()
    }

    /// Scatters 1-D `updates` at 1-D `indices` (i64) into 1-D `data` along axis 0.
    pub(super) fn scatter_1d<T: Element>(
        reduction: Reduction,
        use_init_val: bool,
        data: &[T],
        indices: &[i64],
        updates: &[T],
    ) -> Vec<T> {
        let out = run(
            &scatter(0, reduction, use_init_val),
            &t(&[data.len()], data),
            &t(&[indices.len()], indices),
            Some(&t(&[updates.len()], updates)),
        )
        .unwrap();
        out.to_vec::<T>().unwrap()
    }

    #[test]
    fn scatter_along_each_axis_with_negative_indices() {
        // ONNX Example 1 (axis 0) with indices written as negatives where possible.
        let data = t(&[3, 3], &[0.0f32; 9]);
        let indices = t(&[2, 3], &[-2i32, 0, -1, 0, 2, -2]);
        let updates = t(&[2, 3], &[1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2]);
        let out = run(
            &scatter(0, Reduction::None, true),
            &data,
            &indices,
            Some(&updates),
        )
        .unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            [2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]
        );
        // Axis -1 of a rank-3 tensor.
        let data = t(&[2, 1, 3], &[0u16; 6]);
        let indices = t(&[2, 1, 1], &[-1i8, 0]);
        let updates = t(&[2, 1, 1], &[5u16, 6]);
        let out = run(
            &scatter(-1, Reduction::None, true),
            &data,
            &indices,
            Some(&updates),
        )
        .unwrap();
        assert_eq!(out.to_vec::<u16>().unwrap(), [0, 0, 5, 6, 0, 0]);
    }

    #[test]
    fn updates_larger_than_indices_are_read_at_the_same_position() {
        // PyTorch: src = arange(1, 11).reshape(2, 5), index = [[0, 1, 2], [0, 1, 4]], dim 1.
        let src: Vec<i64> = (1..=10).collect();
        let out = run(
            &scatter(1, Reduction::None, true),
            &t(&[3, 5], &[0i64; 15]),
            &t(&[2, 3], &[0i64, 1, 2, 0, 1, 4]),
            Some(&t(&[2, 5], &src)),
        )
        .unwrap();
        assert_eq!(
            out.to_vec::<i64>().unwrap(),
            [1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn every_index_dtype_works() {
        let data = t(&[4], &[10i32, 11, 12, 13]);
        let check = |indices: Tensor| {
            let out = run(&Op::Gather { axis: 0 }, &data, &indices, None).unwrap();
            assert_eq!(
                out.to_vec::<i32>().unwrap(),
                [13, 10],
                "{:?}",
                indices.dtype()
            );
        };
        check(t(&[2], &[3u8, 0]));
        check(t(&[2], &[3u16, 0]));
        check(t(&[2], &[3u32, 0]));
        check(t(&[2], &[3u64, 0]));
        check(t(&[2], &[-1i8, -4]));
        check(t(&[2], &[-1i16, 0]));
        check(t(&[2], &[3i32, -4]));
        check(t(&[2], &[-1i64, 0]));
    }

    fn out_of_bounds(op: &Op, data: &Tensor, indices: &Tensor, updates: Option<&Tensor>) -> Error {
        let e = run(op, data, indices, updates).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e}");
        e
    }

    #[test]
    fn extreme_indices_are_out_of_bounds() {
        let data = t(&[2, 5], &[0.0f32; 10]);
        let updates = t(&[2, 5], &[1.0f32; 10]);
        let op = scatter(1, Reduction::Add, true);
        for (bad, value) in [
            (t(&[1, 2], &[0u64, u64::MAX]), i128::from(u64::MAX)),
            (t(&[1, 2], &[0i64, i64::MIN]), i128::from(i64::MIN)),
            (t(&[1, 2], &[0i64, i64::MAX]), i128::from(i64::MAX)),
            (t(&[1, 2], &[0i8, -6]), -6),
            (t(&[1, 2], &[0u8, 5]), 5),
        ] {
            let e = out_of_bounds(&op, &data, &bad, Some(&updates));
            assert_eq!(
                e,
                Error::IndexOutOfBounds {
                    op: OpKind::ScatterElements,
                    index: value,
                    position: vec![0, 1],
                    axis: 1,
                    size: 5,
                }
            );
        }
        // -s and s - 1 are the bounds.
        let ok = t(&[1, 2], &[-5i64, 4]);
        let out = run(&op, &data, &ok, Some(&updates)).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap()[..5], [1.0, 0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn the_first_bad_index_in_row_major_order_is_reported() {
        let data = t(&[3, 5], &[0i32; 15]);
        let indices = t(&[2, 2], &[0i32, 1, -7, 9]);
        let e = out_of_bounds(&Op::GatherElements { axis: -1 }, &data, &indices, None);
        assert_eq!(
            e.to_string(),
            "gather_elements: index -7 at indices[1, 0] is out of bounds for axis 1 of size 5"
        );
        // Nothing is computed before every index is checked, even for a scatter whose bad
        // index comes after valid ones.
        let e = out_of_bounds(
            &scatter(0, Reduction::None, true),
            &t(&[2], &[0i32; 2]),
            &t(&[3], &[0i64, 1, 2]),
            Some(&t(&[3], &[1i32, 2, 3])),
        );
        assert!(matches!(e, Error::IndexOutOfBounds { index: 2, .. }), "{e}");
    }

    #[test]
    fn indices_are_checked_even_when_the_output_is_empty() {
        let data = t(&[0, 3], &[0.0f32; 0]);
        let e = out_of_bounds(&Op::Gather { axis: 1 }, &data, &t(&[1], &[3i64]), None);
        assert!(matches!(e, Error::IndexOutOfBounds { size: 3, .. }), "{e}");
        // Any index is out of bounds along an axis of size 0.
        let data = t(&[2, 0], &[0u8; 0]);
        let e = out_of_bounds(&Op::Gather { axis: 1 }, &data, &t(&[], &[0i32]), None);
        assert_eq!(
            e,
            Error::IndexOutOfBounds {
                op: OpKind::Gather,
                index: 0,
                position: vec![],
                axis: 1,
                size: 0,
            }
        );
    }

    #[test]
    fn zero_size_dims() {
        // Scatter: a copy of data.
        let data = t(&[2, 0], &[0i32; 0]);
        let out = run(
            &scatter(1, Reduction::Mean, false),
            &data,
            &t(&[2, 0], &[0i64; 0]),
            Some(&t(&[2, 0], &[0i32; 0])),
        )
        .unwrap();
        assert_eq!(out, data);
        let data = t(&[3], &[1.0f32, 2.0, 3.0]);
        let out = run(
            &scatter(0, Reduction::Max, false),
            &data,
            &t(&[0], &[0i64; 0]),
            Some(&t(&[0], &[0.0f32; 0])),
        )
        .unwrap();
        assert_eq!(out, data);
        // Gather: an empty result of the right shape.
        let out = run(
            &Op::Gather { axis: 0 },
            &data,
            &t(&[2, 0], &[0i32; 0]),
            None,
        )
        .unwrap();
        assert_eq!(out.shape(), [2, 0]);
        let out = run(
            &Op::GatherElements { axis: 0 },
            &data,
            &t(&[0], &[0u8; 0]),
            None,
        )
        .unwrap();
        assert_eq!(out.shape(), [0]);
    }

    #[test]
    fn gather_elements_reads_along_the_axis() {
        // ONNX GatherElements example: data [[1, 2], [3, 4]], indices [[0, 0], [1, 0]], axis 1.
        let data = t(&[2, 2], &[1i32, 2, 3, 4]);
        let indices = t(&[2, 2], &[0i64, 0, -1, 0]);
        let out = run(&Op::GatherElements { axis: 1 }, &data, &indices, None).unwrap();
        assert_eq!(out.to_vec::<i32>().unwrap(), [1, 1, 4, 3]);
        // Indices smaller than data off the axis, larger along it.
        let data: Vec<u32> = (0..9).collect();
        let data = t(&[3, 3], &data);
        let indices = t(&[4, 2], &[1i32, 2, 0, 2, 0, 0, 2, 1]);
        let out = run(&Op::GatherElements { axis: 0 }, &data, &indices, None).unwrap();
        assert_eq!(out.shape(), [4, 2]);
        assert_eq!(out.to_vec::<u32>().unwrap(), [3, 7, 0, 7, 0, 1, 6, 4]);
    }

    #[test]
    fn gather_shapes_and_values() {
        // Data filled with its own offsets: each output says which element was read.
        let values: Vec<i64> = (0..24).collect();
        let data = t(&[2, 3, 4], &values);
        let out = run(&Op::Gather { axis: 1 }, &data, &t(&[2], &[2i32, -3]), None).unwrap();
        assert_eq!(out.shape(), [2, 2, 4]);
        assert_eq!(
            out.to_vec::<i64>().unwrap(),
            [8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15]
        );
        // A scalar index removes the axis.
        let out = run(
            &Op::Gather { axis: -1 },
            &data,
            &Tensor::scalar(-1i64),
            None,
        )
        .unwrap();
        assert_eq!(out.shape(), [2, 3]);
        assert_eq!(out.to_vec::<i64>().unwrap(), [3, 7, 11, 15, 19, 23]);
        // Rank-2 indices on axis 0.
        let out = run(&Op::Gather { axis: 0 }, &data, &t(&[1, 2], &[1u8, 1]), None).unwrap();
        assert_eq!(out.shape(), [1, 2, 3, 4]);
        assert_eq!(out.to_vec::<i64>().unwrap()[..3], [12, 13, 14]);
    }

    #[test]
    fn strings_gather_and_scatter_with_none() {
        let s = |shape: &[usize], values: &[&str]| Tensor::from_strings(shape, values.to_vec());
        let data = s(&[2, 3], &["a", "", "ü", "日本", "🦀", "x y"]).unwrap();
        let out = run(&Op::Gather { axis: 1 }, &data, &t(&[2], &[-1i32, 0]), None).unwrap();
        assert_eq!(out.shape(), [2, 2]);
        assert_eq!(out.strings().unwrap(), ["ü", "a", "x y", "日本"]);
        let indices = t(&[1, 3], &[1i64, 0, 1]);
        let out = run(&Op::GatherElements { axis: 0 }, &data, &indices, None).unwrap();
        assert_eq!(out.strings().unwrap(), ["日本", "", "x y"]);
        // Duplicates: the last update in row-major order wins.
        let updates = s(&[1, 3], &["p", "q", "r"]).unwrap();
        let op = scatter(1, Reduction::None, true);
        let out = run(&op, &data, &t(&[1, 3], &[2u8, 0, 2]), Some(&updates)).unwrap();
        assert_eq!(out.strings().unwrap(), ["q", "", "r", "日本", "🦀", "x y"]);
        let e = run(&op, &data, &t(&[1, 1], &[3u8]), Some(&updates)).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfBounds { index: 3, .. }), "{e}");
        for r in [Reduction::Add, Reduction::Max, Reduction::Mean] {
            let e = run(&scatter(1, r, true), &data, &indices, Some(&updates)).unwrap_err();
            assert!(matches!(e, Error::UnsupportedReduction { .. }), "{e}");
        }
    }

    #[test]
    fn validation_errors_come_first() {
        let data = t(&[3], &[1.0f32, 2.0, 3.0]);
        let indices = t(&[1], &[99i64]);
        let e = run(&scatter(0, Reduction::Add, true), &data, &indices, None).unwrap_err();
        assert_eq!(
            e,
            Error::MissingUpdates {
                op: OpKind::ScatterElements
            }
        );
        assert_eq!(
            e.to_string(),
            "scatter_elements: an updates tensor is required"
        );
        let e = run(&Op::Gather { axis: 0 }, &data, &indices, Some(&data)).unwrap_err();
        assert_eq!(
            e,
            Error::UnexpectedUpdates {
                op: OpKind::Gather,
                rank: 1
            }
        );
        let e = run(&Op::Gather { axis: 1 }, &data, &indices, None).unwrap_err();
        assert!(matches!(e, Error::AxisOutOfRange { .. }), "{e}");
        let wrong = t(&[1], &[1.0f64]);
        let e = run(
            &scatter(0, Reduction::None, true),
            &data,
            &indices,
            Some(&wrong),
        )
        .unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
        let e = run(&Op::Gather { axis: 0 }, &data, &t(&[1], &[0.0f32]), None).unwrap_err();
        assert!(matches!(e, Error::IndexDType { .. }), "{e}");
    }

    #[test]
    fn empty_outputs_of_huge_shapes_are_immediate() {
        // 2^62 x 0 x 2^62 has no elements: nothing to loop over, however large the dims.
        let huge = 1usize << 62;
        let data = Tensor::zeros(DType::F32, vec![huge, 0, huge]).unwrap();
        assert_eq!(data.numel(), 0);
        let indices = Tensor::zeros(DType::I64, vec![0]).unwrap();
        let out = run(&Op::Gather { axis: 1 }, &data, &indices, None).unwrap();
        assert_eq!(out.shape(), [huge, 0, huge]);
        let data = Tensor::zeros(DType::U8, vec![huge, 4, 0]).unwrap();
        assert_eq!(data.numel(), 0);
    }
}
