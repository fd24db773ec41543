"""bench/transfers.py cannot rot: it runs on CPU tensors over the demo corpus, and its table says what
the device store saves — the whole chunk graph no longer copied per batch by the unlocalised walks,
the localised walk's sub-graph cut on the device, STITCH's prior and DMAR's subgraphs made there —
with the same ids as the index's own files."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: what every batch on the device takes in whatever its pipeline: the questions, BM25's query side and
#: the top lists where they are made on the host (:class:`~hopgraph.engine.components.query_batch.QueryBatch`)
BATCH_INPUTS = {"questions", "dense ids", "dense scores", "bm25 ids", "bm25 scores", "bm25 query postings"}


def own_inputs(row: dict) -> int:
    """The arrays a search took in besides :data:`BATCH_INPUTS` with the device store."""
    return len([name for name in row["resident"]["names_in"] if name not in BATCH_INPUTS])


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
    for name in ("stitch localise=False", "ppr_binary localise=False"):
        assert rows[name]["files"]["graph_bytes"] > 0 and rows[name]["resident"]["graph_bytes"] == 0
        assert own_inputs(rows[name]) <= rows[name]["files"]["htod"] - 3
    for name in ("stitch", "ppr_binary", "dmar", "hop"):
        assert own_inputs(rows[name]) < rows[name]["files"]["htod"]
    assert "walk region chunks" not in rows["stitch"]["resident"]["names_in"]  # the prior stays on the device
    for name in ("stitch", "stitch localise=False"):  # activated, scored, walked on the device: the top-k out
        stitch = rows[name]["resident"]
        assert stitch["names_in"] == ["questions", "bm25 query postings"] and stitch["dtoh"] == 2
    assert rows["g3rag"]["files"]["htod"] == rows["dense"]["files"]["htod"] == 0  # faiss on the host
    dense = rows["dense"]["resident"]  # searched on the device: the questions in, the ids and scores out
    assert dense["names_in"] == ["questions"] and dense["dtoh"] == 2
    bm25 = rows["bm25"]["resident"]  # BM25 on the held postings: the query side in, the ids and scores out
    assert bm25["names_in"] == ["bm25 query postings"] and bm25["dtoh"] == 2
    g3rag = rows["g3rag"]["resident"]  # on the device: the questions and BM25's query side in, W never, the top-k out
    assert g3rag["names_in"] == ["questions", "bm25 query postings"] and g3rag["dtoh"] == 2
    assert g3rag["graph_bytes"] == 0
