"""Small modules and functions: no module of engine/, kernels/ or bindings/ over 600 lines, no
function over 80 (read with ``ast``, decorators and docstrings included)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("engine", "kernels", "bindings")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 80


def modules() -> list[Path]:
    return sorted(p for folder in SOURCES for p in (ROOT / folder).rglob("*.py"))


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_no_function_is_over_80_lines():
    long = []
    for p in modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(ROOT)}:{node.name} ({node.end_lineno - start + 1} lines)")
    assert not long, long
