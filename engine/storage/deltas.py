"""What a segment stores of a structure that an append changed: the rows it appended and the earlier
rows it rewrote. For a CSR graph (``indptr``, ``indices``, ``data``): :func:`csr_delta` finds them by
comparing the graph with the one of the previous commit; :func:`apply_csr_deltas` rebuilds the graph
from the previous one and the segments' deltas, in order."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import IndexFormatError
from .validate import check_ids, check_indptr

#: the arrays of a CSR delta
CSR_DELTA_FILES = ("over_rows", "over_indptr", "over_indices", "over_data", "tail_indptr", "tail_indices", "tail_data")
#: graph entries compared at once by :func:`changed_rows`
COMPARE_BLOCK = 1 << 22


def changed_rows(old: tuple[np.ndarray, np.ndarray, np.ndarray], new: tuple[np.ndarray, np.ndarray, np.ndarray],
                 n: int) -> np.ndarray:
    """The rows ``r < n`` whose entries (columns and values, bit for bit) differ between the CSR
    graphs ``old`` and ``new`` (each ``(indptr, indices, data)``; ``old`` of ``n`` rows): sorted
    int64. Compared in blocks of about :data:`COMPARE_BLOCK` entries."""
    o_ptr, n_ptr = np.asarray(old[0], np.int64), np.asarray(new[0], np.int64)
    same_len = np.diff(o_ptr) == np.diff(n_ptr[:n + 1])
    bad = ~same_len
    r = 0
    while r < n:
        stop = int(np.searchsorted(o_ptr, o_ptr[r] + COMPARE_BLOCK, side="right")) - 1
        stop = min(max(stop, r + 1), n)
        rows = np.flatnonzero(same_len[r:stop]) + r
        if len(rows):
            lens = o_ptr[rows + 1] - o_ptr[rows]
            owner = np.repeat(rows, lens)
            at = np.arange(len(owner)) - np.repeat(np.cumsum(lens) - lens, lens)
            oi, ni = o_ptr[owner] + at, n_ptr[owner] + at
            differ = (np.asarray(old[1][oi]) != np.asarray(new[1][ni])) | \
                (np.asarray(old[2][oi]).view(np.uint8).reshape(len(oi), -1) !=
                 np.asarray(new[2][ni]).view(np.uint8).reshape(len(ni), -1)).any(axis=1)
            bad[np.unique(owner[differ])] = True
        r = stop
    return np.flatnonzero(bad).astype(np.int64)


def _rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, rows: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR of the given rows of a graph (local ``indptr``)."""
    ptr = np.asarray(indptr, np.int64)
    lens = ptr[rows + 1] - ptr[rows]
    out = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    pos = np.repeat(ptr[rows], lens) + (np.arange(int(out[-1])) - np.repeat(out[:-1], lens))
    return out, np.asarray(indices[pos]), np.asarray(data[pos])


def csr_delta(old: tuple[np.ndarray, np.ndarray, np.ndarray], new: tuple[np.ndarray, np.ndarray, np.ndarray],
              start: int, stop: int) -> dict[str, np.ndarray]:
    """What ``new`` (``stop`` rows) changed of ``old`` (``start`` rows): the rewritten rows
    (``over_rows`` and their CSR ``over_*``) and the appended rows ``[start, stop)`` (``tail_*``)."""
    over = changed_rows(old, new, start)
    o_ptr, o_ind, o_dat = _rows(new[0], new[1], new[2], over)
    t_ptr, t_ind, t_dat = _rows(new[0], new[1], new[2], np.arange(start, stop, dtype=np.int64))
    return {"over_rows": over, "over_indptr": o_ptr, "over_indices": o_ind, "over_data": o_dat,
            "tail_indptr": t_ptr, "tail_indices": t_ind, "tail_data": t_dat}


def apply_csr_deltas(base: tuple[np.ndarray, np.ndarray, np.ndarray], deltas: Sequence[dict[str, np.ndarray]],
                     n_cols: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``base`` (``(indptr, indices, data)``) with each delta of :func:`csr_delta` applied in order: its
    rewritten rows replaced, its rows appended. The deltas' arrays are checked (row ids and columns in
    range, offsets; IndexFormatError naming ``where``); the result holds ``n_cols`` rows at most."""
    indptr, indices, data = (np.asarray(a) for a in base[:3])
    lens = np.diff(np.asarray(indptr, np.int64))
    src_kind = np.zeros(len(lens), np.int64)          # 0: base, k: delta k-1's override or tail
    src_pos = np.asarray(indptr[:-1], np.int64).copy()  # where the row starts in its source
    sources: list[tuple[np.ndarray, np.ndarray]] = [(indices, data)]
    for k, d in enumerate(deltas, 1):
        n = len(lens)
        over = np.asarray(check_ids(d["over_rows"], max(n, 1), f"{where} delta {k} over_rows.npy"), np.int64)
        if len(over) > 1 and (np.diff(over) <= 0).any():
            raise IndexFormatError(f"{where} delta {k} over_rows.npy: not increasing")
        t_ind = np.asarray(d["tail_indices"])
        t_ptr = np.asarray(check_indptr(d["tail_indptr"], len(d["tail_indptr"]) - 1, len(t_ind),
                                        f"{where} delta {k} tail_indptr.npy"), np.int64)
        o_ind = np.asarray(d["over_indices"])
        o_ptr = np.asarray(check_indptr(d["over_indptr"], len(over), len(o_ind), f"{where} delta {k} over_indptr.npy"),
                           np.int64)
        m = len(t_ptr) - 1
        for name, ind, dat in (("over", o_ind, d["over_data"]), ("tail", t_ind, d["tail_data"])):
            check_ids(ind, n_cols, f"{where} delta {k} {name}_indices.npy")
            if np.shape(dat) != np.shape(ind):
                raise IndexFormatError(f"{where} delta {k} {name}_data.npy: one value per column expected")
        # overrides index the rewritten rows in the over arrays, then the tail follows them
        ind_all = np.concatenate([o_ind, t_ind])
        dat_all = np.concatenate([np.asarray(d["over_data"]), np.asarray(d["tail_data"])])
        sources.append((ind_all, dat_all))
        lens[over] = np.diff(o_ptr)
        src_kind[over] = k
        src_pos[over] = o_ptr[:-1]
        lens = np.concatenate([lens, np.diff(t_ptr)])
        src_kind = np.concatenate([src_kind, np.full(m, k, np.int64)])
        src_pos = np.concatenate([src_pos, len(o_ind) + t_ptr[:-1]])
    out_ptr = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=out_ptr[1:])
    out_ind = np.empty(int(out_ptr[-1]), np.asarray(indices).dtype)
    out_dat = np.empty(int(out_ptr[-1]), np.asarray(data).dtype)
    for k, (ind, dat) in enumerate(sources):
        rows = np.flatnonzero(src_kind == k)
        if not len(rows):
            continue
        rl = lens[rows]
        offs = np.arange(int(rl.sum())) - np.repeat(np.cumsum(rl) - rl, rl)
        dest = np.repeat(out_ptr[rows], rl) + offs
        src = np.repeat(src_pos[rows], rl) + offs
        out_ind[dest] = np.asarray(ind[src])
        out_dat[dest] = np.asarray(dat[src])
    return out_ptr, out_ind, out_dat
