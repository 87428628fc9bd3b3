"""2-D SBP: blobs laid out over a (2, 2) grid of 4 CPU devices (OneFlow's ``NdSbp``).

Device (i, j) of the grid is rank 2 i + j; a blob laid out as ``[a, b]`` is laid out by
``a`` over the two rows, then each row's part by ``b`` over its two devices.

References: the same job on one device (losses, variables, checkpoints), numpy on the
logical values (boxing), and the grid layout's definition (boxing chains, shards).
"""
import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.parallel import sbp as _sbp
from graphfront.passes.boxing import _nd_steps
from graphfront.runtime.distributed import shard, write_shard

GRID = (2, 2)
STEPS = 3
# float32 matmuls of a few terms summed in another order on 4 devices than on one:
# relative differences of a few ulps per step, grown by the momentum over STEPS steps
RTOL, ATOL = 1e-5, 1e-6


def _session(ndev):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)


# ----------------------------------------------------------------------------- no processes

def _shard_np(t, layout, rank):
    """Device ``rank``'s part of ``t`` under ``layout`` over GRID, by the definition."""
    i, j = divmod(rank, GRID[1])
    for s, c in ((layout[0], i), (layout[1], j)):
        axis = _sbp.split_axis(s)
        if axis is not None:
            t = np.split(t, 2, axis)[c]
    return t


def test_grid_shards_follow_the_nested_definition():
    t = torch.arange(48.).reshape(4, 12)
    for layout in [("S(0)", "S(1)"), ("S(1)", "S(1)"), ("B", "S(0)"), ("S(1)", "B"), ("S(0)", "S(0)")]:
        out = torch.zeros_like(t)
        for rank in range(4):
            part = shard(t, layout, GRID, rank)
            np.testing.assert_array_equal(part.numpy(), _shard_np(t.numpy(), layout, rank))
            write_shard(out, part, layout, GRID, rank, rank)
        np.testing.assert_array_equal(out.numpy(), t.numpy())
    # ["S(0)", "S(0)"] is the 1-D split over the 4 devices in rank order
    for rank in range(4):
        np.testing.assert_array_equal(shard(t, ("S(0)", "S(0)"), GRID, rank).numpy(), t.numpy()[rank:rank + 1])


def _simulate(steps, src, t):
    """Run a boxing chain on numpy parts by the 1-D definitions, one grid line at a time."""
    parts = {r: _shard_np(t, src, r) for r in range(4)}
    # a partial sum: the devices of coordinate 0 on the partial axes hold the parts, the others zeros
    parts = {r: (p if all(c == 0 for c, s in zip(_sbp.grid_coords(r, GRID), src) if s == "P") else np.zeros_like(p))
             for r, p in parts.items()}
    for axis, _, op_type, attrs, _ in steps:
        lines = [[0, 2], [1, 3]] if axis == 0 else [[0, 1], [2, 3]]
        new = {}
        for line in lines:
            xs = [parts[r] for r in line]
            for c, r in enumerate(line):
                if op_type == "_nccl_logical_all_reduce":
                    new[r] = sum(xs)
                elif op_type == "_nccl_logical_reduce_scatter":
                    new[r] = np.split(sum(xs), 2, 0)[c]
                elif op_type in ("_nccl_logical_all_gather", "_nccl_logical_all_gather_noncontinuous"):
                    new[r] = np.concatenate(xs, attrs.get("in_split_axis", 0))
                elif op_type == "_nccl_logical_s2s":
                    new[r] = np.split(np.concatenate(xs, attrs["in_split_axis"]), 2, attrs["out_split_axis"])[c]
                elif op_type == "_logical_b_to_s":
                    new[r] = np.split(xs[c], 2, attrs["out_split_axis"])[c]
                else:  # B -> P
                    new[r] = xs[c] if c == 0 else np.zeros_like(xs[c])
        parts = new
    return parts


LAYOUTS = [(a, b) for a in ("B", "P", "S(0)", "S(1)") for b in ("B", "P", "S(0)", "S(1)")]


@pytest.mark.parametrize("src", LAYOUTS)
def test_every_grid_conversion_chain_keeps_the_values(src):
    """Every pair of layouts over the grid: the chain of per-axis 1-D conversions gives
    each device its part of the logical value under the target layout."""
    t = np.arange(64, dtype=np.float64).reshape(8, 8)
    for dst in LAYOUTS:
        steps = _nd_steps(src, dst)
        assert (steps[-1][-1] if steps else src) == dst
        parts = _simulate(steps, src, t)
        if "P" in dst:
            got = {}
            for r in range(4):  # sum the partial axes' lines: the logical part of the others
                got[r] = sum(parts[q] for q in range(4)
                             if all(dst[a] == "P" or _sbp.grid_coords(q, GRID)[a] == _sbp.grid_coords(r, GRID)[a]
                                    for a in range(2)))
            parts = got
        for r in range(4):
            np.testing.assert_array_equal(parts[r], _shard_np(t, dst, r), err_msg=f"{src} -> {dst} rank {r}")


def test_layouts_over_the_grid_and_their_errors():
    assert _sbp.flatten_nd_sbp(["S(0)", "S(1)"], (2, 2)) == ("S(0)", "S(1)")
    assert _sbp.flatten_nd_sbp(["S(0)", "B", "P"], (2, 1, 2)) == ("S(0)", "P")
    assert _sbp.flatten_nd_sbp(["B", "B"], (2, 2)) == "B"
    assert _sbp.flatten_nd_sbp(["S(0)", "B"], (2, 1)) == "S(0)"
    with pytest.raises(ValueError, match=r"nd_sbp \['S\(0\)', 'B', 'B'\] needs one entry per axis of the "
                                         r"placement's hierarchy \(2, 2\)"):
        _sbp.flatten_nd_sbp(["S(0)", "B", "B"], (2, 2))


def test_a_variable_layout_that_does_not_fit_the_grid_names_it_and_the_users_line():
    _session(4)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-3", (2, 2)):
            w = flow.get_variable("w", (6, 4), initializer=flow.zeros_initializer(), nd_sbp=["B", "S(1)", "B"])
            return flow.matmul(x, w)

    with pytest.raises(flow.JobBuildError, match=r"get_variable 'w': nd_sbp \['B', 'S\(1\)', 'B'\] needs one entry "
                                                 r"per axis of the placement's hierarchy \(2, 2\)(?s:.*)"
                                                 r"test_distributed_grid.py:\d+ in job"):
        job(np.zeros((4, 6), np.float32))


# ----------------------------------------------------------------------------- on 4 devices

# (the tests below spawn 4 worker processes)


def _mlp(grid):
    """Column-parallel then row-parallel dense layers (Megatron's MLP, as OneFlow-Benchmark's
    GPT lays it out in its hybrid mode), trained with SGD and momentum."""
    def nd(layout):
        return layout if grid else None

    @flow.global_function(type="train")
    def train_fn(x: tp.Numpy.Placeholder((8, 6)), t: tp.Numpy.Placeholder((8, 4))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-3" if grid else "0:0", GRID if grid else None):
            if grid:
                x = flow.hierarchical_parallel_cast(x, nd_sbp=["S(0)", "B"])
            init = flow.random_normal_initializer(stddev=0.5)
            w1 = flow.get_variable("w1", (6, 8), initializer=init, nd_sbp=nd(["B", "S(1)"]))
            b1 = flow.get_variable("b1", (8,), initializer=init, nd_sbp=nd(["B", "S(0)"]))
            h = flow.math.tanh(flow.nn.bias_add(flow.matmul(x, w1), b1))  # [S(0), S(1)]
            w2 = flow.get_variable("w2", (8, 4), initializer=init, nd_sbp=nd(["B", "S(0)"]))
            y = flow.matmul(h, w2)  # [S(0), P]
            if grid:
                y = flow.hierarchical_parallel_cast(y, nd_sbp=["S(0)", "B"], grad_mode="manual",
                                                    grad_nd_sbp=["S(0)", "B"])
            b2 = flow.get_variable("b2", (4,), initializer=init, nd_sbp=nd(["B", "B"]))
            loss = flow.math.reduce_mean(flow.math.square(flow.nn.bias_add(y, b2) - t))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    return train_fn


def _data(steps=STEPS):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32))
            for _ in range(steps)]


def _variables():
    return {k: v.numpy() for k, v in flow.get_all_variables().items()}


@pytest.mark.slow
def test_tensor_and_data_parallel_mlp_on_a_grid_trains_as_on_one_device(tmp_path):
    data = _data(STEPS + 1)
    _session(1)
    one = _mlp(False)
    want = [one(x, t) for x, t in data[:STEPS]]
    want_vars = _variables()
    flow.checkpoint.save(tmp_path / "one")
    one_next = one(*data[STEPS])

    _session(4)
    grid_fn = _mlp(True)
    got = [grid_fn(x, t) for x, t in data[:STEPS]]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    got_vars = _variables()
    for k in want_vars:
        np.testing.assert_allclose(got_vars[k], want_vars[k], rtol=RTOL, atol=ATOL, err_msg=k)
    job = grid_fn.graph.proto
    sigs = _sbp.op_signatures(job)
    assert sigs["w1"]["out"] == ("B", "S(1)") and sigs["w2"]["out"] == ("B", "S(0)")
    matmuls = [op.name for op in job.net.op if jb.op_type_name(op) == "matmul" and op.name in sigs]
    outs = {sigs[m]["out_0"] for m in matmuls}
    assert {("S(0)", "S(1)"), ("S(0)", "P")} <= outs
    nd = job.job_parallel_view_conf.op_name2nd_sbp_signature_conf["w1"].bn_in_op2nd_sbp["out"]
    assert [_sbp.from_proto(p) for p in nd.sbp_parallel] == ["B", "S(1)"]
    assert "w1" not in job.job_parallel_view_conf.op_name2sbp_signature_conf
    flow.checkpoint.save(tmp_path / "grid")

    # the grid's checkpoint on one device, the one device's on the grid: the next step agrees
    _session(1)
    one = _mlp(False)
    flow.load_variables(flow.checkpoint.get(tmp_path / "grid"))
    for k, v in _variables().items():
        np.testing.assert_array_equal(v, got_vars[k], err_msg=k)
    _session(4)
    grid_fn = _mlp(True)
    flow.load_variables(flow.checkpoint.get(tmp_path / "one"))
    np.testing.assert_allclose(grid_fn(*data[STEPS]), one_next, rtol=RTOL, atol=ATOL)


# each cast turns the previous layout into this one; together they use every 1-D
# conversion on each grid axis
CASTS = [["B", "B"], ["S(1)", "B"], ["B", "B"], ["S(1)", "B"], ["S(1)", "S(0)"], ["S(0)", "S(0)"],
         ["S(0)", "S(1)"], ["P", "S(1)"], ["B", "S(1)"], ["B", "P"], ["B", "B"], ["P", "B"], ["S(0)", "B"],
         ["S(0)", "P"], ["S(0)", "S(0)"]]


@pytest.mark.slow
def test_every_boxing_conversion_on_each_grid_axis_keeps_the_values():
    _session(4)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((8, 8))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-3", GRID):
            for layout in CASTS:
                x = flow.hierarchical_parallel_cast(x, nd_sbp=layout)
            return x

    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal(job(x), x)
    np.testing.assert_array_equal(job(x + 1), x + 1)
    from graphfront.ops.boxing_ops import BOXING_OP_TYPES
    used = set()
    for op in job.graph.proto.net.op:
        if jb.op_type_name(op) in BOXING_OP_TYPES:
            attrs = jb.user_attrs(op)
            assert list(attrs["hierarchy"]) == list(GRID)
            used.add((jb.op_type_name(op), attrs["grid_axis"]))
    assert used == {(t, axis) for t in BOXING_OP_TYPES for axis in (0, 1)}


def test_passes_keep_the_grid_of_the_ops_they_add():
    """The optimizer's state variables and the AMP casts sit on the grid of the ops they
    come from, so their nd_sbp (copied from the variable) fits."""
    import copy

    from graphfront.framework.session import default_session, trace
    from graphfront.passes import complete
    from graphfront.passes.boxing import boxing
    _session(4)
    cfg = flow.FunctionConfig()
    cfg.enable_auto_mixed_precision(True)

    @flow.global_function(type="train", function_config=cfg)
    def train_fn(x: tp.Numpy.Placeholder((8, 6))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-3", GRID):
            x = flow.hierarchical_parallel_cast(x, nd_sbp=["S(0)", "B"])
            w = flow.get_variable("w", (6, 8), initializer=flow.random_normal_initializer(), nd_sbp=["B", "S(1)"])
            loss = flow.math.reduce_mean(flow.matmul(x, w))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss

    builder, _ = trace(default_session(), train_fn)
    job = boxing(complete(copy.deepcopy(builder.job)))
    grids = {name: tuple(g.parallel_conf.hierarchy.dim) for g in job.placement.placement_group
             for name in g.op_set.op_name}
    assert grids["w-momentum"] == GRID
    casts = [op.name for op in job.net.op if jb.op_type_name(op) == "cast"]
    assert casts and all(grids[name] == GRID for name in casts if name.startswith("w"))
    assert _sbp.op_signatures(job)["w-momentum"]["out"] == ("B", "S(1)")


def test_a_sparse_update_of_a_table_split_on_rows_along_a_grid_axis_is_refused_naming_the_op():
    """The sparse update counts row ids from its device's first row over a line of devices;
    on a grid a table split on rows is refused (split on the embedding axis it runs)."""
    import copy

    from graphfront.framework.session import default_session, trace
    from graphfront.passes import complete
    from graphfront.passes.boxing import boxing

    for nd_sbp, refused in ((["B", "S(0)"], True), (["B", "S(1)"], False)):
        _session(4)
        cfg = flow.FunctionConfig()
        cfg.indexed_slices_optimizer_conf({"include_op_names": {"op_name": ["emb"]}})

        @flow.global_function(type="train", function_config=cfg)
        def job(ids: tp.Numpy.Placeholder((4, 3), dtype=flow.int32)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0-3", GRID):
                ids = flow.hierarchical_parallel_cast(ids, nd_sbp=["B", "B"])
                table = flow.get_variable("emb", shape=(8, 4), initializer=flow.ones_initializer(), nd_sbp=nd_sbp)
                loss = flow.math.reduce_sum(flow.reshape(flow.gather(params=table, indices=ids), (4, 12)), axis=[1])
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
            return loss

        builder, _ = trace(default_session(), job)
        if refused:
            message = (r"op 'System-Optimizer-IndexedSlices-emb' \(indexed_slices_\w+_update\): its model arrives "
                       r"split on axis 0 \(S\(0\)\) along axis 1 of a device grid")
            with pytest.raises(flow.JobBuildError, match=message):
                boxing(complete(copy.deepcopy(builder.job)), 4)
        else:
            done = boxing(complete(copy.deepcopy(builder.job)), 4)
            update = next(op for op in done.net.op if jb.op_type_name(op).startswith("indexed_slices_"))
            assert _sbp.op_signatures(done)[update.name]["model_0"] == ("B", "S(1)")


@pytest.mark.slow
def test_a_sparse_update_of_a_table_split_on_columns_over_the_grid_matches_one_device():
    ids = [np.array([[0, 3, 3], [7, 1, 0], [2, 2, 5], [6, 0, 1]], np.int32),
           np.arange(12, dtype=np.int32).reshape(4, 3) % 8]

    def run(ndev):
        _session(ndev)
        cfg = flow.FunctionConfig()
        cfg.indexed_slices_optimizer_conf({"include_op_names": {"op_name": ["emb"]}})

        @flow.global_function(type="train", function_config=cfg)
        def job(ids: tp.Numpy.Placeholder((4, 3), dtype=flow.int32)) -> tp.Numpy:
            with flow.scope.placement("cpu", f"0:0-{ndev - 1}", GRID if ndev > 1 else None):
                table = flow.get_variable("emb", shape=(8, 4), initializer=flow.random_normal_initializer(),
                                          nd_sbp=["B", "S(1)"] if ndev > 1 else None)
                e = flow.reshape(flow.gather(params=table, indices=ids), (4, 12))
                loss = flow.math.reduce_mean(flow.math.square(e))
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
            return loss
        losses = [job(i) for i in ids]
        return losses, _variables()["emb"]

    want, want_table = run(1)
    got, got_table = run(4)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_table, want_table, rtol=RTOL, atol=ATOL)
