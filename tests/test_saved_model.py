"""flow.saved_model.ModelBuilder: layout, contents, errors and atomic writes."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from google.protobuf import text_format

import graphfront as flow
from graphfront import saved_model
from graphfront import typing as tp
from graphfront.core import saved_model_pb2

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _define_predict(lbns, batch=4):
    @flow.global_function(type="predict")
    def predict(x: tp.Numpy.Placeholder((batch, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.dense(x, 5, activation=flow.nn.relu, name="fc1",
                                  kernel_initializer=flow.random_normal_initializer())
            flow.watch(h, lambda v: None)
            y = flow.layers.dense(h, 2, name="fc2", kernel_initializer=flow.random_normal_initializer())
        lbns.update(x=x.logical_blob_name, h=h.logical_blob_name, y=y.logical_blob_name)
        return y
    return predict


def _builder(path, predict, lbns, version=1):
    b = flow.saved_model.ModelBuilder(str(path)).ModelName("mlp").Version(version)
    b.AddFunction(predict).AddSignature("regress").Input("x", lbns["x"]).Output("y", lbns["y"])
    return b


def test_layout_and_contents(tmp_path):
    lbns = {}
    predict = _define_predict(lbns)
    predict(np.zeros((4, 3), np.float32))
    variables = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    b = _builder(tmp_path / "m", predict, lbns)
    b.Save()
    assert os.listdir(tmp_path / "m") == ["1"]
    assert sorted(os.listdir(tmp_path / "m" / "1")) == ["saved_model.pb", "saved_model.prototxt", "variables"]
    binary = saved_model_pb2.SavedModel()
    binary.ParseFromString((tmp_path / "m" / "1" / "saved_model.pb").read_bytes())
    text = text_format.Parse((tmp_path / "m" / "1" / "saved_model.prototxt").read_text(),
                             saved_model_pb2.SavedModel())
    assert binary == text == b.proto
    assert (binary.name, binary.version, binary.checkpoint_dir, binary.default_graph_name) == \
        ("mlp", 1, "variables", "predict")
    graph = binary.graphs["predict"]
    assert graph.default_signature_name == "regress"
    # the job as built (before completion), without the watch op of this process
    user_ops = [op for op in predict.compiled_job.user_job.net.op if not op.HasField("foreign_watch_conf")]
    assert list(graph.op_list) == user_ops
    sig = graph.signatures["regress"]
    assert f"{sig.inputs['x'].lbi.op_name}/{sig.inputs['x'].lbi.blob_name}" == lbns["x"]
    assert list(sig.inputs["x"].blob_conf.shape.dim) == [4, 3]
    assert sig.inputs["x"].blob_conf.data_type == flow.float32.proto
    assert sig.inputs["x"].blob_conf.nd_sbp.sbp_parallel[0].split_parallel.axis == 0
    assert f"{sig.outputs['y'].lbi.op_name}/{sig.outputs['y'].lbi.blob_name}" == lbns["y"]
    # the variables, in checkpoint layout, bit for bit
    ckpt = flow.checkpoint.get(tmp_path / "m" / "1" / "variables")
    assert sorted(ckpt) == sorted(variables)
    for name, value in variables.items():
        assert ckpt[name].numpy().tobytes() == value.tobytes()


def test_intermediate_signature_blobs(tmp_path):
    lbns = {}
    predict = _define_predict(lbns)
    predict.compiled_job  # compile: the body records the lbns
    b = flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("mlp").Version(3)
    g = b.AddFunction(predict)
    g.AddSignature("hidden").Input("h_in", lbns["h"]).Output("y", lbns["y"])
    g.AddSignature("features").Input("x", lbns["x"]).Output("h", lbns["h"]).AsDefault()
    b.Save()
    model = saved_model_pb2.SavedModel()
    model.ParseFromString((tmp_path / "m" / "3" / "saved_model.pb").read_bytes())
    graph = model.graphs["predict"]
    assert graph.default_signature_name == "features"
    h_in = graph.signatures["hidden"].inputs["h_in"].blob_conf  # not an input op: from the blob desc
    assert list(h_in.shape.dim) == [4, 5] and h_in.data_type == flow.float32.proto


def test_completed_graph(tmp_path):
    lbns = {}
    predict = _define_predict(lbns)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    want = predict(x)
    completed = predict.compiled_job.job
    (ret,) = [op for op in completed.net.op if op.HasField("return_conf")]
    b = flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("mlp").Version(1)
    b.AddFunction(predict).AddSignature("s").Input("x", lbns["x"]).Output("y", getattr(ret.return_conf, "in"))
    b.Save(save_model_before_graph_complete=False)
    model = saved_model_pb2.SavedModel()
    model.ParseFromString((tmp_path / "m" / "1" / "saved_model.pb").read_bytes())
    assert list(model.graphs["predict"].op_list) == [op for op in completed.net.op
                                                     if not op.HasField("foreign_watch_conf")]
    option = flow.serving.SessionOption()
    option.device_tag = "cpu"
    sess = flow.serving.InferenceSession(option)
    sess.load_saved_model(tmp_path / "m")
    sess.launch()
    assert sess.run("predict", x=x)[0].tobytes() == want.tobytes()
    if lbns["y"] not in completed.helper.lbn2logical_blob_desc:  # e.g. fused away by the cleanup passes
        b = flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("mlp").Version(2)
        b.AddFunction(predict).AddSignature("s").Input("x", lbns["x"]).Output("y", lbns["y"])
        with pytest.raises(ValueError, match=f"output 'y' names blob '{lbns['y']}', which is not in job 'predict'"):
            b.Save(save_model_before_graph_complete=False)


def test_errors(tmp_path):
    lbns = {}
    predict = _define_predict(lbns)
    predict.compiled_job
    with pytest.raises(ValueError, match=r"the version is not set; call .Version\(n\)"):
        flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("m").AddFunction(predict).OwnerModelBuilder().Save()
    with pytest.raises(ValueError, match=r"the model name is not set"):
        flow.saved_model.ModelBuilder(tmp_path / "m").Version(1).Save()
    with pytest.raises(ValueError, match=r"no function was added"):
        flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("m").Version(1).Save()
    with pytest.raises(ValueError, match="Version expects a non-negative int, received '1'"):
        flow.saved_model.ModelBuilder(tmp_path / "m").Version("1")
    b = flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("m").Version(1)
    g = b.AddFunction(predict)
    with pytest.raises(ValueError, match="function 'predict' was already added"):
        b.AddFunction(predict)
    with pytest.raises(TypeError, match="expects a @flow.global_function"):
        b.AddFunction(lambda: None)
    s = g.AddSignature("s")
    with pytest.raises(ValueError, match="graph 'predict' already has a signature named 's'"):
        g.AddSignature("s")
    s.Input("x", lbns["x"])
    with pytest.raises(ValueError, match="signature 's' already has an input named 'x'"):
        s.Input("x", lbns["x"])
    with pytest.raises(ValueError, match=r"lbn must be a logical blob name 'op_name/blob_name'.*received 'fc2'"):
        s.Output("y", "fc2")
    with pytest.raises(ValueError, match=r"name must be a non-empty str without '/'.*received 'a/b'"):
        s.Output("a/b", lbns["y"])
    s.Output("x", lbns["y"])
    with pytest.raises(ValueError, match=r"the name 'x' is used twice: by input 'x' of signature 's' \(graph "
                                         r"'predict'\) and output 'x'"):
        b.Save()
    s2 = flow.saved_model.ModelBuilder(tmp_path / "m").ModelName("m").Version(1)
    s2.AddFunction(predict).AddSignature("s").Input("x", lbns["x"]).Output("y", "nope/out_0")
    with pytest.raises(ValueError, match="output 'y' names blob 'nope/out_0', which is not in job 'predict'"):
        s2.Save()
    assert not os.path.exists(tmp_path / "m" / "1")
    _builder(tmp_path / "m", predict, lbns).Save()
    mtime = os.stat(tmp_path / "m" / "1" / "saved_model.pb").st_mtime_ns
    with pytest.raises(ValueError, match=r"version directory .*m/1' already exists"):
        _builder(tmp_path / "m", predict, lbns).Save()
    assert os.stat(tmp_path / "m" / "1" / "saved_model.pb").st_mtime_ns == mtime
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        _builder(tmp_path / "file", predict, lbns).Save()


def test_failed_save_leaves_nothing(tmp_path, monkeypatch):
    lbns = {}
    predict = _define_predict(lbns)
    predict.compiled_job

    class Crash(Exception):
        pass

    for stage in ("variables_written", "meta_written"):
        def hook(s, **info):
            if s == stage:
                raise Crash(stage)
        monkeypatch.setattr(saved_model, "_test_hook", hook)
        with pytest.raises(Crash):
            _builder(tmp_path / "m", predict, lbns).Save()
        assert os.listdir(tmp_path / "m") == []
    monkeypatch.setattr(saved_model, "_test_hook", lambda s, **info: None)
    _builder(tmp_path / "m", predict, lbns).Save()
    assert os.listdir(tmp_path / "m") == ["1"]


def test_killed_save_leaves_no_version_directory(tmp_path):
    """A process killed (SIGKILL) in the middle of Save leaves only a hidden temporary
    directory, which loaders ignore and the next Save removes."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {REPO_ROOT!r})
        import numpy as np
        import graphfront as flow
        from graphfront import saved_model, typing as tp

        @flow.global_function(type="predict")
        def predict(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                w = flow.get_variable("w", (2, 3), initializer=flow.ones_initializer())
                return x * w

        def hook(stage, **info):
            if stage == "meta_written":
                os.kill(os.getpid(), signal.SIGKILL)
        saved_model._test_hook = hook
        lbn_in = predict.compiled_job.user_job.net.op[0].name + "/out"
        lbn_out = [op for op in predict.compiled_job.user_job.net.op if op.HasField("return_conf")][0]
        b = flow.saved_model.ModelBuilder({str(tmp_path / 'm')!r}).ModelName("m").Version(1)
        b.AddFunction(predict).AddSignature("s").Input("x", lbn_in).Output("y", getattr(lbn_out.return_conf, "in"))
        b.Save()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = os.listdir(tmp_path / "m")
    assert len(left) == 1 and left[0].startswith(".1.saved-model-tmp-")
    with pytest.raises(FileNotFoundError, match="holds no version"):
        flow.serving.InferenceSession().load_saved_model(tmp_path / "m")
    lbns = {}
    predict = _define_predict(lbns)
    predict.compiled_job
    _builder(tmp_path / "m", predict, lbns).Save()
    assert os.listdir(tmp_path / "m") == ["1"]  # the dead process's leftovers are gone
