"""SSP variable proxies (``Job -> Job``), after OneFlow's ``AddSspVariableProxy`` pass.

Runs after the optimizer pass in a train job whose ``FunctionConfig().enable_ssp(True)`` set
the job flag ``enable_ssp``. Every variable that has a gradient gets one
``ssp_variable_proxy`` op (``<variable>_ssp_variable_proxy``) with ``buffer_size =
ssp_num_stages - ssp_stage_id`` of the variable's scope (``flow.experimental.scope.config``):
the optimizer-pass ops (the update) read its ``ref`` (the variable itself) and every other
reader (forward and backward ops) its ``value``: the variable as run ``i - buffer_size``
left it (``buffer_size = 1``, the last stage, reads the current weights). The forward and
backward of run ``i`` therefore use weights ``buffer_size - 1`` updates old, as a stage of
OneFlow's stale-synchronous pipeline does; graphfront still runs the job as one stage
(nothing is overlapped). A variable outside such a scope is an error (OneFlow checks it too).
"""
from __future__ import annotations

from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError
from graphfront.framework.scope_symbols import calculation_pass_of, scope_attr
from graphfront.passes.autograd import VARIABLE_GRAD_TAG
from graphfront.passes.rewrite import Net, single_output


def _buffer_size(op) -> int:
    stages = scope_attr(op.scope_symbol_id, "ssp_num_stages")
    stage = scope_attr(op.scope_symbol_id, "ssp_stage_id")
    if not (stages > 0 and 0 <= stage < stages):
        raise JobBuildError(
            f"enable_ssp: variable '{op.name}' must be built inside flow.experimental.scope.config("
            f"ssp_num_stages=N, ssp_stage_id=S) with N > 0 and 0 <= S < N, received ssp_num_stages={stages}, "
            f"ssp_stage_id={stage}")
    return stages - stage


def add_ssp_variable_proxy(job):
    """Put an ``ssp_variable_proxy`` between each updated variable and its readers (see module doc)."""
    net = Net(job)
    with_grad = {f"{p.first.op_name}/{p.first.blob_name}" for p in job.helper.tag2lbi_relations[VARIABLE_GRAD_TAG].pair}
    for op in list(job.net.op):
        lbn = f"{op.name}/{op.variable_conf.out}" if jb.op_kind(op) == "variable_conf" else None
        if lbn not in with_grad:
            continue
        readers = net.readers(lbn)
        updating = [calculation_pass_of(r.scope_symbol_id) == "optimizer_pass" for r, _, _ in readers]
        if not any(updating):
            continue
        proxy = net.add_user_op(f"{op.name}_ssp_variable_proxy", "ssp_variable_proxy", {"var": lbn},
                                {"buffer_size": _buffer_size(op)}, outputs=("ref", "value"), like_op=op.name)
        ref, value = single_output(proxy, "ref"), single_output(proxy, "value")
        for (reader, arg, i), update in zip(readers, updating):
            net.set_input(reader, arg, i, ref if update else value)
    return net.finish()


add_ssp_variable_proxy.is_enabled = lambda job: (
    job.job_conf.HasField("train_conf") and "enable_ssp" in job.job_conf.flag_name2flag_value
    and job.job_conf.flag_name2flag_value["enable_ssp"].at_bool)
