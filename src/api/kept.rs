//! The free functions' kept calls. A framework calls [`crate::run`] (or
//! [`crate::scatter_`], or asks [`crate::kernel_for`]) on the same nodes again and again:
//! same op, same dtypes and shapes. Each thread keeps up to [`KEPT`] calls, each on its
//! second miss among the thread's recent misses (as `crate::recent` keeps a kernel's),
//! looked up by op and the tensors' dtypes and shapes, so that a call repeating one finds
//! its kernel without validating the op again or asking the cache: `Op::validate` depends
//! on nothing else. Kept per thread, across kernels: a model's nodes, which may be many of
//! one kernel (whose own memo keeps four geometries).
//!
//! A call into a new output ([`crate::run`]) keeps a binding too, and a repeat runs on it
//! without viewing the tensors: owned tensors are row-major, so equal dtypes and shapes
//! make equal geometries. Other calls run on views, whose strides and offsets the lookup
//! does not compare: they keep the kernel alone, whose own memo keeps the binding of each
//! geometry.
//!
//! A kept call holds its kernel weakly: one the cache evicts is not kept alive by a thread
//! that called it, and the call then takes the ordinary path.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::sync::{Arc, Weak};

use scatterjit_ir::{DType, Meta, Op, Tensor};

use crate::error::Result;
use crate::kernel::{KeptCall, Kernel};
use crate::recent::{geometry_hash, GeometryHasher};

/// How many calls each thread keeps, and how many recent misses it remembers: a model's
/// nodes, each its own call, across kernels. A thread that meets more starts over.
const KEPT: usize = 256;

/// One kept call: what it is looked up by, and what runs it.
struct Kept {
    op: Op,
    /// Data, indices and updates (none for the gathers): dtype and shape.
    tensors: [Option<(DType, Box<[usize]>)>; 3],
    kernel: Weak<Kernel>,
    /// The binding of a call into a new output on owned tensors, once one is kept.
    call: Option<Rc<KeptCall>>,
}

/// A thread's kept calls, by the hash of what they are looked up by ([`lookup`]).
#[derive(Default)]
struct Calls {
    kept: HashMap<u64, Kept, BuildHasherDefault<GeometryHasher>>,
    /// The hashes of the calls that missed since, not kept yet.
    missed: HashSet<u64, BuildHasherDefault<GeometryHasher>>,
    /// How many calls found one of them (for tests).
    found: u64,
}

thread_local! {
    static CALLS: RefCell<Calls> = RefCell::default();
}

/// The dtypes and shapes of a call's data, indices and updates (none for the gathers).
pub(super) type Metas<'t> = [Option<Meta<'t>>; 3];

/// The metas of a call on owned tensors.
fn metas_of<'t>(data: &'t Tensor, indices: &'t Tensor, updates: Option<&'t Tensor>) -> Metas<'t> {
    [
        Some(data.meta()),
        Some(indices.meta()),
        updates.map(Tensor::meta),
    ]
}

/// The hash a call is kept by. Calls that collide replace each other; a kept call is
/// matched field for field ([`Kept::describes`]).
fn lookup(op: &Op, tensors: &Metas<'_>) -> u64 {
    geometry_hash(&(op, tensors.map(|t| t.map(|t| (t.dtype, t.shape)))))
}

impl Kept {
    #[inline]
    fn describes(&self, op: &Op, tensors: &Metas<'_>) -> bool {
        self.op == *op
            && self
                .tensors
                .iter()
                .zip(tensors)
                .all(|(kept, t)| match (kept, t) {
                    (Some((dtype, shape)), Some(t)) => *dtype == t.dtype && **shape == *t.shape,
                    (None, None) => true,
                    _ => false,
                })
    }
}

/// A call that did not run as a kept call: the hash it is looked up by, for [`missed`] and
/// [`validated`].
pub(super) struct Miss(u64);

/// What `take` hands out of the call this thread kept under `key` with `op` and tensors of
/// these dtypes and shapes, if there is one and `take` does not decline.
fn find<T>(
    key: u64,
    op: &Op,
    tensors: &Metas<'_>,
    take: impl FnOnce(&Kept) -> Option<T>,
) -> Option<T> {
    // What runs leaves the thread's cell before it runs.
    let found = CALLS.try_with(|calls| {
        let mut calls = calls.borrow_mut();
        let kept = calls.kept.get(&key)?;
        if !kept.describes(op, tensors) {
            return None;
        }
        let found = take(kept)?;
        calls.found += 1;
        Some(found)
    });
    found.ok().flatten()
}

/// Runs a call into a new output this thread kept with `op` and tensors of these dtypes
/// and shapes, or returns a [`Miss`] where there is none (or it has no binding yet), or
/// where the call must take the ordinary path (see [`Kernel::run_kept`]).
pub(super) fn run(
    op: &Op,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
) -> std::result::Result<Result<Tensor>, Miss> {
    let tensors = metas_of(data, indices, updates);
    let key = lookup(op, &tensors);
    let found = find(key, op, &tensors, |kept| {
        Some((kept.kernel.upgrade()?, Rc::clone(kept.call.as_ref()?)))
    });
    let Some((kernel, call)) = found else {
        return Err(Miss(key));
    };
    kernel
        .run_kept(&call, data, indices, updates)
        .ok_or(Miss(key))
}

/// The kernel of a call this thread kept with `op` and operands of these dtypes and shapes
/// (`Op::validate` accepted them with its key), or a [`Miss`].
pub(super) fn kernel(op: &Op, tensors: &Metas<'_>) -> std::result::Result<Arc<Kernel>, Miss> {
    let key = lookup(op, tensors);
    find(key, op, tensors, |kept| kept.kernel.upgrade()).ok_or(Miss(key))
}

/// After a call into a new output of `op` on these tensors by `kernel` that missed and
/// succeeded: on its second miss among the thread's recent misses, keeps it with what
/// `bind` makes of it, else remembers the miss. Calls that never repeat pay a hash, not a
/// binding.
pub(super) fn missed(
    Miss(key): Miss,
    op: &Op,
    (data, indices, updates): (&Tensor, &Tensor, Option<&Tensor>),
    kernel: &Arc<Kernel>,
    bind: impl FnOnce() -> Option<KeptCall>,
) {
    if !second_miss(key) {
        return;
    }
    // Bound outside the thread's cell: binding may compile.
    let Some(call) = bind() else {
        return;
    };
    let tensors = metas_of(data, indices, updates);
    keep(key, op, &tensors, kernel, Some(Rc::new(call)));
}

/// [`missed`] for a call that `Op::validate` accepted with `kernel`'s key: keeps its kernel
/// alone.
pub(super) fn validated(Miss(key): Miss, op: &Op, tensors: &Metas<'_>, kernel: &Arc<Kernel>) {
    if second_miss(key) {
        keep(key, op, tensors, kernel, None);
    }
}

/// Whether the call looked up by `key` missed before among the thread's recent misses
/// (which then forget it), else remembers its miss. A thread being torn down says no.
fn second_miss(key: u64) -> bool {
    let second = CALLS.try_with(|calls| {
        let mut calls = calls.borrow_mut();
        let second = calls.missed.remove(&key);
        if !second {
            if calls.missed.len() >= KEPT {
                calls.missed.clear();
            }
            calls.missed.insert(key);
        }
        second
    });
    second == Ok(true)
}

/// Keeps a call under `key`, in place of a kept call looked up alike; a thread that keeps
/// [`KEPT`] calls forgets them all first.
fn keep(key: u64, op: &Op, tensors: &Metas<'_>, kernel: &Arc<Kernel>, call: Option<Rc<KeptCall>>) {
    let kept = Kept {
        op: *op,
        tensors: tensors.map(|t| t.map(|t| (t.dtype, t.shape.into()))),
        kernel: Arc::downgrade(kernel),
        call,
    };
    let _ = CALLS.try_with(|calls| {
        let mut calls = calls.borrow_mut();
        if calls.kept.len() >= KEPT && !calls.kept.contains_key(&key) {
            calls.kept.clear();
        }
        calls.kept.insert(key, kept);
    });
}

/// How many calls this thread keeps, and how many calls have found one of them.
pub(super) fn count() -> (usize, u64) {
    CALLS
        .try_with(|calls| {
            let calls = calls.borrow();
            (calls.kept.len(), calls.found)
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use scatterjit_ir::{interp, Reduction};

    use super::*;
    use crate::TensorView;

    /// Runs `f` on a thread of its own, which starts with no kept calls.
    fn on_new_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| s.spawn(f).join().unwrap())
    }

    /// A scatter add of `[3, 5]` f32 updates into `[6, 5]` along axis 0, values from `seed`,
    /// index `bad` at `[1, 2]` if given.
    fn scatter_add(seed: u32, bad: Option<i64>) -> (Op, Tensor, Tensor, Tensor) {
        let op = Op::ScatterElements {
            axis: 0,
            reduction: Reduction::Add,
            use_init_val: true,
        };
        let values = |n: u32| {
            (0..n)
                .map(|i| (i * 7 + seed) as f32 * 0.25)
                .collect::<Vec<_>>()
        };
        let mut picks: Vec<i64> = (0..15).map(|i| (i * 5 + seed as i64) % 6 - 3).collect();
        if let Some(bad) = bad {
            picks[7] = bad;
        }
        (
            op,
            Tensor::from_slice(&[6, 5], &values(30)).unwrap(),
            Tensor::from_slice(&[3, 5], &picks).unwrap(),
            Tensor::from_slice(&[3, 5], &values(15)).unwrap(),
        )
    }

    /// Runs `op` with the free function and checks its result against the interpreter's.
    fn runs_as_interpreted(op: &Op, data: &Tensor, indices: &Tensor, updates: Option<&Tensor>) {
        let want = interp::run(op, data, indices, updates).unwrap();
        assert_eq!(crate::run(op, data, indices, updates).unwrap(), want);
    }

    /// Calls `op` until this thread keeps it (at most eight calls), checking each result
    /// against the interpreter.
    fn keep_by_calling(op: &Op, data: &Tensor, indices: &Tensor, updates: Option<&Tensor>) {
        for _ in 0..8 {
            runs_as_interpreted(op, data, indices, updates);
            if count().0 > 0 {
                return;
            }
        }
        panic!("{op:?} was not kept");
    }

    #[test]
    fn repeated_calls_run_as_kept_calls_on_new_values() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            keep_by_calling(&op, &data, &indices, Some(&updates));
            for seed in 2..6 {
                let (op, data, indices, updates) = scatter_add(seed, None);
                assert!(run(&op, &data, &indices, Some(&updates)).is_ok());
                runs_as_interpreted(&op, &data, &indices, Some(&updates));
            }
            // A gather of rows, and a bool gather (its output starts zeroed).
            for dtype_is_bool in [false, true] {
                let op = Op::Gather { axis: 0 };
                let data = match dtype_is_bool {
                    false => Tensor::from_slice(&[4, 3], &[1.5f64; 12]).unwrap(),
                    true => Tensor::from_slice(&[4, 3], &[true, false, true].repeat(4)).unwrap(),
                };
                let indices = Tensor::from_slice(&[2], &[3i32, -4]).unwrap();
                for _ in 0..8 {
                    runs_as_interpreted(&op, &data, &indices, None);
                }
                assert!(run(&op, &data, &indices, None).is_ok());
            }
        });
    }

    #[test]
    fn a_thread_keeps_the_calls_of_many_nodes() {
        on_new_thread(|| {
            // Forty nodes: gathers of 1 to 40 rows of one table, three calls each in turn.
            let op = Op::Gather { axis: 0 };
            let data = Tensor::from_slice(&[50, 3], &[2.5f32; 150]).unwrap();
            let nodes: Vec<Tensor> = (1..=40i64)
                .map(|n| Tensor::from_slice(&[n as usize], &(0..n).collect::<Vec<_>>()).unwrap())
                .collect();
            for _ in 0..3 {
                for indices in &nodes {
                    runs_as_interpreted(&op, &data, indices, None);
                }
            }
            assert_eq!(count().0, nodes.len());
            let (_, before) = count();
            for indices in &nodes {
                crate::run(&op, &data, indices, None).unwrap();
            }
            assert_eq!(count().1 - before, nodes.len() as u64);
        });
    }

    #[test]
    fn a_thread_that_meets_more_calls_than_it_keeps_starts_over() {
        on_new_thread(|| {
            let op = Op::Gather { axis: 0 };
            let data = Tensor::from_slice(&[2, 3], &[1u8; 6]).unwrap();
            for n in 1..=KEPT + 1 {
                let indices = Tensor::from_slice(&[n], &vec![1i64; n]).unwrap();
                for _ in 0..3 {
                    runs_as_interpreted(&op, &data, &indices, None);
                }
                assert!(count().0 <= KEPT);
            }
            assert_eq!(count().0, 1);
        });
    }

    #[test]
    fn a_bad_index_in_a_kept_call_is_the_ordinary_paths_error() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            keep_by_calling(&op, &data, &indices, Some(&updates));
            for bad in [6, -7, i64::MAX, i64::MIN] {
                let (op, data, indices, updates) = scatter_add(3, Some(bad));
                let got = crate::run(&op, &data, &indices, Some(&updates)).unwrap_err();
                // A kernel of its own, with nothing kept, on the ordinary path.
                let key = op
                    .validate(data.meta(), indices.meta(), Some(updates.meta()))
                    .unwrap()
                    .key;
                let views = [&data, &indices, &updates].map(TensorView::from);
                let ordinary = Kernel::compile(key)
                    .unwrap()
                    .run(&views[0], &views[1], Some(&views[2]))
                    .unwrap_err();
                assert_eq!(got, ordinary);
                assert_eq!(
                    got.as_invalid(),
                    interp::run(&op, &data, &indices, Some(&updates))
                        .err()
                        .as_ref()
                );
                assert!(got.to_string().contains(&bad.to_string()), "{got}");
            }
            // And the next good call runs as before.
            let (op, data, indices, updates) = scatter_add(4, None);
            runs_as_interpreted(&op, &data, &indices, Some(&updates));
        });
    }

    #[test]
    fn a_kept_call_obeys_the_limits_in_force() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            keep_by_calling(&op, &data, &indices, Some(&updates));
            let small = crate::Limits {
                max_output_bytes: 64,
                ..crate::limits()
            };
            let run = || crate::run(&op, &data, &indices, Some(&updates));
            let e = crate::with_limits(small, run).unwrap_err();
            assert_eq!(
                e.to_string(),
                "scatter_elements: the output needs 120 bytes, over the limit of 64 bytes"
            );
            assert!(run().is_ok());
        });
    }

    #[test]
    fn a_kept_call_does_not_keep_its_kernel_alive() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            let validated = op
                .validate(data.meta(), indices.meta(), Some(updates.meta()))
                .unwrap();
            let kernel = Arc::new(Kernel::compile(validated.key).unwrap());
            let views = [&data, &indices, &updates].map(TensorView::from);
            let out_shape = &validated.out_shape;
            let bind = || kernel.keep_new(out_shape, &views[0], &views[1], Some(&views[2]));
            let miss = || match run(&op, &data, &indices, Some(&updates)) {
                Err(miss) => miss,
                Ok(_) => panic!("kept before it was bound"),
            };
            let tensors = (&data, &indices, Some(&updates));
            missed(miss(), &op, tensors, &kernel, || None);
            missed(miss(), &op, tensors, &kernel, bind);
            assert!(run(&op, &data, &indices, Some(&updates)).is_ok());
            let weak = Arc::downgrade(&kernel);
            drop(kernel);
            assert!(weak.upgrade().is_none());
            assert!(run(&op, &data, &indices, Some(&updates)).is_err());
            // The free function takes the ordinary path.
            runs_as_interpreted(&op, &data, &indices, Some(&updates));
        });
    }

    #[test]
    fn only_calls_of_the_same_op_dtypes_and_shapes_match() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            keep_by_calling(&op, &data, &indices, Some(&updates));
            let other_ops = [
                Op::ScatterElements {
                    axis: -2,
                    reduction: Reduction::Add,
                    use_init_val: true,
                },
                Op::ScatterElements {
                    axis: 0,
                    reduction: Reduction::Mul,
                    use_init_val: true,
                },
                Op::ScatterElements {
                    axis: 0,
                    reduction: Reduction::Add,
                    use_init_val: false,
                },
            ];
            for other in other_ops {
                assert!(run(&other, &data, &indices, Some(&updates)).is_err());
            }
            let narrow = Tensor::from_slice(&[3, 5], &[0i32; 15]).unwrap();
            assert!(run(&op, &data, &narrow, Some(&updates)).is_err());
            let fewer = Tensor::from_slice(&[3, 4], &[0i64; 12]).unwrap();
            let short = Tensor::from_slice(&[3, 4], &[0.5f32; 12]).unwrap();
            assert!(run(&op, &data, &fewer, Some(&short)).is_err());
            let f64_data = Tensor::from_slice(&[6, 5], &[0.5f64; 30]).unwrap();
            assert!(run(&op, &f64_data, &indices, Some(&updates)).is_err());
            assert!(run(&op, &data, &indices, Some(&updates)).is_ok());
        });
    }

    /// A scatter add into `[6, 5]` f32 data in place along axis 0, through `scatter_` on
    /// views: data row-major or transposed in memory, updates `[3, 5]` from `seed`, index
    /// `bad` at `[1, 2]` if given. Checks the result (or error, data unchanged) against
    /// the interpreter's.
    fn scatter_in_place(seed: u32, transposed: bool, bad: Option<i64>) -> Result<()> {
        let (op, data, indices, updates) = scatter_add(seed, bad);
        let want = interp::run(&op, &data, &indices, Some(&updates));
        let mut bytes = data.bytes().to_vec();
        let strides: [isize; 2] = match transposed {
            false => [5, 1],
            true => {
                // The same values stored column by column.
                let values = data.to_vec::<f32>().unwrap();
                let columns = (0..30).map(|i| values[(i % 6) * 5 + i / 6]);
                bytes = columns.flat_map(f32::to_le_bytes).collect();
                [1, 6]
            }
        };
        let mut view =
            crate::TensorViewMut::new(DType::F32, &[6, 5], &strides, 0, &mut bytes).unwrap();
        let got = crate::scatter_(
            &mut view,
            0,
            &TensorView::from(&indices),
            &TensorView::from(&updates),
            Reduction::Add,
            true,
        );
        let after = view.as_view().to_tensor().unwrap();
        match (want, &got) {
            (Ok(want), Ok(())) => assert_eq!(after, want),
            (Err(want), Err(e)) => {
                assert_eq!(e.as_invalid(), Some(&want));
                assert_eq!(after, data, "nothing written");
            }
            (want, got) => panic!("interpreter {want:?}, scatter_ {got:?}"),
        }
        got
    }

    #[test]
    fn repeated_in_place_calls_find_their_kernel_whatever_the_strides() {
        on_new_thread(|| {
            for seed in 1..4 {
                scatter_in_place(seed, false, None).unwrap();
            }
            assert_eq!(count().0, 1);
            let (_, before) = count();
            // Found by dtypes and shapes: strides the first calls did not have, too.
            for seed in 4..8 {
                scatter_in_place(seed, seed % 2 == 0, None).unwrap();
            }
            assert_eq!(count(), (1, before + 4));
        });
    }

    #[test]
    fn a_bad_index_in_a_kept_in_place_call_is_the_ordinary_paths_error() {
        on_new_thread(|| {
            for seed in 1..4 {
                scatter_in_place(seed, false, None).unwrap();
            }
            let (_, before) = count();
            for bad in [6, -7, i64::MAX, i64::MIN] {
                let e = scatter_in_place(3, true, Some(bad)).unwrap_err();
                assert!(e.to_string().contains(&bad.to_string()), "{e}");
            }
            assert_eq!(count().1, before + 4);
            scatter_in_place(5, false, None).unwrap();
        });
    }

    #[test]
    fn kernels_are_those_of_the_cache_and_bad_operands_are_never_kept() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            let metas = (data.meta(), indices.meta(), Some(updates.meta()));
            let key = op.validate(metas.0, metas.1, metas.2).unwrap().key;
            let cached = crate::KernelCache::global().get(&key).unwrap();
            for _ in 0..4 {
                let kernel = crate::kernel_for(&op, metas.0, metas.1, metas.2).unwrap();
                assert!(Arc::ptr_eq(&kernel, &cached));
            }
            assert_eq!(count(), (1, 2));
            // Operands the op refuses: the same error on every call, nothing kept.
            let short = Tensor::from_slice(&[3, 4], &[0.5f32; 12]).unwrap();
            let want = op
                .validate(data.meta(), indices.meta(), Some(short.meta()))
                .unwrap_err();
            for _ in 0..4 {
                let e = crate::kernel_for(&op, data.meta(), indices.meta(), Some(short.meta()));
                assert_eq!(e.unwrap_err().as_invalid(), Some(&want));
            }
            assert_eq!(count(), (1, 2));
        });
    }

    #[test]
    fn a_kept_kernel_gains_a_binding_once_new_outputs_repeat() {
        on_new_thread(|| {
            let (op, data, indices, updates) = scatter_add(1, None);
            let metas = (data.meta(), indices.meta(), Some(updates.meta()));
            for _ in 0..2 {
                crate::kernel_for(&op, metas.0, metas.1, metas.2).unwrap();
            }
            // Kept without a binding: a call into a new output misses until its second
            // miss binds one.
            assert!(run(&op, &data, &indices, Some(&updates)).is_err());
            for _ in 0..2 {
                runs_as_interpreted(&op, &data, &indices, Some(&updates));
            }
            assert!(run(&op, &data, &indices, Some(&updates)).is_ok());
            assert!(crate::kernel_for(&op, metas.0, metas.1, metas.2).is_ok());
            assert!(kernel(&op, &[Some(metas.0), Some(metas.1), metas.2]).is_ok());
            assert_eq!(count().0, 1);
        });
    }
}
