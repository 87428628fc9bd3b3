"""Model-update ops, their helpers and ``assign`` (OneFlow v0.6.0 ``oneflow/user/ops/model_update_ops.cpp``,
``oneflow/user/kernels/model_update_kernel_util.h``, ``oneflow/user/ops/assign_op.cpp``).

Every ``*_update`` op has no outputs: it updates ``model`` and its state inputs in place
(``mutates=``), which the runtime orders after every other reader of those blobs. They
are NoGrad. Shape rules (OneFlow's ``oneflow/user/ops/model_update_ops.cpp``): ``model_diff`` and each state tensor match ``model``'s
shape and dtype; ``learning_rate``, ``scale_by_tensor`` and ``skip_if`` have shape
``(1,)``; ``learning_rate`` is float32; ``scale_by_tensor`` has ``model``'s dtype.

Common prologue of every update kernel (OneFlow's update-kernel contract):

* a non-zero ``skip_if`` skips the whole update (dynamic loss scaling);
* ``lr`` = the ``learning_rate`` input if present, else attr ``learning_rate_val``;
* the effective gradient ``g = model_diff * scale (* scale_by_tensor) + l1 * sign(model)
  + l2 * model`` (``sign(0) = 0``).

``weight_decay`` is *decoupled* (applied to the weights, not fed through the
momentum/adaptive statistics), which is what makes ``SGDW``/``AdamW`` decoupled
(``python/oneflow/compatible/single_client/ops/optimizer.py``). ``w`` is ``model``; all state starts at 0
unless stated. Formulas and the independent reference each one is tested against
(``tests/test_optimizers.py``):

=========================  =========================================================  ======================
op                         update                                                     checked against
=========================  =========================================================  ======================
``sgd_update``             ``w -= lr * (g + wd * w)``                                 ``torch.optim.SGD``
``momentum_update``        ``mom = beta * mom - lr * g;  w += mom - lr * wd * w``     ``torch.optim.SGD``
                                                                                      (momentum; OneFlow's
                                                                                      ``mom = -lr * buf``,
                                                                                      equal for constant lr)
``adam_update``            ``m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;``           ``torch.optim.Adam`` /
                           ``vmax = max(vmax, v)`` if amsgrad;                       ``AdamW`` (decoupled
                           ``w -= lr/bc1 * m / (sqrt(v or vmax)/sqrt(bc2) + eps)``    wd, amsgrad); numpy
                           ``     + lr * wd * w``; ``bc1 = bc2 = 1`` unless           without bias correction
                           ``do_bias_correction``
``rmsprop_update``         ``ms = d ms + (1-d) g^2;`` centered: ``mg = d mg + (1-d)    ``torch.optim.RMSprop``
                           g``, ``den = ms - mg^2`` else ``den = ms``;                (alpha = decay_rate);
                           ``w -= lr * g / sqrt(den + eps) + lr * wd * w``            numpy for eps inside
                                                                                      the sqrt (OneFlow)
``lars_update``            ``trust = coeff*|w| / (eps + |g| + wd*|w|)`` (1 when        numpy, OneFlow's
                           ``|w|`` or ``|g|`` is 0); ``mom = beta * mom - lr * trust   ``LarsUpdateFunctor``;
                           * g;  w += mom - lr * trust * wd * w`` (the decay          trust ratio: You et al.
                           outside the momentum, as OneFlow's kernel)                 2017, Alg. 1
``lamb_update``            ``m, v`` as Adam; ``r = (m/(1-b1_t)) / (sqrt(v/(1-b2_t))    numpy, LAMB paper
                           + eps);  u = r + wd * w;  w -= lr * |w|/|u| * u``           (You et al. 2019,
                           (ratio 1 when a norm is 0); then ``b1_t *= b1, b2_t *=     Alg. 2)
                           b2`` (the ``[1]`` states start at ``b1``, ``b2``)
``adagrad_update``         ``lr_t = lr / (1 + (t-1) * lr_decay)`` with ``t =           ``torch.optim.Adagrad``
                           train_step + 1`` (``train_step`` counts from 0) or
                           ``train_step_val``; ``sum += g^2;``
                           ``w -= lr_t * g / (sqrt(sum) + eps) + lr_t * wd * w``
=========================  =========================================================  ======================

``adam_bias_correction_factor``: ``out = 1 - beta ** (train_step + 1)`` (float32, the
shape of ``train_step``). ``l1_l2_regularize_gradient``: ``out = model_diff + l1 *
sign(model) + l2 * model``.
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.common import skippable
from graphfront.ops.registry import ArgDef, op
from graphfront.parallel import sbp as _sbp

LR_INPUTS = ["learning_rate?", "scale_by_tensor?", "skip_if?"]
REG_ATTRS = {"scale": ("double", 1.0), "l1": ("float", 0.0), "l2": ("float", 0.0),
             "weight_decay": ("float", 0.0)}
LR_VAL = {"learning_rate_val": ("float", 0.0)}


# --------------------------------------------------------------------------- shared helpers

def check_update_inputs(ctx, state=(), scalar_state=()):
    """Shape/dtype rules of an update op (``oneflow/user/ops/model_update_ops.cpp``).

    ``state`` args must match ``model``; ``scalar_state`` args (LAMB's ``beta*_t``) are
    ``(1,)`` blobs of ``model``'s dtype.
    """
    m = ctx.input("model")
    ctx.check(m.dtype.is_floating_point, f"input 'model' must be floating point, received {m.dtype.name}")
    for arg in ("model_diff",) + tuple(state):
        d = ctx.input(arg)
        if d is not None:
            ctx.check(d.shape == m.shape, f"input '{arg}' expected shape {m.shape} (as 'model'), received {d.shape}")
            ctx.check(d.dtype is m.dtype, f"input '{arg}' expected dtype {m.dtype.name} (as 'model'), received "
                                          f"{d.dtype.name}")
    one = (1,)
    for arg, dtype in (("learning_rate", _dt.float32), ("scale_by_tensor", m.dtype), ("skip_if", None),
                       ("bias_correction1", _dt.float32), ("bias_correction2", _dt.float32),
                       ("train_step", None)) + tuple((a, m.dtype) for a in scalar_state):
        d = ctx.input(arg)
        if d is None:
            continue
        ctx.check(d.shape == one, f"input '{arg}' expected shape (1,), received {d.shape}")
        if dtype is not None:
            ctx.check(d.dtype is dtype, f"input '{arg}' expected dtype {dtype.name}, received {d.dtype.name}")
        elif arg in ("train_step", "skip_if"):
            ctx.check(d.dtype.is_integer, f"input '{arg}' expected an integer dtype, received {d.dtype.name}")


def regularized_diff(model, diff, scale, l1, l2, scale_by_tensor=None):
    """``diff * scale (* scale_by_tensor) + l1 * sign(model) + l2 * model`` in ``model``'s dtype."""
    g = diff.to(model.dtype)
    if scale != 1.0:
        g = g * scale
    if scale_by_tensor is not None:
        g = g * scale_by_tensor
    if l1:
        g = g + l1 * torch.sign(model)
    if l2:
        g = g + l2 * model
    return g


def regularized_diff_xla(model, diff, scale, l1, l2, scale_by_tensor=None):
    """:func:`regularized_diff` over jax arrays."""
    g = diff.astype(model.dtype)
    if scale != 1.0:
        g = g * scale
    if scale_by_tensor is not None:
        g = g * scale_by_tensor
    if l1:
        g = g + l1 * xla_rules.jnp().sign(model)
    if l2:
        g = g + l2 * model
    return g


def update_op(op_type, inputs, attrs, state=(), scalar_state=(), *, step, doc, check=None, xla_step=None, sbp=None):
    """Register one ``*_update`` op.

    ``step(k)`` is called once per op instance at lowering time and returns
    ``apply(model, g, lr, args)``: ``g`` is the regularized gradient, ``lr`` the learning
    rate (a ``(1,)`` tensor or a float) and ``args`` maps every input name to its value.
    ``apply`` updates ``model`` and the state tensors in place. ``check(ctx)`` adds
    op-specific build-time checks to :func:`check_update_inputs`. ``xla_step(k)``, when
    given, is ``step`` over jax arrays: its ``apply`` returns ``{arg: new value}`` for the
    arguments it updates instead of writing them (the op's ``xla`` rule). ``sbp``: the op's
    SBP rule (None: each updated blob keeps its layout, ``graphfront.parallel.sbp``).
    """
    names = [ArgDef.parse(s).name for s in inputs]

    def kernel(k):
        scale, l1, l2 = k.attr("scale"), k.attr("l1"), k.attr("l2")
        lr_val = k.attrs.get("learning_rate_val", 0.0)
        apply = step(k)

        def run(*values):
            args = dict(zip(names, values))

            def update():
                model = args["model"]
                g = regularized_diff(model, args["model_diff"], scale, l1, l2, args.get("scale_by_tensor"))
                lr = args.get("learning_rate")
                apply(model, g, lr_val if lr is None else lr, args)
            skippable(args.get("skip_if"), [args[a] for a in mutated if args.get(a) is not None], update)
            return None
        run.__name__ = op_type
        return run

    mutated = ("model",) + tuple(state) + tuple(scalar_state)

    def xla(k):
        jnp = xla_rules.jnp()
        scale, l1, l2 = k.attr("scale"), k.attr("l1"), k.attr("l2")
        lr_val = k.attrs.get("learning_rate_val", 0.0)
        apply = xla_step(k)

        def run(*values):
            args = dict(zip(names, values))
            model = args["model"]
            g = regularized_diff_xla(model, args["model_diff"], scale, l1, l2, args.get("scale_by_tensor"))
            lr = args.get("learning_rate")
            new = apply(model, g, lr_val if lr is None else lr.reshape(()), args)
            skip = args.get("skip_if")
            if skip is not None:  # a non-zero skip_if keeps every value
                new = {a: jnp.where(skip.reshape(()) != 0, args[a], v) for a, v in new.items()}
            return None, tuple(new.get(a) for a in mutated)
        return run

    def infer(ctx):
        check_update_inputs(ctx, state, scalar_state)
        if check is not None:
            check(ctx)

    return op(op_type, inputs=inputs, outputs=[], attrs=attrs, infer=infer,
              kernel=kernel, no_grad=True, mutates=mutated, doc=doc, xla=xla if xla_step else None, sbp=sbp)


def _decay(model, lr, wd):
    """The decoupled weight-decay term ``lr * wd * model`` (0 when wd is 0)."""
    return lr * wd * model if wd else 0.0


# --------------------------------------------------------------------------- SGD / momentum

def _sgd_step(k):
    wd = k.attr("weight_decay")

    def apply(model, g, lr, args):
        model.sub_(lr * (g + wd * model) if wd else lr * g)
    return apply


def _sgd_xla_step(k):
    wd = k.attr("weight_decay")
    return lambda model, g, lr, args: {"model": model - (lr * (g + wd * model) if wd else lr * g)}


update_op("sgd_update", ["model", "model_diff"] + LR_INPUTS, {**LR_VAL, **REG_ATTRS}, step=_sgd_step,
          xla_step=_sgd_xla_step, doc="w -= lr * (g + weight_decay * w)")


def _momentum_step(k):
    wd, beta = k.attr("weight_decay"), k.attr("beta")

    def apply(model, g, lr, args):
        mom = args["momentum"]
        mom.mul_(beta).sub_(lr * g)
        model.add_(mom - _decay(model, lr, wd))
    return apply


def _momentum_xla_step(k):
    wd, beta = k.attr("weight_decay"), k.attr("beta")

    def apply(model, g, lr, args):
        mom = args["momentum"] * beta - lr * g
        return {"momentum": mom, "model": model + (mom - _decay(model, lr, wd))}
    return apply


update_op("momentum_update", ["model", "model_diff", "momentum"] + LR_INPUTS,
          {**LR_VAL, **REG_ATTRS, "beta": ("float", 0.9)}, state=("momentum",), step=_momentum_step,
          xla_step=_momentum_xla_step,
          doc="momentum = beta * momentum - lr * g; w += momentum - lr * weight_decay * w")


# --------------------------------------------------------------------------- Adam

def _adam_step(k):
    b1, b2, eps = k.attr("beta1"), k.attr("beta2"), k.attr("epsilon")
    wd, amsgrad, correct = k.attr("weight_decay"), k.attr("amsgrad"), k.attr("do_bias_correction")
    bc1_val, bc2_val = k.attr("bias_correction1_val"), k.attr("bias_correction2_val")

    def apply(model, g, lr, args):
        m, v, max_v = args["m"], args["v"], args["max_v"]
        bc1 = bc2 = 1.0
        if correct:
            bc1 = args["bias_correction1"] if args.get("bias_correction1") is not None else bc1_val
            bc2 = args["bias_correction2"] if args.get("bias_correction2") is not None else bc2_val
        m.mul_(b1).add_(g, alpha=1.0 - b1)
        v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
        second = v
        if amsgrad:
            torch.maximum(max_v, v, out=max_v)
            second = max_v
        denom = second.sqrt() / (bc2 ** 0.5) + eps
        model.sub_((lr / bc1) * (m / denom) + _decay(model, lr, wd))
    return apply


def adam_xla_step(k):
    jnp = xla_rules.jnp()
    b1, b2, eps = k.attr("beta1"), k.attr("beta2"), k.attr("epsilon")
    wd, amsgrad, correct = k.attr("weight_decay"), k.attr("amsgrad"), k.attr("do_bias_correction")
    bc1_val, bc2_val = k.attr("bias_correction1_val"), k.attr("bias_correction2_val")

    def apply(model, g, lr, args):
        bc1 = bc2 = 1.0
        if correct:
            bc1 = args["bias_correction1"].reshape(()) if args.get("bias_correction1") is not None else bc1_val
            bc2 = args["bias_correction2"].reshape(()) if args.get("bias_correction2") is not None else bc2_val
        m = args["m"] * b1 + g * (1.0 - b1)
        v = args["v"] * b2 + g * g * (1.0 - b2)
        new = {"m": m, "v": v}
        second = v
        if amsgrad:
            second = new["max_v"] = jnp.maximum(args["max_v"], v)
        denom = jnp.sqrt(second) / (bc2 ** 0.5) + eps
        new["model"] = model - ((lr / bc1) * (m / denom) + _decay(model, lr, wd))
        return new
    return apply


update_op("adam_update",
          ["model", "model_diff"] + LR_INPUTS + ["bias_correction1?", "bias_correction2?", "m", "v", "max_v"],
          {**LR_VAL, "bias_correction1_val": ("float", 1.0), "bias_correction2_val": ("float", 1.0),
           "scale": ("double", 1.0), "l1": ("float", 0.0), "l2": ("float", 0.0), "beta1": ("float", 0.9),
           "beta2": ("float", 0.999), "epsilon": ("float", 0.0), "weight_decay": ("float", 0.0),
           "amsgrad": ("bool", False), "do_bias_correction": ("bool", True)},
          state=("m", "v", "max_v"), step=_adam_step, xla_step=adam_xla_step,
          doc="Adam/AdamW with optional bias correction and AMSGrad (see module docstring)")


def _bias_correction_infer(ctx):
    step = ctx.input("train_step")
    ctx.check(not step.dtype.is_floating_point,
              f"input 'train_step' expected an integer dtype, received {step.dtype.name}")
    ctx.set_output("out", step.shape, _dt.float32)


def _bias_correction_xla(k):
    jnp, beta = xla_rules.jnp(), k.attr("beta")
    return lambda train_step: (1.0 - jnp.power(beta, (train_step + 1).astype(jnp.float64))).astype(jnp.float32)


def _bias_correction_kernel(k):
    beta = k.attr("beta")

    def adam_bias_correction_factor(train_step):
        t = (train_step + 1).to(torch.float64)
        return (1.0 - torch.pow(torch.full((), beta, dtype=torch.float64, device=t.device), t)).to(torch.float32)
    return adam_bias_correction_factor


def _bias_correction_onnx(c):
    """1 - beta ** (train_step + 1) in float64, then float32 (as the kernel)."""
    t = c.node("Cast", [c.node("Add", [c.input("train_step"), onnx_rules.const_as(c, 1, c.input_desc("train_step"))])],
               to=c.dtype_code(_dt.float64))
    f = c.node("Sub", [c.const(np.float64(1.0)), c.node("Pow", [c.const(np.float64(c.attr("beta"))), t])])
    c.node("Cast", [f], [c.output("out")], to=c.dtype_code(_dt.float32))


op("adam_bias_correction_factor", inputs=["train_step"], outputs=["out"], attrs={"beta": ("float", 0.9)},
   infer=_bias_correction_infer, kernel=_bias_correction_kernel, no_grad=True, xla=_bias_correction_xla,
   onnx=_bias_correction_onnx,
   doc="out = 1 - beta ** (train_step + 1), float32")


# --------------------------------------------------------------------------- RMSProp

def _rmsprop_step(k):
    centered, eps, decay, wd = k.attr("centered"), k.attr("epsilon"), k.attr("decay_rate"), k.attr("weight_decay")

    def apply(model, g, lr, args):
        ms = args["mean_square"]
        ms.mul_(decay).addcmul_(g, g, value=1.0 - decay)
        if centered:
            mg = args["mean_gradient"]
            mg.mul_(decay).add_(g, alpha=1.0 - decay)
            denom = ms - mg * mg
        else:
            denom = ms
        model.sub_(lr * g * torch.rsqrt(denom + eps) + _decay(model, lr, wd))
    return apply


def _rmsprop_xla_step(k):
    rsqrt = xla_rules.lax().rsqrt
    centered, eps, decay, wd = k.attr("centered"), k.attr("epsilon"), k.attr("decay_rate"), k.attr("weight_decay")

    def apply(model, g, lr, args):
        ms = args["mean_square"] * decay + g * g * (1.0 - decay)
        new = {"mean_square": ms}
        denom = ms
        if centered:
            mg = new["mean_gradient"] = args["mean_gradient"] * decay + g * (1.0 - decay)
            denom = ms - mg * mg
        new["model"] = model - (lr * g * rsqrt(denom + eps) + _decay(model, lr, wd))
        return new
    return apply


def _rmsprop_check(ctx):
    ctx.check(not ctx.attr("centered") or ctx.has_input("mean_gradient"),
              "attr 'centered' is true but input 'mean_gradient' is missing")


update_op("rmsprop_update", ["model", "model_diff"] + LR_INPUTS + ["mean_square", "mean_gradient?"],
          {**LR_VAL, "scale": ("double", 1.0), "l1": ("float", 0.0), "l2": ("float", 0.0),
           "centered": ("bool", False), "epsilon": ("float", 0.0), "decay_rate": ("float", 0.99),
           "weight_decay": ("float", 0.0)},
          state=("mean_square", "mean_gradient"), step=_rmsprop_step, check=_rmsprop_check, xla_step=_rmsprop_xla_step,
          doc="RMSProp, epsilon inside the square root (see module docstring)")


# --------------------------------------------------------------------------- LARS

def _lars_step(k):
    beta, eps, coeff, wd = (k.attr("momentum_beta"), k.attr("epsilon"), k.attr("lars_coefficient"),
                            k.attr("weight_decay"))

    def apply(model, g, lr, args):
        mom = args["momentum"]
        w_norm, g_norm = torch.linalg.vector_norm(model), torch.linalg.vector_norm(g)
        trust = torch.where((w_norm > 0) & (g_norm > 0), coeff * w_norm / (eps + g_norm + wd * w_norm),
                            torch.ones_like(w_norm))
        local_lr = lr * trust
        mom.mul_(beta).sub_(local_lr * g)
        decay = local_lr * wd * model if wd else None  # (outside the momentum, of the weight before the step)
        model.add_(mom)
        if decay is not None:
            model.sub_(decay)
    return apply


def _lars_xla_step(k):
    jnp = xla_rules.jnp()
    beta, eps, coeff, wd = (k.attr("momentum_beta"), k.attr("epsilon"), k.attr("lars_coefficient"),
                            k.attr("weight_decay"))

    def apply(model, g, lr, args):
        w_norm, g_norm = jnp.linalg.norm(model.reshape(-1)), jnp.linalg.norm(g.reshape(-1))
        trust = jnp.where((w_norm > 0) & (g_norm > 0), coeff * w_norm / (eps + g_norm + wd * w_norm),
                          jnp.ones_like(w_norm))
        mom = args["momentum"] * beta - lr * trust * g
        return {"momentum": mom, "model": model + mom - lr * trust * wd * model}
    return apply


update_op("lars_update", ["model", "model_diff", "learning_rate", "momentum", "scale_by_tensor?", "skip_if?"],
          {"scale": ("double", 1.0), "l1": ("float", 0.0), "l2": ("float", 0.0), "momentum_beta": ("float", 0.9),
           "epsilon": ("float", 0.0), "lars_coefficient": ("float", 0.0001), "weight_decay": ("float", 0.0)},
          state=("momentum",), step=_lars_step, xla_step=_lars_xla_step, sbp=_sbp.replicated,
          doc="LARS with momentum (see module docstring)")


# --------------------------------------------------------------------------- LAMB

def _lamb_step(k):
    b1, b2, eps, wd = k.attr("beta1"), k.attr("beta2"), k.attr("epsilon"), k.attr("weight_decay")

    def apply(model, g, lr, args):
        m, v, b1_t, b2_t = args["m"], args["v"], args["beta1_t"], args["beta2_t"]
        m.mul_(b1).add_(g, alpha=1.0 - b1)
        v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
        r = (m / (1.0 - b1_t)) / ((v / (1.0 - b2_t)).sqrt() + eps)
        u = r + wd * model if wd else r
        w_norm, u_norm = torch.linalg.vector_norm(model), torch.linalg.vector_norm(u)
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        model.sub_(lr * trust * u)
        b1_t.mul_(b1)
        b2_t.mul_(b2)
    return apply


def _lamb_xla_step(k):
    jnp = xla_rules.jnp()
    b1, b2, eps, wd = k.attr("beta1"), k.attr("beta2"), k.attr("epsilon"), k.attr("weight_decay")

    def apply(model, g, lr, args):
        b1_t, b2_t = args["beta1_t"], args["beta2_t"]
        m = args["m"] * b1 + g * (1.0 - b1)
        v = args["v"] * b2 + g * g * (1.0 - b2)
        r = (m / (1.0 - b1_t)) / (jnp.sqrt(v / (1.0 - b2_t)) + eps)
        u = r + wd * model if wd else r
        w_norm, u_norm = jnp.linalg.norm(model.reshape(-1)), jnp.linalg.norm(u.reshape(-1))
        trust = jnp.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, jnp.ones_like(w_norm))
        return {"m": m, "v": v, "model": model - lr * trust * u, "beta1_t": b1_t * b1, "beta2_t": b2_t * b2}
    return apply


update_op("lamb_update", ["m", "v", "beta1_t", "beta2_t", "model", "model_diff", "learning_rate",
                          "scale_by_tensor?", "skip_if?"],
          {"beta1": ("float", 0.0), "beta2": ("float", 0.0), "epsilon": ("float", 0.0), "scale": ("double", 1.0),
           "l1": ("float", 0.0), "l2": ("float", 0.0), "weight_decay": ("float", 0.0)},
          state=("m", "v"), scalar_state=("beta1_t", "beta2_t"), step=_lamb_step, xla_step=_lamb_xla_step,
          sbp=_sbp.replicated,
          doc="LAMB (see module docstring)")


# --------------------------------------------------------------------------- Adagrad

def _adagrad_step(k):
    eps, lr_decay, wd, step_val = k.attr("epsilon"), k.attr("lr_decay"), k.attr("weight_decay"), \
        k.attr("train_step_val")

    def apply(model, g, lr, args):
        total = args["sum"]
        step = args.get("train_step")
        # train_step counts from 0, so t - 1 == train_step; without the input t = train_step_val
        done = step.to(lr.dtype if isinstance(lr, torch.Tensor) else torch.float32) if step is not None \
            else float(step_val - 1)
        lr_t = lr / (1.0 + done * lr_decay)
        total.addcmul_(g, g)
        model.sub_(lr_t * g / (total.sqrt() + eps) + _decay(model, lr_t, wd))
    return apply


def _adagrad_xla_step(k):
    jnp = xla_rules.jnp()
    eps, lr_decay, wd, step_val = k.attr("epsilon"), k.attr("lr_decay"), k.attr("weight_decay"), \
        k.attr("train_step_val")

    def apply(model, g, lr, args):
        step = args.get("train_step")
        lr_dtype = lr.dtype if hasattr(lr, "dtype") else jnp.float32
        done = step.reshape(()).astype(lr_dtype) if step is not None else float(step_val - 1)
        lr_t = lr / (1.0 + done * lr_decay)
        total = args["sum"] + g * g
        return {"sum": total, "model": model - (lr_t * g / (jnp.sqrt(total) + eps) + _decay(model, lr_t, wd))}
    return apply


update_op("adagrad_update", ["model", "model_diff"] + LR_INPUTS + ["train_step?", "sum"],
          {"train_step_val": ("int32", 0), **LR_VAL, "scale": ("double", 1.0), "l1": ("float", 0.0),
           "l2": ("float", 0.0), "lr_decay": ("float", 0.0), "weight_decay": ("float", 0.0),
           "epsilon": ("float", 0.0)},
          state=("sum",), step=_adagrad_step, xla_step=_adagrad_xla_step,
          doc="Adagrad with lr_decay (see module docstring)")


# --------------------------------------------------------------------------- helpers

def _l1_l2_infer(ctx):
    m, d = ctx.input("model"), ctx.input("model_diff")
    ctx.check(d.shape == m.shape and d.dtype is m.dtype,
              f"input 'model_diff' expected {m.dtype.name} {m.shape} (as 'model'), received {d.dtype.name} {d.shape}")
    ctx.set_output("out", d.shape, d.dtype)


def _l1_l2_onnx(c):
    """model_diff + l1 * sign(model) (when l1) + l2 * model (when l2), as :func:`regularized_diff`."""
    model, d = c.input("model"), c.input_desc("model")
    g = c.input("model_diff")
    for coef, term in ((c.attr("l1"), lambda: c.node("Sign", [model])), (c.attr("l2"), lambda: model)):
        if coef:
            g = c.node("Add", [g, c.node("Mul", [onnx_rules.const_as(c, coef, d), term()])])
    c.node("Identity", [g], [c.output("out")])


op("l1_l2_regularize_gradient", inputs=["model", "model_diff"], outputs=["out"],
   attrs={"l1": ("float", 0.0), "l2": ("float", 0.0)}, infer=_l1_l2_infer,
   kernel=lambda k: (lambda model, diff: regularized_diff(model, diff, 1.0, k.attr("l1"), k.attr("l2"))),
   xla=lambda k: (lambda model, diff: regularized_diff_xla(model, diff, 1.0, k.attr("l1"), k.attr("l2"))),
   no_grad=True, onnx=_l1_l2_onnx, sbp=_sbp.elementwise(), doc="out = model_diff + l1 * sign(model) + l2 * model")


def _assign(ref, value):
    ref.copy_(value)


def _assign_infer(ctx):
    ref, value = ctx.input("ref"), ctx.input("value")
    ctx.check(ref.shape == value.shape and ref.dtype is value.dtype,
              f"input 'value' expected {ref.dtype.name} {ref.shape} (as 'ref'), received "
              f"{value.dtype.name} {value.shape}")


op("assign", inputs=["ref", "value"], outputs=[], infer=_assign_infer,
   kernel=lambda k: _assign, no_grad=True, mutates=("ref",), xla=lambda k: (lambda ref, value: (None, (value,))))
# OneFlow's legacy system op of the same meaning (``flow.system.assign``)
op("assign_conf", conf="assign_conf", inputs=["ref", "value"], outputs=[], infer=_assign_infer,
   kernel=lambda k: _assign, no_grad=True, mutates=("ref",), xla=lambda k: (lambda ref, value: (None, (value,))))


def _assign_cond_infer(ctx):
    _assign_infer(ctx)
    c = ctx.input("condition")
    ctx.check(c.numel == 1 and (c.dtype.is_integer or c.dtype is _dt.bool),
              f"input 'condition' expected one integer element, received {c.dtype.name} {c.shape}")


def _assign_cond(when_nonzero):
    def run(ref, value, condition):
        # branch-free (no host sync on CUDA): ref keeps its value unless the condition holds
        hit = condition.reshape(()) != 0
        ref.copy_(torch.where(hit if when_nonzero else ~hit, value, ref))
    return run


def _assign_cond_xla(when_nonzero):
    def make(k):
        jnp = xla_rules.jnp()

        def run(ref, value, condition):
            hit = condition.reshape(()) != 0
            return None, (jnp.where(hit if when_nonzero else ~hit, value, ref),)
        return run
    return make


# assign_if / assign_if_not (oneflow/user/kernels/assign_if_kernel.cpp): ref = value when condition != 0 / == 0
op("assign_if", inputs=["ref", "value", "condition"], outputs=[], infer=_assign_cond_infer,
   kernel=lambda k: _assign_cond(True), no_grad=True, mutates=("ref",),
   xla=_assign_cond_xla(True))
op("assign_if_not", inputs=["ref", "value", "condition"], outputs=[], infer=_assign_cond_infer,
   kernel=lambda k: _assign_cond(False), no_grad=True, mutates=("ref",),
   xla=_assign_cond_xla(False))
