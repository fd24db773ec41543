"""CLI error paths: one line on stderr, exit 2, no traceback — ``index --out`` without a name,
``add --embeddings`` of a pickled array, a CSV with a stray quote, metadata JSON cannot hold, an id
over the length limit, a filter over a bound, input files that are not UTF-8 (named with the line) or
not regular files — and ``search --k`` beyond the index, clamped; an index folder with stray files is
still an index."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from hopgraph import InputError, read_corpus
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


@pytest.mark.parametrize("metadata", ['{"score": NaN}', '{"tags": ["a", {"w": Infinity}]}'])
def test_metadata_json_cannot_hold_is_one_line_naming_the_file_and_line(small_index, tmp_path, capsys, metadata):
    bad = tmp_path / "nan.jsonl"
    bad.write_text('{"id": "n1", "text": "a fine passage"}\n{"id": "n2", "text": "a passage", "metadata": '
                   + metadata + "}\n")
    assert main(["index", str(bad), "--out", str(tmp_path / "i"), "--embedder", "hashing-16", "--pipelines",
                 "dense", "--quiet"]) == EXIT_USER_ERROR
    err = one_line_error(capsys, "index")
    assert f"{bad} line 2 ('n2'): metadata field" in err and "which JSON cannot hold" in err
    assert not (tmp_path / "i").exists()
    assert main(["add", str(small_index), str(bad), "--quiet"]) == EXIT_USER_ERROR
    assert f"{bad} line 2 ('n2'): metadata field" in one_line_error(capsys, "add")
    assert main(["search", str(small_index), "passage", "--pipeline", "dense", "--k", "10", "--json",
                 "--quiet"]) == 0
    assert {h["id"] for h in json.loads(capsys.readouterr().out)[0]["hits"]} == {f"p{i}" for i in range(6)}


def test_an_id_over_the_limit_is_one_line_naming_the_file_and_line(small_index, tmp_path, capsys):
    from hopgraph.engine.components.records import MAX_ID_BYTES

    bad = tmp_path / "long.jsonl"
    bad.write_text(json.dumps({"id": "n1", "text": "a fine passage"}) + "\n"
                   + json.dumps({"id": "x" * (MAX_ID_BYTES + 1), "text": "a passage"}) + "\n")
    assert main(["add", str(small_index), str(bad), "--quiet"]) == EXIT_USER_ERROR
    err = one_line_error(capsys, "add")
    assert f"{bad} line 2: 'id'" in err and f"the limit is {MAX_ID_BYTES}" in err


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



LATIN1 = "café".encode("latin-1")  # 0xe9: not UTF-8


def benchmark(folder, qrels: bytes | None = None, queries: bytes | None = None, corpus: bytes | None = None):
    """A BEIR folder of two passages and one judged query; any file given as bytes replaces its own."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_bytes(corpus or b'{"_id": "a", "text": "alpha"}\n{"_id": "b", "text": "beta"}\n')
    (folder / "queries.jsonl").write_bytes(queries or b'{"_id": "q1", "text": "alpha?"}\n')
    (folder / "qrels" / "test.tsv").write_bytes(qrels or b"query-id\tcorpus-id\tscore\nq1\ta\t1\n")
    return folder


@pytest.mark.parametrize("name, make", [
    ("qrels/test.tsv", lambda d: benchmark(d, qrels=b"query-id\tcorpus-id\tscore\nq1\t" + LATIN1 + b"\t1\n")),
    ("queries.jsonl", lambda d: benchmark(d, queries=b'{"_id": "q0", "text": "x"}\n{"_id": "q1", "text": "'
                                          + LATIN1 + b'"}\n')),
    ("corpus.jsonl", lambda d: benchmark(d, corpus=b'{"_id": "b", "text": "beta"}\n{"_id": "a", "text": "'
                                         + LATIN1 + b'"}\n')),
])
def test_non_utf8_benchmark_files_name_the_file_and_line(tmp_path, capsys, name, make):
    folder = make(tmp_path / "bench")
    assert main(["eval", str(folder), "--pipelines", "bm25", "--ks", "1", "--embedder", "hashing-16", "-q",
                 "--cache-dir", str(tmp_path / "c")]) == EXIT_USER_ERROR
    assert f"{folder / name} line 2: not valid UTF-8 text (byte 0xe9" in one_line_error(capsys, "eval")


@pytest.mark.parametrize("which", ["--qrels", "--topics"])
def test_non_utf8_trec_files_name_the_file_and_line(tmp_path, capsys, which):
    folder = benchmark(tmp_path / "bench")
    files = {"--qrels": tmp_path / "qrels.txt", "--topics": tmp_path / "topics.tsv"}
    files["--qrels"].write_bytes(b"q1 0 a 1\n" + (b"q1 0 " + LATIN1 + b" 1\n" if which == "--qrels" else b""))
    files["--topics"].write_bytes(b"q0\tfirst\n" + (b"q1\t" + LATIN1 + b"\n" if which == "--topics" else b"q1\tok\n"))
    assert main(["eval", str(folder), "--qrels", str(files["--qrels"]), "--topics", str(files["--topics"]),
                 "--pipelines", "bm25", "--ks", "1", "--embedder", "hashing-16", "-q",
                 "--cache-dir", str(tmp_path / "c")]) == EXIT_USER_ERROR
    assert f"{files[which]} line 2: not valid UTF-8 text (byte 0xe9" in one_line_error(capsys, "eval")


def test_non_utf8_id_files_name_the_file_and_line(small_index, tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"p1\n" + LATIN1 + b"\n")
    assert main(["search", str(small_index), "passage", "--pipeline", "dense", "--allowed-ids", str(ids)]) == \
        EXIT_USER_ERROR
    assert f"{ids} line 2: not valid UTF-8 text" in one_line_error(capsys, "search")
    assert main(["delete", str(small_index), "--ids-file", str(ids)]) == EXIT_USER_ERROR
    assert f"{ids} line 2: not valid UTF-8 text" in one_line_error(capsys, "delete")


@pytest.fixture
def fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_input_paths_that_are_not_regular_files_are_named(small_index, tmp_path, fifo, capsys):
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "n1", "text": "a new passage"}) + "\n")
    device = "/dev/zero" if os.path.exists("/dev/zero") else str(fifo)
    for source in (device, str(fifo)):  # reading either would never end
        assert main(["add", str(small_index), str(new), "--embeddings", source, "--quiet"]) == EXIT_USER_ERROR
        assert f"embeddings {source} is not a regular file" in one_line_error(capsys, "add")
        assert main(["add", str(small_index), source, "--quiet"]) == EXIT_USER_ERROR
        assert f"corpus {source} is not a regular file" in one_line_error(capsys, "add")
    folder = benchmark(tmp_path / "bench")
    for flag, what in (("--qrels", "qrels file"), ("--topics", "topics file")):
        other = tmp_path / "topics.tsv" if flag == "--qrels" else tmp_path / "qrels.txt"
        other.write_text("q1\tx\n" if flag == "--qrels" else "q1 0 a 1\n")
        paths = {flag: str(fifo), ("--topics" if flag == "--qrels" else "--qrels"): str(other)}
        assert main(["eval", str(folder), *[x for kv in paths.items() for x in kv], "--pipelines", "bm25", "--ks",
                     "1", "--embedder", "hashing-16", "-q", "--cache-dir", str(tmp_path / "c")]) == EXIT_USER_ERROR
        assert f"{what} {fifo} is not a regular file" in one_line_error(capsys, "eval")
    assert main(["delete", str(small_index), "--ids-file", str(tmp_path)]) == EXIT_USER_ERROR
    assert f"--ids-file file {tmp_path} is a directory, not a file" in one_line_error(capsys, "delete")
    with pytest.raises(InputError, match="is not a regular file"):
        read_corpus(fifo)


@pytest.mark.parametrize("item", ["year>>3000", "year==1999", "tag=<x"])
def test_where_value_that_starts_with_an_operator_is_a_typo(item, small_index, capsys):
    """``--where year>>3000`` is refused in one line naming the value and how to give such a text,
    not run as a filter that passes nothing."""
    assert main(["search", str(small_index), "x", "--where", item, "--pipeline", "dense"]) == EXIT_USER_ERROR
    err = one_line_error(capsys, "search")
    assert "starts with an operator" in err and item in err
