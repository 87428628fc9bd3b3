"""Self-contained reproducers of failing AutoTest draws.

On a mismatch the AutoTest saves every input tensor (and both sides' results) to an
``.npz`` file in :func:`artifact_dir` and writes two runnable Python snippets: one
that rebuilds the graphfront job exactly as the harness did and one that reruns the
PyTorch reference. The snippets embed the test's functions by source (found with
``inspect`` and ``ast``), plus the imports, helper functions and literal values those
functions refer to.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import os
import tempfile
import textwrap
import types

import numpy as np

from graphfront.testing.generators import Device, TensorValue
from graphfront.framework import dtypes as _dt

ARTIFACT_DIR_ENV = "GRAPHFRONT_AUTOTEST_DIR"
_TMPDIR = None


def artifact_dir() -> str:
    """The directory that receives the ``.npz`` files and reproducer scripts.

    ``$GRAPHFRONT_AUTOTEST_DIR`` when set (created if missing; the test suite points it
    into pytest's temporary directory, so no run leaves files in the system's), else one
    ``graphfront_autotest_*`` directory per process in the system temporary directory.
    """
    global _TMPDIR
    configured = os.environ.get(ARTIFACT_DIR_ENV)
    if configured:
        os.makedirs(configured, exist_ok=True)
        return configured
    if _TMPDIR is None or not os.path.isdir(_TMPDIR):
        _TMPDIR = tempfile.mkdtemp(prefix="graphfront_autotest_")
    return _TMPDIR


def save_arrays(stem: str, arrays: dict) -> str:
    """Save ``arrays`` to ``<artifact_dir>/<stem>.npz`` (a fresh name) and return the path."""
    base = os.path.join(artifact_dir(), stem)
    path, k = base + ".npz", 1
    while os.path.exists(path):
        path, k = f"{base}_{k}.npz", k + 1
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    return path


# ------------------------------------------------------------------ source of functions

def _lambda_node(fn):
    """The ``ast.Lambda`` node and full module source of a lambda, or (None, None)."""
    code = fn.__code__
    try:
        filename = inspect.getsourcefile(fn)
        if not filename:
            return None, None
        linecache.checkcache(filename)
        source = "".join(linecache.getlines(filename, fn.__globals__))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, ValueError):
        return None, None
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]

    def argnames(node):
        a = node.args
        return tuple(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs)

    found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno
             and argnames(n) == names]
    if len(found) > 1 and hasattr(code, "co_positions"):
        pos = [p for p in code.co_positions() if p[0] is not None and p[2] is not None]

        def contains(node):
            b = node.body
            return all((b.lineno, b.col_offset) <= (p[0], p[2]) and (p[1], p[3]) <= (b.end_lineno, b.end_col_offset)
                       for p in pos)
        found = [n for n in found if contains(n)] or found
    return (found[0], source) if found else (None, None)


def function_source(fn, name: str) -> str:
    """Python source that binds ``name`` to ``fn`` (a lambda or a def), best effort."""
    if getattr(fn, "__name__", "") == "<lambda>":
        node, source = _lambda_node(fn)
        if node is not None:
            return f"{name} = ({ast.get_source_segment(source, node)})"
        return f"# source of {name} is not available: {fn!r}\n{name} = None"
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return f"# source of {name} is not available: {fn!r}\n{name} = None"
    if fn.__name__ != name:
        src += f"\n{name} = {fn.__name__}"
    return src


def _code_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _literal(value):
    try:
        text = repr(value)
        if ast.literal_eval(text) == value:
            return text
    except (ValueError, SyntaxError, TypeError, RecursionError):
        pass
    return None


def _binding(name, value, seen, out):
    """Append the lines that define global/closure ``name`` = ``value`` to ``out``."""
    if isinstance(value, types.ModuleType):
        mod = value.__name__
        out.append(f"import {mod}" if mod == name else f"import {mod} as {name}")
        return
    if isinstance(value, types.FunctionType):
        if id(value) in seen:
            return
        seen.add(id(value))
        _dependencies(value, seen, out)
        out.append(function_source(value, name))
        return
    if inspect.isclass(value) and value.__module__ not in ("builtins",):
        mod = value.__module__
        if getattr(inspect.getmodule(value), value.__name__, None) is value and not mod.startswith("test"):
            out.append(f"from {mod} import {value.__name__}" + (f" as {name}" if name != value.__name__ else ""))
            return
        try:
            out.append(textwrap.dedent(inspect.getsource(value)))
            return
        except (OSError, TypeError):
            pass
    lit = _literal(value)
    if lit is not None:
        out.append(f"{name} = {lit}")
        return
    if isinstance(value, _dt.dtype):
        out.append(f"import graphfront\n{name} = graphfront.{value.name}")
        return
    if callable(value) and getattr(value, "__module__", None) and getattr(value, "__qualname__", None):
        mod, qual = value.__module__, value.__qualname__
        if "." not in qual and "<" not in qual:
            out.append(f"from {mod} import {qual}" + (f" as {name}" if name != qual else ""))
            return
    out.append(f"# {name} = {value!r}  (a value of the test module; define it before running)")


def _dependencies(fn, seen, out):
    code = fn.__code__
    glb = fn.__globals__
    for name in sorted(_code_names(code)):
        if name in glb and not hasattr(builtins, name):
            _binding(name, glb[name], seen, out)
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            _binding(name, value, seen, out)


def definitions(fn, name: str) -> str:
    """Source lines that define ``name`` as ``fn`` together with what ``fn`` refers to."""
    out, seen = [], {id(fn)}
    if isinstance(fn, types.FunctionType):
        _dependencies(fn, seen, out)
    out.append(function_source(fn, name))
    uniq = []
    for block in out:
        if block not in uniq:
            uniq.append(block)
    return "\n".join(uniq)


# ------------------------------------------------------------------ rendering values

def render(value, leaf_of) -> str:
    """Python text of a resolved kwarg; tensors become their leaf variable names."""
    if isinstance(value, TensorValue):
        return leaf_of[id(value)]
    if isinstance(value, Device):
        return repr(str(value))
    if isinstance(value, list):
        return "[" + ", ".join(render(v, leaf_of) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(render(v, leaf_of) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, _dt.dtype):
        return f"graphfront.{value.name}"
    if isinstance(value, (np.generic,)):
        return repr(value.item())
    return repr(value)


def describe(value, leaf_of) -> str:
    """Human description of a resolved kwarg for the failure message."""
    if isinstance(value, TensorValue):
        kind = "trainable" if value.requires_grad else "non-trainable"
        return (f"{value.array.dtype} tensor of shape {tuple(value.array.shape)} "
                f"({kind}; '{leaf_of[id(value)]}' in the .npz)")
    if isinstance(value, (list, tuple)) and any(isinstance(v, TensorValue) for v in value):
        return "[" + ", ".join(describe(v, leaf_of) for v in value) + "]"
    return render(value, leaf_of)


_FLATTEN = '''
def flatten(value):
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in flatten(v)]
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in flatten(value[k])]
    return [value]
'''

_REPORT = '''
def report(what, got, other, other_name):
    if other is None:
        print(f"{{what}}: shape {{got.shape}} {{got.dtype}}\\n{{got}}")
        return
    same_shape = got.shape == other.shape
    ok = same_shape and np.allclose(got.astype(np.float64), other.astype(np.float64), rtol={rtol!r}, atol={atol!r},
                                    equal_nan=True)
    diff = np.abs(got.astype(np.float64) - other.astype(np.float64)).max() if same_shape and got.size else None
    diff = "n/a" if diff is None else f"{{diff:.6g}}"
    print(f"{{what}}: {{'OK' if ok else 'MISMATCH'}} (shape {{got.shape}} vs {{other_name}} {{other.shape}}, "
          f"max abs diff {{diff}})")
'''


def graphfront_snippet(*, f, kwargs, leaves, train, device, npz, rtol, atol, header, passes=True) -> str:
    """A script that rebuilds and runs the graphfront job of one draw."""
    leaf_of = {id(tv): leaf for leaf, tv in leaves}
    trainable = [(leaf, tv) for leaf, tv in leaves if train and tv.requires_grad]
    variables = [(leaf, tv) for leaf, tv in leaves if (train and tv.requires_grad) or tv.array.ndim == 0]
    fed = [(leaf, tv) for leaf, tv in leaves if (leaf, tv) not in variables]
    tag = "gpu" if device == "cuda" else "cpu"
    lines = [f"# {header}", "import numpy as np", "import graphfront", "import graphfront as flow",
             "from graphfront import typing as tp", "", definitions(f, "f"), _FLATTEN,
             _REPORT.format(rtol=rtol, atol=atol), f"data = np.load({npz!r})", "flow.clear_default_session()",
             "grads = {}", "", "", "def keep_grad(name):", "    def handler(g: tp.Numpy):",
             "        grads[name] = g", "    return handler", "", ""]
    params = ", ".join(f"{leaf}: tp.Numpy.Placeholder({tuple(tv.shape)!r}, dtype=flow.{_dt.from_numpy(tv.dtype).name})"
                       for leaf, tv in fed)
    kind = "train" if train else "predict"
    if passes:
        lines.append(f'@flow.global_function(type="{kind}")')
    else:
        lines += ["config = flow.FunctionConfig()",
                  "config.enable_passes(False)  # this draw ran without cleanup passes",
                  "", "", f'@flow.global_function(type="{kind}", function_config=config)']
    lines.append(f"def job({params}) -> tp.Bundle[tp.Numpy]:")
    lines.append(f'    with flow.scope.placement("{tag}", "0:0"):')
    for leaf, tv in variables:
        dt = _dt.from_numpy(tv.dtype).name
        lines.append(f'        {leaf} = flow.get_variable("{leaf}", shape={tuple(tv.shape)!r}, dtype=flow.{dt}, '
                     f"initializer=flow.zeros_initializer(flow.{dt}), trainable={train and tv.requires_grad})")
    call = ", ".join(f"{k}={render(v, leaf_of)}" for k, v in kwargs.items())
    lines.append(f"        outs = flatten(f(flow, {call}))")
    if train:
        names = "".join(f"{leaf}, " for leaf, _ in trainable)
        lines += [
            "        # loss = sum_i(out_i * cotangent_i) over the floating outputs (+ 0 * sum of each trainable",
            "        # input, so every input receives a gradient); learning rate 0 keeps the variables unchanged",
            "        terms = []",
            "        for i, o in enumerate(outs):",
            "            if not o.dtype.is_floating_point:",
            "                continue",
            "            if not len(o.shape):",
            "                terms.append(flow.cast(o, flow.float32) * float(data[f'cotangent_{i}']))",
            "                continue",
            "            v = flow.get_variable(f'cotangent_{i}', shape=tuple(o.shape), dtype=flow.float32, "
            "initializer=flow.zeros_initializer(flow.float32), trainable=False)",
            "            terms.append(flow.math.reduce_sum(flow.cast(o, flow.float32) * v))",
            f"        terms += [flow.cast(flow.math.reduce_sum(v), flow.float32) * 0.0 for v in ({names})]",
            "        loss = flow.math.add_n(terms)",
            "        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0)"
            ".minimize(loss)"]
        for leaf, _ in trainable:
            lines.append(f'        flow.watch_diff({leaf}, keep_grad("{leaf}"))')
    lines.append("    return tuple(outs)")
    lines += ["", ""]
    if variables or train:
        items = [f'"{leaf}": data["{leaf}"]' for leaf, _ in variables]
        if train:
            items.append("**{k: data[k] for k in data.files if k.startswith('cotangent_') and data[k].ndim}")
        lines.append("flow.load_variables({" + ", ".join(items) + "})")
    lines.append("outs = job(" + ", ".join(f'data["{leaf}"]' for leaf, _ in fed) + ")")
    lines += ["for i, out in enumerate(outs):",
              '    key = f"torch_out_{i}"',
              '    report(f"output {i}", out, data[key] if key in data.files else None, "torch")']
    if train:
        lines += ["for name, g in sorted(grads.items()):",
                  '    key = f"torch_grad_{name}"',
                  '    report(f"gradient of {name}", g, data[key] if key in data.files else None, "torch")']
    return "\n".join(lines) + "\n"


def torch_snippet(*, g, kwargs, leaves, train, device, npz, rtol, atol, header) -> str:
    """A script that reruns the PyTorch reference of one draw."""
    leaf_of = {id(tv): leaf for leaf, tv in leaves}
    dev = "cuda" if device == "cuda" else "cpu"
    lines = [f"# {header}", "import numpy as np", "import torch", "", definitions(g, "g"), _FLATTEN,
             _REPORT.format(rtol=rtol, atol=atol), f"data = np.load({npz!r})"]
    if any("graphfront." in render(v, leaf_of) for v in kwargs.values()):
        lines.insert(2, "import graphfront")
    for leaf, tv in leaves:
        rg = ", requires_grad=True" if train and tv.requires_grad else ""
        lines.append(f'{leaf} = torch.tensor(data["{leaf}"], device="{dev}"{rg})')
    call = ", ".join(f"{k}={render(v, leaf_of)}" for k, v in kwargs.items())
    lines.append(f"outs = [torch.as_tensor(o) for o in flatten(g(torch, {call}))]")
    trainable = [leaf for leaf, tv in leaves if train and tv.requires_grad]
    if train:
        names = "".join(f"{leaf}, " for leaf in trainable)
        lines += ["loss = sum((o.float() * torch.tensor(data[f'cotangent_{i}'], device=o.device)).sum()",
                  "           for i, o in enumerate(outs) if o.is_floating_point())",
                  f"loss = loss + sum(v.sum().float() * 0.0 for v in ({names}))",
                  "loss.backward()"]
    lines += ["for i, out in enumerate(outs):",
              '    key = f"graphfront_out_{i}"',
              "    value = out.detach().cpu()",
              "    value = (value.float() if value.dtype == torch.bfloat16 else value).numpy()",
              '    report(f"output {i}", value, data[key] if key in data.files else None, "graphfront")']
    for leaf in trainable:
        lines += [f"grad = {leaf}.grad if {leaf}.grad is not None else torch.zeros_like({leaf})",
                  f'key = "graphfront_grad_{leaf}"',
                  f'report("gradient of {leaf}", grad.detach().cpu().numpy(), '
                  'data[key] if key in data.files else None, "graphfront")']
    return "\n".join(lines) + "\n"
