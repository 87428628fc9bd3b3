"""``fuse_attention``: a transformer layer's attention, on a GPU, becomes one
``fused_multi_head_attention`` (:mod:`graphfront.ops.attention_ops`).

It runs on the job as built, before auto mixed precision and autograd (so the fused op's own
gradient op replaces the backward of the ops it takes), for GPU placements, unless
``FunctionConfig().enable_passes(False)`` or ``passes.disable_passes(config,
"fuse_attention")``. The pattern is the attention of OneFlow-Benchmark's BERT, every blob
in it read only by the next op:

    q = transpose(query, perm=[0, 2, 1, 3])          # and likewise key and value: (B, S, H, D) -> (B, H, S, D)
    s = batch_matmul(q, k, transpose_b=True, alpha)  # optionally followed by scalar_mul(s, c)
    s = broadcast_add(s, attn_bias)                  # optional; attn_bias broadcast onto s
    p = softmax(s)
    p = dropout(p, random_mask_like(p, rate, seed))  # optional; OneFlow's dropout scale 1 / (1 - rate)
    o = batch_matmul(p, v)
    out = transpose(o, perm=[0, 2, 1, 3])            # (B, Sq, H, Dv)

becomes ``out = fused_multi_head_attention(query, key, value, attn_bias)`` with ``scale =
alpha * c``, ``dropout_rate = rate`` and ``seed``. The scores (B, H, Sq, Sk), their
softmax, the dropout mask and the four head transposes are no longer written, forward or
backward. On the CPU the unfused ops stay: there they draw OneFlow's own dropout masks.
"""
from __future__ import annotations

from graphfront.passes.rewrite import fuse_matches, has_op_types, on_gpu, single_input, single_output, user_type

_HEADS = [0, 2, 1, 3]


def _is_enabled(job) -> bool:
    return has_op_types(job, ("softmax",)) and has_op_types(job, ("batch_matmul",)) and \
        any(on_gpu(op) for op in job.net.op)


def _heads_of(net, lbn, reader):
    """The (B, S, H, D) blob that ``lbn`` is the head transpose of, when ``reader`` alone reads it."""
    t = net.producer_op(lbn)
    if user_type(t) != "transpose" or list(net.attrs(t)["perm"]) != _HEADS or net.sole_reader(lbn) is not reader:
        return None, None
    return single_input(t, "input"), t


def _match(net, mm):
    """The fused op's inputs, attrs and the ops it replaces, for the pattern starting at the
    scores' ``batch_matmul`` ``mm``; None where it does not hold."""
    a = net.attrs(mm)
    if not on_gpu(mm) or a["transpose_a"] or not a["transpose_b"] or "_add_to_output" in mm.user_conf.input:
        return None
    query, tq = _heads_of(net, single_input(mm, "a"), mm)
    key, tk = _heads_of(net, single_input(mm, "b"), mm)
    if query is None or key is None:
        return None
    scale, bias, ops = a["alpha"], None, [tq, tk, mm]
    x = single_output(mm, "out")
    scores_shape = net.desc(x).shape
    nxt = net.sole_reader(x)
    if user_type(nxt) == "scalar_mul":
        sa = net.attrs(nxt)
        if not sa["has_float_operand"]:
            return None
        scale, x = scale * sa["float_operand"], single_output(nxt, "out")
        ops.append(nxt)
        nxt = net.sole_reader(x)
    if user_type(nxt) == "broadcast_add":
        ins = [single_input(nxt, "x"), single_input(nxt, "y")]
        bias = ins[1] if ins[0] == x else ins[0]
        z = single_output(nxt, "z")
        if bias == x or net.desc(z).shape != scores_shape or net.desc(bias).dtype is not net.desc(x).dtype:
            return None
        x = z
        ops.append(nxt)
        nxt = net.sole_reader(x)
    softmax = nxt if user_type(nxt) == "softmax" else None
    if softmax is None:
        return None
    ops.append(softmax)
    x = single_output(softmax, "out")
    rate, seed, dropped = 0.0, 0, _dropout_of(net, x)
    if dropped is not None:
        dropout, mask_op = dropped
        rate, seed = net.attrs(mask_op)["rate"], net.attrs(mask_op)["seed"]
        ops += [mask_op, dropout]
        x = single_output(dropout, "out")
    nxt = net.sole_reader(x)
    b = net.attrs(nxt) if user_type(nxt) == "batch_matmul" else None
    if b is None or b["transpose_a"] or b["transpose_b"] or b["alpha"] != 1.0 or single_input(nxt, "a") != x or \
            "_add_to_output" in nxt.user_conf.input:
        return None
    value, tv = _heads_of(net, single_input(nxt, "b"), nxt)
    out_t = net.sole_reader(single_output(nxt, "out"))
    if value is None or user_type(out_t) != "transpose" or list(net.attrs(out_t)["perm"]) != _HEADS:
        return None
    ops += [tv, nxt, out_t]
    if any(net.placement(o) != net.placement(mm) for o in ops):
        return None  # (one placement for all of them)
    inputs = {"query": query, "key": key, "value": value, "attn_bias": bias}
    return inputs, {"scale": scale, "dropout_rate": rate, "seed": seed}, ops, single_output(out_t, "output")


def _dropout_of(net, p):
    """``(dropout, random_mask_like)`` when ``p``'s readers are exactly a dropout of ``p`` and
    the ``random_mask_like`` shaped like it that draws its mask (read by nothing else), with
    OneFlow's scale ``1 / (1 - rate)``."""
    readers = {user_type(op): op for op, _, _ in net.readers(p)}
    if len(net.readers(p)) != 2 or set(readers) != {"dropout", "random_mask_like"} or p in net.protected:
        return None
    dropout, mask_op = readers["dropout"], readers["random_mask_like"]
    mask = single_output(mask_op, "out")
    if single_input(dropout, "in") != p or single_input(dropout, "mask") != mask or \
            net.sole_reader(mask) is not dropout or "_add_to_output" in dropout.user_conf.input:
        return None
    rate = net.attrs(mask_op)["rate"]
    if abs(net.attrs(dropout)["scale"] * (1.0 - rate) - 1.0) > 1e-6:
        return None
    return dropout, mask_op


def fuse_attention(job):
    """Rewrite every match of the module docstring's pattern; returns the job."""
    return fuse_matches(job, "batch_matmul", _match, "fused_multi_head_attention",
                        ("out", "softmax_lse", "philox_seed", "philox_offset"), "-fused_attention")


fuse_attention.is_enabled = _is_enabled
