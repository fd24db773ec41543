"""``hopgraph eval``: pipelines scored on a benchmark with trec_eval's measures, with an index cache.

A benchmark (:func:`load_benchmark`) is a folder holding a corpus and either hopgraph's
``questions.jsonl``, or BEIR's ``queries.jsonl`` and ``qrels/SPLIT.tsv``; or TREC qrels and
topics files given with a corpus. The corpus is read by :func:`hopgraph.read_corpus` (hopgraph,
BEIR ``_id`` or Pyserini JSON lines, and the other formats it knows).

The built index is cached under ``cache_dir`` (default: :func:`default_cache_dir`) keyed by
corpus checksum and embedder, so a second run does not embed again; pipelines missing from the
cache are fitted and the cache is rewritten (atomically).

The report (:func:`evaluate`) and its ``--json`` form (:func:`json_report`, schema
:data:`SCHEMA_VERSION`) hold, per pipeline, the mean and standard error of every measure of
:func:`hopgraph.engine.evaluation.report_measures`, the per-query scores, and the paired tests of
each pipeline against the baseline (:func:`hopgraph.engine.evaluation.paired_test`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .cache_dir import default_cache_dir
from .engine.errors import HopgraphError, InputError

log = logging.getLogger(__name__)

#: the version of the ``--json`` schema (:func:`json_report`); a key is never renamed or removed
#: within one version
SCHEMA_VERSION = 2
#: the measure the paired significance tests compare
SIGNIFICANCE_MEASURE = "ndcg@10"
#: how deep every pipeline is searched (the deepest measure's cut-off, unless a k is larger)
DEFAULT_DEPTH = 100
#: the k of the Recall@k curve (``recall_curve``; those up to the search depth, and every reported k)
CURVE_KS = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 500, 1000)


class Benchmark:
    """A corpus file and the judged queries to run on it (``format``: ``hopgraph``, ``beir`` or ``trec``)."""

    def __init__(self, name: str, corpus_path: Path, eval_set: Any, fmt: str, split: str | None) -> None:
        self.name, self.corpus_path, self.eval_set, self.format, self.split = name, corpus_path, eval_set, fmt, split


def load_benchmark(data_dir: str | Path, split: str = "test", qrels: str | Path | None = None,
                   topics: str | Path | None = None, corpus: str | Path | None = None) -> Benchmark:
    """The benchmark at ``data_dir``: with ``qrels`` and ``topics``, TREC files over ``corpus``
    (default ``data_dir/corpus.jsonl``); else ``questions.jsonl`` (hopgraph) or ``queries.jsonl``
    and ``qrels/SPLIT.tsv`` (BEIR) beside ``data_dir/corpus.jsonl``. InputError naming what is
    missing. Queries without a relevant document are dropped."""
    from .engine import evaluation

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputError(f"benchmark folder {data_dir} does not exist")
    corpus_path = Path(corpus) if corpus is not None else data_dir / "corpus.jsonl"
    if not corpus_path.exists():
        raise InputError(f"{data_dir} must hold corpus.jsonl (or give --corpus)")
    if (qrels is None) != (topics is None):
        raise InputError("--qrels and --topics go together (TREC judgements and the queries they judge)")
    if qrels is not None:
        eval_set, fmt, split = evaluation.trec_eval_set(qrels, topics), "trec", None
    elif (data_dir / "questions.jsonl").is_file():
        questions = evaluation.load_questions(data_dir / "questions.jsonl")
        eval_set = evaluation.questions_eval_set(questions, str(data_dir / "questions.jsonl"))
        fmt, split = "hopgraph", None
    elif (data_dir / "queries.jsonl").is_file():
        eval_set, fmt = evaluation.load_beir(data_dir, split), "beir"
    else:
        raise InputError(f"{data_dir} holds neither questions.jsonl (hopgraph) nor queries.jsonl and qrels/ (BEIR); "
                         "for TREC files give --qrels and --topics")
    judged = eval_set.judged()
    if not judged.queries:
        raise InputError(f"{eval_set.source}: no query has a relevant document")
    if len(judged.queries) < len(eval_set.queries):
        log.warning("%s: %d of %d queries have no relevant document and are not evaluated", eval_set.source,
                    len(eval_set.queries) - len(judged.queries), len(eval_set.queries))
    return Benchmark(data_dir.name, corpus_path, judged, fmt, split)


def cached_index(data_dir: Path, embedder: str, cache_dir: Path, device: str, pipelines: Sequence[str],
                 progress: bool, params: Mapping[str, Mapping[str, Any]] | None = None,
                 corpus_path: Path | None = None) -> tuple[Any, Path]:
    """Load the cached index of the corpus (``corpus_path``, default ``data_dir/corpus.jsonl``) or
    build it; fit and cache missing pipelines.

    A cached pipeline whose saved parameters differ from the current defaults (say,
    after an upgrade changed them) is updated when only query-time parameters differ,
    else refitted (see :meth:`Index.sync_params`).
    """
    from .engine.components.corpus import read_corpus
    from .engine.embedders import resolve_embedder
    from .index import Index

    corpus = read_corpus(corpus_path or data_dir / "corpus.jsonl")
    emb = resolve_embedder(embedder)
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in emb.name)
    path = cache_dir / f"{data_dir.name}-{corpus.checksum[:16]}-{safe_name}"
    index = None
    if path.is_dir():
        try:
            index = Index.load(path, embedder=emb, device=device, progress=progress)
        except (HopgraphError, NotImplementedError) as e:
            log.warning("cached index %s unusable (%s); rebuilding", path, e)
    if index is None:
        index = Index.build(corpus, embedder=emb, device=device, pipelines=(), progress=progress)
    index.set_params(params or {})
    updated = False
    for p in pipelines:
        if p in index.pipelines:
            state = index.sync_params(p)
            updated |= state == "updated"
            if state == "dropped":
                log.info("cached %s was fitted with other parameters; refitting", p)
    missing = [p for p in pipelines if p not in index.pipelines]
    for p in missing:
        index.pipeline(p)
    if missing or updated or index.path is None:
        index.save(path, overwrite=True)
    return index, path


def evaluate(data_dir: str | Path, pipelines: Sequence[str], ks: Sequence[int], embedder: str = "minilm",
             cache_dir: str | Path | None = None, device: str = "auto", progress: bool = True,
             ablations: bool = False, params: Mapping[str, Mapping[str, Any]] | None = None, *,
             split: str = "test", qrels: str | Path | None = None, topics: str | Path | None = None,
             corpus: str | Path | None = None, depth: int | None = None, run_dir: str | Path | None = None,
             baseline: str | None = None, strict: bool = False) -> dict[str, Any]:
    """Run every pipeline on every judged query of the benchmark (:func:`load_benchmark`); returns
    the report (:func:`json_report` selects its ``--json`` form).

    Each pipeline is searched for the largest k of ``ks`` (what ``search(k=max(ks))`` returns),
    which gives Recall@k and P@k for every k of ``ks`` and ``queries_per_second``, and, when
    ``depth`` is larger, once more ``depth`` deep (default: :data:`DEFAULT_DEPTH`), which gives
    nDCG@10, MRR@10, MAP@100, the Recall@k curve (``recall_curve``) and the run files: a pipeline's
    top k is not always the head of its top ``depth`` (a graph pipeline's candidates grow with k).
    ``run_dir``: a TREC run file ``LABEL.run`` per pipeline (the deep search) is written there.
    ``baseline`` (default: the first pipeline): every other row is compared with it on
    :data:`SIGNIFICANCE_MEASURE` by :func:`~hopgraph.engine.evaluation.paired_test`.
    ``queries_per_second`` counts the pipeline's batched search over all queries, given their
    embeddings (query embedding is shared by all pipelines and reported once as
    ``query_embedding_seconds``). With ``ablations``, every named ablation of each pipeline (its
    class's ``ablations``) is an extra row labelled ``pipeline[ablation]``. ``cache_dir`` None:
    :func:`default_cache_dir`.

    Judged documents the corpus does not hold are counted (the report's ``judged_documents``) and
    warned about (:class:`~hopgraph.engine.evaluation.UnjudgeableWarning`: their count, their share
    of the judged documents and a few ids); with ``strict`` (and always for hopgraph's
    ``questions.jsonl``, whose gold ids must be passages) they are an InputError instead.
    """
    from .engine import evaluation

    measures = evaluation.report_measures(list(ks))
    depth = search_depth(ks, depth)
    bench = load_benchmark(data_dir, split, qrels, topics, corpus)
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    index, path = cached_index(Path(data_dir), embedder, cache_dir, device, pipelines, progress, params,
                               bench.corpus_path)
    eval_set = bench.eval_set
    coverage = check_coverage(eval_set, index.corpus, strict or bench.format == "hopgraph")
    qids, texts = list(eval_set.queries), list(eval_set.queries.values())
    t0 = time.perf_counter()
    Q = index.embed_queries(texts)
    embed_seconds = time.perf_counter() - t0
    runs = _runs(pipelines, ablations)
    labels = [label for label, _, _ in runs]
    baseline = labels[0] if baseline is None else baseline
    if baseline not in labels:
        raise InputError(f"baseline {baseline!r} is not an evaluated pipeline ({', '.join(labels)})")
    if run_dir is not None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
    plan = SearchPlan.of(measures, ks, depth)
    results: dict[str, Any] = {}
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    recall_curve: dict[str, dict[str, tuple[float, float]]] = {}
    run_files: dict[str, str] = {}
    for label, name, overrides in runs:
        results[label], per_query[label], recall_curve[label], run = score_pipeline(
            index, eval_set, texts, Q, name, overrides, plan)
        if run_dir is not None:
            run_files[label] = str(Path(run_dir) / f"{_file_label(label)}.run")
            evaluation.write_trec_run(run_files[label], run, _file_label(label))
    tests = paired_tests(per_query, baseline, qids)
    return {
        "dataset": bench.name,
        "format": bench.format,
        "split": bench.split,
        "n_passages": len(index.corpus),
        "n_questions": len(qids),
        "judged_documents": coverage.to_dict(),
        "embedder": index.embedder_name,
        "depth": depth,
        "measures": measures,
        "query_embedding_seconds": embed_seconds,
        "index_path": str(path),
        "results": results,
        "per_query": per_query,
        "recall_curve": recall_curve,
        "significance": {"measure": SIGNIFICANCE_MEASURE, "baseline": baseline, "tests": tests},
        "run_files": run_files,
    }


def search_depth(ks: Sequence[int], depth: int | None) -> int:
    """How deep :func:`evaluate` searches: ``depth``, default :data:`DEFAULT_DEPTH` or the largest k
    when larger; InputError unless it is an integer at least the largest k."""
    depth = max([DEFAULT_DEPTH, *ks]) if depth is None else depth
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < max(ks):
        raise InputError(f"depth must be an integer at least the largest k ({max(ks)}), got {depth!r}")
    return depth


def paired_tests(per_query: Mapping[str, Mapping[str, Mapping[str, float]]], baseline: str,
                 qids: Sequence[str]) -> dict[str, Any]:
    """Each run's paired test (:func:`~hopgraph.engine.evaluation.paired_test`) against ``baseline`` on
    :data:`SIGNIFICANCE_MEASURE`, over the queries ``qids`` (``per_query[label][qid][measure]``)."""
    from .engine import evaluation

    base = [per_query[baseline][q][SIGNIFICANCE_MEASURE] for q in qids]
    return {label: evaluation.paired_test(base, [scores[q][SIGNIFICANCE_MEASURE] for q in qids])
            for label, scores in per_query.items() if label != baseline}


@dataclass(frozen=True)
class SearchPlan:
    """What each pipeline's two searches score: the table search (``table_k`` deep) the cut-off
    measures ``cut`` (Recall@k, P@k), the deep search (``depth`` deep, run only when deeper) the
    others (``deep``) and the Recall@k curve (``curve``)."""

    measures: list[str]
    table_k: int
    depth: int
    cut: list[str]
    deep: list[str]
    curve: list[str]

    @classmethod
    def of(cls, measures: list[str], ks: Sequence[int], depth: int) -> "SearchPlan":
        """The plan of ``measures`` for the reported ``ks`` and the search ``depth``."""
        cut = [m for m in measures if m.split("@")[0] in ("recall", "p")]
        curve = [f"recall@{k}" for k in sorted({k for k in CURVE_KS if k <= depth} | set(ks))]
        return cls(measures, max(ks), depth, cut, [m for m in measures if m not in cut], curve)


def score_pipeline(index: Any, eval_set: Any, texts: list[str], Q: np.ndarray, name: str,
                   overrides: Mapping[str, Any], plan: SearchPlan) -> tuple[dict[str, Any], dict, dict, Any]:
    """Search every query of ``eval_set`` (``texts``, embedded as ``Q``) with pipeline ``name`` and
    its search-parameter ``overrides`` as ``plan`` says; returns the report's entry (every measure's
    mean and standard error, ``index_seconds``, ``queries_per_second`` of the table search,
    ``overrides``), the per-query scores, the Recall@k curve and the deep search's run."""
    from .engine import evaluation

    qids = list(eval_set.queries)
    t0 = time.perf_counter()
    rows, scores = index.search_arrays(texts, pipeline=name, k=plan.table_k, query_embeddings=Q, **overrides)
    seconds = time.perf_counter() - t0
    scored = evaluation.evaluate_run(eval_set.qrels, evaluation.rows_run(qids, rows, scores, index.corpus.ids),
                                     plan.cut)
    if plan.depth > plan.table_k:
        rows, scores = index.search_arrays(texts, pipeline=name, k=plan.depth, query_embeddings=Q, **overrides)
    run = evaluation.rows_run(qids, rows, scores, index.corpus.ids)
    deep_scored = evaluation.evaluate_run(eval_set.qrels, run, [*plan.deep, *plan.curve])
    per_query = {q: {m: (scored if m in plan.cut else deep_scored)[q][m] for m in plan.measures} for q in qids}
    entry: dict[str, Any] = {}
    for m in plan.measures:
        entry[m], entry[f"{m}_stderr"] = evaluation.mean_and_stderr([per_query[q][m] for q in qids])
    curve = {m.split("@")[1]: evaluation.mean_and_stderr([deep_scored[q][m] for q in qids]) for m in plan.curve}
    entry["index_seconds"] = index.embed_seconds + index.fit_seconds.get(name, 0.0)
    entry["queries_per_second"] = len(texts) / max(seconds, 1e-9)
    if overrides:
        entry["overrides"] = dict(overrides)
    return entry, per_query, curve, run


def check_coverage(eval_set: Any, corpus: Any, strict: bool) -> Any:
    """The :class:`~hopgraph.engine.evaluation.Coverage` of ``eval_set``'s judgements by ``corpus``;
    judged documents it does not hold are an InputError when ``strict``, else an
    :class:`~hopgraph.engine.evaluation.UnjudgeableWarning` (one line: count, share, examples)."""
    import warnings

    from .engine import evaluation

    coverage = evaluation.judged_coverage(eval_set.qrels, corpus.holds)
    if coverage.missing:
        message = coverage.message(eval_set.source, corpus.source)
        if strict:
            raise InputError(message)
        warnings.warn(message, evaluation.UnjudgeableWarning, stacklevel=3)
    return coverage


def _file_label(label: str) -> str:
    """A run tag / file name for a row label (``g3rag[no_bridge]`` -> ``g3rag-no_bridge``)."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in label).strip("-")


def _runs(pipelines: Sequence[str], ablations: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, pipeline, overrides) for each evaluation row."""
    from .engine.pipelines import pipeline_class

    runs: list[tuple[str, str, dict[str, Any]]] = []
    for name in pipelines:
        runs.append((name, name, {}))
        if ablations:
            for variant, overrides in pipeline_class(name).ablations.items():
                runs.append((f"{name}[{variant}]", name, dict(overrides)))
    return runs


def plot_report(report: dict[str, Any], path: str | Path) -> None:
    """Recall@k curves (the report's ``recall_curve``), one line per row, k on a log axis, with a
    band of one standard error."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise InputError("--plot needs matplotlib (pip install 'hopgraph[plot]')") from e
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    for label, points in report["recall_curve"].items():
        xs = np.array([int(k) for k in points])
        ys = np.array([points[k][0] for k in points])
        err = np.array([points[k][1] for k in points])
        ax.plot(xs, ys, marker=".", label=label)
        ax.fill_between(xs, ys - err, ys + err, alpha=0.15)
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("k (passages retrieved)")
    ax.set_ylabel("Recall@k")
    ax.set_title(f"{report['dataset']} ({report['n_questions']} queries, {report['embedder']})")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def json_report(report: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` document (schema :data:`SCHEMA_VERSION`): ``schema_version``, ``dataset``,
    ``format``, ``split``, ``n_passages``, ``n_questions``, ``judged_documents`` (``judged``: the
    distinct judged document ids, ``missing``: those not in the corpus, ``missing_share``), ``embedder``,
    ``depth``, ``measures``;
    ``results`` — per row, each measure and its standard error (``MEASURE_stderr``, the ± of
    :func:`format_table`), ``index_seconds`` and ``queries_per_second``; ``per_query`` — per row,
    ``{query id: {measure: value}}``; ``recall_curve`` — per row, ``{k: [mean, standard error]}``
    of Recall@k of the deep search at :data:`CURVE_KS` up to the depth and every reported k;
    ``significance`` — ``measure``, ``baseline`` and per other
    row ``mean_difference``, ``t_pvalue``, ``randomization_pvalue``; ``run_files`` — per row, the
    TREC run file written (empty without ``--run-dir``)."""
    keep = [key for m in report["measures"] for key in (m, f"{m}_stderr")] + ["index_seconds", "queries_per_second"]
    return {
        "schema_version": SCHEMA_VERSION,
        **{key: report[key] for key in ("dataset", "format", "split", "n_passages", "n_questions",
                                        "judged_documents", "embedder", "depth", "measures")},
        "results": {p: {key: float(r[key]) for key in keep} for p, r in report["results"].items()},
        "per_query": report["per_query"],
        "recall_curve": {p: {k: list(v) for k, v in c.items()} for p, c in report["recall_curve"].items()},
        "significance": report["significance"],
        "run_files": report["run_files"],
    }


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table: every measure as mean ± standard error, index time, queries/s; then the
    paired tests against the baseline."""
    short = {"ndcg": "nDCG", "mrr": "MRR", "map": "MAP", "recall": "R", "p": "P"}
    head = (["pipeline"] + [f"{short[m.split('@')[0]]}@{m.split('@')[1]}" for m in report["measures"]]
            + ["index s", "queries/s"])
    rows = []
    for name, r in report["results"].items():
        rows.append([name] + [f"{r[m]:.3f} ± {r[f'{m}_stderr']:.3f}" for m in report["measures"]]
                    + [f"{r['index_seconds']:.1f}", f"{r['queries_per_second']:.1f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    split = f" ({report['split']})" if report.get("split") else ""
    title = (f"{report['dataset']}{split}: {report['n_passages']} passages, {report['n_questions']} queries, "
             f"embedder {report['embedder']}, searched {report['depth']} deep")
    cover = report["judged_documents"]
    missing = (f"judged documents not in the corpus: {cover['missing']} of {cover['judged']} "
               f"({cover['missing_share']:.1%})")
    out = [title, missing, line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    sig = report["significance"]
    if sig["tests"]:
        out.append(f"paired tests of {sig['measure']} against {sig['baseline']} (two-sided p: t-test, randomisation):")
        for label, t in sig["tests"].items():
            out.append(f"  {label}: {t['mean_difference']:+.3f}  p = {t['t_pvalue']:.3g}, "
                       f"{t['randomization_pvalue']:.3g}")
    return "\n".join(out)
