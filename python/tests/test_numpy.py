"""Results against numpy on random shapes, dtypes, layouts and negative indices."""

import numpy as np
import pytest

import scatterjit
from conftest import (
    BF16, DTYPES, INDEX_DTYPES, REDUCTIONS, random_indices, reference_scatter, same,
    strided, supports, values,
)


def random_problem(rng, dtype, index_dtype, gather=False):
    rank = int(rng.integers(1, 4))
    shape = [int(rng.integers(1, 6)) for _ in range(rank)]
    axis = int(rng.integers(-rank, rank))
    index_shape = [int(rng.integers(1, n + 1)) for n in shape]
    if gather:
        index_shape[axis] = int(rng.integers(1, 7))
    size = shape[axis]
    if index_dtype.kind == "i" and size > np.iinfo(index_dtype).max:
        index_dtype = np.dtype(np.int64)
    data = values(rng, dtype, shape)
    indices = random_indices(rng, index_dtype, index_shape, size)
    return data, indices, axis


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_scatter_elements_matches_numpy(rng, dtype, name):
    reduction = REDUCTIONS[name]
    if not supports(reduction, dtype):
        data = values(rng, dtype, (3,))
        with pytest.raises(TypeError, match=f"reduction {reduction} is not supported for dtype"):
            scatterjit.scatter_elements(data, np.array([0]), data[:1], reduction=name)
        return
    for trial in range(12):
        index_dtype = INDEX_DTYPES[trial % len(INDEX_DTYPES)]
        data, indices, axis = random_problem(rng, dtype, index_dtype)
        updates = values(rng, dtype, indices.shape)
        use_init_val = bool(trial % 3)
        data, indices, updates = (strided(rng, a, False) for a in (data, indices, updates))
        expected = reference_scatter(data, indices, updates, axis, reduction, use_init_val)
        got = scatterjit.scatter_elements(
            data, indices, updates, axis=axis, reduction=name, use_init_val=use_init_val
        )
        same(got, expected)
        assert isinstance(got, np.ndarray) and got.flags.c_contiguous


def test_scatter_none_without_duplicates_is_put_along_axis(rng):
    data = values(rng, np.dtype(np.float32), (6, 9))
    perm = np.argsort(rng.random((6, 9)), axis=1)[:, :5] - 9  # negative: from the back
    updates = values(rng, np.dtype(np.float32), perm.shape)
    expected = data.copy()
    np.put_along_axis(expected, perm + 9, updates, 1)
    same(scatterjit.scatter_elements(data, perm, updates, axis=1), expected)


def test_scatter_add_is_add_at(rng):
    data = values(rng, np.dtype(np.float64), (7, 3))
    indices = rng.integers(-7, 7, (20, 3))
    updates = values(rng, np.dtype(np.float64), (20, 3))
    expected = data.copy()
    np.add.at(expected, (indices % 7, np.arange(3)[None, :]), updates)
    same(scatterjit.scatter_elements(data, indices, updates, reduction="add"), expected)
    expected = data.copy()
    np.maximum.at(expected, (indices % 7, np.arange(3)[None, :]), updates)
    same(scatterjit.scatter_elements(data, indices, updates, reduction="max"), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_elements_is_take_along_axis(rng, dtype):
    for trial in range(12):
        data, indices, axis = random_problem(rng, dtype, INDEX_DTYPES[trial % len(INDEX_DTYPES)], gather=True)
        data, indices = strided(rng, data, False), strided(rng, indices, False)
        # take_along_axis wants data's other dims as large as indices': cut them.
        cut = tuple(slice(None) if d == axis % data.ndim else slice(0, n) for d, n in enumerate(indices.shape))
        expected = np.take_along_axis(data[cut], indices.astype(np.int64), axis)
        same(scatterjit.gather_elements(data, indices, axis=axis), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_is_take(rng, dtype):
    for trial in range(12):
        rank = int(rng.integers(1, 4))
        shape = [int(rng.integers(1, 6)) for _ in range(rank)]
        axis = int(rng.integers(-rank, rank))
        data = values(rng, dtype, shape)
        index_shape = [int(rng.integers(0, 4)) for _ in range(int(rng.integers(0, 3)))]
        indices = random_indices(rng, INDEX_DTYPES[trial % len(INDEX_DTYPES)], index_shape, shape[axis])
        data, indices = strided(rng, data, False), strided(rng, indices, False)
        expected = np.take(data, indices.astype(np.int64), axis=axis)
        same(scatterjit.gather(data, indices, axis=axis), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_of_narrow_rows_is_take(rng, dtype):
    # Large enough that repeated calls run a block of rows at a time (each output row a
    # few picks along the last axis, or picks of a few contiguous elements).
    for shape, axis, picks in [((65536, 6), 1, 4), ((16384, 5, 2), 1, 5), ((4096, 16, 3), -2, 8)]:
        data = values(rng, dtype, shape)
        for trial in range(3):
            indices = random_indices(rng, INDEX_DTYPES[trial], [picks], shape[axis])
            view = data if trial == 0 else strided(rng, data, False)
            expected = np.take(view, indices.astype(np.int64), axis=axis)
            same(scatterjit.gather(view, indices, axis=axis), expected)


def test_out_writes_the_callers_array(rng):
    data = values(rng, np.dtype(np.float32), (5, 8))
    indices = rng.integers(-5, 5, (3, 8))
    buffer = np.zeros((10, 16), dtype=np.float32)
    out = buffer[::-2, ::2]  # a strided, writable view
    out = out[:3]
    assert not out.flags.c_contiguous and out.shape == indices.shape
    assert scatterjit.gather_elements(data, indices, axis=0, out=out) is out
    same(out, np.take_along_axis(data, indices, 0))


def test_out_of_gather_and_scatter(rng):
    data = values(rng, np.dtype(np.int32), (4, 6))
    indices = np.array([3, -1, 0])
    out = np.empty((4, 3), dtype=np.int32)
    assert scatterjit.gather(data, indices, axis=1, out=out) is out
    same(out, np.take(data, indices, axis=1))
    updates = values(rng, np.dtype(np.int32), (4, 3))
    out = np.empty_like(data)[::-1]
    scatterjit.scatter_elements(data, np.broadcast_to(indices, (4, 3)), updates, axis=1, reduction="add", out=out)
    same(out, reference_scatter(data, np.broadcast_to(indices, (4, 3)), updates, 1, "add", True))


def test_lists_and_scalars_are_taken_as_arrays():
    same(scatterjit.gather([[1, 2], [3, 4]], [1, 0]), np.array([[3, 4], [1, 2]]))
    same(scatterjit.gather(np.arange(5), -2), np.array(3))


def test_empty_tensors():
    same(scatterjit.gather(np.zeros((0, 3)), np.array([], dtype=np.int64), axis=1), np.zeros((0, 0)))
    data = np.arange(4.0)
    same(scatterjit.scatter_elements(data, np.zeros(0, dtype=np.int64), np.zeros(0)), data)


@pytest.mark.skipif(BF16 is None, reason="needs ml_dtypes")
def test_bfloat16_results_are_ml_dtypes_arrays(rng):
    data = values(rng, BF16, (4, 4))
    got = scatterjit.gather(data, np.array([0, -1]))
    assert got.dtype == BF16
    same(got, data[[0, -1]])


def test_unicode_arrays(rng):
    words = np.array([["zé", "b", "日本"], ["", "long word", "x"]])
    indices = np.array([[2, -3], [1, 1]])
    same(scatterjit.gather_elements(words, indices, axis=1), np.take_along_axis(words, np.array([[2, 0], [1, 1]]), 1))
    same(scatterjit.gather(words, np.array([-1, 0]), axis=0), words[[1, 0]])
    updates = np.array([["new", "newer"], ["a", "b"]])
    expected = words.copy()
    expected[0, 2], expected[0, 0], expected[1, 1] = "new", "newer", "b"
    same(scatterjit.scatter_elements(words, indices, updates, axis=1), expected)  # data's width


def test_string_results_keep_the_width_and_byte_order_of_data():
    words = np.array([["a", "bb"], ["ccc", ""]], dtype="<U7")
    got = scatterjit.gather(words, np.array([1]), axis=0)
    assert got.dtype == np.dtype("<U7")  # numpy's take keeps it, though "ccc" fits in <U3
    same(got, np.take(words, [1], axis=0))
    got = scatterjit.gather_elements(words, np.array([[0], [0]]), axis=1)
    assert got.dtype == np.dtype("<U7")
    big = words.astype(">U7")
    got = scatterjit.gather(big, np.array([0, 1]), axis=1)
    assert got.dtype == np.dtype(">U7")
    same(got, big)
    # A scattered string longer than data's width widens the result rather than lose text.
    got = scatterjit.scatter_elements(big, np.array([[1]]), np.array([["a long one"]]), axis=1)
    assert got.dtype == np.dtype(">U10")
    assert got[0, 1] == "a long one" and got[1, 0] == "ccc"
    empty = scatterjit.gather(words, np.zeros((0,), dtype=np.int64), axis=0)
    assert empty.dtype == np.dtype("<U7") and empty.shape == (0, 2)
