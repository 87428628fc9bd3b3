"""``flow.onnx.export``: a predict job or a saved model as an ONNX model file.

The job is completed without the cleanup and fusion passes (so the file holds the ops
the user wrote, as Netron shows them) and converted by the exporter's engine,
:mod:`graphfront.runtime.onnx_export`: placeholders become the graph's inputs (named
after the job function's parameters, or the saved model's signature inputs), variables
become initializers holding the session's current values (or the saved model's
checkpoint), each return op becomes a graph output of the same name (a saved model's
signature output names; ``Return_<n>`` for a job function, in the order of its returned
blobs), and every other op is converted by the ``onnx`` rule beside its kernel in the op
registry. The model is checked with ``onnx.checker`` before it is written.

Needs the optional dependency ``onnx`` (``pip install graphfront[onnx]``). OneFlow's own
exporter is the separate ``oneflow_onnx`` package (``oneflow_onnx/oneflow2onnx/``), which
maps OneFlow op types to ONNX operators the same way: one handler per op type.
"""
from __future__ import annotations

import os

from graphfront.framework.blob_desc import expect_path
from graphfront.framework.errors import ArgumentError
from graphfront.framework.session import GlobalFunction
from graphfront.runtime.onnx_export import (DEFAULT_OPSET, MIN_OPSET, OnnxCtx, OnnxExportError,  # noqa: F401
                                            convertible_op_types, export_job, job_to_onnx, missing_converters)

__all__ = ["export", "export_job", "job_to_onnx", "convertible_op_types", "OnnxExportError", "DEFAULT_OPSET"]


def export(job_func_or_saved_model, path, opset=DEFAULT_OPSET, model_version=None):
    """Write a predict job, or a saved model, as an ONNX model file.

    Args:
        job_func_or_saved_model: a ``@flow.global_function(type="predict")`` job of the
            default session (its variables' current values are written), or the
            ``save_path`` of ``flow.saved_model.ModelBuilder`` (its default graph and
            signature; inputs and outputs are named after the signature).
        path: the ``.onnx`` file to write (its directory must exist).
        opset: ONNX opset of the default domain, ``>= 13`` (default 17).
        model_version: for a saved model, the version to read (default: the latest).
    Returns:
        The written ``onnx.ModelProto``.
    Raises:
        OnnxExportError: see :func:`job_to_onnx`; ArgumentError (a TypeError) for another kind
        of source or path; the saved model's loading errors (FileNotFoundError, ValueError,
        CheckpointError).
    """
    import onnx
    path = expect_path(path, "flow.onnx.export", "path")
    if isinstance(job_func_or_saved_model, GlobalFunction):
        compiled = job_func_or_saved_model.compiled_job
        store = compiled.session.variables
        # graph inputs named after the job function's parameters
        input_names = dict(zip(compiled.plan.input_names, (ph.param_name for ph in compiled.placeholders)))
    elif isinstance(job_func_or_saved_model, (str, os.PathLike)):
        from graphfront.serving import InferenceSession, ModelVersionPolicy, SessionOption
        option = SessionOption()
        option.device_tag = "cpu"
        sess = InferenceSession(option)
        sess.load_saved_model(job_func_or_saved_model,
                              ModelVersionPolicy.LATEST if model_version is None else model_version)
        sess.launch()
        compiled, store = sess.job(), sess.session.variables
        input_names = None
    else:
        raise ArgumentError(f"flow.onnx.export: expects a predict job function (@flow.global_function) or a saved "
                            f"model directory, received {type(job_func_or_saved_model).__name__}")
    job = export_job(compiled.user_job)
    values = {name: t.detach().cpu().numpy() for name, t in store.tensors.items()}
    model = job_to_onnx(job, values, opset, input_names)
    onnx.save(model, path)
    return model
