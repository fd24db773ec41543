"""Logging: the ``hopgraph`` logger tree, one-line records and warnings on the command line
(``--log-level``), no progress bars in the server's log."""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import warnings

import pytest

from hopgraph import logs
from hopgraph.cli import main


@pytest.fixture
def idx(tmp_path, demo_corpus):
    corpus = tmp_path / "c.jsonl"
    with open(corpus, "w") as f:
        for i, (pid, text) in enumerate(zip(demo_corpus.ids, demo_corpus.texts)):
            f.write(json.dumps({"id": pid, "text": text, "year": 2000 + i % 3}) + "\n")
    out = tmp_path / "idx"
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-32", "--pipelines", "bm25", "-q"]) == 0
    return out


def test_the_library_logs_under_hopgraph_with_a_null_handler():
    root = logging.getLogger("hopgraph")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)
    from hopgraph import evaluate
    from hopgraph.engine.ingest import readers  # noqa: F401

    assert evaluate.log.name == "hopgraph.evaluate" and evaluate.log.parent is root


def test_warnings_and_records_are_one_line_each_on_the_command_line(idx, capsys):
    assert main(["search", str(idx), "bridge", "--pipeline", "bm25", "--where", "year>3000", "-q"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ['hopgraph search: warning: the filter where={"year": {"$gt": 3000}} passes no passage of the '
                   'index: no results']
    assert main(["search", str(idx), "bridge", "--pipeline", "bm25", "--where", "year>3000", "-q",
                 "--log-level", "error"]) == 0
    assert capsys.readouterr().err.strip() == ""
    logs.configure("info", prefix="hopgraph test")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("two\nlines", RuntimeWarning)
        logging.getLogger("hopgraph.x").info("a\nb")
    finally:
        logs.reset()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("hopgraph test: warning: RuntimeWarning: two lines (")
    assert err[1] == "hopgraph test: info: a b"
    with pytest.raises(SystemExit):
        main(["search", str(idx), "q", "--log-level", "loud"])


def test_the_server_log_has_records_and_no_progress_bars(idx):
    cmd = [sys.executable, "-m", "hopgraph", "serve", str(idx), "--port", "0", "--log-level", "info"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        assert re.search(r"listening on http://127\.0\.0\.1:\d+", line), line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "hopgraph serve: info: loaded" in err
    assert "\r" not in err and "it/s" not in err and "%|" not in err, err
