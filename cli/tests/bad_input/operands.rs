//! Kernels given operands they were not compiled for, and buffers too short for their views.

use scatterjit::ir::{
    DType, Error as IrError, KernelKey, Mismatch, OpKind, Operand, Reduction, Tensor,
};
use scatterjit::{Error, TensorView, TensorViewMut};

use scatterjit_cli::npy;

use super::columns::{Column, Src, COLUMNS};
use super::inputs::{
    f32s, filled, get_kernel, ix, key_for, sentinel, zero_indices, Layout, Strided,
};
use super::sizes::cli_bad_file;
use super::{custom, row, run_matrix, Row};

/// `kernel` given a `tensor` whose dtype or rank (`mismatch`) is that of kernel `needed`.
fn mismatched(kernel: &KernelKey, tensor: Operand, mismatch: Mismatch, needed: &str) -> Error {
    Error::Invalid(IrError::KernelMismatch {
        op: kernel.kind(),
        kernel: kernel.to_string(),
        tensor,
        mismatch,
        needed: needed.to_string(),
    })
}

fn dtypes(expected: DType, actual: DType) -> Mismatch {
    Mismatch::DType { expected, actual }
}

fn ranks(expected: usize, actual: usize) -> Mismatch {
    Mismatch::Rank { expected, actual }
}

fn bad_output(reason: &str) -> Error {
    Error::Invalid(IrError::InvalidView {
        tensor: Operand::Output,
        reason: reason.to_string(),
    })
}

/// Calls `key`'s kernel with operands it was not compiled for: `run`, `run_into` (an output
/// of the kernel's dtype and `out_shape`) and, for scatter kernels with updates,
/// `scatter_in_place`; each must fail with `expected` and write nothing.
fn mismatch(
    name: &str,
    key: KernelKey,
    inputs: (Tensor, Tensor, Option<Tensor>),
    out_shape: &'static [usize],
    expected: Error,
) -> Row {
    custom(name, move |c| {
        let Some(kernel) = get_kernel(c, &key) else {
            return;
        };
        let (data, indices, updates) = &inputs;
        let (dv, iv) = (TensorView::from(data), TensorView::from(indices));
        let uv = updates.as_ref().map(TensorView::from);
        c.err("Kernel::run", kernel.run(&dv, &iv, uv.as_ref()), &expected);
        let mut out = sentinel(key.dtype(), out_shape);
        let before = out.clone();
        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
        c.err("Kernel::run_into", got, &expected);
        c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
        if let (OpKind::ScatterElements, Some(uv)) = (key.kind(), &uv) {
            let mut target = data.clone();
            let got = kernel.scatter_in_place(&mut (&mut target).into(), &iv, uv);
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged(
                "Kernel::scatter_in_place data",
                data.bytes(),
                target.bytes(),
            );
        }
    })
}

/// `run_into` with a wrong output: valid inputs, `out` of the wrong dtype or shape.
fn wrong_output(
    name: &str,
    key: KernelKey,
    inputs: (Tensor, Tensor, Option<Tensor>),
    out: Tensor,
    reason: &'static str,
) -> Row {
    custom(name, move |c| {
        let Some(kernel) = get_kernel(c, &key) else {
            return;
        };
        let (data, indices, updates) = &inputs;
        let uv = updates.as_ref().map(TensorView::from);
        let mut out = out.clone();
        let before = out.clone();
        let got = kernel.run_into(
            &mut (&mut out).into(),
            &data.into(),
            &indices.into(),
            uv.as_ref(),
        );
        c.err("Kernel::run_into", got, &bad_output(reason));
        c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
    })
}

fn mismatch_cases() -> Vec<Row> {
    use DType::{F32, I32, I64, U8};
    let scatter_key = KernelKey::scatter_elements(F32, I64, 2, 1, Reduction::Add, true).unwrap();
    let gather_key = KernelKey::gather(F32, I64, 2, 1, 1).unwrap();
    let ge_key = KernelKey::gather_elements(F32, I64, 2, 1).unwrap();
    let good = || ix(&[2, 4], &[0i64, 1, 2, 3, 4, 0, 1, 2]);
    let scatter_inputs = || (f32s(&[3, 5]), good(), Some(filled(F32, &[2, 4], 7)));
    use Operand::{Data, Indices};
    vec![
        mismatch(
            "f32 scatter kernel, i32 operands",
            scatter_key,
            (
                filled(I32, &[3, 5], 1),
                good(),
                Some(filled(I32, &[2, 4], 7)),
            ),
            &[3, 5],
            mismatched(
                &scatter_key,
                Data,
                dtypes(F32, I32),
                "scatter_elements.i32.i64.r2.a1.add",
            ),
        ),
        mismatch(
            "rank-2 scatter kernel, rank-3 operands",
            scatter_key,
            (
                f32s(&[3, 5, 2]),
                ix(&[2, 4, 1], &[0i64; 8]),
                Some(filled(F32, &[2, 4, 1], 7)),
            ),
            &[3, 5, 2],
            mismatched(
                &scatter_key,
                Data,
                ranks(2, 3),
                "scatter_elements.f32.i64.r3.a1.add",
            ),
        ),
        mismatch(
            "i64-index scatter kernel, i32 indices",
            scatter_key,
            (
                f32s(&[3, 5]),
                ix(&[2, 4], &[0i32; 8]),
                Some(filled(F32, &[2, 4], 7)),
            ),
            &[3, 5],
            mismatched(
                &scatter_key,
                Indices,
                dtypes(I64, I32),
                "scatter_elements.f32.i32.r2.a1.add",
            ),
        ),
        mismatch(
            "scatter kernel, no updates",
            scatter_key,
            (f32s(&[3, 5]), good(), None),
            &[3, 5],
            Error::Invalid(IrError::MissingUpdates {
                op: OpKind::ScatterElements,
            }),
        ),
        mismatch(
            "f32 gather_elements kernel, u8 data",
            ge_key,
            (filled(U8, &[3, 5], 1), good(), None),
            &[2, 4],
            mismatched(
                &ge_key,
                Data,
                dtypes(F32, U8),
                "gather_elements.u8.i64.r2.a1",
            ),
        ),
        mismatch(
            "gather kernel for rank-1 indices, rank-2 indices",
            gather_key,
            (f32s(&[3, 5]), good(), None),
            &[3, 2, 4],
            mismatched(&gather_key, Indices, ranks(1, 2), "gather.f32.i64.r2.q2.a1"),
        ),
        mismatch(
            "gather kernel, updates given",
            gather_key,
            (f32s(&[3, 5]), ix(&[4], &[0i64; 4]), Some(f32s(&[4]))),
            &[3, 4],
            Error::Invalid(IrError::UnexpectedUpdates {
                op: OpKind::Gather,
                rank: 1,
            }),
        ),
        custom("gather kernels in place", move |c| {
            for key in [gather_key, ge_key] {
                let Some(kernel) = get_kernel(c, &key) else {
                    return;
                };
                let data = f32s(&[3, 5]);
                let indices = ix(&[2, 4], &[0i64; 8]);
                let updates = f32s(&[2, 4]);
                let mut target = data.clone();
                let got = kernel.scatter_in_place(
                    &mut (&mut target).into(),
                    &(&indices).into(),
                    &(&updates).into(),
                );
                let expected = Error::Invalid(IrError::InPlaceUnsupported { op: key.kind() });
                c.err(&format!("{key}: Kernel::scatter_in_place"), got, &expected);
                c.unchanged(&format!("{key}: data"), data.bytes(), target.bytes());
            }
        }),
        custom("scatter kernel in place, i32 data view", move |c| {
            let Some(kernel) = get_kernel(c, &scatter_key) else {
                return;
            };
            let data = filled(I32, &[3, 5], 1);
            let mut target = Strided::of(&data, Layout::PaddedReversed);
            let before = target.bytes.clone();
            let updates = filled(I32, &[2, 4], 7);
            let got = kernel.scatter_in_place(
                &mut target.view_mut(),
                &(&good()).into(),
                &(&updates).into(),
            );
            let expected = mismatched(
                &scatter_key,
                Data,
                dtypes(F32, I32),
                "scatter_elements.i32.i64.r2.a1.add",
            );
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged("Kernel::scatter_in_place data", &before, &target.bytes);
        }),
        wrong_output(
            "scatter run_into: output [3, 4] for [3, 5]",
            scatter_key,
            scatter_inputs(),
            sentinel(F32, &[3, 4]),
            "expected f32 [3, 5], got f32 [3, 4]",
        ),
        wrong_output(
            "scatter run_into: i32 output",
            scatter_key,
            scatter_inputs(),
            sentinel(I32, &[3, 5]),
            "expected f32 [3, 5], got i32 [3, 5]",
        ),
        wrong_output(
            "scatter run_into: rank-1 output",
            scatter_key,
            scatter_inputs(),
            sentinel(F32, &[15]),
            "expected f32 [3, 5], got f32 [15]",
        ),
        wrong_output(
            "scatter run_into: empty output",
            scatter_key,
            scatter_inputs(),
            sentinel(F32, &[3, 0]),
            "expected f32 [3, 5], got f32 [3, 0]",
        ),
        wrong_output(
            "gather run_into: output [2, 3] for [3, 2]",
            KernelKey::gather(F32, I64, 2, 1, 1).unwrap(),
            (f32s(&[3, 5]), ix(&[2], &[0i64, 4]), None),
            sentinel(F32, &[2, 3]),
            "expected f32 [3, 2], got f32 [2, 3]",
        ),
        wrong_output(
            "gather_elements run_into: u8 output",
            ge_key,
            (f32s(&[3, 5]), good(), None),
            sentinel(U8, &[2, 4]),
            "expected f32 [2, 4], got u8 [2, 4]",
        ),
    ]
}

#[test]
fn kernel_operand_mismatch() {
    run_matrix("kernel/operand mismatch", mismatch_cases());
}

/// Low level only (the other paths build the key from the operands): a kernel called with
/// operands of another dtype than its key's.
#[test]
fn matrix_kernel_operand_dtype_mismatch() {
    use DType::{F32, I32, I64};
    let rows = COLUMNS
        .iter()
        .flat_map(|&column| {
            [(I32, I64, "i32 data"), (F32, I32, "i32 indices")].map(|(dtype, index_dtype, what)| {
                row(
                    format!("{}: {what} for an f32/i64 kernel", column.name()),
                    move |t| {
                        let op = column.op(1);
                        let key = key_for(&op, F32, I64, 2, 2).expect("a valid key");
                        let need = key_for(&op, dtype, index_dtype, 2, 2).expect("a valid key");
                        let (tensor, mismatch) = if dtype == F32 {
                            (Operand::Indices, dtypes(I64, index_dtype))
                        } else {
                            (Operand::Data, dtypes(F32, dtype))
                        };
                        let expected = Err(mismatched(&key, tensor, mismatch, &need.to_string()));
                        let Some(kernel) = get_kernel(t.c, &key) else {
                            return;
                        };
                        let data = filled(dtype, &[3, 5], 1);
                        let indices = zero_indices(index_dtype, &[2, 4]);
                        let src = column.src(dtype, &[2, 4]);
                        let (dv, iv) = (TensorView::from(&data), TensorView::from(&indices));
                        let uv = src.as_ref().map(Src::view);
                        t.outcome("Kernel::run", kernel.run(&dv, &iv, uv.as_ref()), &expected);
                        let out_shape = op
                            .validate(dv.meta(), iv.meta(), uv.as_ref().map(TensorView::meta))
                            .expect("valid operands")
                            .out_shape;
                        let before = sentinel(F32, &out_shape);
                        let mut out = before.clone();
                        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
                        let bytes = (before.bytes(), out.bytes());
                        t.written("Kernel::run_into", got, bytes, || out.clone(), &expected);
                        if let Some(uv) = uv.filter(|_| column.scatters()) {
                            let mut target = data.clone();
                            let got = kernel.scatter_in_place(&mut (&mut target).into(), &iv, &uv);
                            let bytes = (data.bytes(), target.bytes());
                            t.written(
                                "Kernel::scatter_in_place",
                                got,
                                bytes,
                                || target.clone(),
                                &expected,
                            );
                        }
                    },
                )
            })
        })
        .collect();
    run_matrix("kernel/operand dtype mismatch", rows);
}

/// Every way to hand over `role`'s buffer one element short (owned tensor, contiguous view,
/// strided views reaching past the end or before the start, a truncated `.npy` payload).
fn short_buffer_row(column: Column, role: Operand) -> Row {
    let (dtype, shape): (DType, Vec<usize>) = match role {
        Operand::Data | Operand::Output => (DType::F32, vec![3, 5]),
        Operand::Indices => (DType::I64, vec![2, 4]),
        Operand::Updates => (
            DType::F32,
            column
                .src(DType::F32, &[2, 4])
                .map_or(vec![2, 4], |s| s.view().shape().to_vec()),
        ),
        Operand::Sums | Operand::Counts => unreachable!("scratch is no argument of a call"),
    };
    row(
        format!("{}: {role} {dtype} {shape:?}", column.name()),
        move |t| {
            let size = dtype.size();
            let n = shape.iter().product::<usize>() * size;
            let short = vec![0u8; n - size];
            let full = vec![0u8; n];
            let expected = IrError::BufferSize {
                expected: n,
                actual: n - size,
            };
            let row_major = [shape[1] as isize, 1];
            // One more than row-major along dim 0 reaches past the end.
            let past_end = [shape[1] as isize + 1, 1];
            let backwards = [-(shape[1] as isize), 1];
            let invalid_view = |e: &IrError| matches!(e, IrError::InvalidView { .. });
            if role == Operand::Output {
                let mut short = short.clone();
                let got = TensorViewMut::new(dtype, &shape, &row_major, 0, &mut short).map(|_| ());
                t.refused(
                    "TensorViewMut::new (short)",
                    got,
                    invalid_output,
                    "InvalidView of output",
                );
                let mut full = full.clone();
                let got = TensorViewMut::new(dtype, &shape, &past_end, 0, &mut full).map(|_| ());
                t.refused(
                    "TensorViewMut::new (past the end)",
                    got,
                    invalid_output,
                    "InvalidView of output",
                );
                return;
            }
            let got = Tensor::from_bytes(dtype, shape.clone(), short.clone());
            t.err("Tensor::from_bytes", got, &expected);
            let got = TensorView::contiguous(dtype, &shape, &short).map(|_| ());
            t.err("TensorView::contiguous", got, &expected);
            let got = TensorView::new(dtype, &shape, &row_major, 0, &short).map(|_| ());
            t.refused("TensorView::new (short)", got, invalid_view, "InvalidView");
            let got = TensorView::new(dtype, &shape, &past_end, 0, &full).map(|_| ());
            t.refused(
                "TensorView::new (past the end)",
                got,
                invalid_view,
                "InvalidView",
            );
            let got = TensorView::new(dtype, &shape, &backwards, 0, &full).map(|_| ());
            t.refused(
                "TensorView::new (before the start)",
                got,
                invalid_view,
                "InvalidView",
            );
            let mut image = npy::to_bytes(
                &Tensor::zeros(dtype, shape.clone()).expect("small"),
                dtype.npy_descr(),
            )
            .expect("an npy image");
            image.truncate(image.len() - size);
            cli_bad_file(t, column, role, &image, |k| {
                matches!(
                    k,
                    npy::NpyErrorKind::Truncated {
                        part: npy::NpyPart::Payload,
                        ..
                    }
                )
            });
        },
    )
}

fn invalid_output(e: &IrError) -> bool {
    matches!(
        e,
        IrError::InvalidView {
            tensor: Operand::Output,
            ..
        }
    )
}

#[test]
fn matrix_buffers_too_short() {
    use Operand::{Data, Indices, Output, Updates};
    let mut rows = Vec::new();
    for column in COLUMNS {
        for role in [Data, Indices, Output] {
            rows.push(short_buffer_row(column, role));
        }
        if column.scatters() && column != Column::TorchScalar {
            rows.push(short_buffer_row(column, Updates));
        }
    }
    run_matrix("buffers too short", rows);
}
