"""Rebuilding a served job in this process: what ``flow.serving.InferenceSession`` compiles.

:func:`build_served_job` re-adds every saved op through ``JobBuilder.add_op`` (OneFlow's
``CurJobAddOp``), applying the signature as OneFlow's ``AddInputOutputOpsPass`` does
(see :mod:`graphfront.serving`), then completes and lowers the job (``CompiledJob``).
:func:`pick_version`, :func:`read_saved_model` and :func:`checkpoint_dir` read a saved
model's directory; every name in it is checked (:mod:`graphfront.framework.names`).
"""
from __future__ import annotations

import copy
import enum
import os
import typing

import numpy as np
from google.protobuf import message as _message
from google.protobuf import text_format

from graphfront.core import op_conf_pb2, saved_model_pb2
from graphfront.framework import annotations as tp
from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import is_int
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import GraphfrontError, JobBuildError, format_location, printable, user_frame
from graphfront.framework.names import (InvalidNameError, check_name, shown, check_op_names, check_signature_names,
                                        check_strings, name_problem)
from graphfront.framework.session import CompiledJob
from graphfront.ops import registry
from graphfront.passes.rewrite import set_op_input


class SavedModelError(GraphfrontError, ValueError):
    """A saved model or job file cannot be served: unparseable, invalid names, a checkpoint
    directory outside the model, or a signature that does not fit its ops."""


class ModelVersionPolicy(enum.Enum):
    """How ``load_saved_model`` picks a version when none is given as an int."""

    LATEST = 1  # the highest integer-named subdirectory


def _lbn(lbi) -> str:
    return f"{lbi.op_name}/{lbi.blob_name}"


class ServedJob:
    """A compiled serving job and its interface (input/output op names in run order)."""

    def __init__(self, name, compiled, input_names, output_names, source):
        self.name = name
        self.compiled = compiled
        self.input_names = list(input_names)     # plan feed order (= job order)
        self.output_names = list(output_names)   # run() result order
        plan_outputs = compiled.plan.output_names
        self.output_index = [plan_outputs.index(n) for n in self.output_names]
        if self.output_index == list(range(len(plan_outputs))):
            self.output_index = None  # results already in run() order
        self.placeholders = {ph.param_name: ph for ph in compiled.placeholders}
        self.source = source
        # (name, shape, numpy dtype) per input in feed order; None when a list input needs launch()
        specs = [(n, tuple(self.placeholders[n].shape), np.dtype(self.placeholders[n].dtype.np))
                 for n in self.input_names]
        self._specs = None if any(ph.list_input for ph in compiled.placeholders) else specs

    def checked_arrays(self, kwargs):
        """The feeds in input order when ``kwargs`` holds exactly the inputs, each an
        ndarray of the expected shape and dtype; None otherwise (run() then reports why)."""
        specs = self._specs
        if specs is None or len(kwargs) != len(specs):
            return None
        arrays = []
        for name, shape, dtype in specs:
            a = kwargs.get(name)
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype:
                return None
            arrays.append(a)
        return arrays

    def input_info(self, name):
        ph = self.placeholders[name]
        return dict(shape=tuple(ph.shape), dtype=ph.dtype)

    def output_info(self, name):
        job = self.compiled.job
        op = next(o for o in job.net.op if o.name == name)
        d = jb.TensorDesc.from_proto(job.helper.lbn2logical_blob_desc[getattr(op.return_conf, "in")])
        return dict(shape=d.shape, dtype=d.dtype)


class Building:
    def __init__(self, name, signature, builder, source):
        self.name = name
        self.signature = signature
        self.builder = builder
        self.source = source


def pick_version(root, model_version):
    versions = sorted(int(n) for n in os.listdir(root) if n.isdigit() and os.path.isdir(os.path.join(root, n)))
    if isinstance(model_version, ModelVersionPolicy):
        if not versions:
            raise FileNotFoundError(f"saved model directory {root!r} holds no version (no integer-named "
                                    "subdirectory)")
        return versions[-1]
    if not is_int(model_version):
        raise TypeError(f"load_saved_model: model_version must be an int or ModelVersionPolicy.LATEST, received "
                        f"{model_version!r}")
    if model_version not in versions:
        raise FileNotFoundError(f"saved model directory {root!r} has no version {model_version}; versions: "
                                f"{versions}")
    return int(model_version)


def read_saved_model(version_dir, basename):
    pb = os.path.join(version_dir, basename + ".pb")
    txt = os.path.join(version_dir, basename + ".prototxt")
    model = saved_model_pb2.SavedModel()
    if os.path.isfile(pb):
        path = pb
        with open(pb, "rb") as f:
            data = f.read()
        try:
            model.ParseFromString(data)
        except _message.DecodeError as e:
            raise SavedModelError(f"saved model file {pb!r} is not a valid binary SavedModel: {e}") from None
    elif os.path.isfile(txt):
        path = txt
        with open(txt, "rb") as f:
            data = f.read()
        try:
            text_format.Parse(data.decode("utf-8"), model)
        except (text_format.ParseError, UnicodeDecodeError) as e:
            raise SavedModelError(f"saved model file {txt!r} is not a valid SavedModel in text format: "
                                  f"{printable(e)}") from None
    else:
        raise FileNotFoundError(f"saved model version directory {version_dir!r} has neither {basename}.pb nor "
                                f"{basename}.prototxt")
    if not model.IsInitialized():
        raise SavedModelError(f"saved model file {path!r} misses required fields: "
                              f"{', '.join(model.FindInitializationErrors())}")
    try:
        check_strings(model, f"saved model file {path!r}")
        for graph_name, graph in model.graphs.items():
            where = f"saved model file {path!r}, graph {graph_name!r}"
            check_name(graph_name, "job", f"saved model file {path!r}")
            check_op_names(graph.op_list, where)
            for sig_name, sig in graph.signatures.items():
                check_name(sig_name, "signature", where)
                check_signature_names(sig, f"{where}, signature {sig_name!r}")
    except InvalidNameError as e:
        raise SavedModelError(str(e)) from None
    return model


def checkpoint_dir(version_dir, checkpoint_dir):
    """``<version_dir>/<checkpoint_dir>``, refusing a directory that is not inside the
    model version's directory (absolute, ``..``, or a symlink leading out)."""
    where = f"saved model {version_dir!r}: checkpoint_dir {checkpoint_dir!r}"
    if not isinstance(checkpoint_dir, str) or not checkpoint_dir or "\0" in checkpoint_dir:
        raise SavedModelError(f"{where} must be a non-empty relative path")
    if os.path.isabs(checkpoint_dir) or ".." in checkpoint_dir.replace("\\", "/").split("/"):
        raise SavedModelError(f"{where} must stay inside the model directory (no absolute path, no '..')")
    path = os.path.join(version_dir, checkpoint_dir)
    root = os.path.realpath(version_dir)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise SavedModelError(f"{where} leads outside the model directory {version_dir!r}")
    return path


# ---------------------------------------------------------------------- job rebuilding

def _rename_inputs(op, rename):
    if jb.op_kind(op) not in ("user_conf", *registry.system_kinds()):
        return  # add_op reports the unsupported kind, naming the op
    for arg, i, lbn in jb.op_inputs(op):
        if lbn in rename:
            set_op_input(op, arg, i, rename[lbn])


def build_served_job(building, op_list, device_tag, session, compile_mode="plan") -> ServedJob:
    """Add ``op_list`` to ``building``'s job (signature applied, see module docstring); compile it."""
    b = building.builder
    sig = building.signature
    loc = user_frame()
    context = f"{building.source}: "

    def fail(msg, cls=SavedModelError):
        raise cls(context + msg + format_location(loc)) from None

    rename, dropped = {}, set()
    in_names = sorted(sig.inputs) if sig is not None else []
    out_names = sorted(sig.outputs) if sig is not None else []
    if sig is not None:
        for name in in_names:
            rename[_lbn(sig.inputs[name].lbi)] = f"{name}/out"
        for op in op_list:
            kind = jb.op_kind(op)
            if kind == "return_conf" or (kind == "input_conf" and f"{op.name}/{op.input_conf.out}" in rename):
                dropped.add(op.name)
    kept = [op for op in op_list if op.name not in dropped and jb.op_kind(op) != "foreign_watch_conf"]
    kept_names = {op.name for op in kept}
    for name in in_names + out_names:
        problem = name_problem(name, "signature")
        if problem:
            fail(f"signature name {name!r} cannot name an interface op: it {problem}")
        if name in kept_names:
            fail(f"signature name {shown(name, quote=True)} is also the name of an op of the job; "
                 f"interface ops are named after "
                 "the signature, so the names must differ")
    try:
        for name in in_names:
            d = sig.inputs[name]
            bc = d.blob_conf
            if not (bc.HasField("shape") and bc.HasField("data_type")):
                fail(f"signature input {shown(name, quote=True)} has no blob_conf shape/data_type")
            conf = op_conf_pb2.OperatorConf(name=name, device_tag=device_tag)
            conf.input_conf.out = "out"
            conf.input_conf.blob_conf.CopyFrom(bc)
            b.add_op(conf, location=loc)
        for op in kept:
            conf = copy.deepcopy(op)
            conf.ClearField("scope_symbol_id")  # a symbol of the exporting process
            conf.device_tag = "cpu" if jb.op_kind(conf) == "return_conf" else device_tag
            _rename_inputs(conf, rename)
            ctrl = [n for n in conf.ctrl_in_op_name if n not in dropped]
            del conf.ctrl_in_op_name[:]
            conf.ctrl_in_op_name.extend(ctrl)
            b.add_op(conf, location=loc)
        for name in out_names:
            lbn = _lbn(sig.outputs[name].lbi)
            lbn = rename.get(lbn, lbn)
            if not b.has_blob(lbn):
                fail(f"signature output {shown(name, quote=True)} names blob {shown(lbn, quote=True)}, "
                     "which no op of the job produces")
            conf = op_conf_pb2.OperatorConf(name=name, device_tag="cpu")
            setattr(conf.return_conf, "in", lbn)
            conf.return_conf.out = "out"
            b.add_op(conf, location=loc)
    except JobBuildError as e:
        raise JobBuildError(context + e.args[0]) from None
    if sig is not None:
        _prune_to_outputs(b)
    job = b.job
    input_ops = [op for op in job.net.op if jb.op_kind(op) == "input_conf"]
    output_names = [op.name for op in job.net.op if jb.op_kind(op) == "return_conf"]
    if sig is not None:
        output_names = out_names
    placeholders = []
    for op in input_ops:
        bc = op.input_conf.blob_conf
        cls = tp.ListNumpy.Placeholder if bc.is_dynamic else tp.Numpy.Placeholder
        shape = tuple(int(d) for d in bc.shape.dim)
        if not shape or any(d <= 0 for d in shape):
            fail(f"input {op.name!r} has shape {shape}; an input needs at least one dimension, each positive")
        ph = cls(shape, _dt.from_proto(bc.data_type))
        ph.param_name = op.name
        placeholders.append(ph)
    try:
        compiled = CompiledJob(session, job, placeholders, [None] * len(output_names), typing.List[tp.Numpy],
                               enable_passes=True, locations=b.locations, compile_mode=compile_mode)
    except JobBuildError as e:
        raise JobBuildError(context + e.args[0]) from None
    if compiled.plan.input_names != [ph.param_name for ph in placeholders]:
        raise RuntimeError(f"{context}internal error: compiled inputs {compiled.plan.input_names} differ from "
                           f"{[ph.param_name for ph in placeholders]}")
    return ServedJob(building.name, compiled, [ph.param_name for ph in placeholders], output_names,
                      building.source)


def _prune_to_outputs(b):
    """Remove every op that no return op needs (data or control dependency)."""
    producer = {}
    for op in b.job.net.op:
        for _, _, lbn in jb.op_outputs(op):
            producer[lbn] = op.name
    live, stack = set(), [op.name for op in b.job.net.op if jb.op_kind(op) == "return_conf"]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        op = b.ops[name]
        stack.extend(producer[lbn] for _, _, lbn in jb.op_inputs(op) if lbn in producer)
        stack.extend(n for n in op.ctrl_in_op_name if n in b.ops)
    b.remove_ops([op.name for op in b.job.net.op if op.name not in live])
