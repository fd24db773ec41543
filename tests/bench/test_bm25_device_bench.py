"""bench/bench_bm25_device.py cannot rot: on CPU tensors over a small generated corpus, the device's
BM25 top-k and scores at candidates equal the host's (its exit status says so)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_bm25_device_bench(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_bm25_device", BENCH / "bench_bm25_device.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert module.main(["--scale", "3000", "--batch", "16", "--repeats", "1", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("yes") == 2 and "NO" not in out
