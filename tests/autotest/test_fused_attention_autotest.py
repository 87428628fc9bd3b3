"""AutoTest of the fused transformer-layer ops (graphfront/ops/fused_attention_ops.py,
graphfront/ops/attention_ops.py) against PyTorch eager compositions of the unfused operations.

Ops taking a keep-mask are checked with the mask as a fixed int8 input (values compared
exactly, gradients included); the flow.nn dropout wrappers, whose masks are random, are
checked statistically (kept fraction, 0 and 1/(1-rate) gradient values).
"""
import numpy as np

from graphfront.ops.builder import build_op
from graphfront.testing import autotest, constant, dropout_statistics, random_tensor

N = 12


def dims(check, ndim, low=1, high=5):
    return [int(d) for d in check.rng.integers(low, high, size=ndim)]


def tensor(shape, low=-2.0, high=2.0, requires_grad=True):
    names = {f"dim{i}": d for i, d in enumerate(shape)}
    return random_tensor(ndim=len(shape), low=low, high=high, requires_grad=requires_grad, **names)


def mask(check, shape, rate):
    return constant((check.rng.random(shape) >= rate).astype(np.int8))


def bias_view(torch, b, ndim, axis):
    view = [1] * ndim
    view[axis] = -1
    return b.view(view)


def tril_ref(torch, x, diagonal, fill, scale):
    keep = torch.ones(x.shape[-2:], dtype=torch.bool).tril(diagonal)
    return torch.where(keep, x * scale, torch.tensor(fill, dtype=x.dtype))


@autotest(n=N)
def test_fused_bias_add_gelu(check):
    shape = dims(check, int(check.rng.integers(2, 5)))
    channels_last = bool(check.rng.random() < 0.5)
    axis = len(shape) - 1 if channels_last else 1
    fmt = "NHWC" if channels_last else None
    if channels_last and len(shape) != 4:
        fmt = "N" + "X" * (len(shape) - 2) + "C"
    check(graphfront=lambda flow, x, b: flow.nn.fused_bias_add_gelu(x, b, data_format=fmt),
          torch=lambda torch, x, b: torch.nn.functional.gelu(x + bias_view(torch, b, len(shape), axis)),
          x=tensor(shape, -3, 3), b=tensor([shape[axis]]))


@autotest(n=N)
def test_fused_bias_add_mask_scale(check):
    shape = dims(check, int(check.rng.integers(2, 5)))
    axis = int(check.rng.integers(0, len(shape)))
    rate = float(check.rng.uniform(0.1, 0.8))
    scale = 1.0 / (1.0 - rate)
    check(graphfront=lambda flow, a, b, m: build_op("fused_bias_add_mask_scale", {"a": a, "b": b, "mask": m},
                                                     {"axis": axis, "scale": scale}),
          torch=lambda torch, a, b, m: (a + bias_view(torch, b, len(shape), axis)) * m * scale,
          a=tensor(shape), b=tensor([shape[axis]]), m=mask(check, shape, rate))


@autotest(n=N)
def test_fused_bias_add_dropout(check):
    """The wrapper: random mask; statistics of out = (x + b) * mask / (1 - rate) (b = 0 here)."""
    shape = [int(check.rng.integers(8, 16)), int(check.rng.integers(8, 16))]
    check(graphfront=lambda flow, x, rate: flow.nn.fused_bias_add_dropout(
              x, flow.constant(0.0, dtype=flow.float32, shape=(shape[1],)), data_format="NC", rate=rate),
          torch=lambda torch, x, rate: torch.nn.functional.dropout(x, p=rate, training=True),
          compare=dropout_statistics(x="x", rate="rate"),
          x=tensor(shape, 0.5, 1.5), rate=float(check.rng.uniform(0.1, 0.7)))


@autotest(n=N)
def test_fused_tril_scale_softmax_mask_scale(check):
    shape = dims(check, int(check.rng.integers(2, 5)), 1, 6)
    diagonal = int(check.rng.integers(-1, 2))
    fill = float(check.rng.choice([0.0, -10000.0, float(check.rng.uniform(-2, 2))]))
    scale = float(check.rng.uniform(0.3, 2.0))
    rate = float(check.rng.uniform(0.0, 0.6))
    mscale = 1.0 / (1.0 - rate)

    def gf(flow, x, m):
        y, softmax_y = build_op("fused_tril_scale_softmax_mask_scale", {"x": x, "mask": m},
                                {"diagonal": diagonal, "tril_fill_value": fill, "tril_scale_value": scale,
                                 "mask_scale_value": mscale}, outputs=("y", "softmax_y"))
        return [y, flow.identity(softmax_y)]

    def th(torch, x, m):
        # as in OneFlow, the gradient flows from y only: softmax_y is a by-product whose gradient is dropped
        s = torch.softmax(tril_ref(torch, x, diagonal, fill, scale), dim=-1)
        return [s * m * mscale, s.detach()]

    check(graphfront=gf, torch=th, x=tensor(shape), m=mask(check, shape, rate))


@autotest(n=N)
def test_fused_scale_tril_softmax_dropout(check):
    """The wrapper with rate 0 (the keep-mask is all ones, so values are comparable)."""
    shape = dims(check, int(check.rng.integers(2, 4)), 1, 6)
    diagonal = int(check.rng.integers(-1, 2))
    scale = float(check.rng.uniform(0.3, 2.0))
    check(graphfront=lambda flow, x: flow.nn.fused_scale_tril_softmax_dropout(
              x, diagonal=diagonal, fill_value=-1000.0, scale=scale, rate=0.0),
          torch=lambda torch, x: torch.softmax(tril_ref(torch, x, diagonal, -1000.0, scale), dim=-1),
          x=tensor(shape))


@autotest(n=N)
def test_fused_self_attention_query_mul_key_and_value(check):
    seq, batch, heads, head_size = dims(check, 4, 1, 5)
    alpha = float(check.rng.choice([1.0, 1.0 / np.sqrt(head_size), float(check.rng.uniform(-2, 2))]))

    def th(torch, x):
        p = x.view(seq, batch, heads, 3, head_size).permute(3, 1, 2, 0, 4)
        return [alpha * p[0] @ p[1].transpose(-1, -2), p[2]]

    check(graphfront=lambda flow, x: list(flow.nn.fused_self_attention_query_mul_key_and_value(x, head_size, alpha)),
          torch=th, x=tensor([seq, batch, heads * 3 * head_size]))


@autotest(n=N, auto_backward=False)
def test_fused_cast_scale(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    scale = float(check.rng.uniform(-3, 3))
    x = (tensor(shape, -100, 100, requires_grad=False) if check.rng.random() < 0.5
         else random_tensor(ndim=len(shape), low=-50, high=50, dtype=np.float16,
                            **{f"dim{i}": d for i, d in enumerate(shape)}))
    check(graphfront=lambda flow, x, s: build_op("fused_cast_scale", {"x": x, "scale_by_tensor": s}, {"scale": scale},
                                                 outputs=("y",)),
          torch=lambda torch, x, s: x.float() * scale * s[0],
          x=x, s=tensor([1], 0.1, 2.0, requires_grad=False))


@autotest(n=N)
def test_fused_multi_head_attention(check):
    """Without dropout (its mask is the op's own stream): heads of size 4 or 8 (on a GPU, the
    memory-efficient kernel takes 8), a bias broadcast over the heads, the query or both."""
    batch, sq, sk, heads = dims(check, 4, 1, 6)
    d, dv = (int(x) for x in check.rng.choice([4, 8], size=2))
    scale = float(check.rng.uniform(0.2, 1.5))
    bias_shape = [[batch, 1, sq, sk], [batch, heads, sq, sk], [sk], [sq, sk]][int(check.rng.integers(0, 4))]

    def gf(flow, q, k, v, b):
        return build_op("fused_multi_head_attention", {"query": q, "key": k, "value": v, "attn_bias": b},
                        {"scale": scale, "dropout_rate": 0.0},
                        outputs=("out", "softmax_lse", "philox_seed", "philox_offset"))[0]

    def th(torch, q, k, v, b):
        s = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2) * scale + b
        return (torch.softmax(s, dim=-1) @ v.transpose(1, 2)).transpose(1, 2)

    check(graphfront=gf, torch=th, q=tensor([batch, sq, heads, d]), k=tensor([batch, sk, heads, d]),
          v=tensor([batch, sk, heads, dv]), b=tensor(bias_shape))
