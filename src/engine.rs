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
//! it never writes anything the ordinary check would have refused. It leaves each slice's
//! normalized destination as a u32 *key*, which the passes read instead of the index: one
//! dense 4-byte read per slice, where a dense index would be one line of its own per slice.

use std::sync::atomic::{AtomicI64, Ordering};

use rayon::prelude::*;
use scatterjit_ir::{DType, Result};

use crate::check;
use crate::tensor::TensorView;
use crate::threads;

/// What the sort leaves: every slice's destination, and, where the slices run on several
/// threads, their lists by destination bucket.
pub(crate) struct Sorted {
    /// Slice `e`'s normalized destination coordinate `k_e`, a native-endian u32 per slice:
    /// the passes read these in place of the index (see [`Sorted::keys_view`]).
    keys: Vec<u8>,
    /// The slices by destination bucket; `None` where one thread runs them in order.
    pub(crate) buckets: Option<Buckets>,
}

impl Sorted {
    /// The keys as an index of `shape` (the call's index shape, sorted along `axis`): u32,
    /// stride 1 along the axis and 0 elsewhere, so a pass reads one checked,
    /// non-negative index per slice from 4 bytes of a dense vector.
    pub(crate) fn keys_view(&self, shape: &[usize], axis: usize) -> Result<TensorView<'_>> {
        let strides: Vec<isize> = (0..shape.len()).map(|d| isize::from(d == axis)).collect();
        TensorView::new(DType::U32, shape, &strides, 0, &self.keys)
    }
}

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

/// The keys of the slices of `indices` along `axis` into a destination of `size` along the
/// axis, and with `target`, their lists in about that many buckets; `None` if the index is
/// not uniform per slice (by layout or by value), holds a bad index, or `size` is past
/// 2^32 (keys are u32).
pub(crate) fn sort<'a>(
    indices: &'a TensorView<'a>,
    axis: usize,
    size: usize,
    target: Option<usize>,
) -> Option<Sorted> {
    const KEY: usize = std::mem::size_of::<u32>();
    let shape = indices.shape();
    let strides = indices.strides();
    let slices = shape[axis];
    if slices == 0 || size == 0 || shape.contains(&0) || size - 1 > u32::MAX as usize {
        return None;
    }
    let layout = if uniform_by_layout(indices, axis) {
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
    let width = size
        .div_ceil(target.unwrap_or(1).max(1))
        .next_power_of_two();
    let shift = width.trailing_zeros();
    let buckets = size.div_ceil(width);
    let key_at = |keys: &[u8], i: usize| {
        u32::from_ne_bytes(keys[i * KEY..][..KEY].try_into().expect("KEY bytes"))
    };

    // Pass 1: each chunk of slices checks its slices, writes their keys and counts them
    // per bucket.
    let available = threads::available();
    let chunks = (available * 4).min(slices);
    let chunk_len = slices.div_ceil(chunks);
    let mut keys = vec![0u8; slices * KEY];
    let count = |(c, keys): (usize, &mut [u8])| {
        let mut counts = vec![0usize; buckets];
        let first = c * chunk_len;
        for (i, key) in keys.chunks_exact_mut(KEY).enumerate() {
            let k = slice_index(&layout, indices.dtype(), first + i, size)?;
            key.copy_from_slice(&(k as u32).to_ne_bytes());
            counts[k >> shift] += 1;
        }
        Some(counts)
    };
    let counts: Vec<Vec<usize>> = match available > 1 {
        true => keys
            .par_chunks_mut(chunk_len * KEY)
            .enumerate()
            .map(count)
            .collect::<Option<_>>()?,
        false => keys
            .chunks_mut(chunk_len * KEY)
            .enumerate()
            .map(count)
            .collect::<Option<_>>()?,
    };
    if target.is_none() {
        return Some(Sorted {
            keys,
            buckets: None,
        });
    }

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
    let place = |(c, next): (usize, &mut Vec<usize>)| {
        let first = c * chunk_len;
        for e in first..(first + chunk_len).min(slices) {
            let slot = &mut next[key_at(&keys, e) as usize >> shift];
            rows[*slot].store(e as i64, Ordering::Relaxed);
            *slot += 1;
        }
    };
    match available > 1 {
        true => next.par_iter_mut().enumerate().for_each(place),
        false => next.iter_mut().enumerate().for_each(place),
    }
    Some(Sorted {
        keys,
        buckets: Some(Buckets { rows, starts }),
    })
}

/// Whether `indices` is the same across each slice by its layout alone: stride 0 (or one
/// position) along every dim but `axis`, as a broadcast or expanded view is.
pub(crate) fn uniform_by_layout(indices: &TensorView<'_>, axis: usize) -> bool {
    let (shape, strides) = (indices.shape(), indices.strides());
    (0..shape.len())
        .filter(|&d| d != axis)
        .all(|d| shape[d] == 1 || strides[d] == 0)
}

/// Whether every element of `rest` (elements of `first`'s width, at most 8 bytes) has
/// `first`'s bytes: eight bytes at a time against `first` repeated, without early exit, so
/// that it vectorizes.
fn uniform(first: &[u8], rest: &[u8]) -> bool {
    let mut pattern = [0u8; 8];
    for (p, &b) in pattern.iter_mut().zip(first.iter().cycle()) {
        *p = b;
    }
    let pattern = u64::from_le_bytes(pattern);
    let words = rest.chunks_exact(8);
    let tail = words.remainder();
    let diff = check::widest(|| {
        words.fold(0u64, |acc, w| {
            acc | (u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ pattern)
        })
    });
    diff == 0 && tail.chunks_exact(first.len()).all(|x| x == first)
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
    if !rest.is_empty() && !uniform(raw, rest) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(sorted: &Sorted) -> Vec<Vec<usize>> {
        let buckets = sorted.buckets.as_ref().expect("listed");
        (0..buckets.len())
            .map(|b| {
                (0..buckets.bucket(b).1)
                    .map(|j| buckets.row(b, j))
                    .collect()
            })
            .collect()
    }

    fn keys_of(sorted: &Sorted) -> Vec<u32> {
        sorted
            .keys
            .chunks_exact(4)
            .map(|k| u32::from_ne_bytes(k.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn sorts_slices_stably_by_destination_range() {
        // An expanded [6, 3] index over an axis of 8: buckets of width 2 (target 4).
        let column: Vec<u8> = [5i64, 0, -1, 5, 1, 4]
            .iter()
            .flat_map(|k| k.to_le_bytes())
            .collect();
        let view = TensorView::new(DType::I64, &[6, 3], &[1, 0], 0, &column).unwrap();
        let sorted = sort(&view, 0, 8, Some(4)).unwrap();
        // -1 is 7; each bucket lists its slices in increasing order.
        assert_eq!(keys_of(&sorted), [5, 0, 7, 5, 1, 4]);
        assert_eq!(
            rows_of(&sorted),
            [vec![1, 4], vec![], vec![0, 3, 5], vec![2]]
        );
        // Without a target, only the keys.
        let sorted = sort(&view, 0, 8, None).unwrap();
        assert!(sorted.buckets.is_none());
        assert_eq!(keys_of(&sorted), [5, 0, 7, 5, 1, 4]);
        let keys = sorted.keys_view(&[6, 3], 0).unwrap();
        assert_eq!((keys.dtype(), keys.strides()), (DType::U32, &[1, 0][..]));
        // A bad index declines.
        let bad: Vec<u8> = [5i64, 8].iter().flat_map(|k| k.to_le_bytes()).collect();
        let view = TensorView::new(DType::I64, &[2, 3], &[1, 0], 0, &bad).unwrap();
        assert!(sort(&view, 0, 8, Some(4)).is_none());
        assert!(sort(&view, 0, 8, None).is_none());
    }

    #[test]
    fn dense_rows_must_be_uniform() {
        let rows = [2u8, 2, 2, 0, 0, 0, 1, 1, 1];
        let view = TensorView::new(DType::U8, &[3, 3], &[3, 1], 0, &rows).unwrap();
        let sorted = sort(&view, 0, 3, Some(3)).unwrap();
        assert_eq!(keys_of(&sorted), [2, 0, 1]);
        assert_eq!(rows_of(&sorted), [vec![1], vec![2], vec![0]]);
        let mixed = [2u8, 2, 2, 0, 1, 0, 1, 1, 1];
        let view = TensorView::new(DType::U8, &[3, 3], &[3, 1], 0, &mixed).unwrap();
        assert!(sort(&view, 0, 3, Some(3)).is_none());
        assert!(sort(&view, 0, 3, None).is_none());
        assert!(uniform(&[7, 0], &[7, 0, 7, 0, 7, 0, 7, 0, 7, 0]));
        assert!(!uniform(&[7, 0], &[7, 0, 7, 0, 7, 0, 7, 0, 7, 1]));
    }

    #[test]
    fn destinations_past_u32_decline() {
        let column = 0i64.to_le_bytes();
        let view = TensorView::new(DType::I64, &[1, 3], &[1, 0], 0, &column).unwrap();
        assert!(sort(&view, 0, (1 << 32) + 1, None).is_none());
        assert!(sort(&view, 0, 1 << 32, None).is_some());
    }
}
