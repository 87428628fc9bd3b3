"""``flow.unittest``: the test helpers of OneFlow's single-client API.

``flow.unittest.TestCase`` is a ``unittest.TestCase`` whose ``setUp`` calls
``flow.clear_default_session()``, so every test builds its jobs in a fresh session, and
turns eager execution on when ``ONEFLOW_TEST_ENABLE_EAGER=1`` (the typing check when
``ONEFLOW_TEST_ENABLE_TYPING_CHECK=1``).
``flow.unittest.skip_unless_<N>n<D>d()`` skips a test unless the environment has N
nodes of D devices each (``ONEFLOW_TEST_NODE_LIST`` / ``ONEFLOW_TEST_DEVICE_NUM``, one
node of one device when unset, so only the
``1n1d`` tests run by default). ``flow.unittest.env`` reads the same variables
(OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/unittest.py``).

Importing this module registers OneFlow's framework test ops (``ccrelu``, ``TestReshape``,
``TestSource``, ``TestMultiInput`` ...: :mod:`graphfront.ops.test_ops`), so OneFlow's own
framework tests that build them with ``flow.user_op_builder`` run unchanged.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types
import unittest as _unittest

from graphfront.ops import test_ops as _test_ops  # noqa: F401 - registers OneFlow's framework test ops
from graphfront.framework.session import clear_default_session
from graphfront.toplevel import enable_eager_execution, enable_typing_check

__all__ = ["TestCase", "env", "num_nodes_required", "register_test_cases", "skip_unless_1n1d", "skip_unless_1n2d",
           "skip_unless_1n4d", "skip_unless_2n1d", "skip_unless_2n2d", "skip_unless_2n4d"]


# ------------------------------------------------------------------ flow.unittest.env

def _device_num():
    """int(ONEFLOW_TEST_DEVICE_NUM), or 1 when unset."""
    return int(os.environ.get("ONEFLOW_TEST_DEVICE_NUM", "1"))


def _has_node_list():
    return "ONEFLOW_TEST_NODE_LIST" in os.environ


def _node_list():
    """ONEFLOW_TEST_NODE_LIST split on commas."""
    return os.environ["ONEFLOW_TEST_NODE_LIST"].split(",")


def _node_size():
    """len(node_list()), or 1 when ONEFLOW_TEST_NODE_LIST is unset."""
    return len(_node_list()) if _has_node_list() else 1


def _has_world_size():
    return os.environ.get("ONEFLOW_TEST_WORLD_SIZE", "").isdigit()


def _world_size():
    return int(os.environ["ONEFLOW_TEST_WORLD_SIZE"])


def _eager_execution_enabled():
    """Whether ONEFLOW_TEST_ENABLE_EAGER is "1" (tests then run their jobs eagerly)."""
    return os.environ.get("ONEFLOW_TEST_ENABLE_EAGER") == "1"


def _typing_check_enabled():
    return os.environ.get("ONEFLOW_TEST_ENABLE_TYPING_CHECK") == "1"


env = types.SimpleNamespace(
    device_num=_device_num, has_node_list=_has_node_list, node_list=_node_list, node_size=_node_size,
    has_world_size=_has_world_size, world_size=_world_size, eager_execution_enabled=_eager_execution_enabled,
    typing_check_enabled=_typing_check_enabled)
env.__doc__ = "``flow.unittest.env``: the test environment read from ONEFLOW_TEST_* variables."
for _name, _fn in vars(env).items():
    if callable(_fn):
        _fn.__name__ = _name


# ------------------------------------------------------------------ TestCase and skips

class TestCase(_unittest.TestCase):
    """``unittest.TestCase`` that starts every test with ``flow.clear_default_session()``,
    then ``flow.enable_eager_execution(flow.unittest.env.eager_execution_enabled())`` and
    ``flow.experimental.enable_typing_check(flow.unittest.env.typing_check_enabled())``:
    with ``ONEFLOW_TEST_ENABLE_EAGER=1`` the tests' jobs run eagerly, with
    ``ONEFLOW_TEST_ENABLE_TYPING_CHECK=1`` their global functions must be annotated.
    """

    def setUp(self):
        clear_default_session()
        enable_eager_execution(_eager_execution_enabled())
        enable_typing_check(_typing_check_enabled())


def _skip_unless(num_nodes, num_devices):
    def decorator():
        ok = _node_size() == num_nodes and _device_num() == num_devices
        return _unittest.skipIf(not ok, f"only runs with {num_nodes} node(s) of {num_devices} device(s); this "
                                        f"environment has {_node_size()} of {_device_num()}")
    decorator.__name__ = f"skip_unless_{num_nodes}n{num_devices}d"
    decorator.__doc__ = (f"Decorator skipping a test unless the environment has {num_nodes} node(s) of "
                         f"{num_devices} device(s) (ONEFLOW_TEST_NODE_LIST / ONEFLOW_TEST_DEVICE_NUM).")
    return decorator


skip_unless_1n1d = _skip_unless(1, 1)
skip_unless_1n2d = _skip_unless(1, 2)
skip_unless_1n4d = _skip_unless(1, 4)
skip_unless_2n1d = _skip_unless(2, 1)
skip_unless_2n2d = _skip_unless(2, 2)
skip_unless_2n4d = _skip_unless(2, 4)


def num_nodes_required(num_nodes):
    """Decorator tagging a test function with the number of nodes it needs
    (read by :func:`register_test_cases`)."""
    def decorator(fn):
        fn.__oneflow_test_num_nodes_required__ = num_nodes
        return fn
    return decorator


class _ClearDefaultSession:
    """Mixin whose ``setUp`` clears the default session (the default ``test_case_mixin``)."""

    def setUp(self):
        clear_default_session()


def register_test_cases(scope, directory, filter_by_num_nodes, base_class=_unittest.TestCase,
                        test_case_mixin=_ClearDefaultSession):
    """Turn the module-level ``test*(test_case)`` functions of the ``test*.py`` files in
    ``directory`` into TestCase classes registered in the dict ``scope``.

    Each kept function becomes the only test method of a class named after it (bases:
    ``test_case_mixin``, ``base_class``); ``filter_by_num_nodes(n)`` decides with the
    function's :func:`num_nodes_required` tag (1 when untagged) whether it is kept.
    """
    for file_name in sorted(os.listdir(directory)):
        if not (file_name.startswith("test") and file_name.endswith(".py")):
            continue
        module_name = file_name[:-3]
        spec = importlib.util.spec_from_file_location(module_name, os.path.join(directory, file_name))
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(module_name, module)
        spec.loader.exec_module(module)
        for name in dir(module):
            fn = getattr(module, name)
            if not (name.startswith("test") and callable(fn) and not isinstance(fn, type)):
                continue
            if not filter_by_num_nodes(getattr(fn, "__oneflow_test_num_nodes_required__", 1)):
                continue
            class_name = f"{module_name}_{name}"
            scope[class_name] = type(class_name, (test_case_mixin, base_class),
                                     {name: (lambda f: lambda self: f(self))(fn)})
