"""flow.checkpoint / flow.load_variables / flow.train: session-level checkpoints.

The file layer (atomic writes, crash recovery) is tested in test_checkpoint_io.py;
here: what a session saves and loads, the checks on load, resuming training with
identical losses, and the legacy flow.train objects.
"""
import os
import re
import warnings

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront.testing.files import tree_digest
from graphfront import typing as tp
from graphfront.checkpoint import CheckpointError, MissingVariablesWarning
from graphfront.framework import checkpoint_io


def _vars():
    return {k: v.numpy() for k, v in flow.get_all_variables().items()}


def _define_mixed_job():
    """A job with float32, float64 and int32 variables (plus no optimizer)."""
    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.random_normal_initializer())
            b = flow.get_variable("b", (3,), initializer=flow.random_uniform_initializer())
            flow.get_variable("d", (4,), dtype=flow.float64, initializer=flow.random_normal_initializer())
            flow.get_variable("i", (5,), dtype=flow.int32, initializer=flow.constant_initializer(7, dtype=flow.int32))
            return x * w + b
    return job


# ------------------------------------------------------------------ round trip

def test_save_then_load_is_bit_identical(tmp_path):
    job = _define_mixed_job()
    before = _vars()
    flow.checkpoint.save(tmp_path / "ckpt")

    # OneFlow's layout: <name>/out raw bytes, <name>/meta text VariableMetaInfo, snapshot_done
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["b", "d", "i", "snapshot_done", "w"]
    with open(tmp_path / "ckpt" / "w" / "meta") as f:
        assert f.read() == "shape {\n  dim: 2\n  dim: 3\n}\ndata_type: kFloat\n"
    with open(tmp_path / "ckpt" / "d" / "out", "rb") as f:
        assert f.read() == before["d"].tobytes()

    for name, value in before.items():  # overwrite every variable
        flow.load_variables({name: np.zeros_like(value)})
    assert all(not v.any() for v in _vars().values())
    loaded = flow.load_variables(flow.checkpoint.get(tmp_path / "ckpt"))
    assert loaded == ["b", "d", "i", "w"]
    after = _vars()
    for name in before:
        assert after[name].dtype == before[name].dtype
        assert after[name].tobytes() == before[name].tobytes(), name
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(job(x), x * before["w"] + before["b"])


def test_a_scalar_variable_loads_and_saves(tmp_path):
    """A variable of shape () (a step counter, a scale) takes a 0-d array as it is."""
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return x * flow.get_variable("s", shape=(), initializer=flow.zeros_initializer())
    job(np.ones(2, np.float32))
    flow.load_variables({"s": np.array(2.5, np.float32)})
    np.testing.assert_array_equal(job(np.ones(2, np.float32)), [2.5, 2.5])
    flow.checkpoint.save(tmp_path / "ckpt")
    flow.load_variables({"s": np.array(0.0, np.float32)})
    flow.load_variables(flow.checkpoint.get(tmp_path / "ckpt"))
    assert _vars()["s"].shape == () and _vars()["s"] == 2.5


def test_get_returns_lazy_blobs_with_meta(tmp_path):
    _define_mixed_job()
    before = _vars()
    flow.checkpoint.save(tmp_path / "c")
    ckpt = flow.checkpoint.get(tmp_path / "c")
    assert sorted(ckpt) == ["b", "d", "i", "w"]
    assert ckpt["d"].shape == (4,) and ckpt["d"].dtype is flow.float64
    assert ckpt["i"].numpy().tobytes() == before["i"].tobytes()
    single = flow.checkpoint.get(tmp_path / "c" / "w")  # a variable directory -> one blob
    assert single.numpy().tobytes() == before["w"].tobytes()
    assert flow.load(tmp_path / "c")["b"].numpy().tobytes() == before["b"].tobytes()


def _define_mlp(lr_boundary=3, momentum=0.9):
    """Small model trained with momentum SGD; the LR drops at ``lr_boundary`` (depends on the train step)."""
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((8, 4)), y: tp.Numpy.Placeholder((8, 2))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.dense(x, 6, activation=flow.nn.relu, name="fc1",
                                  kernel_initializer=flow.random_normal_initializer(stddev=0.5))
            o = flow.layers.dense(h, 2, name="fc2", kernel_initializer=flow.random_normal_initializer(stddev=0.5))
            loss = flow.math.reduce_mean(flow.math.square(o - y))
        schedule = flow.optimizer.PiecewiseConstantScheduler([lr_boundary], [0.1, 0.02])
        flow.optimizer.SGD(schedule, momentum=momentum).minimize(loss)
        return loss
    return train_job


def _data(steps):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32))
            for _ in range(steps)]


def test_resumed_training_matches_uninterrupted_run(tmp_path):
    data = _data(8)
    flow.manual_seed(0)
    train_job = _define_mlp()
    full = [train_job(x, y) for x, y in data]

    flow.clear_default_session()
    flow.manual_seed(0)
    train_job = _define_mlp()
    first = [train_job(x, y) for x, y in data[:4]]
    names = sorted(flow.get_all_variables())
    assert "fc1-weight-momentum" in names and "System-Train-TrainStep-train_job" in names
    flow.checkpoint.save(tmp_path / "ckpt")

    flow.clear_default_session()
    flow.manual_seed(123)  # other initial values: everything must come from the checkpoint
    train_job = _define_mlp()
    flow.load_variables(flow.checkpoint.get(tmp_path / "ckpt"), strict=True)
    assert int(flow.get_all_variables()["System-Train-TrainStep-train_job"].numpy()[0]) == 4
    rest = [train_job(x, y) for x, y in data[4:]]
    for a, b in zip(first + rest, full):
        assert a.tobytes() == b.tobytes()


def test_resume_without_optimizer_state_is_reported_and_diverges(tmp_path):
    data = _data(6)
    flow.manual_seed(0)
    train_job = _define_mlp()
    full = [train_job(x, y) for x, y in data]

    flow.clear_default_session()
    flow.manual_seed(0)
    train_job = _define_mlp()
    for x, y in data[:3]:
        train_job(x, y)
    values = {k: v for k, v in flow.get_all_variables().items() if not k.endswith("-momentum")}
    flow.checkpoint.save(tmp_path / "partial", values)

    flow.clear_default_session()
    flow.manual_seed(0)
    train_job = _define_mlp()
    with pytest.raises(CheckpointError, match=r"4 variable\(s\) .* not in checkpoint .*fc1-bias-momentum, "
                                              r"fc1-weight-momentum, fc2-bias-momentum, fc2-weight-momentum"):
        flow.load_variables(flow.checkpoint.get(tmp_path / "partial"), strict=True)
    with pytest.warns(MissingVariablesWarning, match="fc1-weight-momentum"):
        flow.load_variables(flow.checkpoint.get(tmp_path / "partial"))
    rest = [train_job(x, y) for x, y in data[3:]]
    assert rest[0].tobytes() == full[3].tobytes()  # same weights ...
    assert rest[1].tobytes() != full[4].tobytes()  # ... but the first update lacked the momentum buffers


# ------------------------------------------------------------------ bad checkpoints

@pytest.fixture
def saved(tmp_path):
    _define_mixed_job()
    path = tmp_path / "ckpt"
    flow.checkpoint.save(path)
    return path


def test_missing_data_file_names_the_variable(saved):
    os.remove(saved / "w" / "out")
    digest = tree_digest(saved)
    with pytest.raises(CheckpointError, match=r"variable 'w': data file .*w/out' is missing"):
        flow.load_variables(flow.checkpoint.get(saved))
    assert tree_digest(saved) == digest


def test_truncated_file_names_variable_and_sizes(saved):
    with open(saved / "b" / "out", "r+b") as f:
        f.truncate(5)
    digest = tree_digest(saved)
    with pytest.raises(CheckpointError, match=r"variable 'b': data file .* has 5 bytes, expected 12 bytes for "
                                              r"shape \(3,\), dtype float32 \(truncated or corrupted\)"):
        flow.load_variables(flow.checkpoint.get(saved))
    assert tree_digest(saved) == digest


def test_truncated_file_without_meta_is_caught_against_the_job(saved):
    os.remove(saved / "w" / "meta")
    with open(saved / "w" / "out", "r+b") as f:
        f.truncate(20)
    before = _vars()
    with pytest.raises(CheckpointError, match=r"variable 'w': data file .* has 20 bytes, expected 24 bytes"):
        flow.load_variables(flow.checkpoint.get(saved))
    assert _vars()["b"].tobytes() == before["b"].tobytes()


def test_corrupted_meta_names_the_variable(saved):
    with open(saved / "d" / "meta", "w") as f:
        f.write("shape { dim: 4 }\ndata_type: kNotAType\n")
    with pytest.raises(CheckpointError, match=r"variable 'd': cannot parse meta file"):
        flow.checkpoint.get(saved)


def test_shape_mismatch_names_variable_expected_and_found(tmp_path):
    _define_mixed_job()
    flow.checkpoint.save(tmp_path / "c", {"w": np.zeros((3, 2), np.float32)})
    with pytest.raises(CheckpointError, match=re.escape("variable 'w': the job expects float32 (2, 3), the "
                                                        "checkpoint file ") + r".*holds float32 \(3, 2\)"):
        flow.load_variables(flow.checkpoint.get(tmp_path / "c"))


def test_dtype_mismatch_names_variable_expected_and_found(tmp_path):
    _define_mixed_job()
    flow.checkpoint.save(tmp_path / "c", {"i": np.zeros((5,), np.int64)})
    with pytest.raises(CheckpointError, match=r"variable 'i': the job expects int32 \(5,\), the checkpoint file "
                                              r".* holds int64 \(5,\)"):
        flow.load_variables(flow.checkpoint.get(tmp_path / "c"))
    with pytest.raises(CheckpointError, match=r"variable 'w': the job expects float32 \(2, 3\), received float64"):
        flow.load_variables({"w": np.zeros((2, 3))})


def test_a_bad_value_leaves_every_variable_unchanged(tmp_path):
    _define_mixed_job()
    before = _vars()
    flow.checkpoint.save(tmp_path / "c", {"b": np.full((3,), 5, np.float32), "w": np.zeros((2, 2), np.float32)})
    with pytest.raises(CheckpointError, match="variable 'w'"):
        flow.load_variables(flow.checkpoint.get(tmp_path / "c"))
    after = _vars()
    assert all(after[n].tobytes() == before[n].tobytes() for n in before)


def test_missing_variables_are_reported(tmp_path):
    _define_mixed_job()
    before = _vars()
    flow.checkpoint.save(tmp_path / "c", {"w": np.ones((2, 3), np.float32)})
    with pytest.warns(MissingVariablesWarning, match=r"3 variable\(s\) of the session are not in checkpoint "
                                                     r".* keep their current \(initial\) values: b, d, i"):
        assert flow.load_variables(flow.checkpoint.get(tmp_path / "c")) == ["w"]
    assert _vars()["b"].tobytes() == before["b"].tobytes()
    with pytest.warns(MissingVariablesWarning, match=r"not in the loaded values .*: b, d, i"):
        flow.load_variables(dict(flow.checkpoint.get(tmp_path / "c")))  # blobs from disk, in a plain dict
    with pytest.raises(CheckpointError, match=r"not in checkpoint .*: b, d, i"):
        flow.checkpoint.restore(tmp_path / "c", strict=True)
    # a plain dict sets the variables it names, silently unless strict
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow.load_variables({"w": np.ones((2, 3), np.float32)})
    with pytest.raises(CheckpointError, match=r"not in the loaded values \(strict=True, nothing was loaded\): b, d, i"):
        flow.load_variables({"w": np.ones((2, 3), np.float32)}, strict=True)


def test_unknown_names_are_skipped_or_rejected(tmp_path):
    _define_mixed_job()
    flow.load_variables({"nope": np.zeros(1)})
    with pytest.raises(RuntimeError, match=r"'nope' is not a variable of the session; its variables are "
                                           r"\['b', 'd', 'i', 'w'\]"):
        flow.load_variables({"nope": np.zeros(1)}, ignore_mismatch=False)


@pytest.mark.parametrize("call, message", [
    (lambda p: flow.checkpoint.save(3), "checkpoint path expects a str or an os.PathLike, received int 3"),
    (lambda p: flow.checkpoint.get(None), "checkpoint path expects a str or an os.PathLike, received NoneType"),
    (lambda p: flow.save({"w": np.ones(2, np.float32)}, 5), "checkpoint path expects a str or an os.PathLike"),
    (lambda p: flow.load_variables([("w", np.ones((2, 3), np.float32))]),
     "load_variables: value_dict expects a mapping {name: array}, received list"),
])
def test_arguments_of_the_wrong_type_raise_argument_error(tmp_path, call, message):
    # os.fspath's TypeError and a list's AttributeError once came from inside graphfront
    _define_mixed_job()
    with pytest.raises(flow.JobBuildError) as e:
        call(tmp_path)
    assert isinstance(e.value, TypeError) and message in str(e.value)
    assert f"\n  at {__file__}:" in str(e.value)


def test_incomplete_and_absent_checkpoints(tmp_path):
    _define_mixed_job()
    flow.checkpoint.save(tmp_path / "c")
    os.remove(tmp_path / "c" / "snapshot_done")
    with pytest.raises(CheckpointError, match="is incomplete: it has no 'snapshot_done'"):
        flow.checkpoint.get(tmp_path / "c")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        flow.checkpoint.get(tmp_path / "nothing")


def test_save_refuses_foreign_directory_and_needs_jobs(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "precious.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="no job is defined"):
        flow.checkpoint.save(tmp_path / "d")
    _define_mixed_job()
    with pytest.raises(CheckpointError, match="not empty and is not a complete checkpoint"):
        flow.checkpoint.save(tmp_path / "d")
    assert (tmp_path / "d" / "precious.txt").read_text() == "keep"


def test_crash_while_overwriting_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    _define_mixed_job()
    path = tmp_path / "c"
    flow.checkpoint.save(path)
    old = _vars()
    digest = tree_digest(path)
    flow.load_variables({"w": np.full((2, 3), 9, np.float32)})

    class Crash(Exception):
        pass

    def hook(stage, **info):
        if stage == "slice_written" and info["name"] == "w":
            raise Crash()
    monkeypatch.setattr(checkpoint_io, "_test_hook", hook)
    with pytest.raises(Crash):
        flow.checkpoint.save(path)
    assert tree_digest(path) == digest
    assert sorted(os.listdir(tmp_path)) == ["c"]  # temporary directory removed
    monkeypatch.setattr(checkpoint_io, "_test_hook", lambda stage, **info: None)
    flow.load_variables(flow.checkpoint.get(path))
    assert _vars()["w"].tobytes() == old["w"].tobytes()


# ------------------------------------------------------------------ flow.train

def test_legacy_checkpoint_object(tmp_path):
    data = _data(4)
    flow.manual_seed(0)
    train_job = _define_mlp()
    with pytest.warns(DeprecationWarning, match="'flow.train.CheckPoint' is deprecated"):
        ckpt = flow.train.CheckPoint()
    ckpt.init()
    for x, y in data[:2]:
        train_job(x, y)
    ckpt.save(str(tmp_path / "snap"))
    saved = _vars()
    for x, y in data[2:]:
        train_job(x, y)
    assert _vars()["fc1-weight"].tobytes() != saved["fc1-weight"].tobytes()
    ckpt.load(str(tmp_path / "snap"))
    assert all(_vars()[n].tobytes() == saved[n].tobytes() for n in saved)


def test_simple_checkpoint_manager(tmp_path):
    data = _data(3)
    flow.manual_seed(0)
    train_job = _define_mlp()
    root = tmp_path / "snaps"
    manager = flow.train.SimpleCheckPointManager(str(root), prefix="snap_")
    assert manager.list_checkpoints() == [] and manager.latest_checkpoint() is None
    manager.initialize_or_restore()  # nothing yet: saves the initial variables
    (first,) = manager.list_checkpoints()
    assert re.fullmatch(r"snap_\d{8}_\d{6}_\d{6}", first)
    for x, y in data:
        train_job(x, y)
    trained = _vars()
    manager.save()
    names = manager.list_checkpoints()
    assert len(names) == 2 and names[0] == first and manager.latest_checkpoint() == names[1]
    (root / "snap_99999999_incomplete").mkdir()  # no snapshot_done: not listed
    assert manager.list_checkpoints() == names

    flow.clear_default_session()
    flow.manual_seed(5)
    _define_mlp()
    flow.train.SimpleCheckPointManager(str(root), prefix="snap_").initialize_or_restore()
    restored = _vars()
    assert all(restored[n].tobytes() == trained[n].tobytes() for n in trained)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        flow.train.SimpleCheckPointManager(str(tmp_path / "file"))


def _conv_job(amp, fmt="NCHW", optimizer="momentum"):
    """Three steps of a conv (3x3, 2 -> 4 channels) + dense classifier on the CPU; returns
    the session's variable tensors (as stored) and their values."""
    flow.clear_default_session()
    flow.manual_seed(0)
    config = flow.FunctionConfig()
    config.enable_auto_mixed_precision(amp)
    shape = (2, 2, 6, 6) if fmt == "NCHW" else (2, 6, 6, 2)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder(shape)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.conv2d(x, 4, 3, padding="SAME", data_format=fmt, name="c",
                                   kernel_initializer=flow.random_normal_initializer(stddev=0.5))
            y = flow.layers.dense(flow.reshape(h, (2, -1)), 3, name="d",
                                  kernel_initializer=flow.random_normal_initializer(stddev=0.5))
            loss = flow.math.reduce_mean(y * y)
        schedule = flow.optimizer.PiecewiseConstantScheduler([], [0.01])
        (flow.optimizer.SGD(schedule, momentum=0.9) if optimizer == "momentum" else
         flow.optimizer.Adam(schedule)).minimize(loss)
        return loss
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for _ in range(3):
        job(x)
    from graphfront.framework import session as session_mod
    stored = dict(session_mod.default_session().variables.tensors)
    return stored, {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}


@pytest.mark.parametrize("amp, optimizer", [(False, "momentum"), (True, "momentum"), (False, "adam")])
def test_cpu_conv_weights_and_their_optimizer_state_are_stored_channels_last(amp, optimizer, tmp_path, monkeypatch):
    """A channels_first convolution's weight on the CPU (read directly, or through AMP's
    casts) and its optimizer state are stored channels-last, the layout the CPU's
    convolutions compute in; the rest stays contiguous. Values, ``numpy()`` and the
    checkpoint's bytes are those of the contiguous layout: the same training with every
    variable contiguous gives the same values (to float32 rounding: oneDNN may order the
    weight gradient's sums otherwise), and the files hold C-order bytes."""
    stored, values = _conv_job(amp, optimizer=optimizer)
    states = [n for n in stored if n.startswith("c-weight")]
    assert len(states) == (2 if optimizer == "momentum" else 4), states   # (Adam: m, v and max_v)
    for name, t in stored.items():
        if name in states:
            assert t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous(), name
        else:
            assert t.is_contiguous(), name
    flow.checkpoint.save(tmp_path / "ckpt")
    for name in states:
        raw = (tmp_path / "ckpt" / name / "out").read_bytes()
        assert raw == np.ascontiguousarray(values[name]).tobytes(), name
    from graphfront.framework import session as session_mod
    monkeypatch.setattr(session_mod, "cpu_memory_formats", lambda job: {})
    stored_plain, plain = _conv_job(amp, optimizer=optimizer)
    assert all(t.is_contiguous() for t in stored_plain.values())
    # The layouts differ only in the order oneDNN sums the filter gradient's K = 2 * 6 * 6
    # products (which differs between CPUs): at most K * u relative to the sum's norm per
    # step, u = 2**-24, over the 3 steps of a trajectory that does not blow up (learning
    # rate 0.01; elementwise the bound fails on entries near zero)
    bound = 3 * (2 * 6 * 6) * 2.0 ** -24
    for name, value in plain.items():
        assert np.linalg.norm(values[name] - value) <= bound * np.linalg.norm(value), name


def test_an_nhwc_conv_weight_stays_as_declared():
    """An NHWC convolution's weight, (out, k, k, in), is already laid out as the CPU's
    channels-last convolution reads it: stored contiguous, as declared."""
    stored, _ = _conv_job(False, fmt="NHWC")
    assert all(t.is_contiguous() for t in stored.values())
