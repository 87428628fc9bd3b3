"""Softmax-family and loss ops: log_softmax, softmax / sigmoid / sparse / binary cross
entropy, kl_div_loss, smooth_l1_loss, nll.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/``: the sparse / softmax cross entropy, smooth L1, nll and
KL-divergence ``*_op.cpp`` files). All losses here are unreduced (per element or per example); the ``flow.nn``
wrappers apply the reduction. Only the prediction-side input gets a gradient (labels,
targets and weights get none), as in OneFlow. Formulas are the standard ones, written
as PyTorch documents them for ``torch.nn.functional`` (BCE clamps ``log`` at -100).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.ops.common import (bad_labels, balanced_range, index_checks, label_checks, label_error, raising_bad_ids,
                                   same_dtype)
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import const_as, neg, pick_last, reduce_node
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


def _float(ctx, arg):
    d = ctx.input(arg)
    ctx.check(d.dtype.is_floating_point, f"input '{arg}' expected a floating dtype, received {d.dtype.name}")
    return d


def _shape_as(ctx, arg, ref, what=None):
    a, r = ctx.input(arg), ctx.input(ref)
    ctx.check(a.shape == r.shape, f"input '{arg}' expected shape {r.shape} ({what or 'as ' + repr(ref)}), "
                                  f"received {a.shape}")


def _needs_grad(g, arg, out):
    return g.needs(arg) and g.dout(out) is not None


def _but_last(arg, linear=None):
    """SBP of ops along the last axis of ``arg``: every arg split on any other axis; a grad
    linear in its input ``linear`` (dy) takes it partial with the others broadcast."""
    along = _sbp.leading(arg, 1)

    def rule(ctx):
        cands = along(ctx)
        if linear:
            cands.append(_sbp.partial_in(ctx, linear))
        return cands
    return rule


# ------------------------------------------------------------------ log_softmax

def _log_softmax_infer(ctx):
    x = _float(ctx, "in")
    ctx.check(len(x.shape) >= 1, "input 'in' must have rank >= 1")
    ctx.set_output("prob", x.shape, x.dtype)


def _log_softmax_grad_infer(ctx):
    _shape_as(ctx, "dy", "prob")
    same_dtype(ctx, "prob", "dy")
    ctx.set_output("dx", ctx.input("prob").shape, ctx.input("prob").dtype)


op("log_softmax", inputs=["in"], outputs=["prob"], infer=_log_softmax_infer,
   kernel=lambda k: (lambda x: torch.log_softmax(x, -1)), onnx=onnx_rules.same("LogSoftmax", axis=-1),
   xla=lambda k: _jnn().log_softmax, sbp=_but_last("in"),
   grad=lambda g: _needs_grad(g, "in", "prob") and g.set_grad("in", g.emit(
       "log_softmax_grad", {"prob": g.output("prob"), "dy": g.dout("prob")})),
   doc="prob = x - logsumexp(x) over the last axis (the log-probabilities)")
op("log_softmax_grad", inputs=["prob", "dy"], outputs=["dx"], infer=_log_softmax_grad_infer,
   sbp=_but_last("prob", "dy"),
   kernel=lambda k: (lambda prob, dy: dy - torch.exp(prob) * dy.sum(-1, keepdim=True)),
   xla=lambda k: (lambda prob, dy: dy - xla_rules.jnp().exp(prob) * dy.sum(-1, keepdims=True)),
   onnx=lambda c: c.node("Sub", [c.input("dy"), c.node("Mul", [c.node("Exp", [c.input("prob")]), reduce_node(
       c, "ReduceSum", c.input("dy"), [-1], 1)])], [c.output("dx")]),
   doc="dx = dy - softmax * sum(dy) over the last axis")


# ------------------------------------------------------------------ softmax_cross_entropy (dense labels)

def _sce_infer(ctx):
    pred = _float(ctx, "prediction")
    ctx.check(len(pred.shape) >= 2, f"input 'prediction' expected rank >= 2, received shape {pred.shape}")
    _shape_as(ctx, "label", "prediction")
    same_dtype(ctx, "prediction", "label")
    ctx.set_output("prob", pred.shape, pred.dtype)
    ctx.set_output("out", pred.shape[:-1], pred.dtype)


def _sce_kernel(k):
    def sce(pred, label):
        logp = torch.log_softmax(pred, -1)
        return logp.exp(), -(label * logp).sum(-1)
    return sce


def _jnn():
    import jax.nn
    return jax.nn


def _sce_xla(k):
    def sce(pred, label):
        logp = _jnn().log_softmax(pred, -1)
        return xla_rules.jnp().exp(logp), -(label * logp).sum(-1)
    return sce


def _sce_grad_infer(ctx):
    prob, label, dy = ctx.input("prob"), ctx.input("label"), ctx.input("dy")
    ctx.check(label.shape == prob.shape, f"input 'label' expected shape {prob.shape}, received {label.shape}")
    ctx.check(dy.shape == prob.shape[:-1], f"input 'dy' expected shape {prob.shape[:-1]}, received {dy.shape}")
    ctx.set_output("prediction_diff", prob.shape, prob.dtype)


def _sce_grad_kernel(k):
    # OneFlow's gradient (oneflow/user/kernels/softmax_cross_entropy_kernel.h):
    # dy * (prob - label), the derivative of -sum(label * log_softmax(p)) for label rows
    # that sum to 1 (OneFlow applies it to any label).
    return lambda prob, label, dy: dy.unsqueeze(-1) * (prob - label)


# ONNX converters spell out the kernels' formulas (unreduced losses). Class ids outside
# [0, depth) make the kernels raise (sparse losses) or pick garbage; in ONNX, GatherElements
# fails at run time on them: only in-range ids are defined.
def _softmax_cross_entropy_onnx(c):
    """prob = softmax(prediction); out = -sum(label * log_softmax(prediction)) over the last axis."""
    logp = c.node("LogSoftmax", [c.input("prediction")], axis=-1)
    c.node("Exp", [logp], [c.output("prob")])
    s = reduce_node(c, "ReduceSum", c.node("Mul", [c.input("label"), logp]), [-1], 0)
    neg(c, s, c.output("out"))


op("softmax_cross_entropy", inputs=["prediction", "label"], outputs=["prob", "out"], infer=_sce_infer,
   kernel=_sce_kernel, onnx=_softmax_cross_entropy_onnx, xla=_sce_xla,
   grad=lambda g: _needs_grad(g, "prediction", "out") and g.set_grad("prediction", g.emit(
       "softmax_cross_entropy_grad", {"prob": g.output("prob"), "label": g.input("label"), "dy": g.dout("out")})),
   sbp=_sbp.batch(min_ndim_arg="prediction"),
   doc="prob = softmax(prediction); out = -sum(label * log(prob)) over the last axis")
op("softmax_cross_entropy_grad", inputs=["prob", "label", "dy"], outputs=["prediction_diff"],
   infer=_sce_grad_infer, kernel=_sce_grad_kernel, xla=lambda k: (lambda prob, label, dy: dy[..., None] * (prob - label)),
   sbp=_sbp.batch(min_ndim_arg="prob"),
   onnx=lambda c: c.node("Mul", [c.node("Unsqueeze", [c.input("dy"), c.const(onnx_rules.int64s([-1]))]),
                                 c.node("Sub", [c.input("prob"), c.input("label")])], [c.output("prediction_diff")]))


# ------------------------------------------------------------------ sigmoid_cross_entropy

def _sigmoid_ce_infer(ctx):
    pred = _float(ctx, "prediction")
    _shape_as(ctx, "label", "prediction")
    ctx.set_output("loss", pred.shape, pred.dtype)


def _sigmoid_ce_kernel(k):
    return lambda x, z: F.binary_cross_entropy_with_logits(x, z.to(x.dtype), reduction="none")


def _sigmoid_ce_xla(k):
    def sigmoid_ce(x, z):  # max(x, 0) - x * z + log(1 + exp(-|x|)), as torch's binary_cross_entropy_with_logits
        jnp = xla_rules.jnp()
        return jnp.maximum(x, 0) - x * z.astype(x.dtype) + jnp.log1p(jnp.exp(-jnp.abs(x)))
    return sigmoid_ce


def _sigmoid_ce_grad_infer(ctx):
    _shape_as(ctx, "label", "prediction")
    _shape_as(ctx, "loss_diff", "prediction")
    ctx.set_output("prediction_diff", ctx.input("prediction").shape, ctx.input("prediction").dtype)


def _softplus_neg_abs_onnx(c, x, d):
    """log(1 + exp(-|x|)), finite for every x (onnxruntime's Softplus has no double kernel)."""
    return c.node("Log", [c.node("Add", [const_as(c, 1.0, d), c.node("Exp", [neg(c, c.node("Abs", [x]))])])])


def _sigmoid_cross_entropy_onnx(c):
    """loss = max(x, 0) - x * z + log(1 + exp(-|x|)), z cast to x's dtype."""
    x, d = c.input("prediction"), c.input_desc("prediction")
    z = c.node("Cast", [c.input("label")], to=c.dtype_code(d.dtype))
    t = c.node("Sub", [c.node("Max", [x, const_as(c, 0.0, d)]), c.node("Mul", [x, z])])
    c.node("Add", [t, _softplus_neg_abs_onnx(c, x, d)], [c.output("loss")])


op("sigmoid_cross_entropy", inputs=["prediction", "label"], outputs=["loss"], infer=_sigmoid_ce_infer,
   kernel=_sigmoid_ce_kernel, onnx=_sigmoid_cross_entropy_onnx, xla=_sigmoid_ce_xla, sbp=_sbp.elementwise(),
   grad=lambda g: _needs_grad(g, "prediction", "loss") and g.set_grad("prediction", g.emit(
       "sigmoid_cross_entropy_grad", {"prediction": g.input("prediction"), "label": g.input("label"),
                                      "loss_diff": g.dout("loss")})),
   doc="loss = max(x, 0) - x * z + log(1 + exp(-|x|)), x = prediction (logits), z = label")
op("sigmoid_cross_entropy_grad", inputs=["prediction", "label", "loss_diff"], outputs=["prediction_diff"],
   infer=_sigmoid_ce_grad_infer, sbp=_sbp.elementwise(p_each=("loss_diff",)),
   kernel=lambda k: (lambda x, z, dl: (torch.sigmoid(x) - z.to(x.dtype)) * dl),
   onnx=lambda c: c.node("Mul", [c.node("Sub", [c.node("Sigmoid", [c.input("prediction")]), c.node(
       "Cast", [c.input("label")], to=c.dtype_code(c.input_desc("prediction").dtype))]), c.input("loss_diff")],
       [c.output("prediction_diff")]),
   xla=lambda k: (lambda x, z, dl: (_jnn().sigmoid(x) - z.astype(x.dtype)) * dl))


# ------------------------------------------------------------------ sparse_cross_entropy (probabilities)

def _sparse_ce_infer(ctx):
    pred, label = _float(ctx, "prediction"), ctx.input("label")
    ctx.check(len(pred.shape) >= 2, f"input 'prediction' expected rank >= 2, received shape {pred.shape}")
    ctx.check(label.dtype.is_integer, f"input 'label' expected an integer dtype, received {label.dtype.name}")
    ctx.check(label.shape == pred.shape[:-1],
              f"input 'label' expected shape {pred.shape[:-1]} (prediction {pred.shape} without its last dim), "
              f"received {label.shape}")
    depth = ctx.attr("depth")
    ctx.check(depth == pred.shape[-1], f"attr 'depth' expected {pred.shape[-1]} (last dim of 'prediction'), "
                                       f"received {depth}")
    ctx.set_output("out", label.shape, pred.dtype)


def class_offset(k, arg="prediction"):
    """The first class of this device's part of ``arg`` where the job splits it on its class
    (last) axis (the model-parallel layouts of the ``_ms`` ops and of
    ``combined_margin_loss``), else None: each device then holds the classes of its part
    (OneFlow's ``BalancedSplitter``), and the labels of the others fall outside it (OneFlow's
    ``lower_bound`` of those kernels)."""
    if k.sbp(arg) != _sbp.split(len(k.input(arg).shape) - 1):
        return None
    return balanced_range(k.logical(arg).shape[-1], k.parallel_num, k.parallel_id).start


def local_class_ids(label, offset, classes):
    """``(ids, hit)``: the labels as ids of a part's ``classes`` classes from ``offset`` (0
    where outside them), and whether inside."""
    ids = label.long() - offset
    hit = (ids >= 0) & (ids < classes)
    return torch.where(hit, ids, 0), hit


def at_local_class(p, label, offset):
    """``(ids, hit, p[..., ids])``: :func:`local_class_ids` of ``p``'s classes and the
    probabilities at those ids."""
    ids, hit = local_class_ids(label, offset, p.shape[-1])
    return ids, hit, p.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def _sparse_ce_kernel(op_type):
    def make(k):
        offset = class_offset(k)

        def local_ce(p, label):  # -log p at the labels of this part's classes, 0 at the others'
            _, hit, picked = at_local_class(p, label, offset)
            return torch.where(hit, -torch.log(picked), torch.zeros((), dtype=p.dtype, device=p.device))

        def sparse_ce(p, label):
            try:
                return -torch.log(p.gather(-1, label.long().unsqueeze(-1)).squeeze(-1))
            except (RuntimeError, IndexError) as e:
                bad_labels(k, op_type, label, e)
        return sparse_ce if offset is None else local_ce
    return make


def _sparse_ce_grad_infer(ctx):
    pred, label, dy = ctx.input("prediction"), ctx.input("label"), ctx.input("dy")
    ctx.check(dy.shape == label.shape, f"input 'dy' expected shape {label.shape} (as 'label'), received {dy.shape}")
    ctx.set_output("prediction_diff", pred.shape, pred.dtype)


def _sparse_ce_grad_kernel(op_type):
    def make(k):
        offset = class_offset(k)

        def local_ce_grad(p, label, dy):
            ids, hit, picked = at_local_class(p, label, offset)
            value = torch.where(hit, -dy / picked, torch.zeros((), dtype=p.dtype, device=p.device))
            return torch.zeros_like(p).scatter_(-1, ids.unsqueeze(-1), value.unsqueeze(-1))

        def sparse_ce_grad(p, label, dy):
            idx = label.long().unsqueeze(-1)
            try:
                return torch.zeros_like(p).scatter_(-1, idx, -dy.unsqueeze(-1) / p.gather(-1, idx))
            except (RuntimeError, IndexError) as e:
                bad_labels(k, op_type, label, e)
        return sparse_ce_grad if offset is None else local_ce_grad
    return make


def _at_label_xla(shape, label, value):
    """Zeros of ``shape`` with ``value[...]`` at ``[..., label[...]]`` (a scatter along the last axis)."""
    jnp, lax = xla_rules.jnp(), xla_rules.lax()
    hit = lax.broadcasted_iota("int64", shape, len(shape) - 1) == label.astype("int64")[..., None]
    return jnp.where(hit, value[..., None], jnp.zeros((), value.dtype))


def _pick_label_xla(p, label):
    """``p[..., label]`` (labels out of range give NaN; the step's check fails on them)."""
    jnp = xla_rules.jnp()
    return jnp.take_along_axis(p, label.astype("int64")[..., None], axis=-1, mode="fill", fill_value=jnp.nan)[..., 0]


def _sparse_ce_xla(op_type):
    def make(k):
        def sparse_ce(p, label):
            xla_rules.check_ids(label, k.attr("depth"), lambda value, at: label_error(k, op_type, value, at))
            return -xla_rules.jnp().log(_pick_label_xla(p, label))
        return sparse_ce
    return make


def _sparse_ce_grad_xla(op_type):
    def make(k):
        def sparse_ce_grad(p, label, dy):
            xla_rules.check_ids(label, k.attr("depth"), lambda value, at: label_error(k, op_type, value, at))
            return _at_label_xla(p.shape, label, -dy / _pick_label_xla(p, label))
        return sparse_ce_grad
    return make


def _sparse_cross_entropy_onnx(c):
    """out = -log(prediction[..., label]) (prediction holds probabilities)."""
    neg(c, c.node("Log", [pick_last(c, c.input("prediction"), c.input("label"))]), c.output("out"))


def _sparse_cross_entropy_grad_onnx(c):
    """zeros, with -dy / prediction[..., label] at [..., label]."""
    p, label, d = c.input("prediction"), c.input("label"), c.input_desc("prediction")
    value = c.node("Div", [neg(c, c.input("dy")), pick_last(c, p, label)])
    onnx_rules.put_last(c, label, value, d.shape[-1], d, c.output("prediction_diff"))


def _sparse_ce_sbp(grad, ms):
    """Per-example losses: split on any axis but the class axis (the grad linear in dy).
    The ``_ms`` ops (OneFlow's model-parallel ones) also take the prediction split on its
    class axis with the labels broadcast: the loss comes out as partial sums, the gradient
    split as the prediction (on a line of devices: the kernels' class offset is a line's)."""
    base = _but_last("prediction", "dy" if grad else None)

    def rule(ctx):
        cands = base(ctx)
        if ms and ctx.grid_axis is None:
            c = _sbp.split(ctx.ndim("prediction") - 1)
            cands.append(_sbp.signature(ctx, _sbp.B, prediction=c, prediction_diff=c) if grad else
                         _sbp.signature(ctx, _sbp.P, prediction=c, label=_sbp.B))
        return cands
    return rule


for _t in ("sparse_cross_entropy", "sparse_cross_entropy_ms"):
    op(_t, inputs=["prediction", "label"], outputs=["out"], attrs={"depth": ("int64", 0)}, infer=_sparse_ce_infer,
       kernel=_sparse_ce_kernel(_t), checks=label_checks(_t), onnx=_sparse_cross_entropy_onnx, xla=_sparse_ce_xla(_t),
       sbp=_sparse_ce_sbp(False, _t.endswith("_ms")),
       grad=lambda g, t=_t: _needs_grad(g, "prediction", "out") and g.set_grad("prediction", g.emit(
           f"{t}_grad", {"prediction": g.input("prediction"), "label": g.input("label"), "dy": g.dout("out")},
           {"depth": g.attr("depth")})),
       doc="out = -log(prediction[..., label]); prediction holds probabilities")
    op(f"{_t}_grad", inputs=["prediction", "label", "dy"], outputs=["prediction_diff"],
       attrs={"depth": ("int64", 0)}, infer=_sparse_ce_grad_infer, kernel=_sparse_ce_grad_kernel(f"{_t}_grad"),
       checks=label_checks(f"{_t}_grad"), xla=_sparse_ce_grad_xla(f"{_t}_grad"), onnx=_sparse_cross_entropy_grad_onnx,
       sbp=_sparse_ce_sbp(True, _t.endswith("_ms")))


# ------------------------------------------------------------------ binary cross entropy

def _bce_infer(ctx):
    x = _float(ctx, "input")
    _shape_as(ctx, "target", "input")
    same_dtype(ctx, "input", "target", "weight")
    if ctx.has_input("weight"):
        _shape_as(ctx, "weight", "input")
    ctx.set_output("out", x.shape, x.dtype)


def _bce(x, t, w):
    """OneFlow's formula, each log clamped at -100 as torch's kernel does, without that
    kernel's check that x is in [0, 1] (a device-side assert on a GPU, which would leave the
    process unusable): an x outside [0, 1] gives NaN, as in OneFlow."""
    out = -(t * torch.clamp(torch.log(x), min=-100.0) + (1 - t) * torch.clamp(torch.log(1 - x), min=-100.0))
    return out if w is None else out * w


def _bce_grad(x, t, w, dy):
    # d/dx of -(t log x + (1 - t) log(1 - x)) = (x - t) / (x (1 - x)), denominator clamped at 1e-12
    d = dy * (x - t) / torch.clamp((1 - x) * x, min=1e-12)
    return d if w is None else d * w


def _bce_xla(x, t, w):
    jnp = xla_rules.jnp()
    out = -(t * jnp.maximum(jnp.log(x), -100.0) + (1 - t) * jnp.maximum(jnp.log(1 - x), -100.0))
    return out if w is None else out * w


def _bce_grad_xla(x, t, w, dy):
    d = dy * (x - t) / xla_rules.jnp().maximum((1 - x) * x, 1e-12)
    return d if w is None else d * w


def _bce_grad_infer(ctx):
    for a in ("target", "dy", "weight"):
        if ctx.has_input(a):
            _shape_as(ctx, a, "input")
    ctx.set_output("dx", ctx.input("input").shape, ctx.input("input").dtype)


def _times_weight_onnx(c, x, out):
    if c.has_input("weight"):
        c.node("Mul", [x, c.input("weight")], [out])
    else:
        c.node("Identity", [x], [out])


def _binary_cross_entropy_onnx(c):
    """out = -weight * (t * log(x) + (1 - t) * log(1 - x)), each log clamped at -100 (as torch)."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    one, low = const_as(c, 1.0, d), const_as(c, -100.0, d)
    log_x = c.node("Max", [c.node("Log", [x]), low])
    log_1mx = c.node("Max", [c.node("Log", [c.node("Sub", [one, x])]), low])
    s = c.node("Add", [c.node("Mul", [t, log_x]), c.node("Mul", [c.node("Sub", [one, t]), log_1mx])])
    _times_weight_onnx(c, neg(c, s), c.output("out"))


def _bce_grad_onnx(c):
    """dy * (x - t) / max((1 - x) * x, 1e-12), times weight."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    den = c.node("Max", [c.node("Mul", [c.node("Sub", [const_as(c, 1.0, d), x]), x]), const_as(c, 1e-12, d)])
    _times_weight_onnx(c, c.node("Div", [c.node("Mul", [c.input("dy"), c.node("Sub", [x, t])]), den]), c.output("dx"))


op("binary_cross_entropy", inputs=["input", "target", "weight?"], outputs=["out"], infer=_bce_infer,
   kernel=lambda k: _bce, onnx=_binary_cross_entropy_onnx, xla=lambda k: _bce_xla,
   sbp=_sbp.elementwise(p_each=("weight",)),
   grad=lambda g: _needs_grad(g, "input", "out") and g.set_grad("input", g.emit(
       "binary_cross_entropy_grad", {"input": g.input("input"), "target": g.input("target"),
                                     "weight": g.input("weight") if g.has_input("weight") else None,
                                     "dy": g.dout("out")})),
   doc="out = -weight * (target * log(input) + (1 - target) * log(1 - input)), logs clamped at -100")
op("binary_cross_entropy_grad", inputs=["input", "target", "weight?", "dy"], outputs=["dx"],
   infer=_bce_grad_infer, kernel=lambda k: _bce_grad, xla=lambda k: _bce_grad_xla, onnx=_bce_grad_onnx,
   sbp=_sbp.elementwise(p_each=("dy", "weight")))


def _bce_logits_infer(ctx):
    x = _float(ctx, "input")
    _shape_as(ctx, "target", "input")
    same_dtype(ctx, "input", "target", "weight", "pos_weight")
    if ctx.has_input("weight"):
        _shape_as(ctx, "weight", "input")
    has_pw = ctx.attr("has_pos_weight")
    ctx.check(has_pw == ctx.has_input("pos_weight"),
              f"attr 'has_pos_weight' is {has_pw} but input 'pos_weight' is "
              f"{'given' if ctx.has_input('pos_weight') else 'absent'}")
    if has_pw:
        pw = ctx.input("pos_weight")
        ctx.check(len(x.shape) >= 1 and pw.shape == (x.shape[-1],),
                  f"input 'pos_weight' expected shape {(x.shape[-1],) if x.shape else ()} (last dim of input), "
                  f"received {pw.shape}")
    ctx.set_output("out", x.shape, x.dtype)


def _bce_logits(x, t, w, pw):
    return F.binary_cross_entropy_with_logits(x, t, w, reduction="none", pos_weight=pw)


def _bce_logits_grad(x, t, w, pw, dy):
    # loss = (1 - t) x + (1 + (pw - 1) t) softplus(-x)  =>  d/dx = (1 - t) - (1 + (pw - 1) t) sigmoid(-x)
    if pw is None:
        d = torch.sigmoid(x) - t
    else:
        d = (1 - t) - (1 + (pw - 1) * t) * torch.sigmoid(-x)
    d = d * dy
    return d if w is None else d * w


def _bce_logits_xla(x, t, w, pw):
    # torch's formula: m = max(-x, 0); (1 - t) x + lw (log(exp(-m) + exp(-x - m)) + m), lw = 1 + (pw - 1) t
    jnp = xla_rules.jnp()
    m = jnp.maximum(-x, 0)
    soft = jnp.log(jnp.exp(-m) + jnp.exp(-x - m)) + m
    out = (1 - t) * x + (soft if pw is None else (1 + (pw - 1) * t) * soft)
    return out if w is None else out * w


def _bce_logits_grad_xla(x, t, w, pw, dy):
    sigmoid = _jnn().sigmoid
    d = sigmoid(x) - t if pw is None else (1 - t) - (1 + (pw - 1) * t) * sigmoid(-x)
    d = d * dy
    return d if w is None else d * w


def _bce_logits_grad_infer(ctx):
    for a in ("target", "dy", "weight"):
        if ctx.has_input(a):
            _shape_as(ctx, a, "input")
    ctx.set_output("dx", ctx.input("input").shape, ctx.input("input").dtype)


def _bce_logits_grad_maker(g):
    if not _needs_grad(g, "input", "out"):
        return
    opt = {a: (g.input(a) if g.has_input(a) else None) for a in ("weight", "pos_weight")}
    g.set_grad("input", g.emit(
        "binary_cross_entropy_with_logits_grad",
        {"input": g.input("input"), "target": g.input("target"), **opt, "dy": g.dout("out")},
        {"has_pos_weight": g.attr("has_pos_weight")}))


def _binary_cross_entropy_with_logits_onnx(c):
    """out = weight * ((1 - t) x + (1 + (pos_weight - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)))."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    one = const_as(c, 1.0, d)
    sp = c.node("Add", [_softplus_neg_abs_onnx(c, x, d), c.node("Max", [neg(c, x), const_as(c, 0.0, d)])])
    if c.has_input("pos_weight"):
        coef = c.node("Add", [one, c.node("Mul", [c.node("Sub", [c.input("pos_weight"), one]), t])])
        sp = c.node("Mul", [coef, sp])
    s = c.node("Add", [c.node("Mul", [c.node("Sub", [one, t]), x]), sp])
    _times_weight_onnx(c, s, c.output("out"))


def _bce_logits_grad_onnx(c):
    """(sigmoid(x) - t) * dy, or with pos_weight ((1 - t) - (1 + (pos_weight - 1) t) sigmoid(-x)) * dy; times weight."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    if c.has_input("pos_weight"):
        one = const_as(c, 1.0, d)
        coef = c.node("Add", [one, c.node("Mul", [c.node("Sub", [c.input("pos_weight"), one]), t])])
        s = c.node("Sub", [c.node("Sub", [one, t]), c.node("Mul", [coef, c.node("Sigmoid", [neg(c, x)])])])
    else:
        s = c.node("Sub", [c.node("Sigmoid", [x]), t])
    _times_weight_onnx(c, c.node("Mul", [s, c.input("dy")]), c.output("dx"))


op("binary_cross_entropy_with_logits", inputs=["input", "target", "weight?", "pos_weight?"], outputs=["out"],
   attrs={"has_pos_weight": ("bool", False)}, infer=_bce_logits_infer, kernel=lambda k: _bce_logits,
   xla=lambda k: _bce_logits_xla, sbp=_sbp.elementwise(p_each=("weight",)),
   onnx=_binary_cross_entropy_with_logits_onnx,
   grad=_bce_logits_grad_maker,
   doc="out = weight * ((1 - t) x + (1 + (pos_weight - 1) t) log(1 + exp(-x))), x = input, t = target; "
       "pos_weight (C,) applies along the last axis")
op("binary_cross_entropy_with_logits_grad", inputs=["input", "target", "weight?", "pos_weight?", "dy"],
   outputs=["dx"], attrs={"has_pos_weight": ("bool", False)}, infer=_bce_logits_grad_infer,
   kernel=lambda k: _bce_logits_grad, xla=lambda k: _bce_logits_grad_xla, onnx=_bce_logits_grad_onnx,
   sbp=_sbp.elementwise(p_each=("dy", "weight")))


# ------------------------------------------------------------------ kl_div_loss, smooth_l1_loss

def _pair_infer(ctx):
    x = _float(ctx, "input")
    _shape_as(ctx, "target", "input")
    same_dtype(ctx, "input", "target")
    ctx.set_output("out", x.shape, x.dtype)


def _pair_grad_infer(ctx):
    _shape_as(ctx, "target", "input")
    _shape_as(ctx, "dy", "input")
    ctx.set_output("dx", ctx.input("input").shape, ctx.input("input").dtype)


def _pair_grad(op_type, attr_names):
    def grad(g):
        if _needs_grad(g, "input", "out"):
            g.set_grad("input", g.emit(f"{op_type}_grad", {"input": g.input("input"), "target": g.input("target"),
                                                           "dy": g.dout("out")},
                                       {a: g.attr(a) for a in attr_names}))
    return grad


def _kl_div_kernel(k):
    log_target = k.attr("log_target")
    return lambda x, t: F.kl_div(x, t, reduction="none", log_target=log_target)


def _kl_div_xla(k):
    if k.attr("log_target"):
        return lambda x, t: xla_rules.jnp().exp(t) * (t - x)
    from jax.scipy.special import xlogy
    return lambda x, t: xlogy(t, t) - t * x


def _kl_div_grad_kernel(k):
    if k.attr("log_target"):
        return lambda x, t, dy: -torch.exp(t) * dy
    return lambda x, t, dy: -t * dy


def _kl_div_loss_onnx(c):
    """out = xlogy(t, t) - t * x (0 where t == 0); with log_target: exp(t) * (t - x)."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    if c.attr("log_target"):
        c.node("Mul", [c.node("Exp", [t]), c.node("Sub", [t, x])], [c.output("out")])
        return
    zero = const_as(c, 0.0, d)
    tlogt = c.node("Where", [c.node("Equal", [t, zero]), zero, c.node("Mul", [t, c.node("Log", [t])])])
    c.node("Sub", [tlogt, c.node("Mul", [t, x])], [c.output("out")])


op("kl_div_loss", inputs=["input", "target"], outputs=["out"], attrs={"log_target": ("bool", False)},
   infer=_pair_infer, kernel=_kl_div_kernel, onnx=_kl_div_loss_onnx, xla=_kl_div_xla, sbp=_sbp.elementwise(),
   grad=_pair_grad("kl_div_loss", ["log_target"]),
   doc="out = target * (log(target) - input) (0 where target == 0); with log_target: "
       "exp(target) * (target - input)")
op("kl_div_loss_grad", inputs=["input", "target", "dy"], outputs=["dx"], attrs={"log_target": ("bool", False)},
   infer=_pair_grad_infer, kernel=_kl_div_grad_kernel, sbp=_sbp.elementwise(p_each=("dy",)),
   onnx=lambda c: c.node("Mul", [neg(c, c.node("Exp", [c.input("target")]) if c.attr("log_target") else c.input("target")),
                                 c.input("dy")], [c.output("dx")]),
   xla=lambda k: ((lambda x, t, dy: -xla_rules.jnp().exp(t) * dy) if k.attr("log_target") else
                  (lambda x, t, dy: -t * dy)))


def _nonneg(v):
    return None if v >= 0 else f"must be >= 0, received {v}"


def _smooth_l1_kernel(k):
    beta = k.attr("beta")
    return lambda x, t: F.smooth_l1_loss(x, t, reduction="none", beta=beta)


def _smooth_l1_xla(k):
    beta = k.attr("beta")

    def smooth_l1(x, t):
        d = xla_rules.jnp().abs(x - t)
        return d if beta == 0 else xla_rules.jnp().where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return smooth_l1


def _smooth_l1_grad_xla(k):
    beta = k.attr("beta")

    def smooth_l1_grad(x, t, dy):
        jnp = xla_rules.jnp()
        d = x - t
        if beta == 0:
            return jnp.sign(d) * dy
        return jnp.where(jnp.abs(d) < beta, d / beta, jnp.sign(d)) * dy
    return smooth_l1_grad


def _smooth_l1_grad_kernel(k):
    beta = k.attr("beta")

    def smooth_l1_grad(x, t, dy):
        d = x - t
        if beta == 0:
            return torch.sign(d) * dy
        return torch.where(d.abs() < beta, d / beta, torch.sign(d)) * dy
    return smooth_l1_grad


def _smooth_l1_loss_onnx(c):
    """d = |x - t|; out = 0.5 d^2 / beta where d < beta, else d - 0.5 beta (d when beta == 0)."""
    d_ = c.input_desc("input")
    diff = c.node("Abs", [c.node("Sub", [c.input("input"), c.input("target")])])
    beta = c.attr("beta")
    if beta == 0:
        c.node("Identity", [diff], [c.output("out")])
        return
    quad = c.node("Mul", [c.node("Mul", [diff, diff]), const_as(c, 0.5 / beta, d_)])
    lin = c.node("Sub", [diff, const_as(c, 0.5 * beta, d_)])
    c.node("Where", [c.node("Less", [diff, const_as(c, beta, d_)]), quad, lin], [c.output("out")])


def _smooth_l1_grad_onnx(c):
    """d = x - t; (d / beta where |d| < beta, else sign(d)) * dy (sign(d) * dy when beta == 0)."""
    d_, beta = c.input_desc("input"), c.attr("beta")
    diff = c.node("Sub", [c.input("input"), c.input("target")])
    g = c.node("Sign", [diff])
    if beta != 0:
        b = const_as(c, beta, d_)
        g = c.node("Where", [c.node("Less", [c.node("Abs", [diff]), b]), c.node("Div", [diff, b]), g])
    c.node("Mul", [g, c.input("dy")], [c.output("dx")])


op("smooth_l1_loss", inputs=["input", "target"], outputs=["out"], attrs={"beta": ("float", 0.0, _nonneg)},
   infer=_pair_infer, kernel=_smooth_l1_kernel, onnx=_smooth_l1_loss_onnx, xla=_smooth_l1_xla, sbp=_sbp.elementwise(),
   grad=_pair_grad("smooth_l1_loss", ["beta"]),
   doc="d = |input - target|; out = 0.5 d^2 / beta if d < beta else d - 0.5 beta")
op("smooth_l1_loss_grad", inputs=["input", "target", "dy"], outputs=["dx"], attrs={"beta": ("float", 0.0, _nonneg)},
   infer=_pair_grad_infer, kernel=_smooth_l1_grad_kernel, xla=_smooth_l1_grad_xla, onnx=_smooth_l1_grad_onnx,
   sbp=_sbp.elementwise(p_each=("dy",)))


# ------------------------------------------------------------------ nll

def _nll_infer(ctx):
    x, t = _float(ctx, "input"), ctx.input("target")
    ctx.check(len(x.shape) == 2, f"input 'input' expected rank 2 (N, C), received shape {x.shape}")
    ctx.check(t.dtype.is_integer, f"input 'target' expected an integer dtype, received {t.dtype.name}")
    ctx.check(t.shape == x.shape[:1], f"input 'target' expected shape {x.shape[:1]}, received {t.shape}")
    if ctx.has_input("weight"):
        w = ctx.input("weight")
        ctx.check(w.shape == x.shape[1:], f"input 'weight' expected shape {x.shape[1:]} (one per class), "
                                          f"received {w.shape}")
        same_dtype(ctx, "input", "weight")
    ctx.set_output("out", t.shape, x.dtype)
    ctx.set_output("total_weight", (1,), x.dtype)


def _nll_weights(x, t, w, ignore):
    """Per-example weight: weight[target] (1 without weight), 0 where target == ignore_index."""
    valid = t != ignore
    safe = torch.where(valid, t.long(), torch.zeros((), dtype=torch.long, device=t.device))
    per = torch.ones(t.shape, dtype=x.dtype, device=x.device) if w is None else w[safe]
    return safe, per * valid.to(x.dtype)


def _nll_kernel(k):
    ignore = k.attr("ignore_index")

    def nll(x, t, w):
        safe, per = _nll_weights(x, t, w, ignore)
        out = -x.gather(1, safe.unsqueeze(1)).squeeze(1) * per
        return out, per.sum().reshape(1)
    return nll


def _nll_grad_infer(ctx):
    x, t, dy = ctx.input("input"), ctx.input("target"), ctx.input("dy")
    ctx.check(dy.shape == t.shape, f"input 'dy' expected shape {t.shape} (as 'target'), received {dy.shape}")
    ctx.set_output("dx", x.shape, x.dtype)


def _nll_grad_kernel(k):
    ignore = k.attr("ignore_index")

    def nll_grad(x, t, total_weight, w, dy):
        safe, per = _nll_weights(x, t, w, ignore)
        return torch.zeros_like(x).scatter_(1, safe.unsqueeze(1), (-dy * per).unsqueeze(1))
    return nll_grad


def _nll_weights_xla(x, t, w, ignore):
    """The jax form of :func:`_nll_weights`."""
    jnp = xla_rules.jnp()
    valid = t != ignore
    safe = jnp.where(valid, t.astype("int64"), 0)
    per = jnp.ones(t.shape, x.dtype) if w is None else w[safe]
    return safe, per * valid.astype(x.dtype)


def _nll_xla(op_type):
    def make(k):
        ignore = k.attr("ignore_index")
        (_, size, error), = _nll_checks(op_type)(k)

        def nll(x, t, w):
            xla_rules.check_ids(t, size, error)
            safe, per = _nll_weights_xla(x, t, w, ignore)
            return -_pick_label_xla(x, safe) * per, per.sum().reshape(1)

        def nll_grad(x, t, total_weight, w, dy):
            xla_rules.check_ids(t, size, error)
            safe, per = _nll_weights_xla(x, t, w, ignore)
            return _at_label_xla(x.shape, safe, -dy * per)
        return nll if op_type == "nll" else nll_grad
    return make


def _nll_grad_maker(g):
    if _needs_grad(g, "input", "out"):
        g.set_grad("input", g.emit(
            "nll_grad", {"input": g.input("input"), "target": g.input("target"),
                         "total_weight": g.output("total_weight"),
                         "weight": g.input("weight") if g.has_input("weight") else None, "dy": g.dout("out")},
            {"ignore_index": g.attr("ignore_index")}))


def _nll_weights_onnx(c):
    """(safe target, per-example weight) as the kernels' ``_nll_weights``."""
    d = c.input_desc("input")
    t = c.node("Cast", [c.input("target")], to=onnx_rules.INT64)
    valid = c.node("Not", [c.node("Equal", [t, c.const(np.int64(c.attr("ignore_index")))])])
    safe = c.node("Where", [valid, t, c.const(np.int64(0))])
    per = c.node("Cast", [valid], to=c.dtype_code(d.dtype))
    if c.has_input("weight"):
        per = c.node("Mul", [c.node("Gather", [c.input("weight"), safe], axis=0), per])
    return safe, per


def _nll_grad_onnx(c):
    """zeros, with -dy * weight[t] at [n, t] (t = target[n]; 0 at [n, 0] where t == ignore_index)."""
    safe, per = _nll_weights_onnx(c)
    d = c.input_desc("input")
    onnx_rules.put_last(c, safe, c.node("Mul", [neg(c, c.input("dy")), per]), d.shape[-1], d, c.output("dx"))


def _nll_onnx(c):
    """out[n] = -w[t] * input[n, t], t = target[n], 0 where t == ignore_index; total_weight = sum of w[t]."""
    x = c.input("input")
    safe, per = _nll_weights_onnx(c)
    picked = pick_last(c, x, safe)
    c.node("Mul", [neg(c, picked), per], [c.output("out")])
    total = reduce_node(c, "ReduceSum", per, [0], 1)
    c.node("Identity", [total], [c.output("total_weight")])


def _nll_checks(op_type):
    return index_checks(op_type, "target", lambda k: k.input("input").shape[1], lambda k: k.attr("ignore_index"))


op("nll", inputs=["input", "target", "weight?"], outputs=["out", "total_weight"],
   attrs={"ignore_index": ("int64", 0)}, infer=_nll_infer, kernel=raising_bad_ids(_nll_checks("nll"), 1, _nll_kernel),
   checks=_nll_checks("nll"), grad=_nll_grad_maker, onnx=_nll_onnx, xla=_nll_xla("nll"),
   sbp=lambda ctx: [_sbp.signature(ctx, _sbp.split(0), weight=_sbp.B, total_weight=_sbp.P)],
   doc="out[n] = -weight[t] * input[n, t] with t = target[n] (0 where t == ignore_index); "
       "total_weight = sum of those weights (shape (1,)), the divisor of a mean reduction")
op("nll_grad", inputs=["input", "target", "total_weight", "weight?", "dy"], outputs=["dx"],
   attrs={"ignore_index": ("int64", 0)}, infer=_nll_grad_infer, checks=_nll_checks("nll_grad"),
   kernel=raising_bad_ids(_nll_checks("nll_grad"), 1, _nll_grad_kernel), xla=_nll_xla("nll_grad"),
   onnx=_nll_grad_onnx, sbp=lambda ctx: [_sbp.signature(ctx, _sbp.split(0), weight=_sbp.B, total_weight=_sbp.B),
                                         _sbp.partial_in(ctx, "dy")])



# ------------------------------------------------------------------ combined_margin_loss
# OneFlow v0.6.0 ``oneflow/user/ops/combined_margin_loss_op.cpp`` and
# ``oneflow/user/kernels/combined_margin_loss_kernel.cpp`` (ArcFace / CosFace / SphereFace
# margins combined): each row of ``x`` (cosines, the classes over the axes after the first)
# keeps its values except at its label's class, where cos(theta) becomes
# cos(m1 * theta + m2) - m3 with theta = acos(x[row, label]); ``theta`` (one per row) keeps
# that angle for the grad. A label outside [0, classes) leaves its row unchanged, theta 0.
# Grad: dx = dy, except dy * sin(m1 * theta + m2) * m1 / sin(theta) at the label. Model
# parallel (x split on its class axis, :func:`_margin_sbp`): each device holds some classes,
# labels are shifted by its first class, and theta is the partial sum of the devices'.

_MARGIN_ATTRS = {"m1": "float", "m2": "float", "m3": "float", "depth": "int64"}


def _margin_rows(ctx, data, label):
    d, lab = _float(ctx, data), ctx.input(label)
    ctx.check(len(d.shape) >= 2, f"input '{data}' expected rank >= 2, received shape {d.shape}")
    ctx.check(lab.dtype.is_integer, f"input 'label' expected an integer dtype, received {lab.dtype.name}")
    ctx.check(int(np.prod(lab.shape)) == d.shape[0] and lab.shape[0] == d.shape[0],
              f"input 'label' expected one label per row of '{data}' (shape ({d.shape[0]},)), received {lab.shape}")
    return d, lab


def _combined_margin_infer(ctx):
    x, label = _margin_rows(ctx, "x", "label")
    ctx.set_output("y", x.shape, x.dtype)
    ctx.set_output("theta", label.shape, x.dtype)


def _combined_margin_grad_infer(ctx):
    dy, label = _margin_rows(ctx, "dy", "label")
    theta = ctx.input("theta")
    ctx.check(theta.shape == label.shape, f"input 'theta' expected shape {label.shape} (as 'label'), "
                                          f"received {theta.shape}")
    ctx.set_output("dx", dy.shape, dy.dtype)


def _rows_at_label(t, label, offset):
    """``(t as rows, label column ids from ``offset`` (0 where out of its columns) shaped
    (rows, 1), in-range flags)``."""
    rows = t.reshape(t.shape[0], -1)
    ids, valid = local_class_ids(label.reshape(-1), offset, rows.shape[1])
    return rows, ids.unsqueeze(1), valid


def _margin_sbp(data, out, theta):
    """Per sample (every blob split on axis 0), or model parallel on a 2-D ``data``: split on
    its class axis 1 with ``out``, the labels whole, ``theta`` laid out as given (OneFlow's
    second signature: the device holding a row's label class alone computes its angle)."""
    def rule(ctx):
        cands = _sbp.batch()(ctx)
        if ctx.ndim(data) == 2:
            cands.append(_sbp.signature(ctx, _sbp.B, **{data: _sbp.split(1), out: _sbp.split(1), "theta": theta}))
        return cands
    return rule


def _combined_margin_kernel(k):
    m1, m2, m3 = k.attr("m1"), k.attr("m2"), k.attr("m3")
    offset = class_offset(k, "x") or 0

    def run(x, label):
        rows, idx, valid = _rows_at_label(x, label, offset)
        picked = rows.gather(1, idx).squeeze(1)
        theta = torch.where(valid, torch.acos(picked), torch.zeros((), dtype=x.dtype, device=x.device))
        value = torch.where(valid, torch.cos(theta * m1 + m2) - m3, picked)
        return rows.scatter(1, idx, value.unsqueeze(1)).reshape(x.shape), theta.reshape(label.shape)
    return run


def _combined_margin_grad_kernel(k):
    m1, m2 = k.attr("m1"), k.attr("m2")
    offset = class_offset(k, "dy") or 0

    def run(dy, label, theta):
        rows, idx, valid = _rows_at_label(dy, label, offset)
        picked, th = rows.gather(1, idx).squeeze(1), theta.reshape(-1)
        value = torch.where(valid, picked * torch.sin(th * m1 + m2) * m1 / torch.sin(th), picked)
        return rows.scatter(1, idx, value.unsqueeze(1)).reshape(dy.shape)
    return run


def _rows_hit_xla(t, label):
    """``(t as rows, bool (rows, classes): the label's class, in-range flags)``."""
    jnp, lax = xla_rules.jnp(), xla_rules.lax()
    rows = t.reshape(t.shape[0], -1)
    lab = label.reshape(-1).astype("int64")
    hit = lax.broadcasted_iota("int64", rows.shape, 1) == lab[:, None]
    return rows, hit, (lab >= 0) & (lab < rows.shape[1]), jnp


def _combined_margin_xla(k):
    m1, m2, m3 = k.attr("m1"), k.attr("m2"), k.attr("m3")

    def run(x, label):
        rows, hit, valid, jnp = _rows_hit_xla(x, label)
        picked = jnp.sum(jnp.where(hit, rows, jnp.zeros((), rows.dtype)), axis=1)
        theta = jnp.where(valid, jnp.arccos(picked), jnp.zeros((), rows.dtype))
        value = (jnp.cos(theta * m1 + m2) - m3).astype(rows.dtype)
        return jnp.where(hit, value[:, None], rows).reshape(x.shape), theta.reshape(label.shape)
    return run


def _combined_margin_grad_xla(k):
    m1, m2 = k.attr("m1"), k.attr("m2")

    def run(dy, label, theta):
        rows, hit, _, jnp = _rows_hit_xla(dy, label)
        th = theta.reshape(-1)
        value = (rows * (jnp.sin(th * m1 + m2) * m1 / jnp.sin(th))[:, None]).astype(rows.dtype)
        return jnp.where(hit, value, rows).reshape(dy.shape)
    return run


def _margin_onnx_rows(c, data):
    """``(data as rows, bool (rows, classes): the label's class, in-range flags, rows' desc)``."""
    d = c.input_desc(data)
    n, classes = d.shape[0], int(np.prod(d.shape[1:]))
    rows = c.node("Reshape", [c.input(data), c.const(onnx_rules.int64s([n, classes]))])
    lab = c.node("Reshape", [c.node("Cast", [c.input("label")], to=onnx_rules.INT64), c.const(onnx_rules.int64s([n]))])
    hit = onnx_rules.last_axis_is(c, lab, classes)
    valid = c.node("And", [c.node("GreaterOrEqual", [lab, c.const(onnx_rules.int64s([0]))]),
                           c.node("Less", [lab, c.const(onnx_rules.int64s([classes]))])])
    return rows, hit, valid, d


def _unsqueeze_last(c, t):
    return c.node("Unsqueeze", [t, c.const(onnx_rules.int64s([-1]))])


def _combined_margin_onnx(c):
    rows, hit, valid, d = _margin_onnx_rows(c, "x")
    m1, m2, m3 = (const_as(c, c.attr(a), d) for a in ("m1", "m2", "m3"))
    picked = reduce_node(c, "ReduceSum", onnx_rules.where_zero(c, hit, rows, d, zero_if=False), [1], 0)
    theta = onnx_rules.where_zero(c, valid, c.node("Acos", [picked]), d, zero_if=False)
    value = c.node("Sub", [c.node("Cos", [c.node("Add", [c.node("Mul", [theta, m1]), m2])]), m3])
    y = c.node("Where", [hit, _unsqueeze_last(c, value), rows])
    c.node("Reshape", [y, c.const(onnx_rules.int64s(d.shape))], [c.output("y")])
    c.node("Reshape", [theta, c.const(onnx_rules.int64s(c.output_desc("theta").shape))], [c.output("theta")])


def _combined_margin_grad_onnx(c):
    rows, hit, _, d = _margin_onnx_rows(c, "dy")
    m1, m2 = (const_as(c, c.attr(a), d) for a in ("m1", "m2"))
    th = c.node("Reshape", [c.input("theta"), c.const(onnx_rules.int64s([d.shape[0]]))])
    scale = c.node("Div", [c.node("Mul", [c.node("Sin", [c.node("Add", [c.node("Mul", [th, m1]), m2])]), m1]),
                           c.node("Sin", [th])])
    dx = c.node("Where", [hit, c.node("Mul", [rows, _unsqueeze_last(c, scale)]), rows])
    c.node("Reshape", [dx, c.const(onnx_rules.int64s(d.shape))], [c.output("dx")])


def _combined_margin_grad(g):
    if g.needs("x"):
        g.set_grad("x", g.emit("combined_margin_loss_grad",
                               {"dy": g.dout("y"), "label": g.input("label"), "theta": g.output("theta")},
                               {a: g.attr(a) for a in _MARGIN_ATTRS}, name=f"{g.op_name}_grad"))


op("combined_margin_loss", inputs=["x", "label"], outputs=["y", "theta"], attrs=_MARGIN_ATTRS,
   infer=_combined_margin_infer, kernel=_combined_margin_kernel, grad=_combined_margin_grad,
   sbp=_margin_sbp("x", "y", _sbp.P), xla=_combined_margin_xla, onnx=_combined_margin_onnx)
op("combined_margin_loss_grad", inputs=["dy", "label", "theta"], outputs=["dx"], attrs=_MARGIN_ATTRS,
   infer=_combined_margin_grad_infer, kernel=_combined_margin_grad_kernel, sbp=_margin_sbp("dy", "dx", _sbp.B),
   xla=_combined_margin_grad_xla, onnx=_combined_margin_grad_onnx)
