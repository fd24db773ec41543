"""What a segment stores of a structure that an append changed: the rows it appended and the earlier
rows it rewrote. For a CSR graph (``indptr``, ``indices``, ``data``): :func:`csr_delta` finds them by
comparing the graph with the one of the previous commit; :func:`apply_csr_deltas` rebuilds the graph
from the previous one and the segments' deltas, in order."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import IndexFormatError
from ..graphs.views import OverlayCSR, csr_rows
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
            if len(oi):  # rows of no entries are equal when their lengths are
                differ = (np.asarray(old[1][oi]) != np.asarray(new[1][ni])) | \
                    (np.asarray(old[2][oi]).view(np.uint8).reshape(len(oi), -1) !=
                     np.asarray(new[2][ni]).view(np.uint8).reshape(len(ni), -1)).any(axis=1)
                bad[np.unique(owner[differ])] = True
        r = stop
    return np.flatnonzero(bad).astype(np.int64)


def csr_delta(old: tuple[np.ndarray, np.ndarray, np.ndarray], new: tuple[np.ndarray, np.ndarray, np.ndarray],
              start: int, stop: int) -> dict[str, np.ndarray]:
    """What ``new`` (``stop`` rows) changed of ``old`` (``start`` rows): the rewritten rows
    (``over_rows`` and their CSR ``over_*``) and the appended rows ``[start, stop)`` (``tail_*``)."""
    over = changed_rows(old, new, start)
    o_ptr, o_ind, o_dat = csr_rows(new[0], new[1], new[2], over)
    t_ptr, t_ind, t_dat = csr_rows(new[0], new[1], new[2], np.arange(start, stop, dtype=np.int64))
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


#: the arrays of a top-k delta (:func:`topk_delta`): a rewritten row is kept as the first ``keep``
#: entries of its previous version merged with its inserted entries
TOPK_DELTA_FILES = ("ins_rows", "ins_keep", "ins_indptr", "ins_indices", "ins_data", *CSR_DELTA_FILES)


def empty_topk_delta() -> dict[str, np.ndarray]:
    """A :func:`topk_delta` with no rewritten row (what a segment that stores none of them means)."""
    z, one = np.zeros(0, np.int64), np.zeros(1, np.int64)
    return {"ins_rows": z, "ins_keep": z, "ins_indptr": one, "ins_indices": np.zeros(0, np.int32),
            "ins_data": np.zeros(0, np.float32), "over_rows": z, "over_indptr": one,
            "over_indices": np.zeros(0, np.int32), "over_data": np.zeros(0, np.float32)}


def _merged_order(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """The order of entries within each row: weight descending, ties toward the lower column."""
    return np.lexsort((cols, -vals.astype(np.float64), rows))


def topk_delta(old: tuple[np.ndarray, np.ndarray, np.ndarray], new: tuple[np.ndarray, np.ndarray, np.ndarray],
               start: int, stop: int) -> dict[str, np.ndarray]:
    """:func:`csr_delta` for a graph whose rows are top-k lists (weight descending, ties toward the
    lower column) that an append only extends by entries of new columns (``>= start``), dropping
    the weakest: a rewritten row is stored as how many of its previous entries it keeps and the
    entries it gained (``ins_*``); a row that is not such an extension is stored whole (``over_*``)."""
    changed = overlay_changed_rows(old, new, start)
    if changed is None:
        changed = changed_rows(old, new, start)
    o_ptr = np.asarray(old[0], np.int64)
    c_ptr, c_ind, c_dat = csr_rows(new[0], new[1], new[2], changed)
    c_ind, c_dat = np.asarray(c_ind), np.asarray(c_dat)
    lens = np.diff(c_ptr)
    owner = np.repeat(np.arange(len(changed)), lens)
    gained = c_ind.astype(np.int64) >= start
    n_gained = np.bincount(owner[gained], minlength=len(changed))
    keep = lens - n_gained
    ok = keep <= o_ptr[changed + 1] - o_ptr[changed]
    keep_ok = np.where(ok, keep, 0)
    # what the row would be: the previous row's first ``keep`` entries and the gained ones, in order
    kept_owner = np.repeat(np.arange(len(changed)), keep_ok)
    at = np.arange(int(keep_ok.sum())) - np.repeat(np.cumsum(keep_ok) - keep_ok, keep_ok)
    src = o_ptr[changed][kept_owner] + at
    r_owner = np.concatenate([kept_owner, owner[gained]])
    r_cols = np.concatenate([np.asarray(old[1][src]), c_ind[gained]])
    r_vals = np.concatenate([np.asarray(old[2][src]), c_dat[gained]]).astype(c_dat.dtype)
    order = _merged_order(r_owner, r_cols, r_vals)
    r_owner, r_cols, r_vals = r_owner[order], r_cols[order], r_vals[order]
    good = ok.copy()
    same_len = np.bincount(r_owner, minlength=len(changed)) == lens
    good &= same_len
    rows_ok = good[owner]
    rec_rows_ok = good[r_owner]
    differ = (r_cols[rec_rows_ok] != c_ind[rows_ok]) | (r_vals[rec_rows_ok].view(np.uint32) !=
                                                        c_dat[rows_ok].view(np.uint32))
    good[np.unique(owner[rows_ok][differ])] = False
    ins = changed[good]
    sel = good[owner] & gained
    i_ptr = np.zeros(len(ins) + 1, np.int64)
    np.cumsum(n_gained[good], out=i_ptr[1:])
    over = changed[~good]
    ov_ptr, ov_ind, ov_dat = csr_rows(new[0], new[1], new[2], over)
    t_ptr, t_ind, t_dat = csr_rows(new[0], new[1], new[2], np.arange(start, stop, dtype=np.int64))
    return {"ins_rows": ins, "ins_keep": keep[good].astype(np.int64), "ins_indptr": i_ptr,
            "ins_indices": c_ind[sel], "ins_data": c_dat[sel],
            "over_rows": over, "over_indptr": ov_ptr, "over_indices": ov_ind, "over_data": ov_dat,
            "tail_indptr": t_ptr, "tail_indices": t_ind, "tail_data": t_dat}


def apply_topk_deltas(base: Any, deltas: Sequence[dict[str, np.ndarray]], n_cols: int, where: str) -> "OverlayCSR":
    """``base`` (a CSR, e.g. memory-mapped) with each :func:`topk_delta` applied in order, as an
    :class:`OverlayCSR` over it (nothing of it copied). The deltas' arrays are checked (row ids and
    columns in range, offsets, kept counts within the previous rows; IndexFormatError naming
    ``where``)."""
    g = base if isinstance(base, OverlayCSR) else OverlayCSR.over(base, n_cols)
    for k, d in enumerate(deltas, 1):
        n = g.n_rows
        rows = np.asarray(check_ids(d["ins_rows"], max(n, 1), f"{where} delta {k} ins_rows.npy"), np.int64)
        keep = np.asarray(d["ins_keep"], np.int64)
        i_ind = np.asarray(d["ins_indices"])
        i_ptr = np.asarray(check_indptr(d["ins_indptr"], len(rows), len(i_ind), f"{where} delta {k} ins_indptr.npy"),
                           np.int64)
        check_ids(i_ind, n_cols, f"{where} delta {k} ins_indices.npy")
        i_dat = np.asarray(d["ins_data"])
        if keep.shape != rows.shape or (len(keep) and (keep.min() < 0 or (keep > g.indptr[rows + 1] - g.indptr[rows]).any())) \
                or i_dat.shape != i_ind.shape:
            raise IndexFormatError(f"{where} delta {k} ins_keep.npy: kept counts out of range")
        over = np.asarray(check_ids(d["over_rows"], max(n, 1), f"{where} delta {k} over_rows.npy"), np.int64)
        o_ind = np.asarray(d["over_indices"])
        o_ptr = np.asarray(check_indptr(d["over_indptr"], len(over), len(o_ind), f"{where} delta {k} over_indptr.npy"),
                           np.int64)
        t_ind = np.asarray(d["tail_indices"])
        t_ptr = np.asarray(check_indptr(d["tail_indptr"], len(d["tail_indptr"]) - 1, len(t_ind),
                                        f"{where} delta {k} tail_indptr.npy"), np.int64)
        for name, ind, dat in (("over", o_ind, d["over_data"]), ("tail", t_ind, d["tail_data"])):
            check_ids(ind, n_cols, f"{where} delta {k} {name}_indices.npy")
            if np.shape(dat) != np.shape(ind):
                raise IndexFormatError(f"{where} delta {k} {name}_data.npy: one value per column expected")
        both = np.concatenate([rows, over])
        if len(np.unique(both)) != len(both) or (len(over) > 1 and (np.diff(over) <= 0).any()):
            raise IndexFormatError(f"{where} delta {k}: rewritten rows repeated or not increasing")
        # an inserted row: the first ``keep`` entries of its current version and its gained ones, in order
        cur_ptr, cur_ind, cur_dat = g.rows_csr(rows)
        kept_owner = np.repeat(np.arange(len(rows)), keep)
        at = np.arange(int(keep.sum())) - np.repeat(np.cumsum(keep) - keep, keep)
        src = cur_ptr[:-1][kept_owner] + at
        owner = np.concatenate([kept_owner, np.repeat(np.arange(len(rows)), np.diff(i_ptr))])
        cols = np.concatenate([np.asarray(cur_ind)[src], i_ind]).astype(np.int32)
        vals = np.concatenate([np.asarray(cur_dat)[src], i_dat]).astype(np.float32)
        order = _merged_order(owner, cols, vals)
        lens = np.concatenate([np.bincount(owner, minlength=len(rows)), np.diff(o_ptr), np.diff(t_ptr)])
        all_rows = np.concatenate([rows, over, n + np.arange(len(t_ptr) - 1, dtype=np.int64)])
        ind = np.concatenate([cols[order], o_ind.astype(np.int32), t_ind.astype(np.int32)])
        dat = np.concatenate([vals[order], np.asarray(d["over_data"], np.float32), np.asarray(d["tail_data"], np.float32)])
        starts = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=starts[1:])
        sort = np.argsort(all_rows, kind="stable")
        s_lens = lens[sort]
        ptr = np.zeros(len(sort) + 1, np.int64)
        np.cumsum(s_lens, out=ptr[1:])
        pos = np.repeat(starts[:-1][sort], s_lens) + (np.arange(int(ptr[-1])) - np.repeat(ptr[:-1], s_lens))
        g = g.updated(all_rows[sort], ptr, ind[pos], dat[pos], n_cols)
    return g


def overlay_changed_rows(old: Any, new: Any, n: int) -> np.ndarray | None:
    """The rows ``r < n`` that differ between ``old`` and an :class:`OverlayCSR` ``new`` made over it
    (``old`` is its base, or an overlay over the same base): only the rows the overlays replace can
    differ. None when they are not such a pair."""
    if not isinstance(new, OverlayCSR):
        return None
    if isinstance(old, OverlayCSR):
        if old.base is not new.base:
            return None
        cand = np.union1d(old.overridden[old.overridden < n], new.overridden[new.overridden < n])
    elif old.indices is new.base.indices and old.data is new.base.data \
            and np.array_equal(np.asarray(old.indptr), np.asarray(new.base.indptr)):
        cand = new.overridden[new.overridden < n]
    else:
        return None
    if not len(cand):
        return cand
    diff = changed_rows(csr_rows(*old[:3], cand), new.rows_csr(cand), len(cand))
    return cand[diff]
