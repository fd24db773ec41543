"""``inner_product_topk``: the exact top-``k`` rows of ``Q · Xᵀ`` per query — the dense search
(SPEC §1 query step 1, §2 step 7, §3 step 5) — on the device its tensors are on.

Semantics (those of :func:`hopgraph.engine.ranking.topk_rows` on the whole score matrix):

* a score is the float32 product ``Q[b] · X[j]`` (X float32, or float16 widened to float32);
* per query the ``k`` best rows, best first, equal scores toward the LOWER row;
* ``allowed`` (bool [N], None = every row): the other rows are never returned;
* a -inf or NaN score is not a result (a NaN in Q makes every score of that query NaN, a NaN in a
  row of X every score of that row): such entries, and the places beyond the rows there are
  (``k > N``, a filter passing fewer), are padding: id -1, score -inf;
* no query (B = 0) gives ``[0, k]``; no row gives padding only.

X is one tensor ``[N, d]`` or a sequence of tensors whose rows are stacked (the segments of an
index), read in blocks of rows so that at most :data:`BLOCK_SCORES` scores exist at a time (256
queries over 10⁶ rows never make the ``[B, N]`` matrix): each block's top-``k`` is merged into
the running one.

The exact order without sorting a block (:func:`block_topk`): ``torch.topk`` of the floats gives
each query's ``k``-th score t of the block and the entries above it; which of the entries scoring
exactly t are kept (the lowest rows) is a second ``torch.topk``, of their positions; no tie margin,
no host synchronisation. The short lists are ranked by int64 keys (:func:`score_keys`) whose high
32 bits order as the float does and whose low 32 bits are ``2³² − 1 − row``: distinct, ordered
"score descending, then the lower row", decoded back to the rows and the float32 scores bit for
bit; the running top-``k`` is kept as keys. This op has no Triton kernel: its work is a matrix
product and two selections, which torch runs on any device (cuBLAS and ``torch.topk`` on CUDA).
"""
from __future__ import annotations

from typing import Sequence

import torch

from .checks import check_positive_int
from .dispatch import register
from .errors import InputError
from .tensors import as_tensor

#: the most scores (queries × rows) one block of the product holds at a time
BLOCK_SCORES = 1 << 22
#: at most this many elements of X are read (and widened to float32) per block
BLOCK_ELEMENTS = 1 << 22
#: the low 32 bits of a key: ``LOW − row`` (rows below 2³² − 1)
LOW = (1 << 32) - 1
#: a key below every score's (never among a block's top: at least ``kk`` real keys compete with it)
NO_KEY = torch.iinfo(torch.int64).min
OP = "inner_product_topk"


def score_keys(scores: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """int64 keys ordering ``scores`` (float32; NaN already replaced) descending, then ``rows``
    (int64, broadcast against ``scores``) ascending, all distinct where the rows differ; -0.0 keys as +0.0."""
    keys = (scores + 0.0).view(torch.int32).to(torch.int64)  # -0.0 + 0.0 is +0.0
    keys ^= (keys >> 31) & 0x7FFFFFFF  # a negative float: its other 31 bits flipped, so the ints order as the floats
    keys <<= 32
    keys |= LOW - rows
    return keys


def decoded(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows int64, scores float32)`` of :func:`score_keys`' keys; a -inf score is padding (-1, -inf)."""
    ordered = (keys >> 32).to(torch.int32)
    scores = torch.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF).view(torch.float32)
    rows = LOW - (keys & LOW)
    return torch.where(scores == -torch.inf, -1, rows), scores


def block_topk(scores: torch.Tensor, first_row: int, kk: int) -> torch.Tensor:
    """The keys (:func:`score_keys`) of the exact top-``kk`` of one block of scores [B, r] (rows
    ``first_row`` on; no NaN), best first: ``torch.topk`` of the floats gives each query's ``kk``-th
    score t and the entries above it; the lowest columns scoring t are a ``torch.topk`` of their
    positions; the two short lists are merged by their keys."""
    vals, cols = torch.topk(scores, kk, dim=1)
    t = vals[:, kk - 1:kk]
    r = scores.shape[1]
    positions = torch.arange(r, dtype=torch.int32, device=scores.device)
    tied = torch.topk(torch.where(scores == t, positions, r), kk, dim=1, largest=False).values.to(torch.int64)
    above = torch.where(vals > t, score_keys(vals, cols + first_row), NO_KEY)
    at_t = torch.where(tied < r, score_keys(t.expand_as(vals), tied + first_row), NO_KEY)
    return torch.topk(torch.cat([above, at_t], 1), kk, dim=1).values


def _parts(X: "torch.Tensor | Sequence[torch.Tensor]", device: torch.device, d: int) -> list[torch.Tensor]:
    """X as a list of 2-D floating tensors on ``device`` with ``d`` columns (InputError naming X otherwise)."""
    parts = list(X) if isinstance(X, (list, tuple)) else [X]
    out = []
    for i, part in enumerate(parts):
        t = as_tensor(part, device=device, name=f"{OP}: X")
        where = "X" if len(parts) == 1 else f"X part {i}"
        if t.dim() != 2 or not t.dtype.is_floating_point:
            raise InputError(f"{OP}: {where} must be a 2-D floating-point matrix, got {t.dtype} {tuple(t.shape)}")
        if t.shape[1] != d:
            raise InputError(f"{OP}: {where} has {t.shape[1]} columns, the queries {d}")
        if t.device != device:
            raise InputError(f"{OP}: {where} is on {t.device}, the queries on {device}")
        out.append(t)
    return out


def inner_product_topk(Q: torch.Tensor, X: "torch.Tensor | Sequence[torch.Tensor]", k: int,
                       allowed: torch.Tensor | None = None, block_rows: int | None = None, device: str = "cpu"
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids int64 [B, k], scores float32 [B, k])``: the top-``k`` rows of ``Q [B, d] · Xᵀ`` per
    query (module docstring), on Q's device; X ``[N, d]`` (or parts stacked by rows) and
    ``allowed`` (bool [N]) must be there too. ``block_rows``: rows of X per block (None: as many
    as keep :data:`BLOCK_SCORES` scores and :data:`BLOCK_ELEMENTS` elements of X, which a float16
    part is widened to float32 for). O(B · N · d) work, O((B + d) · block_rows + B · k) memory."""
    del device  # the work runs where the tensors are
    k = check_positive_int(k, "k", OP)
    if Q.dim() != 2 or not Q.dtype.is_floating_point:
        raise InputError(f"{OP}: Q must be a 2-D floating-point matrix, got {Q.dtype} {tuple(Q.shape)}")
    dev, B = Q.device, Q.shape[0]
    parts = _parts(X, dev, Q.shape[1])
    N = sum(len(p) for p in parts)
    if N >= LOW:
        raise InputError(f"{OP}: X has {N} rows, at most {LOW - 1} are supported")
    if allowed is not None and (allowed.dtype != torch.bool or tuple(allowed.shape) != (N,) or allowed.device != dev):
        raise InputError(f"{OP}: allowed must be a bool tensor [{N}] on {dev}, got {allowed.dtype} "
                         f"{tuple(allowed.shape)} on {allowed.device}")
    if block_rows is not None:
        block_rows = check_positive_int(block_rows, "block_rows", OP)
    step = block_rows or max(1, min(BLOCK_SCORES // max(B, 1), BLOCK_ELEMENTS // max(Q.shape[1], 1)))
    Q = Q.to(torch.float32)
    best: torch.Tensor | None = None
    offset = 0
    for part in parts:
        for s in range(0, len(part), step):
            block = part[s:s + step].to(torch.float32)
            scores = (Q @ block.T).nan_to_num_(nan=-torch.inf, posinf=torch.inf, neginf=-torch.inf)
            if allowed is not None:
                scores.masked_fill_(~allowed[offset + s:offset + s + len(block)], -torch.inf)
            keys = block_topk(scores, offset + s, min(k, len(block)))
            best = keys if best is None else torch.topk(torch.cat([best, keys], 1), min(k, best.shape[1] + keys.shape[1]),
                                                        dim=1).values
        offset += len(part)
    ids = torch.full((B, k), -1, dtype=torch.int64, device=dev)
    out = torch.full((B, k), -torch.inf, dtype=torch.float32, device=dev)
    if best is not None and B:
        ids[:, :best.shape[1]], out[:, :best.shape[1]] = decoded(best)
    return ids, out


register(OP, inner_product_topk, tensors=("Q", "allowed"))
