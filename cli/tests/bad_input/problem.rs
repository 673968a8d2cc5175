//! One problem (an op's inputs and what must come of them) through every entry point.

use scatterjit::ir::{interp, DType, Error as IrError, Op, OpKind, Reduction, Tensor};
use scatterjit::{Error, Kernel, TensorView};

use super::cli::{cli_cells, unique, CliExpect};
use std::ffi::OsString;

use super::columns::{Column, Src, COLUMNS};
use super::inputs::{
    build, each_reduction, get_kernel, key_for, meta, named, sentinel, Layout, Strided,
};
use super::{row, Row, Tally};
use crate::cli::Dir;

/// What the CLI must do with a problem.
#[derive(Clone, Debug)]
pub(crate) enum CliForm {
    /// Print the library's message (or write the result) exactly as the other paths do.
    Same,
    /// Refuse the arguments (exit status 2) with a message containing this.
    Usage(&'static str),
}

/// One input to every entry point. `expect` is the exact error, or `Ok` for a valid input
/// whose result must equal the reference interpreter's.
#[derive(Clone)]
pub(crate) struct Problem {
    pub(crate) column: Column,
    pub(crate) axis: i64,
    pub(crate) data: Tensor,
    pub(crate) indices: Tensor,
    pub(crate) src: Option<Src>,
    pub(crate) expect: Result<(), IrError>,
    pub(crate) cli: CliForm,
    /// The error's message word for word, where a case pins it.
    pub(crate) message: Option<&'static str>,
    /// The result of a valid case, where it pins it (the interpreter must agree).
    pub(crate) result: Option<Tensor>,
}

impl Problem {
    /// The column's op on `data` and `indices` along `axis`, with the column's src for
    /// indices of that shape; valid until [`Problem::fails`] says otherwise.
    pub(crate) fn new(column: Column, axis: i64, data: Tensor, indices: Tensor) -> Problem {
        let src = column.src(data.dtype(), indices.shape());
        Problem {
            column,
            axis,
            data,
            indices,
            src,
            expect: Ok(()),
            cli: CliForm::Same,
            message: None,
            result: None,
        }
    }

    pub(crate) fn fails(self, e: IrError) -> Problem {
        Problem {
            expect: Err(e),
            ..self
        }
    }

    pub(crate) fn src(self, src: Option<Src>) -> Problem {
        Problem { src, ..self }
    }

    pub(crate) fn cli(self, cli: CliForm) -> Problem {
        Problem { cli, ..self }
    }

    pub(crate) fn into_row(self, name: String) -> Row {
        row(format!("{}: {name}", self.column.name()), move |t| {
            self.check(t)
        })
    }

    fn check(&self, t: &mut Tally) {
        let op = self.column.op(self.axis);
        let dense_src = self
            .src
            .as_ref()
            .map(|s| s.view().to_tensor().expect("a small source"));
        let oracle = interp::run(&op, &self.data, &self.indices, dense_src.as_ref());
        let expected: Result<Tensor, Error> = match (&self.expect, oracle) {
            (Err(e), oracle) => {
                t.c.err("interp::run (the table's oracle)", oracle, e);
                Err(Error::Invalid(e.clone()))
            }
            (Ok(()), Ok(result)) => Ok(result),
            (Ok(()), Err(e)) => {
                return t.c.fail("interp::run", format!("a valid case fails: {e}"));
            }
        };

        // Free functions: owned tensors, and `scatter_` in place.
        let src_tensor = self.src.as_ref().and_then(Src::tensor);
        if self.src.is_none() || src_tensor.is_some() {
            let got = scatterjit::run(&op, &self.data, &self.indices, src_tensor);
            t.outcome("scatterjit::run", got, &expected);
            if let Some((path, got)) = named(&op, &self.data, &self.indices, src_tensor) {
                t.outcome(path, got, &expected);
            }
        }
        if let (Some((reduction, init)), Some(src)) = (self.column.reduction(), &self.src) {
            let mut target = self.data.clone();
            let got = scatterjit::scatter_(
                &mut (&mut target).into(),
                self.axis,
                &(&self.indices).into(),
                &src.view(),
                reduction,
                init,
            );
            let bytes = (self.data.bytes(), target.bytes());
            t.written(
                "scatterjit::scatter_",
                got,
                bytes,
                || target.clone(),
                &expected,
            );
        }

        if let (Some(message), Err(e)) = (self.message, &expected) {
            let text = e.to_string();
            if text != message {
                t.c.fail("Display", format!("expected {message:?}, got {text:?}"));
            }
        }
        if let (Some(want), Ok(result)) = (&self.result, &expected) {
            if result != want {
                let path = "interp::run (the table's oracle)";
                t.c.fail(path, format!("expected {want:?}, got {result:?}"));
            }
        }
        self.check_validate(t, &op);
        self.check_kernel(t, &op, &expected);
        if let Some(args) = self.column.cli(self.axis) {
            self.check_cli(t, &self.cli, args, &expected);
        }
    }

    /// `Op::validate` refuses exactly the errors shapes and dtypes show; a bad index value
    /// is the kernels' to find.
    fn check_validate(&self, t: &mut Tally, op: &Op) {
        let uv = self.src.as_ref().map(Src::view);
        let got = op
            .validate(
                self.data.meta(),
                self.indices.meta(),
                uv.as_ref().map(TensorView::meta),
            )
            .map(|v| v.key);
        match &self.expect {
            Err(e) if !matches!(e, IrError::IndexOutOfBounds { .. }) => {
                t.err("Op::validate", got, e)
            }
            expect => {
                match expect {
                    Ok(()) => t.count_valid("Op::validate"),
                    Err(_) => t.count("Op::validate"),
                }
                if let Err(e) = got {
                    t.c.fail("Op::validate", format!("valid shapes rejected: {e}"));
                }
            }
        }
    }

    /// `KernelKey` (when it refuses), else `Kernel::run`, `run_into` and `scatter_in_place`
    /// with contiguous inputs, strided data and updates, and column-major indices (not for
    /// strings, which have no bytes to lay out).
    fn check_kernel(&self, t: &mut Tally, op: &Op, expected: &Result<Tensor, Error>) {
        let key = key_for(
            op,
            self.data.dtype(),
            self.indices.dtype(),
            self.data.shape().len(),
            self.indices.shape().len(),
        );
        let key = match (key, &self.expect) {
            (Ok(key), _) => key,
            (Err(e), Err(want)) => return t.err("KernelKey", Err::<(), _>(e), want),
            (Err(e), Ok(())) => return t.c.fail("KernelKey", format!("refuses a valid case: {e}")),
        };
        let Some(kernel) = get_kernel(t.c, &key) else {
            return;
        };
        let dv = TensorView::from(&self.data);
        let iv = TensorView::from(&self.indices);
        let uv = self.src.as_ref().map(Src::view);
        let out_shape = match expected {
            Ok(result) => result.shape().to_vec(),
            Err(_) => op
                .validate(dv.meta(), iv.meta(), uv.as_ref().map(TensorView::meta))
                .map_or_else(|_| self.data.shape().to_vec(), |v| v.out_shape),
        };
        let calls = KernelCalls {
            kernel: &kernel,
            scatters: key.kind() == OpKind::ScatterElements,
            reduction: self.column.reduction(),
            axis: self.axis,
            out_shape: &out_shape,
            expected,
        };
        calls.check(t, "", (&dv, &iv, uv.as_ref()), &self.data);

        let inputs = [
            Some(&self.data),
            Some(&self.indices),
            self.src.as_ref().and_then(Src::tensor),
        ];
        let layable = |x: &Tensor| x.dtype() != DType::String && small_padded(x.shape());
        if !inputs.into_iter().flatten().all(layable) {
            return;
        }
        let strided_data = Strided::of(&self.data, Layout::PaddedReversed);
        let strided_indices = Strided::of(&self.indices, Layout::ColumnMajor);
        let strided_src = self
            .src
            .as_ref()
            .and_then(Src::tensor)
            .map(|u| Strided::of(u, Layout::ColumnMajor));
        let sv = strided_src
            .as_ref()
            .map(Strided::view)
            .or_else(|| uv.clone());
        let data_view = strided_data.view();
        calls.check(
            t,
            " (strided data and updates)",
            (&data_view, &iv, sv.as_ref()),
            &self.data,
        );
        let index_view = strided_indices.view();
        calls.check(
            t,
            " (column-major indices)",
            (&dv, &index_view, uv.as_ref()),
            &self.data,
        );
    }

    fn check_cli(
        &self,
        t: &mut Tally,
        form: &CliForm,
        args: Vec<String>,
        expected: &Result<Tensor, Error>,
    ) {
        let dir = Dir::new(&unique("matrix"));
        let mut argv: Vec<OsString> = args.into_iter().map(OsString::from).collect();
        argv.push(dir.npy("data.npy", &self.data).into());
        argv.push(dir.npy("indices.npy", &self.indices).into());
        if let Some(src) = &self.src {
            match src.tensor() {
                Some(u) => argv.push(dir.npy("updates.npy", u).into()),
                None => return t.c.fail("CLI", "a scalar src has no file".into()),
            }
        }
        let want = match (form, expected) {
            (CliForm::Usage(part), _) => CliExpect::Usage(part),
            (_, Err(e)) => CliExpect::Line(format!("error: {e}")),
            (_, Ok(result)) => CliExpect::Output(result.clone()),
        };
        cli_cells(t, &dir, &argv, &want);
    }
}

/// Rows of `problem(column)` for every column where it applies.
pub(crate) fn per_column(problem: impl Fn(Column) -> Vec<(String, Problem)>) -> Vec<Row> {
    COLUMNS
        .iter()
        .flat_map(|&column| problem(column))
        .map(|(name, p)| p.into_row(name))
        .collect()
}

pub(crate) fn out_of_bounds(
    column: Column,
    index: i128,
    position: &[usize],
    axis: usize,
    size: usize,
) -> IrError {
    IrError::IndexOutOfBounds {
        op: column.kind(),
        index,
        position: position.to_vec(),
        axis,
        size,
    }
}

/// Whether a padded copy of `shape` ((d + 1) elements per dim d; none for [usize::MAX, 0])
/// is small enough to build.
fn small_padded(shape: &[usize]) -> bool {
    let padded = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d.checked_add(1)?));
    padded.is_some_and(|n| n <= 1 << 16)
}

/// The kernel calls of one problem, for one layout of its inputs.
struct KernelCalls<'a> {
    kernel: &'a Kernel,
    scatters: bool,
    reduction: Option<(Reduction, bool)>,
    pub(crate) axis: i64,
    out_shape: &'a [usize],
    expected: &'a Result<Tensor, Error>,
}

impl KernelCalls<'_> {
    /// `run`, `run_into` (contiguous and strided output) and, for scatters,
    /// `scatter_in_place` (contiguous and strided target); with non-contiguous inputs also
    /// `scatterjit::scatter_` (its contiguous call is a free function's cell).
    fn check(
        &self,
        t: &mut Tally,
        layout: &str,
        (dv, iv, uv): (&TensorView, &TensorView, Option<&TensorView>),
        data: &Tensor,
    ) {
        let (kernel, expected) = (self.kernel, self.expected);
        let path = |what: &str| format!("{what}{layout}");
        t.outcome(&path("Kernel::run"), kernel.run(dv, iv, uv), expected);

        let before = sentinel(data.dtype(), self.out_shape);
        let mut out = before.clone();
        let got = kernel.run_into(&mut (&mut out).into(), dv, iv, uv);
        let bytes = (before.bytes(), out.bytes());
        t.written(
            &path("Kernel::run_into"),
            got,
            bytes,
            || out.clone(),
            expected,
        );
        if small_padded(self.out_shape) {
            let mut strided = Strided::of(&before, Layout::PaddedReversed);
            let strided_before = strided.bytes.clone();
            let got = kernel.run_into(&mut strided.view_mut(), dv, iv, uv);
            let bytes = (&strided_before[..], &strided.bytes[..]);
            let result = || strided.view().to_tensor().expect("a small output");
            let p = path("Kernel::run_into (strided)");
            t.written(&p, got, bytes, result, expected);
        }

        let Some(uv) = uv.filter(|_| self.scatters) else {
            return;
        };
        let mut target = data.clone();
        let got = kernel.scatter_in_place(&mut (&mut target).into(), iv, uv);
        let bytes = (data.bytes(), target.bytes());
        let p = path("Kernel::scatter_in_place");
        t.written(&p, got, bytes, || target.clone(), expected);
        let mut strided = Strided::of(data, Layout::PaddedReversed);
        let strided_before = strided.bytes.clone();
        let got = kernel.scatter_in_place(&mut strided.view_mut(), iv, uv);
        let bytes = (&strided_before[..], &strided.bytes[..]);
        let result = || strided.view().to_tensor().expect("a small output");
        let p = path("Kernel::scatter_in_place (strided)");
        t.written(&p, got, bytes, result, expected);

        let (Some((reduction, init)), false) = (self.reduction, layout.is_empty()) else {
            return;
        };
        let mut target = data.clone();
        let got = scatterjit::scatter_(
            &mut (&mut target).into(),
            self.axis,
            iv,
            uv,
            reduction,
            init,
        );
        let bytes = (data.bytes(), target.bytes());
        let p = path("scatterjit::scatter_");
        t.written(&p, got, bytes, || target.clone(), expected);
    }
}

impl Problem {
    /// Pins the error's message word for word.
    pub(crate) fn message(self, message: &'static str) -> Problem {
        Problem {
            message: Some(message),
            ..self
        }
    }

    /// Pins a valid case's result.
    pub(crate) fn result(self, result: Tensor) -> Problem {
        Problem {
            result: Some(result),
            ..self
        }
    }

    /// The same inputs run as `op` (which must be the same kind of op).
    pub(crate) fn with_op(self, op: Op) -> Problem {
        Problem {
            column: Column::of(op),
            axis: axis_of(op),
            ..self
        }
    }
}

fn axis_of(op: Op) -> i64 {
    match op {
        Op::ScatterElements { axis, .. } | Op::GatherElements { axis } | Op::Gather { axis } => {
            axis
        }
    }
}

/// A case named as its table lists it.
pub(crate) type Named = (String, Problem);

pub(crate) fn rows(cases: Vec<Named>) -> Vec<Row> {
    cases
        .into_iter()
        .map(|(name, p)| p.into_row(name))
        .collect()
}

/// `op` on these tensors, valid until [`Problem::fails`] says otherwise. The CLI refuses an
/// updates file for a gather and requires one for a scatter (usage errors) where the
/// library refuses the tensors.
pub(crate) fn problem_of(
    op: Op,
    data: Tensor,
    indices: Tensor,
    updates: Option<Tensor>,
) -> Problem {
    let column = Column::of(op);
    let cli = match (column.scatters(), updates.is_some()) {
        (false, true) => CliForm::Usage("unexpected argument"),
        (true, false) => CliForm::Usage("required"),
        _ => CliForm::Same,
    };
    Problem {
        column,
        axis: axis_of(op),
        data,
        indices,
        src: updates.map(Src::Tensor),
        expect: Ok(()),
        cli,
        message: None,
        result: None,
    }
}

/// Cases repeated with every reduction of [`each_reduction`] that data's dtype supports.
pub(crate) fn expand(cases: Vec<Named>) -> Vec<Named> {
    cases
        .into_iter()
        .flat_map(|(name, p)| {
            let op = p.column.op(p.axis);
            each_reduction(op, p.data.dtype())
                .into_iter()
                .map(move |(suffix, op)| (format!("{name}{suffix}"), p.clone().with_op(op)))
        })
        .collect()
}

/// A case given as (dtype, shape) inputs that `op` must refuse with `expected`: a problem
/// where the tensors are small enough to build, else checked through `Op::validate` and
/// the key alone.
pub(crate) fn invalid(
    name: impl Into<String>,
    op: Op,
    data: (DType, &[usize]),
    indices: (DType, &[usize]),
    updates: Option<(DType, &[usize])>,
    expected: IrError,
) -> Row {
    let name = name.into();
    let spec = |(dtype, shape): (DType, &[usize])| (dtype, shape.to_vec());
    let (data, indices, updates) = (spec(data), spec(indices), updates.map(spec));
    let built = (
        build(&data, Some(1)),
        build(&indices, None),
        updates.as_ref().map(|u| build(u, Some(7))),
    );
    let tensors = match built {
        (Some(d), Some(i), None) => Some((d, i, None)),
        (Some(d), Some(i), Some(Some(u))) => Some((d, i, Some(u))),
        _ => None,
    };
    if let Some((d, i, u)) = tensors {
        return problem_of(op, d, i, u).fails(expected).into_row(name);
    }
    row(format!("{}: {name}", Column::of(op).name()), move |t| {
        let got = op.validate(meta(&data), meta(&indices), updates.as_ref().map(meta));
        t.err("Op::validate", got.map(|v| v.key), &expected);
        let key = key_for(&op, data.0, indices.0, data.1.len(), indices.1.len());
        if let Err(e) = key {
            t.err("KernelKey", Err::<(), _>(e), &expected);
        }
    })
}
