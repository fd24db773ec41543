"""Index storage: one directory with a versioned ``manifest.json``.

Layout (format version 2: every shared component stored once)::

    INDEX/manifest.json                  format, version, embedder, corpus checksum, components, pipelines
    INDEX/corpus/*.npy                   the corpus store: ids, titles, texts, metadata as packed strings
    INDEX/embeddings.npy                 X, float32 [N, d] (memory-mapped on load; the dense index's data)
    INDEX/components/bm25-0/             the BM25 index (bm25s), shared by every pipeline using BM25
    INDEX/components/extraction-0/*.npy  the zero-token extraction, shared by stitch, ppr_binary, dmar
    INDEX/pipelines/NAME/*.npy           each fitted pipeline's own arrays (CSR as indptr/indices/data)

An index is always written to a temporary sibling directory and renamed into place,
so an interrupted build never leaves a half-written index. Loading checks the
format version, every listed file's shape and dtype, and the corpus checksum. An index of
another format version (version 1: ``corpus.jsonl`` and each pipeline's own copies of
what is now shared) is refused with an :class:`IndexFormatError` that prints the ``hopgraph index ...
--embeddings OLD/embeddings.npy ...`` command rebuilding it from its own corpus and
embeddings (:func:`rebuild_command`; nothing is embedded again).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .errors import IndexFormatError

FORMAT_NAME = "hopgraph-index"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``path``; on success it replaces ``path``.

    On any exception the temporary directory is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        _fsync_tree(tmp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            old.rmdir()
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_tree(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``name.npy`` in ``directory``; returns its manifest entry (shape, dtype)."""
    array = np.ascontiguousarray(array)
    np.save(directory / f"{name}.npy", array, allow_pickle=False)
    return {"file": f"{name}.npy", "shape": list(array.shape), "dtype": str(array.dtype)}


def save_arrays(directory: Path, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    directory.mkdir(parents=True, exist_ok=True)
    return {name: save_array(directory, name, a) for name, a in arrays.items()}


def load_array(directory: Path, name: str, mmap: bool = True) -> np.ndarray:
    """Load ``name.npy`` (memory-mapped by default); IndexFormatError if missing or corrupt."""
    path = directory / f"{name}.npy"
    if not path.is_file():
        raise IndexFormatError(f"index file {path} is missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise IndexFormatError(f"index file {path} is corrupt: {e}") from None


def load_arrays(directory: Path, names: list[str], mmap: bool = True) -> dict[str, np.ndarray]:
    return {n: load_array(directory, n, mmap) for n in names}


def pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A string list as arrays for :func:`save_arrays`: the UTF-8 bytes of all strings
    concatenated (uint8) and their int64 offsets ``[n + 1]`` (compact and mmap-able)."""
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), np.uint8).copy(), offsets


def unpack_strings(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The strings packed by :func:`pack_strings`."""
    raw = np.asarray(data).tobytes()
    o = np.asarray(offsets).tolist()
    return [raw[o[i]:o[i + 1]].decode("utf-8") for i in range(len(o) - 1)]


def write_json(path: Path, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def new_manifest(**fields: Any) -> dict[str, Any]:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "created": time.time(), **fields}


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """Read and check ``manifest.json``: format name and version; clear error otherwise."""
    directory = Path(directory)
    if not directory.is_dir():
        raise IndexFormatError(f"index directory {directory} does not exist")
    path = directory / MANIFEST
    if not path.is_file():
        raise IndexFormatError(f"{directory} is not a hopgraph index (no {MANIFEST})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IndexFormatError(f"{path} is corrupt: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{path} is not a hopgraph index manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{directory} has index format version {version}; this hopgraph reads version {FORMAT_VERSION}. "
            f"Rebuild it: {rebuild_command(directory, manifest)}"
        )
    return manifest


def rebuild_command(directory: Path, manifest: dict[str, Any]) -> str:
    """The ``hopgraph index`` command that rebuilds an index of an older format from what it holds
    (its corpus and embeddings are reused, so nothing is embedded again)."""
    embedder = (manifest.get("embedder") or {}).get("name", "minilm")
    pipelines = ",".join(manifest.get("pipelines") or {}) or "dense,bm25,g3rag"
    corpus = directory / "corpus.jsonl" if (directory / "corpus.jsonl").is_file() else "CORPUS.jsonl"
    emb = f" --embeddings {directory / 'embeddings.npy'}" if (directory / "embeddings.npy").is_file() else ""
    emb_name = "" if embedder.startswith("precomputed") else f" --embedder {embedder}"
    params = "".join(f" --param {pipe}.{name}={json.dumps(value)}"
                     for pipe, values in sorted((manifest.get("params") or {}).items())
                     for name, value in sorted(values.items()))
    return (f"hopgraph index {corpus}{emb}{emb_name} --pipelines {pipelines}{params} "
            f"--out {directory}-v{FORMAT_VERSION}")


def check_array(directory: Path, entry: dict[str, Any]) -> None:
    """Verify that a file listed in the manifest exists with the recorded shape and dtype."""
    arr = load_array(directory, Path(entry["file"]).stem)
    if list(arr.shape) != list(entry["shape"]) or str(arr.dtype) != entry["dtype"]:
        raise IndexFormatError(
            f"index file {directory / entry['file']} has shape {list(arr.shape)} dtype {arr.dtype}, "
            f"manifest says {entry['shape']} {entry['dtype']}"
        )
