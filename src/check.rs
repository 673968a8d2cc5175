//! The index check before the first write, on the host for row-major indices: one pass
//! over the index bytes that the compiler vectorizes (for the widest vectors the CPU has,
//! see [`widest`]), split over the rayon pool; for indices in other layouts, a tiled
//! row-major copy ([`compact_strided`]). Strided indices that are not copied go through
//! the compiled check pass instead.

use scatterjit_ir::DType;

use crate::abi::CACHE_LINE;
use crate::tensor::{offset_of, TensorView};
use crate::threads;

/// Bytes of a cache line.
const LINE: usize = CACHE_LINE as usize;

/// Elements per block: each block is scanned without early exit (so it vectorizes), and
/// the first block with a bad index is searched again element by element.
const BLOCK: usize = 4096;

/// How far ahead of a scan's reads, in bytes, it asks for the lines it will read next. With
/// the hardware's prefetcher alone, a scan of 64 MiB of i64 indices took 1.1-1.15x as long
/// at one and two threads (BENCHMARKS.md, "Scans that ask for their lines ahead").
const PREFETCH_AHEAD: usize = 1536;

/// The fewest index bytes a scan asks for lines ahead of: shorter ones are cheap to scan
/// whatever the prefetcher does, and often cached by the caller, while the lines past
/// their end that the requests would bring are not theirs.
const PREFETCH_FROM: usize = 64 << 10;

/// Bytes a scan reads between its requests for the lines ahead.
const PIECE: usize = 16 * LINE;

/// Asks for the lines [`PREFETCH_AHEAD`] bytes past `piece`, one of [`PIECE`] bytes (or
/// fewer, at the end of a buffer) that a scan is about to read.
#[inline(always)]
fn ask_ahead_of(piece: &[u8]) {
    for line in (0..PIECE).step_by(LINE) {
        prefetch(piece.as_ptr(), PREFETCH_AHEAD + line);
    }
}

/// Bytes an AVX2 compact reads a step: two lines.
#[cfg(target_arch = "x86_64")]
const STEP_BYTES: usize = 2 * LINE;

/// Asks for the lines [`PREFETCH_AHEAD`] bytes past an AVX2 compact's step at `at`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ask_ahead_of_step(at: *const u8) {
    prefetch(at, PREFETCH_AHEAD);
    prefetch(at, PREFETCH_AHEAD + LINE);
}

/// Asks the CPU to bring the cache line `ahead` bytes past `at` (a pointer into an index
/// buffer, which may lie past its end) into the first-level cache.
#[inline(always)]
fn prefetch(at: *const u8, ahead: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never
        // faults, whatever the address (hence `wrapping_add`, which may leave the buffer).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ahead).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, ahead);
}

/// Below this many indices the scan stays on the calling thread.
const PARALLEL_FROM: usize = 1 << 17;

/// Whether a scan of `indices` indices splits over the pool.
fn parallel(indices: usize) -> bool {
    indices >= PARALLEL_FROM && threads::available() > 1
}

/// `bytes` cut into the chunks of a parallel scan ([`threads::stream_chunks`]), whole
/// multiples of `block` bytes but the last.
fn chunks_of(bytes: &[u8], block: usize) -> Vec<&[u8]> {
    let blocks = bytes.len().div_ceil(block);
    let chunks = threads::stream_chunks(bytes.len(), blocks);
    bytes.chunks(blocks.div_ceil(chunks) * block).collect()
}

/// The flat position of the first index in `bytes` (row-major, of `dtype`) that is not in
/// `[-s, s)` (signed types) or `[0, s)` (unsigned types).
pub(crate) fn first_bad(dtype: DType, bytes: &[u8], s: usize) -> Option<usize> {
    // Each index, widened to 64 bits, becomes `u` (k + s for signed types, k for unsigned)
    // and must lie in `[0, limit)` (2s or s). With limit <= 2^62 that holds exactly when
    // `u` has its top bit clear and `u - limit` has it set, so a block is bad when the top
    // bit of the OR of `!(u - limit) | u` over it is set: adds, subtracts and ORs that
    // vectorize with SSE2, which has no 64-bit compare. Larger `s` (possible only beside a
    // zero-size dim) take the compare.
    const FAST_UP_TO: usize = 1 << 61;
    scatterjit_ir::match_integer!(
        dtype,
        T => {
            let signed = T::MIN != 0;
            // A constant, so that each loop steps by a known width and vectorizes.
            const SIZE: usize = std::mem::size_of::<T>();
            let read = |e: &[u8]| T::from_le_bytes(e.try_into().expect("one element"));
            let (bias, limit) = if signed {
                (s as u64, (s as u64).wrapping_mul(2))
            } else {
                (0, s as u64)
            };
            // The casts widen every index type; for i64 the first is the identity.
            #[allow(clippy::unnecessary_cast)]
            let flags = |e: &[u8]| {
                let u = (read(e) as i64 as u64).wrapping_add(bias);
                !u.wrapping_sub(limit) | u
            };
            let bad = |e: &[u8]| {
                let k = read(e) as i128;
                k < if signed { -(s as i128) } else { 0 } || k >= s as i128
            };
            let ahead = bytes.len() >= PREFETCH_FROM;
            let block_bad = |block: &[u8]| {
                if s <= FAST_UP_TO {
                    let fold = |acc, piece: &[u8]| {
                        piece.chunks_exact(SIZE).fold(acc, |acc, e| acc | flags(e))
                    };
                    // A scan without requests keeps the block one loop.
                    let scan = || match ahead {
                        true => block.chunks(PIECE).fold(0u64, |acc, piece| {
                            ask_ahead_of(piece);
                            fold(acc, piece)
                        }),
                        false => fold(0u64, block),
                    };
                    widest(scan) >> 63 != 0
                } else {
                    block.chunks_exact(SIZE).any(bad)
                }
            };
            let first_block = if parallel(bytes.len() / SIZE) {
                // Each chunk's first bad block; the lowest chunk's is the first of all.
                let block = BLOCK * SIZE;
                let chunks = chunks_of(bytes, block);
                let per_chunk = chunks.first().map_or(0, |c| c.len() / block);
                threads::try_each_item(chunks, threads::caller_helps_moving(bytes.len()), |c, chunk| {
                    match chunk.chunks(block).position(block_bad) {
                        Some(n) => Err(c * per_chunk + n),
                        None => Ok(()),
                    }
                })
                .err()
            } else {
                bytes.chunks(BLOCK * SIZE).position(block_bad)
            };
            first_block.map(|n| {
                let block = &bytes[n * BLOCK * SIZE..];
                let at = block
                    .chunks_exact(SIZE)
                    .position(bad)
                    .expect("the block holds a bad index");
                n * BLOCK + at
            })
        },
        _ => unreachable!("validation admits only integer index dtypes"),
    )
}

/// [`first_bad`]'s scan that also writes every index, normalized to `[0, s)`, as a
/// little-endian unsigned integer of `width` bytes (1, 2 or 4, which must hold `s - 1`) into
/// `out` (`width` bytes per index). Returns whether every index was in range; when not,
/// `out` holds garbage and the caller asks [`first_bad`] which index was the first bad one.
pub(crate) fn compact_into(
    dtype: DType,
    bytes: &[u8],
    s: usize,
    width: usize,
    out: &mut [u8],
) -> bool {
    debug_assert!(matches!(width, 1 | 2 | 4) && (s as u64) <= 1 << (8 * width));
    match width {
        1 => compact_as::<1>(dtype, bytes, s, out),
        2 => compact_as::<2>(dtype, bytes, s, out),
        _ => compact_as::<4>(dtype, bytes, s, out),
    }
}

/// Elements per tile of [`compact_strided`] (a tile of i64 indices, 32 KiB, stays in the
/// first-level cache between its gather and its compact): [`TILE_COLUMNS`] of each of
/// [`TILE_ROWS`] rows, or more rows where rows are shorter.
const TILE_ROWS: usize = 64;

/// See [`TILE_ROWS`].
const TILE_COLUMNS: usize = 64;

/// [`compact_into`] for indices in any layout but a broadcast one: writes them normalized,
/// in row-major order, into `out`, so that the apply pass walks them as it walks dense
/// indices. Where the layout is not row-major (a transposed or permuted index), each tile
/// of output rows stacked along the dim whose elements lie closest in memory is gathered
/// into a buffer (whose lines then serve the tile's next rows from the first-level cache)
/// and compacted in one scan. Where rows are short, a tile takes whole runs of the output
/// (every row between two steps of that dim) and writes one slice of it. Returns whether
/// every index was in range; when not, `out` holds garbage and the caller's ordinary check
/// names the first bad one.
pub(crate) fn compact_strided(
    indices: &TensorView<'_>,
    s: usize,
    width: usize,
    out: &mut [u8],
) -> bool {
    // Dims of size 1 step nowhere; the row-major order of the rest is the view's.
    let (view, _) = indices.compacted();
    let (shape, strides) = (view.shape(), view.strides());
    let dtype = view.dtype();
    let size = dtype.size();
    let Some(last) = shape.len().checked_sub(1) else {
        return compact_into(dtype, view.element_bytes(0), s, width, out);
    };
    let columns = shape[last];
    if columns == 0 {
        return true;
    }
    // The dim the tiles stack rows along: the closest-strided one, if closer than the
    // last dim's own elements. Its step in output rows, its extent and its stride.
    let stack = (0..last)
        .min_by_key(|&d| strides[d].unsigned_abs())
        .filter(|&d| strides[d].unsigned_abs() < strides[last].unsigned_abs());
    let (low_dims, extent, stride) = match stack {
        Some(d) => (d + 1..last, shape[d], strides[d]),
        None => (last..last, 1, 0),
    };
    let row_step: usize = shape[low_dims.clone()].iter().product();
    let rows = out.len() / (columns * width);
    // Short rows: a tile is `tile_rows` steps of the stacked dim, each a run of the output
    // (its rows between two steps), as long as a tile still reads each source cache line
    // whole. Its columns are the run's elements, at `offsets` from the run's first.
    let run = row_step * columns;
    let short = columns <= TILE_COLUMNS && run * (LINE / size).max(1) <= TILE_ROWS * TILE_COLUMNS;
    let (tile_rows, blocks, block, offsets) = if short {
        let mut offsets = Vec::with_capacity(run);
        let (low_shape, low_strides) = (&shape[low_dims.clone()], &strides[low_dims.clone()]);
        for low in 0..row_step {
            let at = offset_of(low, low_shape, low_strides);
            offsets.extend((0..columns).map(|j| at + j as isize * strides[last]));
        }
        (
            (TILE_ROWS * TILE_COLUMNS / run).min(extent),
            1,
            columns,
            offsets,
        )
    } else {
        let block = columns.min(TILE_COLUMNS);
        let offsets = (0..block as isize).map(|j| j * strides[last]).collect();
        (
            (TILE_ROWS * TILE_COLUMNS / block).min(extent),
            columns.div_ceil(block),
            block,
            offsets,
        )
    };
    let tiles_along = extent.div_ceil(tile_rows);
    // Each tile's pieces of the output. Short rows: one piece, `tile_rows` runs. Otherwise
    // row `r`'s block `b` goes to the tile of `r` with its stacked coordinate divided by
    // `tile_rows`, in increasing `r`.
    let pieces: Vec<Vec<&mut [u8]>> = if short {
        out.chunks_mut(extent * run * width)
            .flat_map(|steps| steps.chunks_mut(tile_rows * run * width))
            .map(|piece| vec![piece])
            .collect()
    } else {
        let tiles = rows / extent * tiles_along * blocks;
        let mut pieces: Vec<Vec<&mut [u8]>> = (0..tiles).map(|_| Vec::new()).collect();
        let (mut high, mut at, mut low) = (0, 0, 0);
        for row in out.chunks_mut(columns * width) {
            let tile_row = (high * tiles_along + at / tile_rows) * row_step + low;
            for (b, piece) in row.chunks_mut(block * width).enumerate() {
                pieces[tile_row * blocks + b].push(piece);
            }
            // The next row: `low` fastest, then `at`, then `high`.
            low += 1;
            if low == row_step {
                (low, at) = (0, at + 1);
                if at == extent {
                    (at, high) = (0, high + 1);
                }
            }
        }
        pieces
    };
    let (buffer, first) = (view.buffer(), view.offset() as isize);
    let copy = |(tile, narrow): &mut (Vec<u8>, Vec<u8>), (t, pieces): (usize, Vec<&mut [u8]>)| {
        let (tile_row, b) = (t / blocks, t % blocks);
        // Short rows' tiles take every row between two steps of the stack (`low` is 0).
        let lows = if short { 1 } else { row_step };
        let (high, at, low) = (
            tile_row / (lows * tiles_along),
            tile_row / lows % tiles_along,
            tile_row % lows,
        );
        // The tile's first row, and the element offset of its first column.
        let r = (high * extent + at * tile_rows) * row_step + low;
        let start = first
            + (b * block) as isize * strides[last]
            + offset_of(r, &shape[..last], &strides[..last]);
        let n = match short {
            true => run,
            false => (columns - b * block).min(block),
        };
        let rows = match short {
            true => pieces[0].len() / (n * width),
            false => pieces.len(),
        };
        let tile = &mut tile[..rows * n * size];
        let offsets = &offsets[..n];
        match size {
            1 => gather_tile::<1>(buffer, start, offsets, stride, tile),
            2 => gather_tile::<2>(buffer, start, offsets, stride, tile),
            4 => gather_tile::<4>(buffer, start, offsets, stride, tile),
            _ => gather_tile::<8>(buffer, start, offsets, stride, tile),
        }
        if short {
            let [piece] = <[_; 1]>::try_from(pieces).expect("one piece");
            return compact_into(dtype, tile, s, width, piece);
        }
        let narrow = &mut narrow[..rows * n * width];
        let in_range = compact_into(dtype, tile, s, width, narrow);
        for (piece, row) in pieces.into_iter().zip(narrow.chunks_exact(n * width)) {
            piece.copy_from_slice(row);
        }
        in_range
    };
    let buffers = || {
        let elements = TILE_ROWS * TILE_COLUMNS;
        (vec![0u8; elements * size], vec![0u8; elements * width])
    };
    if parallel(rows * columns) {
        // Runs of consecutive tiles, four per thread, each with buffers of its own.
        let per_run = pieces.len().div_ceil(threads::available() * 4);
        let mut tiles = pieces.into_iter().enumerate().peekable();
        let mut runs = Vec::new();
        while tiles.peek().is_some() {
            runs.push(tiles.by_ref().take(per_run).collect::<Vec<_>>());
        }
        let moved = rows * columns * (size + width);
        threads::try_each_item(runs, threads::caller_helps_moving(moved), |_, run| {
            let mut buffers = buffers();
            let in_range = run.into_iter().all(|item| copy(&mut buffers, item));
            in_range.then_some(()).ok_or(())
        })
        .is_ok()
    } else {
        let mut buffers = buffers();
        pieces
            .into_iter()
            .enumerate()
            .all(|item| copy(&mut buffers, item))
    }
}

/// Fills `tile`, rows of `offsets.len()` elements of `N` bytes, with the elements at
/// `start + offsets[j] + i * step` of `buffer` (row `i`, column `j`): row by row, so that
/// the loads of one row, each on a line of its own (`step` is the smaller stride), miss
/// the caches together, and the next rows find those lines in the first-level cache.
fn gather_tile<const N: usize>(
    buffer: &[u8],
    start: isize,
    offsets: &[isize],
    step: isize,
    tile: &mut [u8],
) {
    let columns = offsets.len();
    for (i, row) in tile.chunks_exact_mut(columns * N).enumerate() {
        let first = start + i as isize * step;
        for (to, &offset) in row.chunks_exact_mut(N).zip(offsets) {
            let from = (first + offset) as usize * N;
            to.copy_from_slice(&buffer[from..from + N]);
        }
    }
}

/// [`compact_into`] for a width known at compile time, so that the loop vectorizes.
fn compact_as<const W: usize>(dtype: DType, bytes: &[u8], s: usize, out: &mut [u8]) -> bool {
    scatterjit_ir::match_integer!(
        dtype,
        T => {
            let signed = T::MIN != 0;
            // A constant, so that each loop steps by a known width and vectorizes.
            const SIZE: usize = std::mem::size_of::<T>();
            let (bias, limit) = if signed {
                (s as u64, (s as u64).wrapping_mul(2))
            } else {
                (0, s as u64)
            };
            // As in `first_bad`; s is at most 2^32 here, far below its fast path's bound.
            #[allow(clippy::unnecessary_cast)]
            // The flags of a block; a function of its own, so that `from` and `to` are
            // known not to overlap when it is inlined into `widest`'s code.
            let scan = |from: &[u8], to: &mut [u8]| {
                let mut flags = 0u64;
                for (e, o) in from.chunks_exact(SIZE).zip(to.chunks_exact_mut(W)) {
                    let k = T::from_le_bytes(e.try_into().expect("one element")) as i64;
                    let u = (k as u64).wrapping_add(bias);
                    flags |= !u.wrapping_sub(limit) | u;
                    // Negative k becomes k + s; in range, the result is below s.
                    let n = k.wrapping_add(s as i64 & (k >> 63)) as u32;
                    let n: [u8; W] = n.to_le_bytes()[..W].try_into().expect("W <= 4");
                    o.copy_from_slice(&n);
                }
                flags
            };
            // Only the AVX2 compacts ask for lines ahead.
            #[cfg(target_arch = "x86_64")]
            let ahead = bytes.len() >= PREFETCH_FROM;
            let block_ok = |(from, to): (&[u8], &mut [u8])| {
                let flags = match vectors() {
                    #[cfg(target_arch = "x86_64")]
                    Vectors::Avx2 if SIZE == 8 && signed && W <= 2 => {
                        // SAFETY: `vectors` says Avx2 only where the CPU has AVX2; `to`
                        // holds W bytes per index of `from` (`compact_into`'s contract).
                        unsafe { compact_i64_avx2::<W>(from, to, s, ahead, scan) }
                    }
                    #[cfg(target_arch = "x86_64")]
                    Vectors::Avx2 if SIZE == 4 && signed && W <= 2 => {
                        // SAFETY: as above, with W bytes per 4 of `from`; `s - 1` fits W
                        // bytes (`compact_into`'s contract), so `s` is at most 2^16.
                        unsafe { compact_i32_avx2::<W>(from, to, s, ahead, scan) }
                    }
                    _ => widest(|| scan(from, to)),
                };
                flags >> 63 == 0
            };
            if parallel(bytes.len() / SIZE) {
                let from = chunks_of(bytes, BLOCK * SIZE);
                let per_chunk = from.first().map_or(0, |c| c.len() / SIZE);
                let moved = bytes.len() + out.len();
                let pairs: Vec<_> = from.into_iter().zip(out.chunks_mut(per_chunk * W)).collect();
                threads::try_each_item(pairs, threads::caller_helps_moving(moved), |_, (from, to)| {
                    from.chunks(BLOCK * SIZE)
                        .zip(to.chunks_mut(BLOCK * W))
                        .all(block_ok)
                        .then_some(())
                        .ok_or(())
                })
                .is_ok()
            } else {
                bytes.chunks(BLOCK * SIZE).zip(out.chunks_mut(BLOCK * W)).all(block_ok)
            }
        },
        _ => unreachable!("validation admits only integer index dtypes"),
    )
}

/// [`compact_as`]'s scan of a block of i64 indices into 1 or 2 bytes each, 16 indices a
/// step with AVX2 (LLVM's vectorization of the scalar loop narrows each vector of four
/// with two shuffles and two unpacks: 4.1 instructions an index, callgrind); `tail`, the
/// scalar scan, takes the last `len % 16`. The same flags as the scan: the top bit set
/// where some index is outside `[-s, s)`. With `ahead`, each step asks for the lines
/// [`PREFETCH_AHEAD`] bytes past it.
///
/// # Safety
/// The CPU must have AVX2, and `to` at least `W` bytes for each 8 of `from`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn compact_i64_avx2<const W: usize>(
    from: &[u8],
    to: &mut [u8],
    s: usize,
    ahead: bool,
    tail: impl Fn(&[u8], &mut [u8]) -> u64,
) -> u64 {
    use std::arch::x86_64::*;
    const STEP: usize = 16;
    debug_assert!(W <= 2 && to.len() >= from.len() / 8 * W);
    let mut masks = [_mm256_setzero_si256(); 4];
    for (mask, bytes) in masks.iter_mut().zip(const { &shuffle_masks(W) }) {
        // SAFETY: 32 bytes read from an array of 32.
        *mask = unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) };
    }
    let bias = _mm256_set1_epi64x(s as i64);
    let limit = _mm256_set1_epi64x(2 * s as i64);
    // All ones while every biased index is below 2s; the sign bit of any negative one.
    let (mut below, mut negative) = (_mm256_set1_epi64x(-1), _mm256_setzero_si256());
    const { assert!(8 * STEP == STEP_BYTES) };
    let steps = from.len() / STEP_BYTES;
    for i in 0..steps {
        if ahead {
            ask_ahead_of_step(from.as_ptr().wrapping_add(i * STEP_BYTES));
        }
        let mut packed = _mm256_setzero_si256();
        for (j, mask) in masks.iter().enumerate() {
            // SAFETY: step i's STEP_BYTES lie inside `from` (i < steps).
            let k =
                unsafe { _mm256_loadu_si256(from.as_ptr().add(i * STEP_BYTES + 32 * j).cast()) };
            // k + s lies in [0, 2s) exactly when k lies in [-s, s) (a sum that wraps is
            // negative), and is k's normalized value where k is negative.
            let biased = _mm256_add_epi64(k, bias);
            below = _mm256_and_si256(below, _mm256_cmpgt_epi64(limit, biased));
            negative = _mm256_or_si256(negative, biased);
            let chosen = _mm256_blendv_pd(
                _mm256_castsi256_pd(k),
                _mm256_castsi256_pd(biased),
                _mm256_castsi256_pd(k),
            );
            packed = _mm256_or_si256(
                packed,
                _mm256_shuffle_epi8(_mm256_castpd_si256(chosen), *mask),
            );
        }
        // Lane 0 holds indices 0, 1, 4, 5, ... and lane 1 indices 2, 3, 6, 7, ...: pairs
        // interleaved.
        if W == 1 {
            let lanes = (
                _mm256_castsi256_si128(packed),
                _mm256_extracti128_si256::<1>(packed),
            );
            let bytes = _mm_unpacklo_epi16(lanes.0, lanes.1);
            // SAFETY: step i's 16 bytes lie inside `to`, which holds a byte per index.
            unsafe { _mm_storeu_si128(to.as_mut_ptr().add(i * STEP).cast(), bytes) };
        } else {
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let pairs = _mm256_permutevar8x32_epi32(packed, order);
            // SAFETY: step i's 32 bytes lie inside `to`, which holds two bytes per index.
            unsafe { _mm256_storeu_si256(to.as_mut_ptr().add(i * STEP * 2).cast(), pairs) };
        }
    }
    let bad =
        _mm256_movemask_pd(_mm256_castsi256_pd(negative)) != 0 || _mm256_movemask_epi8(below) != -1;
    let done = steps * STEP;
    let flags = tail(&from[done * 8..], &mut to[done * W..]);
    flags | if bad { 1 << 63 } else { 0 }
}

/// [`compact_as`]'s scan of a block of i32 indices into 1 or 2 bytes each, 32 indices a
/// step with AVX2 (LLVM's vectorization of the scalar loop: 3.2 instructions an index into
/// u8, callgrind), as [`compact_i64_avx2`] scans i64: `tail` takes the last `len % 32`, the
/// flags are the scan's, and with `ahead` each step asks for the lines
/// [`PREFETCH_AHEAD`] bytes past it.
///
/// # Safety
/// The CPU must have AVX2, `s` must be at most 2^16, and `to` at least `W` bytes for each
/// 4 of `from`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn compact_i32_avx2<const W: usize>(
    from: &[u8],
    to: &mut [u8],
    s: usize,
    ahead: bool,
    tail: impl Fn(&[u8], &mut [u8]) -> u64,
) -> u64 {
    use std::arch::x86_64::*;
    const STEP: usize = 32;
    debug_assert!(W <= 2 && s <= 1 << 16 && to.len() >= from.len() / 4 * W);
    let bias = _mm256_set1_epi32(s as i32);
    let limit = _mm256_set1_epi32(2 * s as i32);
    // As in `compact_i64_avx2`, on 32-bit lanes.
    let (mut below, mut negative) = (_mm256_set1_epi32(-1), _mm256_setzero_si256());
    const { assert!(4 * STEP == STEP_BYTES) };
    let steps = from.len() / STEP_BYTES;
    for i in 0..steps {
        if ahead {
            ask_ahead_of_step(from.as_ptr().wrapping_add(i * STEP_BYTES));
        }
        let mut chosen = [_mm256_setzero_si256(); 4];
        for (j, lanes) in chosen.iter_mut().enumerate() {
            // SAFETY: step i's STEP_BYTES lie inside `from` (i < steps).
            let k =
                unsafe { _mm256_loadu_si256(from.as_ptr().add(i * STEP_BYTES + 32 * j).cast()) };
            let biased = _mm256_add_epi32(k, bias);
            below = _mm256_and_si256(below, _mm256_cmpgt_epi32(limit, biased));
            negative = _mm256_or_si256(negative, biased);
            *lanes = _mm256_castps_si256(_mm256_blendv_ps(
                _mm256_castsi256_ps(k),
                _mm256_castsi256_ps(biased),
                _mm256_castsi256_ps(k),
            ));
        }
        // In range, every lane is below 2^16 (and below 2^8 for W = 1), so the saturating
        // packs keep it. Each packs within 128-bit lanes: the permutes put the halves of
        // the vectors back in order.
        let low = _mm256_packus_epi32(chosen[0], chosen[1]);
        let high = _mm256_packus_epi32(chosen[2], chosen[3]);
        if W == 1 {
            let bytes = _mm256_packus_epi16(low, high);
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            // SAFETY: step i's 32 bytes lie inside `to`, which holds a byte per index.
            unsafe { _mm256_storeu_si256(to.as_mut_ptr().add(i * STEP).cast(), bytes) };
        } else {
            for (half, pairs) in [low, high].into_iter().enumerate() {
                let pairs = _mm256_permute4x64_epi64::<0b11_01_10_00>(pairs);
                // SAFETY: step i's 64 bytes lie inside `to`, which holds two bytes per
                // index.
                unsafe {
                    _mm256_storeu_si256(to.as_mut_ptr().add(i * STEP * 2 + 32 * half).cast(), pairs)
                };
            }
        }
    }
    let bad =
        _mm256_movemask_ps(_mm256_castsi256_ps(negative)) != 0 || _mm256_movemask_epi8(below) != -1;
    let done = steps * STEP;
    let flags = tail(&from[done * 4..], &mut to[done * W..]);
    flags | if bad { 1 << 63 } else { 0 }
}

/// The byte shuffles of [`compact_i64_avx2`], one per vector `j` of a step: in each
/// 128-bit lane (whose two 64-bit indices are, in the upper lane, the vector's third and
/// fourth), the low `w` bytes of both indices go to `w`-byte slots `2j` and `2j + 1`, and
/// every other byte is zeroed (-1 selects zero).
#[cfg(target_arch = "x86_64")]
const fn shuffle_masks(w: usize) -> [[i8; 32]; 4] {
    let mut masks = [[-1i8; 32]; 4];
    if w > 2 {
        // Four slots of w bytes would not fit a lane; `compact_as` never calls the scan
        // with them, but compiles it for every width.
        return masks;
    }
    let mut at = 0;
    // Every (vector, lane, index, byte), as `at`'s digits; `for` is not allowed in const fn.
    while at < 4 * 2 * 2 * w {
        let (j, lane, index, byte) = (at / (4 * w), at / (2 * w) % 2, at / w % 2, at % w);
        masks[j][16 * lane + (2 * j + index) * w + byte] = (8 * index + byte) as i8;
        at += 1;
    }
    masks
}

/// The vector instructions a scan may use, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Vectors {
    /// The target's baseline (SSE2 on x86-64, NEON on AArch64).
    Baseline,
    /// x86-64 with AVX2.
    Avx2,
    /// x86-64 with AVX-512 (F, BW and VL).
    Avx512,
}

/// The widest [`Vectors`] this CPU has (`std` caches the detection).
fn vectors() -> Vectors {
    #[cfg(target_arch = "x86_64")]
    let found = {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512bw") && has!("avx512vl") {
            Vectors::Avx512
        } else if has!("avx2") {
            Vectors::Avx2
        } else {
            Vectors::Baseline
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let found = Vectors::Baseline;
    // Tests run each narrower build too.
    #[cfg(test)]
    let found = found.min(tests::UP_TO.with(std::cell::Cell::get));
    found
}

/// Runs `scan`, a loop over index bytes, compiled for the widest vectors the CPU has.
/// SSE2, the x86-64 baseline, has no 64-bit compare and no narrowing move, and its
/// compact of i64 indices ran about 1.25x the time of the AVX-512 build on 64 MiB
/// (BENCHMARKS.md). A block of [`BLOCK`] indices pays for the detection, a few loads of
/// cached words.
#[inline(always)]
pub(crate) fn widest<R>(scan: impl FnOnce() -> R) -> R {
    match vectors() {
        // SAFETY: `vectors` says Avx512 only where the CPU has every feature `avx512` is
        // compiled for.
        #[cfg(target_arch = "x86_64")]
        Vectors::Avx512 => unsafe { avx512(scan) },
        // SAFETY: `vectors` says Avx2 only where the CPU has AVX2.
        #[cfg(target_arch = "x86_64")]
        Vectors::Avx2 => unsafe { avx2(scan) },
        _ => scan(),
    }
}

/// `scan()`, with `scan` inlined and compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn avx512<R>(scan: impl FnOnce() -> R) -> R {
    scan()
}

/// `scan()`, with `scan` inlined and compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2<R>(scan: impl FnOnce() -> R) -> R {
    scan()
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// The widest [`Vectors`] this thread's scans may use.
        pub(super) static UP_TO: std::cell::Cell<Vectors> =
            const { std::cell::Cell::new(Vectors::Avx512) };
    }

    /// A xorshift generator of test values from `seed` (not zero).
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn every_build_of_the_scans_agrees() {
        // Random values in [-350, 350) against s = 300: some out of range at either end.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let s = 300usize;
        let values: Vec<i64> = (0..3 * BLOCK + 17)
            .map(|_| (next() % 700) as i64 - 350)
            .collect();
        let cases = [DType::I64, DType::I32, DType::I16, DType::U32];
        let levels = [Vectors::Baseline, Vectors::Avx2, Vectors::Avx512];
        // Per build, per dtype: the first bad index, whether the compact passed, and the
        // compact of the good indices.
        type Outcome = (Option<usize>, bool, Vec<u8>);
        let results: Vec<Vec<Outcome>> = levels
            .iter()
            .map(|&level| {
                UP_TO.with(|up_to| up_to.set(level));
                let results = cases
                    .iter()
                    .map(|&dtype| {
                        let bytes: Vec<u8> = values
                            .iter()
                            .flat_map(|&v| {
                                let wide = match dtype {
                                    DType::U32 => v.unsigned_abs().to_le_bytes(),
                                    _ => v.to_le_bytes(),
                                };
                                wide[..dtype.size()].to_vec()
                            })
                            .collect();
                        let mut out = vec![0u8; 2 * values.len()];
                        let ok = compact_into(dtype, &bytes, s, 2, &mut out);
                        // The first bad index, then only good ones.
                        let in_range: Vec<u8> = bytes
                            .chunks_exact(dtype.size())
                            .filter(|e| first_bad(dtype, e, s).is_none())
                            .flatten()
                            .copied()
                            .collect();
                        let mut good = vec![0u8; in_range.len() / dtype.size() * 2];
                        assert!(compact_into(dtype, &in_range, s, 2, &mut good));
                        (first_bad(dtype, &bytes, s), ok, good)
                    })
                    .collect();
                UP_TO.with(|up_to| up_to.set(Vectors::Avx512));
                results
            })
            .collect();
        assert!(results[0].iter().all(|(bad, ok, _)| bad.is_some() && !ok));
        assert_eq!(results[0], results[1]);
        assert_eq!(results[0], results[2]);
    }

    #[test]
    fn every_build_of_the_avx2_compacts_agrees_at_any_length_and_value() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for (dtype, min, max) in [
            (DType::I64, i64::MIN, i64::MAX),
            (DType::I32, i32::MIN as i64, i32::MAX as i64),
        ] {
            for (width, s) in [(1, 200usize), (1, 256), (2, 300), (2, 65536)] {
                let si = s as i64;
                let bad_values = [si, -si - 1, max, min, max - si + 1, min + si];
                for len in [0, 1, 15, 16, 17, 31, 32, 33, 100, BLOCK, BLOCK + 21] {
                    let good: Vec<i64> = (0..len)
                        .map(|_| (next() % (2 * s as u64)) as i64 - si)
                        .collect();
                    // In range at both ends, then each bad value at a few places.
                    let mut inputs = vec![good.clone()];
                    if len > 1 {
                        let mut ends = good.clone();
                        (ends[0], ends[len - 1]) = (-si, si - 1);
                        inputs.push(ends);
                    }
                    for (b, &bad) in bad_values.iter().enumerate() {
                        for at in [0, len / 2, len.saturating_sub(1)]
                            .into_iter()
                            .filter(|_| len > 0)
                        {
                            let mut values = good.clone();
                            values[(at + b) % len] = bad;
                            inputs.push(values);
                        }
                    }
                    for values in inputs {
                        let bytes: Vec<u8> = values
                            .iter()
                            .flat_map(|v| v.to_le_bytes()[..dtype.size()].to_vec())
                            .collect();
                        let outcomes: Vec<(bool, Vec<u8>)> = [Vectors::Baseline, Vectors::Avx2]
                            .into_iter()
                            .map(|level| {
                                UP_TO.with(|up_to| up_to.set(level));
                                let mut out = vec![0u8; width * len];
                                let ok = compact_into(dtype, &bytes, s, width, &mut out);
                                UP_TO.with(|up_to| up_to.set(Vectors::Avx512));
                                (ok, out)
                            })
                            .collect();
                        let ok = outcomes[0].0;
                        let case = format!("{dtype:?}, width {width}, s {s}, {len} indices");
                        assert_eq!(ok, first_bad(dtype, &bytes, s).is_none(), "{case}");
                        assert_eq!(outcomes[1].0, ok, "{case}");
                        if ok {
                            assert_eq!(outcomes[1].1, outcomes[0].1, "{case}");
                        }
                    }
                }
            }
        }
    }

    fn bytes_i64(v: &[i64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn finds_the_first_bad_index() {
        assert_eq!(first_bad(DType::I64, &bytes_i64(&[0, -3, 2, -1]), 3), None);
        assert_eq!(first_bad(DType::I64, &bytes_i64(&[0, 3, -4]), 3), Some(1));
        assert_eq!(first_bad(DType::I64, &bytes_i64(&[i64::MIN]), 3), Some(0));
        assert_eq!(first_bad(DType::U8, &[0, 2, 255, 3], 3), Some(2));
        let u64s: Vec<u8> = [2u64, u64::MAX]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(first_bad(DType::U64, &u64s, 3), Some(1));
        // Every value near the bounds and the extremes, against the definition.
        for s in [
            1usize,
            3,
            1 << 20,
            1 << 61,
            (1 << 61) + 1,
            i64::MAX as usize,
            usize::MAX,
        ] {
            let si = s as i128;
            let values = [
                i64::MIN,
                i64::MIN + 1,
                -(s as i64) - 1,
                -(s as i64),
                -1,
                0,
                1,
                s as i64 - 1,
                s as i64,
                i64::MAX - 1,
                i64::MAX,
            ];
            for k in values {
                let want = (k as i128 >= -si && (k as i128) < si)
                    .then_some(())
                    .is_none();
                let got = first_bad(DType::I64, &bytes_i64(&[0, k]), s) == Some(1);
                assert_eq!(got, want, "i64 {k} against {s}");
                let u = k as u64;
                let want = (u as u128) >= s as u128;
                let got = first_bad(DType::U64, &u.to_le_bytes(), s) == Some(0);
                assert_eq!(got, want, "u64 {u} against {s}");
            }
        }
        let mut compact = [0u8; 8];
        assert!(compact_into(
            DType::I64,
            &bytes_i64(&[0, -3, 2, -1]),
            3,
            2,
            &mut compact
        ));
        assert_eq!(compact, [0, 0, 0, 0, 2, 0, 2, 0]);
        let mut bytes = [9u8; 4];
        assert!(compact_into(
            DType::I16,
            &[0, 0, 0, 255, 255, 0, 0, 255],
            256,
            1,
            &mut bytes
        ));
        assert_eq!(bytes, [0, 0, 255, 0]);
        assert!(!compact_into(
            DType::I64,
            &bytes_i64(&[0, 3, -4, 1]),
            3,
            2,
            &mut compact
        ));
        assert!(!compact_into(DType::U64, &u64s, 3, 2, &mut compact[..4]));
        let mut wide = [0u8; 8];
        assert!(compact_into(
            DType::I32,
            &[5, 0, 0, 0, 255, 255, 255, 255],
            1 << 20,
            4,
            &mut wide
        ));
        assert_eq!(wide, [5, 0, 0, 0, 255, 255, 15, 0]);
        // Scans long enough to split: from this thread (beside the global pool's threads),
        // lent a pool of three, and on one thread.
        long_scans();
        crate::Pool::new(3).unwrap().run(long_scans);
        threads::serial(long_scans);
    }

    /// [`first_bad`] and [`compact_into`] on scans long enough to split.
    fn long_scans() {
        let mut many = vec![1i64; 3 * PARALLEL_FROM];
        many[2 * PARALLEL_FROM + 5] = -9;
        many[2 * PARALLEL_FROM + 7] = 9;
        assert_eq!(
            first_bad(DType::I64, &bytes_i64(&many), 4),
            Some(2 * PARALLEL_FROM + 5)
        );
        let mut out = vec![0u8; 2 * many.len()];
        assert!(!compact_into(DType::I64, &bytes_i64(&many), 4, 2, &mut out));
        many[2 * PARALLEL_FROM + 5] = -1;
        many[2 * PARALLEL_FROM + 7] = 3;
        assert!(compact_into(DType::I64, &bytes_i64(&many), 4, 2, &mut out));
        let want: Vec<u8> = many
            .iter()
            .flat_map(|&k| (k.rem_euclid(4) as u16).to_le_bytes())
            .collect();
        assert_eq!(out, want);
    }

    /// Every layout of `compact_strided`: shapes of rank 0 to 4 whose dims are nested in a
    /// random order, with gaps, padded, walked backwards or of size 1 with any stride, some as large
    /// as a parallel scan and some with a tile's edges cut short, against the row-major
    /// reading of each position; and a bad index anywhere fails the copy.
    #[test]
    fn strided_compacts_read_every_position_row_major() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |below: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % below as u64) as usize
        };
        let s = 1000usize;
        for case in 0..300 {
            let rank = next(5);
            let mut shape: Vec<usize> = (0..rank)
                .map(|_| [1, 2, 3, 17, 64, 65, 130][next(7)])
                .collect();
            if case % 50 == 0 && rank >= 2 {
                shape[0] = 300;
                shape[rank - 1] = 500;
            }
            // At most a million positions.
            while shape.iter().product::<usize>() > 1 << 20 {
                let largest = (0..rank).max_by_key(|&d| shape[d]).expect("a dim");
                shape[largest] /= 2;
            }
            let mut order: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                order.swap(i, next(i + 1));
            }
            let mut strides = vec![0isize; rank];
            // Elements one apart or, as in a view of every other one, two apart.
            let (mut extent, mut offset) = (1 + next(2), next(3));
            for &d in order.iter().rev() {
                if shape[d] == 1 && next(4) == 0 {
                    strides[d] = [7, -3, 1 << 20][next(3)];
                    continue;
                }
                strides[d] = extent as isize;
                if next(2) == 0 {
                    offset += (shape[d] - 1) * extent;
                    strides[d] = -strides[d];
                }
                extent *= shape[d] + next(2);
            }
            let values: Vec<i64> = (0..offset + extent + 1)
                .map(|_| next(2 * s) as i64 - s as i64)
                .collect();
            let bytes = bytes_i64(&values);
            let view = TensorView::new(DType::I64, &shape, &strides, offset, &bytes).unwrap();
            let count: usize = shape.iter().product();
            // The row-major reading, normalized.
            let mut want = Vec::with_capacity(2 * count);
            for flat in 0..count {
                let at = offset as isize + offset_of(flat, &shape, &strides);
                let k = values[at as usize];
                want.extend_from_slice(&(k.rem_euclid(s as i64) as u16).to_le_bytes());
            }
            let mut out = vec![0u8; 2 * count];
            assert!(
                compact_strided(&view, s, 2, &mut out),
                "{shape:?} {strides:?}"
            );
            assert_eq!(out, want, "{shape:?} {strides:?} +{offset}");
            // One bad index, at a random position, fails the copy.
            let mut bad = values.clone();
            let flat = next(count);
            let at = offset as isize + offset_of(flat, &shape, &strides);
            bad[at as usize] = [s as i64, -(s as i64) - 1][next(2)];
            let bytes = bytes_i64(&bad);
            let view = TensorView::new(DType::I64, &shape, &strides, offset, &bytes).unwrap();
            assert!(
                !compact_strided(&view, s, 2, &mut out),
                "{shape:?} {strides:?}"
            );
        }
    }
}
