"""Scatter/gather kernels compiled at run time, on numpy arrays and DLPack tensors.

scatterjit compiles a native kernel for each combination of op, dtype, index dtype,
rank, axis and reduction (with Cranelift) and caches it. The functions here take numpy
arrays of any strides and any object with ``__dlpack__`` (PyTorch CPU tensors, JAX CPU
arrays) without copying them, release the GIL while a kernel runs, and raise
``IndexError`` naming the value and position of an index out of bounds.

- ``scatter_elements``, ``gather_elements``, ``gather``: ONNX semantics, out of place
  (``out=`` writes a caller's array instead);
- ``scatter_``: PyTorch's in-place ``scatter_`` / ``scatter_reduce_``;
- ``kernel(key)``: one compiled kernel (``run``, ``run_into``, ``scatter_in_place``,
  ``explain()``), ``cache_stats()``;
- ``set_num_threads`` / ``get_num_threads``: the thread pool large calls split over.
"""

from ._native import (
    Kernel,
    __version__,
    cache_stats,
    gather,
    gather_elements,
    get_num_threads,
    kernel,
    scatter_,
    scatter_elements,
    set_num_threads,
)

__all__ = [
    "Kernel",
    "cache_stats",
    "gather",
    "gather_elements",
    "get_num_threads",
    "kernel",
    "scatter_",
    "scatter_elements",
    "set_num_threads",
]
