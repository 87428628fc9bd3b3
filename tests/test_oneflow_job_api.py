"""OneFlow single-client job API that older programs and OneFlow's own tests use:
placeholders declared as parameter defaults (flow.FixedTensorDef / flow.MirroredTensorDef),
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
