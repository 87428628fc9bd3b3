"""Random sampling ops of ``flow.random`` (OneFlow's ``oneflow/user/ops/bernoulli_op.cpp``
and ``generate_random_batch_permutation_indices_op.cpp`` at v0.6.0).

* ``bernoulli`` (in -> out): ``out[i] = 1`` with probability ``in[i]`` (in [0, 1]), else
  0, in attr ``dtype`` (default: ``in``'s). With ``has_seed`` the op draws from its own
  generator seeded once with ``seed`` (so a job's successive runs draw a reproducible
  sequence); otherwise from torch's global generator (``flow.manual_seed``). NoGrad.
* ``generate_random_batch_permutation_indices`` (x -> y): a random permutation of
  ``0 .. x.shape[0]-1`` as int32 (``x``'s values are unused), drawn from a generator
  seeded with ``seed``. NoGrad.
"""
from __future__ import annotations

import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops.registry import op


def _bernoulli_infer(ctx):
    x = ctx.input("in")
    ctx.check(x.dtype.is_floating_point, f"input 'in' expected a floating dtype, received {x.dtype.name}")
    ctx.set_output("out", x.shape, ctx.attr("dtype") or x.dtype, is_dynamic=x.is_dynamic)


def _bernoulli_kernel(k):
    dtype = (k.attr("dtype") or k.input("in").dtype).torch
    gen = k.generator(k.attr("seed")) if k.attr("has_seed") else None

    def bernoulli(x):
        # OneFlow's kernel: 1 where a uniform draw is below p; torch.bernoulli asserts 0 <= p <= 1
        # on the device, which would leave a GPU process unusable (p outside gives all 0 or 1 here)
        return (torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype) < x).to(dtype)
    return bernoulli


op("bernoulli", inputs=["in"], outputs=["out"],
   attrs={"seed": ("int64", -1), "has_seed": ("bool", False), "dtype": ("dtype", None)},
   infer=_bernoulli_infer, kernel=_bernoulli_kernel, no_grad=True, random=True,
   doc="0/1 samples with probability 'in'")


def _permutation_kernel(k):
    gen = k.generator(k.attr("seed"))
    return lambda x: torch.randperm(x.shape[0], generator=gen, device=x.device, dtype=torch.int32)


op("generate_random_batch_permutation_indices", inputs=["x"], outputs=["y"], attrs={"seed": ("int64", 0)},
   infer=lambda ctx: (ctx.check(len(ctx.input("x").shape) >= 1, "input 'x' must have rank >= 1"),
                      ctx.set_output("y", ctx.input("x").shape[:1], _dt.int32, is_dynamic=ctx.input("x").is_dynamic)),
   kernel=_permutation_kernel, no_grad=True, random=True,
   doc="a random permutation of range(x.shape[0]) (int32)")
