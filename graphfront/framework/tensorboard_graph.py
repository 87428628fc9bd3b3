"""A Job as TensorBoard's graph: the ``GraphDef`` its Graphs tab draws, as TF1 users know it.

Each op of the Job becomes a ``NodeDef`` (TensorBoard's ``tensorboard/compat/proto/
node_def.proto``): ``name`` is ``<pass>/<op name>`` with ``<pass>`` one of ``forward``,
``backward``, ``optimizer`` (the op's calculation pass; interface ops and variables sit in
``forward``), so the Graphs tab folds each pass into one box; ``op`` is the op type
(``conv2d``, ``variable_conf`` ...); ``input`` lists the producing nodes, in argument
order; ``device`` is the op's device tag; attrs hold the op's user-op attrs as strings and
``_output_shapes``, the shapes of its outputs, which TensorBoard writes on the edges.

The graph goes into the event file as ``Event.graph_def`` through TensorBoard's own event
writer (``torch.utils.tensorboard``'s ``FileWriter``), as ``tf.summary.FileWriter.add_graph``
did. Needs the ``tensorboard`` package (extras ``examples``, ``summary``).
"""
from __future__ import annotations

import time

from graphfront.framework import job_builder as jb
from graphfront.framework.job_picture import calculation_pass


def _proto_modules():
    try:
        from tensorboard.compat.proto import (attr_value_pb2, event_pb2, graph_pb2, node_def_pb2,
                                              tensor_shape_pb2, versions_pb2)
    except ImportError as e:
        raise ImportError("writing a job to TensorBoard needs the tensorboard package: "
                          "pip install \"graphfront[examples]\"") from e
    return attr_value_pb2, event_pb2, graph_pb2, node_def_pb2, tensor_shape_pb2, versions_pb2


def node_name(op) -> str:
    """``<calculation pass>/<op name>``: where the op's node sits in TensorBoard's graph."""
    return f"{calculation_pass(op).removesuffix('_pass')}/{op.name}"


def job_graph_def(job):
    """The Job as TensorBoard's ``GraphDef`` (see the module docstring).

    Args:
        job: a ``Job`` proto, completed or as built.

    Returns:
        ``tensorboard.compat.proto.graph_pb2.GraphDef``.

    Raises:
        ImportError: the ``tensorboard`` package is not installed.
    """
    attr_value_pb2, _, graph_pb2, node_def_pb2, tensor_shape_pb2, versions_pb2 = _proto_modules()
    producer = {lbn: node_name(op) for op in job.net.op for _, _, lbn in jb.op_outputs(op)}
    descs = job.helper.lbn2logical_blob_desc
    graph = graph_pb2.GraphDef(versions=versions_pb2.VersionDef(producer=22))
    for op in job.net.op:
        node = node_def_pb2.NodeDef(name=node_name(op), op=jb.op_type_name(op), device=op.device_tag)
        node.input.extend(producer[lbn] for _, _, lbn in jb.op_inputs(op) if lbn in producer)
        if op.HasField("user_conf"):
            for attr_name, value in sorted(op.user_conf.attr.items()):
                which = value.WhichOneof("value")
                text = str(getattr(value, which)).replace("\n", " ").strip() if which else ""
                node.attr[attr_name].s = text.encode()
        shapes = [tuple(descs[lbn].shape.dim) for _, _, lbn in jb.op_outputs(op) if lbn in descs]
        if shapes:
            node.attr["_output_shapes"].list.shape.extend(
                tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in s])
                for s in shapes)
        graph.node.append(node)
    return graph


def jobs_graph_def(jobs):
    """Several Jobs as one ``GraphDef``: each job's nodes under its name,
    ``<job name>/<pass>/<op name>``, so the Graphs tab draws one box per job.

    Args:
        jobs: dict from job name to ``Job`` proto.
    """
    _, _, graph_pb2, _, _, versions_pb2 = _proto_modules()
    graph = graph_pb2.GraphDef(versions=versions_pb2.VersionDef(producer=22))
    for name, job in jobs.items():
        for node in job_graph_def(job).node:
            node.name = f"{name}/{node.name}"
            node.input[:] = [f"{name}/{i}" for i in node.input]
            graph.node.append(node)
    return graph


def write_job_graph(job, logdir) -> str:
    """Write ``job``'s ``GraphDef`` into a new event file under ``logdir``; returns its path.

    Raises:
        ImportError: the ``tensorboard`` package is not installed.
    """
    return _write_graph_def(job_graph_def(job), logdir)


def write_jobs_graph(jobs, logdir) -> str:
    """Write :func:`jobs_graph_def` of ``jobs`` into a new event file under ``logdir``;
    returns its path.

    Raises:
        ImportError: the ``tensorboard`` package is not installed.
    """
    return _write_graph_def(jobs_graph_def(jobs), logdir)


def _write_graph_def(graph, logdir) -> str:
    _, event_pb2, *_ = _proto_modules()
    from torch.utils.tensorboard.writer import FileWriter

    writer = FileWriter(str(logdir))
    try:
        writer.add_event(event_pb2.Event(wall_time=time.time(), graph_def=graph.SerializeToString()))
        writer.flush()
        return writer.event_writer._file_name
    finally:
        writer.close()
