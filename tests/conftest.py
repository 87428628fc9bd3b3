import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "lenet"))

import torch  # noqa: E402

import graphfront as flow  # noqa: E402

# Tests compare float32 results with float32/float64 references at float32 tolerances:
# on a GPU, convolutions and matmuls must not round their inputs to TF32.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(autouse=True)
def fresh_session():
    """Every test starts with a new default session (as flow.unittest.TestCase does)."""
    flow.clear_default_session()
    yield
    flow.clear_default_session()


@pytest.fixture(autouse=True)
def graphfront_cache_dir(tmp_path_factory, monkeypatch):
    """Compile caches (XLA, Inductor) in a directory of this test run, never the user's."""
    monkeypatch.setenv("GRAPHFRONT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "graphfront-cache"))


@pytest.fixture
def serve_saved_model():
    """``serve(path, mode)``: a launched ``InferenceSession`` on the CPU serving the saved
    model at ``path`` in lowering ``mode`` (``SessionOption.compile_mode``)."""
    def serve(path, mode):
        option = flow.serving.SessionOption()
        option.device_tag = "cpu"
        option.compile_mode = mode
        sess = flow.serving.InferenceSession(option)
        sess.load_saved_model(str(path))
        sess.launch()
        return sess
    return serve
