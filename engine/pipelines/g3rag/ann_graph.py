"""G3RAG gain-kNN graph at scale on the CPU: IVF candidates, exact gain rescoring.

SPEC §1 step 5 asks, per row i, for the k edges of largest ``w_ij = gain(s_ij) · pen_j``
among ``j ≠ i`` with ``sim_min ≤ s_ij ≤ sim_max``. The exact blocked kernel
(``hopgraph.kernels.call("gain_knn")``) costs O(N² d), quadratic in N. This module
computes the same graph approximately, in time linear in N (``mode="ann"`` of
:mod:`hopgraph.engine.pipelines.g3rag.pipeline`, the default on the CPU from ``ANN_MIN_N``
passages up).

**Cells from the index's one IVF.** The rows are partitioned by the dense component's IVF index
(:class:`~hopgraph.engine.components.dense.IVFIndex`, trained once per index over X): its cells
are grouped into graph cells of about :data:`CELL_SIZE` rows by a seeded spherical k-means over
the cells' centroids (:func:`graph_cells`; no second pass over X). The candidates of a row are
all members of the ``nprobe`` graph cells whose centroids are nearest to its own cell's
centroid, its own first. A cell is a *row block*: its rows share one candidate set, so each
cell is one dense GEMM tile ``X[cell] @ X[candidates]ᵀ`` followed by the fused epilogue of the
exact kernel, and the unit that :mod:`hopgraph.engine.distributed` ships to Ray workers.

Every candidate is rescored **exactly** (true cosine, band, gain, target penalty): the cells
only decide *which* pairs are looked at, never a weight. Recall against the exact graph depends
on the data: :func:`graph_recall` measures it (``docs/decisions/g3rag-ivf-graph.md``).

Results are deterministic (seeded k-means, fixed processing order), and independent of how
cells are grouped into tasks, so a Ray build equals a single-process build bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ....kernels import call
from ....kernels.csr import CSR, csr_from_topk
from ...components.dense import IVFIndex, gather_rows
from ...errors import InputError
from ...sparse import csr_from_keys, row_of_entries

#: target rows per graph cell (ceil(N / CELL_SIZE) cells): constant work per row
CELL_SIZE = 512
#: graph cells probed per cell (its own and the nprobe - 1 nearest centroids)
DEFAULT_NPROBE = 8
#: G3RAG ``mode="auto"`` uses this ANN graph on the CPU from this many passages up (the exact
#: blocked kernel's cost grows as N²; ``docs/decisions/g3rag-ivf-graph.md``)
ANN_MIN_N = 50_000
#: G3RAG ``density="auto"`` uses the sampled density estimate from this many passages up
SAMPLED_DENSITY_MIN_N = 50_000
#: iterations of the k-means that groups the IVF cells into graph cells
KMEANS_NITER = 20
#: rows of one GEMM tile (a cell larger than this is split into row tiles)
ROW_TILE = 1024



@dataclass(frozen=True)
class IVFCells:
    """The graph cells: cell ``c`` holds rows ``members[indptr[c]:indptr[c+1]]`` (sorted),
    and its candidate cells are ``probes[c]`` (own cell first, then by centroid similarity)."""

    indptr: np.ndarray   # int64 [nlist + 1]
    members: np.ndarray  # int64 [N]
    probes: np.ndarray   # int64 [nlist, nprobe]

    @property
    def nlist(self) -> int:
        """The number of graph cells."""
        return len(self.indptr) - 1

    def rows(self, c: int) -> np.ndarray:
        """The rows of cell ``c``, sorted."""
        return self.members[self.indptr[c]:self.indptr[c + 1]]

    def candidates(self, c: int) -> np.ndarray:
        """The rows of the cells cell ``c`` probes (its own included), sorted: its rows' candidates."""
        return np.sort(np.concatenate([self.rows(p) for p in np.unique(self.probes[c])]))


def graph_mode(mode: str, n: int, device: str) -> str:
    """G3RAG graph construction actually used: ``"auto"`` → ``"ann"`` on the CPU from
    :data:`ANN_MIN_N` passages up (on CUDA the blocked brute-force Triton kernel), else ``"knn"``."""
    if mode != "auto":
        return mode
    from ....kernels.dispatch import resolve_device

    return "ann" if n >= ANN_MIN_N and resolve_device(device) == "cpu" else "knn"


def density_mode(density: str, n: int) -> str:
    """``"auto"`` → ``"sampled"`` from :data:`SAMPLED_DENSITY_MIN_N` passages up, else ``"exact"``."""
    if density != "auto":
        return density
    return "sampled" if n >= SAMPLED_DENSITY_MIN_N else "exact"


def default_nlist(n: int) -> int:
    """``ceil(n / CELL_SIZE)``, at least 1."""
    return max(1, -(-n // CELL_SIZE))


def graph_cells(ivf: IVFIndex, nlist: int | None = None, nprobe: int = DEFAULT_NPROBE, seed: int = 0) -> IVFCells:
    """The graph cells of the rows ``ivf`` holds: its cells grouped into ``nlist`` cells
    (default :func:`default_nlist`; at most the IVF's own cell count, which are then kept as they
    are) by a seeded spherical k-means over their centroids, each IVF cell joining the group of
    its nearest group centroid (inner product); probes: the ``nprobe`` groups nearest to each
    group's centroid, its own first. O(ivf.nlist · nlist · d), nothing read of X."""
    n = ivf.ntotal
    nlist = default_nlist(n) if nlist is None else int(nlist)
    if nlist < 1:
        raise InputError(f"nlist must be >= 1, got {nlist}")
    offsets, rows = ivf.cell_rows()
    cell_of = np.empty(n, np.int64)
    cell_of[rows] = row_of_entries(offsets)
    group_of_cell, probes = group_cells(ivf, nlist, nprobe, seed)
    if len(probes) == 1:
        return IVFCells(np.array([0, n], np.int64), np.arange(n, dtype=np.int64), probes)
    indptr, members = csr_from_keys(group_of_cell[cell_of], len(probes))
    return IVFCells(indptr, members, probes)


def group_cells(ivf: IVFIndex, nlist: int, nprobe: int = DEFAULT_NPROBE, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """The grouping of :func:`graph_cells`: ``(group of each IVF cell int64 [ivf.nlist], probes
    int64 [groups, nprobe'])`` for ``min(nlist, ivf.nlist)`` groups."""
    centroids = np.ascontiguousarray(ivf.centroids(), dtype=np.float32)
    nlist = min(int(nlist), len(centroids))
    nprobe = max(1, min(int(nprobe), nlist))
    if nlist == 1:
        return np.zeros(len(centroids), np.int64), np.zeros((1, 1), np.int64)
    if nlist == len(centroids):
        group_centroids, group_of_cell = centroids, np.arange(nlist, dtype=np.int64)
    else:
        import faiss

        km = faiss.Kmeans(centroids.shape[1], nlist, niter=KMEANS_NITER, seed=seed, spherical=True, verbose=False,
                          min_points_per_centroid=1, max_points_per_centroid=len(centroids))
        km.train(centroids)
        group_centroids = km.centroids
        group_of_cell = _nearest(group_centroids, centroids, 1)[:, 0]
    return group_of_cell, _own_cell_first(_nearest(group_centroids, group_centroids, nprobe))


class AddedRowCandidates:
    """The candidates of rows added to a graph built by :func:`ann_gain_knn` over ``n_build`` rows,
    by the build's rules: the IVF cells are grouped as :func:`graph_cells` grouped them
    (:func:`group_cells`, ``default_nlist(n_build)`` groups); an added row falls in the group of
    its IVF cell, its candidates are the members of that group's probes (rows added since
    included), and the existing rows that may take an edge to it are those of the groups that
    probe its group. Members are read per IVF cell (:meth:`IVFIndex.cell_members`), so an add
    reads O(candidates) rows of X, not N. ``ivf`` must already hold the added rows."""

    #: the arrays :meth:`arrays` gives and the constructor takes back (``grouping``)
    ARRAY_FILES = ("cells_group", "cells_probes", "cells_ivf")

    def __init__(self, ivf: IVFIndex, n_build: int, nprobe: int = DEFAULT_NPROBE, seed: int = 0,
                 grouping: dict[str, np.ndarray] | None = None) -> None:
        """``grouping``: the stored :meth:`arrays` of the same build (used when they were made over
        an IVF index of as many cells trained on as many rows as ``ivf``, else computed again)."""
        self.ivf = ivf
        if grouping is not None and self.fits(grouping, ivf):
            self.group_of_cell = np.asarray(grouping["cells_group"], np.int64)
            self.probes = np.asarray(grouping["cells_probes"], np.int64)
        else:
            self.group_of_cell, self.probes = group_cells(ivf, default_nlist(n_build), nprobe, seed)
        self.cells_of_group = csr_from_keys(self.group_of_cell, len(self.probes))
        probing = np.unique(np.stack([np.repeat(np.arange(len(self.probes)), self.probes.shape[1]),
                                      self.probes.ravel()], 1), axis=0)  # (prober, probed) pairs
        p_ptr, order = csr_from_keys(probing[:, 1], len(self.probes))
        self.probed_by = (p_ptr, probing[order, 0])

    @staticmethod
    def fits(grouping: dict[str, np.ndarray], ivf: IVFIndex) -> bool:
        """Stored arrays made over an IVF index of ``ivf``'s cells and training rows, and
        consistent (groups of every cell in range of the probes)."""
        group, probes, made = (np.asarray(grouping[k]) for k in AddedRowCandidates.ARRAY_FILES)
        return made.shape == (2,) and tuple(made.tolist()) == (ivf.nlist, ivf.n_trained) \
            and group.shape == (ivf.nlist,) and probes.ndim == 2 and len(probes) >= 1 \
            and int(group.min(initial=0)) >= 0 and int(group.max(initial=0)) < len(probes) \
            and int(probes.min(initial=0)) >= 0 and int(probes.max(initial=0)) < len(probes)

    def arrays(self) -> dict[str, np.ndarray]:
        """The grouping (what an add in another process needs to skip its k-means)."""
        return {"cells_group": self.group_of_cell, "cells_probes": self.probes,
                "cells_ivf": np.array([self.ivf.nlist, self.ivf.n_trained], np.int64)}

    def members(self, groups: np.ndarray) -> np.ndarray:
        """The rows of the given groups (sorted)."""
        indptr, cells = self.cells_of_group
        parts = [cells[indptr[g]:indptr[g + 1]] for g in np.unique(groups).tolist()]
        return self.ivf.cell_members(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def __call__(self, X: Any, rows: np.ndarray, start: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The work of an add of the ``rows`` of X (consecutive, the last ones) by groups of graph
        cells, each group's rows read once: per group ``h`` the added rows touch, ``(its rows, the
        added rows that take them as candidates (h is a probe of their group), the added rows its
        rows below start may take an edge to (their group is a probe of h))``, all sorted."""
        if not len(rows):
            return
        groups = self.group_of_cell[self.ivf.assign(np.asarray(X[int(rows[0]):int(rows[-1]) + 1]))]
        nprobe = self.probes.shape[1]
        fwd = np.unique(np.stack([self.probes[groups].ravel(), np.repeat(rows, nprobe)], 1), axis=0)
        p_ptr, p_groups = self.probed_by
        lens = p_ptr[groups + 1] - p_ptr[groups]
        at = np.repeat(p_ptr[groups], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
        rev = np.stack([p_groups[at], np.repeat(rows, lens)], 1)  # (h, added row): h probes its group
        f_ptr = np.searchsorted(fwd[:, 0], np.arange(len(self.probes) + 1))
        rev = rev[np.lexsort((rev[:, 1], rev[:, 0]))]
        r_ptr = np.searchsorted(rev[:, 0], np.arange(len(self.probes) + 1))
        for h in np.union1d(fwd[:, 0], rev[:, 0]).tolist():
            yield (self.members(np.array([h])), fwd[f_ptr[h]:f_ptr[h + 1], 1], rev[r_ptr[h]:r_ptr[h + 1], 1])


def _nearest(centroids: np.ndarray, points: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` centroids of largest inner product with each point (int64 [len(points), k])."""
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    return index.search(np.ascontiguousarray(points, dtype=np.float32), k)[1].astype(np.int64)


def _own_cell_first(probes: np.ndarray) -> np.ndarray:
    """Make ``probes[c, 0] == c`` (ties between identical centroids could put another first)."""
    own = np.arange(len(probes))[:, None]
    out = np.empty_like(probes)
    out[:, 0] = own[:, 0]
    for c in range(len(probes)):
        rest = probes[c][probes[c] != c]
        out[c, 1:] = rest[:probes.shape[1] - 1] if len(rest) >= probes.shape[1] - 1 else \
            np.concatenate([rest, np.full(probes.shape[1] - 1 - len(rest), c)])
    return out


def rescore_rows(X: np.ndarray, rows: np.ndarray, cols: np.ndarray, target_penalty: np.ndarray, k: int,
                 sim_min: float, sim_max: float, device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` gain edges of ``rows`` among the sorted candidate ``cols`` (SPEC §1 steps 3–5).

    Runs the kernel op ``gain_knn_rows`` on ``device`` (band, gain, target penalty; weight > 0; ties
    toward the lower column; no self-edge) in tiles of :data:`ROW_TILE` rows, so a row whose
    candidates are all rows gets exactly its ``gain_knn`` edges. Returns ``(nbr int64 [len(rows), k],
    w float32 [len(rows), k])`` best first, padded with -1 / -inf.
    """
    cols = np.asarray(cols, np.int64)
    Xc = np.ascontiguousarray(gather_rows(X, cols), dtype=np.float32)
    pen = np.ascontiguousarray(target_penalty[cols], dtype=np.float32)
    nbr = np.full((len(rows), k), -1, np.int64)
    w = np.full((len(rows), k), -np.inf, np.float32)
    for a in range(0, len(rows), ROW_TILE):
        r = np.asarray(rows[a:a + ROW_TILE], np.int64)
        Q = np.ascontiguousarray(gather_rows(X, r), dtype=np.float32)
        g = call("gain_knn_rows", Q, Xc, k=k, sim_min=sim_min, sim_max=sim_max, penalty=pen, columns=cols,
                 exclude=r, device=device)
        at = row_of_entries(g.indptr)
        rank = np.arange(g.nnz) - g.indptr[at]
        nbr[a + at, rank], w[a + at, rank] = g.indices, g.data
    return nbr, w


def cell_task(X: np.ndarray, cells: IVFCells, cell_ids: Sequence[int], target_penalty: np.ndarray, k: int,
              sim_min: float, sim_max: float, device: str = "cpu") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gain edges of every row of the given cells (:func:`rescore_rows` on ``device``): ``(rows, nbr,
    w)``. The unit of parallel work."""
    out_rows, out_nbr, out_w = [], [], []
    for c in cell_ids:
        rows = cells.rows(int(c))
        if len(rows) == 0:
            continue
        nbr, w = rescore_rows(X, rows, cells.candidates(int(c)), target_penalty, k, sim_min, sim_max, device)
        out_rows.append(rows), out_nbr.append(nbr), out_w.append(w)
    if not out_rows:
        return np.zeros(0, np.int64), np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    return np.concatenate(out_rows), np.concatenate(out_nbr), np.concatenate(out_w)


def cell_groups(cells: IVFCells, rows_per_task: int) -> list[list[int]]:
    """Consecutive cells grouped into tasks of about ``rows_per_task`` rows."""
    groups, cur, size = [], [], 0
    for c in range(cells.nlist):
        cur.append(c)
        size += int(cells.indptr[c + 1] - cells.indptr[c])
        if size >= rows_per_task:
            groups.append(cur)
            cur, size = [], 0
    if cur:
        groups.append(cur)
    return groups


#: ``map_tasks(fn, task_args, shared) -> iterator of results in any order``; see distributed.py
TaskMap = Callable[[Callable[..., Any], list[tuple], dict[str, Any]], Iterable[Any]]


def local_map(fn: Callable[..., Any], task_args: list[tuple], shared: dict[str, Any]) -> Iterable[Any]:
    """Run the tasks one after another in this process."""
    for args in task_args:
        yield fn(**shared, cell_ids=args[0])


def ann_gain_knn(X: np.ndarray, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9,
                 target_penalty: np.ndarray | None = None, nlist: int | None = None,
                 nprobe: int = DEFAULT_NPROBE, seed: int = 0, progress: bool = False,
                 map_tasks: TaskMap | None = None, rows_per_task: int = 16_384, ivf: IVFIndex | None = None,
                 device: str = "cpu") -> CSR:
    """The G3RAG gain-kNN graph from IVF candidates rescored exactly (see module docstring).

    ``ivf``: the IVF index over X whose cells are grouped into the graph cells (the dense
    component's, :attr:`~hopgraph.engine.components.dense.DenseIndex.ivf`; None: one is trained
    here); ``nlist``, ``nprobe``, ``seed``: :func:`graph_cells`. Returns
    :class:`~hopgraph.kernels.csr.CSR` (``indptr int64 [N+1]``, ``indices int32``, ``data
    float32``), each row's edges best first, as ``gain_knn`` orders them. ``map_tasks`` runs the
    per-cell work elsewhere (e.g. Ray); the result does not depend on it. ``device``: where the kernel
    op ``gain_knn_rows`` rescores the candidates (:func:`rescore_rows`).
    """
    X = _check_matrix(X)
    n = len(X)
    if k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    pen = np.ones(n, np.float32) if target_penalty is None else np.asarray(target_penalty, np.float32)
    if pen.shape != (n,):
        raise InputError(f"target_penalty must have shape ({n},), got {pen.shape}")
    if n == 0:
        return CSR(np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), 0)
    ivf = IVFIndex.build(X) if ivf is None else ivf
    if ivf.ntotal != n:
        raise InputError(f"the IVF index holds {ivf.ntotal} rows, X {n}")
    cells = graph_cells(ivf, nlist, nprobe, seed)
    groups = cell_groups(cells, rows_per_task)
    nbr = np.full((n, k), -1, np.int64)
    w = np.full((n, k), -np.inf, np.float32)
    shared = dict(X=X, cells=cells, target_penalty=pen, k=k, sim_min=sim_min, sim_max=sim_max, device=device)
    if map_tasks is None:
        from ...distributed import current_task_map

        map_tasks = current_task_map() or local_map
    results = map_tasks(cell_task, [(g,) for g in groups], shared)
    bar = _tqdm(None, progress, "gain-kNN (IVF)", total=n, unit="row")
    for rows, nb, ww in results:
        nbr[rows], w[rows] = nb, ww
        if bar is not None:
            bar.update(len(rows))
    if bar is not None:
        bar.close()
    return csr_from_topk(w, nbr, n)


def graph_recall(approx: CSR, exact: CSR) -> float:
    """Fraction of the exact graph's edges present in the approximate graph (same rows; the
    graphs may be row subsets of larger ones, e.g. sampled rows)."""
    if approx.n_rows != exact.n_rows:
        raise InputError(f"graphs have {approx.n_rows} and {exact.n_rows} rows")
    n_cols = max(approx.n_cols, exact.n_cols, 1)
    ea, ee = _edge_keys(approx, n_cols), _edge_keys(exact, n_cols)
    if len(ee) == 0:
        return 1.0
    return float(np.isin(ee, ea, assume_unique=True).sum()) / len(ee)


def _edge_keys(g: CSR, n_cols: int) -> np.ndarray:
    return np.unique(row_of_entries(g.indptr) * np.int64(n_cols) + np.asarray(g.indices, np.int64))


def _check_matrix(X: np.ndarray) -> np.ndarray:
    if not isinstance(X, np.ndarray) or X.ndim != 2:
        raise InputError(f"X must be a 2-D array [N, d], got {getattr(X, 'shape', type(X))}")
    if X.dtype != np.float32:
        raise InputError(f"X must be float32 (normalised embeddings), got {X.dtype}")
    return X


def _tqdm(iterable, progress: bool, desc: str, **kw):
    if not progress:
        return iterable
    from tqdm.auto import tqdm

    if iterable is None:
        return tqdm(desc=desc, dynamic_ncols=True, **kw)
    return tqdm(iterable, desc=desc, dynamic_ncols=True, **kw)
