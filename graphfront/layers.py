"""``flow.layers``: layers that create their own variables (conv, dense).

Variables are created with ``flow.get_variable`` inside ``flow.scope.namespace(name)``:
``<name>-weight`` and ``<name>-bias``; the ops are ``<name>`` (conv) or
``<name>-matmul`` (dense) and ``<name>-bias_add`` (``single_client_api.md`` §4.7).
"""
from __future__ import annotations

from graphfront import initializers, nn, scope
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.ops.builder import build_op
from graphfront.variables import get_variable


def _activate(out, activation):
    return out if activation is None else activation(out, name="activation")


def _conv_layer(n, inputs, filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
                activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                bias_regularizer, trainable, name, weight_name, bias_name):
    first = nn._channels_first(data_format)
    if len(inputs.shape) != n + 2:
        raise JobBuildError(f"layers.conv{n}d '{name}': input expects rank {n + 2} ({data_format}), received "
                            f"shape {inputs.shape}{format_location(user_frame())}")
    cin = inputs.shape[1] if first else inputs.shape[-1]
    if cin % groups:
        raise JobBuildError(f"layers.conv{n}d '{name}': input has {cin} channels, not divisible by groups={groups}"
                            + format_location(user_frame()))
    k = nn._tuple(kernel_size, n, "kernel_size")
    wshape = [filters, cin // groups] + k if first else [filters] + k + [cin // groups]
    fmt = "channels_first" if first else "channels_last"
    with scope.namespace(name):
        weight = get_variable(weight_name or "weight", wshape, inputs.dtype,
                              kernel_initializer or initializers.xavier_uniform_initializer(fmt),
                              kernel_regularizer, trainable)
        bias = None
        if use_bias:
            bias = get_variable(bias_name or "bias", [filters], inputs.dtype,
                                bias_initializer or initializers.constant_initializer(0), bias_regularizer, trainable)
    out = nn.conv_nd(n, inputs, weight, strides, padding, data_format, dilation_rate, groups, name=name)
    if bias is not None:
        out = nn.bias_add(out, bias, data_format, name=f"{name}-bias_add")
    with scope.namespace(name):
        return _activate(out, activation)


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
           bias_name=None):
    """2-D conv layer: variable ``<name>-weight`` (filters, C/groups, kh, kw) for NCHW, default
    xavier-uniform; ``<name>-bias`` (filters,) zeros; op ``conv2d`` named ``<name>`` then
    ``bias_add`` ``<name>-bias_add`` and the optional ``activation(out)``.

    Raises JobBuildError when ``inputs`` is not rank 4 or channels do not divide by groups.
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


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
          kernel_regularizer=None, bias_regularizer=None, trainable=True, name="Dense", model_distribute=None):
    """Fully connected layer: ``inputs`` (N, ..., in) is flattened to (N*..., in), multiplied by the
    transposed weight ``<name>-weight`` (units, in) (default init: zeros, as OneFlow), plus
    ``<name>-bias`` (units,), then reshaped back to (N, ..., units). Ops: ``<name>-matmul``
    (``matmul`` with transpose_b), ``<name>-bias_add``.

    Raises JobBuildError when ``inputs`` has rank < 2 or ``units`` is not a positive int.
    """
    loc = user_frame()
    if len(inputs.shape) < 2:
        raise JobBuildError(f"layers.dense '{name}': input expects rank >= 2 (batch, features), received shape "
                            f"{inputs.shape}{format_location(loc)}")
    if not isinstance(units, int) or units <= 0:
        raise JobBuildError(f"layers.dense '{name}': units must be a positive int, received {units!r}"
                            f"{format_location(loc)}")
    in_features = inputs.shape[-1]
    x = inputs
    if len(inputs.shape) > 2:
        from graphfront import array
        x = array.reshape(inputs, (-1, in_features))
    with scope.namespace(name):
        weight = get_variable("weight", [units, in_features], inputs.dtype,
                              kernel_initializer or initializers.constant_initializer(0), kernel_regularizer,
                              trainable)
        out = build_op("matmul", {"a": x, "b": weight}, {"transpose_b": True}, name="matmul")
        if use_bias:
            bias = get_variable("bias", [units], inputs.dtype,
                                bias_initializer or initializers.constant_initializer(0), bias_regularizer, trainable)
            out = build_op("bias_add", {"a": out, "b": bias}, {"axis": 1}, name="bias_add")
        out = _activate(out, activation)
    if len(inputs.shape) > 2:
        from graphfront import array
        out = array.reshape(out, inputs.shape[:-1] + (units,))
    return out
