"""Model-update ops and ``assign`` (``shared/reference/user_ops.md`` §2.5).

Update ops have no outputs: they mutate ``model`` (and their state inputs) in place,
which the runtime orders after every other reader of those blobs. The effective
gradient is ``scale * model_diff + l1 * sign(model) + l2 * model`` (OneFlow's
regularized diff), and ``weight_decay`` adds ``weight_decay * model`` to the step.
"""
from __future__ import annotations

import torch

from graphfront.ops.registry import op

UPDATE_COMMON = {"learning_rate_val": ("float", 0.0), "scale": ("double", 1.0), "l1": ("float", 0.0),
                 "l2": ("float", 0.0), "weight_decay": ("float", 0.0)}


def _check_update(ctx, *state):
    m = ctx.input("model")
    for arg in ("model_diff",) + state:
        d = ctx.input(arg)
        if d is not None:
            ctx.check(d.shape == m.shape and d.dtype is m.dtype,
                      f"input '{arg}' expected {m.dtype.name} {m.shape} (as 'model'), received {d.dtype.name} {d.shape}")
    for arg in ("learning_rate", "scale_by_tensor", "skip_if"):
        d = ctx.input(arg)
        if d is not None:
            ctx.check(d.shape == (1,), f"input '{arg}' expected shape (1,), received {d.shape}")


def effective_diff(k, model, diff, scale_by_tensor):
    """``scale * diff (* scale_by_tensor) + l1 * sign(model) + l2 * model``."""
    scale, l1, l2 = k.attr("scale"), k.attr("l1"), k.attr("l2")
    if scale != 1.0:
        diff = diff * scale
    if scale_by_tensor is not None:
        diff = diff * scale_by_tensor
    if l1:
        diff = diff + l1 * torch.sign(model)
    if l2:
        diff = diff + l2 * model
    return diff


def learning_rate(k, lr_tensor):
    return lr_tensor if lr_tensor is not None else k.attr("learning_rate_val")


def _sgd_kernel(k):
    wd = k.attr("weight_decay")

    def sgd_update(model, diff, lr, scale_by_tensor, skip_if):
        if skip_if is not None and bool(skip_if.reshape(-1)[0]):
            return None
        d = effective_diff(k, model, diff, scale_by_tensor)
        if wd:
            d = d + wd * model
        model.sub_(d * learning_rate(k, lr))
    return sgd_update


op("sgd_update", inputs=["model", "model_diff", "learning_rate?", "scale_by_tensor?", "skip_if?"], outputs=[],
   attrs=UPDATE_COMMON, infer=lambda ctx: _check_update(ctx), kernel=_sgd_kernel, no_grad=True,
   mutates=("model",))


def _momentum_kernel(k):
    wd, beta = k.attr("weight_decay"), k.attr("beta")

    def momentum_update(model, diff, momentum, lr, scale_by_tensor, skip_if):
        if skip_if is not None and bool(skip_if.reshape(-1)[0]):
            return None
        d = effective_diff(k, model, diff, scale_by_tensor)
        if wd:
            d = d + wd * model
        # OneFlow: momentum = beta * momentum - lr * diff; model += momentum
        momentum.mul_(beta).sub_(d * learning_rate(k, lr))
        model.add_(momentum)
    return momentum_update


op("momentum_update",
   inputs=["model", "model_diff", "momentum", "learning_rate?", "scale_by_tensor?", "skip_if?"], outputs=[],
   attrs={**UPDATE_COMMON, "beta": ("float", 0.9)}, infer=lambda ctx: _check_update(ctx, "momentum"),
   kernel=_momentum_kernel, no_grad=True, mutates=("model", "momentum"))


def _assign_infer(ctx):
    ref, value = ctx.input("ref"), ctx.input("value")
    ctx.check(ref.shape == value.shape and ref.dtype is value.dtype,
              f"input 'value' expected {ref.dtype.name} {ref.shape} (as 'ref'), received "
              f"{value.dtype.name} {value.shape}")


op("assign", inputs=["ref", "value"], outputs=[], infer=_assign_infer,
   kernel=lambda k: (lambda ref, value: ref.copy_(value) and None), no_grad=True, mutates=("ref",))
