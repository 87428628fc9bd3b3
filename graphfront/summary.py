"""``flow.summary``: TensorBoard summaries written from jobs (OneFlow v0.6.0
``python/oneflow/compatible/single_client/ops/summary_ops.py``).

::

    @flow.global_function()
    def create_job() -> None:
        flow.summary.create_summary_writer("logs")

    @flow.global_function()
    def scalar_job(value: tp.Numpy.Placeholder((1,), dtype=flow.float),
                   step: tp.Numpy.Placeholder((1,), dtype=flow.int64),
                   tag: tp.Numpy.Placeholder((4,), dtype=flow.int8)) -> None:
        flow.summary.scalar(value, step, tag)

    create_job()
    scalar_job(np.array([0.5], np.float32), np.array([1]), np.frombuffer(b"loss", np.int8))

The event files are TensorBoard's (``events.out.tfevents.*``, written by TensorBoard's
writer through ``torch.utils.tensorboard``; ``pip install tensorboard``);
``flush_summary_writer()`` in a job, or :func:`close_summary_writer`, puts them on disk.

Host-side helpers, as OneFlow's ``summary_hparams`` / ``summary_projector`` /
``summary_graph``: :func:`text` and :func:`hparams` build ``Summary`` protos (TensorBoard's
text and hparams plugins' formats) that ``flow.summary.pb`` writes, fed as
``np.frombuffer(str(summary).encode(), np.int8)``; :class:`Projector` writes embeddings for
TensorBoard's projector; :class:`Graph` writes the session's jobs for its Graphs tab.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from graphfront import scope as _scope
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.framework.session import default_session
from graphfront.ops.builder import build_op, unique_str
from graphfront.ops.summary_ops import close_writer as close_summary_writer

__all__ = ["Graph", "HParam", "Hparam", "IntegerRange", "Metric", "Projector", "RealRange", "ValueSet",
           "close_summary_writer", "create_summary_writer", "flush_summary_writer", "histogram", "hparams", "image",
           "pb", "scalar", "text"]


def _blobs(fn, **blobs):
    for arg, x in blobs.items():
        if not isinstance(x, BlobDesc):
            raise JobBuildError(f"flow.summary.{fn}: argument '{arg}' expects a blob, received "
                                f"{type(x).__name__} {x!r}" + format_location(user_frame()))
    return blobs


def _build(op_type, inputs, attrs, name, prefix):
    with _scope.placement("cpu", "0:0"):
        build_op(op_type, inputs, attrs, outputs=(), name=name or unique_str(prefix))


def create_summary_writer(logdir, name=None):
    """Open the process's summary writer on directory ``logdir`` when the job runs
    (OneFlow: ``create_summary_writer`` op)."""
    _build("create_summary_writer", None, {"logdir": str(logdir)}, name, "CreateWriter_")


def flush_summary_writer(name=None):
    """Flush the summary writer's events to disk when the job runs."""
    _build("flush_summary_writer", None, None, name, "FlushWriter_")


def scalar(value, step, tag, name=None):
    """Write the first element of ``value`` as scalar ``tag`` (int8 blob of its bytes) at
    ``step`` (int64 blob)."""
    _build("summary_write_scalar", _blobs("scalar", **{"in": value, "step": step, "tag": tag}), None, name,
           "WriteScalar_")


def histogram(value, step, tag, name=None):
    """Write the values of ``value`` as histogram ``tag`` at ``step``."""
    _build("summary_write_histogram", _blobs("histogram", **{"in": value, "step": step, "tag": tag}), None, name,
           "WriteHistogram_")


def image(value, step=None, tag=None, name=None):
    """Write ``value``, (N, H, W, C) uint8 images, as image summary ``tag`` at ``step``."""
    _build("summary_write_image", _blobs("image", **{"in": value, "step": step, "tag": tag}), None, name,
           "WriteImage_")


def pb(value, step=None, name=None):
    """Write a serialized ``Summary`` proto (int8 blob of its bytes) at ``step``."""
    _build("summary_write_pb", _blobs("pb", **{"in": value, "step": step}), None, name, "WritePb_")


def text(text, tag=None):
    """A ``Summary`` holding the strings of ``text`` as one text summary (TensorBoard's text
    plugin: a 1-D ``DT_STRING`` tensor) under ``tag`` (default ``"text"``).

    Args:
        text: a non-empty list or tuple of ``str``.
        tag: the summary's tag; anything but a ``str`` means ``"text"``.

    Returns:
        ``tensorboard.compat.proto.summary_pb2.Summary``.

    Raises:
        TypeError: ``text`` is not a non-empty list/tuple of ``str``.
    """
    from tensorboard.plugins.text.summary_v2 import text_pb
    if not (isinstance(text, (list, tuple)) and text and all(isinstance(t, str) for t in text)):
        raise TypeError(f"flow.summary.text: argument 'text' expects a non-empty list of str, received {text!r}")
    return text_pb(tag if isinstance(tag, str) else "text", np.array(text, dtype=object))


class IntegerRange:
    """The ints ``min_value`` .. ``max_value`` (both included): an :class:`HParam`'s domain.

    Raises:
        TypeError: a bound is not an ``int``.  ValueError: ``min_value > max_value``.
    """

    def __init__(self, min_value, max_value):
        self.min_value, self.max_value = _checked_range("IntegerRange", int, min_value, max_value)


class RealRange:
    """The reals ``min_value`` .. ``max_value``: an :class:`HParam`'s domain.

    Raises:
        TypeError: a bound is not a ``float``.  ValueError: ``min_value > max_value``.
    """

    def __init__(self, min_value, max_value):
        self.min_value, self.max_value = _checked_range("RealRange", float, min_value, max_value)


def _checked_range(cls, kind, min_value, max_value):
    for arg, v in (("min_value", min_value), ("max_value", max_value)):
        if not isinstance(v, kind) or isinstance(v, bool):
            raise TypeError(f"flow.summary.{cls}: argument '{arg}' expects {kind.__name__}, received "
                            f"{type(v).__name__} {v!r}")
    if min_value > max_value:
        raise ValueError(f"flow.summary.{cls}: min_value {min_value!r} is greater than max_value {max_value!r}")
    return min_value, max_value


class ValueSet:
    """A finite set of values, all of one type among ``int, float, bool, str``: an
    :class:`HParam`'s domain. ``values`` are kept sorted.

    Raises:
        ValueError: ``dtype`` (default: the first value's type) is not one of those.
        TypeError: a value is not of type ``dtype``.
    """

    def __init__(self, values, dtype=None):
        values = list(values)
        dtype = dtype if dtype is not None or not values else type(values[0])
        if dtype not in (int, float, bool, str):
            raise ValueError(f"flow.summary.ValueSet: dtype must be int, float, bool or str, received {dtype!r}")
        for v in values:
            if not isinstance(v, dtype):
                raise TypeError(f"flow.summary.ValueSet: value {v!r} is not of type {dtype.__name__}")
        self.dtype, self.values = dtype, sorted(values)


class HParam:
    """A hyperparameter: ``name`` and its optional domain, an :class:`IntegerRange`,
    :class:`RealRange` or :class:`ValueSet` (a key of the dict :func:`hparams` takes).

    Raises:
        ValueError: ``dtype`` is not one of those domains nor ``None``.
    """

    def __init__(self, name, dtype=None):
        if not isinstance(dtype, (IntegerRange, RealRange, ValueSet, type(None))):
            raise ValueError(f"flow.summary.HParam '{name}': dtype must be an IntegerRange, RealRange or ValueSet, "
                             f"received {dtype!r}")
        self.name, self.dtype = name, dtype


Hparam = HParam


class Metric:
    """A metric: ``name`` and its value type, ``int`` or ``float`` (a key of the dict
    :func:`hparams` takes; its value is written as the scalar ``name``).

    Raises:
        ValueError: ``dtype`` is not ``int`` nor ``float``.
    """

    def __init__(self, name, dtype=None):
        dtype = float if dtype is None else dtype
        if dtype not in (int, float):
            raise ValueError(f"flow.summary.Metric '{name}': dtype must be int or float, received {dtype!r}")
        self.name, self.dtype = name, dtype


def hparams(hparams):
    """A ``Summary`` recording one training session's hyperparameters for TensorBoard's
    HParams plugin: the experiment (each hyperparameter's domain, each metric's tag) as
    ``_hparams_/experiment``, the session's values as ``_hparams_/session_start_info``
    (TensorBoard's own ``hparams_config_pb`` / ``hparams_pb``), and each :class:`Metric`'s
    value as a scalar named after it.

    Args:
        hparams: dict from :class:`HParam`, :class:`Metric` or ``str`` (a hyperparameter's
            name) to its value: ``bool``, ``int``, ``float`` or ``str`` (numpy scalars
            accepted); a metric's value is an ``int`` or ``float``.

    Returns:
        ``tensorboard.compat.proto.summary_pb2.Summary``.

    Raises:
        ValueError: two keys share a name.
        TypeError: a value of an unsupported type.
    """
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import summary_v2 as hp

    values, metrics, infos = {}, {}, []
    for key, value in hparams.items():
        name = key if isinstance(key, str) else key.name
        if name in values or name in metrics:
            raise ValueError(f"flow.summary.hparams: the name '{name}' appears twice")
        value = value.item() if isinstance(value, np.generic) else value
        if isinstance(key, Metric):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"flow.summary.hparams: metric '{name}' expects an int or float, received {value!r}")
            metrics[name] = float(value)
            continue
        if not isinstance(value, (bool, int, float, str)):
            raise TypeError(f"flow.summary.hparams: hyperparameter '{name}' expects a bool, int, float or str, "
                            f"received {type(value).__name__} {value!r}")
        values[name] = value
        infos.append(hp.HParam(name, _tensorboard_domain(hp, key.dtype if isinstance(key, HParam) else None)))
    summary = Summary()
    summary.value.extend(hp.hparams_config_pb(infos, [hp.Metric(m) for m in metrics]).value)
    summary.value.extend(hp.hparams_pb(values).value)
    summary.value.extend(Summary.Value(tag=m, simple_value=v) for m, v in metrics.items())
    return summary


def _tensorboard_domain(hp, domain):
    if isinstance(domain, IntegerRange):
        return hp.IntInterval(domain.min_value, domain.max_value)
    if isinstance(domain, RealRange):
        return hp.RealInterval(domain.min_value, domain.max_value)
    if isinstance(domain, ValueSet):
        return hp.Discrete(domain.values, dtype=domain.dtype)
    return None


class Projector:
    """Embeddings for TensorBoard's projector (OneFlow's ``Projector``, which wrote its own
    ``SummaryProjector`` proto files, writes here what TensorBoard's projector plugin reads).

    Each :meth:`embedding_projector` / :meth:`exception_projector` call writes, under
    ``<logdir>/projector/<tag>/``, ``tensors.tsv`` (``value`` as ``value.shape[0]`` rows),
    ``metadata.tsv`` (``label``, one line per row) and ``sprite.png`` (image samples ``x``),
    and lists the embedding named ``tag`` in ``<logdir>/projector_config.pbtxt``
    (TensorBoard's ``ProjectorConfig``), so ``tensorboard --logdir <logdir>`` shows it. A
    later call with the same tag replaces it (OneFlow rewrote its file on each call too).

    Raises:
        ValueError: ``logdir`` is ``None``.
    """

    def __init__(self, logdir=None):
        if logdir is None:
            raise ValueError("flow.summary.Projector: argument 'logdir' must name a directory, received None")
        self.root = str(logdir)
        self.logdir = os.path.join(self.root, "projector")
        os.makedirs(self.logdir, exist_ok=True)
        self.config_filename = os.path.join(self.root, "projector_config.pbtxt")
        self.embedding_filename = self.exception_filename = None

    def create_embedding_projector(self):
        """Enable :meth:`embedding_projector`. Raises OSError when called twice."""
        if self.embedding_filename is not None:
            raise OSError("flow.summary.Projector: create only one embedding projector")
        self.embedding_filename = self.config_filename

    def create_exception_projector(self):
        """Enable :meth:`exception_projector`. Raises OSError when called twice."""
        if self.exception_filename is not None:
            raise OSError("flow.summary.Projector: create only one exception projector")
        self.exception_filename = self.config_filename

    def embedding_projector(self, value=None, label=None, tag=None, step=None, sample_name=None, sample_type=None,
                            x=None):
        """Write ``value`` (array, N rows) as embedding ``tag`` (default
        ``"embedding_projector"``), ``label`` (N labels) as its metadata and, where
        ``sample_type`` is ``"image"``, ``x`` ((N, H, W) or (N, H, W, C) uint8, C in 1, 3, 4)
        as its sprite. ``step`` and ``sample_name`` are accepted as OneFlow's and not written.
        A ``label`` or ``x`` whose count is not N is left out, with a warning.

        Raises:
            RuntimeError: :meth:`create_embedding_projector` was not called.
            NotImplementedError: ``sample_type`` is not image, audio or text.
        """
        if self.embedding_filename is None:
            raise RuntimeError("flow.summary.Projector: call create_embedding_projector() before embedding_projector()")
        self._write(tag or "embedding_projector", value, label, sample_type, x)

    def exception_projector(self, value=None, tag=None, step=None, sample_name=None, sample_type=None, x=None):
        """As :meth:`embedding_projector` without labels, for embedding ``tag`` (default
        ``"exception_projector"``).

        Raises:
            RuntimeError: :meth:`create_exception_projector` was not called.
        """
        if self.exception_filename is None:
            raise RuntimeError("flow.summary.Projector: call create_exception_projector() before "
                               "exception_projector()")
        self._write(tag or "exception_projector", value, None, sample_type, x)

    def _write(self, tag, value, label, sample_type, x):
        from google.protobuf import text_format
        from tensorboard.plugins.projector import ProjectorConfig

        kind = str(sample_type).lower() if sample_type is not None else None
        if kind not in (None, "image", "audio", "text"):
            raise NotImplementedError(f"flow.summary.Projector: sample_type must be image, audio or text, "
                                      f"received {sample_type!r}")
        value = np.asarray(value)
        if value.ndim == 0:
            raise ValueError(f"flow.summary.Projector '{tag}': argument 'value' expects an array with rows, "
                             "received a scalar")
        rows = value.reshape(value.shape[0], -1)
        folder = os.path.join(self.logdir, tag)
        os.makedirs(folder, exist_ok=True)
        rel = os.path.relpath(folder, self.root)
        np.savetxt(os.path.join(folder, "tensors.tsv"), rows.astype(np.float64), fmt="%.9g", delimiter="\t")
        config = ProjectorConfig()
        if os.path.exists(self.config_filename):
            with open(self.config_filename, encoding="utf-8") as f:
                text_format.Parse(f.read(), config)
        kept = [e for e in config.embeddings if e.tensor_name != tag]
        del config.embeddings[:]
        config.embeddings.extend(kept)
        embedding = config.embeddings.add(tensor_name=tag, tensor_path=os.path.join(rel, "tensors.tsv"))
        embedding.tensor_shape.extend(rows.shape)
        if label is not None and self._count_fits(tag, "label", np.asarray(label).reshape(-1), len(rows)):
            with open(os.path.join(folder, "metadata.tsv"), "w", encoding="utf-8") as f:
                f.writelines(f"{v}\n" for v in np.asarray(label).reshape(-1))
            embedding.metadata_path = os.path.join(rel, "metadata.tsv")
        if x is not None and kind == "image" and self._count_fits(tag, "x", np.asarray(x), len(rows)):
            height, width = _write_sprite(np.asarray(x), os.path.join(folder, "sprite.png"))
            embedding.sprite.image_path = os.path.join(rel, "sprite.png")
            embedding.sprite.single_image_dim.extend([width, height])
        elif x is not None and kind in ("audio", "text"):
            warnings.warn(f"flow.summary.Projector '{tag}': {kind} samples are not written (TensorBoard's projector "
                          "shows image sprites only)", stacklevel=3)
        with open(self.config_filename, "w", encoding="utf-8") as f:
            f.write(text_format.MessageToString(config))

    @staticmethod
    def _count_fits(tag, arg, array, rows):
        if len(array) == rows:
            return True
        warnings.warn(f"flow.summary.Projector '{tag}': argument '{arg}' has {len(array)} entries for {rows} rows "
                      "of 'value'; it is not written", stacklevel=4)
        return False


def _write_sprite(images, path):
    """Tile (N, H, W[, C]) uint8 ``images`` row-major on a square grid into PNG ``path``;
    returns (H, W)."""
    from PIL import Image

    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[3] not in (1, 3, 4):
        raise ValueError(f"flow.summary.Projector: image samples 'x' must be (N, H, W) or (N, H, W, C) with C in "
                         f"(1, 3, 4), received shape {images.shape}")
    n, h, w, c = images.shape
    side = int(np.ceil(np.sqrt(n)))
    grid = np.zeros((side * h, side * w, c), np.uint8)
    for i, im in enumerate(images.astype(np.uint8)):
        grid[(i // side) * h:(i // side + 1) * h, (i % side) * w:(i % side + 1) * w] = im
    Image.fromarray(grid[..., 0] if c == 1 else grid).save(path)
    return h, w


class Graph:
    """The session's compiled jobs for TensorBoard's Graphs tab (OneFlow's ``Graph`` wrote
    its own ``structure_graph.json``; this writes TensorBoard's ``GraphDef``).

    Raises:
        ValueError: ``logdir`` is ``None``.
    """

    def __init__(self, logdir=None):
        if logdir is None:
            raise ValueError("flow.summary.Graph: argument 'logdir' must name a directory, received None")
        self.logdir = os.path.join(str(logdir), "graph")
        os.makedirs(self.logdir, exist_ok=True)
        self.structure_graph_filename = None

    def write_structure_graph(self):
        """Write every job the default session compiled so far as one ``GraphDef``, each
        job's nodes under its name (``<job>/<pass>/<op>``), into a new event file under
        ``<logdir>/graph``; ``structure_graph_filename`` is that file.

        Raises:
            OSError: called twice.
        """
        from graphfront.framework.tensorboard_graph import write_jobs_graph
        if self.structure_graph_filename is not None:
            raise OSError("flow.summary.Graph: write only one structure graph")
        jobs = {name: compiled.job for name, compiled in sorted(default_session().jobs.items())}
        self.structure_graph_filename = write_jobs_graph(jobs, self.logdir)
