"""Plan lowering: generated code, buffer release, hoisting, multi-tensor updates, CUDA-graph switch."""
import collections
import contextlib
import math
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import OpRunError
from graphfront.framework.session import default_session
from graphfront.ops import fused_ops
from graphfront.ops.builder import UserOpConfBuilder
from graphfront.runtime.plan import KernelCtx, Plan


def _predict_with_weight_math(config=None):
    @flow.global_function(function_config=config or flow.FunctionConfig())
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3,), initializer=flow.ones_initializer())
            scaled = flow.math.exp(w) * 2.0          # variable-only: hoisted
            return flow.math.relu(x * scaled)
    return job


def test_generated_code_frees_buffers_after_last_use():
    job = _predict_with_weight_math()
    src = job.compiled_job.plan.source
    assert "def plan(feeds):" in src
    lines = src.splitlines()
    mul = next(i for i, l in enumerate(lines) if "(broadcast_mul)" in l)
    assert lines[mul + 1].strip().startswith("del ")


def test_variable_only_ops_are_hoisted_and_follow_variable_changes():
    calls = {}

    def wrapper(op, fn):
        def counted(*a):
            calls[op.name] = calls.get(op.name, 0) + 1
            return fn(*a)
        return counted

    job = _predict_with_weight_math()
    x = np.array([[1.0, -1.0, 2.0], [0.5, 0.0, -3.0]], np.float32)
    compiled = job.compiled_job
    hoisted_types = {jb.op_type_name(op) for op in compiled.plan.order if op.name in compiled.plan.hoisted}
    assert hoisted_types == {"exp", "scalar_mul"}
    plan = Plan(compiled.job, compiled.session.variables, compiled.session.watchers, kernel_wrapper=wrapper)
    feeds = [torch.from_numpy(x)]
    for _ in range(3):
        out = plan(feeds)[0]
    np.testing.assert_allclose(out.numpy(), np.maximum(x * 2 * np.e, 0), rtol=1e-6)
    exp_op = next(op.name for op in plan.order if jb.op_type_name(op) == "exp")
    assert calls[exp_op] == 1
    flow.load_variables({"w": np.zeros(3, np.float32)})
    out = plan(feeds)[0]
    np.testing.assert_allclose(out.numpy(), np.maximum(x * 2.0, 0), rtol=1e-6)
    assert calls[exp_op] == 2
    np.testing.assert_allclose(job(x), np.maximum(x * 2.0, 0), rtol=1e-6)


def test_train_jobs_do_not_hoist_updated_variables():
    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3,), initializer=flow.ones_initializer())
            loss = flow.math.reduce_sum(x * flow.math.exp(w), axis=[1])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    x = np.ones((2, 3), np.float32)
    first, second = job(x), job(x)
    assert not job.compiled_job.plan.hoisted
    w1 = 1 - 0.1 * np.e * 2 / 2  # d loss / d w = sum_batch x * exp(w), divided by E = 2
    np.testing.assert_allclose(second, [3 * np.exp(w1)] * 2, rtol=1e-5)
    np.testing.assert_allclose(first, [3 * np.e] * 2, rtol=1e-6)


def _kernel(op_type, n, attrs, state=(), extra=()):
    """The kernel of an update op over ``n`` (3, 2) float32 models; ``extra``: more (1,) inputs
    as (arg, dtype) pairs, fed as ``<arg>/0``."""
    b = UserOpConfBuilder("u", prefix=False).Op(op_type)
    descs = {}
    for arg, dtype in extra:
        b.Input(arg, [f"{arg}/0"])
        descs[f"{arg}/0"] = jb.TensorDesc((1,), dtype)
    inputs = {"model": [f"m/{i}" for i in range(n)], "model_diff": [f"d/{i}" for i in range(n)]}
    for s in state:
        inputs[s] = [f"{s}/{i}" for i in range(n)]
    for arg, lbns in inputs.items():
        b.Input(arg, lbns if op_type.startswith("multi") else lbns[:1])
    b.Input("learning_rate", ["lr/0"]).Input("scale_by_tensor", ["s/0"])
    for k, v in attrs.items():
        b.Attr(k, v)
    b.CheckAndComplete()
    for lbns in inputs.values():
        for l in lbns:
            descs[l] = jb.TensorDesc((3, 2), flow.float32)
    descs["lr/0"] = descs["s/0"] = jb.TensorDesc((1,), flow.float32)
    from graphfront.ops import registry
    return registry.lookup(op_type).kernel(KernelCtx(b.op_conf, descs, torch.device("cpu")))


@pytest.mark.parametrize("kind", ["sgd", "momentum"])
@pytest.mark.parametrize("lr_on_host", [True, False])
@pytest.mark.parametrize("weight_decay", [0.03, 0.0])
@pytest.mark.parametrize("scale", [0.5, 0.0])
def test_multi_tensor_updates_match_single_updates(kind, lr_on_host, weight_decay, scale):
    """``scale`` (0 included: the diffs drop out), ``scale_by_tensor``, ``l1`` and ``l2``
    together, with decoupled weight decay (the multi-tensor ops) or without (PyTorch's fused
    SGD kernel after the regularized gradient), the learning rate on the host or the device:
    the grouped update equals three single-tensor updates (OneFlow's formulas, term by term)
    to a few float32 roundings, and never writes the diffs."""
    attrs = {"scale": scale, "l1": 0.01, "l2": 0.02, "weight_decay": weight_decay}
    state = ("momentum",) if kind == "momentum" else ()
    if kind == "momentum":
        attrs["beta"] = 0.9
    g = torch.Generator().manual_seed(0)
    models = [torch.randn(3, 2, generator=g) for _ in range(3)]
    diffs = [torch.randn(3, 2, generator=g) for _ in range(3)]
    moms = [torch.randn(3, 2, generator=g) for _ in range(3)]
    lr, sbt = torch.tensor([0.1]), torch.tensor([1.5])
    single = _kernel(f"{kind}_update", 1, attrs, state)
    multi = _kernel(f"multi_tensor_{kind}_update", 3, attrs, state)
    ref_m, ref_s = [m.clone() for m in models], [s.clone() for s in moms]
    for i in range(3):
        args = [ref_m[i], diffs[i]] + ([ref_s[i]] if state else []) + [lr, sbt, None]
        single(*args)
    got_m, got_s = [m.clone() for m in models], [s.clone() for s in moms]
    diffs_before = [d.clone() for d in diffs]
    # a lr that is not on the CPU is not read on the host: the device-tensor branch
    args = [got_m, diffs] + ([got_s] if state else []) + [lr if lr_on_host else _NotCpu(lr), sbt, None]
    multi(*args)
    for a, b in zip(got_m, ref_m):
        torch.testing.assert_close(a, b)
    for a, b in zip(got_s, ref_s):
        torch.testing.assert_close(a, b)
    bound = 4 * torch.finfo(torch.float32).eps * max(t.abs().max() for t in models + moms + ref_m + ref_s)
    for got, want, old in zip(got_m + (got_s if state else []), ref_m + (ref_s if state else []),
                              models + (moms if state else [])):
        assert (got - want).abs().max() <= bound and not torch.equal(got, old)
    for a, b in zip(diffs, diffs_before):
        assert torch.equal(a, b)  # gradients are never written


@pytest.mark.parametrize("kind", ["sgd", "momentum"])
@pytest.mark.parametrize("layout", ["same", "channels_last_model"])
@pytest.mark.parametrize("lr_on_host", [True, False])
def test_multi_tensor_updates_read_each_tensor_once(kind, layout, lr_on_host):
    """With only ``scale`` and ``l2`` regularizing (the usual momentum SGD with L2 decay),
    the update is one call of PyTorch's fused SGD kernel on the diffs themselves, nothing
    computed beside it, with a learning rate the host reads, and for SGD with one on the
    device too (the kernel's tensor learning rate); momentum with a learning rate on the
    device first computes the step ``lr * g`` (the l2 term added into new tensors, which
    are then multiplied in place). The results
    equal the single-tensor ops' (``m = beta m - lr (scale d + l2 w); w += m``, SGD ``w -=
    lr (scale d + l2 w)``) to a few float32 roundings, a contiguous diff of a channels-last
    model (a CPU convolution weight) is read in the model's layout, and no diff is written."""
    attrs = {"scale": 0.5, "l1": 0.0, "l2": 0.02, "weight_decay": 0.0}
    state = ("momentum",) if kind == "momentum" else ()
    if kind == "momentum":
        attrs["beta"] = 0.9
    g = torch.Generator().manual_seed(2)
    models, diffs, moms = ([torch.randn(4, 3, 2, 2, generator=g) for _ in range(3)] for _ in range(3))
    single = _kernel(f"{kind}_update", 1, attrs, state)
    multi = _kernel(f"multi_tensor_{kind}_update", 3, attrs, state)
    ref_m, ref_s = [m.clone() for m in models], [s.clone() for s in moms]
    for i in range(3):
        single(*([ref_m[i], diffs[i]] + ([ref_s[i]] if state else []) + [torch.tensor([0.1]), None, None]))
    fmt = torch.channels_last if layout == "channels_last_model" else torch.contiguous_format
    got_m, got_s = ([t.clone(memory_format=fmt) for t in ts] for ts in (models, moms))
    diffs_before = [d.clone() for d in diffs]
    calls = _AtenCalls()
    lr = torch.tensor([0.1])
    with calls:
        multi(*([got_m, diffs] + ([got_s] if state else []) + [lr if lr_on_host else _NotCpu(lr), None, None]))
    step = not lr_on_host and kind == "momentum"
    assert calls.count["_fused_sgd_"] == 1
    assert {name: n for name, n in calls.count.items() if name.startswith("_foreach")} == \
        ({"_foreach_add": 1, "_foreach_mul_": 1} if step else {}), calls.count
    # (the diffs, or the step, into the model's layout)
    assert calls.count["copy_"] == (3 if layout == "channels_last_model" else 0)
    assert all(t.is_contiguous(memory_format=fmt) for t in got_m + got_s)
    bound = 4 * torch.finfo(torch.float32).eps * max(t.abs().max() for t in models + moms + ref_m + ref_s)
    for got, want in zip(got_m + (got_s if state else []), ref_m + (ref_s if state else [])):
        assert (got - want).abs().max() <= bound
    for a, b in zip(diffs, diffs_before):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["sgd", "momentum"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.03])
@pytest.mark.parametrize("lr_on_host", [False, True])
def test_multi_tensor_updates_skip_on_the_device_without_host_reads_or_copies(kind, weight_decay, lr_on_host):
    """With a ``skip_if`` on a device (never read on the host) the update skips inside
    PyTorch's fused SGD kernel, or (with weight decay) is computed into new tensors and
    selected into the variables: a nonzero flag leaves models and momenta bit for bit as
    they were though the gradients hold inf and NaN; a zero flag gives the in-place update
    (no ``skip_if``) to float32 rounding. With the learning rate on the device the kernel
    gets the step ``lr * g``; read by the host, the diffs themselves."""
    attrs = {"scale": 0.5, "l1": 0.0, "l2": 0.02, "weight_decay": weight_decay}
    state = ("momentum",) if kind == "momentum" else ()
    if kind == "momentum":
        attrs["beta"] = 0.9
    g = torch.Generator().manual_seed(1)
    models = [torch.randn(3, 2, generator=g) for _ in range(3)]
    moms = [torch.randn(3, 2, generator=g) for _ in range(3)]
    finite = [torch.randn(3, 2, generator=g) for _ in range(3)]
    overflowed = [d.clone() for d in finite]
    overflowed[0][1, 0], overflowed[2][0, 1] = float("inf"), float("nan")
    # (without scale_by_tensor, a learning rate on the host takes the diffs themselves)
    lr, sbt = torch.tensor([0.1]), None if lr_on_host else torch.tensor([0.25])
    multi = _kernel(f"multi_tensor_{kind}_update", 3, attrs, state, extra=[("skip_if", flow.int64)])

    def run(diffs, skip_if, calls=contextlib.nullcontext()):
        m, s = [t.clone() for t in models], [t.clone() for t in moms]
        with calls:
            multi(*([m, diffs] + ([s] if state else []) + [lr if lr_on_host else _NotCpu(lr), sbt, skip_if]))
        return m + (s if state else [])
    before = models + (moms if state else [])
    calls = _AtenCalls()
    for got, old in zip(run(overflowed, _NotCpu(torch.tensor([1])), calls), before):
        assert torch.equal(got, old)
    # no copy of the variables: the fused SGD kernel skips (found_inf), or with weight decay
    # one select is written into each
    assert not calls.count["clone"] + calls.count["copy_"], calls.count
    assert (calls.count["_fused_sgd_"], calls.count["where"]) == ((0, len(before)) if weight_decay else (1, 0))
    in_place = run(finite, None)
    assert not any(torch.equal(a, b) for a, b in zip(in_place, before))
    # the fused kernel may round differently (an fma): a few float32 roundings of the
    # largest magnitude involved
    bound = 4 * torch.finfo(torch.float32).eps * max(t.abs().max() for t in before + in_place)
    for got, want in zip(run(finite, _NotCpu(torch.tensor([0]))), in_place):
        assert (got - want).abs().max() <= bound
    for got, old in zip(run(overflowed, torch.tensor([2])), before):   # on the host: not run at all
        assert torch.equal(got, old)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("correct", [False, True])
def test_multi_tensor_adam_update_matches_adam_update(amsgrad, correct):
    """The fused multi-tensor kernel against three single adam_update kernels: the same
    formula with the decay taken first, so equal to float32 rounding; its bias correction
    comes from train_step as adam_bias_correction_factor computes it."""
    attrs = {"scale": 0.5, "weight_decay": 0.03, "beta1": 0.8, "beta2": 0.95, "epsilon": 1e-6,
             "amsgrad": amsgrad, "do_bias_correction": correct}
    state = ("m", "v", "max_v")
    g = torch.Generator().manual_seed(0)
    models, diffs, ms = ([torch.randn(3, 2, generator=g) for _ in range(3)] for _ in range(3))
    vs, max_vs = ([torch.rand(3, 2, generator=g) for _ in range(3)] for _ in range(2))
    lr, sbt, step = torch.tensor([0.1]), torch.tensor([1.5]), torch.tensor([4])
    bcs = [1.0 - torch.tensor(b, dtype=torch.float64) ** 5 for b in (0.8, 0.95)]  # train_step 4: 5th step
    single = _kernel("adam_update", 1, attrs, state,
                     extra=[("bias_correction1", flow.float32), ("bias_correction2", flow.float32)])
    multi = _kernel("multi_tensor_adam_update", 3, attrs, state, extra=[("train_step", flow.int64)])
    ref = [[t.clone() for t in ts] for ts in (models, ms, vs, max_vs)]
    for i in range(3):
        single(ref[0][i], diffs[i], lr, sbt, None, *(b.reshape(1).float() for b in bcs), ref[1][i], ref[2][i],
               ref[3][i])
    got = [[t.clone() for t in ts] for ts in (models, ms, vs, max_vs)]
    diffs_before = [d.clone() for d in diffs]
    multi(*got[:1], diffs, *got[1:], lr, sbt, None, step)
    assert all(torch.equal(a, b) for a, b in zip(diffs, diffs_before))  # gradients are never written
    assert all(t._version > 0 for ts in got[:3] for t in ts)  # written, as other in-place ops mark it
    for gs, rs in zip(got, ref):
        for a, b in zip(gs, rs):
            torch.testing.assert_close(a, b)
    assert not torch.equal(got[0][0], models[0])
    # a non-zero skip_if leaves every tensor as it was, even with non-finite gradients
    bad = [torch.full((3, 2), math.nan) for _ in range(3)]
    kept = [[t.clone() for t in ts] for ts in got]
    multi(*got[:1], bad, *got[1:], lr, sbt, torch.tensor([1]), step)
    assert all(torch.equal(a, b) for gs, ks in zip(got, kept) for a, b in zip(gs, ks))


def test_multi_tensor_adam_update_takes_tensors_of_mixed_memory_layouts():
    """A channels-last weight with a contiguous gradient and state (as after an all-reduce):
    the fused kernel walks memory in order, so each tensor is given its model's strides."""
    attrs = {"learning_rate_val": 0.1, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
             "do_bias_correction": False}
    g = torch.Generator().manual_seed(1)
    model = torch.randn(2, 3, 4, 5, generator=g)
    diff, m = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 5, generator=g)
    v, max_v = torch.rand(2, 3, 4, 5, generator=g), torch.zeros(2, 3, 4, 5)
    descs = {n: jb.TensorDesc((2, 3, 4, 5), flow.float32) for n in ("m/0", "d/0", "m_/0", "v/0", "x/0")}
    b = UserOpConfBuilder("u", prefix=False).Op("multi_tensor_adam_update")
    for arg, lbn in (("model", "m/0"), ("model_diff", "d/0"), ("m", "m_/0"), ("v", "v/0"), ("max_v", "x/0")):
        b.Input(arg, [lbn])
    for k, val in attrs.items():
        b.Attr(k, val)
    b.CheckAndComplete()
    from graphfront.ops import registry
    multi = registry.lookup("multi_tensor_adam_update").kernel(KernelCtx(b.op_conf, descs, torch.device("cpu")))
    plain = [t.clone() for t in (model, m, v, max_v)]
    multi([plain[0]], [diff], [plain[1]], [plain[2]], [plain[3]], None, None, None, None)
    mixed = [model.clone().to(memory_format=torch.channels_last)] + [t.clone() for t in (m, v, max_v)]
    multi([mixed[0]], [diff], [mixed[1]], [mixed[2]], [mixed[3]], None, None, None, None)
    assert mixed[0].is_contiguous(memory_format=torch.channels_last) and mixed[1].is_contiguous()
    for a, b_ in zip(mixed, plain):
        torch.testing.assert_close(a, b_, rtol=0, atol=0)


class _AtenCalls(TorchDispatchMode):
    """Counts the aten calls made inside the ``with`` block, by op name (``count``)."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


class _NotCpu:
    """A (1,) lr tensor that claims a non-CPU device, to run the device-tensor branch on CPU."""

    def __init__(self, t):
        self.t = t
        self.device = torch.device("meta")

    def reshape(self, *shape):
        return self.t.reshape(*shape)


def test_cuda_graph_switch_and_cpu_fallback():
    on = _predict_with_weight_math()
    x = np.ones((2, 3), np.float32)
    assert on.compiled_job.plan.cuda_graph is True
    assert on.compiled_job.plan.uses_cuda_graph is False  # CPU placement: plain eager plan
    flow.clear_default_session()
    config = flow.FunctionConfig()
    config.enable_cuda_graph(False)
    off = _predict_with_weight_math(config)
    assert off.compiled_job.plan.cuda_graph is False and off.compiled_job.plan.uses_cuda_graph is False
    np.testing.assert_allclose(off(x), np.full((2, 3), 2 * np.e, np.float32), rtol=1e-6)


def test_folded_constant_round_trips_every_dtype():
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int64, torch.bool, torch.uint8):
        t = (torch.arange(6) - 2).reshape(2, 3).to(dtype)
        back = fused_ops.decode_constant(fused_ops.encode_constant(t), (2, 3), flow.framework.dtypes.from_torch(dtype))
        assert back.dtype == dtype and torch.equal(back, t)


@pytest.mark.parametrize("fails", [False, True])
def test_a_failed_op_before_the_agreement_skips_the_ops_after_it_but_not_the_collectives(fails):
    """The agreement point of a worker's plan (:func:`graphfront.runtime.plan._agreeing`):
    after an op before it raised, the later ops are skipped, each collective still runs,
    on zeros, so that the other devices complete theirs, and the exception reaches the
    agreement; the lines after the agreement run only when it returns."""
    from graphfront.runtime.plan import _agreeing
    calls, agreed = [], []

    def op_a():
        if fails:
            raise ValueError("bad value on this device")
        return 3

    env = {"OP_A": op_a, "COLL": lambda x: calls.append(x) or x * 10, "AGREE": agreed.append}
    lines = ["a = OP_A()", "b = a + 1", "c = COLL(b)", "d = c + 1", "e = COLL(d)", "f = e + 1"]
    body = _agreeing(lines, 5, {2: "c = COLL(0)", 4: "e = COLL(0)"})
    exec("def plan():\n" + "\n".join("    " + line for line in body) + "\n    return f", env)
    assert env["plan"]() == (411 if not fails else 1)
    assert calls == ([4, 41] if not fails else [0, 0])
    assert [type(e).__name__ if e else None for e in agreed] == ["ValueError" if fails else None]


@pytest.mark.parametrize("policy", [None, "dynamic"])
def test_a_failed_in_step_index_check_skips_every_variable_update(policy):
    """A label computed in the job, checked in the step (as on a GPU: clamped, flagged):
    when it is out of range no variable changes, neither the weights and their momentum
    (the update op's ``skip_if``, with dynamic loss scaling's count too) nor the train step
    (its old value put back), and the error is raised after the step; a good step then
    updates them as usual."""
    flow.clear_default_session()

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((4, 3)), ids: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        labels = flow.math.add(ids, flow.constant(1, dtype=flow.int32, shape=(4,)))  # (computed: checked in the step)
        logits = flow.layers.dense(x, 3, kernel_initializer=flow.constant_initializer(0.1), name="fc")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0.9,
                           loss_scale_policy=policy and flow.optimizer.loss_scale.dynamic_loss_scale(
                               initial_loss_scale=4.0)).minimize(loss)
        return loss

    job = train.compiled_job.job
    store = default_session().variables  # (made by compiling the job)
    plan = Plan(job, store, checks_in_step=True)  # (the GPU's checks, on the CPU)
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3) / 10

    def state():
        return {k: v.clone() for k, v in store.tensors.items()}
    before = state()
    *_, flags = plan._fn([x, torch.tensor([0, 1, 0, 1], dtype=torch.int32)])
    good = state()
    assert int(flags[0]) == 0 and not torch.equal(good["fc-weight"], before["fc-weight"])
    *_, flags = plan._fn([x, torch.tensor([0, 1, 0, 2], dtype=torch.int32)])   # label 3 of 3 classes
    with pytest.raises(OpRunError, match=r"received 3 at index \(3,\)"):
        plan.checks.raise_failed(flags.numpy())
    for k, v in state().items():
        assert torch.equal(v, good[k]), k
    *_, flags = plan._fn([x, torch.tensor([0, 1, 0, 1], dtype=torch.int32)])
    assert int(flags[0]) == 0 and not torch.equal(store.tensors["fc-weight"], good["fc-weight"])


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KEEPS_FREED_MEMORY = """
import os, numpy as np, torch, graphfront as flow
from graphfront import typing as tp

@flow.global_function()
def job(x: tp.Numpy.Placeholder((2,), dtype=flow.float)) -> tp.Numpy:
    with flow.scope.placement("cpu", "0:0"):
        return x + 1.0
job(np.zeros(2, np.float32))        # a plan with ops on the CPU

def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = torch.ones(16 << 20)        # 64 MiB, every page written
before = resident()
del block
print(before - resident())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not os.path.exists("/proc/self/statm"),
                    reason="glibc's malloc settings, read back through Linux's /proc/self/statm")
def test_a_cpu_plan_keeps_the_host_memory_a_step_frees():
    """After a plan with ops on the CPU is made, a 64 MiB tensor's memory stays mapped when
    the tensor is freed, for the next step to reuse (glibc's default maps such a block on
    its own and unmaps it at free: the resident size drops by the block, as it does where the
    environment tunes ``malloc`` itself, whose settings graphfront leaves as they are)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))

    def dropped(**extra):
        out = subprocess.run([sys.executable, "-c", _KEEPS_FREED_MEMORY], env={**env, **extra}, check=True,
                             capture_output=True, text=True).stdout
        return int(out.split()[-1])
    assert dropped() < 8 << 20                                # kept mapped
    assert dropped(MALLOC_ARENA_MAX="8") > 56 << 20           # the user's malloc settings: unmapped at free
