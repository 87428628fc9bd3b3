"""AutoTest's float64 arbitration: every draw with float32 inputs is also run by torch in
float64, and graphfront must agree with that reference. A torch float32 result that
alone differs from it is reported as an upstream torch bug (with its reproducer), never
a graphfront failure; a graphfront result that differs from it always fails, even where
torch float32 agrees (graphfront's kernels are torch's kernels: a shared bug must not
pass); a job that computes two different results on the same inputs always fails."""
import os

import numpy as np
import pytest
import torch

from graphfront.ops import registry
from graphfront.testing import autotest, constant, random_tensor
from graphfront.testing import records as records_mod
from graphfront.testing.autotest import DRAW_ENV, N_ENV, SEED_ENV


@pytest.fixture(autouse=True)
def no_autotest_env(monkeypatch):
    for name in (SEED_ENV, DRAW_ENV, N_ENV):
        monkeypatch.delenv(name, raising=False)


def float32_only_bug(torch, x, alpha):
    """A reference whose float32 path is wrong (as an upstream kernel bug), float64 right."""
    y = torch.relu(x) * alpha
    return y + 0.25 if y.dtype == torch.float32 else y


@autotest(n=4)
def _reference_wrong_in_float32(check):
    check(graphfront=lambda flow, x, alpha: flow.math.relu(x) * alpha, torch=float32_only_bug,
          x=random_tensor(ndim=2, dim0=3, dim1=4, low=-1, high=1), alpha=constant(0.5))


def test_a_torch_float32_bug_is_reported_as_such_with_a_reproducer(capsys):
    stats = _reference_wrong_in_float32.autotest.run()
    assert stats.draws == 4 and len(stats.torch_bugs) == 4
    out = capsys.readouterr().out
    assert "upstream torch bug: graphfront matches the float64 reference, torch float32 does not" in out
    assert "output[0]: 12 of 12 elements differ" in out
    script = stats.torch_bugs[0].rsplit("reproducer: ", 1)[1]
    assert os.path.isfile(script) and os.path.isfile(script[:-len("_torch.py")] + ".npz")
    assert "def float32_only_bug(torch, x, alpha):" in open(script).read()
    rec = _reference_wrong_in_float32.autotest.record
    assert len(rec.torch_bugs) >= 4 and rec.failed_runs == 0
    assert "upstream torch bugs" in records_mod.summary(per_test=False)


@autotest(n=2)
def _relu_autotest(check):
    check(graphfront=lambda flow, x: flow.math.relu(x), torch=lambda torch, x: torch.relu(x),
          x=random_tensor(ndim=2, dim0=3, dim1=5, low=-1, high=1))


def _patched_relu(monkeypatch, wrap):
    opdef = registry.lookup("relu")
    true_kernel = opdef.kernel
    monkeypatch.setattr(opdef, "kernel", lambda k: wrap(true_kernel(k)))


def test_a_wrong_graphfront_kernel_still_fails(monkeypatch):
    _relu_autotest.autotest.run()  # the true kernel passes
    _patched_relu(monkeypatch, lambda fn: (lambda x: fn(x) * 1.01))
    with pytest.raises(AssertionError) as e:
        _relu_autotest.autotest.run()
    msg = str(e.value)
    assert "float64 arbitration: graphfront is wrong here: graphfront differs from the float64 reference" in msg
    assert "torch float32 agrees with float64" in msg and "upstream torch bug" not in msg


def test_a_bug_shared_by_graphfront_and_torch_float32_fails():
    """graphfront and torch float32 agree, but both differ from float64: a shared float32
    kernel bug (graphfront runs torch's kernels) is a failure, never a pass."""
    def shared_bug(x):
        y = x.relu()
        return y + 0.25 if y.dtype == torch.float32 else y

    @autotest(n=1)
    def shared(check):
        check(graphfront=lambda flow, x: flow.math.relu(x) + 0.25, torch=lambda torch, x: shared_bug(x),
              x=random_tensor(ndim=2, dim0=3, dim1=4, low=-1, high=1))
    with pytest.raises(AssertionError) as e:
        shared()
    msg = str(e.value)
    assert "graphfront differs from the float64 reference" in msg
    assert "torch float32 differs from float64 as well" in msg


def test_both_float32_results_within_tolerance_of_float64_but_not_of_each_other_fails():
    """Each side within the tolerance of float64, in opposite directions: the float32
    results are further apart than the tolerance, which never passes."""
    @autotest(n=1, rtol=0, atol=1e-3)
    def apart(check):
        check(graphfront=lambda flow, x: flow.math.relu(x) + 8e-4,
              torch=lambda torch, x: torch.relu(x) - (8e-4 if x.dtype == torch.float32 else 0.0),
              x=random_tensor(ndim=1, dim0=4, low=-1, high=1))
    with pytest.raises(AssertionError) as e:
        apart()
    assert "within tolerance of the float64 reference but not of each other" in str(e.value)


def test_an_integer_only_mismatch_is_not_arbitrated():
    @autotest(n=1)
    def ints(check):
        check(graphfront=lambda flow, x: flow.math.abs(x), torch=lambda torch, x: torch.abs(x) + 1,
              x=random_tensor(ndim=1, dim0=4, low=-5, high=5, dtype=int))
    with pytest.raises(AssertionError) as e:
        ints()
    assert "no float32 input, nothing to widen" in str(e.value)


def test_a_result_that_differs_between_two_runs_of_the_same_draw_fails(monkeypatch):
    """Every draw of a job without random ops runs twice; a kernel that returns another
    value on the second run fails even where the first run matched torch (by more than
    the tolerance a rerun on CUDA is allowed, whose atomics may sum in another order)."""
    calls = []

    def flaky(fn):
        def kernel(x):
            calls.append(1)
            return fn(x) if len(calls) % 2 else fn(x) + 1e-3
        return kernel
    _patched_relu(monkeypatch, flaky)
    with pytest.raises(AssertionError) as e:
        _relu_autotest.autotest.run()
    assert "nondeterministic: a second run of the same job on the same inputs gave another output[0]" in str(e.value)


def test_a_rerun_is_bitwise_on_the_cpu_and_within_tolerance_on_cuda():
    """CUDA kernels that add with atomics sum in another order on each run, so a GPU rerun
    may differ in the last bits (within the autotest's tolerance) but not beyond it."""
    from graphfront.testing.autotest import _differences
    a = np.array([1.0, 2.0, 3.0], np.float32)
    last_bit = np.nextafter(a, np.float32(4))
    assert _differences([a], {}, [last_bit], {}) == [
        "nondeterministic: a second run of the same job on the same inputs gave another output[0]"]
    assert _differences([a], {"w": a}, [last_bit], {"w": last_bit}, tolerance=(1e-4, 1e-5)) == []
    assert len(_differences([a], {"w": a}, [a + 1e-2], {"w": a + 1e-2}, tolerance=(1e-4, 1e-5))) == 2
    ids = np.array([1, 2], np.int64)
    assert _differences([ids], {}, [ids + 1], {}, tolerance=(1.0, 1.0))  # integers stay exact
