"""NVTX range markers (OneFlow's ``oneflow/user/ops/nvtx_range_op.cpp`` at v0.6.0).

``nvtx_start`` / ``nvtx_end`` (in -> out; attr ``mark_prefix``) pass their input through
unchanged; on a CUDA device ``nvtx_start`` opens the NVTX range ``mark_prefix`` and
``nvtx_end`` closes the innermost open range (``torch.cuda.nvtx.range_push`` / ``range_pop``),
so the ops between them show as one range in Nsight Systems. On CPU they only pass the
input through. Each is the other's gradient, so the backward pass is marked too.
"""
from __future__ import annotations

import torch

from graphfront.ops.common import like
from graphfront.ops.registry import op


def _nvtx_kernel(push):
    def make(k):
        prefix = k.attr("mark_prefix")
        if k.device.type != "cuda":
            return lambda x: x
        nvtx = torch.cuda.nvtx

        def mark(x):
            if push:
                nvtx.range_push(prefix)
            else:
                nvtx.range_pop()
            return x
        return mark
    return make


def _nvtx_grad(other):
    def grad(g):
        g.set_grad("in", g.emit(other, {"in": g.dout("out")}, {"mark_prefix": g.attr("mark_prefix")}))
    return grad


for _name, _other, _push in (("nvtx_start", "nvtx_end", True), ("nvtx_end", "nvtx_start", False)):
    op(_name, inputs=["in"], outputs=["out"], attrs={"mark_prefix": "string"}, infer=like("in"),
       kernel=_nvtx_kernel(_push), grad=_nvtx_grad(_other), view=True, amp="clear",
       doc=f"identity that {'opens' if _push else 'closes'} an NVTX range on CUDA")
