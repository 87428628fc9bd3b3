"""Shared builders of XLA lowering rules (the ``xla=`` rule of an op, see the registry).

A rule is ``make(k) -> callable`` over ``jax.Array`` values (contract in
:mod:`graphfront.ops.registry`); these helpers build the common shapes of rule, the way
``unary_family`` builds kernels. jax is imported when a rule is made, never when
graphfront is imported (it is an optional dependency: ``pip install graphfront[xla]``).
"""
from __future__ import annotations


def jnp():
    """``jax.numpy``."""
    import jax.numpy
    return jax.numpy


def lax():
    """``jax.lax``."""
    import jax.lax
    return jax.lax


def jnp_fn(name):
    """A ``jax.numpy`` (or, as ``"lax.<name>"``, ``jax.lax``) function by name."""
    if name.startswith("lax."):
        return getattr(lax(), name[4:])
    if name.startswith("nn."):
        import jax.nn
        return getattr(jax.nn, name[3:])
    return getattr(jnp(), name)


def same(name):
    """The op is the named jax function of its inputs, in declaration order."""
    return lambda k: jnp_fn(name)


def vjp(name):
    """``<op>_grad`` rule (x, dy -> dx): the vector-Jacobian product of the named forward
    function, as the torch kernels' ``vjp_kernel`` uses torch autograd."""
    def make(k):
        import jax
        fwd = jnp_fn(name)

        def grad(x, dy):
            return jax.vjp(fwd, x)[1](dy)[0]
        return grad
    return make


def scalar(name):
    """``scalar_*`` ops: ``name(x, operand)`` with the operand of the kernel's
    ``scalar_operand`` (an int for integer inputs)."""
    def make(k):
        from graphfront.ops.math_ops import scalar_operand
        fn, s = jnp_fn(name), scalar_operand(k)
        dtype = k.input("in").dtype.np
        return lambda x: fn(x, jnp().asarray(s, dtype=dtype))
    return make


def reduce(name):
    """``reduce_*`` ops (``input_tensor`` -> ``output_tensor``, attrs axis, keepdims)."""
    def make(k):
        ndim = len(k.input("input_tensor").shape)
        axes = tuple(sorted({a % ndim for a in k.attr("axis")}))
        keep = k.attr("keepdims")
        fn = jnp_fn(name)
        dtype = k.output("output_tensor").dtype.np
        if name == "sum":
            return lambda x: fn(x, axis=axes, keepdims=keep, dtype=dtype)
        return lambda x: fn(x, axis=axes, keepdims=keep).astype(dtype)
    return make


def to_first(x, n):
    """channels_last -> channels_first for a rank ``n + 2`` array."""
    return jnp().transpose(x, (0, n + 1) + tuple(range(1, n + 1)))


def to_last(x, n):
    """channels_first -> channels_last for a rank ``n + 2`` array."""
    return jnp().transpose(x, (0,) + tuple(range(2, n + 2)) + (1,))


def conv_dimension_numbers(n, channels_first=True):
    """``lax.conv_general_dilated`` layout names of a rank ``n + 2`` convolution: input,
    weight and output ``NC<spatial>``/``OI<spatial>`` or ``N<spatial>C``/``O<spatial>I``."""
    spatial = "DHW"[3 - n:]
    if channels_first:
        return ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    return ("N" + spatial + "C", "O" + spatial + "I", "N" + spatial + "C")
