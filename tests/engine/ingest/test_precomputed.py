"""Precomputed embeddings as a .npy or a folder of .npy shards."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import random_unit

from hopgraph.engine.errors import InputError
from hopgraph.engine.ingest.precomputed import open_embeddings


IDS = [f"p{i}" for i in range(50)]


def test_normalised_npy_is_used_in_place(tmp_path):
    X = random_unit(50, 8)
    np.save(tmp_path / "X.npy", X)
    out = open_embeddings(tmp_path / "X.npy", IDS, tmp_path / "work")
    assert isinstance(out, np.memmap) and str(out.filename) == str(tmp_path / "X.npy")
    assert not (tmp_path / "work").exists()
    np.testing.assert_array_equal(out, X)


def test_unnormalised_npy_is_normalised_into_work_dir(tmp_path):
    X = random_unit(50, 8) * np.arange(1, 51, dtype=np.float32)[:, None]
    np.save(tmp_path / "X.npy", X.astype(np.float64))
    out = open_embeddings(tmp_path / "X.npy", IDS, tmp_path / "work")
    assert isinstance(out, np.memmap) and out.dtype == np.float32
    assert (tmp_path / "work" / "embeddings.npy").is_file()
    np.testing.assert_allclose(out, random_unit(50, 8), atol=1e-6)
    mem = open_embeddings(tmp_path / "X.npy", IDS, None)   # no work dir: assembled in memory
    np.testing.assert_allclose(mem, out)


def test_positional_shards_concatenate_in_name_order(tmp_path):
    X = random_unit(50, 8)
    for name, (a, b) in {"part-00": (0, 20), "part-01": (20, 45), "part-02": (45, 50)}.items():
        np.save(tmp_path / f"{name}.npy", X[a:b])
    np.testing.assert_allclose(open_embeddings(tmp_path, IDS, tmp_path / "w"), X, atol=1e-6)


@pytest.mark.parametrize("ids_format", ["txt", "npy"])
def test_shards_with_ids_are_placed_by_id(tmp_path, ids_format):
    X = random_unit(50, 8)
    perm = np.random.default_rng(1).permutation(50)
    folder = tmp_path / "emb"
    folder.mkdir()
    for s, rows in enumerate(np.array_split(perm, 3)):
        np.save(folder / f"s{s}.npy", X[rows])
        ids = [IDS[r] for r in rows]
        if ids_format == "txt":
            (folder / f"s{s}.ids.txt").write_text("\n".join(ids) + "\n")
        else:
            np.save(folder / f"s{s}.ids.npy", np.array(ids))
    np.testing.assert_allclose(open_embeddings(folder, IDS, tmp_path / "w"), X, atol=1e-6)


def test_single_npy_with_ids_alongside_is_reordered(tmp_path):
    X = random_unit(50, 8)
    perm = np.random.default_rng(2).permutation(50)
    np.save(tmp_path / "X.npy", X[perm])
    (tmp_path / "X.ids.txt").write_text("\n".join(IDS[r] for r in perm))
    np.testing.assert_allclose(open_embeddings(tmp_path / "X.npy", IDS, tmp_path / "w"), X, atol=1e-6)


def _folder(tmp_path, blocks, ids=None):
    folder = tmp_path / "emb"
    folder.mkdir(exist_ok=True)
    for i, b in enumerate(blocks):
        np.save(folder / f"s{i}.npy", b)
        if ids is not None and ids[i] is not None:
            (folder / f"s{i}.ids.txt").write_text("\n".join(ids[i]))
    return folder


@pytest.mark.parametrize("case, message", [
    ("nan", r"s1\.npy: row 3 contains NaN"),
    ("zero", r"s1\.npy: row 7 is a zero vector"),
    ("dim", r"s1\.npy: dimension 9, but earlier shards have 8"),
    ("rows", r"has 49 rows but the corpus has 50"),
    ("ids_count", r"s0\.npy: 25 rows but .*s0\.ids\.txt lists 24 ids"),
    ("dup", r"s1\.npy row 0: id 'p0' appears twice"),
    ("unknown", r"s1\.npy row 1: id 'zz' is not in the corpus"),
    ("mixed", r"some shards have ids alongside and .*s1\.npy has none"),
    ("not2d", r"s0\.npy: expected a 2-D matrix"),
    ("ints", r"s0\.npy: expected floating-point"),
])
def test_shard_errors_name_the_shard_and_row(tmp_path, case, message):
    X = random_unit(50, 8)
    a, b = X[:25].copy(), X[25:].copy()
    ids = None
    if case == "nan":
        b[3, 2] = np.nan
    elif case == "zero":
        b[7] = 0
    elif case == "dim":
        b = random_unit(25, 9)
    elif case == "rows":
        b = b[:24]
    elif case == "ids_count":
        ids = [IDS[:24], IDS[25:]]
    elif case == "dup":
        ids = [IDS[:25], ["p0"] + IDS[26:]]
    elif case == "unknown":
        ids = [IDS[:25], ["p25", "zz"] + IDS[27:]]
    elif case == "mixed":
        ids = [IDS[:25], None]
    elif case == "not2d":
        a = a.ravel()
    elif case == "ints":
        a = (a * 100).astype(np.int32)
    with pytest.raises(InputError, match=message):
        open_embeddings(_folder(tmp_path, [a, b], ids), IDS, tmp_path / "w")


def test_missing_and_empty_sources(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        open_embeddings(tmp_path / "nope.npy", IDS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no .npy shards"):
        open_embeddings(tmp_path / "empty", IDS)
    (tmp_path / "X.txt").write_text("1 2 3")
    with pytest.raises(InputError, match="must be a .npy file"):
        open_embeddings(tmp_path / "X.txt", IDS)


def test_cli_index_accepts_a_shard_folder(tmp_path, demo_corpus):
    from hopgraph.cli import main
    from hopgraph.index import Index

    corpus_path = tmp_path / "corpus.jsonl"
    demo_corpus.write_jsonl(corpus_path)
    X = random_unit(len(demo_corpus), 16, seed=3)
    half = len(X) // 2
    folder = _folder(tmp_path, [X[half:], X[:half]], [list(demo_corpus.ids[half:]), list(demo_corpus.ids[:half])])
    out = tmp_path / "idx"
    assert main(["index", str(corpus_path), "--out", str(out), "--embeddings", str(folder),
                 "--embedder", "hashing-16", "--pipelines", "dense", "-q"]) == 0
    assert not (tmp_path / "idx.work").exists()
    index = Index.load(out)
    np.testing.assert_allclose(index.X, X, atol=1e-6)
