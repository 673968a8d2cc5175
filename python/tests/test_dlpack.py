"""DLPack: any object with __dlpack__ is read and written without a copy; results go back
through numpy's own __dlpack__."""

import numpy as np
import pytest

import scatterjit
from conftest import reference_scatter, same, strided, values


class Producer:
    """Exposes only the DLPack protocol of a numpy array, so the call takes the DLPack
    path rather than numpy's C-API."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


DLPACK_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                 np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", [np.dtype(t) for t in DLPACK_DTYPES], ids=str)
def test_inputs_through_dlpack(rng, dtype):
    for _ in range(6):
        data = strided(rng, values(rng, dtype, (4, 5)), writable=False)
        indices = strided(rng, rng.integers(-5, 5, (3, 5)), writable=False)
        updates = strided(rng, values(rng, dtype, (3, 5)), writable=False)
        expected = reference_scatter(data, indices, updates, 1, "none", True)
        got = scatterjit.scatter_elements(Producer(data), Producer(indices), Producer(updates), axis=1)
        same(got, expected)
        same(scatterjit.gather(Producer(data), Producer(indices), axis=1), np.take(data, indices, axis=1))


def test_in_place_through_dlpack_writes_the_producers_memory(rng):
    base = np.zeros((6, 8), dtype=np.float32)
    view = base[::-2, 1::2]  # negative and non-unit strides
    index = np.array([[0, -1], [1, 2], [3, 3]])
    scatterjit.scatter_(Producer(view), 1, Producer(index), np.float32(2.0), reduce="add")
    expected = np.zeros((3, 4), dtype=np.float32)
    reference = reference_scatter(expected, index, np.full((3, 2), 2.0, np.float32), 1, "add", True)
    same(view, reference)
    assert base[:, ::2].sum() == 0


def test_read_only_dlpack_tensor_is_refused():
    tensor = np.zeros(4, dtype=np.float32)
    tensor.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="read-only|readonly|writ"):
        scatterjit.scatter_(Producer(tensor), 0, np.array([0]), 1.0)
    assert (tensor == 0).all()


def test_results_go_back_through_numpys_dlpack(rng):
    data = values(rng, np.dtype(np.float64), (5, 3))
    out = scatterjit.gather(data, np.array([4, 0]))
    back = np.from_dlpack(out)
    assert np.shares_memory(back, out)
    same(back, data[[4, 0]])


def test_zero_stride_dlpack_input():
    row = np.arange(4, dtype=np.int64)
    index = np.broadcast_to(np.array([[2], [0], [3]]), (3, 4))  # stride 0 along dim 1
    got = scatterjit.gather_elements(Producer(np.tile(row * 10, (3, 1))), Producer(index), axis=1)
    same(got, np.array([[20] * 4, [0] * 4, [30] * 4]))
