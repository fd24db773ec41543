"""Sphinx configuration: the Markdown pages of docs/ (MyST) and the API reference generated from
the docstrings of every public module of ``hopgraph`` (``_ext/apiref.py``), every Python
cross-reference checked (``_ext/xref.py``).

    make docs      # = .venv/bin/python -m sphinx -W --keep-going -n -b html docs docs/_build/html

``tests/docs/test_docs_build.py`` runs the same build (warnings as errors) inside ``make test``.
Why Sphinx rather than mkdocs: docs/decisions/docs-sphinx.md.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

# Optional dependencies imported once here, before autodoc imports the modules that use them:
# FastAPI's and LlamaIndex's pydantic models fail to build when first imported from inside autodoc.
for _name in ("fastapi", "llama_index.core", "langchain_core.retrievers"):
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

import hopgraph  # noqa: E402  (the installed package: make install / pip install -e ".[dev]")

project = "hopgraph"
author = copyright = "hopgraph developers"
release = version = hopgraph.__version__

extensions = ["sphinx.ext.autodoc", "myst_parser", "apiref", "xref", "plainbars"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
html_theme = "alabaster"

myst_heading_anchors = 3          # [text](page.md#a-heading) links are checked like any other link
myst_enable_extensions = ["colon_fence"]

nitpicky = True                   # -n: every reference checked (unresolvable names: _ext/xref.py)
autodoc_member_order = "bysource"
autodoc_typehints_format = "short"
autodoc_inherit_docstrings = False   # a method without a docstring does not borrow torch's or pydantic's
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
