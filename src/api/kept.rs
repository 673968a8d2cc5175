//! The free functions' kept calls. A framework calls [`crate::run`] on the same nodes again
//! and again: same op, same dtypes and shapes. Each thread keeps up to [`KEPT`] calls,
//! each bound to its geometry on its second miss among the thread's recent misses (as
//! `crate::recent` keeps a kernel's), looked up by op and the tensors' dtypes and shapes,
//! so that a call repeating one runs on its binding without validating the op again,
//! finding its kernel in the cache, or viewing the tensors: owned tensors are row-major,
//! so equal dtypes and shapes make equal geometries, and `Op::validate` depends on nothing
//! else. Kept per thread, across kernels: a model's nodes, which may be many of one kernel
//! (whose own memo keeps four geometries).
//!
//! A kept call holds its kernel weakly: one the cache evicts is not kept alive by a thread
//! that called it, and the call then takes the ordinary path.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::sync::{Arc, Weak};

use scatterjit_ir::{DType, Op, Tensor};

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
    call: Rc<KeptCall>,
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

/// The tensors of a call, as its kept form compares them.
type Tensors<'t> = [Option<&'t Tensor>; 3];

/// The hash a call is kept by. Calls that collide replace each other; a kept call is
/// matched field for field ([`Kept::describes`]).
fn lookup(op: &Op, tensors: &Tensors<'_>) -> u64 {
    geometry_hash(&(op, tensors.map(|t| t.map(|t| (t.dtype(), t.shape())))))
}

impl Kept {
    fn describes(&self, op: &Op, tensors: &Tensors<'_>) -> bool {
        self.op == *op
            && self
                .tensors
                .iter()
                .zip(tensors)
                .all(|(kept, t)| match (kept, t) {
                    (Some((dtype, shape)), Some(t)) => *dtype == t.dtype() && **shape == *t.shape(),
                    (None, None) => true,
                    _ => false,
                })
    }
}

/// A call that did not run as a kept call: the hash it is looked up by, for [`missed`].
pub(super) struct Miss(u64);

/// Runs a call this thread kept with `op` and tensors of these dtypes and shapes, or
/// returns a [`Miss`] where there is none, or where the call must take the ordinary path
/// (see [`Kernel::run_kept`]).
pub(super) fn run(
    op: &Op,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
) -> std::result::Result<Result<Tensor>, Miss> {
    let tensors = [Some(data), Some(indices), updates];
    let key = lookup(op, &tensors);
    // The kernel and call leave the thread's cell before they run.
    let found = CALLS.try_with(|calls| {
        let mut calls = calls.borrow_mut();
        let kept = calls.kept.get(&key)?;
        if !kept.describes(op, &tensors) {
            return None;
        }
        let found = (kept.kernel.upgrade()?, Rc::clone(&kept.call));
        calls.found += 1;
        Some(found)
    });
    let Ok(Some((kernel, call))) = found else {
        return Err(Miss(key));
    };
    kernel
        .run_kept(&call, data, indices, updates)
        .ok_or(Miss(key))
}

/// After a call of `op` on these tensors by `kernel` that missed (`miss`) and succeeded:
/// on its second miss among the thread's recent misses, keeps what `bind` makes of it (in
/// place of a kept call looked up alike; a thread that keeps [`KEPT`] calls forgets them
/// all first), else remembers the miss. Calls that never repeat pay a hash, not a binding.
pub(super) fn missed(
    Miss(key): Miss,
    op: &Op,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
    kernel: &Arc<Kernel>,
    bind: impl FnOnce() -> Option<KeptCall>,
) {
    let tensors = [Some(data), Some(indices), updates];
    // A thread being torn down keeps nothing.
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
    if second != Ok(true) {
        return;
    }
    // Bound outside the thread's cell: binding may compile.
    let Some(call) = bind() else {
        return;
    };
    let kept = Kept {
        op: *op,
        tensors: tensors.map(|t| t.map(|t| (t.dtype(), t.shape().into()))),
        kernel: Arc::downgrade(kernel),
        call: Rc::new(call),
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
            missed(
                miss(),
                &op,
                &data,
                &indices,
                Some(&updates),
                &kernel,
                || None,
            );
            missed(miss(), &op, &data, &indices, Some(&updates), &kernel, bind);
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
}
