//! The differential suite: random problems run on the reference interpreter and on the JIT
//! (out of place, into a strided output, and in place), which must agree bit for bit (NaN
//! payloads aside) on the result or on the same error. Named edge cases share the table.
//! String tensors, which have no byte views, run out of place on owned tensors.

use proptest::prelude::*;
use scatterjit::ir::{interp, DType, Op, OpKind, Reduction, Tensor};
use scatterjit::{Error, KernelCache, TensorView, TensorViewMut};
use scatterjit_testkit::fuzzing::{agree, pools, Strided};
use scatterjit_testkit::suite::SplitMix64;
use scatterjit_testkit::values::{self, Sample};

/// How an input is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// Row-major, packed.
    Contiguous,
    /// Row-major with gaps: each dim padded by 1 or 2 elements.
    Padded,
    /// Padded, and dim 0 walked backwards (negative stride).
    Reversed,
    /// Padded column-major (Fortran order): the last dim has the largest stride.
    ColumnMajor,
    /// One element broadcast to the whole shape (all strides zero): PyTorch's scalar `value`.
    Broadcast,
    /// The elements along the op's axis (at 0 elsewhere) as a packed vector, stride 0 on
    /// every other dim: PyTorch Geometric's `index.view(-1, 1).expand_as(src)`.
    Expanded,
    /// [`Layout::Expanded`] with the vector walked backwards (stride -1 along the axis):
    /// an expanded view of a flipped index.
    ExpandedReversed,
    /// The elements at 0 along the last dim, row-major, stride 0 along the last dim: each
    /// row one value.
    RowBroadcast,
}

/// Where an out-of-bounds index goes and what it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BadIndex {
    /// `s`: one past the end.
    Size,
    /// `-s - 1`: one before the start.
    BeforeStart,
    /// The index type's minimum (0 for unsigned types, so then its maximum).
    Min,
    /// The index type's maximum.
    Max,
}

/// One generated problem.
#[derive(Clone, Debug)]
pub struct Case {
    pub kind: OpKind,
    pub dtype: DType,
    pub index_dtype: DType,
    pub data_shape: Vec<usize>,
    pub index_shape: Vec<usize>,
    /// Extra size of updates over indices per dim (PyTorch's larger `src`).
    pub update_extra: Vec<usize>,
    pub axis: i64,
    pub reduction: Reduction,
    pub use_init_val: bool,
    pub layouts: [Layout; 3],
    pub bad: Option<(usize, BadIndex)>,
    /// Indices equal across each slice (every position with one axis coordinate), the
    /// materialized form of an expanded index.
    pub uniform_slices: bool,
    /// Which in-range indices may be negative.
    pub signs: Signs,
    pub seed: u64,
}

/// Which of a case's in-range indices (row-major) may be negative: compiled loops check
/// indices that are never negative with one compare and leave for a branch-free copy of
/// the loop at the first negative one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Signs {
    /// Any: drawn from `[-s, s)` (about half negative).
    Any,
    /// None: drawn from `[0, s)`.
    NonNegative,
    /// None before position `p`, the one at `p` negative, any after it.
    NegativeFrom(usize),
}

impl Signs {
    /// One of the three, picked by a case's seed (its high bits, which the named cases'
    /// small seeds leave at zero: [`Signs::Any`]).
    fn of_seed(seed: u64) -> Signs {
        match (seed >> 32) % 3 {
            0 => Signs::Any,
            1 => Signs::NonNegative,
            _ => Signs::NegativeFrom((seed >> 40) as usize % 64),
        }
    }
}

/// Every dtype with bytes of its own (all but strings).
fn numeric() -> Vec<DType> {
    DType::ALL
        .iter()
        .copied()
        .filter(|&d| d != DType::String)
        .collect()
}

/// The index dtypes.
fn index_dtypes() -> Vec<DType> {
    DType::ALL
        .iter()
        .copied()
        .filter(|d| d.is_integer())
        .collect()
}

/// Random element bytes: floats favour specials (NaN of either sign with any payload, ±0,
/// ±inf) and small integers so that sums, products and comparisons are exercised at their
/// edges.
fn random_element(dtype: DType, rng: &mut SplitMix64, out: &mut [u8]) {
    let pick_float = |rng: &mut SplitMix64| -> f64 {
        match rng.below_u64(12) {
            0 => f64::from_bits(rng.next_u64() | 0x7ff0_0000_0000_0001),
            1 => 0.0,
            2 => -0.0,
            3 => f64::INFINITY,
            4 => f64::NEG_INFINITY,
            5 | 6 => (rng.below_u64(2001) as f64 - 1000.0) / 8.0,
            7 => 2048.0,
            _ => (rng.below_u64(21) as f64) - 10.0,
        }
    };
    let sample = Sample {
        re: pick_float(rng),
        im: pick_float(rng),
        bits: match rng.below_u64(4) {
            0 => rng.next_u64(),                   // anything, extremes included
            _ => rng.below_u64(7).wrapping_sub(3), // small, around zero
        },
    };
    values::write(dtype, sample, out);
}

/// Pieces of random strings: empty, ASCII, Latin-1, CJK, an emoji, a combining accent.
const PIECES: &[&str] = &["", "a", "Z", " ", "é", "ß", "日本", "🦀", "\u{301}", "q7"];

/// A short random string: often empty, often not ASCII.
fn random_string(rng: &mut SplitMix64) -> String {
    let n = rng.below_u64(4);
    (0..n).map(|_| rng.pick(PIECES)).collect()
}

fn random_tensor(dtype: DType, shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n: usize = shape.iter().product();
    if dtype == DType::String {
        let values: Vec<String> = (0..n).map(|_| random_string(rng)).collect();
        return Tensor::from_strings(shape, values).unwrap();
    }
    let size = dtype.size();
    let mut bytes = vec![0u8; n * size];
    for chunk in bytes.chunks_exact_mut(size) {
        random_element(dtype, rng, chunk);
    }
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap()
}

/// Stores `value` (an integer that fits `dtype` or wraps into it) as an index element.
fn index_bytes(dtype: DType, value: i128) -> Vec<u8> {
    value.to_le_bytes()[..dtype.size()].to_vec()
}

fn index_range(dtype: DType) -> (i128, i128) {
    let bits = 8 * dtype.size() as u32;
    if dtype.is_signed_integer() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

impl Case {
    fn op(&self) -> Op {
        match self.kind {
            OpKind::ScatterElements => Op::ScatterElements {
                axis: self.axis,
                reduction: self.reduction,
                use_init_val: self.use_init_val,
            },
            OpKind::GatherElements => Op::GatherElements { axis: self.axis },
            OpKind::Gather => Op::Gather { axis: self.axis },
        }
    }

    /// The axis, normalized (0 when out of range).
    fn normalized_axis(&self) -> usize {
        let r = self.data_shape.len() as i64;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if (0..r).contains(&a) {
            a as usize
        } else {
            0
        }
    }

    /// The axis size the indices are drawn against (0 when the axis is out of range).
    fn axis_size(&self) -> usize {
        let r = self.data_shape.len() as i64;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if (0..r).contains(&a) {
            self.data_shape[a as usize]
        } else {
            0
        }
    }

    /// Contiguous inputs: data, indices (in range unless `bad` says otherwise), updates.
    pub fn tensors(&self) -> (Tensor, Tensor, Option<Tensor>) {
        let mut rng = SplitMix64(self.seed);
        let data = random_tensor(self.dtype, &self.data_shape, &mut rng);
        let s = self.axis_size() as i128;
        let n: usize = self.index_shape.iter().product();
        let (lo, hi) = index_range(self.index_dtype);
        let mut idx = Vec::with_capacity(n * self.index_dtype.size());
        for p in 0..n {
            // In range: [-s, s) for signed types, [0, s) for unsigned, and as `signs` says.
            let (low, high) = match (self.index_dtype.is_signed_integer(), self.signs) {
                (false, _) | (true, Signs::NonNegative) => (0, s),
                (true, Signs::NegativeFrom(from)) if p < from => (0, s),
                (true, Signs::NegativeFrom(from)) if p == from => (-s, 0),
                (true, _) => (-s, s),
            };
            let span = (high - low) as u64;
            let v = if span == 0 {
                0
            } else {
                low + rng.below_u64(span) as i128
            };
            idx.extend(index_bytes(self.index_dtype, v.clamp(lo, hi)));
        }
        let size = self.index_dtype.size();
        if self.uniform_slices && n > 0 && self.kind != OpKind::Gather {
            // Every element takes the value at its axis coordinate and 0 elsewhere.
            let axis = self.normalized_axis();
            let inner: usize = self.index_shape[axis + 1..].iter().product();
            let len = self.index_shape[axis];
            let first = idx.clone();
            for p in 0..n {
                let e = p / inner % len;
                idx[p * size..(p + 1) * size]
                    .copy_from_slice(&first[e * inner * size..(e * inner + 1) * size]);
            }
        }
        if let Some((at, kind)) = self.bad {
            if n > 0 {
                let value = match kind {
                    BadIndex::Size => s,
                    BadIndex::BeforeStart => -s - 1,
                    BadIndex::Min if lo < 0 => lo,
                    BadIndex::Min | BadIndex::Max => hi,
                };
                if (lo..=hi).contains(&value) {
                    let p = at % n;
                    idx[p * size..(p + 1) * size]
                        .copy_from_slice(&index_bytes(self.index_dtype, value));
                }
            }
        }
        let indices = Tensor::from_bytes(self.index_dtype, self.index_shape.clone(), idx).unwrap();
        let updates = (self.kind == OpKind::ScatterElements).then(|| {
            let shape: Vec<usize> = self
                .index_shape
                .iter()
                .zip(&self.update_extra)
                .map(|(i, e)| i + e)
                .collect();
            random_tensor(self.dtype, &shape, &mut rng)
        });
        (data, indices, updates)
    }
}

/// A buffer holding `t`'s elements in `layout` (`axis`: the op's, for
/// [`Layout::Expanded`] and [`Layout::ExpandedReversed`]), with the strides and offset to
/// view it.
pub fn lay_out(t: &Tensor, layout: Layout, axis: usize, rng_seed: u64) -> Strided {
    let size = t.dtype().size();
    let shape = t.shape();
    let numel = t.numel();
    if layout == Layout::Broadcast && numel > 0 {
        return Strided {
            bytes: t.bytes()[..size].to_vec(),
            strides: vec![0; shape.len()],
            offset: 0,
        };
    }
    let rank = shape.len();
    let expanded = [Layout::Expanded, Layout::ExpandedReversed].contains(&layout);
    if expanded && numel > 0 && axis < rank {
        let inner: usize = shape[axis + 1..].iter().product();
        let element = |e: usize| t.bytes()[e * inner * size..(e * inner + 1) * size].to_vec();
        let along = shape[axis];
        if layout == Layout::ExpandedReversed {
            return Strided {
                bytes: (0..along).rev().flat_map(element).collect(),
                strides: (0..rank).map(|d| -isize::from(d == axis)).collect(),
                offset: along - 1,
            };
        }
        return Strided {
            bytes: (0..along).flat_map(element).collect(),
            strides: (0..rank).map(|d| isize::from(d == axis)).collect(),
            offset: 0,
        };
    }
    if layout == Layout::RowBroadcast && numel > 0 && rank > 0 {
        let last = shape[rank - 1];
        let bytes = (0..numel / last)
            .flat_map(|row| t.bytes()[row * last * size..(row * last + 1) * size].to_vec())
            .collect();
        let mut strides: Vec<isize> = scatterjit::ir::row_major_strides(&shape[..rank - 1])
            .iter()
            .map(|&s| s as isize)
            .collect();
        strides.push(0);
        return Strided {
            bytes,
            strides,
            offset: 0,
        };
    }
    if layout != Layout::Padded && layout != Layout::Reversed && layout != Layout::ColumnMajor
        || numel == 0
    {
        return Strided {
            bytes: t.bytes().to_vec(),
            strides: t.strides().iter().map(|&s| s as isize).collect(),
            offset: 0,
        };
    }
    let mut rng = SplitMix64(rng_seed);
    let padded: Vec<usize> = shape
        .iter()
        .map(|&d| d + 1 + rng.below_u64(2) as usize)
        .collect();
    let mut strides: Vec<isize> = if layout == Layout::ColumnMajor {
        let reversed: Vec<usize> = padded.iter().rev().copied().collect();
        let mut s: Vec<isize> = scatterjit::ir::row_major_strides(&reversed)
            .iter()
            .map(|&s| s as isize)
            .collect();
        s.reverse();
        s
    } else {
        scatterjit::ir::row_major_strides(&padded)
            .iter()
            .map(|&s| s as isize)
            .collect()
    };
    let total: usize = padded.iter().product();
    let mut offset = 0usize;
    if layout == Layout::Reversed && !shape.is_empty() {
        offset = (shape[0] - 1) * strides[0] as usize;
        strides[0] = -strides[0];
    }
    Strided::place(t, strides, offset, total)
}

/// [`check`] as a property: a disagreement fails the case with its description.
fn agrees(case: &Case) -> Result<(), TestCaseError> {
    check(case).map_err(TestCaseError::fail)
}

/// [`check`] in a plain test: a disagreement panics with `what` and its description.
fn assert_agrees(case: &Case, what: std::fmt::Arguments<'_>) {
    if let Err(message) = check(case) {
        panic!("{what}: {message}");
    }
}

/// Runs one case on every engine and path; `Err` describes the first disagreement.
pub fn check(case: &Case) -> Result<(), String> {
    if case.dtype == DType::String {
        return check_strings(case);
    }
    let (data, indices, updates) = case.tensors();
    let op = case.op();
    let mut seed = case.seed;
    let axis = case.normalized_axis();
    let mut strided = |t: &Tensor, layout: Layout| {
        seed = seed.wrapping_add(1);
        lay_out(t, layout, axis, seed)
    };
    let ds = strided(&data, case.layouts[0]);
    let is = strided(&indices, case.layouts[1]);
    let us = updates.as_ref().map(|u| strided(u, case.layouts[2]));
    let dv = TensorView::new(
        data.dtype(),
        data.shape(),
        &ds.strides,
        ds.offset,
        &ds.bytes,
    )
    .unwrap();
    let iv = TensorView::new(
        indices.dtype(),
        indices.shape(),
        &is.strides,
        is.offset,
        &is.bytes,
    )
    .unwrap();
    let uv = match (&updates, &us) {
        (Some(u), Some(s)) => {
            Some(TensorView::new(u.dtype(), u.shape(), &s.strides, s.offset, &s.bytes).unwrap())
        }
        _ => None,
    };
    // `run_into`'s output is laid out as data is where that is column-major or walked
    // backwards (loop orders turn on it, a gather's too), or, in every other case of those,
    // row-major (a scatter copies such data in on the host, in tiles); row-major beside
    // row-major data in every other case (the layout of most callers' outputs, which some
    // paths need: partial outputs, a small destination's copy); padded otherwise, so that
    // a write past a row lands in a gap.
    let out_layout = match case.layouts[0] {
        layout @ (Layout::ColumnMajor | Layout::Reversed) if seed % 2 == 0 => layout,
        Layout::ColumnMajor | Layout::Reversed => Layout::Contiguous,
        Layout::Contiguous if case.seed % 2 == 1 => Layout::Contiguous,
        _ => Layout::Padded,
    };
    agree(
        &op,
        &dv,
        &iv,
        uv.as_ref(),
        |zeros| lay_out(zeros, out_layout, axis, seed ^ 0xff),
        |data| lay_out(data, case.layouts[0], axis, seed ^ 0xabc),
    )
}

/// A string case: the interpreter against `scatterjit::run` (on 1 and 3 threads, which must
/// agree) and the op's own function. The layouts do not apply: strings have no byte views.
fn check_strings(case: &Case) -> Result<(), String> {
    let (data, indices, updates) = case.tensors();
    let op = case.op();
    let expected = interp::run(&op, &data, &indices, updates.as_ref());
    let agree = |what: &str, got: Result<Tensor, Error>| -> Result<(), String> {
        match (&expected, &got) {
            (Ok(want), Ok(got)) if want == got => Ok(()),
            (Err(want), Err(got)) if got.as_invalid() == Some(want) => Ok(()),
            _ => Err(format!("{what}: want {expected:?}\n got {got:?}")),
        }
    };
    let run = || scatterjit::run(&op, &data, &indices, updates.as_ref());
    let one = pools()[0].install(run);
    let three = pools()[1].install(run);
    if one != three {
        return Err(format!("3 threads gave {three:?}, 1 thread {one:?}"));
    }
    agree("run", one)?;
    let named = match (op, &updates) {
        (
            Op::ScatterElements {
                axis,
                reduction,
                use_init_val,
            },
            Some(u),
        ) => scatterjit::scatter_elements(&data, &indices, u, axis, reduction, use_init_val),
        (Op::GatherElements { axis }, _) => scatterjit::gather_elements(&data, &indices, axis),
        (Op::Gather { axis }, _) => scatterjit::gather(&data, &indices, axis),
        (Op::ScatterElements { .. }, None) => unreachable!("scatter cases have updates"),
    };
    agree(op.kind().name(), named)
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        4 => Just(Layout::Contiguous),
        2 => Just(Layout::Padded),
        1 => Just(Layout::Reversed),
        1 => Just(Layout::ColumnMajor),
    ]
}

/// A layout for a read-only input: any of [`layout`], or a broadcast one.
fn input_layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        6 => layout(),
        1 => Just(Layout::Expanded),
        1 => Just(Layout::ExpandedReversed),
        1 => Just(Layout::RowBroadcast),
    ]
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 2 => Just(1usize), 6 => 2usize..=4]
}

fn bad_index() -> impl Strategy<Value = Option<(usize, BadIndex)>> {
    prop_oneof![
        6 => Just(None),
        1 => (any::<usize>(), prop_oneof![
            Just(BadIndex::Size),
            Just(BadIndex::BeforeStart),
            Just(BadIndex::Min),
            Just(BadIndex::Max),
        ]).prop_map(Some),
    ]
}

pub fn case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        2 => Just(OpKind::ScatterElements),
        1 => Just(OpKind::GatherElements),
        1 => Just(OpKind::Gather),
    ];
    let dtype = prop_oneof![
        numeric().len() as u32 => prop::sample::select(numeric()),
        2 => Just(DType::String),
    ];
    case_of(kind, dtype, prop::sample::select(Reduction::ALL))
}

/// The dtypes `mean` applies to.
fn mean_dtypes() -> Vec<DType> {
    DType::ALL
        .iter()
        .copied()
        .filter(|&d| Reduction::Mean.supports(d))
        .collect()
}

/// Scatter `mean` (its init, apply and finish nests) on every dtype it applies to, with and
/// without the initial values, in every layout [`case`] draws.
fn mean_case() -> impl Strategy<Value = Case> {
    case_of(
        Just(OpKind::ScatterElements),
        prop::sample::select(mean_dtypes()),
        Just(Reduction::Mean),
    )
}

/// Problems of the given kinds, dtypes and reductions: random shapes (empty dims among
/// them), axes, index dtypes and values (duplicates, a bad index now and then), layouts.
fn case_of(
    kind: impl Strategy<Value = OpKind>,
    dtype: impl Strategy<Value = DType>,
    reduction: impl Strategy<Value = Reduction>,
) -> impl Strategy<Value = Case> {
    (
        kind,
        dtype,
        prop::sample::select(index_dtypes()),
        1usize..=5,
        0usize..=3,
        reduction,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(
            |(kind, dtype, index_dtype, rank, q, reduction, init, seed)| {
                let rank = if kind == OpKind::Gather {
                    rank.min(3)
                } else {
                    rank
                };
                let index_rank = if kind == OpKind::Gather { q } else { rank };
                // Keep most reductions valid for the dtype; the rest test the error path.
                let reduction = if reduction.supports(dtype) || seed % 8 == 0 {
                    reduction
                } else {
                    Reduction::None
                };
                (
                    Just((kind, dtype, index_dtype, reduction, init, seed)),
                    prop::collection::vec(dim(), rank),
                    prop::collection::vec(dim(), index_rank),
                    prop::collection::vec(
                        prop_oneof![3 => Just(0usize), 1 => Just(1usize)],
                        index_rank,
                    ),
                    -(rank as i64)..(rank as i64),
                    (
                        layout(),
                        input_layout(),
                        prop_oneof![3 => input_layout(), 1 => Just(Layout::Broadcast)],
                    ),
                    bad_index(),
                )
            },
        )
        .prop_map(
            |(
                (kind, dtype, index_dtype, reduction, use_init_val, seed),
                data_shape,
                index_shape,
                update_extra,
                axis,
                (l0, l1, l2),
                bad,
            )| {
                let layouts = [l0, l1, l2];
                let mut index_shape = index_shape;
                if kind != OpKind::Gather {
                    fit_off_axis(&mut index_shape, &data_shape, axis);
                }
                Case {
                    kind,
                    dtype,
                    index_dtype,
                    data_shape,
                    index_shape,
                    update_extra,
                    axis,
                    reduction,
                    use_init_val,
                    layouts,
                    bad,
                    uniform_slices: seed % 5 == 0,
                    signs: Signs::of_seed(seed),
                    seed,
                }
            },
        )
}

/// Shortens the dims of an elementwise op's index off `axis` to data's: there the index
/// may not be longer than data.
fn fit_off_axis(index_shape: &mut [usize], data_shape: &[usize], axis: i64) {
    let a = axis.rem_euclid(data_shape.len() as i64) as usize;
    for (d, (i, &n)) in index_shape.iter_mut().zip(data_shape).enumerate() {
        if d != a {
            *i = (*i).min(n);
        }
    }
}

/// Gathers along the last axis of wide rows (kilobytes), whose lines the contiguous
/// variant reads ahead: every dtype and index dtype, data in any layout (reversed and
/// column-major rows among them), index of 0 to 2 dims in any layout, duplicates, a bad
/// index now and then; and now and then another axis, narrow rows (which run in blocks),
/// few picks or an empty dim.
pub fn wide_gather_case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(numeric()),
        prop::sample::select(index_dtypes()),
        1usize..=3,
        0usize..=2,
        any::<u64>(),
    )
        .prop_flat_map(|(dtype, index_dtype, rank, q, seed)| {
            (
                Just((dtype, index_dtype, seed)),
                prop::collection::vec(prop_oneof![8 => 1usize..=3, 1 => dim()], rank - 1),
                prop_oneof![4 => 1030usize..=4500, 1 => 2usize..=40],
                prop::collection::vec(prop_oneof![4 => 4usize..=24, 1 => dim()], q),
                prop_oneof![6 => Just(-1i64), 1 => -(rank as i64)..(rank as i64)],
                (layout(), input_layout()),
                bad_index(),
            )
        })
        .prop_map(
            |((dtype, index_dtype, seed), outer, size, index_shape, axis, (l0, l1), bad)| {
                let mut data_shape = outer;
                data_shape.push(size);
                Case {
                    kind: OpKind::Gather,
                    dtype,
                    index_dtype,
                    update_extra: vec![0; index_shape.len()],
                    data_shape,
                    index_shape,
                    axis,
                    reduction: Reduction::None,
                    use_init_val: true,
                    layouts: [l0, l1, Layout::Contiguous],
                    bad,
                    uniform_slices: false,
                    signs: Signs::of_seed(seed),
                    seed,
                }
            },
        )
}

/// GatherElements and ScatterElements (any reduction) along the last axis of rows from
/// tens of bytes to tens of kilobytes, whose lines the contiguous variant reads in order
/// before a row picks within them (`Variant::Touched`): every dtype and
/// index dtype, rows picked from a few times to many times per cache line, data and index
/// in any layout (column-major data has a stride of a few elements along the row, with
/// gaps), duplicates, a bad index now and then; and now and then another axis.
pub fn picked_lines_case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            2 => Just(OpKind::ScatterElements),
            1 => Just(OpKind::GatherElements),
        ],
        prop::sample::select(numeric()),
        prop::sample::select(index_dtypes()),
        prop::sample::select(Reduction::ALL),
        1usize..=3,
        any::<u64>(),
    )
        .prop_flat_map(|(kind, dtype, index_dtype, reduction, rank, seed)| {
            (
                Just((kind, dtype, index_dtype, reduction, seed)),
                prop::collection::vec(1usize..=3, rank - 1),
                prop_oneof![4 => 200usize..=4500, 1 => 2usize..=40],
                1usize..=4500,
                prop_oneof![6 => Just(-1i64), 1 => -(rank as i64)..(rank as i64)],
                (layout(), input_layout(), input_layout()),
                bad_index(),
            )
        })
        .prop_map(
            |(
                (kind, dtype, index_dtype, reduction, seed),
                outer,
                size,
                picks,
                axis,
                layouts,
                bad,
            )| {
                let reduction = match kind {
                    OpKind::ScatterElements if reduction.supports(dtype) => reduction,
                    _ => Reduction::None,
                };
                let mut data_shape = outer.clone();
                data_shape.push(size);
                let mut index_shape = outer;
                index_shape.push(picks);
                fit_off_axis(&mut index_shape, &data_shape, axis);
                Case {
                    kind,
                    dtype,
                    index_dtype,
                    update_extra: vec![0; index_shape.len()],
                    data_shape,
                    index_shape,
                    axis,
                    reduction,
                    use_init_val: seed % 3 != 0,
                    layouts: [layouts.0, layouts.1, layouts.2],
                    bad,
                    uniform_slices: false,
                    signs: Signs::of_seed(seed),
                    seed,
                }
            },
        )
}

/// Scatters for the parallel engine (see `suite_workloads_agree_with_interpreter` for its
/// full-size paths): many slices along the axis into a short axis (many duplicates), the
/// index per slice uniform by layout (expanded, row-broadcast) or by value, updates
/// packed, padded or broadcast, bad indices where a slice's index is read.
pub fn engine_case() -> impl Strategy<Value = Case> {
    engine_case_of(
        prop::sample::select(numeric()),
        prop::sample::select(Reduction::ALL),
        any::<bool>(),
    )
}

/// [`engine_case`]'s scatters from the identity (`use_init_val = false`): with an expanded
/// index, into a destination of at most half as many slices, the init pass reads a copy of
/// the index that names each destination slice once (`kernel::distinct`, from two slices
/// in tests).
pub fn distinct_init_case() -> impl Strategy<Value = Case> {
    engine_case_of(
        prop::sample::select(numeric()),
        prop::sample::select(Reduction::ALL),
        Just(false),
    )
}

/// [`engine_case`] with the given dtypes, reductions and `use_init_val`.
fn engine_case_of(
    dtype: impl Strategy<Value = DType>,
    reduction: impl Strategy<Value = Reduction>,
    init: impl Strategy<Value = bool>,
) -> impl Strategy<Value = Case> {
    (
        dtype,
        prop::sample::select(index_dtypes()),
        1usize..=3,
        reduction,
        init,
        any::<u64>(),
    )
        .prop_flat_map(|(dtype, index_dtype, rank, reduction, init, seed)| {
            let reduction = if reduction.supports(dtype) {
                reduction
            } else {
                Reduction::None
            };
            (
                Just((dtype, index_dtype, reduction, init, seed)),
                prop::collection::vec(prop_oneof![1 => Just(0usize), 8 => 1usize..=3], rank),
                0..rank,
                1usize..=6,
                6usize..=40,
                prop_oneof![
                    2 => Just(Layout::Expanded),
                    1 => Just(Layout::ExpandedReversed),
                    1 => Just(Layout::RowBroadcast),
                    2 => Just(Layout::Contiguous),
                ],
                prop_oneof![
                    3 => Just(Layout::Contiguous),
                    1 => Just(Layout::Padded),
                    1 => Just(Layout::Expanded),
                    1 => Just(Layout::RowBroadcast),
                    1 => Just(Layout::Broadcast),
                ],
                prop_oneof![4 => Just(None), 1 => (0usize..40, prop_oneof![
                    Just(BadIndex::Size),
                    Just(BadIndex::BeforeStart),
                    Just(BadIndex::Max),
                ]).prop_map(Some)],
            )
        })
        .prop_map(
            |(
                (dtype, index_dtype, reduction, use_init_val, seed),
                dims,
                axis,
                size,
                slices,
                il,
                ul,
                bad,
            )| {
                let mut data_shape = dims.clone();
                data_shape[axis] = size;
                let mut index_shape = dims;
                index_shape[axis] = slices;
                let inner: usize = index_shape[axis + 1..].iter().product();
                Case {
                    kind: OpKind::ScatterElements,
                    dtype,
                    index_dtype,
                    update_extra: vec![0; index_shape.len()],
                    data_shape,
                    index_shape,
                    axis: axis as i64,
                    reduction,
                    use_init_val,
                    layouts: [Layout::Contiguous, il, ul],
                    // At the start of a slice, where an expanded view reads it.
                    bad: bad.map(|(e, kind)| (e * inner, kind)),
                    uniform_slices: true,
                    signs: Signs::of_seed(seed),
                    seed,
                }
            },
        )
}

/// Scatter `mean` whose update rows (the last dim, off the axis) each land whole on one
/// destination row, so that it can keep one count per row (see [`whole_rows_case`]);
/// rows short, or wide enough (thousands of elements) that a parallel pass would split
/// them.
fn row_mean_case() -> impl Strategy<Value = Case> {
    whole_rows_case(
        mean_dtypes(),
        vec![Reduction::Mean],
        prop_oneof![3 => 1usize..=5, 1 => 1000usize..=2100],
    )
}

/// Scatters of f16 and bf16 with every float reduction whose update rows land whole on
/// one destination row: rows combined with vectors of eight elements (converted to f32
/// lanes and back) and a tail element by element, so of any length.
fn half_rows_case() -> impl Strategy<Value = Case> {
    whole_rows_case(
        vec![DType::F16, DType::BF16],
        vec![
            Reduction::Add,
            Reduction::Mul,
            Reduction::Max,
            Reduction::Min,
            Reduction::Mean,
        ],
        prop_oneof![3 => 1usize..=40, 1 => 1000usize..=2100],
    )
}

/// Scatters of `dtypes` and `reductions` whose update rows (the last dim, off the axis)
/// each land whole on one destination row: an index constant along the last dim
/// (expanded, row-broadcast, or materialized and uniform per slice) spanning data's last
/// dim of `row` elements; updates in any layout (a row-broadcast one is one value per
/// row), bad indices now and then.
fn whole_rows_case(
    dtypes: Vec<DType>,
    reductions: Vec<Reduction>,
    row: impl Strategy<Value = usize> + Clone,
) -> impl Strategy<Value = Case> {
    (
        prop::sample::select(dtypes),
        prop::sample::select(index_dtypes()),
        2usize..=3,
        prop::sample::select(reductions),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(move |(dtype, index_dtype, rank, reduction, init, seed)| {
            (
                Just((dtype, index_dtype, reduction, init, seed)),
                prop::collection::vec(prop_oneof![1 => Just(0usize), 8 => 1usize..=3], rank),
                0..rank - 1,
                1usize..=6,
                1usize..=8,
                row.clone(),
                prop_oneof![
                    2 => Just(Layout::Expanded),
                    2 => Just(Layout::RowBroadcast),
                    1 => Just(Layout::Contiguous),
                ],
                prop_oneof![
                    3 => Just(Layout::Contiguous),
                    1 => Just(Layout::Padded),
                    1 => Just(Layout::Reversed),
                    1 => Just(Layout::ColumnMajor),
                    1 => Just(Layout::Broadcast),
                    1 => Just(Layout::RowBroadcast),
                ],
                layout(),
                bad_index(),
            )
        })
        .prop_map(
            |(
                (dtype, index_dtype, reduction, use_init_val, seed),
                dims,
                axis,
                size,
                slices,
                row,
                il,
                ul,
                dl,
                bad,
            )| {
                let mut data_shape = dims.clone();
                data_shape[axis] = size;
                *data_shape.last_mut().expect("rank 2 or more") = row;
                let mut index_shape = data_shape.clone();
                index_shape[axis] = slices;
                Case {
                    kind: OpKind::ScatterElements,
                    dtype,
                    index_dtype,
                    update_extra: vec![0; index_shape.len()],
                    data_shape,
                    index_shape,
                    axis: axis as i64,
                    reduction,
                    use_init_val,
                    layouts: [dl, il, ul],
                    bad,
                    uniform_slices: seed % 2 == 0,
                    signs: Signs::of_seed(seed),
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn jit_agrees_with_interpreter(case in case()) {
        agrees(&case)?;
    }

    #[test]
    fn wide_gathers_agree_with_interpreter(case in wide_gather_case()) {
        agrees(&case)?;
    }

    #[test]
    fn rows_picking_in_read_lines_agree_with_interpreter(case in picked_lines_case()) {
        agrees(&case)?;
    }

    #[test]
    fn parallel_engine_agrees_with_interpreter(case in engine_case()) {
        agrees(&case)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// `mean` on its own, on 1 and 3 threads (`agree`), so every dtype and both
    /// `use_init_val`s meet every layout often.
    #[test]
    fn mean_agrees_with_interpreter(case in mean_case()) {
        agrees(&case)?;
    }

    /// One count per destination row (see [`row_mean_case`]).
    #[test]
    fn mean_of_whole_rows_agrees_with_interpreter(case in row_mean_case()) {
        agrees(&case)?;
    }

    /// f16 and bf16 rows combined in f32 vector lanes (see [`half_rows_case`]).
    #[test]
    fn half_float_rows_agree_with_interpreter(case in half_rows_case()) {
        agrees(&case)?;
    }

    #[test]
    fn mean_on_the_parallel_engine_agrees_with_interpreter(
        case in engine_case_of(
            prop::sample::select(mean_dtypes()),
            Just(Reduction::Mean),
            any::<bool>(),
        ),
    ) {
        agrees(&case)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Inits that fill each destination slice once (see [`distinct_init_case`]).
    #[test]
    fn inits_of_distinct_destinations_agree_with_interpreter(case in distinct_init_case()) {
        agrees(&case)?;
    }
}

/// Builds a named case from its parts.
#[allow(clippy::too_many_arguments)]
fn named(
    kind: OpKind,
    dtype: DType,
    index_dtype: DType,
    data_shape: &[usize],
    index_shape: &[usize],
    axis: i64,
    reduction: Reduction,
    use_init_val: bool,
    bad: Option<(usize, BadIndex)>,
) -> Case {
    Case {
        kind,
        dtype,
        index_dtype,
        data_shape: data_shape.to_vec(),
        index_shape: index_shape.to_vec(),
        update_extra: vec![0; index_shape.len()],
        axis,
        reduction,
        use_init_val,
        layouts: [Layout::Contiguous; 3],
        bad,
        uniform_slices: false,
        signs: Signs::Any,
        seed: 7,
    }
}

/// Column-major updates through a row-major index 64 bytes a row: the loop order runs the
/// short feature dim inside the 300 rows (`bind::reused_inside`), which shapes of a few
/// elements never reach. Every reduction, with and without a bad index, at 1 and 3 threads.
#[test]
fn column_major_updates_under_a_long_index_agree_with_interpreter() {
    for dtype in [DType::F32, DType::I64] {
        for &reduction in Reduction::ALL.iter() {
            for bad in [None, Some((1234, BadIndex::Size))] {
                let mut case = named(
                    OpKind::ScatterElements,
                    dtype,
                    DType::I64,
                    &[50, 8],
                    &[300, 8],
                    0,
                    reduction,
                    true,
                    bad,
                );
                case.layouts = [Layout::Contiguous, Layout::Contiguous, Layout::ColumnMajor];
                assert_agrees(&case, format_args!("{dtype} {reduction:?} {bad:?}"));
            }
        }
    }
}

/// A new scatter output from transposed data large enough (2.6 MB of f32) that the copy of
/// data into it runs in tiles split over the pool at 3 threads (`tensor/relayout.rs`), for
/// 1- and 4-byte elements, with and without a bad index.
#[test]
fn new_outputs_from_large_transposed_data_agree_with_interpreter() {
    for dtype in [DType::F32, DType::U8] {
        for reduction in [Reduction::None, Reduction::Add, Reduction::Max] {
            for bad in [None, Some((4321, BadIndex::BeforeStart))] {
                let mut case = named(
                    OpKind::ScatterElements,
                    dtype,
                    DType::I32,
                    &[1024, 640],
                    &[1024, 64],
                    1,
                    reduction,
                    true,
                    bad,
                );
                case.layouts = [Layout::ColumnMajor, Layout::Contiguous, Layout::Contiguous];
                assert_agrees(&case, format_args!("{dtype} {reduction:?} {bad:?}"));
            }
        }
    }
}

/// Gathered rows of every length a row copy handles inline (below `memcpy`'s 128 bytes) and a
/// few past it: the copy's chunks, its last chunk overlapping them and its pairs of
/// narrower moves each reach every byte of a row, and none past it.
#[test]
fn rows_of_every_short_length_are_copied_whole() {
    for bytes in 1..=136 {
        let case = named(
            OpKind::Gather,
            DType::U8,
            DType::I32,
            &[5, bytes],
            &[9],
            0,
            Reduction::None,
            true,
            None,
        );
        assert_agrees(&case, format_args!("rows of {bytes} bytes"));
    }
}

#[test]
fn named_edge_cases() {
    use BadIndex::*;
    use OpKind::*;
    let cases = [
        // Extremes of every index type, at the first and a later position.
        named(
            Gather,
            DType::F32,
            DType::I64,
            &[5, 3],
            &[4],
            0,
            Reduction::None,
            true,
            Some((0, Min)),
        ),
        named(
            Gather,
            DType::F32,
            DType::I64,
            &[5, 3],
            &[4],
            0,
            Reduction::None,
            true,
            Some((2, Max)),
        ),
        named(
            Gather,
            DType::F32,
            DType::U64,
            &[5, 3],
            &[4],
            0,
            Reduction::None,
            true,
            Some((3, Max)),
        ),
        named(
            GatherElements,
            DType::I8,
            DType::I8,
            &[3, 4],
            &[3, 4],
            1,
            Reduction::None,
            true,
            Some((5, BeforeStart)),
        ),
        named(
            ScatterElements,
            DType::U16,
            DType::U8,
            &[4, 4],
            &[2, 4],
            0,
            Reduction::Add,
            true,
            Some((7, Size)),
        ),
        named(
            ScatterElements,
            DType::I32,
            DType::I16,
            &[4, 4],
            &[2, 4],
            -2,
            Reduction::Mul,
            false,
            Some((1, Min)),
        ),
        // Gather whose output is empty still checks every index.
        named(
            Gather,
            DType::F32,
            DType::I32,
            &[5, 0],
            &[3],
            0,
            Reduction::None,
            true,
            Some((1, Size)),
        ),
        // Scalar index, zero-size dims, size-1 dims.
        named(
            Gather,
            DType::Complex128,
            DType::I32,
            &[3, 2],
            &[],
            0,
            Reduction::None,
            true,
            None,
        ),
        named(
            ScatterElements,
            DType::F64,
            DType::I64,
            &[0, 3],
            &[0, 3],
            1,
            Reduction::Mean,
            true,
            None,
        ),
        named(
            ScatterElements,
            DType::BF16,
            DType::I64,
            &[1, 1, 1],
            &[1, 1, 1],
            2,
            Reduction::Max,
            false,
            None,
        ),
        // Strings: extremes of the index type, a bad index after good ones, negative axes,
        // an empty output whose indices are still checked, a scalar index.
        named(
            Gather,
            DType::String,
            DType::I64,
            &[5, 3],
            &[4],
            0,
            Reduction::None,
            true,
            Some((2, Min)),
        ),
        named(
            GatherElements,
            DType::String,
            DType::U8,
            &[3, 4],
            &[3, 4],
            -1,
            Reduction::None,
            true,
            Some((6, Max)),
        ),
        named(
            ScatterElements,
            DType::String,
            DType::I16,
            &[4, 3],
            &[6, 3],
            -2,
            Reduction::None,
            false,
            Some((9, BeforeStart)),
        ),
        named(
            Gather,
            DType::String,
            DType::I32,
            &[0, 3],
            &[2],
            1,
            Reduction::None,
            true,
            Some((1, Size)),
        ),
        named(
            Gather,
            DType::String,
            DType::I8,
            &[3, 2],
            &[],
            -1,
            Reduction::None,
            true,
            None,
        ),
    ];
    for case in &cases {
        if let Err(m) = check(case) {
            panic!("{case:?}\n{m}");
        }
    }
    // Every reduction of every numeric dtype on a duplicate-heavy 1-D problem: on three
    // threads, the integer and bool ones reduce into partial outputs (strings follow:
    // `none` must agree, the others must be the same error).
    for dtype in DType::ALL.iter().copied() {
        for &reduction in Reduction::ALL {
            for use_init_val in [true, false] {
                let case = named(
                    ScatterElements,
                    dtype,
                    DType::I64,
                    &[3],
                    &[48],
                    0,
                    reduction,
                    use_init_val,
                    None,
                );
                assert_agrees(&case, format_args!("{case:?}"));
            }
        }
    }
}

/// Integer reductions along an axis many times the output's length, which reduce into
/// partial outputs checking their indices as they read them (no check pass; on one thread
/// too), with and without a bad index at the start, the middle and the end: the first bad
/// index in row-major order is the error, and the output is left as it was.
#[test]
fn integer_reductions_into_partial_outputs_check_as_they_read() {
    for (dtype, index_dtype) in [(DType::I64, DType::I64), (DType::U8, DType::I32)] {
        for reduction in [Reduction::Add, Reduction::Max] {
            for bad in bad_at_the_ends_and_middle(200) {
                let shapes: [(&[usize], &[usize], i64); 3] = [
                    (&[8], &[200], 0),
                    (&[1, 8], &[1, 200], 1),
                    (&[2, 8], &[2, 100], -1),
                ];
                for (data, indices, axis) in shapes {
                    for use_init_val in [true, false] {
                        let case = named(
                            OpKind::ScatterElements,
                            dtype,
                            index_dtype,
                            data,
                            indices,
                            axis,
                            reduction,
                            use_init_val,
                            bad,
                        );
                        assert_agrees(&case, format_args!("{case:?}"));
                    }
                }
            }
        }
    }
}

/// Rows whose indices are non-negative up to a first negative one at every position of a
/// 4-element unrolled iteration and past it (the check's one compare, then the loop's
/// branch-free copy from that element on), in row-major and padded layouts (the
/// contiguous and the strided loops), with a bad index before and after the switch and
/// none: each element is combined once (an integer sum would show a repeat) and the first
/// bad index is the error.
#[test]
fn rows_that_turn_negative_anywhere_agree_with_interpreter() {
    let row = 13;
    for index_dtype in [DType::I64, DType::I32, DType::I8] {
        for (kind, dtype, reduction) in [
            (OpKind::ScatterElements, DType::I64, Reduction::Add),
            (OpKind::ScatterElements, DType::F32, Reduction::None),
            (OpKind::GatherElements, DType::F32, Reduction::None),
        ] {
            for from in 0..=row {
                for bad in [None, Some((1, BadIndex::Size)), Some((11, BadIndex::Size))] {
                    for layout in [Layout::Contiguous, Layout::Padded] {
                        let mut case = named(
                            kind,
                            dtype,
                            index_dtype,
                            &[2, 5],
                            &[2, row],
                            1,
                            reduction,
                            true,
                            bad,
                        );
                        if kind == OpKind::GatherElements {
                            case.data_shape = vec![2, row];
                        }
                        case.layouts = [layout; 3];
                        case.signs = Signs::NegativeFrom(from);
                        assert_agrees(&case, format_args!("{case:?}"));
                    }
                }
            }
        }
    }
}

/// Scatters into a destination small beside their indices (histograms), which run into a
/// row-major copy of it and check each index as they read it (no check pass): float sums,
/// `mean`, `none` and the other reductions, from data's values and without them, into a
/// row-major output and in place, on 1 and 3 threads, with and without a bad index at the
/// start, the middle and the end. The first bad index in row-major order is the error,
/// and the output is left as it was.
#[test]
fn small_destinations_apply_into_a_copy_and_agree_with_interpreter() {
    let pairs = [
        (DType::F32, DType::I64),
        (DType::F64, DType::I32),
        (DType::F16, DType::I64),
        (DType::I32, DType::I64),
        (DType::U8, DType::U16),
    ];
    let shapes: [(&[usize], &[usize], i64); 3] = [
        (&[16], &[400], 0),
        (&[2, 8], &[2, 200], 1),
        (&[1, 16], &[1, 400], -1),
    ];
    for (dtype, index_dtype) in pairs {
        for &reduction in Reduction::ALL.iter().filter(|r| r.supports(dtype)) {
            for bad in bad_at_the_ends_and_middle(400) {
                for ((data, indices, axis), use_init_val) in shapes
                    .into_iter()
                    .flat_map(|shape| [(shape, true), (shape, false)])
                {
                    let case = named(
                        OpKind::ScatterElements,
                        dtype,
                        index_dtype,
                        data,
                        indices,
                        axis,
                        reduction,
                        use_init_val,
                        bad,
                    );
                    // Finite values: random ones hold so many NaNs and infinities that
                    // most sums would not depend on data at all.
                    let (_, indices, _) = case.tensors();
                    let data = finite_tensor(dtype, data);
                    let updates = finite_tensor(dtype, indices.shape());
                    let row_major = |t: &Tensor| lay_out(t, Layout::Contiguous, 0, 0);
                    for pool in pools() {
                        let agreed = pool.install(|| {
                            agree(
                                &case.op(),
                                &TensorView::from(&data),
                                &TensorView::from(&indices),
                                Some(&TensorView::from(&updates)),
                                row_major,
                                row_major,
                            )
                        });
                        if let Err(message) = agreed {
                            panic!("{case:?}: {message}");
                        }
                    }
                }
            }
        }
    }
}

/// A tensor of small finite values of every sign (integers wrap into unsigned types).
fn finite_tensor(dtype: DType, shape: &[usize]) -> Tensor {
    let size = dtype.size();
    let mut bytes = vec![0u8; shape.iter().product::<usize>() * size];
    for (k, chunk) in bytes.chunks_exact_mut(size).enumerate() {
        let step = (k * 7919 % 41) as i64 - 20;
        let sample = Sample {
            re: step as f64 / 4.0,
            im: -step as f64 / 8.0,
            bits: step as u64,
        };
        values::write(dtype, sample, chunk);
    }
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap()
}

/// Index dtypes wider than u16, which the check may copy to a narrower one.
const WIDE_INDEX_DTYPES: [DType; 4] = [DType::I32, DType::I64, DType::U32, DType::U64];

/// No bad index, then one at the start, the middle and the end of `count` indices.
fn bad_at_the_ends_and_middle(count: usize) -> [Option<(usize, BadIndex)>; 4] {
    [
        None,
        Some((0, BadIndex::Size)),
        Some((count / 2 - 1, BadIndex::BeforeStart)),
        Some((count - 1, BadIndex::Max)),
    ]
}

/// GatherElements over an axis too long for u16 indices, so that wide indices compact to
/// u32 (shorter axes compact to u8 or u16), every wide index dtype, with
/// and without a bad index at the start, the middle and the end.
#[test]
fn gather_elements_over_long_axes_agrees_with_interpreter() {
    for index_dtype in WIDE_INDEX_DTYPES {
        for bad in bad_at_the_ends_and_middle(20) {
            for (data, indices, axis) in [([2, 70_000], [2, 10], 1), ([65_537, 2], [10, 2], -2)] {
                let case = named(
                    OpKind::GatherElements,
                    DType::F32,
                    index_dtype,
                    &data,
                    &indices,
                    axis,
                    Reduction::None,
                    true,
                    bad,
                );
                assert_agrees(&case, format_args!("{case:?}"));
            }
        }
    }
}

/// Gather with indices of every wide dtype, of rank 1 and 2, on an axis short enough for a
/// u16 copy (which a Gather makes) and on one too long for it (a Gather makes no u32 copy
/// and reads its own indices twice), with and without a bad index at the start, the
/// middle and the end.
#[test]
fn gather_with_and_without_a_compact_copy_agrees_with_interpreter() {
    for index_dtype in WIDE_INDEX_DTYPES {
        for bad in bad_at_the_ends_and_middle(30) {
            let cases: [(&[usize], &[usize], i64); 4] = [
                (&[300, 3], &[30], 0),
                (&[2, 65_537], &[5, 6], -1),
                (&[4, 1000, 2], &[3, 10], 1),
                (&[70_000], &[30], 0),
            ];
            for (data, indices, axis) in cases {
                let case = named(
                    OpKind::Gather,
                    DType::F32,
                    index_dtype,
                    data,
                    indices,
                    axis,
                    Reduction::None,
                    true,
                    bad,
                );
                assert_agrees(&case, format_args!("{case:?}"));
            }
        }
    }
}

/// The lines a row reads ahead of its picks stay inside the tensor when its stride along the
/// row is wider than an element: data, output and in-place views hold every other element
/// of a buffer that ends at an inaccessible page, so a read even one byte past the view's
/// last element faults (valgrind cannot tell: it drops loads whose values go unused).
#[cfg(target_os = "linux")]
#[test]
fn touched_lines_stay_inside_strided_views() {
    use scatterjit_testkit::guarded::Guarded;
    const ROWS: usize = 2;
    const LEN: usize = 512;
    const STRIDES: [isize; 2] = [2 * LEN as isize, 2];
    let (rows, len, strides) = (ROWS, LEN, STRIDES);
    let total = (rows - 1) * 2 * len + 2 * (len - 1) + 1;
    let sparse = |t: &Tensor| Guarded::new(&Strided::place(t, strides.to_vec(), 0, total).bytes);
    fn view(bytes: &[u8]) -> TensorView<'_> {
        TensorView::new(DType::F32, &[ROWS, LEN], &STRIDES, 0, bytes).unwrap()
    }
    for (kind, reduction) in [
        (OpKind::GatherElements, Reduction::None),
        (OpKind::ScatterElements, Reduction::None),
        (OpKind::ScatterElements, Reduction::Add),
    ] {
        let case = named(
            kind,
            DType::F32,
            DType::I64,
            &[rows, len],
            &[rows, len],
            1,
            reduction,
            true,
            None,
        );
        let (data, indices, updates) = case.tensors();
        let op = case.op();
        let want = interp::run(&op, &data, &indices, updates.as_ref()).unwrap();
        let key = op
            .validate(
                data.meta(),
                indices.meta(),
                updates.as_ref().map(|u| u.meta()),
            )
            .unwrap()
            .key;
        let kernel = KernelCache::global().get(&key).unwrap();
        let (data_g, indices_v) = (sparse(&data), TensorView::from(&indices));
        let updates_v = updates.as_ref().map(TensorView::from);
        for pool in pools() {
            let same = |got: &Tensor| values::same_values(DType::F32, got.bytes(), want.bytes());
            let got = pool.install(|| kernel.run(&view(&data_g), &indices_v, updates_v.as_ref()));
            assert!(same(&got.unwrap()), "{case:?}: run");
            let mut out = sparse(&Tensor::zeros(DType::F32, vec![rows, len]).unwrap());
            let mut out_v =
                TensorViewMut::new(DType::F32, &[rows, len], &strides, 0, &mut out).unwrap();
            pool.install(|| {
                kernel.run_into(&mut out_v, &view(&data_g), &indices_v, updates_v.as_ref())
            })
            .unwrap();
            assert!(same(&view(&out).to_tensor().unwrap()), "{case:?}: run_into");
            if let Some(updates_v) = &updates_v {
                let mut work = sparse(&data);
                let mut work_v =
                    TensorViewMut::new(DType::F32, &[rows, len], &strides, 0, &mut work).unwrap();
                pool.install(|| kernel.scatter_in_place(&mut work_v, &indices_v, updates_v))
                    .unwrap();
                assert!(
                    same(&view(&work).to_tensor().unwrap()),
                    "{case:?}: in place"
                );
            }
        }
    }
}

/// One GatherElements key on axes whose indices compact to u8, u16, u32, then u8 again:
/// each call reads its copy with the kernel of its own width.
#[test]
fn gather_elements_compacts_to_the_width_of_each_call() {
    for (data, indices, axis) in [
        ([3, 2], [10, 2], -2),
        ([300, 2], [10, 2], -2),
        ([65_537, 2], [10, 2], -2),
        ([5, 2], [10, 2], -2),
    ] {
        let case = named(
            OpKind::GatherElements,
            DType::F32,
            DType::I64,
            &data,
            &indices,
            axis,
            Reduction::None,
            true,
            None,
        );
        assert_agrees(&case, format_args!("{case:?}"));
    }
}

/// Axes at the ends of each width the check copies indices to (256 and 257 elements long,
/// 65536 and 65537): the copy takes the narrowest width that holds the axis, and keeps the
/// first and last positions, which random indices this many reach from both signs. Index
/// dtypes as wide as a copy (i16 and u16 on 257) are read as they are. With and without a
/// bad index at the start, the middle and the end.
#[test]
fn indices_at_the_ends_of_each_compact_width_agree_with_interpreter() {
    let count = 4000;
    for index_dtype in [DType::I16, DType::U16, DType::I32, DType::I64, DType::U64] {
        for bad in bad_at_the_ends_and_middle(2 * count) {
            for s in [256, 257, 65_536, 65_537] {
                // The long axes only where a copy could narrow them.
                if s > 257 && index_dtype.size() <= 2 {
                    continue;
                }
                let kinds = [
                    (OpKind::GatherElements, Reduction::None),
                    (OpKind::ScatterElements, Reduction::None),
                    (OpKind::ScatterElements, Reduction::Add),
                ];
                for (kind, reduction) in kinds {
                    let case = named(
                        kind,
                        DType::F32,
                        index_dtype,
                        &[2, s],
                        &[2, count],
                        1,
                        reduction,
                        true,
                        bad,
                    );
                    assert_agrees(&case, format_args!("{case:?}"));
                }
            }
        }
    }
}

/// Float max and min of NaNs with different payloads give the same bits on one thread and
/// on three: x86-64's scalar fmax keeps a NaN's payload and its vector fmax clears it, and
/// broadcast updates ran in the vector loop on one thread and in the scalar one when split
/// (found by the `differential` fuzz target: its input is kept in the corpus).
#[test]
fn float_max_and_min_of_nans_are_the_same_bits_on_any_path() {
    let nans = [
        0xfff0_0000_0000_0001u64,
        0xffff_fbff_ffff_ffff,
        0x7ff8_0000_0000_0000,
    ];
    for reduction in [Reduction::Max, Reduction::Min] {
        for dtype in [DType::F16, DType::BF16, DType::F32, DType::F64] {
            for &nan in &nans {
                // The fuzzer's case: everything broadcast but the indices, rank 4, axis 0.
                let shape = [2, 2, 2, 2];
                let values = [f64::from_bits(nan)];
                let indices = [-1; 16];
                nan_bits_agree(
                    reduction,
                    dtype,
                    &shape,
                    &values,
                    &[0; 4],
                    &indices,
                    &[8, 4, 2, 1],
                );
            }
            // PyTorch Geometric's expanded rows: one update and one index per row.
            for row in [3, 5, 8, 19] {
                let values: Vec<f64> = (0..6)
                    .map(|i| match i % 3 {
                        1 => -1.5,
                        _ => f64::from_bits(nans[(i + i / 3) % 3]),
                    })
                    .collect();
                let indices: Vec<i8> = (0..6).map(|i| i % 2).collect();
                nan_bits_agree(
                    reduction,
                    dtype,
                    &[6, row],
                    &values,
                    &[1, 0],
                    &indices,
                    &[1, 0],
                );
            }
        }
    }
}

/// Scatters `values` (laid out by `strides` over `shape`) into a broadcast `shape` of 0.25s
/// at the i8 `indices` (laid out by `index_strides`) along axis 0, on one thread and on
/// three: the same bits, and the interpreter's values.
fn nan_bits_agree(
    reduction: Reduction,
    dtype: DType,
    shape: &[usize],
    values: &[f64],
    strides: &[isize],
    indices: &[i8],
    index_strides: &[isize],
) {
    let bytes = |values: &[f64]| {
        let samples = values.iter().map(|&re| Sample {
            re,
            im: 0.0,
            bits: 0,
        });
        values::bytes(dtype, samples)
    };
    // Data is one 0.25, broadcast.
    let quarter = bytes(&[0.25]);
    let data_view = TensorView::new(dtype, shape, &vec![0; shape.len()], 0, &quarter).unwrap();
    let data = data_view.to_tensor().unwrap();
    let updates = bytes(values);
    let updates = TensorView::new(dtype, shape, strides, 0, &updates).unwrap();
    let indices = Tensor::from_slice(&[indices.len()], indices).unwrap();
    let indices = TensorView::new(DType::I8, shape, index_strides, 0, indices.bytes()).unwrap();
    let op = Op::new(OpKind::ScatterElements, 0, reduction, true);
    let key = op
        .validate(data.meta(), indices.meta(), Some(updates.meta()))
        .unwrap()
        .key;
    let kernel = KernelCache::global().get(&key).unwrap();
    let run = || kernel.run(&data_view, &indices, Some(&updates)).unwrap();
    let one = pools()[0].install(run);
    let three = pools()[1].install(run);
    let case = format!("{reduction} {dtype} {shape:?} {values:?}");
    assert_eq!(one.bytes(), three.bytes(), "{case}");
    let want = interp::run(
        &op,
        &data,
        &indices.to_tensor().unwrap(),
        Some(&updates.to_tensor().unwrap()),
    )
    .unwrap();
    assert!(
        values::same_values(dtype, want.bytes(), one.bytes()),
        "{case}"
    );
    // Every NaN is the dtype's positive quiet NaN, whichever path made it.
    let (size, quiet, infinity) = match dtype {
        DType::F16 => (2, 0x7e00, 0x7c00),
        DType::BF16 => (2, 0x7fc0, 0x7f80),
        DType::F32 => (4, 0x7fc0_0000, 0x7f80_0000),
        _ => (8, 0x7ff8_0000_0000_0000, 0x7ff0_0000_0000_0000),
    };
    for element in one.bytes().chunks(size) {
        let mut raw = [0u8; 8];
        raw[..size].copy_from_slice(element);
        let bits = u64::from_le_bytes(raw);
        let magnitude = bits & !(1 << (8 * size - 1));
        assert!(
            magnitude <= infinity || bits == quiet,
            "{case}: NaN {bits:#x}, not {quiet:#x}"
        );
    }
}

#[test]
fn float16_sums_round_after_every_update() {
    // SPEC: 2048 plus eight 1.0 is 2048 in f16 (each add rounds to nearest even).
    let data = Tensor::from_slice(&[1], &[half::f16::from_f32(2048.0)]).unwrap();
    let indices = Tensor::from_slice(&[8], &[0i64; 8]).unwrap();
    let updates = Tensor::from_slice(&[8], &[half::f16::ONE; 8]).unwrap();
    let out =
        scatterjit::scatter_elements(&data, &indices, &updates, 0, Reduction::Add, true).unwrap();
    assert_eq!(
        out.to_vec::<half::f16>().unwrap(),
        [half::f16::from_f32(2048.0)]
    );
}

#[test]
fn integer_means_are_exact_and_floor() {
    // SPEC: the i8 mean of 100, 100, 100 without the initial value is 100 (no wrap-around).
    let data = Tensor::from_slice(&[1], &[7i8]).unwrap();
    let indices = Tensor::from_slice(&[3], &[0i64; 3]).unwrap();
    let updates = Tensor::from_slice(&[3], &[100i8; 3]).unwrap();
    let out =
        scatterjit::scatter_elements(&data, &indices, &updates, 0, Reduction::Mean, false).unwrap();
    assert_eq!(out.to_vec::<i8>().unwrap(), [100]);
    // (-7 + -2) / 2 = -4.5 rounds toward negative infinity: -5.
    let data = Tensor::from_slice(&[1], &[-7i64]).unwrap();
    let indices = Tensor::from_slice(&[1], &[0i64]).unwrap();
    let updates = Tensor::from_slice(&[1], &[-2i64]).unwrap();
    let out =
        scatterjit::scatter_elements(&data, &indices, &updates, 0, Reduction::Mean, true).unwrap();
    assert_eq!(out.to_vec::<i64>().unwrap(), [-5]);
    // i64 sums beyond 64 bits stay exact.
    let data = Tensor::from_slice(&[1], &[i64::MAX]).unwrap();
    let indices = Tensor::from_slice(&[3], &[0i64; 3]).unwrap();
    let updates = Tensor::from_slice(&[3], &[i64::MAX; 3]).unwrap();
    let out =
        scatterjit::scatter_elements(&data, &indices, &updates, 0, Reduction::Mean, true).unwrap();
    assert_eq!(out.to_vec::<i64>().unwrap(), [i64::MAX]);
}

/// The suite's workloads at reduced sizes exercise the fast paths the random cases are too
/// small for: whole-row vector combines of uniform index rows (GNN), `memcpy` row copies
/// (embedding Gather), long contiguous rows, and parallel splits of the innermost loop.
/// Each result must match the interpreter, on one thread and on three, out of place, into
/// a buffer and in place.
#[test]
fn suite_workloads_agree_with_interpreter() {
    use scatterjit_testkit::suite::WORKLOADS;
    for w in WORKLOADS {
        let p = w.problem(w.small_div * 2, 7);
        let want = interp::run(&p.op, &p.data, &p.indices, p.updates.as_ref()).unwrap();
        let kernel = KernelCache::global().get(&p.key()).unwrap();
        let data = TensorView::from(&p.data);
        let indices = p.index_view().unwrap();
        let updates = p.updates.as_ref().map(TensorView::from);
        for pool in pools() {
            let got = pool
                .install(|| kernel.run(&data, &indices, updates.as_ref()))
                .unwrap();
            assert_eq!(got.bytes(), want.bytes(), "{}: run", w.name);
            let mut out = Tensor::zeros(want.dtype(), want.shape().to_vec()).unwrap();
            pool.install(|| {
                kernel.run_into(
                    &mut TensorViewMut::from(&mut out),
                    &data,
                    &indices,
                    updates.as_ref(),
                )
            })
            .unwrap();
            assert_eq!(out.bytes(), want.bytes(), "{}: run_into", w.name);
            if let Some(updates) = &updates {
                let mut inplace = p.data.clone();
                pool.install(|| {
                    kernel.scatter_in_place(
                        &mut TensorViewMut::from(&mut inplace),
                        &indices,
                        updates,
                    )
                })
                .unwrap();
                assert_eq!(inplace.bytes(), want.bytes(), "{}: in place", w.name);
            }
        }
    }
}
