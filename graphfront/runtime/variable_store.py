"""Variable store and initializers.

A Session keeps one tensor per variable op name, on the device of the variable's
placement, shared by every job of the session. Tensors are created once and then only
updated in place (by update ops, ``assign`` and ``flow.load_variables``), so compiled
plans can bind them directly.

Initializers implement OneFlow's ``InitializerConf`` kinds
(OneFlow v0.6.0 ``oneflow/core/job/initializer_conf.proto``) with torch's RNG: uniform and normal draws,
truncated normal (resampled beyond two standard deviations, as TensorFlow/OneFlow),
and variance scaling with fans computed from the shape and ``data_format``.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

import torch

from graphfront.framework import dtypes as _dt
from graphfront.core import initializer_conf_pb2
from graphfront.framework.errors import JobBuildError

VarianceNorm = initializer_conf_pb2.VarianceNorm
RandomDistribution = initializer_conf_pb2.RandomDistribution


def fans(shape, data_format) -> tuple:
    """(fan_in, fan_out) of a weight shape, as OneFlow v0.6.0 documents them (its
    ``kaiming_initializer`` counts them so).

    A weight ``[out, in, *k]`` (``data_format`` ``"channels_first"`` or ``""``) or
    ``[out, *k, in]`` (``"channels_last"``) has fan_in = in * prod(k) and fan_out =
    out * prod(k); a vector ``[n]`` has fan_in 1 and fan_out n.
    """
    if not shape:
        return 1, 1
    fan_in = math.prod(shape[1:])
    receptive = math.prod(shape[1:-1]) if data_format == "channels_last" else math.prod(shape[2:])
    return fan_in, shape[0] * receptive


def _is_allocation_failure(e) -> bool:
    """torch's CPU ("can't allocate memory") or CUDA (OutOfMemoryError) allocation failure."""
    return isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in str(e)


def initial_value(init, shape, dtype, device, generator=None) -> torch.Tensor:
    """A new tensor filled according to ``InitializerConf`` ``init``."""
    return initializer(init, shape, dtype)(device, generator)


def initializer(init, shape, dtype):
    """The fill of ``InitializerConf`` ``init`` for a tensor of ``shape`` and ``dtype``: a
    function ``(device, generator=None) -> new tensor``. The conf is read here, once, so a
    call runs torch ops only (TorchDynamo traces it in the native lowering).

    Raises ValueError for a conf that sets no initializer or one graphfront does not
    support; JobBuildError for a variance scaling with a scale that is not positive and finite.
    """
    kind = init.WhichOneof("type")
    if kind is None:
        raise ValueError("initializer sets no type")
    c = getattr(init, kind)
    if kind in ("constant_conf", "constant_int_conf"):
        value = c.value
        fill = lambda t, g: t.fill_(value)  # noqa: E731
    elif kind == "empty_conf":
        fill = lambda t, g: t.zero_()  # noqa: E731
    elif kind == "random_uniform_int_conf":
        low, high = c.min, c.max
        fill = lambda t, g: t.random_(low, high, generator=g)  # noqa: E731
    elif kind == "random_uniform_conf":
        low, high = c.min, c.max
        fill = lambda t, g: t.uniform_(low, high, generator=g)  # noqa: E731
    elif kind == "random_normal_conf":
        mean, std = c.mean, c.std
        fill = lambda t, g: t.normal_(mean, std, generator=g)  # noqa: E731
    elif kind == "truncated_normal_conf":
        mean, std = c.mean, c.std
        fill = lambda t, g: _truncated_normal(t, mean, std, g)  # noqa: E731
    elif kind == "variance_scaling_conf":
        fill = _variance_scaling(c, shape)
    elif kind in ("range_conf", "int_range_conf"):
        axis = c.axis % len(shape) if shape else 0
        n = shape[axis] if shape else 1
        start, stride = c.start, c.stride
        view = [1] * len(shape)
        if shape:
            view[axis] = n

        def fill(t, g):
            vals = start + stride * torch.arange(n, dtype=torch.float64, device=t.device)
            return t.copy_(vals.reshape(view).expand(shape).to(t.dtype))
    else:
        raise ValueError(f"initializer kind {kind!r} is not supported")

    def make(device, generator=None):
        return fill(torch.empty(shape, dtype=dtype.torch, device=device), generator)
    return make


def _variance_scaling(c, shape):
    fan_in, fan_out = fans(shape, c.data_format)
    fan = {VarianceNorm.kFanIn: fan_in, VarianceNorm.kFanOut: fan_out}.get(c.variance_norm, (fan_in + fan_out) / 2.0)
    if not 0 < c.scale < math.inf:
        raise JobBuildError(f"variance_scaling_conf: scale must be a positive finite number, received {c.scale}")
    scale = c.scale / max(1.0, fan)
    if c.distribution == RandomDistribution.kRandomUniform:
        limit = math.sqrt(3.0 * scale)
        return lambda t, g: t.uniform_(-limit, limit, generator=g)
    if c.distribution == RandomDistribution.kRandomNormal:
        std = math.sqrt(scale)
        return lambda t, g: t.normal_(0.0, std, generator=g)
    # truncated normal with the std corrected for the truncation at 2 sigma
    std = math.sqrt(scale) / 0.87962566103423978
    return lambda t, g: _truncated_normal(t, 0.0, std, g)


_PHI_MINUS_2 = 0.5 * math.erfc(2.0 / math.sqrt(2.0))  # standard normal CDF at -2


def _truncated_normal(t, mean, std, generator):
    """Standard normal draws, each one beyond two standard deviations redrawn until it is
    not; then scaled. Redraws touch only the entries still out of range (in index order,
    so the draws are those of redrawing the whole masked set each round).

    Off the CPU (a GPU), and in a step traced by the native lowering, the redraw loop would
    wait on the device each round (or not trace); there the
    same distribution is drawn in one pass, by the inverse CDF of a uniform draw in
    ``[Phi(-2), Phi(2)]`` (computed in float64 where the device has it)."""
    if t.device.type != "cpu" or torch.compiler.is_compiling():
        wide = torch.float32 if t.device.type == "mps" else torch.float64
        u = torch.empty(t.shape, dtype=wide, device=t.device).uniform_(_PHI_MINUS_2, 1.0 - _PHI_MINUS_2,
                                                                        generator=generator)
        z = torch.special.ndtri(u).clamp_(-2.0, 2.0)
        return t.copy_(z.mul_(std).add_(mean))
    t.normal_(0.0, 1.0, generator=generator)
    flat = t.view(-1)
    bad = (flat.abs() > 2.0).nonzero().view(-1)
    while bad.numel():
        vals = torch.empty(bad.numel(), dtype=t.dtype, device=t.device).normal_(0.0, 1.0, generator=generator)
        flat[bad] = vals
        bad = bad[vals.abs() > 2.0]
    return t.mul_(std).add_(mean)


#: the memory format a CPU convolution reads its weight in, by the convolution's op type
_CHANNELS_LAST = {"conv2d": torch.channels_last, "conv3d": torch.channels_last_3d}
#: ops whose output ``out_i`` is their input ``in_i`` in another dtype, its layout kept
_CASTS = ("cast", "multi_cast")


def cpu_memory_formats(job) -> dict:
    """variable name -> the torch memory format it is stored in when it lives on the CPU,
    for the variables that differ from the contiguous default.

    A ``channels_first`` 2-D or 3-D convolution's weight (read directly, or through AMP's
    casts) is channels-last: oneDNN's CPU convolutions compute channels-last (graphfront's
    CPU max pool hands them channels-last activations) and copy a contiguous weight into
    that layout at every forward and backward call, its gradient coming out channels-last
    anyway. The weight's optimizer state follows (the update op's other variable inputs of
    the weight's shape at its index: momentum, Adam's moments), so the update walks one
    layout. ResNet-50's train step (112 x 112 images, batch 4) on a 2-core CPU: 6-9 %
    faster. Only the storage changes: values, ``numpy()`` and checkpoints (C order) are
    the same.
    """
    producer = {}   # lbn -> (op, its output arg, index in the arg)
    for op in job.net.op:
        if op.HasField("variable_conf"):
            producer[f"{op.name}/out"] = (op, None, 0)
        elif op.HasField("user_conf"):
            for arg, lbns in op.user_conf.output.items():
                for i, lbn in enumerate(lbns.s):
                    producer[lbn] = (op, arg, i)

    def variable_behind(lbn):
        """The variable whose value ``lbn`` is, possibly cast; None if it is none's."""
        while lbn in producer:
            op, arg, i = producer[lbn]
            if op.HasField("variable_conf"):
                return op.name
            if op.user_conf.op_type_name not in _CASTS or arg != "out":
                return None
            lbn = op.user_conf.input["in"].s[i]
        return None

    def shape(name):
        return list(job.helper.lbn2logical_blob_desc[f"{name}/out"].shape.dim)

    formats = {}
    for op in job.net.op:
        conf = op.user_conf if op.HasField("user_conf") else None
        if conf is not None and conf.op_type_name in _CHANNELS_LAST and "data_format" in conf.attr and \
                conf.attr["data_format"].at_string == "channels_first":
            weight = variable_behind(conf.input["weight"].s[0])
            if weight is not None:
                formats[weight] = _CHANNELS_LAST[conf.op_type_name]
    for op in job.net.op:   # the optimizer state of those weights
        if not op.HasField("user_conf") or "model" not in op.user_conf.input:
            continue
        for i, lbn in enumerate(op.user_conf.input["model"].s):
            model = variable_behind(lbn)
            if model not in formats:
                continue
            for arg, lbns in op.user_conf.input.items():
                state = variable_behind(lbns.s[i]) if arg != "model" and i < len(lbns.s) else None
                if state is not None and shape(state) == shape(model):
                    formats.setdefault(state, formats[model])
    return formats


def default_initializer(job_conf):
    """The ``InitializerConf`` of variables without one in a job (its
    ``default_initializer_conf``), or None when the job sets none."""
    return job_conf.default_initializer_conf if job_conf.HasField("default_initializer_conf") else None


class VariableStore:
    """name -> tensor for every variable of a session (see module docstring).

    ``pending_flush``: None, or a callable that brings the tensors up to date, set by a
    runtime that holds newer values elsewhere (worker processes, XLA's jax arrays): the
    ``tensors`` property (every reader and writer) and :meth:`flush` call it once first.

    ``generation``: a counter moved by every access of ``tensors`` and every flush, by a
    runtime recording values newer than the tensors (XLA's ``JaxVariables.set``), and by
    the session before each run of a job that may write the tensors in place
    (``CompiledJob``). A runtime that keeps copies of variable values (the onnxruntime and
    XLA lowerings) compares it before the tensors' version counters: while it has not
    moved, no variable can have been written.
    """

    pending_flush = None
    generation = 0

    def __init__(self):
        self._tensors = {}
        self.confs = {}

    @property
    def tensors(self):
        self.generation += 1
        if self.pending_flush is not None:
            self.flush()
        return self._tensors

    @tensors.setter
    def tensors(self, value):
        self._tensors = value

    def flush(self):
        """Run the pending flush, if any (cheap when there is none)."""
        flush, self.pending_flush = self.pending_flush, None
        if flush is not None:
            self.generation += 1
            flush()

    def __contains__(self, name):
        return name in self.tensors

    def names(self):
        return list(self.tensors)

    def ensure(self, op_conf, shape, dtype, device, default_initializer=None, memory_format=None):
        """Create and initialize variable ``op_conf.name`` unless it exists; check consistency.
        A new variable on the CPU is stored in ``memory_format`` (a torch memory format,
        :func:`cpu_memory_formats`) where one is given, its values unchanged."""
        name = op_conf.name
        if name in self.tensors:
            t = self.tensors[name]
            if tuple(t.shape) != tuple(shape) or _dt.from_torch(t.dtype) is not dtype:
                raise JobBuildError(f"variable '{name}' exists with {_dt.from_torch(t.dtype).name} "
                                    f"{tuple(t.shape)}; this job declares it as {dtype.name} {tuple(shape)}")
            if t.device != device:
                raise JobBuildError(f"variable '{name}' lives on {t.device}; this job places it on {device}")
            return t
        vc = op_conf.variable_conf
        if vc.HasField("initializer"):
            init = vc.initializer
        elif default_initializer is not None:
            init = default_initializer
        else:
            raise JobBuildError(f"variable '{name}' has no initializer and the job sets no "
                                "default_initializer_conf")
        generator = None
        if vc.HasField("random_seed"):
            generator = torch.Generator(device=device)
            generator.manual_seed(vc.random_seed)
        try:
            t = initial_value(init, tuple(shape), dtype, device, generator)
        except (torch.OutOfMemoryError, RuntimeError) as e:
            if not _is_allocation_failure(e):
                raise
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype.torch).element_size()
            raise JobBuildError(f"variable '{name}' of shape {tuple(shape)} and dtype {dtype.name} needs "
                                f"{nbytes:,} bytes, which the {device} allocator could not provide") from None
        if memory_format is not None and device.type == "cpu":
            t = t.contiguous(memory_format=memory_format)
        self.tensors[name] = t
        self.confs[name] = op_conf
        return t

    @contextlib.contextmanager
    def rollback_on_error(self):
        """Within the block, variables created are removed again if the block raises."""
        before = set(self.tensors)
        try:
            yield
        except BaseException:
            for name in [n for n in self.tensors if n not in before]:
                del self.tensors[name]
                self.confs.pop(name, None)
            raise

    def assign(self, name, value):
        """Copy ``value`` (array-like) into variable ``name`` in place."""
        t = self.tensors[name]
        src = _dt.numpy_to_tensor(value) if isinstance(value, np.ndarray) else torch.as_tensor(value)
        t.copy_(src.to(device=t.device, dtype=t.dtype))
