"""Fault test of index storage: SIGKILL a ``hopgraph index`` at random moments of
build/save/replace, and corrupt one byte of every file of a small index.

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
               "texts_blob", "names_data",
               # which text a topic / entity state points to: any id in range is a valid structure
               "edge_text.npy", "node_text.npy")


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
    assert sorted(x.name for x in out.iterdir()) == ["CURRENT", storage.read_current(out)[0], "write.lock"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c0.jsonl", "c1.jsonl", "idx"]  # no OUT.work left
    print("kill outcomes:", outcomes)


def test_every_corrupted_file_is_refused_or_harmless(tmp_path):
    index = Index.build(demo_corpus(), embedder="hashing-64", pipelines=ALL, params=PARAMS, progress=False)
    base = index.save(tmp_path / "base")
    gen = storage.current_generation(base)
    files = fh.index_files(base)
    assert len(files) > 60 and Path("CURRENT") in files and (gen / "manifest.json").relative_to(base) in files
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
