"""``flow.experimental``: graphfront's experimental entry points.

* ``save_job(job, path, format="binary"|"text", completed=True)`` and
  ``load_job(path)``: a ``Job`` proto as a file, binary or protobuf text format with
  OneFlow's field names (:mod:`graphfront.framework.job_io`). A loaded job is served
  with ``flow.serving.InferenceSession().load_job(job)``.
"""
from graphfront.framework.job_io import JobFileError, load_job, save_job

__all__ = ["JobFileError", "load_job", "save_job"]
