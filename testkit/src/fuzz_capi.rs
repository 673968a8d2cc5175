//! The body of the `capi` fuzz target: the exported `sj_*` functions of the C ABI
//! (`scatterjit::ffi`, declared in `include/scatterjit.h`) on hostile descriptors, checked
//! against the Rust API on the same input. Calls run inside a rayon pool of three or, now
//! and then, from the fuzzing thread lent a pool of three by `sj_use_pool`.
//!
//! The fuzzer hands wild geometry, never wild pointers: every descriptor the library
//! could accept points into a real buffer that holds every byte its shape, strides and
//! byte offset reach (descriptors reaching more than [`MAX_REACH`] bytes get zero strides
//! on their widest dims until they fit). Descriptors the library must refuse before
//! touching memory (a reach past `isize::MAX`, NULL data with elements) point anywhere.
//!
//! Not a stable API: the byte layout changes whenever the target does.

use scatterjit::cabi::{dtype_code, dtype_of_code, SjArgs, SjTensor, Status, DEVICE_CPU};
use scatterjit::ffi::{
    sj_cache_free, sj_cache_new, sj_kernel_free, sj_kernel_get, sj_kernel_run, sj_last_error,
    sj_pool_new, sj_prepare, sj_prepared_free, sj_prepared_run, sj_use_pool, SjCache, SjKernel,
    SjPool,
};
use scatterjit::ir::{
    checked_numel, row_major_strides, DType, Error as IrError, KernelKey, Meta, OpKind, Reduction,
    MAX_RANK,
};
use scatterjit::{Error, KernelCache, TensorView, TensorViewMut};

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, OnceLock};

use crate::fuzzing::{
    any_dim, any_stride, check_message, element, index_element, pools, Choices, KEYS_HELD,
};

/// The most bytes one descriptor may reach.
pub const MAX_REACH: usize = 1 << 14;

/// Calls with more index elements than this are validated but not run (a huge broadcast
/// `indices` is a valid problem, only a slow one).
const MAX_RUN_ELEMENTS: usize = 1 << 14;

// The operands of a call, in `sj_args` order.
const DATA: usize = 0;
const INDICES: usize = 1;
const UPDATES: usize = 2;
const OUT: usize = 3;

/// A C ABI handle kept for the whole process: a cache or a pool, both shared between
/// threads by design.
struct Shared<T>(*mut T);
// SAFETY: `T` is `SjCache` or `SjPool`, which the C ABI shares between threads (a
// `KernelCache`, a rayon pool); the pointer is only handed to the `sj_*` functions.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

/// The C ABI's own cache, one per process like a C caller's.
fn c_cache() -> *mut SjCache {
    static CACHE: OnceLock<Shared<SjCache>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let cache = sj_cache_new();
            // SAFETY: a live cache from sj_cache_new (NULL only if allocation failed).
            if let Some(c) = unsafe { cache.as_ref() } {
                c.kernels().set_capacity(KEYS_HELD);
            }
            Shared(cache)
        })
        .0
}

/// A pool of three threads made through the C ABI, which some calls run on from the
/// fuzzing thread (`sj_use_pool`) instead of inside a rayon pool of three.
fn c_pool() -> *const SjPool {
    static POOL: OnceLock<Shared<SjPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = std::ptr::null_mut();
        // SAFETY: a writable pointer.
        let status = unsafe { sj_pool_new(3, &mut pool) };
        assert_eq!(status, Status::Ok as i32, "sj_pool_new: {}", last_error());
        Shared(pool)
    })
    .0
}

/// The kernel cache behind [`c_cache`]: the Rust API's answers use its kernels, so that a
/// key compiles once for both sides (the kernels themselves are the `differential`
/// target's subject; this one checks what the C ABI makes of descriptors).
fn c_kernels() -> &'static KernelCache {
    // SAFETY: `c_cache` is live for the process's lifetime and never freed.
    unsafe { &*c_cache() }.kernels()
}

/// `sj_last_error()` as a string.
fn last_error() -> String {
    // SAFETY: sj_last_error returns this thread's NUL-terminated message.
    unsafe { CStr::from_ptr(sj_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// After a failed call of `function`: the message names it and is one lowercase line.
fn check_last_error(function: &str) {
    check_error_message(function, &last_error());
}

fn check_error_message(function: &str, message: &str) {
    let rest = message
        .strip_prefix(&format!("{function}: "))
        .unwrap_or_else(|| panic!("{function} failed with message {message:?}"));
    check_message(rest);
}

/// A key's text as the printer would write it from possibly invalid parts, sometimes with a
/// byte changed; its status is whatever parsing and the Rust cache say.
fn key_text(c: &mut Choices) -> String {
    let kind = c.pick(OpKind::ALL);
    let b = c.byte();
    let dtype = if b < 248 {
        let values: Vec<DType> = DType::ALL
            .iter()
            .copied()
            .filter(|&d| d != DType::String)
            .collect();
        values[usize::from(b) % values.len()]
    } else {
        DType::String
    };
    let b = c.byte();
    let ints: Vec<DType> = DType::ALL
        .iter()
        .copied()
        .filter(|d| d.is_integer())
        .collect();
    let index_dtype = if b < 240 {
        ints[usize::from(b) % ints.len()]
    } else {
        DType::ALL[usize::from(b) % DType::ALL.len()]
    };
    let b = c.byte();
    let rank = if b < 240 {
        1 + usize::from(b % 4)
    } else {
        [0, MAX_RANK, MAX_RANK + 1, 255][usize::from(b % 4)]
    };
    let q = c.below(3);
    let b = c.byte();
    let axis = if b < 240 {
        (usize::from(b) % (rank + 1)).to_string()
    } else {
        ["-1", "18446744073709551615", "9", "x", ""][usize::from(b % 5)].to_string()
    };
    let reduction = c.pick(Reduction::ALL);
    let mut text = format!("{kind}.{dtype}.{index_dtype}.r{rank}");
    if kind == OpKind::Gather {
        text += &format!(".q{q}");
    }
    text += &format!(".a{axis}");
    if kind == OpKind::ScatterElements {
        text += &format!(".{reduction}");
        if c.byte() < 64 {
            text += ".noinit";
        }
    }
    if c.byte() >= 248 {
        let mut bytes = text.into_bytes();
        let at = c.below(bytes.len() + 1);
        let b = c.byte();
        if at < bytes.len() {
            bytes[at] = b;
        } else {
            bytes.push(b);
        }
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

/// One descriptor as the fuzzer wants it, before it is placed in memory.
#[derive(Clone, Debug)]
struct Desc {
    /// The `sj_args` field is NULL.
    null: bool,
    device: i32,
    /// The dtype the elements are drawn as, and the code the descriptor claims.
    dtype: DType,
    code: u32,
    ndim: i32,
    shape: Vec<i64>,
    shape_null: bool,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    data_null: bool,
}

/// What a descriptor reaches: nothing (a zero dim), more than any buffer, or `len` bytes
/// from `first` (relative to `data`), with position 0 at element `offset` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    Nothing,
    TooFar,
    Bytes {
        first: isize,
        len: usize,
        offset: usize,
    },
}

impl Desc {
    fn dims(&self) -> Vec<usize> {
        self.shape.iter().map(|&d| d as usize).collect()
    }

    /// The element strides the library reads (row-major when NULL).
    fn element_strides(&self) -> Vec<isize> {
        match &self.strides {
            Some(s) => s.iter().map(|&s| s as isize).collect(),
            None => row_major_strides(&self.dims())
                .iter()
                .map(|&s| s as isize)
                .collect(),
        }
    }

    fn reach(&self) -> Reach {
        let dims = self.dims();
        if dims.contains(&0) {
            return Reach::Nothing;
        }
        let size = self.dtype.size() as i128;
        // Checked: dims and strides near 2^63 overflow even an i128 sum.
        let mut sums = Some((0i128, 0i128));
        for (&d, &s) in dims.iter().zip(&self.element_strides()) {
            let reach = (d as i128 - 1) * s as i128;
            sums = sums.and_then(|(lo, hi)| {
                if reach < 0 {
                    Some((lo.checked_add(reach)?, hi))
                } else {
                    Some((lo, hi.checked_add(reach)?))
                }
            });
        }
        let bytes = sums.and_then(|(lo, hi)| {
            let first = i128::from(self.byte_offset).checked_add(lo.checked_mul(size)?)?;
            let len = hi.checked_sub(lo)?.checked_add(1)?.checked_mul(size)?;
            Some((lo, first, len))
        });
        let Some((lo, first, len)) = bytes else {
            return Reach::TooFar;
        };
        if len > isize::MAX as i128 || first.abs() > isize::MAX as i128 {
            return Reach::TooFar;
        }
        Reach::Bytes {
            first: first as isize,
            len: len as usize,
            offset: (-lo) as usize,
        }
    }

    /// Zeroes the stride of the dim reaching furthest until the reach fits [`MAX_REACH`].
    fn fit(&mut self) {
        while let Reach::Bytes { len, .. } = self.reach() {
            if len <= MAX_REACH {
                return;
            }
            let dims = self.dims();
            let mut strides: Vec<i64> = self.element_strides().iter().map(|&s| s as i64).collect();
            let widest = (0..dims.len())
                .max_by_key(|&d| (dims[d] as i128 - 1) * i128::from(strides[d]).abs())
                .expect("a reach over one element has a dim");
            strides[widest] = 0;
            self.strides = Some(strides);
        }
    }

    /// The status `describe` gives this descriptor for a kernel taking `rank` and `dtype`
    /// (`None`: accepted).
    fn refusal(&self, rank: usize, dtype: DType) -> Option<Status> {
        if self.null {
            return Some(Status::NullPointer);
        }
        if self.device != DEVICE_CPU {
            return Some(Status::Device);
        }
        if dtype_of_code(self.code) != Some(dtype) {
            return Some(Status::DType);
        }
        if usize::try_from(self.ndim) != Ok(rank) {
            return Some(Status::Rank);
        }
        if rank > 0 && self.shape_null {
            return Some(Status::NullPointer);
        }
        if self.shape.iter().any(|&d| d < 0) {
            return Some(Status::Shape);
        }
        match self.reach() {
            Reach::Nothing => None,
            _ if self.data_null => Some(Status::NullPointer),
            Reach::TooFar => Some(Status::Shape),
            Reach::Bytes { .. } => None,
        }
    }
}

/// A descriptor for an operand of `dtype` with `dims`, mostly right, sometimes broken in
/// one or more ways.
fn descriptor(c: &mut Choices, dtype: DType, dims: &[usize], writable: bool) -> Desc {
    let rank = dims.len();
    // Never on the zeros past the input's end, so a short input calls with sane descriptors.
    let rare = |c: &mut Choices, one_in: u8| c.byte() % one_in == one_in - 1;
    let null = rare(c, 64);
    let device = if rare(c, 32) {
        c.pick(&[0, 2, -1, i32::MAX, i32::MIN, 13])
    } else {
        DEVICE_CPU
    };
    let code = if rare(c, 32) {
        match c.byte() % 4 {
            0 => c.u64() as u32,
            // Two lanes of the right type.
            1 => dtype_code(dtype).unwrap_or(0) + (1 << 16),
            _ => dtype_code(c.pick(DType::ALL)).unwrap_or(0),
        }
    } else {
        dtype_code(dtype).unwrap_or(0)
    };
    let ndim = if rare(c, 32) {
        c.pick(&[
            0,
            rank as i32 + 1,
            rank as i32 - 1,
            MAX_RANK as i32 + 1,
            -1,
            i32::MIN,
            i32::MAX,
        ])
    } else {
        rank as i32
    };
    let shape: Vec<i64> = dims
        .iter()
        .map(|&d| {
            if rare(c, 32) {
                match c.byte() % 4 {
                    0 => c.pick(&[-1, i64::MIN, -(1 << 32)]),
                    1 => any_dim(c) as i64,
                    _ => c.below(6) as i64,
                }
            } else {
                d as i64
            }
        })
        .collect();
    let shape_null = rare(c, 64);
    let strides = match c.byte() % 8 {
        0..=2 => None,
        3 => Some((0..rank).map(|_| any_stride(c) as i64).collect()),
        _ => Some(layout(c, &shape, writable)),
    };
    let size = dtype.size().max(1) as u64;
    let byte_offset = match c.byte() {
        0..=159 => 0,
        160..=231 => size * c.below(8) as u64,
        232..=247 => c.below(64) as u64,
        _ => c.pick(&[u64::MAX, 1 << 63, (1 << 63) - 1, 1 << 40, 1 << 32]),
    };
    let data_null = rare(c, 32);
    let mut desc = Desc {
        null,
        device,
        dtype,
        code,
        ndim,
        shape,
        shape_null,
        strides,
        byte_offset,
        data_null,
    };
    desc.fit();
    desc
}

/// Element strides nesting the dims in a chosen order, each padded by up to two elements
/// and possibly walked backwards; read-only operands may broadcast (stride 0), size-1 dims
/// take any stride.
fn layout(c: &mut Choices, shape: &[i64], writable: bool) -> Vec<i64> {
    let rank = shape.len();
    let mut order: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        order.swap(i, c.below(i + 1));
    }
    let mut strides = vec![0i64; rank];
    let mut extent = 1i64;
    for &d in order.iter().rev() {
        let choice = c.byte();
        let n = shape[d].clamp(0, 1 << 20);
        if n == 1 && choice >= 0xE0 {
            strides[d] = [0, 1, -1, i64::MAX, i64::MIN, 7, -3, 1 << 40][usize::from(choice % 8)];
            continue;
        }
        if (!writable || choice >= 0xF8) && choice % 4 == 0 {
            strides[d] = 0;
            continue;
        }
        strides[d] = if choice & 0x10 != 0 { -extent } else { extent };
        extent = extent.saturating_mul(n + i64::from(choice >> 5) % 3);
    }
    strides
}

/// Where an operand's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    /// A buffer of its own.
    Own,
    /// In another operand's buffer, starting `shift` bytes after that one's first byte.
    With(usize, usize),
    /// Exactly data's descriptor (an in-place scatter).
    SameAsData,
}

/// Wraps raw pointers so a call can run on another pool's thread.
struct Call {
    kernel: *const SjKernel,
    args: *mut SjArgs,
    /// Through `sj_prepare` and `sj_prepared_run` instead of `sj_kernel_run`; `Some(true)`
    /// passes an in-place call's `data` as NULL rather than as `out`.
    prepared: Option<bool>,
}

// SAFETY: the pointers are used only by the one `sj_kernel_run` call of `Call::run`, while
// the calling thread waits for it and keeps everything they point to alive.
unsafe impl Send for Call {}

impl Call {
    /// The status, the thread's last error (read on the thread that made the call) and the
    /// function that returned it.
    fn run(self) -> (i32, String, &'static str) {
        let Some(null_in_place_data) = self.prepared else {
            // SAFETY: the descriptors point to live shape and stride arrays of `ndim`
            // entries and every byte they reach lies in a live buffer (see the module's
            // doc).
            let status = unsafe { sj_kernel_run(self.kernel, self.args) };
            return (status, last_error(), "sj_kernel_run");
        };
        let mut prepared = std::ptr::null_mut();
        // SAFETY: as above; `prepared` is writable.
        let status = unsafe { sj_prepare(self.kernel, self.args, &mut prepared) };
        if status != Status::Ok as i32 {
            assert!(prepared.is_null(), "sj_prepare failed but made a call");
            return (status, last_error(), "sj_prepare");
        }
        // SAFETY: sj_prepare succeeded, so `args` and the key's descriptors are non-NULL
        // and live.
        let args = unsafe { &mut *self.args };
        let data_of = |t: *const SjTensor| {
            // SAFETY: NULL or a live descriptor.
            unsafe { t.as_ref() }.map_or(std::ptr::null_mut(), |t| t.data)
        };
        let out = data_of(args.out);
        let data = if std::ptr::eq(args.out, args.data) && null_in_place_data {
            std::ptr::null()
        } else {
            data_of(args.data).cast_const()
        };
        // SAFETY: each buffer pointer is its descriptor's data, prepared above.
        let status = unsafe {
            sj_prepared_run(
                prepared,
                out,
                data,
                data_of(args.indices),
                data_of(args.updates),
                args.bad_index.as_mut_ptr(),
            )
        };
        let message = last_error();
        // SAFETY: from sj_prepare, freed once.
        unsafe { sj_prepared_free(prepared) };
        (status, message, "sj_prepared_run")
    }
}

/// The C ABI on hostile descriptors; see the module's doc.
///
/// Layout: a key (kind, dtype, index dtype, rank, index rank, axis, reduction, `noinit`,
/// sometimes a byte changed); NULL argument choices; the problem's dims; per operand a
/// descriptor (NULL, device, dtype code, ndim, dims, NULL shape, strides, byte offset,
/// NULL data), out's home (own memory, data's descriptor, or inside an input's buffer) and
/// each buffer's placement; then element values.
///
/// A quarter of the calls go through a prepared call (`sj_prepare`, `sj_prepared_run`)
/// instead of `sj_kernel_run`, in place when out is data's descriptor, without NULL data
/// pointers (which a prepared call meets only when run; the C tests cover them).
///
/// Promises checked: nothing panics or crashes (ASan watches every access); `sj_kernel_get`
/// and the call return the status the Rust API's error maps to (or the descriptor's
/// refusal, for what only C can express: NULLs, devices, dtype codes, negative dims,
/// reaches past the address space, aliasing); on failure no buffer changes, the message is
/// one lowercase line naming the function, and a bad index's position is in
/// `args.bad_index`; on success out holds exactly what the Rust API writes.
pub fn capi(input: &[u8]) {
    let mut choices = Choices::new(input);
    let c = &mut choices;
    let text = key_text(c);
    // Now and then a cache of its own, freed before the kernel runs: handles outlive it.
    // A key met this way before runs on the handle kept from then (see `Orphans`).
    let own_cache = c.byte() % 64 == 63;
    let orphan = own_cache.then(|| orphans().get(&text)).flatten();
    let cache = if own_cache && orphan.is_none() {
        sj_cache_new()
    } else {
        c_cache()
    };
    assert!(!cache.is_null(), "sj_cache_new: {}", last_error());

    // sj_kernel_get against parsing and the Rust cache.
    let key_c = CString::new(text.replace('\0', "")).expect("NULs removed");
    let expected_key: Result<KernelKey, Status> = key_c
        .to_str()
        .expect("from a String")
        .parse::<KernelKey>()
        .map_err(|_| Status::Key)
        .and_then(|key| {
            c_kernels()
                .get(&key)
                .map(|_| key)
                .map_err(|e| Status::of(&e))
        });
    let null_get = c.byte() % 64 == 63;
    let mut kernel: *mut SjKernel = std::ptr::null_mut();
    let status = if null_get {
        // SAFETY: NULL arguments are refused before use.
        unsafe { sj_kernel_get(cache, std::ptr::null(), &mut kernel) }
    } else {
        // SAFETY: a live cache, a C string, a writable pointer.
        unsafe { sj_kernel_get(cache, key_c.as_ptr() as *const c_char, &mut kernel) }
    };
    if own_cache && orphan.is_none() {
        // SAFETY: from sj_cache_new, freed once.
        unsafe { sj_cache_free(cache) };
    }
    let key = match (null_get, expected_key) {
        (true, _) => {
            assert_eq!(
                status,
                Status::NullPointer as i32,
                "sj_kernel_get(NULL key)"
            );
            check_last_error("sj_kernel_get");
            assert!(kernel.is_null());
            return;
        }
        (false, Err(want)) => {
            assert_eq!(status, want as i32, "sj_kernel_get({text:?})");
            check_last_error("sj_kernel_get");
            assert!(kernel.is_null());
            return;
        }
        (false, Ok(key)) => {
            assert_eq!(
                status,
                Status::Ok as i32,
                "sj_kernel_get({text:?}): {}",
                last_error()
            );
            assert!(!kernel.is_null());
            key
        }
    };
    match orphan {
        Some(orphan) => {
            // SAFETY: a handle from sj_kernel_get on the shared cache, freed once.
            unsafe { sj_kernel_free(kernel) };
            run_case(c, &key, orphan);
        }
        None => {
            run_case(c, &key, kernel);
            if !(own_cache && orphans().keep(text, kernel)) {
                // SAFETY: a handle from sj_kernel_get, freed once.
                unsafe { sj_kernel_free(kernel) };
            }
        }
    }
}

/// Handles whose caches were freed, by key text, kept for the process's lifetime.
///
/// Compiling a key in a fresh cache at every such draw repeats the same deterministic
/// compile, and the fuzzer, finding that Cranelift's coverage is reached only this way once
/// the shared caches hold every key, keeps many such inputs (about 30% of a long run's
/// corpus drew a cache of their own, for 1 in 64 intended): most of the run compiled. Each
/// key compiles in a cache of its own once; later draws run on that handle, whose cache is
/// long gone.
struct Orphans(Mutex<HashMap<String, usize>>);

/// Keys whose orphaned handle is kept; past this, every draw compiles in a fresh cache
/// again (each kept handle holds its kernel's code).
const MAX_ORPHANS: usize = 4096;

fn orphans() -> &'static Orphans {
    static ORPHANS: OnceLock<Orphans> = OnceLock::new();
    ORPHANS.get_or_init(|| Orphans(Mutex::default()))
}

impl Orphans {
    fn get(&self, text: &str) -> Option<*mut SjKernel> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(text).map(|&handle| handle as *mut SjKernel)
    }

    /// Keeps `kernel` (a live handle whose cache is freed) for `text`; false when full.
    fn keep(&self, text: String, kernel: *mut SjKernel) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ORPHANS {
            return false;
        }
        map.insert(text, kernel as usize);
        true
    }
}

fn run_case(c: &mut Choices, key: &KernelKey, kernel: *mut SjKernel) {
    let rust_kernel = c_kernels().get(key).expect("compiled above");
    let (r, a, kind) = (key.rank(), key.axis(), key.kind());
    let small = |c: &mut Choices| match c.byte() % 8 {
        0 => 0,
        1 => 1,
        b => 2 + usize::from(b % 3),
    };
    let data_dims: Vec<usize> = (0..r).map(|_| small(c)).collect();
    let bounded = c.byte() % 16 != 15;
    let index_dims: Vec<usize> = (0..key.index_rank())
        .map(|d| {
            let n = small(c);
            if kind != OpKind::Gather && d != a && bounded {
                n.min(data_dims[d])
            } else {
                n
            }
        })
        .collect();
    let updates_dims: Vec<usize> = index_dims
        .iter()
        .map(|&n| n + usize::from(c.byte() % 4 == 0))
        .collect();
    let out_dims: Vec<usize> = match kind {
        OpKind::ScatterElements => data_dims.clone(),
        OpKind::GatherElements => index_dims.clone(),
        OpKind::Gather => [&data_dims[..a], &index_dims[..], &data_dims[a + 1..]].concat(),
    };
    let dtype = key.dtype();
    let mut descs = vec![
        descriptor(c, dtype, &data_dims, false),
        descriptor(c, key.index_dtype(), &index_dims, false),
        descriptor(c, dtype, &updates_dims, false),
        descriptor(c, dtype, &out_dims, true),
    ];
    // Gathers ignore `updates`; give them one half the time.
    let with_updates = kind == OpKind::ScatterElements || c.flag();
    let home = match c.byte() % 16 {
        0..=1 if kind == OpKind::ScatterElements => Home::SameAsData,
        2 => Home::With(DATA, c.below(3 * dtype.size().max(1))),
        3 => Home::With(c.pick(&[DATA, INDICES, UPDATES]), c.below(64)),
        _ => Home::Own,
    };
    if home == Home::SameAsData {
        descs[OUT] = descs[DATA].clone();
    }
    let null_kernel = c.byte() % 64 == 63;
    let null_args = c.byte() % 64 == 63;
    let prepared = (c.byte() % 4 == 3).then(|| c.flag());
    if prepared.is_some() {
        for d in &mut descs {
            d.data_null = false;
        }
    }

    // Buffers: one per operand with a home of its own, each first reached byte placed a
    // few bytes in.
    let span = |d: &Desc| match d.reach() {
        Reach::Bytes { len, .. } => len,
        _ => 0,
    };
    let mut pos = [0usize; 4];
    let mut buffer_of = [0usize; 4];
    let mut lens = [0usize; 4];
    for role in [DATA, INDICES, UPDATES] {
        buffer_of[role] = role;
        let size = descs[role].dtype.size();
        pos[role] = size * c.below(3) + usize::from(c.byte() % 16 == 0);
        lens[role] = pos[role] + span(&descs[role]) + c.below(2) * size;
    }
    match home {
        Home::Own => {
            buffer_of[OUT] = OUT;
            pos[OUT] = dtype.size() * c.below(3);
            lens[OUT] = pos[OUT] + span(&descs[OUT]) + c.below(2) * dtype.size();
        }
        Home::SameAsData => {
            buffer_of[OUT] = DATA;
            pos[OUT] = pos[DATA];
        }
        Home::With(other, shift) => {
            buffer_of[OUT] = other;
            pos[OUT] = pos[other] + shift;
            lens[other] = lens[other].max(pos[OUT] + span(&descs[OUT]));
        }
    }
    let s = data_dims.get(a).copied().unwrap_or(0);
    let mut buffers: Vec<Vec<u8>> = (0..4)
        .map(|role| {
            let d = &descs[role];
            let size = d.dtype.size().max(1);
            let mut bytes = vec![0u8; lens[role].div_ceil(size) * size];
            for chunk in bytes.chunks_exact_mut(size) {
                if role == INDICES {
                    index_element(c, d.dtype, s, chunk);
                } else {
                    element(c, d.dtype, chunk);
                }
            }
            bytes.truncate(lens[role].max(1));
            bytes
        })
        .collect();
    let before = buffers.clone();

    // The descriptors in memory.
    let shapes: Vec<Vec<i64>> = descs.iter().map(|d| d.shape.clone()).collect();
    let strides: Vec<Option<Vec<i64>>> = descs.iter().map(|d| d.strides.clone()).collect();
    let bases: Vec<*mut u8> = buffers.iter_mut().map(|b| b.as_mut_ptr()).collect();
    let tensors: Vec<SjTensor> = (0..4)
        .map(|role| {
            let d = &descs[role];
            let base = bases[buffer_of[role]];
            let data = match (d.data_null, d.reach()) {
                (true, _) => std::ptr::null_mut(),
                (false, Reach::Bytes { first, .. }) => {
                    base.wrapping_offset(pos[role] as isize - first)
                }
                (false, _) => base.wrapping_add(pos[role]),
            };
            SjTensor {
                data,
                device_type: d.device,
                device_id: 0,
                ndim: d.ndim,
                dtype: d.code,
                shape: if d.shape_null {
                    std::ptr::null()
                } else {
                    shapes[role].as_ptr()
                },
                strides: strides[role]
                    .as_ref()
                    .map_or(std::ptr::null(), |s| s.as_ptr()),
                byte_offset: d.byte_offset,
            }
        })
        .collect();
    let field = |role: usize| -> *const SjTensor {
        if descs[role].null || (role == UPDATES && !with_updates) {
            std::ptr::null()
        } else {
            &tensors[role]
        }
    };
    const UNSET: i64 = i64::MIN + 7;
    let mut args = SjArgs {
        data: field(DATA),
        indices: field(INDICES),
        updates: field(UPDATES),
        out: field(OUT),
        bad_index: [UNSET; MAX_RANK],
        workspace: std::ptr::null_mut(),
        workspace_bytes: 0,
    };

    // What the Rust API says.
    let roles: Vec<usize> = match kind {
        OpKind::ScatterElements => vec![DATA, INDICES, UPDATES, OUT],
        _ => vec![DATA, INDICES, OUT],
    };
    let rank_of = |role: usize| match role {
        INDICES => key.index_rank(),
        OUT => key.out_rank(),
        _ => r,
    };
    let dtype_of = |role: usize| {
        if role == INDICES {
            key.index_dtype()
        } else {
            dtype
        }
    };
    let refusal = roles
        .iter()
        .find_map(|&role| descs[role].refusal(rank_of(role), dtype_of(role)));
    let expected: Expected = if null_kernel || null_args {
        Expected::Fails(Status::NullPointer, None)
    } else if let Some(status) = refusal {
        Expected::Fails(status, None)
    } else {
        let views = Views::new(&descs, &buffers, &buffer_of, &pos);
        if prepared.is_some() && views.in_place(kind) {
            // A prepared call is in place when out is data's descriptor.
            args.out = args.data;
        }
        match views.rust(&rust_kernel, &roles) {
            Some(expected) => expected,
            // Valid but too large to run here.
            None => return,
        }
    };

    // `sj_kernel_run` three times on the same descriptors (buffers restored between):
    // the second keeps a call that succeeded, the third runs on it (`ffi::repeat`), and
    // each must do what the first did.
    let rounds = if prepared.is_none() && !null_kernel && !null_args {
        3
    } else {
        1
    };
    for round in 0..rounds {
        if round > 0 {
            for (now, then) in buffers.iter_mut().zip(&before) {
                now.copy_from_slice(then);
            }
            args.bad_index = [UNSET; MAX_RANK];
        }
        let call = Call {
            kernel: if null_kernel {
                std::ptr::null()
            } else {
                kernel
            },
            args: if null_args {
                std::ptr::null_mut()
            } else {
                &mut args
            },
            prepared,
        };
        // The last choice, so that the seeds' layout stays as it was: from this thread, lent a
        // pool of three by the C ABI, or inside a rayon pool of three.
        let (status, message, function) = if c.flag() {
            // SAFETY: a live pool, never freed; NULL restores the global pool.
            unsafe { sj_use_pool(c_pool()) };
            let result = call.run();
            // SAFETY: as above.
            unsafe { sj_use_pool(std::ptr::null()) };
            result
        } else {
            pools()[1].install(|| call.run())
        };
        let context = || format!("{key} {descs:?} home {home:?}");
        match &expected {
            Expected::Fails(want, position) => {
                assert_eq!(status, *want as i32, "{}: {message}", context());
                check_error_message(function, &message);
                assert!(
                    buffers == before,
                    "{}: a failed call changed memory",
                    context()
                );
                if let Some(position) = position {
                    let n = position.len().min(MAX_RANK);
                    assert_eq!(
                        args.bad_index[..n]
                            .iter()
                            .map(|&p| p as usize)
                            .collect::<Vec<_>>(),
                        position[..n],
                        "{}: bad_index",
                        context()
                    );
                }
            }
            Expected::Writes(out_bytes) => {
                assert_eq!(status, Status::Ok as i32, "{}: {message}", context());
                for (b, (now, then)) in buffers.iter().zip(&before).enumerate() {
                    if b == buffer_of[OUT] {
                        assert!(now == out_bytes, "{}: out differs from run_into", context());
                    } else {
                        assert!(now == then, "{}: an input changed", context());
                    }
                }
            }
        }
    }
}

/// What a call must do.
enum Expected {
    /// Return this status (with the bad index's position) and change nothing.
    Fails(Status, Option<Vec<usize>>),
    /// Succeed, leaving out's buffer as these bytes.
    Writes(Vec<u8>),
}

/// The accepted descriptors as the library sees them: dims, strides, and the bytes each
/// reaches within its buffer.
struct Views {
    dims: Vec<Vec<usize>>,
    strides: Vec<Vec<isize>>,
    /// Buffer, range of bytes reached in it, element offset of position 0.
    spans: Vec<(usize, std::ops::Range<usize>, usize)>,
    dtypes: Vec<DType>,
    buffers: Vec<Vec<u8>>,
}

impl Views {
    fn new(descs: &[Desc], buffers: &[Vec<u8>], buffer_of: &[usize; 4], pos: &[usize; 4]) -> Views {
        let mut spans = Vec::new();
        for role in 0..4 {
            let range = match descs[role].reach() {
                Reach::Bytes { len, offset, .. } => (pos[role]..pos[role] + len, offset),
                _ => (0..0, 0),
            };
            spans.push((buffer_of[role], range.0, range.1));
        }
        Views {
            dims: descs.iter().map(Desc::dims).collect(),
            strides: descs.iter().map(Desc::element_strides).collect(),
            spans,
            dtypes: descs.iter().map(|d| d.dtype).collect(),
            buffers: buffers.to_vec(),
        }
    }

    /// Whether out is data's memory, element for element: an in-place scatter.
    fn in_place(&self, kind: OpKind) -> bool {
        kind == OpKind::ScatterElements
            && self.spans[OUT] == self.spans[DATA]
            && self.dims[OUT] == self.dims[DATA]
            && self.strides[OUT] == self.strides[DATA]
    }

    fn meta(&self, role: usize) -> Meta<'_> {
        Meta::new(self.dtypes[role], &self.dims[role])
    }

    fn view(&self, role: usize) -> Result<TensorView<'_>, Error> {
        let (b, range, offset) = &self.spans[role];
        TensorView::new(
            self.dtypes[role],
            &self.dims[role],
            &self.strides[role],
            *offset,
            &self.buffers[*b][range.clone()],
        )
        .map_err(Error::from)
    }

    /// The Rust API's answer, in the order the C ABI checks: shapes, aliasing, then the
    /// views and the call. `None` when the call is valid but too large to run here.
    fn rust(&self, kernel: &scatterjit::Kernel, roles: &[usize]) -> Option<Expected> {
        let key = *kernel.key();
        let scatter = key.kind() == OpKind::ScatterElements;
        let fails = |e: Error| {
            let position = match &e {
                Error::Invalid(IrError::IndexOutOfBounds { position, .. }) => {
                    Some(position.clone())
                }
                _ => None,
            };
            Some(Expected::Fails(Status::of(&e), position))
        };
        let validated = key.op().validate(
            self.meta(DATA),
            self.meta(INDICES),
            scatter.then(|| self.meta(UPDATES)),
        );
        let out_shape = match validated {
            Err(e) => return fails(e.into()),
            Ok(v) if v.key != key => return Some(Expected::Fails(Status::Key, None)),
            Ok(v) => v.out_shape,
        };
        if self.dims[OUT] != out_shape {
            return Some(Expected::Fails(Status::Shape, None));
        }
        let in_place = self.in_place(key.kind());
        let (out_buffer, out_range, out_offset) = self.spans[OUT].clone();
        for &role in roles.iter().filter(|&&r| r != OUT) {
            let (b, range, _) = &self.spans[role];
            let shared = *b == out_buffer
                && !out_range.is_empty()
                && !range.is_empty()
                && out_range.start < range.end
                && range.start < out_range.end;
            if shared && !(in_place && role == DATA) {
                return Some(Expected::Fails(Status::Overlap, None));
            }
        }
        let index_elements = checked_numel(&self.dims[INDICES]).unwrap_or(usize::MAX);
        let mut out_bytes = self.buffers[out_buffer].clone();
        let result = {
            let Ok(mut out) = TensorViewMut::new(
                key.dtype(),
                &self.dims[OUT],
                &self.strides[OUT],
                out_offset,
                &mut out_bytes[out_range],
            ) else {
                return Some(Expected::Fails(Status::Overlap, None));
            };
            let indices = match self.view(INDICES) {
                Ok(v) => v,
                Err(e) => return fails(e),
            };
            let updates = if scatter {
                match self.view(UPDATES) {
                    Ok(v) => Some(v),
                    Err(e) => return fails(e),
                }
            } else {
                None
            };
            if index_elements > MAX_RUN_ELEMENTS {
                return None;
            }
            pools()[0].install(|| {
                if in_place {
                    kernel.scatter_in_place(&mut out, &indices, updates.as_ref().expect("scatter"))
                } else {
                    let data = self.view(DATA)?;
                    kernel.run_into(&mut out, &data, &indices, updates.as_ref())
                }
            })
        };
        match result {
            Ok(()) => Some(Expected::Writes(out_bytes)),
            Err(e) => fails(e),
        }
    }
}
