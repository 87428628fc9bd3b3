"""OneFlow single-client job API that older programs and OneFlow's own tests use:
placeholders declared as parameter defaults (flow.FixedTensorDef / flow.MirroredTensorDef),
FunctionConfig.default_distribute_strategy and flow.keras.activations (OneFlow up to v0.5),
flow.experimental.unittest and flow.deprecated, the scope and symbol API, FunctionConfig's
enable_ssp, user-op modules (flow.experimental.custom_op_module)."""
import numpy as np
import pytest

import graphfront as flow


def _ccrelu(x, name):
    return (flow.user_op_builder(name).Op("ccrelu").Input("in", [x]).Output("out").Build()
            .InferAndTryRun().RemoteBlobList()[0])


# ------------------------------------------------------------------ FixedTensorDef / MirroredTensorDef

def test_fixed_tensor_def_default_declares_a_static_input():
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.consistent_view())

    @flow.global_function(function_config=config)
    def relu_job(a=flow.FixedTensorDef((5, 2))):
        return _ccrelu(a, "my_cc_relu_op")

    x = np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32)
    np.testing.assert_array_equal(relu_job(x).get().numpy(), np.maximum(x, 0))
    with pytest.raises(flow.FeedError, match="relu_job"):
        relu_job(np.zeros((4, 2), np.float32))  # a static input takes exactly its shape


def test_fixed_tensor_def_dtype_is_the_input_dtype():
    @flow.global_function()
    def add_one(a=flow.FixedTensorDef([3], dtype=flow.int32)):
        return a + 1

    x = np.array([1, -2, 7], np.int32)
    got = add_one(x).get().numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, x + 1)


def test_mirrored_tensor_def_default_declares_a_list_input():
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.mirrored_view())

    @flow.global_function(function_config=config)
    def relu_job(a=flow.MirroredTensorDef((5, 2))):
        return _ccrelu(a, "my_cc_relu_op")

    x = np.random.default_rng(1).standard_normal((3, 1)).astype(np.float32)  # smaller than the maximum shape
    np.testing.assert_array_equal(relu_job([x]).get().numpy_list()[0], np.maximum(x, 0))


def test_keras_activations_are_the_math_activations():
    import torch

    @flow.global_function()
    def acts(a=flow.FixedTensorDef((4, 3), dtype=flow.double),
             dy=flow.FixedTensorDef((4, 3), dtype=flow.double)):
        k = flow.keras.activations
        return k.tanh(a), k.sigmoid(a), k.relu(a), k.gelu(a), k.gelu_grad(a, dy)

    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    tanh, sigmoid, relu, gelu, gelu_grad = (b.numpy() for b in acts(x, dy).get())
    t = torch.tensor(x, requires_grad=True)
    g = torch.nn.functional.gelu(t)
    g.backward(torch.tensor(dy))
    np.testing.assert_allclose(tanh, np.tanh(x), rtol=1e-12)
    np.testing.assert_allclose(sigmoid, 1 / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_allclose(gelu, g.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gelu_grad, t.grad.numpy(), rtol=1e-12)


def test_keras_relu_refuses_the_keras_arguments_oneflow_never_had():
    @flow.global_function()
    def leaky(a=flow.FixedTensorDef((2, 2))):
        return flow.keras.activations.relu(a, alpha=0.1)

    with pytest.raises(ValueError, match="argument 'alpha' must be 0.0"):
        leaky(np.zeros((2, 2), np.float32))


def test_a_parameter_without_annotation_or_tensor_def_default_is_refused():
    with pytest.raises(TypeError, match="FixedTensorDef"):
        @flow.global_function()
        def job(a=3):
            return a


# ------------------------------------------------------------------ flow.deprecated, flow.experimental.unittest

def test_deprecated_variable_scope_prefixes_variable_names_and_warns():
    @flow.global_function()
    def job(x: flow.typing.Numpy.Placeholder((2, 3))):
        with pytest.warns(DeprecationWarning, match="flow.scope.namespace"):
            outer = flow.deprecated.variable_scope("mixed_0")
        with outer:
            with pytest.warns(DeprecationWarning):
                inner = flow.experimental.name_scope("branch1x1")
            with inner:
                w = flow.get_variable("weight", shape=(3, 4), initializer=flow.ones_initializer())
                return flow.matmul(x, w)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(job(x).get().numpy(), x @ np.ones((3, 4), np.float32))
    assert "mixed_0-branch1x1-weight" in flow.get_all_variables()


def test_experimental_unittest_is_flow_unittest():
    assert flow.experimental.unittest is flow.unittest
    assert issubclass(flow.experimental.unittest.TestCase, __import__("unittest").TestCase)
    assert flow.experimental.unittest.env.device_num() >= 1


def test_deprecated_truncated_normal_initializer_takes_stddev_first():
    conf = flow.deprecated.initializer_util.truncated_normal_initializer(0.02)
    assert conf.truncated_normal_conf.std == pytest.approx(0.02)
    assert conf.truncated_normal_conf.mean == 0.0


# ------------------------------------------------------------------ the scope and symbol API

def test_current_scope_symbols_describe_the_default_placement_and_job():
    seen = {}
    config = flow.FunctionConfig()
    config.default_placement_scope(flow.scope.placement("cpu", "0:0"))
    config.default_logical_view(flow.scope.mirrored_view())

    @flow.global_function(function_config=config)
    def foo():
        scope = flow.current_scope()
        seen["tag"] = scope.device_parallel_desc_symbol.device_tag
        seen["ids"] = scope.device_parallel_desc_symbol.machine_id2device_id_list
        seen["num"] = scope.device_parallel_desc_symbol.parallel_num
        seen["conf"] = scope.device_parallel_desc_symbol.parallel_conf
        seen["host"] = scope.host_parallel_desc_symbol.device_tag
        seen["data"] = scope.data
        seen["job"] = scope.job_desc_symbol
        seen["session"] = scope.session_id
        seen["counter"] = [scope.auto_increment_id() for _ in range(3)]
        return flow.get_variable("w", (2,), initializer=flow.constant_initializer(1))

    foo().get()
    assert seen["tag"] == "cpu" and seen["ids"] == {0: [0]} and seen["num"] == 1 and seen["host"] == "cpu"
    assert list(seen["conf"].device_name) == ["0:0"]
    data = seen["data"]
    assert data.opt_mirrored_parallel_conf.HasField("mirrored_parallel")  # the mirrored view
    assert data.job_desc_symbol_id == seen["job"].symbol_id
    assert seen["job"].data.default_data_type == config.job_config_proto.default_data_type
    assert seen["counter"] == [1, 2, 3]
    assert seen["session"] == data.session_id


def test_scope_builders_place_name_and_flag_the_ops_built_in_them():
    seen = {}

    @flow.global_function()
    def foo(x: flow.typing.Numpy.Placeholder((4,))):
        scope = flow.current_scope()
        placed = scope.BuildWithNewParallelDesc(None, "cpu", ["0:0"])
        named = placed.BuildWithNewScopeName(None, "block")
        mirrored = named.BuildWithNewIsMirrored(None, True)

        def to_pass(proto):
            proto.calculation_pass_name = "my_pass"

        set_by = mirrored.BuildBySetter(None, to_pass)
        seen["ids"] = [s.symbol_id for s in (scope, placed, named, mirrored, set_by)]
        seen["mirrored"] = mirrored.data.opt_mirrored_parallel_conf.HasField("mirrored_parallel")
        seen["set_by"] = (set_by.calculation_pass, set_by.namespace, set_by.is_mirrored,
                          set_by.device_parallel_desc_symbol.parallel_conf == placed.device_parallel_desc_symbol.parallel_conf)
        with flow.scope.scope_context(named):
            w = flow.get_variable("w", (4,), initializer=flow.constant_initializer(2))
            y = x * w
        return y

    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(foo(x).get().numpy(), 2 * x)
    assert len(set(seen["ids"])) == 5  # each builder registers a new scope symbol
    assert seen["mirrored"]
    assert seen["set_by"] == ("my_pass", ("block",), True, True)
    assert "block-w" in flow.get_all_variables()


def test_scope_builders_refuse_bad_placements():
    errors = []

    @flow.global_function()
    def foo():
        scope = flow.current_scope()
        for bad in (lambda: scope.BuildWithNewParallelDesc(None, "tpu", "0:0"),
                    lambda: scope.BuildWithNewParallelDesc(None, "cpu", "zero"),
                    lambda: scope.BuildBySetter(None, lambda p: setattr(p, "device_parallel_desc_symbol_id", 10 ** 9))):
            with pytest.raises(ValueError) as e:
                bad()
            errors.append(str(e.value))
        return flow.constant(1.0, dtype=flow.float32, shape=(1,))

    foo().get()
    assert "device_tag" in errors[0] and "machine_device_ids" in errors[1] and "not a registered" in errors[2]


# ------------------------------------------------------------------ FunctionConfig.enable_ssp

def test_enable_ssp_reads_variables_as_many_steps_old_as_the_scope_stage_says(monkeypatch):
    from graphfront.framework import session as session_mod
    monkeypatch.setattr(session_mod, "_WARNED", set())
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    lr, stages, stage_id = 0.1, 4, 1  # buffer_size 3: the forward uses weights two updates old

    def config():
        c = flow.FunctionConfig()
        c.enable_ssp(True)
        c.ssp_partition_strategy("naive_sequential")
        return c

    with pytest.warns(UserWarning, match="runs the job as one stage"):
        config()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second enable_ssp(True) does not warn again
        flow.clear_default_session()

        @flow.global_function(type="train", function_config=config())
        def job(x: flow.typing.Numpy.Placeholder((4, 3))) -> flow.typing.Numpy:
            with flow.experimental.scope.config(ssp_num_stages=stages, ssp_stage_id=stage_id):
                w = flow.get_variable("w", (3, 1), initializer=flow.constant_initializer(0.5))
                loss = flow.math.reduce_mean(flow.math.square(flow.matmul(x, w) - 1.0))
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0).minimize(loss)
            return loss

        losses = [job(x).item() for _ in range(6)]
    # numpy: after[j] = w after j runs; run i computes loss and gradient at after[i - buffer + 1]
    buffer = stages - stage_id
    xd = x.astype(np.float64)
    after, expected = [np.full((3, 1), 0.5)], []
    for i in range(6):
        used = after[max(i - buffer + 1, 0)]
        r = xd @ used - 1.0
        expected.append(float(np.mean(r ** 2)))
        after.append(after[-1] - lr * (2.0 / r.size) * xd.T @ r)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert losses[0] == losses[1] == losses[2] != losses[3]
    proto = job.graph.proto
    assert proto.job_conf.flag_name2flag_value["ssp_partition_strategy"].at_string == "naive_sequential"
    proxies = [op for op in proto.net.op if op.HasField("user_conf")
               and op.user_conf.op_type_name == "ssp_variable_proxy"]
    assert [(op.name, op.user_conf.attr["buffer_size"].at_int64) for op in proxies] == [
        ("w_ssp_variable_proxy", buffer)]
    with pytest.raises(TypeError, match="enable_ssp expects a bool"):
        flow.FunctionConfig().enable_ssp(1)


def test_enable_ssp_without_stage_attributes_is_a_build_error():
    flow.clear_default_session()
    c = flow.FunctionConfig()
    with pytest.warns(UserWarning):
        c.enable_ssp(True)

    @flow.global_function(type="train", function_config=c)
    def job(x: flow.typing.Numpy.Placeholder((4, 3))) -> flow.typing.Numpy:
        w = flow.get_variable("w", (3, 1), initializer=flow.constant_initializer(0.5))
        loss = flow.math.reduce_mean(flow.matmul(x, w))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    with pytest.raises(flow.JobBuildError, match="variable 'w' must be built inside flow.experimental.scope.config"):
        job(np.ones((4, 3), np.float32))


# ------------------------------------------------------------------ flow.experimental.scope.config

def test_scope_config_sets_scope_attributes_of_the_ops_built_inside():
    from graphfront.framework.scope_symbols import SYMBOLS, scope_attr
    flow.clear_default_session()

    @flow.global_function()
    def job(x: flow.typing.Numpy.Placeholder((2,))) -> flow.typing.Numpy:
        with flow.experimental.scope.config(quantization_aware_training=False, ssp_num_stages=3):
            y = flow.math.relu(x, name="inside")
            with flow.scope.placement("cpu", "0:0"):  # a nested scope keeps the attributes
                z = flow.math.sigmoid(y, name="nested")
        return flow.math.tanh(z, name="outside")

    job(np.zeros(2, np.float32))
    ops = {op.name: op for op in job.graph.proto.net.op}
    for name in ("inside", "nested"):
        sid = ops[name].scope_symbol_id
        assert scope_attr(sid, "quantization_aware_training") is False and scope_attr(sid, "ssp_num_stages") == 3
        assert SYMBOLS[sid].attr_name2attr_value["quantization_aware_training"].at_bool is False
        assert SYMBOLS[sid].attr_name2attr_value["ssp_num_stages"].at_int64 == 3
    sid = ops["outside"].scope_symbol_id
    assert scope_attr(sid, "quantization_aware_training") is True and scope_attr(sid, "ssp_stage_id") == -1
    assert "quantization_aware_training" not in SYMBOLS[sid].attr_name2attr_value


def test_scope_config_rejects_unknown_attributes_and_wrong_types():
    flow.clear_default_session()
    errors = []

    @flow.global_function()
    def job(x: flow.typing.Numpy.Placeholder((2,))) -> flow.typing.Numpy:
        for attrs in ({"quantisation": True}, {"ssp_num_stages": 2.0}, {"quantization_aware_training": 0}):
            try:
                with flow.experimental.scope.config(**attrs):
                    pass
            except (TypeError, ValueError) as e:
                errors.append(f"{type(e).__name__}: {e}")
        return x

    job(np.zeros(2, np.float32))
    assert "ValueError" in errors[0] and "unknown scope attribute 'quantisation'" in errors[0]
    assert "TypeError" in errors[1] and "'ssp_num_stages' expects a int, received float" in errors[1]
    assert "TypeError" in errors[2] and "expects a bool, received int" in errors[2]
    with pytest.raises(flow.JobBuildError, match="no job is being built"):
        with flow.experimental.scope.config(ssp_num_stages=2):
            pass


# ------------------------------------------------------------------ flow.experimental.custom_op_module

_PY_API = '''
import graphfront as flow


def my_sigmoid_forward(x, name=None):
    return (flow.user_op_builder(name or flow.util.unique_str("MySigmoidForward_")).Op("my_sigmoid_forward")
            .Input("x", [x]).Output("y").Build().InferAndTryRun().RemoteBlobList()[0])


def my_sigmoid_backward(y, dy, name=None):
    return (flow.user_op_builder(name or flow.util.unique_str("MySigmoidBackward_")).Op("my_sigmoid_backward")
            .Input("y", [y]).Input("dy", [dy]).Output("dx").Build().InferAndTryRun().RemoteBlobList()[0])
'''

_PY_DEF = '''
def _grad(g):
    g.set_grad("x", g.emit("my_sigmoid_backward", {"y": g.output("y"), "dy": g.dout("y")}))


def declare(module):
    module.declare_op("my_sigmoid_forward", inputs=["x"], outputs=["y"], kernel="forward", grad=_grad)
    module.declare_op("my_sigmoid_backward", inputs=["y", "dy"], outputs=["dx"], kernel="backward")
'''

_PY_KERNEL = '''
import numpy as np

CALLS = []


def forward(args):
    (x,) = args
    CALLS.append("forward")
    return 1 / (1 + np.exp(-x))


def backward(args):
    y, dy = args
    CALLS.append("backward")
    return y * (1 - y) * dy
'''


@pytest.fixture
def sigmoid_module(tmp_path):
    folder = tmp_path / "my_sigmoid"
    folder.mkdir()
    (folder / "my_sigmoid_py_api.py").write_text(_PY_API)
    (folder / "my_sigmoid_py_def.py").write_text(_PY_DEF)
    (folder / "my_sigmoid_py_kernel.py").write_text(_PY_KERNEL)
    module = flow.experimental.custom_op_module("my_sigmoid", str(tmp_path))
    module.py_api().cpp_def().py_kernel().build_load()
    yield module
    from graphfront.ops import registry
    for op_type in module.loaded_ops:
        registry.unregister(op_type)


def test_custom_op_module_python_kernels_compute_forward_and_backward(sigmoid_module):
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(1, 10)
    dy = np.full((1, 10), 0.2, np.float32)

    @flow.global_function()
    def forward(a: flow.typing.Numpy.Placeholder((1, 10))):
        return sigmoid_module.api.my_sigmoid_forward(a)

    @flow.global_function()
    def backward(y: flow.typing.Numpy.Placeholder((1, 10)), d: flow.typing.Numpy.Placeholder((1, 10))):
        return sigmoid_module.api.my_sigmoid_backward(y, d)

    y = forward(x).get().numpy()
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)), rtol=1e-6)
    np.testing.assert_allclose(backward(y, dy).get().numpy(), y * (1 - y) * dy, rtol=1e-6)
    assert sigmoid_module.kernel_module.CALLS == ["forward", "backward"]


def test_custom_op_module_grad_trains_through_the_python_backward_kernel(sigmoid_module):
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)

    @flow.global_function(type="train")
    def train(a: flow.typing.Numpy.Placeholder((2, 4))) -> flow.typing.Numpy:
        w = flow.get_variable("w", (4, 4), initializer=flow.constant_initializer(0.1))
        loss = flow.math.reduce_sum(sigmoid_module.api.my_sigmoid_forward(flow.matmul(a, w)))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0])).minimize(loss)
        return loss

    train(x)
    w1 = flow.get_all_variables()["w"].numpy()
    # numpy reference of one SGD step: dL/dw = a^T (s (1 - s)), s = sigmoid(a w)
    s = 1 / (1 + np.exp(-(x @ np.full((4, 4), 0.1, np.float32))))
    expected = np.full((4, 4), 0.1, np.float32) - x.T @ (s * (1 - s))
    np.testing.assert_allclose(w1, expected, rtol=1e-5, atol=1e-6)
    assert "backward" in sigmoid_module.kernel_module.CALLS


def test_custom_op_module_refuses_a_cpp_only_definition_and_missing_kernels(tmp_path):
    folder = tmp_path / "cc_only"
    folder.mkdir()
    (folder / "cc_only_cpp_def.cpp").write_text("// REGISTER_USER_OP(...)")
    module = flow.experimental.custom_op_module("cc_only", str(tmp_path))
    with pytest.raises(NotImplementedError, match="cc_only_py_def.py"):
        module.cpp_def()
    module.declare_op("cc_only_op", inputs=["x"], outputs=["y"], kernel="forward")
    with pytest.raises(RuntimeError, match="py_kernel"):
        module.build_load()
    with pytest.raises(FileNotFoundError, match="cc_only_py_kernel.py"):
        module.py_kernel()
    with pytest.raises(FileNotFoundError, match="no_such"):
        flow.experimental.custom_op_module("no_such", str(tmp_path))


# ------------------------------------------------------------------ user-op builder argument names

def test_ccrelu_takes_oneflows_argument_names_and_refuses_others_naming_them():
    @flow.global_function()
    def good(a: flow.typing.Numpy.Placeholder((3,))):
        return _ccrelu(a, "cc")

    x = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_array_equal(good(x).get().numpy(), np.maximum(x, 0))

    @flow.global_function()
    def bad(a: flow.typing.Numpy.Placeholder((3,))):
        return flow.user_op_builder("cc").Op("ccrelu").Input("x", [a]).Output("y").Build() \
            .InferAndTryRun().RemoteBlobList()[0]

    with pytest.raises(flow.JobBuildError, match="ccrelu has no input 'x'; its inputs are in"):
        bad(x)


# ------------------------------------------------------------------ flow.deprecated.nn.Module

class _Scale(flow.deprecated.nn.Module):
    """x * factor through a reused scalar_mul builder, one op per call, named by call_seq_no."""

    def __init__(self):
        super().__init__()
        self.builder = flow.consistent_user_op_module_builder("scalar_mul")
        self.builder.InputSize("in", 1).Output("out").Attr("has_float_operand", True).Attr("float_operand", 3.0)
        self.builder.user_op_module.InitOpKernel()

    def forward(self, x):
        op = self.builder.OpName(f"Scale_{self.call_seq_no}").Input("in", [x]).Build().InferAndTryRun()
        return op.RemoteBlobList()[0]


def test_user_op_modules_build_one_op_per_call_and_are_found_by_name():
    flow.clear_default_session()
    names, errors = [], []

    @flow.global_function()
    def job(x: flow.typing.Numpy.Placeholder((2, 3))) -> flow.typing.Numpy:
        with flow.scope.namespace("ns"):
            scale = flow.find_or_create_module("scale", _Scale)
            y = scale(x)
            z = scale(y)
            names.extend([y.op_name, z.op_name, scale.call_seq_no])
            assert flow.find_or_create_module("scale", _Scale, reuse=True) is scale
            try:
                flow.find_or_create_module("scale", _Scale)
            except ValueError as e:
                errors.append(str(e))
            try:
                scale.builder.Op("add_n")
            except ValueError as e:
                errors.append(str(e))
        return z

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(job(x), x * 9.0)
    assert names == ["ns-Scale_0", "ns-Scale_1", 2]
    assert "module 'scale' is already used" in errors[0] and "cannot call .Op('add_n')" in errors[1]
