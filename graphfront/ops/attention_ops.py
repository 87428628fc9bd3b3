"""Fused multi-head attention: ``fused_multi_head_attention`` and its gradient.

The op replaces, per head, the attention of a transformer layer as OneFlow-Benchmark's
BERT writes it (``transpose`` of the heads, ``batch_matmul`` of the query and the key, a
scale, an additive mask, ``softmax``, ``dropout``, ``batch_matmul`` with the value,
``transpose`` back): the :func:`graphfront.passes.attention.fuse_attention` pass writes it
for GPU placements. Its layout is the one the heads are made in, (batch, sequence, heads,
head size), so no head transpose is written out.

==========================================  ==================================================
op type                                     computes
==========================================  ==================================================
``fused_multi_head_attention``              ``query`` (B, Sq, H, D), ``key`` (B, Sk, H, D),
(query, key, value, attn_bias? -> out,      ``value`` (B, Sk, H, Dv), ``attn_bias`` (rank <= 4,
softmax_lse, philox_seed, philox_offset)    broadcast to (B, H, Sq, Sk)); per batch and head
                                            ``s = scale * q @ k^T + attn_bias``,
                                            ``p = softmax(s)`` over Sk, ``p`` dropped
                                            out at ``dropout_rate`` (kept values scaled by
                                            ``1 / (1 - dropout_rate)``), ``out = p @ v``, laid
                                            out (B, Sq, H, Dv). ``softmax_lse`` (B, H,
                                            ceil(Sq / 32) * 32) float32 (float64 for float64
                                            inputs): the logsumexp of each
                                            row of ``s`` (zero past Sq); ``philox_seed`` and
                                            ``philox_offset`` (int64 scalars): the draw of
                                            the dropout mask, which the gradient draws again.
``fused_multi_head_attention_grad``         the gradients of ``query``, ``key``, ``value``
(dy, query, key, value, attn_bias?, out,    and (where asked for) ``attn_bias``, from the
softmax_lse, philox_seed, philox_offset     forward's outputs (the probabilities are
-> query_grad, key_grad, value_grad,        recomputed, never stored)
attn_bias_grad?)
==========================================  ==================================================

Kernels:

* on a GPU, PyTorch's memory-efficient attention
  (``torch.ops.aten._scaled_dot_product_efficient_attention`` and its backward; the
  algorithm of Rabe & Staats, "Self-attention Does Not Need O(n^2) Memory", 2021, as
  xFormers implements it), which reads the heads in place and never writes the (Sq, Sk)
  scores; its dropout draws from the default CUDA generator's Philox stream (so
  ``flow.manual_seed`` repeats it), inside captured CUDA graphs too. It takes head sizes that
  are multiples of 8; the bias is padded to a 16-element row stride as PyTorch's own
  ``scaled_dot_product_attention`` does before calling it. A probe run once per device and
  kind when the job compiles falls back to the formulas below, with a warning, on a card or
  build without those kernels.
* elsewhere (the CPU, other head sizes), the formulas above op by op in float32 (float64
  stays float64), the dropout mask drawn by a counter-based hash of (``philox_seed``, element
  index in the logical scores) — the 32-bit integer hash "lowbias32" (C. Wellons,
  "Prospecting for hash functions", 2018) — so the gradient recomputes the very mask without
  storing it, and a part of the op on one of several devices draws the one-device mask's part;
  ``philox_seed`` is drawn once per run from the op's generator (seeded by attr ``seed``).

The masks are therefore not those of the unfused ``random_mask_like`` (another stream, the
same distribution).
"""
from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F

from graphfront.framework import dtypes as _dt
from graphfront.ops import xla_rules
from graphfront.ops.common import same_dtype
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

_LSE_BLOCK = 32    # the memory-efficient kernel's logsumexp rows are padded to a multiple of this
_BIAS_ALIGN = 16   # elements: the row stride of the bias the memory-efficient kernel reads
_M32 = 0xFFFF_FFFF

ATTRS = {"scale": ("double", 1.0), "dropout_rate": ("float", 0.0,
                                                    lambda v: None if 0.0 <= v < 1.0 else "must be in [0, 1)"),
         "seed": ("int64", 0)}


def lse_length(sq: int) -> int:
    """Length of ``softmax_lse``'s last axis for a query of ``sq`` positions."""
    return -(-sq // _LSE_BLOCK) * _LSE_BLOCK


def _scores_shape(query_shape, key_shape) -> tuple:
    """(B, H, Sq, Sk): the shape of the scores of a (B, Sq, H, D) query and a (B, Sk, H, D) key."""
    b, sq, h, _ = query_shape
    return b, h, sq, key_shape[1]


def _check_bias(ctx, q, k):
    full = _scores_shape(q.shape, k.shape)
    bias = ctx.input("attn_bias")
    ok = len(bias.shape) <= 4 and all(s in (1, f) for s, f in zip(reversed(bias.shape), reversed(full)))
    ctx.check(ok, f"input 'attn_bias' expected a shape broadcastable to (batch, heads, query, key) = {full}, "
                  f"received {bias.shape}")


def _mha_infer(ctx):
    q, k, v = ctx.input("query"), ctx.input("key"), ctx.input("value")
    ctx.check(len(q.shape) == 4 and len(k.shape) == 4 and len(v.shape) == 4,
              f"inputs 'query', 'key', 'value' expected rank 4 (batch, sequence, heads, head size), received "
              f"{q.shape}, {k.shape}, {v.shape}")
    ctx.check(q.dtype.is_floating_point, f"input 'query' expected a floating dtype, received {q.dtype.name}")
    same_dtype(ctx, "query", "key", "value", "attn_bias")
    ctx.check(k.shape[:1] + k.shape[2:] == q.shape[:1] + q.shape[2:],
              f"input 'key' expected shape (batch, key length, heads, head size) = ({q.shape[0]}, *, {q.shape[2]}, "
              f"{q.shape[3]}), received {k.shape}")
    ctx.check(v.shape[:3] == k.shape[:3],
              f"input 'value' expected shape ({k.shape[0]}, {k.shape[1]}, {k.shape[2]}, *) as 'key', received {v.shape}")
    if ctx.has_input("attn_bias"):
        _check_bias(ctx, q, k)
    b, sq, h, _ = q.shape
    ctx.set_output("out", (b, sq, h, v.shape[3]), q.dtype)
    ctx.set_output("softmax_lse", (b, h, lse_length(sq)), _dt.float64 if q.dtype is _dt.float64 else _dt.float32)
    ctx.set_output("philox_seed", (), _dt.int64)
    ctx.set_output("philox_offset", (), _dt.int64)


def _mha_grad_infer(ctx):
    same_dtype(ctx, "dy", "query", "key", "value", "attn_bias", "out")
    ctx.check(ctx.input("dy").shape == ctx.input("out").shape,
              f"input 'dy' expected shape {ctx.input('out').shape}, received {ctx.input('dy').shape}")
    for a in ("query", "key", "value"):
        ctx.set_output(f"{a}_grad", ctx.input(a).shape, ctx.input(a).dtype)
    if ctx.has_output("attn_bias_grad"):
        ctx.check(ctx.has_input("attn_bias"), "output 'attn_bias_grad' needs input 'attn_bias'")
        ctx.set_output("attn_bias_grad", ctx.input("attn_bias").shape, ctx.input("query").dtype)


# ------------------------------------------------------------------ kernels

def uses_efficient_kernel(k) -> bool:
    """Whether op ``k`` (either op of the pair: the same static facts) runs PyTorch's
    memory-efficient attention: a device other than the CPU, head sizes multiples of 8,
    16- or 32-bit floats, and on a GPU the kernels there (:func:`_efficient_kernel_runs`)."""
    q = k.input("query")
    dv = k.input("value").shape[3]
    if k.device.type == "cpu" or q.shape[3] % 8 or dv % 8 or q.dtype not in (_dt.float16, _dt.bfloat16, _dt.float32):
        return False
    return k.device.type != "cuda" or _efficient_kernel_runs(
        k.device, q.dtype.torch, q.shape[3], dv, k.has_input("attn_bias"), k.attr("dropout_rate") > 0)


@functools.lru_cache(maxsize=None)
def _efficient_kernel_runs(device, dtype, d, dv, bias, dropout) -> bool:
    """Whether the memory-efficient attention runs, forward and backward, on ``device`` for
    heads of ``d`` / ``dv`` in ``dtype`` (a probe on one sequence of 8, once per kind): a
    build or card without those kernels gets the formulas, with a warning, not an error at
    the first step."""
    rate = 0.5 if dropout else 0.0
    try:
        q = torch.zeros(1, 1, 8, d, dtype=dtype, device=device)
        v = torch.zeros(1, 1, 8, dv, dtype=dtype, device=device)
        b = torch.zeros(1, 1, 8, _BIAS_ALIGN, dtype=dtype, device=device)[..., :8] if bias else None
        out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(q, q, v, b, True, rate, False)
        torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            out, q, q, v, b, out, lse, seed, offset, rate, [True, True, True, False], False)
        return True
    except RuntimeError as e:
        warnings.warn(f"fused_multi_head_attention: PyTorch's memory-efficient attention does not run on {device} "
                      f"for {dtype} heads of {d} ({str(e).splitlines()[0][:200]}); the op computes its formulas")
        return False


def _bias4(bias, full):
    """``bias`` as the (B, H, Sq, Sk) view the memory-efficient kernel reads: padded along the
    key axis to a 16-element row stride where it is not (then sliced back), expanded."""
    b = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    sk = b.shape[-1]
    if b.stride(-1) != 1 or any(st % _BIAS_ALIGN for st, size in zip(b.stride()[:-1], b.shape[:-1]) if size > 1):
        b = F.pad(b, (0, -sk % _BIAS_ALIGN))[..., :sk] if sk % _BIAS_ALIGN else b.contiguous()
    return b.expand(full)


def _heads(t):
    """(B, S, H, D) -> the (B, H, S, D) view."""
    return t.transpose(1, 2)


def keep_mask(seed, index, rate):
    """The bool keep-mask of the op's CPU kernels: ``lowbias32(seed + i) >= rate * 2**32`` for
    each element's index ``i`` (int64 tensor) in the row-major order of the logical (B, H, Sq,
    Sk) scores (integer arithmetic kept below 2**63 in int64)."""
    x = (index + seed) & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    x = x ^ (x >> 16)
    return x >= int(rate * 2 ** 32)


def _mul32(x, c):
    """``x * c mod 2**32`` for ``x`` < 2**32, in two 16-bit halves of ``c``."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mask_index(k):
    """``device -> index``: the row-major indices in the logical (B, H, Sq, Sk) scores of the
    elements this device computes (its part where the op is split over devices, so that the
    mask of each element is the one-device mask whatever the layout)."""
    full = _scores_shape(k.logical("query").shape, k.logical("key").shape)
    layout = k.sbp("query")
    along = {"S(0)": "S(0)", "S(2)": "S(1)"}  # the split axis of the (B, Sq, H, D) query -> of the scores
    mask_layout = tuple(along.get(s, "B") for s in layout) if isinstance(layout, tuple) else along.get(layout, "B")

    def index(device):
        whole = torch.arange(math.prod(full), dtype=torch.int64, device=device).view(full)
        return _sbp.local_part(whole, mask_layout, k.parallel_num, k.parallel_id) if k.parallel_num > 1 else whole
    return index


def _math_parts(k):
    """The CPU kernels' shared pieces: ``scores(q, k, bias) -> s`` (opmath dtype, (B, H, Sq, Sk)),
    and the dropout rate and keep scale."""
    scale, rate = k.attr("scale"), k.attr("dropout_rate")
    dtype = k.input("query").dtype.torch
    opmath = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

    def scores(q, key, bias):
        s = torch.matmul(_heads(q).to(opmath), _heads(key).to(opmath).transpose(-1, -2)) * scale
        return s if bias is None else s + bias.to(opmath)
    return scores, rate, 1.0 / (1.0 - rate), opmath


def _mha_math_kernel(k, draw_seed):
    scores, rate, keep_scale, opmath = _math_parts(k)
    sq = k.input("query").shape[1]
    pad = lse_length(sq) - sq
    index = _mask_index(k)

    def fused_multi_head_attention(q, key, v, bias):
        s = scores(q, key, bias)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.unsqueeze(-1))
        if rate:
            seed = draw_seed(q.device)
            p = p * keep_mask(seed, index(p.device), rate) * keep_scale
        else:
            seed = torch.zeros((), dtype=torch.int64, device=q.device)
        out = torch.matmul(p, _heads(v).to(opmath)).to(q.dtype)
        return _heads(out), F.pad(lse, (0, pad)), seed, torch.zeros((), dtype=torch.int64, device=q.device)
    return fused_multi_head_attention


def _mha_kernel(k):
    """PyTorch's memory-efficient attention on a GPU, else the formulas with the hashed mask
    (module docstring)."""
    if uses_efficient_kernel(k):
        scale, rate = k.attr("scale"), k.attr("dropout_rate")
        full = _scores_shape(k.input("query").shape, k.input("key").shape)

        def fused_multi_head_attention(q, key, v, bias):
            out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
                _heads(q), _heads(key), _heads(v), None if bias is None else _bias4(bias, full), True, rate, False,
                scale=scale)
            return _heads(out), lse, seed, offset
        return fused_multi_head_attention
    gen = k.generator(k.attr("seed"))
    return _mha_math_kernel(k, lambda device: torch.randint(0, 2 ** 31, (), generator=gen, device=device))


def _mha_native(k):
    """The traced step's kernel: the per-run seed of the hashed mask from torch's default
    generator (an op's own generator cannot be traced)."""
    if uses_efficient_kernel(k):
        return _mha_kernel(k)
    return _mha_math_kernel(k, lambda device: torch.randint(0, 2 ** 31, (), device=device))


def _bias_grad(ds, bias_shape):
    """The gradient of a bias broadcast onto (B, H, Sq, Sk): summed over its broadcast axes."""
    lead = (1,) * (4 - len(bias_shape)) + tuple(bias_shape)
    return ds.sum_to_size(lead).reshape(bias_shape)


def _mha_grad_kernel(k):
    bias_grad = k.has_output("attn_bias_grad")
    bias_shape = k.input("attn_bias").shape if k.has_input("attn_bias") else None
    if uses_efficient_kernel(k):
        scale, rate = k.attr("scale"), k.attr("dropout_rate")
        full = _scores_shape(k.input("query").shape, k.input("key").shape)

        def fused_multi_head_attention_grad(dy, q, key, v, bias, out, lse, seed, offset):
            dq, dk, dv, db = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                _heads(dy), _heads(q), _heads(key), _heads(v), None if bias is None else _bias4(bias, full),
                _heads(out), lse, seed, offset, rate, [True, True, True, bias_grad], False, scale=scale)
            grads = (_heads(dq), _heads(dk), _heads(dv))
            return grads + (_bias_grad(db, bias_shape).to(q.dtype),) if bias_grad else grads + (None,)
        return fused_multi_head_attention_grad
    scores, rate, keep_scale, opmath = _math_parts(k)
    scale = k.attr("scale")
    sq = k.input("query").shape[1]
    index = _mask_index(k)

    def fused_multi_head_attention_grad(dy, q, key, v, bias, out, lse, seed, offset):
        p = torch.exp(scores(q, key, bias) - lse[..., :sq].unsqueeze(-1))
        keep = keep_mask(seed, index(p.device), rate).to(opmath) * keep_scale if rate else None
        dyh, vh = _heads(dy).to(opmath), _heads(v).to(opmath)
        dv = torch.matmul((p if keep is None else p * keep).transpose(-1, -2), dyh)
        dp = torch.matmul(dyh, vh.transpose(-1, -2))
        if keep is not None:
            dp = dp * keep
        ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
        dq = torch.matmul(ds, _heads(key).to(opmath)) * scale
        dk = torch.matmul(ds.transpose(-1, -2), _heads(q).to(opmath)) * scale
        grads = tuple(_heads(g).to(q.dtype) for g in (dq, dk, dv))
        return grads + ((_bias_grad(ds, bias_shape).to(q.dtype),) if bias_grad else (None,))
    return fused_multi_head_attention_grad


# ------------------------------------------------------------------ XLA

def _keep_mask_xla(seed, shape, rate):
    """:func:`keep_mask` over jax arrays (uint32 arithmetic wraps as the hash wants)."""
    jnp = xla_rules.jnp()
    x = jnp.arange(math.prod(shape), dtype=jnp.uint32) + seed.astype(jnp.uint32)
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    x = x ^ (x >> 16)
    return (x >= jnp.uint32(int(rate * 2 ** 32))).reshape(shape)


def _xla_parts(k):
    jnp = xla_rules.jnp()
    scale, rate = k.attr("scale"), k.attr("dropout_rate")
    opmath = xla_rules.opmath(k.input("query").dtype.np)

    def heads(t):
        return jnp.swapaxes(t, 1, 2).astype(opmath)

    def scores(q, key, bias):
        s = jnp.matmul(heads(q), jnp.swapaxes(heads(key), -1, -2)) * scale
        return s if bias is None else s + bias.astype(opmath)
    return jnp, scores, heads, rate, 1.0 / (1.0 - rate)


def _mha_xla(k):
    """The formulas with the hashed mask; the run's seed from the job's jax key stream."""
    import jax
    jnp, scores, heads, rate, keep_scale = _xla_parts(k)
    sq = k.input("query").shape[1]
    pad = lse_length(sq) - sq

    def fused_multi_head_attention(key_, q, key, v, bias):
        s = scores(q, key, bias)
        lse = jax.nn.logsumexp(s, axis=-1)
        p = jnp.exp(s - lse[..., None])
        if rate:
            seed = jax.random.randint(key_, (), 0, 2 ** 31, dtype=jnp.int64)
            p = p * _keep_mask_xla(seed, p.shape, rate) * keep_scale
        else:
            seed = jnp.zeros((), jnp.int64)
        out = jnp.swapaxes(jnp.matmul(p, heads(v)), 1, 2).astype(q.dtype)
        return out, jnp.pad(lse, ((0, 0), (0, 0), (0, pad))), seed, jnp.zeros((), jnp.int64)
    return fused_multi_head_attention


def _mha_grad_xla(k):
    jnp, scores, heads, rate, keep_scale = _xla_parts(k)
    scale = k.attr("scale")
    sq = k.input("query").shape[1]
    bias_grad = k.has_output("attn_bias_grad")
    bias_shape = k.input("attn_bias").shape if k.has_input("attn_bias") else None

    def fused_multi_head_attention_grad(dy, q, key, v, bias, out, lse, seed, offset):
        p = jnp.exp(scores(q, key, bias) - lse[..., :sq, None])
        keep = _keep_mask_xla(seed, p.shape, rate) * keep_scale if rate else None
        dyh, vh = heads(dy), heads(v)
        dv = jnp.matmul(jnp.swapaxes(p if keep is None else p * keep, -1, -2), dyh)
        dp = jnp.matmul(dyh, jnp.swapaxes(vh, -1, -2))
        if keep is not None:
            dp = dp * keep
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
        dq = jnp.matmul(ds, heads(key)) * scale
        dk = jnp.matmul(jnp.swapaxes(ds, -1, -2), heads(q)) * scale
        grads = tuple(jnp.swapaxes(g, 1, 2).astype(q.dtype) for g in (dq, dk, dv))
        if not bias_grad:
            return grads + (None,)
        lead = (1,) * (4 - len(bias_shape)) + tuple(bias_shape)
        axes = tuple(i for i, s in enumerate(lead) if s == 1 and ds.shape[i] != 1)
        return grads + (ds.sum(axis=axes, keepdims=True).reshape(bias_shape).astype(q.dtype),)
    return fused_multi_head_attention_grad


# ------------------------------------------------------------------ autograd, SBP

def _mha_grad(g):
    wants_bias = g.has_input("attn_bias") and g.needs("attn_bias")
    if not (wants_bias or any(g.needs(a) for a in ("query", "key", "value"))):
        return
    outputs = ["query_grad", "key_grad", "value_grad"] + (["attn_bias_grad"] if wants_bias else [])
    grads = g.emit("fused_multi_head_attention_grad",
                   {"dy": g.dout("out"), "query": g.input("query"), "key": g.input("key"), "value": g.input("value"),
                    "attn_bias": g.input("attn_bias") if g.has_input("attn_bias") else None, "out": g.output("out"),
                    "softmax_lse": g.output("softmax_lse"), "philox_seed": g.output("philox_seed"),
                    "philox_offset": g.output("philox_offset")},
                   {a: g.attr(a) for a in ("scale", "dropout_rate")}, outputs=outputs)
    for arg in ("query", "key", "value") + (("attn_bias",) if wants_bias else ()):
        if g.needs(arg):
            g.set_grad(arg, grads[f"{arg}_grad"])


def _mha_sbp(ctx):
    """Split on the batch axis or on the heads axis (the (B, S, H, D) blobs' axis 2,
    ``softmax_lse``'s axis 1); the bias splits along the same axis where it is not broadcast
    there, else stays whole (its gradient then a partial sum); the seeds stay whole."""
    bias = ctx.shape("attn_bias") if ctx.has("attn_bias") else None
    cands = []
    for axis, lse_axis, bias_axis in ((0, 0, 0), (2, 1, 1)):
        fixed = {"softmax_lse": _sbp.split(lse_axis), "philox_seed": _sbp.B, "philox_offset": _sbp.B}
        if bias is not None:
            i = bias_axis - (4 - len(bias))
            whole = i < 0 or bias[i] == 1
            fixed["attn_bias"] = _sbp.B if whole else _sbp.split(i)
            fixed["attn_bias_grad"] = _sbp.P if whole else _sbp.split(i)
        cands.append(_sbp.signature(ctx, _sbp.split(axis), **fixed))
    return cands


op("fused_multi_head_attention", inputs=["query", "key", "value", "attn_bias?"],
   outputs=["out", "softmax_lse", "philox_seed", "philox_offset"], attrs=ATTRS, infer=_mha_infer,
   kernel=_mha_kernel, native=_mha_native, xla=_mha_xla, grad=_mha_grad, sbp=_mha_sbp, random=True, amp="white",
   doc="dropout(softmax(scale * q @ k^T + attn_bias)) @ v per head, in (batch, sequence, heads, head size)")

op("fused_multi_head_attention_grad",
   inputs=["dy", "query", "key", "value", "attn_bias?", "out", "softmax_lse", "philox_seed", "philox_offset"],
   outputs=["query_grad", "key_grad", "value_grad", "attn_bias_grad?"],
   attrs={a: ATTRS[a] for a in ("scale", "dropout_rate")}, infer=_mha_grad_infer, kernel=_mha_grad_kernel,
   xla=_mha_grad_xla, sbp=_mha_sbp,
   doc="gradients of fused_multi_head_attention, its dropout mask drawn again from philox_seed / philox_offset")
