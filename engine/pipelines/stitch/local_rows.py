"""Rows of a ``[B, N]`` score matrix held on a few columns only.

A graph pipeline's per-question vectors — STITCH's relevance, prior, PPR scores (SPEC §2 query
steps 5–7) — are zero outside a small set of passages (the candidates, the activated chunks).
:class:`LocalRows` stores them as a dense block ``values [B, M]`` over the sorted union ``cols``
(M ≪ N) of the batch's non-zero columns: row b's entry at ``cols[j]`` is ``values[b, j]`` and
every other entry of the row is 0. Nothing of size ``B · N`` is allocated; M is at most the sum
of the rows' supports, whatever N is.

A row's values never depend on the other rows of its batch: every operation is row-wise, and a
sum over a row adds the same non-zero terms whatever other columns the union holds (float
summation order aside: pairwise sums over a longer row may round the last bit differently,
which :data:`~hopgraph.engine.pipelines.stitch.walk.SUPPORT_RTOL` keeps out of any decision).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LocalRows:
    """``values[b, j]`` is entry ``(b, cols[j])`` of a ``[B, n]`` matrix that is 0 elsewhere;
    ``cols`` int64 [M], increasing, no column twice."""

    cols: np.ndarray
    values: np.ndarray
    n: int

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[1] != len(self.cols):
            raise ValueError(f"LocalRows: values {self.values.shape} do not match {len(self.cols)} columns")

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def empty(cls, B: int, n: int, dtype=np.float64) -> "LocalRows":
        """``B`` all-zero rows over no column."""
        return cls(np.zeros(0, np.int64), np.zeros((B, 0), dtype), n)

    @classmethod
    def full(cls, values: np.ndarray) -> "LocalRows":
        """Dense rows ``[B, n]`` as LocalRows over every column."""
        return cls(np.arange(values.shape[1], dtype=np.int64), values, values.shape[1])

    @classmethod
    def from_entries(cls, query: np.ndarray, column: np.ndarray, value: np.ndarray, B: int, n: int,
                     dtype=np.float64) -> "LocalRows":
        """Entries ``(query, column) = value`` (a pair at most once; later ones overwrite)."""
        column = np.asarray(column, np.int64)
        cols, pos = np.unique(column, return_inverse=True)
        values = np.zeros((B, len(cols)), dtype)
        values[np.asarray(query, np.int64), pos.ravel()] = value
        return cls(cols, values, n)

    @classmethod
    def from_ids(cls, ids: np.ndarray, scores: np.ndarray, n: int, dtype=np.float64) -> "LocalRows":
        """Top lists ``ids`` [B, k] (-1 = padding) with their ``scores``."""
        ok = ids >= 0
        rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)
        return cls.from_entries(rows[ok], ids[ok], np.asarray(scores)[ok], len(ids), n, dtype)

    @property
    def is_full(self) -> bool:
        """Whether the rows are held on every column (a dense ``[B, n]`` block)."""
        return len(self.cols) == self.n

    def on(self, cols: np.ndarray) -> "LocalRows":
        """The same rows over ``cols`` (sorted, a superset of :attr:`cols`... or not: entries on
        columns missing from ``cols`` are dropped)."""
        cols = np.asarray(cols, np.int64)
        if len(cols) == len(self.cols) and np.array_equal(cols, self.cols):
            return self
        values = np.zeros((len(self), len(cols)), self.values.dtype)
        if len(self.cols) and len(cols):
            pos = np.minimum(np.searchsorted(cols, self.cols), len(cols) - 1)
            found = cols[pos] == self.cols
            values[:, pos[found]] = self.values[:, found]
        return LocalRows(cols, values, self.n)

    def rows(self, r: np.ndarray) -> "LocalRows":
        """The rows ``r`` (indices or a bool mask) over the same columns."""
        return LocalRows(self.cols, self.values[r], self.n)

    def with_values(self, values: np.ndarray) -> "LocalRows":
        """The same columns with other ``values`` ``[B, len(cols)]``."""
        return LocalRows(self.cols, values, self.n)

    def dense(self) -> np.ndarray:
        """The ``[B, n]`` matrix (for tests and inspection: O(B · n))."""
        out = np.zeros((len(self), self.n), self.values.dtype)
        out[:, self.cols] = self.values
        return out


def union_cols(*parts: LocalRows) -> np.ndarray:
    """The sorted union of the parts' columns."""
    return np.unique(np.concatenate([p.cols for p in parts])) if parts else np.zeros(0, np.int64)
