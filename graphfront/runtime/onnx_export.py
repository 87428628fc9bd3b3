"""The ONNX exporter's engine: a completed predict Job as an ``onnx.ModelProto``.

``flow.onnx.export`` (:mod:`graphfront.onnx`) and the onnxruntime lowering
(:mod:`graphfront.runtime.onnxruntime_plan`) convert with it. The job is completed without the cleanup and fusion passes (so the file holds the ops
the user wrote, as Netron shows them) and walked in topological order: placeholders
become the graph's inputs (named after the job function's parameters, or the saved
model's signature inputs), variables become initializers holding the session's current values (or the
saved model's checkpoint), each return op becomes a graph output of the same name (a saved model's signature
output names; ``Return_<n>`` for a job function, in the order of its returned blobs), and
every other op is converted by the ``onnx`` rule beside its kernel in the op registry
(:mod:`graphfront.ops.registry`), which builds nodes with the ``onnx`` package's helper
API. The model is checked with ``onnx.checker`` before it is written.

Needs the optional dependency ``onnx`` (``pip install graphfront[onnx]``). OneFlow's own
exporter is the separate ``oneflow_onnx`` package (``oneflow_onnx/oneflow2onnx/``), which
maps OneFlow op types to ONNX operators the same way: one handler per op type.
"""
from __future__ import annotations

import copy

import numpy as np

from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import is_int
from graphfront.framework.errors import GraphfrontError
from graphfront.framework.job_builder import TensorDesc
from graphfront.framework.scope_symbols import device_count
from graphfront.ops import registry
from graphfront.passes import complete
from graphfront.runtime.walk import INTERFACE_KINDS, ScheduleWalk

__all__ = ["export_job", "job_to_onnx", "convertible_op_types", "OnnxExportError", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17
MIN_OPSET = 13


class OnnxExportError(GraphfrontError, ValueError):
    """A job cannot be written as ONNX: an op has no converter, or an attr value that
    its converter cannot express (the message names the op, its type and the reason)."""


class OnnxCtx:
    """What an op's ``onnx`` converter sees: its attrs, input/output names and descs,
    and the builder of nodes and constants.

    ONNX value names are graphfront lbns (``op_name/out_0``); ``node`` returns the
    output names it was given. ``parallel_num`` is the number of devices of the op's placement
    (the exported graph computes the logical blobs).
    """

    def __init__(self, exporter, op_conf, descs, parallel_num=1):
        self._x = exporter
        self.op_name = op_conf.name
        self.op_type = op_conf.user_conf.op_type_name
        self.opset = exporter.opset
        self._uc = op_conf.user_conf
        self._descs = descs
        self._def = registry.lookup(self.op_type)
        self.attrs = jb.user_attrs(op_conf)
        self.parallel_num = parallel_num

    def attr(self, name):
        return self.attrs[name]

    def has_input(self, name) -> bool:
        return name in self._uc.input and len(self._uc.input[name].s) > 0

    def input(self, name, i=0):
        """The ONNX name of input ``name`` (index ``i``), None when absent."""
        return self._x.value(self._uc.input[name].s[i]) if self.has_input(name) else None

    def inputs(self, name) -> list:
        return [self._x.value(lbn) for lbn in self._uc.input[name].s] if self.has_input(name) else []

    def input_desc(self, name, i=0) -> TensorDesc:
        return self._descs[self._uc.input[name].s[i]]

    def output(self, name, i=0):
        """The ONNX name of output ``name``; None when the op does not produce it."""
        return self._uc.output[name].s[i] if name in self._uc.output and self._uc.output[name].s else None

    def output_desc(self, name, i=0) -> TensorDesc:
        return self._descs[self._uc.output[name].s[i]]

    def all_inputs(self) -> list:
        return [n for a in self._def.inputs for n in self.inputs(a.name)]

    def all_outputs(self) -> list:
        return [lbn for a in self._def.outputs if a.name in self._uc.output for lbn in self._uc.output[a.name].s]

    def node(self, onnx_type, inputs, outputs=None, **attrs):
        """Add one ONNX node; ``outputs`` default to one fresh name. Returns the first output name."""
        from onnx import helper
        outputs = list(outputs) if outputs is not None else [self.tmp(onnx_type)]
        self._x.nodes.append(helper.make_node(onnx_type, [i or "" for i in inputs], outputs,
                                              name=self.tmp(f"{self.op_name}-{onnx_type}"), **attrs))
        return outputs[0]

    def const(self, value, dtype=None):
        """An initializer holding ``value`` (numpy array or scalar); returns its name."""
        return self._x.initializer(np.asarray(value, dtype=dtype), self.tmp("const"))

    @staticmethod
    def dtype_code(dtype) -> int:
        """The ONNX ``TensorProto`` element type of a graphfront dtype."""
        from onnx import helper
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype.np))

    def subgraph(self, hint, inputs, build):
        """A ``GraphProto`` for the body of a ``Scan`` / ``Loop`` node. ``inputs`` are
        ``(hint, ONNX element type)`` pairs; ``build(*input names)`` adds the body's nodes with
        this ctx (constants become initializers of the main graph, which a body may read) and
        returns ``(output name, element type)`` pairs, each output produced by a body node."""
        from onnx import helper
        outer, self._x.nodes = self._x.nodes, []
        try:
            names = [self.tmp(h) for h, _ in inputs]
            outputs = build(*names)
            nodes = self._x.nodes
        finally:
            self._x.nodes = outer
        info = lambda n, t: helper.make_tensor_value_info(n, t, None)  # noqa: E731
        return helper.make_graph(nodes, self.tmp(hint), [info(n, t) for n, (_, t) in zip(names, inputs)],
                                 [info(n, t) for n, t in outputs])

    def tmp(self, hint):
        return self._x.fresh(f"{self.op_name}/{hint}")

    def fail(self, msg):
        raise OnnxExportError(f"op '{self.op_name}' ({self.op_type}): {msg}")


class _Exporter:
    def __init__(self, opset):
        self.opset = opset
        self.nodes, self.inits, self.names, self.alias = [], [], set(), {}

    def fresh(self, hint):
        name, i = hint, 0
        while name in self.names:
            i += 1
            name = f"{hint}_{i}"
        self.names.add(name)
        return name

    def value(self, lbn):
        return self.alias.get(lbn, lbn)

    def initializer(self, array, name):
        from onnx import numpy_helper
        # np.asarray keeps a 0-d array 0-d (np.ascontiguousarray would make it shape (1,))
        self.inits.append(numpy_helper.from_array(np.asarray(array, order="C"), name))
        return name


def _tensor_type(desc, name):
    from onnx import helper
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(desc.dtype.np)),
                                         list(desc.shape))


class _OnnxWalk(ScheduleWalk):
    """The schedule walk emitting ONNX: graph inputs, initializers, an Identity per
    return op, and each other op through its registered converter."""

    def __init__(self, job, variables, opset, input_names):
        super().__init__(job)
        self.x = _Exporter(opset)
        self.variables, self.graph_input_names = variables, input_names or {}
        self.graph_inputs, self.graph_outputs = [], []

    def run_op(self, i, op):
        self.x.names.update(lbn for _, _, lbn in jb.op_outputs(op))
        super().run_op(i, op)

    def input(self, i, op, lbn, feed_index):
        name = self.graph_input_names.get(op.name, op.name)
        self.x.alias[lbn] = name
        self.x.names.add(name)
        self.graph_inputs.append(_tensor_type(self.descs[lbn], name))

    def variable(self, i, op, lbn):
        if op.name not in self.variables:
            raise OnnxExportError(f"variable '{op.name}' has no value to export")
        self.x.initializer(np.asarray(self.variables[op.name]), lbn)

    def output(self, i, op, src, result_index):
        from onnx import helper
        self.x.names.add(op.name)
        self.x.nodes.append(helper.make_node("Identity", [self.x.value(src)], [op.name], name=self.x.fresh(op.name)))
        self.graph_outputs.append(_tensor_type(self.descs[src], op.name))

    def watch(self, i, op, src):
        pass  # (a watch has no ONNX form; the onnxruntime lowering refuses jobs with watches)

    def compute(self, i, op):
        if jb.op_kind(op) != "user_conf":
            raise OnnxExportError(f"op '{op.name}' ({jb.op_kind(op)}) cannot be exported to ONNX")
        devices = device_count(self.placements.get(op.name, ("0:0",)))
        registry.lookup(op.user_conf.op_type_name).onnx(OnnxCtx(self.x, op, self.descs, devices))


def job_to_onnx(job, variables, opset=DEFAULT_OPSET, input_names=None, check=True):
    """The ``onnx.ModelProto`` of a completed predict Job, of the lowest ONNX IR version
    that holds ``opset`` (``onnx.helper.find_min_ir_version_for``).

    Args:
        job: a completed Job (see :func:`graphfront.passes.complete`).
        variables: variable op name -> numpy array (the initializers' values).
        opset: the ONNX opset of the default domain (``>= 13``).
        input_names: input op name -> graph input name (default: the op name).
        check: run ``onnx.checker`` (full check, with shape inference) on the model; the
            onnxruntime lowering skips it (onnxruntime validates the model it loads).
    Raises:
        OnnxExportError: a train job, ops without a converter (every such op type and
            its ops named in one message, before anything is converted), an op its
            converter cannot express, or a variable without a value.
    """
    import onnx
    from onnx import helper
    if job.job_conf.HasField("train_conf"):
        raise OnnxExportError(f"job '{job.job_conf.job_name}' is a train job; only predict jobs can be exported")
    if not is_int(opset) or opset < MIN_OPSET:
        raise OnnxExportError(f"opset must be an int >= {MIN_OPSET}, received {opset!r}")
    opset = int(opset)
    w = _OnnxWalk(job, variables, opset, input_names)
    _check_converters(w.order)
    w.walk()
    x = w.x
    graph = helper.make_graph(x.nodes, job.job_conf.job_name, w.graph_inputs, w.graph_outputs, initializer=x.inits)
    # the model's IR version is the lowest that carries its opset, not the newest the onnx
    # package writes: onnxruntime builds older than the onnx package still load it
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="graphfront",
                              ir_version=helper.find_min_ir_version_for(opsets))
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def export_job(user_job):
    """The Job that :func:`job_to_onnx` converts: ``user_job`` (as built, not modified)
    completed without the cleanup and fusion passes, so each op is one the user wrote and
    has its registered converter (the onnxruntime lowering converts the same Job)."""
    return complete(copy.deepcopy(user_job), enable_passes=False)


def missing_converters(ops) -> str | None:
    """The op types of ``ops`` without an ONNX converter, each with its op names
    (``"lgamma (op 'a', 'b'); top_k (op 'c')"``), or None when every op has one. Of the
    system ops, only the interface ops (inputs, variables, returns, watches) convert: any
    other (``constant_like_conf``, ``sync_dynamic_resize_conf``, ...) is listed by its kind."""
    missing = {}
    for op in ops:
        kind = jb.op_kind(op)
        if kind == "user_conf":
            if registry.lookup(op.user_conf.op_type_name).onnx is None:
                missing.setdefault(op.user_conf.op_type_name, []).append(op.name)
        elif kind not in INTERFACE_KINDS:
            missing.setdefault(kind, []).append(op.name)
    if not missing:
        return None
    return "; ".join(f"{t} (op {', '.join(repr(n) for n in names)})" for t, names in sorted(missing.items()))


def _check_converters(ops):
    """Raise OnnxExportError naming every op type of ``ops`` without a converter (and its ops)."""
    listed = missing_converters(ops)
    if listed:
        raise OnnxExportError(f"op type(s) without an ONNX converter: {listed}; op types that have one: "
                              f"{', '.join(convertible_op_types())}")


def convertible_op_types() -> list:
    """Sorted op types whose registry entry has an ``onnx`` converter."""
    return [t for t in registry.registered_op_types() if registry.lookup(t).onnx is not None]
