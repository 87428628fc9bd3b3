"""Small helpers shared by op families: inference rules, broadcasting, grad wiring."""
from __future__ import annotations

import contextlib
import math
import time
import types
import warnings

import torch
import torch.fx.experimental._config  # noqa: F401 - (TorchDynamo's shape config, for inductor_kernel)

from graphfront.framework.errors import OpCheckError, OpRunError


def vjp(fn, x, dy):
    """``dy`` pulled back through ``fn`` at ``x``: the gradient of a kernel's input ``x`` for
    the gradient ``dy`` of its output ``fn(x)``. With torch autograd, or in a step traced by
    TorchDynamo (the native lowering) with ``torch.func.vjp``, which it traces (slower to
    call eagerly)."""
    if torch.compiler.is_compiling():
        return torch.func.vjp(fn, x)[1](dy)[0]
    with torch.enable_grad():
        xr = x.detach().requires_grad_(True)
        return torch.autograd.grad(fn(xr), xr, dy)[0]


def like(arg, dtype=None):
    """Infer every output with the shape, dynamic flag (and dtype, unless given) of input ``arg``."""
    def infer(ctx):
        d = ctx.input(arg)
        for out in ctx.output_names():
            ctx.set_output(out, d.shape, dtype or d.dtype, is_dynamic=d.is_dynamic)
    return infer


def float_input(ctx, arg):
    """The desc of input ``arg``, checked to have a floating dtype."""
    d = ctx.input(arg)
    ctx.check(d.dtype.is_floating_point, f"input '{arg}' expected a floating dtype, received {d.dtype.name}")
    return d


def integer_input(ctx, arg):
    """The desc of input ``arg``, checked to have an integer (index) dtype."""
    d = ctx.input(arg)
    ctx.check(d.dtype.is_integer, f"input '{arg}' expected an integer (index) dtype, received {d.dtype.name}")
    return d


def same_dtype(ctx, *args):
    """Check that the given inputs share one dtype; returns it."""
    descs = [(a, ctx.input(a)) for a in args if ctx.has_input(a)]
    first_arg, first = descs[0]
    for a, d in descs[1:]:
        ctx.check(d.dtype is first.dtype,
                  f"input '{a}' expected dtype {first.dtype.name} (as '{first_arg}'), received {d.dtype.name}")
    return first.dtype


def fill_fits(ctx, value, dtype, what, wraps=False):
    """Check that ``value``, a fill value or scalar operand, is an element of ``dtype``: for an
    integer dtype a finite number (a float is truncated, as OneFlow's kernels cast it) within
    the dtype's range, or any finite one when ``wraps`` (an operand of arithmetic, which wraps
    around as in C++); torch refuses the others at run time.

    ``what`` names the attr in the JobBuildError. Returns nothing; a float dtype takes anything.
    """
    if dtype.is_floating_point or dtype.torch is torch.bool:
        return
    info = torch.iinfo(dtype.torch)
    ctx.check(math.isfinite(value) and (wraps or info.min <= value <= info.max),
              f"{what} {value!r} does not fit the {dtype.name} output (range [{info.min}, {info.max}])")


def at_least_1d(shape) -> tuple:
    """``shape``, or ``(1,)`` when it has no axes: an op of OneFlow's single-client API whose
    result would be rank-0 (every axis reduced or squeezed away, the argmax of a vector) gives
    shape ``(1,)``."""
    return tuple(shape) or (1,)


def same_shape(ctx, *args):
    descs = [(a, ctx.input(a)) for a in args if ctx.has_input(a)]
    first_arg, first = descs[0]
    for a, d in descs[1:]:
        ctx.check(d.shape == first.shape,
                  f"input '{a}' expected shape {first.shape} (as '{first_arg}'), received {d.shape}")
    return first.shape


def broadcast_shape(a, b, what="inputs"):
    """Numpy broadcasting of two shapes; OpCheckError naming both when incompatible."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise OpCheckError(f"{what} shapes {tuple(a)} and {tuple(b)} cannot be broadcast together")
        out.append(0 if 0 in (x, y) else max(x, y))
    return tuple(out)


def norm_axis(axis, ndim, what="axis"):
    if not -ndim <= axis < max(ndim, 1):
        raise OpCheckError(f"{what} {axis} is out of range for a rank-{ndim} input")
    return axis % ndim if ndim else 0


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def reduce_to(g, grad_lbn, target_lbn, name):
    """Bring a broadcast-shaped gradient back to ``target_lbn``'s shape (OneFlow's rule).

    Nothing when shapes agree; ``reshape_like`` when they differ only by leading 1s;
    otherwise ``reduce_sum_like`` over the broadcast axes.
    """
    gshape = g.desc(grad_lbn).shape
    tshape = g.desc(target_lbn).shape
    if gshape == tshape:
        return grad_lbn
    offset = len(gshape) - len(tshape)
    if numel(gshape) == numel(tshape):  # same elements, e.g. leading 1s or () vs (1,)
        return g.emit("reshape_like", {"in": grad_lbn, "like": target_lbn}, name=f"{name}_reshape_like")
    axes = [i for i in range(len(gshape)) if i < offset or (tshape[i - offset] == 1 and gshape[i] != 1)]
    return g.emit("reduce_sum_like", {"x": grad_lbn, "like": target_lbn}, {"axis": axes},
                  name=f"{name}_reduce_sum_like")


def label_error(k, op_type, value, at):
    """The OpRunError of class label ``value`` at index ``at``, outside ``[0, depth)``."""
    return OpRunError(f"op '{k.op_name}' ({op_type}): input 'label' expects class ids in [0, {k.attr('depth')}), "
                      f"received {value} at index {at}")


def label_checks(op_type):
    """The ``checks`` rule of an op whose input ``label`` holds class ids in ``[0, depth)``."""
    return lambda k: [("label", k.attr("depth"), lambda value, at: label_error(k, op_type, value, at))]


def bad_labels(k, op_type, label, error):
    """Raise OpRunError naming the op when a label is outside ``[0, depth)``, else ``error``.

    Called by a kernel only after torch's own bounds check failed (on the CPU), so
    correct labels pay nothing."""
    bad_ids(label, k.attr("depth"), lambda value, at: label_error(k, op_type, value, at), error)


def index_checks(op_type, arg, size_of, ignored_of=None):
    """The ``checks`` rule of an op whose input ``arg`` holds indices in ``[0, size_of(k))``
    (or equal to ``ignored_of(k)``, when given: an ``ignore_index``)."""
    def checks(k):
        size = size_of(k)
        ignored = ignored_of(k) if ignored_of is not None else None
        also = f" or {ignored}" if ignored is not None else ""
        return [(arg, size if ignored is None else (size, ignored), lambda value, at: OpRunError(
            f"op '{k.op_name}' ({op_type}): input '{arg}' expects indices in [0, {size}){also}, received {value} "
            f"at index {at}"))]
    return checks


def bad_ids(ids, size, error, raised):
    """Raise ``error(value, at)`` for the first element of ``ids`` outside ``[0, size)``
    (``size`` may be ``(size, ignored)``: see :func:`index_checks`), else ``raised``
    (torch's own error, after which a kernel calls this on the CPU)."""
    size, ignored = size if isinstance(size, tuple) else (size, None)
    bad = (ids < 0) | (ids >= size)
    if ignored is not None:
        bad = bad & (ids != ignored)
    bad = bad.nonzero()
    if not len(bad):
        raise raised
    at = tuple(bad[0].tolist())
    raise error(int(ids[at]), at) from None


def raising_bad_ids(checks, pos, fn):
    """A kernel factory: ``fn(k)``'s callable, whose torch error on a bad index (torch
    raises on the CPU) becomes the op's own error, that of ``checks(k)`` (one entry)
    for the callable's positional argument ``pos``."""
    def make(k):
        (_, size, error), = checks(k)
        run = fn(k)

        def checked(*args):
            try:
                return run(*args)
            except (RuntimeError, IndexError) as e:
                bad_ids(args[pos], size, error, e)
        return checked
    return make


def raising_zero_divisor(op_type, divisor, fn):
    """A kernel factory for an op dividing by its input ``divisor`` (positional argument 1 of
    ``fn``): torch's error for an integer division by zero (it raises on the CPU; on a GPU the
    quotient is undefined, as in OneFlow's C++ kernels) becomes the op's OpRunError naming the
    index of the first 0. Correct divisors pay nothing."""
    def make(k):
        def checked(x, y):
            try:
                return fn(x, y)
            except RuntimeError as e:
                zeros = (y == 0).nonzero()
                if not len(zeros):
                    raise
                at = tuple(zeros[0].tolist())
                raise OpRunError(f"op '{k.op_name}' ({op_type}): input '{divisor}' holds 0 at index {at}, an integer "
                                 f"division by zero") from e
        return checked
    return make


def nonzero_divisor_native(fn):
    """The native lowering's kernel factory for an op computing ``fn(x, y)``, a division by
    ``y``: an integer 0 in ``y`` is taken as 1, since Inductor's C++ code traps on it (SIGFPE
    ends the process). The quotient is undefined there, as on a GPU and in OneFlow's kernels;
    the plan's CPU kernel raises the op's error instead (:func:`raising_zero_divisor`)."""
    def make(k):
        def run(x, y):
            return fn(x, y if y.dtype.is_floating_point else torch.where(y == 0, torch.ones_like(y), y))
        return run
    return make


def skippable(skip_if, tensors, update):
    """Run ``update()``, which writes ``tensors`` in place, unless ``skip_if`` (an int
    tensor of one element, or None) is nonzero: the skip of an optimizer step whose
    gradients overflowed (dynamic loss scaling).

    On the CPU ``skip_if`` is read on the host and the update not run at all. Elsewhere
    (a GPU, or a traced step: :func:`reads_host`) nothing is read on the host, so the step
    never waits on the device: the update runs and each tensor then keeps its old value
    where ``skip_if`` is nonzero (:func:`keep_unless_skipped`, so the overflowed values
    never mix in)."""
    if skip_if is None:
        update()
    elif reads_host(skip_if):
        if not host_skipped(skip_if):
            update()
    else:
        old = [t.clone() for t in tensors]
        update()
        keep_unless_skipped(skip_if, tensors, tensors, old)


def reads_host(t) -> bool:
    """Whether a kernel may read tensor ``t``'s values on the host: ``t`` is on the CPU (free
    there) and the step is not being traced by TorchDynamo (the native lowering's compiled
    step keeps every value a tensor). A kernel takes its device branch otherwise."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def balanced_range(total, parts, index) -> range:
    """Part ``index`` of ``range(total)`` cut into ``parts`` consecutive parts, the first
    ``total % parts`` one longer: OneFlow's ``BalancedSplitter(total, parts).At(index)``
    (``oneflow/core/common/balanced_splitter.cpp``, v0.6.0), how it splits a blob's axis,
    a reader's shards or Partial FC's classes over devices."""
    base, extra = divmod(total, parts)
    begin = index * base + min(index, extra)
    return range(begin, begin + base + (index < extra))


class BufferList(list):
    """The run-time value of a ``tensor_buffer`` blob: its buffers in row-major order and
    the shape of the array of buffers (``shape``)."""

    def __init__(self, buffers, shape):
        super().__init__(buffers)
        self.shape = tuple(shape)


def host_part(value, parts, index):
    """Part ``index`` of ``parts`` of a host value (a blob whose elements live on the host: a
    list of records, a :class:`BufferList`) split along axis 0 as :func:`balanced_range`
    cuts it; a :class:`BufferList` keeps its other axes."""
    rows = balanced_range(len(value) if not isinstance(value, BufferList) else value.shape[0], parts, index)
    if not isinstance(value, BufferList):
        return list(value[rows.start:rows.stop])
    per_row = math.prod(value.shape[1:])
    return BufferList(value[rows.start * per_row:rows.stop * per_row], (len(rows),) + value.shape[1:])


def host_concat(parts):
    """The host values ``parts`` (lists, or :class:`BufferList` s of equal trailing axes)
    concatenated along axis 0: the inverse of :func:`host_part`."""
    items = [item for part in parts for item in part]
    if not isinstance(parts[0], BufferList):
        return items
    return BufferList(items, (sum(p.shape[0] for p in parts),) + parts[0].shape[1:])


def host_skipped(skip_if) -> bool:
    """True when ``skip_if`` holds a nonzero and :func:`reads_host` allows reading it; False
    for None and for a tensor the host does not read (the skip then happens on the device)."""
    return skip_if is not None and reads_host(skip_if) and bool(skip_if.reshape(-1)[0] != 0)


def keep_unless_skipped(skip_if, targets, new, old=None):
    """``targets[i] = new[i]``, or ``old[i]`` (default: ``targets[i]`` as it is) where the
    one-element ``skip_if`` is nonzero: one ``torch.where`` per tensor written into the
    target, branch-free, nothing read on the host."""
    skip = skip_if.reshape(()) != 0
    for i, (t, n) in enumerate(zip(targets, new)):
        torch.where(skip, t if old is None else old[i], n, out=t)


def gelu_grad(x, dy):
    """``dy * gelu'(x)`` for the exact erf GELU (``gelu'(x) = Phi(x) + x * phi(x)``), in
    ``x``'s dtype: PyTorch's fused ``gelu_backward`` kernel, one pass over the tensors.

    float16 / bfloat16 inputs are computed in float32 and rounded once to their dtype, as
    OneFlow's half kernels do (each intermediate rounded to half would differ by ulps).
    """
    return torch.ops.aten.gelu_backward(dy.to(x.dtype), x)


def multi_tensor_kernels(device) -> bool:
    """Whether multi-tensor ops on ``device`` run a few large kernels over all their tensors
    (a GPU, where a kernel costs microseconds however small: the finiteness count over
    concatenations, outputs packed by :func:`packed_empty_like`) rather than one call per
    tensor (the CPU, where a copy costs more than the calls)."""
    return device.type != "cpu"


def packed_empty_like(xs, dtype):
    """New tensors of ``dtype`` shaped as ``xs``, each dense in its own tensor's dimension
    order (channels-last stays channels-last, as ``torch.empty_like``), side by side in one
    buffer in the order of ``xs``: a later reduction over all of them reads that buffer in
    place (``multi_count_not_finite``) instead of concatenating them."""
    flat = torch.empty(sum(x.numel() for x in xs), dtype=dtype, device=xs[0].device)
    out, at = [], 0
    for x in xs:
        strides, step = [0] * x.dim(), 1
        for d in sorted(range(x.dim()), key=lambda d: (x.stride(d), -d)):   # innermost first
            strides[d], step = step, step * x.shape[d]
        out.append(flat.as_strided(x.shape, strides, at))
        at += x.numel()
    return out


CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def in_layout_of(t, ref):
    """``t`` in the memory layout of ``ref`` (of ``t``'s shape): channels-last where ``ref``
    is laid out so and not also contiguous, else contiguous; ``t`` itself when it already
    is (no copy). A gradient kernel (``convolution_backward``, ``native_batch_norm_backward``)
    given an input and a gradient of different layouts converts inside, on a slower path,
    or copies both; the CPU's channels-last max pool makes such mixes in an NCHW job."""
    last = CHANNELS_LAST.get(ref.dim())
    fmt = last if last is not None and ref.is_contiguous(memory_format=last) and not ref.is_contiguous() \
        else torch.contiguous_format
    return t if t.is_contiguous(memory_format=fmt) else t.contiguous(memory_format=fmt)


#: the device types on which :func:`inductor_kernel` runs its formula compiled (tests add "cpu")
INDUCTOR_DEVICES = ("cuda",)
_INDUCTOR = {}  # (key, input signature) -> the compiled formula, None where compiling it failed


def _signature(args) -> tuple:
    return tuple(None if a is None else (tuple(a.shape), a.stride(), a.dtype, a.device) for a in args)


def inductor_key(k) -> tuple:
    """A user op's :func:`inductor_kernel` key: its type, attrs and the outputs it has (what a
    formula built from a kernel context depends on besides its inputs)."""
    attrs = tuple(sorted((a, tuple(v) if isinstance(v, list) else v) for a, v in k.attrs.items()))
    return k.conf.op_type_name, attrs, tuple(sorted(k.conf.output))


def inductor_kernel(key, formula, eager=None, dynamic=False):
    """A kernel callable that runs ``formula`` (a function of tensors and Nones, in torch
    ops) compiled by TorchInductor, as one fused kernel per reduction and its pointwise
    neighbours (Triton on CUDA), where that pays: on the device types of
    :data:`INDUCTOR_DEVICES`.

    ``key`` (hashable, :func:`inductor_key`) must name everything the formula's closure
    depends on besides its inputs: every op with the same ``key`` and input shapes,
    strides, dtypes and device shares one compiled function, so a ResNet-50 compiles one
    per distinct layer shape.
    Each compiled function is specialized to its shapes and has its own code object, so
    TorchDynamo's per-function recompile limit never applies. With ``dynamic`` (for
    pointwise formulas, whose kernels gain nothing from fixed sizes) the sizes stay
    symbolic instead: one compiled function serves every shape of the same ranks, dtypes
    and device (TorchDynamo still specializes sizes 0 and 1, recompiling for them), which
    saves a compile (about a second) per distinct shape. On other
    devices, inside a step TorchDynamo is tracing (the native lowering compiles the whole
    step), and where compiling failed (a UserWarning says why, once per key and shapes),
    ``eager`` (default: ``formula``) runs instead. Errors of the computation itself
    propagate. The callable keeps what its first call chose (an op's inputs keep their
    shapes, dtypes and device from step to step), so later calls go straight to it.
    """
    eager = eager or formula
    chosen = []   # the callable the first call chose

    def run(*args):
        if torch.compiler.is_compiling():
            return eager(*args)
        if chosen:
            return chosen[0](*args)
        device = next(a.device for a in args if a is not None)
        if device.type not in INDUCTOR_DEVICES:
            chosen.append(eager)
            return eager(*args)
        sig = (key, _signature(args) if not dynamic else
               tuple(None if a is None else (a.dim(), a.dtype, a.device) for a in args))
        if sig in _INDUCTOR:
            chosen.append(_INDUCTOR[sig] or eager)
            return chosen[0](*args)
        name = f"graphfront_{key[0]}_{len(_INDUCTOR)}"
        fresh = types.FunctionType(formula.__code__.replace(co_name=name, co_qualname=name), formula.__globals__,
                                   name, formula.__defaults__, formula.__closure__)
        compiled = torch.compile(fresh, fullgraph=True, dynamic=dynamic, backend="inductor")
        # (dynamic: sizes that happen to be equal in the first call stay distinct symbols)
        symbols = torch.fx.experimental._config.patch(use_duck_shape=False) if dynamic else contextlib.nullcontext()
        try:
            with symbols:
                out = compiled(*args)
        except torch._dynamo.exc.TorchDynamoException as e:  # compiling failed; nothing has run
            warnings.warn(f"graphfront: TorchInductor could not compile {name} for {device.type} "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); its kernel runs "
                          f"unfused")
            _INDUCTOR[sig] = None
            chosen.append(eager)
            return eager(*args)
        _INDUCTOR[sig] = compiled
        chosen.append(compiled)
        return out
    return run


#: the device types on which :func:`tuned_kernel` times its candidates (tests add "cpu")
TUNED_DEVICES = ("cuda",)
_TUNED = {}   # (key, input signature) -> the index of the fastest candidate


def _timed(fn, args, device, reps):
    """Seconds per call of ``fn(*args)``: the median of ``reps`` calls after one unmeasured
    call (its compile and autotuning), by CUDA events on a GPU, the host clock elsewhere."""
    fn(*args)
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def tuned_kernel(key, candidates, mutated=(), reps=5):
    """A kernel callable that runs the fastest of ``candidates`` (callables computing the same
    op, such as a formula compiled by :func:`inductor_kernel` and PyTorch's library kernels
    with a compiled epilogue) for its inputs, as ``cudnn.benchmark`` picks a convolution
    algorithm: on the device types of :data:`TUNED_DEVICES`, the first call times each
    candidate (``reps`` calls after one unmeasured call, their median) on the inputs, the ones
    at the indices ``mutated`` (updated in place) replaced by copies, then runs the fastest.

    Every op with the same ``key`` and input signature shares the choice. Elsewhere, inside a
    step TorchDynamo is tracing, and where ``torch.use_deterministic_algorithms`` is on (the
    candidates may round differently), ``candidates[0]`` runs, as it does, untimed, where the
    trials run out of device memory. The callable keeps what its first call chose, as
    :func:`inductor_kernel` does. Other errors of the candidates propagate.
    """
    chosen = []

    def run(*args):
        if chosen:
            return chosen[0](*args)
        if torch.compiler.is_compiling():
            return candidates[0](*args)
        device = next(a.device for a in args if a is not None)
        if device.type not in TUNED_DEVICES or torch.are_deterministic_algorithms_enabled():
            chosen.append(candidates[0])
            return candidates[0](*args)
        sig = (key, _signature(args))
        if sig not in _TUNED:
            trial = [a.clone() if i in mutated and a is not None else a for i, a in enumerate(args)]
            try:
                times = [_timed(c, trial, device, reps) for c in candidates]
                _TUNED[sig] = times.index(min(times))
            except torch.OutOfMemoryError:   # (the trials' outputs did not fit beside the step's tensors)
                _TUNED[sig] = 0
        chosen.append(candidates[_TUNED[sig]])
        return chosen[0](*args)
    return run
