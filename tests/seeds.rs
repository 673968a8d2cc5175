//! Every worked example of the operator documents SPEC.md summarizes, as one table.
//!
//! Each case is named after its source and copies the numbers as the document prints them.
//! The table is engine-independent: `seeds_on_interpreter` and `seeds_on_jit` run the same
//! [`cases`] through each engine and compare with the same [`check`].
//!
//! Sources:
//! - ONNX ScatterElements 11/13/16/18, Chinese edition: Examples 1 and 2 only, identical to
//!   those of the English edition.
//! - PyTorch `Tensor.scatter_`, Chinese edition: five `>>>` examples.
//! - ONNX ScatterElements, English edition: Examples 1 and 2 and the six ONNX test cases.
//! - OpenVINO ScatterElementsUpdate-12, Japanese edition: examples 1 to 5 (example 6 gives
//!   shapes only, no values).
//! - ONNX Gather 13/11/1, Chinese edition: Examples 1 and 2 of each opset (the same numbers).
//!
//! No document has a GatherElements example or a Gather example with negative indices; the
//! few cases marked "derived" below are built from an example by a rule the documents
//! state, and say so.
//!
//! The examples whose op SPEC.md allows on strings (the gather ops, ScatterElements with
//! `none`) only move elements, so they run again with every value written as text
//! ([`string_cases`]).

use scatterjit_ir::{interp, match_element, DType, Element, Op, OpKind, Reduction, Tensor};
use scatterjit_testkit::values;

/// One worked example: the op, its inputs and the output the document prints.
pub struct SeedCase {
    /// The source, e.g. `onnx_test_scatter_elements_with_negative_indices`.
    pub name: &'static str,
    /// The op with its attributes.
    pub op: Op,
    /// `data` (PyTorch: `self`).
    pub data: Tensor,
    /// `indices` (PyTorch: `index`).
    pub indices: Tensor,
    /// `updates` (PyTorch: `src`, or a scalar `value` filled to index's shape); `None` for
    /// the gather ops.
    pub updates: Option<Tensor>,
    /// The output the document prints.
    pub expected: Tensor,
}

fn t<T: Element>(shape: &[usize], values: &[T]) -> Tensor {
    Tensor::from_slice(shape, values).expect("seed tensors have matching shapes and values")
}

fn scatter(axis: i64, reduction: Reduction, use_init_val: bool) -> Op {
    Op::ScatterElements {
        axis,
        reduction,
        use_init_val,
    }
}

/// A ScatterElements case.
fn sc(
    name: &'static str,
    op: Op,
    data: Tensor,
    indices: Tensor,
    updates: Tensor,
    expected: Tensor,
) -> SeedCase {
    SeedCase {
        name,
        op,
        data,
        indices,
        updates: Some(updates),
        expected,
    }
}

/// A gather (Gather or GatherElements) case.
fn gc(name: &'static str, op: Op, data: Tensor, indices: Tensor, expected: Tensor) -> SeedCase {
    SeedCase {
        name,
        op,
        data,
        indices,
        updates: None,
        expected,
    }
}

/// Every worked example of the seeds, in document order.
pub fn cases() -> Vec<SeedCase> {
    let mut cases = Vec::new();
    cases.extend(onnx_scatter_elements());
    cases.extend(pytorch_scatter());
    cases.extend(openvino_scatter_elements_update());
    cases.extend(onnx_gather());
    cases
}

/// The English and Chinese editions: ONNX ScatterElements.
fn onnx_scatter_elements() -> Vec<SeedCase> {
    let none = scatter(0, Reduction::None, true);
    let zeros_3x3 = || t(&[3, 3], &[0.0f32; 9]);
    let example_1_indices = [1i32, 0, 2, 0, 2, 1];
    let example_1_updates = [1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2];
    let example_1_output = [2.0f32, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2];
    let row = || t(&[1, 5], &[1.0f32, 2.0, 3.0, 4.0, 5.0]);
    let updates_row = || t(&[1, 2], &[1.1f32, 2.1]);
    vec![
        // Examples 1 and 2 of the operator text (opsets 11, 13, 16 and 18, in both
        // editions). The text gives no dtypes: the floats are f32 and, since ONNX allows int32
        // or int64 indices, these take int32 (the test cases below take int64).
        sc(
            "onnx_scatter_elements_example_1",
            none,
            zeros_3x3(),
            t(&[2, 3], &example_1_indices),
            t(&[2, 3], &example_1_updates),
            t(&[3, 3], &example_1_output),
        ),
        sc(
            "onnx_scatter_elements_example_2",
            scatter(1, Reduction::None, true),
            row(),
            t(&[1, 2], &[1i32, 3]),
            updates_row(),
            t(&[1, 5], &[1.0f32, 1.1, 3.0, 2.1, 5.0]),
        ),
        // The ONNX test cases of the English edition (float32 data, int64 indices).
        sc(
            "onnx_test_scatter_elements_without_axis",
            none,
            zeros_3x3(),
            t(&[2, 3], &example_1_indices.map(i64::from)),
            t(&[2, 3], &example_1_updates),
            t(&[3, 3], &example_1_output),
        ),
        sc(
            "onnx_test_scatter_elements_with_axis",
            scatter(1, Reduction::None, true),
            row(),
            t(&[1, 2], &[1i64, 3]),
            updates_row(),
            t(&[1, 5], &[1.0f32, 1.1, 3.0, 2.1, 5.0]),
        ),
        sc(
            "onnx_test_scatter_elements_with_negative_indices",
            scatter(1, Reduction::None, true),
            row(),
            t(&[1, 2], &[1i64, -3]),
            updates_row(),
            t(&[1, 5], &[1.0f32, 1.1, 2.1, 4.0, 5.0]),
        ),
        sc(
            "onnx_test_scatter_elements_with_duplicate_indices",
            scatter(1, Reduction::Add, true),
            row(),
            t(&[1, 2], &[1i64, 1]),
            updates_row(),
            // 2.0 + 1.1 + 2.1 in f32, printed as 5.2.
            t(&[1, 5], &[1.0f32, 5.2, 3.0, 4.0, 5.0]),
        ),
        // The opset 18 English text writes `output[...] += f(output[...], updates[...])`; read
        // literally, max would give 2 + max(2, 1.1) = 4, then 4 + max(4, 2.1) = 8. The test
        // output printed here (2.1) assigns f, as SPEC.md does ("the `+=` is a typo").
        sc(
            "onnx_test_scatter_elements_with_reduction_max",
            scatter(1, Reduction::Max, true),
            row(),
            t(&[1, 2], &[1i64, 1]),
            updates_row(),
            t(&[1, 5], &[1.0f32, 2.1, 3.0, 4.0, 5.0]),
        ),
        // Same `+=` remark as for max: the printed 1.1 is min(2, 1.1, 2.1), assigned.
        sc(
            "onnx_test_scatter_elements_with_reduction_min",
            scatter(1, Reduction::Min, true),
            row(),
            t(&[1, 2], &[1i64, 1]),
            updates_row(),
            t(&[1, 5], &[1.0f32, 1.1, 3.0, 4.0, 5.0]),
        ),
        // Derived: "This operator is the inverse of GatherElements" (both documents). Gathering
        // Example 1's output at Example 1's indices (no duplicates) gives back its updates.
        gc(
            "onnx_scatter_elements_example_1_inverse_gather_elements",
            Op::GatherElements { axis: 0 },
            t(&[3, 3], &example_1_output),
            t(&[2, 3], &example_1_indices.map(i64::from)),
            t(&[2, 3], &example_1_updates),
        ),
    ]
}

/// Chinese edition: PyTorch `Tensor.scatter_`, in place: `self` is `data` and the expected output.
/// A scalar `value` is an `updates` tensor of index's shape filled with the value.
fn pytorch_scatter() -> Vec<SeedCase> {
    // src = torch.arange(1, 11).reshape((2, 5)): int64, larger than index in both cases.
    let src = || t(&[2, 5], &(1..=10).collect::<Vec<i64>>());
    // torch.zeros(3, 5, dtype=src.dtype)
    let zeros_i64 = || t(&[3, 5], &[0i64; 15]);
    vec![
        sc(
            "pytorch_scatter_dim0_src_larger_than_index",
            scatter(0, Reduction::None, true),
            zeros_i64(),
            t(&[1, 4], &[0i64, 1, 2, 0]),
            src(),
            t(&[3, 5], &[1i64, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0]),
        ),
        sc(
            "pytorch_scatter_dim1_src_larger_than_index",
            scatter(1, Reduction::None, true),
            zeros_i64(),
            t(&[2, 3], &[0i64, 1, 2, 0, 1, 4]),
            src(),
            t(&[3, 5], &[1i64, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0]),
        ),
        // torch.full((2, 4), 2.).scatter_(1, torch.tensor([[2], [3]]), 1.23, reduce='multiply')
        sc(
            "pytorch_scatter_multiply_scalar_value",
            scatter(1, Reduction::Mul, true),
            t(&[2, 4], &[2.0f32; 8]),
            t(&[2, 1], &[2i64, 3]),
            t(&[2, 1], &[1.23f32; 2]),
            t(&[2, 4], &[2.0f32, 2.0, 2.46, 2.0, 2.0, 2.0, 2.0, 2.46]),
        ),
        // ... the same with reduce='add'.
        sc(
            "pytorch_scatter_add_scalar_value",
            scatter(1, Reduction::Add, true),
            t(&[2, 4], &[2.0f32; 8]),
            t(&[2, 1], &[2i64, 3]),
            t(&[2, 1], &[1.23f32; 2]),
            t(&[2, 4], &[2.0f32, 2.0, 3.23, 2.0, 2.0, 2.0, 2.0, 3.23]),
        ),
        // torch.zeros(3, 5).scatter_(0, torch.tensor([[0, 1]]), 2): float32 self, value 2.
        sc(
            "pytorch_scatter_value_example",
            scatter(0, Reduction::None, true),
            t(&[3, 5], &[0.0f32; 15]),
            t(&[1, 2], &[0i64, 1]),
            t(&[1, 2], &[2.0f32; 2]),
            t(
                &[3, 5],
                &[
                    2.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                ],
            ),
        ),
    ]
}

/// Japanese edition: OpenVINO ScatterElementsUpdate-12. Data take the dtype of the output port's
/// precision (FP32 or I32). T_IND is "any integer type" and the document does not fix it, so
/// these cases vary it.
fn openvino_scatter_elements_update() -> Vec<SeedCase> {
    let data_1d = || t(&[4], &[2.0f32, 3.0, 4.0, 6.0]);
    let updates_1d = || t(&[6], &[10.0f32, 20.0, 30.0, 40.0, 70.0, 60.0]);
    let updates_2x2 = || t(&[2, 2], &[11i32, 12, 13, 14]);
    vec![
        sc(
            "openvino_example_1_sum",
            scatter(0, Reduction::Add, true),
            data_1d(),
            t(&[6], &[1i64, 0, 0, -2, -1, 2]),
            updates_1d(),
            t(&[4], &[52.0f32, 13.0, 104.0, 76.0]),
        ),
        sc(
            "openvino_example_2_sum_noinit",
            scatter(0, Reduction::Add, false),
            data_1d(),
            t(&[6], &[1u32, 0, 0, 2, 3, 2]),
            updates_1d(),
            t(&[4], &[50.0f32, 10.0, 100.0, 70.0]),
        ),
        // The document's 2-D formula for axis = 1 reads `output[indices[i][j]][j]` on its
        // right-hand side (a copy of the axis = 0 line); its examples, and SPEC.md, combine
        // with `output[i][indices[i][j]]`.
        sc(
            "openvino_example_3_none",
            scatter(1, Reduction::None, true),
            t(&[3, 4], &[0i32; 12]),
            t(&[2, 2], &[1i32, 2, 0, 3]),
            updates_2x2(),
            t(&[3, 4], &[0i32, 11, 12, 0, 13, 0, 0, 14, 0, 0, 0, 0]),
        ),
        sc(
            "openvino_example_4_sum",
            scatter(1, Reduction::Add, true),
            t(&[3, 4], &[1i32; 12]),
            t(&[2, 2], &[1i8, 1, 0, 3]),
            updates_2x2(),
            t(&[3, 4], &[1i32, 24, 1, 1, 14, 1, 1, 15, 1, 1, 1, 1]),
        ),
        sc(
            "openvino_example_5_prod",
            scatter(1, Reduction::Mul, true),
            t(&[3, 4], &[2i32; 12]),
            t(&[2, 2], &[1u8, 1, 0, 3]),
            updates_2x2(),
            t(&[3, 4], &[2i32, 264, 2, 2, 26, 2, 2, 28, 2, 2, 2, 2]),
        ),
    ]
}

/// Chinese edition: ONNX Gather. Every opset prints the same two examples; the data are f32, and the
/// indices int64 for opset 13 and int32 for opsets 11 and 1 (both are allowed).
fn onnx_gather() -> Vec<SeedCase> {
    let example_1_data = [1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7];
    let example_1_indices = [0i32, 1, 1, 2];
    let example_1_output = [1.0f32, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7];
    let example_2_data = [1.0f32, 1.2, 1.9, 2.3, 3.4, 3.9, 4.5, 5.7, 5.9];
    let example_2_output = [1.0f32, 1.9, 2.3, 3.9, 4.5, 5.9];
    let example_1 = |name, indices: Tensor| {
        gc(
            name,
            Op::Gather { axis: 0 },
            t(&[3, 2], &example_1_data),
            indices,
            t(&[2, 2, 2], &example_1_output),
        )
    };
    let example_2 = |name, indices: Tensor| {
        gc(
            name,
            Op::Gather { axis: 1 },
            t(&[3, 3], &example_2_data),
            indices,
            t(&[3, 1, 2], &example_2_output),
        )
    };
    vec![
        example_1(
            "onnx_gather_opset13_example_1",
            t(&[2, 2], &example_1_indices.map(i64::from)),
        ),
        example_2("onnx_gather_opset13_example_2", t(&[1, 2], &[0i64, 2])),
        example_1(
            "onnx_gather_opset11_example_1",
            t(&[2, 2], &example_1_indices),
        ),
        example_2("onnx_gather_opset11_example_2", t(&[1, 2], &[0i32, 2])),
        example_1(
            "onnx_gather_opset1_example_1",
            t(&[2, 2], &example_1_indices),
        ),
        example_2("onnx_gather_opset1_example_2", t(&[1, 2], &[0i32, 2])),
        // Derived: opsets 11 and 13 accept indices in [-s, s-1] (and SPEC.md accepts them for
        // opset 1 too), but print no negative example. These are Examples 1 and 2 with every
        // index k written as k - s; the printed outputs are unchanged.
        example_1(
            "onnx_gather_opset13_example_1_negative",
            t(&[2, 2], &[-3i64, -2, -2, -1]),
        ),
        example_2(
            "onnx_gather_opset13_example_2_negative",
            t(&[1, 2], &[-3i64, -1]),
        ),
        // Derived: the opset 13 shape table's first row, data (P, Q), a scalar index, axis 0,
        // output (Q) with `output[q] = data[indices, q]`, on Example 1's data.
        gc(
            "onnx_gather_opset13_table_scalar_index",
            Op::Gather { axis: 0 },
            t(&[3, 2], &example_1_data),
            Tensor::scalar(1i64),
            t(&[2], &[2.3f32, 3.4]),
        ),
        // Derived: the table's second row, data (P, Q, R), a scalar index, axis 1, output (P, R),
        // on a 2x2x2 version of Example 2's numbers (`output[p, r] = data[p, indices, r]`).
        gc(
            "onnx_gather_opset13_table_scalar_index_axis_1",
            Op::Gather { axis: 1 },
            t(&[1, 3, 3], &example_2_data),
            Tensor::scalar(-1i64),
            t(&[1, 3], &[4.5f32, 5.7, 5.9]),
        ),
    ]
}

/// The cases whose op is allowed on strings, with data, updates and the expected output
/// written as text (value `v` becomes `«v»`, in Rust's shortest round-trip spelling).
pub fn string_cases() -> Vec<SeedCase> {
    let moves_elements = |c: &SeedCase| match c.op {
        Op::ScatterElements { reduction, .. } => reduction == Reduction::None,
        Op::GatherElements { .. } | Op::Gather { .. } => true,
    };
    cases()
        .into_iter()
        .filter(moves_elements)
        .map(|c| SeedCase {
            name: c.name,
            op: c.op,
            data: as_text(&c.data),
            indices: c.indices,
            updates: c.updates.as_ref().map(as_text),
            expected: as_text(&c.expected),
        })
        .collect()
}

/// A tensor's elements as a string tensor of the same shape.
fn as_text(t: &Tensor) -> Tensor {
    let values = match_element!(t.dtype(),
        T => t
            .to_vec::<T>()
            .map(|v| v.iter().map(|x| format!("«{x:?}»")).collect::<Vec<_>>()),
        _ => t.strings().map(<[String]>::to_vec),
    );
    Tensor::from_strings(
        t.shape(),
        values.expect("seed tensors are read as their dtype"),
    )
    .expect("same shape")
}

/// The elements of a float-like tensor as f64 (complex: re, im interleaved), or `None` for
/// integer and bool tensors, which compare exactly.
fn float_values(t: &Tensor) -> Option<Vec<f64>> {
    if t.dtype() == DType::String {
        return None;
    }
    values::float_parts(t.dtype(), t.bytes())
}

/// The elements of any tensor, printed for a failure message.
fn describe(t: &Tensor) -> String {
    match_element!(t.dtype(),
        T => format!("{:?}", t.to_vec::<T>().unwrap_or_default()),
        _ => format!("{:?}", t.strings().unwrap_or_default()),
    )
}

/// Checks `got` against `case.expected`; the error says what differs.
pub fn check(case: &SeedCase, got: &Tensor) -> Result<(), String> {
    let want = &case.expected;
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "{}: got dtype {} shape {:?}, expected dtype {} shape {:?}",
            case.name,
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let equal = match (float_values(got), float_values(want)) {
        (Some(g), Some(w)) => g.iter().zip(&w).all(|(&g, &w)| {
            (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-5 * w.abs().max(1.0)
        }),
        _ if want.dtype() == DType::String => got.strings().ok() == want.strings().ok(),
        _ => got.bytes() == want.bytes(),
    };
    if equal {
        Ok(())
    } else {
        Err(format!(
            "{}: got {}, expected {}",
            case.name,
            describe(got),
            describe(want)
        ))
    }
}

#[test]
fn seed_case_names_are_unique() {
    let cases = cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len());
}

/// Runs every seed case of `cases` through `engine`, reporting every failure by case name.
fn run_all<E: std::fmt::Display>(
    engine: &str,
    cases: Vec<SeedCase>,
    run: impl Fn(&SeedCase) -> Result<Tensor, E>,
) {
    let mut failures = Vec::new();
    for case in cases {
        match run(&case) {
            Ok(got) => {
                if let Err(message) = check(&case, &got) {
                    failures.push(message);
                }
            }
            Err(e) => failures.push(format!("{}: {engine} error: {e}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} seed case(s) failed on the {engine}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn seeds_on_interpreter() {
    run_all("interpreter", cases(), |c| {
        interp::run(&c.op, &c.data, &c.indices, c.updates.as_ref())
    });
}

#[test]
fn seeds_on_jit() {
    run_all("jit", cases(), |c| {
        scatterjit::run(&c.op, &c.data, &c.indices, c.updates.as_ref())
    });
}

#[test]
fn string_seeds_cover_every_op() {
    let cases = string_cases();
    for kind in OpKind::ALL {
        assert!(cases.iter().any(|c| c.op.kind() == *kind), "{kind}");
    }
    // The text is distinct per value: a wrong element shows.
    let example = cases
        .iter()
        .find(|c| c.name == "onnx_gather_opset13_example_1")
        .expect("the ONNX Gather example takes strings");
    assert_eq!(example.data.strings().unwrap()[..2], ["«1.0»", "«1.2»"]);
}

#[test]
fn string_seeds_on_interpreter() {
    run_all("interpreter, string data", string_cases(), |c| {
        interp::run(&c.op, &c.data, &c.indices, c.updates.as_ref())
    });
}

#[test]
fn string_seeds_on_jit() {
    run_all("jit, string data", string_cases(), |c| {
        scatterjit::run(&c.op, &c.data, &c.indices, c.updates.as_ref())
    });
}
