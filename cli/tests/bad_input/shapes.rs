//! Ranks, shapes and axes that do not fit the op.

use scatterjit::ir::{DType, Error as IrError, Op, OpKind, Operand, Relation, MAX_RANK};

use super::columns::{Column, Src};
use super::inputs::{f32s, filled, scatter, zero_indices};
use super::problem::{invalid, per_column, CliForm, Problem};
use super::{run_matrix, Row};

/// The three ops on data [3, 5] with indices [2, 4] (and updates [2, 4]) along `axis`.
pub(crate) fn each_op(axis: i64) -> [Op; 3] {
    [
        scatter(axis),
        Op::GatherElements { axis },
        Op::Gather { axis },
    ]
}

pub(crate) fn updates_for(op: &Op, dtype: DType, shape: &[usize]) -> Option<(DType, Vec<usize>)> {
    (op.kind() == OpKind::ScatterElements).then(|| (dtype, shape.to_vec()))
}

pub(crate) fn rank_error(op: OpKind, tensor: Operand, rank: usize, expected: &str) -> IrError {
    IrError::Rank {
        op,
        tensor,
        rank,
        expected: expected.to_string(),
    }
}

fn rank_cases() -> Vec<Row> {
    use DType::{F32, I64};
    use OpKind::{Gather, GatherElements, ScatterElements};
    use Operand::{Data, Indices, Updates};
    let ones = |n: usize| vec![1usize; n];
    let max = MAX_RANK;
    let above = format!("1 to {max}");
    let any = format!("0 to {max}");
    let mut cases = vec![
        invalid(
            "scatter: indices rank 1 < data rank 2",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[4]),
            Some((F32, &[4])),
            rank_error(ScatterElements, Indices, 1, "the rank of data (2)"),
        ),
        invalid(
            "scatter: indices rank 3 > data rank 2",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4, 1]),
            Some((F32, &[2, 4, 1])),
            rank_error(ScatterElements, Indices, 3, "the rank of data (2)"),
        ),
        invalid(
            "scatter: updates rank 3",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4, 1])),
            rank_error(ScatterElements, Updates, 3, "the rank of data (2)"),
        ),
        invalid(
            "scatter: updates rank 1",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[8])),
            rank_error(ScatterElements, Updates, 1, "the rank of data (2)"),
        ),
        invalid(
            "scatter: scalar updates",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[])),
            rank_error(ScatterElements, Updates, 0, "the rank of data (2)"),
        ),
        invalid(
            "scatter: no updates",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            None,
            IrError::MissingUpdates {
                op: ScatterElements,
            },
        ),
        invalid(
            "gather_elements: indices rank 1 < data rank 2",
            Op::GatherElements { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[4]),
            None,
            rank_error(GatherElements, Indices, 1, "the rank of data (2)"),
        ),
        invalid(
            "gather_elements: indices rank 3 > data rank 2",
            Op::GatherElements { axis: 0 },
            (F32, &[3, 5]),
            (I64, &[2, 4, 1]),
            None,
            rank_error(GatherElements, Indices, 3, "the rank of data (2)"),
        ),
        invalid(
            "gather_elements: scalar indices",
            Op::GatherElements { axis: 0 },
            (F32, &[3]),
            (I64, &[]),
            None,
            rank_error(GatherElements, Indices, 0, "the rank of data (1)"),
        ),
        invalid(
            "gather_elements: updates given",
            Op::GatherElements { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4])),
            IrError::UnexpectedUpdates {
                op: GatherElements,
                rank: 2,
            },
        ),
        invalid(
            "gather: updates given",
            Op::Gather { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4])),
            IrError::UnexpectedUpdates {
                op: Gather,
                rank: 2,
            },
        ),
        invalid(
            format!("gather: indices rank {}", max + 1),
            Op::Gather { axis: 0 },
            (F32, &[3]),
            (I64, &ones(max + 1)),
            None,
            rank_error(Gather, Indices, max + 1, &any),
        ),
        invalid(
            format!("scatter: indices rank {} with data rank {max}", max + 1),
            scatter(0),
            (F32, &ones(max)),
            (I64, &ones(max + 1)),
            Some((F32, &ones(max + 1))),
            rank_error(ScatterElements, Indices, max + 1, &any),
        ),
        invalid(
            format!("scatter: updates rank {} with data rank {max}", max + 1),
            scatter(0),
            (F32, &ones(max)),
            (I64, &ones(max)),
            Some((F32, &ones(max + 1))),
            rank_error(
                ScatterElements,
                Updates,
                max + 1,
                &format!("the rank of data ({max})"),
            ),
        ),
        invalid(
            format!(
                "gather_elements: indices rank {} with data rank {max}",
                max + 1
            ),
            Op::GatherElements { axis: 0 },
            (F32, &ones(max)),
            (I64, &ones(max + 1)),
            None,
            rank_error(GatherElements, Indices, max + 1, &any),
        ),
    ];
    for op in each_op(0) {
        let kind = op.kind();
        let index_shape: &[usize] = if kind == Gather { &[1] } else { &[] };
        cases.push(invalid(
            format!("{kind}: rank-0 data"),
            op,
            (F32, &[]),
            (I64, index_shape),
            updates_for(&op, F32, &[])
                .as_ref()
                .map(|(d, s)| (*d, &s[..])),
            rank_error(kind, Data, 0, &above),
        ));
        let index_shape = if kind == Gather {
            vec![1]
        } else {
            ones(max + 1)
        };
        cases.push(invalid(
            format!("{kind}: data rank {}", max + 1),
            op,
            (F32, &ones(max + 1)),
            (I64, &index_shape),
            updates_for(&op, F32, &ones(max + 1))
                .as_ref()
                .map(|(d, s)| (*d, &s[..])),
            rank_error(kind, Data, max + 1, &above),
        ));
    }
    cases
}

fn shape_error(
    op: OpKind,
    tensor: Operand,
    (dim, size): (usize, usize),
    relation: Relation,
    other_size: usize,
) -> IrError {
    IrError::Shape {
        op,
        tensor,
        dim,
        size,
        relation,
        other: if tensor == Operand::Updates {
            Operand::Indices
        } else {
            Operand::Data
        },
        other_size,
    }
}

fn shape_cases() -> Vec<Row> {
    use DType::{F32, I64};
    use OpKind::{GatherElements, ScatterElements};
    use Operand::{Indices, Updates};
    vec![
        invalid(
            "scatter: indices dim 1 > data dim 1 (axis 0)",
            scatter(0),
            (F32, &[3, 3]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4])),
            shape_error(ScatterElements, Indices, (1, 4), Relation::AtMost, 3),
        ),
        invalid(
            "scatter: indices dim 0 > data dim 0 (axis 1)",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[4, 2]),
            Some((F32, &[4, 2])),
            shape_error(ScatterElements, Indices, (0, 4), Relation::AtMost, 3),
        ),
        invalid(
            "scatter: indices dim 1 > zero-size data dim",
            scatter(0),
            (F32, &[3, 0]),
            (I64, &[1, 1]),
            Some((F32, &[1, 1])),
            shape_error(ScatterElements, Indices, (1, 1), Relation::AtMost, 0),
        ),
        invalid(
            "scatter: updates dim 1 < indices dim 1",
            scatter(0),
            (F32, &[3, 3]),
            (I64, &[2, 3]),
            Some((F32, &[2, 2])),
            shape_error(ScatterElements, Updates, (1, 2), Relation::AtLeast, 3),
        ),
        invalid(
            "scatter: updates dim 0 < indices dim 0 along the axis",
            scatter(0),
            (F32, &[3, 5]),
            (I64, &[4, 5]),
            Some((F32, &[3, 5])),
            shape_error(ScatterElements, Updates, (0, 3), Relation::AtLeast, 4),
        ),
        invalid(
            "scatter: empty updates for non-empty indices",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[0, 4])),
            shape_error(ScatterElements, Updates, (0, 0), Relation::AtLeast, 2),
        ),
        invalid(
            "gather_elements: indices dim 0 > data dim 0 (axis 1)",
            Op::GatherElements { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[4, 2]),
            None,
            shape_error(GatherElements, Indices, (0, 4), Relation::AtMost, 3),
        ),
        invalid(
            "gather_elements: rank 3, indices dim 2 > data dim 2",
            Op::GatherElements { axis: 0 },
            (F32, &[2, 3, 4]),
            (I64, &[1, 3, 5]),
            None,
            shape_error(GatherElements, Indices, (2, 5), Relation::AtMost, 4),
        ),
        invalid(
            "gather_elements: indices dim 1 > zero-size data dim",
            Op::GatherElements { axis: 0 },
            (F32, &[3, 0]),
            (I64, &[1, 1]),
            None,
            shape_error(GatherElements, Indices, (1, 1), Relation::AtMost, 0),
        ),
    ]
}

fn axis_cases() -> Vec<Row> {
    let mut cases = Vec::new();
    for axis in [2, -3, 100, i64::MIN, i64::MAX] {
        for op in each_op(axis) {
            let kind = op.kind();
            cases.push(invalid(
                format!("{kind}: axis {axis} for rank 2"),
                op,
                (DType::F32, &[3, 5]),
                (DType::I64, &[2, 4]),
                updates_for(&op, DType::F32, &[2, 4])
                    .as_ref()
                    .map(|(d, s)| (*d, &s[..])),
                IrError::AxisOutOfRange {
                    op: kind,
                    axis,
                    rank: 2,
                },
            ));
        }
    }
    for axis in [1, -2] {
        for op in each_op(axis) {
            let kind = op.kind();
            cases.push(invalid(
                format!("{kind}: axis {axis} for rank 1"),
                op,
                (DType::F32, &[3]),
                (DType::I64, &[2]),
                updates_for(&op, DType::F32, &[2])
                    .as_ref()
                    .map(|(d, s)| (*d, &s[..])),
                IrError::AxisOutOfRange {
                    op: kind,
                    axis,
                    rank: 1,
                },
            ));
        }
    }
    cases
}

#[test]
fn rank_errors() {
    run_matrix("rank", rank_cases());
}

#[test]
fn shape_errors() {
    run_matrix("shape", shape_cases());
}

#[test]
fn axis_errors() {
    run_matrix("axis", axis_cases());
}

pub(crate) fn column_rank_error(
    column: Column,
    tensor: Operand,
    rank: usize,
    expected: &str,
) -> IrError {
    IrError::Rank {
        op: column.kind(),
        tensor,
        rank,
        expected: expected.to_string(),
    }
}

#[test]
fn matrix_ranks_that_differ() {
    use Operand::{Data, Indices, Updates};
    let max = MAX_RANK;
    let ones = |n: usize| vec![1usize; n];
    run_matrix(
        "ranks",
        per_column(|column| {
            let gather = column == Column::Gather;
            let idx = |shape: &[usize]| zero_indices(DType::I64, shape);
            let problem = |axis, data: &[usize], indices: &[usize]| {
                Problem::new(column, axis, f32s(data), idx(indices))
            };
            let data_rank = format!("1 to {max}");
            let of_data = "the rank of data (2)";
            let scalar_index: &[usize] = if gather { &[1] } else { &[] };
            let deep_index = if gather { vec![1] } else { ones(max + 1) };
            let mut cases = vec![
                (
                    "rank-0 data".to_string(),
                    problem(0, &[], scalar_index)
                        .fails(column_rank_error(column, Data, 0, &data_rank)),
                ),
                (
                    format!("data rank {}", max + 1),
                    problem(0, &ones(max + 1), &deep_index).fails(column_rank_error(
                        column,
                        Data,
                        max + 1,
                        &data_rank,
                    )),
                ),
            ];
            if gather {
                cases.push((
                    format!("indices rank {}", max + 1),
                    problem(0, &[3, 5], &ones(max + 1)).fails(column_rank_error(
                        column,
                        Indices,
                        max + 1,
                        &format!("0 to {max}"),
                    )),
                ));
                let p = problem(1, &[3, 5], &[2, 4]);
                let src = Some(Src::Tensor(f32s(&[2, 4])));
                cases.push((
                    "updates given".into(),
                    p.src(src)
                        .fails(IrError::UnexpectedUpdates {
                            op: column.kind(),
                            rank: 2,
                        })
                        .cli(CliForm::Usage("unexpected argument")),
                ));
            } else {
                cases.extend([
                    (
                        "indices rank 1 < 2".to_string(),
                        problem(1, &[3, 5], &[4])
                            .fails(column_rank_error(column, Indices, 1, of_data)),
                    ),
                    (
                        "indices rank 3 > 2".to_string(),
                        problem(1, &[3, 5], &[2, 4, 1])
                            .fails(column_rank_error(column, Indices, 3, of_data)),
                    ),
                ]);
            }
            if column.scatters() {
                let src = column.src(DType::F32, &[2, 4, 1]);
                cases.push((
                    "updates rank 3 > 2".into(),
                    problem(1, &[3, 5], &[2, 4])
                        .src(src)
                        .fails(column_rank_error(column, Updates, 3, of_data)),
                ));
                // PyTorch's scatter_ always has a value or src.
                if column != Column::TorchScalar {
                    cases.push((
                        "no updates".into(),
                        problem(1, &[3, 5], &[2, 4])
                            .src(None)
                            .fails(IrError::MissingUpdates { op: column.kind() })
                            .cli(CliForm::Usage("required")),
                    ));
                }
            }
            if column == Column::GatherElements {
                let p = problem(1, &[3, 5], &[2, 4]);
                let src = Some(Src::Tensor(f32s(&[2, 4])));
                cases.push((
                    "updates given".into(),
                    p.src(src)
                        .fails(IrError::UnexpectedUpdates {
                            op: column.kind(),
                            rank: 2,
                        })
                        .cli(CliForm::Usage("unexpected argument")),
                ));
            }
            cases
        }),
    );
}

fn shape_error_between(
    column: Column,
    (tensor, other): (Operand, Operand),
    (dim, size): (usize, usize),
    relation: Relation,
    other_size: usize,
) -> IrError {
    IrError::Shape {
        op: column.kind(),
        tensor,
        dim,
        size,
        relation,
        other,
        other_size,
    }
}

#[test]
fn matrix_off_axis_index_dims_larger_than_data() {
    use Operand::{Data, Indices};
    run_matrix(
        "off-axis index dims larger than data's",
        per_column(|column| {
            // Gather's indices may have any shape: the row does not apply.
            if column == Column::Gather {
                return Vec::new();
            }
            let problem = |axis, data: &[usize], indices: &[usize]| {
                Problem::new(column, axis, f32s(data), zero_indices(DType::I64, indices))
            };
            vec![
                (
                    "indices [4, 2] on data [3, 5], axis 1".into(),
                    problem(1, &[3, 5], &[4, 2]).fails(shape_error_between(
                        column,
                        (Indices, Data),
                        (0, 4),
                        Relation::AtMost,
                        3,
                    )),
                ),
                (
                    "indices [2, 6] on data [3, 5], axis 0".into(),
                    problem(0, &[3, 5], &[2, 6]).fails(shape_error_between(
                        column,
                        (Indices, Data),
                        (1, 6),
                        Relation::AtMost,
                        5,
                    )),
                ),
                (
                    "indices [1, 1] on data [3, 0], axis 0".into(),
                    problem(0, &[3, 0], &[1, 1]).fails(shape_error_between(
                        column,
                        (Indices, Data),
                        (1, 1),
                        Relation::AtMost,
                        0,
                    )),
                ),
            ]
        }),
    );
}

#[test]
fn matrix_updates_smaller_than_indices() {
    use Operand::{Indices, Updates};
    run_matrix(
        "updates smaller than indices",
        per_column(|column| {
            if !column.scatters() {
                return Vec::new();
            }
            let smaller = |shape: &[usize]| match column {
                Column::TorchScalar => Src::scalar(DType::F32, shape),
                _ => Src::Tensor(filled(DType::F32, shape, 7)),
            };
            [
                ([2usize, 3], (1, 3), 4),
                ([1, 4], (0, 1), 2),
                ([0, 4], (0, 0), 2),
            ]
            .into_iter()
            .map(|(shape, at, other)| {
                let p = Problem::new(column, 1, f32s(&[3, 5]), zero_indices(DType::I64, &[2, 4]));
                (
                    format!("updates {shape:?} for indices [2, 4]"),
                    p.src(Some(smaller(&shape))).fails(shape_error_between(
                        column,
                        (Updates, Indices),
                        at,
                        Relation::AtLeast,
                        other,
                    )),
                )
            })
            .collect()
        }),
    );
}

#[test]
fn matrix_axis_out_of_range() {
    run_matrix(
        "axis out of range",
        per_column(|column| {
            [2, -3, i64::MIN, i64::MAX]
                .into_iter()
                .map(|axis| {
                    let p = Problem::new(
                        column,
                        axis,
                        f32s(&[3, 5]),
                        zero_indices(DType::I64, &[2, 4]),
                    );
                    let e = IrError::AxisOutOfRange {
                        op: column.kind(),
                        axis,
                        rank: 2,
                    };
                    (format!("axis {axis} for rank 2"), p.fails(e))
                })
                .collect()
        }),
    );
}
