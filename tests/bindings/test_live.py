"""Live indexes: add, delete, compact and filters in every pipeline, persisted safely."""
from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.cli import main as cli_main
from hopgraph.demo import demo_corpus
from hopgraph.engine.components.bm25 import BM25Index, BM25Params
from hopgraph.engine.components.dense import SUBSET_MAX_FRACTION, DenseIndex
from hopgraph.engine.components.exact_search import BlockedInnerProductIndex, faiss_topk
from hopgraph.engine.errors import InputError
from hopgraph.engine.filters import EmptyFilterWarning
from conftest import random_unit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fault_harness as fh  # noqa: E402

ALL = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")
PARAMS = {"dmar": {"gnn_steps": 2}}
QUESTIONS = ["Who designed the bridge in Bristol?", "Which club plays at Millbrook Park?",
             "What novel did the Irish writer publish?", "Who founded the technology company in Seattle?"]


def records() -> list[dict]:
    c = demo_corpus()
    return [{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i],
             "metadata": {"part": i % 3, "tags": ["even" if i % 2 == 0 else "odd", "all"]}} for i in range(len(c))]


def build(recs, pipelines=ALL) -> Index:
    return Index.build(recs, embedder="hashing-64", pipelines=list(pipelines), params=PARAMS, progress=False)


@pytest.fixture(scope="module")
def full() -> Index:
    return build(records())


@pytest.fixture(scope="module")
def grown() -> Index:
    recs = records()
    index = build(recs[:24])
    index.add(recs[24:])
    return index


def ids_of(index: Index, pipeline: str, k: int = 5, **kw) -> np.ndarray:
    return index.search_arrays(QUESTIONS, pipeline=pipeline, k=k, **kw)[0]


# ---------------------------------------------------------------------- add
@pytest.mark.parametrize("pipeline", ["dense", "bm25", "hybrid"])
def test_add_equals_a_build_from_scratch_for_dense_bm25_hybrid(full, grown, pipeline):
    assert len(grown.X) == len(full.X)
    np.testing.assert_array_equal(np.asarray(grown.X), np.asarray(full.X))
    for k in (1, 5, 40):
        np.testing.assert_array_equal(ids_of(grown, pipeline, k), ids_of(full, pipeline, k))


def test_add_then_compact_equals_a_build_for_every_pipeline(full):
    recs = records()
    index = build(recs[:21])
    index.add(recs[21:27])
    index.add(recs[27:])
    index.compact()
    for p in ALL:
        np.testing.assert_array_equal(ids_of(index, p, 8), ids_of(full, p, 8), err_msg=p)


def test_added_passages_are_found_by_every_pipeline(grown):
    for p in ALL:
        ids = ids_of(grown, p, 8)
        assert (ids < len(grown.X)).all() and (ids[:, 0] >= 0).all(), p
    hits = grown.search(["Orbis Computing Linda Faraday"], pipeline="bm25", k=1)[0]
    assert hits[0].id == "demo-25"  # an added passage
    assert grown.passage("demo-29")["text"] == demo_corpus().texts[29]


def test_duplicate_ids_are_refused_and_upsert_replaces(tmp_path):
    recs = records()
    index = build(recs, ("dense", "bm25"))
    with pytest.raises(InputError, match="already in the index: 'demo-3'.*upsert"):
        index.add([{"id": "demo-3", "text": "anything"}])
    assert len(index.X) == 30  # nothing changed
    r = index.add([{"id": "demo-3", "title": "Zebra", "text": "Zebras are quokkaish striped animals."}], upsert=True)
    assert r.replaced == ["demo-3"] and index.n_live == 30 and len(index.X) == 31
    hit = index.search(["quokkaish"], pipeline="bm25", k=3)[0]  # one passage holds the term; zero-score ones follow
    assert [h.id for h in hit if h.score > 0] == ["demo-3"] and hit[0].title == "Zebra" and len(hit) == 3
    assert index.passage("demo-3")["title"] == "Zebra"
    # a deleted id may be added again without upsert
    index.delete(["demo-4"])
    index.add([{"id": "demo-4", "text": "A new fourth passage about quokkaish things."}])
    assert {h.id for h in index.search(["quokkaish"], pipeline="bm25", k=5)[0] if h.score > 0} == {"demo-3", "demo-4"}


def test_add_checks_everything_before_changing_anything(full):
    index = build(records()[:10], ("dense",))
    with pytest.raises(InputError, match="3 rows for 1 added"):
        index.add([{"id": "x", "text": "t"}], embeddings=random_unit(3, 64))
    with pytest.raises(InputError, match="dimension"):
        index.add([{"id": "x", "text": "t"}], embeddings=random_unit(1, 32))
    with pytest.raises(InputError):
        index.add([{"id": "x", "text": ""}])
    with pytest.raises(InputError, match=r"record 0 \('x'\): metadata field 'year' is Infinity"):
        index.add([{"id": "x", "text": "t", "metadata": {"year": float("inf")}}])
    assert len(index.X) == 10 and len(index.corpus) == 10


# ---------------------------------------------------------------------- delete
def test_delete_hides_the_passage_from_all_seven_pipelines(tmp_path):
    index = build(records())
    target = "demo-16"  # Riverton FC, the answer to question 2
    row = index.corpus.position(target)
    assert all(row in ids_of(index, p, 5)[1] for p in ALL)
    r = index.delete([target, "no-such-id", target])
    assert r.deleted == [target] and r.unknown == ["no-such-id", target]
    for p in ALL:
        for k in (5, 40):
            ids = ids_of(index, p, k)
            assert row not in ids, p
        assert len(index.search(QUESTIONS, pipeline=p, k=5)[1]) == 5
    with pytest.raises(KeyError, match="deleted"):
        index.passage(target)
    assert index.n_live == 29
    # variants (query-time overrides) respect the tombstones too
    assert row not in index.search_arrays(QUESTIONS, pipeline="g3rag", k=10, gamma=0.5)[0]


# ---------------------------------------------------------------------- filters
@pytest.mark.parametrize("pipeline", ALL)
def test_filters_are_respected_with_k_results_when_k_pass(full, pipeline):
    corpus = full.corpus
    part1 = {i for i in range(len(corpus)) if corpus.meta(i)["part"] == 1}
    for k in (3, 5):
        ids = ids_of(full, pipeline, k, where={"part": 1})
        assert set(ids[ids >= 0].tolist()) <= part1
        assert (ids >= 0).all(), (pipeline, ids)
    allowed = ["demo-2", "demo-11", "demo-25"]
    rows = {corpus.position(p) for p in allowed}
    ids = ids_of(full, pipeline, 5, allowed_ids=allowed)
    assert set(ids[ids >= 0].tolist()) <= rows
    assert ((ids >= 0).sum(axis=1) == 3).all(), ids
    # list values and list-valued metadata; both filters together
    ids = ids_of(full, pipeline, 4, where={"part": [0, 2], "tags": "even"})
    ok = {i for i in range(len(corpus)) if corpus.meta(i)["part"] in (0, 2) and i % 2 == 0}
    assert set(ids[ids >= 0].tolist()) <= ok
    ids = ids_of(full, pipeline, 4, where={"part": 0}, allowed_ids=["demo-0", "demo-1", "demo-3"])
    assert set(ids[ids >= 0].tolist()) <= {0, 3}
    # nothing passes: no results, a warning
    with pytest.warns(EmptyFilterWarning, match="passes no passage"):
        assert (ids_of(full, pipeline, 3, where={"part": 7}) == -1).all()


def test_filter_results_match_a_search_of_the_filtered_corpus_for_dense(full):
    """Dense with a filter is exact: the same ranking as an index of only the passing passages."""
    recs = [r for r in records() if r["metadata"]["part"] == 2]
    small = Index.build(recs, embedder="hashing-64", pipelines=["dense"], progress=False)
    got = full.search(QUESTIONS, pipeline="dense", k=6, where={"part": 2})
    want = small.search(QUESTIONS, pipeline="dense", k=6)
    assert [[h.id for h in row] for row in got] == [[h.id for h in row] for row in want]


def test_bad_filters_name_the_problem(full):
    with pytest.raises(InputError, match="allowed_ids: 1 id.*'nope'"):
        full.search(QUESTIONS[:1], pipeline="dense", allowed_ids=["demo-1", "nope"])
    with pytest.raises(InputError, match="allowed_ids must be a list"):
        full.search(QUESTIONS[:1], pipeline="dense", allowed_ids="demo-1")
    with pytest.raises(InputError, match=r"where\['part'\]: filter values"):
        full.search(QUESTIONS[:1], pipeline="dense", where={"part": {"a": 1}})
    with pytest.raises(InputError, match="empty list"):
        full.search(QUESTIONS[:1], pipeline="dense", where={"part": []})
    with pytest.raises(InputError, match="where must map"):
        full.search(QUESTIONS[:1], pipeline="dense", where=["part"])


@pytest.mark.parametrize("fraction", [0.01, SUBSET_MAX_FRACTION / 2, 0.5, 1.0])
def test_dense_filtered_topk_equals_masked_brute_force(fraction):
    X, Q = random_unit(2000, 16, seed=1), random_unit(7, 16, seed=2)
    X[100:110] = X[100]  # ties
    allowed = np.random.default_rng(3).random(2000) < fraction
    allowed[100:110] = True
    S = Q @ X.T
    S[:, ~allowed] = -np.inf
    order = np.lexsort((np.broadcast_to(np.arange(2000), S.shape), -S), axis=1)[:, :12]
    ids, scores = DenseIndex(X).topk(Q, 12, allowed)
    np.testing.assert_allclose(scores, np.take_along_axis(S, order, 1), rtol=1e-5)
    assert all(allowed[ids[ids >= 0]])
    # k larger than what passes: padding
    ids, _ = DenseIndex(X).topk(Q, int(allowed.sum()) + 3, allowed)
    assert ((ids >= 0).sum(1) == allowed.sum()).all() and (ids[:, -3:] == -1).all()


def test_blocked_scan_and_bm25_respect_the_mask(tmp_path):
    X, Q = random_unit(500, 8, seed=4), random_unit(3, 8, seed=5)
    np.save(tmp_path / "x.npy", X)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    allowed = np.zeros(500, bool)
    allowed[::9] = True
    a = faiss_topk(BlockedInnerProductIndex(mm, block_rows=64), Q, 10, allowed)
    b = DenseIndex(X).topk(Q, 10, allowed)
    np.testing.assert_array_equal(a[0], b[0])
    texts = [f"alpha {'beta ' * (i % 4)} gamma{i % 5}" for i in range(50)]
    bm = BM25Index.build(texts, BM25Params())
    mask = np.arange(50) % 2 == 1
    ids, scores = bm.topk(bm.tokenize(["beta gamma3"]), 10, mask)
    assert (ids >= 0).all() and mask[ids].all()
    every = bm.scores(bm.tokenize(["beta gamma3"])[0])
    np.testing.assert_allclose(scores[0], np.sort(every[mask])[::-1][:10], rtol=1e-6)  # ties in any order


# ---------------------------------------------------------------------- persistence
def test_save_load_round_trip_after_add_and_delete(tmp_path, full):
    recs = records()
    index = build(recs[:24])
    index.save(tmp_path / "idx")
    index.add(recs[24:])
    index.delete(["demo-5", "demo-26"])
    index.save()  # a new commit of the same path
    loaded = Index.load(tmp_path / "idx", progress=False)
    assert loaded.n_live == 28 and len(loaded.X) == 30
    for p in ALL:
        np.testing.assert_array_equal(ids_of(loaded, p, 6), ids_of(index, p, 6), err_msg=p)
        np.testing.assert_array_equal(ids_of(loaded, p, 6, where={"part": 1}), ids_of(index, p, 6, where={"part": 1}))
    names = sorted(x.name for x in (tmp_path / "idx").iterdir())  # the base, the added segment, one deletes file
    assert [n for n in names if n.startswith("seg-")] == ["seg-000001", "seg-000001.del-000002.npy",
                                                          "seg-000002", "seg-000002.del-000002.npy"]
    loaded.compact()
    loaded.save()
    again = Index.load(tmp_path / "idx", progress=False)
    assert len(again.X) == 28 and again.n_live == 28 and again.manifest["n_deleted"] == 0
    assert [s["deletes"] for s in again.manifest["segments"]] == [None]


def test_updating_commits_only_on_success_and_refuses_non_indexes(tmp_path):
    index = build(records()[:20], ("dense", "bm25"))
    index.save(tmp_path / "idx")
    with pytest.raises(RuntimeError, match="boom"):
        with Index.updating(tmp_path / "idx", progress=False) as live:
            live.add(records()[20:])
            raise RuntimeError("boom")
    assert Index.load(tmp_path / "idx", progress=False).n_live == 20
    with Index.updating(tmp_path / "idx", progress=False) as live:
        live.add(records()[20:])
    assert Index.load(tmp_path / "idx", progress=False).n_live == 30
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "keep.txt").write_text("x")
    with pytest.raises(InputError, match="not a hopgraph index"):
        with Index.updating(tmp_path / "plain"):
            pass
    assert (tmp_path / "plain" / "keep.txt").read_text() == "x"


def test_cli_add_delete_compact_and_filtered_search(tmp_path, capsys):
    recs = records()
    for name, part in (("a", recs[:24]), ("b", recs[24:])):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in part)
    idx = str(tmp_path / "idx")
    assert cli_main(["index", str(tmp_path / "a.jsonl"), "--out", idx, "--embedder", "hashing-64",
                     "--pipelines", "dense,bm25,stitch", "-q"]) == 0
    assert cli_main(["add", idx, str(tmp_path / "b.jsonl"), "-q"]) == 0
    assert "added 6 passages" in capsys.readouterr().out
    assert cli_main(["add", idx, str(tmp_path / "b.jsonl"), "-q"]) == 2
    assert "--upsert" in capsys.readouterr().err
    assert cli_main(["delete", idx, "demo-16", "nope"]) == 0
    out = capsys.readouterr()
    assert "deleted 1 passages" in out.out and "warning: 1 id(s) not in the index: 'nope'" in out.err
    assert cli_main(["delete", idx, "[--ids-file", "ids.txt]"]) == 2  # nothing deleted: an error
    assert "no passage deleted" in capsys.readouterr().err
    (tmp_path / "ids.txt").write_text("demo-5\ndemo-7\n")
    assert cli_main(["search", idx, "Bristol bridge", "--pipeline", "stitch", "--k", "5", "--json", "-q",
                     "--allowed-ids", str(tmp_path / "ids.txt")]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    assert sorted(h["id"] for h in hits) == ["demo-5", "demo-7"]
    assert cli_main(["search", idx, "football club", "--pipeline", "dense", "--k", "4", "--json", "-q",
                     "--where", "part=1", "--where", "part=2"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    assert len(hits) == 4 and all(h["metadata"]["part"] in (1, 2) and h["id"] != "demo-16" for h in hits)
    assert cli_main(["search", idx, "football club", "--pipeline", "bm25", "--k", "4", "--json", "-q",
                     "--where", "part>=1", "--where", '{"$not": {"tags": "even"}}']) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    assert len(hits) == 4 and all(h["metadata"]["part"] >= 1 and "odd" in h["metadata"]["tags"] for h in hits)
    assert cli_main(["compact", idx, "-q"]) == 0
    assert "30 -> 29 passages" in capsys.readouterr().out
    assert cli_main(["search", idx, "x", "--where", "nofield"]) == 2
    assert "FIELD=VALUE" in capsys.readouterr().err


@pytest.mark.slow
def test_sigkill_during_add_and_save_leaves_the_previous_index(tmp_path):
    a = fh.synthetic_corpus(tmp_path / "a.jsonl", 3000, seed=0)
    b = tmp_path / "b.jsonl"
    with open(b, "w") as f:  # 600 new passages with ids of their own
        for line in list(open(fh.synthetic_corpus(tmp_path / "c.jsonl", 600, seed=1))):
            rec = json.loads(line)
            f.write(json.dumps({**rec, "id": "new-" + rec["id"]}) + "\n")
    questions, pipes = ["Entity3 met Person21", "w17 w301 Title 5"], ("dense", "bm25")
    base, added, deleted = tmp_path / "base", tmp_path / "added", tmp_path / "deleted"
    assert fh.start_index(a, base, ",".join(pipes)).wait(120) == 0
    shutil.copytree(base, added)
    p = fh.start_cli(["add", str(added), str(b), "-q"])
    assert p.wait(120) == 0, p.stderr.read()
    work = fh.worker_seconds(p)
    shutil.copytree(added, deleted)
    delete = ["delete", "PATH", *[f"new-p{i}" for i in range(0, 600, 2)]]
    assert cli_main([x if x != "PATH" else str(deleted) for x in delete]) == 0
    states = {name: fh.search_results(path, questions, pipes) for name, path in
              (("base", base), ("added", added), ("deleted", deleted))}
    rng = np.random.default_rng(0)
    for trial in range(4):  # kill an add (base -> added) or a delete (added -> deleted) at a random moment
        start, argv, end = ("base", ["add", "PATH", str(b), "-q"], "added") if trial % 2 == 0 else \
            ("added", delete, "deleted")
        out = tmp_path / f"trial{trial}"
        shutil.copytree(tmp_path / start, out)
        argv = [x if x != "PATH" else str(out) for x in argv]
        p = fh.start_cli(argv)
        time.sleep(rng.uniform(0.2, 1.2) * work)
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        got = fh.search_results(out, questions, pipes)
        assert got in (states[start], states[end]), f"trial {trial}: neither the old nor the new index"
        if got == states[start]:  # a state left by a kill never blocks the next writer
            assert cli_main(argv) == 0
            assert fh.search_results(out, questions, pipes) == states[end]
