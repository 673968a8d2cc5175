"""The kernel level: scatterjit.kernel(key) and the cache statistics."""

import subprocess
import sys

import numpy as np
import pytest

import scatterjit
from conftest import reference_scatter, same, values


def test_a_large_call_compiles_a_variant_for_its_layout(rng):
    # A fresh key, so that no earlier test has compiled its variants.
    k = scatterjit.kernel("scatter_elements.f64.u16.r2.a1.max")
    before = k.first_use_compile_time
    data = values(rng, np.dtype(np.float64), (300, 1024))
    index = rng.integers(0, 1024, (300, 1024)).astype(np.uint16)
    updates = values(rng, np.dtype(np.float64), (300, 1024))
    expected = reference_scatter(data, index, updates, 1, "max", True)
    same(k.run(data, index, updates), expected)
    assert k.first_use_compile_time > before


def test_kernel_object(rng):
    k = scatterjit.kernel("scatter_elements.f32.i64.r2.a1.add")
    assert k.key == "scatter_elements.f32.i64.r2.a1.add"
    assert k.compile_time >= 0.0
    assert repr(k) == 'scatterjit.kernel("scatter_elements.f32.i64.r2.a1.add")'
    text = k.explain()
    assert "== op IR" in text and "machine code" in text
    data = values(rng, np.dtype(np.float32), (3, 6))
    index = rng.integers(-6, 6, (3, 4))
    updates = values(rng, np.dtype(np.float32), (3, 4))
    expected = reference_scatter(data, index, updates, 1, "add", True)
    same(k.run(data, index, updates), expected)
    out = np.empty_like(data)
    assert k.run_into(out, data, index, updates) is out
    same(out, expected)
    assert k.first_use_compile_time >= 0.0
    target = data.copy()
    assert k.scatter_in_place(target, index, updates) is target
    same(target, expected)


def test_cache_statistics_count_compiles_and_hits():
    key = "gather.u16.i32.r3.q2.a2"
    before = scatterjit.cache_stats()
    scatterjit.kernel(key)
    scatterjit.kernel(key)
    after = scatterjit.cache_stats()
    assert set(after) == {"hits", "misses", "evictions", "compile_time", "kernels"}
    assert after["misses"] - before["misses"] <= 1
    assert after["hits"] - before["hits"] >= 1
    assert after["kernels"] >= 1 and after["compile_time"] >= before["compile_time"]


def test_docstrings_read_like_the_rustdoc():
    assert "PyTorch's ``tensor.scatter_(dim, index, src, reduce)``" in scatterjit.scatter_.__doc__
    assert scatterjit.scatter_.__text_signature__.startswith("(tensor, dim, index, src")
    for f in (scatterjit.scatter_elements, scatterjit.gather, scatterjit.gather_elements, scatterjit.kernel,
              scatterjit.Kernel.run, scatterjit.Kernel.explain, scatterjit.set_num_threads):
        assert f.__doc__ and len(f.__doc__) > 40, f


def test_stubs_match_the_module():
    """The .pyi stubs name every function, class and argument the compiled module has
    (the package's __init__ only re-exports it)."""
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "scatterjit._native"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docstring_examples_run():
    import doctest

    for obj in (scatterjit.scatter_elements, scatterjit.gather_elements, scatterjit.gather,
                scatterjit.scatter_, scatterjit.Kernel):
        finder = doctest.DocTestFinder(recurse=False)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        tests = finder.find(obj, obj.__name__, globs={})
        assert tests and tests[0].examples, obj
        for test in tests:
            runner.run(test)
        assert runner.failures == 0, obj
