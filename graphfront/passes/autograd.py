"""Autograd pass (``Job -> Job``): backward OpConfs for a train job.

Follows OneFlow's gradient pipeline (v0.6.0 ``oneflow/core/job_rewriter/autograd.cpp``):

1. each loss lbn is seeded by a ``constant_like`` system op
   ``<loss_op>_<loss_blob>_grad_ConstantLike`` (value 1, or the static
   ``loss_scale_factor``), times the loss-scale variable under dynamic loss scaling
   (:mod:`graphfront.passes.loss_scale`);
2. ops are visited in reverse order; each op whose outputs received gradients calls
   its registered grad maker, which emits backward ops through the same
   ``user_op_builder``/CurJobAddOp path; partial gradients of one blob are summed by
   ``add_n`` ops named ``<producer>_clone_grad_<uid>``;
3. every trainable variable's gradient is divided by the loss element count E when
   E > 1 (``System-ModelDiffScale-ScalarMul_<uid>``), and by the static or dynamic loss scale.

The pass records the (variable, gradient) pairs in
``job.helper.tag2lbi_relations["variable_grad"]`` for the optimizer pass, and adds a
``foreign_watch_conf`` op on the gradient of every blob registered with
``flow.watch_diff`` (``job.helper.lbi_diff_watcher_info``).
"""
from __future__ import annotations

from graphfront.core import op_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError, format_location
from graphfront.ops import registry
from graphfront.ops.builder import UserOpConfBuilder, unique_str
from graphfront.passes import loss_scale

VARIABLE_GRAD_TAG = "variable_grad"


class GradCtx:
    """What an op's grad maker sees (see ``graphfront.ops.registry``)."""

    def __init__(self, builder, op_conf, out_grads, requires):
        self.builder = builder
        self.op_conf = op_conf
        self.op_name = op_conf.name
        self.attrs = jb.user_attrs(op_conf)
        self._ins, self._outs = jb.op_args(op_conf)
        self._out_grads = out_grads
        self._requires = requires
        self.input_grads = []  # (input lbn, gradient lbn) pairs

    def attr(self, name):
        return self.attrs[name]

    def has_input(self, arg) -> bool:
        return len(self._ins.get(arg, ())) > 0

    def input(self, arg, i=0) -> str:
        return self._ins[arg][i]

    def inputs(self, arg) -> list:
        return list(self._ins.get(arg, ()))

    def output(self, arg, i=0) -> str:
        return self._outs[arg][i]

    def outputs(self, arg) -> list:
        return list(self._outs.get(arg, ()))

    def dout(self, arg, i=0):
        """The gradient lbn of output ``arg`` (None when no gradient reaches it)."""
        if arg not in self._outs:
            return None
        return self._out_grads.get(self._outs[arg][i])

    def needs(self, arg, i=0) -> bool:
        """Whether input ``arg`` (index ``i``) needs a gradient."""
        return i < len(self._ins.get(arg, ())) and self._ins[arg][i] in self._requires

    def desc(self, lbn):
        return self.builder.desc(lbn)

    def emit(self, op_type, inputs, attrs=None, name=None, outputs=None, num=None):
        """Add one backward user op; returns its output lbn, or a dict arg -> lbn(s)."""
        opdef = registry.lookup(op_type)
        name = self.builder.unique_op_name(name or f"{self.op_name}_grad")
        b = UserOpConfBuilder(name, prefix=False).Op(op_type)
        for arg, value in inputs.items():
            if value is None:
                continue
            b.Input(arg, list(value) if isinstance(value, (list, tuple)) else [value])
        out_args = outputs or [a.name for a in opdef.outputs if not a.optional]
        for arg in out_args:
            b.Output(arg, (num or {}).get(arg, 1))
        for k, v in (attrs or {}).items():
            if k in opdef.attrs:
                b.Attr(k, v)
        b.CheckAndComplete()
        added = self.builder.add_op(b.op_conf, location=self.builder.locations.get(self.op_name))
        uc = added.user_conf
        if len(out_args) == 1 and len(uc.output[out_args[0]].s) == 1:
            return uc.output[out_args[0]].s[0]
        return {arg: (list(uc.output[arg].s) if opdef.output_def(arg).repeated else uc.output[arg].s[0])
                for arg in out_args}

    def set_grad(self, arg, lbn, i=0):
        """Bind ``lbn`` as the gradient of input ``arg`` (index ``i``).

        A blob feeding several inputs of one op collects one partial gradient per input.
        """
        if lbn is not None:
            self.input_grads.append((self._ins[arg][i], lbn))
        return True


def _trainable(conf) -> bool:
    return conf.variable_conf.trainable if conf.variable_conf.HasField("trainable") else True


def autograd(job):
    """Add backward ops to a train job (see module docstring). Returns the job."""
    if not job.job_conf.HasField("train_conf"):
        return job
    b = jb.JobBuilder(job)
    tc = job.job_conf.train_conf
    if not tc.loss_lbn:
        raise JobBuildError(f"train job '{b.job_name}' has no loss: call optimizer.minimize(loss) in its body")
    forward = list(job.net.op)

    # lbns that depend on a trainable variable through differentiable ops
    requires = set()
    variables = []
    for op in forward:
        kind = jb.op_kind(op)
        if kind == "variable_conf":
            if _trainable(op) and b.desc(f"{op.name}/out").dtype.is_floating_point:  # no gradient for ints
                variables.append(op.name)
                requires.update(lbn for _, _, lbn in jb.op_outputs(op))
            continue
        opdef = registry.op_def(op)
        if opdef.no_grad:
            continue
        # integer outputs carry a gradient only out of ops with a grad function (a cast
        # to int and back, an integer loss: OneFlow differentiates through them)
        carries_int = opdef.grad is not None
        if any(lbn in requires for _, _, lbn in jb.op_inputs(op)):
            for _, _, lbn in jb.op_outputs(op):
                if carries_int or b.desc(lbn).dtype.is_floating_point:
                    requires.add(lbn)

    partials = {}  # lbn -> [grad lbns]
    scale_factor = tc.loss_scale_factor if tc.HasField("loss_scale_factor") else 1.0
    dynamic = loss_scale.is_dynamic(job)
    loss_numels = set()
    for loss in tc.loss_lbn:
        if loss not in requires:
            raise JobBuildError(f"loss '{loss}' of job '{b.job_name}' does not depend on any trainable variable")
        op_name, blob = loss.split("/", 1)
        loss_numels.add(b.desc(loss).numel)
        seed = op_conf_pb2.OperatorConf(name=f"{op_name}_{blob}_grad_ConstantLike")
        seed.constant_like_conf.like = loss
        seed.constant_like_conf.out = "out"
        seed.constant_like_conf.float_operand = scale_factor
        with b.scope_of_op(op_name, "backward_pass"):
            b.add_op(seed, location=b.locations.get(op_name))
            seed_lbn = f"{seed.name}/out"
            if dynamic:
                seed_lbn = loss_scale.scale_seed(b, seed_lbn, loss_scale.loss_scale_variable(b))
        partials.setdefault(loss, []).append(seed_lbn)

    def summed(lbn):
        grads = partials.get(lbn)
        if not grads:
            return None
        if len(grads) == 1:
            return grads[0]
        producer = lbn.split("/", 1)[0]
        conf = UserOpConfBuilder(unique_str(f"{producer}_clone_grad_"), prefix=False).Op("add_n") \
            .Input("in", grads).Output("out").CheckAndComplete().op_conf
        added = b.add_op(conf, location=b.locations.get(producer))
        total = added.user_conf.output["out"].s[0]
        partials[lbn] = [total]
        return total

    for op in reversed(forward):
        if registry.op_def(op).interface:
            continue
        outs = [lbn for _, _, lbn in jb.op_outputs(op) if lbn in requires]
        if not outs or not any(lbn in partials for lbn in outs):
            continue
        needed = [lbn for _, _, lbn in jb.op_inputs(op) if lbn in requires]
        if not needed:
            continue
        with b.scope_of_op(op.name, "backward_pass"):
            out_grads = {lbn: summed(lbn) for lbn in outs if lbn in partials}
            opdef = registry.op_def(op)
            if opdef.grad is None:
                raise JobBuildError(
                    f"op '{op.name}' ({opdef.op_type}) has no grad function, but the loss depends on it through "
                    f"a trainable variable (GradientFunctionNotFound){format_location(b.locations.get(op.name))}")
            g = GradCtx(b, op, out_grads, requires)
            opdef.grad(g)
            for lbn, grad in g.input_grads:
                if lbn in requires:
                    partials.setdefault(lbn, []).append(grad)

    # variable gradients: sum, scale by 1/E and the loss scale, record for the optimizer
    inv = 1.0 / scale_factor
    if len(loss_numels) == 1:
        (e,) = loss_numels
        inv /= e
    else:
        raise JobBuildError(f"job '{b.job_name}' has losses with different element counts {sorted(loss_numels)}; "
                            "reduce them to one shape first")
    pairs = job.helper.tag2lbi_relations[VARIABLE_GRAD_TAG]
    inv_dynamic = None
    for var in variables:
        lbn = f"{var}/out"
        with b.scope_of_op(var, "optimizer_pass"):
            grad = summed(lbn)
            if grad is None:
                continue
            if inv != 1.0:
                conf = UserOpConfBuilder(unique_str("System-ModelDiffScale-ScalarMul_"), prefix=False) \
                    .Op("scalar_mul").Input("in", [grad]).Output("out") \
                    .Attr("has_float_operand", True).Attr("float_operand", inv).CheckAndComplete().op_conf
                grad = b.add_op(conf, location=b.locations.get(var)).user_conf.output["out"].s[0]
            if dynamic:
                inv_dynamic = inv_dynamic or loss_scale.inverse_scale(b, loss_scale.loss_scale_variable(b))
                grad = loss_scale.unscale(b, grad, inv_dynamic)
        pair = pairs.pair.add()
        pair.first.op_name, pair.first.blob_name = lbn.split("/", 1)
        pair.second.op_name, pair.second.blob_name = grad.split("/", 1)

    _add_diff_watchers(b, partials, summed)
    return b.job


def _add_diff_watchers(b, partials, summed):
    info = b.job.helper.lbi_diff_watcher_info.job_name2lbi_and_watcher_uuids
    if b.job_name not in info:
        return
    for pair in info[b.job_name].lbi_and_uuid_pair:
        lbn = f"{pair.lbi.op_name}/{pair.lbi.blob_name}"
        with b.scope_of_op(pair.lbi.op_name, "backward_pass"):
            grad = summed(lbn)
        if grad is None:
            raise JobBuildError(f"flow.watch_diff: blob '{lbn}' receives no gradient from the loss of job "
                                f"'{b.job_name}'{format_location(b.locations.get(pair.lbi.op_name))}")
        watch = op_conf_pb2.OperatorConf(name=unique_str("ForeignWatchDiff_"), device_tag="cpu")
        watch.foreign_watch_conf.SetInParent()
        setattr(watch.foreign_watch_conf, "in", grad)
        watch.foreign_watch_conf.handler_uuid = pair.watcher_uuid
        b.add_op(watch, location=b.locations.get(pair.lbi.op_name))
