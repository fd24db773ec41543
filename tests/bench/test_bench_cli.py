"""``hopgraph bench``: every table group at a tiny ``--scale`` writes the JSON
report (structure, positive finite figures, date and load average per table) and prints each
table; bad input is one line without a traceback. Sizes are tiny: this checks the command,
not speed."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from suite import GROUPS, QUICK
from hopgraph.cli import main

TABLES = {"gain_knn", "ppr_ring", "ppr_symmetric", "sparse_diffusion", "cold_start", "build", "queries"}


def numbers(rows: list[dict]) -> list[float]:
    return [v for r in rows for v in r.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]


@pytest.mark.slow
def test_bench_tiny_run_writes_every_table(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--scale", "0.005", "--embedder", "hashing-32", "--json", str(out),
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["mode"] == "quick" and report["scale"] == 0.005
    assert set(report["tables"]) == TABLES
    assert report["sizes"]["gain_n"] == max(40, round(QUICK.gain_n * 0.005))
    for name, t in report["tables"].items():
        assert t["title"] in printed and t["date"].endswith("Z")
        assert len(t["loadavg"]) == 3 and all(x >= 0 for x in t["loadavg"])
        assert t["rows"], name
        for r in t["rows"]:
            assert set(r) <= set(t["columns"]), (name, r)
        vals = numbers(t["rows"])
        assert vals and all(math.isfinite(v) and v > 0 for v in vals), (name, t["rows"])
    pipes = {r["pipeline"] for r in report["tables"]["queries"]["rows"]}
    assert {"dense", "bm25", "hybrid", "g3rag", "stitch", "dmar"} <= pipes
    sides = [r["side"] for r in report["tables"]["cold_start"]["rows"]]
    assert len(sides) == 2 and report["tables"]["cold_start"]["rows"][0]["fresh x faiss"] == 1.0
    assert "load average" in printed


@pytest.mark.slow
def test_bench_only_runs_the_named_groups(tmp_path):
    out = tmp_path / "k.json"
    assert main(["bench", "--scale", "0.005", "--only", "kernels", "--json", str(out), "-q"]) == 0
    assert set(json.loads(out.read_text())["tables"]) == {"gain_knn", "ppr_ring", "ppr_symmetric",
                                                          "sparse_diffusion"}
    assert GROUPS == ("kernels", "cold_start", "pipelines")


def test_bench_bad_input_is_one_line(tmp_path, capsys):
    for argv, words in ((["--scale", "0"], "--scale"), (["--scale", "nan"], "--scale"),
                        (["--only", "kernels,gpu"], "--only"), (["--data", str(tmp_path)], "corpus.jsonl"),
                        (["--json", str(tmp_path / "no" / "x.json")], "--json")):
        assert main(["bench", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("hopgraph bench: error:") and words in err, err
        assert "Traceback" not in err


def test_bench_without_a_checkout_is_one_line(tmp_path):
    """An installed wheel has no ``bench/``: ``hopgraph bench`` says it needs a source checkout in
    one line (exit status 2) and imports no benchmark code."""
    script = ("import sys\nfrom pathlib import Path\nfrom hopgraph.cli import main, other_commands\n"
              "other_commands.BENCH_DIR = Path(sys.argv[1])\nrc = main(['bench', '--quick'])\n"
              "assert 'suite' not in sys.modules\nsys.exit(rc)\n")
    absent = tmp_path / "site-packages" / "bench"
    proc = subprocess.run([sys.executable, "-c", script, str(absent)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("hopgraph bench: error: hopgraph bench runs from a source checkout")
    assert str(absent / "suite") in proc.stderr
