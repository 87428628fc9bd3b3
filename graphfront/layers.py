"""``flow.layers``: layers that create their own variables (conv, dense).

Variables are created with ``flow.get_variable`` inside ``flow.scope.namespace(name)``:
``<name>-weight`` and ``<name>-bias``; the ops are ``<name>`` (conv) or
``<name>-matmul`` (dense) and ``<name>-bias_add`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/layers.py``).
Default names are OneFlow's fixed strings ("Conv2d", "Dense", "BatchNorm" ...), so two
unnamed layers of one kind in one job share their variables or clash, as in OneFlow.
"""
from __future__ import annotations

import contextlib

from graphfront import distribute, initializers, nn, scope
from graphfront.framework.blob_desc import BlobDesc, expect_blob, expect_number, is_int
from graphfront.categorical import categorical_ordinal_encoder  # noqa: F401 - flow.layers.*
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.ops.builder import build_op
from graphfront.variables import get_variable
from graphfront import array
from graphfront.ops.norm_ops import param_dtype
from graphfront.framework import job_builder as jb
from graphfront import math as _math


def _activate(out, activation, who):
    if activation is not None and not callable(activation):
        _fail(f"{who}: activation must be a function such as flow.math.relu or None, received "
              f"{type(activation).__name__} {activation!r}")
    return out if activation is None else activation(out, name="activation")


def _conv_layer(n, inputs, filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
                activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                bias_regularizer, trainable, name, weight_name, bias_name):
    first = nn._channels_first(data_format, f"layers.conv{n}d '{name}'")
    if len(inputs.shape) != n + 2:
        raise JobBuildError(f"layers.conv{n}d '{name}': input expects rank {n + 2} ({data_format}), received "
                            f"shape {inputs.shape}{format_location(user_frame())}")
    cin = inputs.shape[1] if first else inputs.shape[-1]
    groups = nn._tuple(groups, 1, f"layers.conv{n}d '{name}': argument 'groups'")[0]
    if cin % groups:
        raise JobBuildError(f"layers.conv{n}d '{name}': input has {cin} channels, not divisible by groups={groups}"
                            + format_location(user_frame()))
    k = nn._tuple(kernel_size, n, f"layers.conv{n}d '{name}': argument 'kernel_size'")
    wshape = [filters, cin // groups] + k if first else [filters] + k + [cin // groups]
    fmt = "channels_first" if first else "channels_last"
    # a given weight_name / bias_name names the variable outside the layer's namespace
    # (as OneFlow's oneflow/python/ops/layers.py), so get_variable(weight_name) finds it
    with scope.namespace(name) if weight_name is None else contextlib.nullcontext():
        weight = get_variable(weight_name or "weight", wshape, inputs.dtype,
                              kernel_initializer or initializers.xavier_uniform_initializer(fmt),
                              kernel_regularizer, trainable)
    bias = None
    if use_bias:
        with scope.namespace(name) if bias_name is None else contextlib.nullcontext():
            bias = get_variable(bias_name or "bias", [filters], inputs.dtype,
                                bias_initializer or initializers.constant_initializer(0), bias_regularizer, trainable)
    out = nn.conv_nd(n, inputs, weight, strides, padding, data_format, dilation_rate, groups, name=name)
    if bias is not None:
        out = nn.bias_add(out, bias, data_format, name=f"{name}-bias_add")
    with scope.namespace(name):
        return _activate(out, activation, f"layers.conv{n}d '{name}'")


def conv1d(inputs, filters, kernel_size=1, strides=1, padding="VALID", data_format="NCW", dilation_rate=None,
           groups=1, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, trainable=True, name="Conv1d", weight_name=None,
           bias_name=None):
    """1-D conv layer; see :func:`conv2d`."""
    return _conv_layer(1, inputs, filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
                       activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                       bias_regularizer, trainable, name, weight_name, bias_name)


def conv2d(inputs, filters, kernel_size=1, strides=1, padding="VALID", data_format="NCHW", dilation_rate=None,
           groups=1, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, trainable=True, name="Conv2d", weight_name=None,
           bias_name=None) -> BlobDesc:
    """2-D convolution layer (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/layers.py``).

    Creates variable ``<name>-weight`` (filters, C/groups, kh, kw) for NCHW (default
    xavier-uniform) and ``<name>-bias`` (filters,) (zeros), then emits op ``conv2d`` named
    ``<name>``, ``bias_add`` ``<name>-bias_add`` and the optional ``activation(out)``.

    Args:
        inputs: float blob (N, C, H, W) for ``"NCHW"`` or (N, H, W, C) for ``"NHWC"``.
        filters: int, output channels.
        kernel_size: int or (kh, kw).
        strides: int or (sh, sw).
        padding: ``"VALID"``, ``"SAME"`` or per-dim (before, after) pairs.
        data_format: ``"NCHW"`` or ``"NHWC"``.
        dilation_rate: int or (dh, dw); default 1.
        groups: int dividing C and ``filters``.
        activation: a function of one blob (e.g. ``flow.nn.relu``) or None.
        use_bias: add ``<name>-bias``.
        kernel_initializer: ``InitializerConf`` of the weight.
        bias_initializer: ``InitializerConf`` of the bias.
        kernel_regularizer: ``RegularizerConf`` of the weight.
        bias_regularizer: ``RegularizerConf`` of the bias.
        trainable: whether the optimizer updates the variables.
        name: op and variable-name prefix; layers of one job with one name share variables.
        weight_name: variable name instead of ``weight``.
        bias_name: variable name instead of ``bias``.

    Returns:
        BlobDesc: (N, filters, H', W') for NCHW, with
        ``H' = (H + pad_h - ((kh - 1) * dh + 1)) // sh + 1``; the dtype of ``inputs``.

    Raises:
        JobBuildError: ``inputs`` is not rank 4, channels do not divide by ``groups``, or
            an argument has the wrong type (the message names the layer and your line).
    """
    return _conv_layer(2, inputs, filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
                       activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                       bias_regularizer, trainable, name, weight_name, bias_name)


def conv3d(inputs, filters, kernel_size=1, strides=1, padding="VALID", data_format="NCDHW", dilation_rate=None,
           groups=1, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, trainable=True, name="Conv3d", weight_name=None,
           bias_name=None):
    """3-D conv layer; see :func:`conv2d`."""
    return _conv_layer(3, inputs, filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
                       activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                       bias_regularizer, trainable, name, weight_name, bias_name)


def _check_distribute(layer, name, model_distribute):
    if not isinstance(model_distribute, distribute.Distribute) or model_distribute is distribute.PARTIAL_SUM:
        _fail(f"layers.{layer} '{name}': model_distribute expects a flow.distribute policy (broadcast(), split(0) "
              f"or auto()), received {model_distribute!r}")


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
          kernel_regularizer=None, bias_regularizer=None, trainable=True, name="Dense",
          model_distribute=distribute.broadcast()) -> BlobDesc:
    """Fully connected layer (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/layers.py``).

    ``inputs`` (N, ..., in) is flattened to (N*..., in), multiplied by the transposed weight
    ``<name>-weight`` (units, in) (default init: zeros, as OneFlow), plus ``<name>-bias``
    (units,), then reshaped back to (N, ..., units). Ops: ``<name>-matmul`` (``matmul`` with
    ``transpose_b``), ``<name>-bias_add``.

    Args:
        inputs: float blob of rank >= 2, (N, ..., in).
        units: positive int, output features.
        activation: a function of one blob (e.g. ``flow.nn.relu``) or None.
        use_bias: add ``<name>-bias``.
        kernel_initializer: ``InitializerConf`` of the weight (default zeros).
        bias_initializer: ``InitializerConf`` of the bias (default zeros).
        kernel_regularizer: ``RegularizerConf`` of the weight.
        bias_regularizer: ``RegularizerConf`` of the bias.
        trainable: whether the optimizer updates the variables.
        name: op and variable-name prefix.
        model_distribute: a ``flow.distribute`` policy laying the weight over the devices
            of a multi-device placement: ``split(0)`` splits the units (the bias too), so the
            output is split on axis 1 (model parallel); on one device it changes nothing.

    Returns:
        BlobDesc: (N, ..., units), the dtype of ``inputs``.

    Raises:
        JobBuildError: ``inputs`` has rank < 2, ``units`` is not a positive int or
            ``model_distribute`` is not a distribute policy.
    """
    _check_distribute("dense", name, model_distribute)
    loc = user_frame()
    if len(inputs.shape) < 2:
        raise JobBuildError(f"layers.dense '{name}': input expects rank >= 2 (batch, features), received shape "
                            f"{inputs.shape}{format_location(loc)}")
    if not is_int(units) or units <= 0:
        raise JobBuildError(f"layers.dense '{name}': units must be a positive int, received {units!r}"
                            f"{format_location(loc)}")
    units = int(units)
    in_features = inputs.shape[-1]
    x = inputs
    if len(inputs.shape) > 2:
        x = array.reshape(inputs, (-1, in_features))
    with scope.namespace(name):
        weight = get_variable("weight", [units, in_features], inputs.dtype,
                              kernel_initializer or initializers.constant_initializer(0), kernel_regularizer,
                              trainable, distribute=model_distribute)
        out = build_op("matmul", {"a": x, "b": weight}, {"transpose_b": True}, name="matmul")
        if use_bias:
            bias = get_variable("bias", [units], inputs.dtype,
                                bias_initializer or initializers.constant_initializer(0), bias_regularizer, trainable,
                                distribute=model_distribute if model_distribute == distribute.split(0) else None)
            out = build_op("bias_add", {"a": out, "b": bias}, {"axis": 1}, name="bias_add")
        out = _activate(out, activation, f"layers.dense '{name}'")
    if len(inputs.shape) > 2:
        out = array.reshape(out, inputs.shape[:-1] + (units,))
    return out


# ------------------------------------------------------------------ normalization layers

def _param_dtype(dtype):
    return param_dtype(dtype)


def _fail(msg):
    raise JobBuildError(msg + format_location(user_frame()))


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True,
                        beta_initializer=None, gamma_initializer=None, beta_regularizer=None, gamma_regularizer=None,
                        moving_mean_initializer=None, moving_variance_initializer=None, trainable=True,
                        training=True, name="BatchNorm", gamma_name=None, beta_name=None, moving_mean_name=None,
                        moving_variance_name=None):
    """Batch normalization over every axis of ``inputs`` but ``axis`` (default -1: channels last;
    pass axis=1 for NCHW).

    Variables, shape (C,) with C = inputs.shape[axis] (float32 for float16 inputs), created in
    ``flow.scope.namespace(name)``: ``<name>-beta`` (zeros) and ``<name>-gamma`` (ones), both
    ``trainable``; ``<name>-moving_mean`` (zeros) and ``<name>-moving_variance`` (ones), never
    trainable. ``center=False``/``scale=False`` use ``constant`` ops (0 / 1) instead of beta/gamma.

    Emits one ``normalization`` op named ``name`` (inputs x, moving_mean, moving_variance,
    gamma, beta; attrs axis, epsilon, training, momentum). ``training`` is forced False in
    predict jobs and when ``trainable=False``; when training, the op also outputs ``mean`` and
    ``inv_variance`` and updates the moving statistics in place: moving = moving * momentum +
    batch * (1 - momentum) (``momentum`` is the *keep* ratio, PyTorch's is 1 - momentum), the
    variance one with the unbiased batch variance. OneFlow emits this op on GPU placements
    and composes moments/assign ops on CPU; graphfront runs the op on both.

    Returns y, shape and dtype of ``inputs``. Raises JobBuildError on a bad axis, momentum
    outside [0, 1] or epsilon <= 0.
    """
    ndim = len(inputs.shape)
    if not is_int(axis) or not -ndim <= axis < ndim:
        _fail(f"layers.batch_normalization '{name}': axis {axis!r} is out of range for inputs of shape {inputs.shape}")
    axis = int(axis) % ndim
    momentum = expect_number(momentum, f"layers.batch_normalization '{name}'", "momentum")
    epsilon = expect_number(epsilon, f"layers.batch_normalization '{name}'", "epsilon")
    if not 0.0 <= momentum <= 1.0:
        _fail(f"layers.batch_normalization '{name}': momentum must be in [0, 1] (the fraction of the moving "
              f"statistics kept per step), received {momentum}")
    if not epsilon > 0:
        _fail(f"layers.batch_normalization '{name}': epsilon must be > 0, received {epsilon}")
    c = inputs.shape[axis]
    pdtype = _param_dtype(inputs.dtype)
    with scope.namespace(name):
        if center:
            beta = get_variable(beta_name or "beta", [c], pdtype, beta_initializer or initializers.zeros_initializer(),
                                beta_regularizer, trainable)
        else:
            beta = array.constant(0.0, pdtype, [c], name="beta")
        if scale:
            gamma = get_variable(gamma_name or "gamma", [c], pdtype,
                                 gamma_initializer or initializers.ones_initializer(), gamma_regularizer, trainable)
        else:
            gamma = array.constant(1.0, pdtype, [c], name="gamma")
        moving_mean = get_variable(moving_mean_name or "moving_mean", [c], pdtype,
                                   moving_mean_initializer or initializers.zeros_initializer(), trainable=False)
        moving_variance = get_variable(moving_variance_name or "moving_variance", [c], pdtype,
                                       moving_variance_initializer or initializers.ones_initializer(), trainable=False)
    training = bool(training) and bool(trainable) and jb.current().is_train
    outputs = ("y", "mean", "inv_variance") if training else ("y",)
    outs = build_op("normalization", {"x": inputs, "moving_mean": moving_mean, "moving_variance": moving_variance,
                                      "gamma": gamma, "beta": beta},
                    {"axis": axis, "epsilon": float(epsilon), "training": training, "momentum": float(momentum)},
                    outputs=outputs, name=name)
    return outs[0] if training else outs


def batch_normalization_add_relu(inputs, addend=None, axis=-1, momentum=0.99, epsilon=0.001, center=True,
                                 scale=True, beta_initializer=None, gamma_initializer=None, beta_regularizer=None,
                                 gamma_regularizer=None, moving_mean_initializer=None,
                                 moving_variance_initializer=None, trainable=True, training=True, name="BatchNorm",
                                 gamma_name=None, beta_name=None, moving_mean_name=None, moving_variance_name=None):
    """relu(batch_normalization(inputs) + addend) (``addend`` optional, of the shape of ``inputs``).

    Built as OneFlow builds it off its fused GPU path: :func:`batch_normalization` (same
    arguments, variables and ``normalization`` op named ``name``), then ``add_n``
    ``<name>-add`` when ``addend`` is given and ``relu`` ``<name>-relu``. Returns y, shape
    and dtype of ``inputs``; JobBuildError when ``addend``'s shape or dtype differs.
    """
    if addend is not None:
        expect_blob(addend, f"layers.batch_normalization_add_relu '{name}'", "addend")
    if addend is not None and (addend.shape != inputs.shape or addend.dtype is not inputs.dtype):
        _fail(f"layers.batch_normalization_add_relu '{name}': addend expected {inputs.dtype.name} {inputs.shape} "
              f"(as inputs), received {addend.dtype.name} {addend.shape}")
    y = batch_normalization(inputs, axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
                            beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
                            beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer,
                            moving_mean_initializer=moving_mean_initializer,
                            moving_variance_initializer=moving_variance_initializer, trainable=trainable,
                            training=training, name=name, gamma_name=gamma_name, beta_name=beta_name,
                            moving_mean_name=moving_mean_name, moving_variance_name=moving_variance_name)
    if addend is not None:
        y = _math.add(y, addend, name=f"{name}-add")
    return nn.relu(y, name=f"{name}-relu")


def batch_normalization_relu(inputs, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True,
                             beta_initializer=None, gamma_initializer=None, beta_regularizer=None,
                             gamma_regularizer=None, moving_mean_initializer=None, moving_variance_initializer=None,
                             trainable=True, training=True, name="BatchNorm"):
    """relu(batch_normalization(inputs)): :func:`batch_normalization_add_relu` without addend."""
    return batch_normalization_add_relu(inputs, None, axis=axis, momentum=momentum, epsilon=epsilon, center=center,
                                        scale=scale, beta_initializer=beta_initializer,
                                        gamma_initializer=gamma_initializer, beta_regularizer=beta_regularizer,
                                        gamma_regularizer=gamma_regularizer,
                                        moving_mean_initializer=moving_mean_initializer,
                                        moving_variance_initializer=moving_variance_initializer, trainable=trainable,
                                        training=training, name=name)


def layer_norm(inputs, center=True, scale=True, trainable=True, begin_norm_axis=1, begin_params_axis=-1,
               epsilon=1e-05, name="LayerNorm"):
    """Layer normalization over axes >= ``begin_norm_axis`` (biased variance) with variables
    ``<name>-beta`` (zeros, if ``center``) and ``<name>-gamma`` (ones, if ``scale``) of shape
    ``inputs.shape[begin_params_axis:]``, created in ``flow.scope.namespace(name)``.

    Emits one ``layer_norm`` op named ``name`` (outputs y, mean, inv_variance and, with
    ``scale``, normalized); OneFlow's CPU path composes it from moments and arithmetic,
    graphfront runs the op on CPU and GPU. Returns y (shape of ``inputs``).
    """
    ndim = len(inputs.shape)
    for what, a in (("begin_norm_axis", begin_norm_axis), ("begin_params_axis", begin_params_axis)):
        if not is_int(a) or not -ndim <= a < ndim:
            _fail(f"layers.layer_norm '{name}': {what} {a!r} is out of range for inputs of shape {inputs.shape}")
    begin_norm_axis, begin_params_axis = int(begin_norm_axis), int(begin_params_axis)
    pshape = list(inputs.shape[begin_params_axis % ndim:])
    with scope.namespace(name):
        beta = get_variable("beta", pshape, inputs.dtype, initializers.zeros_initializer(),
                            trainable=trainable) if center else None
        gamma = get_variable("gamma", pshape, inputs.dtype, initializers.ones_initializer(),
                             trainable=trainable) if scale else None
    outputs = ("y", "mean", "inv_variance") + (("normalized",) if scale else ())
    outs = build_op("layer_norm", {"x": inputs, "beta": beta, "gamma": gamma},
                    {"center": bool(center), "scale": bool(scale), "begin_norm_axis": begin_norm_axis,
                     "begin_params_axis": begin_params_axis,
                     "epsilon": expect_number(epsilon, f"layers.layer_norm '{name}'", "epsilon")},
                    outputs=outputs, name=name)
    return outs[0]


def layer_norm_grad(dy, x, mean, inv_variance, begin_norm_axis=1, name="LayerNormGrad"):
    """Explicit layer-norm backward for x (op ``layer_norm_grad``, attr epsilon 1e-5 as OneFlow):
    dx = inv * (dy - mean(dy) - xhat * mean(dy * xhat)) over axes >= ``begin_norm_axis``, with
    xhat = (x - mean) * inv and ``mean``/``inv_variance`` the ``layer_norm`` outputs (shape
    ``x.shape[:begin_norm_axis]``). Returns dx (shape of ``x``); shape errors are build errors."""
    return build_op("layer_norm_grad", {"dy": dy, "x": x, "mean": mean, "inv_variance": inv_variance},
                    {"begin_norm_axis": begin_norm_axis, "epsilon": 1e-05}, outputs=("dx",), name=name)


def layer_norm_param_grad(dy, norm, gamma, begin_params_axis=-1, name="LayerNormParamGrad"):
    """Explicit layer-norm backward for gamma/beta (op ``layer_norm_param_grad``).

    Returns ``(normalized_diff, beta_diff, gamma_diff)``: dy * gamma (shape of ``dy``), and
    sum(dy), sum(dy * norm) over the axes before ``begin_params_axis`` (shape
    ``dy.shape[begin_params_axis:]``, the shape of ``gamma``)."""
    nd, bd, gd, _buf = build_op("layer_norm_param_grad", {"dy": dy, "normalized": norm, "gamma": gamma},
                                {"begin_params_axis": begin_params_axis},
                                outputs=("normalized_diff", "beta_diff", "gamma_diff", "reduce_buf"), name=name)
    return nd, bd, gd


# ------------------------------------------------------------------ prelu, upsample

def prelu(inputs, alpha_initializer=None, alpha_regularizer=None, shared_axes=None, trainable=True, name="PRelu",
          model_distribute=distribute.broadcast()):
    """Parametric ReLU: y = x if x > 0 else alpha * x, with variable ``<name>-alpha`` (default init
    0) of shape ``inputs.shape[1:]`` where each axis in ``shared_axes`` (axes of ``inputs``,
    1..rank-1) is 1 (alpha shared along it). Op ``tf_prelu`` named ``name``.
    ``model_distribute``: a ``flow.distribute`` policy (a hint on one device)."""
    _check_distribute("prelu", name, model_distribute)
    ndim = len(inputs.shape)
    shape = list(inputs.shape[1:])
    if shared_axes is not None and not isinstance(shared_axes, (list, tuple)):
        _fail(f"layers.prelu '{name}': shared_axes must be a list of axes 1..{ndim - 1}, received {shared_axes!r}")
    for a in shared_axes or ():
        if not is_int(a) or not 1 <= a < ndim:
            _fail(f"layers.prelu '{name}': shared_axes entries must be axes 1..{ndim - 1} of inputs "
                  f"{inputs.shape}, received {shared_axes!r}")
        shape[a - 1] = 1
    with scope.namespace(name):
        alpha = get_variable("alpha", shape, inputs.dtype, alpha_initializer or initializers.constant_initializer(0),
                             alpha_regularizer, trainable)
    return build_op("tf_prelu", {"x": inputs, "alpha": alpha}, outputs=("y",), name=name)


def upsample_2d(x, size=(2, 2), align_corners=False, data_format="NCHW", interpolation="nearest",
                name="Upsample2D"):
    """Upsample a rank-4 blob by integer factors ``size`` = (h_scale, w_scale) (or one int):
    output (N, C, H*h, W*w) for NCHW, (N, H*h, W*w, C) for NHWC. ``interpolation``: "nearest"
    or "bilinear" (``align_corners`` applies to bilinear). Op ``upsample`` named ``name``."""
    if is_int(size):
        size = (size, size)
    size = tuple(size) if isinstance(size, (list, tuple)) else (size,)
    if len(size) != 2 or not all(is_int(s) and s > 0 for s in size):
        _fail(f"layers.upsample_2d '{name}': size must be a positive int or two positive ints, received {size!r}")
    if interpolation not in ("nearest", "bilinear"):
        _fail(f"layers.upsample_2d '{name}': interpolation must be 'nearest' or 'bilinear', "
              f"received {interpolation!r}")
    if not isinstance(data_format, str) or data_format.upper() not in ("NCHW", "NHWC", "CHANNELS_FIRST",
                                                                        "CHANNELS_LAST"):
        _fail(f"layers.upsample_2d '{name}': data_format must be 'NCHW' or 'NHWC', received {data_format!r}")
    fmt = "channels_first" if data_format.upper() in ("NCHW", "CHANNELS_FIRST") else "channels_last"
    return build_op("upsample", {"x": x}, {"height_scale": float(size[0]), "width_scale": float(size[1]),
                                           "align_corners": bool(align_corners), "data_format": fmt,
                                           "interpolation": interpolation},
                    outputs=("y",), name=name)
