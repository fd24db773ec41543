"""Shared fixtures. Triton kernels run in the CPU interpreter in tests."""
from __future__ import annotations

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
    """Apply ``edit(manifest)`` to the live manifest of a saved index and re-point ``CURRENT`` at it
    (as a writer of another version would have written it: checksums consistent)."""
    from hopgraph.engine import storage

    gen = storage.current_generation(index)
    manifest = json.loads((gen / storage.MANIFEST).read_text())
    edit(manifest)
    storage.write_json(gen / storage.MANIFEST, manifest)
    current = json.loads((index / storage.CURRENT).read_text())
    current["manifest"].update(size=(gen / storage.MANIFEST).stat().st_size,
                               digest=storage.file_digest(gen / storage.MANIFEST, current["manifest"]["algorithm"]))
    (index / storage.CURRENT).write_text(json.dumps(current))
    return manifest


def make_legacy(index: Path, version: int) -> Path:
    """Turn a saved index into the layout of format ``version`` (1 or 2): its files directly under it."""
    import shutil

    from hopgraph.engine import storage

    gen = storage.current_generation(index)
    manifest = json.loads((gen / storage.MANIFEST).read_text())
    manifest["format_version"] = version
    for p in gen.iterdir():
        if p.name != storage.READERS_FILE:
            shutil.move(str(p), str(index / p.name))
    storage.write_json(index / storage.MANIFEST, manifest)
    shutil.rmtree(gen)
    (index / storage.CURRENT).unlink()
    (index / storage.LOCK_FILE).unlink(missing_ok=True)
    return index
