//! The bodies of the fuzz targets (the cargo-fuzz crate in `fuzz/`) and of their bounded
//! replay in the test suite, which share this one copy.
//!
//! Each body takes arbitrary bytes, decodes them into an input and runs it. It panics only
//! when a promise breaks: a reader or validator panics or aborts, a result differs from the
//! reference interpreter's, a failed call changed its output, a view accepts a position
//! outside its buffer. Any other outcome, errors included, is a pass.
//!
//! Not a stable API: the byte layouts change whenever the targets do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use scatterjit::ir::{
    checked_nbytes, checked_numel, interp, normalize_axis, unravel, DType, Error as IrError,
    KernelKey, Meta, Op, OpKind, Operand, Plan, Reduction, Tensor, Validated, MAX_RANK,
};

use scatterjit::{Error, Kernel, KernelCache, TensorView, TensorViewMut};

use crate::values::{self, same_values, Sample};

/// Fuzz input read as a stream of choices. Past its end every read yields zeros, so any
/// input, the empty one included, decodes to something.
pub struct Choices<'a> {
    data: &'a [u8],
}

impl<'a> Choices<'a> {
    /// Choices drawn from `data`, front to back.
    pub fn new(data: &'a [u8]) -> Self {
        Choices { data }
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A value in `[0, n)` (0 when `n` is 0): one byte when `n <= 256`, else two.
    pub fn below(&mut self, n: usize) -> usize {
        let raw = if n <= 256 {
            usize::from(self.byte())
        } else {
            usize::from(u16::from_le_bytes([self.byte(), self.byte()]))
        };
        raw.checked_rem(n).unwrap_or(0)
    }

    /// One of `items`, which must not be empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// A coin flip.
    pub fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// Eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        b.iter_mut().for_each(|x| *x = self.byte());
        u64::from_le_bytes(b)
    }

    /// The next `n` bytes (fewer past the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// Asserts an error message is one non-empty line that does not start with a capital.
pub fn check_message(message: &str) {
    assert!(
        !message.is_empty() && !message.contains('\n'),
        "an error message must be one line: {message:?}"
    );
    assert!(
        !message.starts_with(|c: char| c.is_uppercase()),
        "error messages are lowercase: {message:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Key validation, shape inference, view geometry

/// An axis attribute: mostly small, sometimes an extreme.
fn axis_attr(c: &mut Choices) -> i64 {
    let b = c.byte();
    match b {
        0..=223 => i64::from(b % 21) - 10,
        224..=247 => [
            i64::MIN,
            i64::MIN + 1,
            i64::MAX,
            -(1 << 32),
            1 << 32,
            255,
            256,
            -129,
        ][usize::from(b % 8)],
        _ => c.u64() as i64,
    }
}

/// A dimension: mostly 0 to 5, sometimes near the limits of `usize`.
pub(crate) fn any_dim(c: &mut Choices) -> usize {
    let b = c.byte();
    match b {
        0..=199 => usize::from(b % 6),
        200..=239 => [
            usize::MAX,
            usize::MAX / 2,
            isize::MAX as usize,
            1 << 32,
            (1 << 32) + 1,
            1 << 62,
            1 << 31,
            1 << 16,
        ][usize::from(b % 8)],
        _ => c.u64() as usize,
    }
}

/// A stride: mostly small, either sign, sometimes extreme.
pub(crate) fn any_stride(c: &mut Choices) -> isize {
    let b = c.byte();
    match b {
        0..=191 => isize::from(b % 9) - 4,
        192..=239 => [
            isize::MAX,
            isize::MIN,
            isize::MAX / 2,
            -(isize::MAX / 2),
            1 << 32,
            -(1 << 32),
            1 << 40,
            i32::MAX as isize,
        ][usize::from(b % 8)],
        _ => c.u64() as isize,
    }
}

/// Kernel keys, op validation and shape inference, and strided view geometry.
///
/// Layout: a length byte and that many bytes of text, parsed as a kernel key, dtype and
/// reduction name; then an op with attributes and the dtypes and shapes of its operands
/// (dims up to `usize::MAX`, ranks up to `MAX_RANK + 1`); then a view's dtype, shape,
/// strides, offset and buffer length.
///
/// Promises checked: nothing panics; a printed key parses back to itself; an accepted op
/// has the key and output shape its rules give, and a plan; for small operands the
/// interpreter accepts exactly what validation accepts and produces that shape, as does the
/// JIT when that shape has no elements; an accepted
/// view reaches only bytes inside its buffer, and a writable one never reaches an element
/// twice.
pub fn key_and_shapes(data: &[u8]) {
    let mut c = Choices::new(data);
    let text_len = usize::from(c.byte());
    key_text(&String::from_utf8_lossy(c.take(text_len)));
    validation(&mut c);
    view_geometry(&mut c);
}

fn key_text(text: &str) {
    match text.parse::<KernelKey>() {
        Ok(key) => {
            let printed = key.to_string();
            assert_eq!(printed.parse::<KernelKey>(), Ok(key), "{printed}");
            let _ = Plan::new(key).to_string();
        }
        Err(e) => check_message(&e.to_string()),
    }
    if let Err(e) = text.parse::<DType>() {
        check_message(&e.to_string());
    }
    if let Err(e) = text.parse::<Reduction>() {
        check_message(&e.to_string());
    }
}

fn validation(c: &mut Choices) {
    let kind = c.pick(OpKind::ALL);
    let axis = axis_attr(c);
    let reduction = c.pick(Reduction::ALL);
    let use_init_val = c.flag();
    let op = Op::new(kind, axis, reduction, use_init_val);
    let dtype = c.pick(DType::ALL);
    let index_dtype = c.pick(DType::ALL);
    let updates_dtype = if c.byte() < 224 {
        dtype
    } else {
        c.pick(DType::ALL)
    };
    let rank = c.below(MAX_RANK + 2);
    let data_shape: Vec<usize> = (0..rank).map(|_| any_dim(c)).collect();
    // Index dims mostly follow data's (equal or one less), so validation gets past ranks.
    let q = if kind == OpKind::Gather || c.byte() >= 240 {
        c.below(MAX_RANK + 2)
    } else {
        rank
    };
    let index_shape: Vec<usize> = (0..q)
        .map(|d| match c.byte() {
            0..=95 => data_shape.get(d).copied().unwrap_or(1),
            96..=127 => data_shape.get(d).map_or(0, |&n| n.saturating_sub(1)),
            _ => any_dim(c),
        })
        .collect();
    let with_updates = (kind == OpKind::ScatterElements) != (c.byte() == 255);
    let updates_rank = if c.byte() < 240 {
        q
    } else {
        c.below(MAX_RANK + 2)
    };
    let updates_shape: Vec<usize> = (0..updates_rank)
        .map(|d| match c.byte() {
            0..=127 => index_shape.get(d).copied().unwrap_or(1),
            128..=191 => index_shape.get(d).map_or(1, |&n| n.saturating_add(1)),
            _ => any_dim(c),
        })
        .collect();
    let updates = with_updates.then_some(Meta::new(updates_dtype, &updates_shape));
    let result = op.validate(
        Meta::new(dtype, &data_shape),
        Meta::new(index_dtype, &index_shape),
        updates,
    );
    match &result {
        Ok(v) => check_validated(&op, v, &data_shape, &index_shape, updates),
        Err(e) => check_message(&e.to_string()),
    }

    // Small operands: the interpreter, on zeros, agrees with validation.
    let small = |dtype: DType, shape: &[usize]| {
        dtype != DType::String && checked_nbytes(dtype, shape).is_ok_and(|n| n <= 1 << 12)
    };
    if !small(dtype, &data_shape)
        || !small(index_dtype, &index_shape)
        || (with_updates && !small(updates_dtype, &updates_shape))
    {
        return;
    }
    let zeros = |dtype, shape: &[usize]| {
        Tensor::zeros(dtype, shape.to_vec()).expect("small tensors of stored dtypes exist")
    };
    let data_t = zeros(dtype, &data_shape);
    let indices_t = zeros(index_dtype, &index_shape);
    let updates_t = with_updates.then(|| zeros(updates_dtype, &updates_shape));
    let ran = interp::run(&op, &data_t, &indices_t, updates_t.as_ref());
    match (&result, ran) {
        (Err(e), Err(got)) => assert_eq!(e, &got, "validation and interpreter differ"),
        (Err(e), Ok(_)) => panic!("validation refused ({e}) what the interpreter ran"),
        (Ok(v), Ok(out)) => {
            assert_eq!(out.shape(), v.out_shape, "output shape");
            // Empty outputs of any rank, possibly beside huge dims, cost the JIT nothing
            // to run (larger problems are the differential target's).
            if out.numel() == 0 {
                match scatterjit::run(&op, &data_t, &indices_t, updates_t.as_ref()) {
                    Ok(got) => assert_eq!(got.shape(), v.out_shape, "{}: JIT output", v.key),
                    Err(e) => panic!("{}: the JIT refused an empty problem: {e}", v.key),
                }
            }
        }
        // Index 0 is out of bounds only along an empty axis.
        (Ok(v), Err(IrError::IndexOutOfBounds { .. }))
            if data_shape[v.key.axis()] == 0 && !index_shape.contains(&0) => {}
        (Ok(v), Err(got)) => panic!("validation accepted {} but interpreter: {got}", v.key),
    }
}

/// An accepted op: the key says what was asked, the output shape follows the op's rule,
/// and the rules SPEC.md states hold.
fn check_validated(
    op: &Op,
    v: &Validated,
    data: &[usize],
    indices: &[usize],
    updates: Option<Meta<'_>>,
) {
    let key = v.key;
    let printed = key.to_string();
    assert_eq!(printed.parse::<KernelKey>(), Ok(key), "{printed}");
    let r = data.len();
    assert_eq!(key.kind(), op.kind(), "{printed}");
    assert_eq!(key.rank(), r, "{printed}");
    assert_eq!(key.index_rank(), indices.len(), "{printed}");
    let axis = if op.axis() < 0 {
        op.axis() + r as i64
    } else {
        op.axis()
    };
    assert_eq!(key.axis() as i64, axis, "{printed}");
    let a = key.axis();
    let off_axis_fits = || indices.len() == r && (0..r).all(|d| d == a || indices[d] <= data[d]);
    let out: Vec<usize> = match op.kind() {
        OpKind::ScatterElements => {
            let u = updates.expect("scatter needs updates");
            assert_eq!(u.dtype, key.dtype(), "{printed}");
            assert!(key.reduction().supports(key.dtype()), "{printed}");
            assert!(off_axis_fits(), "{printed}");
            assert!(
                u.shape.len() == r && u.shape.iter().zip(indices).all(|(u, i)| u >= i),
                "{printed}"
            );
            data.to_vec()
        }
        OpKind::GatherElements => {
            assert!(updates.is_none() && off_axis_fits(), "{printed}");
            indices.to_vec()
        }
        OpKind::Gather => {
            assert!(updates.is_none(), "{printed}");
            [&data[..a], indices, &data[a + 1..]].concat()
        }
    };
    assert!(key.index_dtype().is_integer(), "{printed}");
    assert_eq!(v.out_shape, out, "{printed}");
    assert_eq!(v.out_shape.len(), key.out_rank(), "{printed}");
    assert!(checked_nbytes(key.dtype(), &v.out_shape).is_ok());
    let _ = Plan::new(key).to_string();
}

/// Views: accepted geometry stays inside the buffer.
fn view_geometry(c: &mut Choices) {
    let dtype = c.pick(DType::ALL);
    let rank = c.below(MAX_RANK + 2);
    let shape: Vec<usize> = (0..rank)
        .map(|_| match c.byte() {
            0..=239 => usize::from(c.byte() % 6),
            _ => any_dim(c),
        })
        .collect();
    let stride_count = if c.byte() < 248 { rank } else { c.below(4) };
    let strides: Vec<isize> = (0..stride_count).map(|_| any_stride(c)).collect();
    let offset = match c.byte() {
        0..=239 => c.below(64),
        _ => any_dim(c),
    };
    let buffer = vec![0u8; c.below(4097)];
    match TensorView::new(dtype, &shape, &strides, offset, &buffer) {
        Ok(view) => {
            let offsets = element_offsets(dtype, &shape, &strides, offset, buffer.len());
            if offsets.is_some() {
                assert_eq!(
                    view.to_tensor().expect("a view within 4 KiB").shape(),
                    shape
                );
            }
        }
        Err(e) => check_message(&e.to_string()),
    }
    let mut buffer = buffer;
    let len = buffer.len();
    match TensorViewMut::new(dtype, &shape, &strides, offset, &mut buffer) {
        Ok(view) => {
            if let Some(mut offsets) = element_offsets(dtype, &shape, &strides, offset, len) {
                offsets.sort_unstable();
                assert!(
                    offsets.windows(2).all(|w| w[0] != w[1]),
                    "writable view {shape:?} {strides:?} reaches an element twice"
                );
                assert_eq!(
                    view.as_view()
                        .to_tensor()
                        .expect("a view within 4 KiB")
                        .shape(),
                    shape
                );
            }
        }
        Err(e) => check_message(&e.to_string()),
    }
}

/// The element offset of every position of an accepted view with at most 4096 positions,
/// asserting each lies inside a buffer of `len` bytes; `None` for larger views.
fn element_offsets(
    dtype: DType,
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    len: usize,
) -> Option<Vec<i128>> {
    let numel = checked_numel(shape).expect("an accepted view has a countable shape");
    if numel > 4096 {
        return None;
    }
    assert_eq!(strides.len(), shape.len(), "accepted with a stride per dim");
    let size = dtype.size() as i128;
    let mut offsets = Vec::with_capacity(numel);
    // Positions in row-major order, stepped in place (an allocation per position is most
    // of this target's time under AddressSanitizer).
    let mut position = vec![0usize; shape.len()];
    for _ in 0..numel {
        let at = position
            .iter()
            .zip(strides)
            .map(|(&p, &s)| p as i128 * s as i128)
            .sum::<i128>()
            + offset as i128;
        assert!(
            at >= 0 && (at + 1) * size <= len as i128,
            "view {shape:?} {strides:?} +{offset} reaches element {at} of a {len}-byte buffer"
        );
        offsets.push(at);
        for d in (0..shape.len()).rev() {
            position[d] += 1;
            if position[d] < shape[d] {
                break;
            }
            position[d] = 0;
        }
    }
    Some(offsets)
}

// ---------------------------------------------------------------------------------------------
// The differential target: JIT against the interpreter

/// A buffer and the geometry of one strided view of it.
#[derive(Clone)]
pub struct Strided {
    /// The buffer.
    pub bytes: Vec<u8>,
    /// Element strides.
    pub strides: Vec<isize>,
    /// Element offset of position 0.
    pub offset: usize,
}

impl Strided {
    /// `t`'s elements placed at `offset` + position · `strides` in a buffer of `len`
    /// elements. The gaps hold a recognizable garbage byte (1 for bools, so they stay
    /// valid), so a kernel that reads them produces wrong values.
    pub fn place(t: &Tensor, strides: Vec<isize>, offset: usize, len: usize) -> Strided {
        let size = t.dtype().size();
        let garbage = if t.dtype() == DType::Bool { 1 } else { 0xA5 };
        let mut bytes = vec![garbage; len * size];
        for flat in 0..t.numel() {
            let position = unravel(flat, t.shape());
            let at = position
                .iter()
                .zip(&strides)
                .fold(offset as isize, |at, (&p, &s)| at + p as isize * s);
            let at = at as usize * size;
            bytes[at..at + size].copy_from_slice(&t.bytes()[flat * size..(flat + 1) * size]);
        }
        Strided {
            bytes,
            strides,
            offset,
        }
    }
}

/// Kernels the global cache holds while `differential` or `capi` runs: more than the
/// distinct keys they draw, so that a key compiles once per process however many keys a
/// long run meets (at the default capacity most executions of a long run compiled an
/// evicted key). `key_and_shapes` draws far more keys, each mostly once, and keeps the
/// default.
pub const KEYS_HELD: usize = 1 << 15;

/// Sizes the global cache to [`KEYS_HELD`].
pub(crate) fn hold_every_key() {
    KernelCache::global().set_capacity(KEYS_HELD);
}

/// Pools of 1 and 3 threads, with the parallel grain lowered (process-wide) to 2 elements
/// so that small problems are split too, the engine spreading its buckets from 1 thread
/// per position before the axis, so that the 3-thread pool runs them in parallel, inits
/// of two or more slices reading a copy of the index naming each destination once, passes
/// specializing from their first call, so that small problems run the specialized
/// variants (the `Strided` code they would run first is [`unspecialized`]'s), rows
/// prefetched whatever the size of the tensor they pick from, Gather's rows streamed
/// whatever the size of the output and the rows, and element-wise picks
/// along an outer dim run in tiles of a few elements whatever the size of the tensor
/// they pick from; and a global pool of 3 threads where none was made before, for calls
/// from outside every pool.
pub fn pools() -> &'static [rayon::ThreadPool; 2] {
    static POOLS: OnceLock<[rayon::ThreadPool; 2]> = OnceLock::new();
    POOLS.get_or_init(|| {
        scatterjit::set_parallel_grain(2);
        // A global pool of three threads for calls from outside every pool, unless one was
        // made before (then it keeps its size).
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build_global();
        // Buckets from one thread per position before the axis: the 3-thread pool lists
        // them for up to three such positions, the 1-thread pool for one (its buckets
        // run in order), and both sort for keys alone where there are more.
        scatterjit::set_engine_threads(1);
        scatterjit::set_distinct_from(2, 1);
        scatterjit::set_specialize_after(0);
        scatterjit::set_prefetch_from(0);
        scatterjit::set_stream_from(0);
        scatterjit::set_tile_picks(16);
        let pool = |n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .expect("threads start")
        };
        [pool(1), pool(3)]
    })
}

/// A [`scatterjit::Pool`] of 3 threads, beside [`pools`] (whose settings it takes): calls
/// inside its `run` from a thread outside every pool split over it, the caller taking
/// chunks too.
pub fn lent() -> &'static scatterjit::Pool {
    static LENT: OnceLock<scatterjit::Pool> = OnceLock::new();
    pools();
    LENT.get_or_init(|| scatterjit::Pool::new(3).expect("threads start"))
}

/// The kernel of `key` that runs `Strided` code wherever a binding allows it
/// ([`Kernel::stay_unspecialized`]): the code every call runs before its pass specializes.
/// One per key for the process, beside the global cache's.
pub fn unspecialized(key: &KernelKey) -> scatterjit::Result<Arc<Kernel>> {
    static KERNELS: OnceLock<Mutex<HashMap<KernelKey, Arc<Kernel>>>> = OnceLock::new();
    let kernels = KERNELS.get_or_init(Default::default);
    if let Some(kernel) = kernels.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
        return Ok(Arc::clone(kernel));
    }
    let kernel = Arc::new(Kernel::compile(*key)?);
    kernel.stay_unspecialized();
    let mut kernels = kernels.lock().unwrap_or_else(|e| e.into_inner());
    // As many as the global cache holds in a fuzz run (their code stays mapped).
    if kernels.len() >= KEYS_HELD {
        kernels.clear();
    }
    Ok(Arc::clone(kernels.entry(*key).or_insert(kernel)))
}

fn show(t: &Tensor) -> String {
    format!("{} {:?} {:02x?}", t.dtype(), t.shape(), t.bytes())
}

/// Runs `op` on the reference interpreter and on the JIT every way a caller can: the public
/// [`scatterjit::run`] on contiguous copies, four times in a row (the last two as the
/// thread's kept call where it is small); [`scatterjit::Kernel::run`] on the views, on one thread
/// and split over three (bit-identical); `run_into` an output laid out by `out_layout`
/// (given the zero output tensor; its bytes are then filled with garbage); and, for
/// scatter, in place on `data` laid out by `in_place_layout` (given data's elements), by
/// the kernel and by the free function `scatter_` three times in a row. All
/// must agree with the interpreter on the result (NaN as a class) or on the same error, and
/// a call that fails must leave its output bytes unchanged. `Err` describes the first
/// disagreement.
pub fn agree(
    op: &Op,
    data: &TensorView<'_>,
    indices: &TensorView<'_>,
    updates: Option<&TensorView<'_>>,
    out_layout: impl FnOnce(&Tensor) -> Strided,
    in_place_layout: impl FnOnce(&Tensor) -> Strided,
) -> Result<(), String> {
    // The interpreter sees exactly what the views hold, as contiguous tensors.
    let copy = |v: &TensorView<'_>| v.to_tensor().map_err(|e| format!("copying a view: {e}"));
    let data_t = copy(data)?;
    let indices_t = copy(indices)?;
    let updates_t = updates.map(copy).transpose()?;
    let expected = interp::run(op, &data_t, &indices_t, updates_t.as_ref());
    let agree_with = |what: &str, got: Result<Tensor, Error>| -> Result<(), String> {
        match (&expected, got) {
            (Ok(want), Ok(got))
                if want.shape() == got.shape()
                    && same_values(want.dtype(), want.bytes(), got.bytes()) =>
            {
                Ok(())
            }
            (Err(want), Err(got)) if got.as_invalid() == Some(want) => Ok(()),
            (want, got) => Err(format!(
                "{what}: {op:?}\n want {:?}\n got  {:?}",
                want.as_ref().map(show),
                got.map(|t| show(&t))
            )),
        }
    };

    // 0. The public API, on the contiguous copies; four times, so that a small call runs
    // as its thread's kept call from the third (`scatterjit::kept_calls`).
    for call in 0..4 {
        agree_with(
            &format!("run, call {call}"),
            scatterjit::run(op, &data_t, &indices_t, updates_t.as_ref()),
        )?;
    }

    let validated = op.validate(data.meta(), indices.meta(), updates.map(|u| u.meta()));
    let validated = match (validated, &expected) {
        (Ok(v), _) => v,
        (Err(e), Err(want)) if e == *want => return Ok(()),
        (Err(e), _) => {
            return Err(format!(
                "validation says {e}, interpreter says {expected:?}"
            ))
        }
    };
    let key = validated.key;
    let kernel = KernelCache::global()
        .get(&key)
        .map_err(|e| format!("compile {key}: {e}"))?;

    // 1. Out of place on the views, on one thread and split over three: bit-identical.
    let one = pools()[0].install(|| kernel.run(data, indices, updates));
    // The same bytes, or the same error, as on one thread.
    let same = |got: &scatterjit::Result<Tensor>, what: &str| match (&one, got) {
        (Ok(a), Ok(b)) if a.bytes() == b.bytes() => Ok(()),
        (Err(a), Err(b)) if a == b => Ok(()),
        _ => Err(format!("{key}: {what} gave {got:?}, 1 thread {one:?}")),
    };
    same(
        &pools()[1].install(|| kernel.run(data, indices, updates)),
        "3 threads",
    )?;
    agree_with("kernel.run", one.clone())?;
    // From this thread: outside every pool (as a test or fuzz target calls it), the caller
    // takes chunks beside the global pool's threads (three where `pools` set them).
    same(&kernel.run(data, indices, updates), "this thread")?;
    // From this thread lent a pool: the caller takes chunks beside that pool's threads.
    same(
        &lent().run(|| kernel.run(data, indices, updates)),
        "this thread, lent 3 threads",
    )?;

    // 1b. The same on the `Strided` code calls run before their passes specialize.
    let plain = unspecialized(&key).map_err(|e| format!("compile {key}: {e}"))?;
    for pool in pools() {
        let got = pool.install(|| plain.run(data, indices, updates));
        same(&got, "the Strided code")?;
    }

    // 2. Into a strided, garbage-filled output buffer.
    let zeros = Tensor::zeros(key.dtype(), validated.out_shape.clone())
        .map_err(|e| format!("{key}: output of a validated op: {e}"))?;
    let mut os = out_layout(&zeros);
    let garbage = if key.dtype() == DType::Bool { 1 } else { 0x5A };
    os.bytes.fill(garbage);
    let before = os.bytes.clone();
    let result = {
        let mut out = TensorViewMut::new(
            key.dtype(),
            &validated.out_shape,
            &os.strides,
            os.offset,
            &mut os.bytes,
        )
        .map_err(|e| format!("{key}: output layout: {e}"))?;
        kernel
            .run_into(&mut out, data, indices, updates)
            .and_then(|()| Ok(out.as_view().to_tensor()?))
    };
    if result.is_err() && os.bytes != before {
        return Err(format!("run_into: {key} failed but wrote its output"));
    }
    agree_with("run_into", result)?;

    // 3. In place (PyTorch scatter_): the kernel's call, then the free function three
    // times, on fresh copies of one layout (the third finds its kernel kept, see
    // `scatterjit::kept_calls`).
    if let (
        Some(updates),
        &Op::ScatterElements {
            axis,
            reduction,
            use_init_val,
        },
    ) = (updates, op)
    {
        let layout = in_place_layout(&data_t);
        for call in 0..4 {
            let mut copy = layout.clone();
            let result = {
                let mut view = TensorViewMut::new(
                    key.dtype(),
                    data.shape(),
                    &copy.strides,
                    copy.offset,
                    &mut copy.bytes,
                )
                .map_err(|e| format!("{key}: in-place layout: {e}"))?;
                match call {
                    0 => kernel.scatter_in_place(&mut view, indices, updates),
                    _ => scatterjit::scatter_(
                        &mut view,
                        axis,
                        indices,
                        updates,
                        reduction,
                        use_init_val,
                    ),
                }
                .and_then(|()| Ok(view.as_view().to_tensor()?))
            };
            if result.is_err() && copy.bytes != layout.bytes {
                return Err(format!(
                    "in place, call {call}: {key} failed but changed data"
                ));
            }
            agree_with(&format!("in place, call {call}"), result)?;
        }
    }
    Ok(())
}

/// The dtypes tensors can hold (all but strings).
fn value_dtypes() -> impl Iterator<Item = DType> {
    DType::ALL.iter().copied().filter(|&d| d != DType::String)
}

/// A small dim: 0 (1 in 8), 1 (1 in 8), else 2 to 4.
fn small_dim(c: &mut Choices) -> usize {
    match c.byte() % 8 {
        0 => 0,
        1 => 1,
        b => 2 + usize::from(b % 3),
    }
}

/// One element's bytes: floats favour specials (NaN, ±0, ±inf) and small integers;
/// integers small values; a quarter of all elements take raw bytes from the input.
pub(crate) fn element(c: &mut Choices, dtype: DType, out: &mut [u8]) {
    const FLOATS: [f64; 16] = [
        0.0,
        1.0,
        -1.0,
        2.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.5,
        -2.5,
        3.0,
        2048.0,
        1e30,
        -1e-30,
        65504.0,
        7.0,
    ];
    let b = c.byte();
    if b >= 0xC0 {
        out.iter_mut().for_each(|x| *x = c.byte());
        if dtype == DType::Bool {
            out[0] &= 1;
        }
        return;
    }
    if dtype == DType::Bool {
        out[0] = b & 1;
        return;
    }
    let sample = Sample {
        re: FLOATS[usize::from(b % 16)],
        im: FLOATS[usize::from(b / 16 % 16)],
        bits: (i64::from(b % 7) - 3) as u64,
    };
    values::write(dtype, sample, out);
}

/// One index element for an axis of size `s`: in range 31 times in 32 (`[-s, s)` for signed
/// types, `[0, s)` for unsigned), else out of range (`s`, `-s - 1`, the type's extremes, or
/// any value), stored wrapped into the type.
pub(crate) fn index_element(c: &mut Choices, dtype: DType, s: usize, out: &mut [u8]) {
    if !dtype.is_integer() {
        return element(c, dtype, out);
    }
    let s = s as i128;
    let bits = 8 * dtype.size() as u32;
    let (lo, hi) = if dtype.is_signed_integer() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    let b = c.byte();
    let value = if b < 0xF8 {
        let low = if dtype.is_signed_integer() { -s } else { 0 };
        let span = s - low;
        if span == 0 {
            0
        } else {
            low + i128::from(b) % span
        }
    } else {
        match b % 5 {
            0 => s,
            1 => -s - 1,
            2 => lo,
            3 => hi,
            _ => i128::from(c.u64() as i64),
        }
    };
    out.copy_from_slice(&value.to_le_bytes()[..out.len()]);
}

/// A tensor of `dtype` and `shape` whose elements come from `element`.
fn tensor(
    c: &mut Choices,
    dtype: DType,
    shape: &[usize],
    mut element: impl FnMut(&mut Choices, &mut [u8]),
) -> Tensor {
    let n = checked_nbytes(dtype, shape).expect("small shapes");
    let mut bytes = vec![0u8; n];
    for chunk in bytes.chunks_exact_mut(dtype.size()) {
        element(c, chunk);
    }
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("valid elements")
}

/// Lays `t` out as the input chooses: row-major half the time; otherwise dims nested in a
/// chosen order, each padded by up to two elements and possibly walked backwards, and for
/// read-only views possibly broadcast (stride 0). Size-1 dims may get any stride (they never
/// move), and a tensor without elements any strides and offset. Gaps hold garbage.
fn lay_out(c: &mut Choices, t: &Tensor, writable: bool) -> Strided {
    let shape = t.shape();
    let rank = shape.len();
    let size = t.dtype().size();
    let mode = c.byte();
    if mode % 2 == 0 {
        return Strided {
            bytes: t.bytes().to_vec(),
            strides: t.strides().iter().map(|&s| s as isize).collect(),
            offset: 0,
        };
    }
    if t.numel() == 0 && mode % 4 == 3 {
        return Strided {
            bytes: vec![0; c.below(3) * size],
            strides: (0..rank).map(|_| any_stride(c)).collect(),
            offset: match c.byte() {
                0..=191 => c.below(8),
                _ => any_dim(c),
            },
        };
    }
    let mut order: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        order.swap(i, c.below(i + 1));
    }
    let mut strides = vec![0isize; rank];
    let mut extent = 1usize;
    let mut offset = c.below(3);
    for &d in order.iter().rev() {
        let choice = c.byte();
        if shape[d] == 1 && choice >= 0xE0 {
            strides[d] =
                [0, 1, -1, isize::MAX, isize::MIN, 7, -3, 1 << 40][usize::from(choice % 8)];
            continue;
        }
        if !writable && choice % 4 == 0 {
            strides[d] = 0;
            continue;
        }
        strides[d] = extent as isize;
        if choice & 0x10 != 0 && shape[d] > 0 {
            offset += (shape[d] - 1) * extent;
            strides[d] = -strides[d];
        }
        extent *= shape[d] + usize::from(choice >> 5) % 3;
    }
    let len = offset + extent + c.below(2);
    Strided::place(t, strides, offset, len)
}

/// One string: empty, short, multi-byte, with a NUL, long, or raw input bytes.
fn string(c: &mut Choices) -> String {
    match c.byte() % 8 {
        0 => String::new(),
        1 => "a".into(),
        2 => "zé".into(),
        3 => "日本".into(),
        4 => "\0x".into(),
        5 => "long ".repeat(1 + c.below(40)),
        _ => {
            let n = c.below(12);
            String::from_utf8_lossy(c.take(n)).into_owned()
        }
    }
}

/// A string problem: the public API (which runs strings through the kernels of their
/// handles) against the interpreter, on one thread and on three: gathers and scatter with
/// `none` agree on the result or the error, every other reduction is refused alike, and the
/// kernel API refuses string keys.
fn strings(
    c: &mut Choices,
    op: &Op,
    data_shape: &[usize],
    index_shape: &[usize],
    updates_shape: &[usize],
    index_dtype: DType,
    s: usize,
) {
    let texts = |c: &mut Choices, shape: &[usize]| {
        let n = checked_numel(shape).expect("small shapes");
        Tensor::from_strings(shape, (0..n).map(|_| string(c)).collect::<Vec<_>>())
            .expect("one string per element")
    };
    let data = texts(c, data_shape);
    let indices = tensor(c, index_dtype, index_shape, |c, out| {
        index_element(c, index_dtype, s, out)
    });
    let updates = (op.kind() == OpKind::ScatterElements).then(|| texts(c, updates_shape));
    let expected = interp::run(op, &data, &indices, updates.as_ref());
    for pool in pools() {
        let got = pool.install(|| scatterjit::run(op, &data, &indices, updates.as_ref()));
        match (&expected, &got) {
            (Ok(want), Ok(got)) => {
                assert_eq!(want.shape(), got.shape(), "{op:?} on strings: shape");
                assert_eq!(
                    want.strings().expect("a string result"),
                    got.strings().expect("a string result"),
                    "{op:?} on strings"
                );
            }
            (Err(want), Err(got)) => assert_eq!(Some(want), got.as_invalid(), "{op:?} on strings"),
            _ => panic!("{op:?} on strings: interpreter {expected:?}, JIT {got:?}"),
        }
    }
    if let Ok(v) = op.validate(
        data.meta(),
        indices.meta(),
        updates.as_ref().map(Tensor::meta),
    ) {
        assert!(
            matches!(
                KernelCache::global().get(&v.key),
                Err(Error::Invalid(IrError::UnsupportedDType { .. }))
            ),
            "{}: kernels move bytes, strings have none",
            v.key
        );
    }
}

/// A small random problem on the JIT and the interpreter; see [`agree`].
///
/// Layout: op, dtype (strings too, on the public API only), index dtype (an integer type 7
/// times in 8), rank (1 to 4; Gather's index rank 0 to 2), axis (out of range 1 time in
/// 16), reduction, `use_init_val`; the dims (0 to 4; index dims off the axis bounded by
/// data's 15 times in 16); updates' extra size per dim (PyTorch's larger `src`) and dtype
/// (another 1 time in 256); the elements; then the layouts of data, indices and updates, of
/// the output and of in-place data.
pub fn differential(data: &[u8]) {
    hold_every_key();
    let mut c = Choices::new(data);
    let c = &mut c;
    let kind = c.pick(OpKind::ALL);
    let values: Vec<DType> = value_dtypes().collect();
    // Strings last, so that seeds of the other dtypes keep their meaning.
    let dtype = c.pick(&[&values[..], &[DType::String]].concat());
    let b = c.byte();
    let index_dtype = if b % 8 != 7 {
        let ints: Vec<DType> = value_dtypes().filter(|d| d.is_integer()).collect();
        ints[usize::from(b / 8) % ints.len()]
    } else {
        values[usize::from(b / 8) % values.len()]
    };
    let rank = 1 + c.below(4);
    let q = if kind == OpKind::Gather {
        c.below(3)
    } else {
        rank
    };
    let b = c.byte();
    let axis = if b % 16 != 15 {
        i64::from(b / 16) % (2 * rank as i64) - rank as i64
    } else {
        [-(rank as i64) - 1, rank as i64, i64::MIN, i64::MAX][usize::from(b / 16 % 4)]
    };
    let reduction = c.pick(Reduction::ALL);
    let use_init_val = c.flag();
    let op = Op::new(kind, axis, reduction, use_init_val);

    let data_shape: Vec<usize> = (0..rank).map(|_| small_dim(c)).collect();
    let a = usize::try_from(axis.rem_euclid(rank as i64)).unwrap_or(0);
    let bounded = c.byte() % 16 != 15;
    let index_shape: Vec<usize> = (0..q)
        .map(|d| {
            let n = small_dim(c);
            if kind != OpKind::Gather && d != a && bounded {
                n.min(data_shape[d])
            } else {
                n
            }
        })
        .collect();
    let updates_shape: Vec<usize> = index_shape
        .iter()
        .map(|&n| n + usize::from(c.byte() % 4 == 0))
        .collect();
    let updates_dtype = if c.byte() == 255 {
        c.pick(&values)
    } else {
        dtype
    };
    let s = normalize_axis(kind, axis, rank).map_or(0, |a| data_shape[a]);

    if dtype == DType::String {
        return strings(
            c,
            &op,
            &data_shape,
            &index_shape,
            &updates_shape,
            index_dtype,
            s,
        );
    }
    let data_t = tensor(c, dtype, &data_shape, |c, out| element(c, dtype, out));
    let indices_t = tensor(c, index_dtype, &index_shape, |c, out| {
        index_element(c, index_dtype, s, out)
    });
    let updates_t = (kind == OpKind::ScatterElements).then(|| {
        tensor(c, updates_dtype, &updates_shape, |c, out| {
            element(c, updates_dtype, out)
        })
    });

    let ds = lay_out(c, &data_t, false);
    let is = lay_out(c, &indices_t, false);
    let us = updates_t.as_ref().map(|u| lay_out(c, u, false));
    fn view<'a>(t: &Tensor, s: &'a Strided, role: Operand) -> TensorView<'a> {
        TensorView::new(t.dtype(), t.shape(), &s.strides, s.offset, &s.bytes)
            .unwrap_or_else(|e| panic!("a generated {role} layout is a valid view: {e}"))
    }
    let dv = view(&data_t, &ds, Operand::Data);
    let iv = view(&indices_t, &is, Operand::Indices);
    let uv = match (&updates_t, &us) {
        (Some(u), Some(s)) => Some(view(u, s, Operand::Updates)),
        _ => None,
    };
    let mut layouts = [0u8; 32];
    layouts.iter_mut().for_each(|b| *b = c.byte());
    let (out_choices, in_place_choices) = layouts.split_at(16);
    let result = agree(
        &op,
        &dv,
        &iv,
        uv.as_ref(),
        |zeros| lay_out(&mut Choices::new(out_choices), zeros, true),
        |data| lay_out(&mut Choices::new(in_place_choices), data, true),
    );
    if let Err(message) = result {
        panic!(
            "JIT and interpreter disagree on {op:?} data {} {:?} {:?}+{} indices {} {:?} {:?}+{}: {message}",
            dtype, data_shape, ds.strides, ds.offset, index_dtype, index_shape, is.strides, is.offset
        );
    }
}
