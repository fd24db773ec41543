"""Sphinx extension: the API reference pages, written from the module tree at every build.

One page per public module (``api/<dotted name>.rst``: ``automodule`` with its members, the
names its ``__all__`` re-exports from elsewhere as links, its submodules as a toctree) and
``api/index.rst``. A new, moved or removed module needs no edit to the docs; pages of modules
that no longer exist are deleted. The pages are build output (``docs/api/`` is not committed).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types
from pathlib import Path

#: the package trees documented (``hopgraph`` maps ``bindings/``; the other two are mapped
#: separately by setup.py, so walking ``hopgraph`` alone would not reach them)
PACKAGES = ("hopgraph", "hopgraph.engine", "hopgraph.kernels")
API_DIR = "api"


def public_modules(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Every module under ``packages`` whose dotted name has no ``_``-prefixed part, sorted."""
    names = set()
    for package in packages:
        module = importlib.import_module(package)
        names.add(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.add(info.name)
    return sorted(names)


def exports(module: types.ModuleType, documented: set[str]) -> list[str]:
    """reST list items for the names of ``module.__all__`` that are defined in another module."""
    lines = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name, None)
        home = getattr(obj, "__module__", None)
        if obj is None or home == module.__name__ and f"{module.__name__}.{name}" not in documented:
            continue
        if inspect.ismodule(obj):
            lines.append(f"* :py:mod:`{name} <{obj.__name__}>`")
        elif f"{module.__name__}.{name}" in documented:   # an op function named like its module
            lines.append(f"* :py:mod:`{name} <{module.__name__}.{name}>`")
        elif isinstance(home, str) and hasattr(obj, "__qualname__"):
            lines.append(f"* :py:obj:`{name} <{home}.{obj.__qualname__}>`")
        else:
            lines.append(f"* ``{name}``")
    return lines


def module_page(name: str, children: list[str], documented: set[str]) -> str:
    """The reST source of ``name``'s reference page."""
    module = importlib.import_module(name)
    title = f"``{name}``"
    out = [title, "=" * len(title), "", f".. automodule:: {name}", ""]
    exported = exports(module, documented)
    if exported:
        out += [".. rubric:: Exported names", "", *exported, ""]
    if children:
        out += [".. rubric:: Modules", "", ".. toctree::", "   :maxdepth: 1", "",
                *(f"   {child}" for child in children), ""]
    return "\n".join(out)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_reference(app) -> None:
    """``builder-inited`` handler: write ``api/*.rst`` under the source folder, drop stale pages."""
    out = Path(app.srcdir) / API_DIR
    out.mkdir(exist_ok=True)
    names = public_modules()
    documented = set(names)
    for name in names:
        children = [n for n in names if n.rpartition(".")[0] == name]
        _write_if_changed(out / f"{name}.rst", module_page(name, children, documented))
    for page in out.glob("*.rst"):
        if page.stem != "index" and page.stem not in documented:
            page.unlink()
    index = ["API reference", "=============", "",
             "Generated from the docstrings of every public module, one page per module.", "",
             ".. toctree::", "   :maxdepth: 1", "", f"   {PACKAGES[0]}", ""]   # the others are its children
    _write_if_changed(out / "index.rst", "\n".join(index))


def skip_shadowing_op(app, what, name, obj, skip, options):
    """``autodoc-skip-member`` handler: skip a function attribute of a package that is named like
    one of its submodules (``hopgraph.kernels.batched_ppr`` is the op function and the op's
    module); the package page links to the module instead."""
    home = getattr(obj, "__module__", None)
    if what == "module" and inspect.isfunction(obj) and inspect.ismodule(sys.modules.get(f"{home}.{name}")):
        return True
    return None


def setup(app):
    app.connect("builder-inited", write_reference)
    app.connect("autodoc-skip-member", skip_shadowing_op)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
