"""Small graph-rewriting toolkit shared by the cleanup, folding and fusion passes.

:class:`Net` is a read/write view of one ``Job``: who produces each lbn, who reads it,
and the edits passes need — add a user op (through CurJobAddOp, so the new op is
checked and its outputs inferred), point the readers of one lbn at another, and remove
ops. Every edit goes straight into the proto; nothing is cached beside it except the
producer/consumer index, which the edits keep up to date.

Lbns that the job refers to outside ``net.op`` (losses, the train step, the
variable/gradient relation, diff watchers) are *protected*: passes never remove their
producers. :meth:`Net.redirect` rewrites the variable/gradient relation together with
the readers so that it never names a removed blob.
"""
from __future__ import annotations

from graphfront.framework import job_builder as jb
from graphfront.ops import registry
from graphfront.ops.builder import UserOpConfBuilder
from graphfront.runtime import walk


class Net:
    """Producer/consumer index over ``job`` plus the edits passes make (see module doc)."""

    def __init__(self, job):
        self.job = job
        self._b = None
        self.ops = {}
        self.producer = {}        # lbn -> op name
        self.consumers = {}       # lbn -> [(op name, arg, index)]
        for op in job.net.op:
            self.ops[op.name] = op
            self._index(op)
        tc = job.job_conf.train_conf
        self.protected = set(tc.loss_lbn) | ({tc.train_step_lbn} if tc.train_step_lbn else set())
        for rel in job.helper.tag2lbi_relations.values():
            for p in rel.pair:
                self.protected.add(f"{p.first.op_name}/{p.first.blob_name}")
        for info in job.helper.lbi_diff_watcher_info.job_name2lbi_and_watcher_uuids.values():
            for p in info.lbi_and_uuid_pair:
                self.protected.add(f"{p.lbi.op_name}/{p.lbi.blob_name}")
        self._removed = set()
        self._anchor = {}  # added op name -> the op it sits after in job.net.op
        self._descs = {}
        self._placements = None

    @property
    def b(self):
        """A JobBuilder over the job (created on first use: passes that only rewire
        inputs and attrs never pay for it)."""
        if self._b is None:
            self._b = jb.JobBuilder(self.job)
        return self._b

    # ------------------------------------------------------------ index
    def _index(self, op):
        for _, _, lbn in jb.op_outputs(op):
            self.producer[lbn] = op.name
        for arg, i, lbn in jb.op_inputs(op):
            self.consumers.setdefault(lbn, []).append((op.name, arg, i))

    def op(self, name):
        return self.ops.get(name)

    def producer_op(self, lbn):
        name = self.producer.get(lbn)
        return self.ops.get(name) if name is not None and name not in self._removed else None

    def readers(self, lbn):
        """``[(op_conf, arg, index)]`` of the live ops reading ``lbn``."""
        return [(self.ops[n], a, i) for n, a, i in self.consumers.get(lbn, ()) if n not in self._removed]

    def sole_reader(self, lbn):
        """The op conf reading ``lbn`` when exactly one live op reads it (once) and the
        blob is not protected; else None."""
        rs = self.readers(lbn)
        if len(rs) != 1 or lbn in self.protected:
            return None
        return rs[0][0]

    def placement(self, op_conf):
        """``(device tag, device names)`` of an op: its placement group in the job as this Net
        first read it (None for the names of an op added since). Ops may be merged or fused
        only where these are equal."""
        if self._placements is None:
            self._placements = walk.placements_of(self.job)
        return op_conf.device_tag, self._placements.get(op_conf.name)

    def desc(self, lbn):
        d = self._descs.get(lbn)
        if d is None:
            d = self._descs[lbn] = jb.TensorDesc.from_proto(self.job.helper.lbn2logical_blob_desc[lbn])
        return d

    # ------------------------------------------------------------ edits
    def add_user_op(self, name, op_type, inputs, attrs=None, outputs=("out",), like_op=None):
        """Add a user op placed like ``like_op``; returns the added conf.

        ``inputs`` maps arg -> lbn or list of lbns; ``outputs`` lists the output args
        (one blob each) or maps arg -> count.
        """
        b = self.b
        base, k = name, 0
        while name in self.ops:
            k += 1
            name = f"{base}_{k}"
        builder = UserOpConfBuilder(name, prefix=False).Op(op_type)
        for arg, lbns in inputs.items():
            if lbns is None:
                continue
            builder.Input(arg, lbns if isinstance(lbns, list) else [lbns])
        counts = outputs if isinstance(outputs, dict) else {a: 1 for a in outputs}
        for arg, n in counts.items():
            builder.Output(arg, n)
        opdef = registry.lookup(op_type)
        for key, v in (attrs or {}).items():
            adef = opdef.attrs[key]
            builder.user_conf.attr[key].CopyFrom(
                registry.to_attr_value(adef.type, registry.normalize_attr(op_type, key, adef.type, v)))
        builder.CheckAndComplete()
        where = (f"<graphfront pass, replacing {like_op}>", 0, op_type, "")
        ref = self.ops[like_op] if like_op else None
        if ref is not None:
            builder.op_conf.device_tag = ref.device_tag
            builder.op_conf.scope_symbol_id = ref.scope_symbol_id
            with b.scope_of_op(like_op):
                added = b.add_op(builder.op_conf, location=where)
        else:
            added = b.add_op(builder.op_conf, location=where)
        self.ops[added.name] = added
        self._index(added)
        if like_op:
            self._anchor[added.name] = self._anchor.get(like_op, like_op)
        return added

    def set_input(self, op_conf, arg, index, lbn):
        """Point input ``arg[index]`` of ``op_conf`` at ``lbn``."""
        old = set_op_input(op_conf, arg, index, lbn)
        if old is not None and old in self.consumers:
            self.consumers[old] = [c for c in self.consumers[old] if c != (op_conf.name, arg, index)]
        self.consumers.setdefault(lbn, []).append((op_conf.name, arg, index))

    def add_input(self, op_conf, arg, lbn):
        """Give user op ``op_conf`` the (absent, optional) input ``arg`` = ``lbn``."""
        uc = op_conf.user_conf
        uc.input[arg].s.append(lbn)
        uc.input_order.append(arg)
        self.consumers.setdefault(lbn, []).append((op_conf.name, arg, 0))

    def redirect(self, old, new):
        """Make every reader of ``old`` read ``new`` instead (and the variable/grad relation)."""
        for op_conf, arg, i in self.readers(old):
            self.set_input(op_conf, arg, i, new)
        self.redirect_relations(old, new)

    def redirect_relations(self, old, new):
        """Make the variable/grad relations that name ``old`` name ``new``."""
        for rel in self.job.helper.tag2lbi_relations.values():
            for p in rel.pair:
                if f"{p.second.op_name}/{p.second.blob_name}" == old:
                    p.second.op_name, p.second.blob_name = new.split("/", 1)
        if old in self.protected:
            self.protected.add(new)

    def drop_unread_output(self, op_conf, arg) -> bool:
        """Remove optional output ``arg`` of user op ``op_conf`` (and its BlobDescs) when no
        live op reads it and the job does not name it; returns whether it was removed."""
        uc = op_conf.user_conf
        lbns = list(uc.output[arg].s) if arg in uc.output else []
        if not lbns or any(self.readers(lbn) or lbn in self.protected for lbn in lbns):
            return False
        del uc.output[arg]
        order = [a for a in uc.output_order if a != arg]
        del uc.output_order[:]
        uc.output_order.extend(order)
        for lbn in lbns:
            self.producer.pop(lbn, None)
            self.job.helper.lbn2logical_blob_desc.pop(lbn, None)
        return True

    def remove(self, *names):
        """Mark ops removed (their outputs must have no live readers left); :meth:`finish`
        drops them from the proto in one sweep."""
        self._removed.update(names)

    def is_removed(self, name) -> bool:
        return name in self._removed

    def finish(self):
        """Drop the removed ops (with their BlobDescs and placements), move each added op
        next to the op it was placed like (the plan breaks scheduling ties by job
        order, so a fused op runs where the ops it replaces ran), return the job."""
        job = self.job
        if not self._removed and not self._anchor:
            return job
        pos = {}
        for i, op in enumerate(job.net.op):
            pos[op.name] = float(i)
        for k, (name, anchor) in enumerate(self._anchor.items()):
            pos[name] = pos[anchor] + 0.5 + k * 1e-6
        for name in self._removed:
            pos[name] = float("inf")
            for _, _, lbn in jb.op_outputs(self.ops[name]):
                if lbn in job.helper.lbn2logical_blob_desc:
                    del job.helper.lbn2logical_blob_desc[lbn]
        job.net.op.sort(key=lambda op: pos[op.name])
        if self._removed:
            del job.net.op[len(job.net.op) - len(self._removed):]
            for group in job.placement.placement_group:
                names = group.op_set.op_name
                if any(n in self._removed for n in names):
                    kept = [n for n in names if n not in self._removed]
                    del names[:]
                    names.extend(kept)
        self._removed, self._anchor, self._b = set(), {}, None
        self.ops = {op.name: op for op in job.net.op}
        return job

    def attrs(self, op_conf) -> dict:
        return jb.user_attrs(op_conf)

    def set_attr(self, op_conf, name, value):
        opdef = registry.lookup(op_conf.user_conf.op_type_name)
        adef = opdef.attrs[name]
        op_conf.user_conf.attr[name].CopyFrom(
            registry.to_attr_value(adef.type, registry.normalize_attr(opdef.op_type, name, adef.type, value)))


def set_op_input(op_conf, arg, index, lbn):
    """Point input ``arg[index]`` of ``op_conf`` (user or system op) at ``lbn``; returns the old lbn."""
    kind = jb.op_kind(op_conf)
    if kind == "user_conf":
        lst = op_conf.user_conf.input[arg].s
        old, lst[index] = lst[index], lbn
        return old
    conf = getattr(op_conf, kind)
    value = getattr(conf, arg)
    if isinstance(value, str):
        setattr(conf, arg, lbn)
        return value
    old, value[index] = value[index], lbn
    return old


#: the device tags of GPU placements (a job on a machine without CUDA is placed on the CPU)
GPU_TAGS = ("gpu", "cuda")


def on_gpu(op_conf) -> bool:
    """Whether ``op_conf`` is placed on a GPU (its device tag is one of :data:`GPU_TAGS`):
    where the GPU-only fusions apply."""
    return op_conf.device_tag in GPU_TAGS


def has_op_types(job, types) -> bool:
    """Whether any user op of ``job`` has one of ``types`` (cheap pre-check of a pass)."""
    types = set(types)
    return any(op.user_conf.op_type_name in types for op in job.net.op if op.HasField("user_conf"))


def user_type(op_conf):
    """The user op type of ``op_conf`` or None for a system op."""
    return op_conf.user_conf.op_type_name if op_conf is not None and jb.op_kind(op_conf) == "user_conf" else None


def single_input(op_conf, arg):
    """The lbn of single input ``arg`` (None when absent)."""
    uc = op_conf.user_conf
    return uc.input[arg].s[0] if arg in uc.input and len(uc.input[arg].s) == 1 else None


def single_output(op_conf, arg):
    uc = op_conf.user_conf
    return uc.output[arg].s[0] if arg in uc.output and len(uc.output[arg].s) == 1 else None


def is_system_kind(op_conf, kind) -> bool:
    return jb.op_kind(op_conf) == kind


def fuse_matches(job, op_type, match, fused_type, outputs, suffix):
    """Replace each match of a pattern by one fused op; returns the job.

    For every op of user type ``op_type`` (in job order, skipping ops an earlier match took),
    ``match(net, op)`` returns None or ``(inputs, attrs, ops, out)``: the fused op's inputs and
    attrs, the ops it replaces (the last one makes ``out``) and the lbn the fused op's first
    output (of ``outputs``) takes the place of. The fused op is named after the last replaced
    op plus ``suffix`` and placed like it.
    """
    net = Net(job)
    changed = False
    for op in list(job.net.op):
        if user_type(op) != op_type or net.is_removed(op.name):
            continue
        found = match(net, op)
        if found is None:
            continue
        inputs, attrs, ops, out = found
        fused = net.add_user_op(f"{ops[-1].name}{suffix}", fused_type, inputs, attrs, outputs=outputs,
                                like_op=ops[-1].name)
        net.redirect(out, fused.user_conf.output[outputs[0]].s[0])
        net.remove(*(o.name for o in ops))
        changed = True
    return net.finish() if changed else job


__all__ = ["Net", "set_op_input", "has_op_types", "user_type", "single_input", "single_output", "is_system_kind",
           "GPU_TAGS", "on_gpu", "fuse_matches"]

