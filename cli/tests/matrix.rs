//! The bad-input matrix: every kind of bad input (a row) for every op variant (a column),
//! through every entry point. Each table is one row; each table prints its number of cells.
//!
//! Columns: ONNX ScatterElements with `none`, `add`, `mul`, `max`, `min`; the legacy ONNX
//! Scatter (the CLI's `scatter`); OpenVINO ScatterElementsUpdate-12 with `mean` (with and
//! without `use_init_val`) and `sum` without it; PyTorch `scatter_(dim, index, value)` with a
//! scalar value (a broadcast view) and `scatter_reduce_(..., "sum", include_self=False)` with
//! `src` larger than `index`; GatherElements; Gather.
//!
//! Entry points, one cell per call checked:
//! - free functions: `scatterjit::run`, the op's own function (`scatter_elements`,
//!   `gather_elements`, `gather`) on owned tensors, and `scatterjit::scatter_` in place;
//! - low level: the `KernelKey` constructor where it already refuses the input; otherwise
//!   `KernelCache::get`, then `Kernel::run`, `Kernel::run_into` into a contiguous and into a
//!   strided output, and `Kernel::scatter_in_place` on a contiguous and on a strided tensor;
//! - the command-line tool on `.npy` files, once with no OUT file and once with one.
//!
//! An error cell asserts the exact error value (its message names the op and the offending
//! value and position), that a `run_into` output (filled with a sentinel pattern) and
//! in-place data are byte-identical afterwards, and for the CLI: exit status 1 (2 for usage
//! errors), exactly one stderr line `error: <the library's message>`, nothing on stdout,
//! OUT not created or left byte-identical, and no other file created. The reference
//! interpreter must report the same error (a check on the table itself, not a cell). Valid
//! cells, the positive controls next to each row, assert the interpreter's result.
//!
//! Aliasing: a `TensorViewMut` output never aliases a `TensorView` input in safe code (the
//! borrow checker refuses it; see the `compile_fail` examples on `TensorViewMut`), and
//! views built over overlapping raw buffers are refused at run time (unit-tested in
//! `src/tensor.rs`). For the CLI, OUT naming an input is sound (inputs are read whole before
//! the atomic rename), so those cells assert the input is untouched on error and replaced
//! by the result on success.

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use scatterjit::ir::{
    interp, DType, Error as IrError, Op, OpKind, Reduction, Tensor, TensorRole, MAX_RANK,
};
use scatterjit::{Error, TensorView, TensorViewMut};
use scatterjit_cli::npy;

use crate::cli::{read, run_binary, Dir};
use crate::errors::{
    filled, get_kernel, key_for, named, run_table, sentinel, Case, Checker, Layout, Strided,
};

// ---------------------------------------------------------------------------------------
// Cells

/// Cells by entry point: free functions (and the owned tensors they take), the kernel API
/// (and the views it takes), the CLI; then how many of them are valid inputs.
type Cells = [usize; 4];

/// A checker that counts the calls it checks.
struct Tally<'a> {
    c: &'a mut Checker,
    cells: Cells,
}

impl Tally<'_> {
    /// Counts one checked call through the entry point `path` names.
    fn count(&mut self, path: &str) {
        let entry = if path.starts_with("CLI") {
            2
        } else if path.starts_with("scatterjit::") || path.starts_with("Tensor::") {
            0
        } else {
            1
        };
        self.cells[entry] += 1;
    }

    /// Counts one checked call of a valid input (a positive control).
    fn count_valid(&mut self, path: &str) {
        self.count(path);
        self.cells[3] += 1;
    }

    /// One call that must fail with exactly `expected`.
    fn err<T: std::fmt::Debug, E: std::fmt::Debug + std::fmt::Display + PartialEq>(
        &mut self,
        path: &str,
        got: Result<T, E>,
        expected: &E,
    ) {
        self.count(path);
        self.c.err(path, got, expected);
    }

    /// One call whose result must be `expected`: an error, or (for valid inputs) a tensor.
    fn outcome(
        &mut self,
        path: &str,
        got: scatterjit::Result<Tensor>,
        expected: &Result<Tensor, Error>,
    ) {
        match expected {
            Ok(_) => self.count_valid(path),
            Err(_) => self.count(path),
        }
        match (expected, got) {
            (Err(e), got) => self.c.err(path, got, e),
            (Ok(want), Ok(t)) if t == *want => {}
            (Ok(want), got) => self.c.fail(path, format!("expected {want:?}, got {got:?}")),
        }
    }

    /// One call that writes caller memory: on error, `after` must equal `before` byte for
    /// byte; on success, `result()` must be the expected tensor.
    fn written(
        &mut self,
        path: &str,
        got: scatterjit::Result<()>,
        (before, after): (&[u8], &[u8]),
        result: impl FnOnce() -> Tensor,
        expected: &Result<Tensor, Error>,
    ) {
        match expected {
            Ok(_) => self.count_valid(path),
            Err(_) => self.count(path),
        }
        match expected {
            Err(e) => {
                self.c.err(path, got, e);
                self.c.unchanged(path, before, after);
            }
            Ok(want) => match got {
                Ok(()) => {
                    let t = result();
                    if t != *want {
                        self.c.fail(path, format!("expected {want:?}, got {t:?}"));
                    }
                }
                Err(e) => self
                    .c
                    .fail(path, format!("expected Ok, got {e:?} (\"{e}\")")),
            },
        }
    }

    /// One call that must fail with an error `expect` accepts.
    fn refused<T: std::fmt::Debug>(
        &mut self,
        path: &str,
        got: Result<T, IrError>,
        expect: impl Fn(&IrError) -> bool,
        what: &str,
    ) {
        self.count(path);
        match got {
            Err(e) if expect(&e) => {}
            got => self.c.fail(path, format!("expected {what}, got {got:?}")),
        }
    }
}

/// One case of a table: a closure that checks some cells.
struct Row {
    name: String,
    cells: Cell<Cells>,
    check: Box<dyn Fn(&mut Tally)>,
}

impl Case for Row {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&self, c: &mut Checker) {
        let mut t = Tally { c, cells: [0; 4] };
        (self.check)(&mut t);
        self.cells.set(t.cells);
    }
}

fn row(name: impl Into<String>, check: impl Fn(&mut Tally) + 'static) -> Row {
    Row {
        name: name.into(),
        cells: Cell::new([0; 4]),
        check: Box::new(check),
    }
}

/// Runs a table (every case, all failures reported at once) and prints its size.
fn run_matrix(table: &str, rows: Vec<Row>) {
    run_table(table, &rows);
    let mut cells = [0; 4];
    for r in &rows {
        for (total, n) in cells.iter_mut().zip(r.cells.get()) {
            *total += n;
        }
    }
    println!(
        "bad-input matrix, {table}: {} cases, {} cells (free functions {}, kernel API {}, CLI {}; valid inputs {})",
        rows.len(),
        cells[..3].iter().sum::<usize>(),
        cells[0],
        cells[1],
        cells[2],
        cells[3]
    );
}

// ---------------------------------------------------------------------------------------
// Columns

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Column {
    /// ONNX ScatterElements (opsets 11-18) with this reduction.
    Onnx(Reduction),
    /// ONNX's legacy Scatter: ScatterElements with reduction none.
    LegacyScatter,
    /// OpenVINO ScatterElementsUpdate-12 with this reduction and `use_init_val`.
    OpenVino(Reduction, bool),
    /// PyTorch `scatter_(dim, index, value)`: a scalar broadcast to the index's shape.
    TorchScalar,
    /// PyTorch `scatter_reduce_(dim, index, src, "sum", include_self=False)`, `src` larger.
    TorchLargerSrc,
    GatherElements,
    Gather,
}

const COLUMNS: [Column; 13] = [
    Column::Onnx(Reduction::None),
    Column::Onnx(Reduction::Add),
    Column::Onnx(Reduction::Mul),
    Column::Onnx(Reduction::Max),
    Column::Onnx(Reduction::Min),
    Column::LegacyScatter,
    Column::OpenVino(Reduction::Mean, true),
    Column::OpenVino(Reduction::Mean, false),
    Column::OpenVino(Reduction::Add, false),
    Column::TorchScalar,
    Column::TorchLargerSrc,
    Column::GatherElements,
    Column::Gather,
];

impl Column {
    fn name(self) -> String {
        match self {
            Column::Onnx(r) => format!("onnx scatter_elements {r}"),
            Column::LegacyScatter => "onnx scatter (legacy)".into(),
            Column::OpenVino(r, init) => format!(
                "openvino scatter_elements_update {}{}",
                openvino_name(r),
                if init { "" } else { " no-init" }
            ),
            Column::TorchScalar => "torch scatter_ scalar".into(),
            Column::TorchLargerSrc => "torch scatter_reduce_ sum larger src".into(),
            Column::GatherElements => "gather_elements".into(),
            Column::Gather => "gather".into(),
        }
    }

    /// The reduction and `use_init_val` of a scatter column.
    fn reduction(self) -> Option<(Reduction, bool)> {
        match self {
            Column::Onnx(r) => Some((r, true)),
            Column::LegacyScatter | Column::TorchScalar => Some((Reduction::None, true)),
            Column::OpenVino(r, init) => Some((r, init)),
            Column::TorchLargerSrc => Some((Reduction::Add, false)),
            Column::GatherElements | Column::Gather => None,
        }
    }

    fn op(self, axis: i64) -> Op {
        match (self, self.reduction()) {
            (Column::GatherElements, _) => Op::GatherElements { axis },
            (Column::Gather, _) => Op::Gather { axis },
            (_, Some((reduction, use_init_val))) => Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            },
            (_, None) => unreachable!("every other column scatters"),
        }
    }

    fn kind(self) -> OpKind {
        self.op(0).kind()
    }

    fn scatters(self) -> bool {
        self.reduction().is_some()
    }

    /// The command line for this column, without files (`None`: it has no CLI form).
    fn cli(self, axis: i64) -> Option<Vec<String>> {
        let (command, reduction) = match self {
            Column::TorchScalar => return None,
            Column::GatherElements => ("gather-elements", None),
            Column::Gather => ("gather", None),
            Column::LegacyScatter => ("scatter", None),
            Column::Onnx(r) => ("scatter-elements", Some((r.to_string(), true))),
            Column::OpenVino(r, init) => ("scatter-elements", Some((openvino_name(r), init))),
            Column::TorchLargerSrc => ("scatter-elements", Some(("sum".to_string(), false))),
        };
        let mut args = vec!["run".into(), command.into(), format!("--axis={axis}")];
        if let Some((name, init)) = reduction {
            args.extend([
                "--reduction".into(),
                name,
                "--use-init-val".into(),
                init.to_string(),
            ]);
        }
        Some(args)
    }

    /// The `src` this column passes with indices of `shape`.
    fn src(self, dtype: DType, shape: &[usize]) -> Option<Src> {
        match self {
            Column::GatherElements | Column::Gather => None,
            Column::TorchScalar => Some(Src::scalar(dtype, shape)),
            Column::TorchLargerSrc => {
                let larger: Vec<usize> = shape.iter().map(|d| d + 2).collect();
                Some(Src::Tensor(filled(dtype, &larger, 7)))
            }
            _ => Some(Src::Tensor(filled(dtype, shape, 7))),
        }
    }
}

/// OpenVINO's spelling of a reduction.
fn openvino_name(r: Reduction) -> String {
    match r {
        Reduction::Add => "sum".into(),
        Reduction::Mul => "prod".into(),
        r => r.to_string(),
    }
}

/// Updates: an owned tensor, or one element broadcast to a shape (all strides zero).
#[derive(Clone, Debug)]
enum Src {
    Tensor(Tensor),
    Scalar {
        dtype: DType,
        shape: Vec<usize>,
        element: Vec<u8>,
    },
}

impl Src {
    fn scalar(dtype: DType, shape: &[usize]) -> Src {
        Src::Scalar {
            dtype,
            shape: shape.to_vec(),
            element: filled(dtype, &[], 7).into_bytes(),
        }
    }

    fn view(&self) -> TensorView<'_> {
        match self {
            Src::Tensor(t) => t.into(),
            Src::Scalar {
                dtype,
                shape,
                element,
            } => TensorView::new(*dtype, shape, &vec![0; shape.len()], 0, element)
                .expect("a broadcast view of one element"),
        }
    }

    fn tensor(&self) -> Option<&Tensor> {
        match self {
            Src::Tensor(t) => Some(t),
            Src::Scalar { .. } => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Problems: one input, every entry point

const INDEX_DTYPES: [DType; 8] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// An integer tensor of `dtype` from exact values (each must fit the type).
fn ints(dtype: DType, shape: &[usize], values: &[i128]) -> Tensor {
    let size = dtype.size();
    let bytes = values
        .iter()
        .flat_map(|&v| {
            let (lo, hi) = range_of(dtype);
            assert!((lo..=hi).contains(&v), "{v} does not fit {dtype}");
            v.to_le_bytes()[..size].to_vec()
        })
        .collect();
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("a valid index tensor")
}

/// The smallest and largest value of an integer dtype.
fn range_of(dtype: DType) -> (i128, i128) {
    let bits = 8 * dtype.size() as u32;
    if dtype.is_signed_integer() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

/// What the CLI must do with a problem.
#[derive(Clone, Debug)]
enum CliForm {
    /// Print the library's message (or write the result) exactly as the other paths do.
    Same,
    /// Refuse the arguments (exit status 2) with a message containing this.
    Usage(&'static str),
}

/// One input to every entry point. `expect` is the exact error, or `Ok` for a valid input
/// whose result must equal the reference interpreter's.
#[derive(Clone)]
struct Problem {
    column: Column,
    axis: i64,
    data: Tensor,
    indices: Tensor,
    src: Option<Src>,
    expect: Result<(), IrError>,
    cli: CliForm,
}

impl Problem {
    /// The column's op on `data` and `indices` along `axis`, with the column's src for
    /// indices of that shape; valid until [`Problem::fails`] says otherwise.
    fn new(column: Column, axis: i64, data: Tensor, indices: Tensor) -> Problem {
        let src = column.src(data.dtype(), indices.shape());
        Problem {
            column,
            axis,
            data,
            indices,
            src,
            expect: Ok(()),
            cli: CliForm::Same,
        }
    }

    fn fails(self, e: IrError) -> Problem {
        Problem {
            expect: Err(e),
            ..self
        }
    }

    fn src(self, src: Option<Src>) -> Problem {
        Problem { src, ..self }
    }

    fn cli(self, cli: CliForm) -> Problem {
        Problem { cli, ..self }
    }

    fn into_row(self, name: String) -> Row {
        row(format!("{}: {name}", self.column.name()), move |t| {
            self.check(t)
        })
    }

    fn check(&self, t: &mut Tally) {
        let op = self.column.op(self.axis);
        let dense_src = self.src.as_ref().map(|s| s.view().to_tensor());
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

        self.check_kernel(t, &op, &expected);
        if let Some(args) = self.column.cli(self.axis) {
            self.check_cli(t, &self.cli, args, &expected);
        }
    }

    /// `KernelKey` (when it refuses), else `Kernel::run`, `run_into` and `scatter_in_place`.
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
        t.outcome("Kernel::run", kernel.run(&dv, &iv, uv.as_ref()), expected);

        let out_shape = match expected {
            Ok(result) => result.shape().to_vec(),
            Err(_) => op
                .validate(dv.meta(), iv.meta(), uv.as_ref().map(TensorView::meta))
                .map_or_else(|_| self.data.shape().to_vec(), |v| v.out_shape),
        };
        let before = sentinel(self.data.dtype(), &out_shape);
        let mut out = before.clone();
        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
        let bytes = (before.bytes(), out.bytes());
        t.written("Kernel::run_into", got, bytes, || out.clone(), expected);
        // A padded copy has (d + 1) elements per dim d: none for [usize::MAX, 0].
        let padded = out_shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d.checked_add(1)?));
        if padded.is_some_and(|n| n <= 1 << 16) {
            let mut strided = Strided::of(&before, Layout::PaddedReversed);
            let strided_before = strided.bytes.clone();
            let got = kernel.run_into(&mut strided.view_mut(), &dv, &iv, uv.as_ref());
            let bytes = (&strided_before[..], &strided.bytes[..]);
            let result = || strided.view().to_tensor();
            t.written("Kernel::run_into (strided)", got, bytes, result, expected);
        }

        let Some(uv) = uv.filter(|_| key.kind() == OpKind::ScatterElements) else {
            return;
        };
        let mut target = self.data.clone();
        let got = kernel.scatter_in_place(&mut (&mut target).into(), &iv, &uv);
        let bytes = (self.data.bytes(), target.bytes());
        t.written(
            "Kernel::scatter_in_place",
            got,
            bytes,
            || target.clone(),
            expected,
        );
        let mut strided = Strided::of(&self.data, Layout::PaddedReversed);
        let strided_before = strided.bytes.clone();
        let got = kernel.scatter_in_place(&mut strided.view_mut(), &iv, &uv);
        let bytes = (&strided_before[..], &strided.bytes[..]);
        let result = || strided.view().to_tensor();
        t.written(
            "Kernel::scatter_in_place (strided)",
            got,
            bytes,
            result,
            expected,
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

/// A name no other case of this process uses (for temporary directories).
fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// What a CLI run must do.
enum CliExpect {
    /// Fail with status 1 and exactly this stderr line.
    Line(String),
    /// Fail with status 2 and a line containing this.
    Usage(&'static str),
    /// Succeed silently and write this tensor to OUT.
    Output(Tensor),
}

/// The one `error: ` line of a failed run, or why the run does not look like one.
fn error_line(out: &Output) -> Result<String, String> {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() || out.status.code() == Some(101) || !out.stdout.is_empty() {
        return Err(format!("status {:?}, stderr {err:?}", out.status));
    }
    match err.lines().collect::<Vec<_>>()[..] {
        [line] if line.starts_with("error: ") && err.ends_with('\n') => Ok(line.to_string()),
        _ => Err(format!("expected one error line, got {err:?}")),
    }
}

/// Runs `argv -o OUT` twice, without and with an existing OUT (two cells), and checks the
/// status, the message, OUT, and that no other file appeared.
fn cli_cells(t: &mut Tally, dir: &Dir, argv: &[OsString], want: &CliExpect) {
    let out = dir.path("out.npy");
    let mut full: Vec<&OsStr> = argv.iter().map(OsString::as_os_str).collect();
    full.extend([OsStr::new("-o"), out.as_os_str()]);
    let inputs = dir.entries();
    let old = b"\x93NUMPY an existing OUT, which a failed run must leave alone".to_vec();
    for existing in [false, true] {
        let path = if existing {
            fs::write(&out, &old).expect("write OUT");
            "CLI (existing OUT)"
        } else {
            "CLI"
        };
        match want {
            CliExpect::Output(_) => t.count_valid(path),
            _ => t.count(path),
        }
        let run = run_binary(&full);
        let mut entries = dir.entries();
        entries.retain(|e| e != "out.npy");
        if entries != inputs {
            t.c.fail(path, format!("files changed: {inputs:?} -> {entries:?}"));
        }
        match want {
            CliExpect::Output(result) => {
                if !run.status.success() || !run.stderr.is_empty() || !run.stdout.is_empty() {
                    let err = String::from_utf8_lossy(&run.stderr);
                    t.c.fail(path, format!("status {:?}, stderr {err:?}", run.status));
                } else if read(&out).tensor != *result {
                    t.c.fail(path, format!("OUT holds {:?}", read(&out).tensor));
                }
            }
            CliExpect::Line(_) | CliExpect::Usage(_) => {
                let (status, line_ok) = match want {
                    CliExpect::Line(line) => (1, error_line(&run).map(|l| l == *line)),
                    CliExpect::Usage(part) => (2, error_line(&run).map(|l| l.contains(part))),
                    CliExpect::Output(_) => unreachable!(),
                };
                match line_ok {
                    Ok(true) if run.status.code() == Some(status) => {}
                    _ => t.c.fail(
                        path,
                        format!(
                            "expected status {status} and {}, got {:?}: {:?}",
                            match want {
                                CliExpect::Line(l) => format!("{l:?}"),
                                CliExpect::Usage(p) => format!("a line with {p:?}"),
                                CliExpect::Output(_) => unreachable!(),
                            },
                            run.status.code(),
                            String::from_utf8_lossy(&run.stderr)
                        ),
                    ),
                }
                match (existing, fs::read(&out)) {
                    (false, Ok(_)) => t.c.fail(path, "OUT was created".into()),
                    (true, Ok(bytes)) => t.c.unchanged(path, &old, &bytes),
                    (true, Err(e)) => t.c.fail(path, format!("OUT is gone: {e}")),
                    (false, Err(_)) => {}
                }
            }
        }
        let _ = fs::remove_file(&out);
    }
}

/// Rows of `problem(column)` for every column where it applies.
fn per_column(problem: impl Fn(Column) -> Vec<(String, Problem)>) -> Vec<Row> {
    COLUMNS
        .iter()
        .flat_map(|&column| problem(column))
        .map(|(name, p)| p.into_row(name))
        .collect()
}

fn f32s(shape: &[usize]) -> Tensor {
    filled(DType::F32, shape, 1)
}

fn out_of_bounds(
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

// ---------------------------------------------------------------------------------------
// Rows: index values

/// Data [3, 5], indices [2, 4] along axis 1 (s = 5) with `bad` at [0, 3], a second bad
/// index after it (the first one in row-major order must be named) and valid negative and
/// positive ones before it.
fn bad_index(column: Column, axis: i64, dtype: DType, bad: i128) -> Problem {
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
            INDEX_DTYPES
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
            INDEX_DTYPES
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
            for dtype in INDEX_DTYPES {
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
            INDEX_DTYPES
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

// ---------------------------------------------------------------------------------------
// Rows: ranks, shapes, axes

fn zero_indices(dtype: DType, shape: &[usize]) -> Tensor {
    Tensor::zeros(dtype, shape.to_vec()).expect("a small index tensor")
}

fn rank_error(column: Column, tensor: TensorRole, rank: usize, expected: &str) -> IrError {
    IrError::Rank {
        op: column.kind(),
        tensor,
        rank,
        expected: expected.to_string(),
    }
}

#[test]
fn matrix_ranks_that_differ() {
    use TensorRole::{Data, Indices, Updates};
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
                    problem(0, &[], scalar_index).fails(rank_error(column, Data, 0, &data_rank)),
                ),
                (
                    format!("data rank {}", max + 1),
                    problem(0, &ones(max + 1), &deep_index).fails(rank_error(
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
                    problem(0, &[3, 5], &ones(max + 1)).fails(rank_error(
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
                        .fails(rank_error(column, Updates, 2, "no updates tensor"))
                        .cli(CliForm::Usage("unexpected argument")),
                ));
            } else {
                cases.extend([
                    (
                        "indices rank 1 < 2".to_string(),
                        problem(1, &[3, 5], &[4]).fails(rank_error(column, Indices, 1, of_data)),
                    ),
                    (
                        "indices rank 3 > 2".to_string(),
                        problem(1, &[3, 5], &[2, 4, 1])
                            .fails(rank_error(column, Indices, 3, of_data)),
                    ),
                ]);
            }
            if column.scatters() {
                let src = column.src(DType::F32, &[2, 4, 1]);
                cases.push((
                    "updates rank 3 > 2".into(),
                    problem(1, &[3, 5], &[2, 4])
                        .src(src)
                        .fails(rank_error(column, Updates, 3, of_data)),
                ));
                // PyTorch's scatter_ always has a value or src.
                if column != Column::TorchScalar {
                    cases.push((
                        "no updates".into(),
                        problem(1, &[3, 5], &[2, 4])
                            .src(None)
                            .fails(rank_error(column, Updates, 0, "an updates tensor"))
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
                        .fails(rank_error(column, Updates, 2, "no updates tensor"))
                        .cli(CliForm::Usage("unexpected argument")),
                ));
            }
            cases
        }),
    );
}

fn shape_error(
    column: Column,
    (tensor, other): (TensorRole, TensorRole),
    (dim, size): (usize, usize),
    relation: &'static str,
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
    use TensorRole::{Data, Indices};
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
                    problem(1, &[3, 5], &[4, 2]).fails(shape_error(
                        column,
                        (Indices, Data),
                        (0, 4),
                        "<=",
                        3,
                    )),
                ),
                (
                    "indices [2, 6] on data [3, 5], axis 0".into(),
                    problem(0, &[3, 5], &[2, 6]).fails(shape_error(
                        column,
                        (Indices, Data),
                        (1, 6),
                        "<=",
                        5,
                    )),
                ),
                (
                    "indices [1, 1] on data [3, 0], axis 0".into(),
                    problem(0, &[3, 0], &[1, 1]).fails(shape_error(
                        column,
                        (Indices, Data),
                        (1, 1),
                        "<=",
                        0,
                    )),
                ),
            ]
        }),
    );
}

#[test]
fn matrix_updates_smaller_than_indices() {
    use TensorRole::{Indices, Updates};
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
                    p.src(Some(smaller(&shape))).fails(shape_error(
                        column,
                        (Updates, Indices),
                        at,
                        ">=",
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

// ---------------------------------------------------------------------------------------
// Rows: dtypes

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
                        tensor: TensorRole::Updates,
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
                        let expected = Err(Error::Invalid(IrError::InvalidKey {
                            key: key.to_string(),
                            reason: format!("the operands need kernel {need}"),
                        }));
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

// ---------------------------------------------------------------------------------------
// Rows: zero-size dims

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

// ---------------------------------------------------------------------------------------
// Rows: shape products that overflow, buffers too short

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
fn cli_bad_file(
    t: &mut Tally,
    column: Column,
    role: TensorRole,
    bad: &[u8],
    kind: fn(&npy::NpyErrorKind) -> bool,
) {
    let Some(args) = column.cli(1) else {
        return;
    };
    let dir = Dir::new(&unique("matrix-file"));
    let mut argv: Vec<OsString> = args.into_iter().map(OsString::from).collect();
    let mut roles = vec![TensorRole::Data, TensorRole::Indices];
    if column.scatters() {
        roles.push(TensorRole::Updates);
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
                TensorRole::Data => dir.npy(&name, &f32s(&[3, 5])),
                TensorRole::Indices => dir.npy(&name, &zero_indices(DType::I64, &[2, 4])),
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
fn overflow_row(column: Column, role: TensorRole, dtype: DType, shape: Vec<usize>) -> Row {
    let name = format!("{}: {role} {dtype} {shape:?}", column.name());
    row(name, move |t| {
        let expected_ctor = IrError::ShapeOverflow {
            shape: shape.clone(),
        };
        if !(role == TensorRole::Updates && column == Column::TorchScalar) {
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
            TensorRole::Data => dv = huge,
            TensorRole::Indices => iv = huge,
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
            (column.reduction(), &uv, role == TensorRole::Data)
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
    use TensorRole::{Data, Indices, Updates};
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
            tensor: TensorRole::Output,
            shape: vec![usize::MAX, 2],
        },
    );
    rows.push(p.into_row("output [usize::MAX, 2] of data [usize::MAX, 0]".into()));
    run_matrix("shape products that overflow", rows);
}

/// Every way to hand over `role`'s buffer one element short (owned tensor, contiguous view,
/// strided views reaching past the end or before the start, a truncated `.npy` payload).
fn short_buffer_row(column: Column, role: TensorRole) -> Row {
    let (dtype, shape): (DType, Vec<usize>) = match role {
        TensorRole::Data | TensorRole::Output => (DType::F32, vec![3, 5]),
        TensorRole::Indices => (DType::I64, vec![2, 4]),
        TensorRole::Updates => (
            DType::F32,
            column
                .src(DType::F32, &[2, 4])
                .map_or(vec![2, 4], |s| s.view().shape().to_vec()),
        ),
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
            if role == TensorRole::Output {
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
            tensor: TensorRole::Output,
            ..
        }
    )
}

#[test]
fn matrix_buffers_too_short() {
    use TensorRole::{Data, Indices, Output, Updates};
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

// ---------------------------------------------------------------------------------------
// Rows: outputs aliasing inputs (CLI; the library refuses them at compile time)

#[test]
fn matrix_cli_output_names_an_input() {
    let mut rows = Vec::new();
    for column in COLUMNS {
        let Some(args) = column.cli(1) else {
            continue;
        };
        let mut roles = vec![TensorRole::Data, TensorRole::Indices];
        if column.scatters() {
            roles.push(TensorRole::Updates);
        }
        for role in roles {
            for valid in [false, true] {
                let args = args.clone();
                let what = if valid { "valid" } else { "index 5" };
                let name = format!("{}: -o {role}.npy, {what}", column.name());
                rows.push(row(name, move |t| {
                    let p = if valid {
                        let indices = ints(DType::I64, &[2, 4], &[0, 4, -5, -1, 3, -3, 1, 2]);
                        Problem::new(column, 1, f32s(&[3, 5]), indices)
                    } else {
                        bad_index(column, 1, DType::I64, 5)
                    };
                    let op = column.op(1);
                    let src = p.src.as_ref().and_then(Src::tensor);
                    let expected = interp::run(&op, &p.data, &p.indices, src);
                    let dir = Dir::new(&unique("matrix-alias"));
                    let mut paths = vec![
                        (TensorRole::Data, dir.npy("data.npy", &p.data)),
                        (TensorRole::Indices, dir.npy("indices.npy", &p.indices)),
                    ];
                    if let Some(src) = src {
                        paths.push((TensorRole::Updates, dir.npy("updates.npy", src)));
                    }
                    let before: Vec<Vec<u8>> = paths
                        .iter()
                        .map(|(_, p)| fs::read(p).expect("an input"))
                        .collect();
                    let out = &paths.iter().find(|(r, _)| *r == role).expect("a role").1;
                    let mut argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
                    argv.extend(paths.iter().map(|(_, p)| p.as_os_str()));
                    argv.extend([OsStr::new("-o"), out.as_os_str()]);
                    if valid {
                        t.count_valid("CLI");
                    } else {
                        t.count("CLI");
                    }
                    let run = run_binary(&argv);
                    let entries = dir.entries();
                    if entries.len() != paths.len() {
                        t.c.fail("CLI", format!("files: {entries:?}"));
                    }
                    for ((r, path), before) in paths.iter().zip(&before) {
                        let after = fs::read(path).expect("an input");
                        match (&expected, *r == role) {
                            (Ok(result), true) => {
                                if !run.status.success() || read(path).tensor != *result {
                                    let err = String::from_utf8_lossy(&run.stderr);
                                    t.c.fail("CLI", format!("OUT is not the result: {err}"));
                                }
                            }
                            _ => t.c.unchanged(&format!("CLI ({r}.npy)"), before, &after),
                        }
                    }
                    if let Err(e) = &expected {
                        match error_line(&run) {
                            Ok(line) if line == format!("error: {}", Error::Invalid(e.clone())) => {
                            }
                            got => {
                                t.c.fail("CLI", format!("expected the index error, got {got:?}"))
                            }
                        }
                    }
                }));
            }
        }
    }
    run_matrix("CLI output naming an input", rows);
}
