"""Mixed-precision ops: ``amp_white_identity`` and ``dynamic_loss_scale_schedule``.

* ``amp_white_identity(in) -> out``: an identity that sits on the auto-mixed-precision
  white list (``oneflow/core/job_rewriter/auto_mixed_precision_lists.cpp``), so the
  AMP pass runs the op and its clear/gray neighbours in low precision. Its gradient is
  ``amp_white_identity(dy)`` (``oneflow/user/ops/amp_white_identity_op.cpp``).
* ``dynamic_loss_scale_schedule(count_not_finite, loss_scale, good_step_counter)``:
  updates the dynamic loss scale in place after each train step, as OneFlow's kernel
  ``oneflow/user/kernels/dynamic_loss_scale_schedule_kernel.cpp``: with no non-finite
  gradient element, ``good_step_counter += 1`` and once it reaches ``increment_period``
  the scale becomes ``min(scale * multiplier, 65536)`` and the counter 0; otherwise the
  counter becomes 0 and the scale ``max(scale / multiplier, 1)``.
  Inputs: ``count_not_finite`` int64 ``(1,)``, ``loss_scale`` float32 ``(1,)`` (updated),
  ``good_step_counter`` int64 ``(1,)`` (updated); no outputs, no gradient.
"""
from __future__ import annotations

import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

LOSS_SCALE_MIN = 1.0
LOSS_SCALE_MAX = 65536.0


def _like_in(ctx):
    d = ctx.input("in")
    ctx.set_output("out", d.shape, d.dtype, is_dynamic=d.is_dynamic)


op("amp_white_identity", inputs=["in"], outputs=["out"], infer=_like_in, kernel=lambda k: lambda x: x,
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit("amp_white_identity", {"in": g.dout("out")})),
   view=True, doc="out = in; marks a point of the auto-mixed-precision white list", onnx=onnx_rules.same("Identity"),
   xla=lambda k: lambda x: x, sbp=_sbp.elementwise(p_all=True),
   amp="white")


def _schedule_infer(ctx):
    for arg, dtype in (("count_not_finite", _dt.int64), ("loss_scale", _dt.float32),
                       ("good_step_counter", _dt.int64)):
        d = ctx.input(arg)
        ctx.check(d.shape == (1,) and d.dtype is dtype,
                  f"input '{arg}' expected {dtype.name} (1,), received {d.dtype.name} {d.shape}")
    ctx.check(ctx.attr("increment_period") > 0,
              f"attr 'increment_period' must be > 0, received {ctx.attr('increment_period')}")
    ctx.check(ctx.attr("multiplier") > 1.0, f"attr 'multiplier' must be > 1, received {ctx.attr('multiplier')}")


def _schedule_kernel(k):
    period, mult = k.attr("increment_period"), k.attr("multiplier")

    def run(count_not_finite, loss_scale, good_step_counter):
        # branch-free, so a CUDA step never waits on the host
        finite = count_not_finite == 0
        counter = good_step_counter + 1
        grow = finite & (counter >= period)
        scale = torch.where(grow, torch.clamp(loss_scale * mult, max=LOSS_SCALE_MAX),
                            torch.where(finite, loss_scale, torch.clamp(loss_scale / mult, min=LOSS_SCALE_MIN)))
        loss_scale.copy_(scale)
        good_step_counter.copy_(torch.where(finite & ~grow, counter, torch.zeros_like(counter)))
    return run


def _schedule_xla(k):
    """The kernel's rule over jax arrays: ``(None, (new loss_scale, new good_step_counter))``."""
    jnp = xla_rules.jnp()
    period, mult = k.attr("increment_period"), k.attr("multiplier")

    def run(count_not_finite, loss_scale, good_step_counter):
        finite = count_not_finite == 0
        counter = good_step_counter + 1
        grow = finite & (counter >= period)
        scale = jnp.where(grow, jnp.minimum(loss_scale * mult, LOSS_SCALE_MAX),
                          jnp.where(finite, loss_scale, jnp.maximum(loss_scale / mult, LOSS_SCALE_MIN)))
        return None, (scale.astype(loss_scale.dtype), jnp.where(finite & ~grow, counter, jnp.zeros_like(counter)))
    return run


op("dynamic_loss_scale_schedule", inputs=["count_not_finite", "loss_scale", "good_step_counter"], outputs=[],
   attrs={"increment_period": ("int64", 2000), "multiplier": ("float", 2.0)}, infer=_schedule_infer,
   kernel=_schedule_kernel, no_grad=True, xla=_schedule_xla, mutates=("loss_scale", "good_step_counter"),
   doc="dynamic loss scale update: grow after increment_period finite steps, shrink on overflow")
