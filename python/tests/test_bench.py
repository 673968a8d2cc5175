"""python -m scatterjit.bench runs (a small case), and its inputs follow the suite's rules."""

import numpy as np
import pytest

from scatterjit import bench


def runs_and_agrees(capsys, flag, names):
    """``--quick`` one round of `names` in the set `flag`: each prints its row, none differs."""
    argv = [flag, "--quick", "--rounds", "1", "--threads", "1"]
    assert bench.main(argv + [a for n in names for a in ("--only", n)]) == 0
    out = capsys.readouterr().out
    assert "✗" not in out
    for name in names:
        assert f"| {name} |" in out


def test_bench_runs_and_prints_a_row(capsys):
    assert bench.main(["--quick", "--only", "gather_cols_f32", "--rounds", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "| gather_cols_f32 |" in out and "✗" not in out


def test_tiny_mode_times_the_two_tiny_calls(capsys):
    assert bench.main(["--tiny", "--rounds", "1", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert "(ns)" in out and "✗" not in out
    for w in bench.TINY:
        assert f"| {w.name} |" in out


def test_mid_mode_times_the_mid_size_calls(capsys):
    assert bench.main(["--mid", "--quick", "--rounds", "1", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert "(us)" in out and "✗" not in out
    for w in bench.MID:
        assert f"| {w.name} |" in out


def test_inputs_follow_the_index_patterns():
    by_name = {w.name: w for w in bench.WORKLOADS}
    data, indices, updates = bench.inputs(by_name["scatter_none_shuffle_f32"], div=8)
    assert (np.sort(indices, axis=1) == np.arange(indices.shape[1])).all()  # a permutation per row
    data, indices, updates = bench.inputs(by_name["scatter_add_gnn_expanded_f32"], div=8)
    assert indices.strides[1] == 0 and (indices == indices[:, :1]).all()
    assert updates.min() >= -1 and updates.max() < 1
    data, indices, updates = bench.inputs(by_name["scatter_add_hist_i64"], div=8)
    assert data.dtype == np.int64 and 0 <= data.min() and data.max() < 100
    assert len(bench.WORKLOADS) == 12


def test_extra_workloads_keep_their_transposed_indices(capsys):
    for w in bench.EXTRA:
        data, indices, updates = bench.inputs(w, div=8)
        if w.transposed:
            assert indices.flags.f_contiguous and not indices.flags.c_contiguous
    assert bench.main(["--extra", "--quick", "--only", "scatter_min_transposed_i64", "--rounds", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "| scatter_min_transposed_i64 |" in out and "✗" not in out


def test_extra_workloads_without_self_run_and_agree(capsys):
    """The ``include_self=False`` workloads print their rows (beside PyTorch's, and agreeing
    with them, where it is installed)."""
    names = [w.name for w in bench.EXTRA if not w.include_self]
    assert names, "the extra set keeps its include_self=False workloads"
    runs_and_agrees(capsys, "--extra", names)


def test_sorted_rows_are_a_sorted_batch_vector_expanded():
    (pool,) = [w for w in bench.EXTRA if w.pattern == "sorted_rows"]
    data, indices, updates = bench.inputs(pool, div=8)
    rows = indices[:, 0]
    assert indices.strides[1] == 0 and (np.diff(rows) >= 0).all()
    assert len(np.unique(rows)) > 1 and rows.max() < data.shape[0]


def test_layouts_mode_lays_its_operands_out_column_major(capsys):
    for w in bench.LAYOUTS:
        data, indices, updates = bench.inputs(w, div=8)
        for name, array in (("data", data), ("updates", updates)):
            if name in w.column_major:
                assert array.flags.f_contiguous and not array.flags.c_contiguous
    names = ["gather_rows_out_t_f32", "scatter_none_data_t_f32"]
    runs_and_agrees(capsys, "--layouts", names)


def test_half_mode_times_16_bit_element_reductions(capsys):
    pytest.importorskip("ml_dtypes")
    names = ["scatter_add_rows_f16", "scatter_add_rows_bf16"]
    runs_and_agrees(capsys, "--half", names)
    data, indices, updates = bench.inputs(bench.HALF[4], div=8)
    assert data.dtype.name == "bfloat16" and updates.dtype.name == "bfloat16"


def test_sweep_mode_covers_each_op_layout_and_axis(capsys):
    grid = bench.SWEEP
    assert len({w.name for w in grid}) == len(grid)
    for op in ("scatter_elements", "gather_elements", "gather"):
        ranks = {len(w.data) for w in grid if w.op == op}
        assert ranks >= {2, 3}, (op, ranks)
    for layout in ("transposed", "expanded"):
        assert any(getattr(w, layout) and w.op == "scatter_elements" for w in grid)
        assert any(getattr(w, layout) and w.op == "gather_elements" for w in grid)
    for w in grid:
        assert 0 <= w.axis < len(w.data)
        if w.op == "scatter_elements" and w.reduction == "none" and not w.expanded:
            assert w.pattern == "perm"  # no duplicates: PyTorch's order of them is its own
    names = ["sweep_scatter_elements_max_float32_64x128x128_ax0_transposed",
             "sweep_gather_elements_int8_2048x512_ax1_dense"]
    runs_and_agrees(capsys, "--sweep", names)
