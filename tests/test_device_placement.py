"""A job placed on a device other than the CPU (a GPU) makes every tensor of its steps on
that device, and reads nothing on the host in a steady step.

Proven on the CPU: the plan's notion of the placement device (``device_of``, in the
plan and the session) becomes torch's ``meta`` device, which stands for the GPU. Every
tensor a kernel makes on its placement device is then a meta tensor; a tensor made on the
host (a CPU tensor: a factory call without the device, a kernel running on the host) or
host data copied in (``torch.tensor`` / ``torch.as_tensor``, a copy from a CPU tensor) is
recorded with the op that made it. Meta tensors hold no values, so a kernel that reads a
device value on the host (the train step, a loss-scale skip flag) fails outright.
Constant folding still runs on the CPU at compile time (its values are encoded into the
Job).
"""
import types

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework import session as session_mod
from graphfront.framework.errors import OpRunError
from graphfront.core import op_conf_pb2
from graphfront.ops import registry
from graphfront.passes import fold
from graphfront.runtime import plan as plan_mod
from graphfront.runtime import walk as walk_mod

B, C = 8, 10
META = torch.device("meta")
_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default, torch.ops.aten.copy.default}


class _HostTensors(TorchDispatchMode):
    """Records (op, devices) of every aten call that makes a tensor off the meta device or
    copies from a CPU tensor."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        made = [t.device.type for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        read = [t.device.type for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(d != "meta" for d in made) or (func in _COPIES and "cpu" in read):
            self.found.append((str(func), read, made))
        return out


class _HostData(TorchFunctionMode):
    """Records ``torch.tensor`` / ``torch.as_tensor`` calls: host data copied to the device."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.tensor, torch.as_tensor):
            self.found.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _recorded(fn):
    """``(result, host-made tensors, host data copies)`` of ``fn()``."""
    with _HostTensors() as tensors, _HostData() as data:
        result = fn()
    return result, tensors.found, data.found


def _meta_fused_sgd(*tensor_lists, found_inf, **_):
    """``torch._fused_sgd_`` on the meta device: checks that every tensor it would read or
    write is on the device (its meta kernel, a no-op, checks nothing), writes nothing."""
    off = [t.device for ts in tensor_lists for t in ts] + ([] if found_inf is None else [found_inf.device])
    assert set(off) == {META}, f"torch._fused_sgd_ given tensors on {set(off)}"


@pytest.fixture
def on_meta(monkeypatch):
    """Jobs compiled from here on run on the meta device."""
    real = plan_mod.device_of
    monkeypatch.setattr(torch, "_fused_sgd_", _meta_fused_sgd)
    monkeypatch.setattr(plan_mod, "device_of", lambda op_conf, ids: META)
    monkeypatch.setattr(walk_mod, "device_of", lambda op_conf, ids: META)
    monkeypatch.setattr(session_mod, "device_of", lambda op_conf, ids: META)
    monkeypatch.setattr(fold, "rt", types.SimpleNamespace(
        device_of=real, is_pure=plan_mod.is_pure, placements_of=plan_mod.placements_of, run_op=plan_mod.run_op))


def _resnet_like_train_job():
    """What a ResNet-style benchmark job holds: synthetic data from ``decode_random``
    (truncated normal, so the redraws), conv, batch norm, dropout, a dense layer, a
    label-smoothed loss through ``one_hot``, losses on labels fed and computed in the job, a
    seeded ``bernoulli``, a folded ``range``, a piecewise learning rate, momentum SGD,
    float16 AMP with dynamic loss scaling."""
    cfg = flow.FunctionConfig()
    cfg.enable_auto_mixed_precision(True)
    cfg.mixed_precision_data_type(flow.float16)  # (as on a GPU)
    cfg.default_placement_scope(flow.scope.placement("cpu", "0:0"))

    @flow.global_function(type="train", function_config=cfg)
    def train(y: tp.Numpy.Placeholder((B,), dtype=flow.int32)):
        images = flow.data.decode_random((3, 8, 8), flow.float, batch_size=B, initializer=flow.truncated_normal(0.5))
        z = flow.data.decode_random((), flow.int32, batch_size=B,
                                    initializer=flow.random_uniform_initializer(0, C, dtype=flow.int32))
        h = flow.layers.conv2d(images, 4, 3, padding="SAME", name="conv", kernel_initializer=flow.truncated_normal(0.1))
        h = flow.nn.relu(flow.layers.batch_normalization(h, axis=1, name="bn"))
        h = flow.nn.dropout(h, rate=0.25)
        logits = flow.layers.dense(flow.reshape(h, (B, -1)), C, name="fc",
                                   kernel_initializer=flow.truncated_normal(0.1))
        smooth = flow.one_hot(y, C, on_value=0.91, off_value=0.01, dtype=flow.float)
        loss = flow.math.reduce_mean(flow.nn.softmax_cross_entropy_with_logits(smooth, logits))
        for labels in (y, z):  # fed, computed
            loss = loss + flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        mask = flow.random.bernoulli(flow.constant(0.5, flow.float, (B,)), seed=3)
        ramp = flow.cast(flow.range(B), flow.float) * 0.125
        loss = loss + 1e-3 * flow.math.reduce_mean(mask * ramp)
        policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=1024.0, increment_period=2)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([2], [0.1, 0.01]), momentum=0.9,
                           loss_scale_policy=policy).minimize(loss)
        return loss
    return train


def _op_types(compiled):
    return {jb.op_type_name(op) for op in compiled.plan.order}


def test_gpu_placed_train_step_makes_every_tensor_on_its_device(on_meta):
    flow.manual_seed(0)
    train = _resnet_like_train_job()
    compiled = train.compiled_job          # compile: variables initialized on the device
    assert {t.device for t in compiled.session.variables.tensors.values()} == {META}
    plan = compiled.plan
    kinds = _op_types(compiled)
    assert {"decode_random_conf", "one_hot", "dropout", "bernoulli", "folded_constant", "constant",
            "dynamic_loss_scale_schedule", "learning_rate_schedule_conf", "normalization",
            "sparse_softmax_cross_entropy"} <= kinds, kinds
    assert {"multi_count_not_finite", "count_not_finite"} & kinds, kinds
    # the fed labels are checked on the host, the computed ones in the step
    assert [(i, size) for i, size, _ in plan.checks.on_feeds] == [(0, C)]
    assert len(plan.checks.in_step) == 2   # the loss and its gradient read z
    feeds = [torch.zeros(B, dtype=torch.int32, device=META)]
    for step in range(3):
        outs, tensors, data = _recorded(lambda: plan._fn(feeds))
        assert not tensors, f"step {step}: tensors made or read on the host: {tensors}"
        assert not data, f"step {step}: host data copied in: {data}"
        loss, flags = outs
        assert loss.device == META and flags.device == META and flags.shape == (1 + 3 * 2,)


def test_fed_labels_seen_through_whole_views_are_checked_on_the_host(on_meta):
    """Labels fed and then reshaped or squeezed (BERT's masked-LM and next-sentence labels)
    hold the feed's values: their checks are the feed's, on the host, and the step has no
    in-step check (no clamp, no flags, no skipped update); a slice of them is computed."""
    cfg = flow.FunctionConfig()
    cfg.default_placement_scope(flow.scope.placement("cpu", "0:0"))

    @flow.global_function(type="train", function_config=cfg)
    def train(x: tp.Numpy.Placeholder((B, 4)), y: tp.Numpy.Placeholder((B, 1), dtype=flow.int32),
              z: tp.Numpy.Placeholder((2, B), dtype=flow.int32)):
        logits = flow.layers.dense(x, C, name="fc", kernel_initializer=flow.truncated_normal(0.1))
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(flow.squeeze(y, [1]), logits))
        sliced = flow.reshape(flow.slice(z, [None, None], [1, B]), (B,))   # half of z: not its values
        loss = loss + flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(sliced, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    plan = train.compiled_job.plan
    assert {i for i, _, _ in plan.checks.on_feeds} == {1}   # y, through its squeeze
    assert len(plan.checks.in_step) == 2                     # the slice of z: the loss and its gradient
    with pytest.raises(OpRunError, match=str(C + 3)):
        plan.check_feeds([None, np.full((B, 1), C + 3, np.int32), None])


class _Clones(TorchDispatchMode):
    """Counts ``aten.clone`` calls: a copy into another memory layout (``contiguous``, a
    ``reshape`` of a non-contiguous blob)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.overloadpacket is torch.ops.aten.clone
        return func(*args, **(kwargs or {}))


def test_gpu_placed_max_pool_copies_no_activation(on_meta):
    """On a GPU a max pool (with the relu before it and its gradient fused in) works in the
    layout of the blob it is given: the steady step of an NCHW conv-relu-pool-dense job copies
    no activation, gradient or argmax index into another layout (a CPU pools channels-last,
    several times faster there). (NHWC cannot be checked here: the meta device's
    convolution returns NCHW memory where a GPU's returns channels-last.)"""
    shape = (B, 3, 8, 8)

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder(shape)):
        h = flow.layers.conv2d(x, 4, 3, padding="SAME", activation=flow.nn.relu, name="conv")
        h = flow.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
        logits = flow.layers.dense(flow.reshape(h, (B, -1)), C, name="fc")
        loss = flow.math.reduce_mean(logits * logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    compiled = train.compiled_job
    assert {"fused_tf_max_pool_2d", "fused_tf_max_pool_2d_grad"} <= _op_types(compiled)
    feeds = [torch.zeros(shape, device=META)]
    compiled.plan._fn(feeds)
    with _Clones() as clones:
        compiled.plan._fn(feeds)
    assert clones.count == 0


def test_cpu_return_ops_leave_a_gpu_placed_job_wholly_on_its_device(on_meta, monkeypatch):
    """OneFlow puts a job's return ops on the CPU (``allow_cpu_return_op``). They copy
    nothing inside the step (the caller reads their blobs after it), so a job otherwise
    on the GPU is still wholly on its device: the condition for capturing its steps as a
    CUDA graph. (Here CUDA is reported present so that "gpu" placements are kept, and the
    GPU is the meta device.)"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    on_device = lambda op_conf, ids: META if op_conf.device_tag == "gpu" else torch.device("cpu")  # noqa: E731
    for module in (plan_mod, walk_mod, session_mod):
        monkeypatch.setattr(module, "device_of", on_device)
    monkeypatch.setattr(fold.rt, "device_of", lambda op_conf, ids: torch.device("cpu"))  # (folds on the host)
    cfg = flow.FunctionConfig()
    cfg.default_placement_scope(flow.scope.placement("gpu", "0:0"))

    @flow.global_function(type="train", function_config=cfg)
    def train(x: tp.Numpy.Placeholder((B, C))):
        logits = flow.layers.dense(x, C, name="fc")
        loss = flow.math.reduce_mean(logits * logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    compiled = train.compiled_job
    tags = {jb.op_kind(op): op.device_tag for op in compiled.job.net.op if jb.op_kind(op) in ("return_conf",
                                                                                               "input_conf")}
    assert tags == {"return_conf": "cpu", "input_conf": "gpu"}, tags
    assert compiled.plan.devices == {"meta"}


def test_the_recorder_sees_a_kernel_that_makes_a_host_tensor(on_meta, monkeypatch):
    """The check above can fail: a kernel making its output on the host is caught, and so
    is one copying host data in."""

    def host_kernel(k):
        return lambda x: torch.zeros(x.shape)       # made on the CPU: no device given
    monkeypatch.setattr(registry.lookup("relu"), "kernel", host_kernel)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))):
        return flow.math.relu(x)
    plan = job.compiled_job.plan
    _, tensors, _ = _recorded(lambda: plan._fn([torch.zeros(3, device=META)]))
    assert [made for _, _, made in tensors] == [["cpu"]], tensors

    def copy_kernel(k):
        return lambda x: x + torch.tensor([1.0, 2.0, 3.0], device=x.device)
    monkeypatch.setattr(registry.lookup("relu"), "kernel", copy_kernel)
    flow.clear_default_session()

    @flow.global_function()
    def job2(x: tp.Numpy.Placeholder((3,))):
        return flow.math.relu(x)
    plan = job2.compiled_job.plan
    _, _, data = _recorded(lambda: plan._fn([torch.zeros(3, device=META)]))
    assert data == ["tensor"]


def test_old_host_decode_random_would_be_caught(on_meta, monkeypatch):
    """``decode_random`` drawing on the host (as it once did) is recorded."""
    from graphfront.runtime.variable_store import initial_value

    def host_decode_random(k):
        conf = k.conf
        shape = (int(conf.batch_size),) + tuple(conf.shape.dim)
        return lambda: initial_value(conf.data_initializer, shape, flow.float, torch.device("cpu")).to(k.device)
    decode_random = op_conf_pb2.OperatorConf()
    decode_random.decode_random_conf.SetInParent()
    monkeypatch.setattr(registry.op_def(decode_random), "kernel", host_decode_random)

    @flow.global_function()
    def job():
        return flow.data.decode_random((2,), flow.float, batch_size=3)
    plan = job.compiled_job.plan
    _, tensors, _ = _recorded(lambda: plan._fn([]))
    assert tensors, "a host-made batch went unnoticed"


def test_fed_bad_label_is_refused_before_the_step_and_the_session_stays_usable():
    """A bad fed label raises the op's OpRunError (value and index) before the step runs:
    no variable changes, and the next good call gives the step an untouched session gives."""
    def build():
        flow.clear_default_session()
        flow.manual_seed(0)

        @flow.global_function(type="train")
        def train(x: tp.Numpy.Placeholder((4, 3)), y: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
            logits = flow.layers.dense(x, C, name="fc", kernel_initializer=flow.random_normal_initializer(0.1))
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
            return loss
        return train
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    good = np.array([1, 2, 3, 4], np.int32)
    ref = build()
    want = [ref(x, good) for _ in range(2)]
    train = build()
    before = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    with pytest.raises(OpRunError, match=r"sparse_softmax_cross_entropy.*class ids in \[0, 10\), "
                                              r"received 12 at index \(2,\)"):
        train(x, np.array([1, 2, 12, 4], np.int32))
    after = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    got = [train(x, good) for _ in range(2)]
    np.testing.assert_array_equal(np.array(got), np.array(want))


def test_in_step_index_guard_clamps_flags_and_raises_the_ops_error():
    """The GPU's check of computed indices, on CPU tensors: the guard clamps the ids into
    range and flags the first bad one (nothing read on the host); the flags of a step
    raise the error of the first failed check with its value and index."""
    from graphfront.ops.xla_rules import StepChecks
    guard = plan_mod._index_guard(10)
    ids = torch.tensor([[3, 12], [-1, 9]], dtype=torch.int32)
    row, clamped = guard(ids)
    assert row.tolist() == [1, 1, 12] and clamped.tolist() == [[3, 9], [0, 9]] and clamped.dtype == ids.dtype
    ok_row, same = guard(torch.tensor([0, 9]))
    assert ok_row.tolist()[0] == 0 and same.tolist() == [0, 9]
    checks = StepChecks()
    checks.in_step = [("c0", (2,), None), ("c1", (2, 2), lambda v, at: OpRunError(f"op 'x': received {v} at {at}"))]
    checks.raise_failed(plan_mod._check_flags([ok_row, ok_row]).numpy())  # nothing failed: nothing raised
    with pytest.raises(OpRunError, match=r"received 12 at \(0, 1\)"):
        checks.raise_failed(plan_mod._check_flags([ok_row, row]).numpy())


def test_out_of_device_memory_names_the_job_and_the_size_and_the_session_stays_usable(monkeypatch):
    """torch's CUDA out-of-memory error becomes DeviceMemoryError naming the job and the
    size asked for (raised here by a kernel standing in for the allocation); the next
    call runs."""
    fail = [True]

    def kernel(k):
        def relu(x):
            if fail.pop() if fail else False:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a "
                                                  "total capacity of 79.1 GiB of which 1.2 GiB is free.")
            return torch.relu(x)
        return relu
    monkeypatch.setattr(registry.lookup("relu"), "kernel", kernel)

    @flow.global_function()
    def big_job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return flow.math.relu(x)
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    with pytest.raises(flow.DeviceMemoryError, match=r"job 'big_job' ran out of GPU memory: an allocation of "
                                                     r"4.00 GiB failed"):
        big_job(x)
    np.testing.assert_array_equal(big_job(x), np.maximum(x, 0))


@pytest.mark.parametrize("fed", [True, False])
def test_index_ops_name_the_bad_index_fed_or_computed(fed):
    """dim_gather / in_top_k: an index outside its range raises the op's OpRunError with
    the value and its index, whether it is fed (checked on the host before the step) or
    computed in the job (here on the CPU: the kernel's own check)."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    bad_idx, bad_t = np.array([[0, 2], [1, 5]], np.int64), np.array([0, 3], np.int32)

    @flow.global_function()
    def gather(x_: tp.Numpy.Placeholder((2, 3)), i: tp.Numpy.Placeholder((2, 2), dtype=flow.int64)) -> tp.Numpy:
        return flow.dim_gather(x_, 1, i if fed else i + 0)

    @flow.global_function()
    def top(t: tp.Numpy.Placeholder((2,), dtype=flow.int32), p: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.math.in_top_k(t if fed else t * 1, p, 1)
    np.testing.assert_array_equal(gather(x, np.array([[0, 2], [1, 1]], np.int64)), [[0, 2], [4, 4]])
    with pytest.raises(OpRunError, match=r"\(dim_gather\): input 'index' expects indices in \[0, 3\), received 5 "
                                         r"at index \(1, 1\)"):
        gather(x, bad_idx)
    np.testing.assert_array_equal(top(np.array([2, 2], np.int32), x), [1, 1])
    with pytest.raises(OpRunError, match=r"\(in_top_k\): input 'targets' expects indices in \[0, 3\), received 3 "
                                         r"at index \(1,\)"):
        top(bad_t, x)


class _OffHost(torch.Tensor):
    """A CPU tensor that says it is on a GPU, to run a kernel's device branch here."""

    @property
    def device(self):
        return torch.device("cuda")


@pytest.mark.parametrize("flag", [0, 3])
def test_loss_scale_skip_off_the_host_is_branch_free_and_keeps_the_old_values(flag):
    """Off the CPU the skip is not read on the host: the update runs, then every tensor it
    wrote keeps its old value where ``skip_if`` is nonzero, NaN and inf included."""
    from graphfront.ops.common import skippable
    skip_if = torch.Tensor._make_subclass(_OffHost, torch.tensor([flag]))
    model, state = torch.ones(3), torch.zeros(2)

    def update():
        model.add_(float("nan"))   # an overflowed step's update
        state.add_(float("inf"))
    skippable(skip_if, [model, state], update)
    if flag:
        assert model.tolist() == [1.0, 1.0, 1.0] and state.tolist() == [0.0, 0.0]
    else:
        assert torch.isnan(model).all() and torch.isinf(state).all()


def test_nll_target_outside_the_classes_is_named_and_ignore_index_is_allowed():
    """nll's targets lie in [0, C) or equal ignore_index: another value raises the op's
    OpRunError (fed: before the step); the GPU's in-step guard keeps ignore_index as it is."""
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3, 4)), t: tp.Numpy.Placeholder((3,), dtype=flow.int64)) -> tp.Numpy:
        op = flow.user_op_builder("nll").Op("nll").Input("input", [x]).Input("target", [t]).Output("out") \
            .Output("total_weight").Attr("ignore_index", -100).Build()
        return op.InferAndTryRun().RemoteBlobList()[0]
    x = torch.log_softmax(torch.linspace(-1, 1, 12).reshape(3, 4), -1)
    good = torch.tensor([0, -100, 3])
    np.testing.assert_allclose(job(x.numpy(), good.numpy()),
                               torch.nn.functional.nll_loss(x, good, ignore_index=-100, reduction="none"), rtol=1e-6)
    with pytest.raises(OpRunError, match=r"\(nll\): input 'target' expects indices in \[0, 4\) or -100, received 7 "
                                         r"at index \(1,\)"):
        job(x.numpy(), np.array([0, 7, 3], np.int64))
    row, clamped = plan_mod._index_guard((4, -100))(torch.tensor([1, -100, 9, -3]))
    assert row.tolist() == [1, 2, 9] and clamped.tolist() == [1, -100, 3, 0]
