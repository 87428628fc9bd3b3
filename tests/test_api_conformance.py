"""Conformance of graphfront's public API with OneFlow v0.6.0's single-client API
(OneFlow v0.6.0 ``python/oneflow/compatible/single_client``): parameter names, order and defaults of the
names added or fixed by the conformance review, the op type and default op-name prefix
they emit, and their values and gradients against PyTorch eager autograd / numpy."""
import ast
import inspect
import re
import unittest as std_unittest
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework import env_settings
from graphfront.framework.errors import JobBuildError

_rng = np.random.RandomState(7)


def rand(*shape, low=-2.0, high=2.0):
    return _rng.uniform(low, high, size=shape).astype(np.float32)


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


_DTYPES = {np.dtype(np.float32): flow.float32, np.dtype(np.int32): flow.int32, np.dtype(np.int64): flow.int64}


def run(build, feeds=(), variables=(), train=False):
    """Run ``build(*variable_blobs, *feed_blobs)`` once in a fresh session.

    ``variables`` become float32 variables initialised to the given arrays; in a train job
    the loss is the sum of every float output and the gradient of each variable is
    returned. Returns (outputs, grads, user job proto).
    """
    flow.clear_default_session()
    grads, names = {}, [f"v{i}" for i in range(len(variables))]

    def job(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            vs = []
            for n, a in zip(names, variables):
                v = flow.get_variable(n, a.shape, dtype=_DTYPES[a.dtype], initializer=flow.zeros_initializer())
                if train:
                    flow.watch_diff(v, (lambda n: lambda d: grads.__setitem__(n, d))(n))
                vs.append(v)
            outs = build(*vs, *blobs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if train:
                total = flow.math.add_n([flow.math.reduce_sum(o) for o in outs if o.dtype.is_floating_point])
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(total)
            return tuple(outs)

    params = [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.Numpy.Placeholder(a.shape, dtype=_DTYPES[a.dtype]))
              for i, a in enumerate(feeds)]
    job.__signature__ = inspect.Signature(params, return_annotation=tp.Bundle[tp.Numpy])
    f = flow.global_function(type="train" if train else "predict")(job)
    if variables:
        flow.load_variables(dict(zip(names, variables)))
    outs = f(*feeds)
    return list(outs), [grads.get(n) for n in names], f.compiled_job.user_job


def ops_of(job):
    """[(op name, op type)] of a user job, variables and interface ops left out."""
    return [(op.name, jb.op_type_name(op)) for op in job.net.op
            if jb.op_kind(op) not in ("variable_conf", "input_conf", "return_conf")]


def t64(a, grad=False):
    return torch.tensor(a.astype(np.float64), requires_grad=grad)


# ================================================================== signatures

def _params(sig):
    fn = ast.parse(f"def f{sig}: pass").body[0].args
    defaults = [None] * (len(fn.args) - len(fn.defaults)) + list(fn.defaults)
    out = [(a.arg, None if d is None else ast.literal_eval(d) if not isinstance(d, ast.Attribute) and
            not isinstance(d, ast.Call) else ast.unparse(d)) for a, d in zip(fn.args, defaults)]
    if fn.vararg:
        out.append(("*" + fn.vararg.arg, None))
    if fn.kwarg:
        out.append(("**" + fn.kwarg.arg, None))
    return out


def _resolve(path):
    obj = flow
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _evaluate(src):
    """A reference default given as source (``flow.float``, ``flow.distribute.broadcast()``)."""
    return eval(src, {"flow": flow}) if isinstance(src, str) and src.startswith("flow.") else src


# (name, signature exactly as OneFlow v0.6.0 python/oneflow/compatible/single_client defines it)
FIXED_SIGNATURES = [
    ("Size", None),
    ("assign", "(ref, value, dtype=None, name=None)"),
    ("cast_to_current_logical_view", "(x)"),
    ("eager_execution_enabled", "()"),
    ("enable_eager_execution", "(val=True)"),
    ("constant_scalar", "(value, dtype=None, name=None)"),
    ("broadcast_to_compatible_with", "(x, compatible, name=None)"),
    ("save", "(obj, save_dir)"),
    ("current_scope", "()"),
    ("current_machine_id", "()"),
    ("current_global_function_desc", "()"),
    ("sync_default_session", "()"),
    ("find_or_create_module", "(module_name, create, reuse=False)"),
    ("name_scope", "(*args, **kwargs)"),
    ("fixed_placement", "(*args, **kwargs)"),
    ("device_prior_placement", "(*args, **kwargs)"),
    ("consistent_user_op_builder", "(op_name)"),
    ("matmul", "(a, b, transpose_a=False, transpose_b=False, alpha=1.0, name=None)"),
    ("linalg.matmul", "(a, b, transpose_a=False, transpose_b=False, alpha=1.0, name=None)"),
    ("distribute.split", "(axis)"),
    ("distribute.broadcast", "()"),
    ("distribute.auto", "()"),
    ("distribute.assert_is_valid_distribute", "(distribute)"),
    ("distribute.consistent_strategy", "()"),
    ("distribute.mirrored_strategy", "()"),
    ("distribute.consistent_strategy_enabled", "()"),
    ("distribute.mirrored_strategy_enabled", "()"),
    ("unittest.TestCase", None),
    ("unittest.num_nodes_required", "(num_nodes)"),
    ("unittest.skip_unless_1n1d", "()"),
    ("unittest.skip_unless_1n2d", "()"),
    ("unittest.skip_unless_1n4d", "()"),
    ("unittest.skip_unless_2n1d", "()"),
    ("unittest.skip_unless_2n2d", "()"),
    ("unittest.skip_unless_2n4d", "()"),
    ("unittest.env.device_num", "()"),
    ("unittest.env.eager_execution_enabled", "()"),
    ("unittest.env.node_size", "()"),
    ("unittest.env.node_list", "()"),
    ("unittest.env.has_node_list", "()"),
    ("unittest.env.world_size", "()"),
    ("unittest.env.has_world_size", "()"),
    ("unittest.env.typing_check_enabled", "()"),
    ("env.init", "()"),
    ("env.ctrl_port", "(val)"),
    ("env.data_port", "(val)"),
    ("env.log_dir", "(val)"),
    ("env.logbuflevel", "(val)"),
    ("env.logtostderr", "(val)"),
    ("env.machine", "(*val)"),
    ("env.grpc_use_no_signal", "(val=True)"),
    ("config.comm_net_worker_num", "(val)"),
    ("config.compute_thread_pool_size", "(val)"),
    ("config.disable_group_boxing_by_dst_parallel", "(val=False)"),
    ("config.enable_mem_chain_merge", "(val=True)"),
    ("config.enable_model_io_v2", "(val)"),
    ("config.legacy_model_io_enabled", "()"),
    ("config.load_library", "(val)"),
    ("config.load_library_now", "(val)"),
    ("config.max_mdsave_worker_num", "(val)"),
    ("config.nccl_use_compute_stream", "(val=False)"),
    ("config.reserved_device_mem_mbyte", "(val)"),
    ("config.reserved_host_mem_mbyte", "(val)"),
    ("config.collect_act_event", "(val=True)"),
    ("config.enable_numa_aware_cuda_malloc_host", "(val=True)"),
    ("config.rdma_mem_block_mbyte", "(val)"),
    ("config.rdma_recv_msg_buf_mbyte", "(val)"),
    ("config.thread_enable_local_message_queue", "(val)"),
    ("config.use_rdma", "(val=True)"),
    ("config.collective_boxing.enable_fusion", "(val=True)"),
    ("config.collective_boxing.nccl_enable_all_to_all", "(val)"),
    ("config.collective_boxing.nccl_fusion_threshold_mb", "(val)"),
    ("config.collective_boxing.num_callback_threads", "(val)"),
    ("layers.dense", "(inputs, units, activation=None, use_bias=True, kernel_initializer=None, "
                     "bias_initializer=None, kernel_regularizer=None, bias_regularizer=None, trainable=True, "
                     "name='Dense', model_distribute=flow.distribute.broadcast())"),
    ("layers.prelu", "(inputs, alpha_initializer=None, alpha_regularizer=None, shared_axes=None, trainable=True, "
                     "name='PRelu', model_distribute=flow.distribute.broadcast())"),
    ("layers.batch_normalization_add_relu",
     "(inputs, addend=None, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True, beta_initializer=None, "
     "gamma_initializer=None, beta_regularizer=None, gamma_regularizer=None, moving_mean_initializer=None, "
     "moving_variance_initializer=None, trainable=True, training=True, name='BatchNorm', gamma_name=None, "
     "beta_name=None, moving_mean_name=None, moving_variance_name=None)"),
    ("layers.batch_normalization_relu",
     "(inputs, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True, beta_initializer=None, "
     "gamma_initializer=None, beta_regularizer=None, gamma_regularizer=None, moving_mean_initializer=None, "
     "moving_variance_initializer=None, trainable=True, training=True, name='BatchNorm')"),
    ("layers.layer_norm_grad", "(dy, x, mean, inv_variance, begin_norm_axis=1, name='LayerNormGrad')"),
    ("layers.layer_norm_param_grad", "(dy, norm, gamma, begin_params_axis=-1, name='LayerNormParamGrad')"),
    ("nn.compat_conv2d", "(input, filters, strides, padding, data_format='NCHW', dilations=None, groups=1, "
                         "name=None)"),
    ("nn.softmax_grad", "(y, dy, axis=None, name=None)"),
    ("nn.distributed_sparse_softmax_cross_entropy_with_logits", "(labels, logits, name=None)"),
    ("nn.TripletMarginLoss", "(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False, "
                             "reduction='mean', name=None)"),
    ("nn.PixelShuffle", "(input, upscale_factor, name=None)"),
    ("nn.PixelShufflev2", "(input, h_upscale_factor, w_upscale_factor, name=None)"),
    ("nn.GroupNorm", "(x, num_groups=32, eps=1e-05, affine=True, name=None)"),
    ("nn.InstanceNorm1d", "(x, eps=1e-05, affine=True, name=None)"),
    ("nn.InstanceNorm2d", "(x, eps=1e-05, affine=True, name=None)"),
    ("nn.InstanceNorm3d", "(x, eps=1e-05, affine=True, name=None)"),
    ("nn.relu", "(x, name=None)"),
    ("nn.tril", "(x, diagonal=0, fill_value=0, name=None)"),
    ("nn.fused_scale_tril", "(x, diagonal=0, fill_value=0, scale=1, name=None)"),
    ("math.unsorted_segment_sum", "(data, segment_ids, num_segments, axis=0, name=None)"),
    ("math.unsorted_segment_sum_like", "(data, segment_ids, like, axis=0, name=None)"),
    ("math.unsorted_batch_segment_sum", "(data, segment_ids, num_segments, name=None)"),
    ("math.broadcast_to_compatible_with", "(x, compatible, name=None)"),
]


@pytest.mark.parametrize("path,sig", FIXED_SIGNATURES, ids=[p for p, _ in FIXED_SIGNATURES])
def test_signature_matches_reference(path, sig):
    obj = _resolve(path)
    if sig is None:
        assert inspect.isclass(obj)
        return
    params = list(inspect.signature(obj).parameters.values())
    got = [("*" + p.name if p.kind == p.VAR_POSITIONAL else "**" + p.name if p.kind == p.VAR_KEYWORD else p.name,
            None if p.default is inspect.Parameter.empty else p.default) for p in params]
    want = [(n, _evaluate(d)) for n, d in _params(sig)]
    assert [n for n, _ in got] == [n for n, _ in want]
    for (n, g), (_, w) in zip(got, want):
        assert g == w and type(g) is type(w), f"{path}: default of {n} is {g!r}, reference {w!r}"


@pytest.mark.parametrize("alias,target", [
    ("math.relu", "nn.relu"), ("nn.tril", "math.tril"), ("nn.fused_scale_tril", "math.fused_scale_tril"),
    ("math.fused_scale_tril_softmax_dropout", "nn.fused_scale_tril_softmax_dropout"),
    ("math.unsorted_segment_sum", "unsorted_segment_sum"),
    ("math.unsorted_segment_sum_like", "unsorted_segment_sum_like"),
    ("math.unsorted_batch_segment_sum", "unsorted_batch_segment_sum"),
    ("math.broadcast_to_compatible_with", "broadcast_to_compatible_with"),
    ("consistent_user_op_builder", "user_op_builder"), ("linalg.matmul", "matmul"),
    ("math.clip_by_value", "clamp"), ("math.in_top_k", "in_top_k"),
    ("detection.object_bbox_flip", "object_bbox_flip"), ("detection.object_bbox_scale", "object_bbox_scale"),
    ("detection.object_segmentation_polygon_flip", "object_segmentation_polygon_flip"),
    ("detection.object_segmentation_polygon_scale", "object_segmentation_polygon_scale"),
    ("detection.object_segmentation_polygon_to_mask", "object_segmentation_polygon_to_mask"),
    ("image.flip", "image_flip"), ("image.normalize", "image_normalize"), ("image.decode", "image_decode"),
    ("image.batch_align", "image_batch_align"), ("image.random_crop", "image_random_crop"),
])
def test_aliases_are_the_same_objects(alias, target):
    assert _resolve(alias) is _resolve(target)


# ================================================================== ops emitted: types and default names

def test_assign_writes_the_variable_and_emits_assign():
    value = rand(2, 3)

    def build(x):
        w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer())
        assert flow.assign(w, x) is None
        return flow.identity(x)

    _, _, job = run(build, feeds=[value])
    assert [(re.sub(r"\d+$", "", n), t) for n, t in ops_of(job)] == [("Assign_", "assign"), ("Identity_", "identity")]
    close(flow.get_all_variables()["w"].numpy(), value)


def test_assign_rejects_a_non_variable_ref():
    with pytest.raises(TypeError, match=r"flow.assign: argument 'ref' must be a variable blob"):
        run(lambda x: (flow.assign(flow.identity(x), x), x)[1], feeds=[rand(2)])


def test_broadcast_to_compatible_with_values_grad_and_op():
    x, a, b = rand(1, 3), rand(4, 1), rand(2, 4, 3)
    outs, grads, job = run(lambda x, a, b: flow.broadcast_to_compatible_with(x, [a, b]), feeds=[a, b],
                           variables=[x], train=True)
    close(outs[0], np.broadcast_to(x, (2, 4, 3)))
    close(grads[0], np.full((1, 3), 8.0))  # every x element is copied to 2 * 4 places
    name, op_type = [o for o in ops_of(job) if o[1] == "expand"][0]
    assert re.fullmatch(r"BroadcastToCompatibleWith_\d+", name)
    with pytest.raises(ValueError, match=r"do not broadcast together"):
        run(lambda x, a: flow.broadcast_to_compatible_with(x, [a]), feeds=[rand(2, 3), rand(3, 2)])


def test_matmul_rank3_by_rank2_values_and_grads():
    a, b = rand(2, 3, 4), rand(4, 5)
    outs, grads, job = run(lambda a, b: flow.matmul(a, b, transpose_b=False, alpha=0.5), variables=[a, b],
                           train=True)
    ta, tb = t64(a, True), t64(b, True)
    ref = 0.5 * ta @ tb
    ga, gb = torch.autograd.grad(ref.sum(), [ta, tb])
    close(outs[0], ref.detach().numpy())
    close(grads[0], ga.numpy())
    close(grads[1], gb.numpy())
    assert any(t == "broadcast_matmul" and re.fullmatch(r"Matmul_\d+", n) for n, t in ops_of(job))
    with pytest.raises(TypeError, match=r"flow.matmul: argument 'b' expects a blob"):
        run(lambda a: flow.matmul(a, 2.0), feeds=[a])


def test_compat_conv2d_same_pads_like_tensorflow():
    x, w = rand(1, 2, 5, 5), rand(3, 2, 2, 2)
    outs, grads, job = run(lambda x, w: flow.nn.compat_conv2d(x, w, 1, "SAME"), variables=[x, w], train=True)
    tx, tw = t64(x, True), t64(w, True)
    ref = F.conv2d(F.pad(tx, (0, 1, 0, 1)), tw)  # SAME_UPPER: the odd pad goes after
    gx, gw = torch.autograd.grad(ref.sum(), [tx, tw])
    close(outs[0], ref.detach().numpy())
    close(grads[0], gx.numpy())
    close(grads[1], gw.numpy())
    assert any(t == "conv2d" and re.fullmatch(r"Conv2d_\d+", n) for n, t in ops_of(job))


@pytest.mark.parametrize("axis", [None, 0])
def test_softmax_grad_matches_autograd(axis):
    x, dy = rand(3, 4), rand(3, 4)
    dim = -1 if axis is None else axis
    y = torch.softmax(t64(x), dim).numpy().astype(np.float32)
    outs, _, job = run(lambda y, dy: flow.nn.softmax_grad(y, dy, axis=axis), feeds=[y, dy])
    tx = t64(x, True)
    ref, = torch.autograd.grad(torch.softmax(tx, dim), tx, t64(dy))
    close(outs[0], ref.numpy())
    assert any(t == "softmax_grad" and re.fullmatch(r"Softmax_\d+", n) for n, t in ops_of(job))


def test_distributed_sparse_softmax_cross_entropy_values_grad_and_op():
    logits, labels = rand(4, 5), np.array([0, 4, 2, 2], np.int32)
    outs, grads, job = run(lambda z, l: flow.nn.distributed_sparse_softmax_cross_entropy_with_logits(l, z),
                           feeds=[labels], variables=[logits], train=True)
    tz = t64(logits, True)
    ref = F.cross_entropy(tz, torch.tensor(labels, dtype=torch.long), reduction="none")
    g, = torch.autograd.grad(ref.sum(), tz)
    close(outs[0], ref.detach().numpy())
    close(grads[0], g.numpy(), rtol=1e-4, atol=1e-4)
    assert [(re.sub(r"\d+$", "", n), t) for n, t in ops_of(job) if "Entropy" in n] == \
        [("DistributedSparseSoftmaxCrossEntropy_", "sparse_softmax_cross_entropy_ms")]


@pytest.mark.parametrize("p,swap,reduction", [(2.0, False, "mean"), (1.0, False, "sum"), (3.0, True, "none")])
def test_triplet_margin_loss_matches_torch(p, swap, reduction):
    a, pos, neg = rand(4, 6), rand(4, 6), rand(4, 6)
    outs, grads, job = run(lambda a, pos, neg: flow.nn.TripletMarginLoss(a, pos, neg, margin=0.7, p=p, swap=swap,
                                                                         reduction=reduction),
                           variables=[a, pos, neg], train=True)
    ta, tp_, tn = t64(a, True), t64(pos, True), t64(neg, True)
    ref = F.triplet_margin_loss(ta, tp_, tn, margin=0.7, p=p, eps=1e-6, swap=swap, reduction=reduction)
    refs = torch.autograd.grad(ref.sum(), [ta, tp_, tn])
    close(outs[0], ref.detach().numpy())
    for g, r in zip(grads, refs):
        close(g, r.numpy(), rtol=1e-4, atol=1e-4)
    assert all(re.match(r"TripletMarginLoss\d+_", name) for name, _ in ops_of(job) if "Reduce" not in name
               and not name.startswith(("AddN", "System", "Reduce", "ScalarMul")))
    with pytest.raises(ValueError, match=r"TripletMarginLoss: p must be > 0"):
        run(lambda a: flow.nn.TripletMarginLoss(a, a, a, p=0), feeds=[a])


def test_pixel_shuffle_matches_torch_and_v2_rectangular():
    x = rand(2, 12, 3, 2)
    outs, grads, job = run(lambda x: flow.nn.PixelShuffle(x, 2), variables=[x], train=True)
    close(outs[0], F.pixel_shuffle(torch.tensor(x), 2).numpy())
    close(grads[0], np.ones_like(x))
    assert all(re.match(r"PixelShufflev2\d+_", n) for n, _ in ops_of(job)[:3])
    outs, _, _ = run(lambda x: flow.nn.PixelShufflev2(x, 3, 2), feeds=[x])
    ref = np.zeros((2, 2, 9, 4), np.float32)
    for c in range(2):
        for i in range(3):
            for j in range(2):
                ref[:, c, i::3, j::2] = x[:, c * 6 + i * 2 + j]
    close(outs[0], ref)
    with pytest.raises(ValueError, match=r"input must be \(N, C\*3\*3, H, W\)"):
        run(lambda x: flow.nn.PixelShuffle(x, 3), feeds=[x])


def test_group_norm_values_grad_and_variables():
    x, w = rand(2, 4, 5), rand(2, 4, 5)
    outs, _, job = run(lambda x: flow.nn.GroupNorm(x, num_groups=2, name="gn"), feeds=[x])
    close(outs[0], F.group_norm(t64(x), 2, eps=1e-5).numpy())
    variables = {op.name: tuple(op.variable_conf.shape.dim) for op in job.net.op if op.HasField("variable_conf")}
    assert variables["gn_gamma"] == (1, 4, 1) and variables["gn_beta"] == (1, 4, 1)
    # gradient through a random upstream weight (d sum(norm(x)) alone is ~0)
    outs, grads, _ = run(lambda x, w: flow.math.multiply(flow.nn.GroupNorm(x, num_groups=4, affine=False), w),
                         feeds=[w], variables=[x], train=True)
    tx = t64(x, True)
    ref = F.group_norm(tx, 4, eps=1e-5) * t64(w)
    g, = torch.autograd.grad(ref.sum(), tx)
    close(outs[0], ref.detach().numpy())
    close(grads[0], g.numpy(), atol=1e-4)
    with pytest.raises(ValueError, match=r"must divide into num_groups groups"):
        run(lambda x: flow.nn.GroupNorm(x, num_groups=3), feeds=[x])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_instance_norm_matches_torch(n):
    shape = (2, 3, 4, 3, 2)[:n + 2]
    x, w = rand(*shape), rand(*shape)
    fn = getattr(flow.nn, f"InstanceNorm{n}d")
    outs, grads, job = run(lambda x, w: flow.math.multiply(fn(x), w), feeds=[w], variables=[x], train=True)
    tx = t64(x, True)
    ref = F.instance_norm(tx, eps=1e-5) * t64(w)
    g, = torch.autograd.grad(ref.sum(), tx)
    close(outs[0], ref.detach().numpy(), atol=1e-4)
    close(grads[0], g.numpy(), atol=1e-4)
    gamma = [op.name for op in job.net.op if op.HasField("variable_conf") and op.name.endswith("_gamma")]
    assert len(gamma) == 1 and re.fullmatch(rf"InstanceNorm{n}D_\d+_gamma", gamma[0])


def test_batch_normalization_add_relu_composite():
    x, addend = rand(4, 3), rand(4, 3)
    outs, _, job = run(lambda x, a: flow.layers.batch_normalization_add_relu(x, a, axis=1), feeds=[x, addend],
                       train=False)
    # predict job: moving statistics (mean 0, variance 1) are used
    close(outs[0], np.maximum(x / np.sqrt(1 + 1e-3) + addend, 0), atol=1e-5)
    assert [(n, t) for n, t in ops_of(job)] == [("BatchNorm", "normalization"), ("BatchNorm-add", "add_n"),
                                               ("BatchNorm-relu", "relu")]
    outs, _, _ = run(lambda x: flow.layers.batch_normalization_relu(x, axis=1, name="bn"), feeds=[x], train=False)
    close(outs[0], np.maximum(x / np.sqrt(1 + 1e-3), 0), atol=1e-5)
    with pytest.raises(JobBuildError, match=r"addend expected float32 \(4, 3\)"):
        run(lambda x, a: flow.layers.batch_normalization_add_relu(x, a), feeds=[x, rand(3, 4)])


def test_layer_norm_grad_and_param_grad_match_autograd():
    x, dy, gamma = rand(3, 4), rand(3, 4), rand(4)
    mean = x.mean(1)
    inv = 1 / np.sqrt(x.var(1) + 1e-5)
    norm = ((x - mean[:, None]) * inv[:, None]).astype(np.float32)
    outs, _, job = run(lambda dy, x, m, iv, n, g: (flow.layers.layer_norm_grad(dy, x, m, iv),)
                       + flow.layers.layer_norm_param_grad(dy, n, g),
                       feeds=[dy, x, mean.astype(np.float32), inv.astype(np.float32), norm, gamma])
    tx, tg, tb = t64(x, True), t64(gamma, True), t64(np.zeros(4, np.float32), True)
    y = F.layer_norm(tx, (4,), tg, tb, eps=1e-5)
    gx, gg, gb = torch.autograd.grad(y, [tx, tg, tb], t64(dy))
    # layer_norm_grad is the backward of the normalization alone: feed it dy * gamma
    close(outs[1], dy * gamma)
    close(outs[2], gb.numpy())
    close(outs[3], gg.numpy())
    tx2 = t64(x, True)
    gx_plain, = torch.autograd.grad(F.layer_norm(tx2, (4,), eps=1e-5), tx2, t64(dy))
    close(outs[0], gx_plain.numpy(), atol=1e-4)
    assert [t for _, t in ops_of(job)] == ["layer_norm_grad", "layer_norm_param_grad"]
    assert [n for n, _ in ops_of(job)] == ["LayerNormGrad", "LayerNormParamGrad"]


def test_loss_default_names_use_oneflow_prefixes():
    a, b = rand(2, 3), rand(2, 3)
    _, _, job = run(lambda a, b: [flow.nn.MSELoss(a, b), flow.nn.L1Loss(a, b), flow.nn.MarginRankingLoss(a, b, b),
                                  flow.nn.BCEWithLogitsLoss(a, b), flow.nn.logsoftmax(a)], feeds=[a, b])
    names = [n for n, _ in ops_of(job)]
    for prefix in ("MSELoss", "L1Loss", "MarginRankingLoss", "BCEWithLogitsLoss"):
        assert any(re.fullmatch(rf"{prefix}\d+(_.*)?", n) for n in names), (prefix, names)
        assert not any(n.startswith(prefix + "_") for n in names), names
    assert any(re.fullmatch(r"logsoftmax\d+", n) and t == "log_softmax" for n, t in ops_of(job))


def test_constant_scalar_shape_and_value():
    outs, _, job = run(lambda x: [flow.constant_scalar(2.5, dtype=flow.float32), x], feeds=[rand(1)])
    assert outs[0].shape == (1,) and outs[0][0] == 2.5
    with pytest.raises(ValueError, match=r"flow.constant: dtype is required"):
        run(lambda x: flow.constant_scalar(1.0), feeds=[rand(1)])


# ================================================================== distribute, layers' model_distribute

def test_distribute_policies():
    d = flow.distribute
    assert d.split(0) == d.split(0) != d.split(1)
    assert d.broadcast() == d.broadcast() != d.auto()
    assert repr(d.split(1)) == "flow.distribute.split(1)" and str(d.split(1)) == "S(1)" and str(d.broadcast()) == "B"
    d.assert_is_valid_distribute(d.split(0))
    with pytest.raises(TypeError, match=r"expects a distribute policy"):
        d.assert_is_valid_distribute("S(0)")
    with pytest.raises(ValueError, match=r"axis must be >= 0, received -1"):
        d.split(-1)
    with pytest.warns(DeprecationWarning, match=r"use flow.scope.consistent_view"):
        assert d.consistent_strategy_enabled() is True


def test_default_distribute_strategy_is_the_deprecated_default_logical_view():
    # OneFlow v0.6.0 keeps FunctionConfig.default_distribute_strategy: it warns and sets the
    # logical view (OneFlow-Benchmark's BERT scripts pass flow.distribute.consistent_strategy())
    seen = {}
    for strategy, view in (("mirrored_strategy", "mirrored"), ("consistent_strategy", "consistent")):
        config = flow.FunctionConfig()
        with pytest.warns(DeprecationWarning):
            value = getattr(flow.distribute, strategy)()
        with pytest.warns(DeprecationWarning, match=r"default_distribute_strategy is deprecated, use "
                                                    r"default_logical_view"):
            config.default_distribute_strategy(value)

        @flow.global_function(function_config=config)
        def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
            seen[view] = flow.scope.mirrored_view_enabled()
            return x + 1
        np.testing.assert_array_equal(job(np.zeros(2, np.float32)), np.ones(2, np.float32))
        flow.clear_default_session()
    assert seen == {"mirrored": True, "consistent": False}
    with pytest.raises(TypeError, match=r"default_logical_view expects"):
        with pytest.warns(DeprecationWarning):
            flow.FunctionConfig().default_distribute_strategy("consistent")


def test_dense_with_model_distribute_and_with_distribute():
    x = rand(2, 3)
    seen = {}

    def build(x):
        h = x.with_distribute(flow.distribute.split(0))
        seen["distribute"] = h.distribute
        y = flow.layers.dense(h, 4, model_distribute=flow.distribute.split(0),
                              kernel_initializer=flow.ones_initializer())
        return flow.layers.dense(y, 2, name="d2", kernel_initializer=flow.ones_initializer())

    outs, _, _ = run(build, feeds=[x])
    assert seen["distribute"] == flow.distribute.split(0)
    close(outs[0], np.repeat(np.repeat(x.sum(1, keepdims=True), 4, 1).sum(1, keepdims=True), 2, 1))
    with pytest.raises(JobBuildError, match=r"model_distribute expects a flow.distribute policy"):
        run(lambda x: flow.layers.dense(x, 2, model_distribute="broadcast"), feeds=[x])


# ================================================================== top-level helpers

def test_size_and_logical_view_and_eager_switches():
    s = flow.Size((2, 3))
    assert s == (2, 3) and s.numel() == 6 and repr(s) == "flow.Size([2, 3])"
    t, plain = flow.Size((2, 3, 2, 4)), (2, 3, 2, 4)  # index takes start/end as keywords, as tuple's positionals
    assert [t.index(2, start=1), t.index(4, start=0, end=4), t.index(2)] == [plain.index(2, 1), plain.index(4, 0, 4), 0]
    with pytest.raises(ValueError):
        t.index(4, start=0, end=3)
    seen = {}

    def build(x):
        seen["same"] = flow.cast_to_current_logical_view(x) is x
        seen["shape"] = flow.Size(x.shape) == x.shape
        return x

    run(build, feeds=[rand(2, 3)])
    assert seen == {"same": True, "shape": True}
    assert flow.eager_execution_enabled() is False
    flow.enable_eager_execution(False)
    with pytest.raises(RuntimeError, match=r"must be called before any global function is defined"):
        flow.enable_eager_execution()


def test_function_desc_module_cache_and_name_scope():
    seen = {}

    def build(v, x):
        seen["train"] = flow.current_global_function_desc().IsTrainable()
        seen["job"] = flow.current_global_function_desc().job_config_proto.job_name
        m1 = flow.find_or_create_module("m", lambda: object())
        m2 = flow.find_or_create_module("m", lambda: object(), reuse=True)
        seen["same"] = m1 is m2
        with pytest.raises(ValueError, match=r"module 'm' is already used in job 'job'"):
            flow.find_or_create_module("m", lambda: object())
        with pytest.warns(DeprecationWarning, match=r"flow.name_scope is deprecated"):
            with flow.name_scope("outer"):
                y = flow.identity(x, name="id")
        seen["name"] = y.op_name
        return flow.math.add(y, v)

    run(build, feeds=[rand(2)], variables=[rand(1)], train=True)
    assert seen == {"train": True, "job": "job", "same": True, "name": "outer-id"}
    with pytest.raises(RuntimeError, match=r"must be called inside a global_function job body"):
        flow.current_global_function_desc()
    flow.sync_default_session()
    assert flow.current_machine_id() == 0


def test_flow_save_round_trip(tmp_path):
    values = {"a": rand(2, 3), "b": np.arange(4, dtype=np.int64)}
    flow.save(values, str(tmp_path / "ckpt"))
    loaded = flow.checkpoint.get(str(tmp_path / "ckpt"))
    assert sorted(loaded) == ["a", "b"]
    close(loaded["a"].numpy(), values["a"])
    assert loaded["b"].numpy().dtype == np.int64 and list(loaded["b"].numpy()) == [0, 1, 2, 3]
    with pytest.raises(TypeError, match=r"flow.save expects a dict"):
        flow.save([1], str(tmp_path / "other"))


# ================================================================== config, env, unittest

def test_config_settings_are_checked_recorded_and_ignored_while_running():
    flow.config.comm_net_worker_num(2)
    flow.config.collective_boxing.enable_fusion()
    flow.config.enable_legacy_model_io()
    assert flow.config.resource() == {"comm_net_worker_num": 2, "collective_boxing.enable_fusion": True,
                                      "enable_legacy_model_io": True}
    assert flow.config.legacy_model_io_enabled() is True
    with pytest.raises(TypeError, match=r"flow.config.reserved_host_mem_mbyte expects an int, received '1'"):
        flow.config.reserved_host_mem_mbyte("1")
    with pytest.raises(NotImplementedError, match=r"cannot load OneFlow custom-op libraries"):
        flow.config.load_library("libx.so")
    with pytest.warns(DeprecationWarning, match="flow.config.use_rdma is deprecated"):
        flow.config.use_rdma()
    run(lambda x: x, feeds=[rand(1)])  # clears the session (fresh resource), then runs
    assert flow.config.legacy_model_io_enabled() is False
    with pytest.warns(UserWarning, match=r"flow.config.max_mdsave_worker_num: Nothing happened because "
                                         r"environment has been initialized") as record:
        flow.config.max_mdsave_worker_num(3)
    assert record[0].filename == __file__  # points at the caller's line
    assert "max_mdsave_worker_num" not in flow.config.resource()
    with pytest.warns(UserWarning, match=r"flow.config.gpu_device_num: Nothing happened") as record:
        flow.config.gpu_device_num(2)
    assert record[0].filename == __file__


def test_env_setters(monkeypatch, caplog):
    monkeypatch.setattr(env_settings, "STATE", {"initialized": False, "conf": {}})
    flow.env.ctrl_port(12345)
    flow.env.machine(["127.0.0.1"])
    flow.env.log_dir("/tmp/log")
    assert flow.env.current_env() == {"ctrl_port": 12345, "machine": ["127.0.0.1"], "log_dir": "/tmp/log"}
    with pytest.raises(TypeError, match=r"each machine is an address string or a dict with 'addr'"):
        flow.env.machine("10.0.0.1", 2)
    with pytest.raises(TypeError, match=r"flow.env.ctrl_port expects an int"):
        flow.env.ctrl_port("80")
    assert flow.env.init() is True
    assert flow.env.init() is False
    flow.env.data_port(1)
    assert "Environment has been initialized" in caplog.text
    with pytest.warns(DeprecationWarning, match="grpc_use_no_signal is deprecated"):
        flow.env.grpc_use_no_signal()
    assert "data_port" not in flow.env.current_env()


def test_unittest_skips_follow_the_test_environment(monkeypatch):
    monkeypatch.delenv("ONEFLOW_TEST_DEVICE_NUM", raising=False)
    monkeypatch.delenv("ONEFLOW_TEST_NODE_LIST", raising=False)
    assert flow.unittest.env.device_num() == 1 and flow.unittest.env.node_size() == 1

    def skipped(decorator):
        fn = decorator()(lambda: None)
        return getattr(fn, "__unittest_skip__", False)

    assert not skipped(flow.unittest.skip_unless_1n1d)
    assert skipped(flow.unittest.skip_unless_1n2d) and skipped(flow.unittest.skip_unless_2n1d)
    monkeypatch.setenv("ONEFLOW_TEST_DEVICE_NUM", "2")
    assert skipped(flow.unittest.skip_unless_1n1d) and not skipped(flow.unittest.skip_unless_1n2d)
    monkeypatch.setenv("ONEFLOW_TEST_NODE_LIST", "a,b")
    assert flow.unittest.env.node_list() == ["a", "b"] and not skipped(flow.unittest.skip_unless_2n2d)


def test_unittest_testcase_clears_the_session_per_test(monkeypatch):
    monkeypatch.delenv("ONEFLOW_TEST_ENABLE_EAGER", raising=False)
    results = []

    class Case(flow.unittest.TestCase):
        def test_a(self):
            @flow.global_function()
            def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
                return flow.math.relu(x)
            results.append(list(job(np.array([-1.0, 2.0], np.float32))))

        def test_b(self):  # a fresh session: job 'job' is defined again without a clash
            self.test_a()

    outcome = std_unittest.TestResult()
    std_unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(outcome)
    assert outcome.wasSuccessful(), outcome.errors + outcome.failures
    assert results == [[0.0, 2.0], [0.0, 2.0]]
    assert flow.eager_execution_enabled() is False

    monkeypatch.setenv("ONEFLOW_TEST_ENABLE_EAGER", "1")  # OneFlow's switch: the tests' jobs run eagerly
    modes = []

    class EagerCase(flow.unittest.TestCase):
        def test_a(self):
            modes.append(flow.unittest.env.eager_execution_enabled() and flow.eager_execution_enabled())

            @flow.global_function()
            def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
                y = flow.math.relu(x)
                results.append(list(y.numpy()))  # (a value only in eager execution)
                return y
            job(np.array([-1.0, 2.0], np.float32))

    outcome = std_unittest.TestResult()
    std_unittest.defaultTestLoader.loadTestsFromTestCase(EagerCase).run(outcome)
    assert outcome.wasSuccessful(), outcome.errors + outcome.failures
    assert modes == [True] and results[2:] == [[0.0, 2.0]]


def test_unittest_register_test_cases(tmp_path):
    (tmp_path / "test_demo.py").write_text(
        "import graphfront as flow\n"
        "def test_one(test_case):\n    test_case.assertEqual(1, 1)\n"
        "@flow.unittest.num_nodes_required(2)\n"
        "def test_two_nodes(test_case):\n    test_case.fail('filtered out')\n")
    scope = {}
    flow.unittest.register_test_cases(scope, str(tmp_path), lambda n: n == 1)
    assert sorted(scope) == ["test_demo_test_one"]
    outcome = std_unittest.TestResult()
    std_unittest.defaultTestLoader.loadTestsFromTestCase(scope["test_demo_test_one"]).run(outcome)
    assert outcome.wasSuccessful() and outcome.testsRun == 1


def test_deprecated_placement_aliases_place_ops():
    seen = {}

    def build(x):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with flow.fixed_placement("cpu", "0:0"):
                y = flow.identity(x)
            seen["warned"] = any("fixed_placement is deprecated" in str(m.message) for m in w)
        seen["scope"] = flow.current_scope().device_tag
        return y

    outs, _, _ = run(build, feeds=[rand(2)])
    assert seen == {"warned": True, "scope": "cpu"}
