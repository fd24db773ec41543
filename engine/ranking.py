"""Small ranking helpers shared by every pipeline (top-k with padding, fusion) and the one check of
a ranking's ``k``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import InputError

PAD_ID = -1
PAD_SCORE = -np.inf


def is_k(k: Any) -> bool:
    """Whether ``k`` is a valid number of results: a positive integer (a NumPy integer included, a
    bool not)."""
    return not isinstance(k, bool) and isinstance(k, (int, np.integer)) and k >= 1


def check_k(k: Any, name: str = "k") -> int:
    """``k`` (results per question) as an int; InputError naming ``name`` unless :func:`is_k`."""
    if not is_k(k):
        raise InputError(f"{name} must be a positive integer, got {k!r}")
    return int(k)


def topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` columns of each row of a dense ``[B, N]`` score matrix, best first.

    Returns ``(ids int64 [B, k], scores float32 [B, k])``; when ``k > N`` the tail is
    padded with id ``-1`` and score ``-inf``. Ties break toward the lower column.
    ``-inf`` scores are treated as "not a result" and padded likewise.
    """
    scores = np.asarray(scores, dtype=np.float32)
    B, N = scores.shape
    ids = np.full((B, k), PAD_ID, dtype=np.int64)
    out = np.full((B, k), PAD_SCORE, dtype=np.float32)
    kk = min(k, N)
    if kk == 0 or B == 0:
        return ids, out
    if kk < N:
        part = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        _lowest_columns_at_ties(scores, part)
    else:
        part = np.broadcast_to(np.arange(N), (B, N))
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -part_scores), axis=1)
    top = np.take_along_axis(part, order, axis=1)
    top_scores = np.take_along_axis(part_scores, order, axis=1)
    valid = np.isfinite(top_scores) | (top_scores > 0)
    ids[:, :kk] = np.where(valid, top, PAD_ID)
    out[:, :kk] = np.where(valid, top_scores, PAD_SCORE)
    return ids, out


def fill_lowest(ids: np.ndarray, scores: np.ndarray, allowed: np.ndarray | None, n: int,
                score: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Complete padded ranked lists ``(ids int64 [B, k], scores [B, k])`` in place with the lowest
    allowed ids (``allowed`` bool [n], None = all of ``range(n)``) not already listed, each with
    ``score``: how :func:`topk_rows` ranks a tail of equal scores (ties toward the lower id), so
    ``k`` results come back whenever ``k`` passages are allowed. Returns ``(ids, scores)``.
    O(B · k) per short row beyond finding the allowed ids once."""
    k = ids.shape[1]
    short = np.flatnonzero((ids >= 0).sum(1) < k)
    if len(short):
        pool = np.flatnonzero(allowed) if allowed is not None else np.arange(n)
        for b in short.tolist():
            have = int((ids[b] >= 0).sum())
            fill = pool[:k + have]
            fill = fill[~np.isin(fill, ids[b, :have])][:k - have]
            ids[b, have:have + len(fill)] = fill
            scores[b, have:have + len(fill)] = score
    return ids, scores


def _lowest_columns_at_ties(scores: np.ndarray, part: np.ndarray) -> None:
    """``argpartition`` keeps an arbitrary member of a tie across the k-th place: in the rows where
    that happens, put the lowest tied columns into ``part`` (in place), so ties break toward the
    lower column as :func:`topk_rows` promises."""
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    tied_inside = (np.take_along_axis(scores, part, axis=1) == kth[:, None]).sum(axis=1)
    tied_total = (scores == kth[:, None]).sum(axis=1)
    for b in np.flatnonzero((tied_total > tied_inside) & np.isfinite(kth)):
        above = np.flatnonzero(scores[b] > kth[b])
        tied = np.flatnonzero(scores[b] == kth[b])[: part.shape[1] - len(above)]
        part[b] = np.concatenate([above, tied])


def minmax_normalised(scores: np.ndarray) -> np.ndarray:
    """One list's scores min-max normalised (float64: best 1, last 0; all 1 when flat); a non-finite
    score counts as the lowest finite one (all 1 when none is finite)."""
    sc = np.asarray(scores, np.float64)
    finite = np.isfinite(sc)
    sc = np.where(finite, sc, sc[finite].min() if finite.any() else 0.0)
    low, high = (sc.min(), sc.max()) if len(sc) else (0.0, 0.0)
    return (sc - low) / (high - low) if high > low else np.ones_like(sc)


def reciprocal_rank_fusion(rankings: list[np.ndarray], n_items: int, k: int = 60) -> np.ndarray:
    """Reciprocal rank fusion scores ``Σ_r 1 / (k + rank_r(d))`` (rank from 1).

    ``rankings`` are ``[B, m]`` id matrices (``-1`` = padding, ignored). Returns a
    dense ``[B, n_items]`` float32 score matrix (0 for items no ranking holds).
    """
    B = rankings[0].shape[0]
    fused = np.zeros((B, n_items), dtype=np.float32)
    for ids in rankings:
        ranks = np.arange(1, ids.shape[1] + 1, dtype=np.float32)
        contrib = np.broadcast_to(1.0 / (k + ranks), ids.shape)
        rows = np.broadcast_to(np.arange(B)[:, None], ids.shape)
        valid = ids >= 0
        np.add.at(fused, (rows[valid], ids[valid]), contrib[valid])
    return fused


def rrf_topk(rankings: list[np.ndarray], top_k: int, k: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Top-``top_k`` of :func:`reciprocal_rank_fusion` without the dense ``[B, n_items]`` array:
    only the items the rankings hold are scored, so the cost is O(B · Σ m) whatever
    the corpus size. Equal to ``topk_rows(reciprocal_rank_fusion(...), top_k)`` with zero scores
    as padding, bit for bit: each item's float32 sum adds the same terms in the same order (the
    rankings' order), ties break toward the lower id (:func:`topk_rows`).

    ``rankings`` are ``[B, m]`` id matrices (``-1`` = padding, ignored; an id at most once per
    row of one ranking). Returns ``(ids int64 [B, top_k], scores float32 [B, top_k])``."""
    B = rankings[0].shape[0] if rankings else 0
    rows, ids, contrib = [], [], []
    for r in rankings:
        ranks = np.arange(1, r.shape[1] + 1, dtype=np.float32)
        c = np.broadcast_to(1.0 / (k + ranks), r.shape)
        valid = r >= 0
        rows.append(np.broadcast_to(np.arange(B)[:, None], r.shape)[valid])
        ids.append(np.asarray(r, np.int64)[valid])
        contrib.append(c[valid])
    if not rankings or not sum(len(i) for i in ids):
        return topk_entries(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), B, top_k)
    row, col, val = np.concatenate(rows).astype(np.int64), np.concatenate(ids), np.concatenate(contrib)
    n = np.int64(max(int(col.max()) + 1, 1))
    uniq, inverse = np.unique(row * n + col, return_inverse=True)
    fused = np.zeros(len(uniq), np.float32)
    np.add.at(fused, inverse.ravel(), val)  # the rankings' order, as reciprocal_rank_fusion adds them
    return topk_entries(uniq // n, uniq % n, fused, B, top_k)


def topk_entries(query: np.ndarray, column: np.ndarray, score: np.ndarray, n_queries: int, k: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` entries of each query, best first, ties toward the lower column:
    ``(ids int64 [n_queries, k], scores float32 [n_queries, k])``, padded with -1 / -inf.
    As :func:`~hopgraph.engine.ranking.topk_rows` on the dense rows the entries come from
    (columns without an entry being -inf): a -inf (or NaN) score is not a result.
    ``query``/``column`` may hold a (query, column) pair at most once."""
    ids = np.full((n_queries, k), PAD_ID, np.int64)
    out = np.full((n_queries, k), PAD_SCORE, np.float32)
    score = np.asarray(score, np.float32)
    keep = np.isfinite(score) | (score > 0)
    query, rank, column, score = ranked_entries(np.asarray(query)[keep], np.asarray(column)[keep], score[keep], k)
    ids[query, rank] = column
    out[query, rank] = score
    return ids, out


def ranked_entries(query: np.ndarray, column: np.ndarray, score: np.ndarray, k: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The best ``k`` entries of each query among ``(query, column, score)`` triplets (any order, a
    (query, column) pair at most once), higher score first, ties toward the lower column:
    ``(query, rank, column, score)``, sorted by query then rank (the order of :func:`topk_entries`)."""
    query, column, score = np.asarray(query, np.int64), np.asarray(column, np.int64), np.asarray(score)
    order = np.lexsort((column, -score, query))
    query, column, score = query[order], column[order], score[order]
    starts = np.flatnonzero(np.r_[True, query[1:] != query[:-1]]) if len(query) else np.zeros(0, np.int64)
    rank = np.arange(len(query)) - np.repeat(starts, np.diff(np.r_[starts, len(query)]))
    top = rank < k
    return query[top], rank[top], column[top], score[top]


def merge_topk(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int, B: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of several top lists ``(global ids [B, k_s], scores [B, k_s])`` of ``B`` queries:
    higher score first, ties toward the lower row; padding (-1 / -inf) last (all of it when there is
    no list)."""
    ids = np.concatenate([p[0] for p in parts] or [np.zeros((B, 0), np.int64)], axis=1)
    scores = np.concatenate([p[1] for p in parts] or [np.zeros((B, 0), np.float32)], axis=1).astype(np.float32)
    out_ids = np.full((B, k), PAD_ID, np.int64)
    out_scores = np.full((B, k), PAD_SCORE, np.float32)
    for b in range(B):
        keep = ids[b] >= 0
        i, s = ids[b][keep], scores[b][keep]
        order = np.lexsort((i, -s))[:k]
        out_ids[b, :len(order)], out_scores[b, :len(order)] = i[order], s[order]
    return out_ids, out_scores
