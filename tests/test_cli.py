import json

import pytest

from conftest import shared_dataset
from hopgraph.cli import main
from hopgraph.engine.embedders import HashingEmbedder

DEMO_QUESTIONS = [
    {"id": "q1", "question": "Who founded the company that acquired Tessellate Systems?",
     "gold_ids": ["demo-24", "demo-25"]},
    {"id": "q2", "question": "Which architect renovated the stadium of Riverton FC?", "gold_ids": ["demo-16", "demo-17"]},
]


@pytest.fixture
def demo_data(tmp_path, demo_corpus):
    d = tmp_path / "demo"
    d.mkdir()
    demo_corpus.write_jsonl(d / "corpus.jsonl")
    (d / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in DEMO_QUESTIONS) + "\n")
    return d


def test_index_then_search(demo_data, tmp_path, capsys):
    out = tmp_path / "idx"
    assert main(["index", str(demo_data / "corpus.jsonl"), "--out", str(out), "--embedder", "hashing-64",
                 "--pipelines", "dense,bm25", "-q"]) == 0
    assert (out / "CURRENT").is_file()
    capsys.readouterr()
    assert main(["search", str(out), "Who founded Orbis Computing?", "--pipeline", "bm25", "--k", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res[0]["hits"][0]["id"] == "demo-25" and [h["rank"] for h in res[0]["hits"]] == [1, 2]
    assert main(["search", str(out), "Orbis", "--pipeline", "dense"]) == 0
    assert "1. [" in capsys.readouterr().out


def test_cli_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    assert main(["index", str(bad), "--out", str(tmp_path / "i"), "--embedder", "hashing-8", "-q"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl line 2: duplicate id 'a'" in err
    assert not (tmp_path / "i").exists()
    assert main(["search", str(tmp_path / "nothing"), "q"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_eval_json_schema_and_cache(demo_data, tmp_path, capsys, monkeypatch):
    js, cache = tmp_path / "r.json", tmp_path / "cache"
    args = ["eval", str(demo_data), "--pipelines", "dense,bm25", "--k", "1,3", "--embedder", "hashing-64",
            "--cache-dir", str(cache), "--json", str(js), "-q"]
    assert main(args) == 0
    report = json.loads(js.read_text())
    assert set(report) == {"dataset", "n_passages", "n_questions", "results"}
    assert report["dataset"] == "demo" and report["n_passages"] == 30 and report["n_questions"] == 2
    for r in report["results"].values():
        assert set(r) == {"recall@1", "recall@3", "index_seconds", "queries_per_second"}
        assert 0 <= r["recall@3"] <= 1 and r["queries_per_second"] > 0
    assert report["results"]["bm25"]["recall@3"] >= 0.5
    # second run: loads the cache, never embeds passages again
    calls = []
    orig = HashingEmbedder.encode
    monkeypatch.setattr(HashingEmbedder, "encode", lambda self, texts, **kw: calls.append(len(texts)) or orig(self, texts, **kw))
    assert main(args) == 0
    assert calls == [len(DEMO_QUESTIONS)]
    assert json.loads(js.read_text())["results"]["dense"]["recall@3"] == report["results"]["dense"]["recall@3"]


def test_eval_ablations_and_plot(demo_data, tmp_path, capsys):
    png = tmp_path / "r.png"
    assert main(["eval", str(demo_data), "--pipelines", "hybrid", "--k", "2", "--embedder", "hashing-64",
                 "--cache-dir", str(tmp_path / "c"), "--ablations", "--plot", str(png), "-q"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "± " in capsys.readouterr().out


def test_eval_on_shared_hotpotqa(tmp_path):
    data = shared_dataset("hotpotqa")
    js = tmp_path / "hp.json"
    assert main(["eval", str(data), "--pipelines", "bm25", "--k", "2,5", "--embedder", "hashing-64",
                 "--cache-dir", str(tmp_path / "c"), "--json", str(js), "-q"]) == 0
    r = json.loads(js.read_text())
    assert r["n_passages"] == 994 and r["n_questions"] == 100
    assert 0.6 < r["results"]["bm25"]["recall@5"] < 0.9  # bm25s on HotpotQA: about 0.76
