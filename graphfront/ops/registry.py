"""The op registry: one definition per op type, user op or system op.

An op type is declared once with :func:`op`: its arguments (required ``"x"``,
optional ``"bias?"``, repeated ``"in*"``), its attrs with OneFlow's attr types and
defaults, its shape/dtype inference, its grad maker and its torch kernel. Everything
else in graphfront (the builder, CurJobAddOp, autograd, the runtime, AutoTest)
reads this registry and never special-cases an op by name. ``import graphfront`` registers
every op family first (:mod:`graphfront.ops.families`).

Attr types are OneFlow's (v0.6.0 ``oneflow/core/framework/user_op_attr.proto``): ``int32``, ``int64``,
``bool``, ``float``, ``double``, ``string``, ``shape``, ``dtype`` and ``list_int32``,
``list_int64``, ``list_float``, ``list_dtype``, ``list_shape``, ``list_string``.

Contracts of the three functions an op supplies:

* ``infer(ctx: InferCtx)``: reads ``ctx.input(arg)`` descs and ``ctx.attr(name)``,
  calls ``ctx.set_output(arg, shape, dtype)`` for every requested output, and
  ``ctx.check(cond, msg)`` / ``ctx.fail(msg)`` for build-time checks.
* ``grad(g: GradCtx)``: emits backward ops with ``g.emit(...)`` and binds input
  gradients with ``g.set_grad(arg, lbn)``; only for inputs where ``g.needs(arg)``.
  ``grad=None`` with ``no_grad=False`` means "no grad function": autograd fails if it
  reaches the op (as OneFlow's GradientFunctionNotFound).
* ``kernel(k: KernelCtx) -> callable``: called once at lowering time with attrs and
  descs; the returned callable receives one positional value per declared input
  (a tensor, ``None`` for an absent optional input, a list for a repeated input) and
  returns a tensor for a single declared output, a tuple over the declared outputs
  otherwise (a list for a repeated output), or ``None`` for ops without outputs.

Optional rules beside the kernel, for the other lowerings (each reads the same op):

* ``native(k: KernelCtx) -> callable``: same contract as ``kernel``, used by the
  whole-job native lowering (:mod:`graphfront.runtime.native`) when the kernel's
  callable cannot be traced by ``torch.compile`` (for example it reads a tensor's value
  on the host); ops without it are lowered through their kernel.
* ``onnx(c: OnnxCtx)``: emits the ONNX nodes computing the op
  (:mod:`graphfront.onnx`); ops without it cannot be exported.
* ``xla(k: KernelCtx) -> callable``: the op over ``jax.Array`` values, for the whole-job
  XLA lowering (:mod:`graphfront.runtime.xla`); ops without it cannot run in that mode.
  The callable takes the kernel's positional arguments (with ``random=True``: a
  ``jax.random`` key first) and returns what the kernel returns, except that an op
  updating inputs in place (:meth:`OpDef.mutated_args` non-empty for its attrs) returns
  ``(outputs, updates)``: ``outputs`` as the kernel's return value (None for an op
  without outputs) and ``updates`` a tuple with the NEW value of every mutated arg, in
  ``mutated_args`` order (a list for a repeated arg, None for an absent optional arg).
  The callable must be traceable by ``jax.jit``: it must not read values on the host.
  Where the kernel raises on bad input values (an index outside its range), the rule
  reports the same check with :func:`graphfront.ops.xla_rules.check_ids` (ids, bound,
  ``error(value, at)``) instead: the lowering raises that error and leaves the
  variables unchanged.
  Rules import jax inside the factory (jax is an optional dependency); shared builders
  are in :mod:`graphfront.ops.xla_rules`.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Optional

from graphfront.framework import dtypes as _dt
from graphfront.core import user_op_attr_pb2
from graphfront.framework.errors import OpCheckError

AttrValue = user_op_attr_pb2.AttrValue

# attr type name -> (AttrValue oneof member, AttrType enum value)
ATTR_TYPES = {
    "int32": ("at_int32", 1),
    "int64": ("at_int64", 2),
    "bool": ("at_bool", 3),
    "float": ("at_float", 4),
    "double": ("at_double", 5),
    "string": ("at_string", 6),
    "shape": ("at_shape", 7),
    "dtype": ("at_data_type", 8),
    "list_int32": ("at_list_int32", 9),
    "list_int64": ("at_list_int64", 10),
    "list_float": ("at_list_float", 11),
    "list_dtype": ("at_list_data_type", 12),
    "list_shape": ("at_list_shape", 13),
    "list_string": ("at_list_string", 14),
}
_INT_RANGES = {"int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}
_FIELD_TO_TYPE = {field: name for name, (field, _) in ATTR_TYPES.items()}
_ZERO = {
    "int32": 0, "int64": 0, "bool": False, "float": 0.0, "double": 0.0, "string": "",
    "shape": (), "dtype": None, "list_int32": [], "list_int64": [], "list_float": [],
    "list_dtype": [], "list_shape": [], "list_string": [],
}


@dataclasses.dataclass(frozen=True)
class ArgDef:
    name: str
    optional: bool = False
    repeated: bool = False

    @staticmethod
    def parse(spec: str) -> "ArgDef":
        name = spec.rstrip("?*")
        return ArgDef(name, optional="?" in spec, repeated="*" in spec)


@dataclasses.dataclass(frozen=True)
class AttrDef:
    name: str
    type: str
    default: Any
    check: Optional[Callable[[Any], Optional[str]]] = None


@dataclasses.dataclass
class OpDef:
    """Everything graphfront knows about one op type: a user op (``conf == "user_conf"``) or
    a system op, whose ``conf`` is its own ``OperatorConf`` field (``"variable_conf"`` ...)."""

    op_type: str
    inputs: list
    outputs: list
    attrs: dict
    infer: Callable
    kernel: Optional[Callable]
    grad: Optional[Callable] = None
    no_grad: bool = False
    mutates: object = ()        # tuple of input args, or a function attrs -> tuple
    view: bool = False
    random: bool = False
    doc: str = ""
    sbp: Optional[Callable] = None  # SBP rule (graphfront.parallel.sbp); None: every blob broadcast
    native: Optional[Callable] = None   # kernel factory for the native lowering (default: kernel)
    onnx: Optional[Callable] = None     # ONNX converter (graphfront.onnx)
    xla: Optional[Callable] = None      # jax lowering rule (graphfront.runtime.xla)
    amp: Optional[str] = None           # auto mixed precision list: "white", "gray", "clear" or None
    amp_no_cast: tuple = ()             # inputs AMP never casts to the low-precision type
    qat: Optional[str] = None           # quantization-aware training role: "int8", "int8_google", "transparent"
    conf: str = "user_conf"             # the OperatorConf field holding the op
    interface: bool = False             # an interface op: bound to feeds, variables, fetches, watches
    checks: Optional[Callable] = None   # (k) -> [(arg, size, error)]: index inputs that must lie in [0, size)
    host_reads: bool = False            # the kernel reads device values on the host (never in a CUDA graph)
    cpu_only: bool = False              # a CPU kernel only: the op is placed on the CPU whatever its scope
    fused: Optional[Callable] = None    # kernel factory running several of the op's instances at once
    boxing: bool = False                # a boxing op: the workers run those they share in one order
    origin: Optional[tuple] = None      # how another process registers the op type: see :func:`load_origin`
    keeps_state: bool = False           # eager calls keep the kernel's state too (a reader's position)

    def mutated_args(self, attrs) -> tuple:
        """Input args the kernel updates in place, for an op with these attrs."""
        return tuple(self.mutates(attrs)) if callable(self.mutates) else self.mutates

    @property
    def may_mutate(self) -> bool:
        return callable(self.mutates) or bool(self.mutates)

    def input_def(self, name):
        return next((a for a in self.inputs if a.name == name), None)

    def output_def(self, name):
        return next((a for a in self.outputs if a.name == name), None)

    @property
    def has_grad(self) -> bool:
        return self.grad is not None

    def describe(self) -> str:
        """A human-readable summary: args, attrs with types and defaults, grad."""
        def arg(a):
            return a.name + ("?" if a.optional else "") + ("*" if a.repeated else "")
        lines = [f"op {self.op_type}: ({', '.join(arg(a) for a in self.inputs)}) -> "
                 f"({', '.join(arg(a) for a in self.outputs)})"]
        for a in self.attrs.values():
            lines.append(f"  attr {a.name}: {a.type} = {a.default!r}")
        grad = "yes" if self.has_grad else ("NoGrad" if self.no_grad else "no grad function")
        lines.append(f"  grad: {grad}")
        if callable(self.mutates):
            lines.append("  mutates: depends on attrs")
        elif self.mutates:
            lines.append(f"  mutates: {', '.join(self.mutates)}")
        return "\n".join(lines)


_REGISTRY: dict = {}  # (conf field, op type) -> OpDef


AMP_LISTS = ("white", "gray", "clear")
QAT_ROLES = ("int8", "int8_google", "transparent")


def op(op_type, *, inputs=(), outputs=(), attrs=None, infer, kernel, grad=None,
       no_grad=False, mutates=(), view=False, random=False, doc="", sbp=None, native=None, onnx=None,
       xla=None, amp=None, amp_no_cast=(), qat=None, conf="user_conf", interface=False, checks=None,
       host_reads=False, cpu_only=False, fused=None, boxing=False, origin=None, keeps_state=False):
    """Register an op type. Returns its :class:`OpDef`.

    ``attrs`` maps attr name to a type name (implicit zero default, as OneFlow), a
    ``(type, default)`` pair or a ``(type, default, check)`` triple where ``check(v)``
    returns an error message or None. ``mutates`` names the inputs the kernel updates
    in place (or is a function of the attrs returning them); ``view=True`` marks ops
    whose outputs may alias their inputs (the runtime orders in-place updates after every
    reader of such aliases); ``random=True`` marks ops whose results differ between runs
    on equal inputs (never folded or hoisted); in eager execution such an op gets a new
    kernel at every call, as OneFlow's eager mode runs each op as a stateless call (a
    seeded op draws the same numbers at each call), unless ``keeps_state=True``: a kernel
    whose state eager calls keep as a lazy job's runs do (a data reader's position in its
    files, ``ssp_variable_proxy``'s snapshots). ``sbp(ctx)`` lists the op's candidate SBP
    signatures for multi-device jobs (see :mod:`graphfront.parallel.sbp`). ``native``,
    ``onnx`` and ``xla`` are the optional lowering rules described in the module docstring.
    ``amp`` puts the op on one of the auto mixed precision lists of
    :mod:`graphfront.passes.amp` (``"white"``: runs in low precision; ``"gray"``: follows
    its neighbours; ``"clear"``: layout-only, joins a low-precision neighbour; ``None``:
    stays float32); ``amp_no_cast`` names inputs that stay float32 inside the
    low-precision set (batch norm's statistics). ``qat`` is the op's role in
    quantization-aware training (:mod:`graphfront.passes.qat`): ``"int8"`` computes on the
    8-bit grid under every target backend, ``"int8_google"`` under Google's formula only,
    ``"transparent"`` passes its input's quantization scale on (Google's formula); None:
    none. A system op (OneFlow's ``OperatorConf``
    members besides ``user_conf``) names its conf field as ``conf`` and as ``op_type``; its
    inputs and output are fields of that conf, its rules read it as ``ctx.conf``;
    ``interface=True`` marks the ops the runtime binds to feeds, variables, fetches and
    watch handlers instead of running a kernel.

    ``checks(k)`` lists the integer inputs whose values must lie in ``[0, size)``, as
    ``(arg, size, error)`` with ``error(value, at) -> Exception`` (``at``: the index
    tuple of the first bad element; ``size`` may be ``(size, ignored)``, allowing the
    value ``ignored`` too); the kernel itself raises that error on the CPU,
    where torch raises on a bad index. The plan checks fed values on the host before the
    step; elsewhere (a GPU, where a bad index trips a device-side assert that kills the
    process) it clamps the values into range on the device, flags the first bad one and
    raises its error after the step (:mod:`graphfront.runtime.plan`).
    ``host_reads=True`` marks kernels that read device values on the host (their output
    shape or a Python branch depends on them): a job holding one is not captured into a
    CUDA graph. ``cpu_only=True`` marks ops with a CPU kernel only (OneFlow's
    ``REGISTER_CPU_ONLY_USER_OP``): job building places them on the CPU under any
    placement scope, and the runtime moves their inputs and outputs across devices.
    ``fused(k)`` (``k`` the KernelCtx of the first of them) returns a kernel taking the
    inputs of several instances of the op as lists and returning ``(outputs, handle)``:
    their outputs as one list, valid once ``handle.wait()`` has returned (a collective may
    still run): the plan runs gradient all-reduces in buckets with it (all-reduce fusion),
    the rest of the step going on until an output is read. ``boxing=True`` marks the
    boxing ops (collectives and the local layout changes beside them): each worker runs
    those it shares with others in one order (also after one of its ops failed: on zeros),
    and a worker's plan runs no all-reduce bucket past one. ``origin`` says how another
    process (a worker of a job on several devices) registers the op type too
    (:func:`load_origin`); by default the module whose import registers it (the innermost
    one being imported).

    Raises:
        ValueError: ``op_type`` already registered, an attr of unknown type, ``amp``
            not one of ``"white"``, ``"gray"``, ``"clear"``, None, or ``qat`` not one of
            ``"int8"``, ``"int8_google"``, ``"transparent"``, None.
    """
    if (conf, op_type) in _REGISTRY:
        raise ValueError(f"op type {op_type!r} is already registered")
    if amp is not None and amp not in AMP_LISTS:
        raise ValueError(f"op {op_type}: amp expects one of {', '.join(AMP_LISTS)} or None, received {amp!r}")
    if qat is not None and qat not in QAT_ROLES:
        raise ValueError(f"op {op_type}: qat expects one of {', '.join(QAT_ROLES)} or None, received {qat!r}")
    attr_defs = {}
    for name, spec in (attrs or {}).items():
        if isinstance(spec, str):
            spec = (spec, _ZERO[spec])
        type_, default, *rest = spec
        if type_ not in ATTR_TYPES:
            raise ValueError(f"op {op_type}: attr {name} has unknown type {type_!r}")
        attr_defs[name] = AttrDef(name, type_, normalize_attr(op_type, name, type_, default),
                                  rest[0] if rest else None)
    opdef = OpDef(op_type, [ArgDef.parse(s) for s in inputs], [ArgDef.parse(s) for s in outputs],
                  attr_defs, infer, kernel, grad, no_grad, mutates if callable(mutates) else tuple(mutates),
                  view, random, doc, sbp, native, onnx, xla, amp, tuple(amp_no_cast), qat, conf, interface,
                  checks, host_reads, cpu_only, fused, boxing,
                  origin if origin is not None else _importing_module(), keeps_state)
    _REGISTRY[conf, op_type] = opdef
    return opdef


def _importing_module() -> tuple:
    """The origin (:func:`load_origin`) of an op registered now: ``("module", name, path)``
    of the innermost module whose top-level code is running (the one being imported), or
    ``("unloadable", where)`` when that is the main script or none is (a function
    registered the op: a test, an interactive session)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    name = frame.f_globals.get("__name__") if frame is not None else None
    path = frame.f_globals.get("__file__") if frame is not None else None
    if frame is None or name == "__main__" or not path:
        caller = sys._getframe(2)  # (named by the user's code that called graphfront)
        while caller.f_back is not None and caller.f_globals.get("__name__", "").startswith("graphfront."):
            caller = caller.f_back
        return ("unloadable", f"{caller.f_code.co_name} in {caller.f_code.co_filename}")
    return ("module", name, os.path.abspath(path))


def load_origin(origin) -> None:
    """Register, in this process, the op types of ``origin`` (an :attr:`OpDef.origin`):
    ``("module", name, path)`` imports the module (by name, else from its file, user code
    run as an import; nothing when it is imported already); ``("call", module, function,
    args)`` calls ``module.function(*args)`` (a custom op module's loader).

    Raises:
        RuntimeError: ``("unloadable", where)``: the op was registered by code no other
            process can run again (the main script, a function).
    """
    kind, *rest = origin
    if kind == "module":
        name, path = rest
        if name in sys.modules:
            return
        try:
            importlib.import_module(name)
        except ImportError:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
    elif kind == "call":
        module, function, args = rest
        getattr(importlib.import_module(module), function)(*args)
    else:
        raise RuntimeError(f"registered by {rest[0]}, which another process cannot run again: register the op at "
                           f"the top level of an importable module")


def unregister(op_type: str) -> None:
    """Remove a user op type (for tests and for redefining a custom op interactively)."""
    _REGISTRY.pop(("user_conf", op_type), None)


def lookup(op_type: str) -> OpDef:
    """Return the OpDef of user op type ``op_type``; KeyError with close matches if unknown."""
    try:
        return _REGISTRY["user_conf", op_type]
    except KeyError:
        close = difflib.get_close_matches(op_type, registered_op_types(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown op type {op_type!r}{hint}") from None


def op_def(op_conf) -> OpDef:
    """The OpDef of any ``OperatorConf``: its user op type, or its system conf field.

    Raises:
        KeyError: an unknown user op type, or a conf field no system op is defined for.
    """
    kind = op_conf.WhichOneof("op_type")
    if kind == "user_conf":
        return lookup(op_conf.user_conf.op_type_name)
    try:
        return _REGISTRY[kind, kind]
    except KeyError:
        raise KeyError(f"unsupported system op kind {kind!r}; supported: {', '.join(system_kinds())}") from None


def has_op(op_type: str) -> bool:
    """Whether user op type ``op_type`` is registered."""
    return ("user_conf", op_type) in _REGISTRY


def registered_op_types() -> list:
    """Sorted list of every registered user op type."""
    return sorted(t for conf, t in _REGISTRY if conf == "user_conf")


def system_kinds() -> list:
    """Sorted conf fields of the registered system ops (``"identity_conf"``, ``"variable_conf"`` ...)."""
    return sorted(conf for conf, _ in _REGISTRY if conf != "user_conf")


def describe(op_type: str) -> str:
    return lookup(op_type).describe()


# --------------------------------------------------------------------------- attrs

def normalize_attr(op_type, name, type_, value):
    """Check a Python value against an attr type and return its canonical Python form.

    int types take int (not bool); float/double take int or float; ``shape`` and list
    types take list/tuple; ``dtype`` takes a graphfront dtype. Raises TypeError naming
    the op, attr, expected type and received value.
    """
    def bad():
        return TypeError(f"op {op_type}: attr '{name}' expects {type_}, received "
                         f"{value!r} ({type(value).__name__})")

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool) or _is_np_int(v)

    def is_num(v):
        return is_int(v) or isinstance(v, float) or _is_np_float(v)

    def in_range(v, int_type):
        lo, hi = _INT_RANGES[int_type]
        if not lo <= v <= hi:
            raise TypeError(f"op {op_type}: attr '{name}' expects {type_} in [{lo}, {hi}], received {v}")
        return int(v)

    if type_ in ("int32", "int64"):
        if not is_int(value):
            raise bad()
        return in_range(value, type_)
    if type_ == "bool":
        if not isinstance(value, bool):
            raise bad()
        return value
    if type_ in ("float", "double"):
        if not is_num(value):
            raise bad()
        return float(value)
    if type_ == "string":
        if not isinstance(value, str):
            raise bad()
        return value
    if type_ == "dtype":
        if value is not None and not isinstance(value, _dt.dtype):
            raise bad()
        return value
    if not isinstance(value, (list, tuple)):
        raise bad()
    if type_ == "shape":
        if not all(is_int(v) for v in value):
            raise bad()
        return tuple(int(v) for v in value)
    if type_ in ("list_int32", "list_int64"):
        if not all(is_int(v) for v in value):
            raise bad()
        return [in_range(v, type_[len("list_"):]) for v in value]
    if type_ == "list_float":
        if not all(is_num(v) for v in value):
            raise bad()
        return [float(v) for v in value]
    if type_ == "list_string":
        if not all(isinstance(v, str) for v in value):
            raise bad()
        return list(value)
    if type_ == "list_dtype":
        if not all(isinstance(v, _dt.dtype) for v in value):
            raise bad()
        return list(value)
    if type_ == "list_shape":
        if not all(isinstance(s, (list, tuple)) and all(is_int(v) for v in s) for s in value):
            raise bad()
        return [tuple(int(v) for v in s) for s in value]
    raise bad()


def _is_np_int(v):
    import numpy as np
    return isinstance(v, np.integer)


def _is_np_float(v):
    import numpy as np
    return isinstance(v, np.floating)


def to_attr_value(type_: str, value) -> AttrValue:
    """Encode a canonical Python attr value as an ``AttrValue`` of the given type."""
    av = AttrValue()
    field = ATTR_TYPES[type_][0]
    if type_ in ("int32", "int64", "bool", "float", "double", "string"):
        setattr(av, field, value)
    elif type_ == "shape":
        av.at_shape.SetInParent()
        av.at_shape.dim.extend(value)
    elif type_ == "dtype":
        av.at_data_type = value.proto if value is not None else 0
    else:
        lst = getattr(av, field)
        lst.SetInParent()
        if type_ == "list_dtype":
            lst.val.extend(d.proto for d in value)
        elif type_ == "list_shape":
            for s in value:
                lst.val.add().dim.extend(s)
        else:
            lst.val.extend(value)
    return av


def attr_value_type(av: AttrValue) -> Optional[str]:
    """The attr type name of an AttrValue's set oneof member (None if unset)."""
    field = av.WhichOneof("value")
    return _FIELD_TO_TYPE.get(field) if field else None


def from_attr_value(av: AttrValue):
    """Decode an ``AttrValue`` into its canonical Python value."""
    type_ = attr_value_type(av)
    field = ATTR_TYPES[type_][0]
    if type_ in ("int32", "int64", "bool", "float", "double", "string"):
        return getattr(av, field)
    if type_ == "shape":
        return tuple(av.at_shape.dim)
    if type_ == "dtype":
        return _dt.from_proto(av.at_data_type) if av.at_data_type else None
    vals = getattr(av, field).val
    if type_ == "list_dtype":
        return [_dt.from_proto(v) for v in vals]
    if type_ == "list_shape":
        return [tuple(s.dim) for s in vals]
    return list(vals)


def check(cond, msg):
    """Raise an OpCheckError with ``msg`` when ``cond`` is false (for infer functions)."""
    if not cond:
        raise OpCheckError(msg)
