"""Side by side with PyTorch: ``python -m scatterjit.bench``.

Times the standard workload suite through scatterjit and, when it is installed, through
PyTorch, in one process, on the same arrays (torch tensors share the numpy arrays'
memory; torch's int64 copy of int32 indices is made once, untimed), with the same timer,
calls of the two taken in turns, and prints the medians and their ratio. Two modes per workload:

- ``new``: a fresh output per call (``scatter_elements`` / ``gather`` / ``gather_elements``
  against ``torch.scatter`` / ``scatter_reduce`` / ``index_select`` / ``gather``);
- ``into``: the caller's buffer (``scatter_`` in place against ``Tensor.scatter_`` /
  ``scatter_reduce_``, and ``out=`` for the gathers). The in-place scatters run again and
  again on one buffer, which changes its values but not the work.

Every workload's result is compared between the two before it is timed. ``--tiny`` runs
two tiny calls instead (a gather of 8 rows of a [1000, 64] table, a scatter add of
[4, 16] into [16, 16]), where the time is the per-call overhead, in ns per call.
``--extra`` runs workloads outside the suite instead (transposed indices, rank-3 and
rank-4 gathers, a scatter along axis 0 with narrow rows, multi-head and f16 GNN scatters,
a shuffle along axis 0, max and min with ``include_self=False``, among them a global max
pool over a sorted batch vector), ``--half`` element-wise reductions of f16 and bf16 (bfloat16
needs ``ml_dtypes``), ``--layouts`` tables, updates and outputs laid out column-major.
``--sweep`` a grid of 145 workloads over ops, dtypes, reductions, ranks, axes and index
layouts, to check that fast paths generalize. ``--mid`` runs eight mid-size calls (2^16
to 2^20 elements), where
waking a thread pool costs as much as the work, in us per call.
"""

import argparse
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

import scatterjit


@dataclass(frozen=True)
class Workload:
    name: str
    op: str  # scatter_elements, gather, gather_elements
    dtype: str
    index_dtype: str
    data: tuple
    indices: tuple
    axis: int
    reduction: str
    pattern: str  # perm, uniform, uniform_rows, sorted_rows (uniform_rows in increasing order)
    expanded: bool = False  # the index is a stride-0 view along the features (PyG style)
    transposed: bool = False  # the index's memory holds its transpose (dims reversed)
    # Operands ("data", "updates", "out": the ``into`` mode's output) laid out column-major.
    column_major: tuple = ()
    # False: each reached element starts from the reduction's identity, not its own value
    # (PyTorch's ``include_self=False``, ONNX's ``use_init_val``), as PyG's max and min do.
    include_self: bool = True


# The suite's workloads, in its order and at its sizes (the same table as the Rust
# library's benchmark suite).
# fmt: off
WORKLOADS = [
    Workload("scatter_none_shuffle_f32",      "scatter_elements", "float32", "int64", (1024, 4096), (1024, 4096),  1, "none", "perm"),
    Workload("scatter_add_gnn_f32",           "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64),  0, "add",  "uniform_rows"),
    Workload("scatter_max_gnn_f32",           "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64),  0, "max",  "uniform_rows"),
    Workload("scatter_mean_gnn_f32",          "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64),  0, "mean", "uniform_rows"),
    Workload("scatter_add_hist_i64",          "scatter_elements", "int64",   "int64", (1, 65536),   (1, 8388608),  1, "add",  "uniform"),
    Workload("scatter_none_shuffle_f16",      "scatter_elements", "float16", "int32", (1024, 4096), (1024, 4096),  1, "none", "perm"),
    Workload("gather_rows_embedding_f32",     "gather",           "float32", "int64", (50000, 256), (200000,),     0, "none", "uniform"),
    Workload("gather_cols_f32",               "gather",           "float32", "int64", (4096, 4096), (1024,),       1, "none", "uniform"),
    Workload("gather_elements_f32",           "gather_elements",  "float32", "int64", (2048, 4096), (2048, 4096),  1, "none", "uniform"),
    Workload("scatter_add_gnn_expanded_f32",  "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64),  0, "add",  "uniform_rows", True),
    Workload("scatter_max_gnn_expanded_f32",  "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64),  0, "max",  "uniform_rows", True),
    Workload("scatter_mean_gnn_expanded_f32", "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64),  0, "mean", "uniform_rows", True),
]

# Workloads outside the suite (``--extra``), of layouts and shapes it lacks: indices laid
# out as their transpose (a column-major index, as ``index.t()`` or a Fortran-ordered
# array passes it, the same values as a dense one), gathers of rank 3 and 4 whose
# trailing dims are a few elements, a scatter along axis 0 with 256-byte rows, the GNN
# scatters of multi-head features (rank 3) and of f16, a shuffle along axis 0, and
# reductions that start from the identity (``include_self=False``): PyG's max of messages,
# an element-wise min, and PyG's global max pool (nodes into their graphs by a sorted
# batch vector).
EXTRA = [
    Workload("gather_elements_transposed_i64", "gather_elements",  "int64",   "int64", (16384, 512),     (16384, 512),    1, "none", "uniform", transposed=True),
    Workload("gather_elements_transposed_f16", "gather_elements",  "float16", "int64", (2048, 2048),     (2048, 2048),    0, "none", "uniform", transposed=True),
    Workload("scatter_min_transposed_i64",     "scatter_elements", "int64",   "int64", (131072, 32),     (131072, 32),    1, "min",  "uniform", transposed=True),
    Workload("scatter_mul_transposed_f64",     "scatter_elements", "float64", "int64", (1024, 4, 256),   (1024, 4, 256),  2, "mul",  "uniform", transposed=True),
    Workload("scatter_add_transposed_f32",     "scatter_elements", "float32", "int64", (8192, 512),      (8192, 512),     0, "add",  "uniform", transposed=True),
    Workload("gather_rank4_slices_f16",        "gather",           "float16", "int64", (64, 4096, 2, 8), (64,),           0, "none", "uniform"),
    Workload("gather_rank3_rows_f32",          "gather",           "float32", "int32", (32768, 16, 8),   (32768,),        0, "none", "uniform"),
    Workload("scatter_add_axis0_rows256_f32",  "scatter_elements", "float32", "int64", (131072, 64),     (131072, 64),    0, "add",  "uniform"),
    Workload("scatter_mean_expanded_rank3_f32", "scatter_elements", "float32", "int64", (50000, 4, 16),  (400000, 4, 16), 0, "mean", "uniform_rows", True),
    Workload("scatter_max_expanded_rank3_f32", "scatter_elements", "float32", "int64", (50000, 4, 16),   (400000, 4, 16), 0, "max",  "uniform_rows", True),
    Workload("scatter_add_expanded_f16",       "scatter_elements", "float16", "int64", (50000, 64),      (400000, 64),    0, "add",  "uniform_rows", True),
    Workload("scatter_none_perm_axis0_f32",    "scatter_elements", "float32", "int64", (4096, 1024),     (4096, 1024),    0, "none", "perm"),
    Workload("scatter_max_expanded_noself_f32", "scatter_elements", "float32", "int64", (50000, 64),     (400000, 64),    0, "max",  "uniform_rows", True, include_self=False),
    Workload("scatter_min_noself_f64",         "scatter_elements", "float64", "int64", (131072, 32),     (131072, 32),    1, "min",  "uniform", include_self=False),
    Workload("scatter_max_pool_sorted_noself_f32", "scatter_elements", "float32", "int64", (128, 64),    (100000, 64),    0, "max",  "sorted_rows", True, include_self=False),
]

# Other operands laid out column-major (``--layouts``), as ``weight.t()`` or a Fortran-ordered
# array passes them: the table of a row gather, the output it writes into, the updates of
# GNN scatters (expanded and materialized indices), GatherElements' data, an in-place
# shuffle's destination.
LAYOUTS = [
    Workload("gather_rows_table_t_f32",        "gather",           "float32", "int64", (100000, 64), (200000,),    0, "none", "uniform", column_major=("data",)),
    Workload("gather_rows_out_t_f32",          "gather",           "float32", "int64", (100000, 64), (200000,),    0, "none", "uniform", column_major=("out",)),
    Workload("scatter_add_expanded_updates_t_f32", "scatter_elements", "float32", "int64", (50000, 64), (400000, 64), 0, "add", "uniform_rows", True, column_major=("updates",)),
    Workload("scatter_add_updates_t_f32",      "scatter_elements", "float32", "int64", (50000, 64),  (400000, 64), 0, "add",  "uniform", column_major=("updates",)),
    Workload("gather_elements_data_t_f32",     "gather_elements",  "float32", "int64", (2048, 4096), (2048, 4096), 1, "none", "uniform", column_major=("data",)),
    Workload("scatter_none_data_t_f32",        "scatter_elements", "float32", "int64", (2048, 4096), (2048, 4096), 1, "none", "perm", column_major=("data",)),
]

# Element-wise reductions of 16-bit floats (``--half``): each combine rounds to the type
# (SPEC.md), where PyTorch keeps an f32 copy and rounds once at the end.
HALF = [
    Workload("scatter_add_elements_f16",       "scatter_elements", "float16",  "int64", (1048576,),   (1048576,),   0, "add",  "uniform"),
    Workload("scatter_add_rows_f16",           "scatter_elements", "float16",  "int64", (128, 8192),  (128, 8192),  1, "add",  "uniform"),
    Workload("scatter_mul_axis0_f16",          "scatter_elements", "float16",  "int32", (4096, 256),  (4096, 256),  0, "mul",  "uniform"),
    Workload("scatter_mean_rows_f16",          "scatter_elements", "float16",  "int64", (1024, 1024), (1024, 1024), 1, "mean", "uniform"),
    Workload("scatter_add_elements_bf16",      "scatter_elements", "bfloat16", "int64", (1048576,),   (1048576,),   0, "add",  "uniform"),
    Workload("scatter_add_rows_bf16",          "scatter_elements", "bfloat16", "int64", (128, 8192),  (128, 8192),  1, "add",  "uniform"),
]

# Tiny calls, where the per-call overhead is the time (``--tiny``): the same two cases as
# the library's per-call overhead example.
TINY = [
    Workload("gather_rows_tiny_f32",          "gather",           "float32", "int64", (1000, 64),   (8,),          0, "none", "uniform"),
    Workload("scatter_add_tiny_f32",          "scatter_elements", "float32", "int64", (16, 16),     (4, 16),       0, "add",  "uniform"),
]

# Mid-size calls (``--mid``): tens of microseconds of work, about what a hand-off to a
# pool thread and back costs.
MID = [
    Workload("gather_mid_rank4_i16",          "gather",           "int16",   "int64", (128, 32, 32, 8), (8,),         1, "none", "uniform"),
    Workload("gather_mid_rows64b_f32",        "gather",           "float32", "int64", (65536, 16),  (16384,),      0, "none", "uniform"),
    Workload("gather_mid_rows1k_f32",         "gather",           "float32", "int64", (4096, 256),  (4096,),       0, "none", "uniform"),
    Workload("gather_mid_rows4k_f32",         "gather",           "float32", "int64", (512, 1024),  (128,),        0, "none", "uniform"),
    Workload("gather_elements_mid_f32",       "gather_elements",  "float32", "int64", (256, 256),   (256, 256),    1, "none", "uniform"),
    Workload("gather_elements_mid_axis0_f32", "gather_elements",  "float32", "int64", (1024, 64),   (1024, 64),    0, "none", "uniform"),
    Workload("scatter_add_mid_f32",           "scatter_elements", "float32", "int64", (256, 256),   (256, 256),    1, "add",  "uniform"),
    Workload("scatter_max_mid_axis0_f32",     "scatter_elements", "float32", "int64", (512, 128),   (512, 128),    0, "max",  "uniform"),
]
# fmt: on


def sweep():
    """A grid of workloads outside every other set (``--sweep``), to check that the fast
    paths generalize: each op over dtypes and reductions, along every axis of a rank-2 and
    a rank-3 shape, with dense, transposed and expanded indices, at about a million
    elements each; Gathers of rows, columns, inner slices and single elements."""
    grid = []

    def add(op, dtype, data, indices, axis, reduction="none", layout="dense"):
        # No duplicate indices for assignments: PyTorch's order among them is its own.
        pattern = "perm" if op == "scatter_elements" and reduction == "none" else "uniform"
        if layout == "expanded":
            pattern = "uniform_rows"
        dims = "x".join(map(str, data))
        if op == "gather":
            dims += f"_n{indices[0]}"
        what = f"{op}_{reduction}" if op == "scatter_elements" else op
        grid.append(Workload(
            f"sweep_{what}_{dtype}_{dims}_ax{axis}_{layout}", op, dtype, "int64", data, indices,
            axis, reduction, pattern, expanded=layout == "expanded", transposed=layout == "transposed",
        ))

    planes = [((2048, 512), 0), ((2048, 512), 1), ((64, 128, 128), 0), ((64, 128, 128), 1), ((64, 128, 128), 2)]
    scatters = [
        ("add", "float32"), ("add", "float64"), ("add", "int32"), ("add", "int64"), ("max", "float32"),
        ("min", "int32"), ("mul", "float64"), ("mean", "float32"), ("none", "float32"), ("none", "int8"),
        ("add", "float16"), ("max", "bfloat16"),
    ]
    for reduction, dtype in scatters:
        for shape, axis in planes:
            add("scatter_elements", dtype, shape, shape, axis, reduction)
    for layout in ("transposed", "expanded"):
        for reduction in ("add", "none", "max"):
            for shape, axis in planes:
                add("scatter_elements", "float32", shape, shape, axis, reduction, layout)
    for dtype in ("float32", "float64", "float16", "int8", "int64"):
        for shape, axis in planes:
            add("gather_elements", dtype, shape, shape, axis)
    for layout in ("transposed", "expanded"):
        for shape, axis in planes:
            add("gather_elements", "float32", shape, shape, axis, layout=layout)
    gathers = [
        ((50000, 64), 100000, 0), ((4096, 1024), 256, 1), ((64, 512, 64), 256, 1), ((100, 100, 100), 50, 2),
        ((1000000,), 500000, 0),
    ]
    for dtype in ("float32", "float16", "int64", "uint8"):
        for shape, picks, axis in gathers:
            add("gather", dtype, shape, (picks,), axis)
    return grid


SWEEP = sweep()

#: Dims at least this large are the ones ``--quick`` divides.
LARGE_DIM = 1024


def scaled(shape, div):
    return tuple(max(1, d // div) if d >= LARGE_DIM else d for d in shape)


def inputs(w, div=1):
    """A workload's arrays, from numpy's default_rng(0): indices, then updates, then data.
    Floats are uniform in [-1, 1), integers in [0, 100)."""
    rng = np.random.default_rng(0)
    data_shape, index_shape = scaled(w.data, div), scaled(w.indices, div)
    size = data_shape[w.axis]
    if w.pattern == "perm":
        indices = np.argsort(rng.random(index_shape), axis=w.axis).astype(w.index_dtype)
    elif w.pattern in ("uniform_rows", "sorted_rows"):
        rows = rng.integers(0, size, index_shape[w.axis]).astype(w.index_dtype)
        if w.pattern == "sorted_rows":
            rows.sort()
        shape = [1] * len(index_shape)
        shape[w.axis] = index_shape[w.axis]
        indices = np.broadcast_to(rows.reshape(shape), index_shape)
        if not w.expanded:
            indices = np.ascontiguousarray(indices)
    else:
        indices = rng.integers(0, size, index_shape).astype(w.index_dtype)
    if w.transposed:
        indices = np.ascontiguousarray(indices.T).T

    def draw(shape):
        if w.dtype == "bfloat16":
            import ml_dtypes

            return rng.uniform(-1, 1, shape).astype(ml_dtypes.bfloat16)
        if np.dtype(w.dtype).kind in "iu":
            return rng.integers(0, 100, shape).astype(w.dtype)
        return rng.uniform(-1, 1, shape).astype(w.dtype)

    updates = draw(index_shape) if w.op == "scatter_elements" else None
    data = draw(data_shape)
    if "data" in w.column_major:
        data = np.asfortranarray(data)
    if "updates" in w.column_major:
        updates = np.asfortranarray(updates)
    return data, indices, updates


def traffic_mb(w, data, indices, updates, out_nbytes):
    """Essential traffic: bytes of data, indices (as materialized), updates and output."""
    index_bytes = int(np.prod(indices.shape)) * indices.dtype.itemsize
    update_bytes = updates.nbytes if updates is not None else 0
    return (data.nbytes + index_bytes + update_bytes + out_nbytes) / 1e6


TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}


def calls(w, data, indices, updates, torch):
    """For each system, a (new, into) pair of zero-argument calls on the same memory."""
    axis = w.axis
    if w.op == "scatter_elements":
        buffer = data.copy(order="K")
        ours = (
            lambda: scatterjit.scatter_elements(data, indices, updates, axis, w.reduction, w.include_self),
            lambda: scatterjit.scatter_(
                buffer, axis, indices, updates, reduce=w.reduction, include_self=w.include_self
            ),
        )
    else:
        f = scatterjit.gather if w.op == "gather" else scatterjit.gather_elements
        out = f(data, indices, axis)
        if "out" in w.column_major:
            out = np.asfortranarray(out)
        ours = (lambda: f(data, indices, axis), lambda: f(data, indices, axis, out=out))
    if torch is None:
        return {"scatterjit": ours}
    td, tu = as_torch(torch, data), None if updates is None else as_torch(torch, updates)
    if w.expanded:
        # The same stride-0 view as numpy's: PyTorch Geometric's index.view(-1, 1).expand_as(src)
        # (at rank 3, view(-1, 1, 1)).
        along = tuple(slice(None) if d == axis else slice(0, 1) for d in range(indices.ndim))
        with warnings.catch_warnings():  # read-only memory: torch only reads it
            warnings.simplefilter("ignore", UserWarning)
            ti = torch.from_numpy(np.ascontiguousarray(indices[along])).expand(*indices.shape)
    elif w.transposed:
        # The same transposed layout: torch keeps numpy's strides.
        ti = torch.from_numpy(indices).to(torch.int64)
    else:
        # torch takes int64 indices only (the f16 workload's are int32): converted once.
        ti = torch.from_numpy(np.ascontiguousarray(indices)).to(torch.int64)
    if w.op == "scatter_elements":
        tbuffer = td.clone()
        if w.reduction == "none":
            theirs = (
                lambda: torch.scatter(td, axis, ti, tu),
                lambda: tbuffer.scatter_(axis, ti, tu),
            )
        else:
            r = TORCH_REDUCE[w.reduction]
            theirs = (
                lambda: torch.scatter_reduce(td, axis, ti, tu, r, include_self=w.include_self),
                lambda: tbuffer.scatter_reduce_(axis, ti, tu, r, include_self=w.include_self),
            )
    elif w.op == "gather":
        flat = ti.reshape(-1)
        tout = torch.index_select(td, axis, flat)
        if "out" in w.column_major:
            # numpy's column-major order, for any rank: dims reversed in memory.
            reversed_dims = tuple(range(tout.dim()))[::-1]
            tout = tout.permute(reversed_dims).contiguous().permute(reversed_dims)
        theirs = (
            lambda: torch.index_select(td, axis, flat),
            lambda: torch.index_select(td, axis, flat, out=tout),
        )
    else:
        tout = torch.gather(td, axis, ti)
        theirs = (lambda: torch.gather(td, axis, ti), lambda: torch.gather(td, axis, ti, out=tout))
    return {"scatterjit": ours, "torch": theirs}


def as_torch(torch, array):
    """A tensor on `array`'s memory (torch takes no ml_dtypes bfloat16: its bits, viewed)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def agree(ours, theirs):
    ours = np.asarray(ours)
    if ours.dtype.name in ("float16", "bfloat16"):
        # PyTorch rounds 16-bit sums and products once at the end, scatterjit after each
        # combine (SPEC.md): a few units in the last place apart.
        tolerance = 1e-2 if ours.dtype.name == "float16" else 5e-2
        ours, theirs = ours.astype(np.float32), theirs.float().numpy()
        return bool(np.allclose(ours, theirs, rtol=tolerance, atol=tolerance))
    theirs = theirs.numpy()
    if ours.dtype.kind == "f":
        return bool(np.allclose(ours, theirs, rtol=1e-3, atol=1e-3))
    return bool(np.array_equal(ours, theirs))


def ms(x):
    """Three significant digits, without exponents."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def interleaved_medians(fns, rounds, warmup=2, batch=1):
    """The median milliseconds per call of each function, timed in turns (``batch`` calls
    of each per round, so that the timer's own cost vanishes for tiny calls) so that the
    machine's load falls on all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples[name].append((time.perf_counter() - start) * 1e3 / batch)
    return {name: statistics.median(s) for name, s in samples.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m scatterjit.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="divide large dims by 8, fewer rounds")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these workloads")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both systems")
    parser.add_argument("--rounds", type=int, default=None, help="timed calls per system and mode")
    parser.add_argument("--no-torch", action="store_true", help="time scatterjit alone")
    sets = parser.add_mutually_exclusive_group()
    sets.add_argument(
        "--tiny", action="store_true", help="the per-call overhead: two tiny cases, ns per call"
    )
    sets.add_argument(
        "--mid", action="store_true", help="mid-size calls, where waking a pool costs most: us per call"
    )
    sets.add_argument(
        "--extra", action="store_true", help="workloads outside the suite: other layouts and ranks"
    )
    sets.add_argument(
        "--half", action="store_true", help="element-wise reductions of f16 and bf16"
    )
    sets.add_argument(
        "--layouts", action="store_true", help="tables, updates and outputs laid out column-major"
    )
    sets.add_argument(
        "--sweep", action="store_true", help="a grid of ops, dtypes, ranks, axes and index layouts"
    )
    args = parser.parse_args(argv)
    div, rounds = (8, args.rounds or 5) if args.quick else (1, args.rounds or 9)
    # Tiny calls: 21 rounds of 2,000 calls each, in ns; mid-size ones: 21 rounds of 20, in
    # us; the others in ms.
    batch, scale, unit = (1, 1, "ms")
    if args.tiny:
        batch, scale, unit, rounds = 2000, 1e6, "ns", args.rounds or 21
    if args.mid:
        batch, scale, unit, rounds = 20, 1e3, "us", args.rounds or 21
    by_flag = [
        (args.tiny, TINY),
        (args.mid, MID),
        (args.extra, EXTRA),
        (args.half, HALF),
        (args.layouts, LAYOUTS),
        (args.sweep, SWEEP),
    ]
    suite = next((chosen for wanted, chosen in by_flag if wanted), WORKLOADS)

    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch is not installed: timing scatterjit alone", file=sys.stderr)
    scatterjit.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    names = {w.name for w in suite}
    unknown = set(args.only) - names
    if unknown:
        parser.error(f"unknown workload(s) {sorted(unknown)}; known: {sorted(names)}")
    chosen = [w for w in suite if not args.only or w.name in args.only]

    versions = f"scatterjit {scatterjit.__version__}, numpy {np.__version__}"
    if torch is not None:
        versions += f", torch {torch.__version__}"
    load = ", load average {:.1f}".format(os.getloadavg()[0]) if hasattr(os, "getloadavg") else ""
    per = f"{batch} calls, per call" if batch > 1 else "calls"
    print(f"# {versions}; {args.threads} threads{load}; median of {rounds} rounds of {per} ({unit}), interleaved, after 2 warm-up calls", flush=True)
    header = "| workload | MB | scatterjit new | torch new | torch/scatterjit | scatterjit into | torch into | torch/scatterjit |"
    if torch is None:
        header = "| workload | MB | scatterjit new | scatterjit into |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    failed = False
    ratios = []  # (torch / scatterjit, workload, mode)
    for w in chosen:
        data, indices, updates = inputs(w, div)
        systems = calls(w, data, indices, updates, torch)
        ours_new = systems["scatterjit"][0]()
        mb = traffic_mb(w, data, indices, updates, ours_new.nbytes)
        mark = ""
        if torch is not None and not agree(ours_new, systems["torch"][0]()):
            mark, failed = " ✗ results differ", True
        times = interleaved_medians(
            {(name, mode): pair[mode] for mode in (0, 1) for name, pair in systems.items()},
            rounds,
            batch=batch,
        )
        cells = [w.name + mark, f"{mb:.3g}"]
        for mode in (0, 1):
            ours = times["scatterjit", mode]
            cells.append(ms(ours * scale))
            if torch is not None:
                theirs = times["torch", mode]
                cells += [ms(theirs * scale), f"{theirs / ours:.2f}"]
                ratios.append((theirs / ours, w.name, ("new", "into")[mode]))
        print("| " + " | ".join(cells) + " |", flush=True)
    if torch is not None:
        print("\ntorch/scatterjit > 1: scatterjit is faster. new: a fresh output per call; into: in place or out=.")
        slower = sorted(r for r in ratios if r[0] < 1)
        print(f"scatterjit slower in {len(slower)} of {len(ratios)} cells", end="")
        print(":" if slower else ".", ", ".join(f"{name} {mode} {r:.2f}" for r, name, mode in slower[:10]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
