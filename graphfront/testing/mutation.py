"""Mutation testing of the AutoTest: deliberately wrong kernels that it must catch.

A :class:`Mutant` replaces one op type's kernel (and, for a wrong output dtype or
shape, its shape/dtype inference) in the op registry for the time of a run; the
autotests named by the mutant then run with their usual draws, and the mutant is
*caught* when one of them fails. :func:`score` runs a catalogue and records the score
(:data:`graphfront.testing.records.MUTATION`), which the AutoTest summary prints.

The kernel transforms below act on the callable a kernel factory returns (the true
one, built from the same ``KernelCtx``), so a mutant is a small, readable change of a
real kernel: ``outputs(lambda y: -y)`` flips a sign, ``inputs(dy=flip(-1))`` feeds a
mirrored upstream gradient, ``attrs(axis=...)`` builds the true kernel with other
attrs.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Optional

from graphfront.testing import records as _records

__all__ = ["Mutant", "applied", "caught", "score", "outputs", "inputs", "attrs", "swap_args", "swap_outputs",
           "replace", "flip", "scale", "zeros", "retype", "shorter"]


@dataclasses.dataclass
class Mutant:
    """One wrong kernel.

    Attributes:
        name: what is wrong (``"softmax_grad: dx zeroed"``).
        op_type: the registered op type whose kernel is replaced.
        kernel: ``kernel(true_factory) -> factory``: the mutated kernel factory.
        infer: optional ``infer(true_infer) -> infer``: the mutated inference (for
            mutants whose declared dtype or shape is wrong as well as their values).
        tests: names of the autotests that must catch it (``"test_softmax"``).
    """

    name: str
    op_type: str
    kernel: Callable
    tests: tuple
    infer: Optional[Callable] = None


@contextlib.contextmanager
def applied(mutant: Mutant):
    """The registry with ``mutant``'s kernel (and inference) in place; restored on exit."""
    from graphfront.ops import registry
    opdef = registry.lookup(mutant.op_type)
    true_kernel, true_infer = opdef.kernel, opdef.infer
    opdef.kernel = mutant.kernel(true_kernel)
    if mutant.infer is not None:
        opdef.infer = mutant.infer(true_infer)
    try:
        yield opdef
    finally:
        opdef.kernel, opdef.infer = true_kernel, true_infer


def caught(mutant: Mutant, autotests: dict) -> Optional[str]:
    """Run ``mutant.tests`` (names -> :class:`~graphfront.testing.autotest.AutoTest` in
    ``autotests``) with the mutant applied; returns the first line of the first failure,
    or None when every test passed (the mutant survived). The runs do not count in the
    AutoTest records."""
    missing = [t for t in mutant.tests if t not in autotests]
    if missing:
        raise KeyError(f"mutant {mutant.name!r}: no autotest named {missing}")
    with _records.isolated(), applied(mutant):
        for name in mutant.tests:
            try:
                autotests[name].run()
            except AssertionError as e:
                lines = [ln for ln in str(e).splitlines() if ln.strip().startswith("- ")]
                return f"{name}: {lines[0].strip()[2:] if lines else str(e).splitlines()[0]}"
    return None


def score(catalogue, autotests: dict) -> dict:
    """Run every mutant; returns ``{mutant name: failure line or None}`` and records the
    score for the AutoTest summary."""
    result = {m.name: caught(m, autotests) for m in catalogue}
    _records.MUTATION.update(result)
    return result


# ------------------------------------------------------------------ kernel transforms

def _as_tuple(result):
    return (result, False) if not isinstance(result, tuple) else (result, True)


def outputs(*transforms, index=None):
    """Mutate the kernel's results: ``transforms[i]`` applied to output ``i`` (None leaves
    it); with ``index``, one transform applied to output ``index`` only."""
    def mutate(true_factory):
        def factory(k):
            fn = true_factory(k)

            def mutated(*args):
                result = fn(*args)
                if not isinstance(result, tuple):
                    return transforms[0](result)
                outs = list(result)
                pairs = [(index, transforms[0])] if index is not None else enumerate(transforms)
                for i, t in pairs:
                    if t is not None:
                        outs[i] = t(outs[i])
                return tuple(outs)
            return mutated
        return factory
    return mutate


def inputs(**transforms):
    """Mutate the kernel's arguments, by input arg name (``inputs(dy=flip(-1))``)."""
    def mutate(true_factory):
        def factory(k):
            from graphfront.ops import registry
            names = [a.name for a in registry.lookup(k.conf.op_type_name).inputs]
            fn = true_factory(k)

            def mutated(*args):
                args = [transforms[n](a) if n in transforms and a is not None else a for n, a in zip(names, args)]
                return fn(*args)
            return mutated
        return factory
    return mutate


def attrs(**changes):
    """Build the true kernel with some attrs changed: ``changes[name](value, k) -> value``."""
    def mutate(true_factory):
        def factory(k):
            k.attrs = {**k.attrs, **{n: f(k.attrs[n], k) for n, f in changes.items()}}
            return true_factory(k)
        return factory
    return mutate


def swap_args(i, j):
    """Call the true kernel with positional arguments ``i`` and ``j`` exchanged."""
    def mutate(true_factory):
        def factory(k):
            fn = true_factory(k)

            def mutated(*args):
                args = list(args)
                args[i], args[j] = args[j], args[i]
                return fn(*args)
            return mutated
        return factory
    return mutate


def swap_outputs(i, j):
    """Return the true kernel's outputs ``i`` and ``j`` exchanged."""
    def mutate(true_factory):
        def factory(k):
            fn = true_factory(k)

            def mutated(*args):
                outs = list(fn(*args))
                outs[i], outs[j] = outs[j], outs[i]
                return tuple(outs)
            return mutated
        return factory
    return mutate


def replace(make):
    """A kernel of its own: ``make(k) -> callable`` (the true factory is not used)."""
    return lambda true_factory: make


def flip(dim):
    """Mirror a tensor along ``dim``."""
    return lambda t: t.flip(dim) if t.dim() else t


def scale(c):
    """Multiply a tensor by ``c``."""
    return lambda t: t * c


def zeros(t):
    """A tensor of zeros like ``t``."""
    import torch
    return torch.zeros_like(t)


def retype(dtype_name):
    """(kernel transform, infer transform) declaring and returning ``dtype_name`` for every output."""
    from graphfront.framework import dtypes as _dt
    dtype = getattr(_dt, dtype_name)

    def infer(true_infer):
        def mutated(ctx):
            true_infer(ctx)
            for lbn, desc in list(ctx.out.items()):
                ctx.out[lbn] = desc._replace(dtype=dtype)
        return mutated
    return outputs(lambda t: t.to(dtype.torch)), infer


def shorter():
    """(kernel transform, infer transform): every output one element short in its last
    dimension, declared so by the inference and returned so by the kernel."""
    def infer(true_infer):
        def mutated(ctx):
            true_infer(ctx)
            for lbn, desc in list(ctx.out.items()):
                if desc.shape and desc.shape[-1] > 1:
                    ctx.out[lbn] = desc._replace(shape=tuple(desc.shape[:-1]) + (desc.shape[-1] - 1,))
        return mutated
    return outputs(lambda t: t[..., :-1] if t.dim() and t.shape[-1] > 1 else t), infer
