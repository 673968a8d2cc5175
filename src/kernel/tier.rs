//! Which code a call of a pass runs: `Strided` code, which [`Kernel::compile`] compiles
//! before it returns and which runs any strides, or the variant specialized for the call's
//! layout, compiled once the work of the pass's calls repays its compile.

use std::sync::atomic::{AtomicU64, Ordering};

use scatterjit_ir::PassKind;

use super::Kernel;
use crate::abi::Variant;
use crate::error::Result;
use crate::jit::PassFn;

/// How much a call asks of a pass's code (see [`Kernel::entry`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Demand {
    /// One ordinary call, running this many elements of the pass.
    Once(u64),
    /// A binding kept for repeated calls (a prepared call, the memo's): its variants are
    /// compiled now.
    Repeated,
}

/// The elements of work after which a pass's specialized variant is compiled (see
/// [`Kernel::compile`]): a specialized variant costs about 100 to 250 us to compile and
/// saves 0.2 to 1.2 ns per element (`examples/tiers.rs`), so it has repaid its compile
/// after 130,000 to 1,300,000 elements.
pub const SPECIALIZE_AFTER: u64 = 1 << 18;

static SPECIALIZE_AFTER_NOW: AtomicU64 = AtomicU64::new(SPECIALIZE_AFTER);

/// Sets the work after which passes compile their specialized variants (default
/// [`SPECIALIZE_AFTER`]), process-wide. Results do not depend on it; tests set 0 so that
/// small problems run every variant.
#[doc(hidden)]
pub fn set_specialize_after(elements: u64) {
    SPECIALIZE_AFTER_NOW.store(elements, Ordering::Relaxed);
}

/// The work after which passes compile their specialized variants now (see
/// [`set_specialize_after`]).
pub(super) fn specialize_after() -> u64 {
    SPECIALIZE_AFTER_NOW.load(Ordering::Relaxed)
}

/// Adds `elements` of work to `rent` (work run without some code that would have sped it
/// up) and says whether the total has repaid compiling that code: whether it reaches
/// [`SPECIALIZE_AFTER`] elements (or what [`set_specialize_after`] set).
pub(super) fn repaid(rent: &AtomicU64, elements: u64) -> bool {
    let before = rent.fetch_add(elements, Ordering::Relaxed);
    before.saturating_add(elements) >= specialize_after()
}

impl Kernel {
    /// The code a call of `pass` bound for `variant` (its outermost loop `listed` or not)
    /// runs, compiled now if it is the first use: `variant` itself where it is compiled
    /// already, where the binding needs it ([`crate::abi::ParamLayout::binds_rows`]), and
    /// where the call's `demand` repays compiling it; `Strided` code otherwise. An
    /// ordinary call repays it when its work, added to what the pass's earlier calls ran on
    /// `Strided` code while they wanted a variant, reaches [`SPECIALIZE_AFTER`] elements.
    pub(super) fn entry(
        &self,
        pass: PassKind,
        variant: Variant,
        listed: bool,
        demand: Demand,
    ) -> Result<PassFn> {
        let variant = match self.specializes(pass, variant, listed, demand) {
            true => variant,
            false => Variant::Strided,
        };
        self.compiled(pass, variant, listed)
    }

    /// Whether a call of `pass` bound for `variant` runs it (see [`Self::entry`]).
    fn specializes(&self, pass: PassKind, variant: Variant, listed: bool, demand: Demand) -> bool {
        if variant == Variant::Strided || self.layout(pass).binds_rows(variant) {
            return true;
        }
        if self.unspecialized.load(Ordering::Relaxed) {
            return false;
        }
        if self.slot(pass, variant, listed).get().is_some() {
            return true;
        }
        match demand {
            Demand::Repeated => true,
            Demand::Once(elements) => repaid(&self.rent[pass.index()], elements),
        }
    }

    /// Counts every pass's compile as repaid: each pass's next call compiles the variant
    /// it binds, as a prepared call's would. For kernels whose calls come from another
    /// kernel's calls, which repaid their compile before making them.
    pub(super) fn repay_all(&self) {
        for rent in &self.rent {
            rent.store(u64::MAX / 2, Ordering::Relaxed);
        }
    }

    /// Makes every later call of this kernel run `Strided` code, except where a binding
    /// needs a row variant; for tests of the code calls run before they specialize.
    #[doc(hidden)]
    pub fn stay_unspecialized(&self) {
        self.unspecialized.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use scatterjit_ir::{interp, DType, KernelKey, Op, OpKind, Reduction, Tensor};

    use super::*;
    use crate::tensor::{TensorView, TensorViewMut};
    use crate::Geometry;

    /// A scatter add of f32 along the last axis of [rows, 1024], with u16 indices (which
    /// no call compacts, so its own passes run): `rows` x 1024 elements of work per call.
    fn scatter(rows: usize) -> (Arc<Kernel>, Op, [Tensor; 3]) {
        let key = KernelKey::scatter_elements(DType::F32, DType::U16, 2, 1, Reduction::Add, true)
            .unwrap();
        let shape = vec![rows, 1024];
        let n = rows * 1024;
        let floats = |seed: u32| -> Vec<u8> {
            (0..n as u32)
                .flat_map(|i| ((i.wrapping_mul(seed) % 97) as f32 - 48.0).to_le_bytes())
                .collect()
        };
        let indices: Vec<u8> = (0..n as u32)
            .flat_map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) as u16 % 1024).to_le_bytes())
            .collect();
        let tensors = [
            Tensor::from_bytes(DType::F32, shape.clone(), floats(7)).unwrap(),
            Tensor::from_bytes(DType::U16, shape.clone(), indices).unwrap(),
            Tensor::from_bytes(DType::F32, shape, floats(13)).unwrap(),
        ];
        let op = Op::new(OpKind::ScatterElements, 1, Reduction::Add, true);
        (Arc::new(Kernel::compile(key).unwrap()), op, tensors)
    }

    /// One ordinary call's output bytes.
    fn call(kernel: &Kernel, [data, indices, updates]: &[Tensor; 3]) -> Vec<u8> {
        let mut out = Tensor::zeros(DType::F32, data.shape().to_vec()).unwrap();
        kernel
            .run_into(
                &mut TensorViewMut::from(&mut out),
                &TensorView::from(data),
                &TensorView::from(indices),
                Some(&TensorView::from(updates)),
            )
            .unwrap();
        out.bytes().to_vec()
    }

    /// Whether an apply variant other than `Strided` is compiled.
    fn specialized(kernel: &Kernel) -> bool {
        kernel
            .compiled_variants()
            .iter()
            .any(|v| v.starts_with("apply.") && v != "apply.strided")
    }

    #[test]
    fn compile_makes_strided_code_only() {
        let (kernel, ..) = scatter(1);
        assert_eq!(kernel.compiled_variants(), ["apply.strided"]);
        assert_eq!(kernel.first_use_compile_time(), std::time::Duration::ZERO);
    }

    #[test]
    fn calls_run_strided_code_until_their_work_repays_a_variant() {
        // 100 rows: 102,400 elements a call, more than the memo keeps.
        let (kernel, op, tensors) = scatter(100);
        let want = interp::run(&op, &tensors[0], &tensors[1], Some(&tensors[2])).unwrap();
        let calls_before = SPECIALIZE_AFTER.div_ceil(100 * 1024);
        for _ in 1..calls_before {
            assert_eq!(call(&kernel, &tensors), want.bytes());
            assert!(!specialized(&kernel), "{:?}", kernel.compiled_variants());
        }
        assert_eq!(call(&kernel, &tensors), want.bytes());
        assert!(specialized(&kernel), "{:?}", kernel.compiled_variants());
        assert!(kernel.first_use_compile_time() > std::time::Duration::ZERO);
    }

    #[test]
    fn one_call_that_repays_a_variant_runs_it() {
        let rows = SPECIALIZE_AFTER.div_ceil(1024) as usize;
        let (kernel, _, tensors) = scatter(rows);
        call(&kernel, &tensors);
        assert!(specialized(&kernel), "{:?}", kernel.compiled_variants());
    }

    #[test]
    fn prepared_calls_specialize_at_once() {
        let (kernel, _, tensors) = scatter(2);
        let geometry = |t: &Tensor| Geometry::row_major(t.shape());
        let [data, indices, updates] = &tensors;
        kernel
            .prepare(
                &geometry(data),
                &geometry(data),
                &geometry(indices),
                Some(&geometry(updates)),
            )
            .unwrap();
        assert!(specialized(&kernel), "{:?}", kernel.compiled_variants());
    }

    #[test]
    fn an_unspecialized_kernel_stays_on_strided_code() {
        let rows = SPECIALIZE_AFTER.div_ceil(1024) as usize;
        let (kernel, op, tensors) = scatter(rows);
        kernel.stay_unspecialized();
        let want = interp::run(&op, &tensors[0], &tensors[1], Some(&tensors[2])).unwrap();
        assert_eq!(call(&kernel, &tensors), want.bytes());
        assert!(!specialized(&kernel), "{:?}", kernel.compiled_variants());
    }
}
