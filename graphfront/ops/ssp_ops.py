"""``ssp_variable_proxy``: stale-synchronous-parallel access to a variable (OneFlow's
``oneflow/user/ops/ssp_variable_proxy_op.cpp`` at v0.6.0).

``var`` (a variable) -> ``ref``, ``value``; attr ``buffer_size`` (>= 1). ``ref`` is the
variable itself (write it with ``flow.assign``); ``value`` is a stale copy taken from a
ring of ``buffer_size`` snapshots: run ``i`` of the job reads slot ``i mod buffer_size``,
and the variable as it stands after run ``i`` is stored into that slot (all slots start as
the variable's first value). So ``value`` lags ``buffer_size`` runs behind, as in OneFlow's
pipelined (SSP) training. The kernel keeps the ring between runs. NoGrad.
"""
from __future__ import annotations

from graphfront.ops.registry import op


def _ssp_infer(ctx):
    v = ctx.input("var")
    ctx.check(ctx.attr("buffer_size") >= 1, f"attr 'buffer_size' must be >= 1, received {ctx.attr('buffer_size')}")
    ctx.set_output("ref", v.shape, v.dtype)
    ctx.set_output("value", v.shape, v.dtype)


def _ssp_kernel(k):
    size = k.attr("buffer_size")
    state = {"ring": None, "run": 0}

    def ssp_variable_proxy(var):
        run = state["run"]
        if state["ring"] is None:
            state["ring"] = [var.detach().clone() for _ in range(size)]
        else:  # var now holds what the previous run left: store it into that run's slot
            state["ring"][(run - 1) % size].copy_(var)
        state["run"] = run + 1
        return var, state["ring"][run % size].clone()
    return ssp_variable_proxy


op("ssp_variable_proxy", inputs=["var"], outputs=["ref", "value"], attrs={"buffer_size": ("int64", 1)},
   infer=_ssp_infer, kernel=_ssp_kernel, no_grad=True, view=True, random=True, keeps_state=True,
   doc="the variable (ref) and a copy of it buffer_size runs old (value)")
