"""Row arrays made of parts: the rows of several segments (memory-mapped files, in-memory tails)
read as one ``[N, ...]`` array without copying them into one buffer."""
from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

import numpy as np

from . import arrays
from .arrays import RowReader, _file_backed, read_rows, release_pages


class StackedRows:
    """Read-only rows ``[N, ...]`` stored as consecutive parts (each an ndarray or ``np.memmap`` of the
    same trailing shape and dtype).

    Indexing gives fresh arrays: an int (one row), a slice of step 1 (rows, a view when inside one
    part), an integer array of any shape (rows gathered; a memory-mapped part is read with plain
    reads, :func:`~hopgraph.engine.storage.read_rows`, so its pages do not stay resident). ``np.asarray``
    concatenates every part (a copy of all rows: for code that needs one buffer). Complexity: a
    gather of r rows costs O(r log P) plus the rows' bytes."""

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        if not parts:
            raise ValueError("StackedRows needs at least one part")
        first = parts[0]
        for p in parts[1:]:
            if p.shape[1:] != first.shape[1:] or p.dtype != first.dtype:
                raise ValueError(f"parts of StackedRows differ: {p.shape}/{p.dtype} vs {first.shape}/{first.dtype}")
        self.parts = list(parts)
        self.offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=self.offsets[1:])
        self.dtype = first.dtype
        self.shape = (int(self.offsets[-1]),) + tuple(first.shape[1:])

    # ------------------------------------------------------------------ array protocol
    @property
    def ndim(self) -> int:
        """The number of dimensions, as an ndarray's."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements, as an ndarray's."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """The bytes of every part together, as an ndarray's."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.concatenate([np.asarray(p) for p in self.parts])
        return out if dtype is None else out.astype(dtype, copy=False)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        """Every row in one new array of ``dtype`` (``copy`` is accepted for ndarray compatibility: the result is always a new array)."""
        return np.asarray(self).astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"StackedRows(shape={self.shape}, dtype={self.dtype}, parts={len(self.parts)})"

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):
            rows = self[key[0]]
            return rows[key[1:]] if isinstance(key[0], (int, np.integer)) else rows[(slice(None),) + key[1:]]
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"row {key} out of range [0, {len(self)})")
            p = int(np.searchsorted(self.offsets, i, side="right") - 1)
            return np.array(self.parts[p][i - self.offsets[p]])
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self.take(np.arange(start, stop, step))
            return self.slice(start, stop)
        return self.take(np.asarray(key))

    # ------------------------------------------------------------------ reads
    def slice(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``: a view when inside one part, else a copy."""
        stop = max(start, stop)
        p0 = int(np.searchsorted(self.offsets, start, side="right") - 1) if start < len(self) else len(self.parts) - 1
        if stop <= self.offsets[p0 + 1]:
            return self.parts[p0][start - self.offsets[p0]:stop - self.offsets[p0]]
        pieces = []
        for p in range(p0, len(self.parts)):
            a, b = max(start, self.offsets[p]), min(stop, self.offsets[p + 1])
            if a >= b:
                if self.offsets[p] >= stop:
                    break
                continue
            pieces.append(np.asarray(self.parts[p][a - self.offsets[p]:b - self.offsets[p]]))
        return np.concatenate(pieces) if pieces else np.zeros((0,) + self.shape[1:], self.dtype)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` (an integer array of any shape) gathered, with the trailing shape of the rows."""
        rows = np.asarray(rows)
        if rows.dtype.kind not in "iu":
            raise IndexError(f"StackedRows: row ids must be integers, got {rows.dtype}")
        flat = rows.astype(np.int64).ravel()
        flat = np.where(flat < 0, flat + len(self), flat)
        if len(flat) and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"StackedRows: a row id is out of range [0, {len(self)})")
        out = np.empty((len(flat),) + self.shape[1:], self.dtype)
        part = np.searchsorted(self.offsets, flat, side="right") - 1
        for p in np.unique(part).tolist():
            sel = np.flatnonzero(part == p)
            local = flat[sel] - self.offsets[p]
            src = self.parts[p]
            out[sel] = read_rows(src, local) if _file_backed(src) else src[local]
        return out.reshape(rows.shape + self.shape[1:])

    def blocks(self, start: int = 0, block_rows: int = 65_536) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, rows)`` blocks of the rows ``[start, N)``, none crossing a part; a memory-mapped
        part is read from its file into a reused buffer (valid until the next block)."""
        for p, part in enumerate(self.parts):
            lo, hi = int(self.offsets[p]), int(self.offsets[p + 1])
            if hi <= start:
                continue
            a = max(start, lo) - lo
            if _file_backed(part):
                buf = np.empty((min(block_rows, hi - lo - a),) + self.shape[1:], self.dtype)
                with RowReader(part) as read:
                    for s in range(a, hi - lo, block_rows):
                        e = min(hi - lo, s + block_rows)
                        yield lo + s, read(s, e, out=buf[:e - s])
            else:
                for s in range(a, hi - lo, block_rows):
                    yield lo + s, np.asarray(part[s:s + block_rows])


class GatherBuffer:
    """Many gathers of rows of one row array (an ndarray, ``np.memmap`` or :class:`StackedRows`) into one
    reused buffer: ``with GatherBuffer(X, rows) as gather: block = gather(ids)``; ``block`` is a view of
    the buffer (``rows`` rows, grown when a gather needs more), valid until the next call.

    A gather of fewer than :data:`~hopgraph.engine.storage.arrays.MAPPED_GATHER_MIN` rows uses plain
    reads (:func:`read_rows`: nothing mapped). A larger one reads a memory-mapped part through its
    mapping, and the mapped pages stay mapped until the ``with`` block ends (then released,
    :func:`release_pages`): a pass that gathers most rows of X in many gathers maps each page once
    and fills one buffer, where a fresh buffer per gather and pages dropped after each cost page
    faults of the whole file per gather (``docs/decisions/segmented-writes.md``). Meanwhile the
    resident set holds the mapped pages (at most the file). Complexity: O(rows · row bytes) plus a
    page fault per page of X touched."""

    def __init__(self, X: "np.ndarray | StackedRows", rows: int = 0) -> None:
        self.X = X
        self.parts = X.parts if isinstance(X, StackedRows) else [X]
        self.offsets = X.offsets if isinstance(X, StackedRows) else np.array([0, len(X)], np.int64)
        self.buffer = np.empty((int(rows),) + tuple(X.shape[1:]), X.dtype)
        # a file cut short would raise SIGBUS through the mapping: such a part is read with plain reads;
        # rows read only by ``X[rows]`` (a sharded index's) are read so
        self.mapped = not getattr(X, "rows_only", False) and all(
            os.stat(p.filename).st_size >= int(p.offset) + p.nbytes for p in self.parts if _file_backed(p))

    def __enter__(self) -> "GatherBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        release_pages(*self.parts)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """``X[rows]`` (int64 row ids in ``[0, N)``, 1-D) as a view of the buffer (grown when too small)."""
        rows = np.asarray(rows, np.int64)
        if len(rows) > len(self.buffer):
            self.buffer = np.empty((len(rows),) + self.buffer.shape[1:], self.buffer.dtype)
        out = self.buffer[:len(rows)]
        if not len(rows):
            return out
        if len(rows) < arrays.MAPPED_GATHER_MIN or not self.mapped:  # plain reads, nothing mapped
            out[...] = self.X.take(rows) if isinstance(self.X, StackedRows) else read_rows(self.X, rows)
            return out
        part = np.searchsorted(self.offsets, rows, side="right") - 1
        counts = np.bincount(part, minlength=len(self.parts))
        most = int(counts.argmax())
        # the part holding most rows is read into every position (the others' ids clipped into its
        # range), then the other parts' rows overwrite theirs: no temporary of the buffer's size
        np.take(self.parts[most], rows - self.offsets[most], axis=0, out=out, mode="clip")
        for p in np.flatnonzero(counts).tolist():
            if p != most:
                sel = np.flatnonzero(part == p)
                out[sel] = self.parts[p][rows[sel] - self.offsets[p]]
        return out


#: a memory-mapped part of fewer rows than this (a small segment's) is read into memory by
#: :func:`stack_rows`, while the rows so read stay within :data:`SMALL_PARTS_MAX_ROWS`
SMALL_PART_ROWS = 4096
#: the rows of small memory-mapped parts :func:`stack_rows` reads into memory at most
SMALL_PARTS_MAX_ROWS = 65_536


def stack_rows(parts: Sequence[np.ndarray]) -> "np.ndarray | StackedRows":
    """``parts`` as one row array: the part itself when there is one, a concatenation when none is
    memory-mapped (small, in-memory rows), else :class:`StackedRows` (nested ones flattened,
    consecutive in-memory parts joined). Memory-mapped parts of fewer than :data:`SMALL_PART_ROWS`
    rows (the segments of single adds) are read into memory first, up to
    :data:`SMALL_PARTS_MAX_ROWS` rows in all, so that an index of many small segments is read as a
    few parts (a gather visits each part it reads from)."""
    flat: list[np.ndarray] = []
    for p in parts:
        flat.extend(p.parts if isinstance(p, StackedRows) else [p])
    flat = [p for p in flat if len(p)] or flat[:1]
    if len(flat) == 1:
        return flat[0]
    budget = SMALL_PARTS_MAX_ROWS
    for i, p in enumerate(flat):
        if isinstance(p, np.memmap) and len(p) < SMALL_PART_ROWS and len(p) <= budget:
            with RowReader(p) as read:
                flat[i] = read(0, len(p))
            budget -= len(p)
    if not any(isinstance(p, np.memmap) for p in flat):
        return np.concatenate(flat)
    joined: list[np.ndarray] = []
    for p in flat:
        if joined and not isinstance(p, np.memmap) and not isinstance(joined[-1], np.memmap):
            joined[-1] = np.concatenate([joined[-1], p])
        else:
            joined.append(p)
    return joined[0] if len(joined) == 1 else StackedRows(joined)
