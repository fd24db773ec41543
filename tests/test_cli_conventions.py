"""Issue 12: CLI conventions — ``--version``, help with choices and defaults, names and parameters
checked before any work, ``search --k`` / ``eval --ks``, ``eval --json`` standard errors, the
platform cache directory, and hopgraph's own progress bars (bm25s's folded in)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hopgraph.cli import main

BM25S_BARS = ("Split strings", "Stem Tokens", "Count Tokens", "Compute Scores", "Create Vocab", "BM25S",
              "Reconstructing token strings")


def test_bm25_progress_is_one_hopgraph_bar_per_stage(demo_corpus, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    demo_corpus.write_jsonl(corpus)
    assert main(["index", str(corpus), "--out", str(tmp_path / "i"), "--embedder", "hashing-16",
                 "--pipelines", "bm25"]) == 0
    err = capsys.readouterr().err
    bars = {line.split(":")[0] + (":" + line.split(":")[1] if line.startswith("bm25:") else "")
            for line in re.split(r"[\r\n]+", err) if "%|" in line}
    assert bars == {"embed", "bm25: tokenize", "bm25: index"}, bars
    assert not [b for b in BM25S_BARS if b in err], err
    assert main(["index", str(corpus), "--out", str(tmp_path / "j"), "--embedder", "hashing-16",
                 "--pipelines", "bm25", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
