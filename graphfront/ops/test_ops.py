"""OneFlow's framework test ops (``oneflow/user/ops/test_ops.cpp`` and
``oneflow/user/kernels/test_kernels.cpp`` at v0.6.0), which OneFlow's own framework
tests build with ``flow.user_op_builder``. Registered when :mod:`graphfront.unittest` is
imported (``import graphfront`` does).

=================================================  =============================================
op (inputs -> outputs; attrs)                      computes
=================================================  =============================================
``ccrelu`` (in -> out)                             ``relu(in)``; grad ``ccrelu_grad``
                                                   (y, dy -> dx) = ``dy * (y > 0)``
``cpu_only_relu_test`` (in -> out)                 ``relu(in)``, float32; a CPU kernel only, so
                                                   it runs on the CPU under any placement
``TestReshape`` (in -> out; shape)                 ``in`` reshaped to attr ``shape`` (same rank
                                                   and element count)
``TestSource`` (-> out)                            float32 ``[0, 1, 2, 3, 4]``
``TestDynamicSource`` (-> out)                     dynamic float32 (5,) holding ``[0, 1, 2]``
``TestRandomSource`` (-> out; seed)                float32 (5,) uniform in [0, 1): the words of
                                                   ``std::mt19937(seed)`` / 2**32, the stream
                                                   going on across runs (OneFlow's values)
``TestSourceMultiGpuFixedOutNum`` (-> out;         float32, split along axis 0: each of the n
out_num)                                           devices holds ``[0 .. out_num/n - 1]``
``TestMultiOutputOrder`` (in -> out1, out2)        ``out1 = in``; ``out2`` zeros, last dim
                                                   doubled
``TestMultiInput`` (x1, x2 -> y)                   ``y = x1``; grad ``TestMultiInputGrad``
                                                   (x1, x2, y_diff -> x1_diff, x2_diff): ones
                                                   and twos (OneFlow's fixed test values)
``TestDataTypeAttr`` (in -> out; output_type)      ``in`` cast to ``output_type``
``TestListDataTypeAndListShapeAndListString        zeros of ``out_shapes[i]`` / ``out_types[i]``
Attr`` (in -> out*; out_shapes, out_types,         for each output; ``string_list`` must be
string_list)                                       non-empty
``test_user_op_attr_auto_type`` (in -> out;        ``out = in`` (exercises attr type inference)
int1, int2)
=================================================  =============================================
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.common import balanced_range, like, numel
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


def _float32_source(shape, dynamic=False):
    return lambda ctx: ctx.set_output("out", shape(ctx), _dt.float32, is_dynamic=dynamic)


def _arange(n, k):
    return lambda: torch.arange(n, dtype=torch.float32, device=k.device)


def _arange_xla(n):
    return lambda: xla_rules.jnp().arange(n, dtype="float32")


def _relu_xla(k):
    return xla_rules.jnp_fn("nn.relu")


# SBP: OneFlow's test ops declare the batch split (S(0)) of ccrelu, ccrelu_grad, cpu_only_relu_test,
# TestMultiOutputOrder, and splits on every axis of TestMultiInput(Grad); the elementwise ones
# here take every rule of their kind (relu, relu_grad, identity, cast)
op("ccrelu", inputs=["in"], outputs=["out"], infer=like("in"), kernel=lambda k: torch.relu, xla=_relu_xla,
   onnx=onnx_rules.same("Relu"), sbp=_sbp.elementwise(),
   grad=lambda g: g.set_grad("in", g.emit("ccrelu_grad", {"y": g.output("out"), "dy": g.dout("out")})),
   doc="relu (OneFlow's framework test op)")
op("ccrelu_grad", inputs=["y", "dy"], outputs=["dx"],
   infer=lambda ctx: (ctx.check(ctx.input("dy").shape == ctx.input("y").shape,
                                f"input 'dy' expected shape {ctx.input('y').shape}, received {ctx.input('dy').shape}"),
                      ctx.set_output("dx", ctx.input("y").shape, ctx.input("y").dtype)),
   kernel=lambda k: (lambda y, dy: dy * (y > 0)), xla=lambda k: (lambda y, dy: dy * (y > 0)),
   doc="gradient of ccrelu", sbp=_sbp.elementwise(p_each=("dy",)),
   onnx=onnx_rules.grad(lambda c, y, dy, out, d: c.node("Mul", [dy, c.node("Cast", [
       c.node("Greater", [y, onnx_rules.const_as(c, 0, d)])], to=c.dtype_code(d.dtype))], [out]), "y"))


def _cpu_relu_infer(ctx):
    ctx.check(ctx.input("in").dtype is _dt.float32,
              f"input 'in' expected float32, received {ctx.input('in').dtype.name}")
    like("in")(ctx)


def _cpu_relu_kernel(k):
    if k.device.type != "cpu":
        raise RuntimeError(f"op '{k.op_name}' (cpu_only_relu_test) has only a CPU kernel, placed on {k.device}")
    return torch.relu


op("cpu_only_relu_test", inputs=["in"], outputs=["out"], infer=_cpu_relu_infer, kernel=_cpu_relu_kernel,
   xla=_relu_xla, cpu_only=True, onnx=onnx_rules.same("Relu"), sbp=_sbp.elementwise(),
   doc="relu with a CPU kernel only: placed on the CPU under any placement scope")


def _test_reshape_infer(ctx):
    x, shape = ctx.input("in"), tuple(ctx.attr("shape"))
    ctx.check(len(shape) == len(x.shape), f"attr 'shape' {shape} must have the rank of input 'in' {x.shape}")
    ctx.check(numel(shape) == numel(x.shape), f"attr 'shape' {shape} must have the element count of input 'in' "
                                              f"{x.shape}")
    ctx.set_output("out", shape, x.dtype)


op("TestReshape", inputs=["in"], outputs=["out"], attrs={"shape": "shape"}, infer=_test_reshape_infer,
   kernel=lambda k: (lambda x, s=tuple(k.attr("shape")): x.reshape(s)),
   xla=lambda k: (lambda x, s=tuple(k.attr("shape")): x.reshape(s)), doc="reshape (framework test op)",
   onnx=lambda c: c.node("Reshape", [c.input("in"), c.const(onnx_rules.int64s(c.attr("shape")))], [c.output("out")]))


def _arange_onnx(c):
    """The logical output: [0 .. m - 1] on each of the op's devices, ``m`` the length of its
    part of the ``n`` elements split along axis 0 (the first ``n % devices`` one longer),
    concatenated."""
    n, devices = c.output_desc("out").shape[0], c.parallel_num
    return np.concatenate([np.arange(len(balanced_range(n, devices, i)), dtype=np.float32) for i in range(devices)])


def _filled_onnx(c, out, value, i=0):
    """Output ``out`` (index ``i``) as a constant: ``value`` in its shape and dtype."""
    d = c.output_desc(out, i)
    c.node("Identity", [c.const(np.full(d.shape, value, dtype=onnx_rules.np_dtype(d)))], [c.output(out, i)])


def _identity_onnx(in_arg, out_arg):
    return lambda c: c.node("Identity", [c.input(in_arg)], [c.output(out_arg)])

op("TestSource", outputs=["out"], infer=_float32_source(lambda ctx: (5,)), kernel=lambda k: _arange(5, k),
   xla=lambda k: _arange_xla(5), onnx=onnx_rules.constant_output(_arange_onnx),
   no_grad=True, doc="float32 [0, 1, 2, 3, 4]")
op("TestDynamicSource", outputs=["out"], infer=_float32_source(lambda ctx: (5,), dynamic=True),
   kernel=lambda k: _arange(3, k), no_grad=True, doc="dynamic (5,) blob holding [0, 1, 2]")
op("TestSourceMultiGpuFixedOutNum", outputs=["out"], attrs={"out_num": ("int64", 0)},
   infer=_float32_source(lambda ctx: (ctx.attr("out_num"),)), kernel=lambda k: _arange(k.output("out").shape[0], k),
   xla=lambda k: _arange_xla(k.output("out").shape[0]), onnx=onnx_rules.constant_output(_arange_onnx),
   sbp=lambda ctx: _sbp.Only([{"out": _sbp.split(0)}]), no_grad=True,
   doc="split along axis 0: each of the n devices holds [0 .. m - 1], m its part of out_num")


def _random_source_kernel(k):
    # OneFlow's kernel draws std::uniform_real_distribution<float> from std::mt19937(seed):
    # each sample is one 32-bit MT19937 word / 2**32 rounded to float32, kept below 1. numpy's
    # legacy RandomState(seed) seeds MT19937 the same way, and its full-range uint32 draws are
    # those words.
    words = np.random.RandomState(k.attr("seed") & 0xFFFF_FFFF)
    below_one = np.nextafter(np.float32(1), np.float32(0))

    def test_random_source():
        u = words.randint(0, 2 ** 32, size=5, dtype=np.uint32).astype(np.float32) / np.float32(2 ** 32)
        return torch.from_numpy(np.minimum(u, below_one)).to(k.device)
    return test_random_source


op("TestRandomSource", outputs=["out"], attrs={"seed": ("int64", 0)}, infer=_float32_source(lambda ctx: (5,)),
   kernel=_random_source_kernel, no_grad=True, random=True, host_reads=True,
   doc="float32 (5,) uniform samples in [0, 1): std::mt19937(seed) words / 2**32, the stream going on across runs")


def _multi_output_infer(ctx):
    x = ctx.input("in")
    ctx.check(len(x.shape) >= 1, "input 'in' must have rank >= 1")
    ctx.set_output("out1", x.shape, x.dtype)
    ctx.set_output("out2", x.shape[:-1] + (x.shape[-1] * 2,), x.dtype)


op("TestMultiOutputOrder", inputs=["in"], outputs=["out1", "out2"], infer=_multi_output_infer,
   kernel=lambda k: (lambda x: (x.clone(), x.new_zeros(x.shape[:-1] + (x.shape[-1] * 2,)))), no_grad=True,
   xla=lambda k: (lambda x: (x, xla_rules.jnp().zeros(x.shape[:-1] + (x.shape[-1] * 2,), x.dtype))),
   onnx=lambda c: (_identity_onnx("in", "out1")(c), _filled_onnx(c, "out2", 0)), sbp=_sbp.batch(),
   doc="out1 = in, out2 = zeros with the last dim doubled")


def _multi_input_infer(ctx):
    x1, x2 = ctx.input("x1"), ctx.input("x2")
    ctx.check(x1.shape == x2.shape, f"inputs 'x1' {x1.shape} and 'x2' {x2.shape} must have the same shape")
    ctx.set_output("y", x1.shape, x1.dtype)


def _multi_input_grad(g):
    out = g.emit("TestMultiInputGrad", {"x1": g.input("x1"), "x2": g.input("x2"), "y_diff": g.dout("y")})
    for arg in ("x1", "x2"):
        if g.needs(arg):
            g.set_grad(arg, out[f"{arg}_diff"])


_EVERY_AXIS = _sbp.independent(lambda ctx: range(ctx.ndim("x1")))
op("TestMultiInput", inputs=["x1", "x2"], outputs=["y"], infer=_multi_input_infer, sbp=_EVERY_AXIS,
   kernel=lambda k: (lambda x1, x2: x1.clone()), xla=lambda k: (lambda x1, x2: x1), grad=_multi_input_grad,
   onnx=_identity_onnx("x1", "y"),
   doc="y = x1 (framework test op)")
op("TestMultiInputGrad", inputs=["x1", "x2", "y_diff"], outputs=["x1_diff", "x2_diff"], sbp=_EVERY_AXIS,
   infer=lambda ctx: (ctx.set_output("x1_diff", ctx.input("x1").shape, ctx.input("x1").dtype),
                      ctx.set_output("x2_diff", ctx.input("x2").shape, ctx.input("x2").dtype)),
   kernel=lambda k: (lambda x1, x2, dy: (torch.ones_like(x1), torch.full_like(x2, 2.0))),
   xla=lambda k: (lambda x1, x2, dy: (xla_rules.jnp().ones_like(x1), xla_rules.jnp().full_like(x2, 2.0))),
   onnx=lambda c: (_filled_onnx(c, "x1_diff", 1), _filled_onnx(c, "x2_diff", 2)),
   doc="fixed test gradients: ones for x1, twos for x2")

op("TestDataTypeAttr", inputs=["in"], outputs=["out"], attrs={"output_type": ("dtype", None)},
   infer=lambda ctx: (ctx.check(ctx.attr("output_type") is not None, "attr 'output_type' is required"),
                      ctx.set_output("out", ctx.input("in").shape, ctx.attr("output_type"))),
   kernel=lambda k: (lambda x, t=k.attr("output_type").torch: x.to(t)), no_grad=True,
   sbp=_sbp.elementwise(p_all=True, p_int=False),
   xla=lambda k: (lambda x, t=k.attr("output_type").np: x.astype(t)),
   onnx=lambda c: c.node("Cast", [c.input("in")], [c.output("out")], to=c.dtype_code(c.attr("output_type"))),
   doc="in cast to attr output_type")


def _list_attr_infer(ctx):
    shapes, types = ctx.attr("out_shapes"), ctx.attr("out_types")
    n = ctx.output_count("out")
    ctx.check(len(shapes) >= n and len(types) >= n,
              f"attrs 'out_shapes' and 'out_types' need an entry for each of the {n} outputs, received "
              f"{len(shapes)} and {len(types)}")
    ctx.check(len(ctx.attr("string_list")) > 0, "attr 'string_list' must not be empty")
    for i in range(n):
        ctx.set_output("out", shapes[i], types[i], i=i)


def _list_attr_kernel(k):
    specs = list(zip(k.attr("out_shapes"), k.attr("out_types")))[:k.output_count("out")]
    return lambda x: [torch.zeros(s, dtype=t.torch, device=k.device) for s, t in specs]


def _list_attr_xla(k):
    specs = list(zip(k.attr("out_shapes"), k.attr("out_types")))[:k.output_count("out")]
    return lambda x: [xla_rules.jnp().zeros(tuple(s), t.np) for s, t in specs]


op("TestListDataTypeAndListShapeAndListStringAttr", inputs=["in"], outputs=["out*"],
   attrs={"out_shapes": "list_shape", "out_types": "list_dtype", "string_list": "list_string"},
   infer=_list_attr_infer, kernel=_list_attr_kernel, xla=_list_attr_xla, no_grad=True,
   onnx=lambda c: [_filled_onnx(c, "out", 0, i) for i in range(len(c.all_outputs()))],
   doc="zeros of each (out_shapes[i], out_types[i]) (list attr test op)")

op("test_user_op_attr_auto_type", inputs=["in"], outputs=["out"],
   attrs={"int1": ("int32", 0), "int2": ("int32", 0)}, infer=like("in"), kernel=lambda k: (lambda x: x.clone()),
   xla=lambda k: (lambda x: x), no_grad=True, onnx=_identity_onnx("in", "out"), sbp=_sbp.elementwise(p_all=True),
   doc="out = in (attr type test op)")
