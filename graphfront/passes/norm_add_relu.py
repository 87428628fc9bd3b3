"""``fuse_normalization_add_relu``: a training batch norm followed by a relu, with or without a
residual add between them, becomes one ``normalization_add_relu`` on a GPU
(:mod:`graphfront.ops.norm_ops`), as OneFlow's ``flow.layers.batch_normalization_add_relu``
builds it there.

It runs on the job as built, before auto mixed precision and autograd (so the fused op's
own gradient op replaces the backward of the ops it takes), for GPU placements, unless
``FunctionConfig().enable_passes(False)`` or ``passes.disable_passes(config,
"fuse_normalization_add_relu")``. The pattern, every blob in it read only by the next op:

    y = normalization(x, moving_mean, moving_variance, gamma, beta)  # training, outputs mean and inv_variance
    y = add_n(y, addend)                                             # optional; addend of y's shape and dtype
    out = relu(y)

becomes ``out = normalization_add_relu(x, addend, moving_mean, moving_variance, gamma, beta)``
(same attrs and variables); on several devices, where each device's part of ``x`` fills
whole 32-element words of the relu mask. On a GPU its kernels are compiled by TorchInductor (or
run cuDNN's batch norm and one compiled add and relu, where the first call times that
faster), so the sum and the relu's input are no longer written, nor read back by the
relu's gradient: the backward reads the relu mask from 32-element bit words.
"""
from __future__ import annotations

from graphfront.framework.scope_symbols import device_count
from graphfront.ops.common import numel
from graphfront.passes.rewrite import fuse_matches, has_op_types, on_gpu, single_input, single_output, user_type


def _is_enabled(job) -> bool:
    return has_op_types(job, ("normalization",)) and has_op_types(job, ("relu",)) and \
        any(on_gpu(op) for op in job.net.op)


def _match(net, bn):
    """``(inputs, attrs, ops, out)`` of the fused op for the pattern starting at ``bn``
    (:func:`~graphfront.passes.rewrite.fuse_matches`); None where it does not hold."""
    if not on_gpu(bn) or not net.attrs(bn)["training"] or "_add_to_output" in bn.user_conf.input:
        return None
    stats = [single_output(bn, a) for a in ("mean", "inv_variance")]
    if None in stats or any(net.readers(s) or s in net.protected for s in stats):
        return None
    y = single_output(bn, "y")
    nxt, ops, addend = net.sole_reader(y), [bn], None
    if user_type(nxt) == "add_n" and len(nxt.user_conf.input["in"].s) == 2:
        a, b = nxt.user_conf.input["in"].s
        addend = b if a == y else a
        if addend == y or net.desc(addend).shape != net.desc(y).shape or net.desc(addend).dtype is not net.desc(y).dtype:
            return None
        ops.append(nxt)
        y = single_output(nxt, "out")
        nxt = net.sole_reader(y)
    if user_type(nxt) != "relu" or "_add_to_output" in nxt.user_conf.input:
        return None
    ops.append(nxt)
    if any(net.placement(o) != net.placement(bn) for o in ops) or not _whole_words(net, bn):
        return None
    inputs = {arg: single_input(bn, arg) for arg in ("x", "moving_mean", "moving_variance", "gamma", "beta")}
    inputs["addend"] = addend
    return inputs, net.attrs(bn), ops, single_output(nxt, "y")


def _whole_words(net, bn) -> bool:
    """Whether each device's part of the batch norm's input fills whole 32-element words of
    the relu mask: so the fused op splits over the devices as the batch norm does (each
    device normalizing its part with its part's statistics)."""
    names = net.placement(bn)[1]
    n = device_count(names) if names else 1
    shape = net.desc(single_input(bn, "x")).shape
    return n == 1 or (shape[0] % n == 0 and numel(shape) % (32 * n) == 0)


def fuse_normalization_add_relu(job):
    """Rewrite every match of the module docstring's pattern; returns the job."""
    return fuse_matches(job, "normalization", _match, "normalization_add_relu",
                        ("y", "reserve_space", "mean", "inv_variance"), "-fused_bn")


fuse_normalization_add_relu.is_enabled = _is_enabled
