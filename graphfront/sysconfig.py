"""``flow.sysconfig``: what this graphfront installation was built with.

OneFlow answered these from flags compiled into its C++ library. graphfront has no C++
library of its own: it runs on PyTorch's kernels, optionally lowers to XLA through jax, and
joins several processes with ``torch.distributed``. The answers here describe exactly that:

* ``with_cuda()``: the installed torch is a CUDA build (``torch.backends.cuda.is_built()``),
  whether or not a GPU is present now.
* ``get_cuda_version()``: the CUDA version torch was built against as OneFlow's integer
  ``CUDA_VERSION`` (``major * 1000 + minor * 10``: CUDA 12.4 is ``12040``), ``0`` for a
  CPU-only torch (as OneFlow's CPU-only builds).
* ``with_xla()``: jax is installed, so the ``xla`` lowering (``FunctionConfig.use_xla_jit``)
  can run.
* ``has_rpc_backend_grpc()``: ``False``, always: graphfront has no gRPC control plane; its
  processes meet through ``torch.distributed`` (:func:`rpc_backend`).
* ``has_rpc_backend_local()``: ``True``: one process on one machine needs no RPC at all.
* ``with_mlir()`` / ``with_mlir_cuda_codegen()``: ``False``: graphfront has no MLIR
  compiler (its compiling lowerings are TorchInductor and XLA).
* ``get_include()``, ``get_lib()``, ``get_compile_flags()``, ``get_link_flags()``: OneFlow
  gave the headers and library to build C++ custom ops against. graphfront ships neither
  (its custom ops are Python kernels: ``flow.experimental.custom_op_module``), so these raise
  :class:`NoNativeLibraryError` rather than return paths that do not exist.
"""
from __future__ import annotations

import importlib.util

from graphfront.framework.errors import GraphfrontError

__all__ = ["NoNativeLibraryError", "get_compile_flags", "get_cuda_version", "get_include", "get_lib",
           "get_link_flags", "has_rpc_backend_grpc", "has_rpc_backend_local", "rpc_backend", "with_cuda",
           "with_mlir", "with_mlir_cuda_codegen", "with_xla"]


class NoNativeLibraryError(GraphfrontError, NotImplementedError):
    """graphfront has no C++ headers or library to compile or link against."""


def _no_native_library(fn):
    raise NoNativeLibraryError(
        f"flow.sysconfig.{fn}(): graphfront has no C++ headers or library (it runs on PyTorch's kernels), so there "
        f"is nothing to compile or link a C++ custom op against; write the op's kernel in Python with "
        f"flow.experimental.custom_op_module instead")


def get_include() -> str:
    """Raises NoNativeLibraryError: graphfront ships no C++ headers."""
    _no_native_library("get_include")


def get_lib() -> str:
    """Raises NoNativeLibraryError: graphfront ships no C++ library."""
    _no_native_library("get_lib")


def get_compile_flags() -> list:
    """Raises NoNativeLibraryError: there are no headers to compile against."""
    _no_native_library("get_compile_flags")


def get_link_flags() -> list:
    """Raises NoNativeLibraryError: there is no library to link against."""
    _no_native_library("get_link_flags")


def with_cuda() -> bool:
    """True when the installed torch is a CUDA build (a GPU need not be present)."""
    import torch
    return bool(torch.backends.cuda.is_built())


def get_cuda_version() -> int:
    """torch's CUDA version as ``major * 1000 + minor * 10`` (CUDA 11.2: ``11020``); 0 without CUDA."""
    import torch
    version = torch.version.cuda
    if not version:
        return 0
    major, minor = (int(part) for part in version.split(".")[:2])
    return major * 1000 + minor * 10


def with_xla() -> bool:
    """True when jax is installed (the ``xla`` lowering runs jobs through ``jax.jit``)."""
    return importlib.util.find_spec("jax") is not None


def rpc_backend() -> str:
    """How graphfront's processes communicate: ``"torch.distributed"`` (gloo on CPU, NCCL on GPU)."""
    return "torch.distributed"


def has_rpc_backend_grpc() -> bool:
    """False: graphfront has no gRPC control plane (see :func:`rpc_backend`)."""
    return False


def has_rpc_backend_local() -> bool:
    """True: a single process on one machine needs no RPC."""
    return True


def with_mlir() -> bool:
    """False: graphfront has no MLIR compiler."""
    return False


def with_mlir_cuda_codegen() -> bool:
    """False: graphfront has no MLIR CUDA code generator."""
    return False
