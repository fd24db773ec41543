"""The README's install section agrees with the package (nothing but PyPI can be reached here, so the
recipes' commands are checked, not run; ``tests/test_packaging.py`` installs the built wheel): the main
recipe needs PyPI alone and names only extras the package has; the optional CPU-only recipe takes torch
from PyPI's CPU index only, in a version the package accepts, then installs the package as the main
recipe does, which has no reason to replace that torch; the figures quoted are the packaging record's."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
INDEX_OPTIONS = ("--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--no-index")


def install_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]


def recipes() -> tuple[list[list[str]], list[list[str]]]:
    """The ``pip install`` commands (their words after ``pip install``) of the install section's first
    block and of its block that names PyTorch's CPU index."""
    blocks = [b.split("```")[0] for b in install_section().split("```sh\n")[1:]]

    def installs(block: str) -> list[list[str]]:
        steps = [shlex.split(line, comments=True) for line in block.splitlines()]
        return [w[2:] for w in steps if w[:2] == ["pip", "install"]]

    return installs(blocks[0]), installs(next(b for b in blocks if CPU_INDEX in b))


def pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def requirements() -> list[Requirement]:
    return [Requirement(r) for r in pyproject()["dependencies"]]


def test_the_main_recipe_needs_pypi_alone_and_names_real_extras():
    main, _ = recipes()
    assert ["."] in main, "the core install step"
    extras = set(pyproject()["optional-dependencies"])
    for step in main:
        assert not any(w.startswith(INDEX_OPTIONS) for w in step), f"another index in {step}"
        target = [w for w in step if not w.startswith("-")]
        assert len(target) == 1 and re.fullmatch(r"\.(\[[a-z,]+\])?", target[0]), step
        named = set(target[0][2:-1].split(",")) if "[" in target[0] else set()
        assert named <= extras, f"{step}: no such extra {named - extras}"
    assert "python -m build" in install_section(), "the section says how to build the sdist and the wheel"


def test_the_cpu_recipe_is_optional_torch_first_from_the_cpu_index_only():
    main, cpu = recipes()
    section = install_section()
    assert "Optional" in section.split(CPU_INDEX)[0].rsplit("```", 1)[0].strip().rsplit("\n\n", 1)[-1], \
        "the paragraph before the CPU-only recipe says it is optional"
    torch_step, package_step = cpu
    assert torch_step[0] == "torch" and torch_step[1:] == ["--index-url", CPU_INDEX]
    assert not any(w.startswith("--extra-index-url") for step in cpu for w in step), \
        "an extra index would let pip take CUDA wheels from PyPI"
    assert package_step == main[0], "the package is then installed as the main recipe does"


def test_the_package_accepts_the_torch_the_recipe_installs():
    torch = [r for r in requirements() if r.name == "torch"]
    assert len(torch) == 1 and torch[0].marker is None
    spec = torch[0].specifier
    assert not any(s.operator in ("==", "===") for s in spec), "a pin would make pip replace the CPU build"
    assert spec.contains(Version("2.13.0")) and spec.contains(Version("2.20.0"))
    makefile = (ROOT / "Makefile").read_text()
    tested = makefile.split("torch==")[1].split()[0]
    assert spec.contains(Version(tested)), f"the Makefile's tested torch {tested} is outside {spec}"


def test_no_requirement_pulls_cuda_or_triton_on_a_cpu_machine():
    linux = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    for r in requirements():
        if r.marker is None or r.marker.evaluate(linux):
            assert not r.name.startswith(("nvidia-", "cupy", "faiss-gpu", "triton")), r
            assert "cu1" not in r.name, r


def test_the_quoted_install_figures_are_the_packaging_records():
    """Every size (GB) and duration (s) of a sentence on a venv in the install section is in
    docs/decisions/packaging.md."""
    record = (ROOT / "docs" / "decisions" / "packaging.md").read_text(encoding="utf-8")
    sentences = [s for s in re.split(r"(?<=\.)\s+", install_section()) if "venv" in s]
    figures = [f for s in sentences for f in re.findall(r"\b\d+(?:\.\d+)? (?:GB|s)\b", s)]
    assert len(figures) >= 4, figures
    missing = [f for f in figures if f not in record]
    assert not missing, f"figures quoted in the README but not in the packaging record: {missing}"
