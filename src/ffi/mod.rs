//! The C ABI of the shared library (declared in `include/scatterjit.h`): a kernel cache,
//! kernels by key, and calls on caller-owned DLPack-style tensors ([`SjArgs`]).
//!
//! Every function catches panics (a panic is reported as [`Status::Internal`], never
//! unwinds into C) and records the message of its failure in a thread-local string that
//! [`sj_last_error`] returns. Descriptors are turned into the checked views of
//! `crate::tensor`, so a call validates exactly as [`Kernel::run_into`] does; a call that
//! repeats a kept call's descriptors runs on its prepared call instead (`repeat.rs`), with
//! the same results and errors.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use scatterjit_ir::{DType, Error as IrError, KernelKey, Meta, OpKind, Operand, MAX_RANK};
use smallvec::SmallVec;

use crate::cabi::{self, SjArgs, SjTensor, Status, DEVICE_CPU};
use crate::error::Error;
use crate::kernel::{Geometry, Kernel, Prepared};
use crate::recent::Recent;
use crate::tensor::{overlaps, row_major, Dims, TensorView, TensorViewMut, Unbuffered};
use crate::{KernelCache, Pool};

mod repeat;
use repeat::Repeat;

/// An opaque kernel cache (`sj_cache` in C).
pub struct SjCache(KernelCache);

impl SjCache {
    /// The kernel cache behind the handle, for Rust code that shares it with C (to size it,
    /// or read its counters).
    pub fn kernels(&self) -> &KernelCache {
        &self.0
    }
}

/// An opaque handle to a compiled kernel (`sj_kernel` in C); it keeps the code alive, and
/// the prepared calls of the descriptor geometries its [`sj_kernel_run`] calls repeat.
pub struct SjKernel {
    kernel: Arc<Kernel>,
    repeats: Recent<Repeat>,
}

/// Why a call failed: the status returned and the message kept for [`sj_last_error`].
struct Failure(Status, String);

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure(Status::of(&e), e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs cannot occur in our messages, but must not lose the message if they do.
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// Runs `f`, turning its failure or panic into a status and the thread's last error.
fn guard(function: &str, f: impl FnOnce() -> Result<(), Failure>) -> i32 {
    let (status, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return Status::Ok as i32,
        Ok(Err(Failure(status, message))) => (status, message),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("panic");
            (
                Status::Internal,
                format!("internal error: {what} (a bug in scatterjit)"),
            )
        }
    };
    set_last_error(&format!("{function}: {message}"));
    status as i32
}

/// The message of the last failed call on this thread (empty if none failed yet). The
/// string stays valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn sj_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// A new, empty kernel cache; NULL only if it could not be created (see `sj_last_error`).
#[no_mangle]
pub extern "C" fn sj_cache_new() -> *mut SjCache {
    let mut cache = std::ptr::null_mut();
    guard("sj_cache_new", || {
        cache = Box::into_raw(Box::new(SjCache(KernelCache::new())));
        Ok(())
    });
    cache
}

/// Frees a cache made by `sj_cache_new` (NULL is ignored). Kernels taken from it stay valid.
///
/// # Safety
/// `cache` is NULL or a pointer from `sj_cache_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn sj_cache_free(cache: *mut SjCache) {
    // SAFETY: forwarded from the caller's promise.
    unsafe { free_handle("sj_cache_free", cache) };
}

/// Looks up (compiling on first use) the kernel of the printed key `key`
/// (`"scatter_elements.f32.i64.r2.a1.add"`) and stores a new handle in `*kernel`.
///
/// # Safety
/// `cache` is NULL or a live cache; `key` is NULL or a NUL-terminated string; `kernel` is
/// NULL or valid for one pointer write.
#[no_mangle]
pub unsafe extern "C" fn sj_kernel_get(
    cache: *mut SjCache,
    key: *const c_char,
    kernel: *mut *mut SjKernel,
) -> i32 {
    guard("sj_kernel_get", || {
        if cache.is_null() || key.is_null() || kernel.is_null() {
            return Err(null_argument("cache, key and kernel"));
        }
        // SAFETY: non-null, and the caller promises a live cache and a C string.
        let (cache, key) = unsafe { (&*cache, CStr::from_ptr(key)) };
        let key: KernelKey = key
            .to_str()
            .map_err(|_| Failure(Status::Key, "the key is not UTF-8".into()))?
            .parse()
            .map_err(|e: IrError| Failure(Status::Key, e.to_string()))?;
        let compiled = cache.0.get(&key)?;
        let handle = SjKernel {
            kernel: compiled,
            repeats: Recent::default(),
        };
        // SAFETY: non-null, and the caller promises it is writable.
        unsafe { *kernel = Box::into_raw(Box::new(handle)) };
        Ok(())
    })
}

/// Frees a kernel handle (NULL is ignored).
///
/// # Safety
/// `kernel` is NULL or a handle from `sj_kernel_get` not freed before.
#[no_mangle]
pub unsafe extern "C" fn sj_kernel_free(kernel: *mut SjKernel) {
    // SAFETY: forwarded from the caller's promise.
    unsafe { free_handle("sj_kernel_free", kernel) };
}

/// Runs `kernel` on the tensors of `args`, writing `args->out` (see `sj_args` in C for
/// the rules on out and in-place scatter). Every index is checked before the first write:
/// on error, out is unchanged; on a bad index its position is in `args->bad_index`.
/// A call whose descriptors repeat a recent call's exactly (all but their data pointers)
/// runs as a prepared call would, with the same results and errors.
///
/// # Safety
/// `kernel` is NULL or a live handle; `args` is NULL or a valid `sj_args` whose non-NULL
/// tensor pointers point to valid descriptors, each describing memory (every element its
/// shape and strides reach) that is valid to read, and for `out` to write, during the call.
#[no_mangle]
pub unsafe extern "C" fn sj_kernel_run(kernel: *const SjKernel, args: *mut SjArgs) -> i32 {
    guard("sj_kernel_run", || {
        if kernel.is_null() || args.is_null() {
            return Err(null_argument("kernel and args"));
        }
        // SAFETY: non-null and live by the caller's promise.
        let (handle, args) = unsafe { (&*kernel, &mut *args) };
        // SAFETY: forwarded from the caller's promise about the descriptors.
        unsafe { repeat::run(handle, args) }
    })
}

/// An opaque prepared call (`sj_prepared` in C): a kernel bound to the geometry of its
/// operands by [`sj_prepare`].
pub struct SjPrepared {
    call: Prepared,
    /// Each operand's reach from its buffer pointer.
    reach: Reaches,
}

/// The bytes of one operand from its buffer pointer: `Described::first` and `len`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reach {
    first: isize,
    len: usize,
}

/// Each operand's [`Reach`], by [`slot`]; a gather's updates reach nothing.
type Reaches = [Reach; 4];

/// Where `operand` sits in [`Reaches`] and the other per-operand arrays of a call: data,
/// indices, updates, out (`SjArgs` order).
fn slot(operand: Operand) -> usize {
    match operand {
        Operand::Data => 0,
        Operand::Indices => 1,
        Operand::Updates => 2,
        Operand::Output | Operand::Sums | Operand::Counts => 3,
    }
}

/// The descriptor `args` gives for `operand`, one of a key's.
fn descriptor_of(args: &SjArgs, operand: Operand) -> *const SjTensor {
    match operand {
        Operand::Data => args.data,
        Operand::Indices => args.indices,
        Operand::Updates => args.updates,
        Operand::Output => args.out,
        Operand::Sums | Operand::Counts => unreachable!("a key's operands are tensors"),
    }
}

/// Each operand's reach, from its description.
fn reaches(described: &[(Operand, Described)]) -> Reaches {
    let mut reach = Reaches::default();
    for (operand, d) in described {
        reach[slot(*operand)] = Reach {
            first: d.first,
            len: d.len,
        };
    }
    reach
}

/// The prepared call of `kernel` on the geometry of `described` (in place: `out` is data).
fn prepare_described(
    kernel: &Arc<Kernel>,
    described: &[(Operand, Described)],
    in_place: bool,
) -> Result<Prepared, Failure> {
    let scatter = kernel.key().kind() == OpKind::ScatterElements;
    let geometry = |operand| {
        let d = described_of(described, operand);
        Geometry::new(&d.shape, &d.strides, d.offset)
    };
    let updates = scatter.then(|| geometry(Operand::Updates));
    let call = if in_place {
        let updates = updates.as_ref().expect("scatter has updates");
        kernel.prepare_in_place(
            &geometry(Operand::Data),
            &geometry(Operand::Indices),
            updates,
        )
    } else {
        kernel.prepare(
            &geometry(Operand::Output),
            &geometry(Operand::Data),
            &geometry(Operand::Indices),
            updates.as_ref(),
        )
    }?;
    Ok(call)
}

/// Binds `kernel` to the geometry of `args`' descriptors (dtype, rank, shape, strides,
/// byte offset; their `data` pointers are not read) and stores a new prepared call in
/// `*prepared`, for [`sj_prepared_run`]. A scatter is prepared in place when `args->out`
/// and `args->data` are the same descriptor. Errors are those `sj_kernel_run` gives for
/// descriptors of this geometry.
///
/// # Safety
/// `kernel` is NULL or a live handle; `args` is NULL or a valid `sj_args` whose non-NULL
/// tensor pointers point to valid descriptors; `prepared` is NULL or valid for one pointer
/// write.
#[no_mangle]
pub unsafe extern "C" fn sj_prepare(
    kernel: *const SjKernel,
    args: *const SjArgs,
    prepared: *mut *mut SjPrepared,
) -> i32 {
    guard("sj_prepare", || {
        if kernel.is_null() || args.is_null() || prepared.is_null() {
            return Err(null_argument("kernel, args and prepared"));
        }
        // SAFETY: non-null and live by the caller's promise.
        let (kernel, args) = unsafe { (&(*kernel).kernel, &*args) };
        let key = *kernel.key();
        let in_place = key.kind() == OpKind::ScatterElements && std::ptr::eq(args.out, args.data);
        // SAFETY: forwarded from the caller's promise about the descriptors.
        let described = unsafe { describe_call(kernel, args, false)? };
        // As `sj_kernel_run` reports it: an output that would write one element twice.
        let out = described_of(&described, Operand::Output);
        Unbuffered::new(out.dtype, &out.shape, &out.strides, out.offset, true)
            .map_err(|e| Failure(Status::Overlap, format!("out: {e}")))?;
        let call = prepare_described(kernel, &described, in_place)?;
        let reach = reaches(&described);
        let handle = Box::new(SjPrepared { call, reach });
        // SAFETY: non-null, and the caller promises it is writable.
        unsafe { *prepared = Box::into_raw(handle) };
        Ok(())
    })
}

/// Runs a prepared call on buffers laid out as the descriptors given to [`sj_prepare`]
/// said: each pointer stands for its descriptor's `data`. `updates` is ignored by the
/// gathers; an in-place call updates `out` and takes `data` NULL or equal to `out`. The
/// checks that depend on memory are made on every call (NULL buffers with elements,
/// overlap, every index), so on error `out` is unchanged; on a bad index its position is
/// in `bad_index` (NULL, or [`MAX_RANK`] entries).
///
/// # Safety
/// `prepared` is NULL or a live prepared call; each buffer pointer is NULL or valid, as
/// its descriptor describes it, to read (and `out` to write) during the call; `bad_index`
/// is NULL or valid for [`MAX_RANK`] writes.
#[no_mangle]
pub unsafe extern "C" fn sj_prepared_run(
    prepared: *const SjPrepared,
    out: *mut u8,
    data: *const u8,
    indices: *const u8,
    updates: *const u8,
    bad_index: *mut i64,
) -> i32 {
    guard("sj_prepared_run", || {
        if prepared.is_null() {
            return Err(Failure(Status::NullPointer, "prepared is NULL".into()));
        }
        // SAFETY: non-null and live by the caller's promise.
        let prepared = unsafe { &*prepared };
        let in_place = prepared.call.is_in_place();
        if in_place && !data.is_null() && data != out.cast_const() {
            return Err(Failure(
                Status::Overlap,
                "the call was prepared in place (args->out was args->data): data must be \
                 NULL or out"
                    .into(),
            ));
        }
        let bases = [
            if in_place { out.cast_const() } else { data },
            indices,
            updates,
            out.cast_const(),
        ];
        let bad_index = if bad_index.is_null() {
            None
        } else {
            // SAFETY: non-null, and the caller promises MAX_RANK writable entries.
            Some(unsafe { &mut *bad_index.cast::<[i64; MAX_RANK]>() })
        };
        let null = |operand| {
            Failure(
                Status::NullPointer,
                format!("{} is NULL but it has elements", cabi::field(operand)),
            )
        };
        // SAFETY: forwarded from the caller's promise about the buffers.
        unsafe { run_prepared(&prepared.call, &prepared.reach, bases, null, bad_index) }
    })
}

/// Runs a prepared call on the bytes each operand reaches (`reach`) from its buffer
/// (`bases`, by [`slot`]; in place, data's is out's), with the checks that depend on
/// memory, in this order: a NULL buffer where its operand has elements (`null` says
/// which), out sharing a byte with an input, every index (a bad one's position goes to
/// `bad_index`).
///
/// # Safety
/// Each base is NULL or valid to read (out's: to write) for the bytes its reach gives,
/// during the call.
unsafe fn run_prepared(
    call: &Prepared,
    reach: &Reaches,
    bases: [*const u8; 4],
    null: impl Fn(Operand) -> Failure,
    bad_index: Option<&mut [i64; MAX_RANK]>,
) -> Result<(), Failure> {
    let in_place = call.is_in_place();
    let scatter = call.kernel().key().kind() == OpKind::ScatterElements;
    let operands = [
        Operand::Data,
        Operand::Indices,
        Operand::Updates,
        Operand::Output,
    ];
    let present = |operand: &Operand| scatter || *operand != Operand::Updates;
    // Each operand's bytes, as `Described::bytes` has them.
    let mut spans = [(std::ptr::null::<u8>(), 0usize); 4];
    for operand in operands.into_iter().filter(present) {
        let (base, Reach { first, len }) = (bases[slot(operand)], reach[slot(operand)]);
        if len > 0 && base.is_null() {
            return Err(null(operand));
        }
        let start = if len == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr().cast_const()
        } else {
            base.wrapping_offset(first)
        };
        spans[slot(operand)] = (start, len);
    }
    let span = |operand| {
        let (start, len) = spans[slot(operand)];
        start..start.wrapping_add(len)
    };
    let inputs = operands[..3].iter().filter(|o| present(o));
    check_out_alone(
        span(Operand::Output),
        inputs.map(|&operand| (operand, span(operand))),
        in_place,
    )?;
    let input = |operand| {
        let (start, len) = spans[slot(operand)];
        // SAFETY: the caller promises the `len` bytes from `start` (every element its
        // descriptor reaches) are readable during the call; out, the only buffer
        // written, shares none of them (checked above) unless the call is in place,
        // where data is not read through this slice.
        unsafe { std::slice::from_raw_parts(start, len) }
    };
    let (out_start, out_len) = spans[slot(Operand::Output)];
    // SAFETY: the caller promises out's bytes are writable during the call; no other
    // slice of this call covers them (see above).
    let out = unsafe { std::slice::from_raw_parts_mut(out_start.cast_mut(), out_len) };
    let indices = input(Operand::Indices);
    let updates = scatter.then(|| input(Operand::Updates));
    let result = if in_place {
        let updates = updates.expect("scatter has updates");
        call.scatter_in_place(out, indices, updates)
    } else {
        call.run_into(out, input(Operand::Data), indices, updates)
    };
    if let Some(slots) = bad_index {
        report_bad_index(&result, slots);
    }
    result.map_err(Failure::from)
}

/// Frees a prepared call (NULL is ignored). Its kernel's code lives as long as it does.
///
/// # Safety
/// `prepared` is NULL or a pointer from `sj_prepare` not freed before.
#[no_mangle]
pub unsafe extern "C" fn sj_prepared_free(prepared: *mut SjPrepared) {
    // SAFETY: forwarded from the caller's promise.
    unsafe { free_handle("sj_prepared_free", prepared) };
}

/// An opaque pool of threads (`sj_pool` in C) that calls may split over instead of the
/// global one: a [`Pool`].
pub struct SjPool(Pool);

/// Starts a pool of `threads` threads (0: one per core, or `RAYON_NUM_THREADS`) and
/// stores a new handle in `*pool`. Errors: `SJ_ERR_NULL_POINTER`; `SJ_ERR_RESOURCE` past
/// [`Pool::MAX_THREADS`] or where the system does not start the threads.
///
/// # Safety
/// `pool` is NULL or valid for one pointer write.
#[no_mangle]
pub unsafe extern "C" fn sj_pool_new(threads: u32, pool: *mut *mut SjPool) -> i32 {
    guard("sj_pool_new", || {
        if pool.is_null() {
            return Err(null_argument("pool"));
        }
        let threads = usize::try_from(threads).unwrap_or(usize::MAX);
        let made = Pool::new(threads).map_err(|e| Failure(Status::Resource, e.to_string()))?;
        // SAFETY: non-null, and the caller promises it is writable.
        unsafe { *pool = Box::into_raw(Box::new(SjPool(made))) };
        Ok(())
    })
}

/// How many threads a call splits over on `pool` (0 for NULL).
///
/// # Safety
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn sj_pool_threads(pool: *const SjPool) -> u32 {
    let mut threads = 0;
    guard("sj_pool_threads", || {
        // SAFETY: NULL or live by the caller's promise.
        if let Some(pool) = unsafe { pool.as_ref() } {
            threads = u32::try_from(pool.0.threads()).unwrap_or(u32::MAX);
        }
        Ok(())
    });
    threads
}

/// Frees a pool handle (NULL is ignored). Its threads stop once no thread uses the pool
/// (see [`sj_use_pool`]).
///
/// # Safety
/// `pool` is NULL or a pointer from `sj_pool_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn sj_pool_free(pool: *mut SjPool) {
    // SAFETY: forwarded from the caller's promise.
    unsafe { free_handle("sj_pool_free", pool) };
}

/// Makes the calls this thread makes from now on split over `pool`, this thread taking
/// chunks too (NULL: the global pool again), until the next `sj_use_pool` on this thread
/// or its end. Other threads keep theirs. The pool's threads live while a thread uses it,
/// even after [`sj_pool_free`].
///
/// # Safety
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn sj_use_pool(pool: *const SjPool) {
    guard("sj_use_pool", || {
        // SAFETY: NULL or live by the caller's promise.
        Pool::use_on_this_thread(unsafe { pool.as_ref() }.map(|p| &p.0));
        Ok(())
    });
}

/// Frees a handle that a `sj_*_new` or `sj_*_get` function made with `Box::into_raw`
/// (NULL is ignored), reporting a panic of its drop as `function`'s.
///
/// # Safety
/// `handle` is NULL or a pointer from `Box::into_raw` not freed before.
unsafe fn free_handle<T>(function: &str, handle: *mut T) {
    guard(function, || {
        if !handle.is_null() {
            // SAFETY: the caller passes a pointer from `Box::into_raw`, once.
            drop(unsafe { Box::from_raw(handle) });
        }
        Ok(())
    });
}

fn null_argument(which: &str) -> Failure {
    Failure(
        Status::NullPointer,
        format!("a NULL pointer among {which} (none may be NULL)"),
    )
}

/// One descriptor, read and checked: its dtype, dims, strides and the bytes it reaches.
struct Described {
    dtype: DType,
    shape: Dims<usize>,
    strides: Dims<isize>,
    /// Bytes from the descriptor's `data` to the first byte any element reaches (0 when
    /// there are no elements).
    first: isize,
    /// First byte any element reaches (dangling when there are none; `data + first`), and
    /// the bytes up to one past the last.
    start: *mut u8,
    len: usize,
    /// Element offset of position 0 from `start`.
    offset: usize,
}

impl Described {
    fn bytes(&self) -> Range<*const u8> {
        let at = self.start.cast_const();
        at..at.wrapping_add(self.len)
    }
}

/// Refuses a call whose out shares a byte with an input, other than data's in place.
fn check_out_alone(
    out: Range<*const u8>,
    inputs: impl IntoIterator<Item = (Operand, Range<*const u8>)>,
    in_place: bool,
) -> Result<(), Failure> {
    for (operand, bytes) in inputs {
        if overlaps(out.clone(), bytes) && !(in_place && operand == Operand::Data) {
            return Err(Failure(
                Status::Overlap,
                format!("out shares memory with {}", cabi::field(operand)),
            ));
        }
    }
    Ok(())
}

/// Reads the descriptor of `operand` and checks it against the kernel's rank and dtype for
/// that operand. With `memory`, its data pointer too (non-NULL if it has elements); without,
/// only its geometry, for [`sj_prepare`] (`start` is then dangling).
///
/// # Safety
/// `t` is NULL or points to a valid descriptor whose shape and strides arrays have `ndim`
/// entries.
unsafe fn describe(
    t: *const SjTensor,
    operand: Operand,
    rank: usize,
    dtype: DType,
    memory: bool,
) -> Result<Described, Failure> {
    let name = cabi::field(operand);
    if t.is_null() {
        return Err(Failure(Status::NullPointer, format!("args.{name} is NULL")));
    }
    // SAFETY: non-null and valid by the caller's promise.
    let t = unsafe { &*t };
    if t.device_type != DEVICE_CPU {
        return Err(Failure(
            Status::Device,
            format!(
                "{name} is on device type {}, expected the CPU (1)",
                t.device_type
            ),
        ));
    }
    let actual = cabi::dtype_of_code(t.dtype);
    if actual != Some(dtype) {
        let [code, bits, lanes_lo, lanes_hi] = t.dtype.to_le_bytes();
        let got = actual.map_or_else(
            || {
                format!(
                    "DLPack dtype (code {code}, bits {bits}, lanes {})",
                    u16::from_le_bytes([lanes_lo, lanes_hi])
                )
            },
            |d| d.to_string(),
        );
        return Err(Failure(
            Status::DType,
            format!("{name} has dtype {got}, the kernel takes {dtype}"),
        ));
    }
    if usize::try_from(t.ndim) != Ok(rank) {
        return Err(Failure(
            Status::Rank,
            format!("{name} has rank {}, the kernel takes {rank}", t.ndim),
        ));
    }
    if rank > 0 && t.shape.is_null() {
        return Err(Failure(
            Status::NullPointer,
            format!("{name}.shape is NULL"),
        ));
    }
    let read = |p: *const i64| -> &[i64] {
        if rank == 0 {
            return &[];
        }
        // SAFETY: non-null with `ndim` entries by the caller's promise.
        unsafe { std::slice::from_raw_parts(p, rank) }
    };
    // Inline up to `MAX_RANK` dims: a call reads four descriptors, and allocating their
    // shapes and strides was a third of `sj_kernel_run`'s instructions on tiny tensors.
    let mut shape = Dims::<usize>::with_capacity(rank);
    for (d, &n) in read(t.shape).iter().enumerate() {
        shape.push(usize::try_from(n).map_err(|_| {
            Failure(
                Status::Shape,
                format!("{name}.shape[{d}] = {n} is negative"),
            )
        })?);
    }
    let strides: Dims<isize> = if t.strides.is_null() {
        row_major(&shape)
    } else {
        read(t.strides).iter().map(|&s| s as isize).collect()
    };
    let too_far = |d: &Described| {
        Failure(
            Status::Shape,
            format!(
                "{name}: shape {:?} with strides {:?} reaches beyond any buffer",
                d.shape, d.strides
            ),
        )
    };
    let size = dtype.size() as i128;
    let mut described = Described {
        dtype,
        shape,
        strides,
        first: 0,
        start: std::ptr::NonNull::<u8>::dangling().as_ptr(),
        len: 0,
        offset: 0,
    };
    if described.shape.contains(&0) {
        return Ok(described);
    }
    if memory && t.data.is_null() {
        return Err(null_data(operand));
    }
    // Lowest and highest element offsets reached, as in `TensorView::new`. Each term is
    // under 2^126 in magnitude, but three of them overflow an i128.
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&d, &s) in described.shape.iter().zip(&described.strides) {
        let reach = (d as i128 - 1) * s as i128;
        let sum = if reach < 0 { &mut lo } else { &mut hi };
        *sum = sum.checked_add(reach).ok_or_else(|| too_far(&described))?;
    }
    let first = lo
        .checked_mul(size)
        .and_then(|lo| lo.checked_add(t.byte_offset as i128));
    let len = hi
        .checked_sub(lo)
        .and_then(|span| span.checked_add(1)?.checked_mul(size));
    let (Some(first), Some(len)) = (first, len) else {
        return Err(too_far(&described));
    };
    if len > isize::MAX as i128 || first.abs() > isize::MAX as i128 {
        return Err(too_far(&described));
    }
    described.first = first as isize;
    if memory {
        described.start = t.data.wrapping_offset(described.first);
    }
    described.len = len as usize;
    described.offset = (-lo) as usize;
    Ok(described)
}

/// The descriptors of a call, in [`cabi::operands`] order, read and checked against the
/// kernel and the op's shape rules: the part of a call that does not depend on memory
/// (with `memory`, the descriptors' data pointers are checked too).
///
/// # Safety
/// `args`' non-NULL tensor pointers point to valid descriptors.
unsafe fn describe_call(
    kernel: &Kernel,
    args: &SjArgs,
    memory: bool,
) -> Result<Descriptions, Failure> {
    let key = *kernel.key();
    let mut described = SmallVec::new();
    for (operand, rank) in cabi::operands(&key) {
        let pointer = descriptor_of(args, operand);
        let dtype = match operand {
            Operand::Indices => key.index_dtype(),
            _ => key.dtype(),
        };
        // SAFETY: forwarded from the caller's promise.
        let d = unsafe { describe(pointer, operand, rank, dtype, memory)? };
        described.push((operand, d));
    }
    // Shapes first (as the op states them), then memory.
    fn meta(d: &Described) -> Meta<'_> {
        Meta::new(d.dtype, &d.shape)
    }
    let get = |operand| described_of(&described, operand);
    let updates_meta = (key.kind() == OpKind::ScatterElements).then(|| meta(get(Operand::Updates)));
    let out_shape = kernel.validate_meta(
        meta(get(Operand::Data)),
        meta(get(Operand::Indices)),
        updates_meta,
    )?;
    kernel.check_out(meta(get(Operand::Output)), &out_shape)?;
    Ok(described)
}

/// The description of `operand`, one of the key's.
fn described_of(described: &[(Operand, Described)], operand: Operand) -> &Described {
    described
        .iter()
        .find(|d| d.0 == operand)
        .map(|d| &d.1)
        .expect("every operand of the key is described")
}

/// Writes the position of a bad index into `slots`, when `result` failed on one.
fn report_bad_index(result: &Result<(), Error>, slots: &mut [i64]) {
    if let Err(Error::Invalid(IrError::IndexOutOfBounds { position, .. })) = result {
        for (slot, &p) in slots.iter_mut().zip(position.iter().take(MAX_RANK)) {
            *slot = p as i64;
        }
    }
}

/// A call's descriptions, in [`cabi::operands`] order.
type Descriptions = SmallVec<[(Operand, Described); Operand::TENSORS.len()]>;

/// The descriptions of a call that succeeded, and whether it ran in place.
type Ran = (Descriptions, bool);

/// Whether out and data describe one geometry, so that a scatter whose out starts where
/// data does runs in place.
fn same_geometry(out: &Described, data: &Described) -> bool {
    out.len == data.len
        && out.offset == data.offset
        && out.shape == data.shape
        && out.strides == data.strides
}

/// Validates `args` against `kernel` and runs it: the ordinary path of [`sj_kernel_run`].
///
/// # Safety
/// As [`sj_kernel_run`].
unsafe fn run(kernel: &Kernel, args: &mut SjArgs) -> Result<Ran, Failure> {
    let key = *kernel.key();
    // SAFETY: forwarded from the caller's promise.
    let described = unsafe { describe_call(kernel, args, true)? };
    let get = |operand| described_of(&described, operand);
    let out = get(Operand::Output);
    let data = get(Operand::Data);
    let in_place = key.kind() == OpKind::ScatterElements
        && out.start == data.start
        && same_geometry(out, data);
    let inputs = described.iter().filter(|d| d.0 != Operand::Output);
    check_out_alone(out.bytes(), inputs.map(|(o, d)| (*o, d.bytes())), in_place)?;

    let view = |d: &Described| -> Result<TensorView<'_>, Failure> {
        // SAFETY: the caller promises the `len` bytes from `start` (every element the
        // descriptor reaches) are readable during the call; out, the only tensor written,
        // shares none of them (checked above) unless the call is in place, where data is
        // not viewed.
        let bytes = unsafe { std::slice::from_raw_parts(d.start as *const u8, d.len) };
        TensorView::new(d.dtype, &d.shape, &d.strides, d.offset, bytes)
            .map_err(|e| Failure::from(Error::from(e)))
    };
    // SAFETY: the caller promises out's bytes are writable during the call; no other view
    // of this call covers them (see above).
    let out_bytes = unsafe { std::slice::from_raw_parts_mut(out.start, out.len) };
    let mut out_view =
        TensorViewMut::new(out.dtype, &out.shape, &out.strides, out.offset, out_bytes)
            .map_err(|e| Failure(Status::Overlap, format!("out: {e}")))?;
    let indices = view(get(Operand::Indices))?;
    let updates = match key.kind() {
        OpKind::ScatterElements => Some(view(get(Operand::Updates))?),
        _ => None,
    };
    let result = if in_place {
        let updates = updates.as_ref().expect("scatter has updates");
        kernel.scatter_in_place(&mut out_view, &indices, updates)
    } else {
        let data = view(data)?;
        kernel.run_into(&mut out_view, &data, &indices, updates.as_ref())
    };
    report_bad_index(&result, &mut args.bad_index);
    result.map_err(Failure::from)?;
    Ok((described, in_place))
}

/// A descriptor's data pointer is NULL where it has elements.
fn null_data(operand: Operand) -> Failure {
    let name = cabi::field(operand);
    Failure(
        Status::NullPointer,
        format!("{name}.data is NULL but it has elements"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C may share caches, kernel handles and prepared calls between threads.
    #[test]
    fn handles_may_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<SjCache>();
        shared::<SjKernel>();
        shared::<SjPrepared>();
        shared::<SjPool>();
    }

    #[test]
    fn the_header_states_the_most_threads_of_a_pool() {
        let header = include_str!("../../include/scatterjit.h");
        let limit = format!("over {} threads", Pool::MAX_THREADS);
        assert!(header.contains(&limit), "scatterjit.h must say {limit:?}");
    }

    #[test]
    fn panics_become_internal_errors() {
        let status = guard("sj_test", || panic!("boom"));
        assert_eq!(status, Status::Internal as i32);
        // SAFETY: sj_last_error returns this thread's NUL-terminated message.
        let message = unsafe { CStr::from_ptr(sj_last_error()) };
        let message = message.to_str().unwrap();
        assert!(
            message.starts_with("sj_test: internal error: boom"),
            "{message}"
        );
    }

    /// Dims and strides near 2^63 reach past any buffer, even where their sum overflows an
    /// i128 (found by the `capi` fuzz target).
    #[test]
    fn reaches_past_the_address_space_are_refused() {
        let cache = sj_cache_new();
        let mut kernel = std::ptr::null_mut();
        let key = CString::new("gather_elements.f32.i64.r3.a0").unwrap();
        // SAFETY: a live cache, a C string, a writable pointer.
        let status = unsafe { sj_kernel_get(cache, key.as_ptr(), &mut kernel) };
        assert_eq!(status, Status::Ok as i32);
        let mut bytes = [0u8; 64];
        let shape = [i64::MAX; 3];
        let one = [1i64; 3];
        for strides in [[i64::MIN; 3], [i64::MAX; 3]] {
            let huge = SjTensor {
                data: bytes.as_mut_ptr(),
                device_type: DEVICE_CPU,
                device_id: 0,
                ndim: 3,
                dtype: cabi::dtype_code(DType::F32).unwrap(),
                shape: shape.as_ptr(),
                strides: strides.as_ptr(),
                byte_offset: 0,
            };
            let small = SjTensor {
                shape: one.as_ptr(),
                strides: std::ptr::null(),
                ..huge
            };
            let indices = SjTensor {
                dtype: cabi::dtype_code(DType::I64).unwrap(),
                ..small
            };
            let out = SjTensor {
                data: bytes[32..].as_mut_ptr(),
                ..small
            };
            let mut args = SjArgs {
                data: &huge,
                indices: &indices,
                updates: std::ptr::null(),
                out: &out,
                bad_index: [0; MAX_RANK],
                workspace: std::ptr::null_mut(),
                workspace_bytes: 0,
            };
            // SAFETY: a live kernel; the descriptors are refused before any memory is read.
            let status = unsafe { sj_kernel_run(kernel, &mut args) };
            // SAFETY: sj_last_error returns this thread's NUL-terminated message.
            let message = unsafe { CStr::from_ptr(sj_last_error()) };
            assert_eq!(status, Status::Shape as i32, "{strides:?}: {message:?}");
        }
        // SAFETY: each freed once.
        unsafe {
            sj_kernel_free(kernel);
            sj_cache_free(cache);
        }
    }

    #[test]
    fn status_codes_match_the_header() {
        let header = include_str!("../../include/scatterjit_abi.h");
        for status in Status::ALL {
            let line = format!("#define {} {}", status.c_name(), status as i32);
            assert!(header.contains(&line), "{line}");
        }
        for &d in DType::ALL.iter().filter(|&&d| d != DType::String) {
            let code = cabi::dtype_code(d).unwrap();
            let line = format!(
                "#define SJ_DTYPE_{} SJ_DTYPE({}, {})",
                d.name().to_uppercase(),
                code & 0xff,
                (code >> 8) & 0xff
            );
            assert!(header.contains(&line), "{line}");
        }
    }

    #[test]
    fn layouts_match_the_header() {
        use std::mem::{offset_of, size_of};
        let header = include_str!("../../include/scatterjit_abi.h");
        let facts = [
            ("offsetof(sj_tensor, data)", offset_of!(SjTensor, data)),
            (
                "offsetof(sj_tensor, device)",
                offset_of!(SjTensor, device_type),
            ),
            ("offsetof(sj_tensor, ndim)", offset_of!(SjTensor, ndim)),
            ("offsetof(sj_tensor, dtype)", offset_of!(SjTensor, dtype)),
            ("offsetof(sj_tensor, shape)", offset_of!(SjTensor, shape)),
            (
                "offsetof(sj_tensor, strides)",
                offset_of!(SjTensor, strides),
            ),
            (
                "offsetof(sj_tensor, byte_offset)",
                offset_of!(SjTensor, byte_offset),
            ),
            ("sizeof(sj_tensor)", size_of::<SjTensor>()),
            ("offsetof(sj_args, data)", offset_of!(SjArgs, data)),
            ("offsetof(sj_args, indices)", offset_of!(SjArgs, indices)),
            ("offsetof(sj_args, updates)", offset_of!(SjArgs, updates)),
            ("offsetof(sj_args, out)", offset_of!(SjArgs, out)),
            (
                "offsetof(sj_args, bad_index)",
                offset_of!(SjArgs, bad_index),
            ),
            (
                "offsetof(sj_args, workspace)",
                offset_of!(SjArgs, workspace),
            ),
            (
                "offsetof(sj_args, workspace_bytes)",
                offset_of!(SjArgs, workspace_bytes),
            ),
            ("sizeof(sj_args)", size_of::<SjArgs>()),
        ];
        for (expr, value) in facts {
            let line = format!("_Static_assert({expr} == {value},");
            assert!(header.contains(&line), "{line}");
        }
        assert!(header.contains(&format!("#define SJ_MAX_RANK {MAX_RANK}")));
    }
}
