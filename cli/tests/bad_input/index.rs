//! Index values out of bounds (and the valid ones at the bounds): every path must name the
//! first bad index in row-major order, whatever the loop order or layout, and write nothing.

use scatterjit::ir::{DType, Error as IrError, Op, Tensor};

use super::columns::Column;
use super::inputs::{f32s, filled, index_dtypes, ints, ix, range_of, scatter};
use super::problem::{expand, out_of_bounds, per_column, problem_of, rows, Named, Problem};
use super::run_matrix;

/// A bad-index case: `at` is (index value, position, normalized axis, size); `display` is
/// the message word for word.
fn bad(
    name: &str,
    op: Op,
    inputs: (Tensor, Tensor, Option<Tensor>),
    at: (i128, &[usize], usize, usize),
    display: &'static str,
) -> Named {
    let (data, indices, updates) = inputs;
    let (index, position, axis, size) = at;
    let expected = IrError::IndexOutOfBounds {
        op: op.kind(),
        index,
        position: position.to_vec(),
        axis,
        size,
    };
    let problem = problem_of(op, data, indices, updates)
        .fails(expected)
        .message(display);
    (name.to_string(), problem)
}

/// Indices [2, 4] along axis 1 of data [3, 5]: the first bad index in row-major order is
/// at [0, 3], but a column-major walk meets [1, 0] first, so a check in another loop order
/// names the wrong position.
fn scatter_bad_indices() -> Vec<Named> {
    let s = |indices: Tensor| (f32s(&[3, 5]), indices, Some(filled(DType::F32, &[2, 4], 7)));
    let at = |index: i128| (index, &[0usize, 3][..], 1, 5);
    let mut cases = vec![
        bad(
            "scatter: s",
            scatter(1),
            s(ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2])),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: -s-1, axis -1",
            scatter(-1),
            s(ix(&[2, 4], &[0i64, 1, -5, -6, -7, 0, 1, 2])),
            at(-6),
            "scatter_elements: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: -7 (i32)",
            scatter(1),
            s(ix(&[2, 4], &[4i32, -1, -5, -7, -6, 0, 0, 0])),
            at(-7),
            "scatter_elements: index -7 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i64::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MIN, i64::MAX, 0, 0, 0])),
            at(i64::MIN as i128),
            "scatter_elements: index -9223372036854775808 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i64::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MAX, i64::MIN, 0, 0, 0])),
            at(i64::MAX as i128),
            "scatter_elements: index 9223372036854775807 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u64::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u64, 1, 2, u64::MAX, 5, 0, 0, 0])),
            at(u64::MAX as i128),
            "scatter_elements: index 18446744073709551615 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: s (u64)",
            scatter(1),
            s(ix(&[2, 4], &[0u64, 1, 2, 5, u64::MAX, 0, 0, 0])),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i8::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MIN, i8::MAX, 0, 0, 0])),
            at(-128),
            "scatter_elements: index -128 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i8::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MAX, i8::MIN, 0, 0, 0])),
            at(127),
            "scatter_elements: index 127 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u8::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u8, 1, 2, u8::MAX, 5, 0, 0, 0])),
            at(255),
            "scatter_elements: index 255 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: -s-1 (i8)",
            scatter(-1),
            s(ix(&[2, 4], &[0i8, 1, 2, -6, 5, 0, 0, 0])),
            at(-6),
            "scatter_elements: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i16::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i16, 1, 2, i16::MIN, i16::MAX, 0, 0, 0])),
            at(i16::MIN as i128),
            "scatter_elements: index -32768 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u16::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u16, 1, 2, u16::MAX, 5, 0, 0, 0])),
            at(u16::MAX as i128),
            "scatter_elements: index 65535 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i32::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i32, 1, 2, i32::MIN, i32::MAX, 0, 0, 0])),
            at(i32::MIN as i128),
            "scatter_elements: index -2147483648 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i32::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0i32, 1, 2, i32::MAX, i32::MIN, 0, 0, 0])),
            at(i32::MAX as i128),
            "scatter_elements: index 2147483647 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u32::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u32, 1, 2, u32::MAX, 5, 0, 0, 0])),
            at(u32::MAX as i128),
            "scatter_elements: index 4294967295 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: updates larger than indices",
            scatter(1),
            (
                f32s(&[3, 5]),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                Some(filled(DType::F32, &[3, 7], 7)),
            ),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            // Column-major, [1, 1, 0] (-4) comes before [1, 0, 1] (3).
            "scatter: rank 3, axis 0",
            scatter(0),
            (
                f32s(&[3, 2, 2]),
                ix(&[2, 2, 2], &[0i64, 1, 2, 0, 1, 3, -4, 0]),
                Some(filled(DType::F32, &[2, 2, 2], 7)),
            ),
            (3, &[1, 0, 1], 0, 3),
            "scatter_elements: index 3 at indices[1, 0, 1] is out of bounds for axis 0 of size 3",
        ),
        bad(
            "scatter: zero-size axis",
            scatter(1),
            (
                f32s(&[3, 0]),
                ix(&[2, 2], &[0i64, 0, 0, 0]),
                Some(filled(DType::F32, &[2, 2], 7)),
            ),
            (0, &[0, 0], 1, 0),
            "scatter_elements: index 0 at indices[0, 0] is out of bounds for axis 1 of size 0",
        ),
        bad(
            "scatter: rank 1",
            scatter(0),
            (
                f32s(&[4]),
                ix(&[3], &[0i64, 3, 4]),
                Some(filled(DType::F32, &[3], 7)),
            ),
            (4, &[2], 0, 4),
            "scatter_elements: index 4 at indices[2] is out of bounds for axis 0 of size 4",
        ),
    ];
    for dtype in [
        DType::I8,
        DType::U64,
        DType::F16,
        DType::Bool,
        DType::Complex128,
    ] {
        cases.push(bad(
            &format!("scatter: s, {dtype} data"),
            scatter(1),
            (
                filled(dtype, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                Some(filled(dtype, &[2, 4], 7)),
            ),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ));
    }
    expand(cases)
}

fn gather_elements_bad_indices() -> Vec<Named> {
    let ge = |axis| Op::GatherElements { axis };
    let s = |indices: Tensor| (f32s(&[3, 5]), indices, None);
    let at = |index: i128| (index, &[0usize, 3][..], 1, 5);
    vec![
        bad(
            "gather_elements: s",
            ge(1),
            s(ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2])),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: -s-1, axis -1 (i32)",
            ge(-1),
            s(ix(&[2, 4], &[0i32, 1, -5, -6, -7, 0, 1, 2])),
            at(-6),
            "gather_elements: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: i64::MIN",
            ge(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MIN, i64::MAX, 0, 0, 0])),
            at(i64::MIN as i128),
            "gather_elements: index -9223372036854775808 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: i64::MAX",
            ge(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MAX, i64::MIN, 0, 0, 0])),
            at(i64::MAX as i128),
            "gather_elements: index 9223372036854775807 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: u64::MAX",
            ge(1),
            s(ix(&[2, 4], &[0u64, 1, 2, u64::MAX, 5, 0, 0, 0])),
            at(u64::MAX as i128),
            "gather_elements: index 18446744073709551615 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: i8::MIN",
            ge(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MIN, i8::MAX, 0, 0, 0])),
            at(-128),
            "gather_elements: index -128 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: u8::MAX",
            ge(1),
            s(ix(&[2, 4], &[0u8, 1, 2, u8::MAX, 5, 0, 0, 0])),
            at(255),
            "gather_elements: index 255 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: u16 s",
            ge(1),
            s(ix(&[2, 4], &[0u16, 1, 2, 5, 9, 0, 0, 0])),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: axis 0",
            ge(0),
            s(ix(&[2, 5], &[0i64, 1, 2, -4, 0, 3, 0, 0, 0, 0])),
            (-4, &[0, 3], 0, 3),
            "gather_elements: index -4 at indices[0, 3] is out of bounds for axis 0 of size 3",
        ),
        bad(
            "gather_elements: zero-size axis, non-empty output",
            ge(1),
            (f32s(&[3, 0]), ix(&[3, 2], &[0i64; 6]), None),
            (0, &[0, 0], 1, 0),
            "gather_elements: index 0 at indices[0, 0] is out of bounds for axis 1 of size 0",
        ),
        bad(
            "gather_elements: rank 1",
            ge(0),
            (f32s(&[4]), ix(&[6], &[0i64, 1, 2, 3, -4, -5]), None),
            (-5, &[5], 0, 4),
            "gather_elements: index -5 at indices[5] is out of bounds for axis 0 of size 4",
        ),
        bad(
            "gather_elements: i8 data",
            ge(1),
            (
                filled(DType::I8, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                None,
            ),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: c128 data",
            ge(1),
            (
                filled(DType::Complex128, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                None,
            ),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
    ]
}

fn gather_bad_indices() -> Vec<Named> {
    let g = |axis| Op::Gather { axis };
    let s = |indices: Tensor| (f32s(&[3, 5]), indices, None);
    let at = |index: i128| (index, &[0usize, 3][..], 1, 5);
    vec![
        bad(
            "gather: s",
            g(1),
            s(ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2])),
            at(5),
            "gather: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: -s-1, axis -1",
            g(-1),
            s(ix(&[2, 4], &[0i64, 1, -5, -6, -7, 0, 1, 2])),
            at(-6),
            "gather: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i64::MIN",
            g(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MIN, i64::MAX, 0, 0, 0])),
            at(i64::MIN as i128),
            "gather: index -9223372036854775808 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i64::MAX",
            g(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MAX, i64::MIN, 0, 0, 0])),
            at(i64::MAX as i128),
            "gather: index 9223372036854775807 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: u64::MAX",
            g(1),
            s(ix(&[2, 4], &[0u64, 1, 2, u64::MAX, 5, 0, 0, 0])),
            at(u64::MAX as i128),
            "gather: index 18446744073709551615 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i8::MIN",
            g(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MIN, i8::MAX, 0, 0, 0])),
            at(-128),
            "gather: index -128 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: u8::MAX",
            g(1),
            s(ix(&[2, 4], &[0u8, 1, 2, u8::MAX, 5, 0, 0, 0])),
            at(255),
            "gather: index 255 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: u32::MAX",
            g(1),
            s(ix(&[2, 4], &[0u32, 1, 2, u32::MAX, 5, 0, 0, 0])),
            at(u32::MAX as i128),
            "gather: index 4294967295 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i16::MIN",
            g(1),
            s(ix(&[2, 4], &[0i16, 1, 2, i16::MIN, i16::MAX, 0, 0, 0])),
            at(i16::MIN as i128),
            "gather: index -32768 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: scalar index",
            g(1),
            s(Tensor::scalar(5i64)),
            (5, &[], 1, 5),
            "gather: index 5 at indices[] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: scalar index -s-1 (i16)",
            g(0),
            s(Tensor::scalar(-4i16)),
            (-4, &[], 0, 3),
            "gather: index -4 at indices[] is out of bounds for axis 0 of size 3",
        ),
        bad(
            "gather: axis 0",
            g(0),
            s(ix(&[4], &[0i64, 1, 2, 3])),
            (3, &[3], 0, 3),
            "gather: index 3 at indices[3] is out of bounds for axis 0 of size 3",
        ),
        bad(
            // Column-major, [1, 1, 0] (9) comes before [1, 0, 1] (5).
            "gather: rank-3 indices",
            g(1),
            s(ix(&[2, 2, 2], &[0i64, 1, 2, 3, 4, 5, 9, 0])),
            (5, &[1, 0, 1], 1, 5),
            "gather: index 5 at indices[1, 0, 1] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: empty output, s",
            g(0),
            (f32s(&[2, 0]), ix(&[3], &[0i64, 1, 2]), None),
            (2, &[2], 0, 2),
            "gather: index 2 at indices[2] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: empty output, -s-1",
            g(0),
            (f32s(&[2, 0]), ix(&[3], &[1i32, -2, -3]), None),
            (-3, &[2], 0, 2),
            "gather: index -3 at indices[2] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: empty output, i64::MIN",
            g(0),
            (f32s(&[2, 0]), ix(&[2], &[i64::MIN, 0]), None),
            (i64::MIN as i128, &[0], 0, 2),
            "gather: index -9223372036854775808 at indices[0] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: empty output, u8::MAX",
            g(0),
            (f32s(&[2, 0]), ix(&[1, 2], &[0u8, u8::MAX]), None),
            (255, &[0, 1], 0, 2),
            "gather: index 255 at indices[0, 1] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: zero-size axis, non-empty output",
            g(1),
            (f32s(&[2, 0, 3]), ix(&[1], &[0i64]), None),
            (0, &[0], 1, 0),
            "gather: index 0 at indices[0] is out of bounds for axis 1 of size 0",
        ),
        bad(
            "gather: rank 1 data",
            g(0),
            (f32s(&[4]), ix(&[2, 2], &[0i64, 3, -4, -5]), None),
            (-5, &[1, 1], 0, 4),
            "gather: index -5 at indices[1, 1] is out of bounds for axis 0 of size 4",
        ),
        bad(
            "gather: bool data",
            g(1),
            (
                filled(DType::Bool, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                None,
            ),
            at(5),
            "gather: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
    ]
}

#[test]
fn bad_indices_scatter_elements() {
    run_matrix("scatter_elements bad indices", rows(scatter_bad_indices()));
}

#[test]
fn bad_indices_gather_elements() {
    run_matrix(
        "gather_elements bad indices",
        rows(gather_elements_bad_indices()),
    );
}

#[test]
fn bad_indices_gather() {
    run_matrix("gather bad indices", rows(gather_bad_indices()));
}

// ---------------------------------------------------------------------------------------
// Rows: index values

/// Data [3, 5], indices [2, 4] along axis 1 (s = 5) with `bad` at [0, 3], a second bad
/// index after it (the first one in row-major order must be named) and valid negative and
/// positive ones before it.
pub(crate) fn bad_index(column: Column, axis: i64, dtype: DType, bad: i128) -> Problem {
    let other = if bad == 5 { 6 } else { 5 };
    let values: Vec<i128> = if dtype.is_signed_integer() {
        vec![0, -1, -5, bad, other, 4, -2, 1]
    } else {
        vec![0, 4, 2, bad, other, 1, 3, 0]
    };
    Problem::new(column, axis, f32s(&[3, 5]), ints(dtype, &[2, 4], &values)).fails(out_of_bounds(
        column,
        bad,
        &[0, 3],
        1,
        5,
    ))
}

#[test]
fn matrix_index_at_s() {
    run_matrix(
        "index s",
        per_column(|column| {
            index_dtypes()
                .iter()
                .map(|&d| (format!("{d} index 5"), bad_index(column, 1, d, 5)))
                .collect()
        }),
    );
}

#[test]
fn matrix_index_at_minus_s_minus_1() {
    run_matrix(
        "index -s-1",
        per_column(|column| {
            index_dtypes()
                .iter()
                .filter(|d| d.is_signed_integer())
                .map(|&d| {
                    (
                        format!("{d} index -6, axis -1"),
                        bad_index(column, -1, d, -6),
                    )
                })
                .collect()
        }),
    );
}

#[test]
fn matrix_index_type_extremes() {
    run_matrix(
        "index type extremes",
        per_column(|column| {
            let mut cases = Vec::new();
            for dtype in index_dtypes() {
                let (lo, hi) = range_of(dtype);
                // An unsigned type's minimum, 0, is a valid index (see the valid row).
                for bad in [lo, hi].into_iter().filter(|&v| v != 0) {
                    cases.push((
                        format!("{dtype} index {bad}"),
                        bad_index(column, 1, dtype, bad),
                    ));
                }
            }
            cases
        }),
    );
}

#[test]
fn matrix_valid_index_bounds() {
    run_matrix(
        "valid indices 0, s-1, -s (positive controls)",
        per_column(|column| {
            index_dtypes()
                .iter()
                .map(|&dtype| {
                    let values: Vec<i128> = if dtype.is_signed_integer() {
                        vec![0, 4, -5, -1, 3, -3, 1, 2]
                    } else {
                        vec![0, 4, 4, 0, 3, 1, 2, 0]
                    };
                    let indices = ints(dtype, &[2, 4], &values);
                    let p = Problem::new(column, 1, f32s(&[3, 5]), indices);
                    (format!("{dtype} indices"), p)
                })
                .collect()
        }),
    );
}
