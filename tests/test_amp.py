"""Auto mixed precision, loss scaling and bfloat16 variables.

References: the float32 run of the same job (AMP must track it, and must not equal it
bit for bit, which would mean nothing ran in low precision), numpy models of OneFlow's
``dynamic_loss_scale_schedule`` rule, and the raw bytes of bfloat16 arrays.
"""
import math
import os

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import text_format

import graphfront as flow
from graphfront import typing as tp
from graphfront.core import variable_meta_info_pb2
from graphfront.framework import job_builder as jb
from graphfront.ops.builder import build_op
from graphfront.passes.amp import white_set

B, D, H, C = 32, 20, 64, 10
LS = "System-Train-DynamicLossScale-train-LossScale"
COUNTER = "System-Train-DynamicLossScale-train-GoodStepCounter"
STEP = "System-Train-TrainStep-train"


def _data(seed=0):
    rng = np.random.RandomState(seed)
    return rng.randn(B, D).astype(np.float32), rng.randint(0, C, B).astype(np.int32)


def _mlp_job(amp=None, lr=0.1, policy=None, loss_scale_factor=None):
    """A two-layer MLP train job; ``amp`` is None (float32) or the AMP dtype."""
    flow.manual_seed(1)
    cfg = flow.FunctionConfig()
    if amp is not None:
        cfg.enable_auto_mixed_precision(True)
        cfg.mixed_precision_data_type(amp)

    @flow.global_function(type="train", function_config=cfg)
    def train(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1)
        h = flow.layers.dense(x, H, activation=flow.nn.relu, kernel_initializer=init, name="fc1")
        logits = flow.layers.dense(h, C, kernel_initializer=init, name="fc2")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0,
                           loss_scale_factor=loss_scale_factor, loss_scale_policy=policy).minimize(loss)
        return loss
    return train


def _losses(job, steps=20):
    x, y = _data()
    return np.array([job(x, y).item() for _ in range(steps)])


def _default_low_precision(job_func):
    """``(flow dtype, numpy dtype)`` that AMP uses by default for the device the job runs
    on, as documented: float16 on a GPU, bfloat16 on the CPU."""
    on_gpu = any(op.device_tag == "gpu" for op in job_func.graph.proto.net.op)
    return (flow.float16, np.float16) if on_gpu else (flow.bfloat16, ml_dtypes.bfloat16)


def _variable_casts(job_func):
    """variable name -> the dtype the job casts it to: its ``cast`` ops, and the ``multi_cast``
    the cleanup passes group them into."""
    proto = job_func.graph.proto
    variables = {op.name for op in proto.net.op if op.HasField("variable_conf")}
    out = {}
    for op in proto.net.op:
        if jb.op_type_name(op) in ("cast", "multi_cast"):
            for lbn in op.user_conf.input["in"].s:
                if lbn.split("/")[0] in variables:
                    out[lbn.split("/")[0]] = jb.user_attrs(op)["dtype"]
    return out


def _user_ops(job_func, op_type):
    return [op for op in job_func.graph.proto.net.op if op.HasField("user_conf") and op.user_conf.op_type_name == op_type]


def test_amp_job_shows_casts_and_keeps_float32_master_weights():
    train = _mlp_job(flow.bfloat16)
    train(*_data())
    g = train.graph
    assert g.passes.index("auto_mixed_precision") < g.passes.index("autograd")
    casts = {op.name: jb.user_attrs(op)["dtype"] for op in _user_ops(train, "cast")}
    # forward: inputs of the white matmuls cast down, the last matmul's output cast back up
    x_op = next(op.name for op in g.proto.net.op if op.HasField("input_conf")
                and jb.TensorDesc.from_proto(g.proto.helper.lbn2logical_blob_desc[f"{op.name}/out"]).shape == (B, D))
    assert casts.get(f"{x_op}-out-cast_f2h") is flow.bfloat16, sorted(casts)
    # the variables' casts, in one multi-tensor op (the group_variable_casts pass)
    assert _variable_casts(train) == {"fc1-weight": flow.bfloat16, "fc1-bias": flow.bfloat16,
                                      "fc2-weight": flow.bfloat16}
    assert len(_user_ops(train, "multi_cast")) == 1
    assert casts.get("fc2-matmul-out_0-cast_h2f") is flow.float32
    # backward follows: the casts' gradients are casts back to float32 before the update
    for name in ("fc1-weight-out-cast_f2h_grad", "fc2-weight-out-cast_f2h_grad"):
        assert casts.get(name) is flow.float32
    descs = {lbn: jb.TensorDesc.from_proto(p) for lbn, p in g.proto.helper.lbn2logical_blob_desc.items()}
    assert descs["fc2-matmul/out_0"].dtype is flow.bfloat16
    assert descs["fc1-activation/y_0"].dtype is flow.bfloat16      # relu (clear list) between white ops
    assert descs["fc2-bias_add/out_0"].dtype is flow.float32         # bias_add after the last white op
    for v in ("fc1-weight", "fc1-bias", "fc2-weight", "fc2-bias"):
        assert descs[f"{v}/out"].dtype is flow.float32
        assert flow.get_all_variables()[v].numpy().dtype == np.float32
    assert g.proto.job_conf.enable_auto_mixed_precision
    assert "cast_f2h" not in g.user_job_text()


UNIT_ROUNDOFF = {flow.bfloat16: 2.0 ** -8, flow.float16: 2.0 ** -11}


def amp_loss_rtol(dtype, batch):
    """Relative tolerance of a mean loss computed with AMP against float32.

    The inputs of the white-list ops are rounded to ``dtype``: a relative error uniform in
    [-u, u] per value (u = the unit roundoff, 2**-8 for bfloat16, 2**-11 for float16),
    standard deviation u / sqrt(3); accumulation stays float32. A logit (a dot product of
    rounded values with random signs) and each example's loss carry a relative error of
    that order, and the mean over ``batch`` independent examples divides it by
    sqrt(batch): standard deviation u / sqrt(3 * batch). The tolerance is 5 of those.
    """
    return 5.0 * UNIT_ROUNDOFF[dtype] / math.sqrt(3 * batch)


@pytest.mark.parametrize("dtype", [flow.bfloat16, flow.float16])
def test_amp_loss_trajectory_tracks_float32(dtype):
    ref = _losses(_mlp_job(None))
    flow.clear_default_session()
    amp = _losses(_mlp_job(dtype))
    assert ref[-1] < 0.8 * ref[0]                      # it trains
    # rtol 2.0e-3 (bf16), 2.5e-4 (fp16); measured max over the 20 steps: 3.0e-4, 4.1e-5
    np.testing.assert_allclose(amp, ref, rtol=amp_loss_rtol(dtype, B))
    assert not np.array_equal(amp, ref)                # and really ran in low precision


def test_amp_conv_batch_norm_job_tracks_float32():
    def run(amp):
        flow.clear_default_session()
        flow.manual_seed(1)
        cfg = flow.FunctionConfig()
        if amp:
            cfg.enable_auto_mixed_precision(True)   # the device's default type

        @flow.global_function(type="train", function_config=cfg)
        def train(x: tp.Numpy.Placeholder((8, 1, 12, 12)), y: tp.Numpy.Placeholder((8,), dtype=flow.int32)
                  ) -> tp.Numpy:
            init = flow.truncated_normal(0.1)
            h = flow.layers.conv2d(x, 4, 3, padding="SAME", name="c1", kernel_initializer=init)
            h = flow.nn.relu(flow.layers.batch_normalization(h, axis=1, name="bn1"))
            h = flow.layers.conv2d(h, 4, 3, padding="SAME", name="c2", kernel_initializer=init)
            h = flow.nn.max_pool2d(h, ksize=2, strides=2, padding="SAME", name="pool")
            logits = flow.layers.dense(flow.reshape(h, [8, -1]), C, kernel_initializer=init, name="d")
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), momentum=0).minimize(loss)
            return loss
        rng = np.random.RandomState(0)
        x, y = rng.rand(8, 1, 12, 12).astype(np.float32), rng.randint(0, C, 8).astype(np.int32)
        return np.array([train(x, y).item() for _ in range(8)]), train

    ref, _ = run(False)
    amp, train = run(True)
    # rtol 4.0e-3 (bf16, batch 8); measured max over the 8 steps: 1.6e-3
    np.testing.assert_allclose(amp, ref, rtol=amp_loss_rtol(flow.bfloat16, 8))
    low = _default_low_precision(train)[0]
    assert {k: v for k, v in _variable_casts(train).items() if k in ("c1-weight", "c2-weight")} == \
        {"c1-weight": low, "c2-weight": low}
    # the batch norm between the convolutions runs in low precision with float32 statistics (never cast)
    bn = next(op for op in _user_ops(train, "normalization") if op.name == "bn1")
    assert bn.user_conf.input["moving_mean"].s[0] == "bn1-moving_mean/out"
    assert bn.user_conf.input["x"].s[0] == "c1/out_0"      # conv output, no cast in between
    desc = jb.TensorDesc.from_proto(train.graph.proto.helper.lbn2logical_blob_desc[bn.user_conf.output["y"].s[0]])
    assert desc.dtype is _default_low_precision(train)[0]


def _job_of(fn):
    """The user ops of a predict job built from ``fn(x)`` after AMP, and the white set."""
    cfg = flow.FunctionConfig()
    cfg.enable_auto_mixed_precision(True)

    @flow.global_function(function_config=cfg)
    def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        return fn(x)
    return job, white_set(job.graph.user_job)


def test_white_set_follows_oneflow_rules():
    def net(x):
        w1 = flow.get_variable("w1", (6, 6), initializer=flow.ones_initializer())
        w2 = flow.get_variable("w2", (6, 6), initializer=flow.ones_initializer())
        h = flow.nn.relu(flow.math.tanh(flow.matmul(x, w1, name="mm1"), name="tanh1"), name="relu1")
        h = flow.matmul(h, w2, name="mm2")
        h = flow.math.sigmoid(h, name="sig")          # gray, consumed by a non-list op: stays float32
        return flow.math.reduce_sum(h, axis=[1], name="sum")
    job, white = _job_of(net)
    assert {"mm1", "tanh1", "relu1", "mm2"} <= white
    assert "sig" not in white and "sum" not in white
    out = job(np.ones((4, 6), np.float32))
    assert out.dtype == np.float32                  # returned blobs are cast back
    flow.clear_default_session()

    # amp_white_identity marks a white point: the clear ops around it join the white set
    job, white = _job_of(lambda x: flow.reshape(flow.amp_white_identity(flow.reshape(x, [24], name="r1")), [4, 6],
                                                name="r2"))
    assert {"r1", "r2"} <= white
    x = np.random.RandomState(0).randn(4, 6).astype(np.float32)
    low = _default_low_precision(job)[1]
    np.testing.assert_array_equal(job(x), x.astype(low).astype(np.float32))


# OneFlow v0.6.0 ``oneflow/core/job_rewriter/auto_mixed_precision_lists.cpp`` (the black list is
# empty) and the no-cast registry of ``auto_mixed_precision.cpp``: the reference the ``amp`` and
# ``amp_no_cast`` fields of the op definitions are checked against.
ONEFLOW_AMP_LISTS = {
    "white": {"matmul", "batch_matmul", "conv2d", "amp_white_identity", "broadcast_matmul",
              "fused_self_attention_query_mul_key_and_value", "prelu", "tf_prelu"},
    "gray": {"add_n", "tf_avg_pool_1d", "tf_avg_pool_2d", "tf_avg_pool_3d", "bias_add", "multiply", "sigmoid",
             "tanh", "sqrt", "scalar_mul", "scalar_add", "broadcast_add", "broadcast_sub", "broadcast_mul",
             "broadcast_div", "layer_norm", "dropout", "softmax", "gelu", "normalization", "normalization_add_relu",
             "sparse_softmax_cross_entropy", "fused_tril_scale_softmax_mask_scale",
             "fused_scale_mask_softmax_dropout", "fused_scale_mask_softmax", "fused_bias_add_gelu",
             "fused_bias_add_mask_scale", "acc"},
    "clear": {"gather", "tf_max_pool_1d", "tf_max_pool_2d", "tf_max_pool_3d", "reshape", "relu", "transpose",
              "random_mask_like", "concat", "pad", "same_padding", "tril", "slice", "fused_scale_tril", "identity",
              "flatten", "squeeze", "expand_dims", "cast_to_static_shape", "parallel_cast",
              "hierarchical_parallel_cast", "hierarchical_parallel_cast_like", "repeat", "unpack", "pack",
              "nvtx_start", "nvtx_end"},
}
# graphfront's own op types (no OneFlow op to follow), with the list each declares
GRAPHFRONT_AMP_LISTS = {"white": {"fused_multi_head_attention"}, "gray": set(), "clear": set()}
ONEFLOW_NO_CAST = {("normalization", "moving_mean"), ("normalization", "moving_variance"), ("normalization", "gamma"),
                   ("normalization", "beta"), ("normalization_grad", "gamma"),
                   ("normalization_add_relu", "moving_mean"), ("normalization_add_relu", "moving_variance"),
                   ("normalization_add_relu", "gamma"), ("normalization_add_relu", "beta")}
# graphfront's own fused ops' no-cast inputs: the fused classifier loss reads its low-precision
# logits uncast and computes in its bias's float32, as the unfused ops after their cast
GRAPHFRONT_NO_CAST = {("fused_bias_add_sparse_softmax_cross_entropy", "prediction")}


def test_amp_fields_of_the_op_definitions_are_oneflows_lists():
    from graphfront.ops import registry
    types = registry.registered_op_types()
    for name, listed in ONEFLOW_AMP_LISTS.items():
        declared = {t for t in types if registry.lookup(t).amp == name}
        assert declared == {t for t in listed if registry.has_op(t)} | GRAPHFRONT_AMP_LISTS[name], name
    no_cast = {(t, arg) for t in types for arg in registry.lookup(t).amp_no_cast}
    assert no_cast == ONEFLOW_NO_CAST | GRAPHFRONT_NO_CAST


def test_op_rejects_an_unknown_amp_list():
    from graphfront.ops import registry
    with pytest.raises(ValueError, match=r"op amp_list_probe: amp expects one of white, gray, clear or None, "
                                         r"received 'black'"):
        registry.op("amp_list_probe", inputs=["x"], outputs=["y"], infer=lambda ctx: None, kernel=None, amp="black")
    assert not registry.has_op("amp_list_probe")


def test_mixed_precision_data_type_rejects_float32():
    with pytest.raises(TypeError, match=r"mixed_precision_data_type expects flow.float16 or flow.bfloat16, "
                                        r"received graphfront.float32"):
        flow.FunctionConfig().mixed_precision_data_type(flow.float32)


# ------------------------------------------------------------------ loss scaling

def _schedule_reference(counts, scale, period, mult):
    """numpy model of dynamic_loss_scale_schedule (OneFlow's kernel rule): states after each step."""
    counter, out = 0, []
    for c in counts:
        if c == 0:
            counter += 1
            if counter >= period:
                scale, counter = min(scale * mult, 65536.0), 0
        else:
            counter, scale = 0, max(scale / mult, 1.0)
        out.append((np.float32(scale), counter))
    return out


def test_dynamic_loss_scale_schedule_op_matches_rule():
    @flow.global_function()
    def step(count: tp.Numpy.Placeholder((1,), dtype=flow.int64)) -> tp.Numpy:
        scale = flow.get_variable("scale", (1,), initializer=flow.constant_initializer(4.0), trainable=False)
        counter = flow.get_variable("counter", (1,), dtype=flow.int64, initializer=flow.constant_initializer(0),
                                    trainable=False)
        build_op("dynamic_loss_scale_schedule", {"count_not_finite": count, "loss_scale": scale,
                                                 "good_step_counter": counter},
                 {"increment_period": 3, "multiplier": 2.0}, outputs=())
        return count

    counts = [0, 0, 0, 5, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0] + [0] * 55
    for c, (scale, counter) in zip(counts, _schedule_reference(counts, 4.0, 3, 2.0)):
        step(np.array([c], np.int64))
        v = flow.get_all_variables()
        assert (v["scale"].numpy()[0], v["counter"].numpy()[0]) == (scale, counter), c
    assert v["scale"].numpy()[0] == 65536.0    # growth is capped at 65536, as OneFlow's kernel


def test_assign_if_and_assign_if_not():
    @flow.global_function()
    def job(value: tp.Numpy.Placeholder((3,)), cond: tp.Numpy.Placeholder((1,), dtype=flow.int64)) -> tp.Numpy:
        a = flow.get_variable("a", (3,), initializer=flow.zeros_initializer(), trainable=False)
        b = flow.get_variable("b", (3,), initializer=flow.zeros_initializer(), trainable=False)
        build_op("assign_if", {"ref": a, "value": value, "condition": cond}, outputs=())
        build_op("assign_if_not", {"ref": b, "value": value, "condition": cond}, outputs=())
        return value

    job(np.array([1, 2, 3], np.float32), np.array([0], np.int64))
    v = flow.get_all_variables()
    np.testing.assert_array_equal(v["a"].numpy(), [0, 0, 0])
    np.testing.assert_array_equal(v["b"].numpy(), [1, 2, 3])
    job(np.array([4, 5, 6], np.float32), np.array([2], np.int64))
    v = flow.get_all_variables()
    np.testing.assert_array_equal(v["a"].numpy(), [4, 5, 6])
    np.testing.assert_array_equal(v["b"].numpy(), [1, 2, 3])


@pytest.mark.parametrize("multi_tensor", [False, True])
def test_dynamic_loss_scale_skips_overflowing_steps_and_halves_the_scale(monkeypatch, multi_tensor):
    """float16 gradients of a loss scaled by 2**24 overflow: those steps must change nothing.
    ``multi_tensor``: the GPU's kernels on the CPU (the unscaled gradients packed in one
    buffer, counted in place; the square sum as one multi-tensor norm)."""
    if multi_tensor:
        from graphfront.ops import common
        monkeypatch.setattr(common, "multi_tensor_kernels", lambda device: True)
    policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=2.0 ** 24, increment_period=3)
    train = _mlp_job(flow.float16, policy=policy)
    x, y = _data()
    train.compiled_job
    before = {k: b.numpy() for k, b in flow.get_all_variables().items()}
    overflowed = []
    for _ in range(12):
        train(x, y)
        after = {k: b.numpy() for k, b in flow.get_all_variables().items()}
        changed = not np.array_equal(after["fc1-weight"], before["fc1-weight"])
        overflowed.append(0 if changed else 1)
        # a skipped step updates no variable and does not advance the train step
        assert after[STEP][0] == before[STEP][0] + (1 if changed else 0)
        scale, counter = _schedule_reference(overflowed, 2.0 ** 24, 3, 2.0)[-1]
        assert (after[LS][0], after[COUNTER][0]) == (scale, counter)
        before = after
    assert overflowed[:3] == [1, 1, 1] and overflowed[-4:] == [0, 0, 0, 0]
    assert after[STEP][0] == 12 - sum(overflowed)
    text = text_format.MessageToString(train.graph.proto)
    assert 'op_type_name: "dynamic_loss_scale_schedule"' in text and "skip_if" in text
    assert 'op_type_name: "multi_scalar_mul_by_tensor"' in text and 'op_type_name: "multi_count_not_finite"' in text


def test_dynamic_loss_scale_grows_and_matches_unscaled_training():
    ref = _losses(_mlp_job(None), steps=7)
    flow.clear_default_session()
    policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=1024.0, increment_period=3)
    train = _mlp_job(None, policy=policy)
    x, y = _data()
    scales = []
    losses = []
    for _ in range(7):
        losses.append(train(x, y).item())
        scales.append(flow.get_all_variables()[LS].numpy()[0])
    assert scales == [1024, 1024, 2048, 2048, 2048, 4096, 4096]
    # power-of-two scaling is exact in float32: same trajectory as without loss scaling
    np.testing.assert_allclose(losses, ref, rtol=1e-6)


def test_static_loss_scale_policy_matches_unscaled_training():
    ref = _losses(_mlp_job(None), steps=5)
    flow.clear_default_session()
    policy = flow.optimizer.loss_scale.static_loss_scale(128.0)
    train = _mlp_job(None, policy=policy)
    np.testing.assert_allclose(_losses(train, steps=5), ref, rtol=1e-6)
    assert train.graph.proto.job_conf.train_conf.loss_scale_factor == 128.0


# ------------------------------------------------------------------ bfloat16 variables

def test_bfloat16_variables_return_save_and_load_bit_exactly(tmp_path):
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3, 4), dtype=flow.bfloat16)) -> tp.Numpy:
        v = flow.get_variable("v", (3, 4), dtype=flow.bfloat16, initializer=flow.random_normal_initializer())
        return v + x

    zeros = np.zeros((3, 4), ml_dtypes.bfloat16)
    out = job(zeros)
    assert out.dtype == ml_dtypes.bfloat16
    saved = flow.get_all_variables()["v"].numpy()
    assert saved.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), saved.view(np.uint16))

    path = os.path.join(tmp_path, "ckpt")
    flow.checkpoint.save(path)
    raw = open(os.path.join(path, "v", "out"), "rb").read()
    assert raw == saved.tobytes() and len(raw) == 3 * 4 * 2          # raw little-endian bf16 bytes
    meta = text_format.Parse(open(os.path.join(path, "v", "meta")).read(), variable_meta_info_pb2.VariableMetaInfo())
    assert meta.data_type == flow.bfloat16.proto and list(meta.shape.dim) == [3, 4]

    flow.clear_default_session()

    @flow.global_function()
    def job2(x: tp.Numpy.Placeholder((3, 4), dtype=flow.bfloat16)) -> tp.Numpy:
        v = flow.get_variable("v", (3, 4), dtype=flow.bfloat16, initializer=flow.zeros_initializer())
        return v + x

    flow.load_variables(flow.load(path))
    back = job2(zeros)
    np.testing.assert_array_equal(back.view(np.uint16), saved.view(np.uint16))
    one = np.ones((3, 4), ml_dtypes.bfloat16)
    np.testing.assert_array_equal(job2(one), (saved.astype(np.float32) + 1).astype(ml_dtypes.bfloat16))


def test_bfloat16_variable_trains_under_dynamic_loss_scaling():
    # loss = sum(x @ w) with x = ones(4, 3): dloss/dw = 4 everywhere; SGD lr 0.5 moves w by -2 a step
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((4, 3), dtype=flow.bfloat16)) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), dtype=flow.bfloat16, initializer=flow.ones_initializer())
        loss = flow.math.reduce_sum(flow.matmul(x, w))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0,
                           loss_scale_policy=flow.optimizer.loss_scale.dynamic_loss_scale(8.0, 2)).minimize(loss)
        return loss

    x = np.ones((4, 3), ml_dtypes.bfloat16)
    for expected_w in (-1.0, -3.0, -5.0):
        loss = train(x)
        assert loss.dtype == ml_dtypes.bfloat16
        v = flow.get_all_variables()
        np.testing.assert_array_equal(v["w"].numpy().astype(np.float32), np.full((3, 2), expected_w, np.float32))
    assert v[LS].numpy()[0] == 16.0       # grown once after 2 finite steps


def test_default_low_precision_type_follows_the_device():
    from graphfront.core import job_pb2
    from graphfront.passes.amp import low_precision_dtype
    job = job_pb2.Job()
    job.net.op.add(name="a", device_tag="cpu")
    assert low_precision_dtype(job) is flow.bfloat16
    job.net.op.add(name="b", device_tag="gpu")
    assert low_precision_dtype(job) is flow.float16
    job.job_conf.flag_name2flag_value["mixed_precision_data_type"].at_data_type = flow.bfloat16.proto
    assert low_precision_dtype(job) is flow.bfloat16


def test_interface_ops_on_a_gpu_leave_a_job_computing_on_the_cpu_bfloat16():
    """Where CUDA is present the default placement (feeds, returns) is a GPU; a job whose
    white-listed ops run on the CPU still takes the CPU's type."""
    from graphfront.core import job_pb2
    from graphfront.passes.amp import low_precision_dtype
    job = job_pb2.Job()
    job.net.op.add(name="x", device_tag="gpu").input_conf.SetInParent()
    mm = job.net.op.add(name="mm", device_tag="cpu")
    mm.user_conf.op_type_name = "matmul"
    job.net.op.add(name="out", device_tag="gpu").return_conf.SetInParent()
    assert low_precision_dtype(job) is flow.bfloat16
    mm.device_tag = "gpu"
    assert low_precision_dtype(job) is flow.float16
