//! Repeated `sj_kernel_run` calls. A framework calls one kernel on the same shapes node
//! after node, and on tiny tensors reading, validating and viewing the descriptors is most
//! of such a call. A kernel handle keeps the prepared calls of the few descriptor
//! geometries its calls repeat ([`Recent`](crate::recent::Recent)'s rule; small calls
//! only); a call whose descriptors match a kept one's field for field, all but their data
//! pointers, runs as `sj_prepared_run` does. Every check that depends on memory is made again, in the
//! ordinary path's order and with its messages: a NULL data pointer where its operand has
//! elements, out sharing memory with an input, every index. Whether the call is in place
//! is decided as the ordinary path decides it, from where out and data start.

use std::sync::Arc;

use scatterjit_ir::checked_numel;
use smallvec::SmallVec;

use super::{
    described_of, descriptor_of, null_data, prepare_described, reaches, run_prepared,
    same_geometry, slot, Described, Failure, Reaches, SjKernel,
};
use crate::abi::MAX_DEPTH;
use crate::cabi::{self, SjArgs, SjTensor, DEVICE_CPU};
use crate::kernel::Prepared;
use crate::recent::{geometry_hash, KEPT_BELOW};
use crate::tensor::row_major;
use scatterjit_ir::{KernelKey, OpKind, Operand};

/// One descriptor as the caller wrote it, but its data pointer: what a repeated call's
/// descriptor must match. Entries past `ndim` are 0; an operand has at most `MAX_DEPTH`
/// dims (a Gather's output).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Written {
    device_type: i32,
    dtype: u32,
    ndim: i32,
    /// Whether strides were given (NULL: row-major).
    strided: bool,
    shape: [i64; MAX_DEPTH],
    strides: [i64; MAX_DEPTH],
    byte_offset: u64,
}

/// The descriptors a kernel of this kind reads, by [`slot`]: a gather's updates are
/// ignored (`None`), whatever `args.updates` holds.
fn descriptors(args: &SjArgs, scatter: bool) -> [Option<*const SjTensor>; 4] {
    let of = |operand| descriptor_of(args, operand);
    [
        Some(of(Operand::Data)),
        Some(of(Operand::Indices)),
        scatter.then(|| of(Operand::Updates)),
        Some(of(Operand::Output)),
    ]
}

/// Each descriptor's data pointer, by [`slot`] (a gather's updates: NULL); `None` where a
/// descriptor is NULL, which the ordinary path reports.
///
/// # Safety
/// `args`' non-NULL tensor pointers point to valid descriptors.
unsafe fn bases(args: &SjArgs, scatter: bool) -> Option<[*const u8; 4]> {
    let mut bases = [std::ptr::null(); 4];
    for (base, t) in bases.iter_mut().zip(descriptors(args, scatter)) {
        if let Some(t) = t {
            // SAFETY: NULL or valid by the caller's promise.
            *base = unsafe { t.as_ref() }?.data.cast_const();
        }
    }
    Some(bases)
}

/// Copies the descriptors of `args` but their data pointers (a gather's updates: the
/// default), after the ordinary path accepted them: their shape and strides arrays are
/// read at the kernel's rank, as that path read them. `None` where a descriptor or shape
/// is NULL now (which only a caller breaking its promise can make); [`copied_as_checked`]
/// tells whether the copy is what the ordinary path checked.
///
/// # Safety
/// `args`' non-NULL tensor pointers point to valid descriptors whose non-NULL shape and
/// strides arrays have the kernel's rank of entries, as the ordinary path found them.
unsafe fn written(args: &SjArgs, key: &KernelKey) -> Option<[Written; 4]> {
    let mut all = [Written::default(); 4];
    for (operand, rank) in cabi::operands(key) {
        // SAFETY: NULL or valid by the caller's promise.
        let t = unsafe { descriptor_of(args, operand).as_ref() }?;
        if rank > 0 && t.shape.is_null() {
            return None;
        }
        let written = &mut all[slot(operand)];
        *written = Written {
            device_type: t.device_type,
            dtype: t.dtype,
            ndim: t.ndim,
            strided: !t.strides.is_null(),
            byte_offset: t.byte_offset,
            ..Written::default()
        };
        if rank > 0 {
            // SAFETY: non-null with the kernel's rank of entries by the caller's promise.
            let shape = unsafe { std::slice::from_raw_parts(t.shape, rank) };
            written.shape[..rank].copy_from_slice(shape);
            if written.strided {
                // SAFETY: as above.
                let strides = unsafe { std::slice::from_raw_parts(t.strides, rank) };
                written.strides[..rank].copy_from_slice(strides);
            }
        }
    }
    Some(all)
}

/// The hash of a call's geometry as the ordinary path described it: what [`Recent`]
/// counts misses by. Descriptors that describe alike (strides given or left NULL for
/// row-major ones) hash alike; the copy kept is then matched field for field.
///
/// [`Recent`]: crate::recent::Recent
fn hash(described: &[(Operand, Described)], in_place: bool) -> u64 {
    let geometry = described.iter().map(|(operand, d)| {
        let strides: &[isize] = &d.strides;
        (*operand, d.dtype, &d.shape[..], strides, d.first, d.offset)
    });
    geometry_hash(&(in_place, geometry.collect::<SmallVec<[_; 4]>>()))
}

/// A kept call: the descriptors it matches and its prepared call.
pub(super) struct Repeat {
    written: [Written; 4],
    /// Whether out and data have one geometry, so that a call whose out starts where data
    /// does is in place.
    out_like_data: bool,
    reach: Reaches,
    call: Prepared,
}

impl Repeat {
    /// Whether a call on buffers `bases` runs in place, as the ordinary path decides it: a
    /// scatter whose out has data's geometry and starts where data does.
    fn in_place(&self, bases: &[*const u8; 4]) -> bool {
        let start = |operand| {
            let reach = self.reach[slot(operand)];
            if reach.len == 0 {
                std::ptr::NonNull::<u8>::dangling().as_ptr().cast_const()
            } else {
                bases[slot(operand)].wrapping_offset(reach.first)
            }
        };
        self.out_like_data && start(Operand::Output) == start(Operand::Data)
    }

    /// Whether the descriptors of `args` are the kept ones, field for field but their data
    /// pointers. Each field is read once; on a match the call runs on the kept geometry,
    /// never reading a descriptor again.
    ///
    /// # Safety
    /// As [`written`].
    unsafe fn describes(&self, args: &SjArgs, scatter: bool) -> bool {
        let same = |w: &Written, t: *const SjTensor| {
            // SAFETY: NULL or valid by the caller's promise.
            let Some(t) = (unsafe { t.as_ref() }) else {
                return false;
            };
            if (t.device_type, t.dtype, t.ndim, t.byte_offset)
                != (w.device_type, w.dtype, w.ndim, w.byte_offset)
                || t.strides.is_null() == w.strided
            {
                return false;
            }
            // The kept rank is the kernel's, at most MAX_DEPTH.
            let rank = w.ndim as usize;
            if rank == 0 {
                return true;
            }
            if t.shape.is_null() {
                return false;
            }
            // SAFETY: non-null with `ndim` entries by the caller's promise.
            let shape = unsafe { std::slice::from_raw_parts(t.shape, rank) };
            // SAFETY: as above, where strides are given.
            let strides = w
                .strided
                .then(|| unsafe { std::slice::from_raw_parts(t.strides, rank) });
            shape == &w.shape[..rank] && strides.is_none_or(|s| s == &w.strides[..rank])
        };
        let descriptors = descriptors(args, scatter);
        self.written
            .iter()
            .zip(descriptors)
            .all(|(w, t)| t.is_none_or(|t| same(w, t)))
    }
}

/// The kept call whose descriptors `args` repeats, and their data pointers by [`slot`].
///
/// # Safety
/// As [`written`].
unsafe fn kept_for(
    handle: &SjKernel,
    args: &SjArgs,
    scatter: bool,
) -> Option<(Arc<Repeat>, [*const u8; 4])> {
    // SAFETY: forwarded from the caller's promise about the descriptors.
    let bases = unsafe { bases(args, scatter) }?;
    let kept = handle.repeats.find(|r| {
        // SAFETY: forwarded from the caller's promise about the descriptors.
        r.call.is_in_place() == r.in_place(&bases) && unsafe { r.describes(args, scatter) }
    })?;
    Some((kept, bases))
}

/// `sj_kernel_run`: the call on a kept prepared call of its descriptors, or else the
/// ordinary path, after which a call that succeeded is kept on its second time.
///
/// # Safety
/// As `sj_kernel_run`.
pub(super) unsafe fn run(handle: &SjKernel, args: &mut SjArgs) -> Result<(), Failure> {
    let scatter = handle.kernel.key().kind() == OpKind::ScatterElements;
    // SAFETY: forwarded from the caller's promise about the descriptors.
    if let Some((kept, bases)) = unsafe { kept_for(handle, args, scatter) } {
        // SAFETY: the bases are the descriptors' data pointers, which the caller promises
        // valid for every byte their descriptors reach; the kept call's reach was computed
        // from descriptors of the same geometry.
        return unsafe {
            run_prepared(
                &kept.call,
                &kept.reach,
                bases,
                null_data,
                Some(&mut args.bad_index),
            )
        };
    }
    // SAFETY: forwarded from the caller's promise about the descriptors.
    let (described, in_place) = unsafe { super::run(&handle.kernel, args) }?;
    // SAFETY: as above; the ordinary path accepted the descriptors.
    unsafe { keep_if_repeated(handle, args, &described, in_place) };
    Ok(())
}

/// After a call that took the ordinary path and succeeded: if it is small and its
/// geometry was among the latest misses, copies its descriptors, prepares the call and
/// keeps it. Failing to prepare only leaves it unkept.
///
/// # Safety
/// As [`written`].
unsafe fn keep_if_repeated(
    handle: &SjKernel,
    args: &SjArgs,
    described: &[(Operand, Described)],
    in_place: bool,
) {
    let small = described
        .iter()
        .all(|(_, d)| checked_numel(&d.shape).is_ok_and(|n| n < KEPT_BELOW));
    if !small || !handle.repeats.missed(hash(described, in_place)) {
        return;
    }
    // SAFETY: forwarded from the caller's promise.
    let Some(written) = (unsafe { written(args, handle.kernel.key()) }) else {
        return;
    };
    // Descriptors that changed since the ordinary path read them (which only a caller
    // breaking its promise can make) are not kept.
    let checked = described
        .iter()
        .all(|(operand, d)| copied_as_checked(&written[slot(*operand)], d));
    if !checked {
        return;
    }
    let Ok(prepared) = prepare_described(&handle.kernel, described, in_place) else {
        return;
    };
    let out_like_data = handle.kernel.key().kind() == OpKind::ScatterElements
        && same_geometry(
            described_of(described, Operand::Output),
            described_of(described, Operand::Data),
        );
    let repeat = Repeat {
        written,
        out_like_data,
        reach: reaches(described),
        call: prepared,
    };
    handle.repeats.keep(repeat, |r| {
        r.written == written && r.call.is_in_place() == in_place
    });
}

/// Whether `w` is the copy of the descriptor the ordinary path described as `d`.
fn copied_as_checked(w: &Written, d: &Described) -> bool {
    let rank = d.shape.len();
    let strides_as_checked = if w.strided {
        d.strides
            .iter()
            .zip(&w.strides[..rank])
            .all(|(&s, &written)| s as i64 == written)
    } else {
        d.strides == row_major(&d.shape)
    };
    // `first` is the byte offset plus the lowest element offset's bytes, `-offset` elements.
    let byte_offset = d.first as i128 + d.offset as i128 * d.dtype.size() as i128;
    w.device_type == DEVICE_CPU
        && w.ndim as usize == rank
        && cabi::dtype_of_code(w.dtype) == Some(d.dtype)
        && d.shape
            .iter()
            .zip(&w.shape[..rank])
            .all(|(&n, &written)| n as i64 == written)
        && strides_as_checked
        && (d.len == 0 || byte_offset == w.byte_offset as i128)
}

#[cfg(test)]
mod tests {
    use std::ffi::{CStr, CString};

    use super::*;
    use crate::cabi::{dtype_code, Status, DEVICE_CPU};
    use crate::ffi::{sj_cache_free, sj_cache_new, sj_kernel_free, sj_kernel_get, sj_last_error};
    use scatterjit_ir::{DType, MAX_RANK};

    const SHAPE: [i64; 2] = [2, 3];

    /// A change to a call's four descriptors.
    type Adjust = fn(&mut [SjTensor; 4]);

    /// A row-major [2, 3] descriptor of `dtype` over `data`.
    fn tensor(data: *mut u8, dtype: DType) -> SjTensor {
        SjTensor {
            data,
            device_type: DEVICE_CPU,
            device_id: 0,
            ndim: 2,
            dtype: dtype_code(dtype).expect("a numeric dtype"),
            shape: SHAPE.as_ptr(),
            strides: std::ptr::null(),
            byte_offset: 0,
        }
    }

    /// A new handle of scatter add along axis 1 of f32 with i64 indices, from its own cache.
    fn scatter_add() -> *mut SjKernel {
        let cache = sj_cache_new();
        let key = CString::new("scatter_elements.f32.i64.r2.a1.add").unwrap();
        let mut kernel = std::ptr::null_mut();
        // SAFETY: a live cache, a C string, a writable pointer.
        assert_eq!(
            unsafe { sj_kernel_get(cache, key.as_ptr(), &mut kernel) },
            0
        );
        // SAFETY: made above, freed once; the handle keeps its kernel.
        unsafe { sj_cache_free(cache) };
        kernel
    }

    /// A call's arguments: data, indices, updates and out, `bad_index` all -1.
    fn args_of(tensors: &[SjTensor; 4]) -> SjArgs {
        let [data, indices, updates, out] = tensors;
        SjArgs {
            data,
            indices,
            updates,
            out,
            bad_index: [-1; MAX_RANK],
            workspace: std::ptr::null_mut(),
            workspace_bytes: 0,
        }
    }

    /// What one `sj_kernel_run` did: its status, message, out's bytes and `bad_index`.
    type Outcome = (i32, String, Vec<u8>, [i64; MAX_RANK]);

    /// The buffers of one call: data, indices, updates, out (each 6 elements and 8 bytes
    /// more, so that out can start inside another's).
    struct Buffers {
        bytes: [Vec<u8>; 4],
    }

    impl Buffers {
        fn new(indices: [i64; 6]) -> Buffers {
            let f32s = |v: [f32; 6]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>();
            let mut bytes = [
                f32s([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                indices.iter().flat_map(|i| i.to_le_bytes()).collect(),
                f32s([0.5, 0.25, 2.0, 8.0, 16.0, 32.0]),
                vec![0; 24],
            ];
            for b in &mut bytes {
                b.extend([0; 8]);
            }
            Buffers { bytes }
        }

        /// Row-major [2, 3] descriptors of the four buffers.
        fn tensors(&mut self) -> [SjTensor; 4] {
            let [d, i, u, o] = &mut self.bytes;
            [
                tensor(d.as_mut_ptr(), DType::F32),
                tensor(i.as_mut_ptr(), DType::I64),
                tensor(u.as_mut_ptr(), DType::F32),
                tensor(o.as_mut_ptr(), DType::F32),
            ]
        }

        /// Runs `kernel` on descriptors of these buffers, `adjust`ed first, then restores
        /// every buffer; out's bytes are those of the descriptor out ended as.
        fn run(&mut self, kernel: *mut SjKernel, adjust: impl Fn(&mut [SjTensor; 4])) -> Outcome {
            let before = self.bytes.clone();
            let mut tensors = self.tensors();
            adjust(&mut tensors);
            let mut args = args_of(&tensors);
            let out = &tensors[3];
            // SAFETY: a live handle; every descriptor reaches bytes of a live buffer.
            let status = unsafe { super::super::sj_kernel_run(kernel, &mut args) };
            // SAFETY: the thread's NUL-terminated last message.
            let message = unsafe { CStr::from_ptr(sj_last_error()) };
            let written = if out.data.is_null() {
                Vec::new()
            } else {
                // SAFETY: out reaches 24 bytes from its first element, inside a buffer.
                unsafe { std::slice::from_raw_parts(out.data.add(out.byte_offset as usize), 24) }
                    .to_vec()
            };
            let message = if status == Status::Ok as i32 {
                String::new()
            } else {
                message.to_string_lossy().into_owned()
            };
            self.bytes = before;
            (status, message, written, args.bad_index)
        }
    }

    /// Runs the call three times on one handle (the third on the kept call, when the
    /// first two succeeded) and once on a fresh handle (the ordinary path), and checks
    /// that all four did the same; returns whether the handle kept the call.
    fn same_on_both_paths(
        buffers: &mut Buffers,
        adjust: impl Fn(&mut [SjTensor; 4]) + Copy,
    ) -> (Outcome, bool) {
        let (kept, fresh) = (scatter_add(), scatter_add());
        let outcomes: Vec<Outcome> = (0..3).map(|_| buffers.run(kept, adjust)).collect();
        let ordinary = buffers.run(fresh, adjust);
        for outcome in &outcomes {
            assert_eq!(*outcome, ordinary);
        }
        // SAFETY: a live handle.
        let repeats = unsafe { &(*kept).repeats };
        let was_kept = repeats.kept() == 1;
        // SAFETY: each freed once.
        unsafe {
            sj_kernel_free(kept);
            sj_kernel_free(fresh);
        }
        (ordinary, was_kept)
    }

    #[test]
    fn a_repeated_call_runs_on_the_kept_call_as_the_ordinary_path_does() {
        let mut buffers = Buffers::new([2, 0, 2, 1, 1, -1]);
        let (outcome, kept) = same_on_both_paths(&mut buffers, |_| {});
        assert_eq!(outcome.0, Status::Ok as i32);
        assert!(kept, "a call that succeeded twice is kept");
        // In place: out is data's descriptor.
        let (outcome, kept) = same_on_both_paths(&mut buffers, |t| t[3] = t[0]);
        assert_eq!(outcome.0, Status::Ok as i32);
        assert!(kept);
        // In place too: out starts where data does, from another pointer and offset.
        let (in_place, kept) = same_on_both_paths(&mut buffers, |t| {
            t[3] = t[0];
            t[3].data = t[0].data.wrapping_sub(8);
            t[3].byte_offset = 8;
        });
        assert_eq!(in_place, outcome);
        assert!(kept);
    }

    #[test]
    fn a_kept_call_checks_memory_as_the_ordinary_path_does() {
        let mut buffers = Buffers::new([2, 0, 2, 1, 1, -1]);
        let keep = |handle| {
            let mut buffers = Buffers::new([0; 6]);
            for _ in 0..2 {
                assert_eq!(buffers.run(handle, |_| {}).0, Status::Ok as i32);
            }
        };
        // Each adjustment leaves the geometry as kept and breaks one check on memory.
        let breakers: [(Status, Adjust); 3] = [
            (Status::NullPointer, |t| t[1].data = std::ptr::null_mut()),
            (Status::Overlap, |t| t[3].data = t[2].data),
            (Status::Overlap, |t| t[3].data = t[0].data.wrapping_add(4)),
        ];
        for (want, adjust) in breakers {
            let (kept, fresh) = (scatter_add(), scatter_add());
            keep(kept);
            let ran = buffers.run(kept, adjust);
            assert_eq!(ran, buffers.run(fresh, adjust));
            assert_eq!(ran.0, want as i32, "{}", ran.1);
            // SAFETY: each freed once.
            unsafe {
                sj_kernel_free(kept);
                sj_kernel_free(fresh);
            }
        }
        // A bad index: its position, and out unchanged, on both paths.
        let mut bad = Buffers::new([2, 0, 2, 1, 3, -1]);
        let (outcome, kept) = same_on_both_paths(&mut bad, |_| {});
        assert_eq!(outcome.0, Status::IndexOutOfBounds as i32);
        assert_eq!(outcome.3[..2], [1, 1]);
        assert_eq!(outcome.2, vec![0; 24]);
        assert!(!kept, "a call that failed is not kept");
        let handle = scatter_add();
        keep(handle);
        assert_eq!(bad.run(handle, |_| {}), outcome);
        // SAFETY: freed once.
        unsafe { sj_kernel_free(handle) };
    }

    #[test]
    fn only_descriptors_equal_field_for_field_repeat_a_kept_call() {
        let handle = scatter_add();
        let mut buffers = Buffers::new([2, 0, 2, 1, 1, -1]);
        for _ in 0..2 {
            assert_eq!(buffers.run(handle, |_| {}).0, Status::Ok as i32);
        }
        static ROW_MAJOR: [i64; 2] = [3, 1];
        let changes: [Adjust; 5] = [
            |_| {},
            |t| t[1].strides = ROW_MAJOR.as_ptr(),
            |t| t[2].byte_offset = 4,
            |t| t[3].device_id = 9,
            |t| t[0].dtype = dtype_code(DType::I32).unwrap(),
        ];
        for (n, change) in changes.into_iter().enumerate() {
            let mut tensors = buffers.tensors();
            change(&mut tensors);
            let args = args_of(&tensors);
            // SAFETY: a live handle and live descriptors.
            let found = unsafe { kept_for(&*handle, &args, true) }.is_some();
            // Strides given explicitly (even row-major ones), another byte offset or
            // dtype: another call; the device id, which the CPU ignores, is not compared.
            assert_eq!(found, n == 0 || n == 3, "change {n}");
        }
        // SAFETY: freed once.
        unsafe { sj_kernel_free(handle) };
    }

    #[test]
    fn only_a_copy_of_what_the_ordinary_path_checked_is_kept() {
        let handle = scatter_add();
        let mut buffers = Buffers::new([2, 0, 2, 1, 1, -1]);
        static STRIDES: [i64; 2] = [3, 1];
        let mut tensors = buffers.tensors();
        tensors[2].strides = STRIDES.as_ptr();
        tensors[3].byte_offset = 4;
        let args = args_of(&tensors);
        // SAFETY: a live handle and descriptors of live buffers.
        let (copied, described) = unsafe {
            let kernel = &(*handle).kernel;
            (
                written(&args, kernel.key()).expect("readable descriptors"),
                super::super::describe_call(kernel, &args, true).unwrap_or_else(|_| panic!()),
            )
        };
        let mut two_four = [0; MAX_DEPTH];
        two_four[..2].copy_from_slice(&[2, 4]);
        for (operand, d) in &described {
            let w = copied[slot(*operand)];
            assert!(copied_as_checked(&w, d), "{operand:?}");
            let changed = [
                Written { ndim: 1, ..w },
                Written {
                    dtype: dtype_code(DType::I32).unwrap(),
                    ..w
                },
                Written {
                    byte_offset: w.byte_offset + 4,
                    ..w
                },
                Written {
                    device_type: 2,
                    ..w
                },
                Written {
                    strided: true,
                    strides: two_four,
                    ..w
                },
                Written {
                    shape: two_four,
                    ..w
                },
            ];
            for (n, changed) in changed.iter().enumerate() {
                assert!(!copied_as_checked(changed, d), "{operand:?}, change {n}");
            }
        }
        // SAFETY: freed once.
        unsafe { sj_kernel_free(handle) };
    }

    /// A Gather's output may have more than `MAX_RANK` dims; its calls are kept too.
    #[test]
    fn calls_with_an_output_past_max_rank_are_kept() {
        let cache = sj_cache_new();
        let key = CString::new(format!("gather.f32.i64.r{MAX_RANK}.q2.a0")).unwrap();
        let mut kernel = std::ptr::null_mut();
        // SAFETY: a live cache, a C string, a writable pointer.
        assert_eq!(
            unsafe { sj_kernel_get(cache, key.as_ptr(), &mut kernel) },
            0
        );
        let data_shape: Vec<i64> = [2].into_iter().chain([1; MAX_RANK - 1]).collect();
        let out_shape = vec![1i64; MAX_RANK + 1];
        let index_shape = [1i64, 1];
        let mut values = [1.5f32, 2.5];
        let mut picks = [-1i64];
        let mut out = [0f32];
        let descriptor = |data: *mut u8, dtype: DType, shape: &[i64]| SjTensor {
            data,
            device_type: DEVICE_CPU,
            device_id: 0,
            ndim: shape.len() as i32,
            dtype: dtype_code(dtype).unwrap(),
            shape: shape.as_ptr(),
            strides: std::ptr::null(),
            byte_offset: 0,
        };
        let data = descriptor(values.as_mut_ptr().cast(), DType::F32, &data_shape);
        let indices = descriptor(picks.as_mut_ptr().cast(), DType::I64, &index_shape);
        let out_tensor = descriptor(out.as_mut_ptr().cast(), DType::F32, &out_shape);
        let mut args = SjArgs {
            data: &data,
            indices: &indices,
            updates: std::ptr::null(),
            out: &out_tensor,
            bad_index: [0; MAX_RANK],
            workspace: std::ptr::null_mut(),
            workspace_bytes: 0,
        };
        for _ in 0..3 {
            out[0] = 0.0;
            // SAFETY: a live handle and descriptors of live buffers.
            let status = unsafe { super::super::sj_kernel_run(kernel, &mut args) };
            assert_eq!(status, Status::Ok as i32);
            assert_eq!(out[0], 2.5);
        }
        // SAFETY: a live handle.
        assert_eq!(unsafe { &(*kernel).repeats }.kept(), 1);
        // SAFETY: each freed once.
        unsafe {
            sj_kernel_free(kernel);
            sj_cache_free(cache);
        }
    }
}
