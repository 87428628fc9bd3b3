"""Normalization ops: ``normalization`` (batch norm), ``layer_norm`` and their grads
(``l2_normalize`` lives with the reductions in ``reduce_ops.py``).

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/normalization_op.cpp``, ``oneflow/user/ops/layer_norm_op.cpp``).

Batch-norm statistics, as OneFlow (cuDNN) computes them:

* the output is normalized with the *biased* batch variance,
  ``y = (x - mean) * rsqrt(var + epsilon) * gamma + beta``;
* with ``training`` the moving statistics are updated in place with ``momentum`` as the
  *keep* ratio: ``moving = moving * momentum + batch * (1 - momentum)`` — PyTorch's
  ``momentum`` is ``1 - keep`` — and the moving variance takes the *unbiased* batch
  variance (``var * n / (n - 1)``, n = elements per channel), as cuDNN and PyTorch do;
* ``mean`` and ``inv_variance`` outputs are the batch mean and ``rsqrt(var + epsilon)``.
"""
from __future__ import annotations

import functools

import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import JobBuildError, format_location
from graphfront.ops import common
from graphfront.ops.common import in_layout_of, numel
from graphfront.ops import xla_rules
from graphfront.ops.onnx_rules import const_as, int64s, reduce_node
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


def _float(ctx, arg):
    d = ctx.input(arg)
    ctx.check(d.dtype.is_floating_point, f"input '{arg}' expected a floating dtype, received {d.dtype.name}")
    return d


def param_dtype(dtype):
    """Dtype of batch-norm parameters and statistics for an input dtype (float32 for
    float16 and bfloat16, as OneFlow's ``oneflow/user/ops/normalization_op.cpp``)."""
    return _dt.float32 if dtype in (_dt.float16, _dt.bfloat16) else dtype


# ------------------------------------------------------------------ normalization (batch norm)

NORM_ATTRS = {"axis": ("int32", 0), "epsilon": ("float", 0.0), "training": ("bool", False),
              "momentum": ("float", 0.0)}


def _norm_infer(ctx):
    x = _float(ctx, "x")
    axis = ctx.attr("axis")
    ctx.check(0 <= axis < len(x.shape), f"attr 'axis' {axis} is out of range for input 'x' of shape {x.shape}")
    c = x.shape[axis]
    pdtype = param_dtype(x.dtype)
    for a in ("moving_mean", "moving_variance", "gamma", "beta"):
        if ctx.has_input(a):
            d = ctx.input(a)
            ctx.check(d.shape == (c,), f"input '{a}' expected shape {(c,)} (dim {axis} of input 'x' {x.shape}), "
                                       f"received {d.shape}")
            ctx.check(d.dtype is pdtype, f"input '{a}' expected dtype {pdtype.name}, received {d.dtype.name}")
    ctx.check(ctx.has_input("moving_mean") == ctx.has_input("moving_variance"),
              "inputs 'moving_mean' and 'moving_variance' must be given together")
    ctx.check(ctx.attr("training") or ctx.has_input("moving_mean"),
              "attr 'training' is false, so inputs 'moving_mean' and 'moving_variance' are required")
    for a in ("_add_to_output", "addend"):
        if ctx.has_input(a):
            d = ctx.input(a)
            ctx.check(d.shape == x.shape and d.dtype is x.dtype,
                      f"input '{a}' expected {x.dtype.name} {x.shape} (as input 'x'), received {d.dtype.name} {d.shape}")
    ctx.set_output("y", x.shape, x.dtype)
    ctx.set_output("mean", (c,), pdtype)
    ctx.set_output("inv_variance", (c,), pdtype)


def _channel_view(ndim, axis):
    view = [1] * ndim
    view[axis] = -1
    return view


def _cudnn_fits(x, gamma, beta, moving_mean, moving_variance, training, eps):
    """Whether ``torch.batch_norm`` would run this batch norm on cuDNN
    (``torch._C._select_batch_norm_backend``: a CUDA input, float32 parameters, cuDNN's
    minimum epsilon, ...). Never inside ``torch.compile``, whose own batch-norm lowering is
    kept."""
    if x.device.type != "cuda" or torch.compiler.is_compiling():
        return False
    running = (moving_mean, moving_variance) if moving_mean is not None else (gamma, gamma)
    return torch._C._select_batch_norm_backend(x, gamma, beta, *running, training, eps) \
        == torch._C._BatchNormBackend.Cudnn


def _first_call_choice(decide):
    """``choose(*args)``: ``decide(*args)`` at the first call, the same answer after it (an
    op's shapes, dtypes and device never change between its steps). A traced step (the
    native lowering) decides each time it is traced: a list filled while Dynamo traces
    makes it trace the step again at the next call."""
    memo = []

    def choose(*args):
        if torch.compiler.is_compiling():
            return decide(*args)
        if not memo:
            memo.append(decide(*args))
        return memo[0]
    return choose


# cuDNN's training kernels may keep data for the backward in a "reserve space" (its size
# depends on the layout and the card). OneFlow's ``normalization`` passes only ``mean`` and
# ``inv_variance`` to ``normalization_grad`` (cuDNN's saved mean and inverse standard
# deviation, ``oneflow/user/kernels/normalization_kernel.cu``), so the reserve rides along
# as this attribute of the ``mean`` tensor; a ``mean`` without it (copied on the way) gets
# PyTorch's own backward, which needs no reserve.
_RESERVE = "cudnn_reserve"


def _norm_kernel(k):
    """Batch norm in PyTorch's fused kernels with the channel axis moved to dim 1 as a view:
    cuDNN's (``torch.ops.aten.cudnn_batch_norm``, its persistent NHWC kernels for
    channels-last float16) where ``torch.batch_norm`` would take it, else
    ``torch.native_batch_norm`` (one statistics pass and one normalizing pass, keeping
    channels-last layouts). float16/bfloat16 inputs take float32 parameters and statistics
    directly (no float32 copy of ``x``)."""
    x_desc = k.input("x")
    ndim, axis = len(x_desc.shape), k.attr("axis")
    eps, momentum, training = k.attr("epsilon"), k.attr("momentum"), k.attr("training")
    n = numel(x_desc.shape) // max(x_desc.shape[axis], 1)
    if ndim < 2 or (training and n < 2):
        return _norm_formula(k)
    want_stats = k.has_output("mean") or k.has_output("inv_variance")
    use_cudnn = _first_call_choice(_cudnn_fits)

    def normalization(x, moving_mean, moving_variance, gamma, beta, add_to):
        xc = x if axis == 1 else x.movedim(axis, 1)
        # PyTorch's momentum is the weight of the batch statistic: 1 - OneFlow's keep ratio
        if use_cudnn(xc, gamma, beta, moving_mean, moving_variance, training, eps):
            # cuDNN takes only dense inputs (contiguous in their suggested layout), which the
            # moved channel axis of a batch norm on another axis is not
            y, mean, inv, reserve = torch.ops.aten.cudnn_batch_norm(in_layout_of(xc, xc), gamma, beta, moving_mean,
                                                                    moving_variance, training, 1.0 - momentum, eps)
            if training and reserve.numel():
                setattr(mean, _RESERVE, reserve)
        else:
            y, mean, inv = torch.native_batch_norm(xc, gamma, beta, moving_mean, moving_variance, training,
                                                   1.0 - momentum, eps)
        if axis != 1:
            y = y.movedim(1, axis)
        if add_to is not None:
            y = y + add_to
        if not want_stats:
            return y, None, None
        if not training:
            mean, inv = moving_mean.clone(), torch.rsqrt(moving_variance + eps)
        return y, mean, inv
    return normalization


def _norm_formula(k):
    """The batch-norm formulas of the module docstring, op by op: for a rank-1 input and
    for a training batch of one element per channel (whose unbiased variance would divide
    by zero in PyTorch's kernel; here the moving variance takes the biased one)."""
    x_desc = k.input("x")
    ndim, axis = len(x_desc.shape), k.attr("axis")
    eps, momentum, training = k.attr("epsilon"), k.attr("momentum"), k.attr("training")
    axes = [d for d in range(ndim) if d != axis]
    view = _channel_view(ndim, axis)
    n = numel(x_desc.shape) // max(x_desc.shape[axis], 1)
    unbias = n / max(n - 1, 1)
    want_stats = k.has_output("mean") or k.has_output("inv_variance")
    pdtype = param_dtype(x_desc.dtype).torch

    def normalization(x, moving_mean, moving_variance, gamma, beta, add_to):
        xf = x.to(pdtype)
        if training:
            var, mean = torch.var_mean(xf, dim=axes, unbiased=False)
            inv = torch.rsqrt(var + eps)
            if moving_mean is not None:  # in-place update of the moving statistics
                moving_mean.mul_(momentum).add_(mean, alpha=1.0 - momentum)
                moving_variance.mul_(momentum).add_(var * unbias, alpha=1.0 - momentum)
        else:
            mean, inv = moving_mean, torch.rsqrt(moving_variance + eps)
        y = (xf - mean.view(view)) * (inv * gamma).view(view) + beta.view(view)
        y = y.to(x.dtype)
        if add_to is not None:
            y = y + add_to
        if not want_stats:
            return y, None, None
        return y, (mean if training else mean.clone()), inv
    return normalization


def _norm_grad(g):
    """OneFlow's wiring: training -> one ``normalization_grad`` fed the batch statistics;
    inference -> ``normalization_grad`` fed the moving statistics for gamma/beta, and
    dx = dy * gamma * rsqrt(moving_variance + epsilon) via reshape + broadcast_mul."""
    dy = g.dout("y")
    if dy is None:
        return
    name = g.op_name
    if g.needs("_add_to_output"):
        g.set_grad("_add_to_output", dy)
    attrs = {"axis": g.attr("axis"), "epsilon": g.attr("epsilon")}
    ins = {"x": g.input("x"), "dy": dy, "gamma": g.input("gamma")}
    if g.attr("training"):
        if not (g.outputs("mean") and g.outputs("inv_variance")):
            raise JobBuildError(f"op '{name}' (normalization): a training batch norm needs its outputs 'mean' and "
                                f"'inv_variance' to be differentiated; add them to the op"
                                f"{format_location(g.builder.locations.get(name))}")
        if not any(g.needs(a) for a in ("x", "gamma", "beta")):
            return
        outs = g.emit("normalization_grad", {**ins, "mean": g.output("mean"),
                                             "inv_variance": g.output("inv_variance")},
                      attrs, outputs=["gamma_diff", "beta_diff", "dx"])
        for arg, out in (("x", "dx"), ("gamma", "gamma_diff"), ("beta", "beta_diff")):
            if g.needs(arg):
                g.set_grad(arg, outs[out])
        return
    if not any(g.needs(a) for a in ("x", "gamma", "beta")):
        return
    var_eps = g.emit("scalar_add", {"in": g.input("moving_variance")},
                     {"has_float_operand": True, "float_operand": attrs["epsilon"]},
                     name=f"System-AutoGrad-{name}-VarianceAddEpsilon")
    inv = g.emit("rsqrt", {"x": var_eps}, name=f"System-AutoGrad-{name}-VarianceRsqrt")
    if g.needs("gamma") or g.needs("beta"):
        outs = g.emit("normalization_grad", {**ins, "mean": g.input("moving_mean"), "inv_variance": inv}, attrs,
                      outputs=["gamma_diff", "beta_diff", "dx"])
        for arg, out in (("gamma", "gamma_diff"), ("beta", "beta_diff")):
            if g.needs(arg):
                g.set_grad(arg, outs[out])
    if g.needs("x"):
        x_shape = g.desc(g.input("x")).shape
        shape = [1] * len(x_shape)
        shape[attrs["axis"]] = x_shape[attrs["axis"]]
        t = dy
        for what, blob in (("gamma", g.input("gamma")), ("inv_var", inv)):
            r = g.emit("reshape", {"in": blob}, {"shape": shape},
                       name=f"System-AutoGrad-{name}_out_grad_mul_{what}-Reshape")
            if g.desc(r).dtype is not g.desc(dy).dtype:  # float32 statistics of a float16 x
                r = g.emit("cast", {"in": r}, {"dtype": g.desc(dy).dtype},
                           name=f"System-AutoGrad-{name}_out_grad_mul_{what}-Cast")
            t = g.emit("broadcast_mul", {"x": t, "y": r},
                       name=f"System-AutoGrad-{name}_out_grad_mul_{what}-BroadcastMul")
        g.set_grad("x", t)


def _norm_onnx(c):
    if c.attr("training") or not c.has_input("moving_mean"):
        c.fail("only inference batch normalization (training=False, with moving statistics) can be exported")
    if c.attr("axis") != 1 or c.has_input("_add_to_output"):
        c.fail("only axis=1 without '_add_to_output' can be exported (ONNX BatchNormalization is NCHW)")
    c.node("BatchNormalization", [c.input(a) for a in ("x", "gamma", "beta", "moving_mean", "moving_variance")],
           [c.output("y")], epsilon=c.attr("epsilon"))


def _norm_xla(k):
    """The kernel's formulas over jax arrays; in training it returns ``((y, mean, inv),
    (new_moving_mean, new_moving_variance))`` (the moving statistics it updates)."""
    jnp = xla_rules.jnp()
    x_desc = k.input("x")
    ndim, axis = len(x_desc.shape), k.attr("axis")
    eps, momentum, training = k.attr("epsilon"), k.attr("momentum"), k.attr("training")
    axes = tuple(d for d in range(ndim) if d != axis)
    view = _channel_view(ndim, axis)
    n = numel(x_desc.shape) // max(x_desc.shape[axis], 1)
    unbias = n / max(n - 1, 1)
    pdtype = param_dtype(x_desc.dtype).np

    def normalization(x, moving_mean, moving_variance, gamma, beta, add_to):
        xf = x.astype(pdtype)
        if training:
            mean = xf.mean(axis=axes)
            var = jnp.square(xf - mean.reshape(view)).mean(axis=axes)
            inv = 1.0 / jnp.sqrt(var + eps)
        else:
            mean, inv = moving_mean, 1.0 / jnp.sqrt(moving_variance + eps)
        y = ((xf - mean.reshape(view)) * (inv * gamma).reshape(view) + beta.reshape(view)).astype(x.dtype)
        if add_to is not None:
            y = y + add_to
        if not training:
            return y, mean, inv
        updates = (None, None)
        if moving_mean is not None:
            updates = (moving_mean * momentum + mean * (1.0 - momentum),
                       moving_variance * momentum + var * unbias * (1.0 - momentum))
        return (y, mean, inv), updates
    return normalization


#: batch norm's and its gradient's args split along the batch axis (the others broadcast;
#: gamma_diff / beta_diff partial sums)
_NORM_SPLIT = ("x", "y", "dy", "dy_addend", "dx", "_add_to_output", "addend", "addend_diff", "reserve_space")


def _norm_sbp(ctx):
    """OneFlow's layout of ``normalization`` and ``normalization_grad`` on several devices
    (``oneflow/user/ops/normalization_op.cpp``, ``FwGetSbpFn`` / ``BwGetSbpFn``): the
    activations and their gradients split along the batch axis, the moving statistics,
    gamma, beta and the batch statistics ``mean`` / ``inv_variance`` broadcast,
    ``gamma_diff`` / ``beta_diff`` partial sums. Each device normalizes its part of the
    batch with its own part's statistics and updates its copy of the moving statistics
    with them (OneFlow's batch norm is not synchronized across devices); a checkpoint
    keeps the first device's moving statistics. ``normalization_add_relu``'s
    ``reserve_space`` (32 elements a word) splits with its ``x`` where each device's part of
    ``x`` fills whole words, else the op runs whole on each device (the statistics of the
    whole batch; ``fuse_normalization_add_relu`` fuses only where the parts fill whole words)."""
    if ctx.attr("axis") == 0:
        return []
    if ctx.has("reserve_space"):
        x, n = ctx.shape("x"), ctx.parallel_num
        if x[0] % n or (numel(x) // n) % 32:
            return []
    return [{a: _sbp.split(0) if a in _NORM_SPLIT else _sbp.P if a in ("gamma_diff", "beta_diff") else _sbp.B
             for a in ctx.args}]


op("normalization", inputs=["x", "moving_mean?", "moving_variance?", "gamma", "beta", "_add_to_output?"],
   outputs=["y", "mean?", "inv_variance?"], attrs=NORM_ATTRS, infer=_norm_infer, kernel=_norm_kernel, onnx=_norm_onnx,
   xla=_norm_xla,
   grad=_norm_grad, mutates=lambda attrs: ("moving_mean", "moving_variance") if attrs["training"] else (),
   sbp=_norm_sbp, doc="batch normalization over every axis but 'axis' (see module docstring)",
   amp="gray", amp_no_cast=("beta", "gamma", "moving_mean", "moving_variance"))


def _norm_grad_infer(ctx):
    x, dy = ctx.input("x"), ctx.input("dy")
    axis = ctx.attr("axis")
    ctx.check(0 <= axis < len(x.shape), f"attr 'axis' {axis} is out of range for input 'x' of shape {x.shape}")
    ctx.check(dy.shape == x.shape, f"input 'dy' expected shape {x.shape} (as 'x'), received {dy.shape}")
    c = x.shape[axis]
    for a in ("mean", "inv_variance", "gamma"):
        ctx.check(ctx.input(a).shape == (c,), f"input '{a}' expected shape {(c,)}, received {ctx.input(a).shape}")
    pdtype = param_dtype(x.dtype)
    ctx.set_output("gamma_diff", (c,), pdtype)
    ctx.set_output("beta_diff", (c,), pdtype)
    ctx.set_output("dx", x.shape, x.dtype)


def _norm_grad_fn(k, pdtype, cast):
    """``normalization_grad`` over torch tensors or jax arrays (both take ``reshape`` and
    ``sum(axis=...)``): ``cast(array, dtype)`` converts, ``pdtype`` is the parameter dtype."""
    x_desc = k.input("x")
    ndim, axis = len(x_desc.shape), k.attr("axis")
    axes = tuple(d for d in range(ndim) if d != axis)
    view = _channel_view(ndim, axis)
    n = numel(x_desc.shape) // max(x_desc.shape[axis], 1)

    def normalization_grad(x, dy, mean, inv_variance, gamma):
        xf, dyf = cast(x, pdtype), cast(dy, pdtype)
        inv = inv_variance.reshape(view)
        xhat = (xf - mean.reshape(view)) * inv
        beta_diff = dyf.sum(axis=axes)
        gamma_diff = (dyf * xhat).sum(axis=axes)
        dx = (gamma.reshape(view) * inv / n) * (n * dyf - beta_diff.reshape(view) - xhat * gamma_diff.reshape(view))
        return gamma_diff, beta_diff, cast(dx, x.dtype)
    return normalization_grad


def _norm_grad_kernel(k):
    """PyTorch's fused batch-norm backward with the given batch statistics (the formula
    above in two passes), channel axis moved to dim 1: cuDNN's
    (``torch.ops.aten.cudnn_batch_norm_backward``) where the forward takes cuDNN and its
    reserve space (if it needs one) came with ``mean``, else ``native_batch_norm_backward``."""
    x_desc = k.input("x")
    if len(x_desc.shape) < 2:
        return _norm_grad_fn(k, param_dtype(x_desc.dtype).torch, lambda t, dtype: t.to(dtype))
    axis, eps = k.attr("axis"), k.attr("epsilon")
    backward = torch.ops.aten.native_batch_norm_backward

    def cudnn_reserve_size(xc, gamma):
        """None where cuDNN does not take this batch norm, else its reserve space in bytes."""
        if not _cudnn_fits(xc, gamma, gamma, None, None, True, eps):
            return None
        return torch._C._get_cudnn_batch_norm_reserve_space_size(xc, True)
    reserve_size = _first_call_choice(cudnn_reserve_size)

    def normalization_grad(x, dy, mean, inv_variance, gamma):
        xc, dyc = (x, dy) if axis == 1 else (x.movedim(axis, 1), dy.movedim(axis, 1))
        size = reserve_size(xc, gamma)
        if size is None:
            reserve = None
        else:
            reserve = getattr(mean, _RESERVE, None) if size else xc.new_empty(0, dtype=torch.uint8)
        if reserve is not None:
            xc = in_layout_of(xc, xc)   # cuDNN's dense input, as in the forward
            dx, gamma_diff, beta_diff = torch.ops.aten.cudnn_batch_norm_backward(
                xc, in_layout_of(dyc, xc), gamma, None, None, mean, inv_variance, eps, reserve)
        else:
            dx, gamma_diff, beta_diff = backward(in_layout_of(dyc, xc), xc, gamma, None, None, mean, inv_variance,
                                                 True, eps, [True, True, True])
        return gamma_diff, beta_diff, dx if axis == 1 else dx.movedim(1, axis)
    return normalization_grad


def _norm_grad_xla(k):
    return _norm_grad_fn(k, param_dtype(k.input("x").dtype).np, lambda a, dtype: a.astype(dtype))


def _norm_grad_onnx(c):
    """The formula of :func:`_norm_grad_fn` (half types computed in the float32 parameter dtype)."""
    xd = c.input_desc("x")
    ndim, axis = len(xd.shape), c.attr("axis")
    axes = [i for i in range(ndim) if i != axis]
    n = numel(xd.shape) // max(xd.shape[axis], 1)
    pd = param_dtype(xd.dtype)
    x, dy = c.input("x"), c.input("dy")
    if pd is not xd.dtype:
        x, dy = (c.node("Cast", [v], to=c.dtype_code(pd)) for v in (x, dy))
    pdesc = c.input_desc("gamma")
    view = c.const(int64s(_channel_view(ndim, axis)))
    inv = c.node("Reshape", [c.input("inv_variance"), view])
    xhat = c.node("Mul", [c.node("Sub", [x, c.node("Reshape", [c.input("mean"), view])]), inv])
    beta_diff = reduce_node(c, "ReduceSum", dy, axes, 0, c.output("beta_diff"))
    gamma_diff = reduce_node(c, "ReduceSum", c.node("Mul", [dy, xhat]), axes, 0, c.output("gamma_diff"))
    scale = c.node("Div", [c.node("Mul", [c.node("Reshape", [c.input("gamma"), view]), inv]), const_as(c, n, pdesc)])
    inner = c.node("Sub", [c.node("Sub", [c.node("Mul", [const_as(c, n, pdesc), dy]), c.node("Reshape", [beta_diff, view])]),
                           c.node("Mul", [xhat, c.node("Reshape", [gamma_diff, view])])])
    if pd is xd.dtype:
        c.node("Mul", [scale, inner], [c.output("dx")])
    else:
        c.node("Cast", [c.node("Mul", [scale, inner])], [c.output("dx")], to=c.dtype_code(xd.dtype))


op("normalization_grad", inputs=["x", "dy", "mean", "inv_variance", "gamma"],
   outputs=["gamma_diff", "beta_diff", "dx"], attrs={"axis": ("int32", 0), "epsilon": ("float", 0.0)},
   infer=_norm_grad_infer, kernel=_norm_grad_kernel, xla=_norm_grad_xla, onnx=_norm_grad_onnx, sbp=_norm_sbp,
   doc="batch-norm backward with batch statistics: dx = gamma * inv / n * (n dy - sum dy - xhat sum(dy xhat))",
   amp_no_cast=("gamma",))


# ------------------------------------------------------------------ normalization_add_relu
# relu(batch norm + addend) as one op (OneFlow's, ``oneflow/user/ops/normalization_op.cpp``),
# which ``fuse_normalization_add_relu`` (graphfront/passes/norm_add_relu.py) writes on GPU
# placements. On CUDA its forward and backward each run, per input signature, the faster at
# the first call of: the op compiled by TorchInductor into a statistics reduction and one
# fused pointwise pass (the residual add, the relu and its mask included), and PyTorch's
# (cuDNN's) batch-norm kernels with the add, the relu and its mask as one compiled kernel;
# elsewhere they run PyTorch's batch-norm kernels, then the add and the relu.

def _norm_add_relu_infer(ctx):
    _norm_infer(ctx)
    ctx.set_output("reserve_space", (-(-numel(ctx.input("x").shape) // 32),), _dt.int32)


def relu_bits(mask):
    """``normalization_add_relu``'s ``reserve_space``: bool ``mask`` packed 32 to an int32
    word, bit ``i`` of word ``j`` = element ``32 j + i`` of the flattened (C-order) mask,
    the last word zero-padded (OneFlow's layout, ``oneflow/user/kernels/normalization_kernel.cpp``)."""
    flat = mask.reshape(-1)
    words = torch.nn.functional.pad(flat.to(torch.int64), (0, -flat.numel() % 32)).view(-1, 32)
    v = (words << torch.arange(32, device=mask.device)).sum(1)
    return torch.where(v >= 2 ** 31, v - 2 ** 32, v).to(torch.int32)


def relu_mask(words, shape):
    """The bool mask of ``shape`` that :func:`relu_bits` packed into ``words``."""
    bits = (words.view(-1, 1) >> torch.arange(32, dtype=torch.int32, device=words.device)) & 1
    return bits.view(-1)[:numel(shape)].view(shape).bool()


def _add_relu_and_bits(y, addend):
    """``relu(y + addend)`` (``relu(y)`` without addend) and its mask packed by :func:`relu_bits`."""
    y = torch.relu(y if addend is None else y + addend)
    return y, relu_bits(y > 0)


def _with_add_relu(normalize, add_relu=_add_relu_and_bits):
    """``normalization_add_relu`` from a ``normalization`` kernel, then ``add_relu``
    (:func:`_add_relu_and_bits`, or a compiled one)."""
    def normalization_add_relu(x, addend, moving_mean, moving_variance, gamma, beta):
        y, mean, inv = normalize(x, moving_mean, moving_variance, gamma, beta, None)
        return (*add_relu(y, addend), mean, inv)
    return normalization_add_relu


def _norm_add_relu_kernel(k):
    """The faster for its inputs (:func:`~graphfront.ops.common.tuned_kernel`, on a GPU) of
    the whole op compiled by TorchInductor, and PyTorch's batch-norm kernels (cuDNN's where
    ``F.batch_norm`` takes them) followed by one compiled kernel adding the addend and
    writing the relu and its mask. Elsewhere: PyTorch's kernels, the add and the relu."""
    key = common.inductor_key(k)
    add_relu = common.inductor_kernel(("add_relu_and_bits",), _add_relu_and_bits, dynamic=True)
    library = _with_add_relu(_norm_kernel(k), add_relu)
    compiled = common.inductor_kernel(key, _with_add_relu(_norm_formula(k)), library)
    return common.tuned_kernel(key, [compiled, library], mutated=(2, 3))


def _norm_add_relu_xla(k):
    jnp, lax = xla_rules.jnp(), xla_rules.lax()
    normalize, training = _norm_xla(k), k.attr("training")

    def bits(mask):
        flat = mask.reshape(-1).astype(jnp.uint32)
        words = jnp.pad(flat, (0, -flat.size % 32)).reshape(-1, 32) << jnp.arange(32, dtype=jnp.uint32)
        return lax.bitcast_convert_type(words.sum(axis=1, dtype=jnp.uint32), jnp.int32)

    def normalization_add_relu(x, addend, moving_mean, moving_variance, gamma, beta):
        res = normalize(x, moving_mean, moving_variance, gamma, beta, addend)
        (y, mean, inv), updates = res if training else (res, None)
        y = jnp.maximum(y, 0)
        outs = (y, bits(y > 0), mean, inv)
        return (outs, updates) if training else outs
    return normalization_add_relu


def _norm_add_relu_grad(g):
    """One ``normalization_add_relu_grad`` fed the batch statistics, the relu mask in
    ``reserve_space``; ``addend_diff`` is the masked ``dy``."""
    dy = g.dout("y")
    if dy is None or not any(g.needs(a) for a in ("x", "gamma", "beta", "addend")):
        return
    name = g.op_name
    if not (g.attr("training") and g.outputs("mean") and g.outputs("inv_variance")):
        raise JobBuildError(f"op '{name}' (normalization_add_relu): only a training batch norm with its outputs "
                            f"'mean' and 'inv_variance' can be differentiated; build normalization, add_n and relu "
                            f"instead{format_location(g.builder.locations.get(name))}")
    ins = {"x": g.input("x"), "dy": dy, "mean": g.output("mean"), "inv_variance": g.output("inv_variance"),
           "gamma": g.input("gamma"), "beta": g.input("beta"), "reserve_space": g.output("reserve_space"),
           "y": g.output("y")}
    wants_addend = g.has_input("addend") and g.needs("addend")
    outs = g.emit("normalization_add_relu_grad", ins, {"axis": g.attr("axis"), "epsilon": g.attr("epsilon")},
                  outputs=["gamma_diff", "beta_diff", "dx"] + (["addend_diff"] if wants_addend else []))
    for arg, out in (("x", "dx"), ("gamma", "gamma_diff"), ("beta", "beta_diff"), ("addend", "addend_diff")):
        if g.needs(arg) and out in outs:
            g.set_grad(arg, outs[out])


op("normalization_add_relu", inputs=["x", "addend?", "moving_mean?", "moving_variance?", "gamma", "beta"],
   outputs=["y", "reserve_space", "mean?", "inv_variance?"], attrs=NORM_ATTRS, infer=_norm_add_relu_infer,
   kernel=_norm_add_relu_kernel, xla=_norm_add_relu_xla, grad=_norm_add_relu_grad,
   mutates=lambda attrs: ("moving_mean", "moving_variance") if attrs["training"] else (), sbp=_norm_sbp,
   amp="gray", amp_no_cast=("beta", "gamma", "moving_mean", "moving_variance"),
   doc="y = relu(normalization(x) + addend), reserve_space its relu mask packed 32 to an int32 word")


def _norm_add_relu_grad_infer(ctx):
    _norm_grad_infer(ctx)
    x = ctx.input("x")
    ctx.check(ctx.input("y").shape == x.shape, f"input 'y' expected shape {x.shape}, received {ctx.input('y').shape}")
    words = (-(-numel(x.shape) // 32),)
    rs = ctx.input("reserve_space")
    ctx.check(rs.shape == words and rs.dtype is _dt.int32,
              f"input 'reserve_space' expected int32 {words}, received {rs.dtype.name} {rs.shape}")
    common.same_shape(ctx, "dy", "dy_addend")
    common.same_dtype(ctx, "dy", "dy_addend")
    if ctx.has_output("addend_diff"):
        ctx.set_output("addend_diff", x.shape, x.dtype)


def _relu_masked(dy, dy_addend, reserve_space):
    """``dy`` (plus ``dy_addend`` where given) where the relu mask packed in ``reserve_space``
    (:func:`relu_bits`) is set, else 0."""
    return torch.where(relu_mask(reserve_space, dy.shape), dy if dy_addend is None else dy + dy_addend, 0.0)


def _with_relu_grad(k, normalize_grad, masked=_relu_masked):
    """``normalization_add_relu_grad`` from a ``normalization_grad`` kernel: ``dy`` (+
    ``dy_addend``) masked by the relu first (:func:`_relu_masked`, or a compiled one)."""
    wants_addend = k.has_output("addend_diff")

    def normalization_add_relu_grad(x, dy, mean, inv_variance, gamma, beta, reserve_space, y, dy_addend):
        dyr = masked(dy, dy_addend, reserve_space)
        gamma_diff, beta_diff, dx = normalize_grad(x, dyr, mean, inv_variance, gamma)
        return gamma_diff, beta_diff, dx, dyr if wants_addend else None
    return normalization_add_relu_grad


def _norm_add_relu_grad_kernel(k):
    """As :func:`_norm_add_relu_kernel`: the whole gradient compiled by TorchInductor, or the
    relu's mask applied by a compiled kernel, then PyTorch's batch-norm gradient kernels."""
    key, pdtype = common.inductor_key(k), param_dtype(k.input("x").dtype).torch
    masked = common.inductor_kernel(("relu_masked",), _relu_masked, dynamic=True)
    library = _with_relu_grad(k, _norm_grad_kernel(k), masked)
    compiled = common.inductor_kernel(key, _with_relu_grad(k, _norm_grad_fn(k, pdtype, lambda t, dtype: t.to(dtype))),
                                      library)
    return common.tuned_kernel(key, [compiled, library])


def _norm_add_relu_grad_xla(k):
    jnp = xla_rules.jnp()
    normalize_grad, shape, wants_addend = _norm_grad_xla(k), k.input("x").shape, k.has_output("addend_diff")

    def normalization_add_relu_grad(x, dy, mean, inv_variance, gamma, beta, reserve_space, y, dy_addend):
        dy = dy if dy_addend is None else dy + dy_addend
        bits = (reserve_space.reshape(-1, 1) >> jnp.arange(32, dtype=jnp.int32)) & 1
        dyr = jnp.where(bits.reshape(-1)[:numel(shape)].reshape(shape) != 0, dy, jnp.zeros((), dy.dtype))
        gamma_diff, beta_diff, dx = normalize_grad(x, dyr, mean, inv_variance, gamma)
        return gamma_diff, beta_diff, dx, dyr if wants_addend else None
    return normalization_add_relu_grad


op("normalization_add_relu_grad",
   inputs=["x", "dy", "mean", "inv_variance", "gamma", "beta", "reserve_space", "y", "dy_addend?"],
   outputs=["gamma_diff", "beta_diff", "dx", "addend_diff?"], attrs={"axis": ("int32", 0), "epsilon": ("float", 0.0)},
   infer=_norm_add_relu_grad_infer, kernel=_norm_add_relu_grad_kernel, xla=_norm_add_relu_grad_xla, sbp=_norm_sbp,
   doc="normalization_grad of dy masked by the relu bits of reserve_space; addend_diff = the masked dy. "
       "graphfront's dy_addend (fuse_add_to_output's, not OneFlow's) is added to dy in the same pass")


# ------------------------------------------------------------------ layer_norm

def _axis(value, ndim, ctx, what):
    a = value + ndim if value < 0 else value
    ctx.check(0 <= a < max(ndim, 1), f"attr '{what}' {value} is out of range for a rank-{ndim} input")
    return a


def _ln_infer(ctx):
    x = _float(ctx, "x")
    ndim = len(x.shape)
    bna = _axis(ctx.attr("begin_norm_axis"), ndim, ctx, "begin_norm_axis")
    bpa = _axis(ctx.attr("begin_params_axis"), ndim, ctx, "begin_params_axis")
    pshape = x.shape[bpa:]
    for flag, arg in (("center", "beta"), ("scale", "gamma")):
        ctx.check(ctx.attr(flag) == ctx.has_input(arg),
                  f"attr '{flag}' is {ctx.attr(flag)} but input '{arg}' is "
                  f"{'given' if ctx.has_input(arg) else 'absent'}")
        if ctx.has_input(arg):
            d = ctx.input(arg)
            ctx.check(d.shape == pshape, f"input '{arg}' expected shape {pshape} (input 'x' {x.shape} from "
                                         f"begin_params_axis {bpa}), received {d.shape}")
            ctx.check(d.dtype is x.dtype, f"input '{arg}' expected dtype {x.dtype.name}, received {d.dtype.name}")
    ctx.set_output("y", x.shape, x.dtype)
    ctx.set_output("mean", x.shape[:bna], ln_stat_dtype(x.dtype))
    ctx.set_output("inv_variance", x.shape[:bna], ln_stat_dtype(x.dtype))
    ctx.set_output("normalized", x.shape, x.dtype)


def ln_stat_dtype(dtype):
    """The dtype of ``layer_norm``'s ``mean`` and ``inv_variance`` for an input of ``dtype``:
    float32 for float16, else ``dtype`` (OneFlow's ``InferBnParamDataType``,
    ``oneflow/user/ops/layer_norm_op.cpp``)."""
    return _dt.float32 if dtype is _dt.float16 else dtype


def _norm_axes(k, arg="x", attr="begin_norm_axis"):
    shape = k.input(arg).shape
    a = k.attr(attr)
    a = a + len(shape) if a < 0 else a
    return shape, a


@functools.lru_cache(maxsize=None)
def _ln_stat_dtype(dtype, device):
    """The dtype of the statistics PyTorch's fused layer norm keeps for ``dtype`` inputs on
    ``device`` (float32 for float16 inputs on CUDA), found by running it on one element."""
    x = torch.zeros((1, 1), dtype=dtype, device=device)
    return torch.native_layer_norm(x, [1], None, None, 1e-5)[1].dtype


def _ln_kernel(k):
    """PyTorch's fused layer norm (``torch.native_layer_norm``: statistics and normalization
    in one kernel) over the axes from ``begin_norm_axis``; ``gamma`` / ``beta`` are applied
    by it when they span the same axes and ``normalized`` is not wanted, else in one
    ``addcmul`` after it."""
    shape, bna = _norm_axes(k)
    bpa = _norm_axes(k, attr="begin_params_axis")[1]
    norm_shape = list(shape[bna:])
    eps = k.attr("epsilon")
    want_normalized = k.has_output("normalized")
    fused_affine = bpa == bna and not want_normalized
    stats, stat_dtype = shape[:bna], k.output("mean").dtype.torch   # (a no-op cast on CUDA: torch's are float32)

    def layer_norm(x, beta, gamma):
        if fused_affine:
            y, mean, inv = torch.native_layer_norm(x, norm_shape, gamma, beta, eps)
            normalized = None
        else:
            normalized, mean, inv = torch.native_layer_norm(x, norm_shape, None, None, eps)
            if gamma is not None and beta is not None:
                y = torch.addcmul(beta, normalized, gamma)
            elif gamma is not None:
                y = normalized * gamma
            elif beta is not None:
                y = normalized + beta
            else:
                y = normalized
        return y, mean.reshape(stats).to(stat_dtype), inv.reshape(stats).to(stat_dtype), normalized
    return layer_norm


def _ln_xla(k):
    shape, bna = _norm_axes(k)
    axes = tuple(range(bna, len(shape)))
    eps = k.attr("epsilon")
    stat_dtype = k.output("mean").dtype.np

    def layer_norm(x, beta, gamma):
        jnp = xla_rules.jnp()
        xs = x.astype(stat_dtype)   # (float16: the statistics in float32, normalized rounded once)
        mean = xs.mean(axis=axes, keepdims=True)
        var = jnp.square(xs - mean).mean(axis=axes, keepdims=True)
        inv = xla_rules.lax().rsqrt(var + eps)
        normalized = ((xs - mean) * inv).astype(x.dtype)
        y = normalized
        if gamma is not None:
            y = y * gamma
        if beta is not None:
            y = y + beta
        return y, mean.reshape(shape[:bna]), inv.reshape(shape[:bna]), normalized
    return layer_norm


def _ln_grad(g):
    """``layer_norm_param_grad`` for gamma/beta (and dy * gamma), then ``layer_norm_grad`` for x."""
    dy = g.dout("y")
    if dy is None:
        return
    name = g.op_name
    scale, center = g.attr("scale"), g.attr("center")
    need_gamma = scale and g.needs("gamma")
    need_beta = center and g.needs("beta")
    dx_dy = dy
    if need_gamma or need_beta or (scale and g.needs("x")):
        ins, outs = {"dy": dy}, []
        if scale:
            if not g.outputs("normalized"):
                where = format_location(g.builder.locations.get(name))
                raise JobBuildError(f"op '{name}' (layer_norm): with scale=True its output 'normalized' is needed "
                                    f"to differentiate it; add it to the op{where}")
            ins.update(normalized=g.output("normalized"), gamma=g.input("gamma"))
            outs += ["normalized_diff", "gamma_diff"]
        if center:
            outs.append("beta_diff")
        r = g.emit("layer_norm_param_grad", ins, {"begin_params_axis": g.attr("begin_params_axis")},
                   name=f"{name}_param_grad", outputs=outs)
        r = r if isinstance(r, dict) else {outs[0]: r}
        if need_gamma:
            g.set_grad("gamma", r["gamma_diff"])
        if need_beta:
            g.set_grad("beta", r["beta_diff"])
        if scale:
            dx_dy = r["normalized_diff"]
    if g.needs("x"):
        g.set_grad("x", g.emit("layer_norm_grad", {"dy": dx_dy, "x": g.input("x"), "mean": g.output("mean"),
                                                   "inv_variance": g.output("inv_variance")},
                               {"begin_norm_axis": g.attr("begin_norm_axis"), "epsilon": g.attr("epsilon")},
                               name=f"{name}_grad"))


LN_ATTRS = {"center": ("bool", False), "scale": ("bool", False), "begin_norm_axis": ("int64", 0),
            "begin_params_axis": ("int64", 0), "epsilon": ("double", 0.0)}

def _layer_norm_onnx(c):
    """(x - mean) / sqrt(biased var + epsilon) over the axes from begin_norm_axis, then
    ``* gamma`` and ``+ beta`` when given; ``mean`` / ``inv_variance`` shaped x.shape[:begin_norm_axis]."""
    x, d = c.input("x"), c.input_desc("x")
    n = len(d.shape)
    bna = c.attr("begin_norm_axis") % n
    axes = list(range(bna, n))
    mean = reduce_node(c, "ReduceMean", x, axes, 1)
    centered = c.node("Sub", [x, mean])
    var = reduce_node(c, "ReduceMean", c.node("Mul", [centered, centered]), axes, 1)
    inv = c.node("Reciprocal", [c.node("Sqrt", [c.node("Add", [var, const_as(c, c.attr("epsilon"), d)])])])
    gamma, beta = c.input("gamma"), c.input("beta")
    normalized = c.node("Mul", [centered, inv], [c.output("normalized")] if c.output("normalized") else None)
    y = normalized
    if gamma:
        y = c.node("Mul", [y, gamma], None if beta else [c.output("y")])
    if beta:
        y = c.node("Add", [y, beta], [c.output("y")])
    if not (gamma or beta):
        c.node("Identity", [y], [c.output("y")])
    stat_shape = c.const(int64s(d.shape[:bna]))
    stat_dtype = ln_stat_dtype(d.dtype)
    for stat, arg in ((mean, "mean"), (inv, "inv_variance")):
        if c.output(arg):
            if stat_dtype is not d.dtype:
                stat = c.node("Cast", [stat], to=c.dtype_code(stat_dtype))
            c.node("Reshape", [stat, stat_shape], [c.output(arg)])


def _ln_sbp(axis_attr):
    """Layer norm's layouts on several devices (OneFlow's ``layer_norm_op.cpp``): every arg
    shaped like ``x`` (or its leading axes: ``mean`` / ``inv_variance``) split along one of
    the axes before ``axis_attr`` (``begin_norm_axis``, or ``begin_params_axis`` for the
    parameter gradient), gamma and beta broadcast, their gradients partial sums."""
    def rule(ctx):
        first = ctx.input_args[0]  # x, or dy
        rank = ctx.ndim(first)
        stop = ctx.attr(axis_attr) % rank if rank else 0
        if axis_attr != "begin_params_axis" and "begin_params_axis" in ctx.attrs:  # gamma / beta stay whole
            stop = min(stop, ctx.attr("begin_params_axis") % rank)
        if ctx.has("reduce_buf"):
            return []
        cands = []
        for k in range(stop):
            cands.append({a: _sbp.split(k) if a not in ("gamma", "beta", "gamma_diff", "beta_diff")
                          else _sbp.P if a.endswith("_diff") and a != "normalized_diff" else _sbp.B
                          for a in ctx.args})
        return cands
    return rule


op("layer_norm", inputs=["x", "beta?", "gamma?"], outputs=["y", "mean", "inv_variance", "normalized?"],
   attrs=LN_ATTRS, infer=_ln_infer, kernel=_ln_kernel, grad=_ln_grad, onnx=_layer_norm_onnx, xla=_ln_xla,
   sbp=_ln_sbp("begin_norm_axis"),
   doc="normalized = (x - mean) * rsqrt(var + epsilon) over axes >= begin_norm_axis (biased var); "
       "y = normalized * gamma + beta, gamma/beta shaped x.shape[begin_params_axis:]", amp="gray")


def _ln_grad_infer(ctx):
    x, dy = ctx.input("x"), ctx.input("dy")
    ctx.check(dy.shape == x.shape, f"input 'dy' expected shape {x.shape} (as 'x'), received {dy.shape}")
    bna = _axis(ctx.attr("begin_norm_axis"), len(x.shape), ctx, "begin_norm_axis")
    for a in ("mean", "inv_variance"):
        ctx.check(ctx.input(a).shape == x.shape[:bna],
                  f"input '{a}' expected shape {x.shape[:bna]}, received {ctx.input(a).shape}")
    ctx.set_output("dx", x.shape, x.dtype)


def _ln_backward(k, affine):
    """PyTorch's fused layer-norm backward (``native_layer_norm_backward``) over the axes
    from ``begin_norm_axis``: ``(dy, x, mean, inv_variance, gamma, add_to) -> (dx,
    gamma_diff, beta_diff)``. Without ``affine`` (``layer_norm_grad``) ``dy`` is the gradient
    of ``normalized``, gamma is None and only ``dx`` is computed; with it (``fused_layer_norm_grad``)
    the requested parameter gradients too (gamma stands in for beta, whose value it never reads)."""
    shape, bna = _norm_axes(k)
    norm_shape = list(shape[bna:])
    kshape = tuple(shape[:bna]) + (1,) * (len(shape) - bna)
    stat = _ln_stat_dtype(k.input("x").dtype.torch, k.device)
    mask = [True, affine and k.has_output("gamma_diff"), affine and k.has_output("beta_diff")]
    backward = torch.ops.aten.native_layer_norm_backward

    def run(dy, x, mean, inv_variance, gamma, add_to):
        dx, dgamma, dbeta = backward(dy, x, norm_shape, mean.reshape(kshape).to(stat),
                                     inv_variance.reshape(kshape).to(stat), gamma, gamma, mask)
        return (dx if add_to is None else dx + add_to), dgamma, dbeta
    return run


def _ln_grad_kernel(k):
    backward = _ln_backward(k, affine=False)
    return lambda dy, x, mean, inv_variance, add_to: backward(dy, x, mean, inv_variance, None, add_to)[0]


def _ln_grad_xla(k):
    shape, bna = _norm_axes(k)
    axes = tuple(range(bna, len(shape)))
    kshape = tuple(shape[:bna]) + (1,) * (len(shape) - bna)

    def layer_norm_grad(dy, x, mean, inv_variance, add_to):
        work = mean.dtype   # (float16: in float32, rounded once)
        dy, xs = dy.astype(work), x.astype(work)
        inv = inv_variance.reshape(kshape)
        xhat = (xs - mean.reshape(kshape)) * inv
        dx = inv * (dy - dy.mean(axis=axes, keepdims=True) - xhat * (dy * xhat).mean(axis=axes, keepdims=True))
        dx = dx.astype(x.dtype)
        return dx if add_to is None else dx + add_to
    return layer_norm_grad


def _ln_grad_onnx(c, dy=None):
    """dx = inv * (dy - mean(dy) - xhat * mean(dy * xhat)) over the normalized axes (+ _add_to_output);
    half types computed in float32 and rounded once, as the kernel's accumulation. ``dy``: the
    gradient of ``normalized`` when not the input ``dy``. Returns ``xhat`` (float32 for half
    types)."""
    d = c.input_desc("x")
    shape = d.shape
    bna = c.attr("begin_norm_axis") % len(shape)
    axes = list(range(bna, len(shape)))
    kshape = c.const(int64s(tuple(shape[:bna]) + (1,) * (len(shape) - bna)))
    dy, x, mean, inv = [dy or c.input("dy")] + [c.input(a) for a in ("x", "mean", "inv_variance")]
    half = d.dtype in (_dt.float16, _dt.bfloat16)
    if half:
        dy, x, mean, inv = (c.node("Cast", [v], to=c.dtype_code(_dt.float32)) for v in (dy, x, mean, inv))
    inv = c.node("Reshape", [inv, kshape])
    xhat = c.node("Mul", [c.node("Sub", [x, c.node("Reshape", [mean, kshape])]), inv])
    inner = c.node("Sub", [c.node("Sub", [dy, reduce_node(c, "ReduceMean", dy, axes, 1)]),
                           c.node("Mul", [xhat, reduce_node(c, "ReduceMean", c.node("Mul", [dy, xhat]), axes, 1)])])
    dx = c.node("Mul", [inv, inner])
    if half:
        dx = c.node("Cast", [dx], to=c.dtype_code(d.dtype))
    add_to = c.input("_add_to_output")
    c.node("Add" if add_to else "Identity", [dx, add_to] if add_to else [dx], [c.output("dx")])
    return xhat


op("layer_norm_grad", inputs=["dy", "x", "mean", "inv_variance", "_add_to_output?"], outputs=["dx"],
   attrs={"begin_norm_axis": ("int64", 0), "epsilon": ("double", 0.0)}, infer=_ln_grad_infer,
   kernel=_ln_grad_kernel, xla=_ln_grad_xla, onnx=_ln_grad_onnx, sbp=_ln_sbp("begin_norm_axis"),
   doc="dx = inv * (dy - mean(dy) - xhat * mean(dy * xhat)) over the normalized axes")


def _ln_param_grad_infer(ctx):
    dy = ctx.input("dy")
    bpa = _axis(ctx.attr("begin_params_axis"), len(dy.shape), ctx, "begin_params_axis")
    pshape = dy.shape[bpa:]
    if ctx.has_output("normalized_diff"):
        ctx.check(ctx.has_input("gamma"), "output 'normalized_diff' needs input 'gamma'")
    if ctx.has_output("gamma_diff"):
        ctx.check(ctx.has_input("normalized"), "output 'gamma_diff' needs input 'normalized'")
    if ctx.has_input("normalized"):
        d = ctx.input("normalized")
        ctx.check(d.shape == dy.shape, f"input 'normalized' expected shape {dy.shape}, received {d.shape}")
    if ctx.has_input("gamma"):
        d = ctx.input("gamma")
        ctx.check(d.shape == pshape, f"input 'gamma' expected shape {pshape}, received {d.shape}")
    ctx.set_output("normalized_diff", dy.shape, dy.dtype)
    ctx.set_output("beta_diff", pshape, dy.dtype)
    ctx.set_output("gamma_diff", pshape, dy.dtype)
    ctx.set_output("reduce_buf", dy.shape, dy.dtype)


def _ln_param_grad_kernel(axis_kw):
    """Kernel factory of layer_norm_param_grad over torch tensors (``axis_kw="dim"``) or, as
    its ``xla`` rule, jax arrays (``"axis"``): the keyword their ``sum`` takes."""
    def make(k):
        shape, bpa = _norm_axes(k, "dy", "begin_params_axis")
        axes = {axis_kw: tuple(range(bpa))}
        want = {a: k.has_output(a) for a in ("normalized_diff", "beta_diff", "gamma_diff", "reduce_buf")}

        def reduce(t):
            return t.sum(**axes) if bpa else t

        def layer_norm_param_grad(dy, normalized, gamma):
            nd = dy * gamma if want["normalized_diff"] else None
            bd = reduce(dy) if want["beta_diff"] else None
            buf = dy * normalized if want["gamma_diff"] or want["reduce_buf"] else None
            gd = reduce(buf) if want["gamma_diff"] else None
            return nd, bd, gd, buf if want["reduce_buf"] else None
        return layer_norm_param_grad
    return make


def _ln_param_grad_onnx(c):
    """normalized_diff = dy * gamma; beta_diff = sum(dy), gamma_diff = sum(dy * normalized) over axes
    < begin_params_axis; reduce_buf = dy * normalized."""
    dy, d = c.input("dy"), c.input_desc("dy")
    bpa = c.attr("begin_params_axis") % len(d.shape)

    def reduce(t, out):
        if bpa:
            reduce_node(c, "ReduceSum", t, list(range(bpa)), 0, out)
        else:
            c.node("Identity", [t], [out])
    if c.output("normalized_diff"):
        c.node("Mul", [dy, c.input("gamma")], [c.output("normalized_diff")])
    if c.output("beta_diff"):
        reduce(dy, c.output("beta_diff"))
    if c.output("gamma_diff") or c.output("reduce_buf"):
        buf = c.node("Mul", [dy, c.input("normalized")], [c.output("reduce_buf")] if c.output("reduce_buf") else None)
        if c.output("gamma_diff"):
            reduce(buf, c.output("gamma_diff"))


op("layer_norm_param_grad", inputs=["dy", "normalized?", "gamma?"],
   outputs=["normalized_diff?", "beta_diff?", "gamma_diff?", "reduce_buf?"],
   attrs={"begin_params_axis": ("int64", 0)}, infer=_ln_param_grad_infer, kernel=_ln_param_grad_kernel("dim"),
   onnx=_ln_param_grad_onnx,
   xla=_ln_param_grad_kernel("axis"), sbp=_ln_sbp("begin_params_axis"),
   doc="beta_diff = sum(dy), gamma_diff = sum(dy * normalized) over axes < begin_params_axis; "
       "normalized_diff = dy * gamma; reduce_buf = dy * normalized")


# ------------------------------------------------------------------ fused_layer_norm_grad

def _fused_ln_grad_infer(ctx):
    x, dy, gamma = ctx.input("x"), ctx.input("dy"), ctx.input("gamma")
    ctx.check(dy.shape == x.shape, f"input 'dy' expected shape {x.shape} (as 'x'), received {dy.shape}")
    bna = _axis(ctx.attr("begin_norm_axis"), len(x.shape), ctx, "begin_norm_axis")
    for a in ("mean", "inv_variance"):
        ctx.check(ctx.input(a).shape == x.shape[:bna],
                  f"input '{a}' expected shape {x.shape[:bna]}, received {ctx.input(a).shape}")
    ctx.check(gamma.shape == x.shape[bna:], f"input 'gamma' expected shape {x.shape[bna:]}, received {gamma.shape}")
    ctx.set_output("dx", x.shape, x.dtype)
    ctx.set_output("gamma_diff", gamma.shape, dy.dtype)
    ctx.set_output("beta_diff", gamma.shape, dy.dtype)


def _fused_ln_grad_xla(k):
    shape, bna = _norm_axes(k)
    kshape = tuple(shape[:bna]) + (1,) * (len(shape) - bna)
    axes = tuple(range(bna))
    want_gamma, want_beta = k.has_output("gamma_diff"), k.has_output("beta_diff")
    grad = _ln_grad_xla(k)

    def fused_layer_norm_grad(dy, x, mean, inv_variance, gamma, add_to):
        dx = grad(dy * gamma, x, mean, inv_variance, add_to)
        xhat = (x.astype(mean.dtype) - mean.reshape(kshape)) * inv_variance.reshape(kshape)
        dgamma = (dy.astype(mean.dtype) * xhat).sum(axis=axes).astype(dy.dtype) if want_gamma else None
        return dx, dgamma, dy.sum(axis=axes) if want_beta else None
    return fused_layer_norm_grad


def _fused_ln_grad_onnx(c):
    """layer_norm_grad of ``dy * gamma``; gamma_diff = sum(dy * xhat), beta_diff = sum(dy) over
    the axes before begin_norm_axis."""
    dy, d = c.input("dy"), c.input_desc("dy")
    xhat = _ln_grad_onnx(c, c.node("Mul", [dy, c.input("gamma")]))
    axes = list(range(c.attr("begin_norm_axis") % len(d.shape)))
    if c.output("gamma_diff"):
        work = c.node("Cast", [dy], to=c.dtype_code(_dt.float32)) if d.dtype in (_dt.float16, _dt.bfloat16) else dy
        dgamma = reduce_node(c, "ReduceSum", c.node("Mul", [work, xhat]), axes, 0)
        c.node("Cast", [dgamma], [c.output("gamma_diff")], to=c.dtype_code(d.dtype))
    if c.output("beta_diff"):
        reduce_node(c, "ReduceSum", dy, axes, 0, c.output("beta_diff"))


op("fused_layer_norm_grad", inputs=["dy", "x", "mean", "inv_variance", "gamma", "_add_to_output?"],
   outputs=["dx", "gamma_diff?", "beta_diff?"],
   attrs={"begin_norm_axis": ("int64", 0), "epsilon": ("double", 0.0)}, infer=_fused_ln_grad_infer,
   kernel=lambda k: _ln_backward(k, affine=True), xla=_fused_ln_grad_xla, onnx=_fused_ln_grad_onnx,
   sbp=_ln_sbp("begin_norm_axis"),
   doc="graphfront-only: layer_norm_param_grad (gamma_diff, beta_diff and dy * gamma) and layer_norm_grad "
       "of one layer norm whose parameters span its normalized axes, in one native_layer_norm_backward call")
