//! The standard workload suite (workloads.json) as a table, and the generator
//! of its inputs.
//!
//! The suite's inputs come from numpy's `default_rng(seed=0)`; here they come from
//! SplitMix64, so the values differ but follow the same rules: index patterns as described
//! by [`IndexPattern`], updates and data uniform in [-1, 1) for floats and in [0, 100) for
//! integers, every tensor C-contiguous.
use scatterjit::ir::{DType, DTypeClass, KernelKey, Meta, Op, OpKind, Reduction, Tensor};

use scatterjit::TensorView;

use crate::values::{self, Sample};

/// How a workload's indices are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexPattern {
    /// `perm`: an independent random permutation of `range(dim)` along the axis for each
    /// line (no duplicates).
    Perm,
    /// `uniform`: uniform in `[0, dim)`, with duplicates.
    Uniform,
    /// `uniform_rows`: one uniform value per position along the axis, repeated across
    /// all other dims (GNN message passing: `indices[e, f] = dst[e]`).
    UniformRows,
}

/// How a workload passes its indices (`index_layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexLayout {
    /// The materialized, C-contiguous array.
    Dense,
    /// `expanded`: the values along the axis (at 0 on every other dim) as a contiguous
    /// vector, broadcast to the index shape with stride 0 on every other dim, as PyTorch
    /// Geometric passes them (`index.view(-1, 1).expand_as(src)`).
    Expanded,
}

/// One workload of the suite. Shapes are the suite's full sizes.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// The suite's name, e.g. `scatter_add_gnn_f32`.
    pub name: &'static str,
    /// The op family.
    pub op: OpKind,
    /// Element type of data, updates and output.
    pub dtype: DType,
    /// Element type of indices.
    pub index_dtype: DType,
    /// Shape of data.
    pub data: &'static [usize],
    /// Shape of indices (and of updates).
    pub indices: &'static [usize],
    /// The axis indices point along.
    pub axis: usize,
    /// The reduction (`none` for the gather ops, where the suite gives none).
    pub reduction: Reduction,
    /// How indices are drawn.
    pub pattern: IndexPattern,
    /// How indices are passed.
    pub layout: IndexLayout,
    /// The divisor of every large dim (see [`LARGE_DIM`]) that makes one run take well
    /// under 10 ms: the size the criterion benchmarks use.
    pub small_div: usize,
}

/// Dims of at least this size are the ones a size divisor divides; smaller dims (feature
/// widths, a leading 1) keep their size.
pub const LARGE_DIM: usize = 1024;

/// The seed of the benchmark inputs.
pub const SMALL_SEED: u64 = 0;

// One argument per column of the table below.
#[allow(clippy::too_many_arguments)]
const fn scatter(
    name: &'static str,
    dtype: DType,
    index_dtype: DType,
    data: &'static [usize],
    indices: &'static [usize],
    axis: usize,
    reduction: Reduction,
    pattern: IndexPattern,
    small_div: usize,
) -> Workload {
    Workload {
        name,
        op: OpKind::ScatterElements,
        dtype,
        index_dtype,
        data,
        indices,
        axis,
        reduction,
        pattern,
        layout: IndexLayout::Dense,
        small_div,
    }
}

/// [`scatter`] with `index_layout: expanded`.
const fn expanded(w: Workload) -> Workload {
    Workload {
        layout: IndexLayout::Expanded,
        ..w
    }
}

#[allow(clippy::too_many_arguments)]
const fn gather(
    name: &'static str,
    op: OpKind,
    dtype: DType,
    index_dtype: DType,
    data: &'static [usize],
    indices: &'static [usize],
    axis: usize,
    pattern: IndexPattern,
    small_div: usize,
) -> Workload {
    Workload {
        name,
        op,
        dtype,
        index_dtype,
        data,
        indices,
        axis,
        reduction: Reduction::None,
        pattern,
        layout: IndexLayout::Dense,
        small_div,
    }
}

use DType::{F16, F32, I32, I64};
use IndexPattern::{Perm, Uniform, UniformRows};
use OpKind::{Gather, GatherElements};
use Reduction as R;

/// The standard workload suite (workloads.json), in its order.
#[rustfmt::skip]
pub const WORKLOADS: &[Workload] = &[
    //       name                        dtype idx  data           indices        axis reduction pattern      small_div
    scatter("scatter_none_shuffle_f32",  F32,  I64, &[1024, 4096], &[1024, 4096],  1,  R::None,  Perm,        8),
    scatter("scatter_add_gnn_f32",       F32,  I64, &[50000, 64],  &[400000, 64],  0,  R::Add,   UniformRows, 400),
    scatter("scatter_max_gnn_f32",       F32,  I64, &[50000, 64],  &[400000, 64],  0,  R::Max,   UniformRows, 400),
    scatter("scatter_mean_gnn_f32",      F32,  I64, &[50000, 64],  &[400000, 64],  0,  R::Mean,  UniformRows, 400),
    scatter("scatter_add_hist_i64",      I64,  I64, &[1, 65536],   &[1, 8388608],  1,  R::Add,   Uniform,     128),
    scatter("scatter_none_shuffle_f16",  F16,  I32, &[1024, 4096], &[1024, 4096],  1,  R::None,  Perm,        8),
    //      name                         op              dtype idx  data           indices        axis pattern  small_div
    gather("gather_rows_embedding_f32",  Gather,         F32,  I64, &[50000, 256], &[200000],     0,   Uniform, 200),
    gather("gather_cols_f32",            Gather,         F32,  I64, &[4096, 4096], &[1024],       1,   Uniform, 8),
    gather("gather_elements_f32",        GatherElements, F32,  I64, &[2048, 4096], &[2048, 4096], 1,   Uniform, 16),
    expanded(scatter("scatter_add_gnn_expanded_f32",  F32, I64, &[50000, 64], &[400000, 64], 0, R::Add,  UniformRows, 400)),
    expanded(scatter("scatter_max_gnn_expanded_f32",  F32, I64, &[50000, 64], &[400000, 64], 0, R::Max,  UniformRows, 400)),
    expanded(scatter("scatter_mean_gnn_expanded_f32", F32, I64, &[50000, 64], &[400000, 64], 0, R::Mean, UniformRows, 400)),
];

/// A workload's op and inputs, ready to run.
#[derive(Clone, Debug)]
pub struct Problem {
    /// The op with its attributes (ScatterElements starts from data: ONNX semantics).
    pub op: Op,
    /// Data.
    pub data: Tensor,
    /// Indices.
    pub indices: Tensor,
    /// Updates, shaped like indices (ScatterElements only).
    pub updates: Option<Tensor>,
    /// For [`IndexLayout::Expanded`]: the axis and `indices` along it at 0 on every other
    /// dim, which a stride-0 view broadcasts to `indices`' shape.
    pub index_column: Option<(usize, Tensor)>,
}

impl Problem {
    /// The indices as the workload passes them: the tensor, or its column broadcast with
    /// stride 0 on every dim but the axis (`index_layout: expanded`).
    pub fn index_view(&self) -> scatterjit::Result<TensorView<'_>> {
        let Some((axis, column)) = &self.index_column else {
            return Ok(TensorView::from(&self.indices));
        };
        let shape = self.indices.shape();
        let strides: Vec<isize> = (0..shape.len()).map(|d| isize::from(d == *axis)).collect();
        Ok(TensorView::new(
            column.dtype(),
            shape,
            &strides,
            0,
            column.bytes(),
        )?)
    }

    /// The kernel that runs it.
    pub fn key(&self) -> KernelKey {
        self.op
            .validate(
                self.data.meta(),
                self.indices.meta(),
                self.updates.as_ref().map(Tensor::meta),
            )
            .expect("suite problems are valid")
            .key
    }

    /// The essential traffic of one run: bytes of data, indices, updates and an output of
    /// `out_bytes` bytes (the peers' tables count the same).
    pub fn traffic_bytes(&self, out_bytes: usize) -> usize {
        self.data.bytes().len()
            + self.indices.bytes().len()
            + self.updates.as_ref().map_or(0, |u| u.bytes().len())
            + out_bytes
    }

    /// Elements combined (scatter) or read (gather) by one run.
    pub fn elements(&self) -> usize {
        match self.op {
            Op::Gather { axis } => {
                let d = self.data.shape();
                let axis = axis as usize;
                d[..axis].iter().product::<usize>()
                    * self.indices.numel()
                    * d[axis + 1..].iter().product::<usize>()
            }
            _ => self.indices.numel(),
        }
    }
}

impl Workload {
    /// The kernel that runs this workload (at any size).
    pub fn key(&self) -> KernelKey {
        let (data, indices) = (self.data, self.indices);
        let updates = (self.op == OpKind::ScatterElements).then_some(indices);
        self.op()
            .validate(
                Meta::new(self.dtype, data),
                Meta::new(self.index_dtype, indices),
                updates.map(|u| Meta::new(self.dtype, u)),
            )
            .expect("suite workloads are valid")
            .key
    }

    /// The suite's shapes of data and indices with every large dim divided by `div`.
    pub fn shapes(&self, div: usize) -> (Vec<usize>, Vec<usize>) {
        let scale = |shape: &[usize]| -> Vec<usize> {
            shape
                .iter()
                .map(|&d| if d >= LARGE_DIM { (d / div).max(1) } else { d })
                .collect()
        };
        (scale(self.data), scale(self.indices))
    }

    /// The op with this workload's attributes.
    pub fn op(&self) -> Op {
        Op::new(self.op, self.axis as i64, self.reduction, true)
    }

    /// The inputs at the suite's size divided by `div` (1: full size), drawn from `seed`
    /// in the order data, indices, updates.
    pub fn problem(&self, div: usize, seed: u64) -> Problem {
        let (data_shape, index_shape) = self.shapes(div);
        let mut rng = SplitMix64(seed);
        let data = random_values(self.dtype, &data_shape, &mut rng);
        let indices = random_indices(self, &data_shape, &index_shape, &mut rng);
        let updates = (self.op == OpKind::ScatterElements)
            .then(|| random_values(self.dtype, &index_shape, &mut rng));
        let index_column = (self.layout == IndexLayout::Expanded).then(|| {
            let size = self.index_dtype.size();
            let step = index_shape[self.axis + 1..].iter().product::<usize>() * size;
            let bytes: Vec<u8> = (0..index_shape[self.axis])
                .flat_map(|e| indices.bytes()[e * step..e * step + size].to_vec())
                .collect();
            let column = Tensor::from_bytes(self.index_dtype, vec![index_shape[self.axis]], bytes)
                .expect("one index per position along the axis");
            (self.axis, column)
        });
        Problem {
            op: self.op(),
            data,
            indices,
            updates,
            index_column,
        }
    }
}

/// SplitMix64: small, fast, and good enough for benchmark and test inputs; the same seed
/// gives the same values, so a failing case reproduces from its seed.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (multiply-shift; the bias is below 2^-40 for these sizes).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, n)` for `n` up to `u64::MAX` (multiply-shift; 0 for `n == 0`).
    pub fn below_u64(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// One of `items`, uniformly.
    ///
    /// # Panics
    /// If `items` is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Uniform in [-1, 1) on a grid of `2^-(bits - 1)`, exact in a float with a
    /// `bits`-bit significand.
    pub fn signed_unit(&mut self, bits: u32) -> f64 {
        let k = self.next_u64() >> (64 - bits);
        k as f64 / (1u64 << (bits - 1)) as f64 - 1.0
    }
}

/// Values of `dtype`: floats uniform in [-1, 1) on a grid of 2^-23 (rounded to nearest
/// for f16 and bf16), integers in [0, 100), bools 0 or 1, complex numbers with both parts
/// uniform in [-1, 1).
///
/// # Panics
/// For string tensors, which have no byte representation.
fn random_values(dtype: DType, shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n: usize = shape.iter().product();
    let samples = (0..n).map(|_| match dtype.class() {
        DTypeClass::Float => Sample::number(rng.signed_unit(24)),
        DTypeClass::Complex => Sample {
            re: rng.signed_unit(24),
            im: rng.signed_unit(24),
            bits: 0,
        },
        DTypeClass::Bool => Sample {
            bits: rng.below(2) as u64,
            ..Sample::default()
        },
        _ => Sample {
            bits: rng.below(100) as u64,
            ..Sample::default()
        },
    });
    let bytes = values::bytes(dtype, samples);
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("bytes match dtype and shape")
}

/// Indices by the workload's pattern, each in `[0, data_shape[axis])`.
///
/// # Panics
/// If the axis size does not fit the index dtype, or for `perm` and `uniform_rows` on a
/// Gather (their "lines along the axis" need indices of data's rank).
fn random_indices(
    w: &Workload,
    data_shape: &[usize],
    shape: &[usize],
    rng: &mut SplitMix64,
) -> Tensor {
    let dim = data_shape[w.axis];
    let size = w.index_dtype.size();
    let signed = w.index_dtype.is_signed_integer();
    let max_index = (1u128 << (8 * size - usize::from(signed))) - 1;
    assert!(
        dim == 0 || (dim - 1) as u128 <= max_index,
        "{}: axis size {dim} does not fit {}",
        w.name,
        w.index_dtype
    );
    let n: usize = shape.iter().product();
    let mut values = vec![0usize; n];
    match w.pattern {
        IndexPattern::Uniform => values.iter_mut().for_each(|v| *v = rng.below(dim)),
        IndexPattern::UniformRows | IndexPattern::Perm => {
            assert!(
                w.op != OpKind::Gather,
                "{}: {:?} needs indices of data's rank",
                w.name,
                w.pattern
            );
            let len = shape[w.axis];
            let inner: usize = shape[w.axis + 1..].iter().product();
            let lines = n.checked_div(len).unwrap_or(0);
            let at = |line: usize, j: usize| (line / inner * len + j) * inner + line % inner;
            if w.pattern == IndexPattern::UniformRows {
                let row: Vec<usize> = (0..len).map(|_| rng.below(dim)).collect();
                for line in 0..lines {
                    for (j, &v) in row.iter().enumerate() {
                        values[at(line, j)] = v;
                    }
                }
            } else {
                assert!(
                    len <= dim,
                    "{}: a permutation of {dim} has no {len} values",
                    w.name
                );
                let mut perm: Vec<usize> = Vec::with_capacity(dim);
                for line in 0..lines {
                    // The first `len` values of a Fisher-Yates shuffle of range(dim).
                    perm.clear();
                    perm.extend(0..dim);
                    for j in 0..len {
                        let k = j + rng.below(dim - j);
                        perm.swap(j, k);
                        values[at(line, j)] = perm[j];
                    }
                }
            }
        }
    }
    let mut bytes = Vec::with_capacity(n * size);
    for v in values {
        bytes.extend_from_slice(&(v as u64).to_le_bytes()[..size]);
    }
    Tensor::from_bytes(w.index_dtype, shape.to_vec(), bytes).expect("bytes match dtype and shape")
}
