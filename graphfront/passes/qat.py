"""Quantization-aware training pass (``Job -> Job``), after OneFlow's ``QuantAwareTraining``.

Runs before autograd when ``FunctionConfig().enable_qat(True)`` set
``job_conf.enable_quantization_aware_training``. Every input of a convolution
(``conv1d/2d/3d``: ``in``, ``weight``) and of a matrix product (``matmul``,
``batch_matmul``, ``broadcast_matmul``: ``a``, ``b``) is replaced by its fake-quantized
value (:mod:`graphfront.ops.quantization_ops`), so the forward computes on the 8-bit
grid while the variables stay float and the gradient passes straight through. An op
built inside ``flow.experimental.scope.config(quantization_aware_training=False)`` (its
scope symbol's attribute) keeps its inputs float, as OneFlow skips such a consumer:

* a weight (a blob a variable op produces): ``min_max_observer`` (per layer, or per
  channel along axis 0 with ``qat.per_channel_weight_quantization``) then
  ``fake_quantization``, named ``<lbn>-qat-observer`` / ``<lbn>-qat-fake_quant``;
* an activation (any other blob): ``moving_average_min_max_observer`` over two new
  non-trainable variables ``<lbn>-qat-moving_max`` / ``-moving_min`` (float, ``(1,)``,
  zero; saved with the checkpoint), updated while the job trains and the train step is at
  most ``qat.moving_min_max_stop_update_after_iters``, with momentum
  ``qat.moving_min_max_momentum``; then ``fake_quantization``. A train job reads its train
  step (``System-Train-TrainStep-<job>``, created here when needed); a predict job reads
  a constant step and leaves the variables as trained.

``qat.symmetric`` picks the ``symmetric`` or ``affine`` scheme and ``qat.target_backend``
``"cambricon"`` the ``cambricon`` formula (per layer only); 8 bits. A blob read by several
quantized ops is quantized once. Every added op and variable is in the completed Job.
"""
from __future__ import annotations

from graphfront.core import op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import JobBuildError
from graphfront.framework import job_builder as jb
from graphfront.framework.scope_symbols import scope_attr
from graphfront.passes.optimizer import train_step_lbn
from graphfront.passes.rewrite import Net, single_input, single_output, user_type

#: op type -> the inputs quantized
QUANTIZED_INPUTS = {"conv1d": ("in", "weight"), "conv2d": ("in", "weight"), "conv3d": ("in", "weight"),
                    "matmul": ("a", "b"), "batch_matmul": ("a", "b"), "broadcast_matmul": ("a", "b")}
QUANTIZATION_BIT = 8


def _settings(job):
    conf = job.job_conf.qat_config
    formula = "cambricon" if conf.target_backend == "cambricon" else "google"
    if formula == "cambricon" and conf.per_channel_weight_quantization:
        raise JobBuildError(f"job '{job.job_conf.job_name}': qat.per_channel_weight_quantization is not supported "
                            "with qat.target_backend('cambricon') (per-layer scales only)")
    return {"quantization_formula": formula, "quantization_bit": QUANTIZATION_BIT,
            "quantization_scheme": "symmetric" if conf.symmetric else "affine"}


def _variable(b, name, dtype):
    conf = op_conf_pb2.OperatorConf(name=name)
    vc = conf.variable_conf
    vc.out = "out"
    vc.shape.dim.append(1)
    vc.data_type = dtype.proto
    vc.initializer.constant_conf.value = 0.0
    vc.trainable = False
    b.add_op(conf)
    return f"{name}/out"


def quantization_aware_training(job):
    """Insert the observers and fake-quantization ops (see module docstring)."""
    attrs = _settings(job)
    qat = job.job_conf.qat_config
    net = Net(job)
    training = job.job_conf.HasField("train_conf")
    step = None
    done = {}  # lbn -> fake-quantized lbn

    def current_step(like_op):
        nonlocal step
        if step is None:
            if training:
                step = train_step_lbn(net.b)
            else:
                const = net.add_user_op(f"System-QAT-TrainStep-{job.job_conf.job_name}", "constant", {},
                                        {"dtype": _dt.int64, "shape": (1,), "integer_value": 0}, like_op=like_op)
                step = single_output(const, "out")
        return step

    def quantize(lbn, consumer):
        if lbn in done:
            return done[lbn]
        base = lbn.replace("/", "-") + "-qat"
        producer = net.producer_op(lbn)
        # placed like the producer and right after it in job order (the autograd pass walks
        # the ops in job order, so the fake-quantized blob must come before its reader)
        like_op = producer.name if producer is not None else consumer
        if producer is not None and jb.op_kind(producer) == "variable_conf":
            observer = net.add_user_op(f"{base}-observer", "min_max_observer", {"in": lbn},
                                       dict(attrs, per_layer_quantization=not qat.per_channel_weight_quantization),
                                       outputs=("scale", "zero_point"), like_op=like_op)
        else:
            dtype = net.desc(lbn).dtype
            with net.b.scope_of_op(like_op):
                moving_max = _variable(net.b, f"{base}-moving_max", dtype)
                moving_min = _variable(net.b, f"{base}-moving_min", dtype)
            observer = net.add_user_op(
                f"{base}-observer", "moving_average_min_max_observer",
                {"in": lbn, "current_train_step": current_step(like_op), "moving_max": moving_max,
                 "moving_min": moving_min},
                dict(attrs, training=training, momentum=qat.moving_min_max_momentum,
                     stop_update_after_iters=qat.moving_min_max_stop_update_after_iters),
                outputs=("scale", "zero_point"), like_op=like_op)
        fake = net.add_user_op(f"{base}-fake_quant", "fake_quantization",
                               {"in": lbn, "scale": single_output(observer, "scale"),
                                "zero_point": single_output(observer, "zero_point")}, attrs, like_op=like_op)
        done[lbn] = single_output(fake, "out")
        return done[lbn]

    for op in list(job.net.op):
        args = QUANTIZED_INPUTS.get(user_type(op))
        if not args or not scope_attr(op.scope_symbol_id, "quantization_aware_training"):
            continue
        for arg in args:
            lbn = single_input(op, arg)
            if lbn is not None and net.desc(lbn).dtype in (_dt.float32, _dt.float64):
                net.set_input(net.op(op.name), arg, 0, quantize(lbn, op.name))
    return net.finish()


quantization_aware_training.is_enabled = lambda job: job.job_conf.enable_quantization_aware_training
