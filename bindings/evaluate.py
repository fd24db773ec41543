"""``hopgraph eval``: Recall@k of pipelines on a benchmark folder, with an index cache.

The folder holds ``corpus.jsonl`` and ``questions.jsonl`` (format of ../shared/data).
The built index is cached under ``cache_dir`` (default: :func:`default_cache_dir`) keyed by corpus
checksum and embedder,
so a second run does not embed again; pipelines missing from the cache are fitted
and the cache is rewritten (atomically).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .engine.components.corpus import Corpus
from .engine.embedders import resolve_embedder
from .engine.errors import HopgraphError, InputError
from .engine.evaluation import load_questions, mean_and_stderr, recall_at_k
from .engine.pipelines import pipeline_class
from .index import Index


#: environment variable naming hopgraph's cache directory (overridden by ``--cache-dir``)
CACHE_DIR_ENV = "HOPGRAPH_CACHE_DIR"


def platform_cache_dir(platform: str | None = None, environ: Mapping[str, str] | None = None,
                       home: Path | None = None) -> Path:
    """The per-user cache directory of hopgraph on ``platform`` (default: this one).

    Linux and other Unix: ``$XDG_CACHE_HOME/hopgraph`` (when set to an absolute path), else
    ``~/.cache/hopgraph``; macOS: ``~/Library/Caches/hopgraph``; Windows:
    ``%LOCALAPPDATA%\\hopgraph\\Cache`` (else ``~\\AppData\\Local\\hopgraph\\Cache``).
    """
    platform = sys.platform if platform is None else platform
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    if platform == "win32":
        local = environ.get("LOCALAPPDATA")
        return (Path(local) if local else home / "AppData" / "Local") / "hopgraph" / "Cache"
    if platform == "darwin":
        return home / "Library" / "Caches" / "hopgraph"
    xdg = environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else home / ".cache") / "hopgraph"


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``hopgraph eval`` caches built indexes: ``$HOPGRAPH_CACHE_DIR`` when set, else
    :func:`platform_cache_dir`."""
    environ = os.environ if environ is None else environ
    override = environ.get(CACHE_DIR_ENV, "")
    return Path(override).expanduser() if override else platform_cache_dir(environ=environ)


def cached_index(data_dir: Path, embedder: str, cache_dir: Path, device: str, pipelines: Sequence[str],
                 progress: bool, params: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Index, Path]:
    """Load the cached index of ``data_dir`` or build it; fit and cache missing pipelines.

    A cached pipeline whose saved parameters differ from the current defaults (say,
    after an upgrade changed them) is updated when only query-time parameters differ,
    else refitted (see :meth:`Index.sync_params`).
    """
    corpus = Corpus.from_jsonl(data_dir / "corpus.jsonl")
    emb = resolve_embedder(embedder)
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in emb.name)
    path = cache_dir / f"{data_dir.name}-{corpus.checksum[:16]}-{safe_name}"
    index = None
    if path.is_dir():
        try:
            index = Index.load(path, embedder=emb, device=device, progress=progress)
        except (HopgraphError, NotImplementedError) as e:
            print(f"[hopgraph eval] cached index {path} unusable ({e}); rebuilding")
    if index is None:
        index = Index.build(corpus, embedder=emb, device=device, pipelines=(), progress=progress)
    index.set_params(params or {})
    updated = False
    for p in pipelines:
        if p in index.pipelines:
            state = index.sync_params(p)
            updated |= state == "updated"
            if state == "dropped":
                print(f"[hopgraph eval] cached {p} was fitted with other parameters; refitting")
    missing = [p for p in pipelines if p not in index.pipelines]
    for p in missing:
        index.pipeline(p)
    if missing or updated or index.path is None:
        index.save(path, overwrite=True)
    return index, path


def evaluate(data_dir: str | Path, pipelines: Sequence[str], ks: Sequence[int], embedder: str = "minilm",
             cache_dir: str | Path | None = None, device: str = "auto", progress: bool = True,
             ablations: bool = False, params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Run every pipeline on every question of ``data_dir``; returns the ``--json`` report.

    ``queries_per_second`` counts the pipeline's batched search over all questions,
    given their embeddings (question embedding is shared by all pipelines and
    reported once as ``query_embedding_seconds``). With ``ablations``, every named
    ablation of each pipeline (its class's ``ablations``) is evaluated as an extra
    row labelled ``pipeline[ablation]``. ``cache_dir`` None: :func:`default_cache_dir`.
    """
    data_dir = Path(data_dir)
    for f in ("corpus.jsonl", "questions.jsonl"):
        if not (data_dir / f).is_file():
            raise InputError(f"{data_dir} must hold {f}")
    if not ks or any(k < 1 for k in ks):
        raise InputError(f"--ks must list positive integers, got {list(ks)}")
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    index, path = cached_index(data_dir, embedder, cache_dir, device, pipelines, progress, params)
    questions = load_questions(data_dir / "questions.jsonl", index.corpus)
    texts = [q.text for q in questions]
    gold = [[index.corpus.position(g) for g in q.gold_ids] for q in questions]
    t0 = time.perf_counter()
    Q = index.embed_queries(texts)
    embed_seconds = time.perf_counter() - t0
    kmax = max(ks)
    results: dict[str, Any] = {}
    for label, name, overrides in _runs(pipelines, ablations):
        t0 = time.perf_counter()
        rows, _ = index.search_arrays(texts, pipeline=name, k=kmax, query_embeddings=Q, **overrides)
        seconds = time.perf_counter() - t0
        entry: dict[str, Any] = {}
        for k in ks:
            mean, err = mean_and_stderr(recall_at_k(rows, gold, k))
            entry[f"recall@{k}"] = mean
            entry[f"recall@{k}_stderr"] = err
        entry["index_seconds"] = index.embed_seconds + index.fit_seconds.get(name, 0.0)
        entry["queries_per_second"] = len(texts) / max(seconds, 1e-9)
        if overrides:
            entry["overrides"] = {k: v for k, v in overrides.items()}
        results[label] = entry
    return {
        "dataset": data_dir.name,
        "n_passages": len(index.corpus),
        "n_questions": len(questions),
        "embedder": index.embedder_name,
        "query_embedding_seconds": embed_seconds,
        "index_path": str(path),
        "results": results,
    }


def _runs(pipelines: Sequence[str], ablations: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, pipeline, overrides) for each evaluation row."""
    runs: list[tuple[str, str, dict[str, Any]]] = []
    for name in pipelines:
        runs.append((name, name, {}))
        if ablations:
            for variant, overrides in pipeline_class(name).ablations.items():
                runs.append((f"{name}[{variant}]", name, dict(overrides)))
    return runs


def plot_report(report: dict[str, Any], ks: Sequence[int], path: str | Path) -> None:
    """Bar chart of Recall@k (one group per pipeline, one bar per k, standard-error whiskers)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise InputError("--plot needs matplotlib (pip install 'hopgraph[plot]')") from e
    names = list(report["results"])
    width = 0.8 / len(ks)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.5))
    x = np.arange(len(names))
    for i, k in enumerate(ks):
        means = [report["results"][n][f"recall@{k}"] for n in names]
        errs = [report["results"][n][f"recall@{k}_stderr"] for n in names]
        ax.bar(x + (i - (len(ks) - 1) / 2) * width, means, width, yerr=errs, capsize=2, label=f"Recall@{k}")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("passage recall")
    ax.set_title(f"{report['dataset']} ({report['n_questions']} questions, {report['embedder']})")
    ax.legend(loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def json_report(report: dict[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """The exact ``--json`` schema of the eval command (issue #2): per pipeline, each Recall@k and its
    standard error (``recall@K_stderr``, the ± of :func:`format_table`), index seconds and queries/s."""
    keep = [key for k in ks for key in (f"recall@{k}", f"recall@{k}_stderr")] + ["index_seconds",
                                                                                 "queries_per_second"]
    return {
        "dataset": report["dataset"],
        "n_passages": report["n_passages"],
        "n_questions": report["n_questions"],
        "results": {p: {key: float(r[key]) for key in keep} for p, r in report["results"].items()},
    }


def format_table(report: dict[str, Any], ks: Sequence[int]) -> str:
    """A plain-text table: Recall@k as mean ± standard error, index time, queries/s."""
    head = ["pipeline"] + [f"R@{k}" for k in ks] + ["index s", "queries/s"]
    rows = []
    for name, r in report["results"].items():
        rows.append([name] + [f"{r[f'recall@{k}']:.3f} ± {r[f'recall@{k}_stderr']:.3f}" for k in ks]
                    + [f"{r['index_seconds']:.1f}", f"{r['queries_per_second']:.1f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    title = (f"{report['dataset']}: {report['n_passages']} passages, {report['n_questions']} questions, "
             f"embedder {report['embedder']}")
    return "\n".join([title, line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])
