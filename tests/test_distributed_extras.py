"""Many devices, continued: N-D SBP in the Job, ``blob.with_distribute`` as a layout,
``flow.watch`` / ``flow.watch_diff`` and gradient accumulation on 2 CPU devices.

Runs are compared with the same job on one device (same seeds and data).
"""
import copy

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.session import default_session, trace
from graphfront.parallel import sbp as _sbp
from graphfront.passes import complete
from graphfront.testing.compare import assert_close_at_scale
from graphfront.passes.boxing import boxing

B, RTOL = 8, 1e-5


def _completed(gf):
    builder, _ = trace(default_session(), gf)
    return boxing(complete(copy.deepcopy(builder.job)))


def _session(ndev):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)


def _mlp_train_job(b=B, config=None, watched=None, model_distribute=None):
    """An MLP with Adam; ``watched`` (a dict) collects watch / watch_diff values per step."""
    @flow.global_function(type="train", function_config=config)
    def train_job(x: tp.Numpy.Placeholder((b, 20)), y: tp.Numpy.Placeholder((b,), dtype=flow.int32)) -> tp.Numpy:
        h = flow.layers.dense(x, 16, activation=flow.nn.relu, kernel_initializer=flow.random_normal_initializer(),
                              name="fc1", model_distribute=model_distribute or flow.distribute.broadcast())
        logits = flow.layers.dense(h, 5, kernel_initializer=flow.random_normal_initializer(), name="fc2")
        if watched is not None:
            def on_h(v: tp.Numpy):
                watched.setdefault("h", []).append(v.copy())

            def on_dlogits(v: tp.Numpy):
                watched.setdefault("dlogits", []).append(v.copy())
            flow.watch(h, on_h)
            flow.watch_diff(logits, on_dlogits)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2])).minimize(loss)
        return loss
    return train_job


def _batches(steps, b=B, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((b, 20)).astype(np.float32), rng.integers(0, 5, b).astype(np.int32))
            for _ in range(steps)]


def _sigs(job, field):
    view = job.job_parallel_view_conf
    if field == "1d":
        return {op: {bn: _sbp.from_proto(s) for bn, s in sig.bn_in_op2sbp_parallel.items()}
                for op, sig in view.op_name2sbp_signature_conf.items()}
    return {op: {bn: [_sbp.from_proto(s) for s in nd.sbp_parallel] for bn, nd in sig.bn_in_op2nd_sbp.items()}
            for op, sig in view.op_name2nd_sbp_signature_conf.items()}


def test_every_blob_has_its_nd_sbp_in_the_job_proto():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)
    job = _completed(_mlp_train_job())
    job = type(job).FromString(job.SerializeToString())  # read back from the bytes
    one_d, nd = _sigs(job, "1d"), _sigs(job, "nd")
    assert one_d and set(nd) == set(one_d) == {op.name for op in job.net.op}
    for op in job.net.op:  # the N-D form is the 1-D layout as a one-element list, for every bn
        assert nd[op.name] == {bn: [s] for bn, s in one_d[op.name].items()}, op.name
        for arg, i, lbn in jb.op_outputs(op):
            assert _sbp.bn_in_op(op, arg, i) in nd[op.name], lbn
    reduce_op = next(op.name for op in job.net.op if jb.op_type_name(op) == "_nccl_logical_all_reduce")
    assert nd[reduce_op] == {"in_0": ["P"], "out_0": ["B"]}
    inp = next(op.name for op in job.net.op if jb.op_kind(op) == "input_conf")
    assert nd[inp] == {"out": ["S(0)"]}


def _with_distribute_job(distribute):
    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        w = flow.get_variable("w", (6, 8), initializer=flow.random_normal_initializer())
        return flow.math.tanh(flow.matmul(x, w.with_distribute(distribute)))
    return job_fn


def test_with_distribute_lays_the_blob_out_in_the_job():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)
    job = _completed(_with_distribute_job(flow.distribute.split(1)))
    sigs = _sigs(job, "1d")
    mm = next(op.name for op in job.net.op if jb.op_type_name(op) == "matmul")
    assert sigs[mm] == {"a_0": "B", "b_0": "S(1)", "out_0": "S(1)"}  # the consumer sees the weight split
    types = [jb.op_type_name(op) for op in job.net.op]
    assert "parallel_cast" in types and "_logical_b_to_s" in types  # the broadcast weight is sliced
    assert "_nccl_logical_all_gather" in types  # the split(0) input is gathered for the broadcast operand


def test_with_distribute_on_one_device_only_records_the_policy():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(1)
    job = _completed(_with_distribute_job(flow.distribute.split(1)))
    assert "parallel_cast" not in [jb.op_type_name(op) for op in job.net.op]


def _run(ndev, make, batches):
    _session(ndev)
    job = make()
    losses = np.array([job(x, y) for x, y in batches])
    return losses, {k: v.numpy() for k, v in flow.get_all_variables().items()}, job


@pytest.mark.slow  # spawns worker processes
def test_watch_and_watch_diff_on_two_devices_see_the_logical_blobs():
    batches = _batches(3, seed=4)
    one_seen, two_seen = {}, {}
    one, _, _ = _run(1, lambda: _mlp_train_job(watched=one_seen), batches)
    two, _, job = _run(2, lambda: _mlp_train_job(watched=two_seen), batches)
    assert_close_at_scale(two, one, RTOL)
    for key in ("h", "dlogits"):
        assert len(two_seen[key]) == len(one_seen[key]) == 3
        for a, b in zip(two_seen[key], one_seen[key]):
            assert a.shape == b.shape  # the whole batch, not one device's half
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-7, err_msg=key)
    types = [jb.op_type_name(op) for op in job.graph.proto.net.op]
    assert types.count("foreign_watch_conf") == 2  # the Job still shows the watches


def _with_distribute_train_job():
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((B, 20)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        w = flow.get_variable("w", (20, 16), initializer=flow.random_normal_initializer())
        h = flow.nn.relu(flow.matmul(x, w.with_distribute(flow.distribute.split(1))))
        h = h.with_distribute(flow.distribute.broadcast())
        logits = flow.layers.dense(h, 5, kernel_initializer=flow.random_normal_initializer(), name="fc2")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2])).minimize(loss)
        return loss
    return train_job


@pytest.mark.slow  # spawns worker processes
def test_with_distribute_split_and_broadcast_match_one_device():
    batches = _batches(4, seed=5)
    one, one_vars, _ = _run(1, _with_distribute_train_job, batches)
    two, two_vars, job = _run(2, _with_distribute_train_job, batches)
    assert_close_at_scale(two, one, RTOL)
    for k in one_vars:
        np.testing.assert_allclose(two_vars[k], one_vars[k], rtol=1e-4, atol=1e-6, err_msg=k)
    proto = job.graph.proto
    sigs = _sigs(proto, "1d")
    casts = [op for op in proto.net.op if jb.op_type_name(op) == "parallel_cast"]
    assert sorted(sigs[op.name]["out_0"] for op in casts) == ["B", "S(1)"]
    types = [jb.op_type_name(op) for op in proto.net.op]
    assert "_logical_b_to_s" in types  # the broadcast weight sliced for split(1)
    assert "_nccl_logical_all_gather_noncontinuous" in types  # h (S(1)) gathered for broadcast()


def _accumulating(k, model_distribute=None):
    def make():
        config = flow.FunctionConfig()
        if k > 1:
            config.train.num_gradient_accumulation_steps(k)
        return _mlp_train_job(config=config, model_distribute=model_distribute)
    return make


@pytest.mark.slow  # spawns worker processes
@pytest.mark.parametrize("model_split", [False, True], ids=["data-parallel", "fc1-split(0)"])
def test_gradient_accumulation_on_two_devices_matches_one_device_full_batch(model_split):
    batches = _batches(4, seed=6)
    md = flow.distribute.split(0) if model_split else None
    one, one_vars, _ = _run(1, _accumulating(1, md), batches)
    two, two_vars, job = _run(2, _accumulating(2, md), batches)
    assert two.shape == one.shape == (4, B)  # the micro-batches' losses come back as the whole batch
    assert_close_at_scale(two, one, RTOL)
    assert two_vars.keys() - one_vars.keys() == {f"System-GradientAccumulation-Acc-{i}" for i in range(4)}
    for k in one_vars:
        np.testing.assert_allclose(two_vars[k], one_vars[k], rtol=RTOL, atol=1e-6, err_msg=k)
    plan = job.compiled_job.plan
    micro, update = plan.micro.job, plan.update.job
    types = [jb.op_type_name(op) for op in micro.net.op]  # each micro-batch reduces its 4 gradients
    assert types.count("_nccl_logical_all_reduce") + types.count("_nccl_logical_reduce_scatter") == 4
    for part in (micro, update):  # the buffers hold all-reduced gradients, in their variable's layout
        sbps = _sbp.blob_sbps(part)
        for i in range(4):  # fc1's weight and bias (split(0) when model-parallel) by their shapes
            name = f"System-GradientAccumulation-Acc-{i}"
            split = model_split and two_vars[name].shape in {one_vars["fc1-weight"].shape, one_vars["fc1-bias"].shape}
            assert sbps[f"{name}/out"] == ("S(0)" if split else "B"), name
        names = {op.name for op in part.net.op}  # each op of each part, and only those, has its layouts
        assert set(_sigs(part, "1d")) == set(_sigs(part, "nd")) == names
