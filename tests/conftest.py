"""Shared fixtures. Triton kernels run in the CPU interpreter in tests."""
from __future__ import annotations

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
#: where hypothesis keeps its example database and caches: ``$HYPOTHESIS_STORAGE_DIRECTORY``, else a
#: folder of the system's temporary directory — never ``.hypothesis/`` in the working directory (its
#: default), so a test run leaves the repository as it was
HYPOTHESIS_HOME = Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
                       or Path(tempfile.gettempdir()) / f"hopgraph-hypothesis-{getattr(os, 'getuid', lambda: 0)()}")


def keep_hypothesis_out_of_tree(home: Path = HYPOTHESIS_HOME) -> None:
    """Point hypothesis's storage (the example database of failing cases, its caches) at ``home``."""
    from hypothesis import configuration

    configuration.set_hypothesis_home_dir(home)


keep_hypothesis_out_of_tree()


@pytest.fixture(autouse=True, scope="session")
def _emulated_width_rounding():
    """With ``HOPGRAPH_TEST_WIDTH_ROUNDING=1`` the whole run uses :mod:`ppr_rounding`'s product in
    ``batched_ppr`` (how MKL rounds on CPUs that take other kernels by block width): the suite's
    tolerances can be checked against it on any machine."""
    if os.environ.get("HOPGRAPH_TEST_WIDTH_ROUNDING") != "1":
        yield
        return
    import importlib

    import ppr_rounding

    bp = importlib.import_module("hopgraph.kernels.batched_ppr")
    native, bp.sparse_addmm = bp.sparse_addmm, ppr_rounding.width_dependent_addmm
    yield
    bp.sparse_addmm = native


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def demo_corpus():
    from hopgraph.demo import demo_corpus

    return demo_corpus()


@pytest.fixture(scope="session")
def hashing_embedder():
    from hopgraph import HashingEmbedder

    return HashingEmbedder(64)


@pytest.fixture(scope="session")
def minilm():
    """The default embedder, MiniLM, as ``resolve_embedder("minilm")`` gives it (a core
    dependency: its absence is a failure, not a skip). Loaded once per session."""
    from hopgraph.engine.embedders import resolve_embedder

    return resolve_embedder("minilm")


def shared_dataset(name: str) -> Path:
    """Path of ../shared/data/NAME, or skip the test when the shared data is absent."""
    path = SHARED_DATA / name
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"shared data {path} not available")
    return path


def shared_sample(name: str) -> tuple["Corpus", list[str]]:
    """The corpus and the question texts of ../shared/data/NAME (skips when absent)."""
    import json

    from hopgraph.engine.components.corpus import Corpus

    path = shared_dataset(name)
    with open(path / "questions.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for line in f]
    return Corpus.from_jsonl(path / "corpus.jsonl"), questions


def open_pair(path: Path, embedder, store=None) -> tuple:
    """The index at ``path`` opened twice on the CPU: on its own files, and with a device store
    (``store``; default a :class:`DeviceStore` of CPU tensors) — the host and the device paths."""
    from hopgraph.engine.graphs.device_store import DeviceStore
    from hopgraph.engine.graphs.store import LocalStore
    from hopgraph.engine.index import IndexReader

    return (IndexReader.open(path, embedder, device="cpu", graphs=LocalStore()),
            IndexReader.open(path, embedder, device="cpu", graphs=store or DeviceStore("cpu")))


def random_unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Normalised float32 Gaussian rows (test data)."""
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def write_lines(path: Path, lines: list) -> Path:
    """Write a JSON-lines file: strings as given, anything else through json.dumps."""
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def clustered_embeddings(n: int, d: int, n_clusters: int, seed: int = 0, noise: float = 0.35) -> np.ndarray:
    """Normalised float32 points around random cluster centres (test data)."""
    g = np.random.default_rng(seed)
    centres = g.standard_normal((n_clusters, d))
    X = centres[g.integers(0, n_clusters, n)] + noise * np.sqrt(d) * g.standard_normal((n, d)) / np.sqrt(d) * 3
    X = X.astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def rewrite_manifest(index: Path, edit) -> dict:
    """Apply ``edit(manifest)`` to the live commit of a saved index and re-point ``CURRENT`` at it
    (as a writer of another version would have written it: checksums consistent)."""
    from hopgraph.engine import storage

    cfile = index / storage.read_current(index)[0]
    manifest = json.loads(cfile.read_text())
    edit(manifest)
    storage.write_json(cfile, manifest)
    current = json.loads((index / storage.CURRENT).read_text())
    current["manifest"].update(size=cfile.stat().st_size,
                               digest=storage.file_digest(cfile, current["manifest"]["algorithm"]))
    (index / storage.CURRENT).write_text(json.dumps(current))
    return manifest


def make_legacy(index: Path, version: int) -> Path:
    """Turn a saved (one-segment) index into the layout of format ``version`` (1 or 2): its files
    directly under it, with a manifest of that format."""
    import shutil

    from hopgraph.engine import storage

    commit = json.loads((index / storage.read_current(index)[0]).read_text())
    seg = storage.segment_dirs(index)[-1]
    manifest = {k: commit[k] for k in ("format", "embedder", "pipelines", "params", "corpus")}
    manifest["format_version"] = version
    manifest["files"] = {"embeddings": {"file": "embeddings.npy"}}
    for p in seg.iterdir():
        if p.name != storage.SEGMENT_MANIFEST:
            shutil.move(str(p), str(index / p.name))
    storage.write_json(index / storage.MANIFEST, manifest)
    for p in list(index.iterdir()):
        if p.name.startswith(("seg-", "commit-")) or p.name in (storage.CURRENT, storage.LOCK_FILE):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return index


def make_v3(index: Path) -> Path:
    """Turn a saved (one-segment) index into format 3: one generation ``gen-000001`` whose manifest
    lists its files, named by ``CURRENT`` (as hopgraph versions of format 3 wrote it)."""
    import shutil

    from hopgraph.engine import storage

    commit = json.loads((index / storage.read_current(index)[0]).read_text())
    seg = storage.segment_dirs(index)[-1]
    smanifest = json.loads((seg / storage.SEGMENT_MANIFEST).read_text())
    gen = index / "gen-000001"
    shutil.copytree(seg, gen)
    (gen / storage.SEGMENT_MANIFEST).unlink()
    (gen / storage.READERS_FILE).touch()
    components = dict(smanifest["components"])
    checksums = dict(smanifest["checksums"])
    old_bm25 = []
    for item in components.get("bm25", []):  # format 3 stored bm25s's precomputed score matrix
        shutil.rmtree(gen / "components" / item["dir"])
        checksums = {k: v for k, v in checksums.items() if not k.startswith(f"components/{item['dir']}/")}
        import bm25s
        from hopgraph.engine.components.corpus import Corpus
        from hopgraph.engine.components.tokenizer import tokenize

        n = smanifest["n_rows"]
        corpus = Corpus.load(seg / "corpus", n, "x")
        retriever = bm25s.BM25(k1=1.5, b=0.75)
        retriever.index(tokenize(corpus.embedding_texts(), item["stopwords"]), show_progress=False)
        retriever.save(str(gen / "components" / item["dir"]))
        for f in (gen / "components" / item["dir"]).iterdir():
            checksums[f"components/{item['dir']}/{f.name}"] = {"size": f.stat().st_size, "digest": storage.file_digest(f)}
        old_bm25.append({"dir": item["dir"], "params": {"k1": 1.5, "b": 0.75, "stopwords": item["stopwords"]}})
    components["bm25"] = old_bm25
    for f in list(gen.rglob("id_*.npy")):  # format 3 had no id hash tables
        checksums.pop(f.relative_to(gen).as_posix())
        f.unlink()
    manifest = {"format": commit["format"], "format_version": 3, "created": commit["created"],
                "corpus": {**commit["corpus"], "checksum": smanifest["corpus"]["checksum"]},
                "embedder": commit["embedder"], "embed_seconds": commit["embed_seconds"],
                "files": {"embeddings": smanifest["embeddings"]}, "components": components,
                "pipelines": commit["pipelines"], "params": commit["params"],
                "checksum_algorithm": smanifest["checksum_algorithm"], "checksums": checksums}
    if commit["segments"][0].get("deletes"):
        rows = np.load(index / commit["segments"][0]["deletes"]["file"])
        np.save(gen / "deleted_rows.npy", rows)
        manifest["files"]["deleted_rows"] = {"file": "deleted_rows.npy", "shape": list(rows.shape),
                                             "dtype": str(rows.dtype)}
        manifest["checksums"]["deleted_rows.npy"] = {"size": (gen / "deleted_rows.npy").stat().st_size,
                                                     "digest": storage.file_digest(gen / "deleted_rows.npy")}
    storage.write_json(gen / storage.MANIFEST, manifest)
    for p in list(index.iterdir()):
        if p.name.startswith(("seg-", "commit-")):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    current = {"format": commit["format"], "generation": gen.name,
               "manifest": {"size": (gen / storage.MANIFEST).stat().st_size,
                            "digest": storage.file_digest(gen / storage.MANIFEST), "algorithm": storage.HASH}}
    (index / storage.CURRENT).write_text(json.dumps(current))
    return index
