"""``flow.deprecated``: OneFlow's deprecated single-client helpers.

* ``variable_scope(name)``: the old spelling of ``flow.scope.namespace(name)`` (warns with a
  ``DeprecationWarning``, then prefixes the names of ops and variables built inside with
  ``name + "-"``);
* ``delete_worker_by_bootstrap(ssh_port=22)`` / ``delete_worker_of_multi_process(run_dir)``:
  OneFlow removed the run directories of the worker processes it had copied to other
  machines. graphfront starts no such workers (its local workers are its own processes), so
  there is nothing to remove: both return ``None`` and change nothing.
* ``initializer_util.truncated_normal_initializer(stddev)``.

* ``nn.Module``: OneFlow's user-op module base class: a subclass defines ``forward``;
  calling the module runs ``forward`` and then counts the call in ``call_seq_no`` (0 during
  the first call), which subclasses use to name the op each call builds. Built with
  ``flow.find_or_create_module`` and ``flow.consistent_user_op_module_builder(op_type)``.

(OneFlow v0.6.0 ``python/oneflow/compatible/single_client/deprecated/``.)
"""
from __future__ import annotations

import types
import warnings

from graphfront import scope as _scope
from graphfront.initializers import truncated_normal_initializer as _truncated_normal_initializer
from graphfront.ops.builder import UserOpModuleBuilder

__all__ = ["consistent_user_op_module_builder", "delete_worker_by_bootstrap", "delete_worker_of_multi_process",
           "initializer_util", "nn", "user_op_module_builder", "variable_scope"]


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


_module_ids = iter(range(1 << 62))


class Module:
    """OneFlow's user-op module (``flow.deprecated.nn.Module``): subclasses define
    ``forward(*args)``; ``module(*args)`` returns ``forward(*args)`` and then adds one to
    ``call_seq_no`` (so it is 0 while the first call runs)."""

    def __init__(self, name=None):
        self.module_name_ = name if name is not None else f"Module_{next(_module_ids)}"
        self.call_seq_no_ = 0

    @property
    def module_name(self) -> str:
        return self.module_name_

    @property
    def call_seq_no(self) -> int:
        return self.call_seq_no_

    def __call__(self, *args):
        ret = self.forward(*args)
        self.call_seq_no_ += 1
        return ret

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")


nn = types.SimpleNamespace(Module=Module)
nn.__doc__ = "``flow.deprecated.nn``: ``Module``, the base class of OneFlow's user-op modules."

def user_op_module_builder(op_type_name) -> UserOpModuleBuilder:
    """A builder of ``op_type_name`` ops for a module (see :class:`graphfront.ops.builder.UserOpModuleBuilder`),
    named by the namespace prefix + ``op_type_name`` until ``OpName`` renames it."""
    return UserOpModuleBuilder(op_type_name)


consistent_user_op_module_builder = user_op_module_builder  # every graphfront op is consistent
