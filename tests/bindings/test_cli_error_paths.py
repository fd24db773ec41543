"""CLI error paths: one line on stderr, exit 2, no traceback — ``index --out`` without a name,
``add --embeddings`` of a pickled array, a CSV with a stray quote — and ``search --k`` beyond the
index, clamped."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hopgraph.cli import EXIT_USER_ERROR, main


@pytest.fixture
def corpus_file(tmp_path, demo_corpus):
    path = tmp_path / "c.jsonl"
    demo_corpus.write_jsonl(path)
    return path


@pytest.fixture
def small_index(tmp_path):
    corpus = tmp_path / "small.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": f"T{i}", "text": f"passage number {i} about x"}) + "\n"
                              for i in range(6)))
    out = tmp_path / "small-index"
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-16", "--pipelines", "dense,bm25",
                 "--quiet"]) == 0
    return out


def one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"hopgraph {command}: error: "), err
    return err


@pytest.mark.parametrize("out", [".", "/", "..", "some/dir/.."])
def test_index_out_without_a_name_is_one_line(out, corpus_file, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["index", str(corpus_file), "--out", out, "--embedder", "hashing-16", "--pipelines", "dense",
                 "--quiet"]) == EXIT_USER_ERROR
    assert "give the index directory a name" in one_line_error(capsys, "index")


def test_add_refuses_a_pickled_embeddings_file(small_index, tmp_path, capsys):
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"vector": [1.0] * 16}], dtype=object), allow_pickle=True)
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "n1", "title": "N", "text": "a new passage"}) + "\n")
    assert main(["add", str(small_index), str(new), "--embeddings", str(pickled), "--quiet"]) == EXIT_USER_ERROR
    err = one_line_error(capsys, "add")
    assert "objects.npy" in err and "Python objects" in err
    good = tmp_path / "good.npy"
    np.save(good, np.ones((1, 16), np.float32))
    assert main(["add", str(small_index), str(new), "--embeddings", str(good), "--quiet"]) == 0


def test_csv_with_a_stray_quote_names_its_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text('id,title,text\n1,T1,plain text\n2,T2,"an unclosed quote\n3,T3,third row\n4,T4,fourth\n')
    assert main(["index", str(bad), "--out", str(tmp_path / "i"), "--embedder", "hashing-16", "--pipelines",
                 "dense", "--quiet"]) == EXIT_USER_ERROR
    err = one_line_error(capsys, "index")
    assert "bad.csv line 3: malformed CSV row" in err and not (tmp_path / "i").exists()


def test_search_k_beyond_the_index_is_clamped(small_index, capsys):
    assert main(["search", str(small_index), "passage", "--pipeline", "dense", "--k", "1000000000", "--json",
                 "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out[0]["hits"]) == 6


def test_search_refuses_a_filter_over_a_bound_in_one_line(small_index, capsys):
    from hopgraph.engine.filters import MAX_WHERE_DEPTH

    where: dict = {"year": 1}
    for _ in range(MAX_WHERE_DEPTH):
        where = {"$or": [where]}
    assert main(["search", str(small_index), "passage", "--pipeline", "dense", "--where", json.dumps(where),
                 "--quiet"]) == EXIT_USER_ERROR
    assert f"the bound on nesting depth through $and / $or / $not is {MAX_WHERE_DEPTH}" in one_line_error(capsys,
                                                                                                           "search")


def test_an_index_folder_with_stray_files_is_still_an_index(small_index, corpus_file, tmp_path, capsys):
    strays = {"notes.txt": b"my notes", ".DS_Store": b"\x00\x01"}
    for name, data in strays.items():
        (small_index / name).write_bytes(data)
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "n1", "title": "N", "text": "a new passage about x"}) + "\n")
    assert main(["add", str(small_index), str(new), "--quiet"]) == 0, capsys.readouterr().err
    assert main(["delete", str(small_index), "n1"]) == 0, capsys.readouterr().err
    assert main(["compact", str(small_index), "--quiet"]) == 0, capsys.readouterr().err
    assert main(["index", str(corpus_file), "--out", str(small_index), "--embedder", "hashing-16", "--pipelines",
                 "dense", "--overwrite", "--quiet"]) == 0, capsys.readouterr().err
    assert main(["verify", str(small_index)]) == 0, capsys.readouterr().err
    assert {name: (small_index / name).read_bytes() for name in strays} == strays  # never removed

