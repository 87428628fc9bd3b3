"""Auto mixed precision pass (``Job -> Job``), OneFlow's ``AutoMixedPrecision`` job pass.

Runs before autograd when ``FunctionConfig().enable_auto_mixed_precision(True)`` set
``job_conf.enable_auto_mixed_precision``; the backward ops then follow the forward
dtypes (the gradient of a ``cast`` is a ``cast`` back), so variables keep float32
master weights and float32 gradients, and the loss stays float32.

Which ops run in low precision follows ``oneflow/core/job_rewriter/auto_mixed_precision.cpp``
with the lists of ``auto_mixed_precision_lists.cpp``. Each op's list is the ``amp`` field of
its definition in the registry (``op(..., amp="white" | "gray" | "clear")``, beside its
kernel; OneFlow's black list is empty, so no black set is computed):

1. *upstream of white*: walking from the sinks toward the sources, a gray or clear op
   joins when one of its consumers is a white-list op (or already joined); a gray or
   clear op without consumers starts the walk too. An op producing a loss counts as
   consumed (the loss stays float32).
2. *white set*: walking from the sources, every white-list op, and every op of step 1
   one of whose producers is in the white set.
3. clear-list ops next to the white set (downstream, then upstream) join it.
4. every float32 blob entering a white-set op from outside gets a ``cast`` to the
   low-precision type named ``<producer>-<blob>-cast_f2h``; every float32 blob leaving
   the white set for another op gets a ``cast`` back named ``<producer>-<blob>-cast_h2f``.
   An op's ``amp_no_cast`` inputs are never cast (OneFlow's no-cast registry:
   ``normalization``'s ``moving_mean``/``moving_variance``/``gamma``/``beta``,
   ``normalization_grad``'s ``gamma``; graphfront's
   ``fused_bias_add_sparse_softmax_cross_entropy``'s ``prediction``, which it reads in its
   low-precision type and computes on in float32).

The low-precision type: OneFlow v0.6.0 only knows float16 (and only on CUDA). graphfront
also runs CPU ops in low precision; the type is the job flag
``mixed_precision_data_type`` (``FunctionConfig().mixed_precision_data_type(flow.bfloat16)``)
or by default float16 when some op of the job is placed on CUDA, else bfloat16 (CPUs
have bfloat16 matmul/convolution kernels; float16 ones are slow or missing there).

Every edit is visible in the completed Job: the cast ops and the new BlobDescs.
"""
from __future__ import annotations

from graphfront.core import job_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as jb
from graphfront.ops import registry
from graphfront.ops.builder import UserOpConfBuilder
from graphfront.passes.rewrite import Net, set_op_input, user_type

DTYPE_FLAG = "mixed_precision_data_type"


def low_precision_dtype(job):
    """The AMP type of ``job``: its ``mixed_precision_data_type`` flag, else float16 when
    the ops it would run in low precision (the white list; without any, every op) are
    placed on CUDA, else bfloat16. (Interface ops follow the default placement, which is a
    GPU wherever CUDA is present: they do not decide for a job computing on the CPU.)"""
    flags = job.job_conf.flag_name2flag_value
    if DTYPE_FLAG in flags:
        return _dt.from_proto(flags[DTYPE_FLAG].at_data_type)
    white = [op for op in job.net.op if amp_list(op) == "white"]
    on_cuda = any(op.device_tag in ("cuda", "gpu") for op in (white or job.net.op))
    return _dt.float16 if on_cuda else _dt.bfloat16


def amp_list(op_conf):
    """The AMP list (``"white"``, ``"gray"``, ``"clear"``) of an op, from its registry entry; None
    for ops on no list (and for system ops)."""
    op_type = user_type(op_conf)
    return registry.lookup(op_type).amp if op_type is not None else None


def white_set(job) -> set:
    """Names of the ops of ``job`` that AMP runs in low precision (steps 1-3 above)."""
    net = Net(job)
    order = list(job.net.op)
    kinds = {op.name: amp_list(op) for op in order}

    def producers(op):
        return [net.producer[lbn] for _, _, lbn in jb.op_inputs(op) if lbn in net.producer]

    def consumers(op):
        return [n for _, _, lbn in jb.op_outputs(op) for n, _, _ in net.consumers.get(lbn, ())]

    def is_sink(op):
        return not consumers(op) and not any(lbn in net.protected for _, _, lbn in jb.op_outputs(op))

    def graylike(name):
        return kinds[name] in ("gray", "clear")

    upstream = set()
    for op in reversed(order):
        if kinds[op.name] == "white" or (graylike(op.name) and is_sink(op)):
            upstream.add(op.name)
        elif graylike(op.name) and any(c in upstream for c in consumers(op)):
            upstream.add(op.name)
    white = set()
    for op in order:
        if kinds[op.name] == "white":
            white.add(op.name)
        elif op.name in upstream and any(p in white for p in producers(op)):
            white.add(op.name)
    for walk, neighbours in ((order, producers), (list(reversed(order)), consumers)):
        for op in walk:
            if kinds[op.name] == "clear" and op.name not in white and any(n in white for n in neighbours(op)):
                white.add(op.name)
    return white


def auto_mixed_precision(job):
    """Insert the AMP casts (see module docstring)."""
    white = white_set(job)
    if not white:
        return job
    low = low_precision_dtype(job)
    old = jb.JobBuilder(job)
    float32 = {lbn for lbn, d in old.descs.items() if d.dtype is _dt.float32}

    new = job_pb2.Job()
    new.CopyFrom(job)
    del new.net.op[:]
    new.ClearField("placement")
    new.helper.ClearField("lbn2logical_blob_desc")
    b = jb.JobBuilder(new)
    producer = {lbn: op.name for op in job.net.op for _, _, lbn in jb.op_outputs(op)}
    casts = {}  # (lbn, dtype name) -> cast lbn

    def placed(op_name):
        src = old.ops[op_name]
        return b.scope_as(b.scope.derive(device_tag=src.device_tag, device_ids=old.device_ids_of(op_name),
                                         hierarchy=old.hierarchy_of(op_name)))

    def cast(lbn, dtype, suffix):
        key = (lbn, dtype.name)
        if key not in casts:
            src = producer[lbn]
            conf = UserOpConfBuilder(lbn.replace("/", "-") + suffix, prefix=False).Op("cast") \
                .Input("in", [lbn]).Output("out").Attr("dtype", dtype).CheckAndComplete().op_conf
            conf.device_tag = old.ops[src].device_tag
            conf.scope_symbol_id = old.ops[src].scope_symbol_id
            with placed(src):
                added = b.add_op(conf)
            casts[key] = added.user_conf.output["out"].s[0]
        return casts[key]

    for op in job.net.op:
        conf = type(op)()
        conf.CopyFrom(op)
        in_white = op.name in white
        no_cast = registry.lookup(user_type(op)).amp_no_cast if user_type(op) is not None else ()
        for arg, i, lbn in jb.op_inputs(op):
            src = producer.get(lbn)
            if lbn not in float32 or src is None or (src in white) == in_white:
                continue
            if in_white and arg not in no_cast:
                set_op_input(conf, arg, i, cast(lbn, low, "-cast_f2h"))
            elif not in_white and arg not in no_cast:
                set_op_input(conf, arg, i, cast(lbn, _dt.float32, "-cast_h2f"))
        with placed(op.name):
            b.add_op(conf)
    return b.job


auto_mixed_precision.is_enabled = lambda job: job.job_conf.enable_auto_mixed_precision
