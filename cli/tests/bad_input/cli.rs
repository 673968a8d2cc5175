//! The command-line tool as one more entry point: a problem's cells on `.npy` files, and
//! OUT naming one of the inputs.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use scatterjit::ir::{interp, DType, Operand, Tensor};
use scatterjit::Error;

use super::columns::{Src, COLUMNS};
use super::index::bad_index;
use super::inputs::{f32s, ints};
use super::problem::Problem;
use super::{row, run_matrix, Tally};
use crate::cli::{read, run_binary, Dir};

/// A name no other case of this process uses (for temporary directories).
pub(crate) fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// What a CLI run must do.
pub(crate) enum CliExpect {
    /// Fail with status 1 and exactly this stderr line.
    Line(String),
    /// Fail with status 2 and a line containing this.
    Usage(&'static str),
    /// Succeed silently and write this tensor to OUT.
    Output(Tensor),
}

/// The one `error: ` line of a failed run, or why the run does not look like one.
pub(crate) fn error_line(out: &Output) -> Result<String, String> {
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
pub(crate) fn cli_cells(t: &mut Tally, dir: &Dir, argv: &[OsString], want: &CliExpect) {
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

// ---------------------------------------------------------------------------------------
// Rows: outputs aliasing inputs (CLI; the library refuses them at compile time)

#[test]
fn matrix_cli_output_names_an_input() {
    let mut rows = Vec::new();
    for column in COLUMNS {
        let Some(args) = column.cli(1) else {
            continue;
        };
        let mut roles = vec![Operand::Data, Operand::Indices];
        if column.scatters() {
            roles.push(Operand::Updates);
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
                        (Operand::Data, dir.npy("data.npy", &p.data)),
                        (Operand::Indices, dir.npy("indices.npy", &p.indices)),
                    ];
                    if let Some(src) = src {
                        paths.push((Operand::Updates, dir.npy("updates.npy", src)));
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
