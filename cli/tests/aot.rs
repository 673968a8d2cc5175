//! Kernels compiled ahead of time and called from C: `scatterjit aot` writes an object file
//! and its header for a machine (the host, or a `--target` with CPU features), that
//! machine's C compiler links `tests/c/aot_test.c` and the case runner
//! `tests/c/aot_cases.c` against them, the programs run natively or under qemu's user-mode
//! emulation, and every case they print is compared with the reference interpreter.
//!
//! The foreign machines need Debian's cross compilers and qemu-user (`.ci/run` installs
//! them). Without them a test prints why it skipped, unless `SCATTERJIT_REQUIRE_CROSS=1`
//! (set by `.ci/run`) makes that a failure.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use scatterjit::KernelKey;

use crate::aot_matrix;
use crate::c_harness::{
    assert_readme_shows, check, check_example, compile, compile_with, parse, root, run, scratch,
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
    ("scatter_mean", "scatter_elements.f32.i64.r2.a0.mean"),
    ("scatter_bad_index", "scatter_elements.f32.i64.r2.a1.add"),
    ("gather_bad_index", "gather.f32.i64.r2.q2.a0"),
];

/// The misuse calls of `tests/c/aot_test.c` (and one edge that must succeed) and the
/// status each must return.
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
    ("workspace_too_small", 10),
    ("workspace_null", 1),
    ("workspace_overlaps_out", 7),
    ("empty_mean_without_workspace", 0),
];

/// Runs `scatterjit aot` with `args`; panics with its stderr unless it succeeds.
fn aot(args: &[&OsStr]) {
    run(Command::new(env!("CARGO_BIN_EXE_scatterjit"))
        .arg("aot")
        .args(args));
}

/// A machine the C programs are built for and run on.
struct Machine {
    /// Names its scratch directory.
    name: &'static str,
    /// `--target` and `--cpu-features` (`None`: the host, every feature its CPU has).
    target: Option<(&'static str, &'static str)>,
    /// The architecture as Rust, Debian's cross tools and qemu name it.
    arch: &'static str,
    /// The ELF `e_machine` of its objects.
    e_machine: u16,
    /// Whether this host, where it has the same architecture, runs the code natively.
    native: fn() -> bool,
    /// qemu's `-cpu`, where its default lacks a feature the code uses.
    qemu_cpu: Option<&'static str>,
}

const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const EM_RISCV: u16 = 243;

fn on_host_arch(arch: &str) -> bool {
    arch == std::env::consts::ARCH
}

/// Whether this CPU has the features of x86-64-v3 (AVX2, FMA, BMI1/2, LZCNT).
fn host_has_x86_64_v3() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("bmi1")
            && is_x86_feature_detected!("bmi2")
            && is_x86_feature_detected!("lzcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// How to build and run C programs for a machine.
struct Tools {
    cc: OsString,
    /// The emulator command the program runs under; empty to run it natively.
    runner: Vec<OsString>,
}

/// The C compiler and runner for `machine`: the host's own where it runs the code, else
/// `<arch>-linux-gnu-gcc` and `qemu-<arch>` with the cross C library. `None` (after saying
/// why) if they are missing, unless `SCATTERJIT_REQUIRE_CROSS=1`, which makes it a failure.
fn tools(machine: &Machine) -> Option<Tools> {
    if on_host_arch(machine.arch) && (machine.native)() {
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        return Some(Tools { cc, runner: vec![] });
    }
    let runs = |program: &str| {
        Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let gnu = format!("{}-linux-gnu", machine.arch);
    let mut missing = Vec::new();
    let cc = if on_host_arch(machine.arch) {
        std::env::var("CC").unwrap_or_else(|_| "cc".into())
    } else {
        format!("{gnu}-gcc")
    };
    if !runs(&cc) {
        missing.push(cc.clone());
    }
    let qemu = [
        format!("qemu-{}", machine.arch),
        format!("qemu-{}-static", machine.arch),
    ]
    .into_iter()
    .find(|q| runs(q));
    if qemu.is_none() {
        missing.push(format!("qemu-{}", machine.arch));
    }
    let sysroot = Path::new("/usr").join(&gnu);
    if !on_host_arch(machine.arch) && !sysroot.join("lib").is_dir() {
        missing.push(format!("the C library in {}", sysroot.display()));
    }
    if !missing.is_empty() {
        let message = format!(
            "cannot test ahead-of-time code for {}: {} not found (Debian: apt-get install \
             gcc-{}-linux-gnu qemu-user)",
            machine.name,
            missing.join(", "),
            machine.arch.replace('_', "-"),
        );
        if std::env::var("SCATTERJIT_REQUIRE_CROSS").is_ok_and(|v| v == "1") {
            panic!("{message}");
        }
        eprintln!("skipped: {message}; SCATTERJIT_REQUIRE_CROSS=1 makes this a failure");
        return None;
    }
    let mut runner: Vec<OsString> = vec![qemu.expect("found").into()];
    if !on_host_arch(machine.arch) {
        runner.extend(["-L".into(), sysroot.into_os_string()]);
    }
    if let Some(cpu) = machine.qemu_cpu {
        runner.extend(["-cpu".into(), cpu.into()]);
    }
    Some(Tools {
        cc: cc.into(),
        runner,
    })
}

impl Tools {
    /// Runs `binary` with `args` on the machine; its stdout.
    fn run(&self, binary: &Path, args: &[&OsStr]) -> String {
        let mut command = match self.runner.split_first() {
            Some((emulator, options)) => {
                let mut c = Command::new(emulator);
                c.args(options).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        run(command.args(args))
    }
}

/// Checks that `object` is a 64-bit little-endian relocatable ELF file for `machine` (what
/// `file` reads), and for RISC-V that it says double-float calling convention and
/// compressed instructions, as Debian's riscv64 objects do, so the linker accepts the mix.
fn check_elf(object: &[u8], machine: &Machine) {
    assert_eq!(&object[..4], b"\x7fELF", "{}: an ELF file", machine.name);
    assert_eq!(object[4], 2, "{}: ELFCLASS64", machine.name);
    assert_eq!(object[5], 1, "{}: little-endian", machine.name);
    let half = |at: usize| u16::from_le_bytes([object[at], object[at + 1]]);
    assert_eq!(half(16), 1, "{}: ET_REL", machine.name);
    assert_eq!(half(18), machine.e_machine, "{}: e_machine", machine.name);
    if machine.e_machine == EM_RISCV {
        let flags = u32::from_le_bytes([object[48], object[49], object[50], object[51]]);
        // EF_RISCV_FLOAT_ABI_DOUBLE | EF_RISCV_RVC
        assert_eq!(flags, 0x4 | 0x1, "{}: e_flags", machine.name);
    }
}

/// Writes one object for `machine` with the kernels of `aot_test.c` and of the case
/// matrix, then runs both programs on it and checks what they print.
fn c_calls_ahead_of_time_kernels_on(machine: &Machine) {
    let Some(tools) = tools(machine) else {
        return;
    };
    let dir = scratch(&format!("aot-{}", machine.name));
    let matrix = aot_matrix::keys();
    // Keys on the command line and in a manifest, with a duplicate.
    let (first, rest) = CASES.split_first().expect("cases");
    let manifest = dir.join("kernels.txt");
    let mut text = String::from("# kernels of aot_test.c and the case matrix\n\n");
    for (_, key) in rest {
        text += &format!("{key}  # {key}\n");
    }
    for key in &matrix {
        text += &format!("{key}\n");
    }
    std::fs::write(&manifest, text).expect("write the manifest");
    let object = dir.join("kernels.o");
    let mut args: Vec<&OsStr> = vec![
        first.1.as_ref(),
        "--manifest".as_ref(),
        manifest.as_os_str(),
        "-o".as_ref(),
        object.as_os_str(),
    ];
    if let Some((triple, features)) = machine.target {
        args.extend(["--target".as_ref(), OsStr::new(triple)]);
        if !features.is_empty() {
            args.extend(["--cpu-features".as_ref(), OsStr::new(features)]);
        }
    }
    aot(&args);
    check_elf(&std::fs::read(&object).expect("the object"), machine);
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
    compile_with(
        &tools.cc,
        &[&tests.join("aot_test.c")],
        &[&dir, &tests],
        &[&object],
        &binary,
    );
    let output = tools.run(&binary, &[]);
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

    let table = dir.join("kernels_table.c");
    std::fs::write(&table, aot_matrix::table(&matrix)).expect("write the table");
    let runner = dir.join("aot_cases");
    compile_with(
        &tools.cc,
        &[&tests.join("aot_cases.c"), &table],
        &[&dir],
        &[&object],
        &runner,
    );
    let cases = aot_matrix::cases(&matrix);
    let file = dir.join("cases.bin");
    std::fs::write(&file, aot_matrix::encode(&cases)).expect("write the cases");
    let output = tools.run(&runner, &[file.as_os_str()]);
    aot_matrix::check(&matrix, &cases, &output, machine.name);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_calls_ahead_of_time_kernels() {
    c_calls_ahead_of_time_kernels_on(&Machine {
        name: "host",
        target: None,
        arch: std::env::consts::ARCH,
        e_machine: match std::env::consts::ARCH {
            "x86_64" => EM_X86_64,
            "aarch64" => EM_AARCH64,
            "riscv64" => EM_RISCV,
            other => panic!("no ELF machine known for {other}"),
        },
        native: || true,
        qemu_cpu: None,
    });
}

#[test]
fn x86_64_baseline() {
    c_calls_ahead_of_time_kernels_on(&Machine {
        name: "x86_64",
        target: Some(("x86_64-unknown-linux-gnu", "")),
        arch: "x86_64",
        e_machine: EM_X86_64,
        native: || true,
        qemu_cpu: None,
    });
}

#[test]
fn x86_64_v3() {
    c_calls_ahead_of_time_kernels_on(&Machine {
        name: "x86_64-v3",
        target: Some(("x86_64-unknown-linux-gnu", "x86-64-v3")),
        arch: "x86_64",
        e_machine: EM_X86_64,
        native: host_has_x86_64_v3,
        qemu_cpu: Some("max"),
    });
}

#[test]
fn aarch64() {
    c_calls_ahead_of_time_kernels_on(&Machine {
        name: "aarch64",
        target: Some(("aarch64-unknown-linux-gnu", "")),
        arch: "aarch64",
        e_machine: EM_AARCH64,
        native: || true,
        qemu_cpu: None,
    });
}

#[test]
fn riscv64() {
    c_calls_ahead_of_time_kernels_on(&Machine {
        name: "riscv64",
        target: Some(("riscv64gc-unknown-linux-gnu", "")),
        arch: "riscv64",
        e_machine: EM_RISCV,
        native: || true,
        qemu_cpu: None,
    });
}

/// RISC-V with its vector extension: the lowering's 16-byte vector paths.
#[test]
fn riscv64_with_vectors() {
    c_calls_ahead_of_time_kernels_on(&Machine {
        name: "riscv64-v",
        target: Some(("riscv64gc-unknown-linux-gnu", "v")),
        arch: "riscv64",
        e_machine: EM_RISCV,
        // Even a RISC-V host may lack V: always emulated.
        native: || false,
        qemu_cpu: Some("rv64,v=true,vlen=128,vext_spec=v1.0"),
    });
}

/// Baseline and x86-64-v3 objects differ: the features reach the code.
#[test]
fn cpu_features_change_the_code() {
    let key: KernelKey = "scatter_elements.f32.i64.r2.a0.max".parse().unwrap();
    let x86 = "x86_64-unknown-linux-gnu";
    let object = |features: &[&str]| {
        let target = scatterjit::aot::Target::new(x86, features).unwrap();
        scatterjit::aot::compile_for(&[key], &target)
            .unwrap()
            .object
    };
    assert_ne!(object(&[]), object(&["x86-64-v3"]));
    let host = scatterjit::aot::compile(&[key]).unwrap();
    let aarch64 = scatterjit::aot::Target::new("aarch64-unknown-linux-gnu", &[]).unwrap();
    let arm = scatterjit::aot::compile_for(&[key], &aarch64).unwrap();
    assert_eq!(
        host.header, arm.header,
        "the header is the same for every target"
    );
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
    let e = fails(&["gather.string.i64.r1.q1.a0".as_ref(), "-o".as_ref(), o]);
    assert!(
        e.contains("gather.string.i64.r1.q1.a0") && e.contains("ahead of time"),
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
    let key = "gather.f32.i64.r2.q1.a0".as_ref();
    for triple in [
        "s390x-unknown-linux-gnu",
        "riscv64-unknown-linux-gnu",
        "arm",
    ] {
        let e = fails(&[key, "--target".as_ref(), triple.as_ref(), "-o".as_ref(), o]);
        assert!(e.contains(triple), "{e}");
        for supported in scatterjit::aot::SUPPORTED {
            assert!(e.contains(supported), "{e}");
        }
    }
    let x86 = "x86_64-unknown-linux-gnu".as_ref();
    let e = fails(&[
        key,
        "--target".as_ref(),
        x86,
        "--cpu-features".as_ref(),
        "avx2,neon".as_ref(),
        "-o".as_ref(),
        o,
    ]);
    assert!(e.contains("`neon`") && e.contains("sse41"), "{e}");
    let e = fails(&[
        key,
        "--cpu-features".as_ref(),
        "avx2".as_ref(),
        "-o".as_ref(),
        o,
    ]);
    assert!(e.contains("--target"), "{e}");
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
