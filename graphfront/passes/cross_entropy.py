"""``fuse_bias_add_sparse_softmax_cross_entropy``: the bias added to a classifier's logits and
the softmax cross entropy over them become one ``fused_bias_add_sparse_softmax_cross_entropy``
on a GPU (:mod:`graphfront.ops.nn_ops`).

It runs on the job as built, before auto mixed precision and autograd (the fused op's own
gradient op replaces the backward of the two), for GPU placements, unless
``FunctionConfig().enable_passes(False)`` or ``passes.disable_passes(config,
"fuse_bias_add_sparse_softmax_cross_entropy")``. The pattern, the sum read only by the loss,
the loss's ``prob`` read by nothing and its ``out`` not itself the job's loss (which keeps
its op, as the train config names it):

    logits = bias_add(x, bias, axis=-1)            # the bias over the classes (last axis)
    prob, out = sparse_softmax_cross_entropy(logits, label)

becomes ``prob, out = fused_bias_add_sparse_softmax_cross_entropy(x, bias, label)``. Under
auto mixed precision ``x`` keeps its float16 type (the op takes it uncast, its
``amp_no_cast``) and the op computes in the bias's float32, as the unfused ops after their
cast did: BERT's masked-LM decoder (logits of 30,522 classes) no longer writes a float32
copy of its logits, their sum with the bias, nor the casts of their gradient, and on a GPU
the forward and the gradient are each one TorchInductor-compiled function.
"""
from __future__ import annotations

from graphfront.passes.rewrite import fuse_matches, has_op_types, on_gpu, single_input, single_output, user_type

FUSED = "fused_bias_add_sparse_softmax_cross_entropy"


def _is_enabled(job) -> bool:
    return has_op_types(job, ("sparse_softmax_cross_entropy",)) and has_op_types(job, ("bias_add",)) and \
        any(on_gpu(op) for op in job.net.op)


def _match(net, sce):
    """``(inputs, attrs, ops, out)`` of the fused op for the pattern ending at ``sce``
    (:func:`~graphfront.passes.rewrite.fuse_matches`); None where it does not hold."""
    prob, logits, out = single_output(sce, "prob"), single_input(sce, "prediction"), single_output(sce, "out")
    if not on_gpu(sce) or prob is None or net.readers(prob) or {prob, out} & net.protected:
        return None   # (a loss named by the train config keeps its op)
    add = net.producer_op(logits)
    if user_type(add) != "bias_add" or net.sole_reader(logits) is not sce or net.placement(add) != net.placement(sce):
        return None
    x = single_input(add, "a")
    if net.attrs(add)["axis"] != len(net.desc(x).shape) - 1:
        return None
    inputs = {"prediction": x, "bias": single_input(add, "b"), "label": single_input(sce, "label")}
    return inputs, {"depth": net.attrs(sce)["depth"]}, [add, sce], out


def fuse_bias_add_sparse_softmax_cross_entropy(job):
    """Rewrite every match of the module docstring's pattern; returns the job."""
    return fuse_matches(job, "sparse_softmax_cross_entropy", _match, FUSED, ("out", "prob"), "-fused")


fuse_bias_add_sparse_softmax_cross_entropy.is_enabled = _is_enabled
