"""Every kind of bad input is a Python exception with the library's message, and nothing
is written."""

import numpy as np
import pytest

import scatterjit


def test_out_of_bounds_is_index_error_naming_value_and_position():
    data = np.zeros((2, 5), dtype=np.float32)
    index = np.array([[0, 1], [2, -7]])
    with pytest.raises(IndexError, match=r"index -7 at indices\[1, 1\] is out of bounds for axis 1 of size 5"):
        scatterjit.scatter_elements(data, index, np.ones((2, 2), np.float32), axis=1)
    with pytest.raises(IndexError, match=r"gather: index 9 at indices\[0\]"):
        scatterjit.gather(data, np.array([9]), axis=1)
    with pytest.raises(IndexError, match=r"gather_elements: index 5 at indices\[0, 0\]"):
        scatterjit.gather_elements(data, np.array([[5]]), axis=1)


def test_nothing_is_written_on_error():
    tensor = np.arange(10.0).reshape(2, 5)
    before = tensor.copy()
    index = np.array([[0, 1, 2], [3, 4, 5]])  # the last one is out of bounds
    with pytest.raises(IndexError, match=r"index 5 at indices\[1, 2\]"):
        scatterjit.scatter_(tensor, 1, index, 1.0, reduce="add")
    np.testing.assert_array_equal(tensor, before)
    out = np.full((2, 3), -1.0)
    with pytest.raises(IndexError):
        scatterjit.gather_elements(tensor, index, axis=1, out=out)
    assert (out == -1.0).all()


@pytest.mark.parametrize(
    "call, kind, message",
    [
        (lambda: scatterjit.gather(np.zeros(3), np.array([0.5])), TypeError, "indices have dtype f64, expected an integer dtype"),
        (lambda: scatterjit.scatter_elements(np.zeros(3), np.array([0]), np.zeros(1, np.float32)), TypeError, "updates has dtype f32, expected data's dtype f64"),
        (lambda: scatterjit.scatter_elements(np.zeros(3, bool), np.array([0]), np.zeros(1, bool), reduction="mean"), TypeError, "reduction mean is not supported for dtype bool"),
        (lambda: scatterjit.gather(np.array([1, "b"], dtype=object), np.array([0])), TypeError, "numpy dtype object"),
        (lambda: scatterjit.scatter_elements(np.array(["a"]), np.array([0]), np.array(["b"]), reduction="add"), TypeError, "reduction add is not supported for dtype string"),
        (lambda: scatterjit.scatter_elements(np.array(["a"]), np.array([0]), np.array([1.0])), TypeError, "updates has dtype f64, expected data's dtype string"),
        (lambda: scatterjit.gather(np.zeros(3, ">f4"), np.array([0])), TypeError, "big-endian"),
        (lambda: scatterjit.scatter_elements(np.zeros(3), np.array([0]), np.zeros(1), reduction="avg"), ValueError, 'unknown reduction "avg"'),
        (lambda: scatterjit.gather(np.zeros(3), np.array([0]), axis=1), ValueError, "gather: axis 1 is out of range for rank 1"),
        (lambda: scatterjit.gather_elements(np.zeros((2, 2)), np.array([0])), ValueError, "indices has rank 1, expected"),
        (lambda: scatterjit.scatter_elements(np.zeros((2, 2)), np.zeros((3, 2), int), np.zeros((3, 2)), axis=1), ValueError, r"indices.shape\[0\] = 3 must be <="),
        (lambda: scatterjit.gather(np.zeros((2, 2)), np.array([0]), out=np.zeros(2)), ValueError, "invalid view of output"),
        (lambda: scatterjit.kernel("scatter_elements.f32.i64.r2"), ValueError, "invalid kernel key"),
        (lambda: scatterjit.kernel("gather.f32.i64.r1.q1.a0").run(np.zeros(3), np.array([0])), TypeError, "the operands need kernel gather.f64"),
        (lambda: scatterjit.gather(np.zeros(3), np.zeros(3, dtype=[("a", "u1"), ("b", "<i8")])["b"]), ValueError, "not a multiple of its element size"),
    ],
)
def test_invalid_input(call, kind, message):
    with pytest.raises(kind, match=message):
        call()


def test_read_only_target_is_refused_never_written():
    tensor = np.zeros(4)
    tensor.flags.writeable = False
    with pytest.raises(ValueError, match="tensor is read-only"):
        scatterjit.scatter_(tensor, 0, np.array([1]), 1.0)
    assert (tensor == 0).all()
    with pytest.raises(ValueError, match="out is read-only"):
        scatterjit.gather(np.arange(4.0), np.array([1]), out=np.broadcast_to(np.zeros(1), (1,)))
    with pytest.raises(TypeError, match="tensor must be a numpy array or a tensor with __dlpack__"):
        scatterjit.scatter_([0.0, 0.0], 0, np.array([1]), 1.0)


def test_output_overlapping_an_input_is_refused():
    tensor = np.zeros(6)
    with pytest.raises(ValueError, match="the output overlaps updates in memory"):
        scatterjit.scatter_(tensor[:3], 0, np.array([0, 1]), tensor[2:5][::-1])
    with pytest.raises(ValueError, match="overlaps data"):
        scatterjit.gather(tensor, np.array([0, 1]), out=tensor[4:])
    assert (tensor == 0).all()


def test_overlapping_writable_view_is_refused():
    tensor = np.zeros(4)
    overlapping = np.lib.stride_tricks.as_strided(tensor, shape=(3, 2), strides=(8, 8))
    with pytest.raises(ValueError, match="makes elements overlap"):
        scatterjit.scatter_(overlapping, 1, np.array([[0], [0], [0]]), 1.0)


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError):
        scatterjit.gather(np.zeros(3), np.array([0]), axis="0")
    with pytest.raises(TypeError):
        scatterjit.kernel(3)
