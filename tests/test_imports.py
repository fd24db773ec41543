"""What importing a part of hopgraph loads, each checked in a fresh interpreter: the façade
(``hopgraph/__init__``) imports its public names on first access, so ``hopgraph.kernels`` loads
without the façade, faiss or bm25s, ``import hopgraph`` loads nothing else, and ``hopgraph --help``
loads neither torch nor numpy."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: loaded by the façade, the components or the pipelines, never by the kernels
FACADE = ("hopgraph.index", "hopgraph.client", "hopgraph.engine.components", "hopgraph.engine.pipelines",
          "hopgraph.engine.embedders", "faiss", "bm25s", "sentence_transformers", "httpx")


def loaded_after(code: str) -> set[str]:
    """The modules loaded in a fresh interpreter after running ``code``."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_kernels_load_without_the_facade():
    loaded = loaded_after("import hopgraph.kernels.csr\nimport hopgraph.kernels")
    assert "hopgraph.kernels.csr" in loaded
    assert not loaded & set(FACADE), sorted(loaded & set(FACADE))
    assert not [m for m in loaded if m.startswith("hopgraph.") and not m.startswith("hopgraph.kernels")], \
        sorted(m for m in loaded if m.startswith("hopgraph."))


def test_import_hopgraph_loads_nothing_else():
    loaded = loaded_after("import hopgraph")
    assert not [m for m in loaded if m.startswith("hopgraph.")], sorted(m for m in loaded if m.startswith("hopgraph."))
    assert not {"torch", "numpy", "faiss"} & loaded


def test_cli_help_loads_neither_torch_nor_numpy():
    loaded = loaded_after("import contextlib, io\nfrom hopgraph.cli import main\n"
                          "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                          "    main(['--help'])")
    assert "hopgraph.cli" in loaded
    assert not {"torch", "numpy", "faiss", "hopgraph.kernels", "hopgraph.index"} & loaded, \
        sorted({"torch", "numpy", "faiss", "hopgraph.kernels", "hopgraph.index"} & loaded)


@pytest.mark.slow
def test_the_installed_command_prints_its_help():
    proc = subprocess.run([str(Path(sys.executable).parent / "hopgraph"), "--help"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "usage: hopgraph" in proc.stdout and "search" in proc.stdout, proc.stderr


def test_every_public_name_resolves_and_is_declared_for_type_checkers():
    import hopgraph

    for name in hopgraph.__all__:
        assert getattr(hopgraph, name) is not None, name
    assert set(hopgraph.__all__) <= set(dir(hopgraph))
    assert hopgraph.G3RAG is hopgraph.pipeline_class("g3rag") and hopgraph.Index.__name__ == "Index"
    with pytest.raises(AttributeError, match="no_such_name"):
        hopgraph.no_such_name  # noqa: B018
    # the TYPE_CHECKING block names exactly the lazily imported names
    tree = ast.parse((ROOT / "bindings" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    declared = {a.asname or a.name for n in block.body for a in n.names}
    assert declared == set(hopgraph.__all__) | {"pipeline_class"}, declared ^ set(hopgraph.__all__)
