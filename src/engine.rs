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

use std::convert::Infallible;
use std::sync::{Mutex, OnceLock, PoisonError};

use scatterjit_ir::{DType, Element, OpKind, Result};

use crate::alloc;
use crate::check;
use crate::tensor::TensorView;
use crate::threads;

/// What the sort leaves: every slice's destination, and, where the slices run on several
/// threads, their lists by destination bucket. Both are scratch from the pool that later
/// calls reuse (`alloc::reused`), as the call's other scratch is.
pub(crate) struct Sorted {
    /// Slice `e`'s normalized destination coordinate `k_e`, a native-endian u32 per slice:
    /// the passes read these in place of the index (see [`Sorted::keys_view`]).
    keys: Vec<u8>,
    /// The slices by destination bucket; `None` where one thread runs them in order.
    pub(crate) buckets: Option<Buckets>,
}

impl Drop for Sorted {
    fn drop(&mut self) {
        alloc::keep(std::mem::take(&mut self.keys));
    }
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
    /// The axis coordinates of the slices as native-endian i64s (what the listed passes
    /// read), bucket after bucket, each bucket in increasing order.
    rows: Vec<u8>,
    /// Bucket `b` is entries `starts[b]..starts[b + 1]` of `rows`.
    starts: Vec<usize>,
}

impl Drop for Buckets {
    fn drop(&mut self) {
        alloc::keep(std::mem::take(&mut self.rows));
    }
}

impl Buckets {
    /// Number of buckets.
    pub(crate) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Bucket `b`: the address of its first row and its number of rows.
    pub(crate) fn bucket(&self, b: usize) -> (*const i64, usize) {
        let (start, end) = (self.starts[b], self.starts[b + 1]);
        (self.rows[start * ROW..].as_ptr() as *const i64, end - start)
    }

    /// The axis coordinate listed at entry `j` of bucket `b`.
    pub(crate) fn row(&self, b: usize, j: usize) -> usize {
        let at = (self.starts[b] + j) * ROW;
        i64::from_ne_bytes(self.rows[at..at + ROW].try_into().expect("ROW bytes")) as usize
    }
}

/// Bytes of a key.
const KEY: usize = std::mem::size_of::<u32>();
/// Bytes of a listed row.
const ROW: usize = std::mem::size_of::<i64>();

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
/// 2^32 (keys are u32). With `caller_helps`, a caller outside every pool runs chunks of
/// each pass too (`threads::try_each`), as for a short pass of the call.
pub(crate) fn sort<'a>(
    indices: &'a TensorView<'a>,
    axis: usize,
    size: usize,
    target: Option<usize>,
    caller_helps: bool,
) -> Option<Sorted> {
    let shape = indices.shape();
    let strides = indices.strides();
    let slices = shape[axis];
    if slices == 0 || size == 0 || shape.contains(&0) || size - 1 > u32::MAX as usize {
        return None;
    }
    let layout = if uniform_by_layout(shape, strides, axis) {
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
    // Pass 1 counts the slices per *range*: power-of-two-wide ranges of the axis (a
    // shift, not a division, per slice), [`RANGES_PER_BUCKET`] per bucket wanted. Buckets
    // are then runs of ranges that hold about as many slices each, whatever the axis's
    // size (power-of-two buckets would have cut an axis of 50,000 into 32,768 and 17,232)
    // and however skewed the destinations.
    let wanted = target.unwrap_or(1).max(1);
    let width = size
        .div_ceil(wanted.saturating_mul(RANGES_PER_BUCKET))
        .next_power_of_two();
    let shift = width.trailing_zeros();
    let ranges = size.div_ceil(width);

    // Pass 1: each chunk of slices checks its slices, writes their keys and counts them
    // per range.
    let available = threads::available();
    let chunks = (available * 4).min(slices);
    let chunk_len = slices.div_ceil(chunks);
    let mut keys = alloc::reused(OpKind::ScatterElements, slices * KEY).ok()?;
    // Each chunk's part of the keys and, once counted, its counts per range; locked once
    // each, by the chunk's one run.
    let key_chunks: Vec<Mutex<&mut [u8]>> =
        keys.chunks_mut(chunk_len * KEY).map(Mutex::new).collect();
    let chunk_counts: Vec<OnceLock<Vec<usize>>> =
        key_chunks.iter().map(|_| OnceLock::new()).collect();
    let count = |c: usize| {
        let mut keys = key_chunks[c].lock().unwrap_or_else(PoisonError::into_inner);
        let mut counters = Padded::new(std::iter::repeat_n(0usize, ranges));
        let counts = counters.items();
        // `move`: the shift in a register, not read through a reference per slice.
        let tally = move |k: usize| counts[k >> shift] += 1;
        scatterjit_ir::match_integer!(
            indices.dtype(),
            T => key_chunk::<T>(&layout, c * chunk_len, &mut keys, size, tally).ok_or(())?,
            _ => unreachable!("validation admits only integer index dtypes"),
        );
        chunk_counts[c].get_or_init(|| counters.items().to_vec());
        Ok::<(), ()>(())
    };
    let counted = threads::try_each(key_chunks.len(), caller_helps, count);
    drop(key_chunks);
    // From here on the keys go back to the pool with `sorted`, declined or not.
    let mut sorted = Sorted {
        keys,
        buckets: None,
    };
    counted.ok()?;
    let counts: Vec<Vec<usize>> = chunk_counts
        .into_iter()
        .map(|counts| counts.into_inner().expect("every chunk counted"))
        .collect();
    if target.is_none() {
        return Some(sorted);
    }

    // Each range's bucket, and each chunk's slices per bucket.
    let bucket_of = balance(&counts, wanted);
    let buckets = bucket_of.last().map_or(0, |&b| b + 1);
    let counts: Vec<Vec<usize>> = counts
        .iter()
        .map(|chunk| {
            let mut per_bucket = vec![0; buckets];
            for (r, &n) in chunk.iter().enumerate() {
                per_bucket[bucket_of[r]] += n;
            }
            per_bucket
        })
        .collect();

    // Pass 2: each chunk writes its slices' coordinates into their buckets, in order. Its
    // entries of each bucket are one run of the list (buckets in order, and within a
    // bucket, chunks in order), cut from the list for it alone.
    let mut rows = alloc::reused(OpKind::ScatterElements, slices * ROW).ok()?;
    let mut runs: Vec<Vec<&mut [u8]>> = (0..counts.len())
        .map(|_| Vec::with_capacity(buckets))
        .collect();
    // Bucket `b` starts where the runs cut so far end.
    let mut starts = Vec::with_capacity(buckets + 1);
    let mut rest = rows.as_mut_slice();
    for b in 0..buckets {
        starts.push(slices - rest.len() / ROW);
        for (c, chunk) in counts.iter().enumerate() {
            let (run, after) = std::mem::take(&mut rest).split_at_mut(chunk[b] * ROW);
            runs[c].push(run);
            rest = after;
        }
    }
    starts.push(slices);
    let keys = &sorted.keys;
    // Each chunk's runs are exactly its slices per bucket: each slice takes the first
    // entry left of its bucket's run. Each chunk's runs are locked once, by its one run.
    let runs: Vec<Mutex<Vec<&mut [u8]>>> = runs.into_iter().map(Mutex::new).collect();
    let place = |c: usize| {
        let mut own = runs[c].lock().unwrap_or_else(PoisonError::into_inner);
        let mut cursors = Padded::new(own.drain(..));
        let runs = cursors.items();
        let first = c * chunk_len;
        let end = (first + chunk_len).min(slices);
        for (e, key) in (first..end).zip(keys[first * KEY..end * KEY].chunks_exact(KEY)) {
            let k = u32::from_ne_bytes(key.try_into().expect("KEY bytes")) as usize;
            let run = &mut runs[bucket_of[k >> shift]];
            let (entry, rest) = std::mem::take(run).split_at_mut(ROW);
            entry.copy_from_slice(&(e as i64).to_ne_bytes());
            *run = rest;
        }
        Ok::<(), Infallible>(())
    };
    let Ok(()) = threads::try_each(runs.len(), caller_helps, place);
    drop(runs);
    sorted.buckets = Some(Buckets { rows, starts });
    Some(sorted)
}

/// Ranges counted per bucket wanted: a bucket's share of the slices is then off by about
/// one range's share at most.
const RANGES_PER_BUCKET: usize = 16;

/// The bucket of each range, from the chunks' counts per range: runs of consecutive
/// ranges, at most `wanted` of them, each holding about as many slices; a range starts
/// bucket `b` once the slices before it reach `b` `wanted`ths of all. The last entry is
/// the last bucket.
fn balance(counts: &[Vec<usize>], wanted: usize) -> Vec<usize> {
    let ranges = counts.first().map_or(0, Vec::len);
    let per_range: Vec<usize> = (0..ranges)
        .map(|r| counts.iter().map(|chunk| chunk[r]).sum())
        .collect();
    let total: usize = per_range.iter().sum::<usize>().max(1);
    let mut before = 0usize;
    let mut bucket = 0usize;
    per_range
        .iter()
        .map(|&n| {
            // u128: `before * wanted` may pass usize on 32-bit hosts.
            let share = (before as u128 * wanted as u128 / total as u128) as usize;
            bucket = bucket.max(share.min(wanted - 1));
            before += n;
            bucket
        })
        .collect()
}

/// A thread's own items (counters, write cursors), with two cache lines of default
/// values on each side so that no other thread's data shares their lines: with the
/// counters of two threads' chunks in one line, the sort's passes ran no faster on two
/// threads than on one (400,000 slices: 1.1 ms either way, 0.65 padded).
struct Padded<T> {
    items: Vec<T>,
    pad: usize,
}

impl<T: Default> Padded<T> {
    fn new(items: impl IntoIterator<Item = T>) -> Self {
        let pad = (2 * crate::abi::CACHE_LINE as usize).div_ceil(std::mem::size_of::<T>().max(1));
        let mut padded = Vec::new();
        padded.extend((0..pad).map(|_| T::default()));
        padded.extend(items);
        padded.extend((0..pad).map(|_| T::default()));
        Padded { items: padded, pad }
    }

    /// The items, without the padding.
    fn items(&mut self) -> &mut [T] {
        let len = self.items.len() - 2 * self.pad;
        &mut self.items[self.pad..][..len]
    }
}

/// Whether an index of this shape and these strides is the same across each slice by its
/// layout alone: stride 0 (or one position) along every dim but `axis`, as a broadcast or
/// expanded view is.
pub(crate) fn uniform_by_layout(shape: &[usize], strides: &[isize], axis: usize) -> bool {
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

/// Pass 1 over the slices from `first` on, one per key of `keys`: checks each slice's
/// index (type `T`), writes its normalized destination as the key and hands it to
/// `count`. `None` at the first index out of `[-size, size)` (`[0, size)` unsigned) or,
/// for rows, the first slice that is not uniform.
///
/// Monomorphic per index type and layout, each index read in place: with the layout
/// decoded and the element's position computed per slice, an expanded i64 index took 45
/// instructions a slice here, 25 now (callgrind).
fn key_chunk<T: Element + Into<i128>>(
    layout: &Slices<'_>,
    first: usize,
    keys: &mut [u8],
    size: usize,
    mut count: impl FnMut(usize),
) -> Option<()> {
    let width = std::mem::size_of::<T>();
    let mut put = |key: &mut [u8], raw: &[u8]| {
        let k: i128 = T::read_le(raw).into();
        let k = if k < 0 { k + size as i128 } else { k };
        let k = (0..size as i128).contains(&k).then_some(k as usize)?;
        key.copy_from_slice(&(k as u32).to_ne_bytes());
        count(k);
        Some(())
    };
    match *layout {
        Slices::Broadcast { indices, stride } => {
            // Every position lies inside the buffer (the view checked it when made), so
            // no offset of a slice's index is negative.
            let bytes = indices.buffer();
            let step = stride * width as isize;
            let mut at = (indices.offset() as isize + first as isize * stride) * width as isize;
            for key in keys.chunks_exact_mut(KEY) {
                put(key, &bytes[at as usize..][..width])?;
                at += step;
            }
        }
        Slices::Rows { bytes, len } => {
            let rows = bytes[first * len * width..].chunks_exact(len * width);
            for (key, row) in keys.chunks_exact_mut(KEY).zip(rows) {
                let (head, rest) = row.split_at(width);
                if !rest.is_empty() && !uniform(head, rest) {
                    return None;
                }
                put(key, head)?;
            }
        }
    }
    Some(())
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
        // An expanded [6, 3] index over an axis of 8, in four buckets.
        let column: Vec<u8> = [5i64, 0, -1, 5, 1, 4]
            .iter()
            .flat_map(|k| k.to_le_bytes())
            .collect();
        let view = TensorView::new(DType::I64, &[6, 3], &[1, 0], 0, &column).unwrap();
        let sorted = sort(&view, 0, 8, Some(4), false).unwrap();
        // -1 is 7; each bucket lists its slices in increasing order.
        assert_eq!(keys_of(&sorted), [5, 0, 7, 5, 1, 4]);
        // Buckets of about equal counts: keys 0 and 1, 4, 5 twice, 7.
        assert_eq!(rows_of(&sorted), [vec![1, 4], vec![5], vec![0, 3], vec![2]]);
        // Without a target, only the keys.
        let sorted = sort(&view, 0, 8, None, false).unwrap();
        assert!(sorted.buckets.is_none());
        assert_eq!(keys_of(&sorted), [5, 0, 7, 5, 1, 4]);
        let keys = sorted.keys_view(&[6, 3], 0).unwrap();
        assert_eq!((keys.dtype(), keys.strides()), (DType::U32, &[1, 0][..]));
        // A bad index declines.
        let bad: Vec<u8> = [5i64, 8].iter().flat_map(|k| k.to_le_bytes()).collect();
        let view = TensorView::new(DType::I64, &[2, 3], &[1, 0], 0, &bad).unwrap();
        assert!(sort(&view, 0, 8, Some(4), false).is_none());
        assert!(sort(&view, 0, 8, None, false).is_none());
    }

    #[test]
    fn buckets_hold_about_as_many_slices() {
        // 4,000 slices spread over an axis of 50,000: power-of-two halves would hold
        // about 65% and 35% of them.
        let keys: Vec<i64> = (0..4000).map(|e| (e * 12_497) % 50_000).collect();
        let column: Vec<u8> = keys.iter().flat_map(|k| k.to_le_bytes()).collect();
        let view = TensorView::new(DType::I64, &[4000, 8], &[1, 0], 0, &column).unwrap();
        for wanted in [2, 3, 7] {
            let sorted = sort(&view, 0, 50_000, Some(wanted), false).unwrap();
            let rows = rows_of(&sorted);
            assert_eq!(rows.len(), wanted);
            for bucket in &rows {
                let share = bucket.len() as f64 / 4000.0;
                assert!((share - 1.0 / wanted as f64).abs() < 1.0 / 16.0, "{share}");
            }
            // Each bucket a range of destinations, every slice listed once.
            let mut all: Vec<usize> = rows.concat();
            all.sort_unstable();
            assert_eq!(all, (0..4000).collect::<Vec<_>>());
            for pair in rows.windows(2) {
                let last = pair[0].iter().map(|&e| keys[e]).max().unwrap();
                assert!(pair[1].iter().all(|&e| keys[e] > last));
            }
        }
        // One destination for every slice: one bucket holds them all.
        let column = 3i64.to_le_bytes();
        let view = TensorView::new(DType::I64, &[4000, 8], &[0, 0], 0, &column).unwrap();
        let rows = rows_of(&sort(&view, 0, 50_000, Some(4), false).unwrap());
        assert_eq!(rows.iter().filter(|b| !b.is_empty()).count(), 1);
    }

    #[test]
    fn dense_rows_must_be_uniform() {
        let rows = [2u8, 2, 2, 0, 0, 0, 1, 1, 1];
        let view = TensorView::new(DType::U8, &[3, 3], &[3, 1], 0, &rows).unwrap();
        let sorted = sort(&view, 0, 3, Some(3), false).unwrap();
        assert_eq!(keys_of(&sorted), [2, 0, 1]);
        assert_eq!(rows_of(&sorted), [vec![1], vec![2], vec![0]]);
        let mixed = [2u8, 2, 2, 0, 1, 0, 1, 1, 1];
        let view = TensorView::new(DType::U8, &[3, 3], &[3, 1], 0, &mixed).unwrap();
        assert!(sort(&view, 0, 3, Some(3), false).is_none());
        assert!(sort(&view, 0, 3, None, false).is_none());
        assert!(uniform(&[7, 0], &[7, 0, 7, 0, 7, 0, 7, 0, 7, 0]));
        assert!(!uniform(&[7, 0], &[7, 0, 7, 0, 7, 0, 7, 0, 7, 1]));
    }

    #[test]
    fn destinations_past_u32_decline() {
        let column = 0i64.to_le_bytes();
        let view = TensorView::new(DType::I64, &[1, 3], &[1, 0], 0, &column).unwrap();
        assert!(sort(&view, 0, (1 << 32) + 1, None, false).is_none());
        assert!(sort(&view, 0, 1 << 32, None, false).is_some());
    }
}
