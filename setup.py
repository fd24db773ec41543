"""Package layout: one import name, ``hopgraph``, from three source folders (setuptools package-dir).

``bindings/`` is ``hopgraph``, ``engine/`` is ``hopgraph.engine``, ``kernels/`` is ``hopgraph.kernels``;
every folder below them with an ``__init__.py`` is a subpackage. All other metadata is in pyproject.toml.
"""
from pathlib import Path

from setuptools import setup

ROOTS = {"hopgraph": "bindings", "hopgraph.engine": "engine", "hopgraph.kernels": "kernels"}


def package_dirs(root: Path = Path(".")) -> dict[str, str]:
    """``{package name: folder relative to root}`` for every package under the three roots."""
    out = {}
    for name, folder in ROOTS.items():
        for init in sorted((root / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(root / folder).parts
            out[".".join((name, *parts))] = init.parent.relative_to(root).as_posix()
    return out


if __name__ == "__main__":
    PACKAGE_DIRS = package_dirs()
    setup(packages=list(PACKAGE_DIRS), package_dir=PACKAGE_DIRS)
