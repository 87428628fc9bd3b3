"""``flow.deprecated``: OneFlow's deprecated single-client helpers.

* ``variable_scope(name)``: the old spelling of ``flow.scope.namespace(name)`` (warns with a
  ``DeprecationWarning``, then prefixes the names of ops and variables built inside with
  ``name + "-"``);
* ``delete_worker_by_bootstrap(ssh_port=22)`` / ``delete_worker_of_multi_process(run_dir)``:
  OneFlow removed the run directories of the worker processes it had copied to other
  machines. graphfront starts no such workers (its local workers are its own processes), so
  there is nothing to remove: both return ``None`` and change nothing.
* ``initializer_util.truncated_normal_initializer(stddev)``.

(OneFlow v0.6.0 ``python/oneflow/compatible/single_client/deprecated/``.)
"""
from __future__ import annotations

import types
import warnings

from graphfront import scope as _scope
from graphfront.initializers import truncated_normal_initializer as _truncated_normal_initializer

__all__ = ["delete_worker_by_bootstrap", "delete_worker_of_multi_process", "initializer_util", "variable_scope"]


def variable_scope(name):
    """Deprecated alias of ``flow.scope.namespace(name)`` (a context manager).

    Raises:
        ValueError: ``name`` is not a non-empty str (as ``flow.scope.namespace``).
    """
    warnings.warn("flow.deprecated.variable_scope (and flow.experimental.name_scope) is deprecated, use "
                  "flow.scope.namespace instead",
                  DeprecationWarning, stacklevel=2)
    return _scope.namespace(name)


def delete_worker_by_bootstrap(ssh_port=22) -> None:
    """Nothing to delete: graphfront copies no worker to other machines (returns ``None``)."""
    return None


def delete_worker_of_multi_process(run_dir) -> None:
    """Nothing to delete: graphfront writes no worker run directory (returns ``None``)."""
    return None


def _deprecated_truncated_normal_initializer(stddev=1.0):
    """Truncated Normal(0, ``stddev``) (the deprecated spelling takes ``stddev`` first)."""
    return _truncated_normal_initializer(mean=0.0, stddev=stddev)


_deprecated_truncated_normal_initializer.__name__ = "truncated_normal_initializer"
initializer_util = types.SimpleNamespace(truncated_normal_initializer=_deprecated_truncated_normal_initializer)
initializer_util.__doc__ = "``flow.deprecated.initializer_util``: ``truncated_normal_initializer(stddev)``."
