"""``JobBuildAndInferCtx``: builds one Job proto op by op, inferring every BlobDesc.

``add_op`` is OneFlow's ``CurJobAddOp``: it checks an ``OperatorConf`` against its
op's registered schema (completing a ``UserOpConf`` with default attrs), checks that
every input blob exists, infers the shape and dtype of every output, places the op and
appends it to ``job.net.op``. All state lives in the Job proto: the BlobDesc of every
lbn in ``job.helper.lbn2logical_blob_desc``, placements in ``job.placement``. A
builder can therefore be re-opened over any Job (passes do exactly that).
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from typing import NamedTuple

import psutil
import torch

from graphfront.framework import dtypes as _dt
from graphfront.core import blob_desc_pb2, job_pb2, op_conf_pb2
from graphfront.framework import scope_symbols as scope_mod
from graphfront.framework.errors import JobBuildError, OpCheckError, format_location, user_frame
from graphfront.framework.names import name_problem, shown
from graphfront.ops import registry

OperatorConf = op_conf_pb2.OperatorConf


class TensorDesc(NamedTuple):
    """Logical shape and dtype of a blob (the Python side of ``BlobDescProto``)."""

    shape: tuple
    dtype: _dt.dtype
    is_dynamic: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def to_proto(self) -> blob_desc_pb2.BlobDescProto:
        p = blob_desc_pb2.BlobDescProto(data_type=self.dtype.proto, is_dynamic=self.is_dynamic)
        p.shape.SetInParent()
        p.shape.dim.extend(self.shape)
        return p

    @staticmethod
    def from_proto(p) -> "TensorDesc":
        return TensorDesc(tuple(int(d) for d in p.shape.dim), _dt.from_proto(p.data_type), p.is_dynamic)


# ------------------------------------------------------------------ op conf views

def op_kind(op_conf) -> str:
    """``"user_conf"`` or the system conf field name (``"variable_conf"`` ...)."""
    return op_conf.WhichOneof("op_type")


def op_type_name(op_conf) -> str:
    kind = op_kind(op_conf)
    return op_conf.user_conf.op_type_name if kind == "user_conf" else kind


def op_args(op_conf):
    """``(inputs, outputs)`` of any op: dicts argument -> list of lbns, in argument order.

    A user op's arguments are the maps of its ``user_conf``; a system op's are the fields of
    its conf that its definition names (an output lbn is ``<op name>/<field value>``).
    """
    kind = op_kind(op_conf)
    if kind == "user_conf":
        uc = op_conf.user_conf
        return ({arg: list(uc.input[arg].s) for arg in list(uc.input_order) or sorted(uc.input)},
                {arg: list(uc.output[arg].s) for arg in list(uc.output_order) or sorted(uc.output)})
    opdef, conf = registry.op_def(op_conf), getattr(op_conf, kind)
    inputs = {}
    for a in opdef.inputs:
        value = getattr(conf, a.name)
        inputs[a.name] = [value] if isinstance(value, str) else list(value)
    return inputs, {a.name: [f"{op_conf.name}/{getattr(conf, a.name)}"] for a in opdef.outputs}


def op_inputs(op_conf):
    """List of ``(arg, index, lbn)`` for every input of an op, in argument order."""
    return [(arg, i, lbn) for arg, lbns in op_args(op_conf)[0].items() for i, lbn in enumerate(lbns)]


def op_outputs(op_conf):
    """List of ``(arg, index, lbn)`` for every output of an op."""
    return [(arg, i, lbn) for arg, lbns in op_args(op_conf)[1].items() for i, lbn in enumerate(lbns)]


def user_attrs(op_conf) -> dict:
    """Decoded attrs of a completed op conf: name -> Python value (none for a system op)."""
    return {k: registry.from_attr_value(v) for k, v in op_conf.user_conf.attr.items()}


def check_and_complete(op_conf) -> registry.OpDef:
    """Validate a user op conf against its OpDef and fill missing attrs with defaults.

    Mirrors OneFlow's ``CheckAndCompleteUserOpConf``: unknown op types, unknown or
    missing arguments, unknown attrs and attrs whose AttrValue type differs from the
    declared type are rejected; ``input_order``/``output_order`` must list exactly the
    present args. Raises OpCheckError with the reason.
    """
    uc = op_conf.user_conf
    try:
        opdef = registry.lookup(uc.op_type_name)
    except KeyError as e:
        raise OpCheckError(e.args[0]) from None
    for direction, args, defs in (("input", uc.input, opdef.inputs), ("output", uc.output, opdef.outputs)):
        names = {a.name for a in defs}
        for arg in args:
            if arg not in names:
                raise OpCheckError(f"op type {opdef.op_type} has no {direction} {shown(arg, quote=True)}; its {direction}s "
                                   f"are {', '.join(sorted(names)) or '(none)'}")
        for a in defs:
            if not a.optional and (a.name not in args or len(args[a.name].s) == 0):
                raise OpCheckError(f"op type {opdef.op_type} requires {direction} '{a.name}', which is missing")
            if not a.repeated and a.name in args and len(args[a.name].s) > 1:
                raise OpCheckError(f"{direction} '{a.name}' takes one blob, received {len(args[a.name].s)}")
        order = uc.input_order if direction == "input" else uc.output_order
        if not order:
            order.extend(a.name for a in defs if a.name in args)
        elif sorted(order) != sorted(args):
            raise OpCheckError(f"{direction}_order {list(order)} does not match the {direction}s {sorted(args)}")
    for name, av in uc.attr.items():
        adef = opdef.attrs.get(name)
        if adef is None:
            raise OpCheckError(f"op type {opdef.op_type} has no attr {shown(name, quote=True)}; its attrs are "
                               f"{', '.join(opdef.attrs) or '(none)'}")
        got = registry.attr_value_type(av)
        if got != adef.type:
            raise OpCheckError(f"attr '{name}' expects type {adef.type}, received an AttrValue of type {got}")
    for name, adef in opdef.attrs.items():
        if name not in uc.attr:
            uc.attr[name].CopyFrom(registry.to_attr_value(adef.type, adef.default))
        if adef.check is not None:
            msg = adef.check(registry.from_attr_value(uc.attr[name]))
            if msg:
                raise OpCheckError(f"attr '{name}': {msg}")
    return opdef


class InferCtx:
    """What an op's ``infer`` function sees: input descs, attrs (a system op: its ``conf``
    and the ``job_conf``), output setters."""

    def __init__(self, op_conf, opdef, descs, job_conf=None):
        self.op_name = op_conf.name
        self.op_type = opdef.op_type
        self.conf = getattr(op_conf, op_kind(op_conf))
        self.job_conf = job_conf
        self._ins, self._outs = op_args(op_conf)
        self._descs = descs
        self.attrs = user_attrs(op_conf)
        self.out = {}

    def attr(self, name):
        return self.attrs[name]

    def has_input(self, name) -> bool:
        return len(self._ins.get(name, ())) > 0

    def input(self, name, i=0) -> TensorDesc:
        if not self.has_input(name):
            return None
        return self._descs[self._ins[name][i]]

    def inputs(self, name) -> list:
        return [self._descs[lbn] for lbn in self._ins.get(name, ())]

    def has_output(self, name) -> bool:
        return name in self._outs

    def output_names(self) -> list:
        return list(self._outs)

    def output_lbn(self, name, i=0) -> str:
        return self._outs[name][i]

    def output_count(self, name) -> int:
        return len(self._outs.get(name, ()))

    def set_output(self, name, shape, dtype, i=None, is_dynamic=None):
        """``is_dynamic`` None: dynamic when any input is (its run-time shape may be smaller)."""
        if name not in self._outs:
            return
        if is_dynamic is None:
            is_dynamic = any(self._descs[lbn].is_dynamic for lbns in self._ins.values() for lbn in lbns)
        shape = tuple(int(d) for d in shape)
        idx = range(self.output_count(name)) if i is None else [i]
        for j in idx:
            self.out[self._outs[name][j]] = TensorDesc(shape, dtype, is_dynamic)

    def check(self, cond, msg):
        if not cond:
            raise OpCheckError(msg)

    def fail(self, msg):
        raise OpCheckError(msg)


class JobBuilder:
    """``JobBuildAndInferCtx`` over one ``Job`` proto (see module docstring)."""

    def __init__(self, job: job_pb2.Job, scope=None, session=None):
        self.job = job
        self.session = session
        self.descs = {lbn: TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
        self.ops = {op.name: op for op in job.net.op}
        self.locations = {}  # op name -> user source location (for error messages only)
        self.diff_watch_locations = {}  # watcher uuid -> location of its flow.watch_diff call (idem)
        self._scopes = [scope or scope_mod.make_scope()]
        self._available = {}  # device tag -> bytes of memory available (read once per builder)
        self._placement_groups = {}
        for group in job.placement.placement_group:
            conf = group.parallel_conf
            self._placement_groups[(conf.device_tag, tuple(conf.device_name), tuple(conf.hierarchy.dim))] = group

    @property
    def job_name(self) -> str:
        return self.job.job_conf.job_name

    @property
    def is_train(self) -> bool:
        return self.job.job_conf.HasField("train_conf")

    # ---------------------------------------------------------------- scopes
    @property
    def scope(self) -> scope_mod.Scope:
        return self._scopes[-1]

    @contextlib.contextmanager
    def scope_as(self, scope):
        self._scopes.append(scope)
        try:
            yield scope
        finally:
            self._scopes.pop()

    @contextlib.contextmanager
    def scope_of_op(self, op_name, calculation_pass=None):
        """Build under the placement of an existing op (used by passes)."""
        op = self.ops[op_name]
        ids = self.device_ids_of(op_name)
        scope = self.scope.derive(device_tag=op.device_tag, device_ids=ids, hierarchy=self.hierarchy_of(op_name),
                                  namespace=(), calculation_pass=calculation_pass or self.scope.calculation_pass)
        with self.scope_as(scope):
            yield scope

    def device_ids_of(self, op_name) -> tuple:
        for group in self.job.placement.placement_group:
            if op_name in group.op_set.op_name:
                return tuple(group.parallel_conf.device_name)
        return ("0:0",)

    def hierarchy_of(self, op_name) -> tuple:
        """The device grid of the op's placement (``ParallelConf.hierarchy``; () for none)."""
        for group in self.job.placement.placement_group:
            if op_name in group.op_set.op_name:
                return tuple(group.parallel_conf.hierarchy.dim)
        return ()

    # ---------------------------------------------------------------- blobs
    def desc(self, lbn) -> TensorDesc:
        try:
            return self.descs[lbn]
        except KeyError:
            raise JobBuildError(f"blob '{lbn}' is not in job '{self.job_name}'") from None

    def has_blob(self, lbn) -> bool:
        return lbn in self.descs

    def unique_op_name(self, base: str) -> str:
        if base not in self.ops:
            return base
        for k in itertools.count(1):
            name = f"{base}_{k}"
            if name not in self.ops:
                return name

    # ---------------------------------------------------------------- CurJobAddOp
    def add_op(self, op_conf, location=None):
        """Check, infer and append ``op_conf``; returns it. Raises JobBuildError."""
        location = location or user_frame()
        kind = op_kind(op_conf)
        type_name = shown(op_type_name(op_conf)) if kind else "?"

        def fail(msg):
            raise JobBuildError(f"op {shown(op_conf.name, quote=True)} ({type_name}): {msg}"
                                f"{format_location(location)}") from None

        problem = name_problem(op_conf.name, "op")
        if problem:
            fail(f"invalid op name: it {problem}")
        if op_conf.name in self.ops:
            fail(f"an op named '{op_conf.name}' already exists in job '{self.job_name}'; op names must be "
                 "unique per job (pass a different name=)")
        if kind is None:
            fail("OperatorConf sets no op type")
        if not op_conf.HasField("device_tag"):
            op_conf.device_tag = self.scope.device_tag
        if not op_conf.HasField("scope_symbol_id"):
            op_conf.scope_symbol_id = self.scope.symbol_id
        try:
            # a user op conf is checked against its op's schema (attrs, arguments)
            opdef = check_and_complete(op_conf) if kind == "user_conf" else registry.op_def(op_conf)
            if opdef.cpu_only:  # (OneFlow's CPU-only user ops run on the CPU under any placement)
                op_conf.device_tag = "cpu"
            self._check_inputs(op_conf)
            ctx = InferCtx(op_conf, opdef, self.descs, self.job.job_conf)
            opdef.infer(ctx)
            for _, _, lbn in op_outputs(op_conf):
                if lbn not in ctx.out:
                    raise OpCheckError(f"shape inference left output '{lbn}' undefined")
            new_descs = ctx.out
        except (OpCheckError, KeyError, TypeError, ValueError) as e:
            fail(e.args[0] if e.args else str(e))
        except Exception as e:  # noqa: BLE001 - an op conf from a file may break any inference rule
            fail(f"shape inference failed on these inputs and attrs ({type(e).__name__}: {e})")
        for lbn, d in new_descs.items():
            self._check_allocatable(op_conf, lbn, d, fail)
        for lbn, d in new_descs.items():
            self.descs[lbn] = d
            self.job.helper.lbn2logical_blob_desc[lbn].CopyFrom(d.to_proto())
        self.job.net.op.append(op_conf)
        added = self.job.net.op[-1]
        self.ops[added.name] = added
        self.locations[added.name] = location
        self._place(added.name)
        return added

    def _check_allocatable(self, op_conf, lbn, d, fail):
        """Refuse a blob with a negative dimension, or larger than the memory of its device
        (checked here, at build time, instead of failing in the allocator at run time)."""
        if any(dim < 0 for dim in d.shape):
            fail(f"output '{lbn}' would have shape {d.shape}, with a negative dimension")
        nbytes = d.numel * d.dtype.itemsize
        if nbytes < _SMALL_BLOB_BYTES:
            return
        device = op_conf.device_tag
        if device not in self._available:
            self._available[device] = available_memory(device)
        available = self._available[device]
        if available is not None and nbytes > available:
            what = f"variable '{op_conf.name}'" if op_kind(op_conf) == "variable_conf" else f"output '{lbn}'"
            fail(f"{what} of shape {d.shape} and dtype {d.dtype.name} needs {nbytes:,} bytes, more than the "
                 f"{available:,} bytes of {device} memory available")

    def _check_inputs(self, op_conf):
        for arg, i, lbn in op_inputs(op_conf):
            if lbn not in self.descs:
                raise OpCheckError(f"input '{arg}' refers to blob '{lbn}', which is not in job "
                                   f"'{self.job_name}' (blobs of another job cannot be used)")

    def _place(self, op_name):
        scope = self.scope
        key = (self.ops[op_name].device_tag, scope.device_ids, scope.hierarchy)
        group = self._placement_groups.get(key)
        if group is None:
            group = self.job.placement.placement_group.add()
            group.parallel_conf.device_tag = key[0]
            group.parallel_conf.device_name.extend(key[1])
            if key[2]:
                group.parallel_conf.hierarchy.dim.extend(key[2])
            self._placement_groups[key] = group
        group.op_set.op_name.append(op_name)

    def remove_ops(self, names):
        """Drop ops (and their output BlobDescs and placements) from the job."""
        names = set(names)
        if not names:
            return
        for name in names:
            for _, _, lbn in op_outputs(self.ops[name]):
                self.descs.pop(lbn, None)
                if lbn in self.job.helper.lbn2logical_blob_desc:
                    del self.job.helper.lbn2logical_blob_desc[lbn]
            del self.ops[name]
        kept = [op for op in self.job.net.op if op.name not in names]
        del self.job.net.op[:]
        self.job.net.op.extend(kept)
        self.ops = {op.name: op for op in self.job.net.op}
        for group in self.job.placement.placement_group:
            kept_names = [n for n in group.op_set.op_name if n not in names]
            del group.op_set.op_name[:]
            group.op_set.op_name.extend(kept_names)


# ------------------------------------------------------------------ memory

_SMALL_BLOB_BYTES = 1 << 26  # blobs below 64 MiB are never checked against free memory


def available_memory(device_tag) -> int | None:
    """Bytes of memory free for new tensors on ``device_tag`` ("cpu": RAM available to
    processes, ``psutil.virtual_memory().available``; "gpu": free memory of the current
    CUDA device), or None when unknown."""
    if device_tag == "gpu":
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info()[0])
    return int(psutil.virtual_memory().available)


# ------------------------------------------------------------------ current builder

class _BuilderStack(threading.local):
    """Each thread's stack of open JobBuilders: a job built in one thread never sees the
    ops of a job another thread is building at the same time."""

    def __init__(self):
        self.builders = []


_STACK = _BuilderStack()


def current() -> JobBuilder:
    """The JobBuilder ops are added to right now (in this thread); error when no job is being built."""
    if not _STACK.builders:
        raise JobBuildError("no job is being built: ops can only be created inside a "
                            "@flow.global_function body" + format_location(user_frame()))
    return _STACK.builders[-1]


def is_building() -> bool:
    """Whether this thread is inside a job function being built."""
    return bool(_STACK.builders)


@contextlib.contextmanager
def activate(builder: JobBuilder):
    _STACK.builders.append(builder)
    try:
        yield builder
    finally:
        _STACK.builders.pop()
