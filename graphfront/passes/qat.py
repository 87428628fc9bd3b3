"""Quantization-aware training pass (``Job -> Job``), OneFlow's ``QuantAwareTraining``
(``oneflow/core/job_rewriter/quantization_aware_training.cpp``).

Runs before autograd when ``FunctionConfig().enable_qat(True)`` set
``job_conf.enable_quantization_aware_training``. Blobs are replaced by their
fake-quantized values (:mod:`graphfront.ops.quantization_ops`), so the forward computes on
the 8-bit grid while the variables stay float and the gradient passes straight through.
Which blobs, as OneFlow chooses them (the ``qat`` field of each op type,
:func:`graphfront.ops.registry.op`):

* the *int8* ops: ``conv2d`` and ``matmul`` (``qat="int8"``), and under Google's formula
  (``qat.target_backend`` ``""``, ``"tensorrt"``, ``"tensorrt7"``) also ``batch_matmul``,
  ``add_n`` and the 2-d poolings ``tf_max_pool_2d`` / ``tf_avg_pool_2d``
  (``qat="int8_google"``; OneFlow's list names them ``max_pool_2d`` / ``avg_pool_2d``, the
  pooling ops' names before v0.6.0). A ``conv2d`` read by one op only takes the ops that
  follow it in a ``bias_add``, ``normalization``, ``relu`` chain with it (each read by one op
  only), computed before quantizing;
* a *transparent* op (``reshape``, ``qat="transparent"``, Google's formula) reading a blob
  that such an op produced;
* quantized: every input of those ops that none of them produced (a weight, an activation
  from elsewhere, a ``bias_add``'s bias), and under Google's formula every output of an
  int8 op, or of the last op of its conv chain, to whatever reads it; with
  ``target_backend("cambricon")`` every input of an int8 op instead. The inputs of
  ``normalization`` and blobs other than float32 stay as they are; an op built inside
  ``flow.experimental.scope.config(quantization_aware_training=False)`` (its scope
  symbol's attribute) keeps its inputs float and quantizes no output.

Per quantized blob ``lbn`` (``/`` written ``-``, as ``<base>``), OneFlow's names, so that
checkpoints interchange with OneFlow's:

* a weight (a blob a variable op produces): ``min_max_observer`` ``<base>-fake-quant-observer``
  (per layer, or per channel along axis 0 with ``qat.per_channel_weight_quantization``);
* a conv's bias (read by the ``bias_add`` after a ``conv2d``): no observer: its scale is the
  product of the conv input's and weight's scales (``broadcast_mul``
  ``<base>-fake-quant-mul-bias``) and its zero point a zero variable
  ``<base>-fake-quant-zp`` (one per output channel with per-channel weights), as the
  convolution's int32 accumulator sees it;
* any other blob: ``moving_average_min_max_observer`` ``<base>-fake-quant-observer`` over
  two non-trainable variables ``<base>-fake-quant-observer-fake-quant-moving-max`` / ``-min``
  (float, ``(1,)``, zero; saved with the checkpoint), updated while the job trains and the
  train step is at most ``qat.moving_min_max_stop_update_after_iters``, with momentum
  ``qat.moving_min_max_momentum``; a train job reads its train step
  (``System-Train-TrainStep-<job>``, created here when needed), a predict job a constant
  step, leaving the variables as trained;
* then ``fake_quantization`` ``<base>-fake-quant``, read instead of ``lbn``.

A transparent op's output takes its input's scale (a conv reading it after a reshape finds
its input scale there). ``qat.symmetric`` picks the ``symmetric`` or ``affine`` scheme and
``qat.target_backend`` ``"cambricon"`` the ``cambricon`` formula (per layer only); 8 bits.

Raises JobBuildError naming the op when a conv's bias needs a scale that its input or weight
does not have (a conv input quantization was disabled for), or the cambricon formula is
asked for per channel.
"""
from __future__ import annotations

from graphfront.core import op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import JobBuildError
from graphfront.framework import job_builder as jb
from graphfront.framework.scope_symbols import scope_attr
from graphfront.ops import registry
from graphfront.passes.optimizer import train_step_lbn
from graphfront.passes.rewrite import Net, single_output, user_type

QUANTIZATION_BIT = 8
#: the ops a conv2d may be followed by in the chain computed before quantizing (in order)
_CONV_CHAIN = ("bias_add", "normalization", "relu")


def _settings(job):
    conf = job.job_conf.qat_config
    formula = "cambricon" if conf.target_backend == "cambricon" else "google"
    if formula == "cambricon" and conf.per_channel_weight_quantization:
        raise JobBuildError(f"job '{job.job_conf.job_name}': qat.per_channel_weight_quantization is not supported "
                            "with qat.target_backend('cambricon') (per-layer scales only)")
    return {"quantization_formula": formula, "quantization_bit": QUANTIZATION_BIT,
            "quantization_scheme": "symmetric" if conf.symmetric else "affine"}


def _variable(b, name, length=1):
    conf = op_conf_pb2.OperatorConf(name=name)
    vc = conf.variable_conf
    vc.out = "out"
    vc.shape.dim.append(length)
    vc.data_type = _dt.float32.proto
    vc.initializer.constant_conf.value = 0.0
    vc.trainable = False
    b.add_op(conf)
    return f"{name}/out"


def _role(op, google):
    """``"int8"``, ``"transparent"`` or None: the op's part in the pass (module docstring)."""
    kind = jb.op_kind(op)
    role = registry.lookup(user_type(op)).qat if kind == "user_conf" else None
    if role == "int8" or (role == "int8_google" and google):
        return "int8"
    return "transparent" if role == "transparent" and google else None


def _sole_reader(net, op):
    """The one op reading ``op``'s outputs, or None (OneFlow: the node has one out edge)."""
    names = {name for _, _, lbn in jb.op_outputs(op) for name, _, _ in net.consumers.get(lbn, ())}
    return net.op(names.pop()) if len(names) == 1 else None


def _conv_chain(net, op):
    """``op`` and, for a ``conv2d``, the ``bias_add`` / ``normalization`` / ``relu`` ops that
    follow it in that order, each the sole reader of the one before."""
    chain = [op]
    if user_type(op) != "conv2d":
        return chain
    for kind in _CONV_CHAIN:
        nxt = _sole_reader(net, chain[-1])
        if nxt is None or user_type(nxt) != kind:
            continue
        chain.append(nxt)
    return chain


def quantization_aware_training(job):
    """Insert the observers and fake-quantization ops (see module docstring)."""
    attrs = _settings(job)
    google = attrs["quantization_formula"] == "google"
    qat = job.job_conf.qat_config
    net = Net(job)
    training = job.job_conf.HasField("train_conf")
    enabled = lambda op: scope_attr(op.scope_symbol_id, "quantization_aware_training")  # noqa: E731

    # the ops computing in 8 bits, their conv chains and the transparent ops reading them
    white, chains = set(), {}
    for op in job.net.op:
        role = _role(op, google)
        if role == "int8":
            chains[op.name] = _conv_chain(net, op)
            white.update(o.name for o in chains[op.name])
        elif role == "transparent" and any(net.producer.get(lbn) in white for _, _, lbn in jb.op_inputs(op)):
            white.add(op.name)

    # the edges (lbn, reader, arg, index) to quantize, and the observer giving each blob's scale
    edges, scale_of = [], {}
    inputs_of = {op.name: {arg: list(lbns) for arg, lbns in jb.op_args(op)[0].items()} for op in job.net.op}

    def add(lbn, reader, arg, index):
        if (lbn, reader, arg, index) not in edges:
            edges.append((lbn, reader, arg, index))
            scale_of[lbn] = f"{lbn.replace('/', '-')}-fake-quant-observer/scale_0"

    for op in list(job.net.op):
        if op.name not in white:
            continue
        for arg, i, lbn in jb.op_inputs(op):
            if net.producer.get(lbn) not in white and enabled(op):
                add(lbn, op.name, arg, i)
        role = _role(op, google)
        if role == "int8" and google:
            last = chains[op.name][-1]
            if enabled(last):
                for _, _, lbn in jb.op_outputs(last):
                    for reader, arg, i in list(net.consumers.get(lbn, ())):
                        add(lbn, reader, arg, i)
        elif role == "int8" and enabled(op):
            for arg, i, lbn in jb.op_inputs(op):
                add(lbn, op.name, arg, i)
        elif role == "transparent":
            (_, _, src), = jb.op_inputs(op)
            for _, _, lbn in jb.op_outputs(op):
                if src in scale_of:
                    scale_of[lbn] = scale_of[src]

    step = None

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

    def conv_of_bias(reader):
        """The ``conv2d`` whose bias ``reader`` adds, or None."""
        op = net.op(reader)
        if user_type(op) != "bias_add":
            return None
        return next((net.producer_op(lbn) for _, _, lbn in jb.op_inputs(op)
                     if net.producer_op(lbn) is not None and user_type(net.producer_op(lbn)) == "conv2d"), None)

    def scale_and_zero_point(lbn, reader, base, like_op):
        conv = conv_of_bias(reader)
        if conv is not None:
            scales = []
            for arg in ("in", "weight"):
                src = inputs_of[conv.name][arg][0]  # (as built: the conv reads its fake-quantized input now)
                if src not in scale_of:
                    raise JobBuildError(f"op '{conv.name}' (conv2d): its bias '{lbn}' is quantized with the scale of "
                                        f"its input '{arg}' ({src}), which is not quantized (a scope with "
                                        "quantization_aware_training=False?)")
                scales.append(scale_of[src])
            mul = net.add_user_op(f"{base}-fake-quant-mul-bias", "broadcast_mul", {"x": scales[0], "y": scales[1]},
                                  outputs=("z",), like_op=like_op)
            weight = net.desc(inputs_of[conv.name]["weight"][0])
            length = weight.shape[0] if qat.per_channel_weight_quantization else 1
            with net.b.scope_of_op(like_op):
                zero_point = _variable(net.b, f"{base}-fake-quant-zp", length)
            return single_output(mul, "z"), zero_point
        name = f"{base}-fake-quant-observer"
        producer = net.producer_op(lbn)
        if producer is not None and jb.op_kind(producer) == "variable_conf":
            observer = net.add_user_op(name, "min_max_observer", {"in": lbn},
                                       dict(attrs, per_layer_quantization=not qat.per_channel_weight_quantization),
                                       outputs=("scale", "zero_point"), like_op=like_op)
        else:
            with net.b.scope_of_op(like_op):
                moving_max = _variable(net.b, f"{name}-fake-quant-moving-max")
                moving_min = _variable(net.b, f"{name}-fake-quant-moving-min")
            observer = net.add_user_op(
                name, "moving_average_min_max_observer",
                {"in": lbn, "current_train_step": current_step(like_op), "moving_max": moving_max,
                 "moving_min": moving_min},
                dict(attrs, training=training, momentum=qat.moving_min_max_momentum,
                     stop_update_after_iters=qat.moving_min_max_stop_update_after_iters),
                outputs=("scale", "zero_point"), like_op=like_op)
        return single_output(observer, "scale"), single_output(observer, "zero_point")

    done = {}  # lbn -> fake-quantized lbn
    for lbn, reader, arg, index in edges:
        if net.desc(lbn).dtype != _dt.float32 or user_type(net.op(reader)) == "normalization":
            continue
        if lbn not in done:
            base = lbn.replace("/", "-")
            producer = net.producer_op(lbn)
            # placed like the producer and right after it in job order (the autograd pass walks
            # the ops in job order, so the fake-quantized blob must come before its reader)
            like_op = producer.name if producer is not None else reader
            scale, zero_point = scale_and_zero_point(lbn, reader, base, like_op)
            fake = net.add_user_op(f"{base}-fake-quant", "fake_quantization",
                                   {"in": lbn, "scale": scale, "zero_point": zero_point}, attrs, like_op=like_op)
            done[lbn] = single_output(fake, "out")
        net.set_input(net.op(reader), arg, index, done[lbn])
    return net.finish()


quantization_aware_training.is_enabled = lambda job: job.job_conf.enable_quantization_aware_training
