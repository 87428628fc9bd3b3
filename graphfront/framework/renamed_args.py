"""Keyword arguments that OneFlow renamed between releases, accepted under both spellings.

OneFlow v0.5 called a blob's per-hierarchy-axis layout ``parallel_distribution`` (and the
gradient's ``grad_parallel_distribution``); v0.6.0 renamed them ``nd_sbp`` / ``grad_nd_sbp``
(``python/oneflow/compatible/single_client/ops/get_variable.py``,
``.../ops/array_ops.py`` ``hierarchical_parallel_cast``, ``.../ops/data_ops.py``
``megatron_gpt_mmap_data_loader``). A function decorated with :func:`renamed_keywords`
keeps its one v0.6.0 signature and takes the older keyword as that argument.
"""
from __future__ import annotations

import functools

from graphfront.framework.errors import ArgumentError

#: v0.5 keyword -> v0.6.0 keyword
PARALLEL_DISTRIBUTION = {"parallel_distribution": "nd_sbp", "grad_parallel_distribution": "grad_nd_sbp"}


def renamed_keywords(renames: dict[str, str]):
    """Decorator: a call passing an older keyword (a key of ``renames``) passes it as the
    current one (its value).

    Raises:
        ArgumentError: (a TypeError) a call passes both spellings of one argument.
    """
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ArgumentError(f"{fn.__name__}: argument {new!r} was passed twice, as {new!r} and "
                                            f"as its older spelling {old!r}; pass one of them")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        return call
    return wrap
