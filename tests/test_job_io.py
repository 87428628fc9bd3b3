"""graphfront.framework.job_io (flow.experimental.save_job / load_job): Job protos as files."""
import os

import numpy as np
import pytest
from google.protobuf import text_format

import graphfront as flow
from graphfront import typing as tp
from graphfront.core import job_conf_pb2, job_pb2
from graphfront.framework.errors import JobBuildError
from graphfront.framework.job_io import JobFileError, job_from_bytes


def _define_job():
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3, 2), initializer=flow.random_normal_initializer())
            y = flow.math.relu(flow.matmul(x, w))
            loss = flow.math.reduce_sum(y)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return train_job


@pytest.mark.parametrize("fmt", ["binary", "text"])
@pytest.mark.parametrize("completed", [True, False])
def test_round_trip(tmp_path, fmt, completed):
    job = _define_job()
    compiled = job.compiled_job
    want = compiled.job if completed else compiled.user_job
    path = tmp_path / "sub" / ("job.pb" if fmt == "binary" else "job.prototxt")
    flow.experimental.save_job(job, path, format=fmt, completed=completed)
    got = flow.experimental.load_job(path)
    assert got == want
    # a Job proto is accepted too, and the file detection does not depend on the name
    flow.experimental.save_job(want, tmp_path / "noext", format=fmt)
    assert flow.experimental.load_job(tmp_path / "noext") == want
    if completed:  # the completed train job holds backward and update ops
        types = {op.user_conf.op_type_name for op in got.net.op if op.HasField("user_conf")}
        assert {"matmul", "relu", "relu_grad", "sgd_update"} <= types
    assert sorted(os.listdir(tmp_path / "sub")) == [path.name]  # no temporary file left


def test_text_uses_oneflow_field_names(tmp_path):
    job = _define_job()
    flow.experimental.save_job(job, tmp_path / "j.txt", format="text", completed=False)
    text = (tmp_path / "j.txt").read_text()
    for field in ("net {", "op {", "user_conf {", 'op_type_name: "matmul"', "variable_conf {", "input_conf {",
                  "return_conf {", "job_conf {", 'job_name: "train_job"', "train_conf {", "placement {"):
        assert field in text
    assert text == text_format.MessageToString(job.compiled_job.user_job)


def test_save_replaces_atomically_and_validates(tmp_path):
    job = _define_job()
    path = tmp_path / "j.pb"
    path.write_bytes(b"old")
    flow.experimental.save_job(job, path)
    assert flow.experimental.load_job(path) == job.compiled_job.job
    with pytest.raises(ValueError, match="format must be 'binary' or 'text', received 'json'"):
        flow.experimental.save_job(job, path, format="json")
    incomplete = job_pb2.Job()
    incomplete.net.op.add().name = "x"
    with pytest.raises(JobFileError, match="misses required fields: job_conf"):
        flow.experimental.save_job(incomplete, path)
    assert flow.experimental.load_job(path) == job.compiled_job.job  # untouched by the failed saves
    with pytest.raises(TypeError, match="expects a Job proto, a @flow.global_function or a CompiledJob"):
        flow.experimental.save_job("job", path)
    # a path of another type: os.fspath's bare TypeError before
    with pytest.raises(flow.ArgumentError, match="save_job: argument 'path' expects a str or an os.PathLike"):
        flow.experimental.save_job(job, 3)
    with pytest.raises(flow.ArgumentError, match="load_job: argument 'path' expects a str or an os.PathLike"):
        flow.experimental.load_job(None)


def test_bad_files_are_reported(tmp_path):
    with pytest.raises(FileNotFoundError):
        flow.experimental.load_job(tmp_path / "none")
    (tmp_path / "garbage").write_bytes(b"\x1a\xff\xff\xff\xff\x0f\x00\x01")
    with pytest.raises(JobFileError, match="not a valid binary Job proto"):
        flow.experimental.load_job(tmp_path / "garbage")
    (tmp_path / "bad.txt").write_text('job_conf { job_name: "j" predict_conf {} }\nnet { op { name: "a" bogus: 1 } }')
    with pytest.raises(JobFileError, match=r"not a valid Job in protobuf text format: 2:.*bogus"):
        flow.experimental.load_job(tmp_path / "bad.txt")
    job = flow.experimental.load_job(tmp_path / "bad.txt", allow_unknown_field=True)
    assert job.net.op[0].name == "a"
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(JobFileError, match=r"\(text\): the Job misses required fields: job_conf"):
        flow.experimental.load_job(tmp_path / "empty.txt")
    with pytest.raises(JobFileError, match=r"misses required fields: job_conf.job_name"):
        job_from_bytes(b"job_conf { predict_conf {} }")


# A job written by hand in OneFlow's Job text format: an input, a variable, matmul + relu
# user ops with OneFlow's argument names and attr types, and a return op.
ONEFLOW_JOB_TEXT = """
net {
  op {
    name: "x"
    input_conf {
      out: "out"
      blob_conf {
        shape { dim: 2 dim: 3 }
        data_type: kFloat
        is_dynamic: false
        nd_sbp { sbp_parallel { split_parallel { axis: 0 } } }
      }
    }
  }
  op {
    name: "fc-weight"
    variable_conf {
      out: "out"
      shape { dim: 3 dim: 4 }
      data_type: kFloat
      initializer { constant_conf { value: 0.0 } }
    }
  }
  op {
    name: "fc-matmul"
    user_conf {
      op_type_name: "matmul"
      input { key: "a" value { s: "x/out" } }
      input { key: "b" value { s: "fc-weight/out" } }
      output { key: "out" value { s: "fc-matmul/out_0" } }
      attr { key: "transpose_a" value { at_bool: false } }
      attr { key: "transpose_b" value { at_bool: false } }
      attr { key: "alpha" value { at_double: 1.0 } }
    }
  }
  op {
    name: "fc-relu"
    user_conf {
      op_type_name: "relu"
      input { key: "x" value { s: "fc-matmul/out_0" } }
      output { key: "y" value { s: "fc-relu/y_0" } }
    }
  }
  op {
    name: "Return_0"
    return_conf { in: "fc-relu/y_0" out: "out" }
  }
}
job_conf {
  job_name: "mlp"
  predict_conf {}
}
"""


def _serve_text(tmp_path, text, signature=None):
    (tmp_path / "mlp.prototxt").write_text(text)
    w = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    flow.checkpoint.save(tmp_path / "ckpt", {"fc-weight": w})
    option = flow.serving.SessionOption()
    option.device_tag = "cpu"
    sess = flow.serving.InferenceSession(option)
    sess.load_job(tmp_path / "mlp.prototxt", signature=signature)
    sess.set_checkpoint_path(tmp_path / "ckpt")
    sess.launch()
    return sess, w


def test_handwritten_oneflow_job_text_runs_in_an_inference_session(tmp_path):
    sess, w = _serve_text(tmp_path, ONEFLOW_JOB_TEXT)
    assert sess.list_jobs() == ["mlp"]
    assert sess.list_inputs() == ("x",) and sess.list_outputs() == ("Return_0",)
    assert sess.input_info("x") == dict(shape=(2, 3), dtype=flow.float32)
    assert sess.output_info("Return_0") == dict(shape=(2, 4), dtype=flow.float32)
    x = np.array([[1, -2, 3], [0.5, 0.25, -1]], np.float32)
    (y,) = sess.run("mlp", x=x)
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-6)
    types = [op.user_conf.op_type_name for op in sess.job("mlp").job.net.op if op.HasField("user_conf")]
    assert types == ["matmul", "relu"]
    sess.close()


def test_handwritten_job_with_signature(tmp_path):
    sig = text_format.Parse("""
        inputs { key: "features" value { lbi { op_name: "x" blob_name: "out" }
                 blob_conf { shape { dim: 2 dim: 3 } data_type: kFloat } } }
        outputs { key: "activations" value { lbi { op_name: "fc-relu" blob_name: "y_0" } } }
        outputs { key: "pre" value { lbi { op_name: "fc-matmul" blob_name: "out_0" } } }
    """, job_conf_pb2.JobSignatureDef())
    sess, w = _serve_text(tmp_path, ONEFLOW_JOB_TEXT, signature=sig)
    assert sess.list_inputs() == ("features",)
    assert sess.list_outputs() == ("activations", "pre")
    x = np.array([[1, -2, 3], [0.5, 0.25, -1]], np.float32)
    act, pre = sess.run("mlp", features=x)
    np.testing.assert_allclose(pre, x @ w, rtol=1e-6)
    np.testing.assert_allclose(act, np.maximum(x @ w, 0), rtol=1e-6)
    names = [op.name for op in sess.job("mlp").user_job.net.op]
    assert names == ["features", "fc-weight", "fc-matmul", "fc-relu", "activations", "pre"]


def test_handwritten_job_errors_name_the_op(tmp_path):
    bad_attr = ONEFLOW_JOB_TEXT.replace("at_double: 1.0", "at_float: 1.0")
    with pytest.raises(JobBuildError, match=r"op 'fc-matmul' \(matmul\): attr 'alpha' expects type double, "
                                            r"received an AttrValue of type float"):
        _serve_text(tmp_path, bad_attr)
    bad_shape = ONEFLOW_JOB_TEXT.replace("shape { dim: 3 dim: 4 }", "shape { dim: 5 dim: 4 }")
    with pytest.raises(JobBuildError, match=r"job file .*mlp.prototxt.*op 'fc-matmul' \(matmul\)"):
        _serve_text(tmp_path, bad_shape)


def test_signature_names_must_not_collide_with_ops(tmp_path):
    sig = text_format.Parse("""
        inputs { key: "fc-relu" value { lbi { op_name: "x" blob_name: "out" }
                 blob_conf { shape { dim: 2 dim: 3 } data_type: kFloat } } }
        outputs { key: "y" value { lbi { op_name: "fc-relu" blob_name: "y_0" } } }
    """, job_conf_pb2.JobSignatureDef())
    with pytest.raises(ValueError, match="signature name 'fc-relu' is also the name of an op of the job"):
        _serve_text(tmp_path, ONEFLOW_JOB_TEXT, signature=sig)
    sig.outputs["y"].lbi.op_name = "missing"
    del sig.inputs["fc-relu"]
    with pytest.raises(ValueError, match="signature output 'y' names blob 'missing/y_0', which no op of the job "
                                         "produces"):
        _serve_text(tmp_path, ONEFLOW_JOB_TEXT, signature=sig)
