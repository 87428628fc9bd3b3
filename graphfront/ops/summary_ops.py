"""TensorBoard summary ops (OneFlow v0.6.0 ``oneflow/user/ops/summary_ops.cpp``,
``oneflow/user/summary/``): write event files that TensorBoard reads.

The process has one summary writer, as OneFlow's ``EventsWriter`` singleton:
``create_summary_writer`` opens it on ``logdir`` (``torch.utils.tensorboard``'s
``SummaryWriter`` over TensorBoard's own event writer, which writes
``events.out.tfevents.*`` files; needs the ``tensorboard`` package), the ``summary_write_*`` ops append to it
and ``flush_summary_writer`` flushes it to disk. ``step`` is an int64 blob (its first
element), ``tag`` an int8 blob holding the tag's UTF-8 bytes (OneFlow's convention:
``np.frombuffer(b"loss", np.int8)``). All are CPU-only, have no outputs and no gradient.
"""
from __future__ import annotations

import threading

import numpy as np

from graphfront.framework import dtypes as _dt
from graphfront.ops.registry import op

_LOCK = threading.Lock()
_STATE = {"writer": None, "logdir": None}


def current_writer(op_name):
    """The open summary writer; RuntimeError naming ``op_name`` if none was created."""
    writer = _STATE["writer"]
    if writer is None:
        raise RuntimeError(f"op '{op_name}': no summary writer; run a job calling "
                           "flow.summary.create_summary_writer(logdir) first")
    return writer


def close_writer():
    """Flush and close the summary writer (if any)."""
    with _LOCK:
        if _STATE["writer"] is not None:
            _STATE["writer"].close()
        _STATE["writer"] = _STATE["logdir"] = None


def _create_kernel(k):
    logdir = k.attr("logdir")

    def create():
        from torch.utils.tensorboard import SummaryWriter
        with _LOCK:
            if _STATE["logdir"] != logdir:
                if _STATE["writer"] is not None:
                    _STATE["writer"].close()
                _STATE["writer"], _STATE["logdir"] = SummaryWriter(logdir), logdir
    return create


def _no_outputs(ctx):
    pass


op("create_summary_writer", attrs={"logdir": "string"}, infer=lambda ctx: ctx.check(
    ctx.attr("logdir") != "", "attr 'logdir' must name a directory"), kernel=_create_kernel, no_grad=True, random=True, host_reads=True)
op("flush_summary_writer", infer=_no_outputs,
   kernel=lambda k: (lambda: current_writer(k.op_name).flush()), no_grad=True, random=True, host_reads=True)


def _tag_and_step_infer(ctx, tagged=True):
    step = ctx.input("step")
    ctx.check(step.dtype is _dt.int64, f"input 'step' must be int64, received {step.dtype.name}")
    if tagged:
        tag = ctx.input("tag")
        ctx.check(tag.dtype is _dt.int8 and len(tag.shape) == 1,
                  f"input 'tag' must be a 1-D int8 blob of the tag's bytes, received {tag.dtype.name} {tuple(tag.shape)}")


def _step(step):
    return int(step.reshape(-1)[0])


def _tag(tag):
    return tag.numpy().astype(np.uint8).tobytes().decode("utf-8")


def _scalar_infer(ctx):
    _tag_and_step_infer(ctx)
    value = ctx.input("in")
    ctx.check(value.dtype.is_floating_point or value.dtype.is_integer,
              f"input 'in' must be numeric, received {value.dtype.name}")


def _scalar_kernel(k):
    def write(value, step, tag):
        current_writer(k.op_name).add_scalar(_tag(tag), float(value.reshape(-1)[0]), _step(step))
    return write


op("summary_write_scalar", inputs=["in", "step", "tag"], infer=_scalar_infer, kernel=_scalar_kernel,
   no_grad=True, random=True, host_reads=True)


def _histogram_kernel(k):
    def write(value, step, tag):
        current_writer(k.op_name).add_histogram(_tag(tag), value.detach().cpu().double().numpy(), _step(step))
    return write


op("summary_write_histogram", inputs=["in", "step", "tag"], infer=_scalar_infer, kernel=_histogram_kernel,
   no_grad=True, random=True, host_reads=True)


def _image_infer(ctx):
    _tag_and_step_infer(ctx)
    value = ctx.input("in")
    ctx.check(value.dtype is _dt.uint8 and len(value.shape) == 4 and value.shape[3] in (1, 3, 4),
              f"input 'in' must be a (N, H, W, C) uint8 blob with C in (1, 3, 4), received {value.dtype.name} "
              f"{tuple(value.shape)}")


def _image_kernel(k):
    """Image ``i`` of the batch becomes the PNG summary ``<tag>/image/<i>`` (TensorFlow's naming)."""
    def write(value, step, tag):
        writer, tag, step = current_writer(k.op_name), _tag(tag), _step(step)
        for i, im in enumerate(value.cpu().numpy()):
            writer.add_image(f"{tag}/image/{i}", im, step, dataformats="HWC")
    return write


op("summary_write_image", inputs=["in", "step", "tag"], infer=_image_infer, kernel=_image_kernel,
   no_grad=True, random=True, host_reads=True)


def _pb_infer(ctx):
    _tag_and_step_infer(ctx, tagged=False)
    value = ctx.input("in")
    ctx.check(value.dtype is _dt.int8 and len(value.shape) == 1,
              f"input 'in' must be a 1-D int8 blob of a Summary proto (text format or serialized), "
              f"received {value.dtype.name} "
              f"{tuple(value.shape)}")


def _parse_summary(data: bytes, op_name):
    """The ``Summary`` proto in ``data``: its text format (OneFlow's ``write_pb`` parses
    ``str(summary)``, ``TxtString2PbMessage``) or, failing that, its binary serialization."""
    from google.protobuf import text_format
    from tensorboard.compat.proto.summary_pb2 import Summary
    try:
        return text_format.Parse(data.decode("utf-8"), Summary())
    except (UnicodeDecodeError, text_format.ParseError) as text_error:
        try:
            return Summary.FromString(data)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
            raise ValueError(f"op '{op_name}': input 'in' is neither a Summary proto's text format "
                             f"({text_error}) nor its binary serialization") from None


def _pb_kernel(k):
    def write(value, step):
        summary = _parse_summary(value.numpy().astype(np.uint8).tobytes(), k.op_name)
        current_writer(k.op_name)._get_file_writer().add_summary(summary, _step(step))
    return write


op("summary_write_pb", inputs=["in", "step"], infer=_pb_infer, kernel=_pb_kernel, no_grad=True, random=True, host_reads=True)
