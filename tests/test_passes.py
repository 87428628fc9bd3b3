"""Cleanup, folding and fusion passes: each runs a job with and without the pass.

Every test builds the same job twice in fresh sessions seeded alike — once with all
passes, once with the pass under test disabled (``passes.disable_passes``) or with every
cleanup pass off — and compares results and updated variables; it also checks that the
pass ran (completion log) and rewrote what it should (op types of the completed job).
"""
import typing

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import passes
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.ops.builder import UserOpConfBuilder, user_op_builder
from graphfront.passes import fold, fusion, update_group
from graphfront.passes.cleanup import prune_dead_ops
from graphfront.runtime.plan import KernelCtx
from lenet import lenet
from test_plan import _AtenCalls

RNG = np.random.default_rng(0)


def _config(disabled=(), enable=True):
    config = flow.FunctionConfig()
    config.enable_passes(enable)
    if disabled:
        passes.disable_passes(config, *disabled)
    return config


def _types(job_func):
    return [jb.op_type_name(op) for op in job_func.graph.proto.net.op]


def _run(build, feeds, steps=1, disabled=(), enable=True, seed=0):
    """Fresh session, seed, build with the config, run ``steps`` times.

    Returns (results, variables, op types, completion log)."""
    flow.clear_default_session()
    flow.manual_seed(seed)
    job = build(_config(disabled, enable))
    results = [job(*feeds) for _ in range(steps)]
    variables = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    return results, variables, _types(job), job.graph.passes


def _check_same(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(a[0], b[0]):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        np.testing.assert_allclose(a[1][k], b[1][k], rtol=rtol, atol=atol, err_msg=k)


# ------------------------------------------------------------------ LeNet: every pass at once

def _lenet_train(config, batch=8, momentum=0.0):
    @flow.global_function(type="train", function_config=config)
    def train_job(images: tp.Numpy.Placeholder((batch, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((batch,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = lenet(images, train=True)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=momentum).minimize(loss)
        return loss
    return train_job


LENET_FEEDS = (RNG.random((8, 1, 28, 28), dtype=np.float32), RNG.integers(0, 10, 8).astype(np.int32))


@pytest.mark.slow
def test_lenet_train_with_and_without_all_passes():
    on = _run(_lenet_train, LENET_FEEDS, steps=3)
    off = _run(_lenet_train, LENET_FEEDS, steps=3, enable=False)
    _check_same(on, off, rtol=1e-4, atol=1e-5)
    required = [p.__name__ for p in passes.REQUIRED_PASSES if not hasattr(p, "is_enabled")]  # the others: off here
    assert required[:2] == ["autograd", "optimizer"]
    assert off[3] == required
    assert on[3] == required + [p.__name__ for p in passes.CLEANUP_PASSES]
    types = on[2]
    for fused in ("fused_matmul_bias", "fused_conv_grad", "fused_tf_max_pool_2d", "fused_tf_max_pool_2d_grad",
                  "multi_tensor_sgd_update", "folded_constant"):
        assert fused in types, fused
    for gone in ("bias_add", "conv_data_grad", "conv_filter_grad", "tf_max_pool_2d_grad", "sgd_update",
                 "constant_like_conf"):
        assert gone not in types, gone
    assert len(types) < len(off[2])


@pytest.mark.parametrize("name", ["fuse_bias_add", "fuse_conv_grads", "fuse_max_pool_grad", "group_update_ops",
                                  "fuse_update_ops", "fold_constants"])
def test_lenet_train_without_one_pass(name):
    on = _run(_lenet_train, LENET_FEEDS, steps=2)
    off = _run(_lenet_train, LENET_FEEDS, steps=2, disabled=[name])
    _check_same(on, off, rtol=1e-4, atol=1e-5)
    assert name not in off[3] and name in on[3]


def test_momentum_updates_are_grouped_and_match():
    on = _run(lambda c: _lenet_train(c, momentum=0.9), LENET_FEEDS, steps=3)
    off = _run(lambda c: _lenet_train(c, momentum=0.9), LENET_FEEDS, steps=3, disabled=["group_update_ops"])
    _check_same(on, off, rtol=1e-4, atol=1e-5)
    assert on[2].count("multi_tensor_momentum_update") == 1 and "momentum_update" not in on[2]
    assert off[2].count("momentum_update") == 8


def _adamw_train(config, correct):
    """Two dense layers under AdamW, the biases excluded from weight decay: two update groups."""
    @flow.global_function(type="train", function_config=config)
    def train_job(x: tp.Numpy.Placeholder((8, 6), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.dense(x, 5, activation=flow.math.tanh, name="d1")
            loss = flow.math.reduce_mean(flow.math.square(flow.layers.dense(h, 3, name="d2")))
        flow.optimizer.AdamW(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), weight_decay=0.1,
                             weight_decay_excludes=["bias"], do_bias_correction=correct).minimize(loss)
        return loss
    return train_job


@pytest.mark.parametrize("correct", [False, True])
def test_adam_updates_are_grouped_and_match(correct):
    feeds = (RNG.standard_normal((8, 6)).astype(np.float32),)
    on = _run(lambda c: _adamw_train(c, correct), feeds, steps=4)
    off = _run(lambda c: _adamw_train(c, correct), feeds, steps=4, disabled=["group_update_ops"])
    _check_same(on, off, rtol=1e-5, atol=1e-6)
    assert on[2].count("multi_tensor_adam_update") == 2 and "adam_update" not in on[2]
    assert off[2].count("adam_update") == 4
    # the kernel computes the bias correction from train_step: the factor ops are pruned
    assert "adam_bias_correction_factor" not in on[2]
    assert off[2].count("adam_bias_correction_factor") == (2 if correct else 0)


# ------------------------------------------------------------------ single passes

def _dense_relu_train(config):
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 6), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (6,), initializer=flow.random_normal_initializer())
            b = flow.get_variable("b", (6,), initializer=flow.random_normal_initializer())
            h = flow.nn.relu(flow.nn.bias_add(x * w, b))    # bias_add after a broadcast_mul
            y = (h * 2.0) * 0.5 + 1.0                       # scalar chain
            loss = flow.math.reduce_sum(y * y, axis=[1])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), momentum=0).minimize(loss)
        return y
    return job


def test_fuse_bias_add_relu_and_scalar_chains():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    on = _run(_dense_relu_train, (x,), steps=2)
    off = _run(_dense_relu_train, (x,), steps=2, enable=False)
    _check_same(on, off)
    assert "fused_bias_add_relu" in on[2] and "relu" not in on[2]
    assert "fused_scalar_mul_add" in on[2]
    for name in ("fuse_bias_add_relu", "fuse_scalar_chains"):
        part = _run(_dense_relu_train, (x,), steps=2, disabled=[name])
        _check_same(on, part)
    assert "relu" in _run(_dense_relu_train, (x,), disabled=["fuse_bias_add_relu"])[2]


def _in_out_dense_train(config):
    """Two dense layers as OneFlow-Benchmark's BERT writes them: an ``(in, out)`` weight,
    ``matmul`` without ``transpose_b``, then ``bias_add``."""
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((8, 6), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = x
            for name, (n_in, n_out) in (("d1", (6, 5)), ("d2", (5, 3))):
                w = flow.get_variable(f"{name}-weight", (n_in, n_out), initializer=flow.random_normal_initializer())
                b = flow.get_variable(f"{name}-bias", (n_out,), initializer=flow.random_normal_initializer())
                h = flow.math.tanh(flow.nn.bias_add(flow.matmul(h, w), b))
            loss = flow.math.reduce_mean(flow.math.square(h))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return h
    return job


def test_fuse_bias_add_takes_in_out_weights_through_a_view():
    x = RNG.standard_normal((8, 6)).astype(np.float32)
    on = _run(_in_out_dense_train, (x,), steps=3)
    off = _run(_in_out_dense_train, (x,), steps=3, disabled=["fuse_bias_add"])
    _check_same(on, off)
    assert on[2].count("fused_matmul_bias") == 2 and "bias_add" not in on[2] and on[2].count("transpose") == 2
    assert off[2].count("bias_add") == 2
    # the weight's transpose is a view: the forward GEMMs add the biases, nothing is copied
    calls = {}
    for key, disabled in (("on", ()), ("off", ["fuse_bias_add"])):
        flow.clear_default_session()
        job = _in_out_dense_train(_config(disabled))
        job(x)
        with _AtenCalls() as calls[key]:
            job(x)
    on_calls, off_calls = calls["on"].count, calls["off"].count
    assert on_calls["add"] == off_calls["add"] - 2 and on_calls["mm"] == off_calls["mm"] - 2, (on_calls, off_calls)
    assert on_calls["addmm"] == off_calls["addmm"] + 2
    for copy in ("clone", "copy_", "contiguous", "_to_copy"):
        assert on_calls[copy] == off_calls[copy], (copy, on_calls, off_calls)


def test_scalar_chain_values_against_numpy():
    @flow.global_function(function_config=_config())
    def job(x: tp.Numpy.Placeholder((3,), dtype=flow.float)) -> tp.Numpy:
        return ((x * 3.0) * -2.0 + 0.5) + 0.25
    x = np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_allclose(job(x), x * -6.0 + 0.75, rtol=1e-6)
    assert _types(job).count("fused_scalar_mul_add") == 1
    assert "scalar_mul" not in _types(job)


def _scaled_scores_train(config):
    """Attention-style scores ``matmul(q, k^T) * c`` (a scalar_mul after a product; its
    gradient ``dy * c`` feeds both product gradients) and a scaled input of a product."""
    @flow.global_function(type="train", function_config=config)
    def job(q: tp.Numpy.Placeholder((2, 3, 4, 5), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            k = flow.get_variable("k", (2, 3, 4, 5), initializer=flow.random_normal_initializer())
            w = flow.get_variable("w", (4, 6), initializer=flow.random_normal_initializer())
            scores = flow.matmul(q, k, transpose_b=True) * 0.125
            probs = flow.nn.softmax(scores)
            out = flow.matmul(flow.reshape(probs, (24, 4)) * -3.0, w)
            loss = flow.math.reduce_mean(out * out)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_fuse_scalar_mul_matmul_folds_scales_into_alpha_as_torch():
    q = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    on = _run(_scaled_scores_train, (q,), steps=2)
    off = _run(_scaled_scores_train, (q,), steps=2, disabled=["fuse_scalar_mul_matmul"])
    _check_same(on, off)
    assert "fuse_scalar_mul_matmul" in on[3]
    # the scores' scale, the scaled input and both their gradients' scales are gone (the
    # one scalar_mul left is reduce_mean's)
    assert on[2].count("scalar_mul") == 1 and off[2].count("scalar_mul") == 5
    # reference: torch autograd on the initial variables, one SGD step
    flow.clear_default_session()
    flow.manual_seed(0)
    job = _scaled_scores_train(_config())
    init = {n: torch.tensor(v.numpy(), dtype=torch.float64, requires_grad=True)
            for n, v in flow.get_all_variables().items() if n in ("k", "w")}
    loss = job(q)
    tq = torch.tensor(q, dtype=torch.float64)
    scores = tq @ init["k"].transpose(-1, -2) * 0.125
    out = (torch.softmax(scores, -1).reshape(24, 4) * -3.0) @ init["w"]
    ref = (out * out).mean()
    ref.backward()
    np.testing.assert_allclose(loss, ref.item(), rtol=1e-5)
    for n in ("k", "w"):
        np.testing.assert_allclose(flow.get_all_variables()[n].numpy(), (init[n] - 0.1 * init[n].grad).detach().numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=n)
    alphas = sorted(jb.user_attrs(op)["alpha"] for op in job.graph.proto.net.op
                    if jb.op_type_name(op) in ("batch_matmul", "matmul"))
    assert -3.0 in alphas and 0.125 in alphas


def _repeated_mask_train(config):
    """Each of two attention-like layers computes ``(mask - 1) * 10000`` again from the fed
    mask (OneFlow-Benchmark BERT's way), and a dropout of the same blob twice."""
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 6)), mask: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = x
            for i in range(2):
                w = flow.get_variable(f"w{i}", (6, 6), initializer=flow.random_normal_initializer())
                h = flow.nn.softmax(flow.matmul(h, w) + (mask - 1.0) * 10000.0)
            d = flow.nn.dropout(h, rate=0.5, seed=1) + flow.nn.dropout(h, rate=0.5, seed=1)
            loss = flow.math.reduce_sum(d * d)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_merge_duplicate_ops_computes_a_repeated_subexpression_once():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    mask = (RNG.random((4, 6)) > 0.3).astype(np.float32)
    on = _run(_repeated_mask_train, (x, mask), steps=3)
    off = _run(_repeated_mask_train, (x, mask), steps=3, disabled=["merge_duplicate_ops"])
    _check_same(on, off, rtol=0, atol=0)
    assert "merge_duplicate_ops" in on[3]
    for t in ("scalar_add", "scalar_mul"):   # (mask - 1) * 10000 once (and the train step's own + 1)
        assert off[2].count(t) - on[2].count(t) == 1, t
    # random ops are never merged: the two dropouts keep their own masks
    assert on[2].count("random_mask_like") == off[2].count("random_mask_like") == 2


def _amp_dense_train(config, devices="0:0"):
    """Two dense layers with auto mixed precision (bfloat16 on the CPU): three float32
    variables cast down at every step."""
    config.enable_auto_mixed_precision(True)
    config.mixed_precision_data_type(flow.bfloat16)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((8, 6), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", devices):
            h = flow.layers.dense(x, 5, activation=flow.nn.relu, name="d1")
            loss = flow.math.reduce_mean(flow.math.square(flow.layers.dense(h, 3, name="d2")))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_group_variable_casts_makes_one_multi_cast_with_each_casts_result():
    x = RNG.standard_normal((8, 6)).astype(np.float32)
    on = _run(_amp_dense_train, (x,), steps=3)
    off = _run(_amp_dense_train, (x,), steps=3, disabled=["group_variable_casts"])
    _check_same(on, off, rtol=0, atol=0)   # (the same casts, bit for bit)
    assert on[2].count("multi_cast") == 1 and off[2].count("multi_cast") == 0
    assert off[2].count("cast") - on[2].count("cast") == 3   # d1's weight and bias, d2's weight
    # the kernel: one multi-tensor copy converting as it copies
    b = UserOpConfBuilder("m", prefix=False).Op("multi_cast").Input("in", ["a/0", "b/0"]).Output("out", 2) \
        .Attr("dtype", flow.float16)
    b.CheckAndComplete()
    descs = {"a/0": jb.TensorDesc((2, 3), flow.float32), "b/0": jb.TensorDesc((4,), flow.float32)}
    from graphfront.ops import registry
    kernel = registry.lookup("multi_cast").kernel(KernelCtx(b.op_conf, descs, torch.device("meta")))
    with _AtenCalls() as calls:
        outs = kernel([torch.empty(2, 3, device="meta"), torch.empty(4, device="meta")])
    assert calls.count["_foreach_copy_"] == 1 and [(o.shape, o.dtype) for o in outs] == \
        [((2, 3), torch.float16), ((4,), torch.float16)]


def test_group_variable_casts_leaves_a_job_on_several_devices_alone():
    """(the casts of differently laid out variables would have to share one layout)"""
    from graphfront.framework.session import default_session, trace
    flow.clear_default_session()
    flow.config.cpu_device_num(2)
    builder, _ = trace(default_session(), _amp_dense_train(_config(), devices="0:0-1"))
    job = passes.complete(builder.job)
    assert "multi_cast" not in [jb.op_type_name(op) for op in job.net.op]
    assert "group_variable_casts" in list(job.job_conf.flag_name2flag_value[passes.COMPLETION_LOG].at_list_string.val)
    flow.clear_default_session()
    flow.config.cpu_device_num(1)


def _residual_train(config):
    """A forward ``add_n`` (dropout output + the input) and a gradient ``add_n`` (two matmuls
    reading ``h``): both fusable into ``_add_to_output``."""
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((6, 8))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            init = flow.random_normal_initializer(stddev=0.3)
            v = flow.get_variable("v", (6, 8), initializer=flow.ones_initializer())
            w1, w2 = (flow.get_variable(n, (8, 8), initializer=init) for n in ("w1", "w2"))
            h = x * v
            a, b = flow.matmul(h, w1), flow.matmul(h, w2)
            loss = flow.math.reduce_mean((flow.nn.dropout(a, rate=0.25) + x) * b)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_fuse_add_to_output_moves_each_two_input_add_n_into_its_producer():
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    on = _run(_residual_train, (x,), steps=3)
    off = _run(_residual_train, (x,), steps=3, disabled=["fuse_add_to_output"])
    _check_same(on, off)
    assert "fuse_add_to_output" in on[3] and "fuse_add_to_output" not in off[3]
    assert off[2].count("add_n") == 2 and "add_n" not in on[2]
    flow.clear_default_session()
    job = _residual_train(_config())
    job.compiled_job
    fused = {jb.op_type_name(op) for op in job.graph.proto.net.op if "_add_to_output" in op.user_conf.input}
    assert fused == {"dropout", "matmul"}
    # the config's explicit False keeps every add_n
    flow.clear_default_session()
    config = _config()
    config.enable_fuse_add_to_output(False)
    job = _residual_train(config)
    assert _types(job).count("add_n") == 2 and "fuse_add_to_output" not in job.graph.passes
    with pytest.raises(TypeError, match="expects a bool"):
        config.enable_fuse_add_to_output(1)


def _projections_train(config):
    """``h`` read by three matmuls (query, key and value projections) and a residual ``+ h``,
    reshaped to its own shape on the way (as OneFlow-Benchmark's BERT does): the gradient of
    ``h`` is a sum of four terms, one nested ``add_n`` and a no-op reshape deep."""
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((6, 8))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            init = flow.random_normal_initializer(stddev=0.3)
            v = flow.get_variable("v", (6, 8), initializer=flow.ones_initializer())
            w1, w2, w3 = (flow.get_variable(n, (8, 8), initializer=init) for n in ("w1", "w2", "w3"))
            h = x * v
            q, k = flow.matmul(h, w1), flow.matmul(flow.reshape(h, (6, 8)), w2)
            val = flow.matmul(h, w3)
            loss = flow.math.reduce_mean(flow.math.tanh(q * k + val) + h * h)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_fuse_add_to_output_sums_a_gradient_of_several_terms_inside_the_matmuls():
    """(graphfront's extension of OneFlow's two-input rule) no add_n is left: the terms made
    first are summed once, then each matmul adds the running sum in its GEMM's epilogue."""
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    on = _run(_projections_train, (x,), steps=3)
    off = _run(_projections_train, (x,), steps=3, disabled=["fuse_add_to_output"])
    _check_same(on, off)

    def sums(disabled):
        """(input counts of the add_n ops, matmuls taking an _add_to_output)"""
        flow.clear_default_session()
        job = _projections_train(_config(disabled))
        job.compiled_job
        ops = job.graph.proto.net.op
        return (sorted(len(op.user_conf.input["in"].s) for op in ops if jb.op_type_name(op) == "add_n"),
                sum(jb.op_type_name(op) == "matmul" and "_add_to_output" in op.user_conf.input for op in ops))
    # the forward's two sums stay (their matmul runs before the other term is made); the
    # gradient of h: its five terms (h * h's two and the three matmuls', one through the no-op
    # reshape) were one add_n; now the two terms no matmul can take (read twice) are one
    # add_n, the running sum then passes through the three matmuls' epilogues
    assert sums(["fuse_add_to_output"]) == ([2, 2, 5], 0)
    assert sums([]) == ([2, 2, 2], 3)


def _inner_sum_train(config):
    """``(x * v + matmul(x, w)) + tanh(x)``: the outer sum's last term is made after the
    matmul, so only the inner sum can go into the matmul's epilogue."""
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((6, 8))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            v = flow.get_variable("v", (6, 8), initializer=flow.ones_initializer())
            w = flow.get_variable("w", (8, 8), initializer=flow.random_normal_initializer(stddev=0.3))
            inner = x * v + flow.matmul(x, w)
            loss = flow.math.reduce_mean(flow.math.square(inner + flow.math.tanh(x * v)))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_fuse_add_to_output_rewrites_an_inner_sum_its_outer_sum_cannot_take():
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    on = _run(_inner_sum_train, (x,), steps=3)
    _check_same(on, _run(_inner_sum_train, (x,), steps=3, disabled=["fuse_add_to_output"]))
    flow.clear_default_session()
    job = _inner_sum_train(_config())
    job.compiled_job
    forward = [op for op in job.graph.proto.net.op if jb.op_type_name(op) == "matmul" and "_grad" not in op.name]
    assert len(forward) == 1 and "_add_to_output" in forward[0].user_conf.input


def test_dropout_adds_its_add_to_output_in_the_mask_scale_kernel():
    """dropout with ``_add_to_output``: ``add_to + x * mask * scale`` in one ``addcmul``."""
    b = UserOpConfBuilder("d", prefix=False).Op("dropout").Input("in", ["x/0"]).Input("mask", ["m/0"]) \
        .Input("_add_to_output", ["r/0"]).Output("out").Attr("scale", 1 / 0.75)
    b.CheckAndComplete()
    descs = {"x/0": jb.TensorDesc((32,), flow.float32), "m/0": jb.TensorDesc((32,), flow.int8),
             "r/0": jb.TensorDesc((32,), flow.float32)}
    from graphfront.ops import registry
    kernel = registry.lookup("dropout").kernel(KernelCtx(b.op_conf, descs, torch.device("cpu")))
    g = torch.Generator().manual_seed(2)
    x, r = torch.randn(32, generator=g), torch.randn(32, generator=g)
    mask = (torch.rand(32, generator=g) > 0.25).to(torch.int8)
    with _AtenCalls() as calls:
        out = kernel(x, mask, r)
    assert calls.count["addcmul"] == 1 and sum(calls.count.values()) == 1, calls.count
    torch.testing.assert_close(out, r + x * mask / 0.75, rtol=1e-6, atol=1e-7)


def test_dropout_passes_its_gradient_to_its_add_to_output():
    """A dropout built with ``_add_to_output`` (as OneFlow's pass leaves it, or by hand)
    differentiates ``out = addend + in * mask * scale`` in the addend too: d out/d addend = 1."""
    flow.clear_default_session()

    @flow.global_function(type="train", function_config=_config())
    def job(x: tp.Numpy.Placeholder((8,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            v = flow.get_variable("v", (8,), initializer=flow.zeros_initializer())
            mask = flow.nn.random_mask_like(x, 0.5, seed=3)
            out = user_op_builder("d").Op("dropout").Input("in", [x]).Input("mask", [mask]) \
                .Input("_add_to_output", [v]).Output("out").Attr("scale", 2.0).Build().InferAndTryRun() \
                .RemoteBlobList()[0]
            loss = flow.math.reduce_sum(out * out) * 0.5
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return out
    x = RNG.standard_normal(8).astype(np.float32)
    out = job(x)
    kept = out != 0
    assert 0 < kept.sum() < 8   # (the mask drops some)
    # d loss / d v = out (with v = 0): one SGD step moves v to -0.1 * out
    np.testing.assert_allclose(flow.get_all_variables()["v"].numpy(), -0.1 * out, rtol=1e-6)


def _const_predict(config):
    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            c = flow.constant(1.5, dtype=flow.float, shape=(2, 3))
            k = flow.math.exp(c * 2.0) + 1.0               # constant subgraph
            return x * k
    return job


def test_fold_constants_replaces_constant_subgraph():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    on = _run(_const_predict, (x,))
    off = _run(_const_predict, (x,), disabled=["fold_constants"])
    _check_same(on, off)
    np.testing.assert_allclose(on[0][0], x * (np.exp(3.0) + 1.0), rtol=1e-6)
    assert on[2].count("folded_constant") == 1
    assert "exp" not in on[2] and "exp" in off[2]


def test_fold_constants_is_exact_for_float64_and_leaves_random_ops():
    @flow.global_function(function_config=_config())
    def job(x: tp.Numpy.Placeholder((3,), dtype=flow.double)) -> tp.Numpy:
        c = flow.constant(0.1, dtype=flow.double, shape=(3,))
        return x + flow.math.sqrt(c)
    x = np.zeros(3, np.float64)
    assert job(x).tolist() == [np.sqrt(0.1)] * 3
    folded = [op for op in job.graph.proto.net.op if jb.op_type_name(op) == "folded_constant"]
    assert len(folded) == 1 and jb.user_attrs(folded[0])["dtype"] is flow.float64
    # a random op is never constant
    flow.clear_default_session()

    @flow.global_function(type="train", function_config=_config())
    def train(x: tp.Numpy.Placeholder((4, 4), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (4, 4), initializer=flow.ones_initializer())
            c = flow.constant(1.0, dtype=flow.float, shape=(4, 4))
            d = flow.nn.dropout(c, rate=0.5)
            loss = flow.math.reduce_sum(x * w * d, axis=[1])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return d
    assert "dropout" in _types(train)
    masks = [train(np.ones((4, 4), np.float32)) for _ in range(4)]
    assert any(not np.array_equal(masks[0], m) for m in masks[1:])


def test_constant_ops_names_the_constant_subgraph():
    job_func = _const_predict(_config(enable=False))
    job = job_func.graph.proto
    names = fold.constant_ops(job)
    types = {jb.op_type_name(op) for op in job.net.op if op.name in names}
    assert types == {"constant", "scalar_mul", "exp", "scalar_add"}


def test_prune_dead_ops_removes_unused_ops():
    @flow.global_function(function_config=_config(enable=False))
    def job(x: tp.Numpy.Placeholder((3,), dtype=flow.float)) -> tp.Numpy:
        flow.math.exp(x, name="unused")
        return x + 1.0
    job(np.zeros(3, np.float32))
    full = job.graph.proto
    pruned = prune_dead_ops(type(full).FromString(full.SerializeToString()))
    assert "unused" in [op.name for op in full.net.op]
    assert "unused" not in [op.name for op in pruned.net.op]
    assert "unused/y_0" not in pruned.helper.lbn2logical_blob_desc


def test_fuse_update_ops_moves_scale_into_update():
    job_func = _lenet_train(_config(enable=False))
    job = job_func.graph.proto
    done = fusion.fuse_update_ops(type(job).FromString(job.SerializeToString()))
    assert not [op for op in done.net.op if op.name.startswith("System-ModelDiffScale")]
    updates = [op for op in done.net.op if jb.op_type_name(op) == "sgd_update"]
    assert updates and all(jb.user_attrs(op)["scale"] == pytest.approx(1 / 8) for op in updates)
    # the variable -> gradient relation names blobs that still exist
    for p in done.helper.tag2lbi_relations["variable_grad"].pair:
        assert f"{p.second.op_name}/{p.second.blob_name}" in done.helper.lbn2logical_blob_desc


def _clipped_train(config):
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 5), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (5, 3), initializer=flow.random_normal_initializer(),
                                  regularizer=flow.regularizers.l2(0.01))
            b = flow.get_variable("b", (3,), initializer=flow.zeros_initializer())
            loss = flow.math.reduce_sum(flow.math.square(flow.matmul(x, w) + b), axis=[1])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9,
                           grad_clipping=flow.optimizer.grad_clipping.by_global_norm(0.5)).minimize(loss)
        return loss
    return job


def test_fuse_update_ops_folds_the_clip_factor_into_scale_by_tensor():
    """Clipping by global norm multiplies every gradient by one factor (``scalar_mul_by_tensor``):
    the update reads it as its ``scale_by_tensor`` (OneFlow's FuseUpdateOpsPass), under the
    regularizer folded into ``l2``; training is unchanged."""
    x = RNG.standard_normal((4, 5)).astype(np.float32) * 3
    on = _run(_clipped_train, (x,), steps=3)
    off = _run(_clipped_train, (x,), steps=3, disabled=["fuse_update_ops"])
    _check_same(on, off)
    assert "scalar_mul_by_tensor" in off[2] and "scalar_mul_by_tensor" not in on[2]
    assert "l1_l2_regularize_gradient" in off[2] and "l1_l2_regularize_gradient" not in on[2]
    flow.clear_default_session()
    job = _clipped_train(_config(enable=False)).graph.proto
    done = fusion.fuse_update_ops(type(job).FromString(job.SerializeToString()))
    w_update = next(op for op in done.net.op if op.name == "w_optimizer")
    (factor,) = w_update.user_conf.input["scale_by_tensor"].s
    assert "ClipGradient-GlobalNorm" in factor and jb.user_attrs(w_update)["l2"] == pytest.approx(0.01)


def test_fuse_update_ops_keeps_a_regularizer_that_a_tensor_scale_follows():
    """``(diff + l2 * w) * s`` is not ``diff * s + l2 * w``: with the regularizer before the
    ``scalar_mul_by_tensor``, only the factor folds and the regularizer stays an op."""
    flow.clear_default_session()
    job = _clipped_train(_config(enable=False)).graph.proto
    ops = {op.name: op for op in job.net.op}
    upd = ops["w_optimizer"]
    reg = ops[upd.user_conf.input["model_diff"].s[0].split("/")[0]]
    mul = ops[reg.user_conf.input["model_diff"].s[0].split("/")[0]]
    assert (jb.op_type_name(reg), jb.op_type_name(mul)) == ("l1_l2_regularize_gradient", "scalar_mul_by_tensor")
    grad = mul.user_conf.input["x"].s[0]   # grad -> mul -> reg -> update  becomes  grad -> reg -> mul -> update
    reg.user_conf.input["model_diff"].s[0] = grad
    mul.user_conf.input["x"].s[0] = f"{reg.name}/out_0"
    upd.user_conf.input["model_diff"].s[0] = f"{mul.name}/y_0"
    done = fusion.fuse_update_ops(job)
    w_update = next(op for op in done.net.op if op.name == "w_optimizer")
    assert list(w_update.user_conf.input["model_diff"].s) == [f"{reg.name}/out_0"]
    assert list(w_update.user_conf.input["scale_by_tensor"].s) == list(mul.user_conf.input["scalar"].s)
    assert jb.user_attrs(w_update)["l2"] == 0.0 and reg.name in {op.name for op in done.net.op}


def _amp_train(config):
    config.enable_auto_mixed_precision(True)
    config.mixed_precision_data_type(flow.float16)   # (float32 batch norm, float16 convolution and dense)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 3, 6, 6), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.conv2d(x, 4, 3, padding="SAME", name="conv")
            h = flow.nn.relu(flow.layers.batch_normalization(h, axis=1, name="bn1"))
            h = flow.nn.relu(flow.layers.batch_normalization(h, axis=1, name="bn2"))
            loss = flow.math.reduce_mean(flow.layers.dense(flow.reshape(h, (4, -1)), 3, name="fc"))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9,
                           loss_scale_policy=flow.optimizer.loss_scale.dynamic_loss_scale(
                               initial_loss_scale=1024.0)).minimize(loss)
        return loss
    return job


def test_fuse_cast_scale_unscales_half_gradients_in_one_op():
    """AMP's float16 weight gradients are cast to float32 and unscaled by the loss scale
    (``cast`` -> ``scalar_mul_by_tensor``): one ``fused_cast_scale`` each, with the same
    values bit for bit (OneFlow's FuseCastScalePass)."""
    x = RNG.standard_normal((4, 3, 6, 6)).astype(np.float32)
    on = _run(_amp_train, (x,), steps=3, disabled=["group_scalar_mul_by_tensor"])   # (which would group them)
    off = _run(_amp_train, (x,), steps=3, disabled=["fuse_cast_scale", "group_scalar_mul_by_tensor"])
    _check_same(on, off, rtol=0, atol=0)
    fused = on[2].count("fused_cast_scale")   # one per variable whose gradient is float16
    assert fused >= 2 and "fused_cast_scale" not in off[2] and "fuse_cast_scale" in on[3]
    assert off[2].count("cast") - on[2].count("cast") == fused
    assert off[2].count("scalar_mul_by_tensor") - on[2].count("scalar_mul_by_tensor") == fused


def test_group_scalar_mul_by_tensor_unscales_float_gradients_at_once():
    """Every gradient's loss-scale undo is one ``multi_scalar_mul_by_tensor``, bit for bit as
    one op each: the batch norms' float32 gamma and beta (AMP keeps batch norm in float32)
    and the float16 ones, cast on the way (``fused_cast_scale`` before)."""
    x = RNG.standard_normal((4, 3, 6, 6)).astype(np.float32)
    on = _run(_amp_train, (x,), steps=3)
    off = _run(_amp_train, (x,), steps=3, disabled=["group_scalar_mul_by_tensor"])
    _check_same(on, off, rtol=0, atol=0)
    assert on[2].count("multi_scalar_mul_by_tensor") == 1 and "group_scalar_mul_by_tensor" in on[3]
    flow.clear_default_session()
    job = _amp_train(_config())
    job(x)
    (multi,) = [op for op in job.graph.proto.net.op if jb.op_type_name(op) == "multi_scalar_mul_by_tensor"]
    grouped = [lbn.split("/")[0] for lbn in multi.user_conf.input["x"].s]
    assert len(multi.user_conf.output["y"].s) == len(grouped) >= 4   # (2 x gamma and beta at least)
    assert off[2].count("scalar_mul_by_tensor") + off[2].count("fused_cast_scale") - \
        on[2].count("scalar_mul_by_tensor") == len(grouped)
    # the loss's seed gradient is scaled in the forward: not an optimizer-side op, not grouped
    assert on[2].count("scalar_mul_by_tensor") == 1
    assert off[2].count("fused_cast_scale") >= 2 and "fused_cast_scale" not in on[2]


@pytest.mark.parametrize("chained", [False, True])
def test_group_scalar_mul_by_tensor_never_merges_an_op_into_its_own_input(chained):
    """Two ``scalar_mul_by_tensor`` by one scalar, each read by a non-finite count: merged
    when independent; left apart when the second one's input is computed from the first's
    output (one merged op would feed itself)."""
    def build(config):
        @flow.global_function(function_config=config)
        def job(x: tp.Numpy.Placeholder((3,), dtype=flow.float),
                s: tp.Numpy.Placeholder((1,), dtype=flow.float)) -> typing.Tuple[tp.Numpy, tp.Numpy]:
            with flow.scope.placement("cpu", "0:0"):
                y1 = flow.math.multiply(x, s)   # (a (1,) operand: scalar_mul_by_tensor)
                c1 = flow.math.count_not_finite(y1)
                x2 = x + flow.cast(c1, flow.float) if chained else x + 1.0
                y2 = flow.math.multiply(x2, s)
                return c1, flow.math.count_not_finite(y2)
        return job
    x = np.array([1.0, 2.0, 3.0], np.float32)
    on = _run(build, (x, np.array([np.inf], np.float32)))
    off = _run(build, (x, np.array([np.inf], np.float32)), disabled=["group_scalar_mul_by_tensor"])
    assert [r.tolist() for r in on[0][0]] == [r.tolist() for r in off[0][0]] == [[3], [3]]
    assert on[2].count("multi_scalar_mul_by_tensor") == (0 if chained else 1)
    assert on[2].count("scalar_mul_by_tensor") == (2 if chained else 0)


def test_fused_cast_scale_reads_half_and_writes_float_in_one_kernel():
    from graphfront.ops import registry
    b = UserOpConfBuilder("u", prefix=False).Op("fused_cast_scale").Input("x", ["x/0"]).Input(
        "scale_by_tensor", ["s/0"]).Output("y").Attr("scale", 0.5)
    b.CheckAndComplete()
    descs = {"x/0": jb.TensorDesc((3, 4), flow.float16), "s/0": jb.TensorDesc((1,), flow.float32)}
    kernel = registry.lookup("fused_cast_scale").kernel(KernelCtx(b.op_conf, descs, torch.device("cpu")))
    x = torch.from_numpy(RNG.standard_normal((3, 4)).astype(np.float16))
    s = torch.tensor([2.0 ** -20], dtype=torch.float32)   # below float16's range: a half factor would be 0
    with _AtenCalls() as calls:
        y = kernel(x, s)
    assert y.dtype == torch.float32 and y.shape == (3, 4)
    assert torch.equal(y, x.float() * (s * 0.5))
    assert not calls.count["_to_copy"], calls.count


def _layer_norm_train(config, begin_params_axis=-1):
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 3, 8), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (8,), initializer=flow.random_normal_initializer())
            h = flow.layers.layer_norm(x * w, begin_norm_axis=-1, begin_params_axis=begin_params_axis, name="ln")
            h2 = flow.layers.layer_norm(h, begin_norm_axis=1, begin_params_axis=1, name="ln2")
            loss = flow.math.reduce_sum(flow.math.square(h2 * x), axis=[1, 2])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def test_fuse_layer_norm_grads_into_one_backward():
    """Both layer norms (parameters over the normalized axes, of rank 1 and 2) get one
    ``fused_layer_norm_grad`` for their data, gamma and beta gradients; training equals the
    unfused job's."""
    x = RNG.standard_normal((4, 3, 8)).astype(np.float32)
    on = _run(_layer_norm_train, (x,), steps=3)
    off = _run(_layer_norm_train, (x,), steps=3, disabled=["fuse_layer_norm_grads"])
    _check_same(on, off)
    assert on[2].count("fused_layer_norm_grad") == 2 and "fuse_layer_norm_grads" in on[3]
    assert not {"layer_norm_grad", "layer_norm_param_grad"} & set(on[2])
    assert off[2].count("layer_norm_grad") == off[2].count("layer_norm_param_grad") == 2
    # no op reads the forward's 'normalized' any more: the layer norms drop it (gamma and
    # beta applied inside the fused layer norm kernel)
    flow.clear_default_session()
    job = _layer_norm_train(_config())
    job(x)
    norms = [op for op in job.graph.proto.net.op if jb.op_type_name(op) == "layer_norm"]
    assert len(norms) == 2 and all(list(op.user_conf.output_order) == ["y", "mean", "inv_variance"] for op in norms)
    assert not [lbn for lbn in job.graph.proto.helper.lbn2logical_blob_desc if "normalized" in lbn]


def test_fuse_layer_norm_grads_leaves_parameters_over_other_axes():
    """Parameters over more axes than the normalized ones (begin_params_axis 1 < begin_norm_axis 2)
    are not one layer-norm backward: that layer norm keeps its two ops."""
    x = RNG.standard_normal((4, 3, 8)).astype(np.float32)
    on = _run(lambda c: _layer_norm_train(c, begin_params_axis=1), (x,), steps=2)
    off = _run(lambda c: _layer_norm_train(c, begin_params_axis=1), (x,), steps=2,
               disabled=["fuse_layer_norm_grads"])
    _check_same(on, off)
    assert on[2].count("fused_layer_norm_grad") == 1
    assert on[2].count("layer_norm_grad") == on[2].count("layer_norm_param_grad") == 1


def test_group_update_ops_direct():
    job = _lenet_train(_config(enable=False)).graph.proto
    done = update_group.group_update_ops(type(job).FromString(job.SerializeToString()))
    (multi,) = [op for op in done.net.op if jb.op_type_name(op) == "multi_tensor_sgd_update"]
    assert len(multi.user_conf.input["model"].s) == 8 == len(multi.user_conf.input["model_diff"].s)


def _pool_train(config):
    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((2, 7, 7, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3,), initializer=flow.random_normal_initializer())
            h = flow.nn.relu(x * w)
            p = flow.nn.max_pool2d(h, ksize=3, strides=2, padding="SAME", data_format="NHWC")
            q = flow.nn.max_pool2d(x * w, ksize=2, strides=1, padding="VALID", data_format="NHWC")
            loss = flow.math.reduce_sum(p * p, axis=[1, 2, 3]) + flow.math.reduce_sum(q, axis=[1, 2, 3])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return p
    return job


def test_fuse_max_pool_grad_padded_channels_last():
    x = RNG.standard_normal((2, 7, 7, 3)).astype(np.float32)
    on = _run(_pool_train, (x,), steps=2)
    off = _run(_pool_train, (x,), steps=2, disabled=["fuse_max_pool_grad"])
    _check_same(on, off)
    assert on[2].count("fused_tf_max_pool_2d") == 2 and "tf_max_pool_2d_grad" not in on[2]
    assert "relu_grad" not in on[2]  # taken over by the fused pool grad
    assert "relu" not in on[2] and "relu" in off[2]  # the forward relu moved into the pool


def _bn_predict(config):
    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((2, 3, 6, 6), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.conv2d(x, 4, 3, padding="SAME", name="conv", use_bias=False)
            h = flow.layers.batch_normalization(h, axis=1, training=False, name="bn")
            return flow.nn.relu(h)
    return job


def _bn_values():
    rng = np.random.default_rng(3)
    return {"conv-weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "bn-gamma": rng.uniform(0.5, 2, 4).astype(np.float32),
            "bn-beta": rng.standard_normal(4).astype(np.float32),
            "bn-moving_mean": rng.standard_normal(4).astype(np.float32),
            "bn-moving_variance": rng.uniform(0.5, 2, 4).astype(np.float32)}


def test_fold_batch_norm_into_conv_predict():
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    outs = {}
    for name, disabled in (("on", ()), ("off", ("fold_batch_norm",))):
        flow.clear_default_session()
        job = _bn_predict(_config(disabled))
        job.compiled_job
        flow.load_variables(_bn_values())
        first = job(x)
        # new variable values must show up: the folded weights follow the variables
        vals = _bn_values()
        vals["bn-gamma"] = vals["bn-gamma"] * 2
        flow.load_variables({"bn-gamma": vals["bn-gamma"]})
        outs[name] = (first, job(x), _types(job), job.compiled_job.plan.hoisted)
    v = _bn_values()
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(v["conv-weight"]), padding=1)
    ref = torch.nn.functional.batch_norm(ref, torch.from_numpy(v["bn-moving_mean"]),
                                         torch.from_numpy(v["bn-moving_variance"]), torch.from_numpy(v["bn-gamma"]),
                                         torch.from_numpy(v["bn-beta"]), eps=0.001).relu().numpy()
    np.testing.assert_allclose(outs["on"][0], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs["on"][0], outs["off"][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs["on"][1], outs["off"][1], rtol=1e-4, atol=1e-5)
    assert not np.allclose(outs["on"][0], outs["on"][1])
    assert "normalization" not in outs["on"][2] and "normalization" in outs["off"][2]
    assert outs["on"][3]  # the folding ops are hoisted: computed once per variable state


def test_disable_passes_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown pass 'fuse_everything'"):
        passes.disable_passes(flow.FunctionConfig(), "fuse_everything")
    assert "fold_constants" in passes.pass_names()


def test_user_op_builder_chain_into_folded_constant_text_round_trip():
    from google.protobuf import text_format

    @flow.global_function(function_config=_config())
    def job(x: tp.Numpy.Placeholder((2,), dtype=flow.float)) -> tp.Numpy:
        c = user_op_builder("c").Op("constant").Output("out").Attr("floating_value", 2.0) \
            .Attr("is_floating_value", True).Attr("dtype", flow.float).Attr("shape", (2,)).Build() \
            .InferAndTryRun().RemoteBlobList()[0]
        return x + flow.math.square(c)
    assert job(np.ones(2, np.float32)).tolist() == [5.0, 5.0]
    text = job.graph.text()
    back = text_format.Parse(text, type(job.graph.proto)())
    assert back == job.graph.proto


def _lr_job(boundaries, values):
    def build(config):
        @flow.global_function(type="train", function_config=config)
        def job(x: tp.Numpy.Placeholder((2, 2), dtype=flow.float)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                w = flow.get_variable("w", (2,), initializer=flow.ones_initializer())
                loss = flow.math.reduce_sum(x * w, axis=[1])
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler(boundaries, values),
                               momentum=0).minimize(loss)
            return loss
        return job
    return build


def test_step_independent_learning_rate_is_folded_others_are_not():
    x = np.ones((2, 2), np.float32)
    const_on = _run(_lr_job([], [0.5]), (x,), steps=3)
    const_off = _run(_lr_job([], [0.5]), (x,), steps=3, enable=False)
    _check_same(const_on, const_off)
    np.testing.assert_allclose(const_on[1]["w"], 1 - 3 * 0.5)
    assert "learning_rate_schedule_conf" not in const_on[2]
    steps_on = _run(_lr_job([1], [0.5, 0.25]), (x,), steps=3)
    assert "learning_rate_schedule_conf" in steps_on[2]
    _check_same(steps_on, _run(_lr_job([1], [0.5, 0.25]), (x,), steps=3, enable=False))
