"""``flow.saved_model``: export jobs and their variables for serving.

``ModelBuilder(path).ModelName(n).Version(v)``, ``AddFunction(job)`` returns a
:class:`GraphBuilder`, ``AddSignature(name)`` a :class:`SignatureBuilder` whose
``Input(name, lbn)`` / ``Output(name, lbn)`` name the job's blobs; ``Save()`` writes
(OneFlow v0.6.0 ``python/oneflow/compatible/single_client/serving/saved_model_builder.py``,
``oneflow/core/serving/saved_model.proto``)::

    <path>/<version>/saved_model.pb         binary oneflow.SavedModel
    <path>/<version>/saved_model.prototxt   the same message in protobuf text format
    <path>/<version>/variables/             every variable of the session, checkpoint layout

Each graph's ``op_list`` is the job's ``net.op`` as built (before the completion
passes; ``save_model_before_graph_complete=False`` takes the completed job).
``flow.serving.InferenceSession`` loads the result.

``Save()`` is atomic: the version directory is assembled under a hidden temporary
name ``<path>/.<version>.saved-model-tmp-<host>-<pid>-<token>`` (files fsync'd) and
renamed to ``<path>/<version>`` as the last step, so a crash never leaves a
half-written ``<version>`` directory; leftovers of crashed saves are hidden (loaders
ignore them) and removed by the next ``Save()`` into the same ``path``.

Example::

    @flow.global_function(type="predict")
    def predict(x: tp.Numpy.Placeholder((1, 4))) -> tp.Numpy:
        ...
        return y
    b = flow.saved_model.ModelBuilder("models/m").ModelName("m").Version(1)
    b.AddFunction(predict).AddSignature("regress").Input("x", x_lbn).Output("y", y_lbn)
    b.Save()
"""
from __future__ import annotations

import os
import re
import shutil

from google.protobuf import text_format

from graphfront.core import job_conf_pb2, saved_model_pb2
from graphfront.framework import checkpoint_io
from graphfront.framework import job_builder as jb
from graphfront.framework import tempfiles
from graphfront.framework.blob_desc import is_int
from graphfront.framework.checkpoint_io import _fsync_dir
from graphfront.framework.errors import ArgumentError
from graphfront.framework.session import GlobalFunction
from graphfront.checkpoint import variable_arrays

__all__ = ["GraphBuilder", "ModelBuilder", "SignatureBuilder"]

_TMP_TAG = "saved-model-tmp"


def _test_hook(stage, **info):
    """No-op called during ``ModelBuilder.Save``; tests replace it to inject crashes.

    Stages: ``"variables_written"`` (tmp), ``"meta_written"`` (tmp).
    """


class ModelBuilder:
    """Builds a ``SavedModel`` for ``save_path`` (see module docstring)."""

    DEFAULT_CHECKPOINT_DIR = "variables"
    DEFAULT_SAVED_MODEL_FILE_BASENAME = "saved_model"

    def __init__(self, save_path):
        if not isinstance(save_path, (str, os.PathLike)):
            raise ArgumentError(f"ModelBuilder: save_path must be a str or path, received {type(save_path).__name__}")
        self.save_path_ = os.fspath(save_path)
        self.proto_ = saved_model_pb2.SavedModel()
        self.graph_builders_ = {}
        self._version = None
        self._funcs = {}

    @property
    def proto(self) -> saved_model_pb2.SavedModel:
        return self.proto_

    def ModelName(self, model_name):  # noqa: N802 - OneFlow's fluent names
        if not isinstance(model_name, str) or not model_name:
            raise ArgumentError(f"ModelBuilder.ModelName expects a non-empty str, received {model_name!r}")
        self.proto_.name = model_name
        return self

    def Version(self, version: int) -> ModelBuilder:  # noqa: N802
        """Set the model version (a non-negative int: the ``<save_path>/<version>`` directory).

        Raises:
            ValueError: ``version`` is not a non-negative int.
        """
        if not is_int(version) or version < 0:
            raise ArgumentError(f"ModelBuilder.Version expects a non-negative int, received {version!r}")
        self._version = self.proto_.version = int(version)
        return self

    def AddFunction(self, func) -> GraphBuilder:  # noqa: N802
        """Add the graph of ``func``; the first graph added is the model's default graph.

        Args:
            func: a ``@flow.global_function`` (its job as built becomes the graph's ``op_list``).

        Returns:
            GraphBuilder: add signatures to it with ``AddSignature(name)``.

        Raises:
            TypeError: ``func`` is not a global function.
            ValueError: a graph of the same name was added already.
        """
        if not isinstance(func, GlobalFunction):
            raise ArgumentError(f"ModelBuilder.AddFunction expects a @flow.global_function, received "
                                f"{type(func).__name__}")
        if func.name in self.graph_builders_:
            raise ArgumentError(f"ModelBuilder.AddFunction: function '{func.name}' was already added")
        graph_builder = GraphBuilder(func.name, self)
        self.graph_builders_[func.name] = graph_builder
        self._funcs[func.name] = func
        if not self.proto_.HasField("default_graph_name"):
            self.proto_.default_graph_name = func.name
        return graph_builder

    # ------------------------------------------------------------------ Save
    def _check_unique(self):
        names, lbns = {}, {}
        for graph_name, gb in self.graph_builders_.items():
            for sig_name, sb in gb.signature_builders_.items():
                for kind, defs in (("input", sb.proto.inputs), ("output", sb.proto.outputs)):
                    for name, d in defs.items():
                        where = f"{kind} '{name}' of signature '{sig_name}' (graph '{graph_name}')"
                        if name in names:
                            raise ValueError(f"ModelBuilder.Save: the name '{name}' is used twice: by "
                                             f"{names[name]} and {where}")
                        names[name] = where
                        lbn = f"{d.lbi.op_name}/{d.lbi.blob_name}"
                        lkey = (kind, graph_name, lbn)
                        if lkey in lbns:
                            raise ValueError(f"ModelBuilder.Save: blob '{lbn}' is used twice: by {lbns[lkey]} "
                                             f"and {where}")
                        lbns[lkey] = where

    def Save(self, save_model_before_graph_complete=True):  # noqa: N802
        """Compile the default session if needed and write ``<save_path>/<version>`` atomically.

        Raises:
            ValueError: no version or model name was set, no function was added,
                duplicate signature names/lbns, a signature names a blob the job does
                not have, or ``<save_path>/<version>`` exists already.
        """
        if self._version is None:
            raise ValueError("ModelBuilder.Save: the version is not set; call .Version(n) first")
        if not self.proto_.name:
            raise ValueError("ModelBuilder.Save: the model name is not set; call .ModelName(name) first")
        if not self.graph_builders_:
            raise ValueError("ModelBuilder.Save: no function was added; call .AddFunction(job) first")
        self._check_unique()
        sessions = {id(f.session): f.session for f in self._funcs.values()}
        if len(sessions) != 1:
            raise ValueError("ModelBuilder.Save: the functions belong to different sessions "
                             "(flow.clear_default_session() was called between their definitions)")
        (session,) = sessions.values()
        session.try_init()
        for name, gb in self.graph_builders_.items():
            compiled = session.compiled(name)
            job = compiled.user_job if save_model_before_graph_complete else compiled.job
            gb._finish(job)  # idempotent; also covers signatures added after an earlier Finish()
            graph = self.proto_.graphs[name]
            graph.CopyFrom(gb.proto)
            del graph.op_list[:]
            for op in job.net.op:
                if jb.op_kind(op) == "foreign_watch_conf":
                    continue  # watch handlers live in the exporting process only
                graph.op_list.add().CopyFrom(op)
        self.proto_.checkpoint_dir = self.DEFAULT_CHECKPOINT_DIR
        arrays = variable_arrays(session)
        self._write(arrays)

    def _write(self, arrays):
        root = os.path.abspath(self.save_path_)
        if os.path.lexists(root) and not os.path.isdir(root):
            raise ValueError(f"ModelBuilder.Save: save path {root!r} exists and is not a directory")
        target = os.path.join(root, str(self._version))
        if os.path.lexists(target):
            raise ValueError(f"ModelBuilder.Save: version directory {target!r} already exists; choose another "
                             "version or remove it")
        os.makedirs(root, exist_ok=True)
        prefix = f".{self._version}."
        with tempfiles.temp_sibling(root, prefix, _TMP_TAG) as tmp:
            self._write_version(arrays, tmp, target)
        # leftovers of crashed saves of any version
        leftover = re.compile(r"^(\.\d+\.)" + re.escape(_TMP_TAG) + "-")
        for version_prefix in {m.group(1) for m in map(leftover.match, os.listdir(root)) if m}:
            tempfiles.remove_stale(root, version_prefix, _TMP_TAG)

    def _write_version(self, arrays, tmp, target):
        root = os.path.dirname(target)
        os.mkdir(tmp)
        try:
            checkpoint_io.save_checkpoint(os.path.join(tmp, self.DEFAULT_CHECKPOINT_DIR), arrays)
            _test_hook("variables_written", tmp=tmp)
            base = os.path.join(tmp, self.DEFAULT_SAVED_MODEL_FILE_BASENAME)
            _write_synced(base + ".pb", self.proto_.SerializeToString(deterministic=True))
            _write_synced(base + ".prototxt", text_format.MessageToString(self.proto_).encode("utf-8"))
            _fsync_dir(tmp)
            _test_hook("meta_written", tmp=tmp)
            if os.path.lexists(target):
                raise ValueError(f"ModelBuilder.Save: version directory {target!r} appeared while saving")
            os.rename(tmp, target)
            _fsync_dir(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _write_synced(path, data):
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class GraphBuilder:
    """One function's graph in a SavedModel: its signatures (``GraphDef``)."""

    def __init__(self, name, model_builder=None):
        if model_builder is not None and not isinstance(model_builder, ModelBuilder):
            raise ArgumentError(f"GraphBuilder: model_builder must be a ModelBuilder, received "
                                f"{type(model_builder).__name__}")
        self.name_ = name
        self.proto_ = saved_model_pb2.GraphDef()
        self.owner_ = model_builder
        self.signature_builders_ = {}
        self.finished_ = False

    @property
    def name(self):
        return self.name_

    @property
    def proto(self) -> saved_model_pb2.GraphDef:
        return self.proto_

    @property
    def finished(self) -> bool:
        return self.finished_

    def AddSignature(self, signature_name):  # noqa: N802
        """Add a signature (the first one is the graph's default); returns its SignatureBuilder."""
        if not isinstance(signature_name, str) or not signature_name:
            raise ArgumentError(f"GraphBuilder.AddSignature expects a non-empty str, received {signature_name!r}")
        if signature_name in self.signature_builders_:
            raise ArgumentError(f"graph '{self.name_}' already has a signature named '{signature_name}'")
        sb = SignatureBuilder(signature_name, self)
        self.signature_builders_[signature_name] = sb
        if not self.proto_.HasField("default_signature_name"):
            self.proto_.default_signature_name = signature_name
        return sb

    def OwnerModelBuilder(self):  # noqa: N802
        return self.owner_

    def AsDefault(self):  # noqa: N802
        """Make this graph the model's default graph."""
        if self.owner_ is not None:
            self.owner_.proto.default_graph_name = self.name_
        return self

    def _compiled(self):
        if self.owner_ is None or self.name_ not in self.owner_._funcs:
            raise ValueError(f"graph '{self.name_}' does not belong to a ModelBuilder with its function")
        func = self.owner_._funcs[self.name_]
        func.session.try_init()
        return func.session.compiled(self.name_)

    def _check_blobs(self, job, what):
        descs = job.helper.lbn2logical_blob_desc
        for sig_name, sb in self.signature_builders_.items():
            for kind, defs in (("input", sb.proto.inputs), ("output", sb.proto.outputs)):
                for name, d in defs.items():
                    lbn = f"{d.lbi.op_name}/{d.lbi.blob_name}"
                    if lbn not in descs:
                        raise ValueError(f"signature '{sig_name}' of graph '{self.name_}': {kind} '{name}' names "
                                         f"blob '{lbn}', which is not in {what} '{job.job_conf.job_name}'")

    def Finish(self):  # noqa: N802
        """Check every signature blob exists in the compiled job (as built); record input blob confs."""
        return self._finish(self._compiled().user_job)

    def _finish(self, job):
        self._check_blobs(job, "job")
        by_name = {op.name: op for op in job.net.op}
        for sig_name, sb in self.signature_builders_.items():
            for name, d in sb.proto.inputs.items():
                lbn = f"{d.lbi.op_name}/{d.lbi.blob_name}"
                producer = by_name.get(d.lbi.op_name)
                d.blob_conf.Clear()
                if producer is not None and jb.op_kind(producer) == "input_conf":
                    d.blob_conf.CopyFrom(producer.input_conf.blob_conf)
                else:
                    desc = jb.TensorDesc.from_proto(job.helper.lbn2logical_blob_desc[lbn])
                    d.blob_conf.shape.dim.extend(desc.shape)
                    d.blob_conf.data_type = desc.dtype.proto
                    d.blob_conf.is_dynamic = desc.is_dynamic
                    d.blob_conf.nd_sbp.sbp_parallel.add().split_parallel.axis = 0
            self.proto_.signatures[sig_name].CopyFrom(sb.proto)
        self.finished_ = True
        return self


class SignatureBuilder:
    """Names the inputs and outputs of a graph (``JobSignatureDef``)."""

    def __init__(self, name, graph_builder=None):
        self.name_ = name
        self.proto_ = job_conf_pb2.JobSignatureDef()
        self.owner_ = graph_builder

    @property
    def name(self):
        return self.name_

    @property
    def proto(self) -> job_conf_pb2.JobSignatureDef:
        return self.proto_

    def _lbi(self, method, name, lbn, defs):
        if not isinstance(name, str) or not name or "/" in name:
            raise ArgumentError(f"SignatureBuilder.{method}: name must be a non-empty str without '/' (it names an "
                                f"interface op when served), received {name!r}")
        if not isinstance(lbn, str) or "/" not in lbn:
            raise ArgumentError(f"SignatureBuilder.{method}('{name}'): lbn must be a logical blob name "
                                f"'op_name/blob_name' (blob.logical_blob_name), received {lbn!r}")
        if name in defs:
            raise ArgumentError(f"signature '{self.name_}' already has an {method.lower()} named '{name}'")
        op_name, blob_name = lbn.split("/", 1)
        d = defs[name]
        d.lbi.op_name = op_name
        d.lbi.blob_name = blob_name
        return self

    def Input(self, input_name, lbn):  # noqa: N802
        """Map signature input ``input_name`` to blob ``lbn`` (fed at serving time)."""
        return self._lbi("Input", input_name, lbn, self.proto_.inputs)

    def Output(self, output_name, lbn):  # noqa: N802
        """Map signature output ``output_name`` to blob ``lbn`` (returned at serving time)."""
        return self._lbi("Output", output_name, lbn, self.proto_.outputs)

    def OwnerGraphBuilder(self):  # noqa: N802
        return self.owner_

    def AsDefault(self):  # noqa: N802
        """Make this the graph's default signature."""
        if self.owner_ is not None:
            self.owner_.proto.default_signature_name = self.name_
        return self
