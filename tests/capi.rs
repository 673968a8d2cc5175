//! The C ABI of the shared library, called from C: `tests/c/capi_test.c` (and the README's
//! example) link against the `cdylib` cargo built beside this test, and every case they
//! print is compared with the reference interpreter; misuse must return its status and a
//! message that names the problem.

use std::path::PathBuf;
use std::process::Command;

use crate::c_harness::{
    assert_readme_shows, check, check_example, compile, parse, root, run, scratch,
};

/// The cases of `tests/c/capi_test.c` and the kernel each calls.
const CASES: &[(&str, &str)] = &[
    ("scatter_add", SCATTER_ADD),
    ("scatter_add_prepared", SCATTER_ADD),
    ("scatter_in_place", SCATTER_ADD),
    ("scatter_in_place_prepared", SCATTER_ADD),
    ("scatter_mean_noinit", MEAN),
    ("scatter_mean_noinit_prepared", MEAN),
    ("gather_elements_strided", GATHER_ELEMENTS),
    ("gather_elements_strided_prepared", GATHER_ELEMENTS),
    ("gather_rows", GATHER),
    ("gather_rows_prepared", GATHER),
    ("gather_bad_index", GATHER),
    ("gather_bad_index_prepared", GATHER),
    ("scatter_bad_index", SCATTER_ADD),
    ("scatter_bad_index_prepared", SCATTER_ADD),
    ("gather_elements_on_a_pool", GATHER_ELEMENTS),
    ("gather_elements_on_a_pool_prepared", GATHER_ELEMENTS),
    ("scatter_in_place_outliving_cache", SCATTER_ADD),
];
const SCATTER_ADD: &str = "scatter_elements.f32.i64.r2.a1.add";
const MEAN: &str = "scatter_elements.f32.i64.r2.a1.mean.noinit";
const GATHER_ELEMENTS: &str = "gather_elements.f32.i64.r2.a1";
const GATHER: &str = "gather.f32.i64.r2.q2.a0";

/// The misuse calls of `tests/c/capi_test.c`: status, and words its message must contain.
const MISUSES: &[(&str, i32, &[&str])] = &[
    ("get_null_cache", 1, &["sj_kernel_get", "NULL"]),
    ("get_null_key", 1, &["sj_kernel_get", "NULL"]),
    ("get_null_out", 1, &["sj_kernel_get", "NULL"]),
    ("get_bad_key", 8, &["gather.f32.i64.r2.a0"]),
    ("get_bad_axis", 8, &["axis 5"]),
    ("run_null_kernel", 1, &["sj_kernel_run", "NULL"]),
    ("run_null_args", 1, &["sj_kernel_run", "NULL"]),
    ("pool_null_out", 1, &["sj_pool_new", "NULL"]),
    (
        "pool_too_many_threads",
        10,
        &["sj_pool_new", "5000 threads", "1024"],
    ),
    ("null_tensor", 1, &["args.indices is NULL"]),
    ("wrong_dtype", 3, &["indices", "i32", "i64"]),
    ("wrong_rank", 4, &["out", "rank 1"]),
    ("wrong_out_shape", 5, &["output", "[3, 5]"]),
    (
        "updates_smaller_than_indices",
        5,
        &["updates.shape[0] = 2", ">="],
    ),
    ("negative_dim", 5, &["indices.shape[1] = -2"]),
    ("null_data", 1, &["data.data is NULL"]),
    ("not_cpu", 2, &["out", "device type 2"]),
    (
        "out_overlaps_updates",
        7,
        &["out shares memory with updates"],
    ),
    ("out_overlaps_itself", 7, &["overlap"]),
    ("prepare_null_args", 1, &["sj_prepare", "NULL"]),
    ("prepare_out_overlaps_itself", 7, &["sj_prepare", "overlap"]),
    ("prepared_run_null", 1, &["sj_prepared_run", "NULL"]),
    ("prepared_null_indices", 1, &["indices is NULL"]),
    (
        "prepared_out_overlaps_data",
        7,
        &["out shares memory with data"],
    ),
    ("prepared_bad_index", 6, &["index 4 at indices[2, 0]"]),
    ("prepared_in_place_other_data", 7, &["prepared in place"]),
];

/// The shared library cargo built for this test run: beside the test executable (in
/// `deps/`) or one directory up.
fn cdylib() -> PathBuf {
    let name = format!(
        "{}scatterjit{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the deps directory");
    [deps.join(&name), deps.join("..").join(&name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is not beside {} (crate-type cdylib)", exe.display()))
}

/// Compiles `source` (in tests/c) against include/ and the shared library.
fn build(source: &str, dir: &std::path::Path) -> PathBuf {
    let library = cdylib();
    let binary = dir.join(source.trim_end_matches(".c"));
    let lib_dir = library.parent().expect("the library's directory");
    let rpath = PathBuf::from(format!("-Wl,-rpath,{}", lib_dir.display()));
    compile(
        &[&root().join("tests/c").join(source)],
        &[&root().join("include"), &root().join("tests/c")],
        &[&library, &rpath],
        &binary,
    );
    binary
}

#[test]
fn c_calls_the_shared_library() {
    let dir = scratch("capi");
    let binary = build("capi_test.c", &dir);
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
    assert_eq!(misuses.len(), MISUSES.len(), "{output}");
    for (words, (what, status, mentions)) in misuses.iter().zip(MISUSES) {
        assert_eq!(words[0], *what, "{output}");
        assert_eq!(words[1], status.to_string(), "{what}: status ({output})");
        assert_eq!(words[2], "unchanged", "{what}: out must be unchanged");
        assert_eq!(words[3], "|");
        let message = words[4..].join(" ");
        for m in *mentions {
            assert!(
                message.contains(m),
                "{what}: {message:?} does not mention {m:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's example is `tests/c/capi_example.c`, and it prints what the interpreter
/// computes.
#[test]
fn the_readme_example_runs() {
    assert_readme_shows("capi_example.c");
    let dir = scratch("capi-example");
    let binary = build("capi_example.c", &dir);
    let out = Command::new(&binary).output().expect("run the example");
    assert!(out.status.success(), "{out:?}");
    check_example(&String::from_utf8(out.stdout).expect("UTF-8"));
    let stderr = String::from_utf8(out.stderr).expect("UTF-8");
    assert!(
        stderr.contains("gather: index 3 at indices[1] is out of bounds"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A descriptor whose `ndim` is past the kernel's rank is refused before its shape array is
/// read past that rank: here the array holds the kernel's rank of dims and ends at an
/// inaccessible page. (`sj_kernel_run`'s repeated-call path once copied `ndim` entries
/// before the rank was checked; the `capi` fuzz target found it under AddressSanitizer.)
#[test]
fn an_ndim_past_the_kernels_rank_reads_no_further_than_its_rank() {
    use scatterjit::cabi::{dtype_code, SjArgs, SjTensor, Status, DEVICE_CPU};
    use scatterjit::ffi::{sj_cache_free, sj_cache_new, sj_kernel_free, sj_kernel_get};
    use scatterjit::ir::{DType, MAX_RANK};
    use scatterjit_testkit::guarded::Guarded;

    let cache = sj_cache_new();
    let key = std::ffi::CString::new("gather_elements.f32.i64.r1.a0").unwrap();
    let mut kernel = std::ptr::null_mut();
    // SAFETY: a live cache, a C string, a writable pointer.
    assert_eq!(
        unsafe { sj_kernel_get(cache, key.as_ptr(), &mut kernel) },
        0
    );
    let three = Guarded::new(&3i64.to_le_bytes());
    let mut values = [1.0f32, 2.0, 3.0];
    let mut picks = [2i64, 0, 1];
    let mut out = [0f32; 3];
    let descriptor = |data: *mut u8, dtype: DType| SjTensor {
        data,
        device_type: DEVICE_CPU,
        device_id: 0,
        ndim: 1,
        dtype: dtype_code(dtype).unwrap(),
        shape: three.as_ptr().cast(),
        strides: std::ptr::null(),
        byte_offset: 0,
    };
    let data = descriptor(values.as_mut_ptr().cast(), DType::F32);
    let indices = SjTensor {
        ndim: 2,
        ..descriptor(picks.as_mut_ptr().cast(), DType::I64)
    };
    let out_tensor = descriptor(out.as_mut_ptr().cast(), DType::F32);
    let mut args = SjArgs {
        data: &data,
        indices: &indices,
        updates: std::ptr::null(),
        out: &out_tensor,
        bad_index: [0; MAX_RANK],
        workspace: std::ptr::null_mut(),
        workspace_bytes: 0,
    };
    // Three times: a handle keeps what its calls repeat.
    for _ in 0..3 {
        // SAFETY: a live handle; each shape array holds the kernel's rank of dims.
        let status = unsafe { scatterjit::ffi::sj_kernel_run(kernel, &mut args) };
        assert_eq!(status, Status::Rank as i32);
    }
    // SAFETY: each freed once.
    unsafe {
        sj_kernel_free(kernel);
        sj_cache_free(cache);
    }
}
