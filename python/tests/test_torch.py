"""PyTorch CPU tensors through DLPack: in place in their own memory, bit-identical to
torch's scatter_reduce_ / scatter_ / gather / index_select. Runs where torch is installed."""

import zlib

import pytest

import scatterjit

torch = pytest.importorskip("torch")

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.float16, torch.float64, torch.int32,
          torch.int8, torch.uint8, torch.bool, torch.complex64]
REDUCE = {"sum": "sum", "prod": "prod", "amax": "amax", "amin": "amin", "mean": "mean"}


def random_tensor(gen, dtype, shape):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if not dtype.is_floating_point and not dtype.is_complex:
        return torch.randint(0, 8, shape, generator=gen).to(dtype)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 8 - 4).to(dtype)


def supported(dtype, reduce):
    """Where both define the reduction (neither has a bool mean; torch has no complex
    amax/amin, the library no complex mean)."""
    if dtype == torch.bool:
        return reduce != "mean"
    if dtype.is_complex:
        return reduce in ("sum", "prod")
    return True


def assert_bit_identical(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.is_floating_point or a.dtype.is_complex:
        nan = torch.isnan(a)
        assert torch.equal(nan, torch.isnan(b))
        a, b = a[~nan], b[~nan]
    assert torch.equal(a.view(torch.uint8) if a.dtype == torch.bool else a, b.view(torch.uint8) if b.dtype == torch.bool else b), f"{a}\n{b}"


@pytest.mark.parametrize(
    "dtype, reduce", [(d, r) for d in DTYPES for r in REDUCE if supported(d, r)], ids=str
)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_in_place_is_torchs(dtype, reduce, include_self):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{dtype}{reduce}{include_self}".encode()))
    for _ in range(6):
        rank = int(torch.randint(1, 4, (), generator=gen))
        shape = [int(torch.randint(1, 6, (), generator=gen)) for _ in range(rank)]
        dim = int(torch.randint(-rank, rank, (), generator=gen))
        index_shape = [int(torch.randint(1, n + 1, (), generator=gen)) for n in shape]
        index = torch.randint(0, shape[dim], index_shape, generator=gen)
        src = random_tensor(gen, dtype, [n + 1 for n in index_shape])
        tensor = random_tensor(gen, dtype, shape)
        expected = tensor.clone().scatter_reduce_(dim, index, src, REDUCE[reduce], include_self=include_self)
        ptr = tensor.data_ptr()
        assert scatterjit.scatter_(tensor, dim, index, src, reduce=reduce, include_self=include_self) is tensor
        assert tensor.data_ptr() == ptr
        if dtype in (torch.float16, torch.bfloat16) and reduce in ("sum", "prod", "mean"):
            # Where several updates meet, torch may accumulate half floats in f32 and round
            # once; the library rounds after every combine (and sums a mean in f32). Torch
            # leaves the accumulation order open, so these are compared with a tolerance
            # here and bit for bit without duplicates below.
            torch.testing.assert_close(tensor.float(), expected.float(), rtol=2e-2, atol=2e-2)
        else:
            assert_bit_identical(tensor, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean"])
def test_half_floats_without_duplicates_are_bit_identical(dtype, reduce):
    gen = torch.Generator().manual_seed(11)
    tensor = random_tensor(gen, dtype, (5, 9))
    index = torch.stack([torch.randperm(9, generator=gen)[:6] for _ in range(5)])
    src = random_tensor(gen, dtype, (5, 6))
    expected = tensor.clone().scatter_reduce_(1, index, src, reduce)
    scatterjit.scatter_(tensor, 1, index, src, reduce=reduce)
    assert_bit_identical(tensor, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_scatter_in_place_with_negative_indices(dtype):
    gen = torch.Generator().manual_seed(3)
    tensor = random_tensor(gen, dtype, (4, 7))
    index = torch.randint(-7, 7, (4, 5), generator=gen)
    src = random_tensor(gen, dtype, (4, 6))
    if dtype == torch.bfloat16:  # one update per target: no accumulation order involved
        index = torch.stack([torch.randperm(7, generator=gen)[:5] - 7 for _ in range(4)])
    expected = tensor.clone().scatter_reduce_(1, index % 7, src, "sum")  # torch refuses negatives
    ptr = tensor.data_ptr()
    scatterjit.scatter_(tensor, 1, index, src, reduce="sum")
    assert tensor.data_ptr() == ptr
    assert_bit_identical(tensor, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_scatter_assign_and_scalar_value(dtype):
    tensor = torch.zeros(3, 5, dtype=dtype)
    index = torch.tensor([[0, 4], [2, 2], [1, 3]])
    expected = tensor.clone().scatter_(1, index, 3)
    scatterjit.scatter_(tensor, 1, index, 3)
    assert_bit_identical(tensor, expected)
    value = 1.00390625  # between two bfloat16 values: rounds as torch rounds it
    expected = tensor.clone().scatter_(1, index, value)
    scatterjit.scatter_(tensor, 1, index, value)
    assert_bit_identical(tensor, expected)


def test_strided_and_transposed_tensors_are_not_copied():
    base = torch.zeros(6, 10)
    view = base.t()[::2]  # non-contiguous, writable
    index = torch.tensor([[0, 1], [5, 5], [2, 3], [4, 0], [1, 1]])
    expected = view.clone().scatter_reduce_(1, index, torch.ones(5, 2), "sum")
    scatterjit.scatter_(view, 1, index, torch.ones(5, 2), reduce="sum")
    assert_bit_identical(view, expected)
    assert base.sum() == expected.sum()


def test_expanded_index_like_pytorch_geometric():
    gen = torch.Generator().manual_seed(5)
    src = torch.rand(50, 8, generator=gen)
    dst = torch.randint(0, 10, (50,), generator=gen)
    index = dst.view(-1, 1).expand_as(src)  # stride 0 along the features
    out = torch.zeros(10, 8)
    expected = torch.zeros(10, 8).scatter_reduce_(0, index, src, "amax", include_self=False)
    scatterjit.scatter_(out, 0, index, src, reduce="amax", include_self=False)
    assert_bit_identical(out, expected)


def test_out_of_place_ops_match_torch():
    gen = torch.Generator().manual_seed(9)
    data = torch.rand(6, 9, generator=gen)
    index = torch.randint(0, 9, (6, 4), generator=gen)
    got = torch.from_dlpack(scatterjit.gather_elements(data, index, axis=1))
    assert_bit_identical(got, torch.gather(data, 1, index))
    rows = torch.randint(0, 6, (11,), generator=gen)
    out = torch.empty(11, 9)
    assert scatterjit.gather(data, rows, axis=0, out=out) is out
    assert_bit_identical(out, torch.index_select(data, 0, rows))
    updates = torch.rand(6, 4, generator=gen)
    got = torch.from_dlpack(scatterjit.scatter_elements(data, index, updates, axis=1, reduction="add"))
    assert_bit_identical(got, torch.scatter_add(data, 1, index, updates))


def test_bfloat16_out_of_place_through_out():
    data = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    out = torch.empty(2, 4, dtype=torch.bfloat16)
    scatterjit.gather(data, torch.tensor([2, -3]), out=out)
    assert_bit_identical(out, data[[2, 0]])


def test_errors_leave_the_tensor_unchanged():
    tensor = torch.arange(5.0)
    with pytest.raises(IndexError, match=r"index 5 at indices\[1\]"):
        scatterjit.scatter_(tensor, 0, torch.tensor([0, 5]), 1.0, reduce="sum")
    assert torch.equal(tensor, torch.arange(5.0))
    with pytest.raises(ValueError, match="requires grad"):
        scatterjit.scatter_(torch.zeros(3, requires_grad=True), 0, torch.tensor([0]), 1.0)
