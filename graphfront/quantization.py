"""``flow.quantization``: the quantization-aware-training observers and fake quantization as
job-building functions (OneFlow v0.6.0
``python/oneflow/compatible/single_client/ops/quantize_ops.py``).

The ops, their arithmetic and attrs are defined in :mod:`graphfront.ops.quantization_ops`;
``FunctionConfig().enable_qat(True)`` inserts the same ops into a whole job
(:mod:`graphfront.passes.qat`).
"""
from __future__ import annotations

from typing import Optional, Tuple

from graphfront import initializers, scope
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc, expect_blob
from graphfront.ops.builder import build_op, unique_str
from graphfront.variables import get_variable

__all__ = ["fake_quantization", "min_max_observer", "moving_average_min_max_observer"]


def _quant_attrs(quantization_bit, quantization_scheme, quantization_formula):
    return {"quantization_bit": quantization_bit, "quantization_scheme": quantization_scheme,  # (the builder checks)
            "quantization_formula": quantization_formula}


def _blob(fn, arg, x):
    expect_blob(x, f"flow.quantization.{fn}", arg)


def min_max_observer(input: BlobDesc, quantization_bit: int = 8, quantization_scheme: str = "symmetric",
                     quantization_formula: str = "google", per_layer_quantization: bool = True,
                     name: Optional[str] = None) -> Tuple[BlobDesc, BlobDesc]:
    """The quantization ``(scale, zero_point)`` of ``input`` from its min and max (op
    ``min_max_observer``).

    ``input``: a float32 / float64 blob. Both outputs have ``input``'s dtype and shape
    ``(1,)``, or ``(input.shape[0],)`` with ``per_layer_quantization=False`` (per channel
    along axis 0). ``quantization_scheme``: ``"symmetric"`` (``scale = max|x| / (2^(bit-1) -
    1)``, zero point 0) or ``"affine"`` (``scale = (max - min) / (2^bit - 1)``, ``zero_point
    = -round(min / scale)``); ``quantization_formula``: ``"google"`` or ``"cambricon"`` (the
    scale is a power-of-two shift). Raises NotImplementedError for ``"cambricon"`` per
    channel, as OneFlow; JobBuildError for another scheme, formula or a bit outside 2..16.
    """
    _blob("min_max_observer", "input", input)
    if quantization_formula == "cambricon" and not per_layer_quantization:
        raise NotImplementedError("flow.quantization.min_max_observer: per-channel quantization "
                                  "(per_layer_quantization=False) is not supported with quantization_formula='cambricon'")
    attrs = _quant_attrs(quantization_bit, quantization_scheme, quantization_formula)
    attrs["per_layer_quantization"] = bool(per_layer_quantization)
    return tuple(build_op("min_max_observer", {"in": input}, attrs, outputs=("scale", "zero_point"), name=name,
                          prefix="MinMaxObserver_"))


def moving_average_min_max_observer(input: BlobDesc, quantization_bit: int = 8,
                                    quantization_scheme: str = "symmetric", quantization_formula: str = "google",
                                    momentum: float = 0.95, name: Optional[str] = None) -> Tuple[BlobDesc, BlobDesc]:
    """The quantization ``(scale, zero_point)`` of ``input`` from moving averages of its min
    and max (op ``moving_average_min_max_observer``).

    Creates, in ``flow.scope.namespace(name)``, the non-trainable variables ``moving_max``
    and ``moving_min`` (shape (1,), ``input``'s dtype, zeros) and ``current_train_step``
    (int64 (1,), zeros). In a ``type="train"`` job the op updates the averages in place
    while the step is at most 1 (the first batch's values, then ``m * momentum + v * (1 -
    momentum)``); other jobs only read them. Outputs: shape (1,), ``input``'s dtype. Same
    ``quantization_*`` arguments as :func:`min_max_observer`.
    """
    _blob("moving_average_min_max_observer", "input", input)
    name = name or unique_str("MovingAverageMinMaxObserver_")
    with scope.namespace(name):
        moving_max = get_variable("moving_max", (1,), input.dtype, initializers.zeros_initializer(input.dtype),
                                  trainable=False)
        moving_min = get_variable("moving_min", (1,), input.dtype, initializers.zeros_initializer(input.dtype),
                                  trainable=False)
        step = get_variable("current_train_step", (1,), _dt.int64, initializers.zeros_initializer(_dt.int64),
                            trainable=False)
    attrs = _quant_attrs(quantization_bit, quantization_scheme, quantization_formula)
    attrs.update(training=bool(jb.current().is_train), stop_update_after_iters=1, momentum=momentum)
    return tuple(build_op("moving_average_min_max_observer",
                          {"in": input, "current_train_step": step, "moving_max": moving_max, "moving_min": moving_min},
                          attrs, outputs=("scale", "zero_point"), name=name))


def fake_quantization(input: BlobDesc, scale: BlobDesc, zero_point: BlobDesc, quantization_bit: int = 8,
                      quantization_scheme: str = "symmetric", quantization_formula: str = "google",
                      name: Optional[str] = None) -> BlobDesc:
    """``input`` quantized to the grid of ``(scale, zero_point)`` and back (op
    ``fake_quantization``): symmetric ``clamp(round(x / s), -2^(bit-1), 2^(bit-1) - 1) * s``,
    affine ``(clamp(round(x / s + z), 0, 2^bit - 1) - z) * s``.

    ``scale`` / ``zero_point``: what an observer returned, shape (1,) or
    ``(input.shape[0],)`` (per channel). Returns a blob of ``input``'s shape and dtype; its
    gradient is the straight-through estimator. Raises JobBuildError for mismatched shapes.
    """
    for arg, x in (("input", input), ("scale", scale), ("zero_point", zero_point)):
        _blob("fake_quantization", arg, x)
    return build_op("fake_quantization", {"in": input, "scale": scale, "zero_point": zero_point},
                    _quant_attrs(quantization_bit, quantization_scheme, quantization_formula),
                    name=name, prefix="Fake_Quantization_")
