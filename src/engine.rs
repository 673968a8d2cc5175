//! The parallel engine for scatters whose only parallelism is along their axis (GNN
//! message passing, histograms): bucket the update slices by destination range with a
//! stable counting sort, then let each chunk apply the slices of its own range.
//!
//! A *slice* is every update position with one coordinate `e` along the axis. The engine
//! takes the scatters whose index is the same across each slice (a broadcast view, whose
//! strides are 0 off the axis, or a dense index whose slices are checked to be uniform),
//! so slice `e` writes only destination coordinate `k_e` along the axis. The destination
//! range `[0, s)` is cut into power-of-two-wide buckets; bucket `b` lists, in increasing
//! `e`, the slices with `k_e` in its range. Chunks own disjoint buckets and so disjoint
//! output elements, and every output element sees its updates in increasing `e`, which is
//! the order of one thread: float sums and `mean` are bit-identical at any thread count.
//!
//! Sorting reads every index once and checks it: the engine declines (and the caller takes
//! its ordinary path, with its own check) on a bad index or a slice that is not uniform, so
//! it never writes anything the ordinary check would have refused.

use std::sync::atomic::{AtomicI64, Ordering};

use rayon::prelude::*;
use scatterjit_ir::DType;

use crate::tensor::TensorView;

/// Slices listed by destination bucket.
pub(crate) struct Buckets {
    /// The axis coordinates of the slices, bucket after bucket, each bucket in increasing
    /// order. Atomic only so that the sort's chunks can fill disjoint entries in parallel;
    /// `AtomicI64` has `i64`'s layout, which the listed passes read.
    rows: Vec<AtomicI64>,
    /// Bucket `b` is `rows[starts[b]..starts[b + 1]]`.
    starts: Vec<usize>,
}

impl Buckets {
    /// Number of buckets.
    pub(crate) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Bucket `b`: the address of its first row and its number of rows.
    pub(crate) fn bucket(&self, b: usize) -> (*const i64, usize) {
        let (start, end) = (self.starts[b], self.starts[b + 1]);
        (self.rows[start..].as_ptr() as *const i64, end - start)
    }

    /// The axis coordinate listed at entry `j` of bucket `b`.
    pub(crate) fn row(&self, b: usize, j: usize) -> usize {
        self.rows[self.starts[b] + j].load(Ordering::Relaxed) as usize
    }
}

/// How the index of each slice is read.
enum Slices<'a> {
    /// One element per slice, `stride` elements apart from position 0.
    Broadcast {
        indices: &'a TensorView<'a>,
        stride: isize,
    },
    /// Row-major index bytes, `len` elements per slice, each checked to be uniform.
    Rows { bytes: &'a [u8], len: usize },
}

/// Buckets for the slices of `indices` along `axis` into a destination of `size` along the
/// axis, about `target` of them; `None` if the index is not uniform per slice (by layout or
/// by value) or holds a bad index.
pub(crate) fn sort<'a>(
    indices: &'a TensorView<'a>,
    axis: usize,
    size: usize,
    target: usize,
) -> Option<Buckets> {
    let shape = indices.shape();
    let strides = indices.strides();
    let slices = shape[axis];
    if slices == 0 || size == 0 || shape.contains(&0) {
        return None;
    }
    let off_axis = (0..shape.len()).filter(|&d| d != axis);
    let layout = if off_axis.clone().all(|d| shape[d] == 1 || strides[d] == 0) {
        Slices::Broadcast {
            indices,
            stride: strides[axis],
        }
    } else if shape[..axis].iter().all(|&d| d == 1) {
        Slices::Rows {
            bytes: indices.dense_bytes()?,
            len: shape[axis + 1..].iter().product(),
        }
    } else {
        return None;
    };
    // Power-of-two bucket widths: a shift, not a division, per slice.
    let width = size.div_ceil(target.max(1)).next_power_of_two();
    let shift = width.trailing_zeros();
    let buckets = size.div_ceil(width);

    // Pass 1: each chunk of slices finds its slices' buckets and counts them.
    let chunks = (rayon::current_num_threads() * 4).min(slices);
    let chunk_len = slices.div_ceil(chunks);
    let mut bucket_of = vec![0u32; slices];
    let counts: Option<Vec<Vec<usize>>> = bucket_of
        .par_chunks_mut(chunk_len)
        .enumerate()
        .map(|(c, ids)| {
            let mut counts = vec![0usize; buckets];
            let first = c * chunk_len;
            for (i, id) in ids.iter_mut().enumerate() {
                let k = slice_index(&layout, indices.dtype(), first + i, size)?;
                let b = (k >> shift) as u32;
                *id = b;
                counts[b as usize] += 1;
            }
            Some(counts)
        })
        .collect();
    let counts = counts?;

    // Where each chunk's slices of each bucket start: buckets in order, and within a
    // bucket, chunks in order (stable).
    let mut starts = Vec::with_capacity(buckets + 1);
    let mut next = vec![vec![0usize; buckets]; counts.len()];
    let mut at = 0usize;
    for b in 0..buckets {
        starts.push(at);
        for (c, chunk) in counts.iter().enumerate() {
            next[c][b] = at;
            at += chunk[b];
        }
    }
    starts.push(at);

    // Pass 2: each chunk writes its slices' coordinates into their buckets, in order.
    let rows: Vec<AtomicI64> = (0..slices).map(|_| AtomicI64::new(0)).collect();
    bucket_of
        .par_chunks(chunk_len)
        .zip(next.par_iter_mut())
        .enumerate()
        .for_each(|(c, (ids, next))| {
            for (i, &b) in ids.iter().enumerate() {
                let slot = &mut next[b as usize];
                rows[*slot].store((c * chunk_len + i) as i64, Ordering::Relaxed);
                *slot += 1;
            }
        });
    Some(Buckets { rows, starts })
}

/// The normalized destination coordinate of slice `e`, or `None` if its index is out of
/// `[-size, size)` (`[0, size)` unsigned) or, for rows, not uniform.
fn slice_index(layout: &Slices<'_>, dtype: DType, e: usize, size: usize) -> Option<usize> {
    let (raw, rest): (&[u8], &[u8]) = match layout {
        Slices::Broadcast { indices, stride } => (indices.element_bytes(e as isize * stride), &[]),
        Slices::Rows { bytes, len } => {
            let width = dtype.size();
            let row = &bytes[e * len * width..(e + 1) * len * width];
            (&row[..width], &row[width..])
        }
    };
    // Uniform: every later element's bytes equal the first's.
    if !rest.is_empty() && !rest.chunks_exact(raw.len()).all(|x| x == raw) {
        return None;
    }
    let mut bytes = [0u8; 8];
    bytes[..raw.len()].copy_from_slice(raw);
    let unused_bits = 64 - 8 * raw.len() as u32;
    let k = if dtype.is_signed_integer() {
        ((i64::from_le_bytes(bytes) << unused_bits) >> unused_bits) as i128
    } else {
        u64::from_le_bytes(bytes) as i128
    };
    let k = if k < 0 { k + size as i128 } else { k };
    (0..size as i128).contains(&k).then_some(k as usize)
}
