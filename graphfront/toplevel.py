"""Small ``flow.*`` functions of OneFlow's single-client API that are not ops.

Star-exported by ``graphfront/__init__.py`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/__init__.py``): the shape
type ``Size``, the eager-mode switches, logical-view and
session helpers, deprecated aliases of ``flow.scope`` functions, the job-local module
cache ``find_or_create_module`` and ``current_global_function_desc``.
"""
from __future__ import annotations

import warnings
import weakref

from graphfront import scope as _scope
from graphfront.framework import eager as _eager
from graphfront.framework import job_builder as jb
from graphfront.framework import session as _session
from graphfront.framework.blob_desc import BlobDesc, is_int
from graphfront.core import job_set_pb2, resource_pb2
from graphfront.framework.annotations import TypingCheck
from graphfront.framework.errors import ArgumentError, format_location, user_frame
from graphfront.parallel.placement import machine_count, machine_rank

__all__ = ["FunctionDesc", "Size", "cast_to_current_logical_view", "current_global_function_desc",
           "current_machine_id", "current_resource", "current_scope",
           "device_prior_placement", "eager_execution_enabled", "enable_eager_execution", "find_or_create_module",
           "fixed_placement", "inter_job_reuse_mem_strategy", "name_scope", "sync_default_session"]


class Size(tuple):
    """A blob shape (OneFlow's ``flow.Size``): a tuple of ints that compares equal to the
    plain tuple ``blob.shape`` and adds ``numel()``."""

    def __new__(cls, dims=()):
        dims = tuple(dims)
        if not all(is_int(d) for d in dims):
            raise TypeError(f"flow.Size expects ints, received {dims!r}")
        dims = tuple(int(d) for d in dims)
        return super().__new__(cls, dims)

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def index(self, value, start=0, end=None) -> int:
        """The first position of ``value`` in ``self[start:end]`` (OneFlow's ``Size.index``
        takes ``start`` / ``end`` as keywords too).

        Raises:
            ValueError: ``value`` is not in that range.
        """
        return tuple.index(self, value, start, len(self) if end is None else end)

    def __repr__(self):
        return f"flow.Size({list(self)})"


# ------------------------------------------------------------------ eager mode

def eager_execution_enabled() -> bool:
    """Whether job functions of the default session run eagerly (op by op when called)."""
    return _session.default_session().eager


def enable_eager_execution(val=True):
    """Turn eager execution on (``val=True``) or off for the default session.

    In eager execution (OneFlow's single-client eager mode) a ``global_function`` runs op
    by op each time it is called: every blob holds its value while the function runs
    (``blob.numpy()``, ``flow.watch`` handlers are called at once), variables are
    created on first use and keep their values across calls, and a train job computes
    its gradients and updates its variables at the end of each call. Calls take and
    return what a lazy call does. The mode outlives ``flow.clear_default_session()``, as
    OneFlow's environment-wide switch (v0.6.0
    ``python/oneflow/compatible/single_client/framework/env_util.py``) does.

    Raises:
        RuntimeError: the mode would change after a global function was defined in the
            default session (as OneFlow, the mode is chosen before any job is defined).
    """
    session = _session.default_session()
    val = bool(val)
    if val != session.eager and session.job_funcs:
        raise RuntimeError(f"flow.enable_eager_execution({val}) must be called before any global function is "
                           f"defined; the default session already has {sorted(session.job_funcs)}. Call "
                           f"flow.clear_default_session() first{format_location(user_frame())}")
    session.eager = val


def _blob_numpy(self, rank=None):
    """The blob's value as a numpy array (its shape and dtype), inside a job function
    running eagerly (``flow.enable_eager_execution(True)``).

    ``rank``: for a consistent blob ``None`` or ``0``, both of which give the logical blob,
    as OneFlow's eager ``numpy()`` boxes a consistent blob to device 0 whatever its
    placement (``python/oneflow/compatible/single_client/framework/remote_blob.py`` at
    v0.6.0); for a mirrored blob on several devices the index of a device, whose part it
    gives (``None``: the parts concatenated along axis 0).

    Raises:
        RuntimeError: in a lazy job, whose blobs hold no value while it is built.
        ValueError: ``rank`` is not one of the blob's devices.
    """
    return _eager.numpy_of(self, rank)


BlobDesc.numpy = _blob_numpy  # (OneFlow's eager blobs' method; the engine's BlobDesc imports no API)


# ------------------------------------------------------------------ logical view and scopes

def cast_to_current_logical_view(x):
    """Return ``x``: graphfront's blobs are consistent, and on one device the mirrored view
    holds the same values, so no ``identity`` conversion is needed."""
    if not isinstance(x, BlobDesc):
        raise TypeError(f"flow.cast_to_current_logical_view expects a blob, received {type(x).__name__} {x!r}")
    return x


def current_scope():
    """The scope ops are built under right now (``flow.scope.current_scope()``)."""
    return _scope.current_scope()


def _warn(old, new):
    warnings.warn(f"flow.{old} is deprecated, use flow.{new} instead", DeprecationWarning, stacklevel=3)


def name_scope(*args, **kwargs):
    """Deprecated alias of ``flow.scope.namespace`` (warns, then delegates)."""
    _warn("name_scope", "scope.namespace")
    return _scope.namespace(*args, **kwargs)


def fixed_placement(*args, **kwargs):
    """Deprecated alias of ``flow.scope.placement`` (warns, then delegates)."""
    _warn("fixed_placement", "scope.placement")
    return _scope.placement(*args, **kwargs)


def device_prior_placement(*args, **kwargs):
    """Deprecated alias of ``flow.scope.placement`` (warns, then delegates)."""
    _warn("device_prior_placement", "scope.placement")
    return _scope.placement(*args, **kwargs)


# ------------------------------------------------------------------ session helpers

def current_machine_id() -> int:
    """This process's machine among the machines of the run (0 to machine count - 1):
    ``GRAPHFRONT_MACHINE_RANK``, else ``RANK`` (``torchrun --nproc_per_node 1``) when the
    default session has several machines (``flow.config.machine_num``, else
    ``WORLD_SIZE``); 0 on one machine."""
    return machine_rank(_session.default_session())


def sync_default_session():
    """Wait until the launched jobs of the default session have finished. graphfront runs a
    job's plan before the call returns; on CUDA this also waits for queued kernels."""
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def current_resource() -> resource_pb2.Resource:
    """The default session's resources as OneFlow's ``Resource`` proto.

    ``machine_num`` (``flow.config.machine_num``, else ``WORLD_SIZE``, else 1),
    ``gpu_device_num`` and ``cpu_device_num`` (devices per machine, ``flow.config.*``), and
    the settings ``flow.config.*`` recorded: ``comm_net_worker_num``,
    ``compute_thread_pool_size``, ``max_mdsave_worker_num``, ``reserved_host_mem_mbyte``,
    ``reserved_device_mem_mbyte``, ``enable_debug_mode`` and
    ``flow.config.collective_boxing.*`` (in ``collective_boxing_conf``); a setting never
    made keeps the proto's default. A copy: changing it changes nothing.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/env_util.py``
    (``api_get_current_resource``; ``oneflow/core/job/resource.proto``). OneFlow asks
    for an initialized environment first; graphfront's is always ready.
    """
    session = _session.default_session()
    res = resource_pb2.Resource(machine_num=machine_count(session), gpu_device_num=session.gpu_device_num,
                                cpu_device_num=session.cpu_device_num)
    for name, value in session.resource.items():
        target, _, field = name.rpartition(".")
        msg = res.collective_boxing_conf if target == "collective_boxing" else res if not target else None
        if msg is not None and field in msg.DESCRIPTOR.fields_by_name:
            setattr(msg, field, value)
    return res


_STRATEGIES = ("reuse_mem_priority", "parallelism_priority", "custom_parallelism")


def inter_job_reuse_mem_strategy(strategy_str, job_set=None, **kwargs) -> None:
    """How the jobs of a session share memory: OneFlow's ``InterJobReuseMemStrategy``.

    ``"reuse_mem_priority"`` (jobs may reuse each other's memory and never run at once),
    ``"parallelism_priority"`` (jobs may run at once, each with its own memory) or
    ``"custom_parallelism"`` with ``job_name_groups=[["job_a", "job_b"], ...]`` (the jobs of
    a group never run at once). Recorded in ``job_set`` (a ``JobSet`` proto) or, by
    default, in the default session, where ``flow.experimental.get_job_set()`` returns it.
    graphfront runs one job of a session at a time, and PyTorch's caching allocator hands
    the memory one job frees to the next, so every strategy runs as
    ``"reuse_mem_priority"``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/job_set_util.py``.

    Raises:
        ArgumentError: ``strategy_str`` is not one of the three names, ``job_set`` is not a
            ``JobSet``, ``job_name_groups`` is missing for ``"custom_parallelism"`` or not
            a list of lists of job names, or another keyword is given.
    """
    fn = "flow.inter_job_reuse_mem_strategy"
    if strategy_str not in _STRATEGIES:
        raise ArgumentError(f"{fn}: strategy_str expects one of {', '.join(map(repr, _STRATEGIES))}, received "
                            f"{strategy_str!r}")
    if job_set is not None and not isinstance(job_set, job_set_pb2.JobSet):
        raise ArgumentError(f"{fn}: job_set expects a JobSet proto or None, received {type(job_set).__name__}")
    unknown = sorted(set(kwargs) - ({"job_name_groups"} if strategy_str == "custom_parallelism" else set()))
    if unknown:
        raise ArgumentError(f"{fn}: unexpected keyword argument(s) {unknown} for {strategy_str!r}")
    strategy = job_set_pb2.InterJobReuseMemStrategy()
    if strategy_str == "custom_parallelism":
        groups = kwargs.get("job_name_groups")
        if isinstance(groups, (str, bytes)) or not isinstance(groups, (list, tuple)) or not all(
                isinstance(g, (list, tuple)) and all(isinstance(n, str) for n in g) for g in groups):
            raise ArgumentError(f"{fn}: 'custom_parallelism' needs job_name_groups, a list of lists of job names, "
                                f"received {groups!r}")
        strategy.custom_parallelism.SetInParent()
        for g in groups:
            strategy.custom_parallelism.nonparallel_group.add(job_name=list(g))
    else:
        getattr(strategy, strategy_str).SetInParent()
    target = job_set.inter_job_reuse_mem_strategy if job_set is not None else \
        _session.default_session().inter_job_reuse_mem_strategy
    target.CopyFrom(strategy)


def get_job_set() -> job_set_pb2.JobSet:
    """The jobs the default session has compiled, as OneFlow's ``JobSet`` proto: each
    ``Job`` as it runs (after the passes), and the ``inter_job_reuse_mem_strategy`` set.
    Empty before the first call of a job compiles them. A copy.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/c_api_util.py``
    (``GetJobSet``; ``oneflow/core/job/job_set.proto``).
    """
    session = _session.default_session()
    job_set = job_set_pb2.JobSet(job=[compiled.job for compiled in session.jobs.values()])
    if session.inter_job_reuse_mem_strategy.WhichOneof("strategy_case"):
        job_set.inter_job_reuse_mem_strategy.CopyFrom(session.inter_job_reuse_mem_strategy)
    return job_set


def enable_typing_check(val=True) -> None:
    """Require annotations (``val=True``) on every parameter and the return of each global
    function defined afterwards, and on the parameter of each ``flow.watch`` handler; an
    unannotated one is an ``ArgumentError`` (a ``JobBuildError`` for a watch handler) when
    it is defined. A process-wide switch, as OneFlow's ``typing_check_enabled``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/experimental/typing_check.py``.

    Raises:
        RuntimeError: a global function is already defined in the default session (OneFlow
            allows the switch only before the first one).
    """
    session = _session.default_session()
    if session.job_funcs:
        raise RuntimeError(f"flow.experimental.enable_typing_check must be called before any global function is "
                           f"defined; the default session already has {sorted(session.job_funcs)}"
                           f"{format_location(user_frame())}")
    TypingCheck.enabled = bool(val)


class FunctionDesc:
    """What ``flow.current_global_function_desc()`` returns: the job being built.

    ``job_config_proto`` is the job's ``JobConfigProto``; ``IsTrainable()`` says whether it
    is a ``type="train"`` job.
    """

    def __init__(self, builder):
        self._builder = builder

    @property
    def job_config_proto(self):
        return self._builder.job.job_conf

    def IsTrainable(self) -> bool:  # noqa: N802 - OneFlow's name
        return self._builder.is_train

    def __repr__(self):
        return f"FunctionDesc(job={self._builder.job_name!r}, trainable={self.IsTrainable()})"


def _building(fn):
    if not jb.is_building():
        raise RuntimeError(f"flow.{fn} must be called inside a global_function job body")
    return jb.current()


def current_global_function_desc() -> FunctionDesc:
    """The :class:`FunctionDesc` of the job being built (RuntimeError outside a job body)."""
    return FunctionDesc(_building("current_global_function_desc"))


_modules_built = weakref.WeakKeyDictionary()  # JobBuilder -> module names fetched during this build


def find_or_create_module(module_name, create, reuse=False):
    """The object cached under ``module_name`` for the job being built, created by
    ``create()`` on first use. The cache belongs to the default session and the job, so a
    job compiled again (after ``clear_default_session``) creates it again. Fetching the
    same name twice while one job is built raises ValueError unless ``reuse=True``.
    """
    if not callable(create):
        raise TypeError(f"flow.find_or_create_module: create must be callable, received {create!r}")
    builder = _building("find_or_create_module")
    session = _session.default_session()
    if not hasattr(session, "_job_modules"):
        session._job_modules = {}
    modules = session._job_modules.setdefault(builder.job_name, {})
    used = _modules_built.setdefault(builder, set())
    if module_name in used and not reuse:
        raise ValueError(f"flow.find_or_create_module: module {module_name!r} is already used in job "
                         f"'{builder.job_name}'; pass reuse=True to share it")
    if module_name not in modules:
        modules[module_name] = create()
    used.add(module_name)
    return modules[module_name]
