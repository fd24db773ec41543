"""``gain_knn_rows``: the gain-graph edges of given rows into a given set of rows (SPEC §1 index steps 3-5).

:mod:`.gain_knn` builds the whole graph of a corpus; this op computes one block of it: the out-edges of
the *query rows* ``Q [M, d]`` among the *base rows* ``X [N, d]`` — the edges an added passage takes (Q
the new rows, X the corpus), the reverse edges existing passages take into added ones (Q the existing
rows, X the new rows, each row's current k-th weight as its floor), or the edges of a cell of rows among
its candidates (G3RAG's IVF graph). The base rows carry their ids in the full graph, ``columns``
(strictly increasing), and the weights of SPEC §1 steps 3-4 are those of :mod:`.gain_knn`:
``w_ij = x·sqrt(1 − x²)·penalty[j]`` with ``x = clip(s_ij, 0, 1)``, ``s_ij = q_i · x_j``.

Semantics shared by the CPU and Triton paths:

* an edge ``i → columns[j]`` is *eligible* when ``columns[j] ≠ exclude[i]`` (a row's own id: no
  self-edge), ``sim_min ≤ s_ij ≤ sim_max`` and ``w_ij > max(floor[i], 0)`` (``floor`` default 0: the
  positive-weight rule of :mod:`.gain_knn`);
* per row the eligible edges are ordered by weight descending, ties toward the LOWER column id, and
  the first ``k`` are kept (a row with fewer is shorter; ``k > N`` keeps them all);
* the result is CSR with ``M`` rows and ``n_cols`` columns (default ``columns[-1] + 1``), column ids
  from ``columns``, each row in that order.

Inputs must be finite: NaN or infinity in Q, X, the penalty or the floor raises
:class:`~hopgraph.kernels.errors.InputError` naming the array, as :mod:`.gain_knn` does. An empty Q or X
gives rows without edges.

So that the blocks of a graph put together equal :mod:`.gain_knn`'s graph bit for bit on the CPU, the
CPU path computes every similarity tile as a product of at least :data:`MIN_GEMM_ROWS` rows on either
side (padded with zero rows, which are never edges) and applies the weights with :mod:`.gain_knn`'s own
tile arithmetic (:func:`~.gain_knn.weights_function`) and selection (:func:`~.gain_knn.tile_candidates`,
:func:`~.gain_knn.select_topk`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .checks import check_band, check_ids, check_int_dtype, check_positive_int, check_values
from .csr import CSR, csr_from_topk
from .dispatch import register
from .errors import InputError
from .gain_knn import as_embedding_tensor, edge_weights, pair_weights, select_topk, tile_candidates, weights_function
from .tensors import as_tensor

#: similarity entries of one ``[rows, N]`` tile of the CPU path (64 MiB of float32)
BLOCK_ENTRIES = 1 << 24
#: the fewest rows of either operand of a similarity product on the CPU: BLAS libraries compute a
#: product of very few rows by another kernel (MKL: gemv for 1 row, a small-matrix path up to ~15 rows
#: at d = 384) whose sums differ from the blocked GEMM's in the last bit
MIN_GEMM_ROWS = 32
_OP = "gain_knn_rows"


@dataclass(frozen=True)
class Reverse:
    """The reverse direction asked of :func:`gain_knn_rows_cpu`: the query rows' ids ``columns`` int64
    ``[M]`` (strictly increasing), their target penalty ``penalty`` float32 ``[M]``, the base rows'
    ``floor`` float32 ``[N]`` (≥ 0, +inf: no edge) and ``k`` capped at ``M``."""

    columns: torch.Tensor
    penalty: torch.Tensor
    floor: torch.Tensor
    k: int


@dataclass(frozen=True)
class RowsInputs:
    """The validated inputs of :func:`gain_knn_rows_cpu` and the Triton path (CPU tensors): ``Q`` and
    ``X`` float32 ``[M, d]`` / ``[N, d]``, ``penalty`` float32 ``[N]``, ``columns`` int64 ``[N]`` strictly
    increasing, ``exclude`` int64 ``[M]`` (-1: none), ``floor`` float32 ``[M]`` (≥ 0, +inf: no edge),
    ``k`` capped at ``N``, the band, ``n_cols`` and the :class:`Reverse` direction (None: not asked)."""

    Q: torch.Tensor
    X: torch.Tensor
    penalty: torch.Tensor
    columns: torch.Tensor
    exclude: torch.Tensor
    floor: torch.Tensor
    k: int
    sim_min: float
    sim_max: float
    n_cols: int
    reverse: Reverse | None = None

    def empty(self, rows: int) -> CSR:
        """A result of ``rows`` rows without edges."""
        return csr_from_topk(np.zeros((rows, 0), np.float32), np.zeros((rows, 0), np.int64), self.n_cols)

    def result(self, forward: CSR, reverse: CSR | None) -> "CSR | tuple[CSR, CSR]":
        """What the op returns: ``forward``, or ``(forward, reverse)`` when the reverse direction was asked."""
        return forward if self.reverse is None else (forward, reverse)


def _vector(value, n: int, name: str, dtype: torch.dtype, default: float) -> torch.Tensor:
    """``value`` as a CPU tensor of shape ``(n,)`` and ``dtype`` (``default`` everywhere when None)."""
    if value is None:
        return torch.full((n,), default, dtype=dtype)
    t = as_tensor(value, name=f"{_OP}: {name}").detach().cpu()
    if tuple(t.shape) != (n,):
        raise InputError(f"{_OP}: {name} must have shape ({n},), got {tuple(t.shape)}")
    return t


def _ids(value, n: int, name: str) -> torch.Tensor:
    """Row ids ``[n]``, non-negative and strictly increasing (default ``arange(n)``), as int64."""
    ids = _vector(value, n, name, torch.int64, 0.0) if value is not None else torch.arange(n)
    check_int_dtype(ids, name, _OP)
    ids = ids.to(torch.int64)
    if n and (int(ids[0]) < 0 or (n > 1 and not bool((ids[1:] > ids[:-1]).all()))):
        raise InputError(f"{_OP}: {name} must be non-negative and strictly increasing")
    return ids.contiguous()


def _penalty(value, n: int, name: str) -> torch.Tensor:
    """A target penalty ``[n]``: finite, non-negative (default ones), as float32."""
    pen = _vector(value, n, name, torch.float32, 1.0)
    check_values(pen, name, _OP)
    pen = pen.to(torch.float32)
    check_values(pen, f"{name} (as float32)", _OP)
    return pen.contiguous()


def _floor(value, n: int, name: str) -> torch.Tensor:
    """Per-row weight floors ``[n]`` as float32, at least 0 (default 0); +inf allowed (no edge), NaN not."""
    fl = _vector(value, n, name, torch.float32, 0.0)
    check_values(fl.nan_to_num(nan=math.nan, posinf=0.0, neginf=0.0), name, _OP, non_negative=False)
    return fl.to(torch.float32).clamp(min=0.0).contiguous()


def check_rows_inputs(Q, X, k, sim_min, sim_max, penalty=None, columns=None, exclude=None, floor=None,
                      n_cols=None, reverse_floor=None, query_columns=None, query_penalty=None) -> RowsInputs:
    """Validate the inputs of :func:`gain_knn_rows_cpu` (module docstring); :class:`InputError` naming
    the input and what is wrong."""
    Q, X = as_embedding_tensor(Q, "Q", _OP), as_embedding_tensor(X, "X", _OP)
    (m, d), n = Q.shape, X.shape[0]
    if X.shape[1] != d:
        raise InputError(f"{_OP}: Q and X must have the same width, got {d} and {X.shape[1]}")
    k = check_positive_int(k, "k", _OP)
    sim_min, sim_max = check_band(sim_min, sim_max, _OP)
    cols = _ids(columns, n, "columns")
    excl = _vector(exclude, m, "exclude", torch.int64, -1.0)
    check_ids(excl, "exclude", 2 ** 31 - 1, _OP, "column ids", padding=True)  # any id: one of no base row excludes none
    reverse = None
    if reverse_floor is not None:
        reverse = Reverse(_ids(query_columns, m, "query_columns"), _penalty(query_penalty, m, "query_penalty"),
                          _floor(reverse_floor, n, "reverse_floor"), min(k, max(m, 1)))
    elif query_columns is not None or query_penalty is not None:
        raise InputError(f"{_OP}: query_columns and query_penalty go with reverse_floor (the reverse direction)")
    last = max([int(c[-1]) + 1 for c in (cols, None if reverse is None else reverse.columns) if c is not None and len(c)],
               default=0)
    n_cols = last if n_cols is None else check_positive_int(n_cols, "n_cols", _OP, minimum=last)
    if n_cols > 2 ** 31 - 1:
        raise InputError(f"{_OP}: n_cols must fit in int32, got {n_cols}")
    return RowsInputs(Q, X, _penalty(penalty, n, "penalty"), cols, excl.to(torch.int64).contiguous(),
                      _floor(floor, m, "floor"), min(k, max(n, 1)), sim_min, sim_max, n_cols, reverse)


def _padded(A: torch.Tensor) -> torch.Tensor:
    """``A`` with zero rows appended up to :data:`MIN_GEMM_ROWS` rows."""
    if A.shape[0] >= MIN_GEMM_ROWS:
        return A
    return torch.cat([A, A.new_zeros((MIN_GEMM_ROWS - A.shape[0], A.shape[1]))])


def _select(W: torch.Tensor, labels: torch.Tensor, exclude: torch.Tensor, floor: torch.Tensor, k: int
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The eligible top-``k`` of each row of a weight tile ``W [r, N]`` whose columns are ``labels`` (weight
    above the row's ``floor``, column ≠ the row's ``exclude`` id): ``(rows with an edge, weights, ids)``,
    ``[rows, k]`` each, best first (:mod:`.gain_knn`'s exact order), padded with -inf / -1."""
    ok = W > floor[:, None]  # the floor is at least 0: a weight of 0 (out of the band) is no edge
    own = torch.searchsorted(labels, exclude).clamp(max=len(labels) - 1)
    hit = (exclude >= 0) & (labels[own] == exclude)
    ok[hit.nonzero().squeeze(1), own[hit]] = False
    rows = ok.any(dim=1).nonzero().squeeze(1)  # rows without an eligible edge stay empty (most, reversed)
    W = W[rows] if len(rows) < len(W) else W
    W.masked_fill_(~(ok[rows] if len(rows) < len(ok) else ok), -math.inf)
    v, pos = tile_candidates(W, 0, k)
    v, c = select_topk(v, torch.where(pos >= 0, labels[pos.clamp(min=0)], -1), k)
    return rows, v, c


def gain_knn_rows_cpu(Q, X, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, penalty=None, columns=None,
                      exclude=None, floor=None, n_cols: int | None = None, reverse_floor=None, query_columns=None,
                      query_penalty=None, block_entries: int = BLOCK_ENTRIES, device: str = "cpu"
                      ) -> "CSR | tuple[CSR, CSR]":
    """SPEC §1 steps 3-5 for the rows of ``Q`` among the rows of ``X`` on the CPU (module docstring).

    ``Q [M, d]`` query rows, ``X [N, d]`` base rows (normalised, so that ``Q Xᵀ`` is cosine);
    ``penalty [N]`` the base rows' target penalty (SPEC §1 step 2; default ones); ``columns`` int64
    ``[N]`` their ids, strictly increasing (default ``arange(N)``); ``exclude`` int64 ``[M]`` the id each
    query row may not link to (default -1: none); ``floor`` float32 ``[M]``: a row's edges must weigh
    more (default 0; +inf: none); ``n_cols`` the result's column count (default the largest id + 1).
    Returns CSR (``indptr int64 [M+1]``, ``indices int32``, ``data float32``), each row best first.

    ``reverse_floor`` float32 ``[N]`` asks for the reverse direction too, from the same similarities: the
    top-``k`` edges of each base row among the query rows, whose ids are ``query_columns`` (strictly
    increasing; default ``arange(M)``) and target penalty ``query_penalty`` (default ones), each weighing
    more than the base row's ``reverse_floor`` (+inf: none), none to the base row's own id; the result is
    then ``(forward CSR [M rows], reverse CSR [N rows])``.

    Q is processed in row blocks of at most ``block_entries`` similarity entries (at least
    :data:`MIN_GEMM_ROWS` rows): memory O((M + N)·k + block_entries), the ``[M, N]`` matrix never exists.
    """
    a = check_rows_inputs(Q, X, k, sim_min, sim_max, penalty, columns, exclude, floor, n_cols, reverse_floor,
                          query_columns, query_penalty)
    block_entries = check_positive_int(block_entries, "block_entries", _OP)
    m, n = a.Q.shape[0], a.X.shape[0]
    if m == 0 or n == 0:
        return a.result(a.empty(m), a.empty(n))
    weights, rev = weights_function(m * n * (1 if a.reverse is None else 2)), a.reverse
    Xp = _padded(a.X)
    pen = torch.cat([a.penalty, a.penalty.new_zeros(Xp.shape[0] - n)])
    rows = max(MIN_GEMM_ROWS, block_entries // max(n, 1))
    vals, cols = torch.full((m, a.k), -math.inf), torch.full((m, a.k), -1, dtype=torch.int64)
    if rev is not None:
        r_vals, r_cols = torch.full((n, rev.k), -math.inf), torch.full((n, rev.k), -1, dtype=torch.int64)
    for r0 in range(0, m, rows):
        r1 = min(r0 + rows, m)
        S = _padded(a.Q[r0:r1]) @ Xp.T
        if rev is None:
            W, WT = weights(S, pen, a.sim_min, a.sim_max), None
        else:  # both directions of the tile (band and gain computed once on the eager path)
            q_pen = torch.cat([rev.penalty[r0:r1], rev.penalty.new_zeros(S.shape[0] - (r1 - r0))])
            W, WT = pair_weights(S, q_pen, pen, a.sim_min, a.sim_max) if weights is edge_weights else \
                (weights(S, pen, a.sim_min, a.sim_max), weights(S.T, q_pen, a.sim_min, a.sim_max))
        on, v, c = _select(W[:r1 - r0, :n], a.columns, a.exclude[r0:r1], a.floor[r0:r1], a.k)
        vals[r0 + on], cols[r0 + on] = v, c
        if WT is not None:
            on, v, c = _select(WT[:n, :r1 - r0], rev.columns[r0:r1], a.columns, rev.floor, rev.k)
            r_vals[on], r_cols[on] = select_topk(torch.cat([r_vals[on], v], 1), torch.cat([r_cols[on], c], 1), rev.k)
    forward = csr_from_topk(vals.numpy(), cols.numpy(), a.n_cols)
    return a.result(forward, None if rev is None else csr_from_topk(r_vals.numpy(), r_cols.numpy(), a.n_cols))


register(_OP, gain_knn_rows_cpu, triton="hopgraph.kernels.gain_knn_rows_triton:gain_knn_rows_triton")
