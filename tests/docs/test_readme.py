"""README.md's self-contained Python blocks run as written (issue 12, README item 8).

A block is tested when the line before its ```` ```python ```` fence is ``<!-- readme-test -->``
(invisible on GitHub). Each runs in a fresh interpreter whose working directory holds only
``bindings/data`` (a link to the checkout's), so the README's relative paths resolve as from the
repository root and whatever a block writes (``my-index``) lands in a temporary folder. Blocks that
need a running server or the benchmark data are not marked; they are checked by hand from a clone.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARK = "<!-- readme-test -->"
#: blocks marked in README.md today; fewer means a marker or a fence was lost
MIN_BLOCKS = 5


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    code: str


def marked_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The Python blocks preceded by :data:`MARK`; ValueError naming the line of a marker that is
    not followed by a ```` ```python ```` fence, or of a fence that is never closed."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```python":
            raise ValueError(f"{source} line {i + 1}: {MARK} must be followed by a ```python fence")
        for j in range(i + 2, len(lines)):
            if lines[j].strip() == "```":
                blocks.append(Block(i + 2, "\n".join(lines[i + 2:j]) + "\n"))
                break
        else:
            raise ValueError(f"{source} line {i + 2}: the ```python block is never closed")
    return blocks


def run_block(block: Block, cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run ``block`` in a fresh interpreter in ``cwd`` (with ``bindings/data`` linked there)."""
    data = cwd / "bindings" / "data"
    if not data.exists():
        data.parent.mkdir(parents=True, exist_ok=True)
        data.symlink_to(ROOT / "bindings" / "data", target_is_directory=True)
    env = {**os.environ, "HOPGRAPH_CACHE_DIR": str(cwd / "cache"), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-c", block.code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


BLOCKS = marked_blocks(README.read_text(encoding="utf-8"))


def test_readme_marks_its_blocks():
    assert len(BLOCKS) >= MIN_BLOCKS, f"only {len(BLOCKS)} README blocks are marked {MARK}"
    for block in BLOCKS:
        assert "import " in block.code, f"README.md line {block.line}: a tested block must import what it uses"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_block_runs(block, tmp_path):
    r = run_block(block, tmp_path)
    assert r.returncode == 0, f"README.md block at line {block.line} failed:\n{r.stderr[-3000:]}"


def test_a_raising_block_fails_and_markers_are_checked(tmp_path):
    text = f"intro\n{MARK}\n```python\nimport sys\nraise SystemExit('boom')\n```\n{MARK}\n```python\nimport os\n```\n"
    bad, good = marked_blocks(text)
    assert (bad.line, good.line) == (3, 8)
    r = run_block(bad, tmp_path)
    assert r.returncode != 0 and "boom" in r.stderr
    assert run_block(good, tmp_path).returncode == 0
    with pytest.raises(ValueError, match=re.escape("README.md line 1: <!-- readme-test --> must be followed")):
        marked_blocks(f"{MARK}\n```sh\nls\n```\n")
    with pytest.raises(ValueError, match="line 2: the ```python block is never closed"):
        marked_blocks(f"{MARK}\n```python\nimport os\n")
