"""Ops that change a blob's *time shape* (how many times per job run it is produced):
``repeat``, ``acc``, ``unpack``, ``pack`` (OneFlow's ``oneflow/user/ops/repeat_op.cpp``,
``acc_op.cpp``, ``unpack_op.cpp``, ``pack_op.cpp`` at v0.6.0).

==========================  ================================================================
op (in -> out; attr)        meaning
==========================  ================================================================
``repeat`` (repeat_num)     ``out`` is produced ``repeat_num`` times per ``in``, each time
                            equal to ``in`` (same shape)
``acc`` (max_acc_num)       one ``out`` per ``max_acc_num`` micro-steps: the sum of the
                            ``in`` of those steps (same shape)
``unpack`` (unpack_num)     ``in`` split along dim 0 into ``unpack_num`` equal pieces,
                            produced one after another (dim 0 divided by ``unpack_num``)
``pack`` (pack_num)         ``pack_num`` successive ``in`` pieces concatenated along dim 0
==========================  ================================================================

graphfront runs a job as one pass, so it has no time axis: the pass
:func:`graphfront.passes.time_shape.unroll_time_shape` rewrites every region between
``repeat``/``unpack`` and ``acc``/``pack`` into ``n`` copies of its ops (``narrow`` pieces
for ``unpack``, ``concat`` for ``pack``, ``add_n`` for ``acc``) before autograd, so these
ops never reach the runtime: they have schema and inference here and no kernel; their
gradients are those of the unrolled ops.
"""
from __future__ import annotations

from graphfront.ops.registry import op


def _count_infer(attr, dim0=None):
    def infer(ctx):
        x, n = ctx.input("in"), ctx.attr(attr)
        ctx.check(n >= 1, f"attr '{attr}' must be >= 1, received {n}")
        shape = tuple(x.shape)
        if dim0 == "divide":
            ctx.check(len(shape) >= 1 and shape[0] % n == 0,
                      f"dim 0 of input 'in' {shape} must be divisible by {attr} = {n}")
            shape = (shape[0] // n,) + shape[1:]
        elif dim0 == "multiply":
            ctx.check(len(shape) >= 1, "input 'in' must have rank >= 1")
            shape = (shape[0] * n,) + shape[1:]
        ctx.set_output("out", shape, x.dtype, is_dynamic=x.is_dynamic)
    return infer


TIME_SHAPE_OPS = {"repeat": "repeat_num", "acc": "max_acc_num", "unpack": "unpack_num", "pack": "pack_num"}
SOURCES, SINKS = ("repeat", "unpack"), ("acc", "pack")

for _type, _attr in TIME_SHAPE_OPS.items():
    op(_type, inputs=["in"], outputs=["out"], attrs={_attr: ("int32", 0)},
       infer=_count_infer(_attr, {"unpack": "divide", "pack": "multiply"}.get(_type)), kernel=None,
       amp="gray" if _type == "acc" else "clear",
       doc=f"time-shape op (unrolled before autograd by passes.time_shape; attr {_attr})")
