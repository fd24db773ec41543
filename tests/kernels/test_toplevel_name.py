"""Python started in the repository's root finds the ``kernels/`` folder as a top-level ``kernels``
module: it must hand that name to the installed distribution of that name (Hugging Face's
``kernels``, which transformers imports) when there is one."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_top_level_kernels_is_never_the_source_folder():
    code = "import kernels; print(kernels.__file__)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    try:
        importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:  # no other: the folder loads as it always did
        assert r.returncode == 0 and Path(r.stdout.strip()).resolve() == ROOT / "kernels" / "__init__.py", r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert not Path(r.stdout.strip()).resolve().is_relative_to(ROOT / "kernels")


def test_hopgraph_kernels_still_imports_as_the_package():
    r = subprocess.run([sys.executable, "-c", "import hopgraph.kernels as k; print(k.OPS[0], k.__name__)"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["density", "hopgraph.kernels"], r.stderr
