"""Every public function, class and method of ``engine/``, ``kernels/`` and ``bindings/`` has a docstring.

Public: a module-level function or class, or a method, property or nested class of a public class,
whose name has no leading underscore (dunder methods included in that rule: they are not checked),
defined in a module no part of whose dotted name starts with an underscore (``__init__`` modules
are public). Functions nested in functions are implementation, not checked. A method without a
docstring passes when it overrides a documented method of a hopgraph base class (it keeps that
contract; third-party bases do not count, as the API reference does not borrow their docstrings).
A class's docstring is its own: the signature dataclasses and named tuples generate does not count.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

PACKAGES = ("hopgraph", "hopgraph.engine", "hopgraph.kernels")
def public_modules() -> list[str]:
    """Every module under :data:`PACKAGES` whose dotted name has no ``_``-prefixed part."""
    names = set(PACKAGES)
    for package in PACKAGES:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.add(info.name)
    return sorted(names)


def own_class_doc(cls: type) -> str | None:
    """``cls``'s own docstring; None for none or the signature a dataclass / named tuple generates."""
    doc = cls.__dict__.get("__doc__")
    if not doc or not doc.strip() or doc.startswith(f"{cls.__name__}("):
        return None
    return doc


def member_function(member: object):
    """The function behind a class member (method, classmethod, staticmethod, property), or None."""
    if isinstance(member, (classmethod, staticmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    if inspect.isfunction(member):
        return member
    return None


def inherits_a_contract(cls: type, name: str) -> bool:
    """A hopgraph base class of ``cls`` documents ``name``."""
    for base in cls.__mro__[1:]:
        if name in vars(base) and base.__module__.split(".")[0] == "hopgraph":
            fn = member_function(vars(base)[name])
            doc = (fn.__doc__ if fn is not None else None) or (vars(base)[name].__doc__ if isinstance(
                vars(base)[name], type) else None)
            if doc and doc.strip():
                return True
    return False


def undocumented_in_class(cls: type, where: str) -> list[str]:
    missing = [] if own_class_doc(cls) else [f"{where} (class)"]
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if inspect.isclass(member) and member.__qualname__.startswith(cls.__qualname__ + "."):
            missing += undocumented_in_class(member, f"{where}.{name}")
            continue
        fn = member_function(member)
        if fn is None or getattr(fn, "__module__", None) != cls.__module__:
            continue
        if not (fn.__doc__ or "").strip() and not inherits_a_contract(cls, name):
            missing.append(f"{where}.{name}")
    return missing


def undocumented(module_name: str) -> list[str]:
    """``module:qualname`` of each public function, class and method of ``module_name`` without a docstring."""
    module = importlib.import_module(module_name)
    missing = []
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
            continue
        where = f"{module_name}:{name}"
        if inspect.isclass(obj):
            missing += undocumented_in_class(obj, where)
        elif isinstance(obj, types.FunctionType) and not (obj.__doc__ or "").strip():
            missing.append(where)
    return missing


def test_every_public_function_class_and_method_has_a_docstring():
    missing = [m for name in public_modules() for m in undocumented(name)]
    assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)


def test_the_check_finds_what_it_should():
    class Base:
        def documented(self):
            """A contract."""

    class Child(Base):
        def documented(self):
            pass

        def bare(self):
            pass

        @property
        def size(self):
            return 0

    Base.__module__ = Child.__module__ = "hopgraph.fake"
    for fn in (Child.documented, Child.bare, Child.size.fget):
        fn.__module__ = "hopgraph.fake"
    assert undocumented_in_class(Child, "m:Child") == ["m:Child (class)", "m:Child.bare", "m:Child.size"]
    assert undocumented("hopgraph.kernels.csr") == []
