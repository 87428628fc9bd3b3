"""The import layering of graphfront (the import-linter contracts in pyproject.toml).

``lint-imports`` (run by .ci/run) checks the contracts themselves; these tests check that the
contracts cover every module, so that a new module cannot escape them, and that graphfront
has no import cycle at all (import-linter checks cycles only among the modules of one package).
"""
import pathlib
import sys

import pytest

grimp = pytest.importorskip("grimp")

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENGINE = ("framework", "ops", "passes", "runtime", "parallel")
BELOW_THE_API = ("core", "ofrecord")  # generated protos and the record reader: imported by the engine


def _contracts():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return {c["type"]: c for c in conf}


def _graph():
    sys.path.insert(0, str(ROOT))  # this checkout's graphfront
    try:
        return grimp.build_graph("graphfront", cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))


def _layer_modules(contract):
    return {m.strip() for layer in contract["layers"] for m in layer.replace("|", ":").split(":")}


def _covered(module, names):
    return any(module == n or module.startswith(n + ".") for n in names)


def test_every_top_level_module_is_engine_or_a_forbidden_api_module():
    top = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "graphfront").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    api = {m.split(".", 1)[1] for m in _contracts()["forbidden"]["forbidden_modules"]}
    assert api == top - set(ENGINE) - set(BELOW_THE_API)


def test_every_engine_module_sits_in_a_layer():
    layered = _layer_modules(_contracts()["layers"])
    engine = {m for m in _graph().modules if m.count(".") >= 2 and m.split(".")[1] in ENGINE}
    assert sorted(m for m in engine if not _covered(m, layered)) == []


def test_no_import_cycles():
    graph = _graph()
    for contract in _contracts().values():
        for line in contract.get("ignore_imports", ()):  # pending moves of other work, named there
            importer, imported = (s.strip() for s in line.split("->"))
            graph.remove_import(importer=importer, imported=imported)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    for module, imported in edges.items():  # importing a.b.c first runs the package a.b's __init__
        for name in list(imported):
            parts = name.split(".")
            parents = {".".join(parts[:i]) for i in range(2, len(parts))}
            imported |= {p for p in parents if not (module == p or module.startswith(p + "."))}
    cycles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert cycles == []


def _strongly_connected(edges):
    """Tarjan's strongly connected components of ``edges`` (module -> imported modules)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(sorted(component))
    return out
