"""bench/transfers.py cannot rot: it runs on CPU tensors over the demo corpus, and its table says what
the device store saves — every search a batch of questions in and its top-k ids and scores out, no
graph, list, candidate or prior crossing in between — with the same ids as the index's own files."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
QUESTIONS = ["questions"]
BM25_QUERY = ["bm25 query postings"]
#: what a batch takes in with the device store, per search: the questions as each pipeline reads them
#: (embeddings, BM25's query side, the names matched or linked on the host); nothing else — no top
#: list, candidate, prior or graph — and the top-k ids and scores come out
QUESTIONS_IN = {"dense": QUESTIONS, "bm25": BM25_QUERY, "hybrid": QUESTIONS + BM25_QUERY,
                "g3rag": QUESTIONS + BM25_QUERY, "stitch": QUESTIONS + BM25_QUERY,
                "stitch localise=False": QUESTIONS + BM25_QUERY,
                "ppr_binary": QUESTIONS + ["matched (question, name) pairs"],
                "ppr_binary localise=False": QUESTIONS + ["matched (question, name) pairs"],
                "dmar": QUESTIONS + BM25_QUERY + ["linked (question, entity) pairs"],
                "hop": QUESTIONS + BM25_QUERY + ["linked (question, entity) pairs"]}


def test_transfers_table(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("transfers", BENCH / "transfers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert module.main(["--batch", "4", "--json", str(tmp_path / "t.json")]) == 0
    assert "kernel-boundary crossings" in capsys.readouterr().out
    rows = {r["pipeline"]: r for r in json.loads((tmp_path / "t.json").read_text())}
    assert all(r["ids_equal"] for r in rows.values()) and set(rows) >= {"g3rag", "stitch", "dmar"}
    assert set(rows) == set(QUESTIONS_IN)
    for name, row in rows.items():  # questions in, the top-k ids and scores out, no stored graph
        assert row["resident"]["names_in"] == QUESTIONS_IN[name], name
        assert row["resident"]["dtoh"] == 2 and row["resident"]["graph_bytes"] == 0, name
    for name in ("stitch localise=False", "ppr_binary localise=False"):  # own files: P copied per batch
        assert rows[name]["files"]["graph_bytes"] > 0
    for name in ("stitch", "ppr_binary", "dmar", "hop"):
        assert rows[name]["resident"]["htod"] < rows[name]["files"]["htod"]
    assert rows["g3rag"]["files"]["htod"] == rows["dense"]["files"]["htod"] == 0  # faiss / NumPy on the host
