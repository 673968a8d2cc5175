//! Constructors of views and tensors: every invalid geometry is refused.

use scatterjit::ir::{DType, Error as IrError, KernelKey, OpKind, Operand, Reduction, Tensor};
use scatterjit::{TensorView, TensorViewMut};

use super::inputs::cache;
use super::{custom, run_matrix, Expect, Row};

fn view_case(
    name: &str,
    make: impl Fn() -> scatterjit::ir::Result<()> + 'static,
    expect: Expect,
) -> Row {
    let path = name.split(": ").next().unwrap_or(name).to_string();
    custom(name, move |c| c.expect(&path, make(), &expect))
}

fn constructor_cases() -> Vec<Row> {
    use DType::{Bool, String, F32, F64};
    use Expect::{Exact, InvalidView};
    use Operand::{Data, Output};
    let view = |dtype, shape: &'static [usize], strides: &'static [isize], offset, len| {
        move || {
            let bytes = vec![0u8; len];
            TensorView::new(dtype, shape, strides, offset, &bytes).map(|_| ())
        }
    };
    let view_mut = |shape: &'static [usize], strides: &'static [isize], offset, len| {
        move || {
            let mut bytes = vec![0u8; len];
            TensorViewMut::new(F32, shape, strides, offset, &mut bytes).map(|_| ())
        }
    };
    let contiguous = |shape: &'static [usize], len| {
        move || {
            let bytes = vec![0u8; len];
            TensorView::contiguous(F32, shape, &bytes).map(|_| ())
        }
    };
    let from_bytes = |dtype, shape: &'static [usize], bytes: Vec<u8>| {
        move || Tensor::from_bytes(dtype, shape.to_vec(), bytes.clone()).map(|_| ())
    };
    let buffer = |expected, actual| Exact(IrError::BufferSize { expected, actual });
    let overflow = |shape: &[usize]| {
        Exact(IrError::ShapeOverflow {
            shape: shape.to_vec(),
        })
    };
    vec![
        view_case(
            "TensorView::new: buffer too short",
            view(F32, &[2, 3], &[3, 1], 0, 20),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: offset pushes the last element out",
            view(F32, &[2, 3], &[3, 1], 1, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: negative stride reaches before the start",
            view(F32, &[2, 3], &[-3, 1], 2, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: negative inner stride from offset 0",
            view(F32, &[2, 3], &[3, -1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: too few strides",
            view(F32, &[2, 3], &[1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: too many strides",
            view(F32, &[2], &[1, 1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: a stride for a scalar",
            view(F32, &[], &[1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: broadcast over an empty buffer",
            view(F32, &[2, 3], &[0, 0], 0, 0),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: scalar in an empty buffer",
            view(F32, &[], &[], 0, 0),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: stride isize::MAX",
            view(F32, &[2], &[isize::MAX], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: stride isize::MIN",
            view(F32, &[2], &[isize::MIN], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: offset usize::MAX",
            view(F32, &[1], &[1], usize::MAX, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: huge dim, huge stride",
            view(F32, &[usize::MAX / 2, 1], &[isize::MAX, 1], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            // In bytes, the reach is 2^128: it must not wrap to 0 and pass.
            "TensorView::new: reach times element size overflows i128",
            view(F32, &[(1 << 63) + 2], &[isize::MAX], 0, 4),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: string dtype",
            view(String, &[1], &[1], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: element count overflows",
            view(F32, &[usize::MAX, 2], &[0, 0], 0, 4),
            overflow(&[usize::MAX, 2]),
        ),
        view_case(
            "TensorView::contiguous: buffer too long",
            contiguous(&[2, 3], 28),
            buffer(24, 28),
        ),
        view_case(
            "TensorView::contiguous: buffer too short",
            contiguous(&[2, 3], 20),
            buffer(24, 20),
        ),
        view_case(
            "TensorView::contiguous: empty shape, non-empty buffer",
            contiguous(&[2, 0], 4),
            buffer(0, 4),
        ),
        view_case(
            "TensorView::contiguous: f32 [2^62], bytes overflow",
            contiguous(&[1 << 62], 0),
            overflow(&[1 << 62]),
        ),
        view_case(
            "TensorViewMut::new: stride 0 on a dim of 2",
            view_mut(&[2, 3], &[0, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, 1] on [2, 3]",
            view_mut(&[2, 3], &[1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, 1] on [3, 2]",
            view_mut(&[3, 2], &[1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, -1] on [2, 2]",
            view_mut(&[2, 2], &[1, -1], 1, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [2, 1, 1] on [2, 2, 2]",
            view_mut(&[2, 2, 2], &[2, 1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, 2] on [3, 2]",
            view_mut(&[3, 2], &[1, 2], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: stride 0 on a single dim of 3",
            view_mut(&[3], &[0], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: buffer too short",
            view_mut(&[2, 3], &[3, 1], 0, 20),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: too many strides",
            view_mut(&[6], &[1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "Tensor::from_bytes: too few bytes",
            from_bytes(F32, &[2, 3], vec![0; 20]),
            buffer(24, 20),
        ),
        view_case(
            "Tensor::from_bytes: too many bytes",
            from_bytes(F32, &[2, 3], vec![0; 28]),
            buffer(24, 28),
        ),
        view_case(
            "Tensor::from_bytes: scalar without bytes",
            from_bytes(F64, &[], vec![]),
            buffer(8, 0),
        ),
        view_case(
            "Tensor::from_bytes: bool byte 2",
            from_bytes(Bool, &[4], vec![0, 1, 2, 1]),
            Exact(IrError::InvalidBool { offset: 2, byte: 2 }),
        ),
        view_case(
            "Tensor::from_bytes: first bad bool byte wins",
            from_bytes(Bool, &[2, 2], vec![1, 255, 2, 0]),
            Exact(IrError::InvalidBool {
                offset: 1,
                byte: 255,
            }),
        ),
        view_case(
            "Tensor::from_bytes: element count overflows",
            from_bytes(F32, &[usize::MAX, 2], vec![]),
            overflow(&[usize::MAX, 2]),
        ),
        view_case(
            "Tensor::from_bytes: f64 [2^61], bytes overflow",
            from_bytes(F64, &[1 << 61], vec![]),
            overflow(&[1 << 61]),
        ),
        view_case(
            "Tensor::from_bytes: string dtype",
            from_bytes(String, &[1], vec![0]),
            Exact(IrError::UnknownDType {
                name: "string (not stored as bytes)".into(),
            }),
        ),
        view_case(
            "Tensor::from_slice: wrong element count",
            || Tensor::from_slice(&[2, 3], &[0f32; 5]).map(|_| ()),
            buffer(24, 20),
        ),
        view_case(
            "Tensor::zeros: f32 [2^62], bytes overflow",
            || Tensor::zeros(F32, vec![1 << 62]).map(|_| ()),
            overflow(&[1 << 62]),
        ),
        // String keys exist (validation yields them), but no kernel over byte views does.
        view_case(
            "KernelCache::get: string key by name",
            || no_kernel("gather.string.i64.r2.q1.a0".parse::<KernelKey>()?),
            Exact(IrError::UnsupportedDType {
                op: OpKind::Gather,
                dtype: String,
            }),
        ),
        view_case(
            "KernelCache::get: scatter_elements with string data",
            || {
                no_kernel(KernelKey::scatter_elements(
                    String,
                    DType::I64,
                    2,
                    0,
                    Reduction::None,
                    true,
                )?)
            },
            Exact(IrError::UnsupportedDType {
                op: OpKind::ScatterElements,
                dtype: String,
            }),
        ),
    ]
}

/// `KernelCache::get(key)`, with its input error (if any) as the result.
fn no_kernel(key: KernelKey) -> scatterjit::ir::Result<()> {
    match cache().get(&key) {
        Ok(_) => Ok(()),
        Err(e) => Err(e.as_invalid().cloned().unwrap_or(IrError::InvalidKey {
            key: key.to_string(),
            reason: format!("not an input error: {e}"),
        })),
    }
}

#[test]
fn constructor_errors() {
    run_matrix("constructors", constructor_cases());
}
