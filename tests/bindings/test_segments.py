"""Segmented indexes: commits that write what they change, exact search across segments, deletes,
merges, readers pinned to a commit, no lost update between writers, kills at every step of a write."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.demo import demo_corpus
from hopgraph.engine import storage
from hopgraph.engine.components.bm25 import BM25Index, BM25Params, Postings
from hopgraph.engine.components.tokenizer import tokenize
from hopgraph.engine.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fault_harness as fh  # noqa: E402

ALL = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")
EXACT = ("dense", "bm25", "hybrid")
PARAMS = {"dmar": {"gnn_steps": 2}}
QUESTIONS = ["Who designed the bridge in Bristol?", "Which club plays at Millbrook Park?",
             "What novel did the Irish writer publish?", "Who founded the technology company in Seattle?"]


def records(n: int | None = None) -> list[dict]:
    c = demo_corpus()
    return [{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i], "metadata": {"part": i % 3}}
            for i in range(len(c))][:n]


def generated(n: int, seed: int = 0) -> list[dict]:
    """``n`` short generated passages naming entities (more than the demo corpus holds)."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(300)]
    return [{"id": f"g{seed}-{i}", "title": f"Topic {i % 41}",
             "text": " ".join(rng.choice(words, 15)) + f". Entity{i % 23} met Person{(i * 7) % 31}."}
            for i in range(n)]


def build(recs, pipelines=ALL) -> Index:
    return Index.build(recs, embedder="hashing-64", pipelines=list(pipelines), params=PARAMS, progress=False)


def results(index: Index, pipeline: str, k: int = 5, **kw):
    return index.search_arrays(QUESTIONS, pipeline=pipeline, k=k, **kw)


def segmented(tmp: Path, recs: list[dict], cuts: list[int], pipelines=ALL) -> Path:
    """An index of ``recs`` built from ``recs[:cuts[0]]`` and committed once per later cut (one
    segment each)."""
    index = build(recs[:cuts[0]], pipelines)
    index.save(tmp)
    for a, b in zip(cuts, cuts[1:] + [len(recs)]):
        index.add(recs[a:b])
        index.save()
    return tmp


# ---------------------------------------------------------------------- exact across segments
def test_bm25_scores_across_segments_equal_a_full_build_bit_for_bit():
    import bm25s

    texts = [r["text"] + " " + r["title"] for r in generated(700, seed=3)] + ["", "the of and"]
    for k1, b in ((1.5, 0.75), (1.2, 0.3), (0.9, 1.0)):
        params = BM25Params(k1=k1, b=b)
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.index(tokenize(texts, "en"), show_progress=False)
        cuts = [0, 400, 401, 650, len(texts)]
        parts = [Postings.build(texts[a:z], "en") for a, z in zip(cuts, cuts[1:])]
        split = BM25Index(parts, params)
        joined = BM25Index([Postings.merge(parts)], params)
        for q in (["w1", "w2", "w1"], ["w17"], ["entity3", "person7", "topic"], ["zzz"], []):
            known = [w for w in q if w in retriever.vocab_dict]
            ref = np.asarray(retriever.get_scores(known), np.float32) if known else np.zeros(len(texts), np.float32)
            for index in (split, joined):
                np.testing.assert_array_equal(index.scores(q).view(np.int32), ref.view(np.int32))
                docs = np.arange(len(texts))
                np.testing.assert_array_equal(index.scores_at(q, docs).view(np.int32), ref.view(np.int32))


@pytest.mark.parametrize("pipeline", EXACT)
def test_results_across_segments_equal_an_index_built_in_one_go(tmp_path, pipeline):
    recs = records()
    full = build(recs, EXACT)
    path = segmented(tmp_path / "idx", recs, [18, 21, 22, 27], EXACT)
    loaded = Index.load(path, progress=False)
    assert len(storage.read_manifest(path)["segments"]) == 5
    for k in (1, 5, 30):
        want, got = results(full, pipeline, k), results(loaded, pipeline, k)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    where = results(loaded, pipeline, 6, where={"part": 1})
    np.testing.assert_array_equal(where[0], results(full, pipeline, 6, where={"part": 1})[0])


def test_every_pipeline_reads_back_its_segments(tmp_path):
    recs = records()
    path = segmented(tmp_path / "idx", recs, [20, 24, 25])
    index = Index.load(path, progress=False)
    memory = build(recs[:20])
    memory.add(recs[20:24])
    memory.add(recs[24:25])
    memory.add(recs[25:])
    for p in ALL:
        np.testing.assert_array_equal(results(index, p, 8)[0], results(memory, p, 8)[0], err_msg=p)


# ---------------------------------------------------------------------- what a commit writes
def _written(path: Path, before: set[Path]) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p not in before
               and p.name not in (storage.CURRENT, storage.LOCK_FILE))


@pytest.mark.parametrize("pipelines", [("dense", "bm25", "g3rag"), tuple(p for p in ALL if p != "dmar")])
def test_an_add_of_n_passages_writes_bytes_in_proportion_to_n_not_to_the_index(tmp_path, pipelines):
    """(DMAR stores the subgraph embeddings its encoder computes again: those of every entity whose
    ego subgraph holds an entity the new passages name, which on this corpus of few entities grows
    with the corpus.)"""
    written = {}
    for size in (200, 800):
        path = tmp_path / f"idx{size}-{len(pipelines)}"
        index = build(generated(size), pipelines)
        index.save(path)
        for n in (1, 10, 40):
            new = generated(n, seed=100 + n + size)
            before = set(path.rglob("*"))
            index.add(new)
            index.save()
            commit = path / storage.read_current(path)[0]
            written[size, n] = _written(path, before) - commit.stat().st_size
    data = {n: sum(len(json.dumps(r)) + 64 * 4 for r in generated(n, seed=100 + n)) for n in (1, 10, 40)}
    for n in (1, 10, 40):
        # the same whatever the index's size (within 3 KB: the reverse-edge rows of the graph, ...)
        assert abs(written[800, n] - written[200, n]) < 3000 + 0.5 * written[200, n], written
    assert written[800, 40] < 40 * (written[800, 1] + 2000) / 4, written  # O(n), not O(N)
    print({k: v for k, v in written.items()}, data)


def test_a_commit_references_unchanged_segments_and_writes_deletes_as_small_files(tmp_path):
    recs = records()
    path = segmented(tmp_path / "idx", recs, [20, 25])
    first = storage.read_manifest(path)["segments"]
    index = Index.load(path, progress=False)
    seg_files = {p: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file() and "seg-" in str(p)}
    index.delete(["demo-3"])
    index.save()
    after = storage.read_manifest(path)["segments"]
    assert [s["name"] for s in after] == [s["name"] for s in first]  # no new segment, nothing copied
    assert after[0]["deletes"]["file"].startswith("seg-000001.del-") and after[0]["deletes"]["count"] == 1
    assert all(p.stat().st_mtime_ns == t for p, t in seg_files.items() if p.exists())
    assert Index.load(path, progress=False).n_live == len(recs) - 1


# ---------------------------------------------------------------------- deletes
def test_deletes_are_hidden_in_every_pipeline_across_commits_and_merges(tmp_path):
    recs = records()
    path = segmented(tmp_path / "idx", recs, [16, 20, 23, 26])
    index = Index.load(path, progress=False)
    gone = ["demo-16", "demo-21", "demo-2"]  # in the base and in later segments
    rows = [index.corpus.position(i) for i in gone]
    index.delete(gone)
    index.save()
    for stage in ("committed", "merged", "compacted"):
        loaded = Index.load(path, progress=False)
        assert loaded.n_live == len(recs) - 3, stage
        for p in ALL:
            for k in (5, 30):
                assert not set(rows) & set(results(loaded, p, k)[0].ravel().tolist()), (stage, p)
        if stage == "committed":
            loaded.merge(max_segments=2)
            assert len(storage.read_manifest(path)["segments"]) == 2
        elif stage == "merged":
            loaded.merge(max_segments=1)
            assert len(storage.read_manifest(path)["segments"]) == 1
            rows = []  # compacted: the deleted passages are gone, the rows renumbered
            assert len(Index.load(path, progress=False).X) == len(recs) - 3


# ---------------------------------------------------------------------- merges
def test_merge_policy_merges_adjacent_segments_of_one_tier():
    from hopgraph.engine.storage import TieredMergePolicy

    policy = TieredMergePolicy(10)
    assert [policy.tier(n) for n in (0, 1, 9, 10, 99, 100, 1000)] == [0, 0, 0, 1, 1, 2, 3]
    assert policy.find_merge([1000] + [1] * 9) is None
    assert policy.find_merge([1000] + [1] * 10) == (1, 10)
    assert policy.find_merge([1000, 50] + [1] * 10) == (2, 11)
    assert policy.find_merge([1000, 5, 3, 70, 2], max_segments=3) == (1, 2)
    assert policy.find_merge([1000, 5, 3], max_segments=3) is None


def test_index_merge_takes_another_policy_and_its_results_stay(tmp_path):
    from hopgraph.engine.index import IndexReader
    from hopgraph.engine.storage import MergePolicy

    class FirstPair(MergePolicy):
        def find_merge(self, sizes, max_segments=None):
            return (1, 2) if len(sizes) > 3 else None

    recs = records()
    path = segmented(tmp_path / "idx", recs, [16, 20, 23, 26], pipelines=EXACT)
    index = Index.load(path, progress=False)
    before = {p: results(index, p) for p in EXACT}
    report = index.merge(policy=FirstPair())
    assert (report.segments_before, report.segments_after, len(report.merges)) == (5, 3, 2)
    assert [s["n_rows"] for s in storage.read_manifest(path)["segments"]] == [16, 10, len(recs) - 26]
    with IndexReader.open(path, embedder="hashing-64") as reader:  # the engine reads what the façade wrote
        assert reader.infos.sizes == [16, 10, len(recs) - 26] and list(reader.content.corpus.ids) == list(index.corpus.ids)
        for p in EXACT:
            rows, scores = reader.search(QUESTIONS, 5, p)
            np.testing.assert_array_equal(rows, before[p][0])
            np.testing.assert_allclose(scores, before[p][1], rtol=1e-6)
            np.testing.assert_array_equal(results(index, p)[0], before[p][0])


def test_a_reader_pinned_to_a_commit_keeps_its_results_while_a_merge_commits(tmp_path):
    recs = records()
    path = segmented(tmp_path / "idx", recs, [12, 14, 16, 18, 20, 22, 24, 26, 28])
    reader = Index.load(path, progress=False)
    pinned = storage.read_manifest(path)
    before = {p: results(reader, p, 8) for p in ALL}
    writer = Index.load(path, progress=False)
    report = writer.merge(max_segments=2, factor=3)
    assert report.segments_before == 10 and report.segments_after == 2
    for p in ALL:
        got = results(reader, p, 8)
        np.testing.assert_array_equal(got[0], before[p][0], err_msg=p)
        np.testing.assert_array_equal(got[1], before[p][1], err_msg=p)
        np.testing.assert_array_equal(results(Index.load(path, progress=False), p, 8)[0], before[p][0], err_msg=p)
    held = {s["name"] for s in pinned["segments"]}
    assert held <= {p.name for p in path.iterdir()}        # the pinned commit's segments stay
    reader.close()
    writer.add(generated(3))
    writer.save()                                           # the next commit removes what nobody holds
    live = {s["name"] for s in storage.read_manifest(path)["segments"]}
    assert {p.name for p in path.iterdir() if p.name.startswith("seg-") and ".del-" not in p.name} == live
    assert storage.verify_index(path) == []


# ---------------------------------------------------------------------- no lost update
WRITER = r"""
import sys, json
from hopgraph import Index
path, recs, go = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
index = Index.load(path, progress=False)
print("loaded", flush=True)
while not __import__("os").path.exists(go):
    __import__("time").sleep(0.02)
index.add(recs)
index.save()
print("saved", flush=True)
"""


def test_two_writers_that_load_add_and_save_keep_both_adds(tmp_path):
    recs = records()
    path = tmp_path / "idx"
    build(recs[:20], ("dense", "bm25", "g3rag")).save(path)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), json.dumps(part), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for part in (recs[20:25], recs[25:])]
    for p in procs:
        assert p.stdout.readline().strip() == "loaded", p.stderr.read()
    go.touch()  # both loaded the same commit; now both add and save
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode != 0:
            assert "IndexLockedError" in err, err  # the other one held the lock at that moment
            subprocess.run([sys.executable, "-c", WRITER, str(path),
                            json.dumps(recs[20:25] if p is procs[0] else recs[25:]), str(go)], check=True)
    index = Index.load(path, progress=False)
    assert sorted(index.corpus.ids) == sorted(r["id"] for r in recs) and index.n_live == 30
    full = build(recs, ("dense", "bm25"))
    np.testing.assert_array_equal(np.sort(results(index, "bm25", 5)[1], axis=1),
                                  np.sort(results(full, "bm25", 5)[1], axis=1))


def test_a_stale_writer_rebases_appends_and_deletes_and_refuses_a_compaction(tmp_path):
    recs = records()
    path = tmp_path / "idx"
    build(recs[:20], ("dense", "bm25")).save(path)
    a, b = Index.load(path, progress=False), Index.load(path, progress=False)
    a.add(recs[20:25])
    a.save()
    b.add(recs[25:])
    b.delete(["demo-1"])
    b.save()                                               # rebased onto a's commit
    final = Index.load(path, progress=False)
    assert final.n_live == 29 and len(final.X) == 30 and b.n_live == 29
    assert storage.read_manifest(path)["parent"] is not None
    c = Index.load(path, progress=False)
    c.compact()
    a.add(recs[5:6], upsert=True)
    a.save()                                               # rebased again
    with pytest.raises(storage.StaleIndexError, match="another writer committed .* compacted"):
        c.save()
    d = Index.load(path, progress=False)
    e = Index.load(path, progress=False)
    d.add([{"id": "x1", "text": "one new passage"}])
    d.save()
    e.add([{"id": "x1", "text": "the same id from another writer"}])
    with pytest.raises(storage.StaleIndexError, match="same passage"):
        e.save()
    with pytest.raises(storage.StaleIndexError):
        f = Index.load(path, progress=False)
        g = Index.load(path, progress=False)
        f.add([{"id": "x2", "text": "x"}])
        f.save()
        g.add([{"id": "x3", "text": "y"}])
        g.save(rebase=False)


def test_updating_holds_the_lock_from_load_to_commit(tmp_path):
    recs = records()
    path = tmp_path / "idx"
    build(recs[:20], ("dense",)).save(path)
    with Index.updating(path, progress=False) as index:
        code = "import sys\nfrom hopgraph import Index\nwith Index.updating(sys.argv[1]):\n    pass\n"
        other = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
        assert other.returncode != 0 and "is being written by another hopgraph process" in other.stderr
        index.add(recs[20:])
    assert Index.load(path, progress=False).n_live == 30


# ---------------------------------------------------------------------- older format
def test_a_format_3_index_loads_and_compact_converts_it(tmp_path):
    from conftest import make_v3

    recs = records()
    index = build(recs, ("dense", "bm25", "g3rag", "stitch"))
    index.delete(["demo-4"])
    path = make_v3(index.save(tmp_path / "idx"))
    assert storage.read_current(path)[0] == "gen-000001"
    old = Index.load(path, progress=False)
    for p in ("dense", "bm25", "g3rag", "stitch"):
        np.testing.assert_array_equal(results(old, p, 6)[0], results(index, p, 6)[0], err_msg=p)
    assert old.n_live == 29
    old.add(recs[:0] + [{"id": "n1", "text": "A quokka on Rottnest Island."}])
    old.save()                                             # the first commit writes it whole (format 4)
    assert storage.read_current(path)[0].startswith("commit-")
    assert not any(p.name.startswith("gen-") for p in path.iterdir())
    again = Index.load(path, progress=False)
    assert again.n_live == 30 and again.passage("n1")["text"].startswith("A quokka")
    again.compact()
    again.save()
    assert len(storage.read_manifest(path)["segments"]) == 1 and Index.load(path, progress=False).n_live == 30


def test_merge_and_verify_from_the_command_line(tmp_path, capsys):
    from hopgraph.cli import main

    path = segmented(tmp_path / "idx", records(), [20, 22, 24, 26], ("dense", "bm25"))
    assert main(["verify", str(path)]) == 0 and capsys.readouterr().out.strip() == "ok"
    assert main(["merge", str(path), "--max-segments", "2", "-q"]) == 0
    assert "5 -> 2 segments" in capsys.readouterr().out
    with pytest.raises(InputError, match="positive integer"):
        Index.load(path, progress=False).merge(max_segments=0)
    seg = storage.segment_dirs(path)[-1]
    raw = bytearray((seg / "embeddings.npy").read_bytes())
    raw[-1] ^= 0xFF
    (seg / "embeddings.npy").write_bytes(bytes(raw))
    assert main(["verify", str(path)]) == 2
    assert f"{seg.name}/embeddings.npy: checksum mismatch" in capsys.readouterr().out


# ---------------------------------------------------------------------- kills
@pytest.mark.parametrize("op", ["add", "delete", "merge"])
def test_sigkill_at_every_step_of_a_write_leaves_the_old_or_the_new_commit(tmp_path, op):
    recs = records()
    pipes = ("dense", "bm25", "g3rag")
    base = segmented(tmp_path / "base", recs[:26], [20, 23], pipes)
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps(r) + "\n" for r in recs[26:]))
    argv = {"add": ["add", "INDEX", str(new), "-q"], "delete": ["delete", "INDEX", "demo-3", "demo-21"],
            "merge": ["merge", "INDEX", "--max-segments", "2", "-q"]}[op]
    killer = fh.StepKiller()
    try:
        outcomes = fh.step_kill_trials(killer, base, argv, tmp_path / "trials", QUESTIONS[:2], pipes, every=False)
    finally:
        killer.close()
    assert len(outcomes) >= 5 and all(o in ("old", "new") for o in outcomes), outcomes
    print(op, {o: outcomes.count(o) for o in set(outcomes)})
