"""The documentation builds with warnings as errors: docs/*.md and the API reference generated from
every public module's docstrings, every Python cross-reference checked (``sphinx -W -n``).

Skipped only when the docs dependencies (the ``docs`` extra, part of ``dev``) are missing.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # whole Sphinx builds

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXT = DOCS / "_ext"


def sphinx_build(src: Path, out: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``sphinx -W --keep-going -n -q -b dummy`` (every reader, transform and reference check; no
    output written) into ``out``; a fresh environment each time."""
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "dummy",
           "-d", str(out / "doctrees"), *extra, str(src), str(out / "dummy")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_docs_build_without_warnings(tmp_path):
    r = sphinx_build(DOCS, tmp_path)
    assert r.returncode == 0, f"the docs build has warnings (run `make docs`):\n{r.stderr[-6000:]}"
    pages = {p.stem for p in (DOCS / "api").glob("*.rst")}
    for module in ("hopgraph", "hopgraph.engine", "hopgraph.kernels", "hopgraph.kernels.dispatch"):
        assert module in pages, f"no API reference page for {module}"


def _mini_project(tmp_path: Path, docstring: str) -> Path:
    """A one-module Sphinx project using the docs' own reference checks (``xref``, ``plainbars``)."""
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (tmp_path / "mini_mod.py").write_text(textwrap.dedent(f'''
        """{docstring}"""
        from pathlib import Path

        def _helper(): ...
        def public(path: Path) -> int:
            """Calls :func:`_helper`; see :class:`Path` and :func:`public`."""
            return 0
        '''), encoding="utf-8")
    (src / "conf.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(EXT)!r}]
        extensions = ["sphinx.ext.autodoc", "xref", "plainbars"]
        nitpicky = True
        """), encoding="utf-8")
    (src / "index.rst").write_text("Mini\n====\n\n.. automodule:: mini_mod\n   :members:\n", encoding="utf-8")
    return src


def test_a_broken_docstring_reference_fails_the_build(tmp_path):
    ok = _mini_project(tmp_path / "ok", "Sizes as \\|g\\| and |g|; :func:`public`, :func:`_helper`, :mod:`json`.")
    r = sphinx_build(ok, tmp_path / "ok")
    assert r.returncode == 0, r.stderr
    bad = _mini_project(tmp_path / "bad", "See :func:`no_such_function`.")
    r = sphinx_build(bad, tmp_path / "bad")
    assert r.returncode != 0 and "no_such_function" in r.stderr, r.stderr
