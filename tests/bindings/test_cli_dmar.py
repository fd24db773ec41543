"""``hopgraph train-gnn`` / ``hopgraph train-gate`` on a small index (SPEC §3)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.cli import main
from hopgraph.engine import storage

QUESTIONS = [
    ("Who is the rector of the university that operates the observatory where comet Venn-Harlow was discovered?",
     ["demo-1", "demo-2"]),
    ("Which engineer designed the bridge in the home city of Peter Harlow?", ["demo-7", "demo-8"]),
    ("Who founded the prize won by the novel about sisters running a lighthouse?", ["demo-12", "demo-13"]),
    ("Which company acquired the employer of the creator of the Quillon language?", ["demo-23", "demo-24"]),
    ("Which architect renovated the stadium of Riverton FC?", ["demo-17", "demo-18"]),
    ("Who founded the company that acquired Tessellate Systems?", ["demo-25", "demo-26"]),
    ("Where was the author of The Lantern Keepers born?", ["demo-10", "demo-11"]),
]


@pytest.mark.slow
def test_train_gnn_and_gate_save_into_the_index(tmp_path, demo_corpus, capsys):
    idx = tmp_path / "idx"
    Index.build(demo_corpus, embedder="hashing-64", pipelines=["dmar"], progress=False,
                params={"dmar": {"gnn_steps": 1}}).save(idx)
    before = np.load(storage.segment_dirs(idx)[-1] / "pipelines" / "dmar" / "subgraph_emb.npy")
    assert main(["train-gnn", str(idx), "--steps", "12", "-q"]) == 0
    assert "triplet loss" in capsys.readouterr().out
    after = np.load(storage.segment_dirs(idx)[-1] / "pipelines" / "dmar" / "subgraph_emb.npy")
    assert after.shape == before.shape and not np.allclose(after, before)

    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps({"id": str(i), "question": q, "gold_ids": g}) + "\n"
                             for i, (q, g) in enumerate(QUESTIONS)))
    assert main(["train-gate", str(idx), str(qfile), "--holdout", "0.3", "--always-save", "-q"]) == 0
    out = capsys.readouterr().out
    assert "held-out split (2 questions) Recall@5" in out
    assert np.load(storage.segment_dirs(idx)[-1] / "pipelines" / "dmar" / "gate.trained.npy")[0] == 1
    loaded = Index.load(idx, progress=False)
    assert loaded.pipeline("dmar").gate_.trained
    assert len(loaded.search(QUESTIONS[0][0], pipeline="dmar", k=2)[0]) == 2
    assert main(["train-gate", str(idx), str(qfile), "--holdout", "0.3", "--seed", "1", "-q"]) == 0
    out = capsys.readouterr().out
    kept = "keeps the untrained" in out
    assert kept or "saved in" in out
    assert np.load(storage.segment_dirs(idx)[-1] / "pipelines" / "dmar" / "gate.trained.npy")[0] == (0 if kept else 1)
    assert main(["train-gate", str(idx), str(tmp_path / "missing.jsonl"), "-q"]) == 2
