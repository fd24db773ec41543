"""Retrieval evaluation: queries, graded relevance judgements (qrels), ranked runs, trec_eval measures.

Inputs (each an :class:`EvalSet` of ordered queries and qrels):

* hopgraph's ``questions.jsonl`` (``id, question, answer, type, gold_ids``; every gold id relevance 1):
  :func:`load_questions`, :func:`questions_eval_set`;
* a BEIR folder: ``queries.jsonl`` (``_id``, ``text``) and ``qrels/SPLIT.tsv`` (header row, then
  ``query-id  corpus-id  score``, graded): :func:`load_beir`;
* TREC qrels (``QID ITER DOCID REL``) and topics (``QID<TAB>TEXT`` lines, or SGML ``<top>`` blocks
  with ``<num>`` and ``<title>``): :func:`load_trec_qrels`, :func:`load_trec_topics`.

Measures (:data:`MEASURES`) are trec_eval's, computed by ``pytrec_eval`` on the ranking exactly as a
pipeline returned it (the documents are handed to trec_eval with strictly decreasing scores, so its
re-sorting of tied scores by document id never applies): ``ndcg@10`` (linear gains, trec_eval's
``ndcg_cut``), ``mrr@10`` (``recip_rank`` of the top 10), ``map@100`` (``map_cut``), ``recall@k``
and ``p@k``. A document counts as relevant when its relevance is at least 1. A query with no
retrieved document scores 0 on every measure; queries without judgements are not evaluated.
Judged documents the corpus does not hold can never be retrieved and lower the scores:
:func:`judged_coverage` counts them (:class:`UnjudgeableWarning` or, strict, an error).
Standard errors and the paired tests between runs (:func:`paired_test`) are scipy's.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from .components.corpus import Corpus
from .components.records import decode_lines, input_path, iter_jsonl, read_text
from .errors import InputError
from .ranking import is_k

#: ``{query id: {document id: relevance}}``
Qrels = Mapping[str, Mapping[str, int]]
#: ``{query id: [(document id, score), ...]}`` best first
Run = Mapping[str, Sequence[tuple[str, float]]]
#: the measures :func:`evaluate_run` knows, as written in reports (``K`` any positive integer)
MEASURES = ("ndcg@K", "mrr@K", "map@K", "recall@K", "p@K")
#: the measures reported by default besides Recall@k and P@k at each requested k
HEADLINE = ("ndcg@10", "mrr@10", "map@100")
_MEASURE = re.compile(r"^(ndcg|mrr|map|recall|p)@([1-9][0-9]*)$")


#: how many missing document ids a :class:`Coverage` message quotes
EXAMPLES = 3


class UnjudgeableWarning(UserWarning):
    """The qrels judge documents the corpus does not hold: they are never retrieved, so the scores
    of their queries are lowered (:func:`judged_coverage`)."""


@dataclass(frozen=True)
class Coverage:
    """The judged documents of some qrels (distinct document ids, any relevance) and those of them
    the corpus does not hold (in qrels order)."""

    judged: int
    missing: tuple[str, ...]

    @property
    def share(self) -> float:
        """The share of the judged documents the corpus does not hold (0.0 for none judged)."""
        return len(self.missing) / self.judged if self.judged else 0.0

    def message(self, qrels_source: str, corpus_source: str) -> str:
        """One line: how many judged documents are missing, their share and a few of their ids."""
        more = ", ..." if len(self.missing) > EXAMPLES else ""
        return (f"{qrels_source}: {len(self.missing)} of {self.judged} judged document id(s) ({self.share:.1%}) are "
                f"not in the corpus {corpus_source}, e.g. {', '.join(map(repr, self.missing[:EXAMPLES]))}{more}; "
                "they can never be retrieved and lower the scores")

    def to_dict(self) -> dict[str, float]:
        """The report's ``judged_documents`` entry: judged count, missing count and missing share."""
        return {"judged": self.judged, "missing": len(self.missing), "missing_share": self.share}


def judged_coverage(qrels: Qrels, holds: Callable[[str], bool]) -> Coverage:
    """The :class:`Coverage` of ``qrels`` by a corpus: ``holds(document id)`` says whether it holds
    the document."""
    judged = dict.fromkeys(d for rels in qrels.values() for d in rels)
    return Coverage(len(judged), tuple(d for d in judged if not holds(d)))


@dataclass(frozen=True)
class Question:
    """A question of hopgraph's ``questions.jsonl``: its id, text, the ids of its gold passages,
    and optionally its answer and type (e.g. ``bridge`` / ``comparison``)."""

    id: str
    text: str
    gold_ids: tuple[str, ...]
    answer: str = ""
    type: str = ""


@dataclass(frozen=True)
class EvalSet:
    """Queries (``{id: text}``, in file order) and their judgements, read from ``source``."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    source: str

    def judged(self) -> "EvalSet":
        """The queries that have at least one relevant document (relevance >= 1), in order."""
        keep = {q: t for q, t in self.queries.items() if any(r >= 1 for r in self.qrels.get(q, {}).values())}
        return EvalSet(keep, {q: dict(self.qrels[q]) for q in keep}, self.source)


def load_questions(path: str | Path, corpus: Corpus | None = None) -> list[Question]:
    """Read ``questions.jsonl`` (``id, question, answer, type, gold_ids``); errors name file and line.

    With ``corpus``, every gold id must be a passage of it.
    """
    path = input_path(path, "questions file")
    out = []
    for lineno, rec in iter_jsonl(path):
        where = f"{path} line {lineno}"
        text = rec.get("question")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: missing or empty 'question'")
        gold = rec.get("gold_ids")
        if not isinstance(gold, list) or not gold or not all(isinstance(g, (str, int)) for g in gold):
            raise InputError(f"{where}: 'gold_ids' must be a non-empty list of passage ids")
        gold = tuple(dict.fromkeys(str(g) for g in gold))
        if corpus is not None:
            for g in gold:
                try:
                    corpus.position(g)
                except KeyError:
                    raise InputError(f"{where}: gold id {g!r} is not in the corpus {corpus.source}") from None
        out.append(Question(str(rec.get("id", lineno)), text, gold, str(rec.get("answer", "")),
                            str(rec.get("type", ""))))
    if not out:
        raise InputError(f"questions file {path} holds no questions")
    return out


def questions_eval_set(questions: Sequence[Question], source: str = "<questions>") -> EvalSet:
    """An :class:`EvalSet` of hopgraph questions: every gold id has relevance 1. InputError for a
    question id given twice."""
    queries: dict[str, str] = {}
    for q in questions:
        if q.id in queries:
            raise InputError(f"{source}: question id {q.id!r} appears twice")
        queries[q.id] = q.text
    return EvalSet(queries, {q.id: dict.fromkeys(q.gold_ids, 1) for q in questions}, source)


def load_beir(folder: str | Path, split: str = "test") -> EvalSet:
    """The queries of ``folder/queries.jsonl`` judged in ``folder/qrels/SPLIT.tsv``, in the queries
    file's order. InputError naming the file and line of a problem, or the splits the folder has."""
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise InputError(f"{folder}: no qrels for split {split!r} ({qrels_path} does not exist; splits: "
                         f"{', '.join(have) or 'none'})")
    qrels = _read_qrels(qrels_path, beir=True)
    texts = _read_beir_queries(folder / "queries.jsonl")
    missing = [q for q in qrels if q not in texts]
    if missing:
        raise InputError(f"{qrels_path}: {len(missing)} query id(s) not in {folder / 'queries.jsonl'}, e.g. "
                         f"{missing[0]!r}")
    queries = {q: t for q, t in texts.items() if q in qrels}
    return EvalSet(queries, {q: qrels[q] for q in queries}, str(folder))


def load_trec_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """TREC qrels ``QID ITER DOCID REL`` (whitespace-separated; ITER ignored)."""
    return _read_qrels(Path(path), beir=False)


def load_trec_topics(path: str | Path) -> dict[str, str]:
    """TREC topics: ``QID<TAB>TEXT`` lines (Anserini / MS MARCO), or SGML ``<top>`` blocks whose
    ``<num>`` (``Number:`` optional) and ``<title>`` give the id and text. InputError naming the
    file (and line) of a problem."""
    path = input_path(path, "topics file")
    text = read_text(path)
    topics: dict[str, str] = {}
    if "<top>" in text.lower():
        for block in re.findall(r"<top>(.*?)</top>", text, flags=re.S | re.I):
            num = re.search(r"<num>\s*(?:Number:)?\s*(\S+)", block, flags=re.I)
            title = re.search(r"<title>\s*(?:Topic:)?\s*(.*?)\s*(?=<|\Z)", block, flags=re.S | re.I)
            if not num or not title or not title.group(1).strip():
                raise InputError(f"{path}: a <top> block without <num> or <title>")
            _add_topic(topics, num.group(1), " ".join(title.group(1).split()), f"{path} topic {num.group(1)}")
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            qid, sep, body = line.partition("\t")
            if not sep or not qid.strip() or not body.strip():
                raise InputError(f"{path} line {lineno}: expected QUERY_ID<TAB>TEXT")
            _add_topic(topics, qid.strip(), body.strip(), f"{path} line {lineno}")
    if not topics:
        raise InputError(f"topics file {path} holds no topics")
    return topics


def load_topics(path: str | Path) -> dict[str, str]:
    """Queries to search, ``{query id: text}`` in file order: JSON lines (a ``.jsonl`` file: BEIR's
    ``queries.jsonl``, ``_id`` or ``id`` and ``text``) or TREC topics (:func:`load_trec_topics`)."""
    if str(path).endswith(".jsonl"):
        return _read_beir_queries(Path(path))
    return load_trec_topics(path)


def trec_eval_set(qrels_path: str | Path, topics_path: str | Path) -> EvalSet:
    """The topics of ``topics_path`` judged in ``qrels_path`` (topics without judgements dropped;
    InputError for judged topics the topics file lacks)."""
    qrels, topics = load_trec_qrels(qrels_path), load_trec_topics(topics_path)
    missing = [q for q in qrels if q not in topics]
    if missing:
        raise InputError(f"{qrels_path}: {len(missing)} judged query id(s) not in {topics_path}, e.g. {missing[0]!r}")
    queries = {q: t for q, t in topics.items() if q in qrels}
    return EvalSet(queries, {q: qrels[q] for q in queries}, str(topics_path))


# ---------------------------------------------------------------------------------------------- measures
def parse_measure(name: str) -> tuple[str, int]:
    """``("ndcg", 10)`` for ``"ndcg@10"``; InputError naming :data:`MEASURES` for anything else."""
    m = _MEASURE.match(name.strip().lower())
    if not m:
        raise InputError(f"unknown measure {name!r}; known: {', '.join(MEASURES)} (K a positive integer)")
    return m.group(1), int(m.group(2))


def report_measures(ks: Sequence[int]) -> list[str]:
    """The measures ``hopgraph eval`` reports: :data:`HEADLINE`, then Recall@k and P@k for each k."""
    if not ks or not all(map(is_k, ks)):
        raise InputError(f"k values must be positive integers, got {list(ks)}")
    return [*HEADLINE, *(f"recall@{k}" for k in ks), *(f"p@{k}" for k in ks)]


def evaluate_run(qrels: Qrels, run: Run, measures: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-query scores ``{query id: {measure: value}}`` of ``run`` for every query of ``qrels``
    (see the module docstring for the definitions); ``measures`` as in :data:`MEASURES`."""
    import pytrec_eval

    parsed = [parse_measure(m) for m in measures]
    trec: dict[str, str] = {}   # trec_eval measure (for the evaluator) -> result key
    by_cut: dict[int, list[str]] = {}  # mrr@K: recip_rank on the run's top K
    for (kind, k), name in zip(parsed, measures):
        if kind == "mrr":
            by_cut.setdefault(k, []).append(name)
        else:
            measure = {"ndcg": "ndcg_cut", "map": "map_cut", "recall": "recall", "p": "P"}[kind]
            trec[name] = f"{measure}_{k}"
    judged = {q: {d: int(r) for d, r in rels.items()} for q, rels in qrels.items()}
    out = {q: dict.fromkeys(measures, 0.0) for q in judged}
    if trec:
        wanted = {f"{m.rsplit('_', 1)[0]}.{m.rsplit('_', 1)[1]}" for m in trec.values()}
        scores = pytrec_eval.RelevanceEvaluator(judged, wanted).evaluate(_trec_run(run, judged))
        for q, values in scores.items():
            for name, key in trec.items():
                out[q][name] = float(values[key])
    for cut, names in by_cut.items():
        scores = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(_trec_run(run, judged, cut))
        for q, values in scores.items():
            for name in names:
                out[q][name] = float(values["recip_rank"])
    return out


def _trec_run(run: Run, judged: Qrels, cut: int | None = None) -> dict[str, dict[str, float]]:
    """``run`` as pytrec_eval's ``{query: {doc: score}}`` for the judged queries, each document's
    score ``depth - rank`` (strictly decreasing: trec_eval keeps the given order)."""
    out = {}
    for q in judged:
        docs = [d for d, _ in run.get(q, ())][:cut]
        if docs:
            out[q] = {d: float(len(docs) - r) for r, d in enumerate(docs)}
    return out


def rows_run(query_ids: Sequence[str], rows: np.ndarray, scores: np.ndarray, corpus_ids: Sequence[str]) -> dict:
    """A :data:`Run` from a pipeline's ``(rows int64 [B, k], scores [B, k])`` (``-1`` = padding)."""
    return {q: [(corpus_ids[j], float(s)) for j, s in zip(r.tolist(), sc.tolist()) if j >= 0]
            for q, r, sc in zip(query_ids, np.asarray(rows), np.asarray(scores))}


def recall_at_k(retrieved_rows: np.ndarray, gold_rows: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """Per-question recall@k = |gold ∩ top-k| / |gold| (:func:`evaluate_run`'s ``recall@k``):
    ``retrieved_rows`` is ``[B, >=k]`` corpus rows (-1 = none), ``gold_rows`` the relevant rows."""
    retrieved_rows = np.asarray(retrieved_rows)
    if retrieved_rows.shape[1] < k:
        raise InputError(f"recall@{k} needs at least {k} results per question, got {retrieved_rows.shape[1]}")
    qids = [str(i) for i in range(len(gold_rows))]
    qrels = {q: dict.fromkeys((str(int(g)) for g in gold), 1) for q, gold in zip(qids, gold_rows)}
    run = {q: [(str(int(j)), 0.0) for j in row[:k] if j >= 0] for q, row in zip(qids, retrieved_rows)}
    scores = evaluate_run(qrels, run, [f"recall@{k}"])
    return np.array([scores[q][f"recall@{k}"] for q in qids], dtype=np.float64)


def mean_and_stderr(values: Iterable[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (``scipy.stats.sem``; 0 for fewer than two values)."""
    from scipy.stats import sem

    values = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)
    if len(values) < 2:
        return float(values.mean()) if len(values) else 0.0, 0.0
    return float(values.mean()), float(sem(values, ddof=1))


def paired_test(a: Sequence[float], b: Sequence[float], resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Paired two-sided tests of ``mean(b - a) = 0`` over the same queries: Student's paired t-test
    (``scipy.stats.ttest_rel``) and the paired randomisation test (``scipy.stats.permutation_test``,
    sign flips, ``resamples`` draws, seeded). Returns ``{"mean_difference", "t_pvalue",
    "randomization_pvalue"}``; p-values are 1.0 when every difference is 0."""
    from scipy import stats

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise InputError(f"paired_test needs two score lists over the same queries, got {a.shape} and {b.shape}")
    diff = b - a
    if len(diff) < 2 or not np.any(diff):
        return {"mean_difference": float(diff.mean()) if len(diff) else 0.0, "t_pvalue": 1.0,
                "randomization_pvalue": 1.0}
    t_p = float(stats.ttest_rel(b, a).pvalue)
    perm = stats.permutation_test((diff,), np.mean, permutation_type="samples", n_resamples=resamples,
                                  alternative="two-sided", random_state=np.random.default_rng(seed))
    return {"mean_difference": float(diff.mean()), "t_pvalue": t_p if np.isfinite(t_p) else 1.0,
            "randomization_pvalue": float(perm.pvalue)}


#: the least gap between consecutive scores of a written run, relative to the score (float32 keeps it:
#: 2⁻²⁰ is 8 of its ulps) and absolute near 0
SCORE_GAP, SCORE_GAP_MIN = 2.0 ** -20, 1e-9


def strictly_decreasing(scores: Sequence[float]) -> list[float]:
    """``scores`` of a ranking (best first) made strictly decreasing: each score that is not at least
    :data:`SCORE_GAP` (relative; :data:`SCORE_GAP_MIN` absolute near 0) below the one before it — a
    tie, an inversion, NaN — is set that far below it (scores are first clamped to ±1e30, NaN to the
    top: it takes the place the ranking gave it).
    trec_eval sorts a query's documents by score (ties by document id) and some readers hold scores
    in float32, so a run file holding these scores keeps the ranking's own order, ties broken as it
    broke them, whoever reads it."""
    out: list[float] = []
    for s in scores:
        s = 1e30 if np.isnan(s) else min(max(float(s), -1e30), 1e30)
        if out:
            gap = max(abs(out[-1]) * SCORE_GAP, SCORE_GAP_MIN)
            s = min(s, out[-1] - gap)
        out.append(s)
    return out


def write_trec_run(path: str | Path, run: Run, tag: str) -> None:
    """Write ``run`` as a TREC run file: ``QID Q0 DOCID RANK SCORE TAG`` per line, ranks from 1 in the
    run's order, scores the pipeline's own made strictly decreasing (:func:`strictly_decreasing`) and
    written in full (17 significant digits), so trec_eval ranks the documents exactly as the run does
    and computes the measures :func:`evaluate_run` reports for it."""
    if not tag or any(c.isspace() for c in tag):
        raise InputError(f"a run tag must be one non-empty word, got {tag!r}")
    with open(path, "w", encoding="utf-8") as f:
        for q, docs in run.items():
            scores = strictly_decreasing([s for _, s in docs])
            for rank, ((d, _), s) in enumerate(zip(docs, scores), start=1):
                if any(c.isspace() for c in q + d):
                    raise InputError(f"TREC run files cannot hold ids with spaces: query {q!r}, document {d!r}")
                f.write(f"{q} Q0 {d} {rank} {s:.17g} {tag}\n")


# ---------------------------------------------------------------------------------------------- readers
def _add_topic(topics: dict[str, str], qid: str, text: str, where: str) -> None:
    if qid in topics:
        raise InputError(f"{where}: query id {qid!r} appears twice")
    topics[qid] = text


def _read_beir_queries(path: Path) -> dict[str, str]:
    path = input_path(path, "BEIR queries file")
    out: dict[str, str] = {}
    for lineno, rec in iter_jsonl(path):
        qid, text = rec.get("_id", rec.get("id")), rec.get("text")
        if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
            raise InputError(f"{path} line {lineno}: missing '_id'")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{path} line {lineno}: missing or empty 'text'")
        _add_topic(out, str(qid), text, f"{path} line {lineno}")
    return out


def _read_qrels(path: Path, beir: bool) -> dict[str, dict[str, int]]:
    """Qrels of a BEIR TSV (header, ``query-id corpus-id score``) or a TREC file (``QID ITER DOCID REL``)."""
    path = input_path(path, "qrels file")
    out: dict[str, dict[str, int]] = {}
    lines = decode_lines(path)  # InputError naming the line of a byte that is not UTF-8
    rows = csv.reader(lines, delimiter="\t") if beir else (line.split() for line in lines)
    for lineno, row in enumerate(rows, start=1):
        if not row or not "".join(row).strip():
            continue
        if beir and lineno == 1 and not _is_int(row[-1]):
            continue  # the header row
        if len(row) != (3 if beir else 4) or not _is_int(row[-1]):
            want = "QUERY_ID<TAB>CORPUS_ID<TAB>SCORE" if beir else "QUERY_ID ITER DOC_ID RELEVANCE"
            raise InputError(f"{path} line {lineno}: expected {want}, got {row!r:.120}")
        q, d, rel = row[0].strip(), row[-2].strip(), int(row[-1])
        if d in out.setdefault(q, {}):
            raise InputError(f"{path} line {lineno}: query {q!r} judges document {d!r} twice")
        out[q][d] = rel
    if not out:
        raise InputError(f"qrels file {path} holds no judgements")
    return out


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False
