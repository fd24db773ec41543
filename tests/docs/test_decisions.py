"""docs/decisions/: every record is listed in its index, every listed record exists, and no page of
the docs (or the README) cites an issue number."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions"
LINK = re.compile(r"\]\(([^)#\s]+\.md)\)")


def records() -> set[str]:
    return {p.name for p in DECISIONS.glob("*.md") if p.name != "index.md"}


def test_every_record_is_listed_and_every_listed_record_exists():
    listed = set(LINK.findall((DECISIONS / "index.md").read_text(encoding="utf-8")))
    missing = sorted(records() - listed)
    assert not missing, f"decision records not listed in docs/decisions/index.md (add a line for each): {missing}"
    dangling = sorted(listed - records())
    assert not dangling, f"docs/decisions/index.md lists records that do not exist: {dangling}"


def test_every_record_has_a_title():
    untitled = [name for name in sorted(records())
                if not (DECISIONS / name).read_text(encoding="utf-8").lstrip().startswith("# ")]
    assert not untitled, f"decision records that do not open with a '# title' line: {untitled}"


ISSUE = re.compile(r"\bissues?\s+#?\d+|\bissue-\d+|\B#\d{1,4}\b", re.IGNORECASE)


def test_no_issue_numbers_in_the_docs():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    found = [f"{p.relative_to(ROOT)}:{i}: {m.group(0)}" for p in pages
             if not {"_build", "api"} & set(p.relative_to(ROOT).parts)
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in ISSUE.finditer(line)]
    assert not found, "docs cite issue numbers (say what was decided, not which issue asked):\n" + "\n".join(found)
    assert ISSUE.search("see issue %d" % 14) and ISSUE.search("the issue-%d code" % 7) and not ISSUE.search("an issue with it")
