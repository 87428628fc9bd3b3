"""flow.tensor_to_tensor_buffer / tensor_buffer_to_tensor / gen_tensor_buffer /
tensor_buffer_to_list_of_tensors: OneFlow's own programs, round trips against numpy,
dynamic blobs, OFRecord byte strings, constant folding, several devices and the errors."""
import typing

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.ofrecord import OFRecord, ShardWriter, bytes_feature


def _mirrored():
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.mirrored_view())
    config.default_data_type(flow.float)
    return config


@pytest.mark.parametrize("shape", [(2, 2), (4,)])
@pytest.mark.parametrize("data_type", ["int32", "int64", "float32", "double"])
def test_oneflow_gen_tensor_buffer_program(shape, data_type):
    """OneFlow v0.6.0's test_tensor_buffer_to_list_of_tensors, imports changed."""
    shape_list = [(10, 10), (50, 50), (20, 80), (100, 100)]
    value_list = [0.0, 1.0, 2.0, 3.0]
    dtype = getattr(flow, data_type)
    flow.clear_default_session()

    @flow.global_function(function_config=_mirrored())
    def TestTensorBufferToListOfTensorsJob():
        with flow.scope.placement("cpu", "0:0"):
            x = flow.gen_tensor_buffer(shape, shape_list, value_list, dtype)
            return flow.tensor_buffer_to_list_of_tensors(x, (100, 100), dtype, True)

    outs = TestTensorBufferToListOfTensorsJob().get()
    assert len(outs) == 4
    for out, s, v in zip(outs, shape_list, value_list):
        got = out.numpy_list()[0]
        assert got.dtype == flow.convert_oneflow_dtype_to_numpy_dtype(dtype)
        np.testing.assert_array_equal(got, np.full(s, v))


def test_docstring_round_trip_and_names():
    flow.clear_default_session()
    seen = {}

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder(shape=(4, 16, 8, 8), dtype=flow.float32)) -> tp.Numpy:
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=2)
        seen.update(shape=buf.shape, dtype=buf.dtype, name=buf.op_name, device=buf.parallel_conf.device_tag)
        return flow.tensor_buffer_to_tensor(buf, instance_shape=(8, 8), dtype=flow.float)

    x = np.random.default_rng(0).standard_normal((4, 16, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(job(x), x)
    assert seen["shape"] == (4, 16) and seen["dtype"] is flow.tensor_buffer
    assert seen["name"].startswith("TensorToTensorBuffer_") and seen["device"] == "cpu"


@pytest.mark.parametrize("instance_dims", [0, 1, 2])
def test_dynamic_round_trip(instance_dims):
    """A mirrored ListNumpy blob smaller than its static shape keeps its run-time shape."""
    flow.clear_default_session()

    @flow.global_function(function_config=_mirrored())
    def job(x: tp.ListNumpy.Placeholder((4, 3, 5), dtype=flow.int32)) -> tp.ListNumpy:
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=instance_dims)
        assert buf.is_dynamic
        return flow.tensor_buffer_to_tensor(buf, flow.int32, (3, 5)[2 - instance_dims:])

    shape = (2, 3 if instance_dims == 2 else 2, 5)  # the instance axes keep their static size
    x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    (out,) = job([x])
    np.testing.assert_array_equal(out, x)


def test_ofrecord_byte_strings_unpacked_in_their_own_lengths(tmp_path):
    """Variable-length byte features decoded into a tensor_buffer, one dynamic blob each."""
    payloads = [b"graphfront", b"", b"tensor buffer", b"x"]
    with ShardWriter(str(tmp_path), len(payloads), 1) as writer:
        for p in payloads:
            writer.write(OFRecord(feature={"text": bytes_feature(p)}))
    flow.clear_default_session()

    @flow.global_function(function_config=_mirrored())
    def job() -> tp.Bundle[tp.ListNumpy]:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=len(payloads), data_part_num=1)
        buf = flow.data.OFRecordBytesDecoder(rec, "text")
        return flow.tensor_buffer_to_list_of_tensors(buf, (16,), flow.uint8, dynamic_out=True)

    outs = job()
    assert [bytes(o[0]) for o in outs] == payloads


def test_constant_inputs_fold_around_buffers():
    """A constant packed into buffers: the dense results fold, the buffers stay host values;
    a dynamic blob computed from constants (argwhere) keeps its run-time shape."""
    flow.clear_default_session()

    @flow.global_function()
    def job() -> tp.Bundle[tp.ListNumpy]:
        k = flow.constant(2.0, shape=(3, 4), dtype=flow.float)
        buf = flow.tensor_to_tensor_buffer(k, instance_dims=1)
        return [flow.tensor_buffer_to_tensor(buf, flow.float, (4,)),
                flow.tensor_buffer_to_list_of_tensors(buf, (5,), flow.float, dynamic_out=True)[2],
                flow.argwhere(flow.constant(0.0, shape=(3, 4), dtype=flow.float))]

    dense, piece, where = job()
    np.testing.assert_array_equal(dense[0], np.full((3, 4), 2.0, np.float32))
    np.testing.assert_array_equal(piece[0], np.full((4,), 2.0, np.float32))
    assert where[0].shape == (0, 2)


def _build(body):
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float32)) -> tp.Numpy:
        return body(x)
    return job


@pytest.mark.parametrize("body, message", [
    (lambda x: flow.tensor_buffer_to_tensor(flow.tensor_to_tensor_buffer(x, instance_dims=2), flow.float, ()),
     r"attr 'instance_dims' must be in \[0, 2\) for input 'in' of shape \(2, 3\), received 2"),
    (lambda x: flow.tensor_buffer_to_tensor(x, flow.float, (3,)), "input 'in' must be a tensor_buffer blob"),
    (lambda x: flow.tensor_buffer_to_tensor(flow.gen_tensor_buffer((2,), [(1,)], [1.0]), flow.float, (1,)),
     r"'shape_list' and 'value_list' must hold one entry per element of shape \(2,\) \(2\), received 1 and 1"),
    (lambda x: flow.tensor_buffer_to_tensor(flow.gen_tensor_buffer((1,), [(1,)], [1.0], flow.int8), flow.int8, (1,)),
     "attr 'data_type' must be one of"),
    (lambda x: flow.tensor_buffer_to_list_of_tensors(
        flow.gen_tensor_buffer((1,), [(1,)], [1.0], dynamic_out=True), (1,), flow.float)[0],
     "input 'in' must be a static tensor_buffer blob"),
])
def test_build_errors_name_the_attr(body, message):
    with pytest.raises(flow.JobBuildError, match=message):
        _build(body)(np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("body, message", [
    (lambda x: flow.tensor_buffer_to_tensor(flow.tensor_to_tensor_buffer(x, 1), flow.float, (2,)),
     r"tensor buffer 0 is float32 \(3,\), expected float32 \(2,\)"),
    (lambda x: flow.tensor_buffer_to_tensor(flow.tensor_to_tensor_buffer(x, 1), flow.double, (3,)),
     r"tensor buffer 0 is float32 \(3,\), expected float64 \(3,\)"),
    (lambda x: flow.tensor_buffer_to_list_of_tensors(flow.tensor_to_tensor_buffer(x, 1), (2,), flow.float, True)[1],
     r"tensor buffer 0 has shape \(3,\), which does not fit the maximum shape \(2,\)"),
    (lambda x: flow.tensor_buffer_to_list_of_tensors(flow.tensor_to_tensor_buffer(x, 1), (4,), flow.float)[0],
     r"tensor buffer 0 has shape \(3,\) \(3 elements\), expected \(4,\) \(4 elements\)"),
    (lambda x: flow.tensor_buffer_to_list_of_tensors(flow.tensor_to_tensor_buffer(x, 1), (3,), flow.int32)[0],
     "tensor buffer 0 holds float32, expected int32"),
])
def test_run_time_errors_name_the_op_and_buffer(body, message):
    job = _build(body)
    with pytest.raises(ValueError, match=message) as info:
        job(np.zeros((2, 3), np.float32))
    assert "op 'Tensor" in str(info.value)


def _consistent_on_two_devices(eager):
    flow.clear_default_session()
    flow.enable_eager_execution(eager)
    flow.config.cpu_device_num(2)
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.consistent_view())
    return config


@pytest.mark.parametrize("eager", [False, True])
def test_buffers_on_two_devices_follow_the_placement_and_are_gathered_whole(eager):
    """On "0:0-1" the buffers of a (4, 2) tensor_buffer blob are split by rows over the two
    devices (the ops follow the enclosing placement, as in OneFlow); the list of tensors,
    one blob per buffer, needs them whole: the devices' rows are gathered back in order."""
    config = _consistent_on_two_devices(eager)
    placed = {}

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 2, 3))) -> typing.Tuple[(tp.Numpy,) * 8 + (tp.Numpy,)]:
        with flow.scope.placement("cpu", "0:0-1"):
            buf = flow.tensor_to_tensor_buffer(x, instance_dims=1)
            placed["devices"] = list(buf.parallel_conf.device_name)
            parts = flow.tensor_buffer_to_list_of_tensors(buf, (3,), flow.float)
            return tuple(parts) + (flow.tensor_buffer_to_tensor(buf, flow.float, (3,)),)

    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    *parts, whole = job(x)
    assert placed["devices"] == ["0:0-1"]
    np.testing.assert_array_equal(np.stack(parts), x.reshape(8, 3))
    np.testing.assert_array_equal(whole, x)


def test_records_move_between_placements_as_host_values(tmp_path):
    """A reader's records split over "0:0-1", decoded on "0:0": the records cross the
    placements as objects (gathered in device order), not as tensors."""
    with ShardWriter(str(tmp_path), num_records=4, data_part_num=2) as w:
        for i in (0, 1, 10, 11):
            w.write(OFRecord(feature={"id": bytes_feature(bytes([i]))}))
    config = _consistent_on_two_devices(False)

    @flow.global_function(function_config=config)
    def job() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=4, data_part_num=2)
        with flow.scope.placement("cpu", "0:0"):
            return flow.data.OFRecordRawDecoder(rec, "id", shape=(1,), dtype=flow.uint8)

    np.testing.assert_array_equal(job().reshape(-1), [0, 1, 10, 11])
