//! The command-line tool driven as a user drives it: `.npy` files in, a `.npy` file out,
//! nothing on stdout, and for every invalid input exactly one `error:` line on stderr with
//! the output file neither created nor modified.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use half::{bf16, f16};
use scatterjit::ir::{Complex128, Complex64, Element};
use scatterjit::{DType, Tensor};
use scatterjit_cli::npy;

/// A fresh directory per test under cargo's temporary directory for integration tests,
/// removed when the test ends.
pub(crate) struct Dir(PathBuf);

impl Dir {
    pub(crate) fn new(test: &str) -> Dir {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("cli")
            .join(format!("{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the test directory");
        Dir(dir)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `tensor` as `name` with its dtype's standard descr.
    pub(crate) fn npy(&self, name: &str, tensor: &Tensor) -> PathBuf {
        self.npy_as(name, tensor, tensor.dtype().npy_descr())
    }

    fn npy_as(&self, name: &str, tensor: &Tensor, descr: &str) -> PathBuf {
        let path = self.path(name);
        npy::write(&path, tensor, descr).expect("write a test input");
        path
    }

    pub(crate) fn raw(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(name);
        fs::write(&path, bytes).expect("write a test input");
        path
    }

    /// Names of the files in the directory, sorted.
    pub(crate) fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .expect("list the test directory")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs the built binary with the given arguments (strings and paths alike).
macro_rules! cli {
    ($($arg:expr),* $(,)?) => {
        run_binary(&[$(OsStr::new($arg)),*])
    };
}

/// Shorthand for argument lists mixing strings and paths.
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        [$(OsStr::new($arg)),*]
    };
}

pub(crate) fn run_binary(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scatterjit"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run the scatterjit binary")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a silent success.
pub(crate) fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        stderr(out)
    );
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.stderr.is_empty(), "stderr: {}", stderr(out));
}

/// Asserts a failure with exactly one `error: ` line on stderr, nothing on stdout, and
/// returns that line.
pub(crate) fn assert_one_error(out: &Output) -> String {
    let err = stderr(out);
    assert!(!out.status.success(), "unexpected success, stderr: {err}");
    assert_ne!(out.status.code(), Some(101), "the tool panicked: {err}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err:?}");
    assert!(err.ends_with('\n'), "{err:?}");
    assert!(lines[0].starts_with("error: "), "{err:?}");
    lines[0].to_string()
}

fn assert_contains(line: &str, parts: &[&str]) {
    for part in parts {
        assert!(line.contains(part), "{line:?} does not mention {part:?}");
    }
}

pub(crate) fn read(path: &Path) -> npy::NpyArray {
    npy::read(path).unwrap_or_else(|e| panic!("{e}"))
}

fn t<T: Element>(shape: &[usize], values: &[T]) -> Tensor {
    Tensor::from_slice(shape, values).expect("a valid test tensor")
}

/// A tensor of `dtype` filled from its byte offsets, valid for every dtype (bool: 0 or 1).
fn filled(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product::<usize>() * dtype.size();
    let bytes = (0..n)
        .map(|i| {
            if dtype == DType::Bool {
                ((i / 2) % 2) as u8
            } else {
                (i * 29 + 3) as u8
            }
        })
        .collect();
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("a valid test tensor")
}

// ---------------------------------------------------------------------------------------------
// Successful runs

#[test]
fn scatter_elements_onnx_example() {
    let dir = Dir::new("scatter_elements_onnx_example");
    let data = dir.npy("data.npy", &t(&[3, 3], &[0.0f32; 9]));
    let indices = dir.npy("indices.npy", &t(&[2, 3], &[1i64, 0, 2, 0, 2, 1]));
    let updates = dir.npy(
        "updates.npy",
        &t(&[2, 3], &[1.0f32, 1.1, 1.2, 2.0, 2.1, 2.2]),
    );
    let out = dir.path("out.npy");
    assert_success(&cli!(
        "run",
        "scatter-elements",
        &data,
        &indices,
        &updates,
        "-o",
        &out
    ));
    let result = read(&out);
    assert_eq!(result.descr, "<f4");
    assert_eq!(
        result.tensor,
        t(&[3, 3], &[2.0f32, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2])
    );

    // ONNX's legacy Scatter is the same op.
    let alias = dir.path("alias.npy");
    assert_success(&cli!(
        "run", "scatter", &data, &indices, &updates, "--output", &alias
    ));
    assert_eq!(fs::read(&alias).unwrap(), fs::read(&out).unwrap());
    assert_eq!(
        dir.entries(),
        [
            "alias.npy",
            "data.npy",
            "indices.npy",
            "out.npy",
            "updates.npy"
        ]
    );
}

#[test]
fn scatter_elements_duplicate_indices_add() {
    let dir = Dir::new("scatter_elements_duplicate_indices_add");
    let data = dir.npy("data.npy", &t(&[1, 5], &[1.0f32, 2.0, 3.0, 4.0, 5.0]));
    let indices = dir.npy("indices.npy", &t(&[1, 2], &[1i64, 1]));
    let updates = dir.npy("updates.npy", &t(&[1, 2], &[1.1f32, 2.1]));
    let out = dir.path("out.npy");
    assert_success(&cli!(
        "run",
        "scatter-elements",
        "--axis",
        "1",
        "--reduction",
        "add",
        &data,
        &indices,
        &updates,
        "-o",
        &out
    ));
    assert_eq!(read(&out).tensor, t(&[1, 5], &[1.0f32, 5.2, 3.0, 4.0, 5.0]));
}

#[test]
fn gather_elements_onnx_example() {
    let dir = Dir::new("gather_elements_onnx_example");
    let data = dir.npy("data.npy", &t(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]));
    let indices = dir.npy("indices.npy", &t(&[2, 2], &[0i64, 0, 1, 0]));
    let out = dir.path("out.npy");
    assert_success(&cli!(
        "run",
        "gather-elements",
        "--axis",
        "1",
        &data,
        &indices,
        "-o",
        &out
    ));
    assert_eq!(read(&out).tensor, t(&[2, 2], &[1.0f32, 1.0, 4.0, 3.0]));
}

#[test]
fn gather_onnx_example() {
    let dir = Dir::new("gather_onnx_example");
    let data = dir.npy("data.npy", &t(&[3, 2], &[1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7]));
    let indices = dir.npy("indices.npy", &t(&[2, 2], &[0i64, 1, 1, 2]));
    let out = dir.path("out.npy");
    assert_success(&cli!("run", "gather", &data, &indices, "-o", &out));
    assert_eq!(
        read(&out).tensor,
        t(&[2, 2, 2], &[1.0f32, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7])
    );
}

/// Gather moves elements bit for bit for every dtype, and the output keeps data's descr.
#[test]
fn gather_every_dtype_keeps_the_descr() {
    let dir = Dir::new("gather_every_dtype_keeps_the_descr");
    let indices = dir.npy("indices.npy", &t(&[3], &[2i32, 0, -1]));
    let mut cases: Vec<(DType, &str)> = DType::ALL
        .iter()
        .filter(|&&d| d != DType::String)
        .map(|&d| (d, d.npy_descr()))
        .collect();
    // Other spellings numpy reads as the same types.
    cases.extend([
        (DType::U8, "<u1"),
        (DType::F32, "=f4"),
        (DType::Bool, "=b1"),
    ]);
    for (dtype, descr) in cases {
        let data = filled(dtype, &[3, 2]);
        let data_path = dir.npy_as("data.npy", &data, descr);
        let out = dir.path("out.npy");
        assert_success(&cli!("run", "gather", &data_path, &indices, "-o", &out));
        let result = read(&out);
        assert_eq!(result.descr, descr, "{dtype}");
        let row = 2 * dtype.size();
        let b = data.bytes();
        let expected = [&b[2 * row..3 * row], &b[..row], &b[2 * row..3 * row]].concat();
        assert_eq!(result.tensor.dtype(), dtype);
        assert_eq!(result.tensor.shape(), [3, 2], "{dtype}");
        assert_eq!(result.tensor.bytes(), &expected[..], "{dtype} ({descr})");
    }
}

/// The dtypes users meet most, with readable values.
#[test]
fn typed_gathers() {
    let dir = Dir::new("typed_gathers");
    let indices = dir.npy("indices.npy", &t(&[2], &[1i64, 0]));
    let check = |name: &str, data: Tensor, descr: &str, expected: Tensor| {
        let data_path = dir.npy_as(&format!("{name}.npy"), &data, descr);
        let out = dir.path(&format!("{name}-out.npy"));
        assert_success(&cli!("run", "gather", &data_path, &indices, "-o", &out));
        let result = read(&out);
        assert_eq!(result.descr, descr, "{name}");
        assert_eq!(result.tensor, expected, "{name}");
    };
    check(
        "f16",
        t(&[2], &[f16::from_f32(1.5), f16::from_f32(-2.25)]),
        "<f2",
        t(&[2], &[f16::from_f32(-2.25), f16::from_f32(1.5)]),
    );
    check(
        "bf16",
        t(&[2], &[bf16::from_f32(3.0), bf16::from_f32(-0.5)]),
        "<V2",
        t(&[2], &[bf16::from_f32(-0.5), bf16::from_f32(3.0)]),
    );
    check(
        "i8",
        t(&[2], &[-128i8, 127]),
        "|i1",
        t(&[2], &[127i8, -128]),
    );
    check(
        "u64",
        t(&[2], &[u64::MAX, 7]),
        "<u8",
        t(&[2], &[7u64, u64::MAX]),
    );
    check(
        "bool",
        t(&[2], &[true, false]),
        "|b1",
        t(&[2], &[false, true]),
    );
    let c64 = |re, im| Complex64 { re, im };
    check(
        "c64",
        t(&[2], &[c64(1.0, -1.0), c64(2.5, 0.5)]),
        "<c8",
        t(&[2], &[c64(2.5, 0.5), c64(1.0, -1.0)]),
    );
    let c128 = |re, im| Complex128 { re, im };
    check(
        "c128",
        t(&[2], &[c128(1e300, -1.0), c128(0.0, 2.0)]),
        "<c16",
        t(&[2], &[c128(0.0, 2.0), c128(1e300, -1.0)]),
    );
}

#[test]
fn bf16_scatter_keeps_v2() {
    let dir = Dir::new("bf16_scatter_keeps_v2");
    let b = bf16::from_f32;
    let data = dir.npy_as("data.npy", &t(&[3], &[b(1.0), b(2.0), b(3.0)]), "<V2");
    let indices = dir.npy("indices.npy", &t(&[2], &[2i64, 0]));
    let updates = dir.npy_as("updates.npy", &t(&[2], &[b(0.5), b(4.0)]), "<V2");
    let out = dir.path("out.npy");
    assert_success(&cli!(
        "run",
        "scatter-elements",
        "--reduction",
        "add",
        &data,
        &indices,
        &updates,
        "-o",
        &out
    ));
    let result = read(&out);
    assert_eq!(result.descr, "<V2");
    assert_eq!(result.tensor, t(&[3], &[b(5.0), b(2.0), b(3.5)]));
}

fn strings(shape: &[usize], values: &[&str]) -> Tensor {
    Tensor::from_strings(shape, values.iter().copied()).expect("a valid test tensor")
}

/// Unicode `.npy` arrays (`<U`, `>U`) run through every op the string dtype allows; the
/// output keeps data's byte order and width, widened where an update is longer.
#[test]
fn string_tensors_run_through_every_op() {
    let dir = Dir::new("string_tensors_run_through_every_op");
    let values = ["a", "", "é", "日本", "🦀", "ab"];
    let data = dir.npy("data.npy", &strings(&[2, 3], &values));
    let indices = dir.npy("indices.npy", &t(&[2], &[-1i64, 0]));
    let out = dir.path("out.npy");
    assert_success(&cli!(
        "run", "gather", "--axis", "1", &data, &indices, "-o", &out
    ));
    let result = read(&out);
    assert_eq!(result.descr, "<U2");
    assert_eq!(result.tensor, strings(&[2, 2], &["é", "a", "ab", "日本"]));

    let indices = dir.npy("indices2.npy", &t(&[1, 3], &[1i32, 0, 1]));
    assert_success(&cli!("run", "gather-elements", &data, &indices, "-o", &out));
    assert_eq!(read(&out).tensor, strings(&[1, 3], &["日本", "", "ab"]));

    let indices = dir.npy("indices3.npy", &t(&[1, 2], &[2u8, 0]));
    let updates = dir.npy("updates.npy", &strings(&[1, 2], &["longer text ✓", "x"]));
    assert_success(&cli!(
        "run",
        "scatter-elements",
        "--axis",
        "-1",
        &data,
        &indices,
        &updates,
        "-o",
        &out
    ));
    let result = read(&out);
    assert_eq!(result.descr, "<U13");
    assert_eq!(
        result.tensor,
        strings(&[2, 3], &["x", "", "longer text ✓", "日本", "🦀", "ab"])
    );

    let big = dir.npy_as("big.npy", &strings(&[2, 3], &values), ">U");
    let indices = dir.npy("indices4.npy", &t(&[2], &[-2i64, 1]));
    assert_success(&cli!("run", "gather", &big, &indices, "-o", &out));
    let result = read(&out);
    assert_eq!(result.descr, ">U2");
    assert_eq!(
        result.tensor,
        strings(&[2, 3], &["a", "", "é", "日本", "🦀", "ab"])
    );
}

/// A gathered string output is as wide as its longest string (numpy's width for those
/// values), in data's byte order, and keeps data's width when nothing is gathered; a
/// scattered one keeps data's descr, width included, whenever every string fits, and an
/// update wider than data widens it to the longest string instead of truncating it as
/// numpy's assignment would.
#[test]
fn string_output_widths() {
    let dir = Dir::new("string_output_widths");
    let values = ["ab", "c", "", "d"];
    let data = dir.npy_as("data.npy", &strings(&[2, 2], &values), "<U3");
    assert_eq!(read(&data).descr, "<U3");
    let out = dir.path("out.npy");
    let rows = dir.npy("rows.npy", &t(&[1], &[1i64]));
    assert_success(&cli!("run", "gather", &data, &rows, "-o", &out));
    let result = read(&out);
    assert_eq!(result.descr, "<U1");
    assert_eq!(result.tensor, strings(&[1, 2], &["", "d"]));

    let none = dir.npy("none.npy", &t(&[0], &[0i64; 0]));
    assert_success(&cli!("run", "gather", &data, &none, "-o", &out));
    let result = read(&out);
    assert_eq!(result.descr, "<U3");
    assert_eq!(result.tensor.shape(), [0, 2]);

    let indices = dir.npy("indices.npy", &t(&[2, 2], &[1i64, 0, 0, 0]));
    assert_success(&cli!(
        "run",
        "gather-elements",
        "--axis",
        "1",
        &data,
        &indices,
        "-o",
        &out
    ));
    let result = read(&out);
    assert_eq!(result.descr, "<U2");
    assert_eq!(result.tensor, strings(&[2, 2], &["c", "ab", "", ""]));

    let big = dir.npy_as("big.npy", &strings(&[2, 2], &values), ">U5");
    assert_success(&cli!("run", "gather", &big, &rows, "-o", &out));
    assert_eq!(read(&out).descr, ">U1");
    let all_empty = dir.npy_as("empty_strings.npy", &strings(&[1, 2], &["", ""]), "<U4");
    let first = dir.npy("first.npy", &t(&[1], &[0i64]));
    assert_success(&cli!("run", "gather", &all_empty, &first, "-o", &out));
    assert_eq!(read(&out).descr, "<U1");

    let one = dir.npy("one.npy", &t(&[1, 1], &[0i64]));
    for (update, descr, first) in [("xyz", "<U3", "xyz"), ("wider", "<U5", "wider")] {
        let updates = dir.npy("updates.npy", &strings(&[1, 1], &[update]));
        assert_success(&cli!(
            "run",
            "scatter-elements",
            &data,
            &one,
            &updates,
            "-o",
            &out
        ));
        let result = read(&out);
        assert_eq!(result.descr, descr, "{update}");
        assert_eq!(
            result.tensor,
            strings(&[2, 2], &[first, "c", "", "d"]),
            "{update}"
        );
    }
}

#[test]
fn string_tensor_errors() {
    let dir = Dir::new("string_tensor_errors");
    let data = dir.npy(
        "data.npy",
        &strings(&[2, 3], &["a", "b", "c", "d", "e", "f"]),
    );
    let indices = dir.npy("indices.npy", &t(&[1, 2], &[0i64, 3]));
    let updates = dir.npy("updates.npy", &strings(&[1, 2], &["x", "y"]));
    let scatter = |extra: &[&str], updates: &Path| {
        let mut argv = args!["run", "scatter-elements", "--axis", "1"].to_vec();
        argv.extend(extra.iter().map(OsStr::new));
        argv.extend(args![&data, &indices, updates]);
        fails_without_output(&dir, &argv)
    };
    let line = scatter(&[], &updates);
    assert_contains(
        &line,
        &["index 3 at indices[0, 1] is out of bounds for axis 1 of size 3"],
    );
    let line = scatter(&["--reduction", "add"], &updates);
    assert_contains(
        &line,
        &["scatter_elements: reduction add is not supported for dtype string"],
    );
    let numbers = dir.npy("numbers.npy", &t(&[1, 2], &[1.0f32, 2.0]));
    let line = scatter(&[], &numbers);
    assert_contains(
        &line,
        &["updates has dtype f32, expected data's dtype string"],
    );
    let line = fails_without_output(&dir, &args!["run", "gather", &data, &updates]);
    assert_contains(&line, &["gather: indices have dtype string"]);

    let line = assert_one_error(&cli!(
        "explain",
        "gather",
        "--dtype",
        "string",
        "--index-dtype",
        "i64",
        "--rank",
        "2"
    ));
    assert_contains(
        &line,
        &["gather: no kernel over byte views takes dtype string"],
    );
}

#[test]
fn negative_axis() {
    let dir = Dir::new("negative_axis");
    let data = dir.npy("data.npy", &t(&[2, 3], &[0i32, 1, 2, 10, 11, 12]));
    let indices = dir.npy("indices.npy", &t(&[2, 2], &[2i64, 0, -1, 1]));
    let expected = t(&[2, 2], &[2i32, 0, 12, 11]);
    let spellings: [&[&str]; 3] = [&["--axis", "-1"], &["--axis=-1"], &["--axis", "1"]];
    for flags in spellings {
        let out = dir.path("out.npy");
        let _ = fs::remove_file(&out);
        let mut argv: Vec<&OsStr> = args!["run", "gather-elements"].to_vec();
        argv.extend(flags.iter().map(OsStr::new));
        argv.extend(args![&data, &indices, "-o", &out]);
        assert_success(&run_binary(&argv));
        assert_eq!(read(&out).tensor, expected, "{flags:?}");
    }

    // Gather: -2 on rank 2 is axis 0.
    let rows = dir.npy("rows.npy", &t(&[1], &[1i64]));
    let out = dir.path("gather.npy");
    assert_success(&cli!(
        "run", "gather", "--axis", "-2", &data, &rows, "-o", &out
    ));
    assert_eq!(read(&out).tensor, t(&[1, 3], &[10i32, 11, 12]));

    // Scatter along the last axis.
    let updates = dir.npy("updates.npy", &t(&[1, 1], &[99i32]));
    let idx = dir.npy("idx.npy", &t(&[1, 1], &[-1i64]));
    let out = dir.path("scatter.npy");
    assert_success(&cli!(
        "run",
        "scatter-elements",
        "--axis",
        "-1",
        &data,
        &idx,
        &updates,
        "-o",
        &out
    ));
    assert_eq!(read(&out).tensor, t(&[2, 3], &[0i32, 1, 99, 10, 11, 12]));
}

/// Every spelling of every reduction, with and without the initial value.
#[test]
fn every_reduction_spelling() {
    let dir = Dir::new("every_reduction_spelling");
    let data = dir.npy("data.npy", &t(&[4], &[1.0f32, 2.0, 3.0, 4.0]));
    let indices = dir.npy("indices.npy", &t(&[3], &[1i64, 1, 3]));
    let updates = dir.npy("updates.npy", &t(&[3], &[10.0f32, 20.0, 5.0]));
    let with_init: [(&[&str], [f32; 4]); 6] = [
        (&["none"], [1.0, 20.0, 3.0, 5.0]),
        (&["add", "sum"], [1.0, 32.0, 3.0, 9.0]),
        (&["mul", "prod", "multiply"], [1.0, 400.0, 3.0, 20.0]),
        (&["max", "amax"], [1.0, 20.0, 3.0, 5.0]),
        (&["min", "amin"], [1.0, 2.0, 3.0, 4.0]),
        (&["mean"], [1.0, 32.0 / 3.0, 3.0, 4.5]),
    ];
    let without_init: [(&str, [f32; 4]); 6] = [
        ("none", [1.0, 20.0, 3.0, 5.0]),
        ("add", [1.0, 30.0, 3.0, 5.0]),
        ("mul", [1.0, 200.0, 3.0, 5.0]),
        ("max", [1.0, 20.0, 3.0, 5.0]),
        ("min", [1.0, 10.0, 3.0, 5.0]),
        ("mean", [1.0, 15.0, 3.0, 5.0]),
    ];
    let cases = with_init
        .iter()
        .flat_map(|(names, v)| names.iter().map(move |n| (*n, "true", *v)))
        .chain(without_init.iter().map(|(n, v)| (*n, "false", *v)));
    for (name, init, expected) in cases {
        let out = dir.path(&format!("out-{name}-{init}.npy"));
        assert_success(&cli!(
            "run",
            "scatter-elements",
            "--reduction",
            name,
            "--use-init-val",
            init,
            &data,
            &indices,
            &updates,
            "-o",
            &out
        ));
        assert_eq!(
            read(&out).tensor,
            t(&[4], &expected),
            "--reduction {name} --use-init-val {init}"
        );
    }
}

#[test]
fn output_replaces_an_existing_file() {
    let dir = Dir::new("output_replaces_an_existing_file");
    let data = dir.npy("data.npy", &t(&[3], &[5u8, 6, 7]));
    let indices = dir.npy("indices.npy", &t(&[1], &[2i64]));
    let out = dir.raw("out.npy", b"old");
    assert_success(&cli!("run", "gather", &data, &indices, "-o", &out));
    assert_eq!(read(&out).tensor, t(&[1], &[7u8]));
    assert_eq!(dir.entries(), ["data.npy", "indices.npy", "out.npy"]);
}

// ---------------------------------------------------------------------------------------------
// Invalid input: one error line, no output

/// Runs a command that must fail; checks the output file (absent before) stays absent, and
/// a pre-existing output file stays byte-identical. Returns the error line.
pub(crate) fn fails_without_output(dir: &Dir, args: &[&OsStr]) -> String {
    let out = dir.path("out.npy");
    let _ = fs::remove_file(&out);
    let mut argv = args.to_vec();
    argv.extend([OsStr::new("-o"), out.as_os_str()]);
    let line = assert_one_error(&run_binary(&argv));
    assert!(!out.exists(), "{line}: the output was created");

    let before = b"\x93NUMPY pre-existing output, must survive".to_vec();
    fs::write(&out, &before).unwrap();
    let again = assert_one_error(&run_binary(&argv));
    assert_eq!(again, line);
    assert_eq!(
        fs::read(&out).unwrap(),
        before,
        "{line}: the output changed"
    );
    fs::remove_file(&out).unwrap();
    line
}

#[test]
fn out_of_bounds_index() {
    let dir = Dir::new("out_of_bounds_index");
    let data = dir.npy("data.npy", &t(&[2, 5], &[0.0f32; 10]));
    let indices = dir.npy("indices.npy", &t(&[1, 4], &[0i64, 4, -5, -7]));
    let updates = dir.npy("updates.npy", &t(&[1, 4], &[1.0f32; 4]));
    let line = fails_without_output(
        &dir,
        &args![
            "run",
            "scatter-elements",
            "--axis",
            "1",
            &data,
            &indices,
            &updates
        ],
    );
    assert_contains(
        &line,
        &["-7", "out of bounds", "indices[0, 3]", "axis 1", "size 5"],
    );

    let big = dir.npy("big.npy", &t(&[1], &[u64::MAX]));
    let line = fails_without_output(&dir, &args!["run", "gather", &data, &big]);
    assert_contains(&line, &["18446744073709551615", "out of bounds"]);

    let line = fails_without_output(
        &dir,
        &args!["run", "gather-elements", "--axis", "0", &data, &indices],
    );
    assert_contains(&line, &["4", "out of bounds", "axis 0", "size 2"]);
    assert_eq!(
        dir.entries(),
        ["big.npy", "data.npy", "indices.npy", "updates.npy"]
    );
}

#[test]
fn axis_out_of_range() {
    let dir = Dir::new("axis_out_of_range");
    let data = dir.npy("data.npy", &t(&[2, 2], &[1i32, 2, 3, 4]));
    let indices = dir.npy("indices.npy", &t(&[2, 2], &[0i64, 1, 1, 0]));
    for axis in ["2", "-3"] {
        let line = fails_without_output(
            &dir,
            &args!["run", "gather-elements", "--axis", axis, &data, &indices],
        );
        assert_contains(&line, &[&format!("axis {axis}"), "out of range"]);
    }
}

#[test]
fn unsupported_reduction_for_dtype() {
    let dir = Dir::new("unsupported_reduction_for_dtype");
    let c = Complex64 { re: 1.0, im: 2.0 };
    let data = dir.npy("data.npy", &t(&[2], &[c, c]));
    let indices = dir.npy("indices.npy", &t(&[1], &[0i64]));
    let updates = dir.npy("updates.npy", &t(&[1], &[c]));
    let line = fails_without_output(
        &dir,
        &args![
            "run",
            "scatter-elements",
            "--reduction",
            "max",
            &data,
            &indices,
            &updates
        ],
    );
    assert_contains(&line, &["max", "c64", "not supported"]);
}

#[test]
fn updates_dtype_mismatch() {
    let dir = Dir::new("updates_dtype_mismatch");
    let data = dir.npy("data.npy", &t(&[2], &[1.0f32, 2.0]));
    let indices = dir.npy("indices.npy", &t(&[1], &[0i64]));
    let updates = dir.npy("updates.npy", &t(&[1], &[1.0f64]));
    let line = fails_without_output(
        &dir,
        &args!["run", "scatter-elements", &data, &indices, &updates],
    );
    assert_contains(&line, &["updates", "f64", "f32"]);
}

#[test]
fn float_indices_and_bad_shapes() {
    let dir = Dir::new("float_indices_and_bad_shapes");
    let data = dir.npy("data.npy", &t(&[2, 2], &[1i32, 2, 3, 4]));
    let findices = dir.npy("findices.npy", &t(&[1, 1], &[0.0f32]));
    let line = fails_without_output(&dir, &args!["run", "gather-elements", &data, &findices]);
    assert_contains(&line, &["indices", "f32", "integer"]);

    let wide = dir.npy("wide.npy", &t(&[1, 3], &[0i64, 0, 0]));
    let line = fails_without_output(&dir, &args!["run", "gather-elements", &data, &wide]);
    assert_contains(&line, &["indices", "shape"]);
}

#[test]
fn malformed_npy_files() {
    let dir = Dir::new("malformed_npy_files");
    let good = dir.npy("good.npy", &t(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]));
    let indices = dir.npy("indices.npy", &t(&[1], &[0i64]));
    let image = fs::read(&good).unwrap();

    let magic = dir.raw("magic.npy", b"PK\x03\x04 this is a zip, not an npy");
    let line = fails_without_output(&dir, &args!["run", "gather", &magic, &indices]);
    assert_contains(&line, &["magic.npy", "not an .npy file"]);

    let truncated = dir.raw("truncated.npy", &image[..image.len() - 3]);
    let line = fails_without_output(&dir, &args!["run", "gather", &truncated, &indices]);
    assert_contains(&line, &["truncated.npy", "truncated payload"]);

    let header_cut = dir.raw("header_cut.npy", &image[..30]);
    let line = fails_without_output(&dir, &args!["run", "gather", &header_cut, &indices]);
    assert_contains(&line, &["header_cut.npy", "truncated header"]);

    let trailing = dir.raw("trailing.npy", &[&image[..], b"xx"].concat());
    let line = fails_without_output(&dir, &args!["run", "gather", &good, &trailing]);
    assert_contains(&line, &["trailing.npy", "after the payload"]);

    // Edits of the header text that keep its length.
    let end = image.iter().position(|&b| b == b'\n').unwrap();
    let text = String::from_utf8_lossy(&image[10..end]).into_owned();
    let swap = |from: &str, to: &str| {
        assert!(text.contains(from));
        let mut bytes = image.clone();
        let replaced = text.replacen(from, to, 1);
        assert_eq!(replaced.len(), text.len());
        bytes[10..end].copy_from_slice(replaced.as_bytes());
        bytes
    };

    let fortran = dir.raw(
        "fortran.npy",
        &swap("'fortran_order': False", "'fortran_order': True "),
    );
    let line = fails_without_output(&dir, &args!["run", "gather", &fortran, &indices]);
    assert_contains(&line, &["fortran.npy", "fortran"]);

    let big_endian = dir.raw("big.npy", &swap("'<f4'", "'>f4'"));
    let line = fails_without_output(&dir, &args!["run", "gather", &big_endian, &indices]);
    assert_contains(&line, &["big.npy", "big-endian"]);

    let garbled = dir.raw("garbled.npy", &swap("'shape'", "'shope'"));
    let line = fails_without_output(&dir, &args!["run", "gather", &garbled, &indices]);
    assert_contains(&line, &["garbled.npy", "malformed header"]);

    // The bits of 1.0f32 are no unicode code point.
    let strings = dir.raw("strings.npy", &swap("'<f4'", "'<U1'"));
    let line = fails_without_output(&dir, &args!["run", "gather", &strings, &indices]);
    assert_contains(
        &line,
        &[
            "strings.npy",
            "string element 0 has 0x3F800000 at character 0",
        ],
    );

    let bytes = dir.raw("bytes.npy", &swap("'<f4'", "'|S4'"));
    let line = fails_without_output(&dir, &args!["run", "gather", &bytes, &indices]);
    assert_contains(&line, &["bytes.npy", "byte-string dtype '|S4'"]);

    let bools = dir.npy("bools.npy", &t(&[2], &[true, false]));
    let mut bad_bool = fs::read(&bools).unwrap();
    *bad_bool.last_mut().unwrap() = 7;
    let bad_bool = dir.raw("bad_bool.npy", &bad_bool);
    let line = fails_without_output(&dir, &args!["run", "gather", &bad_bool, &indices]);
    assert_contains(&line, &["bad_bool.npy", "byte 7"]);

    let missing = dir.path("missing.npy");
    let line = fails_without_output(&dir, &args!["run", "gather", &good, &missing]);
    assert_contains(&line, &["missing.npy", "cannot open"]);
}

/// Bad flags are usage errors: exit status 2 and one line, before any file is touched.
#[test]
fn bad_flag_values() {
    let dir = Dir::new("bad_flag_values");
    let data = dir.npy("data.npy", &t(&[2], &[1.0f32, 2.0]));
    let indices = dir.npy("indices.npy", &t(&[1], &[0i64]));
    let updates = dir.npy("updates.npy", &t(&[1], &[1.0f32]));
    let cases: [(&[&str], &[&str]); 5] = [
        (&["--reduction", "median"], &["median", "--reduction"]),
        (&["--use-init-val", "maybe"], &["maybe", "--use-init-val"]),
        (&["--axis", "one"], &["one", "--axis"]),
        (&["--axis", "99999999999999999999"], &["--axis"]),
        (&["--bogus"], &["--bogus"]),
    ];
    for (flags, mentions) in cases {
        let mut argv: Vec<&OsStr> = args!["run", "scatter-elements"].to_vec();
        argv.extend(flags.iter().map(OsStr::new));
        argv.extend(args![&data, &indices, &updates]);
        let line = fails_without_output(&dir, &argv);
        assert_contains(&line, mentions);
        let out = dir.path("out.npy");
        argv.extend(args!["-o", &out]);
        assert_eq!(run_binary(&argv).status.code(), Some(2), "{flags:?}");
    }
}

#[test]
fn usage_errors() {
    for (argv, mentions) in [
        (&[][..], &["usage"][..]),
        (&["run"], &["usage: scatterjit run"]),
        (&["run", "gathr"], &["gathr"]),
        (&["run", "gather", "a.npy"], &["required", "INDICES.npy"]),
        (&["run", "gather", "a.npy", "b.npy"], &["--output"]),
        (&["explain", "gather", "--dtype", "f128"], &["f128"]),
        (
            &[
                "explain",
                "gather",
                "--dtype",
                "f32",
                "--index-dtype",
                "i64",
                "--rank",
                "2",
                "--reduction",
                "add",
            ],
            &["--reduction", "scatter-elements"],
        ),
    ] {
        let args: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
        let out = run_binary(&args);
        let line = assert_one_error(&out);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {line}");
        assert_contains(&line, mentions);
    }
}

#[test]
fn help_and_version() {
    let out = cli!("--help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains(&text, &["run", "explain", "demo"]);

    let out = cli!("run", "scatter-elements", "--help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &text,
        &["--reduction", "--use-init-val", "--axis", "--output"],
    );

    let out = cli!("--version");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("scatterjit "));
}

// ---------------------------------------------------------------------------------------------
// explain and demo

#[test]
fn explain_prints_the_kernel() {
    let out = cli!(
        "explain",
        "scatter",
        "--dtype",
        "f32",
        "--index-dtype",
        "i64",
        "--rank",
        "2",
        "--axis",
        "-1",
        "--reduction",
        "sum",
        "--use-init-val",
        "false"
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains(&text, &["scatter_elements.f32.i64.r2.a1.add", "function"]);

    let out = cli!(
        "explain",
        "gather",
        "--dtype",
        "bf16",
        "--index-dtype",
        "i32",
        "--rank",
        "3",
        "--index-rank",
        "0",
        "--axis",
        "2"
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_contains(
        &String::from_utf8_lossy(&out.stdout),
        &["gather.bf16.i32.r3.q0.a2"],
    );

    let out = cli!(
        "explain",
        "scatter-elements",
        "--dtype",
        "c64",
        "--index-dtype",
        "i64",
        "--rank",
        "1",
        "--reduction",
        "max"
    );
    let line = assert_one_error(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_contains(&line, &["max", "c64"]);
}

#[test]
fn demo_checks_the_onnx_examples() {
    let out = cli!("demo");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &text,
        &[
            "scatter_elements.f32.i64.r2.a0.none",
            "scatter_elements.f32.i64.r2.a1.add",
            "gather_elements.f32.i64.r2.a1",
            "gather.f32.i64.r2.q2.a0",
            "all 4 examples match",
            "ms",
        ],
    );
    assert!(!text.contains("WRONG"), "{text}");
}

#[test]
fn bench_quick_runs_checks_and_reports() {
    let args: Vec<&OsStr> = [
        "bench",
        "--quick",
        "--only",
        "gather_cols_f32",
        "--threads",
        "2",
    ]
    .iter()
    .map(OsStr::new)
    .collect();
    let out = run_binary(&args);
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &table,
        &["gather_cols_f32", "jit x2", "interp", "copy", "cache hit"],
    );

    let dir = Dir::new("bench_quick");
    let svg = dir.path("chart.svg");
    let mut args: Vec<&OsStr> = [
        "bench",
        "--quick",
        "--only",
        "scatter_add_gnn_f32",
        "--json",
        "--plot",
    ]
    .iter()
    .map(OsStr::new)
    .collect();
    args.push(svg.as_os_str());
    let out = run_binary(&args);
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    let json = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &json,
        &[
            "\"name\": \"scatter_add_gnn_f32\"",
            "\"median_s\"",
            "\"samples_s\"",
        ],
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("scatter_add_gnn_f32"));

    let args: Vec<&OsStr> = ["bench", "--only", "no_such_workload"]
        .iter()
        .map(OsStr::new)
        .collect();
    let line = assert_one_error(&run_binary(&args));
    assert_contains(&line, &["no_such_workload", "gather_cols_f32"]);
}
