"""The README's CPU-only install recipe agrees with the package (nothing can be downloaded here, so the
recipe's commands are checked, not run): torch's CPU build comes first, from PyTorch's CPU index
only, in a version the package accepts, and ``pip install hopgraph`` then has no reason to replace it."""
from __future__ import annotations

import shlex
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def recipe() -> list[list[str]]:
    """The ``pip install`` commands of the README block that names PyTorch's CPU index, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = text.split("```sh\n")[1:]
    block = next(b.split("```")[0] for b in blocks if CPU_INDEX in b)
    out = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] == ["pip", "install"]:
            out.append(words[2:])
    return out


def requirements() -> list[Requirement]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(ROOT / "pyproject.toml", "rb") as f:
        return [Requirement(r) for r in tomllib.load(f)["project"]["dependencies"]]


def test_torch_cpu_comes_first_from_the_cpu_index_only():
    torch_step, hopgraph_step = recipe()
    assert torch_step[0] == "torch" and torch_step[1:] == ["--index-url", CPU_INDEX]
    assert not any(w.startswith("--extra-index-url") for step in recipe() for w in step), \
        "an extra index would let pip take CUDA wheels from PyPI"
    assert hopgraph_step == ["hopgraph"]


def test_the_package_accepts_the_torch_the_recipe_installs():
    torch = [r for r in requirements() if r.name == "torch"]
    assert len(torch) == 1 and torch[0].marker is None
    spec = torch[0].specifier
    assert not any(s.operator in ("==", "===") for s in spec), "a pin would make pip replace the CPU build"
    assert spec.contains(Version("2.13.0")) and spec.contains(Version("2.20.0"))
    makefile = (ROOT / "Makefile").read_text()
    tested = makefile.split("torch==")[1].split()[0]
    assert spec.contains(Version(tested)), f"the Makefile's tested torch {tested} is outside {spec}"


def test_no_requirement_pulls_cuda_on_a_cpu_machine():
    linux = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    for r in requirements():
        if r.marker is None or r.marker.evaluate(linux):
            assert not r.name.startswith(("nvidia-", "cupy", "faiss-gpu")), r
            assert "cu1" not in r.name, r
