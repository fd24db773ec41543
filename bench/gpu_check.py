#!/usr/bin/env python3
"""One-shot GPU check of hopgraph: Triton kernels on CUDA against the CPU path, timings,
and every pipeline end to end with ``device="cuda"`` against ``device="cpu"``.

Sections (in this order, so that correctness is known even if time runs out):

1. **parity** — every op registered with a Triton path (``hopgraph.kernels.dispatch``) runs
   its Triton kernel on CUDA and its CPU path on the same inputs: random and adversarial
   inputs as in the unit tests (empty rows, isolated nodes, k > N, zero vectors, ties,
   empty batches, the exact graph's dense path, G = 32, several column blocks) plus one medium
   size, within each kernel's documented tolerance (``docs/decisions/kernels-*-gpu.md``,
   ``kernels-gain-knn-tensor-cores.md``): gain_knn edges equal except rows whose differing
   neighbours are float near-ties (counted and reported), weights 1e-5 relative or 1e-6
   absolute; density 1e-5 / 1e-6; sparse_diffusion and hyperedge_max_propagate equal;
   group_decay_propagate 1e-5; batched_ppr π within 1e-6, iteration counts within one;
   shapley_mc 1e-5. An op with a Triton path but no check here is a FAIL, so new kernels cannot
   slip through.
2. **pipelines** — every pipeline built on the bundled demo corpus and on a generated
   corpus (``bench/bench_scale.py``'s generator), embedder ``hashing-64``; the pipelines
   that take ``device`` are searched with ``device="cuda"`` (G3RAG refits: density and
   gain_knn run on the GPU) and must give the ``device="cpu"`` ranking (scores within
   1e-4 relative; ids equal except at score near-ties).
3. **timing** — Triton on the GPU vs the CPU path per op at a large size (best of a few
   runs after a warm-up, ``torch.cuda.synchronize()`` around every timed call; inputs
   start on the host for the ops whose API takes numpy, on the GPU for the ops whose
   pipelines keep them there), printed as a table with CPU/GPU ratios; then side by side with
   their GPU peers at the 10⁶ shapes: gain_knn (N = 10⁶, d = 384, k = 32) against faiss-GPU's
   flat inner-product k-NN and a blocked torch matmul + topk, batched_ppr (10⁶ nodes, 10⁷ edges,
   256 priors, 30 iterations) timed two ways, inputs from numpy (what ``call`` gets from a user)
   and inputs already on the device (what the pipelines give it), against torch's CUDA CSR
   product and cuGraph's personalised
   PageRank (a peer that is not installed is skipped, saying so; faiss-GPU and cuGraph are
   imported lazily). A timing whose turn comes after ``--budget`` seconds is skipped (reported,
   not a failure).

Exit status 0 when everything passed, 1 on any FAIL, 2 when there is no CUDA GPU (without
``--interpret``). With ``OUT`` set, a JSON summary is written to ``$OUT/gpu_check.json``
after every section (a run cut short still leaves what it did).

Flags: ``--quick`` (smallest sizes), ``--interpret`` (TRITON_INTERPRET=1 with CPU tensors
and tiny sizes: a smoke test of this script without a GPU; ``tests/bench/test_gpu_check.py``
runs ``--interpret --quick``), ``--budget SECONDS`` (default 240), ``--skip-timing``,
``--only parity|pipelines|timing`` (repeatable).

Running it on the device machine (NVIDIA H200; its image's ``python3`` has torch 2.11 +
triton 3.6, numpy, scipy, tqdm, but no faiss and no bm25s, and it cannot reach a package
registry). Once, here, in the repository root (``.whl/`` is git-ignored; ≈ 19 MB)::

    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \\
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \\
        faiss-cpu==1.15.1 bm25s==0.3.16

then one ``run`` with ``carry=[".whl"]``, ``timeout_s=480`` and the command::

    set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && \\
        PYTHONUNBUFFERED=1 python3 bench/gpu_check.py 2>&1 | tee $OUT/gpu_check.log

(``rc`` of the run is the script's exit status; ``$OUT/gpu_check.json`` and the log come
back. Budget: machine start 1–2 min + this ≈ 6–8 min of the session's 15 device minutes;
``docs/gpu.md``'s prepared calls run it with ``--budget 150`` before ``bench/gpu_e2e.py``.)
faiss-GPU is a peer only where a ``faiss-gpu-cu12`` wheel was carried along the same way (it
does not fit the 64 MiB carry with the others on every version: check its size first); cuGraph
does not fit and is skipped.

No ``pip install -e .`` is needed: when ``import hopgraph`` fails, this script maps the
package names to the source folders of this checkout (the ``ROOTS`` of setup.py, read without
importing setuptools). On a CUDA machine with network, ``pip install -e . && python
bench/gpu_check.py`` works as well.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


# ====================================================================== set-up
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smallest sizes")
    ap.add_argument("--interpret", action="store_true",
                    help="TRITON_INTERPRET=1 on CPU tensors with tiny sizes (smoke test without a GPU)")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds; later timings are skipped (default 240)")
    ap.add_argument("--skip-timing", action="store_true", help="parity and pipelines only")
    ap.add_argument("--only", choices=("parity", "pipelines", "timing"), action="append",
                    help="run only these sections (repeatable)")
    return ap.parse_args(argv)


def source_roots(setup_py: Path = ROOT / "setup.py") -> dict[str, str]:
    """``{package: folder}`` of the three source roots, the ``ROOTS`` literal of setup.py (read with
    ``ast``: a bare machine may have no setuptools). Subpackages are found below their root."""
    import ast

    for node in ast.parse(setup_py.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ROOTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{setup_py} has no ROOTS table: cannot map hopgraph to its source folders")


def ensure_hopgraph_importable() -> None:
    """Import hopgraph from this checkout, installed or not (maps setup.py's source roots)."""
    try:
        import hopgraph  # noqa: F401
        return
    except ImportError:
        pass
    import importlib.abc
    import importlib.util

    package_dir = source_roots()

    class TreeFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):  # noqa: ANN001
            if name not in package_dir:
                return None
            folder = ROOT / package_dir[name]
            return importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])

    sys.meta_path.insert(0, TreeFinder())


@dataclass
class Result:
    section: str
    name: str
    case: str
    status: str  # PASS | FAIL | SKIP
    detail: str = ""
    values: dict[str, Any] = field(default_factory=dict)


class Run:
    """Device choice, the budget, the results and the JSON summary."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.args, self.t0 = args, time.perf_counter()
        self.interpret = args.interpret
        self.dev = "cpu" if args.interpret else "cuda"  # where the Triton path runs
        self.tdev = torch.device(self.dev)
        self.results: list[Result] = []
        self.size = "tiny" if args.interpret else ("quick" if args.quick else "full")

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def over_budget(self) -> bool:
        return self.elapsed() > self.args.budget

    def add(self, r: Result) -> None:
        self.results.append(r)
        extra = f"  {r.detail}" if r.detail else ""
        print(f"  {r.status:4s} {r.name:24s} {r.case:28s}{extra}", flush=True)

    def sync(self) -> None:
        if not self.interpret:
            import torch

            torch.cuda.synchronize()

    def tri(self, op: str, *args: Any, **kw: Any) -> Any:
        """The op's Triton path on the check device."""
        from hopgraph.kernels import call

        out = call(op, *args, device=self.dev, backend="triton", **kw)
        self.sync()
        return out

    @staticmethod
    def cpu(op: str, *args: Any, **kw: Any) -> Any:
        from hopgraph.kernels import call

        return call(op, *args, device="cpu", backend="cpu", **kw)

    def summary(self) -> dict[str, Any]:
        import torch
        import triton

        env = {"mode": "interpret" if self.interpret else "cuda", "size": self.size,
               "torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]}
        if not self.interpret:
            env["gpu"] = torch.cuda.get_device_name(0)
        counts = {s: sum(r.status == s for r in self.results) for s in ("PASS", "FAIL", "SKIP")}
        return {"env": env, "elapsed_s": round(self.elapsed(), 2), "counts": counts,
                "ok": counts["FAIL"] == 0, "results": [asdict(r) for r in self.results]}

    def write_json(self) -> None:
        out = os.environ.get("OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            Path(out, "gpu_check.json").write_text(json.dumps(self.summary(), indent=1, default=str))


# ====================================================================== inputs
def random_unit(n: int, d: int, seed: int):
    import numpy as np

    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)


def clustered(n: int, d: int, n_clusters: int, seed: int, noise: float = 1.0):
    import numpy as np

    g = np.random.default_rng(seed)
    X = (g.standard_normal((n_clusters, d))[g.integers(0, n_clusters, n)] + noise * g.standard_normal((n, d)))
    X = X.astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def adversarial_embeddings() -> dict[str, Any]:
    """All-identical rows, an isolated (orthogonal) row, exact duplicates, N < k, one-hot rows
    (similarities exactly 0 or 1), a zero vector."""
    import numpy as np

    g = np.random.default_rng(3)
    iso = clustered(20, 16, 2, seed=4)
    iso[:, -1] = 0
    iso[7] = 0
    iso[7, -1] = 1.0
    dup = clustered(16, 16, 3, seed=5)
    dup[8:] = dup[:8]
    zero = random_unit(10, 16, 7)
    zero[4] = 0.0
    return {"identical": np.tile(random_unit(1, 16, 1), (12, 1)), "isolated": iso, "duplicates": dup,
            "tiny": random_unit(3, 16, 6), "one_hot": np.eye(16, dtype=np.float32)[g.integers(0, 4, 12)],
            "zero_vector": zero, "single": random_unit(1, 16, 8)}


def random_csr(n: int, per_row: int, seed: int, empty_every: int = 7):
    """Random non-negative CSR (n × n) with some empty rows and some zero-weight rows."""
    import numpy as np

    g = np.random.default_rng(seed)
    counts = g.integers(0, 2 * per_row + 1, n)
    counts[::empty_every] = 0
    indptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
    indices = g.integers(0, n, int(indptr[-1])).astype(np.int32)
    data = g.random(int(indptr[-1])).astype(np.float32)
    if n > 3:
        data[indptr[3]:indptr[4]] = 0.0
    return indptr, indices, data


def random_hypergraph(V: int, E: int, seed: int, max_size: int = 6):
    """Incidence CSR both ways (edge → nodes, node → incidence positions); empty and
    singleton edges and nodes in no edge included. Returns int64/int32 numpy arrays."""
    import numpy as np

    g = np.random.default_rng(seed)
    sizes = g.integers(0, max_size + 1, E)
    sizes[::5] = 1
    edge_indptr = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    edge_nodes = g.integers(0, max(V, 1), int(edge_indptr[-1])).astype(np.int32)
    node_incidence = np.argsort(edge_nodes, kind="stable").astype(np.int32)
    node_indptr = np.r_[0, np.cumsum(np.bincount(edge_nodes, minlength=V))].astype(np.int64)
    return edge_indptr, edge_nodes, node_indptr, node_incidence


def activations(B: int, n: int, seed: int, keep: float = 0.6, ties: bool = False):
    import numpy as np

    g = np.random.default_rng(seed)
    A = g.random((B, n)).astype(np.float32)
    A[A > keep] = 0
    if ties:
        A = np.round(A * 3) / 3
    return A


def random_groups(V: int, G: int, seed: int):
    import numpy as np

    g = np.random.default_rng(seed)
    node_group = g.integers(0, G, V)
    node_group[: min(G, V)] = np.arange(min(G, V))
    order = np.argsort(node_group, kind="stable").astype(np.int32)
    indptr = np.r_[0, np.cumsum(np.bincount(node_group, minlength=G))].astype(np.int64)
    sizes = np.diff(indptr)
    alpha = (sizes / max(sizes.mean(), 1e-9)).astype(np.float32)
    node_t = np.sort(g.integers(0, 3 * max(V, 1), V))
    return node_group, node_t, indptr, order, alpha


def column_stochastic_graph(n: int, m: int, seed: int, dangling: int = 0):
    """A ring (no dangling chunk) plus random edges, columns normalised; ``dangling`` columns emptied."""
    import numpy as np
    import scipy.sparse as sp

    from hopgraph.engine.pipelines.stitch.hypergraph import column_stochastic

    g = np.random.default_rng(seed)
    src = np.r_[np.arange(n), g.integers(0, n, max(m - n, 0))]
    dst = np.r_[(np.arange(n) + 1) % n, g.integers(0, n, max(m - n, 0))]
    keep = ~np.isin(src, np.arange(dangling))
    return column_stochastic(sp.csr_matrix((np.ones(keep.sum()), (dst[keep], src[keep])), shape=(n, n)))


def sparse_priors(B: int, n: int, nnz: int, seed: int):
    import numpy as np

    g = np.random.default_rng(seed)
    p = np.zeros((B, n), np.float32)
    if B == 0 or n == 0:
        return p
    rows = np.repeat(np.arange(B), min(nnz, n))
    cols = np.concatenate([g.choice(n, min(nnz, n), replace=False) for _ in range(B)])
    p[rows, cols] = g.random(len(rows)) + 0.1
    p[0] = 0  # an all-zero prior
    return p / np.maximum(p.sum(1, keepdims=True), 1e-12)


def shapley_problem(B: int, G: int, U: int, C: int, seed: int):
    import numpy as np

    g = np.random.default_rng(seed)
    sets = (g.random((B, G, U)) < 0.3).astype(np.float32)
    sets[:, np.arange(G), np.arange(G) % U] = 1.0
    n_sub = g.integers(1, G + 1, B)
    for b in range(B):
        sets[b, n_sub[b]:] = 0
    cand = (g.random((B, C, U)) < 0.4).astype(np.float32)
    best = g.random((B, C, G)).astype(np.float32)
    return sets, n_sub, cand, best


# ====================================================================== comparisons
def max_err(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    both_inf = np.isinf(a) & (a == b)
    return float(np.max(np.where(both_inf, 0.0, np.abs(a - b)), initial=0.0))


def allclose(a, b, rtol: float, atol: float) -> tuple[bool, str]:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False, f"shape {a.shape} != {b.shape}"
    ok = bool(np.allclose(a, b, rtol=rtol, atol=atol))
    return ok, f"max|Δ| {max_err(a, b):.2e} (rtol {rtol:g}, atol {atol:g})"


def gain_rows_agree(X, pen, sim_min: float, sim_max: float, a, b, rtol: float = 1e-5,
                    atol: float = 1e-6) -> tuple[bool, str]:
    """gain_knn CSRs ``a`` (Triton) and ``b`` (CPU): equal, or rows whose differing neighbours
    are near-ties (float64 weight within ``rtol`` of the row's k-th kept weight, or the
    similarity within 1e-6 of a band edge). Kept weights must match within ``rtol`` / ``atol``."""
    import numpy as np

    if len(a.indptr) != len(b.indptr):
        return False, "row count differs"
    if np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices):
        ok = bool(np.allclose(a.data, b.data, rtol=rtol, atol=atol))
        return ok, f"indices equal, weights max|Δ| {max_err(a.data, b.data):.2e}"
    X64, pen64 = np.asarray(X, np.float64), np.asarray(pen, np.float64)
    near = bad = 0
    for i in range(len(a.indptr) - 1):
        ra = a.indices[a.indptr[i]:a.indptr[i + 1]]
        rb = b.indices[b.indptr[i]:b.indptr[i + 1]]
        if np.array_equal(ra, rb):
            continue
        cols = np.union1d(ra, rb)
        s = X64[cols] @ X64[i]
        x = np.clip(s, 0, 1)
        w = dict(zip(cols.tolist(), (x * np.sqrt(1 - x * x) * pen64[cols]).tolist()))
        sv = dict(zip(cols.tolist(), s.tolist()))
        kth_a = min((w[c] for c in ra.tolist()), default=0.0)  # the row's weakest kept edge
        kth_b = min((w[c] for c in rb.tolist()), default=0.0)

        def borderline(c: int, kth: float) -> bool:  # a tie with the other row's k-th edge, or a band edge
            return (abs(w[c] - kth) <= rtol * max(kth, 1e-30) or w[c] <= 1e-7
                    or min(abs(sv[c] - sim_min), abs(sv[c] - sim_max)) < 1e-6)

        only_a, only_b = set(ra.tolist()) - set(rb.tolist()), set(rb.tolist()) - set(ra.tolist())
        ok = (all(borderline(c, kth_b) for c in only_a) and all(borderline(c, kth_a) for c in only_b)
              and np.allclose([w[c] for c in ra[:len(rb)]], [w[c] for c in rb[:len(ra)]], rtol=rtol, atol=atol))
        near += ok
        bad += not ok
    return bad == 0, f"{near} rows differ only by near-ties, {bad} rows differ"


@dataclass
class RankingDiff:
    """How two pipelines' results ``(ids [B, k], scores [B, k])`` differ in their first ``n_check``
    positions: rows whose scores differ beyond tolerance, rows with an id that differs where its score
    ties no other returned position (a real mismatch), and positions swapped at score near-ties."""

    queries: int
    score_mismatches: int
    id_mismatches: int
    near_ties: int
    max_score_err: float

    @property
    def ok(self) -> bool:
        return self.score_mismatches == 0 and self.id_mismatches == 0

    def message(self) -> str:
        return (f"{self.queries} queries: {self.score_mismatches} score mismatches, {self.id_mismatches} id "
                f"mismatches, {self.near_ties} positions swapped at near-ties; max|Δscore| {self.max_score_err:.1e}")


def ranking_diff(ids_a, sc_a, ids_b, sc_b, n_check: int, rtol: float = 1e-4, atol: float = 1e-6) -> RankingDiff:
    """The :class:`RankingDiff` of two results: the first ``n_check`` scores close; ids equal except where
    the score ties (within tolerance) with another returned position of the same row."""
    import numpy as np

    bad_scores = bad_ids = near = 0
    for r in range(len(ids_a)):
        sa, sb = sc_a[r], sc_b[r]
        if not np.allclose(sa[:n_check], sb[:n_check], rtol=rtol, atol=atol):
            bad_scores += 1
            continue
        for j in np.nonzero(ids_a[r, :n_check] != ids_b[r, :n_check])[0]:
            others = np.delete(sa, j)
            if np.any(np.abs(others - sa[j]) <= atol + rtol * abs(sa[j])):
                near += 1
            else:
                bad_ids += 1
                break
    return RankingDiff(len(ids_a), bad_scores, bad_ids, near, max_err(sc_a[:, :n_check], sc_b[:, :n_check]))


def rankings_agree(ids_a, sc_a, ids_b, sc_b, n_check: int, rtol: float = 1e-4, atol: float = 1e-6) -> tuple[bool, str]:
    """Pipeline results agree (:func:`ranking_diff`): ``(ok, message)``."""
    diff = ranking_diff(ids_a, sc_a, ids_b, sc_b, n_check, rtol, atol)
    return diff.ok, diff.message()


# ====================================================================== 1. parity
def as_numpy(t) -> Any:
    import numpy as np
    import torch

    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def parity_density(run: Run) -> list[tuple[str, bool, str]]:
    inputs = {"random": random_unit(37, 8, 0), "clustered": clustered(40, 16, 3, seed=1), **adversarial_embeddings()}
    if run.size != "tiny":
        inputs["medium_2000x384"] = clustered(2000, 384, 20, seed=2)
    out = []
    for name, X in inputs.items():
        for kw in ({"mode": "exact"}, {"mode": "sampled", "n_samples": 9, "seed": 1}):
            ok, msg = allclose(run.tri("density", X, **kw), run.cpu("density", X, **kw), 1e-5, 1e-6)
            out.append((f"{name}/{kw['mode']}", ok, msg))
    return out


def parity_gain_knn(run: Run) -> list[tuple[str, bool, str]]:
    import numpy as np

    inputs = {"random": random_unit(37, 8, 0), "clustered": clustered(40, 16, 3, seed=1), **adversarial_embeddings()}
    cases = [(name, X, 3, 0.3, 0.9) for name, X in inputs.items()]
    cases += [("k>N", inputs["duplicates"], 20, 0.0, 1.0), ("one_hot/k20", inputs["one_hot"], 20, 0.0, 1.0),
              ("exact_graph_70/k69", clustered(70, 16, 3, seed=9), 69, 0.0, 1.0)]  # the dense path (k > 64)
    if run.size != "tiny":
        cases.append(("medium_2000x384/k32", clustered(2000, 384, 20, seed=2), 32, 0.3, 0.9))
        cases.append(("medium_2000x384/k64", clustered(2000, 384, 20, seed=2), 64, 0.3, 0.9))
        cases.append(("exact_graph_1500x384", clustered(1500, 384, 15, seed=3), 1499, 0.0, 1.0))
    out = []
    for name, X, k, lo, hi in cases:
        pen = np.random.default_rng(2).uniform(0.3, 1, len(X)).astype(np.float32)
        a = run.tri("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen)
        b = run.cpu("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen)
        ok, msg = gain_rows_agree(X, pen, lo, hi, a, b)
        out.append((name, ok, msg))
    return out


def parity_gain_knn_rows(run: Run) -> list[tuple[str, bool, str]]:
    """The first rows of X among all of X (G3RAG's add and IVF rescoring: query rows among labelled base
    rows, the query's own id excluded), with and without per-row floors, and the dense path (k > 64)."""
    import numpy as np

    inputs = {"random": random_unit(37, 8, 0), "clustered": clustered(40, 16, 3, seed=1), **adversarial_embeddings()}
    cases = [(name, X, 3, 0.3, 0.9, False) for name, X in inputs.items()]
    cases += [("k>N", inputs["duplicates"], 20, 0.0, 1.0, False), ("floors", inputs["clustered"], 4, 0.0, 1.0, True),
              ("dense_70/k69", clustered(70, 16, 3, seed=9), 69, 0.0, 1.0, True)]
    if run.size != "tiny":
        cases.append(("medium_1000_of_20000x384/k32", clustered(20000, 384, 20, seed=2), 32, 0.3, 0.9, True))
    out = []
    for name, X, k, lo, hi, floors in cases:
        m = max(1, len(X) // 20) if len(X) > 1000 else len(X)
        pen = np.random.default_rng(2).uniform(0.3, 1, len(X)).astype(np.float32)
        kw = dict(k=k, sim_min=lo, sim_max=hi, penalty=pen, exclude=np.arange(m),
                  floor=np.random.default_rng(3).uniform(0, 0.3, m).astype(np.float32) if floors else None)
        a = run.tri("gain_knn_rows", X[:m], X, **kw)
        b = run.cpu("gain_knn_rows", X[:m], X, **kw)
        ok, msg = gain_rows_agree(X, pen, lo, hi, a, b)
        out.append((name, ok, msg))
    return out


def parity_sparse_diffusion(run: Run) -> list[tuple[str, bool, str]]:
    import numpy as np

    cases = [("random_40", 40, 3, np.array([[0, 3, -1], [5, 6, 7], [-1, -1, -1], [3, -1, -1]]))]
    if run.size != "tiny":
        g = np.random.default_rng(1)
        seeds = g.integers(-1, 20000, (64, 10))
        cases.append(("medium_20000x64q", 20000, 16, seeds))
    out = []
    for name, n, per_row, seeds in cases:
        indptr, indices, data = random_csr(n, per_row, seed=n)
        for weights in (None, np.random.default_rng(0).random(seeds.shape).astype(np.float32)):
            for normalise in (True, False):
                args = (seeds, weights, indptr, indices, data, n)
                ok, msg = allclose(run.tri("sparse_diffusion", *args, normalise=normalise),
                                   run.cpu("sparse_diffusion", *args, normalise=normalise), 0.0, 0.0)
                ids_t, val_t = run.tri("sparse_diffusion", *args, normalise=normalise, top=10)
                ids_c, val_c = run.cpu("sparse_diffusion", *args, normalise=normalise, top=10)
                top_ok = bool(np.array_equal(ids_t, ids_c) and np.array_equal(val_t, val_c))
                keys_t, y_t = run.tri("sparse_diffusion", *args, normalise=normalise, entries=True)
                keys_c, y_c = run.cpu("sparse_diffusion", *args, normalise=normalise, entries=True)
                entries_ok = bool(np.array_equal(keys_t.cpu().numpy(), keys_c.numpy())
                                  and np.array_equal(y_t.cpu().numpy(), y_c.numpy()))
                out.append((f"{name}/{'w' if weights is not None else 'uniform'}/norm={normalise}",
                            ok and top_ok and entries_ok, msg + ("" if top_ok else "; top=10 differs")
                            + ("" if entries_ok else "; entries differ")))
    empty = np.zeros((0, 3), np.int64)
    a = run.tri("sparse_diffusion", empty, None, *random_csr(5, 2, 0), 5)
    out.append(("empty_batch", a.shape == (0, 5), f"shape {a.shape}"))
    return out


def parity_hyperedge_max_propagate(run: Run) -> list[tuple[str, bool, str]]:
    import torch

    cases = [("random", 3, 12, 9, False, 20), ("ties", 20, 9, 7, True, 20), ("empty_batch", 0, 5, 3, False, 4),
             ("no_incidence", 2, 4, 0, False, 4), ("B70_two_blocks", 70, 40, 30, True, 30)]
    if run.size != "tiny":
        cases.append(("medium_B64_V20000_E6000", 64, 20000, 6000, False, 8))
    out = []
    for name, B, V, E, ties, max_size in cases:
        csr = [torch.from_numpy(a) for a in random_hypergraph(V, E, seed=V + E, max_size=max_size)]
        A = torch.from_numpy(activations(B, V, seed=1, ties=ties))
        S = torch.rand((B, E), generator=torch.Generator().manual_seed(2))
        cpu = run.cpu("hyperedge_max_propagate", A, S, *csr)
        tri = run.tri("hyperedge_max_propagate", A.to(run.tdev), S.to(run.tdev), *(t.to(run.tdev) for t in csr))
        ok, msg = allclose(as_numpy(tri), as_numpy(cpu), 0.0, 0.0)
        out.append((name, ok, msg))
    return out


def parity_group_decay_propagate(run: Run) -> list[tuple[str, bool, str]]:
    import numpy as np
    import torch

    cases = [("random", 3, 15, 5, 0.6), ("singletons", 2, 9, 9, 0.6), ("two_groups", 1, 40, 2, 0.6),
             ("no_activation", 2, 6, 2, 0.0), ("empty_batch", 0, 6, 2, 0.6)]
    if run.size != "tiny":
        cases.append(("medium_B64_V20000_G4000", 64, 20000, 4000, 0.05))
    out = []
    for name, B, V, G, keep in cases:
        grp = random_groups(V, G, seed=V)
        A, w = activations(B, V, seed=3, keep=keep), np.random.default_rng(4).random((B, V)).astype(np.float32)
        args = [torch.from_numpy(np.asarray(a)) for a in (A, w, *grp)]
        cpu = run.cpu("group_decay_propagate", *args)
        tri = run.tri("group_decay_propagate", *(a.to(run.tdev) for a in args))
        ok, msg = allclose(as_numpy(tri), as_numpy(cpu), 1e-5, 1e-7)
        out.append((name, ok, msg))
    return out


def parity_batched_ppr(run: Run) -> list[tuple[str, bool, str]]:
    import numpy as np

    cases = [("n10_B3", 10, 30, 3, 1), ("n6_B20", 6, 20, 20, 1), ("n5_B1_dangling", 5, 5, 1, 2),
             ("empty_batch", 10, 30, 0, 0)]
    if run.size != "tiny":
        cases.append(("n90_B130_programs_and_blocks", 90, 700, 130, 1))
        cases.append(("medium_n20000_m200000_B40", 20000, 200000, 40, 5))
    out = []
    for name, n, m, B, dangling in cases:
        P = column_stochastic_graph(n, m, seed=n, dangling=dangling)
        pri = sparse_priors(B, n, 5, seed=1)
        region = np.random.default_rng(2).random((B, n)) < 0.7
        for reg in (None, region):
            for dtype in (np.float32, np.float64):
                kw = dict(d=0.85, tol=1e-6, max_iter=12 if n < 100 else 60, region=reg)
                cpu, it_c = run.cpu("batched_ppr", P, pri.astype(dtype), **kw)
                tri, it_t = run.tri("batched_ppr", P, pri.astype(dtype), **kw)
                ok, msg = allclose(as_numpy(tri), as_numpy(cpu), 0.0, 1e-6)
                apart = np.abs(as_numpy(it_c).astype(np.int64) - as_numpy(it_t).astype(np.int64))
                near = apart.size == 0 or int(apart.max()) <= 1  # a change within ~1e-7 of tol
                out.append((f"{name}/{'region' if reg is not None else 'full'}/{np.dtype(dtype).name}", ok and near,
                            msg + f"; {int((apart > 0).sum())} columns stopped one iteration apart"
                            + ("" if near else "; iteration counts differ by more than one")))
    return out


def parity_shapley_mc(run: Run) -> list[tuple[str, bool, str]]:
    import torch

    cases = [("random", *shapley_problem(2, 5, 12, 3, seed=5))]
    sets, n_sub, cand, best = shapley_problem(3, 3, 5, 2, seed=6)
    n_sub[0], cand[1], best[2] = 0, 0, 0  # empty query, empty candidate, zero similarities
    cases.append(("adversarial", sets, n_sub, cand, best))
    cases.append(("empty_batch", *shapley_problem(0, 3, 4, 5, seed=7)))
    cases.append(("G32_U70_C40", *shapley_problem(2, 32, 70, 40, seed=9)))
    if run.size != "tiny":
        cases.append(("medium_B32_C100_G8_U128", *shapley_problem(32, 8, 128, 100, seed=8)))
    out = []
    for name, *arrays in cases:
        ts = [torch.from_numpy(a) for a in arrays]
        for mode in ("independent", "shared"):
            cpu = run.cpu("shapley_mc", *ts, T=6, seed=4, mode=mode)
            tri = run.tri("shapley_mc", *ts, T=6, seed=4, mode=mode)
            oks = [allclose(as_numpy(x), as_numpy(y), 0.0, 1e-5) for x, y in zip(tri, cpu)]
            out.append((f"{name}/{mode}", all(o for o, _ in oks), "; ".join(m for _, m in oks)))
    return out


PARITY: dict[str, Callable[[Run], list[tuple[str, bool, str]]]] = {
    "density": parity_density, "gain_knn": parity_gain_knn, "gain_knn_rows": parity_gain_knn_rows,
    "sparse_diffusion": parity_sparse_diffusion,
    "hyperedge_max_propagate": parity_hyperedge_max_propagate,
    "group_decay_propagate": parity_group_decay_propagate, "batched_ppr": parity_batched_ppr,
    "shapley_mc": parity_shapley_mc,
}


def triton_ops() -> list[str]:
    """Every op registered with a Triton path (all kernel modules imported first)."""
    import importlib
    import pkgutil

    import hopgraph.kernels as kernels
    from hopgraph.kernels import dispatch

    for mod in pkgutil.iter_modules(kernels.__path__):
        if not mod.name.endswith("_triton") and mod.name not in ("dispatch", "threads"):
            importlib.import_module(f"hopgraph.kernels.{mod.name}")
    return [name for name in dispatch.registered_ops() if dispatch.get_op(name).triton_path is not None]


def section_parity(run: Run) -> None:
    print("\n== 1. parity: Triton on", "CPU tensors (TRITON_INTERPRET=1)" if run.interpret else "CUDA",
          "vs the CPU path", flush=True)
    for op in triton_ops():
        check = PARITY.get(op)
        if check is None:
            run.add(Result("parity", op, "-", "FAIL", "op has a Triton path but gpu_check.py has no parity check"))
            continue
        t0 = time.perf_counter()
        try:
            cases = check(run)
        except Exception as e:  # a crash is a FAIL of this op, the others still run
            run.add(Result("parity", op, "(crashed)", "FAIL", f"{type(e).__name__}: {e}"))
            traceback.print_exc()
            continue
        for case, ok, msg in cases:
            run.add(Result("parity", op, case, "PASS" if ok else "FAIL", msg))
        print(f"       {op}: {len(cases)} cases in {time.perf_counter() - t0:.1f} s", flush=True)
    run.write_json()


# ====================================================================== 2. pipelines
#: --interpret only (the interpreter runs a Triton program ~1000× slower): query-time
#: parameters that shrink the work, applied to both sides of the comparison
INTERPRET_OVERRIDES: dict[str, dict[str, Any]] = {"dmar": {"shapley_samples": 2, "candidate_depth": 10},
                                                  "stitch": {"max_iter": 8},
                                                  "ppr_binary": {"max_iter": 8}}


def corpora(run: Run, tmp: Path) -> list[tuple[str, Any, list[str]]]:
    """(name, corpus, questions): the demo corpus and a generated one."""
    from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
    from hopgraph.engine.components.corpus import Corpus

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import generate  # the generator of the scale benchmark (entities, years, clusters)

    n = {"tiny": 40, "quick": 600, "full": 3000}[run.size]
    generate(max(n, 256), tmp / "generated", seed=0)  # the generator draws 256 questions
    questions = json.loads((tmp / "generated" / "questions.json").read_text())
    n_q = {"tiny": 4, "quick": 32, "full": 128}[run.size]
    gen = Corpus.from_jsonl(tmp / "generated" / "corpus.jsonl")
    gen = Corpus(gen.ids[:n], gen.titles[:n], gen.texts[:n], source=gen.source)
    return [("demo", demo_corpus(), list(DEMO_QUESTIONS)), (f"generated_{n}", gen, questions[:n_q])]


def section_pipelines(run: Run) -> None:
    from hopgraph import Index
    from hopgraph.engine.pipelines import pipeline_class, pipeline_names
    from hopgraph.kernels import use_backend

    print("\n== 2. pipelines end to end: device=%s vs device='cpu' (embedder hashing-64)"
          % ("'cpu' + forced Triton (interpreter)" if run.interpret else "'cuda'"), flush=True)
    k, n_check = 10, 8
    with tempfile.TemporaryDirectory() as tmp:
        try:
            data = corpora(run, Path(tmp))
        except Exception as e:
            run.add(Result("pipelines", "corpora", "-", "FAIL", f"{type(e).__name__}: {e}"))
            traceback.print_exc()
            return
        for cname, corpus, questions in data:
            index = Index.build(corpus, embedder="hashing-64", device="cpu", pipelines=[], progress=False)
            Q = index.embed_queries(questions)
            for name in pipeline_names():
                if not pipeline_class(name).runs_kernels:
                    run.add(Result("pipelines", name, cname, "SKIP", "no device parameter (CPU only)"))
                    continue
                small = INTERPRET_OVERRIDES.get(name, {}) if run.interpret else {}
                t0 = time.perf_counter()
                try:
                    with use_backend("cpu"):  # the reference, whatever HOPGRAPH_KERNEL_BACKEND says
                        ids_c, sc_c = index.search_arrays(questions, name, k, query_embeddings=Q, **small)
                    t_cpu = time.perf_counter() - t0
                    t1 = time.perf_counter()
                    if run.interpret:  # device="cpu", every op with a Triton path takes it (interpreter)
                        with use_backend("triton"):
                            ids_g, sc_g = index.search_arrays(questions, name, k, query_embeddings=Q, device="cpu",
                                                              **small)
                    else:
                        ids_g, sc_g = index.search_arrays(questions, name, k, query_embeddings=Q, device="cuda")
                    t_gpu = time.perf_counter() - t1
                except Exception as e:
                    run.add(Result("pipelines", name, cname, "FAIL", f"{type(e).__name__}: {e}"))
                    traceback.print_exc()
                    continue
                ok, msg = rankings_agree(ids_g, sc_g, ids_c, sc_c, n_check)
                run.add(Result("pipelines", name, cname, "PASS" if ok else "FAIL",
                               f"{msg}; fit+search cpu {t_cpu:.1f} s, triton {t_gpu:.1f} s",
                               {"cpu_s": t_cpu, "triton_s": t_gpu}))
    run.write_json()


# ====================================================================== 3. timing
@dataclass
class Timing:
    """One timed op. ``prepare()`` builds the inputs (not timed) and returns ``(triton_fn,
    cpu_fn, small)`` or ``(triton_fn, cpu_fn, small, peers)``; ``cpu_fn`` None: the CPU path is
    not timed at this size (said so); ``small`` is None or ``(cpu_fn_small, scale)``: the CPU path
    on a smaller input whose time × ``scale`` estimates ``cpu_fn``'s, used (and marked "~")
    when the remaining budget cannot hold the full CPU run; ``peers``: name → a callable doing
    the same work with another library, or a string saying why that peer is skipped."""

    op: str
    size: str
    prepare: Callable[[], tuple[Callable[[], Any], Callable[[], Any], Any]]
    repeats: int = 3
    grow: float = 0  # > 0: skip unless this × the previous Triton time of the op fits the budget


def best_time(run: Run, fn: Callable[[], Any], repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        run.sync()
        t0 = time.perf_counter()
        fn()
        run.sync()
        best = min(best, time.perf_counter() - t0)
    return best


def timing_cases(run: Run) -> list[Timing]:
    import numpy as np
    import torch

    from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty

    full, quick = run.size == "full", run.size == "quick"
    pick = lambda f, q, t: f if full else (q if quick else t)  # noqa: E731
    dev = run.tdev
    d_t, u_t = (16, 8) if run.size == "tiny" else (384, 128)
    cases: list[Timing] = []

    n_d = pick(200_000, 20_000, 64)
    n_e = pick(50_000, 5_000, 48)

    def density_sampled():
        X = clustered(n_d, d_t, 100, seed=11)
        kw = dict(mode="sampled", n_samples=pick(4096, 4096, 16))
        return (lambda: run.tri("density", X, **kw)), (lambda: run.cpu("density", X, **kw)), None

    def density_exact():
        X = clustered(n_e, d_t, 100, seed=12)
        small = X[: n_e // 4]
        return (lambda: run.tri("density", X)), (lambda: run.cpu("density", X)), (lambda: run.cpu("density", small), 16)

    cases.append(Timing("density", f"sampled N={n_d:,} d={d_t} s=4096", density_sampled))
    cases.append(Timing("density", f"exact N={n_e:,} d={d_t}", density_exact, repeats=1))

    n_s = pick(200_000, 20_000, 64)
    B_s = pick(256, 64, 4)

    def diffusion():
        indptr, indices, data = random_csr(n_s, 32, seed=13, empty_every=1000)
        seeds = np.random.default_rng(14).integers(0, n_s, (B_s, 20))
        args = (seeds, None, indptr, indices, data, n_s)
        return (lambda: run.tri("sparse_diffusion", *args)), (lambda: run.cpu("sparse_diffusion", *args)), None

    cases.append(Timing("sparse_diffusion", f"N={n_s:,} nnz≈{32 * n_s:,} B={B_s} s=20", diffusion))

    V, E, B_h = pick(1_000_000, 100_000, 50), pick(300_000, 30_000, 20), pick(64, 32, 3)

    def hyperedge():
        csr = [torch.from_numpy(a) for a in random_hypergraph(V, E, seed=15, max_size=8)]
        A = torch.from_numpy(activations(B_h, V, seed=16, keep=0.05))
        S = torch.rand((B_h, E), generator=torch.Generator().manual_seed(17))
        on = [t.to(dev) for t in (A, S, *csr)]
        return ((lambda: run.tri("hyperedge_max_propagate", *on)),
                (lambda: run.cpu("hyperedge_max_propagate", A, S, *csr)), None)

    cases.append(Timing("hyperedge_max_propagate", f"B={B_h} V={V:,} E={E:,}", hyperedge))

    G_g = max(V // 5, 1)

    def group_decay():
        grp = random_groups(V, G_g, seed=18)
        A = activations(B_h, V, seed=19, keep=0.02)
        w = np.random.default_rng(20).random((B_h, V)).astype(np.float32)
        args = [torch.from_numpy(np.asarray(a)) for a in (A, w, *grp)]
        on = [a.to(dev) for a in args]
        return (lambda: run.tri("group_decay_propagate", *on)), (lambda: run.cpu("group_decay_propagate", *args)), None

    cases.append(Timing("group_decay_propagate", f"B={B_h} V={V:,} groups={G_g:,} 2% active", group_decay))

    n_p, m_p, B_p = pick(1_000_000, 100_000, 40), pick(10_000_000, 1_000_000, 200), pick(256, 64, 4)

    def ppr():
        P = column_stochastic_graph(n_p, m_p, seed=21)
        pri = sparse_priors(B_p, n_p, 10, seed=22)
        pri[0, 0] = 1.0  # no all-zero prior here
        kw = dict(d=0.85, tol=1e-6, max_iter=100)
        P_s = column_stochastic_graph(n_p // 10, m_p // 10, seed=21)
        pri_s = sparse_priors(B_p, n_p // 10, 10, seed=22)
        pri_s[0, 0] = 1.0
        return ((lambda: run.tri("batched_ppr", P, pri, **kw)), (lambda: run.cpu("batched_ppr", P, pri, **kw)),
                (lambda: run.cpu("batched_ppr", P_s, pri_s, **kw), 10))

    cases.append(Timing("batched_ppr", f"N={n_p:,} edges={m_p:,} priors={B_p}", ppr, repeats=1))

    B_sh, C_sh = pick(256, 64, 1), pick(100, 100, 2)

    def shapley():
        ts = [torch.from_numpy(a) for a in shapley_problem(B_sh, 8, u_t, C_sh, seed=23)]
        return (lambda: run.tri("shapley_mc", *ts, T=50)), (lambda: run.cpu("shapley_mc", *ts, T=50)), None

    cases.append(Timing("shapley_mc", f"B={B_sh} C={C_sh} G=8 U={u_t} T=50", shapley))

    def gain_knn(n_g: int):
        def prepare():
            X = clustered(n_g, d_t, max(n_g // 250, 2), seed=24)
            pen = hub_penalty(run.cpu("density", X, mode="sampled", n_samples=4096))
            kw = dict(k=32, sim_min=0.3, sim_max=0.9, penalty=pen)
            X_s, kw_s = X[: n_g // 4], {**kw, "penalty": pen[: n_g // 4]}
            return ((lambda: run.tri("gain_knn", X, **kw)), (lambda: run.cpu("gain_knn", X, **kw)),
                    (lambda: run.cpu("gain_knn", X_s, **kw_s), 16))
        return prepare

    # O(N²): the smaller size first; the larger one runs only when 16× its Triton time fits
    for n_g, grow in ((pick(50_000, 5_000, 32), 0), (pick(200_000, 20_000, 48), 16)):
        cases.append(Timing("gain_knn", f"N={n_g:,} d={d_t} k=32", gain_knn(n_g), repeats=1, grow=grow))

    n_a, m_a = pick(1_000_000, 100_000, 40), pick(1000, 1000, 4)

    def gain_knn_rows():
        X = clustered(n_a, d_t, max(n_a // 250, 2), seed=28)
        pen = np.random.default_rng(29).uniform(0.3, 1.0, n_a).astype(np.float32)
        kw = dict(k=32, sim_min=0.3, sim_max=0.9, penalty=pen, exclude=np.arange(n_a - m_a, n_a))
        return (lambda: run.tri("gain_knn_rows", X[n_a - m_a:], X, **kw)), \
            (lambda: run.cpu("gain_knn_rows", X[n_a - m_a:], X, **kw)), None

    cases.append(Timing("gain_knn_rows", f"{m_a:,} added rows among N={n_a:,} d={d_t} k=32", gain_knn_rows,
                        repeats=1))

    # the 10⁶ shapes, side by side with the GPU peers (the CPU path takes hours there)
    n_k = pick(1_000_000, 100_000, 40)

    def knn_peers():
        X = clustered(n_k, d_t, max(n_k // 250, 2), seed=25)
        pen = np.ones(n_k, np.float32)
        kw = dict(k=32, sim_min=-1.0, sim_max=1.0, penalty=pen)
        return (lambda: run.tri("gain_knn", X, **kw)), None, None, {
            "faiss-GPU IndexFlatIP (k + 1)": faiss_gpu_knn(run, X, 33),
            "torch blocked X·Xᵀ + topk (TF32 off)": lambda: torch_knn(run, X, 33)}

    peer_cases = [Timing("gain_knn", f"N={n_k:,} d={d_t} k=32 (peers)", knn_peers, repeats=1)]
    n_q, m_q, B_q = pick(1_000_000, 100_000, 40), pick(10_000_000, 1_000_000, 200), pick(256, 64, 4)

    def ppr_peers():
        P = column_stochastic_graph(n_q, m_q, seed=26)
        pri = sparse_priors(B_q, n_q, 10, seed=27)
        pri[0, 0] = 1.0
        kw = dict(d=0.85, tol=None, max_iter=30)  # 30 iterations, every column
        resident = device_csr(run, P), torch.from_numpy(pri).to(run.tdev)  # as the pipelines give them
        return (lambda: run.tri("batched_ppr", P, pri, **kw)), None, None, {
            "hopgraph, P and priors already on the device": lambda: run.tri("batched_ppr", *resident, **kw),
            "torch CUDA CSR × block, 30 iterations": torch_ppr(run, P, pri, 0.85, 30),
            "cuGraph personalised PageRank (16 priors, × B/16)": cugraph_ppr(run, P, pri, 0.85, 30, 16)}

    peer_cases.append(Timing("batched_ppr", f"N={n_q:,} edges={m_q:,} priors={B_q} 30 iterations (peers)",
                             ppr_peers, repeats=2))
    return peer_cases + cases  # the 10⁶ shapes against the GPU peers first: they matter most


def faiss_gpu_knn(run: Run, X, k: int) -> Callable[[], Any] | str:
    """faiss-GPU's exact inner-product k-NN of X against itself, or why it is skipped."""
    if run.interpret:
        return "no GPU (--interpret)"
    try:
        import faiss
    except ImportError:
        return "faiss is not installed"
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() < 1:
        return "this faiss has no GPU support (install faiss-gpu-cu12)"
    res = faiss.StandardGpuResources()
    index = faiss.GpuIndexFlatIP(res, X.shape[1])
    index.add(X)
    return lambda: index.search(X, k)


def torch_knn(run: Run, X, k: int) -> None:
    """The k best inner products of every row of X by blocked ``X[b] · Xᵀ`` (2³⁰ products a block) and
    ``topk`` in torch (FP32)."""
    import torch

    Xd = torch.from_numpy(X).to(run.tdev)
    torch.backends.cuda.matmul.allow_tf32 = False
    block = max(1, (1 << 30) // max(len(Xd), 1))
    for r in range(0, len(Xd), block):
        torch.topk(Xd[r:r + block] @ Xd.T, k, dim=1)


def device_csr(run: Run, P) -> tuple[Any, Any, Any]:
    """P's (indptr int64, indices int32, data float32) as tensors on the run's device."""
    import torch

    return (torch.from_numpy(P.indptr.astype("int64")).to(run.tdev), torch.from_numpy(P.indices).to(run.tdev),
            torch.from_numpy(P.data.astype("float32")).to(run.tdev))


def torch_ppr(run: Run, P, priors, d: float, iterations: int) -> Callable[[], Any]:
    """``iterations`` power steps ``x ← (1 − d) p + d P x`` with torch's CSR × dense block (cuSPARSE on CUDA)."""
    import torch

    A = torch.sparse_csr_tensor(torch.from_numpy(P.indptr).to(torch.int64), torch.from_numpy(P.indices).to(torch.int64),
                                torch.from_numpy(P.data.astype("float32")), P.shape, check_invariants=False).to(run.tdev)
    p = torch.from_numpy(priors).to(run.tdev).T.contiguous()

    def go() -> Any:
        x = p.clone()
        for _ in range(iterations):
            x = torch.addmm(p, A, x, beta=1 - d, alpha=d)
        return x
    return go


def cugraph_ppr(run: Run, P, priors, d: float, iterations: int, n_priors: int) -> Callable[[], Any] | str:
    """cuGraph's personalised PageRank for ``n_priors`` priors (one call each), or why it is skipped."""
    if run.interpret:
        return "no GPU (--interpret)"
    try:
        import cudf
        import cugraph
    except ImportError:
        return "cugraph is not installed"
    import numpy as np

    coo = P.tocoo()  # P[i, j]: the step j → i
    edges = cudf.DataFrame({"src": coo.col.astype(np.int32), "dst": coo.row.astype(np.int32),
                            "w": coo.data.astype(np.float32)})
    G = cugraph.Graph(directed=True)
    G.from_cudf_edgelist(edges, source="src", destination="dst", edge_attr="w")
    pers = []
    for b in range(min(n_priors, len(priors))):
        nz = np.flatnonzero(priors[b])
        if len(nz):
            pers.append(cudf.DataFrame({"vertex": nz.astype(np.int32), "values": priors[b, nz].astype(np.float32)}))

    def go() -> Any:
        for frame in pers:
            cugraph.pagerank(G, alpha=d, personalization=frame, max_iter=iterations, tol=1e-30)
    return go


def time_peers(run: Run, case: Timing, peers: dict[str, Any], t_tri: float, rows: list[list[str]]) -> None:
    """Time each peer of ``case``, best of 2 (or report why it is skipped)."""
    for name, fn in peers.items():
        label = f"{case.op} vs {name}"
        if isinstance(fn, str):
            run.add(Result("timing", label, case.size, "SKIP", fn))
            rows.append(["  " + name, case.size, "", "-", "-", f"skipped: {fn}"])
            continue
        if run.over_budget():
            run.add(Result("timing", label, case.size, "SKIP", f"budget of {run.args.budget:.0f} s used"))
            rows.append(["  " + name, case.size, "", "-", "-", "skipped (budget)"])
            continue
        try:
            t_peer = best_time(run, fn, 2)
        except Exception as e:
            run.add(Result("timing", label, case.size, "FAIL", f"{type(e).__name__}: {e}"))
            rows.append(["  " + name, case.size, "", "-", "-", "FAIL"])
            continue
        ratio = t_peer / t_tri if t_tri > 0 else math.inf
        run.add(Result("timing", label, case.size, "PASS", f"{name} {t_peer:.4f} s, {ratio:.2f}x triton's",
                       {"peer_s": t_peer, "triton_s": t_tri, "ratio": ratio}))
        rows.append(["  " + name, case.size, "", f"{t_peer:.4f}", f"{ratio:.2f}x", "best of 2"])


def section_timing(run: Run) -> None:
    print("\n== 3. timing: Triton on", "CPU (interpreter; meaningless)" if run.interpret else "GPU",
          "vs CPU path (best of N, seconds)", flush=True)
    rows = []
    last_triton: dict[str, float] = {}
    for case in timing_cases(run):
        if run.size == "tiny":
            case.repeats = 1
        if case.grow and case.op in last_triton and \
                run.elapsed() + 1.3 * case.grow * last_triton[case.op] > run.args.budget + 60:
            run.add(Result("timing", case.op, case.size, "SKIP",
                           f"expected ≈ {case.grow * last_triton[case.op]:.0f} s on the GPU: over budget"))
            rows.append([case.op, case.size, "-", "-", "-", "skipped (budget)"])
            continue
        if run.over_budget():
            run.add(Result("timing", case.op, case.size, "SKIP", f"budget of {run.args.budget:.0f} s used"))
            rows.append([case.op, case.size, "-", "-", "-", "skipped (budget)"])
            continue
        try:
            t0 = time.perf_counter()
            tri_fn, cpu_fn, small, *extra = case.prepare()
            peers = extra[0] if extra else {}
            t_prep = time.perf_counter() - t0
            # the parity section compiled the kernels (same constexprs and specialisations);
            # with repeats > 1 a late compile falls out of the best-of
            t_tri = best_time(run, tri_fn, case.repeats)
            last_triton[case.op] = t_tri
            note, est = f"best of {case.repeats}", ""
            if cpu_fn is None:
                run.add(Result("timing", case.op, case.size, "PASS", f"triton {t_tri:.4f} s (CPU path not timed here)",
                               {"triton_s": t_tri, "prepare_s": t_prep, "repeats": case.repeats}))
                rows.append([case.op, case.size, f"{t_tri:.4f}", "-", "-", "CPU path not timed at this size"])
                time_peers(run, case, peers, t_tri, rows)
                run.write_json()
                continue
            if small is not None:
                t_small = best_time(run, small[0], 1) * small[1]
                if run.elapsed() + 1.2 * t_small > run.args.budget:
                    t_cpu, est = t_small, "~"
                    note = f"CPU estimated: 1/{small[1]} of the work × {small[1]} (budget)"
            if not est:
                if run.over_budget():
                    run.add(Result("timing", case.op, case.size, "SKIP", f"CPU path skipped: budget; triton "
                                   f"{t_tri:.3f} s", {"triton_s": t_tri}))
                    rows.append([case.op, case.size, f"{t_tri:.4f}", "-", "-", "CPU skipped (budget)"])
                    continue
                t_cpu = best_time(run, cpu_fn, 1 if small is not None else case.repeats)
        except Exception as e:
            run.add(Result("timing", case.op, case.size, "FAIL", f"{type(e).__name__}: {e}"))
            traceback.print_exc()
            rows.append([case.op, case.size, "-", "-", "-", "FAIL"])
            continue
        ratio = t_cpu / t_tri if t_tri > 0 else math.inf
        run.add(Result("timing", case.op, case.size, "PASS",
                       f"triton {t_tri:.4f} s, cpu {est}{t_cpu:.4f} s, {est}{ratio:.1f}x",
                       {"triton_s": t_tri, "cpu_s": t_cpu, "ratio": ratio, "cpu_estimated": bool(est),
                        "prepare_s": t_prep, "repeats": case.repeats}))
        rows.append([case.op, case.size, f"{t_tri:.4f}", f"{est}{t_cpu:.4f}", f"{est}{ratio:.1f}x", note])
        time_peers(run, case, peers, t_tri, rows)
        run.write_json()
    head = ["op", "size", "triton s", "cpu (peer) s", "cpu/triton (peer/triton)", "note"]
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    print()
    for r in [head, ["-" * w for w in widths]] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    run.write_json()


# ====================================================================== main
def start_run(args: argparse.Namespace, script: str, run_class: type[Run] = Run) -> Run | None:
    """The run of ``script`` (this one, ``bench/gpu_e2e.py``): TRITON_INTERPRET=1 set before triton
    is imported when ``args.interpret``, hopgraph importable from this checkout, the environment
    printed; None when torch sees no CUDA GPU outside ``--interpret`` (said on stderr)."""
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    ensure_hopgraph_importable()
    import torch

    if not args.interpret and not torch.cuda.is_available():
        print(f"{script}: torch sees no CUDA GPU; run on a CUDA machine, or use --interpret for a smoke test",
              file=sys.stderr)
        return None
    run = run_class(args)
    env = run.summary()["env"]
    print(f"{script}:", ", ".join(f"{k} {v}" for k, v in env.items()), f"budget {args.budget:.0f} s", flush=True)
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run(args, "gpu_check")
    if run is None:
        return 2
    only = set(args.only or ("parity", "pipelines", "timing"))
    if "parity" in only:
        section_parity(run)
    if "pipelines" in only:
        section_pipelines(run)
    if "timing" in only and not args.skip_timing:
        section_timing(run)
    summary = run.summary()
    run.write_json()
    fails = [r for r in run.results if r.status == "FAIL"]
    print(f"\ngpu_check: {summary['counts']['PASS']} PASS, {len(fails)} FAIL, {summary['counts']['SKIP']} SKIP "
          f"in {run.elapsed():.1f} s")
    for r in fails:
        print(f"  FAIL {r.section}/{r.name}/{r.case}: {r.detail}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
