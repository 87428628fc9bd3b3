"""graphfront: OneFlow's lazy single-client programming model on PyTorch kernels.

``import graphfront as flow``; decorate job functions with
``@flow.global_function(type="train"|"predict")``, build them from ``flow.layers``,
``flow.nn``, ``flow.math`` and ``flow.user_op_builder``; the first call compiles every
job into a ``Job`` proto and later calls run the compiled plan.

Library messages (the data source used, notices) go to the ``graphfront`` logger;
deprecations are ``DeprecationWarning``s. ``python -m graphfront --doctor`` reports the
installation, ``python -m graphfront info FILE`` describes a job file or saved model.
"""
import logging as _logging
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("graphfront")
except _PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
_logging.getLogger("graphfront").addHandler(_logging.NullHandler())

from graphfront.ops import families as _families  # noqa: F401 - registers every op type
from graphfront import config, data, initializers, layers, math, nn, optimizer, quantization, regularizers, scope, typing
from graphfront import advanced, checkpoint, deprecated, distribute, env, experimental, keras, linalg, losses, saved_model
from graphfront import distributed, model, profiler, random, serving, sysconfig, tensorrt, train, unittest, util
from graphfront.amp import amp_white_identity
from graphfront import onnx  # flow.onnx.export (imports the onnx package only when called)
from graphfront.array import *  # noqa: F401,F403 - flow.reshape, flow.concat, ...
from graphfront.checkpoint import get_all_variables, load, load_variables
from graphfront.categorical import categorical_ordinal_encode
from graphfront.ctc import ctc_loss
from graphfront.deprecated import consistent_user_op_module_builder, user_op_module_builder
from graphfront.dynamic import argwhere, cast_to_static_shape, dynamic_reshape, elem_cnt, sync_dynamic_resize
from graphfront.checkpoint import save_dict as save
from graphfront.distribute import hierarchical_parallel_cast, parallel_cast
from graphfront.framework.dtypes import (bfloat16, bool, char, convert_oneflow_dtype_to_numpy_dtype, double,
                                        dtype, dtypes, float, float16, float32, float64, half, int, int8, int16,
                                        int32, int64, long, uint8)
from graphfront.framework.dtypes import record, tensor_buffer
from graphfront import detection, image, random, sbp, summary, system
from graphfront.data_pipeline import image_resize, image_target_resize, tensor_buffer_to_tensor
from graphfront.image import (image_batch_align, image_decode, image_flip, image_normalize, image_random_crop,
                              object_bbox_flip, object_bbox_scale, object_segmentation_polygon_flip,
                              object_segmentation_polygon_scale, object_segmentation_polygon_to_mask)
from graphfront.tensor_buffer import gen_tensor_buffer, tensor_buffer_to_list_of_tensors, tensor_to_tensor_buffer
from graphfront.framework.blob_desc import INVALID_SPLIT_AXIS, BlobDesc
from graphfront.framework.errors import (ArgumentError, DeviceMemoryError, FeedError, GraphfrontError, JobBuildError,
                                        OpRunError)
from graphfront.framework.session import FunctionConfig, clear_default_session, global_function
from graphfront.initializers import (constant_initializer, empty_initializer, glorot_normal_initializer,
                                     glorot_uniform_initializer, kaiming_initializer, ones_initializer,
                                     random_normal_initializer, random_uniform_initializer, truncated_normal,
                                     truncated_normal_initializer, variance_scaling_initializer,
                                     xavier_normal_initializer, xavier_uniform_initializer, zeros_initializer)
from graphfront.linalg import matmul
from graphfront.math import (add_n, argsort, clip_by_value, count_not_finite, in_top_k, masked_fill,
                             multi_count_not_finite, sort, where)
from graphfront.nn import combined_margin_loss, distributed_partial_fc_sample, smooth_l1_loss
from graphfront.ops.builder import user_op_builder
from graphfront.runtime.op_timing import profile
from graphfront.time_shape import acc, pack, repeat, unpack
from graphfront.toplevel import *  # noqa: F401,F403 - flow.Size, flow.cast_to_current_logical_view, ...
from graphfront.typing import FixedTensorDef, MirroredTensorDef
from graphfront.variables import get_variable
from graphfront.watch import watch, watch_diff, watch_scope

ExecutionConfig = function_config = FunctionConfig
Model = model.Model
clamp = clip = clip_by_scalar = clip_by_value
consistent_user_op_builder = user_op_builder  # one device: every op is consistent


def _register_oneflow_python_layout():
    """OneFlow up to v0.4 kept its Python sources under ``oneflow/python/``, and programs of
    that time import ``oneflow.python.framework.distribute`` (``distribute_util.broadcast()``),
    the module whose exports are ``flow.distribute`` (OneFlow v0.6.0 moved it to
    ``python/oneflow/compatible/single_client/framework/distribute.py``). So
    ``graphfront.python.framework.distribute`` *is* :mod:`graphfront.distribute` (the same module
    object); any other name under ``graphfront.python`` fails as "No module named ...".
    """
    import importlib.machinery
    import sys
    import types
    python = types.ModuleType(__name__ + ".python", "OneFlow's oneflow/python/ module path (an alias)")
    framework = types.ModuleType(python.__name__ + ".framework", "OneFlow's oneflow/python/framework/")
    for package in (python, framework):
        package.__path__ = []  # a package: an unknown name below it is "No module named ..."
        package.__package__ = package.__name__
        package.__spec__ = importlib.machinery.ModuleSpec(package.__name__, None, is_package=True)
        package.__spec__.submodule_search_locations = []  # (so importlib.util.find_spec answers None)
        sys.modules[package.__name__] = package
    python.framework, framework.distribute = framework, distribute
    sys.modules[framework.__name__ + ".distribute"] = distribute
    return python


python = _register_oneflow_python_layout()


def manual_seed(seed):
    """Seed the random generators graphfront draws from (initializers, dropout)."""
    import torch
    torch.manual_seed(seed)
