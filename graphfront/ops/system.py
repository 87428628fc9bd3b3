"""System ops: the ``OperatorConf`` oneof members that are not ``user_conf``.

These are OneFlow's legacy ops that a single-client job contains besides user ops
(OneFlow v0.6.0 ``oneflow/core/operator/op_conf.proto``): interface ops (``input_conf``,
``variable_conf``, ``return_conf``, ``foreign_watch_conf``) and the helpers that job
completion adds (``identity_conf``, ``constant_like_conf``,
``learning_rate_schedule_conf``). Each is registered with :func:`graphfront.ops.registry.op`
like a user op, under its conf field name (``conf=``): its inputs and output are fields of
that conf, and its rules (infer, kernel, grad, sbp, xla) take the same contexts as a user op's,
reading the conf as ``ctx.conf``. Interface ops have no kernel: the runtime binds them to
feeds, the variable store, fetches and watch handlers.
"""
from __future__ import annotations

import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import OpCheckError
from graphfront.ops.common import fill_fits, like, reads_host
from graphfront.ops.lr_schedule import PlainConf, learning_rate_at
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp
from graphfront.runtime.variable_store import initializer


def system_op(conf_name, inputs=(), outputs=("out",), kernel=None, **rules):
    """Register the system op held in ``OperatorConf.<conf_name>``: ``inputs`` and ``outputs``
    name the conf's fields holding input lbns and the output blob name (a repeated field
    as ``"field*"``); ``rules`` are :func:`graphfront.ops.registry.op`'s."""
    return op(conf_name, conf=conf_name, inputs=inputs, outputs=outputs, kernel=kernel, **rules)


def _shape_of(proto_shape):
    return tuple(int(d) for d in proto_shape.dim)


def _input_infer(ctx):
    bc = ctx.conf.blob_conf
    if not (bc.HasField("shape") and bc.HasField("data_type")):
        raise OpCheckError("input_conf.blob_conf needs shape and data_type")
    # dynamic: a blob declared so (ListNumpy placeholders)
    ctx.set_output("out", _shape_of(bc.shape), _dt.from_proto(bc.data_type), is_dynamic=bc.is_dynamic)


def _variable_infer(ctx):
    data_type = ctx.conf.data_type if ctx.conf.HasField("data_type") else ctx.job_conf.default_data_type
    ctx.set_output("out", _shape_of(ctx.conf.shape), _dt.from_proto(data_type))


def _input_sbp(ctx):
    nd = ctx.conf.blob_conf.nd_sbp.sbp_parallel
    want = _sbp.from_proto(ctx.axis_entry(nd)) if len(nd) and not ctx.conf.blob_conf.is_dynamic else _sbp.B
    return [{"out": want}, {"out": _sbp.B}]


def _split_through(ctx, partial=False):
    """Candidates of a one-input op whose output is its input: split along any axis (and P)."""
    cands = [{"in": _sbp.split(k), "out": _sbp.split(k)} for k in range(ctx.ndim("in"))]
    return cands + ([{"in": _sbp.P, "out": _sbp.P}] if partial else [])


system_op("input_conf", infer=_input_infer, interface=True, no_grad=True, sbp=_input_sbp)
system_op("variable_conf", infer=_variable_infer, interface=True, no_grad=True,
          sbp=lambda ctx: [{"out": ctx.variable_sbp.get(ctx.op_name, _sbp.B)}])
system_op("return_conf", ("in",), infer=like("in"), interface=True, no_grad=True, sbp=_split_through)
system_op("foreign_watch_conf", ("in",), (), infer=lambda ctx: None, interface=True, no_grad=True)
system_op("identity_conf", ("in",), infer=like("in"), kernel=lambda k: (lambda x: x),
          grad=lambda g: g.set_grad("in", g.dout("out")), view=True, xla=lambda k: (lambda x: x),
          sbp=lambda ctx: _split_through(ctx, partial=True))


def _constant_like_infer(ctx):
    conf = ctx.conf
    dtype = _dt.from_proto(conf.data_type) if conf.HasField("data_type") else ctx.input("like").dtype
    fill_fits(ctx, _constant_like_value(conf), dtype, f"the {conf.WhichOneof('scalar_operand') or 'value'}")
    ctx.set_output("out", ctx.input("like").shape, dtype)


def _constant_like_value(conf):
    return conf.int_operand if conf.WhichOneof("scalar_operand") == "int_operand" else conf.float_operand


def _constant_like_kernel(k):
    value = _constant_like_value(k.conf)
    dtype = _dt.from_proto(k.conf.data_type).torch if k.conf.HasField("data_type") else None
    return lambda like: torch.full_like(like, value, dtype=dtype)


def _constant_like_xla(k):
    import jax.numpy as jnp
    value = _constant_like_value(k.conf)
    dtype = _dt.from_proto(k.conf.data_type).np if k.conf.HasField("data_type") else None
    return lambda like: jnp.full_like(like, value, dtype=dtype)


system_op("constant_like_conf", ("like",), infer=_constant_like_infer, kernel=_constant_like_kernel,
          xla=_constant_like_xla, no_grad=True)


def _decode_random_infer(ctx):
    conf = ctx.conf
    if conf.batch_size < 1:
        raise OpCheckError(f"decode_random_conf.batch_size must be >= 1, received {conf.batch_size}")
    ctx.set_output("out", (int(conf.batch_size),) + _shape_of(conf.shape), _dt.from_proto(conf.data_type))


def _decode_random_draw(k):
    """``(device, generator=None) -> a new batch`` drawn from the op's ``data_initializer``."""
    conf = k.conf
    return initializer(conf.data_initializer, (int(conf.batch_size),) + _shape_of(conf.shape),
                       _dt.from_proto(conf.data_type))


def _decode_random_kernel(k):
    """A new batch drawn from ``data_initializer`` on every run (OneFlow v0.6.0
    ``oneflow/core/kernel/decode_random_kernel.cpp``), on the op's device, from the op's
    own generator there (:meth:`~graphfront.runtime.plan.KernelCtx.generator`); on several
    devices each draws the whole batch and keeps its part of it."""
    draw, gen, device = _decode_random_draw(k), k.generator(), k.device
    layout, n, index = k.sbp("out"), k.parallel_num, k.parallel_id
    return lambda: _sbp.local_part(draw(device, gen), layout, n, index)


def _decode_random_native(k):
    """The native lowering's draw: from torch's default generator, which a traced step can
    take (an op's own ``torch.Generator`` it cannot), so the stream differs from the
    plan's; the distribution is the same."""
    draw, device = _decode_random_draw(k), k.device
    return lambda: draw(device)


def _decode_random_xla(k):
    """The kernel's draw, made on the host by a callback from the compiled step (once per run,
    in order): the same values as the kernel from the same seed, whatever the initializer.
    (The step's jax key, passed first to a random op's rule, is not used.)"""
    import jax
    from jax.experimental import io_callback
    conf = k.conf
    shape = (int(conf.batch_size),) + _shape_of(conf.shape)
    spec = jax.ShapeDtypeStruct(shape, _dt.from_proto(conf.data_type).np)
    draw = _decode_random_kernel(k)  # (the xla lowering makes its rules with a CPU KernelCtx)
    return lambda key: io_callback(lambda: _dt.tensor_to_numpy(draw()), spec, ordered=True)


# ``tick`` orders the op after another (a control edge, ``ctrl_in_op_name``), it carries no data
system_op("decode_random_conf", infer=_decode_random_infer, kernel=_decode_random_kernel, random=True, no_grad=True,
          xla=_decode_random_xla, native=_decode_random_native, sbp=_sbp.drawn_whole(lambda ctx: [0]))


def _lr_kernel(k):
    """float32 ``(1,)``: the schedule at the train step (:func:`learning_rate_at`): on the
    CPU from the step read on the host, elsewhere (a GPU, or a step traced by the native
    lowering) computed on the device from the step there, so a step never waits on the
    host for it (and a CUDA graph replays it)."""
    conf = PlainConf(k.conf)
    learning_rate_at(conf, 0)  # (a conf the schedule rejects fails here, when the job is lowered)

    def schedule(train_step):
        if reads_host(train_step):
            lr = learning_rate_at(conf, int(train_step.reshape(-1)[0]))
            return torch.full((1,), lr, dtype=torch.float32)
        return learning_rate_at(conf, train_step.reshape(-1)[:1]).to(torch.float32)
    return schedule


def _lr_xla(k):
    """float32 ``(1,)``: the schedule evaluated on the host by :func:`learning_rate_at`
    through a host callback from the compiled step (the schedule is a Python function of
    the step). The XLA lowering feeds the value instead when ``train_step`` is a variable."""
    import jax
    import numpy as np
    conf = k.conf
    out = jax.ShapeDtypeStruct((1,), np.float32)

    def host(step):
        return np.array([learning_rate_at(conf, int(np.asarray(step).reshape(-1)[0]))], dtype=np.float32)
    return lambda train_step: jax.pure_callback(host, out, train_step)


system_op("learning_rate_schedule_conf", ("train_step",), infer=lambda ctx: ctx.set_output("out", (1,), _dt.float32),
          kernel=_lr_kernel, xla=_lr_xla, no_grad=True)
