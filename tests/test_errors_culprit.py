"""Every bad argument or fed value raises a graphfront error that names the op or argument,
what was expected and what was received, and points at the user's own line."""
import errno
import inspect
import os

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import checkpoint_io


def _line_of(marker):
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, ln in enumerate(lines) if marker in ln and "_line_of" not in ln)


def _expect(error, marker, *parts):
    """The raised error is a graphfront error whose message holds ``parts`` and the marked line."""
    msg = str(error.value)
    assert isinstance(error.value, flow.GraphfrontError), (type(error.value), msg)
    for p in parts:
        assert p in msg, (p, msg)
    assert f"{__file__}:{_line_of(marker)}" in msg, msg


def _build(body, shape=(1, 3, 8, 8), type="predict"):
    """Compile a one-input job whose body is ``body(x)`` and call it once."""
    flow.clear_default_session()

    @flow.global_function(type=type)
    def job(x: tp.Numpy.Placeholder(shape)) -> tp.Numpy:
        return body(x)
    return job(np.ones(shape, np.float32))


def _placed(x, device_ids):
    with flow.scope.placement("cpu", device_ids):
        return flow.math.relu(x)


def _in_namespace(x, name):
    with flow.scope.namespace(name):
        return flow.math.relu(x)


def _w():
    return flow.get_variable("w", (4, 3, 3, 3), initializer=flow.zeros_initializer())


@pytest.mark.parametrize("kwargs, arg, received", [
    ({"strides": 0}, "strides", "received 0"),
    ({"strides": 1, "dilations": 0}, "dilations", "received 0"),
    ({"strides": (1, -1)}, "strides", "received (1, -1)"),
])
def test_conv_strides_and_dilations_must_be_positive(kwargs, arg, received):
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.nn.conv2d(x, _w(), padding="SAME", **kwargs))  # MARK-conv-args
    _expect(e, "MARK-conv-args", f"conv2d: argument '{arg}'", "int >= 1", received)


def test_conv_op_rejects_zero_stride_attr_from_the_op_builder():
    def body(x):
        return (flow.user_op_builder("c").Op("conv2d").Input("in", [x]).Input("weight", [_w()]).Output("out")
                .Attr("filters", 4).Attr("padding_before", [0, 0]).Attr("data_format", "channels_first")
                .Attr("kernel_size", [3, 3]).Attr("strides", [0, 1]).Attr("dilation_rate", [1, 1])
                .Build().InferAndTryRun().RemoteBlobList()[0])  # MARK-conv-builder
    with pytest.raises(flow.JobBuildError) as e:
        _build(body)
    _expect(e, "MARK-conv-builder", "op 'c' (conv2d)", "attr 'strides'", ">= 1", "[0, 1]")


@pytest.mark.parametrize("scale", [-1.0, float("inf"), 0.0])
def test_variance_scaling_scale_must_be_positive_finite(scale):
    with pytest.raises(flow.JobBuildError) as e:
        flow.variance_scaling_initializer(scale=scale)  # MARK-vs
    _expect(e, "MARK-vs", "variance_scaling_initializer: scale", "positive finite", repr(scale))


def test_negative_variable_dim_names_the_variable():
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: x + flow.get_variable("v", (-1, 3), initializer=flow.zeros_initializer()))  # MARK-var
    _expect(e, "MARK-var", "get_variable 'v'", "positive", "(-1, 3)")


@pytest.mark.parametrize("kind", ["Numpy", "ListNumpy"])
@pytest.mark.parametrize("shape", [(0, 3), (-2, 3)])
def test_placeholder_dims_must_be_positive(kind, shape):
    with pytest.raises(flow.JobBuildError) as e:
        getattr(tp, kind).Placeholder(shape)  # MARK-ph
    _expect(e, "MARK-ph", f"{kind}.Placeholder: shape", "positive ints", repr(shape))


def test_out_of_range_label_at_run_time_names_the_op():
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 10)), y: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> tp.Numpy:
        return flow.nn.sparse_softmax_cross_entropy_with_logits(y, x, name="sce")

    x = np.zeros((2, 10), np.float32)
    assert job(x, np.array([1, 9], np.int32)).shape == (2,)
    with pytest.raises(RuntimeError) as e:
        job(x, np.array([1, 99], np.int32))  # MARK-label
    _expect(e, "MARK-label", "op 'sce' (sparse_softmax_cross_entropy)", "input 'label'", "[0, 10)",
            "received 99 at index (1,)")
    np.testing.assert_allclose(job(x, np.array([3, 0], np.int32)), np.log(10.0), rtol=1e-6)  # session still usable


def test_out_of_range_label_in_the_grad_kernel_names_the_grad_op():
    flow.clear_default_session()

    @flow.global_function(type="train")
    def job(y: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> tp.Numpy:
        x = flow.get_variable("x", (2, 10), initializer=flow.zeros_initializer())
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, x, name="sce")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    with pytest.raises(RuntimeError) as e:
        job(np.array([-1, 2], np.int32))  # MARK-label-grad
    _expect(e, "MARK-label-grad", "(sparse_softmax_cross_entropy", "input 'label'", "received -1 at index (0,)")


@pytest.mark.parametrize("axis", [9, -5, 1.0])
def test_softmax_axis_out_of_range(axis):
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.nn.softmax(x, axis=axis))  # MARK-softmax
    _expect(e, "MARK-softmax", "flow.nn.softmax: axis", "[-4, 4)", f"received {axis!r}")


def test_softmax_on_a_middle_axis_still_works():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    flow.clear_default_session()

    @flow.global_function()
    def job(b: tp.Numpy.Placeholder((2, 3, 4))) -> tp.Numpy:
        return flow.nn.softmax(b, axis=1)
    got = job(x)
    np.testing.assert_allclose(got, torch.softmax(torch.from_numpy(x), 1).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["XYZW", "NCHWX", "channels_middle"])
def test_layers_conv2d_rejects_unknown_data_format(fmt):
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.layers.conv2d(x, 4, 3, data_format=fmt, name="c1"))  # MARK-fmt
    _expect(e, "MARK-fmt", "layers.conv2d 'c1': argument 'data_format'", "'NCHW'", f"received {fmt!r}")


def test_nn_conv2d_and_pool_reject_unknown_data_format():
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.nn.max_pool2d(x, 2, 2, "VALID", data_format="HWNC"))  # MARK-poolfmt
    _expect(e, "MARK-poolfmt", "max_pool2d: argument 'data_format'", "received 'HWNC'")


def test_int32_attr_out_of_range():
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.nn.conv2d(x, _w(), 1, "VALID", groups=2 ** 40))  # MARK-int32
    _expect(e, "MARK-int32", "attr 'groups'", "int32 in [-2147483648, 2147483647]", f"received {2 ** 40}")


def test_list_int32_attr_out_of_range():
    def body(x):
        return (flow.user_op_builder("t").Op("transpose").Input("input", [x]).Output("output")
                .Attr("perm", [0, 2 ** 33, 1, 2]).Build().InferAndTryRun().RemoteBlobList()[0])  # MARK-list32
    with pytest.raises(flow.JobBuildError) as e:
        _build(body)
    _expect(e, "MARK-list32", "op 't'", "attr 'perm'", "int32 in", f"received {2 ** 33}")


# every API wrapper argument error: a JobBuildError (still a ValueError / TypeError) at the user's line
@pytest.mark.parametrize("body, parts", [
    (lambda x: flow.math.reduce_sum(x, axis=7), ["flow.math.reduce_sum: axis 7", "(1, 3, 8, 8)"]),
    (lambda x: flow.reshape(x, (-1, -1)), ["flow.reshape: shape (-1, -1)", "at most one -1"]),
    (lambda x: flow.split(x, 5, axis=1), ["flow.split: dim 1", "5 equal parts"]),
    (lambda x: flow.slice(x, [0, 0, 0, 0], [1, 1, 1]), ["flow.slice: begin", "need 4 entries"]),
    (lambda x: flow.expand_dims(x, 9), ["flow.expand_dims: axis 9", "[-5, 4]"]),
    (lambda x: flow.nn.max_pool2d(x, 2, 2, "FULL"), ["max_pool2d: padding", "received 'FULL'"]),
    (lambda x: flow.nn.max_pool2d(x, 0, 2, "VALID"), ["max_pool2d: argument 'ksize'", "received 0"]),
    (lambda x: flow.cast(x, "float32"), ["flow.cast: argument 'dtype'", "received 'float32'"]),
    (lambda x: flow.cast(x, np.float32), ["flow.cast: argument 'dtype'", "numpy.float32"]),
    # values of the wrong type, which reached int(), float() or len() inside the wrappers
    (lambda x: flow.math.reduce_sum(x, axis=2.5), ["flow.math.reduce_sum: argument 'axis' expects an int or a list",
                                                   "received float 2.5"]),
    (lambda x: flow.math.tril(x, diagonal="1"), ["flow.math.tril: argument 'diagonal' expects an int",
                                                 "received str '1'"]),
    (lambda x: flow.nn.dropout(x, rate="0.5"), ["flow.nn.dropout: argument 'rate' expects a number"]),
    (lambda x: flow.nn.random_mask_like(x, 0.5, seed="7"), ["flow.nn.random_mask_like: argument 'seed' expects an "
                                                            "int", "received str '7'"]),
    (lambda x: flow.nn.fused_scale_tril_softmax_dropout(x, fill_value="-inf"),
     ["fused_scale_tril_softmax_dropout: argument 'fill_value' expects a number", "received str '-inf'"]),
    (lambda x: flow.matmul(x, x, alpha="2"), ["flow.matmul: argument 'alpha' expects a number"]),
    (lambda x: flow.pad(x, 1), ["flow.pad: paddings expects a list of 4 (before, after) pairs", "received int 1"]),
    (lambda x: flow.reshape(x, 192), ["flow.reshape: argument 'shape' expects a list or tuple", "received int 192"]),
    (lambda x: flow.nn.max_pool2d(x, 2, 2, 1), ["max_pool2d: argument 'padding' expects a string or a list",
                                                "received int 1"]),
    (lambda x: flow.nn.conv2d(x, 4, 1, "SAME"), ["conv2d: argument 'filters' expects a blob", "received int 4"]),
    (lambda x: flow.nn.conv2d(x, _w(), 1, [0, 0, (1, "a"), 1]), ["conv2d: each entry of argument 'padding'",
                                                               "received (1, 'a')"]),
    (lambda x: flow.layers.upsample_2d(x, size=2.0), ["upsample_2d 'Upsample2D': size must be", "received (2.0,)"]),
    (lambda x: flow.layers.upsample_2d(x, data_format=1), ["upsample_2d 'Upsample2D': data_format", "received 1"]),
    (lambda x: flow.parallel_cast(x, gradient_distribute="S(0)"),
     ["flow.parallel_cast: argument 'gradient_distribute' expects a distribute policy", "received str 'S(0)'"]),
    (lambda x: flow.slice(x, 0, [1, 1, 1, 1]), ["flow.slice: begin 0 and size [1, 1, 1, 1] need 4 entries"]),
    (lambda x: flow.nn.moments(x, 1.0), ["flow.nn.moments: axes expects a list of ints", "received 1.0"]),
    (lambda x: flow.get_variable("v", (2,), initializer="zeros"),
     ["get_variable 'v': argument 'initializer' expects an InitializerConf", "received str 'zeros'"]),
    (lambda x: flow.get_variable("v", (2,), regularizer=0.1),
     ["get_variable 'v': argument 'regularizer' expects a RegularizerConf", "received float 0.1"]),
    (lambda x: flow.get_variable("v", (2,), dtype=np.float32),
     ["get_variable 'v': argument 'dtype' expects a graphfront dtype", "numpy.float32"]),
    (lambda x: flow.get_variable(3, (2,)), ["flow.get_variable: argument 'name' expects a non-empty str"]),
    (lambda x: flow.layers.batch_normalization(x, momentum="0.9"),
     ["batch_normalization 'BatchNorm': argument 'momentum' expects a number", "received str '0.9'"]),
    (lambda x: flow.layers.batch_normalization_add_relu(x, addend=1.0),
     ["batch_normalization_add_relu 'BatchNorm': argument 'addend' expects a blob", "received float 1.0"]),
    (lambda x: flow.layers.layer_norm(x, epsilon=None),
     ["layer_norm 'LayerNorm': argument 'epsilon' expects a number"]),
    (lambda x: flow.layers.prelu(x, shared_axes=2), ["layers.prelu 'PRelu': shared_axes must be a list", "received 2"]),
    (lambda x: flow.layers.conv2d(x, 4, 3, groups=1.5), ["layers.conv2d 'Conv2d': argument 'groups'",
                                                         "received 1.5"]),
    (lambda x: flow.layers.dense(flow.reshape(x, (1, 192)), 4, activation="relu"),
     ["layers.dense 'Dense': activation must be a function", "received str 'relu'"]),
    # a placement on a reversed range counted -1 devices; an int or None reached list()
    (lambda x: _placed(x, "0:3-1"), ["flow.scope.placement: the device range '0:3-1' ends before it starts"]),
    (lambda x: _placed(x, 0), ["flow.scope.placement: machine_device_ids expects a string", "received int 0"]),
    (lambda x: _in_namespace(x, 3), ["flow.scope.namespace expects a non-empty str, received 3"]),
    # a FunctionConfig of another type was accepted and failed at the first call; a non-function, __name__
    (lambda x: flow.global_function(function_config=3),
     ["global_function: function_config must be a flow.FunctionConfig, received int 3"]),
    (lambda x: flow.global_function()(3), ["global_function decorates a function, received int 3"]),
    (lambda x: flow.math.l2_normalize(x, axis=1, epsilon="1e-12"),
     ["flow.math.l2_normalize: argument 'epsilon' expects a number", "received str '1e-12'"]),
    # list()'s and range()'s TypeErrors; a str shape or a float dim was read digit by digit or truncated
    (lambda x: flow.data.decode_random(3, flow.float32, batch_size=2),
     ["flow.data.decode_random: argument 'shape' expects a list or tuple of ints", "received int 3"]),
    (lambda x: flow.data.decode_random((2.5,), flow.float32, batch_size=2),
     ["flow.data.decode_random: argument 'shape' expects an int", "received float 2.5"]),
    (lambda x: flow.data.decode_random((3,), flow.float32, batch_size="2"),
     ["flow.data.decode_random: argument 'batch_size' expects an int", "received str '2'"]),
])
def test_api_wrapper_argument_errors_point_at_the_user(body, parts):
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: body(x))  # MARK-api
    assert isinstance(e.value, (ValueError, TypeError))
    # the user's line is the innermost frame outside graphfront: the lambda in the parametrize list
    msg = str(e.value)
    for p in parts:
        assert p in msg, (p, msg)
    assert f"\n  at {__file__}:" in msg, msg


@pytest.mark.parametrize("rate", [1.0, 1.5, -0.1])
def test_dropout_rate_outside_unit_interval(rate):
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.nn.dropout(x, rate=rate), type="train")  # MARK-dropout
    _expect(e, "MARK-dropout", "flow.nn.dropout: argument 'rate' must be in [0, 1)", f"received {rate}")


def test_list_numpy_part_bounded_by_the_element_count():
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.ListNumpy.Placeholder((8, 6))) -> tp.ListNumpy:
        return flow.math.relu(x)

    assert job([np.ones((5, 6), np.float32)])[0].shape == (5, 6)
    assert job([np.ones((12, 4), np.float32)])[0].shape == (12, 4)  # 48 elements: OneFlow's capacity check
    with pytest.raises(flow.FeedError) as e:
        job([np.ones((12, 5), np.float32)])  # MARK-listnumpy
    _expect(e, "MARK-listnumpy", "argument 'x'", "rank 2 and at most 48 elements (maximum shape (8, 6))",
            "received (12, 5)")
    assert job([np.ones((8, 1), np.float32)])[0].shape == (8, 1)


def test_disk_full_checkpoint_save_names_the_path(tmp_path, monkeypatch):
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + flow.get_variable("v", (2,), initializer=flow.ones_initializer())

    job(np.zeros(2, np.float32))
    target = str(tmp_path / "ckpt")

    class FullDisk:  # a file whose every write fails as on a full disk
        def __init__(self, *args):
            self.f = open(*args)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(checkpoint_io, "open", FullDisk, raising=False)  # the module's open() for data files
    with pytest.raises(flow.GraphfrontError) as e:
        flow.checkpoint.save(target)
    assert repr(target) in str(e.value) and "No space left on device" in str(e.value)
    monkeypatch.undo()
    assert not os.path.exists(target) and os.listdir(tmp_path) == []
    flow.checkpoint.save(target)
    assert sorted(os.listdir(target)) == ["snapshot_done", "v"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when CUDA is missing")
def test_gpu_default_placement_without_cuda_matches_placement_message(monkeypatch):
    monkeypatch.setattr(flow.parallel.placement, "GPU_FALLBACK", [False])  # (by default "gpu" runs on the CPU)
    with pytest.raises(flow.JobBuildError) as inside:
        _build(lambda x: _gpu_relu(x))
    flow.clear_default_session()
    cfg = flow.FunctionConfig()
    cfg.default_placement_scope(flow.scope.placement("gpu", "0:0"))

    @flow.global_function(function_config=cfg)
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.relu(x)
    with pytest.raises(flow.JobBuildError) as e:
        job(np.ones(2, np.float32))  # MARK-gpu
    head = str(inside.value).split("\n  at ")[0]
    assert 'placement("gpu", ...): CUDA is not available' in head
    _expect(e, "MARK-gpu", head)


def _gpu_relu(x):
    with flow.scope.placement("gpu", "0:0"):
        return flow.math.relu(x)


def test_pool_argument_errors_name_the_op():
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: flow.nn.max_pool2d(x, ksize=0, strides=1, padding="VALID", name="mp0"))  # MARK-named-maxpool
    _expect(e, "MARK-named-maxpool", "max_pool2d 'mp0': argument 'ksize'", "int >= 1", "received 0")


def test_job_file_input_with_a_zero_dim_names_the_input(tmp_path):
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.math.relu(x)

    flow.experimental.save_job(job, tmp_path / "job.pb")
    proto = flow.experimental.load_job(tmp_path / "job.pb")
    (op,) = [op for op in proto.net.op if op.HasField("input_conf")]
    op.input_conf.blob_conf.shape.dim[0] = 0
    flow.experimental.save_job(proto, tmp_path / "zero.pb")
    with flow.serving.InferenceSession() as sess, pytest.raises(flow.GraphfrontError) as e:
        sess.load_job(str(tmp_path / "zero.pb"))  # MARK-zero-input
    _expect(e, "MARK-zero-input", f"input '{op.name}' has shape (0, 3)", "each positive")


def test_variable_the_allocator_cannot_provide_names_variable_shape_and_bytes(monkeypatch):
    # past the build-time check (as when the memory free at build time is gone at run time)
    from graphfront.framework import job_builder
    monkeypatch.setattr(job_builder, "available_memory", lambda device: None)
    shape = (2 ** 46,)   # 256 TiB of float32: no allocator provides it
    with pytest.raises(flow.JobBuildError) as e:
        _build(lambda x: x + flow.math.reduce_sum(
            flow.get_variable("huge", shape, initializer=flow.zeros_initializer())))  # MARK-huge
    msg = str(e.value)
    assert f"variable 'huge' of shape {shape} and dtype float32 needs {4 * 2 ** 46:,} bytes" in msg, msg
    assert "could not provide" in msg and "DefaultCPUAllocator" not in msg, msg
    # the session stays usable: the next job builds and runs
    np.testing.assert_array_equal(_build(lambda x: x * 2.0, shape=(2, 2)), np.full((2, 2), 2.0, np.float32))
