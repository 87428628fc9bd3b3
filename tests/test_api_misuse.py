"""Every public op function of ``flow``, ``flow.math``, ``flow.nn``, ``flow.layers``, ``flow.random``
and ``flow.quantization``, the initializers, optimizers and learning-rate schedulers, called
with one argument of a wrong type or value, raises one of graphfront's errors (an
ArgumentError or JobBuildError naming the function or op, at the user's line) or accepts
the value and runs: never Python's bare TypeError, ValueError or AttributeError from inside
graphfront, nor a kernel's RuntimeError.

The sweep: a function whose required arguments this file knows how to fill (``_TENSOR`` names
take a (2, 3, 6, 6) float32 placeholder, ``_PLAUSIBLE`` the others) is first called with
those values, which must build and run; then once for each (argument, bad value) pair, every
other argument as in that first call. The bad values are a string, a negative int, a float,
a long tuple, None, NaN, a huge int, a bool and an object. A second sweep gives each numeric
argument as a numpy scalar of the same value (``np.int64``, ``np.float32``), which must give
the Python number's results, as OneFlow's wrappers, doing arithmetic with them, did.
"""
import inspect
import math

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp

_TENSOR = {"x", "input", "input_tensor", "a", "b", "y", "data", "logits", "value", "like", "prediction",
           "predictions", "target", "targets", "label", "labels", "src", "params", "dy", "condition", "mask", "one",
           "ref", "log_probs", "mean", "values", "inputs", "input1", "input2", "anchor", "positive", "negative"}
_PLAUSIBLE = {"ksize": 2, "strides": 1, "padding": "SAME", "filters": 4, "axis": 1, "k": 2, "size": 2, "rate": 0.5,
              "dim": 1, "shape": (2, 3, 6, 6), "units": 4, "num_segments": 3,
              "paddings": ((0, 0), (0, 0), (1, 1), (1, 1)), "dtype": flow.float32, "seed": 1, "kernel_size": 2,
              "num_sample": 2, "start": 0, "max_acc_num": 2, "expand_size": (2, 3, 6, 6), "dims": [1],
              "begin": [0, 0, 0, 0], "num_or_size_splits": 3, "shifts": 1, "repeat_num": 2, "pack_num": 2,
              "unpack_num": 2, "length": 1, "upscale_factor": 1, "h_upscale_factor": 1, "w_upscale_factor": 1,
              "capacity": 4, "axes": [0]}
_BAD = {"str": "bad", "neg": -5, "float": 2.5, "long": (1, 2, 3, 4, 5, 6, 7), "none": None, "nan": math.nan,
        "huge": 10 ** 12, "bool": True, "obj": object()}
_NOT_SWEPT = {"name", "trainable", "model_distribute", "reuse", "op_name", "distribute"}  # names, flags, hints
_MODULES = {"flow": flow, "flow.math": flow.math, "flow.nn": flow.nn, "flow.layers": flow.layers,
            "flow.random": flow.random, "flow.quantization": flow.quantization}
#: the functions each module's sweep reaches today (so that it cannot pass vacuously)
_LEAST_SWEPT = {"flow": 31, "flow.math": 85, "flow.nn": 38, "flow.layers": 8, "flow.random": 3,
                "flow.quantization": 2}
#: the arguments whose numpy twins each module's sweep compares today
_LEAST_COMPARED = {"flow": 23, "flow.math": 26, "flow.nn": 36, "flow.layers": 11, "flow.random": 3,
                   "flow.quantization": 2}


def _sweepable(module_name):
    """``(name, function, tensor args, plausible args)`` of the module's public functions
    whose required arguments are all known here."""
    module = _MODULES[module_name]
    for name in sorted(dir(module)):
        fn = getattr(module, name)
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__.startswith("graphfront.framework"):
            continue
        if name in ("build_op", "global_function", "clear_default_session"):
            continue
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        required = [p.name for p in params if p.default is inspect.Parameter.empty]
        tensors = [p for p in required if p in _TENSOR]
        if not tensors or any(p not in _TENSOR and p not in _PLAUSIBLE for p in required):
            continue
        base = {p: _PLAUSIBLE[p] for p in required if p not in _TENSOR}
        if module_name == "flow.layers" and "filters" in base:
            base["filters"] = 4  # flow.layers takes a count, flow.nn a weight blob
        if "begin" in base:
            base["size"] = [1, 1, 2, 2]
        swept = [p.name for p in params if p.name not in _TENSOR and p.name not in _NOT_SWEPT]
        yield name, fn, tensors, base, swept


def _outputs(module_name, fn, tensors, kwargs):
    """The results of a predict job calling ``fn(**kwargs)`` on placeholder tensors, as numpy arrays."""
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3, 6, 6))):
        args = dict(kwargs)
        for t in tensors:
            args[t] = [x, x] if t == "inputs" and module_name != "flow.layers" else x
        return fn(**args)

    future = job(np.random.default_rng(0).random((2, 3, 6, 6), np.float32))
    got = future.get() if future is not None else ()
    return [b.numpy() for b in (got if isinstance(got, (tuple, list)) else (got,))]


def _call(module_name, fn, tensors, kwargs):
    """None when :func:`_outputs` ran, else the exception raised."""
    try:
        _outputs(module_name, fn, tensors, kwargs)
    except Exception as e:  # noqa: BLE001 - the point of the sweep is to classify every exception
        return e
    return None


@pytest.mark.parametrize("module_name", sorted(_MODULES))
def test_a_bad_argument_raises_a_graphfront_error_or_is_accepted(module_name):
    stray, swept = [], 0
    for name, fn, tensors, base, params in _sweepable(module_name):
        error = _call(module_name, fn, tensors, base)
        if error is not None:  # the plausible values do not fit this function: its own error must say so
            if not isinstance(error, flow.GraphfrontError):
                stray.append(f"{module_name}.{name}() with {base}: {type(error).__name__}: {error}")
            continue
        swept += 1
        for param in params:
            for tag, value in _BAD.items():
                error = _call(module_name, fn, tensors, {**base, param: value})
                if error is not None and not isinstance(error, flow.GraphfrontError):
                    stray.append(f"{module_name}.{name}({param}={tag}): {type(error).__name__}: {error}")
    assert not stray, f"{len(stray)} calls raised errors that are not graphfront's:\n" + "\n".join(stray[:40])
    assert swept >= _LEAST_SWEPT[module_name], f"the sweep reached only {swept} functions of {module_name}"


def _numpy_twin(v):
    """``v`` with its Python ints as ``np.int64`` and its floats as ``np.float32`` (where that
    holds the same value), or None when it has neither."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return np.int64(v)
    if isinstance(v, float):
        return np.float32(v) if np.isfinite(v) and float(np.float32(v)) == v else None
    if isinstance(v, (list, tuple)):
        twins = [_numpy_twin(e) for e in v]
        if any(t is not None for t in twins):
            return type(v)(e if t is None else t for e, t in zip(v, twins))
    return None


@pytest.mark.parametrize("module_name", sorted(_MODULES))
def test_numpy_scalars_are_taken_as_the_python_numbers_they_equal(module_name):
    # np.int64 units, axes and sizes were refused where OneFlow takes them (isinstance(v, int)); a
    # np.float32 fill value of tril was taken as an integer fill and truncated (0.5 filled 0)
    wrong, compared = [], 0
    for name, fn, tensors, base, params in _sweepable(module_name):
        defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()}
        for param in params:
            value = base.get(param, defaults.get(param))
            value = _PLAUSIBLE.get(param) if value is None else value
            twin = _numpy_twin(value)
            if twin is None:
                continue
            try:
                want = _outputs(module_name, fn, tensors, {**base, param: value})
            except flow.GraphfrontError:
                continue  # (the value does not fit this function: the sweep above checks its error)
            again = _outputs(module_name, fn, tensors, {**base, param: value})
            deterministic = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(want, again))
            compared += 1
            try:
                got = _outputs(module_name, fn, tensors, {**base, param: twin})
            except Exception as e:  # noqa: BLE001 - every refusal of an equal value is reported
                wrong.append(f"{module_name}.{name}({param}={twin!r}): {type(e).__name__}: {e}")
                continue
            same = [(a.shape, a.dtype) == (b.shape, b.dtype)
                    and (not deterministic or np.array_equal(a, b, equal_nan=True)) for a, b in zip(want, got)]
            if len(got) != len(want) or not all(same):
                wrong.append(f"{module_name}.{name}({param}={twin!r}): results differ from {value!r}'s")
    assert not wrong, f"{len(wrong)} numpy scalars were not taken as the numbers they equal:\n" + "\n".join(wrong[:40])
    assert compared >= _LEAST_COMPARED[module_name], f"only {compared} arguments of {module_name} were compared"


def _train_step(make_optimizer, initializer=None):
    """Three steps of a small train job whose variable has ``initializer`` and whose loss is
    minimized by ``make_optimizer()``; None when they ran and the first loss (the initial
    variable's) is finite, else the exception."""
    flow.clear_default_session()

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=initializer or flow.random_normal_initializer(),
                              random_seed=1)
        loss = flow.math.reduce_mean(flow.matmul(x, w) ** 2)
        make_optimizer().minimize(loss)
        return loss

    try:
        losses = [job(np.ones((4, 3), np.float32)) for _ in range(3)]
    except Exception as e:  # noqa: BLE001 - classified by the caller
        return e
    return None if np.isfinite(losses[0]).all() else ValueError(f"the initial loss is {losses[0]}")


def _sgd():
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0)


_INITIALIZERS = sorted(n for n in dir(flow) if n.endswith("_initializer") and n != "kaiming_initializer")
_OPTIMIZERS = ["SGD", "SGDW", "Adam", "AdamW", "LAMB", "LARS", "LazyAdam", "RMSProp", "Adagrad"]
_SCHEDULERS = {"PiecewiseConstantScheduler": {"boundaries": [2], "values": [0.1, 0.01]},
               "CosineScheduler": {"base_lr": 0.1, "steps": 10},
               "ExponentialScheduler": {"base_lr": 0.1, "steps": 10, "decay_rate": 0.9},
               "InverseTimeScheduler": {"base_lr": 0.1, "steps": 10, "decay_rate": 0.9},
               "NaturalExpScheduler": {"base_lr": 0.1, "steps": 10, "decay_rate": 0.9},
               "LinearCosineScheduler": {"base_lr": 0.1, "steps": 10},
               "PiecewiseScalingScheduler": {"base_lr": 0.1, "boundaries": [2], "scale": [0.5]},
               "PolynomialScheduler": {"base_lr": 0.1, "steps": 10}}


def test_initializers_refuse_a_bad_argument_or_initialize_finite_values():
    # a NaN mean, a negative stddev, a reversed range once reached the variable (NaNs) or torch's RuntimeError
    stray = []
    for name in _INITIALIZERS:
        make = getattr(flow, name)
        for param in inspect.signature(make).parameters:
            for tag, value in {**_BAD, "inf": math.inf, "zero": 0}.items():
                try:
                    conf = make(**{param: value})
                except flow.GraphfrontError:
                    continue
                except Exception as e:  # noqa: BLE001
                    stray.append(f"flow.{name}({param}={tag}): {type(e).__name__}: {e}")
                    continue
                error = _train_step(_sgd, conf)
                if error is not None and not isinstance(error, flow.GraphfrontError):
                    stray.append(f"a variable of flow.{name}({param}={tag}): {type(error).__name__}: {error}")
    assert not stray, "\n".join(stray)


def test_optimizers_and_schedulers_refuse_a_bad_argument_or_train_a_finite_step():
    # NaN hyperparameters trained to a NaN loss; a negative inverse-time decay divided by zero mid-training
    stray = []
    cases = [(f"flow.optimizer.{o}", lambda o=o, **kw: getattr(flow.optimizer, o)(
        flow.optimizer.PiecewiseConstantScheduler([], [0.1]), **kw), {}) for o in _OPTIMIZERS]
    cases += [(f"flow.optimizer.{s}", lambda s=s, **kw: flow.optimizer.SGD(getattr(flow.optimizer, s)(**kw),
                                                                           momentum=0), base)
              for s, base in _SCHEDULERS.items()]
    for what, make, base in cases:
        target = getattr(flow.optimizer, what.rsplit(".", 1)[1])
        for param in inspect.signature(target).parameters:
            if param in ("lr_scheduler", "variables", "train_step_lbn", "loss_scale_policy", "grad_clipping",
                         "warmup"):
                continue
            for tag, value in {**_BAD, "inf": math.inf, "zero": 0}.items():
                try:
                    optimizer = make(**{**base, param: value})
                except flow.GraphfrontError:
                    continue
                except Exception as e:  # noqa: BLE001
                    stray.append(f"{what}({param}={tag}): {type(e).__name__}: {e}")
                    continue
                error = _train_step(lambda: optimizer)
                if error is not None and not isinstance(error, flow.GraphfrontError):
                    stray.append(f"a step of {what}({param}={tag}): {type(error).__name__}: {error}")
    assert not stray, "\n".join(stray)


def test_numpy_integers_are_taken_beyond_the_op_functions(tmp_path):
    # placeholder shapes, flow.Size, flow.profile's runs, the ONNX opset, a placement's hierarchy
    # and QAT's settings refused numpy scalars (isinstance(v, int)) where OneFlow's wrappers take them
    i = np.int64
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((i(2), i(3)))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0", hierarchy=(i(1),)):
            return flow.math.relu(x)

    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(job(x), np.maximum(x, 0))
    assert flow.Size((i(2), 3)) == flow.Size((2, 3)) and all(type(d) is int for d in flow.Size((i(2), 3)))
    assert flow.profile(job, x, runs=i(2), print_table=False).runs == 2
    flow.onnx.export(job, str(tmp_path / "relu.onnx"), opset=i(13))
    assert (tmp_path / "relu.onnx").stat().st_size > 0
    qat = flow.FunctionConfig().qat
    qat.moving_min_max_stop_update_after_iters(i(3))
    qat.moving_min_max_momentum(np.float32(0.5))
    assert (qat._conf.moving_min_max_stop_update_after_iters, qat._conf.moving_min_max_momentum) == (3, 0.5)
