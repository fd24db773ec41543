"""Sphinx extension: Python cross-references checked against what exists at run time.

A reference (``:func:`name```, ``:class:`name```, a type in a signature ...) that Sphinx cannot
resolve among the documented objects goes through :func:`resolve_missing`:

1. the object it names is looked up in the scope of the docstring: the class, the module's
   namespace (imports included), builtins / ``types`` / ``typing``, then as a dotted name,
   absolute or relative to a package above the module (``storage.RowReader`` written in
   ``hopgraph.engine.components.title_mentions`` is ``hopgraph.engine.storage.RowReader``);
2. when found, the reference links to where that object is documented (its ``__module__`` and
   ``__qualname__``), or, if it is not documented (a private helper, an undocumented constant, a
   third-party type), it is kept as plain text without a warning;
3. when not found, a documented object whose name ends with ``.name`` is linked if there is
   exactly one; otherwise the reference stays unresolved and nitpicky mode (``-n``) warns —
   with ``-W`` the build fails. Types inside signatures are exempt from this last step (the type
   checkers own them; ``Annotated`` metadata renders as fragments Sphinx cannot parse).
"""
from __future__ import annotations

import builtins
import importlib
import inspect
import sys
import types
import typing

from sphinx import addnodes

_MISSING = object()


def _getattr_path(obj, parts: list[str]):
    """``obj.parts[0].parts[1]...``, or _MISSING; a dataclass field or annotated class attribute
    with no class-level value counts as found (``None``)."""
    for part in parts:
        if inspect.isclass(obj) and part not in vars(obj):
            annotations: dict = {}
            for klass in inspect.getmro(obj):
                annotations.update(getattr(klass, "__annotations__", {}) or {})
            if part in (getattr(obj, "__dataclass_fields__", None) or {}) or part in annotations:
                obj = None
                continue
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return _MISSING
    return obj


def lookup(target: str, module: str | None, klass: str | None = None):
    """The object ``target`` names in the scope of a docstring of ``module.klass``, or _MISSING."""
    parts = target.split(".")
    scopes: list = []
    if module and module in sys.modules:
        mod = sys.modules[module]
        if klass:
            owner = _getattr_path(mod, klass.split("."))
            if owner is not _MISSING and owner is not None:
                scopes.append(owner)
        scopes.append(mod)
    scopes += [builtins, types, typing]
    for scope in scopes:
        found = _getattr_path(scope, parts)
        if found is not _MISSING:
            return found
    prefixes = [""]
    if module:
        above = module.split(".")
        prefixes += [".".join(above[:i]) + "." for i in range(len(above) - 1, 0, -1)]
    for prefix in prefixes:
        full = (prefix + target).split(".")
        for i in range(len(full), 0, -1):
            try:
                mod = importlib.import_module(".".join(full[:i]))
            except Exception:  # noqa: BLE001 - any failure to import means "not this prefix"
                continue
            found = _getattr_path(mod, full[i:])
            if found is not _MISSING:
                return found
            break
    return _MISSING


def real_name(obj) -> str | None:
    """``module.qualname`` of a module, class or function; None for other values."""
    if inspect.ismodule(obj):
        return obj.__name__
    home, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{home}.{qualname}" if isinstance(home, str) and isinstance(qualname, str) else None


def _in_signature(node) -> bool:
    while node.parent is not None:
        node = node.parent
        if isinstance(node, addnodes.desc_signature):
            return True
    return False


def resolve_missing(app, env, node, contnode):
    """``missing-reference`` handler (see the module docstring)."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.").removesuffix("()")
    domain = env.get_domain("py")
    obj = lookup(target, node.get("py:module"), node.get("py:class"))
    if obj is _MISSING:
        matches = [name for name in domain.objects if name.endswith("." + target)]
        if len(matches) != 1:
            return contnode if _in_signature(node) else None
        qualified = matches[0]
    else:
        qualified = real_name(obj)
    if qualified:
        resolved = domain.resolve_any_xref(env, node["refdoc"], app.builder, qualified, node.copy(), contnode)
        if resolved:
            return resolved[0][1]
    return contnode


def setup(app):
    app.connect("missing-reference", resolve_missing)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
