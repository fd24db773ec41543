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
from .gain_knn import as_embedding_tensor, select_topk, tile_candidates, weights_function
from .tensors import as_tensor

#: similarity entries of one ``[rows, N]`` tile of the CPU path (64 MiB of float32)
BLOCK_ENTRIES = 1 << 24
#: the fewest rows of either operand of a similarity product on the CPU: BLAS libraries compute a
#: product of very few rows by another kernel (MKL: gemv for 1 row, a small-matrix path up to ~15 rows
#: at d = 384) whose sums differ from the blocked GEMM's in the last bit
MIN_GEMM_ROWS = 32
_OP = "gain_knn_rows"


@dataclass(frozen=True)
class RowsInputs:
    """The validated inputs of :func:`gain_knn_rows_cpu` and the Triton path (CPU tensors): ``Q`` and
    ``X`` float32 ``[M, d]`` / ``[N, d]``, ``penalty`` float32 ``[N]``, ``columns`` int64 ``[N]`` strictly
    increasing, ``exclude`` int64 ``[M]`` (-1: none), ``floor`` float32 ``[M]`` (≥ 0), ``k`` capped at
    ``N``, the band and ``n_cols``."""

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

    def empty(self) -> CSR:
        """The result with no edge: ``M`` empty rows."""
        return csr_from_topk(np.zeros((self.Q.shape[0], 0), np.float32), np.zeros((self.Q.shape[0], 0), np.int64),
                             self.n_cols)


def _vector(value, n: int, name: str, dtype: torch.dtype, default: float) -> torch.Tensor:
    """``value`` as a CPU tensor of shape ``(n,)`` and ``dtype`` (``default`` everywhere when None)."""
    if value is None:
        return torch.full((n,), default, dtype=dtype)
    t = as_tensor(value, name=f"{_OP}: {name}").detach().cpu()
    if tuple(t.shape) != (n,):
        raise InputError(f"{_OP}: {name} must have shape ({n},), got {tuple(t.shape)}")
    return t


def check_rows_inputs(Q, X, k, sim_min, sim_max, penalty=None, columns=None, exclude=None, floor=None,
                      n_cols=None) -> RowsInputs:
    """Validate the inputs of :func:`gain_knn_rows_cpu` (module docstring); :class:`InputError` naming
    the input and what is wrong."""
    Q, X = as_embedding_tensor(Q, "Q", _OP), as_embedding_tensor(X, "X", _OP)
    (m, d), n = Q.shape, X.shape[0]
    if X.shape[1] != d:
        raise InputError(f"{_OP}: Q and X must have the same width, got {d} and {X.shape[1]}")
    k = check_positive_int(k, "k", _OP)
    sim_min, sim_max = check_band(sim_min, sim_max, _OP)
    pen = _vector(penalty, n, "penalty", torch.float32, 1.0)
    check_values(pen, "penalty", _OP)
    pen = pen.to(torch.float32)
    check_values(pen, "penalty (as float32)", _OP)
    cols = _vector(columns, n, "columns", torch.int64, 0.0) if columns is not None else torch.arange(n)
    check_int_dtype(cols, "columns", _OP)
    cols = cols.to(torch.int64)
    if n and (int(cols[0]) < 0 or (n > 1 and not bool((cols[1:] > cols[:-1]).all()))):
        raise InputError(f"{_OP}: columns must be non-negative and strictly increasing")
    last = int(cols[-1]) + 1 if n else 0
    n_cols = last if n_cols is None else check_positive_int(n_cols, "n_cols", _OP, minimum=last)
    if n_cols > 2 ** 31 - 1:
        raise InputError(f"{_OP}: n_cols must fit in int32, got {n_cols}")
    excl = _vector(exclude, m, "exclude", torch.int64, -1.0)
    check_ids(excl, "exclude", 2 ** 31 - 1, _OP, "column ids", padding=True)  # any id: one of no base row excludes none
    fl = _vector(floor, m, "floor", torch.float32, 0.0)
    check_values(fl, "floor", _OP, non_negative=False)
    fl = fl.to(torch.float32).clamp(min=0.0)
    return RowsInputs(Q, X, pen.contiguous(), cols.contiguous(), excl.to(torch.int64).contiguous(), fl.contiguous(),
                      min(k, max(n, 1)), sim_min, sim_max, n_cols)


def _padded(A: torch.Tensor) -> torch.Tensor:
    """``A`` with zero rows appended up to :data:`MIN_GEMM_ROWS` rows."""
    if A.shape[0] >= MIN_GEMM_ROWS:
        return A
    return torch.cat([A, A.new_zeros((MIN_GEMM_ROWS - A.shape[0], A.shape[1]))])


def gain_knn_rows_cpu(Q, X, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, penalty=None, columns=None,
                      exclude=None, floor=None, n_cols: int | None = None, block_entries: int = BLOCK_ENTRIES,
                      device: str = "cpu") -> CSR:
    """SPEC §1 steps 3-5 for the rows of ``Q`` among the rows of ``X`` on the CPU (module docstring).

    ``Q [M, d]`` query rows, ``X [N, d]`` base rows (normalised, so that ``Q Xᵀ`` is cosine);
    ``penalty [N]`` the base rows' target penalty (SPEC §1 step 2; default ones); ``columns`` int64
    ``[N]`` their ids, strictly increasing (default ``arange(N)``); ``exclude`` int64 ``[M]`` the id each
    query row may not link to (default -1: none); ``floor`` float32 ``[M]``: a row's edges must weigh
    more (default 0); ``n_cols`` the result's column count (default ``columns[-1] + 1``). Returns CSR
    (``indptr int64 [M+1]``, ``indices int32``, ``data float32``), each row best first.

    Q is processed in row blocks of at most ``block_entries`` similarity entries (at least
    :data:`MIN_GEMM_ROWS` rows): memory O(M·k + block_entries), the ``[M, N]`` matrix never exists.
    """
    a = check_rows_inputs(Q, X, k, sim_min, sim_max, penalty, columns, exclude, floor, n_cols)
    block_entries = check_positive_int(block_entries, "block_entries", _OP)
    m, n = a.Q.shape[0], a.X.shape[0]
    if m == 0 or n == 0:
        return a.empty()
    weights = weights_function(m * n)
    Xp = _padded(a.X)
    pen = torch.cat([a.penalty, a.penalty.new_zeros(Xp.shape[0] - n)])
    rows = max(MIN_GEMM_ROWS, block_entries // max(n, 1))
    vals = torch.full((m, a.k), -math.inf)
    cols = torch.full((m, a.k), -1, dtype=torch.int64)
    for r0 in range(0, m, rows):
        r1 = min(r0 + rows, m)
        W = weights(_padded(a.Q[r0:r1]) @ Xp.T, pen, a.sim_min, a.sim_max)[:r1 - r0, :n]
        W = torch.where(W > a.floor[r0:r1, None], W, torch.full_like(W, -math.inf))
        own = torch.searchsorted(a.columns, a.exclude[r0:r1]).clamp(max=n - 1)
        hit = (a.exclude[r0:r1] >= 0) & (a.columns[own] == a.exclude[r0:r1])
        W[hit.nonzero().squeeze(1), own[hit]] = -math.inf
        v, pos = tile_candidates(W, 0, a.k)
        vals[r0:r1], cols[r0:r1] = select_topk(v, torch.where(pos >= 0, a.columns[pos.clamp(min=0)], -1), a.k)
    return csr_from_topk(vals.numpy(), cols.numpy(), a.n_cols)


register(_OP, gain_knn_rows_cpu, triton="hopgraph.kernels.gain_knn_rows_triton:gain_knn_rows_triton")
