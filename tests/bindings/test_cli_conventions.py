"""CLI conventions: ``--version``, help with choices and defaults, names and parameters
checked before any work, ``search --k`` / ``eval --ks``, ``eval --json`` standard errors, the
platform cache directory, and hopgraph's own progress bars (bm25s's folded in)."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

from hopgraph.cli import main

BM25S_BARS = ("Split strings", "Stem Tokens", "Count Tokens", "Compute Scores", "Create Vocab", "BM25S",
              "Reconstructing token strings")


def test_bm25_progress_is_one_hopgraph_bar_per_stage(demo_corpus, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    demo_corpus.write_jsonl(corpus)
    assert main(["index", str(corpus), "--out", str(tmp_path / "i"), "--embedder", "hashing-16",
                 "--pipelines", "bm25"]) == 0
    err = capsys.readouterr().err
    bars = {line.split(":")[0] + (":" + line.split(":")[1] if line.startswith("bm25:") else "")
            for line in re.split(r"[\r\n]+", err) if "%|" in line}
    assert bars == {"embed", "bm25: tokenize", "bm25: index"}, bars
    assert not [b for b in BM25S_BARS if b in err], err
    assert main(["index", str(corpus), "--out", str(tmp_path / "j"), "--embedder", "hashing-16",
                 "--pipelines", "bm25", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- --version and help
def test_version(capsys):
    import hopgraph

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"hopgraph {hopgraph.__version__}"


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare word by word


@pytest.mark.parametrize("command", ["index", "search", "eval", "train-gnn", "train-gate", "demo"])
def test_help_gives_every_option_a_text_and_its_default(command, capsys):
    from hopgraph.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    text = _help(capsys, command)
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings[0]} has no help"
        if action.default not in (None, False):
            shown = ",".join(map(str, action.default)) if isinstance(action.default, list) else action.default
            assert f"(default: {shown})" in text.replace(", ", ","), (command, action.option_strings[0], text)
        for choice in action.choices or ():
            assert str(choice) in text


def test_help_lists_the_pipelines(capsys):
    from hopgraph.engine.pipelines import pipeline_names

    known = ", ".join(pipeline_names())
    assert f"of: {known} (default: dense,bm25,g3rag)" in _help(capsys, "index")
    assert f"of: {known} (default: dense,bm25,g3rag)" in _help(capsys, "eval")
    assert f"one of: {known} (default: g3rag)" in _help(capsys, "search")
    assert "(default: 2,5,8)" in _help(capsys, "eval")


# ---------------------------------------------------------------- names and parameters checked before any work
@pytest.fixture
def no_work(monkeypatch):
    """Embedding, loading or evaluating fails the test: a refusal must come before any of them."""
    from hopgraph import evaluate
    from hopgraph.engine.embedders import HashingEmbedder
    from hopgraph.index import Index

    def fail(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(HashingEmbedder, "encode", fail)
    monkeypatch.setattr(Index, "load", fail)
    monkeypatch.setattr(evaluate, "cached_index", fail)


def _refused(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("extra, needles", [
    (["--pipelines", "dense,bm2"], ("unknown pipeline 'bm2'", "known: dense")),
    (["--pipelines", ","], ("--pipelines names no pipeline",)),
    (["--param", "g3rag.gama=0.1"], ("unknown parameter 'gama'", "search parameters:")),
    (["--param", "bm25.b=2"], ("'b'",)),
    (["--param", "nope.x=1"], ("unknown pipeline 'nope'",)),
])
def test_index_refuses_bad_names_and_params_before_embedding(extra, needles, demo_corpus, tmp_path, capsys, no_work):
    corpus = tmp_path / "c.jsonl"
    demo_corpus.write_jsonl(corpus)
    _refused(capsys, ["index", str(corpus), "--out", str(tmp_path / "i"), "--embedder", "hashing-16", "-q", *extra],
             *needles)
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize("extra, needles", [
    (["--pipeline", "g3ra"], ("unknown pipeline 'g3ra'", "known: dense")),
    (["--pipeline", "bm25", "--param", "k1=-1"], ("'k1'",)),
    (["--param", "gama=0.1"], ("g3rag: unknown parameter 'gama'",)),
])
def test_search_refuses_bad_names_and_params_before_loading(extra, needles, tmp_path, capsys, no_work):
    _refused(capsys, ["search", str(tmp_path / "missing-index"), "q", *extra], *needles)


@pytest.mark.parametrize("extra, needles", [
    (["--pipelines", "dense,stich"], ("unknown pipeline 'stich'",)),
    (["--param", "dense.nope=1"], ("dense: unknown parameter 'nope'",)),
    (["--ks", "0,5"], ()),
])
def test_eval_refuses_bad_names_and_params_before_loading(extra, needles, tmp_path, capsys, no_work):
    data = tmp_path / "d"
    data.mkdir()
    (data / "corpus.jsonl").write_text('{"id": "a", "text": "x"}\n')
    (data / "questions.jsonl").write_text('{"id": "q", "question": "x", "gold_ids": ["a"]}\n')
    _refused(capsys, ["eval", str(data), "--embedder", "hashing-16", "-q", "--cache-dir", str(tmp_path / "c"),
                      *extra], *needles)


# ---------------------------------------------------------------- eval: --ks, --json stderr, cache directory
@pytest.fixture
def eval_data(tmp_path, demo_corpus):
    d = tmp_path / "demo"
    d.mkdir()
    demo_corpus.write_jsonl(d / "corpus.jsonl")
    (d / "questions.jsonl").write_text(json.dumps(
        {"id": "q1", "question": "Who founded the company that acquired Tessellate Systems?",
         "gold_ids": ["demo-24", "demo-25"]}) + "\n" + json.dumps(
        {"id": "q2", "question": "Which architect renovated the stadium of Riverton FC?",
         "gold_ids": ["demo-16", "demo-17"]}) + "\n")
    return d


def test_eval_json_has_the_table_standard_errors_and_uses_the_cache_env(eval_data, tmp_path, capsys,
                                                                       monkeypatch):
    cache, js = tmp_path / "env-cache", tmp_path / "r.json"
    monkeypatch.setenv("HOPGRAPH_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(eval_data), "--pipelines", "bm25", "--ks", "1,3", "--embedder", "hashing-16",
                 "--json", str(js), "-q"]) == 0
    table = capsys.readouterr().out
    r = json.loads(js.read_text())["results"]["bm25"]
    assert {"recall@1", "recall@1_stderr", "recall@3", "recall@3_stderr", "index_seconds",
            "queries_per_second"} <= set(r)
    for k in (1, 3):
        assert f"{r[f'recall@{k}']:.3f} ± {r[f'recall@{k}_stderr']:.3f}" in table
    assert r["recall@3_stderr"] >= 0
    assert [p.name for p in cache.iterdir()] and not (tmp_path / ".hopgraph-cache").exists()
    # --cache-dir wins over the environment
    other = tmp_path / "flag-cache"
    assert main(["eval", str(eval_data), "--pipelines", "bm25", "--ks", "2", "--embedder", "hashing-16",
                 "--cache-dir", str(other), "-q"]) == 0
    assert [p.name for p in other.iterdir()]


def test_eval_k_is_a_deprecated_alias_of_ks(eval_data, tmp_path, capsys):
    args = ["eval", str(eval_data), "--pipelines", "bm25", "--embedder", "hashing-16", "-q",
            "--cache-dir", str(tmp_path / "c")]
    assert main([*args, "--k", "1,4"]) == 0
    out = capsys.readouterr()
    assert "R@1" in out.out and "R@4" in out.out and "--k is deprecated, use --ks" in out.err
    _refused(capsys, [*args, "--k", "1", "--ks", "2"], "give --ks only")


def test_platform_cache_dir_is_platformdirs(monkeypatch, tmp_path):
    import platformdirs

    from hopgraph.cache_dir import platform_cache_dir

    assert platform_cache_dir() == Path(platformdirs.user_cache_dir("hopgraph", appauthor=False))
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        assert platform_cache_dir() == tmp_path / "hopgraph"


def test_default_cache_dir_env_override(monkeypatch, tmp_path):
    from hopgraph.cache_dir import default_cache_dir, platform_cache_dir

    assert default_cache_dir({"HOPGRAPH_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert default_cache_dir({"HOPGRAPH_CACHE_DIR": ""}) == platform_cache_dir()
