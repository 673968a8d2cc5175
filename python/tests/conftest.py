"""Shared helpers: random arrays of every dtype in random layouts, and numpy references."""

import zlib

import numpy as np
import pytest

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 cases are skipped without it
    BF16 = None

FLOATS = [np.float16, np.float32, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
COMPLEX = [np.complex64, np.complex128]
DTYPES = [np.dtype(t) for t in FLOATS + INTS + COMPLEX + [np.bool_]] + ([BF16] if BF16 else [])
INDEX_DTYPES = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32)]
# Every name the library accepts, with the canonical reduction it means.
REDUCTIONS = {
    "none": "none", "add": "add", "sum": "add", "mul": "mul", "prod": "mul",
    "multiply": "mul", "max": "max", "amax": "max", "min": "min", "amin": "min",
    "mean": "mean",
}


def supports(reduction, dtype):
    """The library's table: complex takes none/add/mul, bool everything but mean."""
    if dtype.kind == "c":
        return reduction in ("none", "add", "mul")
    if dtype.kind == "b":
        return reduction != "mean"
    return True


def values(rng, dtype, shape):
    """Random elements of `dtype`: small integers (so products and sums stay exact enough
    to compare with numpy's own wrapping), floats in [-4, 4)."""
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(0, 8, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.uniform(-4, 4, shape) + 1j * rng.uniform(-4, 4, shape)).astype(dtype)
    return rng.uniform(-4, 4, shape).astype(np.float32).astype(dtype)


def strided(rng, array, writable=True):
    """`array`'s values in a random layout: each dim reversed or stepped over a larger
    buffer, sometimes transposed. A read-only input may instead become a zero-stride
    broadcast of its first slice along one dim (other values: compute references from
    the returned array)."""
    if not writable and array.ndim and array.size and rng.random() < 0.25:
        # The first slice along dim d, repeated with stride 0.
        d = int(rng.integers(array.ndim))
        first = np.take(array, [0], axis=d)
        array = np.broadcast_to(first, array.shape)
        return array
    if array.ndim == 0:
        return array.copy()
    steps = [int(rng.choice([1, 2, -1, -2])) for _ in range(array.ndim)]
    big_shape = [max(1, n * abs(s)) for n, s in zip(array.shape, steps)]
    big = np.zeros(big_shape, dtype=array.dtype)
    view = big[tuple(slice(None, None, s) for s in steps)]
    view = view[tuple(slice(0, n) for n in array.shape)]
    view[...] = array
    assert view.shape == array.shape
    if array.ndim >= 2 and rng.random() < 0.3:
        # The same values, stored transposed, seen through a transposed view.
        t = np.ascontiguousarray(array.swapaxes(0, 1)).swapaxes(0, 1)
        if np.shares_memory(t, array):
            t = t.copy()
        return t
    return view


def random_indices(rng, dtype, shape, size):
    """Indices along an axis of `size`: negative ones too where the dtype is signed."""
    lo = -size if dtype.kind == "i" and size <= np.iinfo(dtype).max else 0
    return rng.integers(lo, size, shape).astype(dtype)


def full_index(indices, axis):
    """The tuple of index arrays that addresses, for every position p of `indices`,
    p with coordinate `axis` replaced by indices[p] (numpy's ufunc.at form)."""
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices.astype(np.int64)
    return tuple(grid)


def identity(reduction, dtype):
    if reduction == "mean":
        return 0
    if dtype.kind == "b":
        return reduction in ("mul", "min")
    if reduction == "add":
        return -0.0 if dtype.kind in "fVc" else 0
    if reduction == "mul":
        return 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if reduction == "max" else info.max
    return -np.inf if reduction == "max" else np.inf


def reference_scatter(data, indices, updates, axis, reduction, use_init_val):
    """ScatterElements with numpy: put_along_axis for none, ufunc.at for reductions,
    a sum and a count for mean."""
    out = np.array(data, copy=True)
    size = data.shape[axis]
    idx = np.where(indices < 0, indices.astype(np.int64) + size, indices)
    upd = updates[tuple(slice(0, n) for n in indices.shape)]
    where = full_index(idx, axis)
    if reduction == "none":
        fits = all(n == m for d, (n, m) in enumerate(zip(idx.shape, data.shape)) if d != axis % data.ndim)
        if fits and all(len(set(line)) == len(line) for line in np.moveaxis(idx, axis, -1).reshape(-1, idx.shape[axis]).tolist()):
            np.put_along_axis(out, idx, upd, axis)
            return out
        # Duplicates: the last update in row-major order wins, as sequential assignment.
        for p in np.ndindex(*idx.shape):
            target = list(p)
            target[axis] = idx[p]
            out[tuple(target)] = upd[p]
        return out
    if not use_init_val:
        out[where] = identity(reduction, data.dtype)
    if reduction == "mean":
        wide = np.float32 if data.dtype.kind == "f" and data.dtype.itemsize <= 4 or data.dtype == BF16 else None
        if data.dtype.kind in "iu":
            total = out.astype(object)
            np.add.at(total, where, upd.astype(object))
        else:
            total = out.astype(wide or data.dtype)
            np.add.at(total, where, upd.astype(wide or data.dtype))
        count = np.full(data.shape, 1 if use_init_val else 0, dtype=np.int64)
        np.add.at(count, where, 1)
        hit = count > 0
        if data.dtype.kind in "iu":
            res = out.astype(object)
            res[hit] = total[hit] // count[hit]
            return res.astype(data.dtype)
        res = total.copy()
        res[hit] = total[hit] / count[hit].astype(total.dtype)
        return res.astype(data.dtype)
    if data.dtype.kind == "b":
        ufunc = {"add": np.logical_or, "max": np.logical_or, "mul": np.logical_and, "min": np.logical_and}[reduction]
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    ufunc.at(out, where, upd)
    return out


def same(a, b):
    """Bit-identical results, NaN compared as a class."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    if a.dtype.kind in "fc" or a.dtype == BF16:
        wide = np.float32 if a.dtype == BF16 else np.complex128
        fa, fb = a.astype(wide), b.astype(wide)
        nan = np.isnan(fa)
        assert (nan == np.isnan(fb)).all()
        a, b = a[~nan], b[~nan]
    assert a.tobytes() == b.tobytes(), f"\n{a}\n!=\n{b}"


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def torch_or_skip():
    return pytest.importorskip("torch")
