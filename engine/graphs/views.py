"""Graph views: what a graph stored otherwise than as three arrays reads as.

* :class:`CSRView` — the CSR interface (``indptr``, ``indices`` / ``data`` read by position,
  ``n_cols``, unpacking as the CSR tuple) shared by every view;
* :class:`OverlayCSR` — a stored graph with some rows replaced and rows appended, held in memory
  (a graph that grows by appends, between two compactions);
* :func:`csr_rows` — the CSR of some rows of a graph.

Every graph a :class:`~hopgraph.engine.graphs.store.GraphStore` loads reads as a CSR through these
views; a kernel that needs whole arrays reads them through :func:`~hopgraph.engine.graphs.store.whole_graph`.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def csr_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, rows: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR of the given rows of a graph (local ``indptr``)."""
    ptr = np.asarray(indptr, np.int64)
    lens = ptr[rows + 1] - ptr[rows]
    out = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    pos = np.repeat(ptr[rows], lens) + (np.arange(int(out[-1])) - np.repeat(out[:-1], lens))
    return out, np.asarray(indices[pos]), np.asarray(data[pos])


class RowsArray:
    """The ``indices`` or ``data`` of an :class:`OverlayCSR`: entries read by position, each position
    mapped to its source (the stored array or the in-memory rows) through the overlay's runs."""

    def __init__(self, overlay: "OverlayCSR", base: np.ndarray, extra: np.ndarray) -> None:
        self.overlay, self.base, self.extra = overlay, base, extra
        self.dtype = np.asarray(extra).dtype if len(extra) else np.asarray(base[:0]).dtype
        self.shape = (int(overlay.indptr[-1]),)
        self.ndim = 1

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            return self[np.arange(start, stop, step, dtype=np.int64)]
        pos = np.asarray(key, np.int64)
        src, from_extra = self.overlay.sources(pos.ravel())
        out = np.empty(len(src), self.dtype)
        base = ~from_extra
        if base.any():
            out[base] = np.asarray(self.base[src[base]])
        if from_extra.any():
            out[from_extra] = self.extra[src[from_extra]]
        return out.reshape(pos.shape)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[np.arange(len(self), dtype=np.int64)]
        return out if dtype is None else out.astype(dtype, copy=False)


class CSRView:
    """What a graph stored otherwise than as three arrays shares with :class:`CSR`: ``indptr``,
    ``indices`` / ``data`` read by position, ``n_cols``, and unpacking as the CSR tuple."""

    indptr: np.ndarray
    indices: Any
    data: Any
    n_cols: int

    @property
    def n_rows(self) -> int:
        """The row count (``len(indptr) - 1``)."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """The entry count (``indptr[-1]``)."""
        return int(self.indptr[-1])

    def __iter__(self):  # as a CSR tuple: indptr, indices, data, n_cols
        return iter((self.indptr, self.indices, self.data, self.n_cols))

    def __getitem__(self, i: int) -> Any:
        return (self.indptr, self.indices, self.data, self.n_cols)[i]

    def __len__(self) -> int:
        return 4


class OverlayCSR(CSRView):
    """A CSR graph kept as a stored one (``base``, memory-mapped, never copied) with some rows
    replaced and rows appended, both held in memory: what a graph that grows by appends is between
    two compactions. ``indptr`` is a real array over a virtual entry order (row after row);
    ``indices`` / ``data`` read entries by position (:class:`RowsArray`), so code that reads rows
    through ``indptr`` and position gathers reads it as a CSR. ``overridden``: the rows not read
    from the base (sorted). Each update costs O(N) for ``indptr`` plus the rows it changes."""

    def __init__(self, base: Any, over_rows: np.ndarray, over_indptr: np.ndarray, over_indices: np.ndarray,
                 over_data: np.ndarray, n_cols: int) -> None:
        """``over_rows`` (sorted, the replaced rows below ``base``'s and every appended row) with their
        entries as a CSR ``over_*``."""
        self.base, self.n_cols = base, int(n_cols)
        self.overridden = np.asarray(over_rows, np.int64)
        self._optr = np.asarray(over_indptr, np.int64)
        base_ptr = np.asarray(base.indptr, np.int64)
        n0 = len(base_ptr) - 1
        n = max(n0, int(self.overridden[-1]) + 1 if len(self.overridden) else 0)
        lens = np.zeros(n, np.int64)
        lens[:n0] = np.diff(base_ptr)
        lens[self.overridden] = np.diff(self._optr)
        self.indptr = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=self.indptr[1:])
        # runs of rows read from one source: the base between replaced rows, each replaced row alone
        cut = np.unique(np.concatenate([[0, n0], self.overridden, self.overridden + 1]))
        cut = cut[(cut >= 0) & (cut <= n)]
        starts = cut[:-1]
        from_extra = np.isin(starts, self.overridden) | (starts >= n0)
        self._run_vstart = self.indptr[starts]
        self._run_extra = from_extra
        over_at = np.searchsorted(self.overridden, starts)
        self._run_sstart = np.where(from_extra, self._optr[np.minimum(over_at, len(self._optr) - 1)],
                                    base_ptr[np.minimum(starts, n0)])
        self.indices = RowsArray(self, base.indices, np.asarray(over_indices))
        self.data = RowsArray(self, base.data, np.asarray(over_data))

    def sources(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For virtual positions, ``(position in the source, read from the in-memory rows?)``."""
        run = np.searchsorted(self._run_vstart, pos, side="right") - 1
        return self._run_sstart[run] + (pos - self._run_vstart[run]), self._run_extra[run]

    def arrays(self) -> dict[str, np.ndarray]:
        """The whole graph as plain arrays (for a save of it whole)."""
        return {"indptr": self.indptr, "indices": np.asarray(self.indices), "data": np.asarray(self.data)}

    def rows_csr(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The CSR of the given rows (local ``indptr``)."""
        return csr_rows(self.indptr, self.indices, self.data, np.asarray(rows, np.int64))

    def updated(self, rows: np.ndarray, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                n_cols: int | None = None) -> "OverlayCSR":
        """This graph with ``rows`` (sorted; below or at the end of the graph, appended ones
        consecutive) replaced or appended by the given CSR, with ``n_cols`` columns (None: as
        now); the base is kept."""
        rows = np.asarray(rows, np.int64)
        keep = self.overridden[~np.isin(self.overridden, rows)]
        k_ptr, k_ind, k_dat = self.rows_csr(keep) if len(keep) else \
            (np.zeros(1, np.int64), np.zeros(0, np.asarray(indices).dtype), np.zeros(0, np.asarray(data).dtype))
        all_rows = np.concatenate([keep, rows])
        order = np.argsort(all_rows, kind="stable")
        lens = np.concatenate([np.diff(k_ptr), np.diff(np.asarray(indptr, np.int64))])[order]
        starts = np.concatenate([k_ptr[:-1], len(k_ind) + np.asarray(indptr, np.int64)[:-1]])[order]
        ind = np.concatenate([k_ind, np.asarray(indices)])
        dat = np.concatenate([k_dat, np.asarray(data)])
        ptr = np.zeros(len(all_rows) + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        pos = np.repeat(starts, lens) + (np.arange(int(ptr[-1])) - np.repeat(ptr[:-1], lens))
        return OverlayCSR(self.base, all_rows[order], ptr, ind[pos], dat[pos],
                          self.n_cols if n_cols is None else n_cols)

    @classmethod
    def over(cls, base: Any, n_cols: int) -> "OverlayCSR":
        """``base`` with nothing replaced."""
        z = np.zeros(0, np.int64)
        return cls(base, z, np.zeros(1, np.int64), np.zeros(0, np.asarray(base.indices[:0]).dtype),
                   np.zeros(0, np.asarray(base.data[:0]).dtype), n_cols)
