//! Dtypes that do not fit the op: unsupported reductions, non-integer indices, updates of
//! another dtype than data's.

use scatterjit::ir::{DType, Error as IrError, OpKind, Operand, Reduction};

use super::inputs::{f32s, filled, label, scatter, scatter_with, zero_indices};
use super::problem::{invalid, per_column, Problem};
use super::shapes::{each_op, updates_for};
use super::{run_matrix, Row};

fn reduction_cases() -> Vec<Row> {
    let pairs = [
        (Reduction::Max, DType::Complex64),
        (Reduction::Max, DType::Complex128),
        (Reduction::Min, DType::Complex64),
        (Reduction::Min, DType::Complex128),
        (Reduction::Mean, DType::Bool),
        (Reduction::Mean, DType::Complex64),
        (Reduction::Mean, DType::Complex128),
        (Reduction::Add, DType::String),
        (Reduction::Mul, DType::String),
        (Reduction::Max, DType::String),
        (Reduction::Min, DType::String),
        (Reduction::Mean, DType::String),
    ];
    // (data, indices = updates, axis): empty, empty along the other axis, non-empty.
    let shapes: [(&[usize], &[usize], i64); 3] = [
        (&[0], &[0], 0),
        (&[2, 0], &[2, 0], 1),
        (&[3, 5], &[2, 4], 1),
    ];
    let mut cases = Vec::new();
    for (reduction, dtype) in pairs {
        for use_init_val in [true, false] {
            for (data, index, axis) in shapes {
                cases.push(invalid(
                    format!(
                        "scatter: {} on {dtype}, data {data:?}",
                        label(reduction, use_init_val)
                    ),
                    scatter_with(axis, reduction, use_init_val),
                    (dtype, data),
                    (DType::I64, index),
                    Some((dtype, index)),
                    IrError::UnsupportedReduction {
                        op: OpKind::ScatterElements,
                        reduction,
                        dtype,
                    },
                ));
            }
        }
    }
    cases
}

fn dtype_cases() -> Vec<Row> {
    use DType::*;
    let mut cases = Vec::new();
    for index_dtype in [F16, BF16, F32, F64, Bool, Complex64, Complex128, String] {
        for op in each_op(1) {
            let kind = op.kind();
            cases.push(invalid(
                format!("{kind}: {index_dtype} indices"),
                op,
                (F32, &[3, 5]),
                (index_dtype, &[2, 4]),
                updates_for(&op, F32, &[2, 4])
                    .as_ref()
                    .map(|(d, s)| (*d, &s[..])),
                IrError::IndexDType {
                    op: kind,
                    dtype: index_dtype,
                },
            ));
        }
    }
    for (data, updates) in [
        (F32, I32),
        (F32, F64),
        (F16, BF16),
        (U8, Bool),
        (I64, U64),
        (Complex64, Complex128),
        (F32, String),
    ] {
        cases.push(invalid(
            format!("scatter: {updates} updates for {data} data"),
            scatter(1),
            (data, &[3, 5]),
            (I64, &[2, 4]),
            Some((updates, &[2, 4])),
            IrError::DTypeMismatch {
                op: OpKind::ScatterElements,
                tensor: Operand::Updates,
                expected: data,
                actual: updates,
            },
        ));
    }
    cases
}

#[test]
fn unsupported_reductions() {
    run_matrix("unsupported reductions", reduction_cases());
}

#[test]
fn dtype_errors() {
    run_matrix("dtypes", dtype_cases());
}

#[test]
fn matrix_unsupported_reduction_dtype_pairs() {
    run_matrix(
        "unsupported reduction x dtype",
        per_column(|column| {
            // Only columns whose reduction leaves out some dtype have cells.
            let Some((reduction, _)) = column.reduction() else {
                return Vec::new();
            };
            let mut cases = Vec::new();
            for &dtype in DType::ALL {
                if dtype == DType::String || reduction.supports(dtype) {
                    continue;
                }
                // Refused even when there is nothing to reduce.
                for (data, indices, axis) in
                    [(&[3usize, 5][..], &[2usize, 4][..], 1), (&[0], &[0], 0)]
                {
                    let p = Problem::new(
                        column,
                        axis,
                        filled(dtype, data, 1),
                        zero_indices(DType::I64, indices),
                    );
                    let e = IrError::UnsupportedReduction {
                        op: column.kind(),
                        reduction,
                        dtype,
                    };
                    cases.push((format!("{reduction} on {dtype} data {data:?}"), p.fails(e)));
                }
            }
            cases
        }),
    );
}

#[test]
fn matrix_mismatched_dtypes() {
    use DType::{Bool, Complex64, BF16, F16, F32, F64, I64, U64, U8};
    run_matrix(
        "mismatched dtypes",
        per_column(|column| {
            let mut cases = Vec::new();
            for index_dtype in [F32, F16, Bool, Complex64] {
                let p = Problem::new(column, 1, f32s(&[3, 5]), zero_indices(index_dtype, &[2, 4]));
                let e = IrError::IndexDType {
                    op: column.kind(),
                    dtype: index_dtype,
                };
                cases.push((format!("{index_dtype} indices"), p.fails(e)));
            }
            if column.scatters() {
                for (data, updates) in [(F32, F64), (I64, U64), (F16, BF16), (U8, Bool)] {
                    let p = Problem::new(
                        column,
                        1,
                        filled(data, &[3, 5], 1),
                        zero_indices(I64, &[2, 4]),
                    );
                    let e = IrError::DTypeMismatch {
                        op: column.kind(),
                        tensor: Operand::Updates,
                        expected: data,
                        actual: updates,
                    };
                    let src = column.src(updates, &[2, 4]);
                    cases.push((
                        format!("{updates} updates for {data} data"),
                        p.src(src).fails(e),
                    ));
                }
            }
            cases
        }),
    );
}
