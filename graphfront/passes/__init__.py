"""Job completion passes: each is a function ``Job -> Job`` over the proto.

:func:`complete` runs them in order: autograd and optimizer (train jobs), then the
cleanup passes. The names of the passes that ran are appended to
``job.job_conf.flag_name2flag_value["__completion_log__"]`` (a list of strings).
"""
from __future__ import annotations

from graphfront.passes.autograd import autograd
from graphfront.passes.cleanup import prune_dead_ops
from graphfront.passes.optimizer import optimizer

REQUIRED_PASSES = [autograd, optimizer]
CLEANUP_PASSES = [prune_dead_ops]
COMPLETION_LOG = "__completion_log__"


def complete(job, enable_passes=True):
    """Run the completion passes over ``job`` and return the completed Job."""
    passes = REQUIRED_PASSES + (CLEANUP_PASSES if enable_passes else [])
    log = job.job_conf.flag_name2flag_value[COMPLETION_LOG].at_list_string
    log.SetInParent()
    for p in passes:
        job = p(job)
        job.job_conf.flag_name2flag_value[COMPLETION_LOG].at_list_string.val.append(p.__name__)
    return job
