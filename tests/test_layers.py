"""Import structure of the package: clean layers.

The import graph is read from the source with :mod:`ast` (module-level AND function-level
imports; imports under ``if TYPE_CHECKING:`` never run and are left out), with module names
from setup.py's ``package_dir`` mapping, so the tests see imports that only run on some
code paths too.

* layers: imports go one way, bindings → engine → kernels; the kernels import nothing
  of the engine, the bindings or the server; pipelines reach the kernels' ops only through the
  dispatch point;
* no cycle among hopgraph's modules;
* every module of the package imports.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    """``{package name: folder}`` as setup.py maps them (setuptools ``package_dir``)."""
    spec = importlib.util.spec_from_file_location("hopgraph_setup", ROOT / "setup.py")
    setup_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_module)  # defines package_dirs; setup() runs only as __main__
    return {name: ROOT / folder for name, folder in setup_module.package_dirs(ROOT).items()}


def module_files() -> dict[str, Path]:
    """``{module name: source file}`` of every module of the package (``__init__`` = the package)."""
    out: dict[str, Path] = {}
    for package, folder in package_dirs().items():
        for path in sorted(folder.glob("*.py")):
            out[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return out


MODULES = module_files()


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if _type_checking_block(node):
            stack.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _known(name: str) -> str | None:
    """The longest prefix of ``name`` that is a hopgraph module, or None (not hopgraph)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(module: str) -> dict[str, int]:
    """``{hopgraph module imported by module: line of the first such import}``."""
    path = MODULES[module]
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [_known(alias.name) for alias in node.names]
        else:
            if node.level:
                base_parts = package.split(".")
                if node.level - 1 >= len(base_parts):
                    raise AssertionError(f"{path}:{node.lineno}: relative import beyond the top package")
                base = ".".join(base_parts[:len(base_parts) - (node.level - 1)])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # ``from pkg import name``: the submodule pkg.name when there is one, else pkg
            targets = [_known(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES else _known(base)
                       for alias in node.names]
        for target in targets:
            if target is not None and target != module:
                out.setdefault(target, node.lineno)
    return out


GRAPH = {module: imports_of(module) for module in MODULES}


def layer(module: str) -> str:
    if module == "hopgraph.kernels" or module.startswith("hopgraph.kernels."):
        return "kernels"
    if module == "hopgraph.engine" or module.startswith("hopgraph.engine."):
        return "engine"
    return "bindings"  # hopgraph, hopgraph.* (cli, index, ...) and hopgraph.serve


#: what each layer may import (itself included)
ALLOWED = {"kernels": {"kernels"}, "engine": {"engine", "kernels"}, "bindings": {"bindings", "engine", "kernels"}}


def test_module_map_found_the_package():
    assert {"hopgraph", "hopgraph.engine.sparse", "hopgraph.kernels.dispatch", "hopgraph.serve.batcher",
            "hopgraph.engine.pipelines.g3rag.pipeline"} <= set(MODULES)


def test_kernels_import_nothing_above_them():
    """Every kernels/*.py: no import reaches hopgraph.engine, the bindings or hopgraph.serve
    (relative ``..engine`` or absolute ``hopgraph.engine`` alike, at any depth)."""
    bad = []
    for module, targets in GRAPH.items():
        if layer(module) != "kernels":
            continue
        for target, line in targets.items():
            if layer(target) != "kernels":
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
        # the raw text too, in case a name was resolved to something unexpected
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        for node in _import_nodes(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if {"engine", "bindings", "serve"} & set(name.split(".")):
                    bad.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno} imports {name!r}")
    assert not bad, "the kernels must not import the layers above them:\n" + "\n".join(bad)


def test_layers_import_one_way():
    """bindings → engine → kernels: no layer imports one above it."""
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: {layer(m)} module {m} imports {layer(t)} module {t}"
           for m, targets in GRAPH.items() for t, line in targets.items() if layer(t) not in ALLOWED[layer(m)]]
    assert not bad, "imports against the layer order bindings → engine → kernels:\n" + "\n".join(bad)


#: kernel modules a pipeline may import besides the dispatch point (``hopgraph.kernels`` / ``.dispatch``):
#: the shared types and helpers, which implement no op
KERNEL_SUPPORT = {"hopgraph.kernels", "hopgraph.kernels.dispatch", "hopgraph.kernels.csr", "hopgraph.kernels.checks",
                  "hopgraph.kernels.errors", "hopgraph.kernels.tensors", "hopgraph.kernels.threads",
                  "hopgraph.kernels.sampling"}
#: imports of an op's module by a pipeline that remain, each for a constant or a validation shared with the op
#: (no kernel work): listed so that the rule holds everywhere else and an entry that is gone fails
KNOWN_OP_IMPORTS = {
    ("hopgraph.engine.pipelines.dmar.pipeline", "hopgraph.kernels.shapley_mc"): "the op's MODES as a parameter domain",
    ("hopgraph.engine.pipelines.g3rag.diffusion", "hopgraph.kernels.sparse_diffusion"):
        "the op's seed validation, so the sparse query path weighs seeds as the op does",
}


def test_pipelines_reach_kernels_only_through_dispatch():
    """No module under hopgraph.engine.pipelines imports a kernel module that implements an op (the op's CPU
    module or its Triton module): kernel work goes through ``hopgraph.kernels.call`` / the op functions, so
    that the device decides which implementation runs. Only :data:`KERNEL_SUPPORT` may be imported."""
    bad, seen = [], set()
    for module, targets in GRAPH.items():
        if not module.startswith("hopgraph.engine.pipelines"):
            continue
        for target, line in targets.items():
            if layer(target) != "kernels" or target in KERNEL_SUPPORT:
                continue
            if (module, target) in KNOWN_OP_IMPORTS:
                seen.add((module, target))
                continue
            bad.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "pipelines must call kernels through hopgraph.kernels.call:\n" + "\n".join(bad)
    assert seen == set(KNOWN_OP_IMPORTS), f"no longer imported, remove from KNOWN_OP_IMPORTS: {set(KNOWN_OP_IMPORTS) - seen}"


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import cycle ``[a, b, ..., a]`` of ``graph`` (depth-first search), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for root in sorted(graph):
        if colour[root] != WHITE:
            continue
        path = [root]
        colour[root] = GREY
        iters = [iter(sorted(graph[root]))]
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                iters.pop()
            elif colour.get(nxt, BLACK) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                iters.append(iter(sorted(graph[nxt])))
    return None


def test_find_cycle_reports_the_path():
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) is None
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"b": 1}}) == ["b", "c", "b"]


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    if cycle is not None:
        steps = [f"{a} ({MODULES[a].relative_to(ROOT)}:{GRAPH[a][b]}) imports {b}" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle: " + " → ".join(cycle) + "\n" + "\n".join(steps))


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith(".__main__")))
def test_every_module_imports(module):
    """Each module imports (an optional third-party dependency that is not installed skips;
    ``__main__`` modules run the command line when imported and are only parsed above)."""
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and not e.name.startswith("hopgraph"):
            pytest.skip(f"{module} needs the optional dependency {e.name}")
        raise
    assert imported.__name__ == module
