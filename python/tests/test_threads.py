"""Threads: the pool size is settable, results are bit-identical at any size, and Python
threads overlap because the GIL is released while a kernel runs."""

import sys
import threading
import time

import numpy as np
import pytest

import scatterjit
from conftest import same


@pytest.fixture
def restore_threads():
    yield
    scatterjit.set_num_threads(0)


def big_problem():
    rng = np.random.default_rng(7)
    data = rng.standard_normal((2000, 64)).astype(np.float32)
    index = np.repeat(rng.integers(-2000, 2000, (40000, 1)), 64, axis=1)
    updates = rng.standard_normal((40000, 64)).astype(np.float32)
    return data, index, updates


@pytest.mark.usefixtures("restore_threads")
def test_results_are_bit_identical_at_every_pool_size():
    data, index, updates = big_problem()
    results = {}
    for n in (1, 2, 3):
        scatterjit.set_num_threads(n)
        assert scatterjit.get_num_threads() == n
        results[n] = (
            scatterjit.scatter_elements(data, index, updates, reduction="add"),
            scatterjit.scatter_elements(data, index, updates, reduction="mean"),
            scatterjit.gather(data, index[:, 0]),
        )
    for n in (2, 3):
        for a, b in zip(results[1], results[n]):
            same(a, b)
    scatterjit.set_num_threads(0)
    assert scatterjit.get_num_threads() >= 1


@pytest.mark.usefixtures("restore_threads")
def test_a_thread_count_past_the_limit_is_a_value_error_and_keeps_the_pool():
    scatterjit.set_num_threads(2)
    with pytest.raises(ValueError, match="5000 threads: at most 1024"):
        scatterjit.set_num_threads(5000)
    with pytest.raises(OverflowError):
        scatterjit.set_num_threads(-1)
    assert scatterjit.get_num_threads() == 2


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("rows", [1, 63, 64, 65, 200, 1023, 1025])
def test_calls_on_either_side_of_the_inline_and_pool_bounds_agree_with_numpy(rows):
    """Calls of under 4096 elements of work run on the calling thread with the GIL held,
    under 2^16 on it without the GIL, larger ones on the pool (of more than one thread):
    both sides of each bound (64 rows of 64 is 4096 output elements, 1024 rows 2^16) at
    every pool size, through the free functions, a kernel and in place."""
    rng = np.random.default_rng(rows)
    table = rng.standard_normal((300, 64)).astype(np.float32)
    rows_index = rng.integers(-300, 300, rows)
    index = np.repeat(rows_index.reshape(-1, 1), 64, axis=1)
    updates = rng.standard_normal((rows, 64)).astype(np.float32)
    expected_add = table.copy()
    np.add.at(expected_add, (rows_index % 300,), updates)
    kernel = scatterjit.kernel("gather.f32.i64.r2.q1.a0")
    for n in (1, 2, 3):
        scatterjit.set_num_threads(n)
        same(scatterjit.gather(table, rows_index), np.take(table, rows_index, axis=0))
        same(kernel.run(table, rows_index), np.take(table, rows_index, axis=0))
        out = np.empty((rows, 64), np.float32)
        same(scatterjit.gather_elements(table, index, out=out), np.take_along_axis(table, index % 300, 0))
        same(scatterjit.scatter_elements(table, index, updates, reduction="add"), expected_add)
        inplace = table.copy()
        same(scatterjit.scatter_(inplace, 0, index, updates, reduce="sum"), expected_add)


def test_python_threads_run_calls_concurrently():
    data, index, updates = big_problem()
    expected = scatterjit.scatter_elements(data, index, updates, reduction="add")
    results, errors = [None] * 6, []

    def work(i):
        try:
            if i % 2:
                results[i] = scatterjit.scatter_elements(data, index, updates, reduction="add")
            else:
                out = data.copy()
                results[i] = scatterjit.scatter_(out, 0, index, updates, reduce="sum")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        same(r, expected)


def test_gil_is_released_while_a_kernel_runs():
    """A Python thread counts while the main thread runs a kernel. With a switch interval
    of 0.5 s, the interpreter takes the GIL from the main thread by force only after the
    counter has waited that long, so within a call started right after the main thread
    got the GIL back the count moves only if the call released it. On a loaded machine
    the counter may not be scheduled during one call: up to 20 calls are tried."""
    data, index, updates = big_problem()
    counter, running, done = [0], threading.Event(), threading.Event()

    def count():
        running.set()
        while not done.is_set():
            counter[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    moved = False
    try:
        t = threading.Thread(target=count)
        t.start()
        running.wait()
        for _ in range(20):
            time.sleep(0.001)  # let the counter run, then take the GIL back
            before = counter[0]
            scatterjit.scatter_elements(data, index, updates, reduction="add")
            if counter[0] != before:
                moved = True
                break
        done.set()
        t.join()
    finally:
        sys.setswitchinterval(interval)
    assert moved
