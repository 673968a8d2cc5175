//! Resource limits: a call that would allocate more than `Limits` allows is refused before
//! it allocates anything, and an allocation the system refuses is an error, not an abort.
//!
//! "Before it allocates" is measured: this test binary's global allocator is the system's,
//! recording the largest request made on each thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::OsStr;

use scatterjit::ir::{interp, DType, Error as IrError, KernelKey, OpKind, Reduction, Tensor};
use scatterjit::{with_limits, Buffer, Error, KernelCache, Limits, TensorView};

use crate::bad_input::inputs::{filled, sentinel};
use crate::cli::{assert_one_error, assert_success, read, run_binary, Dir};

/// The system allocator, recording the largest request of each thread.
struct Recording;

thread_local! {
    /// Largest allocation requested on this thread since the last [`largest_during`].
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    // `try_with`: a thread's last allocations may come after its locals are gone.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; recording
// a size touches only a const-initialized thread-local `Cell<usize>`, which never allocates.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Recording = Recording;

/// Runs `f` and returns its result with the largest allocation it requested on this thread.
fn largest_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let result = f();
    (result, LARGEST.with(Cell::get))
}

const MIB: usize = 1 << 20;
const DEFAULT_OUTPUT_CAP: u64 = 16 << 30;
const DEFAULT_SCRATCH_CAP: u64 = 64 << 30;

fn over(op: OpKind, buffer: Buffer, bytes: u128, limit: u64) -> Error {
    Error::LimitExceeded {
        op,
        buffer,
        bytes,
        limit,
    }
}

/// One element of `dtype` broadcast to `shape`: a huge operand in a few bytes.
fn broadcast<'a>(dtype: DType, shape: &[usize], element: &'a [u8]) -> TensorView<'a> {
    TensorView::new(dtype, shape, &vec![0; shape.len()], 0, element).expect("a broadcast view")
}

#[test]
fn the_defaults_are_documented_values() {
    let defaults = Limits::default();
    assert_eq!(defaults.max_output_bytes, DEFAULT_OUTPUT_CAP);
    assert_eq!(defaults.max_scratch_bytes, DEFAULT_SCRATCH_CAP);
    // Inside `with_limits`, whatever the process-wide caps are.
    assert_eq!(with_limits(defaults, scatterjit::limits), defaults);
}

#[test]
fn requests_over_the_default_caps_are_refused_without_allocating() {
    with_limits(Limits::default(), || {
        let cache = KernelCache::new();
        let (f32, u8, i64) = (DType::F32, DType::U8, DType::I64);

        // Gather multiplies rows: 8 MiB of data and 64 KiB of indices ask for 32 GiB.
        let data = filled(f32, &[2, 1 << 20], 1);
        let indices = Tensor::zeros(i64, vec![1 << 13]).unwrap();
        let (got, largest) = largest_during(|| scatterjit::gather(&data, &indices, 0));
        let bytes = 1u128 << 35;
        let want = over(OpKind::Gather, Buffer::Output, bytes, DEFAULT_OUTPUT_CAP);
        assert_eq!(got.unwrap_err(), want);
        assert!(largest < MIB, "allocated {largest} bytes");
        assert_eq!(
            want.to_string(),
            "gather: the output needs 34359738368 bytes, over the limit of 17179869184 bytes"
        );

        // Low level, with broadcast views: a scatter's copy of data, a gather_elements
        // output shaped like its indices.
        let one = [0u8; 8];
        let key = KernelKey::scatter_elements(f32, i64, 2, 1, Reduction::Add, true).unwrap();
        let kernel = cache.get(&key).unwrap();
        let huge = broadcast(f32, &[1 << 33, 2], &one[..4]);
        let (ix, up) = (
            Tensor::zeros(i64, vec![1, 1]).unwrap(),
            filled(f32, &[1, 1], 7),
        );
        let (got, largest) =
            largest_during(|| kernel.run(&huge, &(&ix).into(), Some(&(&up).into())));
        let want = over(
            OpKind::ScatterElements,
            Buffer::Output,
            1 << 36,
            DEFAULT_OUTPUT_CAP,
        );
        assert_eq!(got.unwrap_err(), want);
        assert!(largest < MIB, "allocated {largest} bytes");

        let key = KernelKey::gather_elements(f32, i64, 2, 0).unwrap();
        let kernel = cache.get(&key).unwrap();
        let small = filled(f32, &[3, 5], 1);
        let huge = broadcast(i64, &[1 << 33, 2], &one);
        let (got, largest) = largest_during(|| kernel.run(&(&small).into(), &huge, None));
        let want = over(
            OpKind::GatherElements,
            Buffer::Output,
            1 << 36,
            DEFAULT_OUTPUT_CAP,
        );
        assert_eq!(got.unwrap_err(), want);
        assert!(largest < MIB, "allocated {largest} bytes");

        // u8 mean: an 8 GiB output is within its cap, its 128 GiB of sums and counts are
        // not, and neither is allocated.
        let key = KernelKey::scatter_elements(u8, i64, 2, 1, Reduction::Mean, false).unwrap();
        let kernel = cache.get(&key).unwrap();
        let huge = broadcast(u8, &[1 << 33, 1], &one[..1]);
        let up = filled(u8, &[1, 1], 7);
        let (got, largest) =
            largest_during(|| kernel.run(&huge, &(&ix).into(), Some(&(&up).into())));
        let want = over(
            OpKind::ScatterElements,
            Buffer::Scratch,
            1 << 37,
            DEFAULT_SCRATCH_CAP,
        );
        assert_eq!(got.unwrap_err(), want);
        assert!(largest < MIB, "allocated {largest} bytes");
    });
}

#[test]
fn lowered_caps_apply_to_every_entry_point() {
    let (f32, i64) = (DType::F32, DType::I64);
    let cache = KernelCache::new();
    let data = filled(f32, &[3, 5], 1);
    let indices = Tensor::from_slice(&[2, 2], &[0i64, 4, -1, 2]).unwrap();
    let updates = filled(f32, &[2, 2], 7);
    let (dv, iv, uv) = (
        TensorView::from(&data),
        TensorView::from(&indices),
        TensorView::from(&updates),
    );
    // The output is 60 bytes: a cap of 60 admits it, 59 does not.
    let cap = |output: u64, scratch: u64| Limits {
        max_output_bytes: output,
        max_scratch_bytes: scratch,
    };
    let add = KernelKey::scatter_elements(f32, i64, 2, 1, Reduction::Add, true).unwrap();
    let add = cache.get(&add).unwrap();
    with_limits(cap(60, 0), || {
        assert!(add.run(&dv, &iv, Some(&uv)).is_ok());
        assert!(
            scatterjit::scatter_elements(&data, &indices, &updates, 1, Reduction::Add, true)
                .is_ok()
        );
    });
    with_limits(cap(59, u64::MAX), || {
        let want = over(OpKind::ScatterElements, Buffer::Output, 60, 59);
        assert_eq!(add.run(&dv, &iv, Some(&uv)).unwrap_err(), want);
        let got = scatterjit::scatter_elements(&data, &indices, &updates, 1, Reduction::Add, true);
        assert_eq!(got.unwrap_err(), want);
        // Writing into the caller's memory allocates no output: the cap does not apply.
        let mut out = sentinel(f32, &[3, 5]);
        add.run_into(&mut (&mut out).into(), &dv, &iv, Some(&uv))
            .unwrap();
    });

    // f32 mean from data's values sums in the output and keeps an 8-byte count per
    // element: 120 bytes here.
    let mean = KernelKey::scatter_elements(f32, i64, 2, 1, Reduction::Mean, true).unwrap();
    let mean = cache.get(&mean).unwrap();
    with_limits(cap(u64::MAX, 120), || {
        assert!(mean.run(&dv, &iv, Some(&uv)).is_ok());
    });
    with_limits(cap(u64::MAX, 119), || {
        let want = over(OpKind::ScatterElements, Buffer::Scratch, 120, 119);
        assert_eq!(mean.run(&dv, &iv, Some(&uv)).unwrap_err(), want);
        let before = sentinel(f32, &[3, 5]);
        let mut out = before.clone();
        let got = mean.run_into(&mut (&mut out).into(), &dv, &iv, Some(&uv));
        assert_eq!(got.unwrap_err(), want);
        assert_eq!(out, before, "run_into wrote its output");
        let mut target = data.clone();
        let got = mean.scatter_in_place(&mut (&mut target).into(), &iv, &uv);
        assert_eq!(got.unwrap_err(), want);
        assert_eq!(target, data, "scatter_in_place wrote data");
        let got = scatterjit::scatter_(
            &mut (&mut target).into(),
            1,
            &iv,
            &uv,
            Reduction::Mean,
            true,
        );
        assert_eq!(got.unwrap_err(), want);
        assert_eq!(target, data, "scatter_ wrote data");
    });
    // The caps are this thread's: another thread keeps the process-wide ones.
    with_limits(cap(0, 0), || {
        let other = std::thread::scope(|s| s.spawn(scatterjit::limits).join().unwrap());
        assert_eq!(other, scatterjit::Limits::default());
    });
}

#[test]
fn allocation_failure_under_the_cap_is_an_error_not_an_abort() {
    let unlimited = Limits {
        max_output_bytes: u64::MAX,
        max_scratch_bytes: u64::MAX,
    };
    with_limits(unlimited, || {
        // 2^62 bytes: under isize::MAX, so the shape is valid, but beyond any address space.
        let cache = KernelCache::new();
        let key = KernelKey::gather(DType::U8, DType::I64, 2, 1, 0).unwrap();
        let kernel = cache.get(&key).unwrap();
        let one = [0u8; 8];
        let data = broadcast(DType::U8, &[2, 1 << 42], &one[..1]);
        let indices = broadcast(DType::I64, &[1 << 20], &one);
        let got = kernel.run(&data, &indices, None);
        let want = Error::OutOfMemory {
            op: OpKind::Gather,
            buffer: Buffer::Output,
            bytes: 1 << 62,
        };
        assert_eq!(got.unwrap_err(), want);
        assert_eq!(
            want.to_string(),
            "gather: out of memory: cannot allocate 4611686018427387904 bytes for the output"
        );

        let key = KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Mean, true)
            .unwrap();
        let kernel = cache.get(&key).unwrap();
        let data = broadcast(DType::F32, &[1 << 60, 1], &one[..4]);
        let ix = Tensor::zeros(DType::I64, vec![1, 1]).unwrap();
        let up = filled(DType::F32, &[1, 1], 7);
        let got = kernel.run(&data, &(&ix).into(), Some(&(&up).into()));
        let want = Error::OutOfMemory {
            op: OpKind::ScatterElements,
            buffer: Buffer::Output,
            bytes: 1 << 62,
        };
        assert_eq!(got.unwrap_err(), want);
    });
    // Owned tensors: the op IR's constructors fail the same way.
    let got = Tensor::zeros(DType::U8, vec![1 << 62]);
    assert_eq!(got.unwrap_err(), IrError::OutOfMemory { bytes: 1 << 62 });
}

/// The per-thread partial outputs of a histogram (a scatter that can be split only along
/// its axis) are scratch: under a scratch cap too small for them the call runs unsplit, with
/// the same result, and allocates none of them.
#[test]
fn partial_outputs_stay_under_the_scratch_cap() {
    let key =
        KernelKey::scatter_elements(DType::I32, DType::I64, 1, 0, Reduction::Add, true).unwrap();
    let kernel = KernelCache::new().get(&key).unwrap();
    // 64 KiB of bins, 2^18 updates: three chunks on three threads, each with its own bins.
    let (bins, n) = (1usize << 14, 1usize << 18);
    let positions: Vec<i64> = (0..n).map(|i| (i * 7919 % bins) as i64).collect();
    let indices = Tensor::from_slice(&[n], &positions).unwrap();
    let updates = Tensor::from_slice(&[n], &vec![3i32; n]).unwrap();
    let data = filled(DType::I32, &[bins], 1);
    let expected = interp::run(&key.op(), &data, &indices, Some(&updates)).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let run = |limits| {
        pool.install(|| {
            with_limits(limits, || {
                let mut out = Tensor::zeros(DType::I32, vec![bins]).unwrap();
                let (result, largest) = largest_during(|| {
                    kernel.run_into(
                        &mut (&mut out).into(),
                        &(&data).into(),
                        &(&indices).into(),
                        Some(&(&updates).into()),
                    )
                });
                result.unwrap();
                (out, largest)
            })
        })
    };
    let bin_bytes = bins * 4;
    let (split, largest) = run(Limits::default());
    assert_eq!(split, expected);
    assert!(largest >= bin_bytes, "no partial outputs: {largest} bytes");
    let small = Limits {
        max_scratch_bytes: 1024,
        ..Limits::default()
    };
    let (unsplit, largest) = run(small);
    assert_eq!(unsplit, expected);
    assert!(
        largest < bin_bytes,
        "{largest} bytes under a 1 KiB scratch cap"
    );
}

/// A scatter into a destination small beside its indices runs into a copy of it, which is
/// scratch. Under a cap that the copy fits but `mean`'s counts do not, a bad index is still
/// the error, as where the call checks first, and the output is left as it was; with no
/// bad index, the cap is the error.
#[test]
fn a_bad_index_comes_before_scratch_refused_beside_a_small_destination_copy() {
    let key =
        KernelKey::scatter_elements(DType::F32, DType::I64, 1, 0, Reduction::Mean, true).unwrap();
    let kernel = KernelCache::new().get(&key).unwrap();
    // 4 KiB of bins (the copy), 8 KiB of counts, 128 KiB of indices.
    let (bins, n) = (1usize << 10, 1usize << 14);
    let data = filled(DType::F32, &[bins], 1);
    let updates = Tensor::from_slice(&[n], &vec![0.5f32; n]).unwrap();
    let cap = Limits {
        max_scratch_bytes: (bins * 4) as u64,
        ..Limits::default()
    };
    let run = |positions: &[i64]| {
        let indices = Tensor::from_slice(&[n], positions).unwrap();
        let mut out = filled(DType::F32, &[bins], 2);
        let before = out.clone();
        let result = with_limits(cap, || {
            kernel.run_into(
                &mut (&mut out).into(),
                &(&data).into(),
                &(&indices).into(),
                Some(&(&updates).into()),
            )
        });
        assert_eq!(out, before, "a failed call changed its output");
        result.unwrap_err()
    };
    let mut positions: Vec<i64> = (0..n).map(|i| (i * 7919 % bins) as i64).collect();
    assert!(matches!(
        run(&positions),
        Error::LimitExceeded {
            buffer: Buffer::Scratch,
            ..
        }
    ));
    positions[n - 1] = bins as i64;
    match run(&positions) {
        Error::Invalid(IrError::IndexOutOfBounds {
            index, position, ..
        }) => {
            assert_eq!((index, position), (bins as i128, vec![n - 1]));
        }
        e => panic!("want the bad index, got {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// The command line: --max-output-bytes, --max-scratch-bytes

#[test]
fn cli_limits() {
    let dir = Dir::new("cli_limits");
    let data = dir.npy("data.npy", &filled(DType::F32, &[2, 3], 1));
    let indices = dir.npy(
        "indices.npy",
        &Tensor::from_slice(&[2], &[1i64, 0]).unwrap(),
    );
    let rows = dir.npy(
        "rows.npy",
        &Tensor::from_slice(&[1, 3], &[1i64, 0, 1]).unwrap(),
    );
    let updates = dir.npy("updates.npy", &filled(DType::F32, &[1, 3], 7));
    let out = dir.path("out.npy");
    let run = |extra: &[&str], op: &str, files: &[&OsStr]| {
        let mut argv: Vec<&OsStr> = vec![OsStr::new("run"), OsStr::new(op)];
        argv.extend(extra.iter().map(OsStr::new));
        argv.extend(files);
        argv.extend([OsStr::new("-o"), out.as_os_str()]);
        run_binary(&argv)
    };
    let gather = [data.as_os_str(), indices.as_os_str()];
    // The gather's output is [2, 3] f32: 24 bytes.
    assert_success(&run(&["--max-output-bytes", "24"], "gather", &gather));
    assert_eq!(read(&out).tensor.shape(), [2, 3]);
    std::fs::remove_file(&out).unwrap();
    let failed = run(&["--max-output-bytes", "23"], "gather", &gather);
    assert_eq!(failed.status.code(), Some(1));
    assert_eq!(
        assert_one_error(&failed),
        "error: gather: the output needs 24 bytes, over the limit of 23 bytes (raise it with --max-output-bytes)"
    );
    assert!(!out.exists());

    // mean over f32 [2, 3] from data's values: the sums are the output, 6 x 8 = 48 bytes
    // of counts.
    let scatter = [data.as_os_str(), rows.as_os_str(), updates.as_os_str()];
    let mean = ["--reduction", "mean", "--max-scratch-bytes"];
    let with = |v: &'static str| [mean[0], mean[1], mean[2], v];
    assert_success(&run(&with("48"), "scatter-elements", &scatter));
    std::fs::remove_file(&out).unwrap();
    let failed = run(&with("47"), "scatter-elements", &scatter);
    assert_eq!(
        assert_one_error(&failed),
        "error: scatter_elements: the scratch needs 48 bytes, over the limit of 47 bytes (raise it with --max-scratch-bytes)"
    );
    assert!(!out.exists());

    // Suffixes are powers of 1024; anything else is a usage error.
    assert_success(&run(&["--max-output-bytes", "1K"], "gather", &gather));
    std::fs::remove_file(&out).unwrap();
    for bad in ["1Q", "-1", "", "16GB", "99999999999T"] {
        let flag = format!("--max-output-bytes={bad}");
        let failed = run(&[&flag], "gather", &gather);
        assert_eq!(failed.status.code(), Some(2), "{bad:?}");
        let line = assert_one_error(&failed);
        assert!(line.contains("--max-output-bytes"), "{line}");
        assert!(!out.exists());
    }

    // The default cap refuses Gather's amplification: 2 MiB of data and 256 KiB of
    // indices ask for 32 GiB.
    let big = dir.npy("big.npy", &filled(DType::F32, &[2, 1 << 18], 1));
    let many = dir.npy(
        "many.npy",
        &Tensor::zeros(DType::I64, vec![1 << 15]).unwrap(),
    );
    let failed = run(&[], "gather", &[big.as_os_str(), many.as_os_str()]);
    assert_eq!(
        assert_one_error(&failed),
        "error: gather: the output needs 34359738368 bytes, over the limit of 17179869184 bytes (raise it with --max-output-bytes)"
    );
    assert!(!out.exists());
}
