"""hopgraph installs wherever Python and torch do, and its CPU path never needs Triton.

The metadata checks read the *installed* distribution (what pip resolves), not pyproject.toml;
the import checks run in a fresh interpreter so that no other test's imports count.
"""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest
from packaging.requirements import Requirement

#: marker environments of platforms Triton publishes no wheels for
NO_TRITON_PLATFORMS = [
    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "x86_64"},
    {"sys_platform": "win32", "platform_system": "Windows", "platform_machine": "AMD64"},
]
LINUX = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}


def _requirements() -> list[Requirement]:
    return [Requirement(r) for r in importlib.metadata.requires("hopgraph") or []]


def _installed_by(req: Requirement, env: dict[str, str], extra: str = "") -> bool:
    """Whether ``pip install hopgraph[extra]`` installs ``req`` on the platform ``env``."""
    return req.marker is None or req.marker.evaluate({**env, "extra": extra})


def test_installed_metadata_has_no_torch_pin_and_no_unconditional_triton() -> None:
    reqs = _requirements()
    torch = [r for r in reqs if r.name == "torch"]
    assert torch, "torch is a runtime requirement"
    for r in torch:
        assert not any(s.operator in ("==", "===") for s in r.specifier), f"torch is pinned: {r}"
        assert r.specifier.contains("2.13.0") and r.specifier.contains("2.20.0"), f"torch range too narrow: {r}"
    triton = [r for r in reqs if r.name == "triton"]
    assert triton, "triton is required where it exists (Linux) and by the [gpu] extra"
    assert all(r.marker is not None for r in triton), f"unconditional triton requirement: {triton}"
    for env in NO_TRITON_PLATFORMS:
        assert not [r for r in triton if _installed_by(r, env)], f"triton required on {env}"
    assert [r for r in triton if _installed_by(r, LINUX)], "triton should be installed on Linux x86_64"
    assert [r for r in triton if _installed_by(r, NO_TRITON_PLATFORMS[0], "gpu")
            or _installed_by(r, LINUX, "gpu")], "the [gpu] extra should bring triton"


def test_version_matches_the_installed_metadata() -> None:
    import hopgraph

    assert hopgraph.__version__ == importlib.metadata.version("hopgraph")


# records every hopgraph file that imports triton (the innermost frame outside importlib); with
# BLOCK, the import then fails as it does where triton is not installed (macOS, Windows)
_WATCH = textwrap.dedent("""
    import os, sys, traceback
    IMPORTERS = []
    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name == "triton":
                frames = [f.filename for f in traceback.extract_stack()
                          if "importlib" not in f.filename and not f.filename.startswith("<")]
                roots = [os.path.dirname(sys.modules[m].__file__) + os.sep
                         for m in ("hopgraph", "hopgraph.engine", "hopgraph.kernels") if m in sys.modules]
                if frames and any(frames[-1].startswith(r) for r in roots):
                    IMPORTERS.append(frames[-1])
                if BLOCK:
                    raise ModuleNotFoundError("No module named 'triton' (blocked by the test)", name=name)
            return None
    sys.meta_path.insert(0, Watch())
""")

_BUILD_AND_SEARCH = textwrap.dedent("""
    import hopgraph, hopgraph.kernels
    from hopgraph import Index
    from hopgraph.demo import DEMO_QUESTIONS, demo_corpus

    def search_all(index, names):
        for name in names:
            hits = index.search(DEMO_QUESTIONS[:2], pipeline=name, k=3)
            assert len(hits) == 2 and all(len(h) == 3 for h in hits), name

    def our_triton_modules():
        return sorted(m for m in sys.modules if m.startswith("hopgraph") and "triton" in m)

    names = [n for n in hopgraph.pipeline_names() if n != "dmar"]
    index = Index.build(demo_corpus(), embedder="hashing-64", device="cpu", pipelines=names, progress=False)
    search_all(index, names)
    assert "triton" not in sys.modules, "triton imported by a CPU build and search"
    assert not our_triton_modules(), our_triton_modules()
    # DMAR trains its GNN with torch.optim, whose torch._dynamo probes for triton itself; hopgraph may not
    index.pipeline("dmar")
    search_all(index, ["dmar"])
    assert not our_triton_modules(), our_triton_modules()
    assert not IMPORTERS, "triton imported by hopgraph: " + repr(IMPORTERS)
    print("ok", len(names) + 1)
""")


def _run(block: bool) -> str:
    script = f"BLOCK = {block}\n" + _WATCH + _BUILD_AND_SEARCH
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_cpu_build_and_search_never_import_triton() -> None:
    """Every pipeline on the demo corpus with a hashing embedder: no hopgraph module imports triton."""
    assert _run(block=False).startswith("ok")


@pytest.mark.slow
def test_cpu_build_and_search_without_triton_installed() -> None:
    """Where Triton does not exist, importing it fails, and every pipeline still builds and searches."""
    assert _run(block=True).startswith("ok")
