"""``flow.watch`` and ``flow.watch_diff``: callbacks on blob values and gradients;
``flow.watch_scope``: both on every blob made inside a ``with`` block."""
from __future__ import annotations

import contextlib
import inspect
import uuid

from graphfront import typing as tp
from graphfront.core import op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as jb
from graphfront.framework.annotations import TypingCheck
from graphfront.framework.blob_desc import WATCH_SCOPES, BlobDesc
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.ops.builder import unique_str


def _handler(handler_or_prompt, blob):
    if handler_or_prompt is None or isinstance(handler_or_prompt, str):
        prompt = handler_or_prompt or blob.lbn

        def show(value):
            print(prompt, value)
        return show
    if not callable(handler_or_prompt):
        raise JobBuildError(f"flow.watch: handler must be callable or a prompt string, received "
                            f"{handler_or_prompt!r}{format_location(user_frame())}")
    params = list(inspect.signature(handler_or_prompt).parameters.values())
    name = getattr(handler_or_prompt, "__name__", repr(handler_or_prompt))  # (a functools.partial has none)
    if len(params) != 1:
        raise JobBuildError(f"flow.watch: handler must take exactly one parameter, "
                            f"{name} takes {len(params)}{format_location(user_frame())}")
    ann = params[0].annotation
    if ann is inspect.Parameter.empty and TypingCheck.enabled:
        raise JobBuildError(f"flow.watch: the parameter of handler {name} is not annotated; "
                            f"with flow.experimental.enable_typing_check() it needs tp.Numpy or tp.ListNumpy"
                            f"{format_location(user_frame())}")
    if ann is tp.Numpy:
        return handler_or_prompt
    if ann is tp.ListNumpy:
        return lambda value: handler_or_prompt([value])
    return lambda value: handler_or_prompt(tp.LocalBlob(value))


def _register(blob, handler_or_prompt):
    if not isinstance(blob, BlobDesc):
        raise JobBuildError(f"flow.watch expects a blob, received {type(blob).__name__}{format_location(user_frame())}")
    builder = jb.current()
    fn = _handler(handler_or_prompt, blob)
    key = uuid.uuid4().hex
    builder.session.watchers[key] = lambda t: fn(_dt.tensor_to_numpy(t))
    return builder, key


def watch(blob_watched, handler_or_prompt=None):
    """Call ``handler(value)`` with the blob's value on every run of the job.

    The handler takes one parameter: annotated ``tp.Numpy`` (an ndarray),
    ``tp.ListNumpy`` (a one-element list) or unannotated (a LocalBlob); a string
    prints the value after that prompt.
    """
    builder, key = _register(blob_watched, handler_or_prompt)
    conf = op_conf_pb2.OperatorConf(name=unique_str("ForeignWatch_"), device_tag="cpu")
    setattr(conf.foreign_watch_conf, "in", blob_watched.lbn)
    conf.foreign_watch_conf.handler_uuid = key
    builder.add_op(conf)


def watch_diff(blob_watched, handler_or_prompt=None):
    """Call ``handler(grad)`` with the gradient of the blob (train jobs) on every run.

    The gradient is the one autograd computes for the blob, before the division by the
    loss element count that variable gradients get. As in OneFlow, the job must be a train
    job when its body ends: ``type="train"``, or an ``optimizer.minimize`` call anywhere
    in the body (before or after this one) makes it one; otherwise building the job
    raises JobBuildError at this line.
    """
    builder, key = _register(blob_watched, handler_or_prompt)
    builder.diff_watch_locations[key] = user_frame()
    info = builder.job.helper.lbi_diff_watcher_info.job_name2lbi_and_watcher_uuids[builder.job_name]
    pair = info.lbi_and_uuid_pair.add()
    pair.lbi.CopyFrom(blob_watched.lbi)
    pair.watcher_uuid = key


class _WatchScope:
    """One open :func:`watch_scope`: watches each blob made inside it once (by lbn)."""

    def __init__(self, blob_watcher, diff_blob_watcher):
        for arg, value in (("blob_watcher", blob_watcher), ("diff_blob_watcher", diff_blob_watcher)):
            if value is not None and not (isinstance(value, dict) or callable(value)):
                raise JobBuildError(f"flow.watch_scope: {arg} must be a dict or a callable, received "
                                    f"{type(value).__name__}{format_location(user_frame())}")
        self.blob_watcher = blob_watcher
        self.diff_blob_watcher = diff_blob_watcher
        self.watched = set()

    def watch_once(self, blob):
        if blob.lbn in self.watched or not jb.is_building():
            return
        self.watched.add(blob.lbn)
        if self.blob_watcher is not None:
            watch(blob, _scope_handler(self.blob_watcher, blob))
        if self.diff_blob_watcher is not None:
            watch_diff(blob, _scope_handler(self.diff_blob_watcher, blob))


def _scope_handler(storage_or_func, blob_def):
    if isinstance(storage_or_func, dict):
        def store(blob):
            storage_or_func[blob_def.unique_name] = dict(blob=blob, blob_def=blob_def)
        return store

    def call(blob):
        storage_or_func(blob, blob_def)
    return call


@contextlib.contextmanager
def watch_scope(blob_watcher=None, diff_blob_watcher=None):
    """Watch every blob made inside the ``with`` block (OneFlow <= 0.5
    ``oneflow/python/framework/watch_scope_util.py``, ``flow.watch_scope``).

    Each blob an op (or ``get_variable``) makes while the block is open is watched once:
    with :func:`watch` when ``blob_watcher`` is given, with :func:`watch_diff` (train jobs:
    its gradient) when ``diff_blob_watcher`` is given. A dict watcher is filled on every
    run with ``{blob.unique_name: {"blob": LocalBlob, "blob_def": the BlobDesc}}``; a
    callable is called as ``watcher(LocalBlob, blob_def)``. Scopes nest: each open one
    watches the blob.

    Raises:
        JobBuildError: a watcher is neither a dict nor a callable; or, as :func:`watch_diff`,
            ``diff_blob_watcher`` is given in a job that is not a train job.
    """
    scope = _WatchScope(blob_watcher, diff_blob_watcher)
    WATCH_SCOPES.append(scope)
    try:
        yield
    finally:
        WATCH_SCOPES.remove(scope)
