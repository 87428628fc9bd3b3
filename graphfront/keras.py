"""``flow.keras``: legacy OneFlow's Keras-style activation names.

OneFlow up to v0.5 (``oneflow/python/ops/keras/activations.py`` and
``oneflow/python/ops/math_ops.py``, which exported ``math.tanh`` and ``math.gelu`` also as
``keras.activations.tanh`` / ``keras.activations.gelu``) offered
``flow.keras.activations``; OneFlow v0.6.0's ``single_client`` no longer has it. Programs of
that time (OneFlow-Benchmark's DCGAN: ``flow.keras.activations.tanh(out)``) call:

* ``activations.relu(x, alpha=0.0, max_value=None, threshold=0.0, name=None)``:
  ``flow.math.relu``; only the plain ReLU exists (OneFlow asserted the three defaults),
  any other ``alpha``, ``max_value`` or ``threshold`` raises ValueError naming it;
* ``activations.sigmoid(x, name=None)``: ``flow.math.sigmoid``;
* ``activations.tanh(x, name=None)``: ``flow.math.tanh``;
* ``activations.gelu(x, name=None)``: ``flow.math.gelu``;
* ``activations.gelu_grad(x, dy, name=None)``: ``flow.math.gelu_grad``.

Each builds the same op as the ``flow.math`` function it names (see their docstrings for
shapes, dtypes and errors).
"""
from __future__ import annotations

import types

from graphfront import math as _math

__all__ = ["activations"]


def _relu(x, alpha=0.0, max_value=None, threshold=0.0, name=None):
    """``max(x, 0)`` (``flow.math.relu``); the Keras arguments must keep their defaults.

    Raises:
        ValueError: ``alpha`` is not 0, ``max_value`` not None or ``threshold`` not 0
            (legacy OneFlow asserted the same).
    """
    for arg, value, default in (("alpha", alpha, 0.0), ("max_value", max_value, None),
                                ("threshold", threshold, 0.0)):
        if value != default:
            raise ValueError(f"flow.keras.activations.relu: argument '{arg}' must be {default!r} (only the plain "
                             f"ReLU exists in OneFlow), received {value!r}")
    return _math.relu(x, name=name)


_relu.__name__ = "relu"

activations = types.SimpleNamespace(relu=_relu, sigmoid=_math.sigmoid, tanh=_math.tanh, gelu=_math.gelu,
                                    gelu_grad=_math.gelu_grad)
activations.__doc__ = ("``flow.keras.activations``: ``relu``, ``sigmoid``, ``tanh``, ``gelu``, ``gelu_grad`` "
                       "(legacy OneFlow's names of the flow.math activations).")
