"""Names in a Job: which op, blob, variable, job and signature names are valid.

OneFlow addresses a blob by its lbn ``"<op_name>/<blob_name>"`` (the two fields of
``LogicalBlobId``, ``oneflow/core/register/logical_blob_id.proto`` at v0.6.0), so neither
part may contain ``/``; a variable's op name is also the name of its checkpoint directory,
so it must be a single path component. graphfront additionally refuses names with
non-printable characters (line breaks, NUL, other control characters): names appear in
messages, tables, generated plans' comments and file names, and a job file from
anywhere may hold any bytes.

The rules, checked by :func:`check_name` for every name that comes from a file or a user:

* non-empty and at most :data:`MAX_NAME_LENGTH` characters;
* every character printable (``str.isprintable``: no ``\\n``, ``\\r``, ``\\t``, NUL ...);
* op, variable, signature and blob names: no ``/``; an op or variable name is neither
  ``"."`` nor ``".."``.
"""
from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from graphfront.core.descriptor_compat import is_repeated
from graphfront.framework.errors import GraphfrontError
from graphfront.ops import registry

MAX_NAME_LENGTH = 1024
KINDS = ("op", "variable", "blob", "job", "signature", "signature input", "signature output")


class InvalidNameError(GraphfrontError, ValueError):
    """A name in a job, saved model or API call breaks the naming rules (module docstring)."""


def name_problem(name, kind="op") -> str | None:
    """Why ``name`` is not a valid ``kind`` name, or None when it is valid."""
    if not isinstance(name, str):
        return f"must be a str, received {type(name).__name__}"
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"has {len(name)} characters, more than {MAX_NAME_LENGTH}"
    bad = next((c for c in name if not c.isprintable()), None)
    if bad is not None:
        return f"contains the non-printable character {bad!r}"
    if kind != "job" and "/" in name:
        return "contains '/', which separates op and blob names in an lbn"
    if kind in ("op", "variable") and name in (".", ".."):
        return f"{name!r} cannot name a checkpoint directory"
    return None


def shown(name, quote=False) -> str:
    """``name`` as a message shows it: as is (in quotes with ``quote``) when every character
    is printable, else its ``repr``, so that a name read from a file never puts raw control
    characters (NUL, line breaks) into a message or a log."""
    if isinstance(name, str) and name.isprintable():
        return f"'{name}'" if quote else name
    return repr(name)


def check_name(name, kind="op", where="") -> str:
    """Return ``name`` if it is a valid ``kind`` name; raise :class:`InvalidNameError` otherwise.

    Args:
        name: the name to check.
        kind: one of :data:`KINDS` (what the name names, for the rules and the message).
        where: where the name was found (``"job file 'x.pb'"``), prefixed to the message.
    """
    problem = name_problem(name, kind)
    if problem is not None:
        prefix = f"{where}: " if where else ""
        raise InvalidNameError(f"{prefix}invalid {kind} name {name!r}: it {problem}")
    return name


def check_lbn(lbn, where="") -> str:
    """Check a logical blob name ``"<op_name>/<blob_name>"`` (both parts valid names)."""
    op_name, sep, blob_name = lbn.partition("/") if isinstance(lbn, str) else (lbn, "", "")
    if not sep:
        prefix = f"{where}: " if where else ""
        raise InvalidNameError(f"{prefix}invalid blob reference {lbn!r}: expected '<op_name>/<blob_name>'")
    check_name(op_name, "op", where)
    check_name(blob_name, "blob", where)
    return lbn


def check_strings(msg, where, path="") -> None:
    """Check that every string of a proto message read from a file (``msg`` and the
    messages under it, map keys included) is valid UTF-8 (raises :class:`InvalidNameError`
    naming the field). protobuf's binary parser accepts any bytes there: such a field reads
    back as ``bytes``, such a map key raises ``UnicodeDecodeError`` when first read."""
    for field, value in msg.ListFields():
        at = f"{path}.{field.name}" if path else field.name
        if _is_map(field):
            try:
                value = list(value.items())
            except UnicodeDecodeError:
                raise InvalidNameError(f"{where}: a key of {at} is not valid UTF-8") from None
            key_field, value_field = (field.message_type.fields_by_name[n] for n in ("key", "value"))
            entries = [(f"{at} key", key_field, key) for key, _ in value] + \
                      [(f"{at}[{key!r}]", value_field, v) for key, v in value]
        else:
            values = value if is_repeated(field) else [value]
            entries = [(f"{at}[{i}]" if is_repeated(field) else at, field, v) for i, v in enumerate(values)]
        for name, f, v in entries:
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                check_strings(v, where, name)
            elif f.type == FieldDescriptor.TYPE_STRING and isinstance(v, bytes):
                raise InvalidNameError(f"{where}: {name} is not valid UTF-8")


def _is_map(field) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def check_job_names(job, where) -> None:
    """Check every name of a Job proto read from a file: the job's, each op's, every lbn an
    op reads or writes, and the signature's (raises :class:`InvalidNameError`)."""
    check_name(job.job_conf.job_name, "job", where)
    check_op_names(job.net.op, where)
    if job.job_conf.HasField("signature"):
        check_signature_names(job.job_conf.signature, where)


def check_op_names(ops, where) -> None:
    """Check the names of ``ops`` (OperatorConfs): each op's, every lbn it reads or
    writes, its argument names and its control inputs (raises :class:`InvalidNameError`)."""
    for op in ops:
        check_name(op.name, "op", where)
        at = f"{where}, op {op.name!r}"
        kind = op.WhichOneof("op_type")
        if kind == "user_conf":
            for args in (op.user_conf.input, op.user_conf.output):
                for arg, lbns in args.items():
                    check_name(arg, "blob", at)
                    for lbn in lbns.s:
                        check_lbn(lbn, at)
        elif kind in registry.system_kinds():  # (an unsupported kind is reported when the op is added)
            conf, opdef = getattr(op, kind), registry.op_def(op)
            for a in opdef.inputs:
                value = getattr(conf, a.name)
                for lbn in [value] if isinstance(value, str) else value:
                    check_lbn(lbn, at)
            for a in opdef.outputs:
                check_name(getattr(conf, a.name), "blob", at)
        for name in op.ctrl_in_op_name:
            check_name(name, "op", at)


def check_signature_names(signature, where) -> None:
    """Check a ``JobSignatureDef``: its input/output names and the lbns they bind."""
    for kind, defs in (("signature input", signature.inputs), ("signature output", signature.outputs)):
        for name, d in defs.items():
            check_name(name, kind, where)
            check_name(d.lbi.op_name, "op", f"{where}, {kind} {name!r}")
            check_name(d.lbi.blob_name, "blob", f"{where}, {kind} {name!r}")
