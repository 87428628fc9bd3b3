"""``flow.experimental.custom_op_module``: OneFlow's user-op modules, with Python kernels.

OneFlow keeps a user-op module in a folder ``<module_path>/<name>/`` of files named after it:
``<name>_py_api.py`` (the Python wrappers that build the ops with ``flow.user_op_builder``),
``<name>_cpp_def.cpp`` (the op definitions, compiled with g++), ``<name>_py_kernel.py``
(kernels written in Python with numpy) or ``<name>_cpp_kernel.cpp``. A program loads it with
``flow.experimental.custom_op_module(name, path).py_api().cpp_def().py_kernel().build_load()``
and calls the wrappers as ``module.api.<function>(...)``.

graphfront compiles no C++. The op definitions are declared in Python instead, either with
:meth:`CustomOpModule.declare_op` or in a file ``<name>_py_def.py`` beside the ``.cpp``, which
:meth:`CustomOpModule.cpp_def` loads and whose ``declare(module)`` function calls
``module.declare_op(...)``. The Python kernel module is OneFlow's unchanged: it defines
``forward(args)`` and ``backward(args)``, each receiving a tuple of numpy arrays (the op's
inputs in declared order) and returning an array (or a tuple of arrays, one per output).
Each declared op names the one of the two it runs (``kernel="forward"`` or ``"backward"``,
as OneFlow's ``PyForwardKernel`` / ``PyBackwardKernel``). :meth:`CustomOpModule.build_load`
registers the declared ops in graphfront's op registry (:mod:`graphfront.ops.registry`).

The module files are user code, like an import: they are executed (importlib) from the
given folder only. Files are read where they are; nothing is copied into the working
directory (OneFlow copied the folder there to compile it).
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch

from graphfront.ops import registry
from graphfront.ops.common import like

__all__ = ["CustomOpModule"]

_KERNEL_FUNCTIONS = ("forward", "backward")


class CustomOpModule:
    """One user-op module (OneFlow's ``CustomOpModule``).

    Args:
        op_module_name: the module's name: its folder and the prefix of its files.
        module_path: the folder holding ``<op_module_name>/``; default the working directory.

    Attributes:
        api: the loaded ``<name>_py_api.py`` module (after :meth:`py_api`), else None.

    Raises:
        FileNotFoundError: ``<module_path>/<op_module_name>/`` is not a folder.
    """

    def __init__(self, op_module_name, module_path=""):
        if not isinstance(op_module_name, str) or not op_module_name or os.sep in op_module_name:
            raise ValueError(f"flow.experimental.custom_op_module: op_module_name must be a folder name, received "
                             f"{op_module_name!r}")
        self.op_module_name = op_module_name
        self.folder = os.path.join(os.path.abspath(module_path or os.getcwd()), op_module_name)
        if not os.path.isdir(self.folder):
            raise FileNotFoundError(f"flow.experimental.custom_op_module: no folder {self.folder} (expected "
                                    f"<module_path>/{op_module_name}/ holding {op_module_name}_py_api.py ...)")
        self.api = None
        self.kernel_module = None
        self._declared = {}  # op type -> keyword arguments of registry.op, kernel function name
        self._defined_in_file = False  # (declared by <name>_py_def.py: another process loads it the same way)
        self.loaded_ops = []

    def _file(self, suffix) -> str:
        return os.path.join(self.folder, f"{self.op_module_name}_{suffix}")

    def _load(self, suffix, what):
        path = self._file(suffix)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"custom op module {self.op_module_name!r}: {what} {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"{self.op_module_name}_{suffix[:-3]}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def py_api(self) -> "CustomOpModule":
        """Load ``<name>_py_api.py`` as :attr:`api`; FileNotFoundError if it is missing."""
        self.api = self._load("py_api.py", "the Python API file")
        return self

    def cpp_def(self) -> "CustomOpModule":
        """Declare the module's ops from ``<name>_py_def.py`` (its ``declare(module)`` calls
        :meth:`declare_op`), graphfront's Python twin of OneFlow's ``<name>_cpp_def.cpp``.

        Raises:
            NotImplementedError: only the ``.cpp`` exists (graphfront compiles no C++).
            FileNotFoundError: neither file exists.
            TypeError: the file defines no ``declare(module)`` function.
        """
        if not os.path.isfile(self._file("py_def.py")):
            how = (f"declare the ops in Python in {self._file('py_def.py')} (a function declare(module) calling "
                   f"module.declare_op(...)) or with .declare_op(...)")
            if os.path.isfile(self._file("cpp_def.cpp")):
                raise NotImplementedError(
                    f"custom op module {self.op_module_name!r}: graphfront does not compile C++ op definitions "
                    f"({self._file('cpp_def.cpp')}); {how}")
            raise FileNotFoundError(f"custom op module {self.op_module_name!r}: no op definitions: neither "
                                    f"{self._file('py_def.py')} nor OneFlow's C++ {self._file('cpp_def.cpp')} "
                                    f"exists; {how}")
        definition = self._load("py_def.py", "the op definition file")
        declare = getattr(definition, "declare", None)
        if not callable(declare):
            raise TypeError(f"custom op module {self.op_module_name!r}: {self._file('py_def.py')} must define "
                            f"declare(module)")
        declare(self)
        self._defined_in_file = True
        return self

    def declare_op(self, op_type, inputs, outputs, kernel, attrs=None, infer=None, grad=None) -> "CustomOpModule":
        """Declare one op of the module (registered by :meth:`build_load`).

        Args:
            op_type: the op type name used with ``flow.user_op_builder(...).Op(op_type)``.
            inputs: input argument names, in the order the kernel receives them.
            outputs: output argument names, in the order the kernel returns them.
            kernel: ``"forward"`` or ``"backward"``: the Python kernel module's function
                that computes the op.
            attrs: attr specs as :func:`graphfront.ops.registry.op` takes them; the kernel
                functions do not see attrs (OneFlow's Python kernels do not).
            infer: shape/dtype inference ``infer(ctx)``; default: every output like the first input.
            grad: grad maker ``grad(g)`` (:mod:`graphfront.ops.registry`); default: none.

        Raises:
            ValueError: ``kernel`` is neither name, no inputs are given without ``infer``,
                or ``op_type`` is declared twice.
        """
        if kernel not in _KERNEL_FUNCTIONS:
            raise ValueError(f"custom op {op_type!r}: kernel must be 'forward' or 'backward', received {kernel!r}")
        if infer is None and not inputs:
            raise ValueError(f"custom op {op_type!r}: an op without inputs needs infer(ctx)")
        bad = [a for a in list(inputs) + list(outputs) if not (isinstance(a, str) and a.isidentifier())]
        if bad:
            raise ValueError(f"custom op {op_type!r}: argument names must be plain identifiers (one blob each), "
                             f"received {bad}")
        if op_type in self._declared:
            raise ValueError(f"custom op {op_type!r} is declared twice in module {self.op_module_name!r}")
        self._declared[op_type] = dict(inputs=list(inputs), outputs=list(outputs), attrs=attrs,
                                       infer=infer or like(list(inputs)[0]), grad=grad), kernel
        return self

    def py_kernel(self) -> "CustomOpModule":
        """Load ``<name>_py_kernel.py`` (its ``forward(args)`` / ``backward(args)``)."""
        self.kernel_module = self._load("py_kernel.py", "the Python kernel file")
        return self

    def cpp_kernel(self):
        """Not available: graphfront compiles no C++ (NotImplementedError)."""
        raise NotImplementedError(f"custom op module {self.op_module_name!r}: graphfront does not compile C++ "
                                  f"kernels; write the kernel in {self._file('py_kernel.py')}")

    def gpu_kernel(self):
        """Not available (NotImplementedError), as in OneFlow."""
        raise NotImplementedError(f"custom op module {self.op_module_name!r}: GPU kernels are not supported")

    def build_load(self) -> "CustomOpModule":
        """Register the declared ops, each computed by its Python kernel function.

        Loading a module again replaces its ops (as re-running a script would).

        Raises:
            RuntimeError: ops are declared but no kernel module was loaded (:meth:`py_kernel`),
                or the kernel module lacks a function an op names.
        """
        if not self._declared:
            return self
        if self.kernel_module is None:
            raise RuntimeError(f"custom op module {self.op_module_name!r}: call .py_kernel() before .build_load() "
                               f"(the ops {sorted(self._declared)} need their Python kernels)")
        for op_type, (spec, function) in self._declared.items():
            fn = getattr(self.kernel_module, function, None)
            if not callable(fn):
                raise RuntimeError(f"custom op module {self.op_module_name!r}: {self._file('py_kernel.py')} defines "
                                   f"no {function}(args) function, which op {op_type!r} runs")
            registry.unregister(op_type)
            # (the worker processes of a job on several devices load the module as this one did)
            origin = ("call", __name__, "load", (self.op_module_name, os.path.dirname(self.folder))) \
                if self._defined_in_file else None
            registry.op(op_type, kernel=_python_kernel(op_type, fn, spec["outputs"]), host_reads=True,
                        doc=f"custom op of module {self.op_module_name} (Python kernel {function})", origin=origin,
                        **spec)
            self.loaded_ops.append(op_type)
        return self


def load(op_module_name, module_path) -> CustomOpModule:
    """The module's ops declared by its ``<name>_py_def.py`` and registered with its Python
    kernels: what another process (a worker of a job on several devices) runs to register
    the ops of a module loaded here."""
    return CustomOpModule(op_module_name, module_path).cpp_def().py_kernel().build_load()


def _python_kernel(op_type, fn, outputs):
    """Kernel factory: the Python function over numpy arrays, its results cast to the
    inferred output dtypes and checked against the inferred shapes."""
    def factory(k):
        descs = [k.output(name) for name in outputs]

        def run(*tensors):
            args = tuple(t.detach().cpu().numpy() for t in tensors)
            result = fn(args)
            results = result if isinstance(result, (tuple, list)) else (result,)
            if len(results) != len(descs):
                raise RuntimeError(f"op {k.op_name} ({op_type}): the Python kernel returned {len(results)} "
                                   f"values, expected {len(descs)} (outputs {', '.join(outputs)})")
            out = []
            for name, desc, value in zip(outputs, descs, results):
                array = np.asarray(value, dtype=desc.dtype.np)
                if not desc.is_dynamic and array.shape != tuple(desc.shape):
                    raise RuntimeError(f"op {k.op_name} ({op_type}): the Python kernel's output '{name}' has shape "
                                       f"{array.shape}, expected {tuple(desc.shape)}")
                out.append(torch.from_numpy(np.ascontiguousarray(array)).to(k.device))
            return out[0] if len(out) == 1 else tuple(out)
        return run
    return factory
