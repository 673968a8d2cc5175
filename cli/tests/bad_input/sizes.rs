//! Sizes: zero-size dims (valid), shape products that overflow, huge broadcast views.

use std::ffi::OsString;

use scatterjit::ir::{DType, Error as IrError, KernelKey, Op, OpKind, Operand, Reduction, Tensor};
use scatterjit::{Error, TensorView};
use scatterjit_cli::npy;

use super::cli::{cli_cells, unique, CliExpect};
use super::columns::{Column, Src, COLUMNS};
use super::inputs::{f32s, filled, get_kernel, ints, ix, key_for, scatter, sentinel, zero_indices};
use super::problem::{
    expand, invalid, out_of_bounds, per_column, problem_of, rows, Named, Problem,
};
use super::{custom, row, run_matrix, Row, Tally};
use crate::cli::Dir;

fn zero_size_cases() -> Vec<Named> {
    let mut cases = Vec::new();
    let mut push = |name: &str,
                    op: Op,
                    data: Tensor,
                    indices: Tensor,
                    updates: Option<Tensor>,
                    expected: Tensor| {
        let problem = problem_of(op, data, indices, updates).result(expected);
        cases.extend(expand(vec![(name.to_string(), problem)]));
    };
    let empty = |shape: &[usize]| f32s(shape);
    let no_indices = |shape: &[usize]| ix::<i64>(shape, &[]);
    push(
        "scatter: data [0, 3], axis 1",
        scatter(1),
        empty(&[0, 3]),
        no_indices(&[0, 2]),
        Some(empty(&[0, 2])),
        empty(&[0, 3]),
    );
    push(
        "scatter: data [0, 3], axis 0",
        scatter(0),
        empty(&[0, 3]),
        no_indices(&[0, 3]),
        Some(empty(&[0, 3])),
        empty(&[0, 3]),
    );
    let data = f32s(&[3, 4]);
    push(
        "scatter: indices [2, 0] leave data unchanged",
        scatter(0),
        data.clone(),
        no_indices(&[2, 0]),
        Some(empty(&[2, 0])),
        data.clone(),
    );
    push(
        "scatter: indices [0, 4], updates [1, 4] leave data unchanged",
        scatter(1),
        data.clone(),
        no_indices(&[0, 4]),
        Some(filled(DType::F32, &[1, 4], 7)),
        data.clone(),
    );
    push(
        "scatter: data [2, 0], indices [5, 0] along the axis",
        scatter(0),
        empty(&[2, 0]),
        no_indices(&[5, 0]),
        Some(empty(&[5, 0])),
        empty(&[2, 0]),
    );
    let bools = filled(DType::Bool, &[2, 3], 1);
    push(
        "scatter: bool data, indices [2, 0]",
        scatter(1),
        bools.clone(),
        ix::<u8>(&[2, 0], &[]),
        Some(filled(DType::Bool, &[2, 0], 1)),
        bools,
    );
    push(
        "gather: indices [0], axis 1",
        Op::Gather { axis: 1 },
        data.clone(),
        no_indices(&[0]),
        None,
        empty(&[3, 0]),
    );
    push(
        "gather: indices [0], axis 0",
        Op::Gather { axis: 0 },
        data.clone(),
        ix::<i32>(&[0], &[]),
        None,
        empty(&[0, 4]),
    );
    push(
        "gather: indices [2, 0], axis 0",
        Op::Gather { axis: 0 },
        data.clone(),
        no_indices(&[2, 0]),
        None,
        empty(&[2, 0, 4]),
    );
    push(
        "gather: data [2, 0], good indices",
        Op::Gather { axis: 0 },
        empty(&[2, 0]),
        ix(&[2], &[1i64, -2]),
        None,
        empty(&[2, 0]),
    );
    push(
        "gather_elements: indices [0, 4]",
        Op::GatherElements { axis: 0 },
        data.clone(),
        no_indices(&[0, 4]),
        None,
        empty(&[0, 4]),
    );
    push(
        "gather_elements: indices [3, 0]",
        Op::GatherElements { axis: 1 },
        data,
        ix::<u16>(&[3, 0], &[]),
        None,
        empty(&[3, 0]),
    );
    push(
        "gather_elements: data [2, 0], indices [3, 0]",
        Op::GatherElements { axis: 0 },
        empty(&[2, 0]),
        no_indices(&[3, 0]),
        None,
        empty(&[3, 0]),
    );
    cases
}

#[test]
fn zero_size_dims_are_valid() {
    run_matrix("zero-size dims are valid", rows(zero_size_cases()));
}

#[test]
fn matrix_zero_size_dims() {
    run_matrix(
        "zero-size dims",
        per_column(|column| {
            let mut cases = Vec::new();
            for dtype in [DType::I64, DType::U8] {
                let p = Problem::new(column, 1, f32s(&[3, 0]), zero_indices(dtype, &[2, 2]));
                cases.push((
                    format!("{dtype} index 0 into a zero-size axis"),
                    p.fails(out_of_bounds(column, 0, &[0, 0], 1, 0)),
                ));
            }
            let gather = column == Column::Gather;
            if gather {
                // An empty output does not excuse a bad index.
                let p = Problem::new(column, 1, f32s(&[0, 5]), ints(DType::I64, &[2], &[1, 5]));
                cases.push((
                    "index 5 for an empty output".into(),
                    p.fails(out_of_bounds(column, 5, &[1], 1, 5)),
                ));
            }
            // Valid: zero-size dims elsewhere (positive controls).
            let valid: [(&[usize], &[usize], i64); 3] = if gather {
                [
                    (&[0, 5], &[2], 1),
                    (&[3, 5], &[2, 0], 1),
                    (&[3, 5], &[0], 0),
                ]
            } else {
                [
                    (&[0, 5], &[0, 4], 1),
                    (&[3, 5], &[2, 0], 1),
                    (&[3, 5], &[0, 5], 0),
                ]
            };
            for (data, indices, axis) in valid {
                let p = Problem::new(column, axis, f32s(data), zero_indices(DType::I64, indices));
                cases.push((format!("valid: data {data:?}, indices {indices:?}"), p));
            }
            cases
        }),
    );
}

fn overflow_cases() -> Vec<Row> {
    use DType::{F32, F64, I64, U8};
    // Validation names the op and the tensor whose byte count overflows.
    let overflow = |op, tensor, shape: &[usize]| IrError::SizeOverflow {
        op,
        tensor,
        shape: shape.to_vec(),
    };
    let (max, e61, e62, e63) = (usize::MAX, 1usize << 61, 1usize << 62, 1usize << 63);
    let gather = |axis| Op::Gather { axis };
    vec![
        // Gather's output of zero-size data (no allocation): element count, byte count,
        // and a byte count past isize::MAX.
        invalid(
            "gather: output [usize::MAX, 2] of data [usize::MAX, 0]",
            gather(1),
            (F32, &[max, 0]),
            (I64, &[2]),
            None,
            overflow(OpKind::Gather, Operand::Output, &[max, 2]),
        ),
        invalid(
            "gather: output [2, usize::MAX] of data [0, usize::MAX]",
            gather(0),
            (F32, &[0, max]),
            (I64, &[2]),
            None,
            overflow(OpKind::Gather, Operand::Output, &[2, max]),
        ),
        invalid(
            "gather: f64 output [2^61, 1], bytes overflow",
            gather(1),
            (F64, &[e61, 0]),
            (I64, &[1]),
            None,
            overflow(OpKind::Gather, Operand::Output, &[e61, 1]),
        ),
        invalid(
            "gather: u8 output [2^63, 1], bytes past isize::MAX",
            gather(1),
            (U8, &[e63, 0]),
            (I64, &[1]),
            None,
            overflow(OpKind::Gather, Operand::Output, &[e63, 1]),
        ),
        // Huge inputs: validation and keys only (the tensors cannot be built).
        invalid(
            "scatter: data [usize::MAX, 2]",
            scatter(1),
            (F32, &[max, 2]),
            (I64, &[1, 1]),
            Some((F32, &[1, 1])),
            overflow(OpKind::ScatterElements, Operand::Data, &[max, 2]),
        ),
        invalid(
            "scatter: f32 data [2^62, 1], bytes overflow",
            scatter(1),
            (F32, &[e62, 1]),
            (I64, &[1, 1]),
            Some((F32, &[1, 1])),
            overflow(OpKind::ScatterElements, Operand::Data, &[e62, 1]),
        ),
        invalid(
            "scatter: u8 data [2^63], bytes past isize::MAX",
            scatter(0),
            (U8, &[e63]),
            (I64, &[1]),
            Some((U8, &[1])),
            overflow(OpKind::ScatterElements, Operand::Data, &[e63]),
        ),
        invalid(
            "scatter: updates [usize::MAX, 2]",
            scatter(1),
            (F32, &[2, 3]),
            (I64, &[1, 1]),
            Some((F32, &[max, 2])),
            overflow(OpKind::ScatterElements, Operand::Updates, &[max, 2]),
        ),
        invalid(
            "gather_elements: indices [2^61, 2], bytes overflow",
            Op::GatherElements { axis: 0 },
            (F32, &[2, 3]),
            (I64, &[e61, 2]),
            None,
            overflow(OpKind::GatherElements, Operand::Indices, &[e61, 2]),
        ),
        invalid(
            "gather: data [usize::MAX, 3]",
            gather(0),
            (F32, &[max, 3]),
            (I64, &[1]),
            None,
            overflow(OpKind::Gather, Operand::Data, &[max, 3]),
        ),
        invalid(
            "gather: indices [2^61], bytes overflow",
            gather(0),
            (F32, &[3]),
            (I64, &[e61]),
            None,
            overflow(OpKind::Gather, Operand::Indices, &[e61]),
        ),
    ]
}

#[test]
fn shape_overflow() {
    run_matrix("shape overflow", overflow_cases());
}

/// A `.npy` header for `shape` with no payload (for shapes no tensor can have).
fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(
        &u16::try_from(total - 10)
            .expect("a short header")
            .to_le_bytes(),
    );
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

/// The CLI on `column`'s files, where the file of `role` is `bad` (raw bytes): the message
/// must be the reader's own, and `kind` must accept what the reader says.
pub(crate) fn cli_bad_file(
    t: &mut Tally,
    column: Column,
    role: Operand,
    bad: &[u8],
    kind: fn(&npy::NpyErrorKind) -> bool,
) {
    let Some(args) = column.cli(1) else {
        return;
    };
    let dir = Dir::new(&unique("matrix-file"));
    let mut argv: Vec<OsString> = args.into_iter().map(OsString::from).collect();
    let mut roles = vec![Operand::Data, Operand::Indices];
    if column.scatters() {
        roles.push(Operand::Updates);
    }
    let mut bad_path = None;
    for r in roles {
        let name = format!("{r}.npy");
        let path = if r == role {
            let path = dir.raw(&name, bad);
            bad_path = Some(path.clone());
            path
        } else {
            match r {
                Operand::Data => dir.npy(&name, &f32s(&[3, 5])),
                Operand::Indices => dir.npy(&name, &zero_indices(DType::I64, &[2, 4])),
                _ => dir.npy(&name, &filled(DType::F32, &[2, 4], 7)),
            }
        };
        argv.push(path.into());
    }
    let Some(bad_path) = bad_path else {
        return t
            .c
            .fail("CLI", format!("{role} is not an input of the command"));
    };
    let e = match npy::read(&bad_path) {
        Ok(_) => return t.c.fail("npy::read", "the bad file reads".into()),
        Err(e) => e,
    };
    if !kind(e.kind()) {
        t.c.fail("npy::read", format!("unexpected error kind: {e}"));
    }
    cli_cells(t, &dir, &argv, &CliExpect::Line(format!("error: {e}")));
}

/// An operand of `shape` whose byte count overflows: the owned-tensor constructor refuses
/// it, a broadcast view of it reaches the kernel calls (which refuse it, writing nothing),
/// and a `.npy` header announcing it is refused by the CLI.
fn overflow_row(column: Column, role: Operand, dtype: DType, shape: Vec<usize>) -> Row {
    let name = format!("{}: {role} {dtype} {shape:?}", column.name());
    row(name, move |t| {
        let expected_ctor = IrError::ShapeOverflow {
            shape: shape.clone(),
        };
        if !(role == Operand::Updates && column == Column::TorchScalar) {
            let got = Tensor::from_bytes(dtype, shape.clone(), Vec::new());
            t.err("Tensor::from_bytes", got, &expected_ctor);
        }
        let expected = Err(Error::Invalid(IrError::SizeOverflow {
            op: column.kind(),
            tensor: role,
            shape: shape.clone(),
        }));
        let op = column.op(1);
        let element = vec![0u8; dtype.size()];
        let huge = TensorView::new(dtype, &shape, &vec![0; shape.len()], 0, &element)
            .expect("a broadcast view");
        let data = f32s(&[3, 5]);
        let indices = zero_indices(DType::I64, &[2, 4]);
        let src = column.src(DType::F32, &[2, 4]);
        let mut dv = TensorView::from(&data);
        let mut iv = TensorView::from(&indices);
        let mut uv = src.as_ref().map(Src::view);
        match role {
            Operand::Data => dv = huge,
            Operand::Indices => iv = huge,
            _ => uv = Some(huge),
        }
        let key = key_for(&op, dv.dtype(), iv.dtype(), 2, iv.shape().len()).expect("a valid key");
        let Some(kernel) = get_kernel(t.c, &key) else {
            return;
        };
        t.outcome("Kernel::run", kernel.run(&dv, &iv, uv.as_ref()), &expected);
        let before = sentinel(DType::F32, &[3, 5]);
        let mut out = before.clone();
        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
        let bytes = (before.bytes(), out.bytes());
        t.written("Kernel::run_into", got, bytes, || out.clone(), &expected);
        if let (Some((reduction, init)), Some(uv), false) =
            (column.reduction(), &uv, role == Operand::Data)
        {
            let mut target = data.clone();
            let got = kernel.scatter_in_place(&mut (&mut target).into(), &iv, uv);
            let bytes = (data.bytes(), target.bytes());
            t.written(
                "Kernel::scatter_in_place",
                got,
                bytes,
                || target.clone(),
                &expected,
            );
            let mut target = data.clone();
            let got = scatterjit::scatter_(&mut (&mut target).into(), 1, &iv, uv, reduction, init);
            let bytes = (data.bytes(), target.bytes());
            t.written(
                "scatterjit::scatter_",
                got,
                bytes,
                || target.clone(),
                &expected,
            );
        }
        let header = npy_header(dtype.npy_descr(), &shape);
        cli_bad_file(t, column, role, &header, |k| {
            matches!(k, npy::NpyErrorKind::ShapeOverflow { .. })
        });
    })
}

#[test]
fn matrix_shape_products_that_overflow() {
    use Operand::{Data, Indices, Updates};
    // Element counts that fit usize, byte counts that do not.
    let e61 = 1usize << 61;
    let mut rows = Vec::new();
    for column in COLUMNS {
        rows.push(overflow_row(column, Data, DType::F32, vec![e61, 5]));
        rows.push(overflow_row(column, Indices, DType::I64, vec![e61, 4]));
        if column.scatters() {
            rows.push(overflow_row(column, Updates, DType::F32, vec![e61, 4]));
        }
    }
    // Gather's output, of a data tensor with no bytes: a real problem on every path.
    let data = Tensor::from_bytes(DType::F32, vec![usize::MAX, 0], Vec::new()).expect("empty");
    let p = Problem::new(Column::Gather, 1, data, zero_indices(DType::I64, &[2])).fails(
        IrError::SizeOverflow {
            op: OpKind::Gather,
            tensor: Operand::Output,
            shape: vec![usize::MAX, 2],
        },
    );
    rows.push(p.into_row("output [usize::MAX, 2] of data [usize::MAX, 0]".into()));
    run_matrix("shape products that overflow", rows);
}

/// A view of one element of `dtype` broadcast to `shape`.
fn broadcast<'a>(dtype: DType, shape: &[usize], element: &'a [u8]) -> TensorView<'a> {
    TensorView::new(dtype, shape, &vec![0; shape.len()], 0, element).unwrap()
}

fn broadcast_overflow_cases() -> Vec<Row> {
    let overflow = |op, tensor, shape: &[usize]| {
        Error::Invalid(IrError::SizeOverflow {
            op,
            tensor,
            shape: shape.to_vec(),
        })
    };
    let (e61, e62) = (1usize << 61, 1usize << 62);
    vec![
        custom("scatter: f64 data view [2^61, 1]", move |c| {
            let key =
                KernelKey::scatter_elements(DType::F64, DType::I64, 2, 1, Reduction::Add, true)
                    .unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let element = [0u8; 8];
            let data = broadcast(DType::F64, &[e61, 1], &element);
            let indices = ix(&[1, 1], &[0i64]);
            let updates = filled(DType::F64, &[1, 1], 7);
            let expected = overflow(OpKind::ScatterElements, Operand::Data, &[e61, 1]);
            let got = kernel.run(&data, &(&indices).into(), Some(&(&updates).into()));
            c.err("Kernel::run", got, &expected);
            let mut out = sentinel(DType::F64, &[1, 1]);
            let before = out.clone();
            let got = kernel.run_into(
                &mut (&mut out).into(),
                &data,
                &(&indices).into(),
                Some(&(&updates).into()),
            );
            c.err("Kernel::run_into", got, &expected);
            c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
        }),
        custom("scatter_: f32 updates view [2^62, 1]", move |c| {
            let element = 1.5f32.to_le_bytes();
            let updates = broadcast(DType::F32, &[e62, 1], &element);
            let indices = ix(&[1, 1], &[0i64]);
            let expected = overflow(OpKind::ScatterElements, Operand::Updates, &[e62, 1]);
            let data = f32s(&[2, 3]);
            let mut target = data.clone();
            let got = scatterjit::scatter_(
                &mut (&mut target).into(),
                1,
                &(&indices).into(),
                &updates,
                Reduction::None,
                true,
            );
            c.err("scatterjit::scatter_", got, &expected);
            c.unchanged("scatterjit::scatter_ data", data.bytes(), target.bytes());
            let key =
                KernelKey::scatter_elements(DType::F32, DType::I64, 2, 1, Reduction::Mean, false)
                    .unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let got =
                kernel.scatter_in_place(&mut (&mut target).into(), &(&indices).into(), &updates);
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged(
                "Kernel::scatter_in_place data",
                data.bytes(),
                target.bytes(),
            );
            let got = kernel.run(&(&data).into(), &(&indices).into(), Some(&updates));
            c.err("Kernel::run", got, &expected);
        }),
        custom("gather_elements: i64 indices view [2^61, 1]", move |c| {
            let key = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let element = 0i64.to_le_bytes();
            let indices = broadcast(DType::I64, &[e61, 1], &element);
            let data = f32s(&[2, 3]);
            let got = kernel.run(&(&data).into(), &indices, None);
            c.err(
                "Kernel::run",
                got,
                &overflow(OpKind::GatherElements, Operand::Indices, &[e61, 1]),
            );
        }),
        custom("gather: i64 indices view [2^61]", move |c| {
            let key = KernelKey::gather(DType::F32, DType::I64, 1, 1, 0).unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let element = 0i64.to_le_bytes();
            let indices = broadcast(DType::I64, &[e61], &element);
            let data = f32s(&[3]);
            let got = kernel.run(&(&data).into(), &indices, None);
            c.err(
                "Kernel::run",
                got,
                &overflow(OpKind::Gather, Operand::Indices, &[e61]),
            );
        }),
        custom(
            "gather: output [usize::MAX, 2] of a data view [usize::MAX, 0]",
            move |c| {
                let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 1).unwrap();
                let Some(kernel) = get_kernel(c, &key) else {
                    return;
                };
                let data = broadcast(DType::F32, &[usize::MAX, 0], &[]);
                let indices = ix(&[2], &[0i64, 0]);
                let expected = overflow(OpKind::Gather, Operand::Output, &[usize::MAX, 2]);
                let got = kernel.run(&data, &(&indices).into(), None);
                c.err("Kernel::run", got, &expected);
                let mut out = sentinel(DType::F32, &[2, 2]);
                let before = out.clone();
                let got = kernel.run_into(&mut (&mut out).into(), &data, &(&indices).into(), None);
                c.err("Kernel::run_into", got, &expected);
                c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
            },
        ),
    ]
}

#[test]
fn shape_overflow_through_broadcast_views() {
    run_matrix("broadcast overflow", broadcast_overflow_cases());
}
