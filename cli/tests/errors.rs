//! Every kind of bad input, through the free functions (`scatterjit::run` and friends) and
//! through the low-level API (`KernelCache::get`, then `Kernel::run`, `run_into`,
//! `scatter_in_place`): the exact error variant with its fields, and no write on error
//! (SPEC.md: "Index normalization and bounds", "Types", "Empty tensors, errors and data
//! safety").
//!
//! Each table runs every case to the end and reports all failures at once, each naming the
//! case and the call path; a panic inside the library is reported as a failure of its case.

use std::fmt::{Debug, Display};
use std::panic::{self, AssertUnwindSafe};
use std::sync::OnceLock;

use scatterjit::ir::{
    checked_nbytes, DType, Element, Error as IrError, KernelKey, Meta, Op, OpKind, Reduction,
    Tensor, TensorRole, MAX_RANK,
};
use scatterjit::{Error, Kernel, KernelCache, TensorView, TensorViewMut};

// ---------------------------------------------------------------------------------------
// Harness

/// The failures of one case, each prefixed with the call path that failed.
#[derive(Default)]
pub(crate) struct Checker {
    failures: Vec<String>,
}

impl Checker {
    pub(crate) fn fail(&mut self, path: &str, message: String) {
        self.failures.push(format!("{path}: {message}"));
    }

    /// `got` must be exactly `Err(expected)`.
    pub(crate) fn err<T: Debug, E: Debug + Display + PartialEq>(
        &mut self,
        path: &str,
        got: Result<T, E>,
        expected: &E,
    ) {
        match got {
            Err(e) if e == *expected => {}
            Err(e) => self.fail(path, format!("expected {expected:?}, got {e:?} (\"{e}\")")),
            Ok(v) => self.fail(path, format!("expected {expected:?}, got Ok({v:?})")),
        }
    }

    /// `got` must be an error that `expect` accepts.
    fn expect<T: Debug>(&mut self, path: &str, got: Result<T, IrError>, expect: &Expect) {
        match (expect, got) {
            (Expect::Exact(e), got) => self.err(path, got, e),
            (Expect::InvalidView(role), Err(IrError::InvalidView { tensor, .. }))
                if tensor == *role => {}
            (Expect::InvalidView(role), got) => self.fail(
                path,
                format!("expected InvalidView {{ tensor: {role:?}, .. }}, got {got:?}"),
            ),
        }
    }

    /// `got` must be `Ok` with exactly the tensor `expected`.
    fn ok(&mut self, path: &str, got: scatterjit::Result<Tensor>, expected: &Tensor) {
        match got {
            Ok(t) if t == *expected => {}
            Ok(t) => self.fail(path, format!("expected {expected:?}, got {t:?}")),
            Err(e) => self.fail(path, format!("expected Ok, got {e:?} (\"{e}\")")),
        }
    }

    /// `got` must be `Ok(())`.
    fn done(&mut self, path: &str, got: scatterjit::Result<()>) {
        if let Err(e) = got {
            self.fail(path, format!("expected Ok, got {e:?} (\"{e}\")"));
        }
    }

    /// A buffer must be byte-identical to what it held before a failed call.
    pub(crate) fn unchanged(&mut self, path: &str, before: &[u8], after: &[u8]) {
        if before != after {
            let first = before.iter().zip(after).position(|(a, b)| a != b);
            self.fail(
                path,
                format!("buffer written on error (first changed byte: {first:?})"),
            );
        }
    }
}

/// One row of a table.
pub(crate) trait Case {
    fn name(&self) -> String;
    fn check(&self, c: &mut Checker);
}

/// Runs every case (catching panics) and fails with the full list of failures.
pub(crate) fn run_table<C: Case>(table: &str, cases: &[C]) {
    assert!(!cases.is_empty(), "{table}: empty table");
    let mut failures = Vec::new();
    for case in cases {
        let mut c = Checker::default();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| case.check(&mut c)));
        if let Err(payload) = outcome {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            c.fail("panicked", message);
        }
        let name = case.name();
        failures.extend(c.failures.into_iter().map(|f| format!("[{name}] {f}")));
    }
    const SHOWN: usize = 60;
    let more = failures.len().saturating_sub(SHOWN);
    assert!(
        failures.is_empty(),
        "{table}: {} failure(s) in {} case(s):\n{}{}",
        failures.len(),
        cases.len(),
        failures[..failures.len().min(SHOWN)].join("\n"),
        if more > 0 {
            format!("\n... and {more} more")
        } else {
            String::new()
        }
    );
}

/// A case written as a closure.
struct Custom {
    name: String,
    check: Box<dyn Fn(&mut Checker)>,
}

impl Case for Custom {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn check(&self, c: &mut Checker) {
        (self.check)(c)
    }
}

fn custom(name: impl Into<String>, check: impl Fn(&mut Checker) + 'static) -> Custom {
    Custom {
        name: name.into(),
        check: Box::new(check),
    }
}

/// What a constructor must fail with.
enum Expect {
    /// Exactly this error.
    Exact(IrError),
    /// `InvalidView` of this tensor, whatever the reason text.
    InvalidView(TensorRole),
}

// ---------------------------------------------------------------------------------------
// Inputs

/// Kernels for the low-level paths (the free functions use the global cache).
fn cache() -> &'static KernelCache {
    static CACHE: OnceLock<KernelCache> = OnceLock::new();
    CACHE.get_or_init(KernelCache::new)
}

pub(crate) fn get_kernel(c: &mut Checker, key: &KernelKey) -> Option<std::sync::Arc<Kernel>> {
    match cache().get(key) {
        Ok(k) => Some(k),
        Err(e) => {
            c.fail("KernelCache::get", format!("{key} does not compile: {e}"));
            None
        }
    }
}

/// `n` bytes of a repeating pattern that is a valid element of `dtype` (bools 0 or 1).
fn pattern(dtype: DType, n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            if dtype == DType::Bool {
                ((i + seed as usize) % 2) as u8
            } else {
                (i as u8).wrapping_mul(31).wrapping_add(seed)
            }
        })
        .collect()
}

/// A tensor of pattern bytes: data and updates.
pub(crate) fn filled(dtype: DType, shape: &[usize], seed: u8) -> Tensor {
    let n = checked_nbytes(dtype, shape).expect("test shapes fit");
    Tensor::from_bytes(dtype, shape.to_vec(), pattern(dtype, n, seed)).unwrap()
}

/// A pre-filled output buffer, different from any data tensor of the tests.
pub(crate) fn sentinel(dtype: DType, shape: &[usize]) -> Tensor {
    let n = checked_nbytes(dtype, shape).expect("test shapes fit");
    let bytes = (0..n)
        .map(|i| {
            if dtype == DType::Bool {
                u8::from(i % 3 == 0)
            } else {
                ((i * 73 + 5) % 251) as u8
            }
        })
        .collect();
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap()
}

fn f32s(shape: &[usize]) -> Tensor {
    filled(DType::F32, shape, 1)
}

pub(crate) fn ix<T: Element>(shape: &[usize], values: &[T]) -> Tensor {
    Tensor::from_slice(shape, values).unwrap()
}

/// Every multi-index of `shape` in row-major order (one empty index for a scalar).
fn positions(shape: &[usize]) -> Vec<Vec<usize>> {
    if shape.contains(&0) {
        return Vec::new();
    }
    let mut all = Vec::new();
    let mut pos = vec![0usize; shape.len()];
    loop {
        all.push(pos.clone());
        let mut d = shape.len();
        loop {
            if d == 0 {
                return all;
            }
            d -= 1;
            pos[d] += 1;
            if pos[d] < shape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
}

/// How a strided copy lays its elements out.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Layout {
    /// Row-major, each dim padded by one element, dim 0 walked backwards.
    PaddedReversed,
    /// Column-major (the first dim has stride 1), each dim padded by one element.
    ColumnMajor,
}

/// A tensor copied into a larger buffer with gaps; the gaps hold sentinel bytes.
pub(crate) struct Strided {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
    pub(crate) bytes: Vec<u8>,
}

impl Strided {
    pub(crate) fn of(t: &Tensor, layout: Layout) -> Strided {
        let shape = t.shape().to_vec();
        let r = shape.len();
        let mut strides = vec![0isize; r];
        let mut len = 1usize;
        let dims: Vec<usize> = match layout {
            Layout::PaddedReversed => (0..r).rev().collect(),
            Layout::ColumnMajor => (0..r).collect(),
        };
        for d in dims {
            strides[d] = len as isize;
            len *= shape[d] + 1;
        }
        let mut offset = 0;
        if matches!(layout, Layout::PaddedReversed) && r > 0 {
            offset = shape[0].saturating_sub(1) * strides[0] as usize;
            strides[0] = -strides[0];
        }
        let size = t.dtype().size();
        let mut bytes = sentinel(DType::U8, &[len * size]).into_bytes();
        if t.dtype() == DType::Bool {
            bytes.iter_mut().for_each(|b| *b &= 1);
        }
        for (n, pos) in positions(&shape).iter().enumerate() {
            let at: isize = pos
                .iter()
                .zip(&strides)
                .map(|(&p, &s)| p as isize * s)
                .sum();
            let at = (offset as isize + at) as usize * size;
            bytes[at..at + size].copy_from_slice(&t.bytes()[n * size..(n + 1) * size]);
        }
        Strided {
            dtype: t.dtype(),
            shape,
            strides,
            offset,
            bytes,
        }
    }

    pub(crate) fn view(&self) -> TensorView<'_> {
        TensorView::new(
            self.dtype,
            &self.shape,
            &self.strides,
            self.offset,
            &self.bytes,
        )
        .unwrap()
    }

    pub(crate) fn view_mut(&mut self) -> TensorViewMut<'_> {
        TensorViewMut::new(
            self.dtype,
            &self.shape,
            &self.strides,
            self.offset,
            &mut self.bytes,
        )
        .unwrap()
    }
}

/// The key `op` needs for these dtypes and ranks, built without `Op::validate`.
pub(crate) fn key_for(
    op: &Op,
    dtype: DType,
    index_dtype: DType,
    rank: usize,
    index_rank: usize,
) -> scatterjit::ir::Result<KernelKey> {
    match *op {
        Op::ScatterElements {
            axis,
            reduction,
            use_init_val,
        } => KernelKey::scatter_elements(dtype, index_dtype, rank, axis, reduction, use_init_val),
        Op::GatherElements { axis } => KernelKey::gather_elements(dtype, index_dtype, rank, axis),
        Op::Gather { axis } => KernelKey::gather(dtype, index_dtype, rank, index_rank, axis),
    }
}

/// The op's own free function (`scatter_elements`, `gather_elements`, `gather`), where the
/// arity of the inputs fits it.
pub(crate) fn named(
    op: &Op,
    data: &Tensor,
    indices: &Tensor,
    updates: Option<&Tensor>,
) -> Option<(&'static str, scatterjit::Result<Tensor>)> {
    match (*op, updates) {
        (
            Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            },
            Some(u),
        ) => Some((
            "scatterjit::scatter_elements",
            scatterjit::scatter_elements(data, indices, u, axis, reduction, use_init_val),
        )),
        (Op::GatherElements { axis }, None) => Some((
            "scatterjit::gather_elements",
            scatterjit::gather_elements(data, indices, axis),
        )),
        (Op::Gather { axis }, None) => Some((
            "scatterjit::gather",
            scatterjit::gather(data, indices, axis),
        )),
        _ => None,
    }
}

fn scatter(axis: i64) -> Op {
    Op::ScatterElements {
        axis,
        reduction: Reduction::None,
        use_init_val: true,
    }
}

fn scatter_with(axis: i64, reduction: Reduction, use_init_val: bool) -> Op {
    Op::ScatterElements {
        axis,
        reduction,
        use_init_val,
    }
}

/// The reductions every scatter case runs with: `none`, the combining ones with and
/// without `use_init_val` (without it the init pass would write before the apply pass),
/// and `mean` (host-side scratch and finish steps).
const REDUCTIONS: &[(Reduction, bool)] = &[
    (Reduction::None, true),
    (Reduction::Add, true),
    (Reduction::Add, false),
    (Reduction::Mul, false),
    (Reduction::Max, true),
    (Reduction::Min, false),
    (Reduction::Mean, true),
    (Reduction::Mean, false),
];

fn label(reduction: Reduction, use_init_val: bool) -> String {
    if use_init_val {
        reduction.to_string()
    } else {
        format!("{reduction} noinit")
    }
}

/// `op` with every reduction of [`REDUCTIONS`] that `dtype` supports; other ops unchanged.
fn each_reduction(op: Op, dtype: DType) -> Vec<(String, Op)> {
    match op {
        Op::ScatterElements { axis, .. } => REDUCTIONS
            .iter()
            .filter(|(r, _)| r.supports(dtype))
            .map(|&(r, init)| {
                (
                    format!(" [{}]", label(r, init)),
                    scatter_with(axis, r, init),
                )
            })
            .collect(),
        _ => vec![(String::new(), op)],
    }
}

// ---------------------------------------------------------------------------------------
// Bad index values: every path, and no write

#[derive(Clone)]
struct BadIndex {
    name: String,
    op: Op,
    data: Tensor,
    indices: Tensor,
    updates: Option<Tensor>,
    expected: IrError,
    display: &'static str,
}

/// A bad-index case: `at` is (index value, position, normalized axis, size).
fn bad(
    name: &str,
    op: Op,
    inputs: (Tensor, Tensor, Option<Tensor>),
    at: (i128, &[usize], usize, usize),
    display: &'static str,
) -> BadIndex {
    let (data, indices, updates) = inputs;
    let (index, position, axis, size) = at;
    BadIndex {
        name: name.to_string(),
        op,
        data,
        indices,
        updates,
        expected: IrError::IndexOutOfBounds {
            op: op.kind(),
            index,
            position: position.to_vec(),
            axis,
            size,
        },
        display,
    }
}

/// Scatter cases repeated for every supported reduction.
fn expand(cases: Vec<BadIndex>) -> Vec<BadIndex> {
    cases
        .into_iter()
        .flat_map(|case| {
            each_reduction(case.op, case.data.dtype())
                .into_iter()
                .map(move |(suffix, op)| BadIndex {
                    name: format!("{}{suffix}", case.name),
                    op,
                    ..case.clone()
                })
        })
        .collect()
}

impl Case for BadIndex {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&self, c: &mut Checker) {
        let expected = Error::Invalid(self.expected.clone());
        let text = expected.to_string();
        if text != self.display {
            c.fail(
                "Display",
                format!("expected {:?}, got {text:?}", self.display),
            );
        }
        let updates = self.updates.as_ref();

        // Free functions.
        let got = scatterjit::run(&self.op, &self.data, &self.indices, updates);
        c.err("scatterjit::run", got, &expected);
        if let Some((path, got)) = named(&self.op, &self.data, &self.indices, updates) {
            c.err(path, got, &expected);
        }

        // Low-level: the shapes are valid, the kernel must find the bad index.
        let validated = self.op.validate(
            self.data.meta(),
            self.indices.meta(),
            updates.map(Tensor::meta),
        );
        let validated = match validated {
            Ok(v) => v,
            Err(e) => return c.fail("Op::validate", format!("valid shapes rejected: {e}")),
        };
        let Some(kernel) = get_kernel(c, &validated.key) else {
            return;
        };
        let dtype = self.data.dtype();
        let strided_data = Strided::of(&self.data, Layout::PaddedReversed);
        let strided_indices = Strided::of(&self.indices, Layout::ColumnMajor);
        let strided_updates = updates.map(|u| Strided::of(u, Layout::ColumnMajor));
        // Strided data and updates with row-major indices, then column-major indices: the
        // error must name the first bad index in row-major order whatever the loop order.
        let layouts = [
            (
                "contiguous",
                TensorView::from(&self.data),
                TensorView::from(&self.indices),
                updates.map(TensorView::from),
            ),
            (
                "strided data and updates",
                strided_data.view(),
                TensorView::from(&self.indices),
                strided_updates.as_ref().map(Strided::view),
            ),
            (
                "column-major indices",
                TensorView::from(&self.data),
                strided_indices.view(),
                updates.map(TensorView::from),
            ),
        ];
        for (layout, data, indices, updates) in &layouts {
            let path = |what: &str| format!("{what} ({layout} inputs)");
            let got = kernel.run(data, indices, updates.as_ref());
            c.err(&path("Kernel::run"), got, &expected);

            let mut out = sentinel(dtype, &validated.out_shape);
            let before = out.clone();
            let got = kernel.run_into(&mut (&mut out).into(), data, indices, updates.as_ref());
            c.err(&path("Kernel::run_into"), got, &expected);
            c.unchanged(
                &path("Kernel::run_into output"),
                before.bytes(),
                out.bytes(),
            );

            let mut out = Strided::of(&before, Layout::PaddedReversed);
            let before = out.bytes.clone();
            let got = kernel.run_into(&mut out.view_mut(), data, indices, updates.as_ref());
            c.err(&path("Kernel::run_into strided"), got, &expected);
            c.unchanged(
                &path("Kernel::run_into strided output"),
                &before,
                &out.bytes,
            );

            let (
                Some(updates),
                Op::ScatterElements {
                    axis,
                    reduction,
                    use_init_val,
                },
            ) = (updates, self.op)
            else {
                continue;
            };
            let mut target = self.data.clone();
            let got = kernel.scatter_in_place(&mut (&mut target).into(), indices, updates);
            c.err(&path("Kernel::scatter_in_place"), got, &expected);
            c.unchanged(
                &path("Kernel::scatter_in_place data"),
                self.data.bytes(),
                target.bytes(),
            );

            let mut target = Strided::of(&self.data, Layout::PaddedReversed);
            let before = target.bytes.clone();
            let got = kernel.scatter_in_place(&mut target.view_mut(), indices, updates);
            c.err(&path("Kernel::scatter_in_place strided"), got, &expected);
            c.unchanged(
                &path("Kernel::scatter_in_place strided data"),
                &before,
                &target.bytes,
            );

            let mut target = self.data.clone();
            let got = scatterjit::scatter_(
                &mut (&mut target).into(),
                axis,
                indices,
                updates,
                reduction,
                use_init_val,
            );
            c.err(&path("scatterjit::scatter_"), got, &expected);
            c.unchanged(
                &path("scatterjit::scatter_ data"),
                self.data.bytes(),
                target.bytes(),
            );
        }
    }
}

/// Indices [2, 4] along axis 1 of data [3, 5]: the first bad index in row-major order is
/// at [0, 3], but a column-major walk meets [1, 0] first, so a check in another loop order
/// names the wrong position.
fn scatter_bad_indices() -> Vec<BadIndex> {
    let s = |indices: Tensor| (f32s(&[3, 5]), indices, Some(filled(DType::F32, &[2, 4], 7)));
    let at = |index: i128| (index, &[0usize, 3][..], 1, 5);
    let mut cases = vec![
        bad(
            "scatter: s",
            scatter(1),
            s(ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2])),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: -s-1, axis -1",
            scatter(-1),
            s(ix(&[2, 4], &[0i64, 1, -5, -6, -7, 0, 1, 2])),
            at(-6),
            "scatter_elements: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: -7 (i32)",
            scatter(1),
            s(ix(&[2, 4], &[4i32, -1, -5, -7, -6, 0, 0, 0])),
            at(-7),
            "scatter_elements: index -7 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i64::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MIN, i64::MAX, 0, 0, 0])),
            at(i64::MIN as i128),
            "scatter_elements: index -9223372036854775808 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i64::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MAX, i64::MIN, 0, 0, 0])),
            at(i64::MAX as i128),
            "scatter_elements: index 9223372036854775807 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u64::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u64, 1, 2, u64::MAX, 5, 0, 0, 0])),
            at(u64::MAX as i128),
            "scatter_elements: index 18446744073709551615 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: s (u64)",
            scatter(1),
            s(ix(&[2, 4], &[0u64, 1, 2, 5, u64::MAX, 0, 0, 0])),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i8::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MIN, i8::MAX, 0, 0, 0])),
            at(-128),
            "scatter_elements: index -128 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i8::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MAX, i8::MIN, 0, 0, 0])),
            at(127),
            "scatter_elements: index 127 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u8::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u8, 1, 2, u8::MAX, 5, 0, 0, 0])),
            at(255),
            "scatter_elements: index 255 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: -s-1 (i8)",
            scatter(-1),
            s(ix(&[2, 4], &[0i8, 1, 2, -6, 5, 0, 0, 0])),
            at(-6),
            "scatter_elements: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i16::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i16, 1, 2, i16::MIN, i16::MAX, 0, 0, 0])),
            at(i16::MIN as i128),
            "scatter_elements: index -32768 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u16::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u16, 1, 2, u16::MAX, 5, 0, 0, 0])),
            at(u16::MAX as i128),
            "scatter_elements: index 65535 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i32::MIN",
            scatter(1),
            s(ix(&[2, 4], &[0i32, 1, 2, i32::MIN, i32::MAX, 0, 0, 0])),
            at(i32::MIN as i128),
            "scatter_elements: index -2147483648 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: i32::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0i32, 1, 2, i32::MAX, i32::MIN, 0, 0, 0])),
            at(i32::MAX as i128),
            "scatter_elements: index 2147483647 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: u32::MAX",
            scatter(1),
            s(ix(&[2, 4], &[0u32, 1, 2, u32::MAX, 5, 0, 0, 0])),
            at(u32::MAX as i128),
            "scatter_elements: index 4294967295 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "scatter: updates larger than indices",
            scatter(1),
            (
                f32s(&[3, 5]),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                Some(filled(DType::F32, &[3, 7], 7)),
            ),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            // Column-major, [1, 1, 0] (-4) comes before [1, 0, 1] (3).
            "scatter: rank 3, axis 0",
            scatter(0),
            (
                f32s(&[3, 2, 2]),
                ix(&[2, 2, 2], &[0i64, 1, 2, 0, 1, 3, -4, 0]),
                Some(filled(DType::F32, &[2, 2, 2], 7)),
            ),
            (3, &[1, 0, 1], 0, 3),
            "scatter_elements: index 3 at indices[1, 0, 1] is out of bounds for axis 0 of size 3",
        ),
        bad(
            "scatter: zero-size axis",
            scatter(1),
            (
                f32s(&[3, 0]),
                ix(&[2, 2], &[0i64, 0, 0, 0]),
                Some(filled(DType::F32, &[2, 2], 7)),
            ),
            (0, &[0, 0], 1, 0),
            "scatter_elements: index 0 at indices[0, 0] is out of bounds for axis 1 of size 0",
        ),
        bad(
            "scatter: rank 1",
            scatter(0),
            (
                f32s(&[4]),
                ix(&[3], &[0i64, 3, 4]),
                Some(filled(DType::F32, &[3], 7)),
            ),
            (4, &[2], 0, 4),
            "scatter_elements: index 4 at indices[2] is out of bounds for axis 0 of size 4",
        ),
    ];
    for dtype in [
        DType::I8,
        DType::U64,
        DType::F16,
        DType::Bool,
        DType::Complex128,
    ] {
        cases.push(bad(
            &format!("scatter: s, {dtype} data"),
            scatter(1),
            (
                filled(dtype, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                Some(filled(dtype, &[2, 4], 7)),
            ),
            at(5),
            "scatter_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ));
    }
    expand(cases)
}

fn gather_elements_bad_indices() -> Vec<BadIndex> {
    let ge = |axis| Op::GatherElements { axis };
    let s = |indices: Tensor| (f32s(&[3, 5]), indices, None);
    let at = |index: i128| (index, &[0usize, 3][..], 1, 5);
    vec![
        bad(
            "gather_elements: s",
            ge(1),
            s(ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2])),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: -s-1, axis -1 (i32)",
            ge(-1),
            s(ix(&[2, 4], &[0i32, 1, -5, -6, -7, 0, 1, 2])),
            at(-6),
            "gather_elements: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: i64::MIN",
            ge(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MIN, i64::MAX, 0, 0, 0])),
            at(i64::MIN as i128),
            "gather_elements: index -9223372036854775808 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: i64::MAX",
            ge(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MAX, i64::MIN, 0, 0, 0])),
            at(i64::MAX as i128),
            "gather_elements: index 9223372036854775807 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: u64::MAX",
            ge(1),
            s(ix(&[2, 4], &[0u64, 1, 2, u64::MAX, 5, 0, 0, 0])),
            at(u64::MAX as i128),
            "gather_elements: index 18446744073709551615 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: i8::MIN",
            ge(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MIN, i8::MAX, 0, 0, 0])),
            at(-128),
            "gather_elements: index -128 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: u8::MAX",
            ge(1),
            s(ix(&[2, 4], &[0u8, 1, 2, u8::MAX, 5, 0, 0, 0])),
            at(255),
            "gather_elements: index 255 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: u16 s",
            ge(1),
            s(ix(&[2, 4], &[0u16, 1, 2, 5, 9, 0, 0, 0])),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: axis 0",
            ge(0),
            s(ix(&[2, 5], &[0i64, 1, 2, -4, 0, 3, 0, 0, 0, 0])),
            (-4, &[0, 3], 0, 3),
            "gather_elements: index -4 at indices[0, 3] is out of bounds for axis 0 of size 3",
        ),
        bad(
            "gather_elements: zero-size axis, non-empty output",
            ge(1),
            (f32s(&[3, 0]), ix(&[3, 2], &[0i64; 6]), None),
            (0, &[0, 0], 1, 0),
            "gather_elements: index 0 at indices[0, 0] is out of bounds for axis 1 of size 0",
        ),
        bad(
            "gather_elements: rank 1",
            ge(0),
            (f32s(&[4]), ix(&[6], &[0i64, 1, 2, 3, -4, -5]), None),
            (-5, &[5], 0, 4),
            "gather_elements: index -5 at indices[5] is out of bounds for axis 0 of size 4",
        ),
        bad(
            "gather_elements: i8 data",
            ge(1),
            (
                filled(DType::I8, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                None,
            ),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather_elements: c128 data",
            ge(1),
            (
                filled(DType::Complex128, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                None,
            ),
            at(5),
            "gather_elements: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
    ]
}

fn gather_bad_indices() -> Vec<BadIndex> {
    let g = |axis| Op::Gather { axis };
    let s = |indices: Tensor| (f32s(&[3, 5]), indices, None);
    let at = |index: i128| (index, &[0usize, 3][..], 1, 5);
    vec![
        bad(
            "gather: s",
            g(1),
            s(ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2])),
            at(5),
            "gather: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: -s-1, axis -1",
            g(-1),
            s(ix(&[2, 4], &[0i64, 1, -5, -6, -7, 0, 1, 2])),
            at(-6),
            "gather: index -6 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i64::MIN",
            g(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MIN, i64::MAX, 0, 0, 0])),
            at(i64::MIN as i128),
            "gather: index -9223372036854775808 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i64::MAX",
            g(1),
            s(ix(&[2, 4], &[0i64, 1, 2, i64::MAX, i64::MIN, 0, 0, 0])),
            at(i64::MAX as i128),
            "gather: index 9223372036854775807 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: u64::MAX",
            g(1),
            s(ix(&[2, 4], &[0u64, 1, 2, u64::MAX, 5, 0, 0, 0])),
            at(u64::MAX as i128),
            "gather: index 18446744073709551615 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i8::MIN",
            g(1),
            s(ix(&[2, 4], &[0i8, 1, 2, i8::MIN, i8::MAX, 0, 0, 0])),
            at(-128),
            "gather: index -128 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: u8::MAX",
            g(1),
            s(ix(&[2, 4], &[0u8, 1, 2, u8::MAX, 5, 0, 0, 0])),
            at(255),
            "gather: index 255 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: u32::MAX",
            g(1),
            s(ix(&[2, 4], &[0u32, 1, 2, u32::MAX, 5, 0, 0, 0])),
            at(u32::MAX as i128),
            "gather: index 4294967295 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: i16::MIN",
            g(1),
            s(ix(&[2, 4], &[0i16, 1, 2, i16::MIN, i16::MAX, 0, 0, 0])),
            at(i16::MIN as i128),
            "gather: index -32768 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: scalar index",
            g(1),
            s(Tensor::scalar(5i64)),
            (5, &[], 1, 5),
            "gather: index 5 at indices[] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: scalar index -s-1 (i16)",
            g(0),
            s(Tensor::scalar(-4i16)),
            (-4, &[], 0, 3),
            "gather: index -4 at indices[] is out of bounds for axis 0 of size 3",
        ),
        bad(
            "gather: axis 0",
            g(0),
            s(ix(&[4], &[0i64, 1, 2, 3])),
            (3, &[3], 0, 3),
            "gather: index 3 at indices[3] is out of bounds for axis 0 of size 3",
        ),
        bad(
            // Column-major, [1, 1, 0] (9) comes before [1, 0, 1] (5).
            "gather: rank-3 indices",
            g(1),
            s(ix(&[2, 2, 2], &[0i64, 1, 2, 3, 4, 5, 9, 0])),
            (5, &[1, 0, 1], 1, 5),
            "gather: index 5 at indices[1, 0, 1] is out of bounds for axis 1 of size 5",
        ),
        bad(
            "gather: empty output, s",
            g(0),
            (f32s(&[2, 0]), ix(&[3], &[0i64, 1, 2]), None),
            (2, &[2], 0, 2),
            "gather: index 2 at indices[2] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: empty output, -s-1",
            g(0),
            (f32s(&[2, 0]), ix(&[3], &[1i32, -2, -3]), None),
            (-3, &[2], 0, 2),
            "gather: index -3 at indices[2] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: empty output, i64::MIN",
            g(0),
            (f32s(&[2, 0]), ix(&[2], &[i64::MIN, 0]), None),
            (i64::MIN as i128, &[0], 0, 2),
            "gather: index -9223372036854775808 at indices[0] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: empty output, u8::MAX",
            g(0),
            (f32s(&[2, 0]), ix(&[1, 2], &[0u8, u8::MAX]), None),
            (255, &[0, 1], 0, 2),
            "gather: index 255 at indices[0, 1] is out of bounds for axis 0 of size 2",
        ),
        bad(
            "gather: zero-size axis, non-empty output",
            g(1),
            (f32s(&[2, 0, 3]), ix(&[1], &[0i64]), None),
            (0, &[0], 1, 0),
            "gather: index 0 at indices[0] is out of bounds for axis 1 of size 0",
        ),
        bad(
            "gather: rank 1 data",
            g(0),
            (f32s(&[4]), ix(&[2, 2], &[0i64, 3, -4, -5]), None),
            (-5, &[1, 1], 0, 4),
            "gather: index -5 at indices[1, 1] is out of bounds for axis 0 of size 4",
        ),
        bad(
            "gather: bool data",
            g(1),
            (
                filled(DType::Bool, &[3, 5], 1),
                ix(&[2, 4], &[0i64, 1, 2, 5, 6, 0, 1, 2]),
                None,
            ),
            at(5),
            "gather: index 5 at indices[0, 3] is out of bounds for axis 1 of size 5",
        ),
    ]
}

#[test]
fn bad_indices_scatter_elements() {
    run_table("scatter_elements bad indices", &scatter_bad_indices());
}

#[test]
fn bad_indices_gather_elements() {
    run_table(
        "gather_elements bad indices",
        &gather_elements_bad_indices(),
    );
}

#[test]
fn bad_indices_gather() {
    run_table("gather bad indices", &gather_bad_indices());
}

// ---------------------------------------------------------------------------------------
// Invalid ranks, shapes, axes, dtypes and sizes: every path

/// Inputs given as (dtype, shape); tensors are built only where they are small enough and
/// of a byte-stored dtype, so huge shapes are checked through `Op::validate` and the key.
struct Invalid {
    name: String,
    op: Op,
    data: (DType, Vec<usize>),
    indices: (DType, Vec<usize>),
    updates: Option<(DType, Vec<usize>)>,
    expected: IrError,
}

fn invalid(
    name: impl Into<String>,
    op: Op,
    data: (DType, &[usize]),
    indices: (DType, &[usize]),
    updates: Option<(DType, &[usize])>,
    expected: IrError,
) -> Invalid {
    Invalid {
        name: name.into(),
        op,
        data: (data.0, data.1.to_vec()),
        indices: (indices.0, indices.1.to_vec()),
        updates: updates.map(|(d, s)| (d, s.to_vec())),
        expected,
    }
}

fn meta((dtype, shape): &(DType, Vec<usize>)) -> Meta<'_> {
    Meta::new(*dtype, shape)
}

/// A small tensor of pattern bytes (zeros for indices; strings of the pattern for string
/// data), or `None` if it cannot be built.
fn build(input: &(DType, Vec<usize>), seed: Option<u8>) -> Option<Tensor> {
    let (dtype, shape) = input;
    match checked_nbytes(*dtype, shape) {
        Ok(n) if n <= 1 << 16 && *dtype == DType::String => {
            let text = pattern(DType::U8, n, seed.unwrap_or(0));
            Some(Tensor::from_strings(shape, text.iter().map(|b| format!("s{b}"))).unwrap())
        }
        Ok(n) if n <= 1 << 16 => Some(match seed {
            Some(seed) => filled(*dtype, shape, seed),
            None => Tensor::zeros(*dtype, shape.clone()).unwrap(),
        }),
        _ => None,
    }
}

impl Case for Invalid {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&self, c: &mut Checker) {
        let expected = Error::Invalid(self.expected.clone());
        let got = self.op.validate(
            meta(&self.data),
            meta(&self.indices),
            self.updates.as_ref().map(meta),
        );
        c.err("Op::validate", got, &self.expected);

        let data = build(&self.data, Some(1));
        let indices = build(&self.indices, None);
        let updates = self.updates.as_ref().map(|u| build(u, Some(7)));
        let tensors = match (data, indices, updates) {
            (Some(d), Some(i), None) => Some((d, i, None)),
            (Some(d), Some(i), Some(Some(u))) => Some((d, i, Some(u))),
            _ => None,
        };

        if let Some((data, indices, updates)) = &tensors {
            let got = scatterjit::run(&self.op, data, indices, updates.as_ref());
            c.err("scatterjit::run", got, &expected);
            if let Some((path, got)) = named(&self.op, data, indices, updates.as_ref()) {
                c.err(path, got, &expected);
            }
            if let (
                Op::ScatterElements {
                    axis,
                    reduction,
                    use_init_val,
                },
                Some(updates),
            ) = (self.op, updates)
            {
                let mut target = data.clone();
                let got = scatterjit::scatter_(
                    &mut (&mut target).into(),
                    axis,
                    &indices.into(),
                    &updates.into(),
                    reduction,
                    use_init_val,
                );
                c.err("scatterjit::scatter_", got, &expected);
                c.unchanged("scatterjit::scatter_ data", data.bytes(), target.bytes());
            }
        }

        // Low-level: either the key already refuses, or the kernel refuses the operands.
        let key = key_for(
            &self.op,
            self.data.0,
            self.indices.0,
            self.data.1.len(),
            self.indices.1.len(),
        );
        let key = match key {
            Err(e) => return c.err("KernelKey", Err::<(), _>(e), &self.expected),
            Ok(key) => key,
        };
        let Some((data, indices, updates)) = &tensors else {
            return;
        };
        let Some(kernel) = get_kernel(c, &key) else {
            return;
        };
        let (dv, iv) = (TensorView::from(data), TensorView::from(indices));
        let uv = updates.as_ref().map(TensorView::from);
        c.err("Kernel::run", kernel.run(&dv, &iv, uv.as_ref()), &expected);
        let mut out = sentinel(data.dtype(), data.shape());
        let before = out.clone();
        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
        c.err("Kernel::run_into", got, &expected);
        c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
        if let (OpKind::ScatterElements, Some(uv)) = (self.op.kind(), &uv) {
            let mut target = data.clone();
            let got = kernel.scatter_in_place(&mut (&mut target).into(), &iv, uv);
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged(
                "Kernel::scatter_in_place data",
                data.bytes(),
                target.bytes(),
            );
        }
    }
}

/// The three ops on data [3, 5] with indices [2, 4] (and updates [2, 4]) along `axis`.
fn each_op(axis: i64) -> [Op; 3] {
    [
        scatter(axis),
        Op::GatherElements { axis },
        Op::Gather { axis },
    ]
}

fn updates_for(op: &Op, dtype: DType, shape: &[usize]) -> Option<(DType, Vec<usize>)> {
    (op.kind() == OpKind::ScatterElements).then(|| (dtype, shape.to_vec()))
}

fn rank_error(op: OpKind, tensor: TensorRole, rank: usize, expected: &str) -> IrError {
    IrError::Rank {
        op,
        tensor,
        rank,
        expected: expected.to_string(),
    }
}

fn rank_cases() -> Vec<Invalid> {
    use DType::{F32, I64};
    use OpKind::{Gather, GatherElements, ScatterElements};
    use TensorRole::{Data, Indices, Updates};
    let ones = |n: usize| vec![1usize; n];
    let max = MAX_RANK;
    let above = format!("1 to {max}");
    let any = format!("0 to {max}");
    let mut cases = vec![
        invalid(
            "scatter: indices rank 1 < data rank 2",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[4]),
            Some((F32, &[4])),
            rank_error(ScatterElements, Indices, 1, "the rank of data (2)"),
        ),
        invalid(
            "scatter: indices rank 3 > data rank 2",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4, 1]),
            Some((F32, &[2, 4, 1])),
            rank_error(ScatterElements, Indices, 3, "the rank of data (2)"),
        ),
        invalid(
            "scatter: updates rank 3",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4, 1])),
            rank_error(ScatterElements, Updates, 3, "the rank of data (2)"),
        ),
        invalid(
            "scatter: updates rank 1",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[8])),
            rank_error(ScatterElements, Updates, 1, "the rank of data (2)"),
        ),
        invalid(
            "scatter: scalar updates",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[])),
            rank_error(ScatterElements, Updates, 0, "the rank of data (2)"),
        ),
        invalid(
            "scatter: no updates",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            None,
            rank_error(ScatterElements, Updates, 0, "an updates tensor"),
        ),
        invalid(
            "gather_elements: indices rank 1 < data rank 2",
            Op::GatherElements { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[4]),
            None,
            rank_error(GatherElements, Indices, 1, "the rank of data (2)"),
        ),
        invalid(
            "gather_elements: indices rank 3 > data rank 2",
            Op::GatherElements { axis: 0 },
            (F32, &[3, 5]),
            (I64, &[2, 4, 1]),
            None,
            rank_error(GatherElements, Indices, 3, "the rank of data (2)"),
        ),
        invalid(
            "gather_elements: scalar indices",
            Op::GatherElements { axis: 0 },
            (F32, &[3]),
            (I64, &[]),
            None,
            rank_error(GatherElements, Indices, 0, "the rank of data (1)"),
        ),
        invalid(
            "gather_elements: updates given",
            Op::GatherElements { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4])),
            rank_error(GatherElements, Updates, 2, "no updates tensor"),
        ),
        invalid(
            "gather: updates given",
            Op::Gather { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4])),
            rank_error(Gather, Updates, 2, "no updates tensor"),
        ),
        invalid(
            format!("gather: indices rank {}", max + 1),
            Op::Gather { axis: 0 },
            (F32, &[3]),
            (I64, &ones(max + 1)),
            None,
            rank_error(Gather, Indices, max + 1, &any),
        ),
        invalid(
            format!("scatter: indices rank {} with data rank {max}", max + 1),
            scatter(0),
            (F32, &ones(max)),
            (I64, &ones(max + 1)),
            Some((F32, &ones(max + 1))),
            rank_error(ScatterElements, Indices, max + 1, &any),
        ),
        invalid(
            format!("scatter: updates rank {} with data rank {max}", max + 1),
            scatter(0),
            (F32, &ones(max)),
            (I64, &ones(max)),
            Some((F32, &ones(max + 1))),
            rank_error(
                ScatterElements,
                Updates,
                max + 1,
                &format!("the rank of data ({max})"),
            ),
        ),
        invalid(
            format!(
                "gather_elements: indices rank {} with data rank {max}",
                max + 1
            ),
            Op::GatherElements { axis: 0 },
            (F32, &ones(max)),
            (I64, &ones(max + 1)),
            None,
            rank_error(GatherElements, Indices, max + 1, &any),
        ),
    ];
    for op in each_op(0) {
        let kind = op.kind();
        let index_shape: &[usize] = if kind == Gather { &[1] } else { &[] };
        cases.push(invalid(
            format!("{kind}: rank-0 data"),
            op,
            (F32, &[]),
            (I64, index_shape),
            updates_for(&op, F32, &[])
                .as_ref()
                .map(|(d, s)| (*d, &s[..])),
            rank_error(kind, Data, 0, &above),
        ));
        let index_shape = if kind == Gather {
            vec![1]
        } else {
            ones(max + 1)
        };
        cases.push(invalid(
            format!("{kind}: data rank {}", max + 1),
            op,
            (F32, &ones(max + 1)),
            (I64, &index_shape),
            updates_for(&op, F32, &ones(max + 1))
                .as_ref()
                .map(|(d, s)| (*d, &s[..])),
            rank_error(kind, Data, max + 1, &above),
        ));
    }
    cases
}

fn shape_error(
    op: OpKind,
    tensor: TensorRole,
    (dim, size): (usize, usize),
    relation: &'static str,
    other_size: usize,
) -> IrError {
    IrError::Shape {
        op,
        tensor,
        dim,
        size,
        relation,
        other: if tensor == TensorRole::Updates {
            TensorRole::Indices
        } else {
            TensorRole::Data
        },
        other_size,
    }
}

fn shape_cases() -> Vec<Invalid> {
    use DType::{F32, I64};
    use OpKind::{GatherElements, ScatterElements};
    use TensorRole::{Indices, Updates};
    vec![
        invalid(
            "scatter: indices dim 1 > data dim 1 (axis 0)",
            scatter(0),
            (F32, &[3, 3]),
            (I64, &[2, 4]),
            Some((F32, &[2, 4])),
            shape_error(ScatterElements, Indices, (1, 4), "<=", 3),
        ),
        invalid(
            "scatter: indices dim 0 > data dim 0 (axis 1)",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[4, 2]),
            Some((F32, &[4, 2])),
            shape_error(ScatterElements, Indices, (0, 4), "<=", 3),
        ),
        invalid(
            "scatter: indices dim 1 > zero-size data dim",
            scatter(0),
            (F32, &[3, 0]),
            (I64, &[1, 1]),
            Some((F32, &[1, 1])),
            shape_error(ScatterElements, Indices, (1, 1), "<=", 0),
        ),
        invalid(
            "scatter: updates dim 1 < indices dim 1",
            scatter(0),
            (F32, &[3, 3]),
            (I64, &[2, 3]),
            Some((F32, &[2, 2])),
            shape_error(ScatterElements, Updates, (1, 2), ">=", 3),
        ),
        invalid(
            "scatter: updates dim 0 < indices dim 0 along the axis",
            scatter(0),
            (F32, &[3, 5]),
            (I64, &[4, 5]),
            Some((F32, &[3, 5])),
            shape_error(ScatterElements, Updates, (0, 3), ">=", 4),
        ),
        invalid(
            "scatter: empty updates for non-empty indices",
            scatter(1),
            (F32, &[3, 5]),
            (I64, &[2, 4]),
            Some((F32, &[0, 4])),
            shape_error(ScatterElements, Updates, (0, 0), ">=", 2),
        ),
        invalid(
            "gather_elements: indices dim 0 > data dim 0 (axis 1)",
            Op::GatherElements { axis: 1 },
            (F32, &[3, 5]),
            (I64, &[4, 2]),
            None,
            shape_error(GatherElements, Indices, (0, 4), "<=", 3),
        ),
        invalid(
            "gather_elements: rank 3, indices dim 2 > data dim 2",
            Op::GatherElements { axis: 0 },
            (F32, &[2, 3, 4]),
            (I64, &[1, 3, 5]),
            None,
            shape_error(GatherElements, Indices, (2, 5), "<=", 4),
        ),
        invalid(
            "gather_elements: indices dim 1 > zero-size data dim",
            Op::GatherElements { axis: 0 },
            (F32, &[3, 0]),
            (I64, &[1, 1]),
            None,
            shape_error(GatherElements, Indices, (1, 1), "<=", 0),
        ),
    ]
}

fn axis_cases() -> Vec<Invalid> {
    let mut cases = Vec::new();
    for axis in [2, -3, 100, i64::MIN, i64::MAX] {
        for op in each_op(axis) {
            let kind = op.kind();
            cases.push(invalid(
                format!("{kind}: axis {axis} for rank 2"),
                op,
                (DType::F32, &[3, 5]),
                (DType::I64, &[2, 4]),
                updates_for(&op, DType::F32, &[2, 4])
                    .as_ref()
                    .map(|(d, s)| (*d, &s[..])),
                IrError::AxisOutOfRange {
                    op: kind,
                    axis,
                    rank: 2,
                },
            ));
        }
    }
    for axis in [1, -2] {
        for op in each_op(axis) {
            let kind = op.kind();
            cases.push(invalid(
                format!("{kind}: axis {axis} for rank 1"),
                op,
                (DType::F32, &[3]),
                (DType::I64, &[2]),
                updates_for(&op, DType::F32, &[2])
                    .as_ref()
                    .map(|(d, s)| (*d, &s[..])),
                IrError::AxisOutOfRange {
                    op: kind,
                    axis,
                    rank: 1,
                },
            ));
        }
    }
    cases
}

fn reduction_cases() -> Vec<Invalid> {
    let pairs = [
        (Reduction::Max, DType::Complex64),
        (Reduction::Max, DType::Complex128),
        (Reduction::Min, DType::Complex64),
        (Reduction::Min, DType::Complex128),
        (Reduction::Mean, DType::Bool),
        (Reduction::Mean, DType::Complex64),
        (Reduction::Mean, DType::Complex128),
        (Reduction::Add, DType::String),
        (Reduction::Mul, DType::String),
        (Reduction::Max, DType::String),
        (Reduction::Min, DType::String),
        (Reduction::Mean, DType::String),
    ];
    // (data, indices = updates, axis): empty, empty along the other axis, non-empty.
    let shapes: [(&[usize], &[usize], i64); 3] = [
        (&[0], &[0], 0),
        (&[2, 0], &[2, 0], 1),
        (&[3, 5], &[2, 4], 1),
    ];
    let mut cases = Vec::new();
    for (reduction, dtype) in pairs {
        for use_init_val in [true, false] {
            for (data, index, axis) in shapes {
                cases.push(invalid(
                    format!(
                        "scatter: {} on {dtype}, data {data:?}",
                        label(reduction, use_init_val)
                    ),
                    scatter_with(axis, reduction, use_init_val),
                    (dtype, data),
                    (DType::I64, index),
                    Some((dtype, index)),
                    IrError::UnsupportedReduction {
                        op: OpKind::ScatterElements,
                        reduction,
                        dtype,
                    },
                ));
            }
        }
    }
    cases
}

fn dtype_cases() -> Vec<Invalid> {
    use DType::*;
    let mut cases = Vec::new();
    for index_dtype in [F16, BF16, F32, F64, Bool, Complex64, Complex128, String] {
        for op in each_op(1) {
            let kind = op.kind();
            cases.push(invalid(
                format!("{kind}: {index_dtype} indices"),
                op,
                (F32, &[3, 5]),
                (index_dtype, &[2, 4]),
                updates_for(&op, F32, &[2, 4])
                    .as_ref()
                    .map(|(d, s)| (*d, &s[..])),
                IrError::IndexDType {
                    op: kind,
                    dtype: index_dtype,
                },
            ));
        }
    }
    for (data, updates) in [
        (F32, I32),
        (F32, F64),
        (F16, BF16),
        (U8, Bool),
        (I64, U64),
        (Complex64, Complex128),
        (F32, String),
    ] {
        cases.push(invalid(
            format!("scatter: {updates} updates for {data} data"),
            scatter(1),
            (data, &[3, 5]),
            (I64, &[2, 4]),
            Some((updates, &[2, 4])),
            IrError::DTypeMismatch {
                op: OpKind::ScatterElements,
                tensor: TensorRole::Updates,
                expected: data,
                actual: updates,
            },
        ));
    }
    cases
}

fn overflow_cases() -> Vec<Invalid> {
    use DType::{F32, F64, I64, U8};
    // Validation names the op and the tensor whose byte count overflows.
    let overflow = |op, tensor, shape: &[usize]| IrError::SizeOverflow {
        op,
        tensor,
        shape: shape.to_vec(),
    };
    let (max, e61, e62, e63) = (usize::MAX, 1usize << 61, 1usize << 62, 1usize << 63);
    let gather = |axis| Op::Gather { axis };
    vec![
        // Gather's output of zero-size data (no allocation): element count, byte count,
        // and a byte count past isize::MAX.
        invalid(
            "gather: output [usize::MAX, 2] of data [usize::MAX, 0]",
            gather(1),
            (F32, &[max, 0]),
            (I64, &[2]),
            None,
            overflow(OpKind::Gather, TensorRole::Output, &[max, 2]),
        ),
        invalid(
            "gather: output [2, usize::MAX] of data [0, usize::MAX]",
            gather(0),
            (F32, &[0, max]),
            (I64, &[2]),
            None,
            overflow(OpKind::Gather, TensorRole::Output, &[2, max]),
        ),
        invalid(
            "gather: f64 output [2^61, 1], bytes overflow",
            gather(1),
            (F64, &[e61, 0]),
            (I64, &[1]),
            None,
            overflow(OpKind::Gather, TensorRole::Output, &[e61, 1]),
        ),
        invalid(
            "gather: u8 output [2^63, 1], bytes past isize::MAX",
            gather(1),
            (U8, &[e63, 0]),
            (I64, &[1]),
            None,
            overflow(OpKind::Gather, TensorRole::Output, &[e63, 1]),
        ),
        // Huge inputs: validation and keys only (the tensors cannot be built).
        invalid(
            "scatter: data [usize::MAX, 2]",
            scatter(1),
            (F32, &[max, 2]),
            (I64, &[1, 1]),
            Some((F32, &[1, 1])),
            overflow(OpKind::ScatterElements, TensorRole::Data, &[max, 2]),
        ),
        invalid(
            "scatter: f32 data [2^62, 1], bytes overflow",
            scatter(1),
            (F32, &[e62, 1]),
            (I64, &[1, 1]),
            Some((F32, &[1, 1])),
            overflow(OpKind::ScatterElements, TensorRole::Data, &[e62, 1]),
        ),
        invalid(
            "scatter: u8 data [2^63], bytes past isize::MAX",
            scatter(0),
            (U8, &[e63]),
            (I64, &[1]),
            Some((U8, &[1])),
            overflow(OpKind::ScatterElements, TensorRole::Data, &[e63]),
        ),
        invalid(
            "scatter: updates [usize::MAX, 2]",
            scatter(1),
            (F32, &[2, 3]),
            (I64, &[1, 1]),
            Some((F32, &[max, 2])),
            overflow(OpKind::ScatterElements, TensorRole::Updates, &[max, 2]),
        ),
        invalid(
            "gather_elements: indices [2^61, 2], bytes overflow",
            Op::GatherElements { axis: 0 },
            (F32, &[2, 3]),
            (I64, &[e61, 2]),
            None,
            overflow(OpKind::GatherElements, TensorRole::Indices, &[e61, 2]),
        ),
        invalid(
            "gather: data [usize::MAX, 3]",
            gather(0),
            (F32, &[max, 3]),
            (I64, &[1]),
            None,
            overflow(OpKind::Gather, TensorRole::Data, &[max, 3]),
        ),
        invalid(
            "gather: indices [2^61], bytes overflow",
            gather(0),
            (F32, &[3]),
            (I64, &[e61]),
            None,
            overflow(OpKind::Gather, TensorRole::Indices, &[e61]),
        ),
    ]
}

#[test]
fn rank_errors() {
    run_table("rank", &rank_cases());
}

#[test]
fn shape_errors() {
    run_table("shape", &shape_cases());
}

#[test]
fn axis_errors() {
    run_table("axis", &axis_cases());
}

#[test]
fn unsupported_reductions() {
    run_table("unsupported reductions", &reduction_cases());
}

#[test]
fn dtype_errors() {
    run_table("dtypes", &dtype_cases());
}

#[test]
fn shape_overflow() {
    run_table("shape overflow", &overflow_cases());
}

// ---------------------------------------------------------------------------------------
// Huge operands as broadcast views (stride 0 over one element): no allocation

/// A view of one element of `dtype` broadcast to `shape`.
fn broadcast<'a>(dtype: DType, shape: &[usize], element: &'a [u8]) -> TensorView<'a> {
    TensorView::new(dtype, shape, &vec![0; shape.len()], 0, element).unwrap()
}

fn broadcast_overflow_cases() -> Vec<Custom> {
    let overflow = |op, tensor, shape: &[usize]| {
        Error::Invalid(IrError::SizeOverflow {
            op,
            tensor,
            shape: shape.to_vec(),
        })
    };
    let (e61, e62) = (1usize << 61, 1usize << 62);
    vec![
        custom("scatter: f64 data view [2^61, 1]", move |c| {
            let key =
                KernelKey::scatter_elements(DType::F64, DType::I64, 2, 1, Reduction::Add, true)
                    .unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let element = [0u8; 8];
            let data = broadcast(DType::F64, &[e61, 1], &element);
            let indices = ix(&[1, 1], &[0i64]);
            let updates = filled(DType::F64, &[1, 1], 7);
            let expected = overflow(OpKind::ScatterElements, TensorRole::Data, &[e61, 1]);
            let got = kernel.run(&data, &(&indices).into(), Some(&(&updates).into()));
            c.err("Kernel::run", got, &expected);
            let mut out = sentinel(DType::F64, &[1, 1]);
            let before = out.clone();
            let got = kernel.run_into(
                &mut (&mut out).into(),
                &data,
                &(&indices).into(),
                Some(&(&updates).into()),
            );
            c.err("Kernel::run_into", got, &expected);
            c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
        }),
        custom("scatter_: f32 updates view [2^62, 1]", move |c| {
            let element = 1.5f32.to_le_bytes();
            let updates = broadcast(DType::F32, &[e62, 1], &element);
            let indices = ix(&[1, 1], &[0i64]);
            let expected = overflow(OpKind::ScatterElements, TensorRole::Updates, &[e62, 1]);
            let data = f32s(&[2, 3]);
            let mut target = data.clone();
            let got = scatterjit::scatter_(
                &mut (&mut target).into(),
                1,
                &(&indices).into(),
                &updates,
                Reduction::None,
                true,
            );
            c.err("scatterjit::scatter_", got, &expected);
            c.unchanged("scatterjit::scatter_ data", data.bytes(), target.bytes());
            let key =
                KernelKey::scatter_elements(DType::F32, DType::I64, 2, 1, Reduction::Mean, false)
                    .unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let got =
                kernel.scatter_in_place(&mut (&mut target).into(), &(&indices).into(), &updates);
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged(
                "Kernel::scatter_in_place data",
                data.bytes(),
                target.bytes(),
            );
            let got = kernel.run(&(&data).into(), &(&indices).into(), Some(&updates));
            c.err("Kernel::run", got, &expected);
        }),
        custom("gather_elements: i64 indices view [2^61, 1]", move |c| {
            let key = KernelKey::gather_elements(DType::F32, DType::I64, 2, 0).unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let element = 0i64.to_le_bytes();
            let indices = broadcast(DType::I64, &[e61, 1], &element);
            let data = f32s(&[2, 3]);
            let got = kernel.run(&(&data).into(), &indices, None);
            c.err(
                "Kernel::run",
                got,
                &overflow(OpKind::GatherElements, TensorRole::Indices, &[e61, 1]),
            );
        }),
        custom("gather: i64 indices view [2^61]", move |c| {
            let key = KernelKey::gather(DType::F32, DType::I64, 1, 1, 0).unwrap();
            let Some(kernel) = get_kernel(c, &key) else {
                return;
            };
            let element = 0i64.to_le_bytes();
            let indices = broadcast(DType::I64, &[e61], &element);
            let data = f32s(&[3]);
            let got = kernel.run(&(&data).into(), &indices, None);
            c.err(
                "Kernel::run",
                got,
                &overflow(OpKind::Gather, TensorRole::Indices, &[e61]),
            );
        }),
        custom(
            "gather: output [usize::MAX, 2] of a data view [usize::MAX, 0]",
            move |c| {
                let key = KernelKey::gather(DType::F32, DType::I64, 2, 1, 1).unwrap();
                let Some(kernel) = get_kernel(c, &key) else {
                    return;
                };
                let data = broadcast(DType::F32, &[usize::MAX, 0], &[]);
                let indices = ix(&[2], &[0i64, 0]);
                let expected = overflow(OpKind::Gather, TensorRole::Output, &[usize::MAX, 2]);
                let got = kernel.run(&data, &(&indices).into(), None);
                c.err("Kernel::run", got, &expected);
                let mut out = sentinel(DType::F32, &[2, 2]);
                let before = out.clone();
                let got = kernel.run_into(&mut (&mut out).into(), &data, &(&indices).into(), None);
                c.err("Kernel::run_into", got, &expected);
                c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
            },
        ),
    ]
}

#[test]
fn shape_overflow_through_broadcast_views() {
    run_table("broadcast overflow", &broadcast_overflow_cases());
}

// ---------------------------------------------------------------------------------------
// Constructors: views and tensors

fn view_case(
    name: &str,
    make: impl Fn() -> scatterjit::ir::Result<()> + 'static,
    expect: Expect,
) -> Custom {
    let path = name.split(": ").next().unwrap_or(name).to_string();
    custom(name, move |c| c.expect(&path, make(), &expect))
}

fn constructor_cases() -> Vec<Custom> {
    use DType::{Bool, String, F32, F64};
    use Expect::{Exact, InvalidView};
    use TensorRole::{Data, Output};
    let view = |dtype, shape: &'static [usize], strides: &'static [isize], offset, len| {
        move || {
            let bytes = vec![0u8; len];
            TensorView::new(dtype, shape, strides, offset, &bytes).map(|_| ())
        }
    };
    let view_mut = |shape: &'static [usize], strides: &'static [isize], offset, len| {
        move || {
            let mut bytes = vec![0u8; len];
            TensorViewMut::new(F32, shape, strides, offset, &mut bytes).map(|_| ())
        }
    };
    let contiguous = |shape: &'static [usize], len| {
        move || {
            let bytes = vec![0u8; len];
            TensorView::contiguous(F32, shape, &bytes).map(|_| ())
        }
    };
    let from_bytes = |dtype, shape: &'static [usize], bytes: Vec<u8>| {
        move || Tensor::from_bytes(dtype, shape.to_vec(), bytes.clone()).map(|_| ())
    };
    let buffer = |expected, actual| Exact(IrError::BufferSize { expected, actual });
    let overflow = |shape: &[usize]| {
        Exact(IrError::ShapeOverflow {
            shape: shape.to_vec(),
        })
    };
    vec![
        view_case(
            "TensorView::new: buffer too short",
            view(F32, &[2, 3], &[3, 1], 0, 20),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: offset pushes the last element out",
            view(F32, &[2, 3], &[3, 1], 1, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: negative stride reaches before the start",
            view(F32, &[2, 3], &[-3, 1], 2, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: negative inner stride from offset 0",
            view(F32, &[2, 3], &[3, -1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: too few strides",
            view(F32, &[2, 3], &[1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: too many strides",
            view(F32, &[2], &[1, 1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: a stride for a scalar",
            view(F32, &[], &[1], 0, 24),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: broadcast over an empty buffer",
            view(F32, &[2, 3], &[0, 0], 0, 0),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: scalar in an empty buffer",
            view(F32, &[], &[], 0, 0),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: stride isize::MAX",
            view(F32, &[2], &[isize::MAX], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: stride isize::MIN",
            view(F32, &[2], &[isize::MIN], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: offset usize::MAX",
            view(F32, &[1], &[1], usize::MAX, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: huge dim, huge stride",
            view(F32, &[usize::MAX / 2, 1], &[isize::MAX, 1], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            // In bytes, the reach is 2^128: it must not wrap to 0 and pass.
            "TensorView::new: reach times element size overflows i128",
            view(F32, &[(1 << 63) + 2], &[isize::MAX], 0, 4),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: string dtype",
            view(String, &[1], &[1], 0, 8),
            InvalidView(Data),
        ),
        view_case(
            "TensorView::new: element count overflows",
            view(F32, &[usize::MAX, 2], &[0, 0], 0, 4),
            overflow(&[usize::MAX, 2]),
        ),
        view_case(
            "TensorView::contiguous: buffer too long",
            contiguous(&[2, 3], 28),
            buffer(24, 28),
        ),
        view_case(
            "TensorView::contiguous: buffer too short",
            contiguous(&[2, 3], 20),
            buffer(24, 20),
        ),
        view_case(
            "TensorView::contiguous: empty shape, non-empty buffer",
            contiguous(&[2, 0], 4),
            buffer(0, 4),
        ),
        view_case(
            "TensorView::contiguous: f32 [2^62], bytes overflow",
            contiguous(&[1 << 62], 0),
            overflow(&[1 << 62]),
        ),
        view_case(
            "TensorViewMut::new: stride 0 on a dim of 2",
            view_mut(&[2, 3], &[0, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, 1] on [2, 3]",
            view_mut(&[2, 3], &[1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, 1] on [3, 2]",
            view_mut(&[3, 2], &[1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, -1] on [2, 2]",
            view_mut(&[2, 2], &[1, -1], 1, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [2, 1, 1] on [2, 2, 2]",
            view_mut(&[2, 2, 2], &[2, 1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: strides [1, 2] on [3, 2]",
            view_mut(&[3, 2], &[1, 2], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: stride 0 on a single dim of 3",
            view_mut(&[3], &[0], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: buffer too short",
            view_mut(&[2, 3], &[3, 1], 0, 20),
            InvalidView(Output),
        ),
        view_case(
            "TensorViewMut::new: too many strides",
            view_mut(&[6], &[1, 1], 0, 24),
            InvalidView(Output),
        ),
        view_case(
            "Tensor::from_bytes: too few bytes",
            from_bytes(F32, &[2, 3], vec![0; 20]),
            buffer(24, 20),
        ),
        view_case(
            "Tensor::from_bytes: too many bytes",
            from_bytes(F32, &[2, 3], vec![0; 28]),
            buffer(24, 28),
        ),
        view_case(
            "Tensor::from_bytes: scalar without bytes",
            from_bytes(F64, &[], vec![]),
            buffer(8, 0),
        ),
        view_case(
            "Tensor::from_bytes: bool byte 2",
            from_bytes(Bool, &[4], vec![0, 1, 2, 1]),
            Exact(IrError::InvalidBool { offset: 2, byte: 2 }),
        ),
        view_case(
            "Tensor::from_bytes: first bad bool byte wins",
            from_bytes(Bool, &[2, 2], vec![1, 255, 2, 0]),
            Exact(IrError::InvalidBool {
                offset: 1,
                byte: 255,
            }),
        ),
        view_case(
            "Tensor::from_bytes: element count overflows",
            from_bytes(F32, &[usize::MAX, 2], vec![]),
            overflow(&[usize::MAX, 2]),
        ),
        view_case(
            "Tensor::from_bytes: f64 [2^61], bytes overflow",
            from_bytes(F64, &[1 << 61], vec![]),
            overflow(&[1 << 61]),
        ),
        view_case(
            "Tensor::from_bytes: string dtype",
            from_bytes(String, &[1], vec![0]),
            Exact(IrError::UnknownDType {
                name: "string (not stored as bytes)".into(),
            }),
        ),
        view_case(
            "Tensor::from_slice: wrong element count",
            || Tensor::from_slice(&[2, 3], &[0f32; 5]).map(|_| ()),
            buffer(24, 20),
        ),
        view_case(
            "Tensor::zeros: f32 [2^62], bytes overflow",
            || Tensor::zeros(F32, vec![1 << 62]).map(|_| ()),
            overflow(&[1 << 62]),
        ),
        // String keys exist (validation yields them), but no kernel over byte views does.
        view_case(
            "KernelCache::get: string key by name",
            || no_kernel("gather.string.i64.r2.q1.a0".parse::<KernelKey>()?),
            Exact(IrError::UnsupportedDType {
                op: OpKind::Gather,
                dtype: String,
            }),
        ),
        view_case(
            "KernelCache::get: scatter_elements with string data",
            || {
                no_kernel(KernelKey::scatter_elements(
                    String,
                    DType::I64,
                    2,
                    0,
                    Reduction::None,
                    true,
                )?)
            },
            Exact(IrError::UnsupportedDType {
                op: OpKind::ScatterElements,
                dtype: String,
            }),
        ),
    ]
}

/// `KernelCache::get(key)`, with its input error (if any) as the result.
fn no_kernel(key: KernelKey) -> scatterjit::ir::Result<()> {
    match cache().get(&key) {
        Ok(_) => Ok(()),
        Err(e) => Err(e.as_invalid().cloned().unwrap_or(IrError::InvalidKey {
            key: key.to_string(),
            reason: format!("not an input error: {e}"),
        })),
    }
}

#[test]
fn constructor_errors() {
    run_table("constructors", &constructor_cases());
}

// ---------------------------------------------------------------------------------------
// Kernel / operand mismatch in the low-level API

fn invalid_key(key: &str, reason: &str) -> Error {
    Error::Invalid(IrError::InvalidKey {
        key: key.to_string(),
        reason: reason.to_string(),
    })
}

fn bad_output(reason: &str) -> Error {
    Error::Invalid(IrError::InvalidView {
        tensor: TensorRole::Output,
        reason: reason.to_string(),
    })
}

/// Calls `key`'s kernel with operands it was not compiled for: `run`, `run_into` (an output
/// of the kernel's dtype and `out_shape`) and, for scatter kernels with updates,
/// `scatter_in_place`; each must fail with `expected` and write nothing.
fn mismatch(
    name: &str,
    key: KernelKey,
    inputs: (Tensor, Tensor, Option<Tensor>),
    out_shape: &'static [usize],
    expected: Error,
) -> Custom {
    custom(name, move |c| {
        let Some(kernel) = get_kernel(c, &key) else {
            return;
        };
        let (data, indices, updates) = &inputs;
        let (dv, iv) = (TensorView::from(data), TensorView::from(indices));
        let uv = updates.as_ref().map(TensorView::from);
        c.err("Kernel::run", kernel.run(&dv, &iv, uv.as_ref()), &expected);
        let mut out = sentinel(key.dtype(), out_shape);
        let before = out.clone();
        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
        c.err("Kernel::run_into", got, &expected);
        c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
        if let (OpKind::ScatterElements, Some(uv)) = (key.kind(), &uv) {
            let mut target = data.clone();
            let got = kernel.scatter_in_place(&mut (&mut target).into(), &iv, uv);
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged(
                "Kernel::scatter_in_place data",
                data.bytes(),
                target.bytes(),
            );
        }
    })
}

/// `run_into` with a wrong output: valid inputs, `out` of the wrong dtype or shape.
fn wrong_output(
    name: &str,
    key: KernelKey,
    inputs: (Tensor, Tensor, Option<Tensor>),
    out: Tensor,
    reason: &'static str,
) -> Custom {
    custom(name, move |c| {
        let Some(kernel) = get_kernel(c, &key) else {
            return;
        };
        let (data, indices, updates) = &inputs;
        let uv = updates.as_ref().map(TensorView::from);
        let mut out = out.clone();
        let before = out.clone();
        let got = kernel.run_into(
            &mut (&mut out).into(),
            &data.into(),
            &indices.into(),
            uv.as_ref(),
        );
        c.err("Kernel::run_into", got, &bad_output(reason));
        c.unchanged("Kernel::run_into output", before.bytes(), out.bytes());
    })
}

fn mismatch_cases() -> Vec<Custom> {
    use DType::{F32, I32, I64, U8};
    let scatter_key = KernelKey::scatter_elements(F32, I64, 2, 1, Reduction::Add, true).unwrap();
    let scatter_name = "scatter_elements.f32.i64.r2.a1.add";
    let gather_key = KernelKey::gather(F32, I64, 2, 1, 1).unwrap();
    let ge_key = KernelKey::gather_elements(F32, I64, 2, 1).unwrap();
    let good = || ix(&[2, 4], &[0i64, 1, 2, 3, 4, 0, 1, 2]);
    let scatter_inputs = || (f32s(&[3, 5]), good(), Some(filled(F32, &[2, 4], 7)));
    let need = |k: &str| format!("the operands need kernel {k}");
    vec![
        mismatch(
            "f32 scatter kernel, i32 operands",
            scatter_key,
            (
                filled(I32, &[3, 5], 1),
                good(),
                Some(filled(I32, &[2, 4], 7)),
            ),
            &[3, 5],
            invalid_key(scatter_name, &need("scatter_elements.i32.i64.r2.a1.add")),
        ),
        mismatch(
            "rank-2 scatter kernel, rank-3 operands",
            scatter_key,
            (
                f32s(&[3, 5, 2]),
                ix(&[2, 4, 1], &[0i64; 8]),
                Some(filled(F32, &[2, 4, 1], 7)),
            ),
            &[3, 5, 2],
            invalid_key(scatter_name, &need("scatter_elements.f32.i64.r3.a1.add")),
        ),
        mismatch(
            "i64-index scatter kernel, i32 indices",
            scatter_key,
            (
                f32s(&[3, 5]),
                ix(&[2, 4], &[0i32; 8]),
                Some(filled(F32, &[2, 4], 7)),
            ),
            &[3, 5],
            invalid_key(scatter_name, &need("scatter_elements.f32.i32.r2.a1.add")),
        ),
        mismatch(
            "scatter kernel, no updates",
            scatter_key,
            (f32s(&[3, 5]), good(), None),
            &[3, 5],
            Error::Invalid(rank_error(
                OpKind::ScatterElements,
                TensorRole::Updates,
                0,
                "an updates tensor",
            )),
        ),
        mismatch(
            "f32 gather_elements kernel, u8 data",
            ge_key,
            (filled(U8, &[3, 5], 1), good(), None),
            &[2, 4],
            invalid_key(
                "gather_elements.f32.i64.r2.a1",
                &need("gather_elements.u8.i64.r2.a1"),
            ),
        ),
        mismatch(
            "gather kernel for rank-1 indices, rank-2 indices",
            gather_key,
            (f32s(&[3, 5]), good(), None),
            &[3, 2, 4],
            invalid_key("gather.f32.i64.r2.q1.a1", &need("gather.f32.i64.r2.q2.a1")),
        ),
        mismatch(
            "gather kernel, updates given",
            gather_key,
            (f32s(&[3, 5]), ix(&[4], &[0i64; 4]), Some(f32s(&[4]))),
            &[3, 4],
            Error::Invalid(rank_error(
                OpKind::Gather,
                TensorRole::Updates,
                1,
                "no updates tensor",
            )),
        ),
        custom("gather kernels in place", move |c| {
            for key in [gather_key, ge_key] {
                let Some(kernel) = get_kernel(c, &key) else {
                    return;
                };
                let data = f32s(&[3, 5]);
                let indices = ix(&[2, 4], &[0i64; 8]);
                let updates = f32s(&[2, 4]);
                let mut target = data.clone();
                let got = kernel.scatter_in_place(
                    &mut (&mut target).into(),
                    &(&indices).into(),
                    &(&updates).into(),
                );
                let expected = invalid_key(
                    &key.to_string(),
                    "in-place calls need a scatter_elements kernel",
                );
                c.err(&format!("{key}: Kernel::scatter_in_place"), got, &expected);
                c.unchanged(&format!("{key}: data"), data.bytes(), target.bytes());
            }
        }),
        custom("scatter kernel in place, i32 data view", move |c| {
            let Some(kernel) = get_kernel(c, &scatter_key) else {
                return;
            };
            let data = filled(I32, &[3, 5], 1);
            let mut target = Strided::of(&data, Layout::PaddedReversed);
            let before = target.bytes.clone();
            let updates = filled(I32, &[2, 4], 7);
            let got = kernel.scatter_in_place(
                &mut target.view_mut(),
                &(&good()).into(),
                &(&updates).into(),
            );
            let expected = invalid_key(scatter_name, &need("scatter_elements.i32.i64.r2.a1.add"));
            c.err("Kernel::scatter_in_place", got, &expected);
            c.unchanged("Kernel::scatter_in_place data", &before, &target.bytes);
        }),
        wrong_output(
            "scatter run_into: output [3, 4] for [3, 5]",
            scatter_key,
            scatter_inputs(),
            sentinel(F32, &[3, 4]),
            "expected f32 [3, 5], got f32 [3, 4]",
        ),
        wrong_output(
            "scatter run_into: i32 output",
            scatter_key,
            scatter_inputs(),
            sentinel(I32, &[3, 5]),
            "expected f32 [3, 5], got i32 [3, 5]",
        ),
        wrong_output(
            "scatter run_into: rank-1 output",
            scatter_key,
            scatter_inputs(),
            sentinel(F32, &[15]),
            "expected f32 [3, 5], got f32 [15]",
        ),
        wrong_output(
            "scatter run_into: empty output",
            scatter_key,
            scatter_inputs(),
            sentinel(F32, &[3, 0]),
            "expected f32 [3, 5], got f32 [3, 0]",
        ),
        wrong_output(
            "gather run_into: output [2, 3] for [3, 2]",
            KernelKey::gather(F32, I64, 2, 1, 1).unwrap(),
            (f32s(&[3, 5]), ix(&[2], &[0i64, 4]), None),
            sentinel(F32, &[2, 3]),
            "expected f32 [3, 2], got f32 [2, 3]",
        ),
        wrong_output(
            "gather_elements run_into: u8 output",
            ge_key,
            (f32s(&[3, 5]), good(), None),
            sentinel(U8, &[2, 4]),
            "expected f32 [2, 4], got u8 [2, 4]",
        ),
    ]
}

#[test]
fn kernel_operand_mismatch() {
    run_table("kernel/operand mismatch", &mismatch_cases());
}

// ---------------------------------------------------------------------------------------
// Zero-size dims are valid

struct Valid {
    name: String,
    op: Op,
    data: Tensor,
    indices: Tensor,
    updates: Option<Tensor>,
    expected: Tensor,
}

impl Case for Valid {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&self, c: &mut Checker) {
        let updates = self.updates.as_ref();
        let got = scatterjit::run(&self.op, &self.data, &self.indices, updates);
        c.ok("scatterjit::run", got, &self.expected);
        if let Some((path, got)) = named(&self.op, &self.data, &self.indices, updates) {
            c.ok(path, got, &self.expected);
        }
        let validated = self.op.validate(
            self.data.meta(),
            self.indices.meta(),
            updates.map(Tensor::meta),
        );
        let validated = match validated {
            Ok(v) => v,
            Err(e) => return c.fail("Op::validate", format!("{e}")),
        };
        let Some(kernel) = get_kernel(c, &validated.key) else {
            return;
        };
        let (dv, iv) = (
            TensorView::from(&self.data),
            TensorView::from(&self.indices),
        );
        let uv = updates.map(TensorView::from);
        c.ok(
            "Kernel::run",
            kernel.run(&dv, &iv, uv.as_ref()),
            &self.expected,
        );
        let mut out = sentinel(self.expected.dtype(), self.expected.shape());
        let got = kernel.run_into(&mut (&mut out).into(), &dv, &iv, uv.as_ref());
        c.done("Kernel::run_into", got);
        if out != self.expected {
            c.fail(
                "Kernel::run_into",
                format!("expected {:?}, got {out:?}", self.expected),
            );
        }
        let (
            Some(uv),
            Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            },
        ) = (&uv, self.op)
        else {
            return;
        };
        let mut target = self.data.clone();
        c.done(
            "Kernel::scatter_in_place",
            kernel.scatter_in_place(&mut (&mut target).into(), &iv, uv),
        );
        if target != self.expected {
            c.fail(
                "Kernel::scatter_in_place",
                format!("data changed: {target:?}"),
            );
        }
        let mut target = self.data.clone();
        let got = scatterjit::scatter_(
            &mut (&mut target).into(),
            axis,
            &iv,
            uv,
            reduction,
            use_init_val,
        );
        c.done("scatterjit::scatter_", got);
        if target != self.expected {
            c.fail("scatterjit::scatter_", format!("data changed: {target:?}"));
        }
    }
}

fn zero_size_cases() -> Vec<Valid> {
    let mut cases = Vec::new();
    let mut push = |name: &str,
                    op: Op,
                    data: Tensor,
                    indices: Tensor,
                    updates: Option<Tensor>,
                    expected: Tensor| {
        for (suffix, op) in each_reduction(op, data.dtype()) {
            cases.push(Valid {
                name: format!("{name}{suffix}"),
                op,
                data: data.clone(),
                indices: indices.clone(),
                updates: updates.clone(),
                expected: expected.clone(),
            });
        }
    };
    let empty = |shape: &[usize]| f32s(shape);
    let no_indices = |shape: &[usize]| ix::<i64>(shape, &[]);
    push(
        "scatter: data [0, 3], axis 1",
        scatter(1),
        empty(&[0, 3]),
        no_indices(&[0, 2]),
        Some(empty(&[0, 2])),
        empty(&[0, 3]),
    );
    push(
        "scatter: data [0, 3], axis 0",
        scatter(0),
        empty(&[0, 3]),
        no_indices(&[0, 3]),
        Some(empty(&[0, 3])),
        empty(&[0, 3]),
    );
    let data = f32s(&[3, 4]);
    push(
        "scatter: indices [2, 0] leave data unchanged",
        scatter(0),
        data.clone(),
        no_indices(&[2, 0]),
        Some(empty(&[2, 0])),
        data.clone(),
    );
    push(
        "scatter: indices [0, 4], updates [1, 4] leave data unchanged",
        scatter(1),
        data.clone(),
        no_indices(&[0, 4]),
        Some(filled(DType::F32, &[1, 4], 7)),
        data.clone(),
    );
    push(
        "scatter: data [2, 0], indices [5, 0] along the axis",
        scatter(0),
        empty(&[2, 0]),
        no_indices(&[5, 0]),
        Some(empty(&[5, 0])),
        empty(&[2, 0]),
    );
    let bools = filled(DType::Bool, &[2, 3], 1);
    push(
        "scatter: bool data, indices [2, 0]",
        scatter(1),
        bools.clone(),
        ix::<u8>(&[2, 0], &[]),
        Some(filled(DType::Bool, &[2, 0], 1)),
        bools,
    );
    push(
        "gather: indices [0], axis 1",
        Op::Gather { axis: 1 },
        data.clone(),
        no_indices(&[0]),
        None,
        empty(&[3, 0]),
    );
    push(
        "gather: indices [0], axis 0",
        Op::Gather { axis: 0 },
        data.clone(),
        ix::<i32>(&[0], &[]),
        None,
        empty(&[0, 4]),
    );
    push(
        "gather: indices [2, 0], axis 0",
        Op::Gather { axis: 0 },
        data.clone(),
        no_indices(&[2, 0]),
        None,
        empty(&[2, 0, 4]),
    );
    push(
        "gather: data [2, 0], good indices",
        Op::Gather { axis: 0 },
        empty(&[2, 0]),
        ix(&[2], &[1i64, -2]),
        None,
        empty(&[2, 0]),
    );
    push(
        "gather_elements: indices [0, 4]",
        Op::GatherElements { axis: 0 },
        data.clone(),
        no_indices(&[0, 4]),
        None,
        empty(&[0, 4]),
    );
    push(
        "gather_elements: indices [3, 0]",
        Op::GatherElements { axis: 1 },
        data,
        ix::<u16>(&[3, 0], &[]),
        None,
        empty(&[3, 0]),
    );
    push(
        "gather_elements: data [2, 0], indices [3, 0]",
        Op::GatherElements { axis: 0 },
        empty(&[2, 0]),
        no_indices(&[3, 0]),
        None,
        empty(&[3, 0]),
    );
    cases
}

#[test]
fn zero_size_dims_are_valid() {
    run_table("zero-size dims", &zero_size_cases());
}
