"""Fault test of index storage: SIGKILL a ``hopgraph index`` at random moments of build/save/replace,
and corrupt one byte of every file of a small index of several segments (a base, added segments,
deletes files). Kills at every step of add / delete / merge: ``tests/bindings/test_segments.py``.

* After every kill the output path holds the old complete index or the new one (it loads and
  searches give exactly the old or the new results), and a following build works.
* A byte changed in any file is refused by ``Index.load`` (checksums, ``verify="full"``). With
  ``verify="fast"`` (no checksums; sizes and structural validation only) loading and searching
  never crash the process (searched in a subprocess, so a segfault would show) and never raise
  anything but :class:`IndexFormatError`; each case is either refused, gives identical results, or
  — only for files whose values no structure constrains (weights, scores, embedding values, texts;
  listed in ``FREE_VALUES``) — valid but different results.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hopgraph import Index, IndexFormatError
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine import storage

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import fault_harness as fh  # noqa: E402  (the harness shared with bench/bench_faults.py)

pytestmark = pytest.mark.slow  # SIGKILLed subprocess builds

ALL = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")
PARAMS = {"dmar": {"gnn_steps": 2}}
#: files whose stored values are free numbers (or text) that no structural check can pin down: with
#: checksums off, a changed value there may change results (it is data, not structure)
FREE_VALUES = ("embeddings.npy", "text_emb.npy", "subgraph_emb.npy", "/gnn.", "/gate.", "data.csc.index.npy",
               "g3rag/data.npy", "graph_data.npy", "kg_adj_data.npy", "kg_df.npy", "_data.npy", "names_blob",
               "texts_blob", "names_data", "text_emb_tail.npy", "emb_rows.npy", "penalty_tail.npy",
               "g3rag/ins_data.npy", "g3rag/over_data.npy", "g3rag/tail_data.npy", "common_blob",
               # which passages are deleted: any row id in range is a valid structure
               ".del-",
               # a segment's BM25 postings: a term frequency, a token's bytes, are data
               "bm25-0/tf.npy", "bm25-0/vocab_data.npy", "bm25-0/vocab_hashes.npy",
               # which text a topic / entity state points to: any id in range is a valid structure
               "edge_text.npy", "node_text.npy",
               # which name a segment's state has: an id in range keeping the states' order is valid
               "node_name_stable.npy")


def test_sigkill_during_index_leaves_old_or_new_index(tmp_path):
    corpora = [fh.synthetic_corpus(tmp_path / f"c{i}.jsonl", 3000, seed=i) for i in range(2)]
    questions = ["Entity3 met Person21", "w17 w301 Title 5"]
    out = tmp_path / "idx"
    outcomes, state = fh.kill_trials(corpora, out, trials=5, seed=11, questions=questions)
    assert all(o in ("old", "new") for o in outcomes), outcomes
    other = corpora[1 - state]
    p = fh.start_index(other, out)                              # a following build works
    assert p.wait(60) == 0, p.stderr.read()
    want = [Index.build(other, embedder="hashing-32", pipelines=[q], progress=False)
            .search_arrays(questions, pipeline=q, k=5)[0].tolist() for q in ("dense", "bm25")]
    assert fh.search_results(out, questions, ("dense", "bm25")) == want
    live = storage.read_current(out)[0]
    assert sorted(x.name for x in out.iterdir()) == sorted(
        ["CURRENT", live, live.replace(".json", ".lock"), *[d.name for d in storage.segment_dirs(out)], "write.lock"])
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c0.jsonl", "c1.jsonl", "idx"]  # no OUT.work left
    print("kill outcomes:", outcomes)


def test_every_corrupted_file_is_refused_or_harmless(tmp_path):
    c = demo_corpus()
    recs = [{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i]} for i in range(len(c))]
    index = Index.build(recs[:24], embedder="hashing-64", pipelines=ALL, params=PARAMS, progress=False)
    base = index.save(tmp_path / "base")
    index.add(recs[24:27])
    index.save()
    index.add(recs[27:])
    index.delete(["demo-2", "demo-28"])
    index.save()                                                # three segments, two deletes files
    segs = storage.segment_dirs(base)
    files = fh.index_files(base)
    assert len(segs) == 3 and len(files) > 150 and Path("CURRENT") in files
    assert all((s / "segment.json").relative_to(base) in files for s in segs)
    assert len([f for f in files if ".del-" in f.name]) == 2
    cases = fh.corruption_cases(base, tmp_path, ["bit"], np.random.default_rng(5), files)
    for case in cases:                                          # checksums: every change is refused
        with pytest.raises(IndexFormatError):
            Index.load(case, progress=False)
    # checksums off: never a crash; refused, identical, or (free values only) different results
    outcomes = fh.load_outcomes(base, cases, list(ALL), list(DEMO_QUESTIONS), verify="fast")
    summary: dict[str, list[str]] = {}
    for case, outcome in outcomes.items():
        summary.setdefault(fh.outcome_kind(outcome), []).append(cases[case][0])
    print({k: len(v) for k, v in summary.items()}, "changed:", summary.get("changed"))
    bad = {cases[c][0]: o for c, o in outcomes.items() if fh.outcome_kind(o) not in ("refused", "same", "changed")}
    assert not bad, bad
    not_free = [f for f in summary.get("changed", []) if not any(m in f for m in FREE_VALUES)]
    assert not not_free, f"structure changed without being refused: {not_free}"
