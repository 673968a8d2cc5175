"""Type stubs of the compiled module; the docstrings live in the module itself."""

from typing import Any, Literal, Optional, TypedDict, TypeVar, Union, final

import numpy as np
import numpy.typing as npt

#: A numpy array (any strides), any object with ``__dlpack__`` (a PyTorch CPU tensor, a
#: JAX CPU array), or, for inputs only, anything ``numpy.asarray`` takes.
_ArrayLike = Any
#: Written in place: a writable numpy array or a writable CPU tensor with ``__dlpack__``.
_Tensor = TypeVar("_Tensor")
_Scalar = Union[bool, int, float, complex, np.generic]
#: Every reduction name the library accepts (``sum``, ``prod``, ``multiply``, ``amax``
#: and ``amin`` are aliases).
_ReductionName = Literal[
    "none", "add", "sum", "mul", "prod", "multiply", "max", "amax", "min", "amin", "mean"
]

__all__ = [
    "__version__", "scatter_elements", "gather_elements", "gather", "scatter_", "kernel",
    "cache_stats", "set_num_threads", "get_num_threads", "Kernel",
]
__version__: str

def scatter_elements(
    data: _ArrayLike,
    indices: _ArrayLike,
    updates: _ArrayLike,
    axis: int = 0,
    reduction: _ReductionName = "none",
    use_init_val: bool = True,
    *,
    out: Optional[_Tensor] = None,
) -> Union[npt.NDArray[Any], _Tensor]: ...
def gather_elements(
    data: _ArrayLike, indices: _ArrayLike, axis: int = 0, *, out: Optional[_Tensor] = None
) -> Union[npt.NDArray[Any], _Tensor]: ...
def gather(
    data: _ArrayLike, indices: _ArrayLike, axis: int = 0, *, out: Optional[_Tensor] = None
) -> Union[npt.NDArray[Any], _Tensor]: ...
def scatter_(
    tensor: _Tensor,
    dim: int,
    index: _ArrayLike,
    src: Union[_ArrayLike, _Scalar],
    reduce: Optional[_ReductionName] = None,
    include_self: bool = True,
) -> _Tensor: ...

class _CacheStats(TypedDict):
    hits: int
    misses: int
    evictions: int
    compile_time: float
    kernels: int

def cache_stats() -> _CacheStats: ...
def kernel(key: str) -> Kernel: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...

@final
class Kernel:
    @property
    def key(self) -> str: ...
    @property
    def compile_time(self) -> float: ...
    @property
    def first_use_compile_time(self) -> float: ...
    def explain(self) -> str: ...
    def run(
        self, data: _ArrayLike, indices: _ArrayLike, updates: Optional[_ArrayLike] = None
    ) -> npt.NDArray[Any]: ...
    def run_into(
        self,
        out: _Tensor,
        data: _ArrayLike,
        indices: _ArrayLike,
        updates: Optional[_ArrayLike] = None,
    ) -> _Tensor: ...
    def scatter_in_place(
        self, data: _Tensor, indices: _ArrayLike, updates: Union[_ArrayLike, _Scalar]
    ) -> _Tensor: ...
