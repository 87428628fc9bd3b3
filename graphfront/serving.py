"""``flow.serving``: run saved models in a standalone ``InferenceSession``.

::

    sess = flow.serving.InferenceSession(flow.serving.SessionOption())
    sess.load_saved_model("models/lenet")          # highest integer version
    sess.launch()                                  # loads the variables
    (logits,) = sess.run("predict", image=batch)   # list of ndarrays, one per output
    sess.close()

How a job is rebuilt (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/serving/inference_session.py``). ``open(job_name,
signature)`` starts a new ``Job`` with a predict ``job_conf``; ``compile(op_list)``
re-adds every saved op through ``JobBuilder.add_op`` (OneFlow's ``CurJobAddOp``), so
op schemas, attrs, shapes and dtypes are checked and inferred again in this process,
then completes and lowers the job (``CompiledJob``) exactly as a training process
does. With a signature (OneFlow's ``AddInputOutputOpsPass`` semantics):

* each signature input ``name`` becomes an ``input_conf`` op named ``name`` (its
  ``blob_conf`` from the signature's ``JobInputDef``), and every op input that read
  the signature's blob (``lbi``) reads ``name/out`` instead; the saved input op that
  produced that blob is dropped;
* the saved ``return_conf`` ops are dropped and each signature output ``name``
  becomes a ``return_conf`` op named ``name`` reading the signature's blob;
* ops not needed for the outputs are pruned (so are unused variables and inputs).

So interface op names *are* the signature names: ``list_inputs()`` /
``list_outputs()`` return them sorted by name, ``run`` takes ``name=ndarray``
keywords and returns outputs in ``list_outputs()`` order. Without a signature the
job's own ``input_conf`` / ``return_conf`` op names are used, in job order. Watch ops
of the exporting process are dropped. Every op is placed on ``option.device_tag``
(return ops on cpu).

Variables: each InferenceSession owns a private ``Session`` (its own variable store;
the default session and other InferenceSessions are never touched). ``launch()``
loads every variable of the compiled jobs from the checkpoint path; a variable that
the checkpoint lacks, a truncated file or a shape/dtype that differs is an error
naming the variable, so no served variable keeps a random initial value. Variables
present in the checkpoint but unused (optimizer state ...) are ignored. One
checkpoint path per session: use one InferenceSession per model.
"""
from __future__ import annotations

import contextlib
import copy
import enum
import os

import numpy as np
import torch
from google.protobuf import text_format

from graphfront.core import job_conf_pb2, job_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework import scope_symbols as scope_mod
from graphfront.framework.blob_desc import expect_path, is_int
from graphfront.framework.errors import ArgumentError, FeedError, format_location, user_frame
from graphfront.framework.served_jobs import (Building, ModelVersionPolicy, SavedModelError, build_served_job,
                                              checkpoint_dir, pick_version, read_saved_model)
from graphfront.framework.names import shown
from graphfront.framework.session import CompiledJob, Session
from graphfront.runtime.lowering import check_mode


__all__ = ["InferenceSession", "ModelVersionPolicy", "SavedModelError", "SessionOption"]


class SessionOption:
    """Options of an InferenceSession.

    Attributes:
        device_tag: ``"gpu"`` or ``"cpu"``; default ``"gpu"`` when CUDA is available,
            else ``"cpu"`` (OneFlow's default is ``"gpu"``). ``"gpu"`` without CUDA is
            an error at ``InferenceSession`` construction.
        device_num: number of devices; graphfront serves on one device (must be 1).
        is_mirrored_view: accepted for compatibility (single device: no effect).
        compile_mode: graphfront's lowering of the served jobs (``InferenceSession.compile_mode(job_name)``
            tells which one runs a job):

            * ``"plan"`` (default): the per-op plan on PyTorch kernels, the training
              process's kernels, so results are bit-identical to it;
            * ``"onnxruntime"``: converted to ONNX and run by onnxruntime on the CPU, an
              error when it cannot (:mod:`graphfront.runtime.onnxruntime_plan`); results
              within float rounding of the plan's, not bit-identical;
            * ``"auto"``: ``"onnxruntime"`` for each job that onnxruntime can run (package
              installed, ``device_tag`` ``"cpu"``, every op with an ONNX converter), else
              ``"plan"`` (``job(job_name).fallback_reason`` says why);
            * ``"native"``: whole job compiled by TorchInductor on the first ``run``,
              cached on disk (:mod:`graphfront.runtime.native`);
            * ``"xla"``: compiled by XLA through JAX, cached on disk
              (:mod:`graphfront.runtime.xla`).

            Measured per ``run`` at batch 1 on a 2-core CPU (``benchmarks/peers.py``): LeNet
            237 us in onnxruntime vs 515 us in the plan, the ResNet-style job of
            ``examples/resnet_bn`` 183 vs 410 us. The default stays ``"plan"`` so that served outputs equal the training
            process's bit for bit; choose ``"auto"`` or ``"onnxruntime"`` for latency.
    """

    def __init__(self):
        self.device_tag = "gpu" if torch.cuda.is_available() else "cpu"
        self.device_num = 1
        self.is_mirrored_view = False
        self.compile_mode = "plan"

    def __repr__(self):
        return (f"SessionOption(device_tag={self.device_tag!r}, device_num={self.device_num}, "
                f"is_mirrored_view={self.is_mirrored_view}, compile_mode={self.compile_mode!r})")


def _check_option(option):
    if not isinstance(option, SessionOption):
        raise ArgumentError(f"InferenceSession: option must be a flow.serving.SessionOption, received "
                            f"{type(option).__name__}")
    if option.device_tag not in ("cpu", "gpu"):
        raise ArgumentError(f"SessionOption.device_tag must be 'cpu' or 'gpu', received {option.device_tag!r}")
    if option.device_tag == "gpu" and not torch.cuda.is_available():
        raise ArgumentError("SessionOption.device_tag is 'gpu' but CUDA is not available on this machine "
                            "(torch.cuda.is_available() is False); set option.device_tag = 'cpu'")
    check_mode(option.compile_mode, "SessionOption.compile_mode")
    if not is_int(option.device_num) or option.device_num != 1:
        raise ArgumentError(f"SessionOption.device_num: graphfront serves on one device, so it must be 1; "
                            f"received {option.device_num!r}")


class InferenceSession:
    """A standalone session serving compiled jobs (see module docstring).

    Args:
        option: a :class:`SessionOption` (default ``SessionOption()``).
    Raises:
        ValueError: ``device_tag`` is ``"gpu"`` without CUDA (use ``"cpu"``), or an
            unsupported option value.
    """

    class SessionStatus(enum.Enum):
        OPEN = 1
        RUNNING = 2
        CLOSED = 3

    def __init__(self, option=None):
        option = SessionOption() if option is None else option
        _check_option(option)
        self.option_ = copy.copy(option)
        self.status_ = self.SessionStatus.OPEN
        self._session = Session()
        self.checkpoint_path_ = None
        self.job_name2signature_ = {}
        self.job_name2batch_size_ = {}
        self._jobs = {}
        self._building = None

    # ------------------------------------------------------------------ status helpers
    @property
    def status(self):
        return self.status_

    @property
    def session(self) -> Session:
        """The private Session holding this InferenceSession's variables."""
        return self._session

    def _check_status(self, *allowed, what):
        if self.status_ not in allowed:
            names = " or ".join(s.name for s in allowed)
            raise RuntimeError(f"InferenceSession.{what}() needs status {names}; the session is "
                               f"{self.status_.name}")

    def _job(self, job_name):
        if job_name is None:
            if not self._jobs:
                raise ValueError("InferenceSession: no job is loaded; call load_saved_model() first")
            return next(iter(self._jobs.values()))
        try:
            return self._jobs[job_name]
        except KeyError:
            raise ArgumentError(f"InferenceSession: no job named '{job_name}'; jobs: {sorted(self._jobs)}") from None

    # ------------------------------------------------------------------ configuration
    def set_checkpoint_path(self, checkpoint_path):
        """Directory (checkpoint layout) that ``launch()`` loads the variables from."""
        self._check_status(self.SessionStatus.OPEN, what="set_checkpoint_path")
        self.checkpoint_path_ = expect_path(checkpoint_path, "InferenceSession.set_checkpoint_path", "checkpoint_path")

    def set_job_signature(self, job_name, signature):
        """Use ``signature`` (a ``JobSignatureDef``) when job ``job_name`` is opened."""
        self._check_status(self.SessionStatus.OPEN, what="set_job_signature")
        if not isinstance(signature, job_conf_pb2.JobSignatureDef):
            raise ArgumentError(f"set_job_signature expects a JobSignatureDef, received {type(signature).__name__}")
        self.job_name2signature_[job_name] = signature

    def set_job_batch_size(self, job_name, batch_size):
        """Overwrite dim 0 of every signature input shape of job ``job_name``."""
        self._check_status(self.SessionStatus.OPEN, what="set_job_batch_size")
        if not is_int(batch_size) or batch_size <= 0:
            raise ArgumentError(f"set_job_batch_size expects a positive int, received {batch_size!r}")
        self.job_name2batch_size_[job_name] = int(batch_size)

    # ------------------------------------------------------------------ building
    @contextlib.contextmanager
    def open(self, job_name, signature=None, batch_size=None, source=None):
        """Start building job ``job_name`` (predict job conf); ``compile(op_list)`` fills it."""
        self._check_status(self.SessionStatus.OPEN, what="open")
        if self._building is not None:
            raise RuntimeError(f"InferenceSession.open('{job_name}'): job '{self._building.name}' is still open")
        if job_name in self._jobs:
            raise ValueError(f"InferenceSession.open: a job named '{job_name}' is already compiled")
        if signature is None:
            signature = self.job_name2signature_.get(job_name)
        if signature is not None:
            signature = copy.deepcopy(signature)
            batch_size = batch_size or self.job_name2batch_size_.get(job_name)
            if batch_size is not None:
                for name, d in signature.inputs.items():
                    if len(d.blob_conf.shape.dim) == 0:
                        raise SavedModelError(f"set_job_batch_size: signature input {shown(name, quote=True)} "
                                              "has no shape")
                    d.blob_conf.shape.dim[0] = batch_size
        job = job_pb2.Job()
        job.job_conf.job_name = job_name
        job.job_conf.predict_conf.SetInParent()
        # Variables get their values from the checkpoint at launch(); launch() refuses to run
        # with any variable missing there, so this initializer is never what a job computes with.
        job.job_conf.default_initializer_conf.empty_conf.SetInParent()
        scope = scope_mod.make_scope(self.option_.device_tag, ("0:0",))
        builder = jb.JobBuilder(job, scope, self._session)
        self._building = Building(job_name, signature, builder, source or f"job {shown(job_name, quote=True)}")
        try:
            yield self
        finally:
            self._building = None

    def compile(self, op_list):
        """Add every op of ``op_list`` to the open job (checked and inferred again), then compile it.

        Raises:
            JobBuildError: an op fails its checks (unknown op type, bad attr, shape, dtype,
                missing input blob...): the message names the op and the job's source.
            ValueError: a signature names a blob the ops do not produce, or an
                interface name collides with an op name.
        """
        self._check_status(self.SessionStatus.OPEN, what="compile")
        if self._building is None:
            raise RuntimeError("InferenceSession.compile() must be called inside `with sess.open(job_name):`")
        served = build_served_job(self._building, list(op_list), self.option_.device_tag, self._session,
                        self.option_.compile_mode)
        self._jobs[served.name] = served
        return self

    def load_job(self, job, signature=None, batch_size=None):
        """Compile a ``Job`` (proto, or a file written by ``flow.experimental.save_job``).

        The job keeps its name; its ``job_conf.signature`` is used when set and
        ``signature`` is None. Call ``set_checkpoint_path`` (if it has variables) and
        ``launch()`` afterwards.
        """
        source = "job"
        if not isinstance(job, job_pb2.Job):
            from graphfront.framework.job_io import load_job
            source = f"job file {os.fspath(job)!r}"
            job = load_job(job)
        if signature is None and job.job_conf.HasField("signature"):
            signature = job.job_conf.signature
        name = job.job_conf.job_name
        with self.open(name, signature, batch_size, source=f"{source} {shown(name, quote=True)}"):
            b = self._building.builder
            if job.job_conf.HasField("default_data_type"):
                b.job.job_conf.default_data_type = job.job_conf.default_data_type
            self.compile(job.net.op)
        return self

    def load_saved_model(self, saved_model_dir: str | os.PathLike,
                         model_version: int | ModelVersionPolicy = ModelVersionPolicy.LATEST,
                         saved_model_meta_file_basename: str = "saved_model", graph_name: str | None = None,
                         signature_name: str | None = None) -> InferenceSession:
        """Load a model written by ``flow.saved_model.ModelBuilder.Save``; call ``launch()`` next.

        Args:
            saved_model_dir: the ``save_path`` given to the ModelBuilder.
            model_version: an int version, or ``ModelVersionPolicy.LATEST`` (highest
                integer-named subdirectory).
            saved_model_meta_file_basename: reads ``<basename>.pb``, else ``<basename>.prototxt``.
            graph_name: the graph to load; default: the model's default graph.
            signature_name: the signature to use; default: the graph's default signature.
        Raises:
            FileNotFoundError: no such directory, version or meta file.
            SavedModelError: unparseable meta file, an invalid name (rules of
                :mod:`graphfront.framework.names`), a ``checkpoint_dir`` outside the
                version directory, unknown graph or signature.
            JobBuildError: an op of the graph fails its checks (names the op).
        """
        self._check_status(self.SessionStatus.OPEN, what="load_saved_model")
        root = expect_path(saved_model_dir, "InferenceSession.load_saved_model", "saved_model_dir")
        if not os.path.isdir(root):
            raise FileNotFoundError(f"saved model directory {root!r} does not exist")
        version_dir = os.path.join(root, str(pick_version(root, model_version)))
        model = read_saved_model(version_dir, saved_model_meta_file_basename)
        if graph_name is None:
            graph_name = model.default_graph_name or (sorted(model.graphs)[0] if len(model.graphs) == 1 else None)
            if graph_name is None:
                raise SavedModelError(f"saved model {version_dir!r} has no default graph; pass graph_name= one "
                                      f"of {sorted(model.graphs)}")
        if graph_name not in model.graphs:
            raise SavedModelError(f"saved model {version_dir!r} has no graph {shown(graph_name, quote=True)}; graphs: "
                                  f"{sorted(model.graphs)}")
        graph = model.graphs[graph_name]
        signature = None
        if signature_name is None and graph.HasField("default_signature_name"):
            signature_name = graph.default_signature_name
        if signature_name is not None:
            if signature_name not in graph.signatures:
                raise SavedModelError(f"graph {shown(graph_name, quote=True)} of saved model {version_dir!r} has no "
                                      f"signature "
                                      f"{shown(signature_name, quote=True)}; signatures: {sorted(graph.signatures)}")
            signature = graph.signatures[signature_name]
        self.set_checkpoint_path(checkpoint_dir(version_dir, model.checkpoint_dir))
        source = f"saved model {version_dir!r} graph {shown(graph_name, quote=True)}"
        with self.open(graph_name, signature, source=source):
            self.compile(graph.op_list)
        return self

    # ------------------------------------------------------------------ running
    def launch(self) -> InferenceSession:
        """Load every variable of the compiled jobs from the checkpoint path; status RUNNING.

        Raises:
            ValueError: no job compiled, or jobs have variables and no checkpoint path is set.
            FileNotFoundError / CheckpointError: the checkpoint is missing, incomplete,
                lacks a variable, or a variable's file is truncated or has another
                shape/dtype (each message names the variable).
        """
        from graphfront.checkpoint import stage_values
        from graphfront.framework import checkpoint_io
        from graphfront.framework.checkpoint_io import CheckpointError
        self._check_status(self.SessionStatus.OPEN, what="launch")
        if not self._jobs:
            raise ValueError("InferenceSession.launch(): no job is compiled; call load_saved_model() first")
        store = self._session.variables
        names = store.names()
        if names:
            if self.checkpoint_path_ is None:
                raise ValueError(f"InferenceSession.launch(): checkpoint path not set, and the jobs have "
                                 f"variables {sorted(names)}; call set_checkpoint_path(dir) (load_saved_model "
                                 "sets it)")
            ckpt = checkpoint_io.load_checkpoint(self.checkpoint_path_)
            if not isinstance(ckpt, dict):
                raise CheckpointError(f"checkpoint path {self.checkpoint_path_!r} is a single variable directory, "
                                      "not a checkpoint")
            missing = sorted(n for n in names if n not in ckpt)
            if missing:
                users = {n: sorted(j.name for j in self._jobs.values() if any(
                    op.name == n and jb.op_kind(op) == "variable_conf" for op in j.compiled.job.net.op))
                    for n in missing}
                detail = ", ".join(f"'{n}' (used by job {', '.join(users[n])})" for n in missing)
                raise CheckpointError(f"checkpoint {self.checkpoint_path_!r} lacks variable(s) {detail}; the "
                                      "served jobs cannot run without them")
            staged = stage_values(store, {n: ckpt[n] for n in names}, what="InferenceSession.launch")
            with self._session.lock:
                for name, arr in staged.items():
                    store.assign(name, arr)
        self._session.status = Session.RUNNING
        self.status_ = self.SessionStatus.RUNNING

    def run(self, job_name: str, **kwargs: np.ndarray) -> list:
        """Run a compiled job on numpy inputs.

        Args:
            job_name: a job compiled by ``load_saved_model`` / ``load_job`` / ``compile``.
            **kwargs: ``input_name=ndarray``, each of the shape and dtype the signature
                gives (``list_inputs(job_name)``, ``input_info``).

        Returns:
            list: one ndarray per output, in ``list_outputs(job_name)`` order, with the
            output blob's shape and dtype.

        Raises:
            ValueError: unknown job, an input absent, an unknown input name, or a value
                that is not an ndarray.
            FeedError: an ndarray of the wrong shape or dtype (names the input, expected
                and received).
        """
        served = self._jobs.get(job_name)
        if served is not None and self.status_ is self.SessionStatus.RUNNING:
            arrays = served.checked_arrays(kwargs)
            if arrays is not None:  # every input present, an ndarray of the expected shape and dtype
                outs = served.compiled.run_arrays(arrays)
                return outs if served.output_index is None else [outs[i] for i in served.output_index]
        # the slow path: find what is wrong and say so (or run a job with list inputs)
        self._check_status(self.SessionStatus.RUNNING, what="run")
        served = self._job(job_name)
        loc = user_frame()
        unknown = sorted(set(kwargs) - set(served.input_names))
        if unknown:
            raise FeedError(f"job '{served.name}' has no input(s) {unknown}; its inputs are "
                            f"{served.input_names}{format_location(loc)}")
        args = []
        for name in served.input_names:
            if name not in kwargs:
                raise FeedError(f'job \'{served.name}\': input "{name}" is absent; pass {name}=ndarray '
                                f"(inputs: {served.input_names}){format_location(loc)}")
            value = kwargs[name]
            if not isinstance(value, np.ndarray):
                raise FeedError(f"job '{served.name}': input \"{name}\" must be a numpy.ndarray, received "
                                f"{type(value).__name__}{format_location(loc)}")
            args.append([value] if served.placeholders[name].list_input else value)
        arrays = served.compiled.launch(args, {})
        return arrays if served.output_index is None else [arrays[i] for i in served.output_index]

    # ------------------------------------------------------------------ introspection
    def list_jobs(self):
        return list(self._jobs)

    def list_inputs(self, job_name=None):
        """Input names of ``job_name`` (default: the first loaded job), in feed order."""
        return tuple(self._job(job_name).input_names)

    def list_outputs(self, job_name=None):
        """Output names of ``job_name`` (default: the first loaded job), in ``run()`` result order."""
        return tuple(self._job(job_name).output_names)

    def input_info(self, input_name, job_name=None):
        """``dict(shape=tuple, dtype=flow dtype)`` of an input."""
        served = self._job(job_name)
        if input_name not in served.placeholders:
            raise ArgumentError(f"job '{served.name}' has no input '{input_name}'; inputs: {served.input_names}")
        return served.input_info(input_name)

    def output_info(self, output_name, job_name=None):
        """``dict(shape=tuple, dtype=flow dtype)`` of an output."""
        served = self._job(job_name)
        if output_name not in served.output_names:
            raise ArgumentError(f"job '{served.name}' has no output '{output_name}'; outputs: {served.output_names}")
        return served.output_info(output_name)

    def compile_mode(self, job_name=None) -> str:
        """The lowering that runs ``job_name`` (default: the first loaded job): ``"plan"``,
        ``"native"``, ``"xla"`` or ``"onnxruntime"`` (what ``SessionOption.compile_mode`` "auto" chose)."""
        return self._job(job_name).compiled.compile_mode

    def job(self, job_name=None) -> CompiledJob:
        """The CompiledJob of ``job_name`` (``.user_job``, ``.job``, ``.plan.source``)."""
        return self._job(job_name).compiled

    def print_job_set(self):
        for served in self._jobs.values():
            print(text_format.MessageToString(served.compiled.job))

    # ------------------------------------------------------------------ closing
    def close(self):
        """Drop the jobs and variables; status CLOSED (idempotent)."""
        if self.status_ is self.SessionStatus.CLOSED:
            return
        self._jobs.clear()
        self._session.close()
        self._session.variables.tensors.clear()
        self._session.variables.confs.clear()
        self.status_ = self.SessionStatus.CLOSED

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
