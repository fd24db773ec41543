"""Index storage safety: --out safety, the write lock, the commit point at every step of a
replace, reader leases, clear load errors, ``hopgraph verify``."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hopgraph import HashingEmbedder, Index, IndexFormatError, InputError
from hopgraph.cli import main
from hopgraph.engine import storage
from hopgraph.engine.embedders import CallableEmbedder
from hopgraph.engine.errors import IndexLockedError

from conftest import rewrite_manifest

Q = ["Which company acquired Tessellate Systems?"]


@pytest.fixture(scope="module")
def small(demo_corpus):
    return Index.build(demo_corpus, embedder="hashing-32", pipelines=["dense", "bm25"], progress=False)


@pytest.fixture(scope="module")
def other(demo_corpus):
    from hopgraph.engine.components.corpus import Corpus

    c = Corpus(demo_corpus.ids[:20], demo_corpus.titles[:20], demo_corpus.texts[:20])
    return Index.build(c, embedder="hashing-32", pipelines=["dense", "bm25"], progress=False)


def _ids(index: Index) -> list:
    return index.search_arrays(Q, pipeline="bm25", k=3)[0].tolist()


def test_out_never_deletes_user_files(small, tmp_path, demo_corpus, capsys):
    corpus = tmp_path / "corpus.jsonl"
    demo_corpus.write_jsonl(corpus)
    before = corpus.read_bytes()
    user = tmp_path / "docs"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    for out in (corpus, user):
        assert main(["index", str(corpus), "--out", str(out), "--overwrite", "--embedder", "hashing-32",
                     "--pipelines", "dense", "-q"]) == 2
        assert str(out) in capsys.readouterr().err
        with pytest.raises(InputError, match="not a hopgraph index|not a directory"):
            small.save(out, overwrite=True)
    assert corpus.read_bytes() == before and (user / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"]
    out = tmp_path / "idx"
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-32", "--pipelines", "dense",
                 "-q"]) == 0
    assert main(["index", str(corpus), "--out", str(out), "--embedder", "hashing-32", "--pipelines", "bm25",
                 "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a hopgraph index; pass --overwrite" in err[0]
    assert list(Index.load(out).pipelines) == ["dense"]
    assert main(["index", str(corpus), "--out", str(out), "--overwrite", "--embedder", "hashing-32",
                 "--pipelines", "bm25", "-q"]) == 0
    assert list(Index.load(out).pipelines) == ["bm25"]
    with pytest.raises(InputError, match="overwrite=True"):
        small.save(out)
    empty = tmp_path / "empty"
    empty.mkdir()
    small.save(empty)                               # an empty directory is fine
    (tmp_path / "work.work").mkdir()
    (tmp_path / "work.work" / "keep.txt").write_text("x")  # OUT.work holding user files: refused, kept
    assert main(["index", str(corpus), "--out", str(tmp_path / "work"), "--embedder", "hashing-32",
                 "--pipelines", "dense", "-q"]) == 2
    assert (tmp_path / "work.work" / "keep.txt").read_text() == "x" and not (tmp_path / "work").exists()


@pytest.mark.slow
def test_second_writer_is_refused_naming_the_holder(small, tmp_path):
    out = small.save(tmp_path / "idx")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from hopgraph.engine import storage\n"
                               "storage.WriteLock(Path(sys.argv[1])).__enter__()\nprint('locked', flush=True)\n"
                               "time.sleep(60)", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(IndexLockedError, match=f"{out} is being written by another hopgraph process "
                                                   f"\\(pid {holder.pid}"):
            small.save(out, overwrite=True)
        assert main(["verify", str(out)]) == 0       # readers are not blocked by a writer
    finally:
        holder.kill()
        holder.wait()
    small.save(out, overwrite=True)                  # a dead holder's lock is released by the kernel


class Crash(BaseException):
    """A simulated kill at one step of the commit: what the writer wrote stays (rmtree is disabled)."""


STEPS = ["write_json", "fsync_tree", "rename", "commit_file", "replace", "write_current", "cleanup"]


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_every_step_of_a_replace_leaves_one_complete_index(small, other, tmp_path, monkeypatch, step):
    out = small.save(tmp_path / "idx")
    old = _ids(Index.load(out))

    def crash(*a, **k):
        raise Crash(step)

    durable = storage.segment_infos.write_file_durably
    calls = {"n": 0}

    def write_durably(path, data, _step=step):  # the commit file, then CURRENT
        calls["n"] += 1
        if (_step == "commit_file" and calls["n"] == 1) or (_step == "write_current" and calls["n"] == 2):
            crash()
        return durable(path, data)

    with monkeypatch.context() as m:
        m.setattr(storage.commit.shutil, "rmtree", lambda *a, **k: None)   # a killed process cleans nothing up
        if step == "cleanup":
            m.setattr(storage.commit, "cleanup", lambda path, _n=[0]: (_n.__setitem__(0, _n[0] + 1),
                                                                crash() if _n[0] == 2 else None))
        elif step in ("commit_file", "write_current"):
            m.setattr(storage.segment_infos, "write_file_durably", write_durably)
        elif step == "replace":
            m.setattr(storage.durable.os, "replace", crash)
        else:
            m.setattr(*{"rename": (storage.commit.os, "rename")}.get(step, (storage.commit, step)), crash)
        with pytest.raises(Crash):
            other.save(out, overwrite=True)
    got = _ids(Index.load(out))
    assert got == (_ids(other) if step == "cleanup" else old)      # CURRENT switched: the new one
    other.save(out, overwrite=True)                                   # the next write works and cleans up
    assert _ids(Index.load(out)) == _ids(other)
    live = storage.read_current(out)[0]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["CURRENT", live, live.replace(".json", ".lock"), *[d.name for d in storage.segment_dirs(out)], "write.lock"])


def test_a_reader_keeps_its_commit_while_the_index_is_replaced(small, other, tmp_path):
    out = small.save(tmp_path / "idx")
    reader = Index.load(out)
    old_seg = storage.segment_dirs(out)[-1]
    other.save(out, overwrite=True)
    assert old_seg.is_dir() and _ids(reader) == _ids(small)          # still served from its files
    assert _ids(Index.load(out)) == _ids(other)
    reader.close()
    del reader
    other.save(out, overwrite=True)
    assert not old_seg.exists()
    assert len([p for p in out.iterdir() if p.name.startswith("seg-")]) == 1


@pytest.mark.slow
def test_load_errors_are_index_format_errors_naming_the_file(tmp_path, demo_corpus, capsys):
    index = Index.build(demo_corpus, embedder="hashing-32", pipelines=["bm25", "dmar"],
                        params={"dmar": {"gnn_steps": 2}}, progress=False)
    for rel in ("components/bm25-0/vocab_data.npy", "pipelines/dmar/gate.mlp.0.weight.npy",
                "pipelines/dmar/gnn.layers.0.self_lin.weight.npy", "pipelines/dmar/kg_df.npy"):
        out = index.save(tmp_path / rel.replace("/", "_"))
        (storage.segment_dirs(out)[-1] / rel).unlink()
        for verify in ("full", "fast"):
            with pytest.raises(IndexFormatError, match=rel.split("/")[-1].replace(".", r"\.") + ": missing"):
                Index.load(out, verify=verify)
        assert main(["search", str(out), "comet", "--pipeline", "bm25", "-q"]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    for key in ("embedder", "corpus", "pipelines", "segments"):
        out = index.save(tmp_path / f"nokey-{key}")
        rewrite_manifest(out, lambda m: m.pop(key))
        with pytest.raises(IndexFormatError, match=f"commit-000001.json: missing or invalid entry '{key}'"):
            Index.load(out)
    out = index.save(tmp_path / "emb")
    with pytest.raises(InputError, match="built with embedder 'hashing-32'"):
        Index.load(out, embedder=CallableEmbedder(HashingEmbedder(32).encode, name="other", dim=32))
    rewrite_manifest(out, lambda m: m["embedder"].update(name="hashing-48"))
    with pytest.raises(IndexFormatError, match="embedder 'hashing-48' has dimension 48, the manifest says 32"):
        Index.load(out)
    rewrite_manifest(out, lambda m: m["embedder"].update(name="hashing-x"))
    with pytest.raises(IndexFormatError, match="unknown embedder 'hashing-x'"):
        Index.load(out)


@pytest.mark.slow
def test_structural_validation_refuses_out_of_range_ids_without_checksums(tmp_path, demo_corpus):
    """The changes that crashed the process (segfault at the first query) are refused by the
    structural checks alone (``verify="fast"``), naming the file."""
    index = Index.build(demo_corpus, embedder="hashing-32", pipelines=["ppr_binary", "dmar", "g3rag"],
                        params={"dmar": {"gnn_steps": 2}}, progress=False)
    cases = [("pipelines/ppr_binary/hypergraph/edge_nodes.npy", 10 ** 6),
             ("pipelines/ppr_binary/hypergraph/node_group.npy", -1),
             ("pipelines/ppr_binary/hypergraph/graph_indices.npy", 10 ** 6),
             ("pipelines/ppr_binary/hypergraph/node_incidence.npy", 0),
             ("pipelines/dmar/kg_ego_indices.npy", 10 ** 6),
             ("pipelines/dmar/kg_pe_indptr.npy", 10 ** 6),
             ("pipelines/dmar/kg_adj_data.npy", 7.0),
             ("pipelines/g3rag/indices.npy", -5),
             ("embeddings.npy", 3.0),
             ("components/bm25-0/docs.npy", 10 ** 6)]
    for i, (rel, value) in enumerate(cases):
        out = index.save(tmp_path / f"c{i}")
        path = storage.segment_dirs(out)[-1] / rel
        a = np.load(path)
        a.flat[len(a.flat) // 2] = value
        np.save(path, a)
        with pytest.raises(IndexFormatError, match="checksum mismatch"):
            Index.load(out)
        with pytest.raises(IndexFormatError, match=path.parent.name):
            Index.load(out, verify="fast")


def test_verify_command(small, tmp_path, capsys):
    out = small.save(tmp_path / "idx")
    assert main(["verify", str(out)]) == 0 and capsys.readouterr().out.strip() == "ok"
    gen = storage.segment_dirs(out)[-1]
    for rel in ("embeddings.npy", "corpus/ids_data.npy"):
        raw = bytearray((gen / rel).read_bytes())
        raw[-1] ^= 0xFF
        (gen / rel).write_bytes(bytes(raw))
    assert main(["verify", str(out)]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("checksum mismatch" in x for x in lines)
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().out


def test_row_reader_reads_rows_from_the_file_of_a_mapped_array(tmp_path):
    from hopgraph.engine.storage import RowReader, load_array, save_arrays

    a = np.arange(7 * 3 * 2, dtype=np.uint8).reshape(7, 3, 2)
    save_arrays(tmp_path, {"a": a})
    mapped = load_array(tmp_path, "a")
    assert isinstance(mapped, np.memmap)
    for arr in (mapped, a):
        with RowReader(arr) as read:
            assert (read.file is not None) == (arr is mapped)
            for lo, hi in ((0, 7), (2, 5), (6, 7), (3, 3)):
                got = read(lo, hi)
                assert got.flags.c_contiguous and got.dtype == a.dtype
                np.testing.assert_array_equal(got, a[lo:hi])


def test_a_slice_of_a_mapped_array_is_read_from_its_own_rows(tmp_path):
    """A row slice of a mapping (numpy keeps the parent's ``offset`` on it) is read from where its
    rows are in the file, by RowReader and read_rows alike (both ways read_rows reads)."""
    import hopgraph.engine.storage.arrays as arrays
    from hopgraph.engine.storage import RowReader, load_array, read_rows, save_arrays

    a = np.arange(5000 * 4, dtype=np.float32).reshape(5000, 4)
    save_arrays(tmp_path, {"a": a})
    part = load_array(tmp_path, "a")[1000:]
    assert isinstance(part, np.memmap) and part.offset == load_array(tmp_path, "a").offset
    with RowReader(part) as read:
        np.testing.assert_array_equal(read(0, 3), a[1000:1003])
    for gather_min in (4, 1 << 30):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(arrays, "MAPPED_GATHER_MIN", gather_min)
            np.testing.assert_array_equal(read_rows(part, np.array([0, 5, 3999])), a[[1000, 1005, 4999]])


def test_read_rows_reads_scattered_rows_from_the_file_of_a_mapped_array(tmp_path):
    from hopgraph.engine.storage import read_rows, load_array, save_arrays

    a = np.random.default_rng(1).standard_normal((50, 3, 4)).astype(np.float16)
    save_arrays(tmp_path, {"a": a})
    mapped = load_array(tmp_path, "a")
    rows = np.array([[49, 0, 7], [7, 7, 20]])   # any shape, repeats, first and last
    for arr in (mapped, a):
        got = read_rows(arr, rows)
        assert got.shape == (2, 3, 3, 4) and got.dtype == a.dtype and not isinstance(got, np.memmap)
        np.testing.assert_array_equal(got, a[rows])
    assert read_rows(mapped, np.zeros(0, np.int64)).shape == (0, 3, 4)
    import hopgraph.engine.storage.arrays as arrays

    with pytest.MonkeyPatch.context() as mp:  # many rows: read through the mapping, in blocks
        mp.setattr(arrays, "MAPPED_GATHER_MIN", 4)
        mp.setattr(arrays, "MAPPED_GATHER_BLOCK", 4)
        got = read_rows(mapped, rows)
        assert got.shape == (2, 3, 3, 4) and not isinstance(got, np.memmap)
        np.testing.assert_array_equal(got, a[rows])
        with open(mapped.filename, "r+b") as f:    # a file cut short is an index format error
            f.truncate(mapped.offset + 10 * a[0].nbytes)
        with pytest.raises(IndexFormatError, match="shorter"):
            read_rows(mapped, np.array([3, 40, 2, 1, 0]))
    with pytest.raises(IndexFormatError, match="shorter"):
        read_rows(mapped, np.array([3, 40]))


@pytest.mark.parametrize("gather_min", [4, 1 << 30])
def test_gather_buffer_equals_indexing_for_every_kind_of_row_array(tmp_path, gather_min):
    import hopgraph.engine.storage.arrays as arrays
    from hopgraph.engine.storage import GatherBuffer, StackedRows, load_array, save_arrays

    rng = np.random.default_rng(2)
    a = rng.standard_normal((60, 5)).astype(np.float32)
    tail = rng.standard_normal((7, 5)).astype(np.float32)
    save_arrays(tmp_path, {"a": a})
    mapped = load_array(tmp_path, "a")
    whole = np.concatenate([a, tail])
    gathers = [np.array([66, 0, 59, 60, 3, 3]), np.arange(67)[::-1], np.zeros(0, np.int64), np.array([61, 62]),
               rng.integers(0, 67, 200)]
    with pytest.MonkeyPatch.context() as mp:  # gather_min 4: through the mapping; else plain reads
        mp.setattr(arrays, "MAPPED_GATHER_MIN", gather_min)
        for X, ref in ((a, a), (mapped, a), (StackedRows([mapped, tail]), whole), (whole, whole)):
            with GatherBuffer(X, 8) as gather:  # the 67- and 200-row gathers grow the buffer
                for rows in gathers:
                    rows = rows[rows < len(ref)]
                    got = gather(rows)
                    assert got.shape == (len(rows), 5) and got.dtype == np.float32
                    np.testing.assert_array_equal(got, ref[rows])


def test_gather_buffer_reads_a_file_cut_short_with_plain_reads(tmp_path):
    import hopgraph.engine.storage.arrays as arrays
    from hopgraph.engine.storage import GatherBuffer, load_array, save_arrays

    a = np.random.default_rng(3).standard_normal((50, 4)).astype(np.float32)
    save_arrays(tmp_path, {"a": a})
    mapped = load_array(tmp_path, "a")
    with open(mapped.filename, "r+b") as f:
        f.truncate(mapped.offset + 10 * a[0].nbytes)
    with pytest.MonkeyPatch.context() as mp, GatherBuffer(mapped, 8) as gather:
        mp.setattr(arrays, "MAPPED_GATHER_MIN", 4)
        np.testing.assert_array_equal(gather(np.arange(5)), a[:5])
        with pytest.raises(IndexFormatError, match="shorter"):  # not SIGBUS
            gather(np.arange(40))


def test_stack_rows_reads_small_mapped_parts_into_memory_within_a_budget(tmp_path, monkeypatch):
    import hopgraph.engine.storage.rows as rows
    from hopgraph.engine.storage import StackedRows, load_array, save_arrays, stack_rows

    rng = np.random.default_rng(4)
    arrays = {f"p{i}": rng.standard_normal((n, 3)).astype(np.float32) for i, n in enumerate([20, 2, 3, 4, 1])}
    save_arrays(tmp_path, arrays)
    mapped = [load_array(tmp_path, name) for name in arrays]
    whole = np.concatenate(list(arrays.values()))
    monkeypatch.setattr(rows, "SMALL_PART_ROWS", 10)
    monkeypatch.setattr(rows, "SMALL_PARTS_MAX_ROWS", 6)
    X = stack_rows(mapped)  # the 20-row part stays mapped; 2 + 3 rows are read, 4 more would pass 6
    assert isinstance(X, StackedRows) and [type(p) for p in X.parts] == [np.memmap, np.ndarray, np.memmap, np.ndarray]
    assert [len(p) for p in X.parts] == [20, 5, 4, 1]
    np.testing.assert_array_equal(np.asarray(X), whole)
    np.testing.assert_array_equal(X[np.array([29, 0, 21, 25])], whole[[29, 0, 21, 25]])
    monkeypatch.setattr(rows, "SMALL_PARTS_MAX_ROWS", 100)
    X = stack_rows(mapped[1:])  # every part read: one in-memory array
    assert type(X) is np.ndarray
    np.testing.assert_array_equal(X, whole[20:])


def test_release_pages_keeps_a_mapped_array_readable(tmp_path):
    from hopgraph.engine.storage import load_array, release_pages, save_arrays

    a = np.random.default_rng(0).random((1000, 16)).astype(np.float32)
    save_arrays(tmp_path, {"a": a})
    mapped = load_array(tmp_path, "a")
    assert float(mapped.sum()) == float(a.sum())
    release_pages(mapped, mapped[10:20], a, None)  # views, plain arrays and None are fine
    np.testing.assert_array_equal(mapped, a)


def test_gather_rows_reads_any_dtype_from_the_file(tmp_path, monkeypatch):
    from hopgraph.engine.components import exact_search as dense_index
    from hopgraph.engine.storage import load_array, save_arrays

    monkeypatch.setattr(dense_index, "SCAN_MIN_N", 10)
    for dtype in (np.float16, np.float32):
        a = np.random.default_rng(1).random((50, 8)).astype(dtype)
        save_arrays(tmp_path, {"a": a})
        rows = np.array([[3, 0], [49, 3]])
        got = dense_index.gather_rows(load_array(tmp_path, "a"), rows)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, a[rows])


@pytest.mark.parametrize("shape,dtype", [((1000, 7), np.float16), ((33,), np.int64), ((5, 3, 2), np.float32)])
def test_save_array_of_a_mapping_is_np_save_byte_for_byte(tmp_path, monkeypatch, shape, dtype):
    """save_array copies a memory-mapped array in blocks of plain reads (STITCH's text
    embeddings from a work directory), writing exactly np.save's file."""
    import hopgraph.engine.storage.arrays as storage

    monkeypatch.setattr(storage, "SAVE_BLOCK_BYTES", 100)  # many blocks
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    np.save(tmp_path / "src.npy", a)
    mapped = np.load(tmp_path / "src.npy", mmap_mode="r")
    (tmp_path / "out").mkdir()
    entry = storage.save_array(tmp_path / "out", "x", mapped)
    assert entry == {"file": "x.npy", "shape": list(shape), "dtype": str(np.dtype(dtype))}
    assert (tmp_path / "out" / "x.npy").read_bytes() == (tmp_path / "src.npy").read_bytes()
