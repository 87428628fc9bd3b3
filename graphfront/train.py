"""``flow.train``: OneFlow's legacy checkpoint objects (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/check_point.py``).

``CheckPoint()`` is the deprecated object interface over :mod:`graphfront.checkpoint`
(its constructor raises a ``DeprecationWarning``, as OneFlow prints one):

* ``init()``: starts the default session; variables are initialized at start, so
  nothing else happens; in eager execution it does nothing (eager variables are
  created and initialized on their first use, OneFlow's ``eager_checkpoint_init``),
  so it may come before any job is defined;
* ``save(path)``: ``flow.checkpoint.save(path)``;
* ``load(path)``: ``flow.load_variables(flow.checkpoint.get(path))``; variables of
  the session that the checkpoint lacks are reported (see ``load_variables``).

``SimpleCheckPointManager(root_path, prefix="snapshot_")`` keeps time-stamped
snapshots ``<root_path>/<prefix>YYYYmmdd_HHMMSS_ffffff``.
"""
from __future__ import annotations

import datetime
import os
import warnings

from graphfront import checkpoint as _checkpoint
from graphfront.framework.checkpoint_io import SNAPSHOT_DONE

__all__ = ["CheckPoint", "SimpleCheckPointManager"]

_DEPRECATION = ("'flow.train.CheckPoint' is deprecated. Please use the new API:\n"
                "flow.train.CheckPoint().save(path) => flow.checkpoint.save(path)\n"
                "flow.train.CheckPoint().load(path) => flow.load_variables(flow.checkpoint.get(path))\n"
                "flow.train.CheckPoint().init() is not needed any more.")


class CheckPoint:
    """Deprecated checkpoint object: ``init()``, ``save(path)``, ``load(path)``."""

    def __init__(self):
        warnings.warn(_DEPRECATION, DeprecationWarning, stacklevel=2)

    def init(self):
        """Start (compile) the default session; its variables are initialized then.

        In eager execution (``flow.enable_eager_execution(True)``) nothing happens: the
        jobs are defined and run at call time, and their variables are initialized on
        first use, as OneFlow's ``eager_checkpoint_init`` (``framework/check_point.py``).

        Raises:
            RuntimeError: lazy mode and no ``@flow.global_function`` is defined yet.
        """
        _checkpoint._started_session()

    def save(self, path):
        """Save every variable of the default session to ``path`` (atomic)."""
        _checkpoint.save(path)

    def load(self, path, strict=False):
        """Load the checkpoint at ``path``; missing variables are warned about (error if ``strict``)."""
        return _checkpoint.load_variables(_checkpoint.get(path), strict=strict)


class SimpleCheckPointManager:
    """Time-stamped snapshots under ``root_path``.

    Args:
        root_path: directory holding the snapshots (created if missing; a file there
            is a ValueError).
        prefix: name prefix of snapshot directories.
    """

    def __init__(self, root_path, prefix="snapshot_"):
        root_path = os.fspath(root_path)
        if os.path.lexists(root_path) and not os.path.isdir(root_path):
            raise ValueError(f"SimpleCheckPointManager: root_path {root_path!r} exists and is not a directory")
        os.makedirs(root_path, exist_ok=True)
        self._root_path = root_path
        self._prefix = prefix

    def list_checkpoints(self):
        """Sorted names of the complete snapshots (those with ``snapshot_done``)."""
        return sorted(n for n in os.listdir(self._root_path)
                      if n.startswith(self._prefix)
                      and os.path.isfile(os.path.join(self._root_path, n, SNAPSHOT_DONE)))

    def latest_checkpoint(self):
        """Name of the newest complete snapshot, or None."""
        names = self.list_checkpoints()
        return names[-1] if names else None

    def initialize_or_restore(self, strict=False):
        """Load the latest snapshot if there is one, else save the initial variables as one."""
        name = self.latest_checkpoint()
        if name is None:
            self.save()
        else:
            _checkpoint.load_variables(_checkpoint.get(self._GetSnapshotPath(name)), strict=strict)

    def save(self):
        """Save every variable of the default session as a new snapshot; returns its path."""
        now = datetime.datetime.now()
        while True:
            path = self._GetSnapshotPath(self._prefix + now.strftime("%Y%m%d_%H%M%S_%f"))
            if not os.path.lexists(path):
                break
            now += datetime.timedelta(microseconds=1)
        _checkpoint.save(path)
        return path

    def _GetSnapshotPath(self, name):  # noqa: N802 - OneFlow's name
        return os.path.join(self._root_path, name)
