#!/usr/bin/env python3
"""hopgraph end to end on one GPU: index builds, queries per second and adds on CUDA against the
CPU path of the same machine, on ``bench/bench_scale.py``'s generated corpus (precomputed 384-d
embeddings, embedder ``hashing-384`` for the texts STITCH embeds).

Parts, in this order (the ones that matter most first, so that a run cut short by ``--budget``
still has them; a part whose planned seconds no longer fit the budget is skipped, said so):

1. **data** — ``bench_scale.generate`` of N + A passages for the large index (N = 10⁶, A = 1,000
   added later) and of n + A for the graph index (n = 10⁵); not part of any build figure.
2. **build N, CUDA** — ``Index.build(..., embeddings=X, device="cuda", pipelines=[])`` then each
   shared component and each pipeline of dense + BM25 + G3RAG, timed one by one from the outside,
   then ``save``. Stages: ``embeddings`` (the index object over X: validation), ``dense index``,
   ``BM25``, ``extraction`` (the shared components, each built on first use), ``density`` (the
   seconds of the ``density`` op's dispatches inside the G3RAG fit, timed at the dispatch point),
   ``graph`` (the rest of the G3RAG fit: the gain-kNN graph and the passages' names), ``save``.
   The kernel ops each fit dispatched are recorded with their seconds.
3. **queries N + add, CUDA** — the saved index opened as a server opens it,
   ``Index.load(verify="fast", device="cuda")`` (load seconds reported); dense, bm25, hybrid and
   g3rag each searched with one call of B = 256 questions (the pipelines' own run settings, as in
   ``bench/bench_scale.py``'s query stages): a first call (query-side caches), then the timed one; queries/s, GPU peak memory (torch's allocator, over
   the timed call), the process's resident memory after it, host↔device copies of one more batch
   (``bench/transfers.py``'s ``count_transfers``, when that module is present); then ``add`` of the
   A generated passages with their embeddings (in memory, not committed), after which a dense search
   must find the first one.
4. **queries N + add, CPU path** — the same with ``device="cpu"``, and the **ids** of the two
   devices compared (``bench/gpu_check.py``'s :func:`ranking_diff`: ids equal except positions
   swapped at float near-ties, counted). Both devices open the same saved files, so the comparison
   isolates the device.
5. **build n + queries n** — STITCH, ppr_binary, DMAR and hop: as 2 at n (stages ``hypergraph``,
   ``hypergraph (ppr_binary)``, ``knowledge graph``: each pipeline's fit), then their queries on both
   devices as 3 and 4 (no add).
6. **build N / n, CPU path** — the device-dependent stages again with ``device="cpu"``, over the
   same corpus, X and shared components: every fit that dispatched a kernel op with a Triton path on
   the CUDA side is fitted anew. The other stages — embeddings, dense index, BM25, extraction, save
   and the fits that dispatched no such op — are the same CPU code on both devices: measured once,
   on the CUDA side, shown as "=" in the CPU column and counted in both whole-build totals.

``--interpret`` runs the Triton kernels in interpreter mode on CPU tensors (TRITON_INTERPRET=1
before triton is imported; the "CUDA" side is ``device="cpu"`` with the Triton backend forced), at
tiny sizes: a smoke test of this script without a GPU (``tests/bench/test_gpu_e2e.py`` runs
``--interpret --quick``). ``--quick``: N = 2,000, n = 1,000. Sizes are parameters (``--n-large``,
``--n-graph``, ``--add``, ``--batch``). With ``OUT`` set, ``$OUT/gpu_e2e.json`` is written after
every part. Exit status 0 when every part ran or was skipped for the budget and every ids
comparison passed, 1 otherwise, 2 when there is no CUDA GPU (without ``--interpret``).

On the device machine (its ``python3`` has torch + triton, numpy, scipy; faiss-cpu and bm25s
carried as wheels, ``carry=[".whl"]``, as for ``bench/gpu_check.py``: ``docs/gpu.md``; no ``pip
install -e .``: the package is mapped from this checkout as ``gpu_check.py`` does), one ``run``
with ``timeout_s=420``::

    set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && \\
        PYTHONUNBUFFERED=1 python3 bench/gpu_e2e.py 2>&1 | tee $OUT/gpu_e2e.log

The plan of a full run (:data:`PLAN`, seconds per part on an H200 host with 16 cores, 347 s in
all; the default ``--budget`` is 355 s) is printed first and written in ``docs/gpu.md``.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from gpu_check import INTERPRET_OVERRIDES, Run, ranking_diff, start_run  # noqa: E402

LARGE_PIPELINES = ("dense", "bm25", "g3rag")
GRAPH_PIPELINES = ("stitch", "ppr_binary", "dmar", "hop")
#: pipelines searched on each index (hybrid is fitted on its first search: dense + BM25 only)
LARGE_QUERIES = ("dense", "bm25", "hybrid", "g3rag")
K, N_CHECK = 10, 8
#: the build stage each pipeline's fit is counted in (G3RAG's density op apart: ``density``)
FIT_STAGE = {"dense": "dense index", "bm25": "BM25", "g3rag": "graph", "stitch": "hypergraph",
             "ppr_binary": "hypergraph (ppr_binary)", "dmar": "knowledge graph",
             "hop": "knowledge graph (hop)"}
#: the shared components built before the pipelines, each its own stage
COMPONENT_STAGES = {"dense": "dense index", "bm25": "BM25", "extraction": "extraction"}
#: stages that are the same CPU code on both devices (measured once, on the CUDA side)
SHARED_STAGES = ("embeddings", "dense index", "BM25", "extraction", "save")


@dataclass(frozen=True)
class Sizes:
    large: int   # passages of the dense + BM25 + G3RAG index
    graph: int   # passages of the STITCH + ppr_binary + DMAR index
    add: int     # passages added to the large index
    batch: int   # questions per search call
    dim: int = 384  # embedding dimension: bench_scale's D, or its first ``dim`` coordinates renormalised

    @property
    def embedder(self) -> str:
        """The indexes' text embedder (STITCH embeds its topic texts with it)."""
        return f"hashing-{self.dim}"


#: ``tiny`` (--interpret): the Triton interpreter runs a program ~1000× slower than a GPU, so the
#: sizes and the dimension are those of a smoke test
SIZES = {"full": Sizes(1_000_000, 100_000, 1_000, 256), "quick": Sizes(2_000, 1_000, 100, 256),
         "tiny": Sizes(120, 80, 8, 4, dim=32)}

#: planned seconds of each part of a full run on an H200 host with 16 cores (docs/gpu.md: how they
#: were estimated; 347 s in all); a part is skipped when the elapsed time plus its plan, scaled by
#: its size (linearly), exceeds --budget
PLAN: dict[str, float] = {"data": 35, "build N, CUDA": 155, "queries N + add, CUDA": 15,
                          "queries N + add, CPU path": 18, "build n + queries n": 66, "build N / n, CPU path": 58}


@dataclass(frozen=True)
class Side:
    """One side of the comparison: the ``device`` setting given to hopgraph and the kernel backend
    forced around its calls (None: the device decides)."""

    name: str
    device: str
    backend: str | None

    def context(self):
        from hopgraph.kernels import use_backend

        return use_backend(self.backend) if self.backend else nullcontext()


@dataclass
class Data:
    """A generated corpus of ``n`` passages, the ``add`` passages generated after them, the questions."""

    n: int
    corpus: Any
    X: Any
    new: Any
    X_new: Any
    questions: list[str]
    Q: Any


class E2ERun(Run):
    """gpu_check's run (device, budget, sync) with this script's parts and JSON summary."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        base = SIZES[self.size]
        self.sizes = Sizes(args.n_large or base.large, args.n_graph or base.graph,
                           base.add if args.add is None else args.add, args.batch or base.batch, base.dim)
        self.cuda = Side("cuda", "cpu", "triton") if self.interpret else Side("cuda", "cuda", None)
        self.cpu = Side("cpu", "cpu", "cpu")
        self.parts: dict[str, dict[str, Any]] = {}
        self.builds: list[dict[str, Any]] = []
        self.queries: list[dict[str, Any]] = []
        self.adds: list[dict[str, Any]] = []
        self.loads: list[dict[str, Any]] = []
        self.load_start = [round(x, 2) for x in os.getloadavg()]

    def gpu_reset(self) -> None:
        if not self.interpret:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def gpu_peak_gb(self) -> float | None:
        if self.interpret:
            return None
        import torch

        return torch.cuda.max_memory_allocated() / 2 ** 30

    def summary(self) -> dict[str, Any]:
        import torch
        import triton
        from _common import peak_rss_gb  # imports hopgraph: after ensure_hopgraph_importable

        env = {"mode": "interpret" if self.interpret else "cuda", "size": self.size, "sizes": asdict(self.sizes),
               "torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
               "cpu_count": os.cpu_count(), "load_average_start": self.load_start,
               "load_average_now": [round(x, 2) for x in os.getloadavg()]}
        if not self.interpret:
            env["gpu"] = torch.cuda.get_device_name(0)
        failed = [p for p, r in self.parts.items() if r["status"] == "FAIL"]
        ids_ok = all(q["ids"]["ok"] for q in self.queries if q.get("ids"))
        return {"env": env, "budget_s": self.args.budget, "elapsed_s": round(self.elapsed(), 2), "plan_s": PLAN,
                "parts": self.parts, "builds": self.builds, "queries": self.queries, "adds": self.adds,
                "loads": self.loads,
                "peak_rss_gb": round(peak_rss_gb(), 3), "ok": not failed and ids_ok}

    def write_json(self) -> None:
        out = os.environ.get("OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            Path(out, "gpu_e2e.json").write_text(json.dumps(self.summary(), indent=1, default=str))


# ====================================================================== measurement helpers
def rss_gb() -> float:
    """This process's resident memory now (GiB; the peak where /proc is not there)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        from _common import peak_rss_gb

        return peak_rss_gb()
    return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 30


@contextmanager
def timed_ops(names: tuple[str, ...], totals: dict[str, float], sync: Callable[[], None]) -> Iterator[None]:
    """Add to ``totals[op]`` the wall seconds of every dispatch of the kernel ops ``names`` (either
    implementation, the device synchronised) made inside the block: the ops' registry entries are
    wrapped for its duration and restored after. Measures a stage inside a pipeline's fit from the
    outside (the fit's code is not changed)."""
    from hopgraph.kernels import dispatch

    def timed(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync()
                totals[name] = totals.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    class TimedOp(dispatch.Op):
        @property
        def triton(self) -> Callable[..., Any] | None:
            fn = dispatch.Op.triton.fget(self)
            return None if fn is None else timed(fn, self.name)

    saved = {name: dispatch.get_op(name) for name in names}
    try:
        for name, op in saved.items():
            dispatch._OPS[name] = TimedOp(op.name, timed(op.cpu, name), op.triton_path, op.tensors)
        yield
    finally:
        dispatch._OPS.update(saved)


def transfers_per_batch(search: Callable[[], Any], device: str) -> tuple[dict[str, Any] | None, str]:
    """Host↔device copies of one search batch, counted by ``bench/transfers.py``'s ``count_transfers``
    (on ``"cuda"`` the torch profiler's memcpy events, on ``"cpu"`` the crossings at the kernel
    boundary): ``(counts, "htod H, dtoh D")``; ``(None, "n/a")`` when that module is not in this
    checkout."""
    try:
        from transfers import count_transfers
    except ImportError:
        return None, "n/a"
    counts = count_transfers(search, device=device)
    kept = {k: v for k, v in counts.items() if k in ("htod", "dtoh", "htod_bytes", "dtoh_bytes", "method")}
    return kept, f"htod {kept.get('htod')}, dtoh {kept.get('dtoh')}"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


# ====================================================================== parts
def part(run: E2ERun, name: str, planned: float, fn: Callable[[], None]) -> bool:
    """Run part ``name`` unless ``planned`` seconds no longer fit the budget; record its status."""
    if run.elapsed() + planned > run.args.budget:
        why = f"planned {planned:.0f} s after {run.elapsed():.0f} s: over the budget of {run.args.budget:.0f} s"
        run.parts[name] = {"status": "SKIP", "detail": why}
        print(f"\n== {name}: skipped ({why})", flush=True)
        run.write_json()
        return False
    print(f"\n== {name} (planned {planned:.0f} s, at {run.elapsed():.0f} s)", flush=True)
    t0 = time.perf_counter()
    try:
        fn()
        run.parts[name] = {"status": "DONE", "seconds": round(time.perf_counter() - t0, 2)}
    except Exception as e:  # a failed part is reported; the later ones still run
        traceback.print_exc()
        run.parts[name] = {"status": "FAIL", "seconds": round(time.perf_counter() - t0, 2),
                           "detail": f"{type(e).__name__}: {e}"}
    print(f"   {name}: {run.parts[name]['status']} in {time.perf_counter() - t0:.1f} s", flush=True)
    run.write_json()
    return run.parts[name]["status"] == "DONE"


def make_data(run: E2ERun, n: int, workdir: Path) -> Data:
    """``bench_scale.generate`` of n + add passages: the first n indexed, the rest added later."""
    import numpy as np

    from bench_scale import generate
    from hopgraph.engine.components.corpus import Corpus

    m = n + run.sizes.add
    folder = workdir / f"data-{m}"
    generate(max(m, 256), folder)  # the generator draws 256 questions
    full = Corpus.from_jsonl(folder / "corpus.jsonl")
    X = np.load(folder / "X.npy")
    questions = json.loads((folder / "questions.json").read_text())[:run.sizes.batch]
    Q = np.load(folder / "Q.npy")[:run.sizes.batch]
    if run.sizes.dim < X.shape[1]:
        X, Q = (A[:, :run.sizes.dim] / np.linalg.norm(A[:, :run.sizes.dim], axis=1, keepdims=True) for A in (X, Q))
    corpus = Corpus(full.ids[:n], full.titles[:n], full.texts[:n], source=full.source)
    new = Corpus(full.ids[n:m], full.titles[n:m], full.texts[n:m], source=full.source)
    return Data(n, corpus, X[:n], new, X[n:m], questions, Q)


@dataclass
class Built:
    """An index built by :func:`build`: seconds per stage, and per pipeline the seconds of each kernel
    op with a Triton path that its fit dispatched."""

    index: Any
    stages: dict[str, float]
    kernel_ops: dict[str, dict[str, float]]


def build(run: E2ERun, side: Side, data: Data, pipelines: tuple[str, ...], save_to: Path | None,
          shared: Built | None = None) -> Built:
    """The index of ``pipelines`` over ``data`` built on ``side``, stage by stage (module docstring),
    saved to ``save_to`` when given. With ``shared`` (the other side's build) its components are
    reused (their stages are not run again) and only the pipelines whose fit there dispatched a kernel
    op with a Triton path are fitted again: the others' fits run no device code."""
    from hopgraph import Index
    from hopgraph.engine.pipelines import pipeline_class
    from gpu_check import triton_ops

    stages: dict[str, float] = {}
    kernel_ops: dict[str, dict[str, float]] = {}

    def timed(stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        run.sync()
        stages[stage] = stages.get(stage, 0.0) + time.perf_counter() - t0
        return out

    with side.context():
        if shared is None:
            index = timed("embeddings", lambda: Index.build(data.corpus, embedder=run.sizes.embedder, embeddings=data.X,
                                                            device=side.device, pipelines=[], progress=False))
            used = {kind for p in pipelines for kind in pipeline_class(p).components_used}
            comp = index.components
            build_component = {"dense": lambda: comp.dense, "bm25": lambda: comp.bm25(),
                               "extraction": lambda: comp.extraction()}
            for kind, stage in COMPONENT_STAGES.items():
                if kind in used:
                    timed(stage, build_component[kind])
        else:
            index = Index(data.corpus, data.X, shared.index.embedder, shared.index.embedder_name, device=side.device,
                          progress=False, components=shared.index.components)
            pipelines = tuple(p for p in pipelines if shared.kernel_ops.get(p))
        ops = tuple(triton_ops())
        stages.setdefault("density", 0.0)  # listed before the fits it is taken from
        for p in pipelines:
            seconds = kernel_ops[p] = {}
            with timed_ops(ops, seconds, run.sync):
                timed(FIT_STAGE[p], lambda: index.pipeline(p))
            if "density" in seconds:
                stages[FIT_STAGE[p]] -= seconds["density"]
                stages["density"] += seconds["density"]
        if not stages["density"]:
            del stages["density"]  # no fit here runs the density op
        if save_to is not None:
            timed("save", lambda: index.save(save_to, overwrite=True))
    for stage, seconds in stages.items():
        print(f"   {side.name:4s} {stage:24s} {seconds:9.3f} s", flush=True)
    for p, seconds in kernel_ops.items():
        print(f"   {side.name:4s} {p} fit dispatched: "
              + (", ".join(f"{op} {t:.3f} s" for op, t in seconds.items()) or "no kernel op with a Triton path"),
              flush=True)
    return Built(index, stages, kernel_ops)


def record_build(run: E2ERun, n: int, pipelines: tuple[str, ...], side: Side, built: Built) -> None:
    """Enter ``built``'s stages in the summary; on the CUDA side, the stages that are the same CPU code
    on both devices (:data:`SHARED_STAGES`, and the fits that dispatched no kernel op)."""
    entry = next((b for b in run.builds if b["n"] == n and b["pipelines"] == list(pipelines)), None)
    if entry is None:
        entry = {"n": n, "pipelines": list(pipelines), "stages_s": {}, "kernel_ops_s": {}}
        run.builds.append(entry)
    entry["stages_s"][side.name] = {k: round(v, 4) for k, v in built.stages.items()}
    entry["kernel_ops_s"][side.name] = built.kernel_ops
    if side is run.cuda:
        entry["shared_stages"] = [s for s in built.stages if s in SHARED_STAGES] + \
            [FIT_STAGE[p] for p, ops in built.kernel_ops.items() if not ops and FIT_STAGE[p] not in SHARED_STAGES]


def search_once(index: Any, side: Side, pipeline: str, data: Data, run: E2ERun) -> tuple[Any, Any]:
    """One search call of all the questions (embeddings given) on ``index``, opened on ``side``'s
    device: the pipelines' own run settings (their batch sizes within the call)."""
    small = INTERPRET_OVERRIDES.get(pipeline, {}) if run.interpret else {}
    with side.context():
        return index.search_arrays(data.questions, pipeline, K, query_embeddings=data.Q, **small)


def open_index(run: E2ERun, side: Side, index_dir: Path, n: int) -> Any:
    """``Index.load`` of the saved index on ``side`` (sizes checked, ``verify="fast"``), as a server
    opens it: on CUDA the index chooses there how its graphs are held. The seconds are recorded."""
    from hopgraph import Index

    with side.context():
        t0 = time.perf_counter()
        index = Index.load(index_dir, embedder=run.sizes.embedder, device=side.device, progress=False, verify="fast")
        seconds = time.perf_counter() - t0
    run.loads.append({"side": side.name, "n": n, "seconds": seconds})
    print(f"   {side.name}: Index.load of {n:,} passages {seconds:.2f} s", flush=True)
    return index


def queries(run: E2ERun, side: Side, index: Any, data: Data, pipelines: tuple[str, ...],
            results: dict[tuple[int, str, str], tuple[Any, Any]]) -> None:
    """Queries/s of ``pipelines`` on ``side`` (:func:`search_once`: a first call, then the timed one),
    with GPU peak memory, resident memory and copies per batch; the ids and scores go to ``results``
    and, once both sides have searched a pipeline, are compared (:func:`ranking_diff`)."""
    for p in pipelines:
        entry = next((q for q in run.queries if q["n"] == data.n and q["pipeline"] == p), None)
        if entry is None:
            entry = {"pipeline": p, "n": data.n, "batch": len(data.questions)}
            run.queries.append(entry)
        if run.over_budget():
            entry[side.name] = {"skipped": f"budget of {run.args.budget:.0f} s used"}
            continue
        t0 = time.perf_counter()
        if not run.interpret:  # the interpreter's timings mean nothing: one call there
            search_once(index, side, p, data, run)  # query-side caches built on first use
        first = time.perf_counter() - t0
        run.gpu_reset()
        t0 = time.perf_counter()
        results[data.n, p, side.name] = search_once(index, side, p, data, run)
        run.sync()
        seconds = time.perf_counter() - t0
        figures = {"queries_per_s": len(data.questions) / seconds, "search_s": seconds, "first_search_s": first,
                   "gpu_peak_gb": run.gpu_peak_gb(), "rss_gb": rss_gb()}
        if side is run.cuda:
            figures["transfers"], figures["transfers_text"] = transfers_per_batch(
                lambda: search_once(index, side, p, data, run), "cpu" if run.interpret else "cuda")
        entry[side.name] = figures
        print(f"   {p:10s} {side.name:4s} {figures['queries_per_s']:10,.1f} q/s"
              + ("" if run.interpret else f" (first call {first:.2f} s)"), flush=True)
        if (data.n, p, "cuda") in results and (data.n, p, "cpu") in results:
            diff = ranking_diff(*results[data.n, p, "cuda"], *results[data.n, p, "cpu"], N_CHECK)
            entry["ids"] = {**asdict(diff), "ok": diff.ok}
            print(f"   {p:10s} cuda vs cpu: {diff.message()}", flush=True)
        run.write_json()


def add(run: E2ERun, side: Side, index: Any, data: Data) -> None:
    """An add of ``data.new`` with their embeddings to ``index`` (opened on ``side``; in memory, not
    committed); a dense search then must find the first added passage."""
    with side.context():
        t0 = time.perf_counter()
        index.add(data.new, embeddings=data.X_new)
        run.sync()
        seconds = time.perf_counter() - t0
        ids, _ = index.search_arrays(data.new.texts[:1], "dense", 1, query_embeddings=data.X_new[:1])
    found = int(ids[0, 0]) == data.n
    run.adds.append({"side": side.name, "n": data.n, "added": len(data.new), "add_s": seconds,
                     "pipelines": sorted(index.pipelines), "first_added_found": found})
    print(f"   {side.name}: add of {len(data.new):,} passages {seconds:.3f} s, first added passage found: {found}",
          flush=True)
    if not found:
        raise AssertionError(f"after the add on {side.name}, a dense search of the first added passage's "
                             f"embedding returned row {int(ids[0, 0])}, not {data.n}")


# ====================================================================== report
def report(run: E2ERun) -> None:
    """The tables of the parts that ran, with the date and the load average."""
    from _common import stamp, table
    label = "triton (interp.)" if run.interpret else "cuda"
    print(f"\n== gpu_e2e results · {stamp()} · {os.cpu_count()} CPU cores")
    for b in run.builds:
        cu, cp = b["stages_s"].get("cuda", {}), b["stages_s"].get("cpu")
        has_cpu = cp is not None
        cp = cp or {}
        rows = []
        for stage in cu:
            shared = stage in b.get("shared_stages", ())
            c = cp.get(stage)
            rows.append([stage, fmt_s(cu[stage]), "=" if shared and has_cpu else fmt_s(c),
                         "=" if shared and has_cpu else (f"{c / cu[stage]:.1f}×" if c is not None and cu[stage] > 0
                                                         else "-")])
        total_cu = sum(cu.values())
        total_cp = sum(cp.get(s, cu[s] if s in b.get("shared_stages", ()) else 0.0) for s in cu) if has_cpu else None
        rows.append(["whole build", fmt_s(total_cu), fmt_s(total_cp),
                     f"{total_cp / total_cu:.1f}×" if total_cp and total_cu > 0 else "-"])
        print(f"\n(a) build of {b['n']:,} passages, {' + '.join(b['pipelines'])} (seconds; '=': the same CPU code "
              f"on both devices, measured once: the shared components, save, the fits that dispatched no kernel op)")
        print(table(["stage", f"{label} s", "cpu s", "cpu/" + label], rows))
    if run.queries:
        rows = []
        for q in run.queries:
            cu, cp, ids = q.get("cuda", {}), q.get("cpu", {}), q.get("ids")
            qc, qp = cu.get("queries_per_s"), cp.get("queries_per_s")
            rows.append([q["pipeline"], f"{q['n']:,}", f"{qc:,.0f}" if qc else "-", f"{qp:,.0f}" if qp else "-",
                         f"{qc / qp:.1f}×" if qc and qp else "-",
                         "-" if cu.get("gpu_peak_gb") is None else f"{cu['gpu_peak_gb']:.2f}",
                         f"{cu['rss_gb']:.2f}" if "rss_gb" in cu else "-", cu.get("transfers_text", "-"),
                         "-" if ids is None else ("equal" if ids["ok"] else "DIFFER") + f" ({ids['near_ties']})"])
        print(f"\n(b, d, e) queries, {run.sizes.batch} questions per call, k = {K}; ids of the first {N_CHECK} "
              f"positions compared (near-tie swaps in parentheses)")
        print(table(["pipeline", "N", f"{label} q/s", "cpu q/s", f"{label}/cpu", "GPU peak GB", "RSS GB",
                     "copies/batch", "ids"], rows))
        if any(q.get("cuda", {}).get("transfers_text") == "n/a" for q in run.queries):
            print("copies/batch n/a: bench/transfers.py (the torch profiler's memcpy count) is not in this checkout")
        else:
            print("copies/batch: host→device and device→host copies of one batch (bench/transfers.py: the torch "
                  "profiler's memcpy events on CUDA, the kernel-boundary crossings on CPU tensors)")
    if run.adds:
        rows = [[a["side"] if a["side"] == "cpu" else label, f"{a['n']:,}", f"{a['added']:,}", fmt_s(a["add_s"]),
                 str(a["first_added_found"])] for a in run.adds]
        print("\n(c) add to the saved index opened on each device (in memory, not committed; 'found': a dense "
              "search of the first added passage returns it)")
        print(table(["device", "N", "added", "add s", "found"], rows))
    if run.loads:
        print("\nIndex.load (verify='fast') before the queries: " + ", ".join(
            f"{ld['n']:,} passages on {ld['side'] if ld['side'] == 'cpu' else label} {ld['seconds']:.2f} s"
            for ld in run.loads))
    skipped = {p: r["detail"] for p, r in run.parts.items() if r["status"] != "DONE"}
    for p, why in skipped.items():
        print(f"{run.parts[p]['status']} {p}: {why}")


# ====================================================================== main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="N = 2,000, n = 1,000")
    ap.add_argument("--interpret", action="store_true",
                    help="TRITON_INTERPRET=1 on CPU tensors with tiny sizes (smoke test without a GPU)")
    ap.add_argument("--budget", type=float, default=355.0,
                    help="seconds; a part whose plan no longer fits is skipped (default 355)")
    ap.add_argument("--n-large", type=int, help="passages of the dense + BM25 + G3RAG index (full: 1,000,000)")
    ap.add_argument("--n-graph", type=int, help="passages of the STITCH + ppr_binary + DMAR index (full: 100,000)")
    ap.add_argument("--add", type=int, help="passages added to the large index (full: 1,000)")
    ap.add_argument("--batch", type=int, help="questions per search call (full: 256; at most 256)")
    ap.add_argument("--workdir", help="data and indexes go here (kept); default: a temporary folder, removed")
    args = ap.parse_args(argv)
    for name in ("n_large", "n_graph", "batch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.add is not None and args.add < 1:
        ap.error(f"--add must be positive, got {args.add}")
    if args.batch is not None and args.batch > 256:
        ap.error(f"--batch must be at most 256 (the generator's questions), got {args.batch}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run(args, "gpu_e2e", E2ERun)
    if run is None:
        return 2
    from _common import table  # imports hopgraph: after start_run made it importable

    s, full = run.sizes, SIZES["full"]
    scale = {"data": (s.large + s.graph) / (full.large + full.graph), "build N, CUDA": s.large / full.large,
             "queries N + add, CUDA": s.large / full.large, "queries N + add, CPU path": s.large / full.large,
             "build n + queries n": s.graph / full.graph, "build N / n, CPU path": s.large / full.large}
    plan = {p: PLAN[p] * scale[p] for p in PLAN}
    print(table(["part", "planned s", "cumulative s"],
                [[p, f"{t:.0f}", f"{sum(list(plan.values())[:i + 1]):.0f}"] for i, (p, t) in enumerate(plan.items())]))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="hopgraph-gpu-e2e-"))
    state: dict[str, Any] = {}
    results: dict[tuple[int, str, str], tuple[Any, Any]] = {}  # (n, pipeline, side) -> (ids, scores)
    try:
        def data() -> None:
            state["large"] = make_data(run, s.large, workdir)
            state["graph"] = make_data(run, s.graph, workdir)

        def build_large() -> None:
            state["large built"] = built = build(run, run.cuda, state["large"], LARGE_PIPELINES, workdir / "large")
            record_build(run, s.large, LARGE_PIPELINES, run.cuda, built)

        def queries_and_add(side: Side) -> Callable[[], None]:
            def go() -> None:
                index = open_index(run, side, workdir / "large", s.large)
                try:
                    queries(run, side, index, state["large"], LARGE_QUERIES, results)
                    if not run.over_budget():
                        add(run, side, index, state["large"])
                finally:
                    index.close()
            return go

        def build_graph() -> None:
            built = state["graph built"] = build(run, run.cuda, state["graph"], GRAPH_PIPELINES, workdir / "graph")
            record_build(run, s.graph, GRAPH_PIPELINES, run.cuda, built)
            for side in (run.cuda, run.cpu):
                index = open_index(run, side, workdir / "graph", s.graph)
                try:
                    queries(run, side, index, state["graph"], GRAPH_PIPELINES, results)
                finally:
                    index.close()

        def build_cpu() -> None:
            for key, n, pipelines in (("large", s.large, LARGE_PIPELINES), ("graph", s.graph, GRAPH_PIPELINES)):
                if f"{key} built" in state and not run.over_budget():
                    built = build(run, run.cpu, state[key], pipelines, None, shared=state[f"{key} built"])
                    record_build(run, n, pipelines, run.cpu, built)

        if not part(run, "data", plan["data"], data):
            return finish(run)
        if part(run, "build N, CUDA", plan["build N, CUDA"], build_large):
            part(run, "queries N + add, CUDA", plan["queries N + add, CUDA"], queries_and_add(run.cuda))
            part(run, "queries N + add, CPU path", plan["queries N + add, CPU path"], queries_and_add(run.cpu))
        part(run, "build n + queries n", plan["build n + queries n"], build_graph)
        part(run, "build N / n, CPU path", plan["build N / n, CPU path"], build_cpu)
        state.clear()
        gc.collect()
        return finish(run)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def finish(run: E2ERun) -> int:
    """Print the tables, write the JSON; the exit status."""
    report(run)
    summary = run.summary()
    run.write_json()
    print(f"\ngpu_e2e: {'ok' if summary['ok'] else 'FAILED'} in {run.elapsed():.1f} s "
          f"(peak RSS {summary['peak_rss_gb']:.2f} GiB)")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
