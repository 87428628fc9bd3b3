"""The scopes ops are built in, registered as ``ScopeProto`` symbols.

(``flow.scope``, the user's placement and name scopes, is :mod:`graphfront.scope`.) A :class:`Scope` is what OneFlow's ``ScopeProto`` describes for one op: the device
placement (``ParallelConf``), the ``flow.scope.namespace`` prefixes and the
calculation pass. Scopes are registered as ``ScopeProto`` symbols; every op added to a
job carries the ``scope_symbol_id`` of the scope it was built in.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re

from graphfront.core import placement_pb2, scope_pb2

_symbol_ids = itertools.count(1)
SYMBOLS: dict = {}  # scope_symbol_id -> ScopeProto
PARALLEL_SYMBOLS: dict = {}  # parallel desc symbol id -> ParallelConf (one id per distinct conf)
JOB_DESC_SYMBOLS: dict = {}  # job desc symbol id -> JobConfigProto

#: OneFlow's scope attributes (``ScopeProto.attr_name2attr_value``, set by
#: ``flow.experimental.scope.config``): name -> default; the default's type is the attr's.
#: ``quantization_aware_training`` is read by the QAT pass (False: the ops built in the scope
#: keep float inputs); the others are recorded in the scope for the passes that read them.
SCOPE_ATTR_DEFAULTS = {"quantization_aware_training": True, "checkpointing": False, "ssp_num_stages": -1,
                       "ssp_stage_id": -1, "pipeline_stage_id_hint": 0}


class ParallelDescSymbol:
    """A registered placement (OneFlow's ``ParallelDesc`` symbol): ``device_tag``,
    ``parallel_conf``, ``parallel_num``, ``machine_id2device_id_list`` ({machine id: [device
    ids]}) and ``symbol_id``."""

    def __init__(self, symbol_id: int, parallel_conf: placement_pb2.ParallelConf):
        self.symbol_id = symbol_id
        self.parallel_conf = parallel_conf
        self.device_tag = parallel_conf.device_tag
        ids = {}
        for spec in parallel_conf.device_name:
            m = _DEVICE_SPEC.match(spec)
            first, last = int(m.group(2)), int(m.group(3) if m.group(3) else m.group(2))
            ids.setdefault(int(m.group(1)), []).extend(range(first, last + 1))
        self.machine_id2device_id_list = ids
        self.parallel_num = sum(len(v) for v in ids.values())

    def __eq__(self, other):
        return isinstance(other, ParallelDescSymbol) and self.parallel_conf == other.parallel_conf

    def __hash__(self):
        return hash(self.parallel_conf.SerializeToString(deterministic=True))

    def __repr__(self):
        return f"ParallelDescSymbol({self.device_tag}, {list(self.parallel_conf.device_name)})"


class JobDescSymbol:
    """A registered job configuration: ``symbol_id`` and ``data`` (the ``JobConfigProto``)."""

    def __init__(self, symbol_id: int, data):
        self.symbol_id = symbol_id
        self.data = data


def _parallel_symbol_id(device_tag, device_ids) -> int:
    conf = placement_pb2.ParallelConf(device_tag=device_tag)
    conf.device_name.extend(device_ids)
    for sid, known in PARALLEL_SYMBOLS.items():
        if known == conf:
            return sid
    sid = next(_symbol_ids)
    PARALLEL_SYMBOLS[sid] = conf
    return sid


def register_job_desc(job_config_proto) -> int:
    """Register a job's ``JobConfigProto`` (a copy) as a symbol; its id."""
    sid = next(_symbol_ids)
    JOB_DESC_SYMBOLS[sid] = type(job_config_proto)()
    JOB_DESC_SYMBOLS[sid].CopyFrom(job_config_proto)
    return sid


@dataclasses.dataclass(frozen=True)
class Scope:
    """The scope ops are built in (OneFlow's scope symbol).

    OneFlow's scope API: ``symbol_id``, ``data`` (the ``ScopeProto``), ``session_id``,
    ``job_desc_symbol``, ``device_parallel_desc_symbol`` / ``host_parallel_desc_symbol``
    (:class:`ParallelDescSymbol`), ``auto_increment_id()`` and the builders
    ``BuildWithNewParallelDesc``, ``BuildWithNewParallelConf``, ``BuildWithNewIsMirrored``,
    ``BuildWithNewScopeName`` and ``BuildBySetter``. Their first argument, OneFlow's
    instruction builder, is accepted and unused (graphfront registers symbols directly). A
    built scope is used with ``flow.scope.scope_context(scope)``.
    """

    device_tag: str = "cpu"
    device_ids: tuple = ("0:0",)
    namespace: tuple = ()
    calculation_pass: str = "forward_pass"
    symbol_id: int = 0
    hierarchy: tuple = ()  # the devices as a grid (flow.scope.placement's hierarchy); () for a line
    is_mirrored: bool = False
    job_desc_symbol_id: int = 0
    session_id: int = 0
    attrs: tuple = ()  # sorted (name, value) pairs of SCOPE_ATTR_DEFAULTS' attrs set in this scope

    @property
    def parallel_conf(self) -> placement_pb2.ParallelConf:
        conf = placement_pb2.ParallelConf(device_tag=self.device_tag)
        conf.device_name.extend(self.device_ids)
        if self.hierarchy:
            conf.hierarchy.dim.extend(self.hierarchy)
        return conf

    @property
    def prefix(self) -> str:
        return "".join(n + "-" for n in self.namespace)

    def derive(self, **changes) -> "Scope":
        scope = dataclasses.replace(self, **changes)
        return dataclasses.replace(scope, symbol_id=_register(scope))

    def attr(self, name):
        """The value of scope attribute ``name`` here (its default when not set)."""
        return dict(self.attrs).get(name, SCOPE_ATTR_DEFAULTS[name])

    def with_attrs(self, **values) -> "Scope":
        """This scope with the scope attributes ``values`` set (names and types as
        :data:`SCOPE_ATTR_DEFAULTS`).

        Raises:
            ValueError: an unknown attribute name.
            TypeError: a value whose type is not the attribute's (bool or int).
        """
        where = "flow.experimental.scope.config"
        attrs = dict(self.attrs)
        for name, value in values.items():
            if name not in SCOPE_ATTR_DEFAULTS:
                raise ValueError(f"{where}: unknown scope attribute {name!r}; known: "
                                 f"{', '.join(sorted(SCOPE_ATTR_DEFAULTS))}")
            kind = type(SCOPE_ATTR_DEFAULTS[name])
            if type(value) is not kind:
                raise TypeError(f"{where}: scope attribute {name!r} expects a {kind.__name__}, received "
                                f"{type(value).__name__} {value!r}")
            attrs[name] = value
        return self.derive(attrs=tuple(sorted(attrs.items())))

    # ------------------------------------------------------------ OneFlow's scope symbol API

    @property
    def data(self) -> scope_pb2.ScopeProto:
        """The registered ``ScopeProto`` (a copy)."""
        proto = scope_pb2.ScopeProto()
        proto.CopyFrom(SYMBOLS[self.symbol_id])
        return proto

    @property
    def device_parallel_desc_symbol(self) -> ParallelDescSymbol:
        sid = SYMBOLS[self.symbol_id].device_parallel_desc_symbol_id
        return ParallelDescSymbol(sid, PARALLEL_SYMBOLS[sid])

    @property
    def host_parallel_desc_symbol(self) -> ParallelDescSymbol:
        sid = SYMBOLS[self.symbol_id].host_parallel_desc_symbol_id
        return ParallelDescSymbol(sid, PARALLEL_SYMBOLS[sid])

    @property
    def job_desc_symbol(self):
        """:class:`JobDescSymbol` of the job being built (``None`` outside a job)."""
        data = JOB_DESC_SYMBOLS.get(self.job_desc_symbol_id)
        return None if data is None else JobDescSymbol(self.job_desc_symbol_id, data)

    def auto_increment_id(self) -> int:
        """1, 2, 3 ... on successive calls for this scope symbol (OneFlow's per-scope counter)."""
        n = _AUTO_INCREMENT.get(self.symbol_id, 0) + 1
        _AUTO_INCREMENT[self.symbol_id] = n
        return n

    def BuildWithNewParallelDesc(self, builder, device_tag, machine_device_ids) -> "Scope":  # noqa: N802
        """This scope placed on ``device_tag`` ("cpu"/"gpu") and ``machine_device_ids``
        ("0:0", "0:0-3" or a list); ValueError on a bad tag or id string."""
        if device_tag not in ("cpu", "gpu", "cuda"):
            raise ValueError(f"Scope.BuildWithNewParallelDesc: device_tag must be 'cpu' or 'gpu', "
                             f"received {device_tag!r}")
        return self.derive(device_tag="gpu" if device_tag == "cuda" else device_tag,
                           device_ids=parse_device_ids(machine_device_ids))

    def BuildWithNewParallelConf(self, builder, parallel_conf) -> "Scope":  # noqa: N802
        """This scope placed as ``parallel_conf`` (a ``ParallelConf``)."""
        return self.BuildWithNewParallelDesc(builder, parallel_conf.device_tag, list(parallel_conf.device_name))

    def BuildWithNewIsMirrored(self, builder, is_mirrored) -> "Scope":  # noqa: N802
        """This scope in the mirrored (``True``) or consistent (``False``) view."""
        return self.derive(is_mirrored=bool(is_mirrored))

    def BuildWithNewScopeName(self, builder, scope_name) -> "Scope":  # noqa: N802
        """This scope with ``scope_name`` appended to its name prefixes (as ``flow.scope.namespace``)."""
        if not isinstance(scope_name, str) or not scope_name:
            raise ValueError(f"Scope.BuildWithNewScopeName: scope_name must be a non-empty str, received "
                             f"{scope_name!r}")
        return self.derive(namespace=self.namespace + (scope_name,))

    def BuildBySetter(self, builder, setter) -> "Scope":  # noqa: N802
        """The scope whose ``ScopeProto`` is a copy of this one's after ``setter(proto)``.

        The setter may change ``device_parallel_desc_symbol_id`` (to an id of a registered
        placement), ``opt_mirrored_parallel_conf``, ``scope_op_name_prefixes``,
        ``calculation_pass_name``, ``job_desc_symbol_id`` and ``attr_name2attr_value``.

        Raises:
            ValueError: the setter names a placement or job desc symbol id that is not registered.
        """
        proto = self.data
        setter(proto)
        sid = proto.device_parallel_desc_symbol_id
        if sid not in PARALLEL_SYMBOLS:
            raise ValueError(f"Scope.BuildBySetter: device_parallel_desc_symbol_id {sid} is not a registered "
                             f"placement symbol")
        if proto.job_desc_symbol_id and proto.job_desc_symbol_id not in JOB_DESC_SYMBOLS:
            raise ValueError(f"Scope.BuildBySetter: job_desc_symbol_id {proto.job_desc_symbol_id} is not a "
                             f"registered job desc symbol")
        conf = PARALLEL_SYMBOLS[sid]
        scope = dataclasses.replace(
            self, device_tag=conf.device_tag, device_ids=tuple(conf.device_name),
            namespace=tuple(proto.scope_op_name_prefixes), calculation_pass=proto.calculation_pass_name,
            is_mirrored=proto.opt_mirrored_parallel_conf.HasField("mirrored_parallel"),
            job_desc_symbol_id=proto.job_desc_symbol_id, attrs=_attrs_of(proto))
        proto.host_parallel_desc_symbol_id = _parallel_symbol_id("cpu", scope.device_ids)
        symbol_id = next(_symbol_ids)
        SYMBOLS[symbol_id] = proto
        return dataclasses.replace(scope, symbol_id=symbol_id)


_AUTO_INCREMENT: dict = {}


def _register(scope: Scope) -> int:
    proto = scope_pb2.ScopeProto(job_desc_symbol_id=scope.job_desc_symbol_id,
                                 device_parallel_desc_symbol_id=_parallel_symbol_id(scope.device_tag, scope.device_ids),
                                 host_parallel_desc_symbol_id=_parallel_symbol_id("cpu", scope.device_ids),
                                 session_id=scope.session_id, calculation_pass_name=scope.calculation_pass)
    proto.opt_mirrored_parallel_conf.SetInParent()
    if scope.is_mirrored:
        proto.opt_mirrored_parallel_conf.mirrored_parallel.SetInParent()
    proto.scope_op_name_prefixes.extend(scope.namespace)
    for name, value in scope.attrs:
        setattr(proto.attr_name2attr_value[name], "at_bool" if isinstance(value, bool) else "at_int64", value)
    symbol_id = next(_symbol_ids)
    SYMBOLS[symbol_id] = proto
    return symbol_id


def _attrs_of(proto) -> tuple:
    """The known scope attributes a ``ScopeProto`` sets, as :attr:`Scope.attrs`."""
    attrs = {}
    for name, value in proto.attr_name2attr_value.items():
        if name in SCOPE_ATTR_DEFAULTS:
            kind = value.WhichOneof("value")
            attrs[name] = bool(value.at_bool) if kind == "at_bool" else int(getattr(value, kind))
    return tuple(sorted(attrs.items()))


def scope_attr(scope_symbol_id: int, name: str):
    """Scope attribute ``name`` of the scope symbol an op carries (``OperatorConf.scope_symbol_id``);
    its default when the symbol is unknown (an op of a loaded job) or does not set it."""
    proto = SYMBOLS.get(scope_symbol_id)
    attrs = dict(_attrs_of(proto)) if proto is not None else {}
    return attrs.get(name, SCOPE_ATTR_DEFAULTS[name])


def calculation_pass_of(scope_symbol_id: int) -> str:
    """The calculation pass (``"forward_pass"``, ``"backward_pass"``, ``"optimizer_pass"``) of
    the scope symbol an op carries; ``"forward_pass"`` when the symbol is unknown."""
    proto = SYMBOLS.get(scope_symbol_id)
    return proto.calculation_pass_name if proto is not None else "forward_pass"


def make_scope(device_tag="cpu", device_ids=("0:0",), **fields) -> Scope:
    """A registered scope on ``device_tag`` / ``device_ids``; ``fields`` set the other
    :class:`Scope` fields (``is_mirrored``, ``job_desc_symbol_id``, ``session_id``)."""
    return Scope().derive(device_tag=device_tag, device_ids=tuple(device_ids), **fields)


_DEVICE_SPEC = re.compile(r"^(\d+):(\d+)(?:-(\d+))?$")


def parse_device_ids(machine_device_ids) -> tuple:
    """Normalize ``"0:0"``, ``"0:0-3"`` (first to last device, both included) or a list of
    such strings; ValueError otherwise."""
    if not isinstance(machine_device_ids, (str, list, tuple)):
        raise ValueError(f'flow.scope.placement: machine_device_ids expects a string like "0:0" or "0:0-3" or a '
                         f'list of them, received {type(machine_device_ids).__name__} {machine_device_ids!r}')
    ids = [machine_device_ids] if isinstance(machine_device_ids, str) else list(machine_device_ids)
    if not ids:
        raise ValueError("flow.scope.placement: machine_device_ids is empty")
    for spec in ids:
        m = _DEVICE_SPEC.match(spec) if isinstance(spec, str) else None
        if not m:
            raise ValueError(f'flow.scope.placement: machine_device_ids expects strings like "0:0" '
                             f'or "0:0-3", received {spec!r}')
        if m.group(3) and int(m.group(3)) < int(m.group(2)):
            raise ValueError(f"flow.scope.placement: the device range {spec!r} ends before it starts")
    return tuple(ids)


def device_count(device_ids) -> int:
    n = 0
    for spec in device_ids:
        m = _DEVICE_SPEC.match(spec)
        n += (int(m.group(3)) - int(m.group(2)) + 1) if m.group(3) else 1
    return n


def first_device_index(device_ids) -> int:
    return int(_DEVICE_SPEC.match(device_ids[0]).group(2))


def device_pairs(device_ids) -> list:
    """The ``(machine, device)`` pairs that ``device_ids`` (``"0:0"``, ``"0:2-3"`` or a
    list of such strings) name, sorted and without repeats."""
    pairs = set()
    for spec in device_ids:
        m = _DEVICE_SPEC.match(spec)
        first = int(m.group(2))
        pairs.update((int(m.group(1)), d) for d in range(first, int(m.group(3) or first) + 1))
    return sorted(pairs)


@contextlib.contextmanager
def nothing():
    yield
