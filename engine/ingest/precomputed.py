"""Precomputed passage embeddings at scale: one ``.npy`` file or a folder of ``.npy`` shards.

Accepted layouts (SPEC notation X = the N×d matrix of normalised rows):

- ``X.npy``: row i = passage i of the corpus; or, with ids alongside
  (``X.ids.txt`` one id per line, or ``X.ids.npy`` a string/integer array),
  row r = the passage whose id is ``ids[r]`` in any order.
- ``DIR/`` holding shards ``*.npy`` (sorted by file name). Either every shard has
  its ids alongside (``part-0.ids.txt`` / ``part-0.ids.npy``) and rows are placed
  by id, or none has and the shards concatenated in name order are the rows.

Every shard is memory-mapped and validated on its own, block by block (2-D
floating point, one dimension for all shards, no NaN/inf, no zero row, ids
count = rows, no id twice, every corpus passage covered once), so a 10⁶ × 384
matrix is never loaded or copied whole. Errors name the shard file and row.

A single ``.npy`` already in corpus order, float32 and L2-normalised is used
in place (memory-mapped, no copy). Anything else is assembled, normalised, into
a memory-mapped ``embeddings.npy`` in the caller's work directory.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..errors import InputError
from ..components.records import input_path, read_text
from ..storage.arrays import NPY_READ_ERRORS

BLOCK_ROWS = 65_536
NORM_ATOL = 1e-4
IDS_SUFFIXES = (".ids.txt", ".ids.npy")
EMBEDDINGS_FILE = "embeddings.npy"


@dataclass(frozen=True)
class Shard:
    """One ``.npy`` embedding file, memory-mapped, with its ids (None = positional)."""

    path: Path
    X: np.ndarray
    ids: list[str] | None


def shard_paths(source: str | Path) -> list[Path]:
    """The shard files of ``source`` (a ``.npy`` file or a folder of them), in row order."""
    source = input_path(source, "embeddings", folder=True)
    if source.is_dir():
        paths = sorted(p for p in source.iterdir()
                       if p.suffix == ".npy" and not p.name.endswith(".ids.npy") and p.is_file())
        if not paths:
            raise InputError(f"embeddings folder {source} holds no .npy shards")
        return paths
    if source.suffix != ".npy":
        raise InputError(f"embeddings file {source} must be a .npy file (or a folder of .npy shards)")
    return [source]


def ids_path(shard: Path) -> Path | None:
    """The ids file alongside ``shard`` (``NAME.ids.txt`` or ``NAME.ids.npy``), if any."""
    stem = shard.name[: -len(".npy")]
    for suffix in IDS_SUFFIXES:
        p = shard.with_name(stem + suffix)
        if p.is_file():
            return p
    return None


def read_ids(path: Path) -> list[str]:
    """The passage ids of an ``*.ids.txt`` (one a line) or ``*.ids.npy`` (string or integer array)
    file, as strings; :class:`InputError` naming the file for an ``.npy`` that is not a 1-D array of
    strings or integers."""
    if path.name.endswith(".ids.txt"):
        return read_text(path).splitlines()
    try:
        arr = np.load(path, allow_pickle=False)
    except NPY_READ_ERRORS as e:
        raise InputError(f"ids file {path} is not a valid .npy array without objects: {e}") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iuUS":
        raise InputError(f"ids file {path}: expected a 1-D array of strings or integers, got {arr.dtype} {arr.shape}")
    return [x.decode() if isinstance(x, bytes) else str(x) for x in arr.tolist()]


def open_shard(path: Path, dim: int | None) -> Shard:
    """Memory-map one shard and check its shape, dtype and ids (not yet its values)."""
    try:
        X = np.load(path, mmap_mode="r", allow_pickle=False)
    except NPY_READ_ERRORS as e:
        raise InputError(f"embeddings shard {path} is not a valid .npy file: {e}") from None
    if X.ndim != 2:
        raise InputError(f"embeddings shard {path}: expected a 2-D matrix [n, dim], got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.floating):
        raise InputError(f"embeddings shard {path}: expected floating-point values, got dtype {X.dtype}")
    if dim is not None and X.shape[1] != dim:
        raise InputError(f"embeddings shard {path}: dimension {X.shape[1]}, but earlier shards have {dim}")
    ip = ids_path(path)
    ids = read_ids(ip) if ip is not None else None
    if ids is not None and len(ids) != len(X):
        raise InputError(f"embeddings shard {path}: {len(X)} rows but {ip} lists {len(ids)} ids")
    return Shard(path, X, ids)


def validate_block(block: np.ndarray, where: str, first_row: int) -> np.ndarray:
    """Finite, non-zero rows; returns the row norms (float64). Errors name ``where`` and the row."""
    block = np.asarray(block)
    finite = np.isfinite(block).all(axis=1)
    if not finite.all():
        raise InputError(f"{where}: row {first_row + int(np.flatnonzero(~finite)[0])} contains NaN or inf")
    norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
    zero = norms <= 1e-12
    if zero.any():
        raise InputError(f"{where}: row {first_row + int(np.flatnonzero(zero)[0])} is a zero vector")
    return norms


def iter_blocks(X: np.ndarray, block_rows: int = BLOCK_ROWS) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, rows)`` of ``X`` in blocks of ``block_rows`` read into memory one at a time."""
    for start in range(0, len(X), block_rows):
        yield start, np.asarray(X[start:start + block_rows])


def open_embeddings(source: str | Path, corpus_ids: Sequence[str] | None = None, work_dir: str | Path | None = None,
                    progress: bool = False) -> np.ndarray:
    """Validated, normalised float32 embeddings in corpus order from a ``.npy`` or a shard folder.

    ``corpus_ids`` (the corpus ids in row order) is needed when shards carry ids and
    fixes the expected row count. ``work_dir`` receives ``embeddings.npy`` when the
    input cannot be used in place (several shards, reordering, not normalised);
    without one such input is assembled in memory.
    """
    shards: list[Shard] = []
    dim = None
    for p in shard_paths(source):
        shards.append(open_shard(p, dim))
        dim = shards[-1].X.shape[1]
    with_ids = [s.ids is not None for s in shards]
    if any(with_ids) and not all(with_ids):
        missing = next(s.path for s in shards if s.ids is None)
        raise InputError(f"embeddings {source}: some shards have ids alongside and {missing} has none")
    n_rows = sum(len(s.X) for s in shards)
    n = len(corpus_ids) if corpus_ids is not None else n_rows
    if n_rows != n:
        raise InputError(f"embeddings {source} has {n_rows} rows but the corpus has {n} passages")
    positions = _positions(shards, corpus_ids, source) if all(with_ids) else None

    bar = _bar(progress, n, "validate embeddings")
    single = len(shards) == 1 and shards[0].X.dtype == np.float32 and shards[0].X.flags.c_contiguous
    if single and (positions is None or np.array_equal(positions[0], np.arange(n))):
        normalised = True
        for start, block in iter_blocks(shards[0].X):
            norms = validate_block(block, f"embeddings shard {shards[0].path}", start)
            normalised &= bool(np.all(np.abs(norms - 1.0) <= NORM_ATOL))
            if bar is not None:
                bar.update(len(block))
        if normalised:
            _close(bar)
            return shards[0].X
        if bar is not None:
            bar.reset()
    if work_dir is None:
        out = np.empty((n, dim), np.float32)
    else:
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        out = np.lib.format.open_memmap(work_dir / EMBEDDINGS_FILE, mode="w+", dtype=np.float32, shape=(n, dim))
    offset = 0
    for si, shard in enumerate(shards):
        for start, block in iter_blocks(shard.X):
            norms = validate_block(block, f"embeddings shard {shard.path}", start)
            normed = (block / norms[:, None]).astype(np.float32)
            if positions is None:
                out[offset + start: offset + start + len(block)] = normed
            else:
                out[positions[si][start:start + len(block)]] = normed
            if bar is not None:
                bar.update(len(block))
        offset += len(shard.X)
    _close(bar)
    if work_dir is None:
        return out
    out.flush()
    del out
    return np.load(work_dir / EMBEDDINGS_FILE, mmap_mode="r")


def _positions(shards: list[Shard], corpus_ids: Sequence[str] | None, source) -> list[np.ndarray]:
    """Corpus row of every shard row, checking that the ids cover the corpus exactly once."""
    if corpus_ids is None:
        raise InputError(f"embeddings {source} carry ids: the corpus ids are needed to place them")
    row_of = {pid: i for i, pid in enumerate(corpus_ids)}
    seen = np.zeros(len(corpus_ids), dtype=bool)
    out = []
    for s in shards:
        pos = np.empty(len(s.ids), np.int64)
        for r, pid in enumerate(s.ids):
            i = row_of.get(pid)
            if i is None:
                raise InputError(f"embeddings shard {s.path} row {r}: id {pid!r} is not in the corpus")
            if seen[i]:
                raise InputError(f"embeddings shard {s.path} row {r}: id {pid!r} appears twice")
            seen[i] = True
            pos[r] = i
        out.append(pos)
    if not seen.all():
        raise InputError(f"embeddings {source}: no embedding for passage {corpus_ids[int(np.flatnonzero(~seen)[0])]!r}")
    return out


def _bar(progress: bool, total: int, desc: str):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="row", unit_scale=True, dynamic_ncols=True)


def _close(bar) -> None:
    if bar is not None:
        bar.close()
