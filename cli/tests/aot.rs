//! Kernels compiled ahead of time and called from C: `scatterjit aot` writes an object file
//! and its header, the system C compiler links `tests/c/aot_test.c` (and the README's
//! example) against them, and every case the program prints is compared with the
//! reference interpreter.

use std::path::Path;
use std::process::Command;

use scatterjit::KernelKey;

use crate::c_harness::{
    assert_readme_shows, check, check_example, compile, parse, root, run, scratch,
};

/// The cases of `tests/c/aot_test.c` and the kernel each calls.
const CASES: &[(&str, &str)] = &[
    ("scatter_add", "scatter_elements.f32.i64.r2.a1.add"),
    ("scatter_in_place", "scatter_elements.f32.i64.r2.a1.add"),
    (
        "scatter_max_noinit",
        "scatter_elements.i32.i32.r2.a0.max.noinit",
    ),
    ("gather_elements_strided", "gather_elements.f32.i64.r2.a1"),
    ("gather_rows", "gather.f32.i64.r2.q2.a0"),
    ("gather_u8", "gather.i64.u8.r3.q1.a1"),
    ("gather_scalar_index", "gather.f32.i64.r1.q0.a0"),
    ("scatter_bad_index", "scatter_elements.f32.i64.r2.a1.add"),
    ("gather_bad_index", "gather.f32.i64.r2.q2.a0"),
];

/// The misuse calls of `tests/c/aot_test.c` and the status each must return.
const MISUSES: &[(&str, i32)] = &[
    ("null_args", 1),
    ("null_tensor", 1),
    ("wrong_dtype", 3),
    ("wrong_rank", 4),
    ("wrong_out_shape", 5),
    ("updates_smaller_than_indices", 5),
    ("negative_dim", 5),
    ("null_shape", 1),
    ("not_cpu", 2),
    ("out_overlaps_updates", 7),
    ("out_overlaps_data", 7),
];

/// Runs `scatterjit aot` with `args`; panics with its stderr unless it succeeds.
fn aot(args: &[&std::ffi::OsStr]) {
    run(Command::new(env!("CARGO_BIN_EXE_scatterjit"))
        .arg("aot")
        .args(args));
}

#[test]
fn c_calls_ahead_of_time_kernels() {
    let dir = scratch("aot");
    // Keys on the command line and in a manifest, with a duplicate.
    let (first, rest) = CASES.split_first().expect("cases");
    let manifest = dir.join("kernels.txt");
    let mut text = String::from("# kernels of aot_test.c\n\n");
    for (_, key) in rest {
        text += &format!("{key}  # {key}\n");
    }
    std::fs::write(&manifest, text).expect("write the manifest");
    let object = dir.join("kernels.o");
    aot(&[
        first.1.as_ref(),
        "--manifest".as_ref(),
        manifest.as_os_str(),
        "-o".as_ref(),
        object.as_os_str(),
    ]);
    let header = std::fs::read_to_string(dir.join("kernels.h")).expect("the header");
    for (_, key) in CASES {
        let key: KernelKey = key.parse().expect("a key");
        let symbol = scatterjit::aot::symbol(&key);
        assert_eq!(
            header
                .matches(&format!("int32_t {symbol}(sj_args *args);"))
                .count(),
            1,
            "{symbol} declared once"
        );
    }

    let binary = dir.join("aot_test");
    let tests = root().join("tests/c");
    compile(
        &[&tests.join("aot_test.c")],
        &[&dir, &tests],
        &[&object],
        &binary,
    );
    let output = run(&mut Command::new(&binary));
    let (cases, misuses) = parse(&output);
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    let expected: Vec<&str> = CASES.iter().map(|c| c.0).collect();
    assert_eq!(names, expected, "{output}");
    for case in &cases {
        let key = CASES
            .iter()
            .find(|c| c.0 == case.name)
            .expect("a known case")
            .1;
        check(case, &key.parse().expect("a key"));
    }
    let statuses: Vec<(String, i32)> = misuses
        .iter()
        .map(|m| (m[0].clone(), m[1].parse().expect("a status")))
        .collect();
    let expected: Vec<(String, i32)> = MISUSES.iter().map(|(w, s)| (w.to_string(), *s)).collect();
    assert_eq!(statuses, expected, "{output}");
    for m in misuses.iter().filter(|m| m.len() > 2) {
        assert_eq!(m[2], "unchanged", "{}: out must be unchanged", m[0]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's example is `tests/c/aot_example.c`, and it prints what the interpreter
/// computes.
#[test]
fn the_readme_example_runs() {
    assert_readme_shows("aot_example.c");
    let dir = scratch("aot-example");
    let object = dir.join("kernels.o");
    aot(&[
        "scatter_elements.f32.i64.r2.a1.add".as_ref(),
        "gather.f32.i64.r2.q1.a0".as_ref(),
        "-o".as_ref(),
        object.as_os_str(),
    ]);
    let binary = dir.join("aot_example");
    compile(
        &[&root().join("tests/c/aot_example.c")],
        &[&dir],
        &[&object],
        &binary,
    );
    let output = run(&mut Command::new(&binary));
    check_example(&output);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `scatterjit aot` rejects what it cannot compile, naming it.
#[test]
fn aot_errors_name_the_key() {
    let dir = scratch("aot-errors");
    let object = dir.join("k.o");
    let fails = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(env!("CARGO_BIN_EXE_scatterjit"))
            .arg("aot")
            .args(args)
            .output()
            .expect("run scatterjit");
        assert!(!out.status.success());
        assert!(!object.exists(), "no object on failure");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let o = object.as_os_str();
    let e = fails(&["gather.f32.i64.r2.a0".as_ref(), "-o".as_ref(), o]);
    assert!(e.contains("gather.f32.i64.r2.a0"), "{e}");
    let e = fails(&[
        "scatter_elements.f32.i64.r2.a1.mean".as_ref(),
        "-o".as_ref(),
        o,
    ]);
    assert!(
        e.contains("scatter_elements.f32.i64.r2.a1.mean") && e.contains("ahead of time"),
        "{e}"
    );
    let manifest = dir.join("m.txt");
    std::fs::write(&manifest, "gather.f32.i64.r2.q1.a0\nnot_a_key\n").unwrap();
    let e = fails(&[
        "--manifest".as_ref(),
        manifest.as_os_str(),
        "-o".as_ref(),
        o,
    ]);
    assert!(e.contains("m.txt:2") && e.contains("not_a_key"), "{e}");
    let e = fails(&["-o".as_ref(), o]);
    assert!(e.contains("no kernel keys"), "{e}");
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// The output and header are replaced atomically through a temporary file that is created
/// new: a symbolic link planted at a name the tool could predict (its process id is known
/// to whoever starts it) is neither followed nor renamed into place. Unix only: the shell's
/// `exec` keeps the process id, so the links can be planted under the tool's own.
#[cfg(unix)]
#[test]
fn aot_outputs_do_not_follow_planted_links() {
    let dir = crate::cli::Dir::new("aot-planted-links");
    let victim = dir.raw("victim", b"not to be overwritten");
    // Every temporary name the tool has used: `.NAME.PID.tmp` (the old writer) and
    // `.scatterjit-PID-N.tmp` for the first attempts.
    let script = r#"
        for n in 0 1 2 3; do ln -s "$1" ".scatterjit-$$-$n.tmp" || exit 90; done
        ln -s "$1" ".k.o.$$.tmp" && ln -s "$1" ".k.h.$$.tmp" || exit 90
        exec "$2" aot gather.f32.i64.r1.q0.a0 -o k.o
    "#;
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(&victim)
        .arg(env!("CARGO_BIN_EXE_scatterjit"))
        .current_dir(dir.path(""))
        .output()
        .expect("run the shell");
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let victim = std::fs::read(&victim).expect("the victim");
    assert!(
        victim == b"not to be overwritten",
        "the link's target was overwritten with {} bytes",
        victim.len()
    );
    for name in ["k.o", "k.h"] {
        let meta = std::fs::symlink_metadata(dir.path(name)).expect("the output");
        assert!(meta.is_file(), "{name} is not a regular file: {meta:?}");
    }
    let header = std::fs::read_to_string(dir.path("k.h")).expect("the header");
    let key: KernelKey = "gather.f32.i64.r1.q0.a0".parse().expect("a key");
    assert!(header.contains(&scatterjit::aot::symbol(&key)), "{header}");
    // The links are left as they were: nothing in the tool removes what it did not create.
    let links = dir
        .entries()
        .into_iter()
        .filter(|name| name.ends_with(".tmp"))
        .count();
    assert_eq!(links, 6, "{:?}", dir.entries());
}
