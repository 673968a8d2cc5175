//! What the C tests share: the system C compiler, a scratch directory, and the parser and
//! checker of the C programs' output (the format of `tests/c/print.h`), which compares
//! every case with the reference interpreter.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use scatterjit::ir::{interp, Error as IrError};
use scatterjit::{DType, Error, KernelKey, Op, Tensor};
use scatterjit_testkit::values::{self, Sample};

/// The repository root (where `include/` and `tests/c/` are): this crate's directory or,
/// for the command-line tool's tests, which share this harness, its parent.
pub fn root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("include").is_dir())
        .unwrap_or(manifest)
}

/// Asserts that README.md shows `tests/c/<name>` verbatim in a C code block.
pub fn assert_readme_shows(name: &str) {
    let example = std::fs::read_to_string(root().join("tests/c").join(name)).expect("example");
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    assert!(
        readme.contains(&format!("```c\n{example}```")),
        "README.md must show tests/c/{name} verbatim"
    );
}

/// A fresh directory under cargo's temporary directory for integration tests.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("c")
        .join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir
}

/// Runs `command`, panicking with its output unless it succeeds; returns its stdout.
pub fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Compiles and links C `sources` with the system compiler (`$CC`, else `cc`) into
/// `binary`. These tests need a C compiler: its absence is a failure, not a skip.
pub fn compile(sources: &[&Path], includes: &[&Path], link: &[&Path], binary: &Path) {
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    compile_with(&cc, sources, includes, link, binary);
}

/// [`compile`] with the C compiler `cc` (a cross compiler, say).
pub fn compile_with(
    cc: &OsStr,
    sources: &[&Path],
    includes: &[&Path],
    link: &[&Path],
    binary: &Path,
) {
    let mut command = Command::new(cc);
    command.args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"]);
    command.arg(binary);
    for include in includes {
        command.arg("-I").arg(include);
    }
    command.args(sources).args(link);
    if let Err(e) = Command::new(cc).arg("--version").output() {
        panic!("the C tests need a C compiler: cannot run {cc:?} ({e}); install gcc or set CC");
    }
    run(&mut command);
}

/// One case a C program printed: its tensors by label, the status and the bad index.
#[derive(Debug, Default)]
pub struct Case {
    pub name: String,
    pub tensors: BTreeMap<String, Tensor>,
    pub status: Option<i32>,
    pub bad_index: Option<Vec<usize>>,
}

/// The `case` blocks and the `misuse` lines (`what status...`) of a C program's output.
pub fn parse(output: &str) -> (Vec<Case>, Vec<Vec<String>>) {
    let mut cases: Vec<Case> = Vec::new();
    let mut misuses = Vec::new();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["case", name] => cases.push(Case {
                name: name.to_string(),
                ..Case::default()
            }),
            ["misuse", rest @ ..] => misuses.push(rest.iter().map(|w| w.to_string()).collect()),
            ["status", code, ..] => {
                cases.last_mut().expect("a case").status = Some(code.parse().expect("a status"))
            }
            ["bad_index", dims] => {
                cases.last_mut().expect("a case").bad_index = Some(dims_of(dims))
            }
            [label, dtype, dims, ":", values @ ..] => {
                let dtype: DType = dtype.parse().expect("a dtype");
                let tensor = tensor_of(dtype, &dims_of(dims), values);
                cases
                    .last_mut()
                    .expect("a case")
                    .tensors
                    .insert(label.to_string(), tensor);
            }
            _ => panic!("unexpected line from the C program: {line:?}"),
        }
    }
    (cases, misuses)
}

fn dims_of(text: &str) -> Vec<usize> {
    if text == "-" {
        return Vec::new();
    }
    text.split(',').map(|d| d.parse().expect("a dim")).collect()
}

fn tensor_of(dtype: DType, shape: &[usize], values: &[&str]) -> Tensor {
    // Integers are parsed exactly (an f64 would round i64's extremes), floats as f64.
    let sample = |v: &&str| Sample {
        re: v.parse().expect("a printed number"),
        im: 0.0,
        bits: v.parse::<i128>().map_or(0, |x| x as u64),
    };
    let bytes = values::bytes(dtype, values.iter().map(sample));
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("a printed tensor")
}

/// Checks a case against the reference interpreter: on success `out` is its result; on a
/// bad index the status is the index error's, the position the interpreter's, and `out`
/// is unchanged.
pub fn check(case: &Case, key: &KernelKey) {
    let name = &case.name;
    let get = |label: &str| {
        case.tensors
            .get(label)
            .unwrap_or_else(|| panic!("{name}: no {label}"))
    };
    let expected = interp::run(
        &key.op(),
        get("data"),
        get("indices"),
        case.tensors.get("updates"),
    );
    let status = case.status.unwrap_or_else(|| panic!("{name}: no status"));
    match expected {
        Ok(result) => {
            assert_eq!(status, 0, "{name}: status");
            assert_eq!(get("out"), &result, "{name}: out");
        }
        Err(IrError::IndexOutOfBounds { position, .. }) => {
            assert_eq!(status, 6, "{name}: status");
            assert_eq!(
                case.bad_index.as_ref(),
                Some(&position),
                "{name}: bad index"
            );
            assert_eq!(get("out"), get("before"), "{name}: out must be unchanged");
        }
        Err(e) => panic!(
            "{name}: the interpreter rejects the case: {}",
            Error::from(e)
        ),
    }
}

/// Checks what the README's examples (`aot_example.c`, `capi_example.c`) print against the
/// interpreter: values to the 6 digits `%g` prints, the bad position exactly.
pub fn check_example(output: &str) {
    let f32s = |shape: &[usize], v: &[f32]| Tensor::from_slice(shape, v).unwrap();
    let scattered = interp::run(
        &Op::ScatterElements {
            axis: 1,
            reduction: scatterjit::Reduction::Add,
            use_init_val: true,
        },
        &f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]),
        &Tensor::from_slice(&[1, 2], &[1i64, -4]).unwrap(),
        Some(&f32s(&[1, 2], &[1.1, 2.1])),
    )
    .unwrap();
    let rows = f32s(&[3, 2], &[1.0, 1.2, 2.3, 3.4, 4.5, 5.7]);
    let gather = |picks: &[i64]| {
        interp::run(
            &Op::Gather { axis: 0 },
            &rows,
            &Tensor::from_slice(&[2], picks).unwrap(),
            None,
        )
    };
    let gathered = gather(&[2, 0]).unwrap();
    let Err(IrError::IndexOutOfBounds { position, .. }) = gather(&[2, 3]) else {
        panic!("index 3 is out of bounds for 3 rows")
    };
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), 3, "{output}");
    for (line, label, expected) in [
        (lines[0], "scatter add:", &scattered),
        (lines[1], "gather rows:", &gathered),
    ] {
        let values = line
            .strip_prefix(label)
            .unwrap_or_else(|| panic!("{line:?} starts with {label:?}"));
        let printed: Vec<f32> = values
            .split_whitespace()
            .map(|v| v.parse().expect("a number"))
            .collect();
        let expected = expected.to_vec::<f32>().unwrap();
        assert_eq!(printed.len(), expected.len(), "{line}");
        for (p, e) in printed.iter().zip(&expected) {
            assert!((p - e).abs() <= 1e-5 * e.abs(), "{line}: {p} is not {e}");
        }
    }
    assert_eq!(
        lines[2],
        format!("bad index at position {}: index out of bounds", position[0])
    );
}
