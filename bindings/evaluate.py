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
                   topics: str | Path | None = None, corpus: str | Path | None = None,
                   corpus_needed: bool = True) -> Benchmark:
    """The benchmark at ``data_dir``: with ``qrels`` and ``topics``, TREC files over ``corpus``
    (default ``data_dir/corpus.jsonl``); else ``questions.jsonl`` (hopgraph) or ``queries.jsonl``
    and ``qrels/SPLIT.tsv`` (BEIR) beside ``data_dir/corpus.jsonl``. InputError naming what is
    missing (the corpus only when ``corpus_needed``: a built index brings its own). Queries without
    a relevant document are dropped."""
    from .engine import evaluation

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputError(f"benchmark folder {data_dir} does not exist")
    corpus_path = Path(corpus) if corpus is not None else data_dir / "corpus.jsonl"
    if corpus_needed and not corpus_path.exists():
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
    build it (fitting ``pipelines`` in the build, so that a pipeline that late-chunks texts pools them
    in the passages' own forward pass); fit and cache missing pipelines.

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
    if index is None:  # the pipelines fitted in the build: one forward pass gives X and STITCH's pooled texts
        index = Index.build(corpus, embedder=emb, device=device, pipelines=pipelines, params=params,
                            progress=progress)
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
             baseline: str | None = None, strict: bool = False, index_dir: str | Path | None = None
             ) -> dict[str, Any]:
    """Run every pipeline on every judged query of the benchmark (:func:`load_benchmark`); returns
    the report (:func:`json_report` selects its ``--json`` form).

    Each pipeline is searched for the largest k of ``ks`` (what ``search(k=max(ks))`` returns),
    which gives Recall@k and P@k for every k of ``ks`` and ``queries_per_second``, and, when
    ``depth`` is larger, once more ``depth`` deep (default: :data:`DEFAULT_DEPTH`), which gives
    nDCG@10, MRR@10, MAP@100, the Recall@k curve (``recall_curve``) and the run files: a pipeline's
    top k is not always the head of its top ``depth`` (a graph pipeline's candidates grow with k).
    ``run_dir``: the TREC run files of every search are written there — ``LABEL.run`` (the deep
    search) and, when it is a separate search, ``LABEL.topK.run`` (the search for the largest k) —
    each measure computed from exactly the run file it comes from (see
    :func:`~hopgraph.engine.evaluation.write_trec_run`).
    ``baseline`` (default: the first pipeline): every other row is compared with it on
    :data:`SIGNIFICANCE_MEASURE` by :func:`~hopgraph.engine.evaluation.paired_test`.
    ``queries_per_second`` counts the pipeline's batched search over all queries, given their
    embeddings (query embedding is shared by all pipelines and reported once as
    ``query_embedding_seconds``). With ``ablations``, every named ablation of each pipeline (its
    class's ``ablations``) is an extra row labelled ``pipeline[ablation]``. ``cache_dir`` None:
    :func:`default_cache_dir`. ``index_dir``: evaluate that built index (its corpus, embedder and
    fitted pipelines; nothing is built, fitted or cached) instead of the cached index of the
    benchmark's corpus.

    Judged documents the corpus does not hold are counted (the report's ``judged_documents``) and
    warned about (:class:`~hopgraph.engine.evaluation.UnjudgeableWarning`: their count, their share
    of the judged documents and a few ids); with ``strict`` (and always for hopgraph's
    ``questions.jsonl``, whose gold ids must be passages) they are an InputError instead.
    """
    from .engine import evaluation

    measures = evaluation.report_measures(list(ks))
    depth = max([DEFAULT_DEPTH, *ks]) if depth is None else depth
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < max(ks):
        raise InputError(f"depth must be an integer at least the largest k ({max(ks)}), got {depth!r}")
    bench = load_benchmark(data_dir, split, qrels, topics, corpus, corpus_needed=index_dir is None)
    if index_dir is not None:
        index, path = evaluated_index(index_dir, pipelines, device, progress), Path(index_dir)
    else:
        cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
        index, path = cached_index(Path(data_dir), embedder, cache_dir, device, pipelines, progress, params,
                                   bench.corpus_path)
    coverage = check_coverage(bench.eval_set, index.corpus, strict or bench.format == "hopgraph")
    runs = _runs(pipelines, ablations)
    labels = [label for label, _, _ in runs]
    baseline = labels[0] if baseline is None else baseline
    if baseline not in labels:
        raise InputError(f"baseline {baseline!r} is not an evaluated pipeline ({', '.join(labels)})")
    if run_dir is not None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
    rows = RowEvaluation(index, bench.eval_set, measures, ks, depth, run_dir)
    results = {label: rows.evaluate(label, name, overrides) for label, name, overrides in runs}
    base = [rows.per_query[baseline][q][SIGNIFICANCE_MEASURE] for q in rows.qids]
    tests = {label: evaluation.paired_test(base, [rows.per_query[label][q][SIGNIFICANCE_MEASURE] for q in rows.qids])
             for label in labels if label != baseline}
    return {
        "dataset": bench.name,
        "format": bench.format,
        "split": bench.split,
        "n_passages": len(index.corpus),
        "n_questions": len(rows.qids),
        "judged_documents": coverage.to_dict(),
        "embedder": index.embedder_name,
        "depth": depth,
        "measures": measures,
        "query_embedding_seconds": rows.embed_seconds,
        "index_path": str(path),
        "results": results,
        "per_query": rows.per_query,
        "recall_curve": rows.recall_curve,
        "significance": {"measure": SIGNIFICANCE_MEASURE, "baseline": baseline, "tests": tests},
        "run_files": rows.run_files,
        "table_run_files": rows.table_run_files,
    }


def evaluated_index(index_dir: str | Path, pipelines: Sequence[str], device: str, progress: bool) -> Any:
    """The built index at ``index_dir`` (its own embedder), holding every pipeline of ``pipelines``
    (InputError naming the missing ones and those it holds: an evaluated index is not refitted)."""
    from .index import Index

    index = Index.load(index_dir, device=device, progress=progress)
    missing = [p for p in pipelines if p not in index.pipelines]
    if missing:
        raise InputError(f"index {index_dir} holds no fitted {', '.join(missing)} (it holds: "
                         f"{', '.join(index.pipelines) or 'none'}); fit them with `hopgraph index` or evaluate others")
    return index


class RowEvaluation:
    """The rows of one report (:func:`evaluate`): the queries embedded once, then per row the table
    search (the largest of ``ks`` deep: Recall@k, P@k, queries/s) and, when ``depth`` is larger, the deep search
    (the other measures and the Recall@k curve), each scored from exactly the run that is written to
    ``run_dir``."""

    def __init__(self, index: Any, eval_set: Any, measures: Sequence[str], ks: Sequence[int], depth: int,
                 run_dir: str | Path | None) -> None:
        self.index, self.eval_set, self.measures = index, eval_set, list(measures)
        self.table_k, self.depth, self.run_dir = max(ks), depth, run_dir
        self.qids, self.texts = list(eval_set.queries), list(eval_set.queries.values())
        t0 = time.perf_counter()
        self.Q = index.embed_queries(self.texts)
        self.embed_seconds = time.perf_counter() - t0
        self.cut = [m for m in measures if m.split("@")[0] in ("recall", "p")]  # from the table search
        self.deep = [m for m in measures if m not in self.cut]                  # from the deep search
        self.curve = [f"recall@{k}" for k in sorted({k for k in CURVE_KS if k <= depth} | set(ks))]
        self.per_query: dict[str, dict[str, dict[str, float]]] = {}
        self.recall_curve: dict[str, dict[str, tuple[float, float]]] = {}
        self.run_files: dict[str, str] = {}
        self.table_run_files: dict[str, str] = {}

    def search(self, name: str, k: int, overrides: Mapping[str, Any]) -> tuple[dict, float]:
        """``(run, seconds)`` of pipeline ``name``'s batched search ``k`` deep over every query."""
        from .engine import evaluation

        t0 = time.perf_counter()
        rows, scores = self.index.search_arrays(self.texts, pipeline=name, k=k, query_embeddings=self.Q, **overrides)
        seconds = time.perf_counter() - t0
        return evaluation.rows_run(self.qids, rows, scores, self.index.corpus.ids), seconds

    def write(self, label: str, run: Mapping, table: bool) -> None:
        """Write ``run`` as ``LABEL.run`` (``table``: ``LABEL.topK.run``) when there is a run folder."""
        from .engine import evaluation

        if self.run_dir is None:
            return
        tag = _file_label(label)
        path = str(Path(self.run_dir) / (f"{tag}.top{self.table_k}.run" if table else f"{tag}.run"))
        evaluation.write_trec_run(path, run, tag)
        (self.table_run_files if table else self.run_files)[label] = path

    def evaluate(self, label: str, name: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The report row ``label`` (pipeline ``name`` with ``overrides``): every measure's mean and
        standard error, index seconds, queries/s; its per-query scores and Recall@k curve are kept."""
        from .engine import evaluation

        qrels = self.eval_set.qrels
        table_run, seconds = self.search(name, self.table_k, overrides)
        scored = evaluation.evaluate_run(qrels, table_run, self.cut)
        run = table_run
        if self.depth > self.table_k:
            self.write(label, table_run, table=True)
            run, _ = self.search(name, self.depth, overrides)
        self.write(label, run, table=False)
        deep_scored = evaluation.evaluate_run(qrels, run, [*self.deep, *self.curve])
        self.per_query[label] = {q: {m: (scored if m in self.cut else deep_scored)[q][m] for m in self.measures}
                                 for q in self.qids}
        entry: dict[str, Any] = {}
        for m in self.measures:
            entry[m], entry[f"{m}_stderr"] = evaluation.mean_and_stderr([self.per_query[label][q][m] for q in self.qids])
        self.recall_curve[label] = {m.split("@")[1]: evaluation.mean_and_stderr([deep_scored[q][m] for q in self.qids])
                                    for m in self.curve}
        entry["index_seconds"] = self.index.embed_seconds + self.index.fit_seconds.get(name, 0.0)
        entry["queries_per_second"] = len(self.texts) / max(seconds, 1e-9)
        if overrides:
            entry["overrides"] = dict(overrides)
        return entry


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
    TREC run file of the deep search (empty without ``--run-dir``); ``table_run_files`` — per row, the
    run file of the search for the largest k, where that is a separate search (R@k and P@k come from
    it)."""
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
        "table_run_files": report["table_run_files"],
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
