"""``flow.user_op_builder``: OneFlow's fluent builder of user op confs.

``flow.user_op_builder(name).Op(type).Input(arg, [blobs]).Output(arg, num=1)
.Attr(name, value).Build().InferAndTryRun().RemoteBlobList()`` builds an
``OperatorConf`` with a ``UserOpConf``, checks and completes it against the registry
(``Build``), adds it to the job being built (``InferAndTryRun`` = CurJobAddOp) and
returns the output BlobDescs. The same builder serves API wrappers, custom ops and the
backward ops that autograd emits.
"""
from __future__ import annotations

import itertools

from graphfront.core import op_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc, is_int
from graphfront.framework.errors import JobBuildError, OpCheckError, format_location, user_frame
from graphfront.ops import registry

_uid = itertools.count()


def unique_str(prefix: str) -> str:
    """``prefix`` + a process-wide counter, OneFlow's default op naming (``Relu_0``)."""
    return f"{prefix}{next(_uid)}"


def _lbn_of(x, op_name, arg):
    if isinstance(x, BlobDesc):
        return x.lbn
    if isinstance(x, str) and "/" in x:
        return x
    raise JobBuildError(f"op '{op_name}': input '{arg}' expects BlobDesc objects (blobs of the job), "
                        f"received {type(x).__name__} {x!r}" + format_location(user_frame()))


def placed_blob(lbn, device_tag) -> BlobDesc:
    """The BlobDesc of blob ``lbn`` of the job being built: its inferred shape, dtype and
    dynamism, on the scope's devices with the ``device_tag`` of the op that makes it (the
    scope's own tag when that is empty)."""
    builder = jb.current()
    d = builder.desc(lbn)
    parallel_conf = builder.scope.parallel_conf
    parallel_conf.device_tag = device_tag or parallel_conf.device_tag
    return BlobDesc(lbn, d.shape, d.dtype, parallel_conf, builder.job_name, d.is_dynamic)


def new_system_op(kind: str, name, prefix: str):
    """A new ``OperatorConf`` of the system op ``kind`` (its oneof field, e.g.
    ``"sync_dynamic_resize_conf"``) for the job being built, named ``name`` (default
    ``<prefix><n>``) under the scope's namespace. Returns ``(conf, member)``: the member is
    the ``kind`` message to fill before :func:`add_system_op`."""
    conf = op_conf_pb2.OperatorConf(name=jb.current().scope.prefix + (name or unique_str(prefix)))
    return conf, getattr(conf, kind)


def add_system_op(conf, output=None):
    """Add the system op ``conf`` (from :func:`new_system_op`, filled) to the job being built.
    Returns the BlobDesc of its output blob named ``output`` (:func:`placed_blob`), or None
    without one."""
    added = jb.current().add_op(conf)
    return placed_blob(f"{added.name}/{output}", added.device_tag) if output else None


class UserOpConfBuilder:
    """Fluent builder of one user op (see module docstring). Methods return ``self``."""

    def __init__(self, op_name: str, prefix: bool = True):
        if prefix and jb.is_building():
            op_name = jb.current().scope.prefix + op_name
        self.op_conf = op_conf_pb2.OperatorConf(name=op_name)
        self.op_conf.user_conf.SetInParent()

    @property
    def user_conf(self):
        return self.op_conf.user_conf

    def Op(self, op_type_name):  # noqa: N802 - OneFlow's fluent names
        self.user_conf.op_type_name = op_type_name
        return self

    def Input(self, input_name, input_blob_list):  # noqa: N802
        if isinstance(input_blob_list, BlobDesc) or not isinstance(input_blob_list, (list, tuple)):
            raise JobBuildError(f"op '{self.op_conf.name}': Input('{input_name}', ...) expects a list of "
                                f"blobs, received {type(input_blob_list).__name__}" + format_location(user_frame()))
        lst = self.user_conf.input[input_name]
        lst.s.extend(_lbn_of(b, self.op_conf.name, input_name) for b in input_blob_list)
        if input_name not in self.user_conf.input_order:
            self.user_conf.input_order.append(input_name)
        return self

    def InputSize(self, input_name, input_blob_size):  # noqa: N802
        self.user_conf.input[input_name].s.extend(
            f"{self.op_conf.name}/{input_name}_{i}" for i in range(input_blob_size))
        self.user_conf.input_order.append(input_name)
        return self

    def Output(self, output_name, num=1):  # noqa: N802
        if not is_int(num) or num < 1:
            raise JobBuildError(f"op '{self.op_conf.name}': Output('{output_name}', num) expects num >= 1, "
                                f"received {num!r}" + format_location(user_frame()))
        self.user_conf.output[output_name].s.extend(
            f"{self.op_conf.name}/{output_name}_{i}" for i in range(num))
        if output_name not in self.user_conf.output_order:
            self.user_conf.output_order.append(output_name)
        return self

    def Attr(self, attr_name, attr_value, attr_type_name=None):  # noqa: N802
        op_type = self.user_conf.op_type_name
        def where():  # computed only for an error (perf: the stack walk is costly)
            return format_location(user_frame())
        if not op_type:
            raise JobBuildError(f"op '{self.op_conf.name}': call .Op(type) before .Attr('{attr_name}', ...)" + where())
        try:
            opdef = registry.lookup(op_type)
        except KeyError as e:
            raise JobBuildError(f"op '{self.op_conf.name}': {e.args[0]}" + where()) from None
        adef = opdef.attrs.get(attr_name)
        if adef is None:
            raise JobBuildError(f"op '{self.op_conf.name}' ({op_type}): no attr named '{attr_name}'; its attrs "
                                f"are {', '.join(opdef.attrs) or '(none)'}" + where())
        try:
            value = registry.normalize_attr(op_type, attr_name, adef.type, attr_value)
        except TypeError as e:
            raise JobBuildError(f"op '{self.op_conf.name}': {e.args[0]}" + where()) from None
        self.user_conf.attr[attr_name].CopyFrom(registry.to_attr_value(adef.type, value))
        return self

    def OpName(self, op_name):  # noqa: N802
        old = self.op_conf.name
        new = (jb.current().scope.prefix if jb.is_building() else "") + op_name
        for lst in self.user_conf.output.values():
            for i, lbn in enumerate(lst.s):
                lst.s[i] = new + lbn[len(old):]
        self.op_conf.name = new
        return self

    def CheckAndComplete(self):  # noqa: N802
        try:
            jb.check_and_complete(self.op_conf)
        except OpCheckError as e:
            raise JobBuildError(f"op '{self.op_conf.name}' ({self.user_conf.op_type_name}): {e.args[0]}"
                                + format_location(user_frame())) from None
        return self

    def Build(self):  # noqa: N802
        self.CheckAndComplete()
        return UserOp(self.op_conf)


class UserOp:
    """A built user op: ``InferAndTryRun()`` adds it to the job; outputs as BlobDescs."""

    def __init__(self, op_conf):
        self.op_conf = op_conf
        self._added = None

    def InferAndTryRun(self):  # noqa: N802
        self._added = jb.current().add_op(self.op_conf)
        return self

    def _blob(self, lbn):
        return placed_blob(lbn, (self._added or self.op_conf).device_tag)

    def RemoteBlobList(self):  # noqa: N802
        """Output blobs in declaration order (every index of every output arg)."""
        uc = self.op_conf.user_conf
        return tuple(self._blob(lbn) for arg in uc.output_order for lbn in uc.output[arg].s)

    def RemoteBlobDict(self):  # noqa: N802
        uc = self.op_conf.user_conf
        return {arg: [self._blob(lbn) for lbn in uc.output[arg].s] for arg in uc.output_order}

    def SoleOutputBlob(self):  # noqa: N802
        blobs = self.RemoteBlobList()
        if len(blobs) != 1:
            raise JobBuildError(f"op '{self.op_conf.name}' has {len(blobs)} outputs, SoleOutputBlob needs one")
        return blobs[0]


class UserOpModule:
    """The op a :class:`UserOpModuleBuilder` builds again at each call (OneFlow's lazy user-op
    module): ``op_conf`` and ``InitOpKernel()``, which OneFlow used to make the module's
    kernel object once for eager runs; graphfront's kernels need no such object, so it does
    nothing."""

    def __init__(self, op_conf):
        self.op_conf = op_conf

    def InitOpKernel(self):  # noqa: N802
        return None


class UserOpModuleBuilder(UserOpConfBuilder):
    """A builder of one op type that a ``flow.deprecated.nn.Module`` reuses at every call:
    ``InputSize(arg, n)`` / ``Output(arg)`` declare the op once; each call sets
    ``OpName(name)`` and ``Input(arg, blobs)`` (replacing that argument's blobs) and
    ``Build()`` makes a :class:`UserOp` of a copy of the conf. ``Op()`` raises ValueError
    (the op type is the builder's)."""

    def __init__(self, op_type_name: str):
        super().__init__(op_type_name)
        self.user_conf.op_type_name = op_type_name
        self.user_op_module = UserOpModule(self.op_conf)

    def Op(self, op_type_name):  # noqa: N802
        raise ValueError(f"the user op module builder of {self.user_conf.op_type_name} cannot call "
                         f".Op({op_type_name!r}): its op type is fixed")

    def Input(self, input_name, input_blob_list):  # noqa: N802
        self.user_conf.input[input_name].ClearField("s")
        return super().Input(input_name, input_blob_list)

    def Build(self):  # noqa: N802
        self.CheckAndComplete()
        conf = op_conf_pb2.OperatorConf()
        conf.CopyFrom(self.op_conf)
        return UserOp(conf)


def user_op_builder(op_name: str) -> UserOpConfBuilder:
    """Start a fluent builder for a user op named (namespace prefix +) ``op_name``."""
    return UserOpConfBuilder(op_name)


def build_op(op_type, inputs=None, attrs=None, outputs=("out",), name=None, prefix="", num=None):
    """Build, add and return the output blobs of one user op (helper for API wrappers).

    ``inputs`` maps arg name to a blob or a list of blobs; ``outputs`` lists the output
    args to declare (one blob each unless ``num`` maps an arg to a count). Returns the
    single output blob when one is declared, else a tuple.
    """
    b = UserOpConfBuilder(name or unique_str(prefix or _default_prefix(op_type))).Op(op_type)
    for arg, value in (inputs or {}).items():
        if value is None:
            continue
        b.Input(arg, list(value) if isinstance(value, (list, tuple)) else [value])
    for arg in outputs:
        b.Output(arg, (num or {}).get(arg, 1))
    for k, v in (attrs or {}).items():
        b.Attr(k, v)
    blobs = b.Build().InferAndTryRun().RemoteBlobList()
    return blobs[0] if len(blobs) == 1 else blobs


def add_user_op(job_builder, name, op_type, inputs, attrs=None, outputs=("out",)) -> list:
    """Add one user op named ``name`` to ``job_builder`` (a JobBuilder, as passes hold)
    without the scope's name prefix; returns the lbns of ``outputs``, in order.

    ``inputs`` maps arg name to an lbn or a list of lbns. Raises JobBuildError from
    ``add_op`` when the op fails its checks.
    """
    builder = UserOpConfBuilder(name, prefix=False).Op(op_type)
    for arg, lbns in inputs.items():
        builder.Input(arg, lbns if isinstance(lbns, list) else [lbns])
    for arg in outputs:
        builder.Output(arg)
    for k, v in (attrs or {}).items():
        builder.Attr(k, v)
    added = job_builder.add_op(builder.CheckAndComplete().op_conf)
    return [added.user_conf.output[a].s[0] for a in outputs]


def _default_prefix(op_type: str) -> str:
    return "".join(p.capitalize() for p in op_type.split("_")) + "_"
