"""A custom op in pure Python: ``scaled_tanh(x) = a * tanh(b * x)`` (LeCun's 1.7159 tanh(2x/3)).

One ``op(...)`` call defines the forward op (schema, inference, grad maker, kernel) and
one more its backward op; no C++. Build it with ``flow.user_op_builder``.
"""
import torch

import graphfront as flow
from graphfront.ops.common import like
from graphfront.ops.registry import op, has_op

ATTRS = {"a": ("float", 1.7159), "b": ("float", 2.0 / 3.0)}


def _grad(g):
    g.set_grad("x", g.emit("scaled_tanh_grad", {"x": g.input("x"), "dy": g.dout("y")}, g.attrs))


def _backward_kernel(k):
    a, b = k.attr("a"), k.attr("b")
    return lambda x, dy: dy * a * b * (1 - torch.tanh(b * x) ** 2)   # d/dx a tanh(bx)


if not has_op("scaled_tanh"):
    op("scaled_tanh", inputs=["x"], outputs=["y"], attrs=ATTRS, infer=like("x"), grad=_grad,
       kernel=lambda k: (lambda x, a=k.attr("a"), b=k.attr("b"): a * torch.tanh(b * x)))
    op("scaled_tanh_grad", inputs=["x", "dy"], outputs=["dx"], attrs=ATTRS, infer=like("x"),
       kernel=_backward_kernel)


def scaled_tanh(x, a=1.7159, b=2.0 / 3.0, name="ScaledTanh"):
    """``a * tanh(b * x)`` elementwise; x: any float blob; returns a blob of the same shape."""
    return (flow.user_op_builder(name).Op("scaled_tanh").Input("x", [x]).Output("y")
            .Attr("a", a).Attr("b", b).Build().InferAndTryRun().RemoteBlobList()[0])
