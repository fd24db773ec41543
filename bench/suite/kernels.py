"""Kernels against their anchors, CPU path, one table per op family:

* ``gain_knn`` (SPEC §1 steps 3-5) and ``density`` (step 1) vs faiss ``IndexFlatIP`` exact
  k-NN (k + 1) of the same X — warm (the first call of the process is timed separately);
* ``batched_ppr`` (SPEC §2 step 6) vs the bare torch CSR power iteration ``x = c + d·(P @ x)``
  run for the same iteration count, and vs igraph's ``personalized_pagerank`` once per prior
  (when igraph is installed, the ``[bench]`` extra), per graph family, with the L1 difference;
* ``sparse_diffusion`` (SPEC §1 query step 2) vs the scipy CSR product seeds @ T.
"""
from __future__ import annotations

import time
import warnings
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .common import Table, best_of, clustered, faiss_knn, median_interleaved

#: graph families of the PPR table
FAMILIES = {"ring": "ring+random", "symmetric": "symmetric random"}


def bench_gain_knn(n: int, d: int = 384, k: int = 32, repeats: int = 2, samples: int = 4096) -> Table:
    """gain_knn and density (exact, sampled) vs faiss flat k-NN on ``n`` clustered rows."""
    from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty
    from hopgraph.kernels import call

    X = clustered(n, d, max(2, n // 100))
    t = Table("gain_knn", f"gain_knn vs faiss flat k-NN (N = {n:,}, d = {d}, k = {k}, CPU)",
              ["op", "seconds", "x faiss"])
    dens = call("density", X, device="cpu")
    pen = hub_penalty(dens)
    t_first, _ = best_of(lambda: call("gain_knn", X, k=k, penalty=pen, device="cpu"), 1)
    times = median_interleaved({
        "faiss": lambda: faiss_knn(X, k),
        "gain": lambda: call("gain_knn", X, k=k, penalty=pen, device="cpu"),
        "dens": lambda: call("density", X, device="cpu"),
        "samp": lambda: call("density", X, mode="sampled", n_samples=samples, device="cpu"),
    }, repeats)
    f = times["faiss"]
    for op, key in (("faiss IndexFlatIP exact k-NN (k + 1)", "faiss"), ("gain_knn (CPU, CSR)", "gain"),
                    ("density exact", "dens"), (f"density sampled ({samples} columns)", "samp"),
                    ("density exact + gain_knn (the G3RAG graph)", None)):
        s = times["dens"] + times["gain"] if key is None else times[key]
        t.add(op=op, seconds=s, **{"x faiss": s / f})
    t.add(op="gain_knn, first call of the process", seconds=t_first, **{"x faiss": t_first / f})
    t.notes.append(f"median of {repeats} interleaved runs; the first call includes any one-time set-up")
    return t.finish()


def ring_graph(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of the ``ring+random`` family: a directed ring plus m − n random edges."""
    rng = np.random.default_rng(seed)
    src = np.r_[np.arange(n), rng.integers(0, n, max(m - n, 0))]
    dst = np.r_[(np.arange(n) + 1) % n, rng.integers(0, n, max(m - n, 0))]
    return src, dst


def symmetric_graph(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of the ``symmetric random`` family: m/2 undirected edges stored both ways — a
    random pairing of the chunks (none is dangling) plus m/2 − ⌈n/2⌉ uniform random pairs."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    half = (n + 1) // 2
    extra = max(m // 2 - half, 0)
    u = np.r_[order[:half], rng.integers(0, n, extra)]
    v = np.r_[np.roll(order, -half)[:half], rng.integers(0, n, extra)]
    return np.r_[u, v], np.r_[v, u]


def family_graph(family: str, n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of one of :data:`FAMILIES`."""
    return (ring_graph if family == "ring" else symmetric_graph)(n, m, seed)


def random_priors(B: int, n: int, nnz: int, seed: int) -> np.ndarray:
    """``B`` priors over ``n`` chunks with ``nnz`` random non-zeros each, rows summing to 1 (float64)."""
    rng = np.random.default_rng(seed)
    p = np.zeros((B, n), np.float64)
    for b in range(B):
        p[b, rng.choice(n, min(nnz, n), replace=False)] = rng.random(min(nnz, n)) + 0.1
    return p / p.sum(1, keepdims=True)


def local_regions(P: sp.csr_matrix, B: int, seeds: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(priors float64 [B, n], region bool [B, n]) of localised PPR queries (SPEC §2 step 6): per query
    a random seed set, its region the seeds and their one-hop out-neighbours (P's rows = targets),
    its prior uniform on the seeds."""
    n = P.shape[0]
    Pc = sp.csc_matrix(P)
    pri, region = np.zeros((B, n)), np.zeros((B, n), bool)
    for b in range(B):
        s = rng.choice(n, seeds, replace=False)
        pri[b, s] = 1.0 / seeds
        region[b, s] = True
        region[b, np.concatenate([Pc.indices[Pc.indptr[j]:Pc.indptr[j + 1]] for j in s])] = True
    return pri, region


def bare_loop(P: sp.csr_matrix, priors: np.ndarray, d: float) -> Callable[[int], "object"]:
    """``run(iterations)``: the bare torch CSR power iteration x ← c + d·(P @ x), float32 [N, B]."""
    import torch

    with warnings.catch_warnings():  # torch: "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        Pt = torch.sparse_csr_tensor(torch.from_numpy(P.indptr), torch.from_numpy(P.indices),
                                     torch.from_numpy(P.data.astype(np.float32)), P.shape)
    x0 = torch.from_numpy(np.ascontiguousarray(priors.T, dtype=np.float32))
    c = (1.0 - d) * x0

    def run(iterations: int):
        x = x0
        for _ in range(iterations):
            x = c + d * (Pt @ x)
        return x
    return run


def bench_ppr(family: str, n: int, m: int, B: int, igraph_priors: int, repeats: int = 3, d: float = 0.85,
              tol: float | None = None) -> Table:
    """batched_ppr vs the bare torch CSR loop (same iterations) and igraph, on one family; ``tol``
    None: the op's default tolerance (what a deployment runs), printed in the title with the L1
    difference to igraph."""
    import inspect

    from hopgraph.engine.pipelines.stitch.hypergraph import column_stochastic
    from hopgraph.kernels import batched_ppr, call

    if tol is None:
        tol = inspect.signature(batched_ppr).parameters["tol"].default

    src, dst = family_graph(family, n, m)
    priors = random_priors(B, n, 10, 1)
    P = column_stochastic(sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)))
    t = Table(f"ppr_{family}", f"batched_ppr vs bare torch CSR loop and igraph ({FAMILIES[family]}: "
              f"{n:,} chunks, {P.nnz:,} edges, {B} priors, float32, tol {tol:g})",
              ["method", "seconds", "queries/s", "x igraph", "time / bare loop"])
    pri32 = priors.astype(np.float32)
    import torch

    threads = torch.get_num_threads()

    def hop(n_threads: int | None = None):  # None: the op's default thread count
        extra = {} if n_threads is None else {"threads": n_threads}
        return call("batched_ppr", P, pri32, d=d, tol=tol, max_iter=1000, device="cpu", **extra)
    pi, iters = hop()
    iterations = int(np.asarray(iters).max())
    bare = bare_loop(P, priors, d)
    bare(1)
    sec = median_interleaved({"hop": hop, "hop_mt": lambda: hop(threads), "bare": lambda: bare(iterations)}, repeats)
    qps_ig, l1 = None, None
    try:
        import igraph as ig
    except ImportError:
        t.notes.append("igraph not installed (pip install 'hopgraph[bench]'): no igraph row")
    else:
        g = ig.Graph(n=n, edges=np.c_[src, dst], directed=True)
        nb = max(1, min(igraph_priors, B))
        ref = np.zeros((nb, n))
        t0 = time.perf_counter()
        for b in range(nb):
            ref[b] = g.personalized_pagerank(directed=True, damping=d, reset=priors[b], implementation="prpack")
        t_ig = time.perf_counter() - t0
        qps_ig = nb / t_ig
        l1 = float(np.abs(np.asarray(pi)[:nb].astype(np.float64) - ref).sum(1).max())
        t.add(method="igraph personalized_pagerank, once per prior", seconds=t_ig * B / nb, **{"queries/s": qps_ig,
              "x igraph": 1.0})
        t.notes.append(f"igraph: {nb} priors timed (seconds scaled to {B}); max L1 difference of batched_ppr "
                       f"to igraph: {l1:.2e}")
    for name, key in ((f"bare torch CSR loop ({iterations} iterations, warm)", "bare"),
                      ("hopgraph batched_ppr (whole op)", "hop"),
                      (f"hopgraph batched_ppr (whole op, threads={threads})", "hop_mt")):
        q = B / sec[key]
        row = {"method": name, "seconds": sec[key], "queries/s": q, "time / bare loop": sec[key] / sec["bare"]}
        if qps_ig:
            row["x igraph"] = q / qps_ig
        t.add(**row)
    t.notes.append(f"torch rows: median of {repeats} interleaved runs; the bare loop runs with torch's "
                   f"{threads} threads, batched_ppr with its default (threads=1) and with as many as the loop")
    return t.finish()


def bench_diffusion(n: int, k: int, B: int, seeds: int, repeats: int = 3) -> Table:
    """sparse_diffusion (seeds through the row-normalised graph) vs scipy's CSR product."""
    from hopgraph.engine.sparse import row_normalised
    from hopgraph.kernels.csr import CSR
    from hopgraph.kernels import call

    rng = np.random.default_rng(2)
    indptr = np.arange(0, n * k + 1, k, dtype=np.int64)
    indices = rng.integers(0, n, n * k).astype(np.int32)
    data = rng.random(n * k).astype(np.float32) + 0.01
    ids = rng.integers(0, n, (B, seeds)).astype(np.int64)
    w = rng.random((B, seeds)).astype(np.float32)
    Tn = row_normalised(CSR(indptr, indices, data, n))
    Ts = sp.csr_matrix((Tn.data, Tn.indices, Tn.indptr), shape=(n, n))
    P = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(B), seeds), ids.ravel())), shape=(B, n))
    sec = median_interleaved({
        "hop": lambda: call("sparse_diffusion", ids, w, indptr, indices, data, n, device="cpu"),
        "scipy": lambda: (P @ Ts).toarray(),
    }, repeats)
    t = Table("sparse_diffusion", f"sparse_diffusion vs scipy CSR product ({n:,} nodes, {n * k:,} edges, "
              f"{B} questions × {seeds} seeds)", ["method", "seconds", "x scipy"])
    t.add(method="scipy: (seeds @ T).toarray()", seconds=sec["scipy"], **{"x scipy": 1.0})
    t.add(method="hopgraph sparse_diffusion", seconds=sec["hop"], **{"x scipy": sec["hop"] / sec["scipy"]})
    t.notes.append(f"median of {repeats} interleaved runs; scipy's T is row-normalised once beforehand, "
                   "sparse_diffusion validates and normalises the seed rows' edges in every call")
    return t.finish()
