"""Connectionist temporal classification (Graves et al., ICML 2006): ``ctc_loss`` and
``ctc_greedy_decoder`` (OneFlow's ``oneflow/user/ops/ctc_loss_op.cpp`` and
``oneflow/user/kernels/ctc_greedy_decoder*.cpp`` at v0.6.0).

* ``ctc_loss`` (log_probs (T, N, C) floating, targets (N, S) int, input_lengths (N,)
  int, target_lengths (N,) int -> loss (N,), alpha (N, T, 2 * max_target_length + 1)):
  ``loss[b] = -log p(targets[b, :target_lengths[b]] | log_probs[:input_lengths[b], b])``
  by the forward (alpha) recursion over the blank-extended label sequence; ``alpha``
  holds the log forward variables (``-inf`` where unreachable). Attr ``blank`` is the
  blank class; ``zero_infinity`` turns the gradients of infinite losses (impossible
  alignments) into 0 (the loss itself stays ``inf``, as ATen's ``_ctc_loss``). Grad:
  ``ctc_loss_grad`` (grad_out, log_probs, targets, input_lengths, target_lengths, loss,
  alpha -> grad), the same attrs. Kernels: ATen's ``_ctc_loss`` / ``_ctc_loss_backward``;
  the ``xla`` rules run the same recursions (``jax.lax.scan`` over time, in log space).
* ``ctc_greedy_decoder`` (log_probs (T, N, C), input_lengths (N,) int64 -> decoded
  (N, T) int64, neg_sum_logits (N, 1)): per sequence the arg-max class at each of the
  first ``input_lengths[b]`` steps, without the blank (class ``C - 1``, TensorFlow's
  convention, as OneFlow's kernel) and, with ``merge_repeated``, without repeats of
  the previous step's class; left-aligned, zero-padded. ``neg_sum_logits[b]`` is minus
  the sum of those per-step maxima. No grad fn. The kernel raises for a length outside
  ``[0, T]``; the ONNX export (which cannot raise) clamps it into that range.
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import OpRunError
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import INT64, const_as, int64s
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

_aten = torch.ops.aten
_INTS = (_dt.int32, _dt.int64)
CTC_ATTRS = {"max_target_length": ("int64", 0), "blank": ("int32", 0), "zero_infinity": ("bool", False)}


def _check_ctc_inputs(ctx):
    lp, tg = ctx.input("log_probs"), ctx.input("targets")
    il, tl = ctx.input("input_lengths"), ctx.input("target_lengths")
    ctx.check(len(lp.shape) == 3 and lp.dtype.is_floating_point,
              f"input 'log_probs' expected a floating (T, N, C) blob, received {lp.dtype.name} {lp.shape}")
    t, n, c = lp.shape
    ctx.check(tg.dtype in _INTS and len(tg.shape) == 2 and tg.shape[0] == n,
              f"input 'targets' expected an int32/int64 ({n}, S) blob, received {tg.dtype.name} {tg.shape}")
    for arg, d in (("input_lengths", il), ("target_lengths", tl)):
        ctx.check(d.dtype in _INTS and d.shape == (n,),
                  f"input '{arg}' expected an int32/int64 ({n},) blob, received {d.dtype.name} {d.shape}")
    blank = ctx.attr("blank")
    ctx.check(0 <= blank < c, f"attr 'blank' {blank} is out of range for {c} classes")
    ctx.check(ctx.attr("max_target_length") >= tg.shape[1],
              f"attr 'max_target_length' {ctx.attr('max_target_length')} is smaller than the targets' length "
              f"{tg.shape[1]}")
    return t, n, c


def _ctc_loss_infer(ctx):
    t, n, _ = _check_ctc_inputs(ctx)
    dtype = ctx.input("log_probs").dtype
    ctx.set_output("loss", (n,), dtype)
    ctx.set_output("alpha", (n, t, 2 * ctx.attr("max_target_length") + 1), dtype)


def _ctc_sbp(ctx):
    """OneFlow's: independent per sequence, the batch axis 1 of log_probs (T, N, C) and of
    the grad, 0 of the others; the grad is linear in grad_out (the others broadcast)."""
    cands = [_sbp.signature(ctx, _sbp.split(0), log_probs=_sbp.split(1), grad=_sbp.split(1))]
    if ctx.has("grad_out"):
        cands.append(_sbp.partial_in(ctx, "grad_out"))
    return cands


def _lengths(t):
    return t.to(torch.int64)


def _reached(input_lengths, target_lengths, t, width, np_):
    """(N, T, width) mask of the forward variables the recursion computes: steps before
    ``input_lengths[b]``, states of the first ``2 * target_lengths[b] + 1``; ``np_`` is torch
    (the ranges are made on the lengths' device) or jax.numpy."""
    on = {"device": input_lengths.device} if np_ is torch else {}
    steps = np_.arange(t, **on)[None, :, None] < input_lengths[:, None, None]
    return steps & (np_.arange(width, **on)[None, None, :] < 2 * target_lengths[:, None, None] + 1)


def _ctc_loss_kernel(k):
    blank, zero_inf = k.attr("blank"), k.attr("zero_infinity")
    width = 2 * k.attr("max_target_length") + 1

    def ctc_loss(log_probs, targets, input_lengths, target_lengths):
        il, tl = _lengths(input_lengths), _lengths(target_lengths)
        loss, alpha = _aten._ctc_loss.Tensor(log_probs, targets.to(torch.int64), il, tl, blank, zero_inf)
        full = alpha.new_full(alpha.shape[:2] + (width,), float("-inf"))
        full[..., :alpha.shape[2]] = alpha
        # (ATen leaves the entries it never computes uninitialized)
        return loss, full.masked_fill_(~_reached(il, tl, alpha.shape[1], width, torch), float("-inf"))
    return ctc_loss


def _extended(targets, blank, jnp):
    """(N, 2 * S + 1) blank-extended label sequences: blank, l_1, blank, l_2, ..., blank."""
    n, s = targets.shape
    ext = jnp.full((n, 2 * s + 1), blank, targets.dtype)
    return ext.at[:, 1::2].set(targets).astype("int64")


def _log_add3(a, b, c, jnp):
    """log(exp(a) + exp(b) + exp(c)) as ATen's CTC kernels compute it (shifted by the max, 0 when all are -inf)."""
    m = jnp.maximum(jnp.maximum(a, b), c)
    m = jnp.where(m == -jnp.inf, 0, m)
    return jnp.log(jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)) + m


def _ctc_tables(log_probs, targets, blank, jnp):
    """The extended labels (N, W), each state's emission log prob (T, N, W) and whether a state
    may skip the one before it (N, W: a label different from the label two states back)."""
    ext = _extended(targets, blank, jnp)
    emit = jnp.take_along_axis(log_probs, jnp.clip(ext, 0, log_probs.shape[2] - 1)[None], axis=2)
    skip = jnp.zeros(ext.shape, bool).at[:, 2:].set(ext[:, 2:] != ext[:, :-2])
    return ext, emit, skip


def _ctc_loss_xla(k):
    blank = k.attr("blank")
    width = 2 * k.attr("max_target_length") + 1

    def ctc_loss(log_probs, targets, input_lengths, target_lengths):
        jnp, lax = xla_rules.jnp(), xla_rules.lax()
        t, n, _ = log_probs.shape
        il, tl = input_lengths.astype("int64"), target_lengths.astype("int64")
        ext, emit, skip = _ctc_tables(log_probs, targets, blank, jnp)
        w = ext.shape[1]
        ninf = jnp.full((n, 1), -jnp.inf, log_probs.dtype)
        states = jnp.arange(w)[None, :]
        first = jnp.where((states == 0) | ((states == 1) & (tl[:, None] > 0)), emit[0], -jnp.inf)

        def step(prev, e):
            a2 = jnp.concatenate([ninf, prev[:, :-1]], axis=1)
            a3 = jnp.where(skip, jnp.concatenate([ninf, ninf, prev[:, :-2]], axis=1), -jnp.inf)
            cur = _log_add3(prev, a2, a3, jnp) + e
            return cur, cur
        _, rest = lax.scan(step, first, emit[1:])
        alpha = jnp.concatenate([first[:, None], jnp.swapaxes(rest, 0, 1)], axis=1)  # (N, T, W)
        last = jnp.take_along_axis(alpha, jnp.clip(il - 1, 0, t - 1)[:, None, None], axis=1)[:, 0]
        l1 = jnp.take_along_axis(last, (2 * tl)[:, None], axis=1)[:, 0]
        l2 = jnp.take_along_axis(last, jnp.maximum(2 * tl - 1, 0)[:, None], axis=1)[:, 0]
        m = jnp.maximum(l1, l2)
        m = jnp.where(m == -jnp.inf, 0, m)
        nll = jnp.where(tl == 0, -l1, -(jnp.log(jnp.exp(l1 - m) + jnp.exp(l2 - m)) + m))
        nll = jnp.where(il == 0, jnp.where(tl == 0, 0, jnp.inf), nll).astype(log_probs.dtype)
        alpha = jnp.pad(alpha, ((0, 0), (0, 0), (0, width - w)), constant_values=-jnp.inf)
        return nll, jnp.where(_reached(il, tl, t, width, jnp), alpha, -jnp.inf)
    return ctc_loss


def _onnx_log_add(c, d, *terms):
    """log(sum(exp(terms))) shifted by their max (0 where all are -inf), as ``_log_add3``."""
    m = c.node("Max", list(terms))
    m = c.node("Where", [c.node("Equal", [m, const_as(c, -np.inf, d)]), const_as(c, 0, d), m])
    total = c.node("Sum", [c.node("Exp", [c.node("Sub", [x, m])]) for x in terms])
    return c.node("Add", [c.node("Log", [total]), m])


class _OnnxCtc:
    """What the ctc_loss / ctc_loss_grad converters share: the int64 lengths, the extended
    labels ``ext`` (N, W), the emission table ``emit`` (T, N, W), whether a state may skip the
    one before it (``skip``, N, W) and the state indices ``j`` (a numpy ``arange(W)``)."""

    def __init__(self, c):
        self.d = d = c.input_desc("log_probs")
        self.t, self.n, self.classes = t, n, classes = d.shape
        self.w = w = 2 * c.input_desc("targets").shape[1] + 1
        self.width, self.code = 2 * c.attr("max_target_length") + 1, c.dtype_code(d.dtype)
        self.ninf = const_as(c, -np.inf, d)
        self.il, self.tl = (c.node("Cast", [c.input(a)], to=INT64) for a in ("input_lengths", "target_lengths"))
        self.j = j = np.arange(w)
        i64 = self.i64 = lambda v: c.const(np.int64(v))  # noqa: E731
        labels = c.node("Gather", [c.node("Cast", [c.input("targets")], to=INT64),
                                   c.const(np.maximum(j - 1, 0) // 2)], axis=1)
        ext = c.node("Where", [c.const(j % 2 == 1), labels, i64(c.attr("blank"))])
        self.ext = ext = c.node("Min", [c.node("Max", [ext, i64(0)]), i64(classes - 1)])
        at = c.node("Expand", [c.node("Unsqueeze", [ext, c.const(int64s([0]))]), c.const(int64s([t, n, w]))])
        self.emit = c.node("GatherElements", [c.input("log_probs"), at], axis=2)
        self.skip = c.node("And", [c.const(j >= 2), c.node("Not", [c.node("Equal", [ext, self.back(c, ext, 2)])])])

    def back(self, c, x, k):
        """``x[:, j - k]`` (clamped at 0; the caller masks the states below k)."""
        return c.node("Gather", [x, c.const(np.maximum(self.j - k, 0))], axis=1)

    def ahead(self, c, x, k):
        """``x[:, j + k]`` (clamped at W - 1; the caller masks the states past the end)."""
        return c.node("Gather", [x, c.const(np.minimum(self.j + k, self.w - 1))], axis=1)

    def reached(self, c, width):
        """(N, T, width) bool: the steps before ``input_lengths``, states of the first ``2 * target_lengths + 1``."""
        col = lambda v: c.node("Reshape", [v, c.const(int64s([self.n, 1, 1]))])  # noqa: E731
        return c.node("And", [
            c.node("Less", [c.const(np.arange(self.t).reshape(1, self.t, 1)), col(self.il)]),
            c.node("Less", [c.const(np.arange(width).reshape(1, 1, width)),
                            col(c.node("Add", [c.node("Mul", [self.tl, self.i64(2)]), self.i64(1)]))])])


def _ctc_loss_onnx(c):
    """ctc_loss as ONNX: the emission table by GatherElements, the alpha recursion as a
    ``Scan`` over time in log space (the ``xla`` rule's formulas), the loss from the two final
    states at each sequence's last step."""
    x = _OnnxCtc(c)
    d, t, n, w, width, code, ninf, i64, j = x.d, x.t, x.n, x.w, x.width, x.code, x.ninf, x.i64, x.j
    il, tl, emit, skip = x.il, x.tl, x.emit, x.skip
    back = lambda v, k: x.back(c, v, k)  # noqa: E731
    starts = c.node("Or", [c.const(j == 0), c.node("And", [c.const(j == 1), c.node("Unsqueeze", [
        c.node("Greater", [tl, i64(0)]), c.const(int64s([1]))])])])
    first = c.node("Where", [starts, c.node("Gather", [emit, i64(0)], axis=0), ninf])          # (N, W)

    def step(prev, e):
        a2 = c.node("Where", [c.const(j >= 1), back(prev, 1), ninf])
        a3 = c.node("Where", [skip, back(prev, 2), ninf])
        cur = c.node("Add", [_onnx_log_add(c, d, prev, a2, a3), e])
        return [(cur, code), (c.node("Identity", [cur]), code)]
    steps = [c.node("Unsqueeze", [first, c.const(int64s([0]))])]
    if t > 1:
        rest = c.node("Slice", [emit, c.const(int64s([1])), c.const(int64s([t])), c.const(int64s([0]))])
        outs = [c.tmp("alpha_last"), c.tmp("alpha_rest")]
        c.node("Scan", [first, rest], outs, num_scan_inputs=1,
               body=c.subgraph("ctc_alpha_step", [("prev", code), ("emit", code)], step))
        steps.append(outs[1])
    alpha = c.node("Transpose", [c.node("Concat", steps, axis=0)], perm=[1, 0, 2])             # (N, T, W)
    last_t = c.node("Min", [c.node("Max", [c.node("Sub", [il, i64(1)]), i64(0)]), i64(t - 1)])
    at = c.node("Expand", [c.node("Reshape", [last_t, c.const(int64s([n, 1, 1]))]), c.const(int64s([n, 1, w]))])
    last = c.node("Squeeze", [c.node("GatherElements", [alpha, at], axis=1), c.const(int64s([1]))])  # (N, W)
    def col(ids):  # last[:, ids] (ids clamped into [0, W - 1])
        ids = c.node("Unsqueeze", [c.node("Min", [c.node("Max", [ids, i64(0)]), i64(w - 1)]), c.const(int64s([1]))])
        return c.node("Squeeze", [c.node("GatherElements", [last, ids], axis=1), c.const(int64s([1]))])
    two_tl = c.node("Mul", [tl, i64(2)])
    l1, l2 = col(two_tl), col(c.node("Sub", [two_tl, i64(1)]))
    no_target = c.node("Equal", [tl, i64(0)])
    nll = c.node("Where", [no_target, c.node("Neg", [l1]), c.node("Neg", [_onnx_log_add(c, d, l1, l2)])])
    empty = c.node("Where", [no_target, const_as(c, 0, d), const_as(c, np.inf, d)])
    c.node("Where", [c.node("Equal", [il, i64(0)]), empty, nll], [c.output("loss")])
    if width > w:
        alpha = c.node("Concat", [alpha, c.const(np.full((n, t, width - w), -np.inf, onnx_rules.np_dtype(d)))], axis=2)
    c.node("Where", [x.reached(c, width), alpha, ninf], [c.output("alpha")])


def _ctc_loss_grad_kernel(k):
    blank, zero_inf = k.attr("blank"), k.attr("zero_infinity")

    def ctc_loss_grad(grad_out, log_probs, targets, input_lengths, target_lengths, loss, alpha):
        used = 2 * int(target_lengths.max()) + 1 if target_lengths.numel() else 1
        return _aten._ctc_loss_backward.Tensor(grad_out, log_probs, targets.to(torch.int64), _lengths(input_lengths),
                                               _lengths(target_lengths), loss, alpha[..., :used].contiguous(),
                                               blank, zero_inf)
    return ctc_loss_grad


def _ctc_loss_grad_xla(k):
    blank, zero_inf = k.attr("blank"), k.attr("zero_infinity")

    def ctc_loss_grad(grad_out, log_probs, targets, input_lengths, target_lengths, loss, alpha):
        """ATen's CPU backward: the log backward variables (beta) by the reverse recursion, per
        step and class the log sum of alpha * beta over the states of that class (eq. 16 of
        Graves et al.), grad = (exp(lp) - exp(that + nll - lp)) * grad_out; 0 at steps from
        ``input_lengths[b]`` on and, with ``zero_infinity``, for infinite losses."""
        jnp, lax = xla_rules.jnp(), xla_rules.lax()
        t, n, c = log_probs.shape
        il, tl = input_lengths.astype("int64"), target_lengths.astype("int64")
        ext, emit, skip = _ctc_tables(log_probs, targets, blank, jnp)
        w = ext.shape[1]
        states = jnp.arange(w)[None, :]
        ninf = jnp.full((n, 1), -jnp.inf, log_probs.dtype)
        skip_next = jnp.concatenate([skip[:, 2:], jnp.zeros((n, 2), bool)], axis=1)  # may s + 2 skip s + 1
        last_s = 2 * tl[:, None]

        def step(nxt, x):
            step_t, e = x
            b2 = jnp.concatenate([nxt[:, 1:], ninf], axis=1)
            b3 = jnp.where(skip_next, jnp.concatenate([nxt[:, 2:], ninf, ninf], axis=1), -jnp.inf)
            rec = jnp.where(states <= last_s, _log_add3(nxt, b2, b3, jnp) + e, -jnp.inf)
            init = jnp.where((states == last_s) | ((states == last_s - 1) & (last_s > 0)), e, -jnp.inf)
            cur = jnp.where((step_t == il - 1)[:, None], init, jnp.where((step_t < il - 1)[:, None], rec, -jnp.inf))
            return cur, cur
        _, beta = lax.scan(step, jnp.full((n, w), -jnp.inf, log_probs.dtype), (jnp.arange(t), emit), reverse=True)
        ab = jnp.where(_reached(il, tl, t, w, jnp), alpha[..., :w] + jnp.swapaxes(beta, 0, 1), -jnp.inf)  # (N, T, W)
        at = (jnp.arange(n)[:, None, None], jnp.arange(t)[None, :, None], jnp.clip(ext, 0, c - 1)[:, None, :])
        top = jnp.full((n, t, c), -jnp.inf, ab.dtype).at[at].max(ab)
        top = jnp.where(top == -jnp.inf, 0, top)
        log_ab = jnp.log(jnp.zeros((n, t, c), ab.dtype).at[at].add(jnp.exp(ab - top[at]))) + top
        lp, nll = jnp.swapaxes(log_probs, 0, 1), loss[:, None, None]
        grad = (jnp.exp(lp) - jnp.exp(log_ab + nll - lp)) * grad_out[:, None, None]
        keep = jnp.arange(t)[None, :, None] < il[:, None, None]
        if zero_inf:
            keep = keep & (nll != jnp.inf)
        return jnp.swapaxes(jnp.where(keep, grad, 0), 0, 1).astype(log_probs.dtype)
    return ctc_loss_grad


def _ctc_loss_grad_onnx(c):
    """ctc_loss_grad as ONNX: the beta recursion as a reverse ``Scan`` over time, per step and
    class the log sum of alpha * beta over that class's states (a one-hot mask over the
    states: O(N T W C) memory), then the ``xla`` rule's formula."""
    x = _OnnxCtc(c)
    d, t, n, w, classes, code, ninf, i64, j = x.d, x.t, x.n, x.w, x.classes, x.code, x.ninf, x.i64, x.j
    unsq = lambda v, axes: c.node("Unsqueeze", [v, c.const(int64s(axes))])  # noqa: E731
    skip_next = c.node("And", [c.const(j + 2 < w), x.ahead(c, x.skip, 2)])    # may state j + 2 skip j + 1
    last_s = unsq(c.node("Mul", [x.tl, i64(2)]), [1])                          # (N, 1)
    il_m1 = c.node("Sub", [x.il, i64(1)])
    ends = c.node("Or", [c.node("Equal", [c.const(j), last_s]), c.node("And", [
        c.node("Equal", [c.const(j), c.node("Sub", [last_s, i64(1)])]), c.node("Greater", [last_s, i64(0)])])])
    in_path = c.node("LessOrEqual", [c.const(j), last_s]) if c.opset >= 16 else \
        c.node("Not", [c.node("Greater", [c.const(j), last_s])])

    def step(nxt, step_t, e):
        b2 = c.node("Where", [c.const(j + 1 < w), x.ahead(c, nxt, 1), ninf])
        b3 = c.node("Where", [skip_next, x.ahead(c, nxt, 2), ninf])
        rec = c.node("Where", [in_path, c.node("Add", [_onnx_log_add(c, d, nxt, b2, b3), e]), ninf])
        init = c.node("Where", [ends, e, ninf])
        is_last, before = (unsq(c.node(op, [step_t, il_m1]), [1]) for op in ("Equal", "Less"))
        cur = c.node("Where", [is_last, init, c.node("Where", [before, rec, ninf])])
        return [(cur, code), (c.node("Identity", [cur]), code)]
    start = c.node("Expand", [ninf, c.const(int64s([n, w]))])
    outs = [c.tmp("beta_first"), c.tmp("beta")]
    c.node("Scan", [start, c.const(np.arange(t, dtype=np.int64)), x.emit], outs, num_scan_inputs=2,
           scan_input_directions=[1, 1], scan_output_directions=[1],
           body=c.subgraph("ctc_beta_step", [("next", code), ("step", INT64), ("emit", code)], step))
    alpha = c.node("Slice", [c.input("alpha"), c.const(int64s([0])), c.const(int64s([w])), c.const(int64s([2]))])
    ab = c.node("Add", [alpha, c.node("Transpose", [outs[1]], perm=[1, 0, 2])])
    ab = unsq(c.node("Where", [x.reached(c, w), ab, ninf]), [3])                      # (N, T, W, 1)
    of_class = c.node("Equal", [unsq(x.ext, [1, 3]), c.const(np.arange(classes))])    # (N, 1, W, C)
    top = onnx_rules.reduce_node(c, "ReduceMax", c.node("Where", [of_class, ab, ninf]), [2], 1)  # (N, T, 1, C)
    top = c.node("Where", [c.node("Equal", [top, ninf]), const_as(c, 0, d), top])
    summed = onnx_rules.reduce_node(c, "ReduceSum", c.node("Where", [
        of_class, c.node("Exp", [c.node("Sub", [ab, top])]), const_as(c, 0, d)]), [2], 0)  # (N, T, C)
    log_ab = c.node("Add", [c.node("Log", [summed]), c.node("Squeeze", [top, c.const(int64s([2]))])])
    lp = c.node("Transpose", [c.input("log_probs")], perm=[1, 0, 2])
    col = lambda v: c.node("Reshape", [v, c.const(int64s([n, 1, 1]))])  # noqa: E731
    nll = col(c.input("loss"))
    grad = c.node("Mul", [c.node("Sub", [c.node("Exp", [lp]), c.node("Exp", [
        c.node("Sub", [c.node("Add", [log_ab, nll]), lp])])]), col(c.input("grad_out"))])
    keep = c.node("Less", [c.const(np.arange(t).reshape(1, t, 1)), col(x.il)])
    if c.attr("zero_infinity"):
        keep = c.node("And", [keep, c.node("Not", [c.node("Equal", [nll, const_as(c, np.inf, d)])])])
    c.node("Transpose", [c.node("Where", [keep, grad, const_as(c, 0, d)])], [c.output("grad")], perm=[1, 0, 2])


def _ctc_loss_grad(g):
    if g.needs("log_probs"):
        ins = {a: g.input(a) for a in ("log_probs", "targets", "input_lengths", "target_lengths")}
        g.set_grad("log_probs", g.emit("ctc_loss_grad", dict(grad_out=g.dout("loss"), **ins, loss=g.output("loss"),
                                                                alpha=g.output("alpha")), g.attrs))


def _ctc_loss_grad_infer(ctx):
    _check_ctc_inputs(ctx)
    lp = ctx.input("log_probs")
    ctx.set_output("grad", lp.shape, lp.dtype)


op("ctc_loss", inputs=["log_probs", "targets", "input_lengths", "target_lengths"], outputs=["loss", "alpha"],
   attrs=CTC_ATTRS, infer=_ctc_loss_infer, kernel=_ctc_loss_kernel, grad=_ctc_loss_grad, xla=_ctc_loss_xla,
   onnx=_ctc_loss_onnx, sbp=_ctc_sbp,
   doc="per-sequence CTC negative log likelihood and its log forward variables")
op("ctc_loss_grad", inputs=["grad_out", "log_probs", "targets", "input_lengths", "target_lengths", "loss", "alpha"],
   outputs=["grad"], attrs=CTC_ATTRS, infer=_ctc_loss_grad_infer, kernel=_ctc_loss_grad_kernel, xla=_ctc_loss_grad_xla,
   onnx=_ctc_loss_grad_onnx, sbp=_ctc_sbp,
   host_reads=True,
   doc="gradient of ctc_loss with respect to log_probs")


# ------------------------------------------------------------------ ctc_greedy_decoder

def _greedy_infer(ctx):
    lp, il = ctx.input("log_probs"), ctx.input("input_lengths")
    ctx.check(len(lp.shape) == 3 and lp.dtype.is_floating_point,
              f"input 'log_probs' expected a floating (T, N, C) blob, received {lp.dtype.name} {lp.shape}")
    t, n, _ = lp.shape
    ctx.check(il.dtype is _dt.int64 and il.shape == (n,),
              f"input 'input_lengths' expected an int64 ({n},) blob, received {il.dtype.name} {il.shape}")
    ctx.set_output("decoded", (n, t), _dt.int64)
    ctx.set_output("neg_sum_logits", (n, 1), lp.dtype)


def _length_error(k):
    """``error(value, at)`` of an input length outside ``[0, T]``."""
    t = k.input("log_probs").shape[0]
    return lambda value, at: OpRunError(
        f"op '{k.op_name}' (ctc_greedy_decoder): input 'input_lengths' expects lengths in [0, {t}], "
        f"received {value} at index {at}")


def _greedy_kernel(k):
    merge, error = k.attr("merge_repeated"), _length_error(k)

    def ctc_greedy_decoder(log_probs, input_lengths):
        t, n, c = log_probs.shape
        bad = ((input_lengths > t) | (input_lengths < 0)).nonzero()
        if len(bad):
            at = tuple(bad[0].tolist())
            raise error(int(input_lengths[at]), at)
        best, idx = log_probs.max(dim=2)                      # (T, N)
        steps = torch.arange(t, device=log_probs.device).unsqueeze(1)
        valid = steps < input_lengths.unsqueeze(0)
        keep = valid & (idx != c - 1)
        if merge:
            prev = torch.cat([torch.full_like(idx[:1], -1), idx[:-1]])
            keep &= idx != prev
        neg_sum = -(best * valid).sum(dim=0, keepdim=True).T  # (N, 1)
        pos = torch.cumsum(keep.to(torch.int64), dim=0) - 1     # output slot of each kept step
        decoded = torch.zeros(n, t, dtype=torch.int64, device=log_probs.device)
        cols = torch.arange(n, device=log_probs.device).expand(t, n)
        decoded[cols[keep], pos[keep]] = idx[keep]
        return decoded, neg_sum.contiguous()
    return ctc_greedy_decoder


def _greedy_xla(k):
    merge, error = k.attr("merge_repeated"), _length_error(k)

    def ctc_greedy_decoder(log_probs, input_lengths):
        jnp = xla_rules.jnp()
        t, n, c = log_probs.shape
        xla_rules.check_ids(input_lengths, t + 1, error)
        best, idx = log_probs.max(axis=2), log_probs.argmax(axis=2).astype("int64")  # (T, N)
        valid = jnp.arange(t)[:, None] < input_lengths[None, :]
        keep = valid & (idx != c - 1)
        if merge:
            keep &= idx != jnp.concatenate([jnp.full_like(idx[:1], -1), idx[:-1]])
        neg_sum = -(best * valid.astype(best.dtype)).sum(axis=0)[:, None]
        pos = jnp.where(keep, jnp.cumsum(keep.astype("int64"), axis=0) - 1, t)  # (t: dropped)
        cols = jnp.broadcast_to(jnp.arange(n)[None, :], (t, n))
        decoded = jnp.zeros((n, t), "int64").at[cols, pos].set(idx, mode="drop")
        return decoded, neg_sum
    return ctc_greedy_decoder


def _greedy_onnx(c):
    """ctc_greedy_decoder as ONNX: ArgMax / ReduceMax over the classes, the keep mask (valid
    step, not the blank, with ``merge_repeated`` not the previous step's class), each kept
    step's slot from a CumSum of the mask, and a ScatterElements of the classes into a
    zero (N, T + 1) tensor whose last column takes the dropped steps and is sliced off.
    ONNX cannot raise: an input length outside ``[0, T]`` is clamped into it (a negative
    length decodes nothing, one past ``T`` decodes all ``T`` steps) where the kernel raises."""
    d = c.input_desc("log_probs")
    t, n, classes = d.shape
    lp = c.input("log_probs")
    idx = c.node("ArgMax", [lp], axis=2, keepdims=0)                           # (T, N) int64
    best = onnx_rules.reduce_node(c, "ReduceMax", lp, [2], 0)                  # (T, N)
    il = c.node("Min", [c.node("Max", [c.input("input_lengths"), c.const(np.int64(0))]), c.const(np.int64(t))])
    valid = c.node("Less", [c.const(np.arange(t, dtype=np.int64).reshape(t, 1)),
                            c.node("Unsqueeze", [il, c.const(int64s([0]))])])
    keep = c.node("And", [valid, c.node("Not", [c.node("Equal", [idx, c.const(np.int64(classes - 1))])])])
    if c.attr("merge_repeated"):
        prev = c.node("Concat", [c.const(np.full((1, n), -1, np.int64)),
                                 c.node("Slice", [idx, c.const(int64s([0])), c.const(int64s([t - 1])),
                                                  c.const(int64s([0]))])], axis=0)
        keep = c.node("And", [keep, c.node("Not", [c.node("Equal", [idx, prev])])])
    valid_f = c.node("Cast", [valid], to=c.dtype_code(d.dtype))
    total = onnx_rules.reduce_node(c, "ReduceSum", c.node("Mul", [best, valid_f]), [0], 0)     # (N,)
    c.node("Neg", [c.node("Unsqueeze", [total, c.const(int64s([1]))])], [c.output("neg_sum_logits")])
    pos = c.node("Sub", [c.node("CumSum", [c.node("Cast", [keep], to=INT64), c.const(np.int64(0))]),
                         c.const(np.int64(1))])
    slot = c.node("Where", [keep, pos, c.const(np.int64(t))])                  # (t: dropped)
    perm = dict(perm=[1, 0])
    scattered = c.node("ScatterElements", [c.const(np.zeros((n, t + 1), np.int64)), c.node("Transpose", [slot], **perm),
                                           c.node("Transpose", [idx], **perm)], axis=1)
    c.node("Slice", [scattered, c.const(int64s([0])), c.const(int64s([t])), c.const(int64s([1]))],
           [c.output("decoded")])


op("ctc_greedy_decoder", inputs=["log_probs", "input_lengths"], outputs=["decoded", "neg_sum_logits"],
   attrs={"merge_repeated": ("bool", False)}, infer=_greedy_infer, kernel=_greedy_kernel, xla=_greedy_xla,
   onnx=_greedy_onnx, sbp=_ctc_sbp,
   host_reads=True,
   doc="greedy (best path) CTC decoding; the blank is the last class")
