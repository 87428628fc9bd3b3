"""Fusion passes (each ``Job -> Job``); the fused ops are in ``graphfront/ops/fused_ops.py``.

They run after autograd and the optimizer pass, over forward and backward ops alike.
An intermediate blob is fused away only when exactly one op reads it and the job does
not name it elsewhere (losses, train step, watched blobs), so every result the user can
observe is unchanged; the values differ from the unfused job by float rounding at most.

================================  ==========================================================
pass                              rewrite
================================  ==========================================================
:func:`fuse_update_ops`           (OneFlow's ``FuseUpdateOpsPass``) a ``scalar_mul``,
                                  ``scalar_mul_by_tensor`` or
                                  ``l1_l2_regularize_gradient`` feeding an update op's
                                  ``model_diff`` becomes the update's ``scale``,
                                  ``scale_by_tensor`` input, ``l1`` / ``l2`` attrs
:func:`fuse_cast_scale`           (OneFlow's ``FuseCastScalePass``) a ``cast`` from float16 /
                                  bfloat16 to float32 feeding a ``scalar_mul_by_tensor``
                                  (through a ``scalar_mul`` or not), as AMP's gradient
                                  unscaling does, becomes ``fused_cast_scale``
:func:`fuse_scalar_chains`        ``scalar_mul`` -> ``scalar_mul`` and ``scalar_add`` ->
                                  ``scalar_add`` merge into one op; ``scalar_mul`` ->
                                  ``scalar_add`` becomes ``fused_scalar_mul_add``
:func:`fuse_scalar_mul_matmul`     a float ``scalar_mul`` of a matrix product's output, or
                                  read only as matrix products' ``a`` / ``b`` inputs, becomes
                                  the products' ``alpha`` (the GEMM scales in its epilogue)
:func:`fuse_bias_add`             ``conv*d`` -> ``bias_add`` on the channel axis becomes the
                                  conv's own ``bias`` input; ``matmul`` -> ``bias_add``
                                  becomes ``fused_matmul_bias`` (the bias added in the
                                  GEMM's epilogue), an ``(in, out)`` weight through a
                                  ``transpose`` (a view)
:func:`fold_batch_norm`           (predict jobs) ``conv*d`` -> inference ``normalization``
                                  becomes one conv whose weight and bias are computed from
                                  the variables (hoisted by the plan: once per variable state)
:func:`fuse_bias_add_relu`        ``bias_add`` -> ``relu`` becomes ``fused_bias_add_relu``
:func:`fuse_conv_grads`           ``conv_data_grad``, ``conv_filter_grad`` and the bias
                                  gradient (``conv_bias_grad`` or the ``reduce_sum`` of
                                  ``bias_add``'s grad) of one ``dy`` become ``fused_conv_grad``
:func:`fuse_layer_norm_grads`     ``layer_norm_param_grad`` whose ``normalized_diff`` only
                                  ``layer_norm_grad`` reads (parameters over the normalized
                                  axes) becomes, with it, ``fused_layer_norm_grad``
:func:`fuse_add_to_output`        (OneFlow's ``FuseAddToOutputPass``) an ``add_n`` of two
                                  blobs, one the output of an op taking ``_add_to_output``
                                  (matmuls, dropout, normalization, the layer-norm and conv
                                  data gradients) read by nothing else, becomes that op
                                  adding the other blob in its own kernel
:func:`fuse_max_pool_grad`        ``tf_max_pool_*`` with its ``tf_max_pool_*_grad`` becomes
                                  ``fused_tf_max_pool_*`` (+ ``indices``) and
                                  ``fused_tf_max_pool_*_grad``, which also takes over a
                                  following ``relu_grad`` of the pool's input (conv ->
                                  relu -> pool); the forward relu then moves after
                                  the pool (4x fewer elements)
================================  ==========================================================
"""
from __future__ import annotations

from graphfront.ops import registry
from graphfront.passes.rewrite import Net, has_op_types, single_input, single_output, user_type


def _order(job):
    """The ops to visit: the job's order (producers before readers, as built)."""
    return list(job.net.op)


def _scalar(attrs):
    """(value, is_float) of a scalar op's operand."""
    if attrs["has_float_operand"]:
        return attrs["float_operand"], True
    return attrs["int_operand"], False


# ------------------------------------------------------------------ update ops

def _is_update(op_conf):
    t = user_type(op_conf)
    if t is None:
        return False
    opdef = registry.lookup(t)
    return opdef.may_mutate and "scale" in opdef.attrs and opdef.input_def("model_diff") is not None \
        and not opdef.input_def("model_diff").repeated


def fuse_update_ops(job):
    """Fold ``scalar_mul`` / ``scalar_mul_by_tensor`` / ``l1_l2_regularize_gradient``
    producers of an update op's ``model_diff`` into its ``scale`` attr, ``scale_by_tensor``
    input and ``l1`` / ``l2`` attrs (OneFlow's FuseUpdateOpsPass,
    ``oneflow/core/job_rewriter/fuse_update_ops_pass.cpp``).

    ``g = diff * scale * scale_by_tensor + l1 * sign(w) + l2 * w`` inside every update op,
    so a regularizer folds only while neither scale is set and the update's own ``l1`` /
    ``l2`` are 0, and a ``scalar_mul_by_tensor`` only into an update without
    ``scale_by_tensor``.
    """
    if not has_op_types(job, ("scalar_mul", "scalar_mul_by_tensor", "l1_l2_regularize_gradient")):
        return job
    net = Net(job)
    changed = False
    for op in list(job.net.op):
        if not _is_update(op):
            continue
        name = op.name
        while True:
            upd = net.op(name)
            diff = single_input(upd, "model_diff")
            prod = net.producer_op(diff)
            if prod is None or net.sole_reader(diff) is None:
                break
            attrs = net.attrs(upd)
            t = user_type(prod)
            if t == "scalar_mul":
                value, _ = _scalar(net.attrs(prod))
                if not net.desc(single_input(prod, "in")).dtype.is_floating_point:
                    break
                net.set_attr(upd, "scale", attrs["scale"] * float(value))
                net.set_input(upd, "model_diff", 0, single_input(prod, "in"))
            elif t == "scalar_mul_by_tensor":
                if single_input(upd, "scale_by_tensor") is not None or \
                        registry.lookup(user_type(upd)).input_def("scale_by_tensor") is None:
                    break
                net.add_input(upd, "scale_by_tensor", single_input(prod, "scalar"))
                net.set_input(upd, "model_diff", 0, single_input(prod, "x"))
            elif t == "l1_l2_regularize_gradient":
                if attrs["scale"] != 1.0 or attrs["l1"] or attrs["l2"] or \
                        single_input(upd, "scale_by_tensor") is not None or \
                        single_input(prod, "model") != single_input(upd, "model"):
                    break
                pa = net.attrs(prod)
                net.set_attr(upd, "l1", pa["l1"])
                net.set_attr(upd, "l2", pa["l2"])
                net.set_input(upd, "model_diff", 0, single_input(prod, "model_diff"))
            else:
                break
            net.redirect(diff, single_input(upd, "model_diff"))
            net.remove(prod.name)
            changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ cast + scale

def fuse_cast_scale(job):
    """``cast`` (float16 / bfloat16 -> float32) -> [``scalar_mul`` ->] ``scalar_mul_by_tensor``,
    each blob read by the next op only, becomes one ``fused_cast_scale`` (OneFlow's
    FuseCastScalePass, ``oneflow/core/job_rewriter/fuse_cast_scale_pass.cpp``): one kernel
    that reads the half-precision blob and writes the scaled float32 one."""
    if not has_op_types(job, ("cast",)) or not has_op_types(job, ("scalar_mul_by_tensor",)):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        if user_type(op) != "cast" or net.is_removed(op.name):
            continue
        src, out = single_input(op, "in"), single_output(op, "out")
        if net.desc(src).dtype.name not in ("float16", "bfloat16") or net.desc(out).dtype.name != "float32":
            continue
        chain, scale = [op], 1.0
        nxt = net.sole_reader(out)
        if user_type(nxt) == "scalar_mul":
            value, _ = _scalar(net.attrs(nxt))
            chain.append(nxt)
            scale = float(value)
            nxt = net.sole_reader(single_output(nxt, "out"))
        if user_type(nxt) != "scalar_mul_by_tensor" or single_input(nxt, "x") != single_output(chain[-1], "out"):
            continue
        fused = net.add_user_op(f"{nxt.name}-fused", "fused_cast_scale",
                                {"x": src, "scale_by_tensor": single_input(nxt, "scalar")}, {"scale": scale},
                                outputs=("y",), like_op=nxt.name)
        net.redirect(single_output(nxt, "y"), fused.user_conf.output["y"].s[0])
        net.remove(*(o.name for o in chain), nxt.name)
        changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ scalar chains

def fuse_scalar_chains(job):
    """Merge ``scalar_mul``/``scalar_add`` chains on floating blobs (see module docstring)."""
    if not has_op_types(job, ("scalar_mul", "scalar_add")):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        first = net.op(op.name)
        t1 = user_type(first)
        if t1 not in ("scalar_mul", "scalar_add") or net.is_removed(first.name):
            continue
        out = single_output(first, "out")
        second = net.sole_reader(out)
        t2 = user_type(second)
        if t2 not in ("scalar_mul", "scalar_add"):
            continue
        src = single_input(first, "in")
        if not net.desc(src).dtype.is_floating_point:
            continue
        (a, _), (b, _) = _scalar(net.attrs(first)), _scalar(net.attrs(second))
        a, b = float(a), float(b)
        if t1 == t2:  # x*a*b = x*(a*b); x+a+b = x+(a+b)
            net.set_attr(second, "has_float_operand", True)
            net.set_attr(second, "has_int_operand", False)
            net.set_attr(second, "float_operand", a * b if t1 == "scalar_mul" else a + b)
            net.set_attr(second, "int_operand", 0)
            net.set_input(second, "in", 0, src)
            net.remove(first.name)
        elif t1 == "scalar_mul":  # x*a + b
            fused = net.add_user_op(f"{second.name}-fused", "fused_scalar_mul_add", {"in": src},
                                    {"scale": a, "shift": b}, like_op=second.name)
            net.redirect(single_output(second, "out"), fused.user_conf.output["out"].s[0])
            net.remove(first.name, second.name)
        else:
            continue
        changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ scalar_mul into a matrix product's alpha

#: op types computing ``alpha * f(a, b)`` with ``f`` linear in each of ``a`` and ``b``
_SCALED_PRODUCTS = ("matmul", "batch_matmul", "broadcast_matmul", "broadcast_matmul_grad_b")


def fuse_scalar_mul_matmul(job):
    """Fold a float ``scalar_mul`` into the ``alpha`` of the matrix products next to it
    (OneFlow's matmul kernels hand ``alpha`` to cuBLAS, ``oneflow/user/kernels/matmul_kernels.cpp``):

    * a product without ``_add_to_output`` whose only reader is ``scalar_mul(c)``: the
      product's ``alpha`` is multiplied by ``c`` and its readers read the product (the
      attention scores of BERT, ``matmul(q, k^T) * (1 / sqrt(d))``);
    * a ``scalar_mul(c)`` read only as the ``a`` or ``b`` input of products (each reading it
      once): every reader takes the unscaled input and ``alpha * c`` (the scores' gradient
      ``dy * c`` feeding both matmul gradients).
    """
    if not has_op_types(job, ("scalar_mul",)) or not has_op_types(job, _SCALED_PRODUCTS):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        mul = net.op(op.name)
        if user_type(mul) != "scalar_mul" or net.is_removed(mul.name):
            continue
        src, out = single_input(mul, "in"), single_output(mul, "out")
        if not net.desc(src).dtype.is_floating_point or out in net.protected:
            continue
        c = float(_scalar(net.attrs(mul))[0])
        prod = net.producer_op(src)
        readers = net.readers(out)
        if prod is not None and user_type(prod) in _SCALED_PRODUCTS and net.sole_reader(src) is mul \
                and "_add_to_output" not in prod.user_conf.input:
            net.set_attr(prod, "alpha", net.attrs(prod)["alpha"] * c)
            net.redirect(out, src)
        elif readers and all(user_type(r) in _SCALED_PRODUCTS and arg in ("a", "b") for r, arg, _ in readers) \
                and len({r.name for r, _, _ in readers}) == len(readers):
            for r, arg, i in readers:
                net.set_attr(r, "alpha", net.attrs(r)["alpha"] * c)
                net.set_input(r, arg, i, src)
        else:
            continue
        net.remove(mul.name)
        changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ bias_add into conv / matmul

_CONV = ("conv1d", "conv2d", "conv3d")


def _channel_axis(conv_attrs, ndim):
    return 1 if conv_attrs["data_format"] == "channels_first" else ndim - 1


def fuse_bias_add(job):
    """``conv*d`` + ``bias_add`` -> conv with ``bias``; ``matmul`` + ``bias_add`` -> ``fused_matmul_bias``."""
    if not has_op_types(job, ("bias_add",)):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        if user_type(op) != "bias_add":
            continue
        ba = net.op(op.name)
        a, b = single_input(ba, "a"), single_input(ba, "b")
        prod = net.producer_op(a)
        if prod is None or net.sole_reader(a) is None:
            continue
        t = user_type(prod)
        axis = net.attrs(ba)["axis"]
        out = single_output(ba, "out")
        if t in _CONV:
            pa = net.attrs(prod)
            uc = prod.user_conf
            if "bias" in uc.input or "bias_multiplier" in uc.input or \
                    axis != _channel_axis(pa, len(net.desc(a).shape)):
                continue
            net.add_input(prod, "bias", b)
            net.redirect(out, a)
            net.remove(ba.name)
        elif t == "matmul":
            pa = net.attrs(prod)
            if pa["transpose_a"] or pa["alpha"] != 1.0 or axis != 1 or "_add_to_output" in prod.user_conf.input:
                continue
            weight = single_input(prod, "b")
            if not pa["transpose_b"]:  # an (in, out) weight: its transpose is a view, the GEMM reads it as is
                weight = net.add_user_op(f"{prod.name}-weight_t", "transpose", {"input": weight}, {"perm": [1, 0]},
                                         outputs=("output",), like_op=prod.name).user_conf.output["output"].s[0]
            fused = net.add_user_op(f"{ba.name}-fused", "fused_matmul_bias",
                                    {"x": single_input(prod, "a"), "weight": weight, "bias": b}, like_op=ba.name)
            net.redirect(out, fused.user_conf.output["out"].s[0])
            net.remove(prod.name, ba.name)
        else:
            continue
        changed = True
    return net.finish() if changed else job


def fuse_bias_add_relu(job):
    """``bias_add`` whose only reader is ``relu`` -> ``fused_bias_add_relu``."""
    if not has_op_types(job, ("bias_add",)):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        if user_type(op) != "bias_add":
            continue
        ba = net.op(op.name)
        out = single_output(ba, "out")
        relu = net.sole_reader(out)
        if user_type(relu) != "relu":
            continue
        fused = net.add_user_op(f"{relu.name}-fused", "fused_bias_add_relu",
                                {"a": single_input(ba, "a"), "b": single_input(ba, "b")},
                                {"axis": net.attrs(ba)["axis"]}, like_op=relu.name)
        net.redirect(single_output(relu, "y"), fused.user_conf.output["out"].s[0])
        net.remove(ba.name, relu.name)
        changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ batch norm folding

def fold_batch_norm(job):
    """Predict jobs: fold an inference ``normalization`` into the conv that feeds it.

    With ``s = gamma * rsqrt(moving_variance + epsilon)`` per output channel, the conv
    takes weight ``w * s`` (``s`` reshaped to ``[F, 1, ...]``) and bias
    ``(b - moving_mean) * s + beta`` (``b`` = 0 without a conv bias). Those are built
    from ``scalar_add``, ``rsqrt``, ``broadcast_mul``/``_sub``/``_add``, ``reshape`` and
    ``scalar_mul`` on the variables, which the plan hoists and so computes once per
    variable state.
    """
    if job.job_conf.HasField("train_conf") or not has_op_types(job, ("normalization",)):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        if user_type(op) != "normalization":
            continue
        bn = net.op(op.name)
        attrs = net.attrs(bn)
        uc = bn.user_conf
        x = single_input(bn, "x")
        if attrs["training"] or "_add_to_output" in uc.input or not ("moving_mean" in uc.input and
                                                                     "moving_variance" in uc.input):
            continue
        if any(net.readers(l) for arg in ("mean", "inv_variance") if arg in uc.output for l in uc.output[arg].s):
            continue
        conv = net.producer_op(x)
        if user_type(conv) not in _CONV or net.sole_reader(x) is None:
            continue
        ca = net.attrs(conv)
        xd = net.desc(x)
        if attrs["axis"] != _channel_axis(ca, len(xd.shape)) or "bias_multiplier" in conv.user_conf.input:
            continue
        w = single_input(conv, "weight")
        params = {a: single_input(bn, a) for a in ("moving_mean", "moving_variance", "gamma", "beta")}
        if any(net.desc(l).dtype is not xd.dtype for l in list(params.values()) + [w]):
            continue
        base = f"System-FoldBatchNorm-{bn.name}"

        def emit(suffix, op_type, inputs, attrs_=None, out="out"):
            added = net.add_user_op(f"{base}-{suffix}", op_type, inputs, attrs_, outputs=(out,), like_op=conv.name)
            return added.user_conf.output[out].s[0]

        var_eps = emit("VarianceAddEpsilon", "scalar_add", {"in": params["moving_variance"]},
                       {"has_float_operand": True, "float_operand": float(attrs["epsilon"])})
        inv = emit("VarianceRsqrt", "rsqrt", {"x": var_eps}, out="y")
        s = emit("Scale", "broadcast_mul", {"x": inv, "y": params["gamma"]}, out="z")
        wshape = net.desc(w).shape
        s_r = emit("ScaleReshape", "reshape", {"in": s}, {"shape": [wshape[0]] + [1] * (len(wshape) - 1)})
        new_w = emit("Weight", "broadcast_mul", {"x": w, "y": s_r}, out="z")
        bias = single_input(conv, "bias")
        if bias is not None:
            centered = emit("BiasSubMean", "broadcast_sub", {"x": bias, "y": params["moving_mean"]}, out="z")
        else:
            centered = emit("NegMean", "scalar_mul", {"in": params["moving_mean"]},
                            {"has_float_operand": True, "float_operand": -1.0})
        scaled = emit("BiasScale", "broadcast_mul", {"x": centered, "y": s}, out="z")
        new_b = emit("Bias", "broadcast_add", {"x": scaled, "y": params["beta"]}, out="z")
        net.set_input(conv, "weight", 0, new_w)
        if bias is not None:
            net.set_input(conv, "bias", 0, new_b)
        else:
            net.add_input(conv, "bias", new_b)
        net.redirect(single_output(bn, "y"), x)
        net.remove(bn.name)
        changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ conv backward

def fuse_conv_grads(job):
    """Merge the data, filter and bias gradients of one convolution (same ``dy``)."""
    if not has_op_types(job, ("conv_data_grad", "conv_filter_grad")):
        return job
    net = Net(job)
    groups = {}  # dy lbn -> {"data": op, "filter": op, "bias": op}
    keys = ("num_spatial_dims", "padding_before", "data_format", "kernel_size", "strides", "dilation_rate",
            "groups")
    for op in job.net.op:
        t = user_type(op)
        if t == "conv_data_grad" and "_add_to_output" not in op.user_conf.input:
            groups.setdefault(single_input(op, "dy"), {})["data"] = op.name
        elif t == "conv_filter_grad":
            groups.setdefault(single_input(op, "dy"), {})["filter"] = op.name
        elif t == "conv_bias_grad":
            groups.setdefault(single_input(op, "dy"), {})["bias"] = op.name
    changed = False
    for dy, members in groups.items():
        data, filt = net.op(members.get("data", "")), net.op(members.get("filter", ""))
        convs = [o for o in (data, filt) if o is not None]
        if not convs:
            continue
        attrs = net.attrs(convs[0])
        if attrs["data_format"] != "channels_first" or any(
                [net.attrs(o)[k] for k in keys] != [attrs[k] for k in keys] for o in convs[1:]):
            continue
        x = single_input(filt, "x") if filt is not None else single_input(data, "x_like")
        if data is not None and filt is not None and single_input(data, "x_like") != x:
            continue
        bias = net.op(members.get("bias", "")) if "bias" in members else None
        if bias is None:
            n = attrs["num_spatial_dims"]
            axes = [0] + list(range(2, n + 2))
            for reader, arg, _ in net.readers(dy):
                if user_type(reader) == "reduce_sum" and sorted(net.attrs(reader)["axis"]) == axes \
                        and not net.attrs(reader)["keepdims"]:
                    bias = reader
                    break
        elif net.attrs(bias)["data_format"] != "channels_first":
            bias = None
        if len(convs) + (bias is not None) < 2:
            continue
        outs = {}
        if data is not None:
            outs["dx"] = single_output(data, "dx")
        if filt is not None:
            outs["filter_diff"] = single_output(filt, "filter_diff")
        if bias is not None:
            outs["bias_diff"] = single_output(bias, "bias_diff" if user_type(bias) == "conv_bias_grad"
                                              else "output_tensor")
        inputs = {"dy": dy, "x": x}
        if data is not None:
            inputs["filter"] = single_input(data, "filter")
        last = (filt or data).name
        fused = net.add_user_op(f"{last}-fused", "fused_conv_grad", inputs, {k: attrs[k] for k in keys},
                                outputs=tuple(outs), like_op=last)
        for arg, old in outs.items():
            net.redirect(old, fused.user_conf.output[arg].s[0])
        net.remove(*[o.name for o in convs + ([bias] if bias is not None else [])])
        changed = True
    return net.finish() if changed else job


def fuse_layer_norm_grads(job):
    """``layer_norm_param_grad`` (``normalized_diff = dy * gamma``, ``gamma_diff``,
    ``beta_diff``) feeding only ``layer_norm_grad`` -> one ``fused_layer_norm_grad`` (one
    ``native_layer_norm_backward`` call), when the parameters span exactly the normalized
    axes (``begin_params_axis`` = ``begin_norm_axis``) and no op reads ``reduce_buf``. The
    ``layer_norm`` whose ``normalized`` output no op reads any more then drops it, so its
    kernel applies gamma and beta inside PyTorch's fused layer norm, with no ``normalized``
    blob kept for the backward."""
    if not has_op_types(job, ("layer_norm_grad",)):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        if user_type(op) != "layer_norm_grad":
            continue
        grad = net.op(op.name)
        param = net.producer_op(single_input(grad, "dy"))
        if user_type(param) != "layer_norm_param_grad" or net.sole_reader(single_input(grad, "dy")) is not grad:
            continue
        rank = len(net.desc(single_input(grad, "x")).shape)
        axes = (net.attrs(param)["begin_params_axis"] % rank, net.attrs(grad)["begin_norm_axis"] % rank)
        buf = single_output(param, "reduce_buf")
        if axes[0] != axes[1] or (buf is not None and net.readers(buf)):
            continue
        outs = {a: single_output(param, a) for a in ("gamma_diff", "beta_diff") if single_output(param, a)}
        fused = net.add_user_op(f"{grad.name}-fused", "fused_layer_norm_grad",
                                {"dy": single_input(param, "dy"), "gamma": single_input(param, "gamma"),
                                 **{a: single_input(grad, a) for a in ("x", "mean", "inv_variance", "_add_to_output")}},
                                {a: net.attrs(grad)[a] for a in ("begin_norm_axis", "epsilon")},
                                outputs=("dx",) + tuple(outs), like_op=grad.name)
        for arg, old in [("dx", single_output(grad, "dx"))] + list(outs.items()):
            net.redirect(old, fused.user_conf.output[arg].s[0])
        net.remove(param.name, grad.name)
        norm = net.producer_op(single_input(param, "normalized"))
        if user_type(norm) == "layer_norm":   # its output 'normalized' unread now: y in one kernel
            net.drop_unread_output(norm, "normalized")
        changed = True
    return net.finish() if changed else job


# ------------------------------------------------------------------ add to output

def fuse_add_to_output(job):
    """(OneFlow's ``FuseAddToOutputPass``,
    ``oneflow/core/job_rewriter/fuse_add_to_output_pass.cpp`` at v0.6.0) ``add_n(x, addend)``
    where ``x`` is the first output of an op that takes an ``_add_to_output`` input (``matmul``, ``batch_matmul``,
    ``broadcast_matmul*``, ``dropout``, ``normalization``, ``layer_norm_grad``,
    ``conv_data_grad`` and their fused forms), read by nothing but the ``add_n`` -> that op
    with ``_add_to_output = addend``, the ``add_n`` removed. The op's kernel adds the addend
    itself: a matmul in its GEMM's epilogue (``beta = 1``), dropout in its mask-and-scale
    kernel, so the sum costs no pass over memory. An op and the ``add_n`` must share a
    placement, and the addend must be made before the op in the job's order (so no cycle
    is made and the order stays producers-first).

    graphfront extends OneFlow's two-input rule to sums of more terms: the terms of an
    ``add_n`` (and of the ``add_n`` s and shape-preserving ``reshape`` s feeding only it) are
    taken in the order their producers run; the sum of those no op can take in
    (one ``add_n``, or the earliest term) passes from op to op as each later op's
    ``_add_to_output``. So the gradient reaching a transformer layer's input from its
    query, key and value projections and its residual path is summed inside the three
    GEMMs, with no ``add_n`` left. Where the sum's only reader reads it as its ``dy`` and
    has a ``dy_addend`` input (``normalization_add_relu_grad``: the gradient at a ResNet
    block's output, from the next block's first convolution and its shortcut;
    ``fused_tf_max_pool_2d_grad``), that op takes the last term as ``dy`` and the sum of
    the others as ``dy_addend``, adding them in the pass over ``dy`` it makes anyway.
    Skipped when the job sets
    ``enable_fuse_add_to_output(False)`` (unset: on, as the other fusions)."""
    if not has_op_types(job, ("add_n",)):
        return job
    net = Net(job)
    pos = {op.name: i for i, op in enumerate(job.net.op)}
    changed = False
    for op in reversed(_order(job)):  # (a sum before the add_n s it opens; one it cannot rewrite leaves them be)
        if user_type(op) != "add_n" or net.is_removed(op.name) or single_output(op, "out") in net.protected:
            continue
        terms, inner = [], []
        _sum_terms(net, op, terms, inner)
        if len(terms) < 2:
            continue
        terms.sort(key=lambda term: _made_at(net, pos, term[0]))
        out = single_output(op, "out")
        consumer, running = _dy_taker(net, op, out), None
        if consumer is not None:   # (it runs after every term: it takes the last one as dy)
            *others, last = terms
            running = others[0][0] if len(others) == 1 else _chain(net, pos, op, others)
        if running is None:
            consumer, running = None, _chain(net, pos, op, terms)
        if running is None:
            continue
        if consumer is not None:
            net.redirect(out, last[0])
            net.add_input(consumer, "dy_addend", running)
        else:
            net.redirect(out, running)
        net.remove(op.name, *inner)
        changed = True
    return net.finish() if changed else job


def _made_at(net, pos, lbn):
    producer = net.producer_op(lbn)
    return pos.get(producer.name, -1) if producer is not None else -1


def _chain(net, pos, op, terms):
    """The lbn of the sum of ``terms`` (``(lbn, taker)`` pairs sorted by their producers'
    order, at least two) after adding each term made before a taker into the taker's
    ``_add_to_output`` (those no op can take summed first by one ``add_n`` placed like
    ``op``); None where no term can take another."""
    takers = [t for t in terms if t[1] is not None]
    rest = [t for t in terms if t[1] is None]
    if rest:  # an op can take only what is made before it
        last = max(_made_at(net, pos, t[0]) for t in rest)
        rest += [t for t in takers if _made_at(net, pos, t[0]) <= last]
        takers = [t for t in takers if _made_at(net, pos, t[0]) > last]
    else:
        rest, takers = takers[:1], takers[1:]
    if not takers:
        return None
    rest.sort(key=lambda term: _made_at(net, pos, term[0]))
    anchor = net.producer_op(rest[-1][0])
    if len(rest) == 1:
        running = rest[0][0]
    elif anchor is not None and net.placement(anchor) == net.placement(op):
        added = net.add_user_op(f"{op.name}-rest", "add_n", {"in": [t[0] for t in rest]}, like_op=anchor.name)
        running = added.user_conf.output["out"].s[0]
    else:
        return None
    for lbn, taker in takers:
        net.add_input(taker, "_add_to_output", running)
        running = lbn
    return running


def _dy_taker(net, add, out):
    """The only reader of ``out`` (``add``'s sum) where it reads it as its ``dy`` alone and
    can add a second gradient to it in its own kernel (an op with a free ``dy_addend``
    input, such as ``normalization_add_relu_grad``) on ``add``'s placement, else None."""
    reader = net.sole_reader(out)
    t = user_type(reader)
    opdef = registry.lookup(t) if t is not None else None
    takes = opdef is not None and opdef.input_def("dy_addend") is not None and "dy_addend" not in reader.user_conf.input
    return reader if takes and single_input(reader, "dy") == out and net.placement(reader) == net.placement(add) \
        else None


def _view_of(net, lbn):
    """``(reshape op, its input)`` where ``lbn`` is the output of a ``reshape`` that keeps its
    input's shape and is its input's only reader, else ``(None, lbn)``."""
    r = net.producer_op(lbn)
    if user_type(r) == "reshape" and lbn not in net.protected:
        src = single_input(r, "in")
        if net.desc(src).shape == net.desc(lbn).shape and net.sole_reader(src) is r:
            return r, src
    return None, lbn


def _sum_terms(net, add, terms, inner):
    """Collect the terms of ``add`` (an ``add_n``) into ``terms`` as ``(lbn, taker)``, seen
    through the shape-preserving reshapes and the ``add_n`` s read only by the sum (their
    names appended to ``inner``: the rewrite removes them); ``taker`` is the op making
    ``lbn`` that can add the sum of the terms before it into its own output
    (:func:`fuse_add_to_output`), else None."""
    for lbn in add.user_conf.input["in"].s:
        view, src = _view_of(net, lbn) if net.sole_reader(lbn) is add else (None, lbn)
        if view is not None:
            inner.append(view.name)
        prod = net.producer_op(src)
        if net.sole_reader(src) is not (view or add) or prod is None or net.placement(prod) != net.placement(add):
            terms.append((src, None))
        elif user_type(prod) == "add_n":
            inner.append(prod.name)
            _sum_terms(net, prod, terms, inner)
        else:
            t = user_type(prod)
            opdef = registry.lookup(t) if t is not None else None
            takes = opdef is not None and opdef.input_def("_add_to_output") is not None and \
                "_add_to_output" not in prod.user_conf.input and single_output(prod, opdef.outputs[0].name) == src
            terms.append((src, prod if takes else None))


fuse_add_to_output.is_enabled = lambda job: (not job.job_conf.HasField("enable_fuse_add_to_output")
                                             or job.job_conf.enable_fuse_add_to_output)


# ------------------------------------------------------------------ max pooling

def fuse_max_pool_grad(job):
    """``tf_max_pool_Nd`` + its ``tf_max_pool_Nd_grad`` -> the fused pair that keeps indices."""
    if not has_op_types(job, ("tf_max_pool_1d_grad", "tf_max_pool_2d_grad", "tf_max_pool_3d_grad")):
        return job
    net = Net(job)
    changed = False
    for op in _order(job):
        t = user_type(op)
        if t not in ("tf_max_pool_1d", "tf_max_pool_2d", "tf_max_pool_3d"):
            continue
        pool = net.op(op.name)
        x, y = single_input(pool, "x"), single_output(pool, "y")
        attrs = net.attrs(pool)
        grads = [r for r, arg, _ in net.readers(y) if user_type(r) == f"{t}_grad" and arg == "y"
                 and single_input(r, "x") == x and net.attrs(r) == attrs]
        if not grads:
            continue
        n = t[-2]
        fused = net.add_user_op(f"{pool.name}-fused", f"fused_tf_max_pool_{n}d", {"x": x}, attrs,
                                outputs=("y", "indices"), like_op=pool.name)
        fy, idx = fused.user_conf.output["y"].s[0], fused.user_conf.output["indices"].s[0]
        for g in grads:
            dx = single_output(g, "dx")
            relu = net.sole_reader(dx)
            inputs = {"x": x, "indices": idx, "dy": single_input(g, "dy")}
            if user_type(relu) == "relu_grad" and single_input(relu, "y") == x and single_input(relu, "dy") == dx:
                inputs["y"] = fy
                fg = net.add_user_op(f"{relu.name}-fused", f"fused_tf_max_pool_{n}d_grad", inputs,
                                     {**attrs, "relu_grad": True}, outputs=("dx",), like_op=relu.name)
                net.redirect(single_output(relu, "dx"), fg.user_conf.output["dx"].s[0])
                net.remove(g.name, relu.name)
                continue
            fg = net.add_user_op(f"{g.name}-fused", f"fused_tf_max_pool_{n}d_grad", inputs, attrs,
                                 outputs=("dx",), like_op=g.name)
            net.redirect(dx, fg.user_conf.output["dx"].s[0])
            net.remove(g.name)
        net.redirect(y, fy)
        net.remove(pool.name)
        _pool_before_relu(net, fused, x)
        changed = True
    return net.finish() if changed else job


def _pool_before_relu(net, fused, x):
    """relu -> fused max pool becomes a fused max pool with ``relu`` of the relu's input.

    Exact: max and relu commute, and where a window's max is <= 0 the output is 0, so
    the relu-absorbing grad (``relu_grad`` on the pool output) zeroes the gradient there
    whichever element the indices point at. Applies when the relu output is read only by
    the fused pool and its relu-absorbing grads (which read it for its shape alone).
    """
    relu = net.producer_op(x)
    if user_type(relu) != "relu" or x in net.protected:
        return
    readers = net.readers(x)
    if not all(r.name == fused.name or ((user_type(r) or "").startswith("fused_tf_max_pool")
                                        and net.attrs(r).get("relu_grad"))
               for r, _, _ in readers):
        return
    src = single_input(relu, "x")
    for r, arg, i in readers:
        net.set_input(r, arg, i, src)
    net.set_attr(fused, "relu", True)
    net.remove(relu.name)


__all__ = ["fuse_update_ops", "fuse_scalar_chains", "fuse_scalar_mul_matmul", "fuse_bias_add", "fold_batch_norm", "fuse_bias_add_relu",
           "fuse_conv_grads", "fuse_max_pool_grad"]
