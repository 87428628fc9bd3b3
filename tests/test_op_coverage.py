"""Every registered op type is exercised by some autotest in tests/autotest/, and every
op type without an ``xla`` rule or an ONNX converter is listed with its reason (below).

Run alone, the autotests are imported and run with 2 draws each (draw 0 with the
cleanup passes, draw 1 without); inside the whole suite the records of the autotests
that already ran are reused. Exemptions live in graphfront/testing/coverage.py
(EXEMPT), each with its reason.
"""
import functools
import os
import subprocess
import sys

import pytest

from graphfront.testing import coverage

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUTOTEST_DIR = os.path.join(ROOT, "tests", "autotest")
DRAWS = 2


def test_exemptions_name_registered_op_types_and_give_reasons():
    assert coverage.EXEMPT, "the exemption list is empty: update ops cannot be autotested"
    problems = coverage.invalid_exemptions()
    assert not problems, "\n".join(problems)


def test_every_registered_op_type_is_exercised_by_an_autotest():
    result = coverage.collect(AUTOTEST_DIR, n=DRAWS)
    assert result.autotests > 0, f"no autotests found in {AUTOTEST_DIR}"
    missing = coverage.uncovered(result.exercised, coverage.all_registered_op_types())
    assert not missing, coverage.format_report(missing, result, os.path.relpath(AUTOTEST_DIR), DRAWS)

# ---------------------------------------------------------------- lowering rules
# Every op type without an ``xla`` rule (NO_XLA) or an ``onnx`` converter (NO_ONNX) beside its
# kernel, with its reason: an op has no faithful XLA / ONNX equivalent (which semantics), or
# its randomness is one the lowering cannot reproduce. Every other op has both.
_FILES = "reads or writes files on the host (a compiled step has no file I/O)"
_BUFFERS = "tensor buffers hold host-side arrays of varying shapes"
_DEVICES = "moves data between devices; the lowering compiles one device's step"
_VALUE_SHAPED = "its output shape depends on the values (the lowered graph fixes every shape)"
_DYNAMIC = "broadcasts to the run-time shapes of dynamic blobs (the lowered graph fixes every shape)"
_TIME_SHAPE = "a time-shape op (one call spans several runs of the step); the time-shape pass unrolls it first"
_RING = "keeps a ring of the variable's values from earlier runs, outside the step"
_FIRST_MAX = ("routes each window's gradient to its first maximum (ties, NaN as the largest), an order ONNX's "
              "MaxPool indices leave to the runtime")
_NVTX = "marks a range on the CUDA profiler's timeline from the host"
_HASH_TABLE = "a hash table that grows as it meets new keys"
_IN_PLACE = "updates a variable in place; an ONNX graph holds no mutable state"
_RANDOMNESS = "randomness the lowering cannot reproduce: "
_RANDOM_XLA = "randomness the lowering cannot reproduce: draws from torch's generator, which jax.random cannot replay"
_RANDOM_ONNX = "randomness the lowering cannot reproduce: draws from torch's generator, which ONNX's random ops cannot replay"


def _xla(why):
    return f"no faithful XLA equivalent: {why}"


def _onnx(why):
    return f"no faithful ONNX equivalent: {why}"



# user op types, and system ops by conf field

NO_XLA = {
    "CategoricalOrdinalEncode": _xla(_HASH_TABLE),
    "OFRecordReader": _xla(_FILES), "COCOReader": _xla(_FILES),
    "OneRecReader": _xla(_FILES), "onerec_decoder": _xla(_BUFFERS),
    "acc": _xla(_TIME_SHAPE), "pack": _xla(_TIME_SHAPE), "repeat": _xla(_TIME_SHAPE), "unpack": _xla(_TIME_SHAPE),
    "ssp_variable_proxy": _xla(_RING), "indexed_slices_reduce_sum": _xla(_VALUE_SHAPED),
    "broadcast_to_compatible_with_conf": _xla(_DYNAMIC),
    "megatron_gpt_mmap_data_loader": _xla(_FILES),
    "TestDynamicSource": _xla(_VALUE_SHAPED),
    "TestRandomSource": _RANDOM_XLA,
    "_boxing_across_placements": _xla(_DEVICES),
    "_logical_b_to_p": _xla(_DEVICES),
    "_logical_b_to_s": _xla(_DEVICES),
    "_nccl_logical_all_gather": _xla(_DEVICES),
    "_nccl_logical_all_gather_noncontinuous": _xla(_DEVICES),
    "_nccl_logical_all_reduce": _xla(_DEVICES),
    "_nccl_logical_reduce_scatter": _xla(_DEVICES),
    "_nccl_logical_s2s": _xla(_DEVICES),
    "argwhere": _xla(_VALUE_SHAPED),
    "bernoulli": _RANDOM_XLA,
    "distributed_partial_fc_sample": _RANDOM_XLA,
    "coin_flip": _RANDOM_XLA,
    "create_summary_writer": _xla(_FILES),
    "crop_mirror_normalize_from_tensorbuffer": _xla(_BUFFERS),
    "flush_summary_writer": _xla(_FILES),
    "gen_tensor_buffer": _xla(_BUFFERS),
    "generate_random_batch_permutation_indices": _RANDOM_XLA,
    "image_resize_to_fixed": _xla(_BUFFERS),
    "image_resize_keep_aspect_ratio": _xla(_BUFFERS),
    "image_decoder_random_crop_resize_conf": _xla(_BUFFERS),
    "image_batch_align": _xla(_BUFFERS),
    "image_decode": _xla(_BUFFERS),
    "image_flip": _xla(_BUFFERS),
    "image_normalize": _xla(_BUFFERS),
    "image_random_crop": _xla(_BUFFERS),
    "object_bbox_flip": _xla(_BUFFERS),
    "object_bbox_scale": _xla(_BUFFERS),
    "object_segmentation_polygon_flip": _xla(_BUFFERS),
    "object_segmentation_polygon_scale": _xla(_BUFFERS),
    "object_segmentation_polygon_to_mask": _xla(_BUFFERS),
    "nvtx_end": _xla(_NVTX),
    "nvtx_start": _xla(_NVTX),
    "ofrecord_bytes_decoder": _xla(_FILES),
    "ofrecord_image_classification_reader": _xla(_FILES),
    "ofrecord_image_decoder": _xla(_FILES),
    "ofrecord_image_decoder_random_crop": _xla(_FILES),
    "ofrecord_raw_decoder": _xla(_FILES),
    "summary_write_histogram": _xla(_FILES),
    "summary_write_image": _xla(_FILES),
    "summary_write_pb": _xla(_FILES),
    "summary_write_scalar": _xla(_FILES),
    "sync_dynamic_resize_conf": _xla(_VALUE_SHAPED),
    "tensor_buffer_to_list_of_tensors": _xla(_BUFFERS),
    "tensor_buffer_to_list_of_tensors_v2": _xla(_BUFFERS),
    "tensor_buffer_to_tensor": _xla(_BUFFERS),
    "tensor_to_tensor_buffer": _xla(_BUFFERS),
    "unique_with_counts": _xla(_VALUE_SHAPED),
}

NO_ONNX = {
    "CategoricalOrdinalEncode": _onnx(_HASH_TABLE),
    "OFRecordReader": _onnx(_FILES), "COCOReader": _onnx(_FILES),
    "OneRecReader": _onnx(_FILES), "onerec_decoder": _onnx(_BUFFERS),
    "maxpool_1d_grad": _onnx(_FIRST_MAX),
    "maxpool_2d_grad": _onnx(_FIRST_MAX),
    "maxpool_3d_grad": _onnx(_FIRST_MAX),
    "fused_tf_max_pool_1d_grad": _onnx(_FIRST_MAX),
    "fused_tf_max_pool_2d_grad": _onnx(_FIRST_MAX),
    "fused_tf_max_pool_3d_grad": _onnx(_FIRST_MAX),
    "tf_max_pool_1d_grad": _onnx(_FIRST_MAX),
    "tf_max_pool_2d_grad": _onnx(_FIRST_MAX),
    "tf_max_pool_3d_grad": _onnx(_FIRST_MAX),
    "lgamma": _onnx("ONNX has no log-gamma operator (a series approximation would not reproduce torch.lgamma)"),
    "lgamma_grad": _onnx("ONNX has no digamma operator (dx = dy * digamma(x))"),
    "acc": _onnx(_TIME_SHAPE), "pack": _onnx(_TIME_SHAPE), "repeat": _onnx(_TIME_SHAPE), "unpack": _onnx(_TIME_SHAPE),
    "ssp_variable_proxy": _onnx(_RING), "indexed_slices_reduce_sum": _onnx(_VALUE_SHAPED),
    "megatron_gpt_mmap_data_loader": _onnx(_FILES),
    "TestDynamicSource": _onnx(_VALUE_SHAPED),
    "TestRandomSource": _RANDOM_ONNX,
    "_boxing_across_placements": _onnx(_DEVICES),
    "_logical_b_to_p": _onnx(_DEVICES),
    "_logical_b_to_s": _onnx(_DEVICES),
    "_nccl_logical_all_gather": _onnx(_DEVICES),
    "_nccl_logical_all_gather_noncontinuous": _onnx(_DEVICES),
    "_nccl_logical_all_reduce": _onnx(_DEVICES),
    "_nccl_logical_reduce_scatter": _onnx(_DEVICES),
    "_nccl_logical_s2s": _onnx(_DEVICES),
    "adagrad_update": _onnx(_IN_PLACE),
    "adam_update": _onnx(_IN_PLACE),
    "assign": _onnx(_IN_PLACE),
    "assign_if": _onnx(_IN_PLACE),
    "assign_if_not": _onnx(_IN_PLACE),
    "bernoulli": _RANDOM_ONNX,
    "distributed_partial_fc_sample": _RANDOM_ONNX,
    "coin_flip": _RANDOM_ONNX,
    "create_summary_writer": _onnx(_FILES),
    "crop_mirror_normalize_from_tensorbuffer": _onnx(_BUFFERS),
    "dynamic_loss_scale_schedule": _onnx(_IN_PLACE),
    "flush_summary_writer": _onnx(_FILES),
    "gen_tensor_buffer": _onnx(_BUFFERS),
    "generate_random_batch_permutation_indices": _RANDOM_ONNX,
    "image_resize_to_fixed": _onnx(_BUFFERS),
    "image_resize_keep_aspect_ratio": _onnx(_BUFFERS),
    "image_batch_align": _onnx(_BUFFERS),
    "image_decode": _onnx(_BUFFERS),
    "image_flip": _onnx(_BUFFERS),
    "image_normalize": _onnx(_BUFFERS),
    "image_random_crop": _onnx(_BUFFERS),
    "object_bbox_flip": _onnx(_BUFFERS),
    "object_bbox_scale": _onnx(_BUFFERS),
    "object_segmentation_polygon_flip": _onnx(_BUFFERS),
    "object_segmentation_polygon_scale": _onnx(_BUFFERS),
    "object_segmentation_polygon_to_mask": _onnx(_BUFFERS),
    "indexed_slices_adam_update": _onnx(_IN_PLACE),
    "indexed_slices_momentum_update": _onnx(_IN_PLACE),
    "indexed_slices_sgd_update": _onnx(_IN_PLACE),
    "lamb_update": _onnx(_IN_PLACE),
    "lars_update": _onnx(_IN_PLACE),
    "momentum_update": _onnx(_IN_PLACE),
    "multi_tensor_adam_update": _onnx(_IN_PLACE),
    "multi_tensor_momentum_update": _onnx(_IN_PLACE),
    "multi_tensor_sgd_update": _onnx(_IN_PLACE),
    "normalization_add_relu": _onnx("a training batch norm (ONNX's BatchNormalization infers) whose reserve_space "
                                    "packs 32 relu mask bits in an int32 word, a bitwise reduction ONNX lacks"),
    "normalization_add_relu_grad": _onnx("a training batch norm's gradient, its relu mask read from 32-bit words"),
    "nvtx_end": _onnx(_NVTX),
    "nvtx_start": _onnx(_NVTX),
    "ofrecord_bytes_decoder": _onnx(_FILES),
    "ofrecord_image_classification_reader": _onnx(_FILES),
    "ofrecord_image_decoder": _onnx(_FILES),
    "ofrecord_image_decoder_random_crop": _onnx(_FILES),
    "ofrecord_raw_decoder": _onnx(_FILES),
    "random_mask_like": _RANDOM_ONNX,
    "fused_multi_head_attention": _RANDOMNESS + "its dropout mask is PyTorch's Philox stream on a GPU, elsewhere a "
                                                "hash of a seed drawn from torch's generator",
    "fused_multi_head_attention_grad": _RANDOMNESS + "it draws again the dropout mask of its forward op, from the "
                                                     "seed that op drew",
    "rmsprop_update": _onnx(_IN_PLACE),
    "sgd_update": _onnx(_IN_PLACE),
    "summary_write_histogram": _onnx(_FILES),
    "summary_write_image": _onnx(_FILES),
    "summary_write_pb": _onnx(_FILES),
    "summary_write_scalar": _onnx(_FILES),
    "tensor_buffer_to_list_of_tensors": _onnx(_BUFFERS),
    "tensor_buffer_to_list_of_tensors_v2": _onnx(_BUFFERS),
    "tensor_buffer_to_tensor": _onnx(_BUFFERS),
    "tensor_to_tensor_buffer": _onnx(_BUFFERS),
}

@functools.lru_cache(maxsize=None)
def _graphfront_op_types():
    """The op types graphfront itself registers (read in a fresh process: tests and examples
    run before this one may have registered custom ops of their own)."""
    code = "import graphfront; from graphfront.ops import registry; print(' '.join(registry.registered_op_types()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return frozenset(out.stdout.split())


def _lowerable_op_defs():
    """op type (or system conf field) -> OpDef, for every op graphfront defines that a lowering
    must emit (not the interface ops: inputs, returns, variables and watches, which the
    lowerings handle themselves)."""
    from graphfront.core import op_conf_pb2
    from graphfront.ops import registry
    defs = {t: registry.lookup(t) for t in registry.registered_op_types() if t in _graphfront_op_types()}
    for kind in registry.system_kinds():
        conf = op_conf_pb2.OperatorConf(name="op")
        getattr(conf, kind).SetInParent()
        defs[kind] = registry.op_def(conf)
    return {name: d for name, d in defs.items() if not d.interface}


def _check_rule_list(field, listed, user_ops_only=False):
    """Problems of the lists of the ops without a ``field`` rule: each such op listed once,
    with an allowed reason; no op listed that has the rule or is not registered."""
    from graphfront.core import op_conf_pb2
    defs = _lowerable_op_defs()
    if user_ops_only:  # (ONNX export converts the system ops itself)
        defs = {n: d for n, d in defs.items() if n not in op_conf_pb2.OperatorConf.DESCRIPTOR.fields_by_name}
    without = {name for name, d in defs.items() if getattr(d, field) is None}
    problems = [f"{name}: has no {field} rule and is not listed with a reason" for name in
                sorted(without - set(listed))]
    problems += [f"{name}: listed, but it has an {field} rule (remove it from the list)" for name in
                 sorted(set(listed) & set(defs) - without)]
    problems += [f"{name}: listed, but no such op is registered" for name in sorted(set(listed) - set(defs))]
    allowed = (f"no faithful {'XLA' if field == 'xla' else 'ONNX'} equivalent: ", _RANDOMNESS)
    problems += [f"{name}: reason {why!r} is not one of {allowed} followed by the semantics"
                 for name, why in sorted(listed.items())
                 if not any(why.startswith(p) and len(why) > len(p) + 10 for p in allowed)]
    assert not problems, "\n".join(problems)


def test_every_op_without_an_xla_rule_is_listed_with_a_reason():
    _check_rule_list("xla", NO_XLA)


def test_every_op_without_an_onnx_converter_is_listed_with_a_reason():
    _check_rule_list("onnx", NO_ONNX, user_ops_only=True)
