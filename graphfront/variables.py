"""``flow.get_variable``: declare (or reuse) a variable in the job being built."""
from __future__ import annotations

import numbers
from typing import Sequence

from graphfront.framework import dtypes as _dt
from graphfront.core import op_conf_pb2
from graphfront.core.initializer_conf_pb2 import InitializerConf
from graphfront.core.regularizer_conf_pb2 import RegularizerConf
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.errors import ArgumentError, JobBuildError, format_location, user_frame
from graphfront.framework.renamed_args import PARALLEL_DISTRIBUTION, renamed_keywords
from graphfront.parallel import sbp as _sbp

#: what get_variable's typed arguments expect, for its errors
_KINDS = {"dtype": "a graphfront dtype such as flow.float32",
          "initializer": "an InitializerConf from flow.*_initializer or None",
          "regularizer": "a RegularizerConf from flow.regularizers or None", "model_name": "a str or None",
          "random_seed": "an int or None"}


@renamed_keywords(PARALLEL_DISTRIBUTION)
def get_variable(name: str, shape: Sequence[int] | None = None, dtype: _dt.dtype = _dt.float32,
                 initializer: InitializerConf | None = None, regularizer: RegularizerConf | None = None,
                 trainable: bool | None = None, model_name: str | None = None, random_seed: int | None = None,
                 nd_sbp: str | Sequence[str] | None = None, distribute=None, reuse: bool = True) -> BlobDesc:
    """Create a variable op ``<namespace prefix><name>`` and return its blob ``<name>/out``.

    Args:
        name: variable name (prefixed by ``flow.scope.namespace`` names joined with ``-``).
        shape: list/tuple of ints (required).
        dtype: graphfront dtype (default float32).
        initializer: an ``InitializerConf`` from ``flow.*_initializer``; None uses the
            job's ``default_initializer_conf`` (error if unset).
        regularizer: a ``RegularizerConf`` from ``flow.regularizers``.
        trainable: whether the optimizer updates it (default True).
        random_seed: seed of this variable's initializer draw.
        reuse: when False, an existing variable of the same name in this job is an error.
        nd_sbp: SBP string or list of them, one per axis of the placement's hierarchy
            (``VariableOpConf.nd_sbp``); OneFlow v0.5's keyword ``parallel_distribution``
            is accepted for it.
        distribute: ``flow.distribute.split(axis)`` lays the variable out in slices over
            the devices of a multi-device placement (recorded as ``nd_sbp`` ``"S(axis)"``);
            otherwise every device holds all of it.
    Variables are shared by name across the jobs of a session: each job gets its own
    variable op, bound to one tensor in the session's variable store.
    Raises:
        ArgumentError: ``name``, ``dtype``, ``initializer``, ``regularizer``, ``model_name`` or
            ``random_seed`` of the wrong type.
        JobBuildError: missing or invalid shape, a redefinition with another
            shape/dtype, or an ``nd_sbp`` with a malformed string or not one entry per
            axis of the placement's hierarchy.
    """
    builder = jb.current()
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"flow.get_variable: argument 'name' expects a non-empty str, received "
                            f"{type(name).__name__} {name!r}")
    full = builder.scope.prefix + name
    loc = user_frame()
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                                       and d > 0 for d in shape):
        raise JobBuildError(f"get_variable '{full}': shape must be a list/tuple of positive ints, received "
                            f"{shape!r}{format_location(loc)}")
    for arg, value, kind in (("dtype", dtype, _dt.dtype), ("initializer", initializer, InitializerConf),
                             ("regularizer", regularizer, RegularizerConf), ("model_name", model_name, str),
                             ("random_seed", random_seed, numbers.Integral)):
        if (value is not None or arg == "dtype") and (not isinstance(value, kind) or isinstance(value, bool)):
            raise ArgumentError(f"get_variable '{full}': argument '{arg}' expects {_KINDS[arg]}, received "
                                f"{type(value).__name__} {value!r}")
    if full in builder.ops:
        existing = builder.ops[full]
        if jb.op_kind(existing) != "variable_conf":
            raise JobBuildError(f"get_variable '{full}': an op of another kind has this name{format_location(loc)}")
        if not reuse:
            raise JobBuildError(f"get_variable '{full}' already exists in job '{builder.job_name}' and "
                                f"reuse=False{format_location(loc)}")
        d = builder.desc(f"{full}/out")
        if d.shape != tuple(shape) or d.dtype is not dtype:
            raise JobBuildError(f"get_variable '{full}': exists with {d.dtype.name} {d.shape}, requested "
                                f"{dtype.name} {tuple(shape)}{format_location(loc)}")
        return _blob(builder, full)
    conf = op_conf_pb2.OperatorConf(name=full)
    vc = conf.variable_conf
    vc.out = "out"
    vc.shape.dim.extend(shape)
    vc.data_type = dtype.proto
    if initializer is not None:
        vc.initializer.CopyFrom(initializer)
    if regularizer is not None:
        vc.regularizer.CopyFrom(regularizer)
    if trainable is not None:
        vc.trainable = bool(trainable)
    if model_name is not None:
        vc.model_name = model_name
    if random_seed is not None:
        vc.random_seed = int(random_seed)
    if nd_sbp is not None:
        nd_sbp = [nd_sbp] if isinstance(nd_sbp, str) else list(nd_sbp)
        try:
            if nd_sbp:  # (an empty list: no layout hint)
                _sbp.flatten_nd_sbp(nd_sbp, builder.scope.hierarchy)
        except ValueError as e:
            raise JobBuildError(f"get_variable '{full}': {e}{format_location(loc)}") from None
        vc.nd_sbp.extend(nd_sbp)
    elif getattr(distribute, "kind", None) == "partial_sum":
        raise ArgumentError(f"get_variable '{full}': distribute cannot be a partial sum (flow.sbp.partial_sum); "
                            "a variable is split(axis) or broadcast")
    elif distribute is not None and getattr(distribute, "kind", None) == "split":
        vc.nd_sbp.append(f"S({distribute.axis})")  # the layout over a multi-device placement
    if builder.session is not None and full in builder.session.variables:
        t = builder.session.variables.tensors[full]
        if tuple(t.shape) != tuple(shape) or _dt.from_torch(t.dtype) is not dtype:
            raise JobBuildError(f"get_variable '{full}': another job of this session declared it as "
                                f"{_dt.from_torch(t.dtype).name} {tuple(t.shape)}, this job asks for "
                                f"{dtype.name} {tuple(shape)}{format_location(loc)}")
    builder.add_op(conf, location=loc)
    return _blob(builder, full)


def _blob(builder, name):
    lbn = f"{name}/out"
    d = builder.desc(lbn)
    conf = builder.scope.parallel_conf
    conf.device_tag = builder.ops[name].device_tag
    return BlobDesc(lbn, d.shape, d.dtype, conf, builder.job_name)
