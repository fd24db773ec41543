"""docs/architecture.md names only what the repository has: every path of its layout trees (the
unlabelled code blocks: indentation is nesting, a name ending in ``/`` a folder, the file names a
row's description lists are in that row's folder), every path written in backticks and every page
it links to exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
#: a placeholder (``NAME.py``, ``NAME_triton.py``) stands for many files and is not checked
PLACEHOLDER = re.compile(r"(?:^|_)[A-Z]{2,}(?:[_.]|$)")
NAME = re.compile(r"^[\w.-]+/?$")
FILE_IN_PROSE = re.compile(r"(?<![\w./-])([a-z_][\w]*\.py)\b")
ROOTED_IN_PROSE = re.compile(r"(?<![\w./-])((?:bench|bindings|docs|engine|kernels|tests)/[\w./-]*)")
TICKED = re.compile(r"`([\w./-]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """``(language, lines)`` of every fenced code block."""
    out, lang, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, lines = line[3:].strip(), []
            else:
                out.append((lang, lines))
                lang = None
        elif lang is not None:
            lines.append(line)
    return out


def tree_paths(lines: list[str]) -> set[str]:
    """The repository paths a layout tree names (relative to the root; folders end with ``/``)."""
    found: set[str] = set()
    stack: list[tuple[int, str]] = []  # (indent, folder) of the enclosing rows
    folder = ""                         # the folder of the last row (for its continuation lines)
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        field, _, description = line.strip().partition("  ")
        if indent >= 20 or not field:   # a continuation of the row above: its description
            names_in = folder
            description = line.strip()
        else:
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            names = [n.strip() for n in field.split(",") if n.strip()]
            for name in names:
                if NAME.match(name) and not PLACEHOLDER.search(name):
                    found.add(parent + name)
            folder = parent + names[0] if len(names) == 1 and names[0].endswith("/") else parent
            if folder != parent:
                stack.append((indent, folder))
            names_in = folder
        for name in FILE_IN_PROSE.findall(description):  # a file of the row's folder
            found.add(names_in + name)
        found |= {p.rstrip(".") for p in ROOTED_IN_PROSE.findall(description)}
    return found


def named_paths(text: str) -> set[str]:
    """Every path the page names: its layout trees, its backticked paths, its links."""
    found: set[str] = set()
    for lang, lines in fenced_blocks(text):
        if not lang:
            found |= tree_paths(lines)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in TICKED.findall(prose):
        if "/" in span or span.endswith((".py", ".md", ".toml")):
            found.add(span)
    for link in LINK.findall(prose):
        if "://" not in link:
            found.add(f"docs/{link}")
    return found


def test_every_path_named_by_the_architecture_page_exists():
    named = named_paths(PAGE.read_text(encoding="utf-8"))
    assert len(named) > 80, sorted(named)  # the layout tree was read
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, "docs/architecture.md names paths the repository does not have:\n" + "\n".join(missing)


def test_the_tree_reading_finds_what_it_should():
    tree = ["engine/                 hopgraph.engine",
            "  components/           the store: corpus.py,",
            "                        dense.py and ivf.py",
            "    extraction/         rules.py",
            "  filters.py, ranking.py",
            "kernels/                ops",
            "  NAME.py, NAME_triton.py  each op",
            "  csr.py                graphs; tests/kernels/, see engine/x/..."]
    assert tree_paths(tree) == {
        "engine/", "engine/components/", "engine/components/corpus.py", "engine/components/dense.py",
        "engine/components/ivf.py", "engine/components/extraction/", "engine/components/extraction/rules.py",
        "engine/filters.py", "engine/ranking.py", "kernels/", "kernels/csr.py", "tests/kernels/", "engine/x/"}
    assert named_paths("see `engine/graph.py` and [formats](formats.md#x), `hopgraph.kernels`") == {
        "engine/graph.py", "docs/formats.md"}
