"""Every op family of graphfront's library: importing this module registers every op type.

``import graphfront`` imports it first, so the registry is complete before any job is built.
"""
from graphfront.ops import array_ops, gather_ops, math_ops, reduce_ops, select_ops, nn_ops, optimizer_ops  # noqa: F401
from graphfront.ops import activation_ops, deconv_ops, fused_ops, loss_ops, norm_ops, pool_ops  # noqa: F401
from graphfront.ops import indexed_slices_ops  # noqa: F401
from graphfront.ops import amp_ops  # noqa: F401
from graphfront.ops import boxing_ops  # noqa: F401
from graphfront.ops import data_ops, image_ops  # noqa: F401
from graphfront.ops import coco_ops  # noqa: F401
from graphfront.ops import summary_ops  # noqa: F401
from graphfront.ops import fused_attention_ops, attention_ops  # noqa: F401
from graphfront.ops import dynamic_ops  # noqa: F401
from graphfront.ops import random_ops  # noqa: F401
from graphfront.ops import ctc_ops  # noqa: F401
from graphfront.ops import categorical_ops  # noqa: F401
from graphfront.ops import nvtx_ops  # noqa: F401
from graphfront.ops import ssp_ops  # noqa: F401
from graphfront.ops import quantization_ops  # noqa: F401
from graphfront.ops import time_shape_ops  # noqa: F401
from graphfront.ops import system  # noqa: F401 - the system ops (interface ops, identity_conf ...)
