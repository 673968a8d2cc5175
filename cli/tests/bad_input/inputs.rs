//! Inputs the tables share: pattern-filled tensors, exact index tensors, strided copies,
//! and the calls each op has.

use std::sync::OnceLock;

use scatterjit::ir::{checked_nbytes, DType, Element, KernelKey, Meta, Op, Reduction, Tensor};
use scatterjit::{Kernel, KernelCache, TensorView, TensorViewMut};

use super::Checker;

/// Kernels for the low-level paths (the free functions use the global cache).
pub(crate) fn cache() -> &'static KernelCache {
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
pub(crate) fn pattern(dtype: DType, n: usize, seed: u8) -> Vec<u8> {
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

pub(crate) fn f32s(shape: &[usize]) -> Tensor {
    filled(DType::F32, shape, 1)
}

pub(crate) fn ix<T: Element>(shape: &[usize], values: &[T]) -> Tensor {
    Tensor::from_slice(shape, values).unwrap()
}

/// Every multi-index of `shape` in row-major order (one empty index for a scalar).
pub(crate) fn positions(shape: &[usize]) -> Vec<Vec<usize>> {
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

pub(crate) fn scatter(axis: i64) -> Op {
    Op::ScatterElements {
        axis,
        reduction: Reduction::None,
        use_init_val: true,
    }
}

pub(crate) fn scatter_with(axis: i64, reduction: Reduction, use_init_val: bool) -> Op {
    Op::ScatterElements {
        axis,
        reduction,
        use_init_val,
    }
}

/// The reductions every scatter case runs with: `none`, the combining ones with and
/// without `use_init_val` (without it the init pass would write before the apply pass),
/// and `mean` (host-side scratch and finish steps).
pub(crate) const REDUCTIONS: &[(Reduction, bool)] = &[
    (Reduction::None, true),
    (Reduction::Add, true),
    (Reduction::Add, false),
    (Reduction::Mul, false),
    (Reduction::Max, true),
    (Reduction::Min, false),
    (Reduction::Mean, true),
    (Reduction::Mean, false),
];

pub(crate) fn label(reduction: Reduction, use_init_val: bool) -> String {
    if use_init_val {
        reduction.to_string()
    } else {
        format!("{reduction} noinit")
    }
}

/// `op` with every reduction of [`REDUCTIONS`] that `dtype` supports; other ops unchanged.
pub(crate) fn each_reduction(op: Op, dtype: DType) -> Vec<(String, Op)> {
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

/// The index dtypes.
pub(crate) fn index_dtypes() -> Vec<DType> {
    DType::ALL
        .iter()
        .copied()
        .filter(|d| d.is_integer())
        .collect()
}

/// An integer tensor of `dtype` from exact values (each must fit the type).
pub(crate) fn ints(dtype: DType, shape: &[usize], values: &[i128]) -> Tensor {
    let size = dtype.size();
    let bytes = values
        .iter()
        .flat_map(|&v| {
            let (lo, hi) = range_of(dtype);
            assert!((lo..=hi).contains(&v), "{v} does not fit {dtype}");
            v.to_le_bytes()[..size].to_vec()
        })
        .collect();
    Tensor::from_bytes(dtype, shape.to_vec(), bytes).expect("a valid index tensor")
}

/// The smallest and largest value of an integer dtype.
pub(crate) fn range_of(dtype: DType) -> (i128, i128) {
    let bits = 8 * dtype.size() as u32;
    if dtype.is_signed_integer() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

pub(crate) fn meta((dtype, shape): &(DType, Vec<usize>)) -> Meta<'_> {
    Meta::new(*dtype, shape)
}

/// A small tensor of pattern bytes (zeros for indices; strings of the pattern for string
/// data), or `None` if it cannot be built.
pub(crate) fn build(input: &(DType, Vec<usize>), seed: Option<u8>) -> Option<Tensor> {
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

/// Zeros of an index dtype.
pub(crate) fn zero_indices(dtype: DType, shape: &[usize]) -> Tensor {
    Tensor::zeros(dtype, shape.to_vec()).expect("a small index tensor")
}
