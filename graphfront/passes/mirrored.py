"""The mirrored view on many devices (``FunctionConfig().default_logical_view(flow.scope.mirrored_view())``).

Under OneFlow's mirrored view every device runs the job on its own part of the data: a
``tp.ListNumpy.Placeholder(shape)`` argument takes one array per device, each at most
``shape`` (dynamic), a ``tp.Numpy.Placeholder(shape)`` argument takes one array split
along axis 0 into ``n`` equal parts (its blob in the job is one part), and every op runs
locally on each device's blobs, with no boxing between devices. Variables are consistent (broadcast: the same values on every device).
Their gradients are the only blobs that cross devices: each device's gradient is a partial
sum of the logical one, all-reduced before the optimizer, and divided by the total loss
instance count, the loss elements summed over all devices at run time (OneFlow's
``ScaleModelDiffByDynamicLossInstanceNum`` with ``TryMirroredCastTotalLossInstanceNum``,
``oneflow/core/job_rewriter/autograd.cpp``). OneFlow counts the loss's axis-0 length;
graphfront counts its elements, as its single-device autograd divides by the loss element
count: the two agree for per-sample losses (shape ``(batch,)``) and scalar losses. So a
mirrored train step on parts ``x_1 .. x_n`` updates the variables as one device does on
their concatenation.

:func:`mirror` runs after the completion passes on a job of ``n > 1`` devices whose
function config selects the mirrored view. It marks every op mirrored
(``job_parallel_view_conf.op_name2is_mirrored_parallel_view``), writes the SBP signatures
of the variables (``B``) and adds, per trainable variable, the ops that turn the local
gradient ``g`` (autograd's local sum divided by the static loss element count ``E``) into
``all_reduce(g) / (all_reduce(count) / E)``:

* ``System-Mirrored-LossInstanceNum-*``: ``count = reduce_sum(ones_like(loss))`` on each
  device, all-reduced once (``System-Boxing-AllReduce-*``) and scaled by ``1 / E``;
* ``System-Boxing-AllReduce-*`` (``_nccl_logical_all_reduce``, P -> B) on each gradient,
  then ``broadcast_div`` by the scaled count (``System-Mirrored-ModelDiffScale-*``).
"""
from __future__ import annotations

import itertools

from graphfront.framework import job_builder as jb
from graphfront.parallel import sbp as _sbp
from graphfront.passes.autograd import VARIABLE_GRAD_TAG
from graphfront.passes.rewrite import Net


def is_mirrored(job) -> bool:
    """Whether ``job`` was completed under the mirrored view by :func:`mirror`."""
    return len(job.job_parallel_view_conf.op_name2is_mirrored_parallel_view) > 0


def mirror(job, n):
    """Make the completed ``job`` a mirrored job on ``n`` devices (see module docstring)."""
    net = Net(job)
    counter = itertools.count()
    for op in list(job.net.op):
        if jb.op_kind(op) == "variable_conf":
            _sbp.write_signature(job, op.name, {"out": _sbp.B})
    relation = job.helper.tag2lbi_relations.get(VARIABLE_GRAD_TAG) if job.job_conf.HasField("train_conf") else None
    if relation is not None and len(relation.pair):
        loss = job.job_conf.train_conf.loss_lbn[0]
        loss_op = loss.split("/", 1)[0]
        e = net.desc(loss).numel

        def all_reduce(lbn, like_op):
            added = net.add_user_op(f"System-Boxing-AllReduce-{next(counter)}", "_nccl_logical_all_reduce",
                                    {"in": lbn}, like_op=like_op)
            _sbp.write_signature(job, added.name, {"in_0": _sbp.P, "out_0": _sbp.B})
            return f"{added.name}/out_0"

        ones = net.add_user_op("System-Mirrored-LossInstanceNum-Ones", "ones_like", {"x": loss}, outputs=("y",),
                               like_op=loss_op)
        count = net.add_user_op("System-Mirrored-LossInstanceNum", "reduce_sum", {"input_tensor": f"{ones.name}/y_0"},
                                {"axis": list(range(len(net.desc(loss).shape))), "keepdims": False},
                                outputs=("output_tensor",), like_op=loss_op)
        total = all_reduce(f"{count.name}/output_tensor_0", loss_op)
        scale = net.add_user_op("System-Mirrored-LossInstanceNum-Scale", "scalar_mul", {"in": total},
                                {"has_float_operand": True, "float_operand": 1.0 / e}, like_op=loss_op)
        scale_lbn = f"{scale.name}/out_0"
        for pair in relation.pair:
            var, grad = pair.first.op_name, f"{pair.second.op_name}/{pair.second.blob_name}"
            readers = net.readers(grad)
            div = net.add_user_op(f"System-Mirrored-ModelDiffScale-{next(counter)}", "broadcast_div",
                                  {"x": all_reduce(grad, var), "y": scale_lbn}, outputs=("z",), like_op=var)
            final = f"{div.name}/z_0"
            for op_conf, arg, i in readers:
                net.set_input(op_conf, arg, i, final)
            pair.second.op_name, pair.second.blob_name = final.split("/", 1)
    job = net.finish()
    for op in job.net.op:
        job.job_parallel_view_conf.op_name2is_mirrored_parallel_view[op.name] = True
    return job
