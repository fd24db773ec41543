"""One IVF over X for the dense search and G3RAG's ANN graph: graph cells made from the dense
component's IVF index, side by side with the graph builder's own k-means over X.

Data: ``bench_scale.generate`` (clustered embeddings, d = 384, 256 queries near passages), cached
under ``--workdir`` (the layout of ``bench/bench_scale.py`` and ``bench/bench_dense_ann.py``):
``--size`` rows, or with ``--rows R`` a random sample of R of them (seed 1, as ``bench_scale.py``'s
``recall`` stage draws its 50,000-row sample of the 10⁶ set).
G3RAG's default graph parameters (k 32, band [0.3, 0.9], sampled density, β 1). Rows:

- ``own k-means``: the graph builder's own partition, trained on X (``ceil(N / 512)`` cells,
  spherical k-means, 12 iterations, 64 sample rows a cell) and every row assigned, 8 cells probed;
- ``IVF cells, nprobe P``: the dense IVF index's cells as they are (about 4√N cells), P probed;
- ``IVF cells grouped`` (the library's :func:`~hopgraph.engine.pipelines.g3rag.ann_graph.graph_cells`):
  the IVF's cells grouped into ``ceil(N / 512)`` graph cells by k-means over their centroids, 8 probed.

Columns: ``over X s`` (training and assigning over X: the own k-means, or the dense IVF build, which
an index of ``ANN_MIN_N``+ passages does for its dense search anyway), ``cells s`` (the graph cells
from it), ``graph s`` (gain rescoring of every row: the median of ``--repeats`` builds, the options
interleaved), candidates rescored per row, and graph recall:
the share of the exact graph's edges (``gain_knn``'s, computed for ``--sample`` random rows against
all N) that the graph holds on those rows. The dense row gives the shared IVF's dense search
(top-10 overlap with the exact search and q/s, nprobe 64), which the grouping does not change.
The load average is printed at the start and the end (the machine is shared: compare rows of one run).

    .venv/bin/python bench/bench_shared_ivf.py --size 200000 --workdir /tmp/hopgraph-bench-scale
    .venv/bin/python bench/bench_shared_ivf.py --size 1000000 --rows 50000 --workdir /tmp/hopgraph-bench-scale
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HOPGRAPH_COMPILE", "0")  # the reference rows would compile the tile loop otherwise

from _common import median_interleaved, table  # noqa: E402


def own_kmeans_cells(X: np.ndarray, nprobe: int = 8, seed: int = 0):
    """The graph builder's former partition: k-means on X itself (``ceil(N / 512)`` cells,
    spherical, 12 iterations, 64 sample rows a cell), every row assigned to its nearest centroid."""
    import faiss

    from hopgraph.engine.pipelines.g3rag.ann_graph import IVFCells, _nearest, _own_cell_first, default_nlist
    from hopgraph.engine.sparse import csr_from_keys

    n, d = X.shape
    nlist = min(default_nlist(n), n)
    sample = np.sort(np.random.default_rng(seed).choice(n, min(n, nlist * 64), replace=False))
    km = faiss.Kmeans(d, nlist, niter=12, seed=seed, spherical=True, verbose=False, max_points_per_centroid=64,
                      min_points_per_centroid=1)
    km.train(np.ascontiguousarray(X[sample], dtype=np.float32))
    assign = np.concatenate([_nearest(km.centroids, X[a:a + 65_536], 1)[:, 0] for a in range(0, n, 65_536)])
    indptr, members = csr_from_keys(assign, nlist)
    return IVFCells(indptr, members, _own_cell_first(_nearest(km.centroids, km.centroids, nprobe)))


def ivf_cells_as_they_are(ivf, nprobe: int):
    """The dense IVF index's own cells, ``nprobe`` probed (nearest centroids to a cell's own)."""
    from hopgraph.engine.pipelines.g3rag.ann_graph import IVFCells, _nearest, _own_cell_first

    offsets, rows = ivf.cell_rows()
    members = np.concatenate([np.sort(rows[a:b]) for a, b in zip(offsets[:-1], offsets[1:])])
    centroids = ivf.centroids()
    return IVFCells(offsets, members, _own_cell_first(_nearest(centroids, centroids, min(nprobe, ivf.nlist))))


def build_graph(X, cells, pen, k, sim_min, sim_max):
    """The ANN graph of X over ``cells`` (the library's per-cell rescoring)."""
    from hopgraph.engine.pipelines.g3rag import ann_graph
    from hopgraph.kernels.csr import csr_from_topk

    n = len(X)
    nbr = np.full((n, k), -1, np.int64)
    w = np.full((n, k), -np.inf, np.float32)
    for group in ann_graph.cell_groups(cells, 16_384):
        rows, nb, ww = ann_graph.cell_task(X, cells, group, pen, k, sim_min, sim_max)
        nbr[rows], w[rows] = nb, ww
    return csr_from_topk(w, nbr, n)


def candidates_per_row(cells) -> float:
    sizes = np.diff(cells.indptr)
    return float(sum(int(sizes[c]) * len(cells.candidates(c)) for c in range(cells.nlist)) / max(sizes.sum(), 1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=200_000, help="generated rows")
    p.add_argument("--rows", type=int, default=None, help="a random sample of this many of them (default: all)")
    p.add_argument("--workdir", default="/tmp/hopgraph-bench-scale", help="data cache (bench_scale's layout)")
    p.add_argument("--sample", type=int, default=2000, help="rows whose exact edges give the recall")
    p.add_argument("--direct-nprobe", default="16,37", help="nprobe values of the IVF cells as they are ('' for none)")
    p.add_argument("--repeats", type=int, default=2, help="graph builds per option, interleaved (median reported)")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import generate

    from hopgraph.engine.components.dense import DenseIndex
    from hopgraph.engine.components.ivf import IVFIndex
    from hopgraph.engine.pipelines.g3rag.ann_graph import graph_cells, graph_recall, rescore_rows
    from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty
    from hopgraph.engine.pipelines.g3rag import G3RAGFit
    from hopgraph.engine.sparse import take_rows
    from hopgraph.kernels import call
    from hopgraph.kernels.csr import csr_from_topk

    load_start = os.getloadavg()
    data = Path(args.workdir) / str(args.size)
    generate(args.size, data)
    X = np.load(data / "X.npy", mmap_mode="r")
    if args.rows is not None and args.rows < len(X):
        X = X[np.sort(np.random.default_rng(1).choice(len(X), args.rows, replace=False))]
    X = np.ascontiguousarray(X)
    Q = np.load(data / "Q.npy")
    n, g = len(X), G3RAGFit()
    pen = hub_penalty(call("density", X, mode="sampled", n_samples=g.density_samples, device="cpu"), g.beta)
    sample = np.sort(np.random.default_rng(1).choice(n, min(args.sample, n), replace=False))
    t0 = time.perf_counter()
    nbr = np.concatenate([rescore_rows(X, sample[a:a + 250], np.arange(n), pen, g.n_neighbors, g.sim_min, g.sim_max)[0]
                          for a in range(0, len(sample), 250)])
    exact = csr_from_topk(np.where(nbr >= 0, 1.0, -np.inf).astype(np.float32), nbr, n)
    print(f"reference: exact edges of {len(sample)} rows in {time.perf_counter() - t0:.1f} s", flush=True)

    options = {}  # method -> (seconds over X, seconds for the graph cells, cells)

    def timed(fn):
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out

    own_s, own = timed(lambda: own_kmeans_cells(X))
    options[f"own k-means over X ({own.nlist} cells), nprobe 8"] = (own_s, 0.0, own)
    ivf_s, ivf = timed(lambda: IVFIndex.build(X))
    cells_s, grouped = timed(lambda: graph_cells(ivf))
    options[f"IVF cells grouped ({ivf.nlist} -> {grouped.nlist}), nprobe 8"] = (ivf_s, cells_s, grouped)
    for nprobe in [int(x) for x in args.direct_nprobe.split(",") if x]:
        cells_s, cells = timed(lambda: ivf_cells_as_they_are(ivf, nprobe))
        options[f"IVF cells as they are ({ivf.nlist}), nprobe {nprobe}"] = (None, cells_s, cells)
    graphs = {}

    def builder(method: str):
        def build() -> None:
            graphs[method] = build_graph(X, options[method][2], pen, g.n_neighbors, g.sim_min, g.sim_max)
        return build

    seconds = median_interleaved({m: builder(m) for m in options}, args.repeats)
    rows = []
    for method, (over_x, cells_s, cells) in options.items():
        recall = graph_recall(take_rows(graphs[method], sample), exact)
        rows.append([method, "" if over_x is None else f"{over_x:.1f}", f"{cells_s:.1f}", f"{seconds[method]:.1f}",
                     f"{candidates_per_row(cells):,.0f}", f"{recall:.4f}"])
        print(rows[-1], flush=True)

    ref, _ = DenseIndex(X, "exact").topk(Q, 10)
    dense = DenseIndex(X, "ann", ivf=ivf)
    t0 = time.perf_counter()
    ids, _ = dense.topk(Q, 10)
    qps = len(Q) / (time.perf_counter() - t0)
    overlap = np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids.tolist(), ref.tolist())])
    load_end = os.getloadavg()
    print()
    of = f" (a random sample of {args.size:,})" if n < args.size else ""
    print(f"bench_shared_ivf: N={n:,}{of}, d={X.shape[1]}, G3RAG k={g.n_neighbors}, band [{g.sim_min}, {g.sim_max}], recall on "
          f"{len(sample)} sampled rows, {os.cpu_count()} CPU cores; load average at start "
          f"{load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, at end "
          f"{load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f}")
    print(table(["graph cells", "over X s", "cells s", "graph s", "candidates / row", "graph recall"], rows))
    print(f"dense search on the shared IVF ({ivf.nlist} cells, nprobe {dense.nprobe}): top-10 overlap with the "
          f"exact search {overlap:.4f}, {qps:,.0f} q/s (exact-rescored candidates; unchanged by the grouping)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
