"""``hopgraph bench``: the benchmarks a user runs to size a deployment.

Side-by-side tables, each printed with the date and the load average, and written as JSON:

* kernels vs their anchors (:mod:`.kernels`): gain_knn / density vs faiss flat k-NN,
  batched_ppr vs the bare torch CSR loop and igraph per graph family, sparse_diffusion vs scipy;
* the first build in a fresh process vs warm (:mod:`.cold_start`);
* build costs and pipelines' queries/s with and without question embedding (:mod:`.pipelines`).

``hopgraph bench --gpu-compile`` / ``--gpu-model`` run :mod:`.gpu_compile` / :mod:`.gpu_model` instead
(the Triton kernels compiled for sm_80 and sm_90; their performance model), no GPU needed.

Sizes: :data:`QUICK` (a few minutes on a 2-core CPU) or :data:`FULL`, multiplied by ``scale``
(a tiny ``scale`` runs every table in seconds: the test of the command). The ``bench/`` scripts
reuse these functions.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from hopgraph.engine.errors import InputError
from .common import Table, loadavg

#: the table groups, in the order they run
GROUPS = ("kernels", "cold_start", "pipelines")


@dataclass(frozen=True)
class Sizes:
    """Problem sizes of one ``hopgraph bench`` run."""

    gain_n: int          # rows of the gain_knn table
    ppr_n: int           # chunks of the PPR graphs
    ppr_edges: int       # directed edges of the PPR graphs
    ppr_priors: int      # priors (questions) of one batched_ppr call
    igraph_priors: int   # priors run through igraph (its seconds are scaled to ppr_priors)
    diffusion_n: int     # nodes of the sparse_diffusion graph (k = 32 out-edges each)
    diffusion_batch: int  # questions of one sparse_diffusion call (8 seeds each)
    cold_n: int          # rows of the fresh-process build
    cold_rounds: int     # interleaved rounds of the fresh-process sides
    cold_compiled: bool  # add the torch.compile side to the cold-start table
    passages: int        # generated corpus size (without --data)
    questions: int       # questions of the query batch
    repeats: int         # timed runs per row

    def scaled(self, scale: float) -> "Sizes":
        """Every size multiplied by ``scale`` (floors keep each table meaningful)."""
        def s(v: int, low: int) -> int:
            return max(low, int(round(v * scale)))
        return replace(self, gain_n=s(self.gain_n, 40), ppr_n=s(self.ppr_n, 50),
                       ppr_edges=s(self.ppr_edges, 500), ppr_priors=s(self.ppr_priors, 4),
                       igraph_priors=s(self.igraph_priors, 1), diffusion_n=s(self.diffusion_n, 100),
                       diffusion_batch=s(self.diffusion_batch, 4), cold_n=s(self.cold_n, 40),
                       passages=s(self.passages, 24), questions=s(self.questions, 4))


QUICK = Sizes(gain_n=5_000, ppr_n=20_000, ppr_edges=200_000, ppr_priors=16, igraph_priors=4,
              diffusion_n=50_000, diffusion_batch=64, cold_n=10_000, cold_rounds=1, cold_compiled=False,
              passages=1_000, questions=64, repeats=2)
FULL = Sizes(gain_n=20_000, ppr_n=100_000, ppr_edges=1_000_000, ppr_priors=64, igraph_priors=16,
             diffusion_n=200_000, diffusion_batch=256, cold_n=20_000, cold_rounds=2, cold_compiled=True,
             passages=20_000, questions=256, repeats=3)


def parse_groups(text: str | None) -> list[str]:
    """The table groups of a comma-separated ``--only`` (None: all of :data:`GROUPS`)."""
    if text is None:
        return list(GROUPS)
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = sorted(set(names) - set(GROUPS))
    if unknown or not names:
        raise InputError(f"--only takes a comma-separated list of {', '.join(GROUPS)}; got {text!r}")
    return [g for g in GROUPS if g in names]


def run(full: bool = False, scale: float = 1.0, groups: Sequence[str] = GROUPS, data: Path | None = None,
        embedder: str = "minilm", progress: bool = True,
        emit: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark groups, print each table as it finishes (``emit``) and return the
    JSON-ready report ``{"mode", "scale", "sizes", "started", "loadavg_start", "tables"}``."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise InputError(f"--scale must be a positive number, got {scale!r}")
    if data is not None and not (Path(data) / "corpus.jsonl").is_file():
        raise InputError(f"--data {data}: no corpus.jsonl there (a folder of hopgraph eval's layout)")
    sizes = (FULL if full else QUICK).scaled(float(scale))
    report: dict[str, Any] = {"mode": "full" if full else "quick", "scale": float(scale), "sizes": asdict(sizes),
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "loadavg_start": loadavg(), "tables": {}}

    def show(t: Table) -> None:
        report["tables"][t.name] = t.as_json()
        emit(t.render() + "\n")

    for group in groups:
        if group == "kernels":
            from .kernels import FAMILIES, bench_diffusion, bench_gain_knn, bench_ppr

            show(bench_gain_knn(sizes.gain_n, repeats=sizes.repeats))
            for family in FAMILIES:
                show(bench_ppr(family, sizes.ppr_n, sizes.ppr_edges, sizes.ppr_priors, sizes.igraph_priors,
                               repeats=sizes.repeats))
            show(bench_diffusion(sizes.diffusion_n, 32, sizes.diffusion_batch, 8, repeats=sizes.repeats))
        elif group == "cold_start":
            from .cold_start import bench_cold_start

            show(bench_cold_start(sizes.cold_n, rounds=sizes.cold_rounds, compiled=sizes.cold_compiled))
        elif group == "pipelines":
            from .pipelines import bench_pipelines, generated_corpus, read_data

            corpus, questions = (read_data(Path(data), sizes.questions) if data is not None
                                 else generated_corpus(sizes.passages, sizes.questions))
            for t in bench_pipelines(corpus, questions, embedder, repeats=sizes.repeats, progress=progress):
                show(t)
    report["loadavg_end"] = loadavg()
    return report
