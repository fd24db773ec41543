"""``hopgraph eval`` on BEIR folders and TREC files: trec_eval's measures checked against an independent
computation on the TREC run file the command writes, per-query scores, paired tests, the Recall@k curve."""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from hopgraph.cli import main
from hopgraph.engine import evaluation
from hopgraph.engine.errors import InputError

PIPELINES = "bm25,dense,hybrid"
QUERIES = {
    "q1": ("Who founded the company that acquired Tessellate Systems?", {"demo-24": 2, "demo-25": 1, "demo-3": 0}),
    "q2": ("Which architect renovated the stadium of Riverton FC?", {"demo-16": 1, "demo-17": 2}),
    "q3": ("Who designed the bridge in Peter Harlow's home city?", {"demo-0": 1, "demo-1": 1, "demo-2": 2}),
    "q4": ("Which club plays at Millbrook Park?", {"demo-9": 0}),  # no relevant document: not evaluated
}


@pytest.fixture
def beir(tmp_path, demo_corpus) -> Path:
    d = tmp_path / "beir-demo"
    (d / "qrels").mkdir(parents=True)
    with open(d / "corpus.jsonl", "w") as f:
        for pid, title, text in zip(demo_corpus.ids, demo_corpus.titles, demo_corpus.texts):
            f.write(json.dumps({"_id": pid, "title": title, "text": text, "metadata": {}}) + "\n")
    with open(d / "queries.jsonl", "w") as f:
        for qid, (text, _) in QUERIES.items():
            f.write(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n")
        f.write(json.dumps({"_id": "dev-only", "text": "not in the test split"}) + "\n")
    with open(d / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, (_, rels) in QUERIES.items():
            f.writelines(f"{qid}\t{doc}\t{rel}\n" for doc, rel in rels.items())
    (d / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\ndev-only\tdemo-5\t1\n")
    return d


def read_run(path: Path) -> dict[str, list[str]]:
    """An independent reader of a TREC run file: documents of each query in the order of the rank column."""
    rows = defaultdict(list)
    for line in path.read_text().splitlines():
        qid, q0, doc, rank, score, tag = line.split()
        assert q0 == "Q0" and tag == path.stem
        float(score)
        rows[qid].append((int(rank), doc))
    return {q: [d for _, d in sorted(r)] for q, r in rows.items()}


def ndcg_at(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains (trec_eval's ndcg_cut), written from its definition."""
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def test_beir_folder_ndcg_equals_an_independent_computation_on_the_run_file(beir, tmp_path, capsys):
    runs, js, pq, png = tmp_path / "runs", tmp_path / "r.json", tmp_path / "pq.tsv", tmp_path / "curve.png"
    assert main(["eval", str(beir), "--pipelines", PIPELINES, "--ks", "1,5", "--embedder", "hashing-64", "-q",
                 "--cache-dir", str(tmp_path / "c"), "--run-dir", str(runs), "--json", str(js),
                 "--per-query", str(pq), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "nDCG@10" in out and "MRR@10" in out and "MAP@100" in out and "R@5" in out and "P@5" in out
    report = json.loads(js.read_text())
    assert report["schema_version"] == 2 and report["format"] == "beir" and report["split"] == "test"
    assert report["n_questions"] == 3 and report["measures"] == ["ndcg@10", "mrr@10", "map@100", "recall@1",
                                                                 "recall@5", "p@1", "p@5"]
    judged = {q: rels for q, (_, rels) in QUERIES.items() if q != "q4"}
    for name in PIPELINES.split(","):
        ranked = read_run(runs / f"{name}.run")
        assert set(ranked) == set(judged) and all(len(r) == 30 for r in ranked.values())  # depth 100 > 30 passages
        mine = {q: ndcg_at(ranked[q], judged[q]) for q in judged}
        for q in judged:
            assert report["per_query"][name][q]["ndcg@10"] == pytest.approx(mine[q], abs=1e-9)
        assert report["results"][name]["ndcg@10"] == pytest.approx(np.mean(list(mine.values())), abs=1e-9)
        rr = [next((1 / (i + 1) for i, d in enumerate(ranked[q][:10]) if judged[q].get(d, 0) > 0), 0.0) for q in judged]
        assert report["results"][name]["mrr@10"] == pytest.approx(np.mean(rr), abs=1e-9)
        # (these pipelines rank their top 5 as the head of their top 100, so the run file gives R@5 too)
        recall5 = [sum(judged[q].get(d, 0) > 0 for d in ranked[q][:5]) / sum(r > 0 for r in judged[q].values())
                   for q in judged]
        assert report["results"][name]["recall@5"] == pytest.approx(np.mean(recall5), abs=1e-12)
        assert report["results"][name]["recall@5_stderr"] == pytest.approx(np.std(recall5, ddof=1) / np.sqrt(3))
        p5 = [sum(judged[q].get(d, 0) > 0 for d in ranked[q][:5]) / 5 for q in judged]
        assert report["results"][name]["p@5"] == pytest.approx(np.mean(p5), abs=1e-12)
        assert report["recall_curve"][name]["5"][0] == report["results"][name]["recall@5"]
    tests = report["significance"]
    assert tests["measure"] == "ndcg@10" and tests["baseline"] == "bm25" and set(tests["tests"]) == {"dense", "hybrid"}
    for t in tests["tests"].values():
        assert 0 <= t["t_pvalue"] <= 1 and 0 <= t["randomization_pvalue"] <= 1
    lines = pq.read_text().splitlines()
    assert lines[0] == "pipeline\tquery_id\tmeasure\tvalue" and len(lines) == 1 + 3 * 3 * 7
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trec_qrels_and_topics_and_the_other_split(beir, tmp_path, capsys):
    qrels, topics = tmp_path / "qrels.txt", tmp_path / "topics.tsv"
    qrels.write_text("".join(f"{q} 0 {d} {r}\n" for q, (_, rels) in QUERIES.items() for d, r in rels.items()))
    topics.write_text("".join(f"{q}\t{text}\n" for q, (text, _) in QUERIES.items()))
    js = tmp_path / "t.json"
    args = ["eval", str(beir), "--pipelines", "bm25", "--ks", "5", "--embedder", "hashing-64", "-q",
            "--cache-dir", str(tmp_path / "c"), "--json", str(js)]
    assert main([*args, "--qrels", str(qrels), "--topics", str(topics)]) == 0
    trec = json.loads(js.read_text())
    assert trec["format"] == "trec" and trec["n_questions"] == 3
    assert main(args) == 0  # the same judgements from the BEIR folder: the same scores
    beir_report = json.loads(js.read_text())
    assert beir_report["per_query"] == trec["per_query"]
    sgml = tmp_path / "topics.sgml"
    sgml.write_text("".join(f"<top>\n<num> Number: {q}\n<title> {text}\n<desc> ...\n</top>\n"
                            for q, (text, _) in QUERIES.items()))
    assert evaluation.load_trec_topics(sgml) == {q: text for q, (text, _) in QUERIES.items()}
    assert main([*args, "--split", "dev"]) == 0
    assert json.loads(js.read_text())["n_questions"] == 1
    capsys.readouterr()
    assert main([*args, "--split", "train"]) == 2
    err = capsys.readouterr().err
    assert "no qrels for split 'train'" in err and "splits: dev, test" in err


def test_recall_is_trec_evals_and_equals_its_definition():
    rows = np.array([[3, 1, 7, -1], [0, 2, 4, 5], [-1, -1, -1, -1]])
    gold = [[1, 2], [5], [0]]
    for k in (1, 2, 4):
        want = [len(set(r[:k][r[:k] >= 0].tolist()) & set(g)) / len(g) for r, g in zip(rows, gold)]
        assert evaluation.recall_at_k(rows, gold, k).tolist() == want
    assert evaluation.mean_and_stderr([0.5, 1.0, 0.0]) == (0.5, pytest.approx(np.std([0.5, 1, 0], ddof=1) / np.sqrt(3)))
    same = evaluation.paired_test([0.2, 0.4], [0.2, 0.4])
    assert same == {"mean_difference": 0.0, "t_pvalue": 1.0, "randomization_pvalue": 1.0}
    better = evaluation.paired_test(np.zeros(30), np.linspace(0.5, 1, 30))
    assert better["t_pvalue"] < 1e-6 and better["randomization_pvalue"] < 1e-3


@pytest.mark.parametrize("content, message", [
    ("q1 0 d1\n", r"line 1: expected QUERY_ID ITER DOC_ID RELEVANCE"),
    ("q1 0 d1 x\n", r"line 1: expected"),
    ("q1 0 d1 1\nq1 0 d1 2\n", r"line 2: query 'q1' judges document 'd1' twice"),
    ("", "holds no judgements"),
])
def test_bad_trec_qrels_name_the_line(tmp_path, content, message):
    (tmp_path / "q.txt").write_text(content)
    with pytest.raises(InputError, match=message):
        evaluation.load_trec_qrels(tmp_path / "q.txt")


def test_unknown_benchmark_layout_is_one_line(tmp_path, capsys):
    (tmp_path / "corpus.jsonl").write_text('{"id": "a", "text": "alpha"}\n')
    assert main(["eval", str(tmp_path), "--pipelines", "bm25", "--embedder", "hashing-16", "-q",
                 "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither questions.jsonl (hopgraph) nor queries.jsonl and qrels/ (BEIR)" in err[0]


UNKNOWN = ("gone-1", "gone-2", "gone-3", "gone-4")


@pytest.fixture
def beir_with_unknown_ids(beir) -> Path:
    """The BEIR folder with q1 and q2 judging documents the corpus does not hold (8 judged ids, 4 missing)."""
    with open(beir / "qrels" / "test.tsv", "a") as f:
        f.write(f"q1\t{UNKNOWN[0]}\t2\nq1\t{UNKNOWN[1]}\t1\nq2\t{UNKNOWN[2]}\t1\nq2\t{UNKNOWN[3]}\t1\n")
    return beir


def eval_args(folder: Path, tmp_path: Path) -> list[str]:
    return ["eval", str(folder), "--pipelines", "bm25", "--ks", "5", "--embedder", "hashing-64", "-q",
            "--cache-dir", str(tmp_path / "c"), "--json", str(tmp_path / "r.json")]


def test_judged_documents_missing_from_the_corpus_are_warned_and_reported(beir_with_unknown_ids, tmp_path, capsys):
    assert main(eval_args(beir_with_unknown_ids, tmp_path)) == 0
    captured = capsys.readouterr()
    warned = [line for line in captured.err.splitlines() if "not in the corpus" in line]
    judged = len({d for q, (_, rels) in QUERIES.items() if q != "q4" for d in rels}) + len(UNKNOWN)  # q4: not evaluated
    share = len(UNKNOWN) / judged
    assert len(warned) == 1, captured.err
    assert f"{len(UNKNOWN)} of {judged} judged document id(s) ({share:.1%})" in warned[0]
    assert all(repr(d) in warned[0] for d in UNKNOWN[:3])
    assert f"judged documents not in the corpus: {len(UNKNOWN)} of {judged} ({share:.1%})" in captured.out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["judged_documents"] == {"judged": judged, "missing": len(UNKNOWN), "missing_share": share}


def test_strict_refuses_judged_documents_missing_from_the_corpus(beir_with_unknown_ids, tmp_path, capsys):
    assert main([*eval_args(beir_with_unknown_ids, tmp_path), "--strict"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "warning: " not in line]
    assert len(err) == 1 and "error:" in err[0] and f"{len(UNKNOWN)} of " in err[0] and "'gone-1'" in err[0], err
    assert not (tmp_path / "r.json").exists()


def test_a_corpus_holding_every_judged_document_reports_none_missing(beir, tmp_path, capsys):
    assert main([*eval_args(beir, tmp_path), "--strict"]) == 0
    assert "not in the corpus" not in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["judged_documents"]["missing"] == 0


def test_python_evaluate_warns_or_refuses_judged_documents_missing_from_the_corpus(beir_with_unknown_ids, tmp_path):
    from hopgraph.evaluate import evaluate

    kwargs = dict(pipelines=["bm25"], ks=[5], embedder="hashing-64", cache_dir=tmp_path / "c", progress=False)
    with pytest.warns(evaluation.UnjudgeableWarning, match=r"4 of 12 judged document id\(s\) \(33\.3%\)"):
        report = evaluate(beir_with_unknown_ids, **kwargs)
    assert report["judged_documents"]["missing"] == len(UNKNOWN)
    with pytest.raises(InputError, match="'gone-1', 'gone-2', 'gone-3', ...; they can never be retrieved"):
        evaluate(beir_with_unknown_ids, strict=True, **kwargs)


ALL_PIPELINES = "dense,bm25,hybrid,g3rag,stitch,ppr_binary,dmar"


def trec_eval_file(path: Path, qrels: dict, measures: set[str]) -> dict[str, dict[str, float]]:
    """trec_eval's semantics on a written run file: pytrec_eval given the file's own scores (it ranks a
    query's documents by score, ties by document id), not its rank column."""
    import pytrec_eval

    run: dict[str, dict[str, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run[qid][doc] = float(score)
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(dict(run))


@pytest.mark.slow
def test_every_printed_measure_is_trec_evals_on_the_written_run_files(beir, tmp_path):
    """All seven pipelines: each run file's scores strictly decrease down a query's ranking, and
    trec_eval's measures on the files (ties and all) equal the report's, per query — the deep
    measures from PIPELINE.run, Recall@k and P@k from PIPELINE.topK.run (the search for the largest k)."""
    runs, js = tmp_path / "runs", tmp_path / "r.json"
    assert main(["eval", str(beir), "--pipelines", ALL_PIPELINES, "--ks", "2,5", "--depth", "20", "--embedder",
                 "hashing-64", "-q", "--cache-dir", str(tmp_path / "c"), "--run-dir", str(runs),
                 "--json", str(js)]) == 0
    report = json.loads(js.read_text())
    qrels = {q: rels for q, (_, rels) in QUERIES.items() if q != "q4"}
    for name in ALL_PIPELINES.split(","):
        deep, table = runs / f"{name}.run", runs / f"{name}.top5.run"
        assert report["run_files"][name] == str(deep) and report["table_run_files"][name] == str(table)
        for path in (deep, table):
            by_query = defaultdict(list)
            for line in path.read_text().splitlines():
                qid, _, _, rank, score, _ = line.split()
                by_query[qid].append((int(rank), float(score)))
            for rows in by_query.values():
                assert [r for r, _ in rows] == list(range(1, len(rows) + 1))
                assert all(a[1] > b[1] for a, b in zip(rows, rows[1:])), (path, rows)
        got = trec_eval_file(deep, qrels, {"ndcg_cut.10", "recip_rank", "map_cut.100"})
        cut = trec_eval_file(table, qrels, {"recall.2", "recall.5", "P.2", "P.5"})
        for q in qrels:
            mine = report["per_query"][name][q]
            assert mine["ndcg@10"] == pytest.approx(got[q]["ndcg_cut_10"], abs=1e-12)
            assert mine["map@100"] == pytest.approx(got[q]["map_cut_100"], abs=1e-12)
            assert mine["recall@2"] == cut[q]["recall_2"] and mine["recall@5"] == cut[q]["recall_5"]
            assert mine["p@2"] == cut[q]["P_2"] and mine["p@5"] == cut[q]["P_5"]
            ranked = read_run(deep)[q][:10]  # MRR@10: recip_rank of the top 10 (the report's cut)
            rr = next((1 / (i + 1) for i, d in enumerate(ranked) if qrels[q].get(d, 0) > 0), 0.0)
            assert mine["mrr@10"] == pytest.approx(rr, abs=1e-12)


def test_tied_scores_keep_the_rankings_order_in_the_run_file(tmp_path):
    """Tied (and out-of-order) scores become strictly decreasing with the least change, so trec_eval
    ranks the documents as the run does, not by document id."""
    got = evaluation.strictly_decreasing([0.5, 0.5, 0.7, float("nan"), 0.1, 0.0, 0.0, -np.inf, -2.0])
    assert got[0] == 0.5 and got[1:4] == pytest.approx([0.5] * 3, abs=1e-5) and got[4:6] == [0.1, 0.0]
    assert got[6] == -1e-9 and got[7] == -1e30 and got[8] < -1e30
    as_float32 = np.asarray(got, np.float32)  # distinct for a reader holding float32 scores too
    assert all(a > b for a, b in zip(got, got[1:])) and (np.diff(as_float32) < 0).all()
    assert evaluation.strictly_decreasing([3.0, 2.0, 1.0]) == [3.0, 2.0, 1.0]  # strictly decreasing: unchanged
    run = {"q": [("z-doc", 1.0), ("a-doc", 1.0), ("m-doc", 1.0)]}
    path = tmp_path / "t.run"
    evaluation.write_trec_run(path, run, "t")
    qrels = {"q": {"z-doc": 1}}
    assert trec_eval_file(path, qrels, {"recip_rank"})["q"]["recip_rank"] == 1.0  # trec_eval sorts ties by id
    assert evaluation.evaluate_run(qrels, run, ["mrr@10"])["q"]["mrr@10"] == 1.0


@pytest.mark.slow
def test_search_topics_writes_the_run_eval_scores_and_eval_reads_a_built_index(beir, tmp_path, capsys):
    """Pyserini's split: `hopgraph search --topics --run` writes the run file `hopgraph eval` writes for
    the same pipeline and depth, and `hopgraph eval --index DIR` scores that built index without
    building one (its folder needs no corpus)."""
    index = tmp_path / "idx"
    assert main(["index", str(beir / "corpus.jsonl"), "--out", str(index), "--embedder", "hashing-64",
                 "--pipelines", "bm25,g3rag", "-q"]) == 0
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"{q}\t{text}\n" for q, (text, _) in QUERIES.items() if q != "q4"))
    run = tmp_path / "g3rag.run"
    assert main(["search", str(index), "--topics", str(topics), "--run", str(run), "--pipeline", "g3rag",
                 "--k", "20", "-q"]) == 0
    judged = tmp_path / "judged"
    (judged / "qrels").mkdir(parents=True)
    for name in ("queries.jsonl", "qrels/test.tsv"):
        (judged / name).write_text((beir / name).read_text())
    runs, js = tmp_path / "runs", tmp_path / "r.json"
    assert main(["eval", str(judged), "--index", str(index), "--pipelines", "g3rag,bm25", "--ks", "5", "--depth",
                 "20", "-q", "--run-dir", str(runs), "--json", str(js)]) == 0
    report = json.loads(js.read_text())
    assert report["n_passages"] == 30 and report["embedder"].startswith("hashing")
    assert run.read_text() == (runs / "g3rag.run").read_text()
    capsys.readouterr()
    assert main(["eval", str(judged), "--index", str(index), "--pipelines", "dmar", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # (after the unjudged-query warning)
    assert err.startswith("hopgraph eval: ") and "holds no fitted dmar" in err and "bm25, g3rag" in err
    for argv, message in ((["search", str(index), "--topics", str(topics)], "--topics and --run go together"),
                          (["search", str(index)], "give one or more questions"),
                          (["search", str(index), "q", "--topics", str(topics), "--run", str(run)], "not both")):
        assert main(argv) == 2
        assert message in capsys.readouterr().err
