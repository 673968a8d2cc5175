//! The bad-input suite: every kind of bad input, one table per kind, each case run through
//! every entry point, exact error values, and no write on error (SPEC.md: "Index
//! normalization and bounds", "Types", "Empty tensors, errors and data safety").
//!
//! Most cases are a [`problem::Problem`]: one op's inputs, the exact error (or, for the
//! positive controls beside them, a valid result) and the op variant as a column:
//! ONNX ScatterElements with `none`, `add`, `mul`, `max`, `min`; the legacy ONNX Scatter (the
//! CLI's `scatter`); OpenVINO ScatterElementsUpdate-12 with any reduction and
//! `use_init_val`; PyTorch `scatter_(dim, index, value)` with a scalar value (a broadcast
//! view) and `scatter_reduce_(..., "sum", include_self=False)` with `src` larger than
//! `index`; GatherElements; Gather. A problem is checked, one cell per call, through:
//! - `Op::validate` and the reference interpreter (which must report the same error);
//! - free functions: `scatterjit::run`, the op's own function (`scatter_elements`,
//!   `gather_elements`, `gather`) on owned tensors, and `scatterjit::scatter_` in place;
//! - low level: the `KernelKey` constructor where it already refuses the input; otherwise
//!   `KernelCache::get`, then `Kernel::run`, `Kernel::run_into` into a contiguous and into a
//!   strided output, and `Kernel::scatter_in_place` on a contiguous and on a strided tensor,
//!   each with contiguous inputs, strided data and updates, and column-major indices (an
//!   out-of-bounds index must be the first in row-major order whatever the loop order);
//! - the command-line tool on `.npy` files, once with no OUT file and once with one.
//!
//! An error cell asserts the exact error value (its message names the op and the offending
//! value and position; some cases pin the message word for word), that a `run_into` output
//! (filled with a sentinel pattern) and in-place data are byte-identical afterwards, and for
//! the CLI: exit status 1 (2 for usage errors), exactly one stderr line `error: <the
//! library's message>`, nothing on stdout, OUT not created or left byte-identical, and no
//! other file created. Valid cells assert the interpreter's result (and the result a case
//! pins). Inputs too large to build are checked through `Op::validate` and the key alone.
//! The other tables are closures over the same checker: constructors of views and tensors,
//! huge broadcast views, kernels given operands they were not compiled for, buffers too
//! short, and the CLI's OUT naming one of its inputs.
//!
//! Each table runs every case to the end and reports all failures at once, each naming the
//! case and the call path; a panic inside the library is reported as a failure of its case.
//! Each table prints its number of cases and cells.
//!
//! Aliasing: a `TensorViewMut` output never aliases a `TensorView` input in safe code (the
//! borrow checker refuses it; see the `compile_fail` examples on `TensorViewMut`), and
//! views built over overlapping raw buffers are refused at run time (unit-tested in
//! `src/tensor/`). For the CLI, OUT naming an input is sound (inputs are read whole before
//! the atomic rename), so those cells assert the input is untouched on error and replaced
//! by the result on success.

mod cli;
mod columns;
mod dtypes;
mod index;
pub(crate) mod inputs;
mod operands;
mod problem;
mod shapes;
mod sizes;
mod views;

use std::cell::Cell;
use std::fmt::{Debug, Display};
use std::panic::{self, AssertUnwindSafe};

use scatterjit::ir::{Error as IrError, Operand, Tensor};
use scatterjit::Error;

// ---------------------------------------------------------------------------------------
// Harness

/// The failures of one case, each prefixed with the call path that failed.
#[derive(Default)]
pub(crate) struct Checker {
    failures: Vec<String>,
}

impl Checker {
    pub(crate) fn fail(&mut self, path: &str, message: String) {
        self.failures.push(format!("{path}: {message}"));
    }

    /// `got` must be exactly `Err(expected)`.
    pub(crate) fn err<T: Debug, E: Debug + Display + PartialEq>(
        &mut self,
        path: &str,
        got: Result<T, E>,
        expected: &E,
    ) {
        match got {
            Err(e) if e == *expected => {}
            Err(e) => self.fail(path, format!("expected {expected:?}, got {e:?} (\"{e}\")")),
            Ok(v) => self.fail(path, format!("expected {expected:?}, got Ok({v:?})")),
        }
    }

    /// `got` must be an error that `expect` accepts.
    pub(crate) fn expect<T: Debug>(
        &mut self,
        path: &str,
        got: Result<T, IrError>,
        expect: &Expect,
    ) {
        match (expect, got) {
            (Expect::Exact(e), got) => self.err(path, got, e),
            (Expect::InvalidView(role), Err(IrError::InvalidView { tensor, .. }))
                if tensor == *role => {}
            (Expect::InvalidView(role), got) => self.fail(
                path,
                format!("expected InvalidView {{ tensor: {role:?}, .. }}, got {got:?}"),
            ),
        }
    }

    /// A buffer must be byte-identical to what it held before a failed call.
    pub(crate) fn unchanged(&mut self, path: &str, before: &[u8], after: &[u8]) {
        if before != after {
            let first = before.iter().zip(after).position(|(a, b)| a != b);
            self.fail(
                path,
                format!("buffer written on error (first changed byte: {first:?})"),
            );
        }
    }
}

/// One row of a table.
pub(crate) trait Case {
    fn name(&self) -> String;
    fn check(&self, c: &mut Checker);
}

/// Runs every case (catching panics) and fails with the full list of failures.
pub(crate) fn run_table<C: Case>(table: &str, cases: &[C]) {
    assert!(!cases.is_empty(), "{table}: empty table");
    let mut failures = Vec::new();
    for case in cases {
        let mut c = Checker::default();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| case.check(&mut c)));
        if let Err(payload) = outcome {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            c.fail("panicked", message);
        }
        let name = case.name();
        failures.extend(c.failures.into_iter().map(|f| format!("[{name}] {f}")));
    }
    const SHOWN: usize = 60;
    let more = failures.len().saturating_sub(SHOWN);
    assert!(
        failures.is_empty(),
        "{table}: {} failure(s) in {} case(s):\n{}{}",
        failures.len(),
        cases.len(),
        failures[..failures.len().min(SHOWN)].join("\n"),
        if more > 0 {
            format!("\n... and {more} more")
        } else {
            String::new()
        }
    );
}

/// A case written as a closure over the checker (its calls are not counted as cells).
pub(crate) fn custom(name: impl Into<String>, check: impl Fn(&mut Checker) + 'static) -> Row {
    row(name, move |t| check(t.c))
}

/// What a constructor must fail with.
pub(crate) enum Expect {
    /// Exactly this error.
    Exact(IrError),
    /// `InvalidView` of this tensor, whatever the reason text.
    InvalidView(Operand),
}

// ---------------------------------------------------------------------------------------
// Cells

/// Cells by entry point: free functions (and the owned tensors they take), the kernel API
/// (and the views it takes), the CLI; then how many of them are valid inputs.
pub(crate) type Cells = [usize; 4];

/// A checker that counts the calls it checks.
pub(crate) struct Tally<'a> {
    pub(crate) c: &'a mut Checker,
    cells: Cells,
}

impl Tally<'_> {
    /// Counts one checked call through the entry point `path` names.
    pub(crate) fn count(&mut self, path: &str) {
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
    pub(crate) fn count_valid(&mut self, path: &str) {
        self.count(path);
        self.cells[3] += 1;
    }

    /// One call that must fail with exactly `expected`.
    pub(crate) fn err<T: std::fmt::Debug, E: std::fmt::Debug + std::fmt::Display + PartialEq>(
        &mut self,
        path: &str,
        got: Result<T, E>,
        expected: &E,
    ) {
        self.count(path);
        self.c.err(path, got, expected);
    }

    /// One call whose result must be `expected`: an error, or (for valid inputs) a tensor.
    pub(crate) fn outcome(
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
    pub(crate) fn written(
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
    pub(crate) fn refused<T: std::fmt::Debug>(
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
pub(crate) struct Row {
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

pub(crate) fn row(name: impl Into<String>, check: impl Fn(&mut Tally) + 'static) -> Row {
    Row {
        name: name.into(),
        cells: Cell::new([0; 4]),
        check: Box::new(check),
    }
}

/// Runs a table (every case, all failures reported at once) and prints its size.
pub(crate) fn run_matrix(table: &str, rows: Vec<Row>) {
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
