"""Gradient accumulation (``FunctionConfig().train.num_gradient_accumulation_steps(k)``).

OneFlow's semantics (``oneflow/core/job_rewriter/gradient_accumulation_rewrite_pass.cpp``
and ``ScaleModelDiffByLossInstanceNum`` in ``oneflow/core/job_rewriter/autograd.cpp``):
each call feeds one mini-batch, which is split along dim 0 into ``k`` micro-batches
(``unpack``); forward and backward run once per micro-batch on the same variable values
(``repeat``); the variable gradients are summed (``acc``) and, the loss instance count
being ``k`` times larger, divided by ``k``; the optimizer then updates once per call;
returned blobs are the micro-batch results concatenated along dim 0 (``pack``).

graphfront builds the job for one micro-batch (placeholders with dim 0 divided by
``k``), completes it as usual, then splits the completed Job in two:

* the *micro-batch job*: forward and backward, plus, for each blob the optimizer reads
  from them (the variable gradients), a buffer variable
  ``System-GradientAccumulation-Acc-<i>`` that the blob is added into;
* the *update job*: the optimizer-pass ops (train step, learning rate, clipping,
  model-update ops) and the constants they read, with each gradient replaced by its
  buffer times ``1 / k``, after which the buffers are zeroed.

A micro-batch is what the fed batch and the ops drawing new values on each run (data
readers such as ``megatron_gpt_mmap_data_loader`` or ``OFRecordReader``, random ops: the
registry's ``random`` ops) produce: such ops and everything computed from them run once per
micro-batch, as OneFlow runs the whole forward and backward ``k`` times; a job fed by a data
reader reads ``k`` batches of the reader's ``batch_size`` per call.

Both are Jobs; each runs as an ordinary plan. A job on several devices is split after
the boxing pass: each micro-batch is data parallel over the devices and all-reduces its
gradients (the micro job keeps the ``System-Boxing-*`` ops), so the buffers accumulate
whole gradients and one call equals the full-batch step on one device; the ops added
here get the SBP of the gradient they accumulate, and the two jobs run on the workers
(:class:`graphfront.runtime.distributed.DistributedPlan`). In a job of pipeline stages
(ops on disjoint sets of devices) one call of the micro-batch plan runs the ``k``
micro-batches pipelined on the workers: the forward ops of each, then the rest of each
(GPipe's schedule, Huang et al. 2019, arXiv:1811.06965), so the stages work on different
micro-batches at once.
"""
from __future__ import annotations

import copy

import torch

from graphfront.core import op_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework import scope_symbols as _scope
from graphfront.framework.errors import JobBuildError
from graphfront.ops.registry import op_def
from graphfront.parallel import sbp as _sbp
from graphfront.passes.rewrite import Net
from graphfront.runtime.lowering import Lowering
from graphfront.runtime.plan import Plan
from graphfront.runtime.walk import schedule

BUFFER_PREFIX = "System-GradientAccumulation-Acc-"


def micro_batch_placeholders(placeholders, k, job_name):
    """Copies of ``placeholders`` with dim 0 divided by ``k``. Raises JobBuildError when a
    dim 0 is not divisible by ``k``."""
    out = []
    for ph in placeholders:
        if ph.shape[0] % k:
            raise JobBuildError(f"job '{job_name}': num_gradient_accumulation_steps({k}) splits every input into "
                                f"{k} micro-batches along dim 0, but argument '{ph.param_name}' has shape "
                                f"{ph.shape}")
        micro = copy.copy(ph)
        micro.shape = (ph.shape[0] // k,) + tuple(ph.shape[1:])
        out.append(micro)
    return out


def _is_update_op(op) -> bool:
    sym = _scope.SYMBOLS.get(op.scope_symbol_id)
    return sym is not None and sym.calculation_pass_name == "optimizer_pass" and jb.op_kind(op) != "variable_conf"


def split_job(job, k):
    """``(micro_job, update_job)`` of a completed train Job (see module docstring)."""
    ops = {op.name: op for op in job.net.op}
    producer = {lbn: op.name for op in job.net.op for _, _, lbn in jb.op_outputs(op)}
    fed = set()  # lbns that differ between micro-batches: from the fed batch or a per-run draw
    for op in schedule(job)[0]:  # (producers first: the boxing pass appends its ops to the job)
        if (jb.op_kind(op) == "input_conf" or op_def(op).random
                or any(lbn in fed for _, _, lbn in jb.op_inputs(op))):
            fed.update(lbn for _, _, lbn in jb.op_outputs(op))
    index = {op.name: i for i, op in enumerate(job.net.op)}
    update = {op.name for op in job.net.op if _is_update_op(op)}
    boundary = []  # fed blobs the update reads (the gradients); put in job order below
    stack = sorted(update, key=index.get)
    while stack:  # pull in what the update reads that does not depend on the batch
        for _, _, lbn in jb.op_inputs(ops[stack.pop()]):
            src = producer.get(lbn)
            if src is None or src in update:
                continue
            if lbn in fed:
                if lbn not in boundary:
                    boundary.append(lbn)
            elif jb.op_kind(ops[src]) != "variable_conf":
                update.add(src)
                stack.append(src)
    boundary.sort(key=lambda lbn: (index[producer[lbn]], lbn))  # deterministic buffer numbering
    micro_needed = set()
    for op in job.net.op:
        if op.name in update:
            continue
        for _, _, lbn in jb.op_inputs(op):
            src = producer.get(lbn)
            if src in update:
                raise JobBuildError(f"job '{job.job_conf.job_name}': with gradient accumulation, op '{op.name}' "
                                    f"cannot read '{lbn}', a blob of the optimizer update")
            micro_needed.add(src)
    sbps = _sbp.blob_sbps(job)  # a multi-device job: each gradient's layout (empty on one device)
    layouts = [sbps.get(lbn) for lbn in boundary]
    return (_micro_job(job, update, micro_needed, boundary, layouts),
            _update_job(job, update, boundary, k, layouts))


def _lay_out(net, added, sbp):
    """Give the added ops the SBP ``sbp`` on every blob (no-op on one device)."""
    if sbp is None:
        return
    for op in added:
        bns = [_sbp.bn_in_op(op, a, i) for a, i, _ in jb.op_inputs(op) + jb.op_outputs(op)]
        _sbp.write_signature(net.job, op.name, dict.fromkeys(bns, sbp))


def _finish(net):
    """``net.finish()``, dropping the SBP signatures of the ops the split removed."""
    job = net.finish()
    names = {op.name for op in job.net.op}
    view = job.job_parallel_view_conf
    for table in (view.op_name2sbp_signature_conf, view.op_name2nd_sbp_signature_conf):
        for name in [n for n in table if n not in names]:
            del table[name]
    return job


def _buffer_variable(net, lbn, i):
    d = net.desc(lbn)
    conf = op_conf_pb2.OperatorConf(name=f"{BUFFER_PREFIX}{i}")
    producer = net.producer_op(lbn)
    conf.device_tag = producer.device_tag
    conf.scope_symbol_id = producer.scope_symbol_id
    vc = conf.variable_conf
    vc.out = "out"
    vc.shape.dim.extend(d.shape)
    vc.data_type = d.dtype.proto
    vc.trainable = False
    if d.dtype.is_floating_point:
        vc.initializer.constant_conf.value = 0.0
    else:
        vc.initializer.constant_int_conf.value = 0
    with net.b.scope_of_op(producer.name):  # (on the gradient's placement: a pipeline stage's devices)
        net.b.add_op(conf)
    net.ops[conf.name] = net.job.net.op[-1]
    net._index(net.ops[conf.name])
    return f"{conf.name}/out"


def _micro_job(job, update, micro_needed, boundary, layouts):
    micro = copy.deepcopy(job)
    net = Net(micro)
    net.remove(*[n for n in update if n not in micro_needed])
    net.remove(*[op.name for op in micro.net.op if jb.op_kind(op) == "variable_conf" and not any(
        net.readers(lbn) for _, _, lbn in jb.op_outputs(op))])  # read by the update only
    for i, lbn in enumerate(boundary):
        buf = _buffer_variable(net, lbn, i)
        name = net.producer_op(lbn).name
        total = net.add_user_op(f"{BUFFER_PREFIX}{i}-Add", "add_n", {"in": [buf, lbn]}, like_op=name)
        assign = net.add_user_op(f"{BUFFER_PREFIX}{i}-Assign", "assign",
                                 {"ref": buf, "value": total.user_conf.output["out"].s[0]}, outputs=(), like_op=name)
        _lay_out(net, [net.producer_op(buf), total, assign], layouts[i])
    micro.job_conf.train_conf.ClearField("optimizer_conf")
    return _finish(net)


def _update_job(job, update, boundary, k, layouts):
    upd = copy.deepcopy(job)
    net = Net(upd)
    keep = set(update)
    for name in update:
        for _, _, lbn in jb.op_inputs(net.ops[name]):
            src = net.producer.get(lbn)
            if src is not None and jb.op_kind(net.ops[src]) == "variable_conf":
                keep.add(src)
    upd.helper.ClearField("lbi_diff_watcher_info")
    for i, lbn in enumerate(boundary):  # the same buffer variables, by name
        buf = _buffer_variable(net, lbn, i)
        readers = [(op, arg, j) for op, arg, j in net.readers(lbn) if op.name in update]
        mean = net.add_user_op(f"{BUFFER_PREFIX}{i}-Mean", "scalar_mul", {"in": buf},
                               {"has_float_operand": True, "float_operand": 1.0 / k}, like_op=readers[0][0].name)
        mean_lbn = mean.user_conf.output["out"].s[0]
        for op, arg, j in readers:
            net.set_input(op, arg, j, mean_lbn)
        zeros = net.add_user_op(f"{BUFFER_PREFIX}{i}-Zeros", "zero_like", {"like": buf}, like_op=readers[0][0].name)
        reset = net.add_user_op(f"{BUFFER_PREFIX}{i}-Reset", "assign",
                                {"ref": buf, "value": zeros.user_conf.output["out"].s[0]}, outputs=(),
                                like_op=readers[0][0].name)
        reset.ctrl_in_op_name.append(mean.name)
        _lay_out(net, [net.producer_op(buf), mean, zeros, reset], layouts[i])
        keep.update({buf.split("/")[0], mean.name, zeros.name, reset.name})
    net.remove(*[n for n in net.ops if n not in keep])
    for rel in upd.helper.tag2lbi_relations.values():
        del rel.pair[:]
    return _finish(net)


class AccumulatingPlan(Lowering):
    """Runs a train job with gradient accumulation: the micro-batch plan once per
    micro-batch, the update plan once per call (see module docstring); composes with the
    lowering of its two parts (a :class:`~graphfront.runtime.plan.Plan` or a
    :class:`~graphfront.runtime.distributed.DistributedPlan`)."""

    def __init__(self, job, k, session, cuda_graph=True, make_plan=None):
        """``make_plan(job, part)`` lowers each of the two jobs, ``part`` "micro" or
        "update" (default: a :class:`graphfront.runtime.plan.Plan` in this process)."""
        self.job = job
        self.k = k
        micro_job, update_job = split_job(job, k)
        session.init_variables(micro_job)
        session.init_variables(update_job)
        make_plan = make_plan or (lambda j, part: Plan(j, session.variables, session.watchers, cuda_graph=cuda_graph))
        self.micro = make_plan(micro_job, "micro")
        self.update = make_plan(update_job, "update")
        self._session = session
        self._buffers = [op.name for op in micro_job.net.op if op.name.startswith(BUFFER_PREFIX)
                         and jb.op_kind(op) == "variable_conf"]
        self.input_names = self.micro.input_names
        self.output_names = self.micro.output_names
        self.order = list(self.micro.order) + list(self.update.order)
        self.devices = set(self.micro.devices) | set(self.update.devices)
        self.source = (f"# micro-batch plan (runs {k} times per call)\n{self.micro.source}\n"
                       f"# update plan (runs once per call)\n{self.update.source}")

    def before_call(self, variables):
        """What the micro-batch lowering runs before a call (both parts run in one way)."""
        self.micro.before_call(variables)

    def check_feeds(self, arrays):
        """The micro-batch lowering's check of fed index values (whole batches, numpy)."""
        self.micro.check_feeds(arrays)

    def __call__(self, feeds):
        """One call: ``k`` micro-batches, then the update. A call that raises zeroes the
        accumulation buffers (the micro-batches before the failure had added into them), so
        that the next call accumulates its own gradients only."""
        try:
            if getattr(self.micro, "micro_batches", 1) > 1:  # the micro-batch lowering runs all k at once
                results = self.micro(feeds)
                self.update([])
                return tuple(r.flatten(0, 1) if r.dim() > 1 else r for r in results)
            parts = [f.chunk(self.k, dim=0) for f in feeds]
            results = [self.micro([p[i] for p in parts]) for i in range(self.k)]
            self.update([])
        except BaseException:
            tensors = self._session.variables.tensors
            for name in self._buffers:
                tensors[name].zero_()
            raise
        return tuple(torch.cat([r[j] for r in results]) if results[0][j].dim() else torch.stack([r[j] for r in results])
                     for j in range(len(results[0])))
