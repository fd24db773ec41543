"""The ``hopgraph`` command line: index then search, eval (JSON schema, cache, ablations, plot, the
shared HotpotQA set), user errors as one line with exit status 2, internal errors shown as such, and
search results with text and metadata."""
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
    args = ["eval", str(demo_data), "--pipelines", "dense,bm25", "--ks", "1,3", "--embedder", "hashing-64",
            "--cache-dir", str(cache), "--json", str(js), "-q"]
    assert main(args) == 0
    report = json.loads(js.read_text())
    assert set(report) == {"schema_version", "dataset", "format", "split", "n_passages", "n_questions",
                           "judged_documents", "embedder", "depth", "measures", "results", "per_query",
                           "recall_curve", "significance", "run_files", "table_run_files"}
    assert report["dataset"] == "demo" and report["n_passages"] == 30 and report["n_questions"] == 2
    measures = ["ndcg@10", "mrr@10", "map@100", "recall@1", "recall@3", "p@1", "p@3"]
    assert report["measures"] == measures and report["format"] == "hopgraph" and report["depth"] == 100
    for r in report["results"].values():
        assert set(r) == {*measures, *(f"{m}_stderr" for m in measures), "index_seconds", "queries_per_second"}
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
    assert main(["eval", str(demo_data), "--pipelines", "hybrid", "--ks", "2", "--embedder", "hashing-64",
                 "--cache-dir", str(tmp_path / "c"), "--ablations", "--plot", str(png), "-q"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "± " in capsys.readouterr().out


@pytest.mark.slow
def test_eval_on_shared_hotpotqa(tmp_path):
    data = shared_dataset("hotpotqa")
    js = tmp_path / "hp.json"
    assert main(["eval", str(data), "--pipelines", "bm25", "--ks", "2,5", "--embedder", "hashing-64",
                 "--cache-dir", str(tmp_path / "c"), "--json", str(js), "-q"]) == 0
    r = json.loads(js.read_text())
    assert r["n_passages"] == 994 and r["n_questions"] == 100
    assert 0.6 < r["results"]["bm25"]["recall@5"] < 0.9  # bm25s on HotpotQA: about 0.76


# ---------------------------------------------------------------- one line, exit 2, for user errors
def _index_args(corpus, tmp_path) -> list[str]:
    return ["index", str(corpus), "--out", str(tmp_path / "idx"), "--embedder", "hashing-8", "-q",
            "--pipelines", "dense"]


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("content, needles", [
    (b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\n',
     ("bad.jsonl line 2: not valid UTF-8 text (byte 0xe9",)),
    (b'{"id": "a", "title": 0, "text": "x"}\n', ("bad.jsonl line 1: 'title' must be a string", "int 0")),
    (b"", ("bad.jsonl holds no passages",)),
    (b"\n  \n", ("bad.jsonl holds no passages",)),
    (b'{"id": "a", "text": "lone \\ud800 surrogate"}\n', ("bad.jsonl line 1: 'text': not valid Unicode",)),
])
def test_cli_bad_corpus_is_one_line_exit_2(tmp_path, capsys, content, needles):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    assert main(_index_args(bad, tmp_path)) == 2
    _one_line_error(capsys, "hopgraph index: error: ", *needles)
    assert not (tmp_path / "idx").exists()


def test_cli_missing_corpus_and_directory_corpus(tmp_path, capsys):
    assert main(_index_args(tmp_path / "nope.jsonl", tmp_path)) == 2
    _one_line_error(capsys, "nope.jsonl does not exist")
    assert main(_index_args(tmp_path, tmp_path)) == 2
    _one_line_error(capsys, f"corpus folder {tmp_path} holds no .txt or .md files")


def test_cli_os_error_names_the_path(tmp_path, capsys, demo_data):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    args = _index_args(demo_data / "corpus.jsonl", tmp_path)
    args[args.index("--out") + 1] = str(blocker / "idx")  # a path below a regular file
    assert main(args) == 2
    _one_line_error(capsys, "hopgraph index: error: ", str(blocker))


def test_describe_user_error_classifies_exceptions():
    from hopgraph.cli import describe_user_error
    from hopgraph.engine.errors import IndexFormatError, InputError

    assert describe_user_error(InputError("bad")) == "bad"
    assert describe_user_error(IndexFormatError("old")) == "old"
    assert describe_user_error(PermissionError(13, "Permission denied", "/x/y")) == "Permission denied: /x/y"
    assert "not valid UTF-8" in describe_user_error(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"))
    for bug in (ValueError("x"), KeyError("x"), TypeError("x"), IndexError("x")):
        assert describe_user_error(bug) is None


def test_cli_internal_error_is_not_dressed_as_user_error(tmp_path, capsys, monkeypatch):
    import hopgraph.cli.search_commands as cli

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_search", broken)
    assert main(["search", str(tmp_path), "q"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal error (a bug in hopgraph" in err and "KeyError" in err


def test_search_json_returns_text_and_metadata(tmp_path, demo_corpus, capsys):
    from meta_corpus import meta_id, meta_of, write_meta_corpus

    corpus = write_meta_corpus(demo_corpus, tmp_path / "meta.jsonl")
    out = tmp_path / "idx"
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-64", "--pipelines", "bm25", "-q"]) == 0
    capsys.readouterr()
    assert main(["search", str(out), "Who founded Orbis Computing?", "--pipeline", "bm25", "--k", "3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    assert len(hits) == 3 and hits[0]["title"] == "Orbis Computing"
    for h in hits:
        i = next(i for i in range(len(demo_corpus)) if meta_id(i) == h["id"])
        assert h["text"] == demo_corpus.texts[i] and h["metadata"] == meta_of(i, h["id"])
    assert main(["search", str(out), "Who founded Orbis Computing?", "--pipeline", "bm25", "--k", "1"]) == 0
    assert demo_corpus.texts[int(hits[0]["id"].split(" ")[1].split("#")[0])][:60] in capsys.readouterr().out
