"""scatter_ and out= write the caller's memory, in place, by PyTorch's rules."""

import numpy as np
import pytest

import scatterjit
from conftest import DTYPES, REDUCTIONS, reference_scatter, same, strided, supports, values


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_scatter_inplace_matches_numpy(rng, dtype, name):
    reduction = REDUCTIONS[name]
    if not supports(reduction, dtype):
        tensor = values(rng, dtype, (3,))
        before = tensor.copy()
        with pytest.raises(TypeError, match=f"reduction {reduction} is not supported for dtype"):
            scatterjit.scatter_(tensor, 0, np.array([0]), tensor[1:2].copy(), reduce=name)
        same(tensor, before)
        return
    for trial in range(8):
        rank = int(rng.integers(1, 4))
        shape = [int(rng.integers(1, 6)) for _ in range(rank)]
        dim = int(rng.integers(-rank, rank))
        index_shape = [int(rng.integers(1, n + 1)) for n in shape]
        # src at least as large as index in every dim: only the part index covers is read.
        src_shape = [n + int(rng.integers(0, 3)) for n in index_shape]
        tensor = strided(rng, values(rng, dtype, shape))
        index = rng.integers(-shape[dim], shape[dim], index_shape)
        src = strided(rng, values(rng, dtype, src_shape), writable=False)
        include_self = bool(trial % 2)
        expected = reference_scatter(tensor, index, src, dim, reduction, include_self)
        before = tensor.__array_interface__["data"][0]
        result = scatterjit.scatter_(tensor, dim, index, src, reduce=None if name == "none" else name, include_self=include_self)
        assert result is tensor and tensor.__array_interface__["data"][0] == before
        same(tensor, expected)


@pytest.mark.parametrize("value", [2, 2.5, True, np.float32(-1.5), np.int8(3), np.array(7)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int16, np.uint8], ids=str)
def test_scalar_src_is_broadcast(dtype, value):
    tensor = np.zeros((3, 4), dtype=dtype)
    index = np.array([[0, -1], [2, 2]])
    scatterjit.scatter_(tensor, 1, index, value, reduce="add")
    expected = np.zeros((3, 4), dtype=dtype)
    v = np.asarray(value).astype(dtype)
    expected[0, 0] += v
    expected[0, 3] += v
    expected[1, 2] += v + v
    same(tensor, expected)


def test_scalar_src_bfloat16_rounds_like_torch():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tensor = np.zeros(3, dtype=ml_dtypes.bfloat16)
    scatterjit.scatter_(tensor, 0, np.array([1]), 1.00390625)  # halfway: rounds to even
    same(tensor, np.array([0, 1.0, 0], dtype=ml_dtypes.bfloat16))
    scatterjit.scatter_(tensor, 0, np.array([2]), 3.3)
    same(tensor, np.array([0, 1.0, np.float32(3.3)], dtype=ml_dtypes.bfloat16))


def test_include_self_false_starts_from_identity():
    tensor = np.array([10.0, 10.0, 10.0])
    scatterjit.scatter_(tensor, 0, np.array([0, 0, 2]), np.array([1.0, 2.0, 5.0]), reduce="amax", include_self=False)
    same(tensor, np.array([2.0, 10.0, 5.0]))
    tensor = np.array([10, 10, 10])
    scatterjit.scatter_(tensor, 0, np.array([0, 0]), np.array([1, 2]), reduce="mean", include_self=False)
    same(tensor, np.array([1, 10, 10]))


def test_kernel_scatter_in_place_writes_a_view(rng):
    base = np.zeros((4, 10), dtype=np.float32)
    view = base[::-1, 1::2]  # negative and non-unit strides, still the caller's memory
    k = scatterjit.kernel("scatter_elements.f32.i64.r2.a1.add")
    index = np.array([[0, 4], [4, 4], [1, 2], [-1, 0]])
    assert k.scatter_in_place(view, index, 1.0) is view
    expected = np.zeros((4, 5), dtype=np.float32)
    for r, row in enumerate(index):
        for c in row:
            expected[r, c] += 1
    same(view, expected)
    assert base[:, ::2].sum() == 0  # the elements between are untouched
