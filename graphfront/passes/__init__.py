"""Job completion passes: each is a function ``Job -> Job`` over the proto.

:func:`complete` runs them in order: the unrolling of repeat/unpack ... acc/pack regions
(when the job has them), quantization-aware training (when the job enables it), the forward
fusions (:data:`FORWARD_PASSES`: on a GPU, an attention and a batch norm with its residual add
and relu each become one fused op), auto mixed precision
(when the job enables it), autograd, optimizer, the SSP variable proxies (``enable_ssp``) and the indexed-slices
rewrite of configured embedding updates (train jobs), then the
cleanup passes (:data:`CLEANUP_PASSES`: common-subexpression elimination, constant folding,
fusions, multi-tensor update grouping, dead-op pruning). The names of the passes that ran are appended to
``job.job_conf.flag_name2flag_value["__completion_log__"]`` (a list of strings); a pass
with an ``is_enabled(job)`` attribute runs (and is logged) only where it returns True.

``FunctionConfig().enable_passes(False)`` skips every forward fusion and cleanup pass; finer control:
:func:`disable_passes` names single passes to skip (it writes the list into the job
config flag ``graphfront_disabled_passes``, which :func:`complete` reads).
"""
from __future__ import annotations

from graphfront.passes.amp import auto_mixed_precision
from graphfront.passes.attention import fuse_attention
from graphfront.passes.autograd import autograd
from graphfront.passes.cleanup import merge_duplicate_ops, prune_dead_ops
from graphfront.passes.cross_entropy import fuse_bias_add_sparse_softmax_cross_entropy
from graphfront.passes.fold import fold_constants
from graphfront.passes.indexed_slices import indexed_slices_optimizer
from graphfront.passes.norm_add_relu import fuse_normalization_add_relu
from graphfront.passes.fusion import (fold_batch_norm, fuse_add_to_output, fuse_bias_add, fuse_bias_add_relu,
                                      fuse_cast_scale, fuse_conv_grads, fuse_layer_norm_grads, fuse_max_pool_grad,
                                      fuse_scalar_chains, fuse_scalar_mul_matmul, fuse_update_ops)
from graphfront.passes.optimizer import optimizer
from graphfront.passes.qat import quantization_aware_training
from graphfront.passes.ssp import add_ssp_variable_proxy
from graphfront.passes.time_shape import unroll_time_shape
from graphfront.passes.update_group import group_scalar_mul_by_tensor, group_update_ops, group_variable_casts

REQUIRED_PASSES = [unroll_time_shape, quantization_aware_training, auto_mixed_precision, autograd, optimizer,
                   add_ssp_variable_proxy, indexed_slices_optimizer]
# fusions of the job as built, run before auto mixed precision (and so before autograd) when the
# cleanup passes run
FORWARD_PASSES = [fuse_attention, fuse_normalization_add_relu, fuse_bias_add_sparse_softmax_cross_entropy]
CLEANUP_PASSES = [prune_dead_ops, merge_duplicate_ops, fold_constants, fuse_cast_scale, fuse_update_ops, fuse_scalar_chains, fuse_bias_add,
                  fuse_scalar_mul_matmul, fold_batch_norm, fuse_bias_add_relu, fuse_conv_grads, fuse_layer_norm_grads, fuse_max_pool_grad,
                  fuse_add_to_output, group_update_ops, group_scalar_mul_by_tensor, group_variable_casts,
                  prune_dead_ops]
COMPLETION_LOG = "__completion_log__"
DISABLED_PASSES = "graphfront_disabled_passes"


def pass_names() -> list:
    """Names of the passes that ``enable_passes(False)`` skips and :func:`disable_passes` may
    name (the forward fusions, then the cleanup passes), in the order they run."""
    return list(dict.fromkeys(p.__name__ for p in FORWARD_PASSES + CLEANUP_PASSES))


def disable_passes(function_config, *names):
    """Skip the named cleanup passes in jobs decorated with ``function_config``.

    Raises ValueError for a name that is not a cleanup pass (see :func:`pass_names`).
    """
    known = pass_names()
    for n in names:
        if n not in known:
            raise ValueError(f"disable_passes: unknown pass {n!r}; cleanup passes are {', '.join(known)}")
    lst = function_config.job_config_proto.flag_name2flag_value[DISABLED_PASSES].at_list_string
    lst.SetInParent()
    lst.val.extend(n for n in names if n not in lst.val)
    return function_config


def complete(job, enable_passes=True):
    """Run the completion passes over ``job`` and return the completed Job."""
    flags = job.job_conf.flag_name2flag_value
    disabled = set(flags[DISABLED_PASSES].at_list_string.val) if DISABLED_PASSES in flags else set()
    def optional(ps):
        return [p for p in ps if p.__name__ not in disabled] if enable_passes else []
    at_amp = REQUIRED_PASSES.index(auto_mixed_precision)
    passes = REQUIRED_PASSES[:at_amp] + optional(FORWARD_PASSES) + REQUIRED_PASSES[at_amp:] + optional(CLEANUP_PASSES)
    log = flags[COMPLETION_LOG].at_list_string
    log.SetInParent()
    for p in passes:
        if not getattr(p, "is_enabled", lambda j: True)(job):  # OneFlow's JobPass::IsEnabled
            continue
        job = p(job)
        job.job_conf.flag_name2flag_value[COMPLETION_LOG].at_list_string.val.append(p.__name__)
    return job
