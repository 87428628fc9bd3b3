"""flow.model: the high-level ``Model`` API, built on global functions.

A user subclasses :class:`Model` and writes ``forward`` (the network),
``training_step(batch, optimizer_idx)`` (returns the loss, or a tuple whose first
element is the loss), ``validation_step(batch)`` and ``configure_optimizers()``
(a ``flow.optimizer`` optimizer or a list of them). :meth:`Model.fit` then

* clears the default session,
* builds one ``type="train"`` job per optimizer from ``training_step`` (the optimizer's
  ``minimize`` is applied to the loss) and one ``type="predict"`` job from
  ``validation_step``,
* loads the variables from the checkpoint that :class:`CheckpointConfig` names, if any,
* runs ``max_steps`` steps: each step runs every train job, then the validation job
  every ``step_interval`` steps, then saves a checkpoint every ``step_interval`` steps,
  and passes each job's outputs to the :class:`Callback` objects.

The batches come from a :class:`DataModule`: a :class:`NumpyDataModule` returns a tuple
of numpy arrays per step, fed to the jobs' placeholders (whose shapes and dtypes are
taken from the batch of step 0); any other ``DataModule`` builds the batch inside the
job from data ops (an OFRecord reader, say).

Semantics as OneFlow v0.6.0
``python/oneflow/compatible/single_client/framework/model.py`` (the function style:
graphfront runs every model as lazily compiled jobs, whatever
``is_deprecated_function_style`` says).
"""
from __future__ import annotations

import inspect
import logging
import warnings
from typing import Any, List, Optional, Union

import numpy as np

from graphfront import checkpoint as _checkpoint
from graphfront import optimizer as _optimizer
from graphfront import typing as _tp
from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import is_int
from graphfront.framework.session import FunctionConfig, clear_default_session, global_function

__all__ = ["Callback", "CheckpointConfig", "DataModule", "Model", "NumpyDataModule", "TrainingConfig",
           "ValidationConfig"]

ExecutionConfig = FunctionConfig


class DataModule:
    """Source of the batches of a :class:`Model`'s jobs.

    Subclass it and override ``forward(step_idx, optimizer_idx)``; calling the module
    calls ``forward``. A plain ``DataModule`` is called inside the job being built (with
    step 0) and returns blobs, e.g. from ``flow.data`` readers; the job reads a new batch
    each time it runs.
    """

    def __init__(self, *args, **kwargs):
        pass

    def forward(self, step_idx: int = 0, optimizer_idx: int = 0):
        """The batch for ``step_idx`` and the optimizer ``optimizer_idx`` (default: None)."""
        return None

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def infer_oneflow_data_placeholder(self, batch: Any = None, optimizer_idx: int = 0):
        """The placeholders of a job fed with ``batch`` (a plain module feeds none: None)."""
        return None


class NumpyDataModule(DataModule):
    """A :class:`DataModule` whose ``forward(step_idx, optimizer_idx)`` returns a tuple of
    numpy arrays, fed to the jobs at every step."""

    def infer_oneflow_data_placeholder(self, batch: tuple = None, optimizer_idx: int = 0) -> list:
        """One ``tp.Numpy.Placeholder`` per array of ``batch``, of its shape and dtype.

        Args:
            batch: a tuple of numpy arrays.
            optimizer_idx: the optimizer the batch is for (unused here).

        Returns:
            list of ``tp.Numpy.Placeholder``.

        Raises:
            TypeError: ``batch`` is not a tuple of numpy arrays.
            ValueError: an array's dtype has no graphfront dtype.
        """
        if not isinstance(batch, tuple):
            raise TypeError(f"model.NumpyDataModule: {type(self).__name__}.forward must return a tuple of numpy "
                            f"arrays, received {type(batch).__name__}")
        for i, item in enumerate(batch):
            if not isinstance(item, np.ndarray):
                raise TypeError(f"model.NumpyDataModule: {type(self).__name__}.forward must return a tuple of numpy "
                                f"arrays, element {i} is {type(item).__name__}")
        return [_tp.Numpy.Placeholder(item.shape, dtype=_dt.from_numpy(item.dtype)) for item in batch]


class _Config:
    """Shared parts of the training and validation configs."""

    def __init__(self):
        self.exe_cfg = FunctionConfig()
        self.data = None
        self.error_msg = ""

    def config_execution(self, exe_cfg: FunctionConfig = None):
        """Set the ``flow.FunctionConfig`` (``flow.ExecutionConfig``) of the jobs."""
        self.exe_cfg = exe_cfg

    def config_data(self, data: DataModule = None):
        """Set the :class:`DataModule` that gives the batches."""
        self.data = data

    def _problems(self) -> list:
        problems = []
        if not isinstance(self.exe_cfg, FunctionConfig):
            problems.append(f"exe_cfg is not a flow.FunctionConfig (received {type(self.exe_cfg).__name__})")
        if not isinstance(self.data, DataModule):
            problems.append("data is None" if self.data is None else
                            f"data is not a model.DataModule (received {type(self.data).__name__})")
        return problems

    def check_valid(self) -> bool:
        """Whether the config can be used; ``error_msg`` says what is wrong otherwise."""
        problems = self._problems()
        self.error_msg = "".join(f"model.{type(self).__name__} {p};" for p in problems)
        return not problems


class TrainingConfig(_Config):
    """How :meth:`Model.fit` trains: the job config (``config_execution``) and the data
    (``config_data``)."""


class ValidationConfig(_Config):
    """How :meth:`Model.fit` validates: the job config, the data and how often
    (``config_step_interval``, default every 10 steps)."""

    def __init__(self):
        super().__init__()
        self.step_interval = 10

    def config_step_interval(self, step_interval: int = 1):
        """Run validation after every ``step_interval``-th training step (a positive int)."""
        self.step_interval = step_interval

    def _problems(self) -> list:
        problems = super()._problems()
        if not is_int(self.step_interval) or self.step_interval <= 0:
            problems.append(f"step_interval must be a positive int, received {self.step_interval!r}")
        return problems


class CheckpointConfig:
    """Where :meth:`Model.fit` loads the variables from before training, and where and how
    often it saves them (to ``<dirpath>-<step_idx>``)."""

    def __init__(self):
        self.need_load = False
        self.load_dirpath = None
        self.need_save = False
        self.save_dirpath = None
        self.save_step_interval = 1
        self.error_msg = ""

    def config_load(self, dirpath: str = None):
        """Load the variables from the checkpoint directory ``dirpath`` before the first step.

        Raises:
            ValueError: ``dirpath`` is None.
        """
        if dirpath is None:
            raise ValueError("model.CheckpointConfig.config_load: dirpath must be a directory, received None")
        self.need_load = True
        self.load_dirpath = dirpath

    def config_save(self, dirpath: str = None, step_interval: int = 1):
        """Save the variables to ``<dirpath>-<step_idx>`` after every ``step_interval``-th step.

        Raises:
            ValueError: ``dirpath`` is None or ``step_interval`` is not a positive int.
        """
        if dirpath is None:
            raise ValueError("model.CheckpointConfig.config_save: dirpath must be a directory, received None")
        if not is_int(step_interval) or step_interval <= 0:
            raise ValueError(f"model.CheckpointConfig.config_save: step_interval must be a positive int, received "
                             f"{step_interval!r}")
        self.need_save = True
        self.save_dirpath = dirpath
        self.save_step_interval = int(step_interval)

    def check_valid(self) -> bool:
        """Always True (every setting is checked when it is set)."""
        self.error_msg = ""
        return True


class Callback:
    """Receives the outputs of :meth:`Model.fit`'s jobs; override what you need.

    ``outputs`` is what the step returned, with ``LocalBlob`` leaves (``.numpy()``, and
    numpy's methods such as ``.mean()``).
    """

    def on_training_step_end(self, outputs, step_idx: int = 0, optimizer_idx: int = 0):
        """Called after the train job of ``optimizer_idx`` ran step ``step_idx``."""

    def on_validation_step_end(self, outputs, step_idx: int = 0):
        """Called after the validation job ran (after training step ``step_idx``)."""


class Model:
    """Base class of a model trained by :meth:`fit` (see the module docstring).

    The keyword ``is_deprecated_function_style`` is accepted for OneFlow compatibility;
    graphfront always builds the steps into global functions.
    """

    def __init__(self, *args, **kwargs):
        self._is_deprecated_function_style = kwargs.get("is_deprecated_function_style", False)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        """The network: blobs in, blobs out (called by your steps as ``self(...)``)."""
        raise NotImplementedError

    def training_step(self, *args, **kwargs):
        """``training_step(batch, optimizer_idx)``: the loss blob (or a tuple, loss first)."""
        raise NotImplementedError

    def validation_step(self, *args, **kwargs):
        """``validation_step(batch)``: the blobs to hand to ``on_validation_step_end``."""
        raise NotImplementedError

    def configure_optimizers(self):
        """A ``flow.optimizer`` optimizer, or a list/tuple of them (one train job each)."""
        raise NotImplementedError

    def method_overrided(self, method_name: str) -> bool:  # OneFlow's spelling
        """Whether this model's class overrides ``method_name`` of :class:`Model`."""
        return getattr(type(self), method_name) is not getattr(Model, method_name)

    def fit(self, training_config: Optional[TrainingConfig] = None,
            validation_config: Optional[ValidationConfig] = None,
            checkpoint_config: Optional[CheckpointConfig] = None,
            callbacks: Optional[Union[Callback, List[Callback]]] = None, max_steps: int = 100) -> None:
        """Train and validate for ``max_steps`` steps (see the module docstring).

        A config that is given but cannot be used (no data, no ``training_step`` …) is
        skipped with a ``UserWarning`` that says why, as OneFlow prints and skips it.

        Raises:
            TypeError: ``callbacks`` are not ``model.Callback`` objects, or
                ``configure_optimizers`` returns something other than optimizers.
            Exception: whatever a job raises, with a note naming the step index and the
                part (logged to the ``graphfront`` logger before Python 3.11).
        """
        clear_default_session()
        callbacks = _check_callbacks(callbacks)
        parts = []
        for part in (_Training(self, training_config, callbacks), _Validation(self, validation_config, callbacks)):
            if part.valid:
                parts.append(part)
            elif part.cfg is not None:
                warnings.warn(f"{part.error_msg} {type(self).__name__}'s fit() will not do {part.name}.",
                              stacklevel=2)
        if not parts:
            warnings.warn(f"{type(self).__name__}'s fit() will do nothing because there is no valid configuration.",
                          stacklevel=2)
            return
        ckpt = _Checkpointing(self, checkpoint_config, callbacks)
        if ckpt.valid:
            parts.append(ckpt)
            ckpt.load()
        for step_idx in range(max_steps):
            for part in parts:
                try:
                    part.step(step_idx)
                except Exception as e:
                    note = f"model {type(self).__name__}: step_idx {step_idx} {part.name} failed"
                    if hasattr(e, "add_note"):  # Python >= 3.11
                        e.add_note(note)
                    else:
                        logging.getLogger("graphfront").error(note)
                    raise


def _check_callbacks(callbacks) -> list:
    if callbacks is None:
        return []
    cbs = [callbacks] if isinstance(callbacks, Callback) else callbacks
    if not isinstance(cbs, (list, tuple)) or not all(isinstance(cb, Callback) for cb in cbs):
        raise TypeError(f"model.fit: callbacks must be a model.Callback or a list of them, received {callbacks!r}")
    return list(cbs)


class _Part:
    """One part of fit's step: training, validation or checkpointing."""

    name = ""

    def __init__(self, model: Model, cfg, callbacks: list):
        self.model, self.cfg, self.callbacks = model, cfg, callbacks
        self.error_msg = f"{type(model).__name__} {self.name} error message: "
        self.valid = cfg is not None and cfg.check_valid()
        if cfg is None:
            self.error_msg += "config is None;"
        elif not self.valid:
            self.error_msg += cfg.error_msg

    def _needs(self, method: str) -> bool:
        if self.model.method_overrided(method):
            return True
        self.error_msg += f"model.{method}() is empty;"
        return False

    def _notify(self, method: str, **kwargs):
        for cb in self.callbacks:
            getattr(cb, method)(**kwargs)

    def _job(self, name: str, type_: str, body, first_batch, optimizer_idx: int):
        """A global function running ``body(batch)``: fed with numpy batches (a
        NumpyDataModule; the placeholders from ``first_batch``) or reading the blobs that
        the data module builds inside the job."""
        data = self.cfg.data
        if isinstance(data, NumpyDataModule):
            def job(*batch):
                return body(batch)
            placeholders = data.infer_oneflow_data_placeholder(first_batch, optimizer_idx)
            job.__signature__ = inspect.Signature([
                inspect.Parameter(f"{type(data).__name__}_para_{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  annotation=ph) for i, ph in enumerate(placeholders)])
        else:
            def job():
                return body(data(0, optimizer_idx))
        job.__name__ = job.__qualname__ = name
        return global_function(type=type_, function_config=self.cfg.exe_cfg)(job)

    def _run(self, job, step_idx, optimizer_idx, first_batch):
        if not isinstance(self.cfg.data, NumpyDataModule):
            return job().get()
        batch = first_batch if step_idx == 0 else self.cfg.data(step_idx, optimizer_idx)
        return job(*batch).get()


class _Training(_Part):
    name = "training"

    def __init__(self, model, cfg, callbacks):
        super().__init__(model, cfg, callbacks)
        self.valid = self.valid and self._needs("training_step")
        self.valid = self._needs("configure_optimizers") and self.valid
        if not self.valid:
            return
        opts = model.configure_optimizers()
        opts = list(opts) if isinstance(opts, (list, tuple)) else [opts]
        if not opts or not all(isinstance(o, _optimizer.Optimizer) for o in opts):
            raise TypeError(f"model {type(model).__name__}.configure_optimizers() must return a flow.optimizer "
                            f"optimizer or a list/tuple of them, received {opts!r}")
        self.jobs, self.first_batches = [], []
        numpy_data = isinstance(cfg.data, NumpyDataModule)
        for idx, opt in enumerate(opts):
            first = cfg.data(0, idx) if numpy_data else None
            self.first_batches.append(first)
            name = f"{type(model).__name__}_Model_train{'_numpy' if numpy_data else ''}_job_{idx}"
            self.jobs.append(self._job(name, "train", self._body(opt, idx), first, idx))

    def _body(self, opt, optimizer_idx):
        def body(batch):
            outputs = self.model.training_step(batch=batch, optimizer_idx=optimizer_idx)
            loss = outputs[0] if isinstance(outputs, tuple) and outputs else outputs
            opt.minimize(loss)
            return outputs
        return body

    def step(self, step_idx):
        for idx, job in enumerate(self.jobs):
            outputs = self._run(job, step_idx, idx, self.first_batches[idx])
            self._notify("on_training_step_end", outputs=outputs, step_idx=step_idx, optimizer_idx=idx)


class _Validation(_Part):
    name = "validation"

    def __init__(self, model, cfg, callbacks):
        super().__init__(model, cfg, callbacks)
        self.valid = self.valid and self._needs("validation_step")
        if not self.valid:
            return
        numpy_data = isinstance(cfg.data, NumpyDataModule)
        self.first_batch = cfg.data(0, 0) if numpy_data else None
        name = f"{type(model).__name__}_Model_eval{'_numpy' if numpy_data else ''}_job"
        self.job = self._job(name, "predict", lambda batch: model.validation_step(batch=batch),
                             self.first_batch, 0)

    def step(self, step_idx):
        if (step_idx + 1) % self.cfg.step_interval == 0:
            outputs = self._run(self.job, step_idx, 0, self.first_batch)
            self._notify("on_validation_step_end", outputs=outputs, step_idx=step_idx)


class _Checkpointing(_Part):
    name = "checkpointing"

    def load(self):
        if self.cfg.need_load:
            _checkpoint.load_variables(_checkpoint.get(self.cfg.load_dirpath))

    def step(self, step_idx):
        if self.cfg.need_save and (step_idx + 1) % self.cfg.save_step_interval == 0:
            _checkpoint.save(f"{self.cfg.save_dirpath}-{step_idx}")
