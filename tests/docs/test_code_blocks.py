"""The code blocks of README.md and docs/ run as written.

**Marked blocks run.** A ```` ```python ```` or ```` ```sh ```` block whose previous line is
``<!-- readme-test -->`` (invisible on GitHub and in the built docs) runs in a fresh interpreter
(Python) or ``bash -e`` (shell, with the interpreter's ``bin`` folder first on ``PATH``, as after
``. .venv/bin/activate``) whose working directory holds only ``bindings/data`` (a link to the
checkout's), so relative paths resolve as from the repository root and whatever a block writes
(``my-index``) lands in a temporary folder. A Python block that cannot run here (it needs a running
server or the benchmark data) says so on its previous line with ``<!-- untested: REASON -->``;
every Python block carries one of the two markers.

**Every shell block is checked.** Running the unmarked shell blocks would take minutes to hours
(they index benchmark data), so the cheap checks are made instead: every ``hopgraph ...`` command
line parses with the CLI's own parser (the sub-command and every option exist; an option written
as optional, ``[--upsert]``, is refused: copied as written it would be an argument), and every
repository file a page names (``bench/...py``, ``engine/...py`` ...) exists.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- readme-test -->"
UNTESTED = re.compile(r"<!-- untested: \S.* -->")
#: the pages whose blocks are checked: README.md and every Markdown page of docs/
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                    if not {"_build", "api"} & set(p.relative_to(ROOT / "docs").parts))]
#: marked blocks today (README's quickstart and the docs'); fewer means a marker or a fence was lost
MIN_BLOCKS = {"README.md": 1, "docs": 6}


@dataclass(frozen=True)
class Block:
    source: str  # page, relative to the repository root
    line: int    # 1-based line of the opening fence
    lang: str
    code: str
    marker: str  # the line before the fence


def code_blocks(text: str, source: str = "README.md") -> list[Block]:
    """Every fenced block of ``text``; ValueError naming the line of :data:`MARK` not followed by a
    ```` ```python ```` fence, or of a fence that is never closed."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        line = lines[i].strip()
        if line == MARK and not (i + 1 < len(lines) and lines[i + 1].strip() in ("```python", "```sh")):
            raise ValueError(f"{source} line {i + 1}: {MARK} must be followed by a ```python or ```sh fence")
        if line.startswith("```") and line != "```":
            for j in range(i + 1, len(lines)):
                if lines[j].strip() == "```":
                    marker = lines[i - 1].strip() if i else ""
                    blocks.append(Block(source, i + 1, line[3:].strip(), "\n".join(lines[i + 1:j]) + "\n", marker))
                    i = j
                    break
            else:
                raise ValueError(f"{source} line {i + 1}: the {line} block is never closed")
        i += 1
    return blocks


def marked_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The Python and shell blocks preceded by :data:`MARK`."""
    return [b for b in code_blocks(text, source) if b.lang in ("python", "sh") and b.marker == MARK]


def run_block(block: Block, cwd: Path, timeout: float = 180.0) -> subprocess.CompletedProcess:
    """Run ``block`` in a fresh interpreter in ``cwd`` (with ``bindings/data`` linked there)."""
    data = cwd / "bindings" / "data"
    if not data.exists():
        data.parent.mkdir(parents=True, exist_ok=True)
        data.symlink_to(ROOT / "bindings" / "data", target_is_directory=True)
    env = {**os.environ, "HOPGRAPH_CACHE_DIR": str(cwd / "cache"), "PYTHONUNBUFFERED": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    cmd = [sys.executable, "-c", block.code] if block.lang == "python" else ["bash", "-e", "-o", "pipefail", "-c",
                                                                             block.code]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


BLOCKS = [b for page in PAGES for b in code_blocks(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
MARKED = [b for b in BLOCKS if b.lang in ("python", "sh") and b.marker == MARK]
SHELL = [b for b in BLOCKS if b.lang in ("sh", "bash", "shell", "console")]


def test_every_python_block_is_marked():
    unmarked = [f"{b.source}:{b.line}" for b in PYTHON if b.marker != MARK and not UNTESTED.fullmatch(b.marker)]
    assert not unmarked, f"Python blocks with neither {MARK} nor <!-- untested: REASON -->: {unmarked}"
    readme = sum(b.source == "README.md" for b in MARKED)
    assert readme >= MIN_BLOCKS["README.md"], f"only {readme} README blocks are marked {MARK}"
    assert len(MARKED) - readme >= MIN_BLOCKS["docs"], f"only {len(MARKED) - readme} docs/ blocks are marked {MARK}"
    for block in MARKED:
        assert block.lang != "python" or "import " in block.code, \
            f"{block.source} line {block.line}: a tested block must import what it uses"
    shell = {b.source for b in MARKED if b.lang == "sh"}
    assert {"README.md", "docs/live-indexes.md", "docs/cli.md"} <= shell, f"marked shell blocks only in {shell}"


@pytest.mark.slow
@pytest.mark.parametrize("block", MARKED, ids=[f"{b.source}:{b.line}" for b in MARKED])
def test_python_block_runs(block, tmp_path):
    r = run_block(block, tmp_path)
    assert r.returncode == 0, f"{block.source} block at line {block.line} failed:\n{r.stderr[-3000:]}"


def test_a_raising_block_fails_and_markers_are_checked(tmp_path):
    text = f"intro\n{MARK}\n```python\nimport sys\nraise SystemExit('boom')\n```\n{MARK}\n```python\nimport os\n```\n"
    bad, good = marked_blocks(text)
    assert (bad.line, good.line) == (3, 8)
    r = run_block(bad, tmp_path)
    assert r.returncode != 0 and "boom" in r.stderr
    assert run_block(good, tmp_path).returncode == 0
    sh_ok, sh_bad = marked_blocks(f"{MARK}\n```sh\nhopgraph --version\n```\n{MARK}\n```sh\nfalse\necho after\n```\n")
    assert run_block(sh_ok, tmp_path).stdout.startswith("hopgraph ")  # the venv's hopgraph is on PATH
    r = run_block(sh_bad, tmp_path)
    assert r.returncode != 0 and "after" not in r.stdout  # a failing line fails the block
    with pytest.raises(ValueError, match=re.escape("README.md line 1: <!-- readme-test --> must be followed")):
        marked_blocks(f"{MARK}\n```bash\nls\n```\n")
    with pytest.raises(ValueError, match="line 2: the ```python block is never closed"):
        marked_blocks(f"{MARK}\n```python\nimport os\n")


# ---------------------------------------------------------------------------------------------------
# Shell blocks: hopgraph command lines parse; named repository files exist.

def hopgraph_commands(code: str) -> list[str]:
    """The ``hopgraph ...`` command lines of a shell block: continuations joined, comments and
    whatever follows a ``&&``, ``|``, ``>``, ``;`` or a trailing ``&`` cut off (an ``[--option]``
    written as optional stays as written, and fails to parse)."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        for part in re.split(r"&&|;|\|\|", line):
            part = re.split(r"\s#|\s\||\s>|\s&(?:\s|$)", " " + part.strip())[0].strip()
            part = re.sub(r"^(?:timeout (?:\S+ )*?)?(?:\S*python3? -m )?(?=hopgraph )", "", part)
            if part.startswith("hopgraph "):
                commands.append(" ".join(part.split()))
    return commands


def parse_cli(command: str) -> str | None:
    """None when ``command`` parses with ``hopgraph``'s own parser, else argparse's message."""
    import contextlib
    import io

    from hopgraph.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1]
    return None


COMMANDS = [(b, c) for b in SHELL for c in hopgraph_commands(b.code)]


def test_hopgraph_command_lines_parse():
    assert len(COMMANDS) >= 20, f"only {len(COMMANDS)} hopgraph command lines found in the docs"
    bad = [f"{b.source}:{b.line}: {c}\n    {msg}" for b, c in COMMANDS if (msg := parse_cli(c))]
    assert not bad, "hopgraph command lines the CLI refuses:\n" + "\n".join(bad)


def test_the_command_checks_can_fail():
    assert hopgraph_commands("hopgraph search idx 'q' --k 5 \\\n  --pipeline dense  # c\n") == [
        "hopgraph search idx 'q' --k 5 --pipeline dense"]
    assert hopgraph_commands("x && hopgraph add i c.jsonl --upsert > log &") == ["hopgraph add i c.jsonl --upsert"]
    assert "unrecognized arguments: [--upsert]" in parse_cli("hopgraph add i c.jsonl [--upsert]")
    assert hopgraph_commands(".venv/bin/python -m hopgraph eval d\ntimeout -s INT 20 hopgraph index c") == [
        "hopgraph eval d", "hopgraph index c"]
    assert parse_cli("hopgraph search idx q --k 5") is None
    assert "--no-such-option" in parse_cli("hopgraph search idx q --no-such-option")
    assert "invalid choice" in parse_cli("hopgraph no-such-command")


PATH = re.compile(r"(?<![\w./-])((?:bench|engine|kernels|bindings|tests)/[\w./-]*\w\.(?:py|jsonl|json|txt|md))\b")


def named_paths(text: str) -> set[str]:
    """Repository files named in ``text`` (placeholders such as ``kernels/NAME.py`` and globs skipped)."""
    return {p for p in PATH.findall(text) if not re.search(r"(?:^|/|_)[A-Z]{2,}(?:[/_.]|$)", p)}


def test_named_repository_files_exist():
    missing = [f"{page.relative_to(ROOT)}: {p}" for page in PAGES
               for p in sorted(named_paths(page.read_text(encoding="utf-8"))) if not (ROOT / p).exists()]
    assert not missing, "files named in the docs that the repository does not have:\n" + "\n".join(missing)
    assert named_paths("see `bench/bench_ppr.py` and kernels/NAME_triton.py, tests/x*.py") == {"bench/bench_ppr.py"}
