"""``flow.onnx.export``: a predict job or a saved model as an ONNX model file.

The job is completed without the cleanup and fusion passes (so the file holds the ops
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
import os

import numpy as np

from graphfront.framework import job_builder as jb
from graphfront.framework.job_builder import TensorDesc
from graphfront.ops import registry

__all__ = ["export", "export_job", "job_to_onnx", "convertible_op_types", "OnnxExportError", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17
MIN_OPSET = 13


class OnnxExportError(ValueError):
    """A job cannot be written as ONNX: an op has no converter, or an attr value that
    its converter cannot express (the message names the op, its type and the reason)."""


class OnnxCtx:
    """What an op's ``onnx`` converter sees: its attrs, input/output names and descs,
    and the builder of nodes and constants.

    ONNX value names are graphfront lbns (``op_name/out_0``); ``node`` returns the
    output names it was given.
    """

    def __init__(self, exporter, op_conf, descs):
        self._x = exporter
        self.op_name = op_conf.name
        self.op_type = op_conf.user_conf.op_type_name
        self.opset = exporter.opset
        self._uc = op_conf.user_conf
        self._descs = descs
        self._def = registry.lookup(self.op_type)
        self.attrs = jb.user_attrs(op_conf)

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


def job_to_onnx(job, variables, opset=DEFAULT_OPSET, input_names=None, check=True):
    """The ``onnx.ModelProto`` of a completed predict Job.

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
    from graphfront.runtime.plan import schedule
    if job.job_conf.HasField("train_conf"):
        raise OnnxExportError(f"job '{job.job_conf.job_name}' is a train job; only predict jobs can be exported")
    if not isinstance(opset, int) or opset < MIN_OPSET:
        raise OnnxExportError(f"opset must be an int >= {MIN_OPSET}, received {opset!r}")
    descs = {lbn: TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
    x = _Exporter(opset)
    graph_inputs, graph_outputs = [], []
    order, _ = schedule(job)
    _check_converters(order)
    for op in order:
        kind = jb.op_kind(op)
        outs = [lbn for _, _, lbn in jb.op_outputs(op)]
        for lbn in outs:
            x.names.add(lbn)
        if kind == "input_conf":
            name = (input_names or {}).get(op.name, op.name)
            x.alias[outs[0]] = name
            x.names.add(name)
            graph_inputs.append(_tensor_type(descs[outs[0]], name))
        elif kind == "variable_conf":
            if op.name not in variables:
                raise OnnxExportError(f"variable '{op.name}' has no value to export")
            x.initializer(np.asarray(variables[op.name]), outs[0])
        elif kind == "return_conf":
            src = getattr(op.return_conf, "in")
            x.names.add(op.name)
            x.nodes.append(helper.make_node("Identity", [x.value(src)], [op.name], name=x.fresh(op.name)))
            graph_outputs.append(_tensor_type(descs[src], op.name))
        elif kind == "foreign_watch_conf":
            continue
        elif kind == "user_conf":
            registry.lookup(op.user_conf.op_type_name).onnx(OnnxCtx(x, op, descs))
        else:
            raise OnnxExportError(f"op '{op.name}' ({kind}) cannot be exported to ONNX")
    graph = helper.make_graph(x.nodes, job.job_conf.job_name, graph_inputs, graph_outputs, initializer=x.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="graphfront")
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def export_job(user_job):
    """The Job that :func:`job_to_onnx` converts: ``user_job`` (as built, not modified)
    completed without the cleanup and fusion passes, so each op is one the user wrote and
    has its registered converter (the onnxruntime lowering converts the same Job)."""
    from graphfront.passes import complete
    return complete(copy.deepcopy(user_job), enable_passes=False)


def missing_converters(ops) -> str | None:
    """The op types of ``ops`` without an ONNX converter, each with its op names
    (``"lgamma (op 'a', 'b'); top_k (op 'c')"``), or None when every op has one."""
    missing = {}
    for op in ops:
        if jb.op_kind(op) == "user_conf" and registry.lookup(op.user_conf.op_type_name).onnx is None:
            missing.setdefault(op.user_conf.op_type_name, []).append(op.name)
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


def export(job_func_or_saved_model, path, opset=DEFAULT_OPSET, model_version=None):
    """Write a predict job, or a saved model, as an ONNX model file.

    Args:
        job_func_or_saved_model: a ``@flow.global_function(type="predict")`` job of the
            default session (its variables' current values are written), or the
            ``save_path`` of ``flow.saved_model.ModelBuilder`` (its default graph and
            signature; inputs and outputs are named after the signature).
        path: the ``.onnx`` file to write (its directory must exist).
        opset: ONNX opset of the default domain, ``>= 13`` (default 17).
        model_version: for a saved model, the version to read (default: the latest).
    Returns:
        The written ``onnx.ModelProto``.
    Raises:
        OnnxExportError: see :func:`job_to_onnx`; TypeError for another kind of source;
        the saved model's loading errors (FileNotFoundError, ValueError, CheckpointError).
    """
    import onnx
    from graphfront.framework.session import GlobalFunction
    if isinstance(job_func_or_saved_model, GlobalFunction):
        compiled = job_func_or_saved_model.compiled_job
        store = compiled.session.variables
        # graph inputs named after the job function's parameters
        input_names = dict(zip(compiled.plan.input_names, (ph.param_name for ph in compiled.placeholders)))
    elif isinstance(job_func_or_saved_model, (str, os.PathLike)):
        from graphfront.serving import InferenceSession, ModelVersionPolicy, SessionOption
        option = SessionOption()
        option.device_tag = "cpu"
        sess = InferenceSession(option)
        sess.load_saved_model(job_func_or_saved_model,
                              ModelVersionPolicy.LATEST if model_version is None else model_version)
        sess.launch()
        compiled, store = sess.job(), sess.session.variables
        input_names = None
    else:
        raise TypeError(f"flow.onnx.export: expects a predict job function (@flow.global_function) or a saved model "
                        f"directory, received {type(job_func_or_saved_model).__name__}")
    job = export_job(compiled.user_job)
    values = {name: t.detach().cpu().numpy() for name, t in store.tensors.items()}
    model = job_to_onnx(job, values, opset, input_names)
    onnx.save(model, os.fspath(path))
    return model
