"""flow.sysconfig: the build facts of graphfront, answered from torch, jax and graphfront itself."""
import importlib.util

import pytest
import torch

import graphfront as flow


def test_cuda_answers_follow_the_installed_torch():
    assert flow.sysconfig.with_cuda() is torch.backends.cuda.is_built()
    version = flow.sysconfig.get_cuda_version()
    if torch.version.cuda is None:
        assert version == 0
    else:  # OneFlow's CUDA_VERSION integer: 11.2 -> 11020
        major, minor = torch.version.cuda.split(".")[:2]
        assert version == int(major) * 1000 + int(minor) * 10


def test_xla_mlir_and_rpc_answers():
    assert flow.sysconfig.with_xla() is (importlib.util.find_spec("jax") is not None)
    assert flow.sysconfig.with_mlir() is False and flow.sysconfig.with_mlir_cuda_codegen() is False
    assert flow.sysconfig.has_rpc_backend_grpc() is False
    assert flow.sysconfig.has_rpc_backend_local() is True
    assert flow.sysconfig.rpc_backend() == "torch.distributed"


@pytest.mark.parametrize("fn", ["get_include", "get_lib", "get_compile_flags", "get_link_flags"])
def test_no_native_library_is_said_not_faked(fn):
    with pytest.raises(flow.sysconfig.NoNativeLibraryError, match=f"sysconfig.{fn}.*no C\\+\\+ headers or library"):
        getattr(flow.sysconfig, fn)()
