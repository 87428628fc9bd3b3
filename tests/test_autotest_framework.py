"""Tests of the AutoTest framework itself (graphfront.testing)."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from graphfront.ops import registry
from graphfront.ops.common import like
from graphfront.testing import (autotest, constant, dropout_statistics, mask_statistics, nothing, oneof, random,
                                random_bool, random_device, random_tensor)
from graphfront.testing import coverage
from graphfront.testing import records as records_mod
from graphfront.testing.autotest import DRAW_ENV, N_ENV, SEED_ENV
from graphfront.testing.compare import Case
from graphfront.testing.generators import NOTHING, DrawContext, TensorValue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIFT = 1.0


@pytest.fixture(autouse=True)
def no_autotest_env(monkeypatch):
    for name in (SEED_ENV, DRAW_ENV, N_ENV):
        monkeypatch.delenv(name, raising=False)


def shifted_relu(torch, x, alpha):
    """A deliberately wrong reference: relu(x) * alpha + SHIFT."""
    return torch.relu(x) * alpha + SHIFT


def draws(gen, n=400, seed=0):
    """n independent draws of one generator."""
    return [DrawContext(np.random.default_rng([seed, i])).resolve(gen) for i in range(n)]


# ------------------------------------------------------------------ failures and reproducers

@autotest(n=3)
def _wrong_reference(check):
    check(graphfront=lambda flow, x, alpha: flow.math.relu(x) * alpha,
          torch=lambda torch, x, alpha: shifted_relu(torch, x, alpha),
          x=random_tensor(ndim=2, dim0=3, dim1=4, low=-1, high=1), alpha=constant(0.5))


def _failure_message():
    with pytest.raises(AssertionError) as info:
        _wrong_reference()
    return str(info.value)


def test_a_wrong_reference_fails_with_a_reproducer_naming_draw_seed_and_arguments():
    msg = _failure_message()
    seed = _wrong_reference.autotest.default_seed()
    assert f"draw 0, seed {seed}" in msg
    assert f"{SEED_ENV}={seed} {DRAW_ENV}=0" in msg
    assert "output[0]: 12 of 12 elements differ beyond rtol=0.0001, atol=1e-05" in msg
    assert "x = float32 tensor of shape (3, 4) (trainable; 'x' in the .npz)" in msg
    assert "alpha = 0.5" in msg
    # both snippets embed the functions by source, with the helpers they call
    assert "f = (lambda flow, x, alpha: flow.math.relu(x) * alpha)" in msg
    assert "g = (lambda torch, x, alpha: shifted_relu(torch, x, alpha))" in msg
    assert "def shifted_relu(torch, x, alpha):" in msg and "SHIFT = 1.0" in msg
    assert 'flow.get_variable("x", shape=(3, 4), dtype=flow.float32' in msg
    assert "outs = flatten(f(flow, x=x, alpha=0.5))" in msg


def test_the_npz_holds_the_inputs_and_both_sides_results():
    msg = _failure_message()
    path = re.search(r"arrays saved to: (\S+\.npz)", msg).group(1)
    assert os.path.isfile(path)
    data = np.load(path)
    x = data["x"]
    assert x.shape == (3, 4) and x.dtype == np.float32
    np.testing.assert_allclose(data["graphfront_out_0"], np.maximum(x, 0) * 0.5, rtol=1e-6)
    np.testing.assert_allclose(data["torch_out_0"], np.maximum(x, 0) * 0.5 + 1.0, rtol=1e-6)
    v = data["cotangent_0"]  # the random upstream gradient of output 0
    assert v.shape == (3, 4) and v.dtype == np.float32 and np.all(np.abs(v) >= 0.5) and len(np.unique(v)) == 12
    np.testing.assert_allclose(data["graphfront_grad_x"], (x > 0) * 0.5 * v, rtol=1e-6)
    np.testing.assert_allclose(data["torch_grad_x"], (x > 0) * 0.5 * v, rtol=1e-6)


@pytest.mark.slow
def test_the_reproducer_snippets_run_on_their_own(tmp_path):
    msg = _failure_message()
    gf = msg.split("---------------- graphfront reproducer ----------------\n")[1].split("\n----------------")[0]
    th = msg.split("---------------- torch reproducer ----------------\n")[1].split("\n----------------")[0]
    (tmp_path / "gf.py").write_text(gf)
    (tmp_path / "th.py").write_text(th)
    for script, other in (("gf.py", "torch"), ("th.py", "graphfront")):
        done = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=ROOT))  # this checkout's graphfront
        assert done.returncode == 0, done.stderr
        assert f"output 0: MISMATCH (shape (3, 4) vs {other} (3, 4), max abs diff 1)" in done.stdout
        assert f"gradient of x: OK (shape (3, 4) vs {other} (3, 4), max abs diff 0)" in done.stdout


def test_a_gradient_mismatch_is_reported_for_the_input():
    @autotest(n=2)
    def body(check):
        check(graphfront=lambda flow, x: flow.math.square(x),
              torch=lambda torch, x: x.detach() ** 2 + x * 0.0 + (x - x.detach()) * 3.0,
              x=random_tensor(ndim=1, dim0=5, low=0.5, high=1))
    with pytest.raises(AssertionError, match=r"gradient of 'x': 5 of 5 elements differ"):
        body()


def test_graphfront_raising_alone_fails():
    @autotest(n=2)
    def body(check):
        check(graphfront=lambda flow, x: flow.reshape(x, (5, 5)),
              torch=lambda torch, x: x.reshape(-1),
              x=random_tensor(ndim=2, dim0=3, dim1=4))
    with pytest.raises(AssertionError) as info:
        body()
    msg = str(info.value)
    assert "graphfront raised JobBuildError" in msg and "while torch ran" in msg
    assert "graphfront traceback:" in msg and "in <lambda>" in msg  # the frames down to the failing check


def test_torch_raising_alone_fails():
    @autotest(n=2)
    def body(check):
        check(graphfront=lambda flow, x: flow.reshape(x, (12,)),
              torch=lambda torch, x: x.reshape(5, 5),
              x=random_tensor(ndim=2, dim0=3, dim1=4))
    with pytest.raises(AssertionError, match=r"torch raised RuntimeError: shape '\[5, 5\]' is invalid"):
        body()


def test_draws_both_sides_reject_are_skipped_and_counted():
    shapes = []

    def reference(torch, x, shape):
        shapes.append(tuple(shape))
        return x.reshape(shape)

    @autotest(n=16)
    def body(check):
        check(graphfront=lambda flow, x, shape: flow.reshape(x, shape),
              torch=lambda torch, x, shape: reference(torch, x, shape),
              x=random_tensor(ndim=2, dim0=3, dim1=4), shape=oneof((2, 6), (5, 5)))
    before = body.autotest.record.skipped
    body()
    stats = body.autotest.last_run
    rejected = shapes.count((5, 5))
    assert stats.draws == 16 and 0 < rejected < 16
    assert stats.skipped == rejected
    assert body.autotest.record.skipped - before == rejected


def test_an_autotest_whose_every_draw_is_rejected_fails():
    @autotest(n=4)
    def body(check):
        check(graphfront=lambda flow, x: flow.reshape(x, (5, 5)),
              torch=lambda torch, x: x.reshape(5, 5),
              x=random_tensor(ndim=2, dim0=3, dim1=4))
    with pytest.raises(AssertionError, match="all 4 draws were rejected by both graphfront and torch"):
        body()


def test_a_body_that_never_calls_check_fails():
    @autotest(n=2)
    def body(check):
        pass
    with pytest.raises(AssertionError, match="never called check"):
        body()


def test_decorator_arguments_are_validated():
    with pytest.raises(ValueError, match="n must be a positive int"):
        autotest(n=0)
    with pytest.raises(TypeError, match="exactly one parameter"):
        autotest()(lambda a, b: None)


# ------------------------------------------------------------------ generators

def test_nothing_drops_the_argument_on_both_sides():
    seen = []

    def gf_side(flow, x, **kw):
        seen.append(("graphfront", dict(kw)))
        return flow.math.relu(x)

    def torch_side(torch, x, **kw):
        if x.dtype == torch.float32:  # not the float64 reference run
            seen.append(("torch", dict(kw)))
        return torch.relu(x)

    @autotest(n=12)
    def body(check):
        check(graphfront=gf_side, torch=torch_side, x=random_tensor(ndim=1, low=-1, high=1),
              alpha=nothing() | constant(0.5), dims=[1, nothing(), 2])
    body()
    gf_kw = [kw for side, kw in seen if side == "graphfront"]
    assert gf_kw == [kw for side, kw in seen if side == "torch"]
    assert all(kw["dims"] == [1, 2] for kw in gf_kw)
    assert any("alpha" not in kw for kw in gf_kw) and any(kw.get("alpha") == 0.5 for kw in gf_kw)
    assert draws(nothing(), n=1) == [NOTHING]


def test_or_picks_each_alternative_uniformly():
    values = draws(constant(1) | constant(2) | 3, n=900)
    counts = [values.count(v) for v in (1, 2, 3)]
    assert sum(counts) == 900 and all(240 <= c <= 360 for c in counts), counts
    nested = draws(oneof(oneof(1, 2), 3), n=900)
    assert 380 <= nested.count(3) <= 520  # an explicit oneof is not flattened: 3 comes half of the time
    mixed = draws(random(0, 3).to(int) | nothing(), n=400)
    assert {v for v in mixed if v is not NOTHING} == {0, 1, 2} and 140 <= mixed.count(NOTHING) <= 260


def test_random_is_typed_by_to_and_floats_by_default():
    ints = draws(random(2, 5).to(int))
    assert set(ints) == {2, 3, 4} and all(type(v) is int for v in ints)
    floats = draws(random(0.5, 1.5))
    assert all(type(v) is float and 0.5 <= v < 1.5 for v in floats) and len(set(floats)) == len(floats)
    assert set(draws(random(0, 1).to(bool))) == {True, False}
    assert set(draws(random_bool())) == {True, False}
    assert draws(constant("a"), n=3) == ["a"] * 3
    assert draws(constant(2).to(float), n=1) == [2.0]
    with pytest.raises(TypeError, match="int, float or bool"):
        random(0, 1).to(str)
    with pytest.raises(ValueError, match="no integer"):
        draws(random(3, 3).to(int), n=1)


def test_random_tensor_shapes_values_and_dtypes():
    tensors = draws(random_tensor(), n=300)
    assert all(isinstance(t, TensorValue) for t in tensors)
    assert {t.array.ndim for t in tensors} == {1, 2, 3, 4}
    # every dimension is drawn, the leading one included
    assert {t.shape[0] for t in tensors} == {1, 2, 3, 4, 5, 6}
    assert {d for t in tensors for d in t.shape[1:]} == {1, 2, 3, 4, 5, 6}
    assert all(t.dtype == np.float32 and t.requires_grad and (t.array >= 0).all() and (t.array < 1).all()
               for t in tensors)
    ints = draws(random_tensor(ndim=3, dim0=random(2, 4), dim1=5, dim2=oneof(7, 8), low=-3, high=3, dtype=int))
    assert {t.shape[0] for t in ints} == {2, 3} and {t.shape[1] for t in ints} == {5}
    assert {t.shape[2] for t in ints} == {7, 8}
    assert all(t.dtype == np.int64 and not t.requires_grad for t in ints)
    assert set(np.concatenate([t.array.ravel() for t in ints])) == {-3, -2, -1, 0, 1, 2}
    import graphfront as flow
    (i32,) = draws(random_tensor(2, 2, 3, dtype=flow.int32, low=0, high=4), n=1)
    assert i32.dtype == np.int32 and i32.shape == (2, 3)
    (frozen,) = draws(random_tensor(1, 4, requires_grad=False), n=1)
    assert frozen.dtype == np.float32 and not frozen.requires_grad
    assert {t.array.ndim for t in draws(random_tensor(ndim=random(2, 4)), n=100)} == {2, 3}
    with pytest.raises(ValueError, match="dim1 must be a positive int"):
        draws(random_tensor(2, 1, 0), n=1)


def test_one_generator_object_is_one_value_per_draw_and_value_returns_it():
    seen = []

    def reference(torch, x, y):
        if x.dtype == torch.float32:  # not the float64 reference run
            seen.append((tuple(x.shape), tuple(y.shape)))
        return torch.atleast_1d(x.sum() + y.sum())  # OneFlow: a full reduction is shape (1,)

    @autotest(n=10)
    def body(check):
        d = random(1, 7).to(int)
        size = d.value()
        check(graphfront=lambda flow, x, y: flow.math.reduce_sum(x) + flow.math.reduce_sum(y),
              torch=lambda torch, x, y: reference(torch, x, y),
              x=random_tensor(2, d, d), y=random_tensor(1, size))
        seen.append(size)
    body()
    for (xs, ys), size in zip(seen[0::2], seen[1::2]):
        assert xs == (size, size) and ys == (size,)
    assert len({s for s in seen[1::2]}) > 1
    with pytest.raises(RuntimeError, match="inside an @autotest body"):
        random(0, 1).value()


def test_random_device_draws_cpu_and_cuda_when_available():
    values = set(draws(random_device(), n=60))
    assert values == ({"cpu", "cuda"} if torch.cuda.is_available() else {"cpu"})

    @autotest(n=4)
    def body(check):
        check(graphfront=lambda flow, x, device: flow.math.relu(x),
              torch=lambda torch, x, device: torch.relu(x) if x.device.type == device else None,
              x=random_tensor(low=-1, high=1), device=random_device())
    body()


# ------------------------------------------------------------------ seeding

def _recording_autotest(store, n=6):
    def reference(torch, x):
        if x.dtype == torch.float32:  # not the float64 reference run
            store.append(x.detach().cpu().numpy())
        return x * 2

    @autotest(n=n)
    def body(check):
        check(graphfront=lambda flow, x: x * 2, torch=lambda torch, x: reference(torch, x),
              x=random_tensor(low=-1, high=1))
    return body


def test_draws_are_deterministic_per_seed_and_the_env_overrides_the_seed(monkeypatch):
    first, second = [], []
    _recording_autotest(first)()
    _recording_autotest(second)()
    assert len(first) == 6 and all(np.array_equal(a, b) for a, b in zip(first, second))
    monkeypatch.setenv(SEED_ENV, "12345")
    third, fourth = [], []
    _recording_autotest(third)()
    _recording_autotest(fourth)()
    assert all(np.array_equal(a, b) for a, b in zip(third, fourth))
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(first, third))
    monkeypatch.setenv(DRAW_ENV, "4")
    only = []
    at = _recording_autotest(only)
    at()
    assert len(only) == 1 and np.array_equal(only[0], third[4]) and at.autotest.last_run.draws == 1


def test_the_env_overrides_the_number_of_draws(monkeypatch):
    monkeypatch.setenv(N_ENV, "3")
    at = _recording_autotest([], n=6)
    at()
    assert at.autotest.last_run.draws == 3


def test_torch_rng_is_seeded_per_draw_and_restored():
    torch.manual_seed(7)
    expected_next = torch.rand(3)
    torch.manual_seed(7)
    masks_a, masks_b = [], []
    for masks in (masks_a, masks_b):
        @autotest(n=3)
        def body(check):
            check(graphfront=lambda flow, x: flow.nn.dropout(x, rate=0.5),
                  torch=lambda torch, x: (masks.append(torch.rand(4)), x * 1.0)[1],
                  compare=lambda case: None, x=random_tensor(1, 50))
        body()
    assert all(torch.equal(a, b) for a, b in zip(masks_a, masks_b))
    assert torch.equal(torch.rand(3), expected_next)


# ------------------------------------------------------------------ records and check_graph

def test_records_hold_the_exercised_op_types_without_the_harness_ops(capsys):
    @autotest(n=3)
    def test_relu_train(check):
        check(graphfront=lambda flow, x: flow.math.relu(x), torch=lambda torch, x: torch.relu(x),
              x=random_tensor(ndim=2, low=-1, high=1))

    @autotest(n=2, auto_backward=False)
    def test_relu_forward(check):
        check(graphfront=lambda flow, x: flow.math.relu(x), torch=lambda torch, x: torch.relu(x),
              x=random_tensor(ndim=2, low=-1, high=1))
    test_relu_train()
    test_relu_forward()
    assert test_relu_train.autotest.last_run.ops == ["relu", "relu_grad"]
    assert test_relu_forward.autotest.last_run.ops == ["relu"]
    out = capsys.readouterr().out
    # each draw's device is drawn among those present (cpu, and cuda where available): the
    # record line counts the draws per device, in name order, and they add up to the draws
    present = {"cpu", "cuda"} if torch.cuda.is_available() else {"cpu"}
    for test, draws, ops in ((test_relu_train, 3, "relu, relu_grad"), (test_relu_forward, 2, "relu")):
        name = test.autotest.name
        line = re.search(rf"^autotest {name}: {draws} draws \(([^)]*)\), 0 skipped, ops: {ops}$", out, re.M)
        assert line, (name, out)
        counts = [part.split(" ") for part in line.group(1).split(", ")]
        devices = [d for d, _ in counts]
        assert devices == sorted(set(devices)) and set(devices) <= present, line.group(0)
        assert all(int(n) > 0 for _, n in counts) and sum(int(n) for _, n in counts) == draws, line.group(0)
        assert {d: int(n) for d, n in counts} == test.autotest.last_run.devices, line.group(0)
    rec = test_relu_train.autotest.record
    assert rec.forward_ops == {"relu"} and rec.backward_ops == {"relu_grad"} and rec.draws >= 3
    here = os.path.dirname(os.path.abspath(__file__))
    assert "test_relu_train" in records_mod.exercised_op_types(here)["relu_grad"]
    assert "test_autotest_framework.py:" in records_mod.summary(here)


@pytest.fixture
def misinferred_op():
    """An op whose kernel returns only the first column while inference claims x's shape."""
    registry.op("autotest_framework_misinferred", inputs=["x"], outputs=["y"], infer=like("x"),
                kernel=lambda k: lambda x: x[..., :1], no_grad=True)
    yield "autotest_framework_misinferred"
    registry.unregister("autotest_framework_misinferred")


def _misinferred_autotest(check_graph):
    @autotest(n=2, auto_backward=False, check_graph=check_graph)
    def body(check):
        check(graphfront=lambda flow, x: flow.user_op_builder("m").Op("autotest_framework_misinferred")
              .Input("x", [x]).Output("y").Build().InferAndTryRun().SoleOutputBlob(),
              torch=lambda torch, x: x[..., :1], x=random_tensor(ndim=2, dim0=2, dim1=3))
    return body


def test_check_graph_catches_a_kernel_that_disagrees_with_shape_inference(misinferred_op):
    _misinferred_autotest(check_graph=False)()  # the values alone agree
    with pytest.raises(AssertionError, match=r"check_graph: op 'm' \(autotest_framework_misinferred\) output "
                                             r"'m/y_0': inferred shape \(2, 3\), the kernel returned \(2, 1\)"):
        _misinferred_autotest(check_graph=True)()


# ------------------------------------------------------------------ random ops

def test_statistics_compare_accepts_dropout_and_rejects_a_wrong_rate():
    @autotest(n=4)
    def good(check):
        check(graphfront=lambda flow, x, rate: flow.nn.dropout(x, rate=rate),
              torch=lambda torch, x, rate: torch.nn.functional.dropout(x, p=rate),
              compare="statistics", x=random_tensor(2, 30, 30, low=0.5, high=1.5), rate=random(0.2, 0.6))
    good()

    @autotest(n=2)
    def bad(check):
        check(graphfront=lambda flow, x, rate: flow.nn.dropout(x, rate=rate),
              torch=lambda torch, x, rate: torch.nn.functional.dropout(x, p=rate / 4),
              compare="statistics", x=random_tensor(2, 30, 30, low=0.5, high=1.5), rate=random(0.6, 0.8))
    with pytest.raises(AssertionError, match=r"output\[0\]: fraction of zeros"):
        bad()


def test_dropout_statistics_checks_mask_scale_and_keep_ratio():
    @autotest(n=3)
    def good(check):
        check(graphfront=lambda flow, x, rate: flow.nn.dropout(x, rate=rate),
              torch=lambda torch, x, rate: torch.nn.functional.dropout(x, p=rate),
              compare=dropout_statistics("x", "rate"), x=random_tensor(2, 20, 20, low=-1, high=1),
              rate=random(0.1, 0.8))
    good()

    @autotest(n=2)
    def claimed_rate_is_wrong(check):
        check(graphfront=lambda flow, x, rate, claimed: flow.nn.dropout(x, rate=rate),
              torch=lambda torch, x, rate, claimed: torch.nn.functional.dropout(x, p=rate),
              compare=dropout_statistics("x", "claimed"), x=random_tensor(2, 20, 20, low=-1, high=1),
              rate=constant(0.5), claimed=constant(0.25))
    with pytest.raises(AssertionError) as info:
        claimed_rate_is_wrong()
    msg = str(info.value)
    assert "gradient of 'x' takes values other than 0 and 1/(1-rate) = 1.33333" in msg
    assert "kept fraction" in msg and "differs from 1 - rate = 0.7500" in msg
    assert "compare=dropout_statistics(x='x', rate='claimed', output=0)" in msg


def test_mask_statistics_checks_values_and_keep_ratio():
    @autotest(n=3)
    def good(check):
        check(graphfront=lambda flow, like, rate: flow.nn.random_mask_like(like, rate),
              torch=lambda torch, like, rate: (torch.rand(like.shape) >= rate).to(torch.int8),
              compare=mask_statistics("rate"), like=random_tensor(2, 30, 30, requires_grad=False),
              rate=random(0.1, 0.8))
    good()

    @autotest(n=2)
    def bad(check):
        check(graphfront=lambda flow, like, rate: flow.cast(flow.nn.random_mask_like(like, rate), flow.int32) * 2,
              torch=lambda torch, like, rate: (torch.rand(like.shape) >= rate).to(torch.int32) * 2,
              compare=mask_statistics("rate"), like=random_tensor(2, 30, 30, requires_grad=False),
              rate=constant(0.5))
    with pytest.raises(AssertionError, match=r"output\[0\] takes values \[0, 2\], expected only 0 and 1"):
        bad()


# ------------------------------------------------------------------ coverage helpers

def test_uncovered_and_invalid_exemptions_and_the_report():
    registered = ["relu", "relu_grad", "sgd_update", "exp"]
    assert coverage.uncovered({"relu": ["t"]}, registered) == ["exp", "relu_grad"]
    assert coverage.invalid_exemptions(registered + sorted(coverage.EXEMPT)) == []
    problems = coverage.invalid_exemptions(["relu"])
    assert "exempt op type 'sgd_update' is not registered" in problems
    result = coverage.CoverageResult({"relu": ["t"]}, 1, [], {"x.py": "import failed: SyntaxError: bad"})
    report = coverage.format_report(["exp", "relu_grad"], result, "tests/autotest")
    assert "2 registered op type(s) are exercised by no autotest in tests/autotest" in report
    assert "\n  - exp\n  - relu_grad\n" in report and "x.py: import failed: SyntaxError: bad" in report


def test_collect_imports_and_runs_autotests_and_reports_broken_files(tmp_path):
    (tmp_path / "test_tmp_cov_autotest.py").write_text(textwrap.dedent("""
        from graphfront.testing import autotest, random_tensor

        @autotest(n=20)
        def test_tanh_cov(check):
            check(graphfront=lambda flow, x: flow.math.tanh(x), torch=lambda torch, x: torch.tanh(x),
                  x=random_tensor(low=-1, high=1))
        """))
    (tmp_path / "test_tmp_broken_autotest.py").write_text("import no_such_module_here\n")
    try:
        result = coverage.collect(str(tmp_path), n=2)
    finally:
        sys.modules.pop("test_tmp_cov_autotest", None)
    assert result.autotests == 1 and result.ran == ["test_tanh_cov"]
    assert result.exercised == {"tanh": ["test_tanh_cov"], "tanh_grad": ["test_tanh_cov"]}
    assert "ModuleNotFoundError" in result.errors["test_tmp_broken_autotest.py"]
    rec = records_mod.RECORDS[(os.path.realpath(tmp_path / "test_tmp_cov_autotest.py"), "test_tanh_cov")]
    assert rec.draws == 2
    again = coverage.collect(str(tmp_path), n=2)  # records exist now: nothing runs again
    assert again.ran == [] and again.exercised == result.exercised


def test_outputs_must_have_exactly_torchs_dtype():
    @autotest(n=1, auto_backward=False)
    def wider(check):
        check(graphfront=lambda flow, x: flow.cast(flow.math.relu(x), flow.float64),
              torch=lambda torch, x: torch.relu(x), x=random_tensor(ndim=2, dim0=3, dim1=4, low=-1, high=1))
    with pytest.raises(AssertionError, match=r"output\[0\]: dtype float64 \(graphfront\) vs float32 \(torch\)"):
        wider()

    @autotest(n=1, auto_backward=False)
    def narrower(check):
        check(graphfront=lambda flow, x: flow.cast(flow.math.argmax(x), flow.int8),
              torch=lambda torch, x: torch.argmax(x, -1), x=random_tensor(ndim=2, dim0=3, dim1=4))
    with pytest.raises(AssertionError, match=r"output\[0\]: dtype int8 \(graphfront\) vs int64 \(torch\)"):
        narrower()


def _perm_case():
    return Case(kwargs={}, inputs={}, outputs=[], grads={}, torch_outputs=[], torch_grads={}, train=False,
                rtol=0, atol=0)


def test_a_permutation_must_be_one_and_not_the_identity_beyond_chance():
    from graphfront.testing.compare import IDENTITY_ALPHA, permutation_problems
    assert "is not a permutation of range(3)" in permutation_problems(_perm_case(), [0, 0, 2])[0]
    # uniform permutations of small sizes are often the identity: never a failure over 1000 draws
    rng = np.random.default_rng(0)
    case = _perm_case()
    assert not any(permutation_problems(case, rng.permutation(int(n))) for n in rng.integers(1, 4, size=1000))
    # the identity of 10 elements (probability 1/10! < alpha) fails at once; of 3 elements
    # (1/6) only when it keeps coming
    assert permutation_problems(_perm_case(), np.arange(10))
    case = _perm_case()
    results = [permutation_problems(case, np.arange(3)) for _ in range(10)]
    first = next(i for i, r in enumerate(results) if r)
    assert (1 / 6) ** first >= IDENTITY_ALPHA > (1 / 6) ** (first + 1)


def test_a_random_ops_comparer_gets_no_second_torch_sample():
    """A failing statistical comparison is final: torch is not rerun (in float64, with a
    new random sample) to excuse it."""
    calls = []

    def th(torch, x):
        calls.append(x.dtype)
        return torch.bernoulli(x)

    @autotest(n=1, auto_backward=False)
    def body(check):
        check(graphfront=lambda flow, x: flow.random.bernoulli(x) * 0.0, torch=th, compare="statistics",
              x=constant(np.full((30, 30), 0.5, np.float32)))
    with pytest.raises(AssertionError) as e:
        body()
    assert "fraction of zeros" in str(e.value) and "arbitration" not in str(e.value)
    assert calls == [torch.float32]


def test_each_draw_picks_its_device_among_those_present(monkeypatch):
    """cpu and cuda where CUDA is present (so the same suite checks the GPU kernels on a GPU
    machine), cpu only for an autotest restricted to it; drawn from a generator of its own."""
    from graphfront.testing.autotest import Checker, RunStats

    @autotest(n=1)
    def anywhere(check):
        pass

    @autotest(n=1, devices=("cpu",))
    def host(check):
        pass

    def picks(at):
        return [Checker(at.autotest, None, 7, i, 40, RunStats())._draw_device() for i in range(40)]
    assert set(picks(anywhere)) == ({"cpu", "cuda"} if torch.cuda.is_available() else {"cpu"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert set(picks(anywhere)) == {"cpu", "cuda"} and set(picks(host)) == {"cpu"}
    with pytest.raises(ValueError, match="devices must be a non-empty subset"):
        autotest(devices=("tpu",))(lambda check: None)


def test_reproducers_are_written_under_pytests_temporary_directory(tmp_path_factory):
    import tempfile
    before = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("graphfront_autotest_")}
    path = re.search(r"arrays saved to: (\S+\.npz)", _failure_message()).group(1)
    assert os.path.realpath(path).startswith(os.path.realpath(tmp_path_factory.getbasetemp()) + os.sep)
    after = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("graphfront_autotest_")}
    assert after == before
