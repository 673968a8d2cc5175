//! Per-call overhead on tiny tensors, where the work itself is tens of nanoseconds: what a
//! framework pays per graph node. Each case runs as a free function (owned tensors, the
//! process-wide cache), as `Kernel::run_into` and `Kernel::run` (a new output) on views
//! made once, as a prepared call
//! (`Prepared::run_into` on byte buffers), and through the C ABI: `sj_kernel_run` on
//! descriptors made once, and `sj_prepared_run` on the buffers of a call prepared once;
//! the scatter also as the free function `scatter_`, in place on views made once.
//! The forms run interleaved, round after round, and each prints the median time per call
//! over the rounds; every form's output is first checked against the free function's.
//!
//! ```text
//! cargo run --release -p scatterjit --example overhead [rounds] [calls per round]
//! ```
//!
//! Run it on one thread (`RAYON_NUM_THREADS=1`) or on the default pool: tiny calls stay on
//! the calling thread either way.

use std::ffi::CString;
use std::hint::black_box;
use std::time::Instant;

use scatterjit::cabi::{dtype_code, SjArgs, SjTensor, DEVICE_CPU};
use scatterjit::ffi::{
    sj_cache_new, sj_kernel_get, sj_kernel_run, sj_prepare, sj_prepared_run, SjPrepared,
};
use scatterjit::ir::MAX_RANK;
use scatterjit::{
    DType, Geometry, KernelCache, KernelKey, Reduction, Tensor, TensorView, TensorViewMut,
};

/// Little-endian bytes of a slice of numbers.
fn bytes<T: Copy, const N: usize>(values: &[T], to_le: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to_le(v)).collect()
}

/// A calling form: its label, and a closure that runs one call.
type Form = (&'static str, Box<dyn FnMut()>);

/// One tiny case in its forms.
struct Case {
    name: &'static str,
    forms: Vec<Form>,
}

/// A row-major descriptor of a copy of `bytes`; both live for the whole run.
fn descriptor(dtype: DType, shape: &[usize], bytes: &[u8]) -> *const SjTensor {
    let shape: &'static [i64] = shape.iter().map(|&d| d as i64).collect::<Vec<_>>().leak();
    let data: &'static mut [u8] = bytes.to_vec().leak();
    Box::leak(Box::new(SjTensor {
        data: data.as_mut_ptr(),
        device_type: DEVICE_CPU,
        device_id: 0,
        ndim: shape.len() as i32,
        dtype: dtype_code(dtype).expect("a numeric dtype"),
        shape: shape.as_ptr(),
        strides: std::ptr::null(),
        byte_offset: 0,
    }))
}

/// The C ABI's forms of one call of `key`: `sj_kernel_run` on `sj_args` made once, and
/// `sj_prepared_run` on the same buffers (another `out`) of a call `sj_prepare` made once.
/// Each descriptor is (dtype, shape, bytes); both forms' outputs must equal `want`.
fn c_abi_forms(
    key: &KernelKey,
    tensors: [(DType, &[usize], &[u8]); 3],
    updates: Option<(DType, &[usize], &[u8])>,
    want: &[u8],
) -> [Form; 2] {
    let [(dt, ds, db), (it, is, ib), (ot, os, ob)] = tensors;
    let cache = sj_cache_new();
    let mut kernel = std::ptr::null_mut();
    let key_text = CString::new(key.to_string()).unwrap();
    // SAFETY: a live cache, a C string, a writable pointer.
    assert_eq!(
        unsafe { sj_kernel_get(cache, key_text.as_ptr(), &mut kernel) },
        0
    );
    let args: &'static mut SjArgs = Box::leak(Box::new(SjArgs {
        data: descriptor(dt, ds, db),
        indices: descriptor(it, is, ib),
        updates: updates.map_or(std::ptr::null(), |(ut, us, ub)| descriptor(ut, us, ub)),
        out: descriptor(ot, os, ob),
        bad_index: [0; MAX_RANK],
        workspace: std::ptr::null_mut(),
        workspace_bytes: 0,
    }));
    let mut prepared: *mut SjPrepared = std::ptr::null_mut();
    // SAFETY: a live kernel and valid descriptors; `prepared` is writable.
    assert_eq!(unsafe { sj_prepare(kernel, args, &mut prepared) }, 0);
    let prepared_out: &'static mut [u8] = vec![0u8; ob.len()].leak();
    let prepared_out = prepared_out.as_mut_ptr();
    // SAFETY (both closures): the descriptors and buffers are leaked, so live for the
    // whole run; the prepared call's buffers are those its descriptors describe.
    let (data, indices, out) =
        unsafe { ((*args.data).data, (*args.indices).data, (*args.out).data) };
    let updates = args.updates;
    let args: *mut SjArgs = args;
    let run = move || unsafe { sj_kernel_run(kernel, args) };
    let run_prepared = move || unsafe {
        let updates = updates.as_ref().map_or(std::ptr::null_mut(), |u| u.data);
        sj_prepared_run(
            prepared,
            prepared_out,
            data,
            indices,
            updates,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(run(), 0);
    assert_eq!(run_prepared(), 0);
    // SAFETY: the out buffers hold `want.len()` bytes.
    unsafe {
        assert_eq!(std::slice::from_raw_parts(out, want.len()), want);
        assert_eq!(std::slice::from_raw_parts(prepared_out, want.len()), want);
    }
    [
        (
            "sj_kernel_run (C ABI)",
            Box::new(move || assert_eq!(run(), 0)),
        ),
        (
            "sj_prepared_run (C ABI)",
            Box::new(move || assert_eq!(run_prepared(), 0)),
        ),
    ]
}

fn gather_rows() -> Case {
    // 8 rows of a [1000, 64] f32 table along axis 0, i64 indices.
    let table: Vec<f32> = (0..1000 * 64).map(|i| i as f32 * 0.5).collect();
    let picks: Vec<i64> = vec![3, 999, 0, 17, -1, 500, 42, 3];
    let data = Tensor::from_slice(&[1000, 64], &table).unwrap();
    let indices = Tensor::from_slice(&[8], &picks).unwrap();
    let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 0).unwrap();
    let kernel = KernelCache::global().get(&key).unwrap();
    let want = scatterjit::gather(&data, &indices, 0).unwrap();

    let (data_bytes, index_bytes) = (
        bytes(&table, f32::to_le_bytes),
        bytes(&picks, i64::to_le_bytes),
    );
    let mut out_view_bytes = vec![0u8; 8 * 64 * 4];
    let mut out_prepared = vec![0u8; 8 * 64 * 4];
    let prepared = kernel
        .prepare(
            &Geometry::row_major(&[8, 64]),
            &Geometry::row_major(&[1000, 64]),
            &Geometry::row_major(&[8]),
            None,
        )
        .unwrap();
    {
        let dv = TensorView::contiguous(DType::F32, &[1000, 64], &data_bytes).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[8], &index_bytes).unwrap();
        let mut ov =
            TensorViewMut::new(DType::F32, &[8, 64], &[64, 1], 0, &mut out_view_bytes).unwrap();
        kernel.run_into(&mut ov, &dv, &iv, None).unwrap();
        prepared
            .run_into(&mut out_prepared, &data_bytes, &index_bytes, None)
            .unwrap();
        assert_eq!(out_view_bytes, want.bytes());
        assert_eq!(out_prepared, want.bytes());
    }
    let [c_run, c_prepared] = c_abi_forms(
        &key,
        [
            (DType::F32, &[1000, 64], &data_bytes),
            (DType::I64, &[8], &index_bytes),
            (DType::F32, &[8, 64], &out_view_bytes),
        ],
        None,
        want.bytes(),
    );
    let run_into = {
        // Views made once, over buffers that live for the whole run.
        let data_bytes: &'static [u8] = data_bytes.clone().leak();
        let index_bytes: &'static [u8] = index_bytes.clone().leak();
        let out_bytes: &'static mut [u8] = out_view_bytes.leak();
        let dv = TensorView::contiguous(DType::F32, &[1000, 64], data_bytes).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[8], index_bytes).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[8, 64], &[64, 1], 0, out_bytes).unwrap();
        let kernel = kernel.clone();
        move || kernel.run_into(&mut ov, &dv, &iv, None).unwrap()
    };
    let run = {
        let data_bytes: &'static [u8] = data_bytes.clone().leak();
        let index_bytes: &'static [u8] = index_bytes.clone().leak();
        let dv = TensorView::contiguous(DType::F32, &[1000, 64], data_bytes).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[8], index_bytes).unwrap();
        assert_eq!(kernel.run(&dv, &iv, None).unwrap(), want);
        let kernel = kernel.clone();
        move || {
            black_box(kernel.run(&dv, &iv, None).unwrap());
        }
    };
    Case {
        name: "gather 8 rows of [1000, 64] f32, i64 indices",
        forms: vec![
            (
                "free function",
                Box::new(move || {
                    black_box(scatterjit::gather(&data, &indices, 0).unwrap());
                }),
            ),
            ("Kernel::run_into (views made once)", Box::new(run_into)),
            ("Kernel::run (views made once)", Box::new(run)),
            (
                "Prepared::run_into",
                Box::new(move || {
                    prepared
                        .run_into(&mut out_prepared, &data_bytes, &index_bytes, None)
                        .unwrap();
                }),
            ),
            c_run,
            c_prepared,
        ],
    }
}

fn scatter_add() -> Case {
    // [4, 16] updates added into [16, 16] f32 along axis 0.
    let start: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let picks: Vec<i64> = (0..64).map(|i| (i * 7 % 16) as i64).collect();
    let adds: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
    let data = Tensor::from_slice(&[16, 16], &start).unwrap();
    let indices = Tensor::from_slice(&[4, 16], &picks).unwrap();
    let updates = Tensor::from_slice(&[4, 16], &adds).unwrap();
    let key =
        KernelKey::scatter_elements(DType::F32, DType::I64, 2, 0, Reduction::Add, true).unwrap();
    let kernel = KernelCache::global().get(&key).unwrap();
    let want =
        scatterjit::scatter_elements(&data, &indices, &updates, 0, Reduction::Add, true).unwrap();

    let data_bytes = bytes(&start, f32::to_le_bytes);
    let index_bytes = bytes(&picks, i64::to_le_bytes);
    let update_bytes = bytes(&adds, f32::to_le_bytes);
    let out_view_bytes = vec![0u8; 256 * 4];
    let mut out_prepared = vec![0u8; 256 * 4];
    let prepared = kernel
        .prepare(
            &Geometry::row_major(&[16, 16]),
            &Geometry::row_major(&[16, 16]),
            &Geometry::row_major(&[4, 16]),
            Some(&Geometry::row_major(&[4, 16])),
        )
        .unwrap();
    prepared
        .run_into(
            &mut out_prepared,
            &data_bytes,
            &index_bytes,
            Some(&update_bytes),
        )
        .unwrap();
    assert_eq!(out_prepared, want.bytes());
    let [c_run, c_prepared] = c_abi_forms(
        &key,
        [
            (DType::F32, &[16, 16], &data_bytes),
            (DType::I64, &[4, 16], &index_bytes),
            (DType::F32, &[16, 16], &out_view_bytes),
        ],
        Some((DType::F32, &[4, 16], &update_bytes)),
        want.bytes(),
    );
    let run_into = {
        // Views made once, over buffers that live for the whole run.
        let data_bytes: &'static [u8] = data_bytes.clone().leak();
        let index_bytes: &'static [u8] = index_bytes.clone().leak();
        let update_bytes: &'static [u8] = update_bytes.clone().leak();
        let out_bytes: &'static mut [u8] = out_view_bytes.leak();
        let dv = TensorView::contiguous(DType::F32, &[16, 16], data_bytes).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[4, 16], index_bytes).unwrap();
        let uv = TensorView::contiguous(DType::F32, &[4, 16], update_bytes).unwrap();
        let mut ov = TensorViewMut::new(DType::F32, &[16, 16], &[16, 1], 0, out_bytes).unwrap();
        kernel.run_into(&mut ov, &dv, &iv, Some(&uv)).unwrap();
        assert_eq!(
            ov.as_view().to_tensor().expect("the output fits in memory"),
            want
        );
        let kernel = kernel.clone();
        move || kernel.run_into(&mut ov, &dv, &iv, Some(&uv)).unwrap()
    };
    let run = {
        let data_bytes: &'static [u8] = data_bytes.clone().leak();
        let index_bytes: &'static [u8] = index_bytes.clone().leak();
        let update_bytes: &'static [u8] = update_bytes.clone().leak();
        let dv = TensorView::contiguous(DType::F32, &[16, 16], data_bytes).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[4, 16], index_bytes).unwrap();
        let uv = TensorView::contiguous(DType::F32, &[4, 16], update_bytes).unwrap();
        assert_eq!(kernel.run(&dv, &iv, Some(&uv)).unwrap(), want);
        let kernel = kernel.clone();
        move || {
            black_box(kernel.run(&dv, &iv, Some(&uv)).unwrap());
        }
    };
    let in_place = {
        // `scatter_` on views made once; each call adds into what the last one left.
        let data_bytes: &'static mut [u8] = data_bytes.clone().leak();
        let index_bytes: &'static [u8] = index_bytes.clone().leak();
        let update_bytes: &'static [u8] = update_bytes.clone().leak();
        let mut dv = TensorViewMut::new(DType::F32, &[16, 16], &[16, 1], 0, data_bytes).unwrap();
        let iv = TensorView::contiguous(DType::I64, &[4, 16], index_bytes).unwrap();
        let uv = TensorView::contiguous(DType::F32, &[4, 16], update_bytes).unwrap();
        scatterjit::scatter_(&mut dv, 0, &iv, &uv, Reduction::Add, true).unwrap();
        assert_eq!(dv.as_view().to_tensor().expect("data fits in memory"), want);
        move || scatterjit::scatter_(&mut dv, 0, &iv, &uv, Reduction::Add, true).unwrap()
    };
    Case {
        name: "scatter add [4, 16] into [16, 16] f32, i64 indices",
        forms: vec![
            (
                "free function",
                Box::new(move || {
                    black_box(
                        scatterjit::scatter_elements(
                            &data,
                            &indices,
                            &updates,
                            0,
                            Reduction::Add,
                            true,
                        )
                        .unwrap(),
                    );
                }),
            ),
            ("Kernel::run_into (views made once)", Box::new(run_into)),
            ("Kernel::run (views made once)", Box::new(run)),
            (
                "Prepared::run_into",
                Box::new(move || {
                    prepared
                        .run_into(
                            &mut out_prepared,
                            &data_bytes,
                            &index_bytes,
                            Some(&update_bytes),
                        )
                        .unwrap();
                }),
            ),
            c_run,
            c_prepared,
            ("scatter_ in place (views made once)", Box::new(in_place)),
        ],
    }
}

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let rounds = args.next().unwrap_or(21);
    let calls = args.next().unwrap_or(20_000);
    println!(
        "{rounds} rounds of {calls} calls per form, interleaved; {} rayon threads",
        rayon::current_num_threads()
    );
    for mut case in [gather_rows(), scatter_add()] {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); case.forms.len()];
        for _ in 0..rounds {
            for (f, (_, form)) in case.forms.iter_mut().enumerate() {
                let start = Instant::now();
                for _ in 0..calls {
                    form();
                }
                times[f].push(start.elapsed().as_nanos() as f64 / calls as f64);
            }
        }
        println!("{}", case.name);
        for ((label, _), mut t) in case.forms.iter().zip(times) {
            t.sort_by(f64::total_cmp);
            let median = t[t.len() / 2];
            println!(
                "  {label:<40} median {median:>7.0} ns/call (min {:.0}, max {:.0})",
                t[0],
                t[t.len() - 1]
            );
        }
    }
}
