"""``hopgraph search | eval``: querying an index and evaluating pipelines on a benchmark folder."""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from .options import (
    StoreKs,
    check_before_work,
    cli_params,
    common,
    id_lines,
    int_list,
    name_list,
    param_option,
    where_filter,
)

log = logging.getLogger("hopgraph.cli")


def cmd_search(args: argparse.Namespace) -> int:
    """``hopgraph search``: answer questions from an index with one pipeline (``--where`` and
    ``--allowed-ids`` filters, ``--param`` search parameters); prints the hits, or JSON with
    ``--json``. Returns the exit status."""
    from ..engine.errors import InputError
    from ..index import Index

    params = cli_params(args, args.pipeline)
    other = sorted(set(params) - {args.pipeline})
    if other:
        raise InputError(f"--param names pipeline(s) {', '.join(other)}, but the search uses {args.pipeline!r}")
    check_before_work([args.pipeline], params, flag="--pipeline")
    where = where_filter(args.where)
    allowed = None
    if args.allowed_ids:
        allowed = id_lines(args.allowed_ids, "--allowed-ids")
    topics = topics_to_search(args)
    index = Index.load(args.index, embedder=args.embedder, device=args.device, progress=not args.quiet)
    if topics is not None:
        return write_run(index, topics, args, params.get(args.pipeline, {}), where, allowed)
    results = index.search(args.questions, pipeline=args.pipeline, k=args.k,
                           group_by_document=args.group_by_document, allowed_ids=allowed, where=where,
                           **params.get(args.pipeline, {}))
    if args.json:
        print(json.dumps([{"question": q, "hits": [h.to_dict() for h in hits]}
                          for q, hits in zip(args.questions, results)], indent=2))
        return 0
    for q, hits in zip(args.questions, results):
        print(f"Q: {q}")
        for h in hits:
            print(f"  {h.rank}. [{h.id}] {h.score:.4f} {h.title + ': ' if h.title else ''}{(h.text or '')[:100]}")
    return 0


def topics_to_search(args: argparse.Namespace) -> dict[str, str] | None:
    """``--topics``' queries (with ``--run``; no question arguments then), or None for the questions
    given as arguments. InputError naming the flag or file at fault, before the index is opened."""
    from ..engine.errors import InputError
    from ..engine.evaluation import load_topics

    if (args.topics is None) != (args.run is None):
        raise InputError("--topics and --run go together (search a topics file, write a TREC run file)")
    if args.topics is None:
        if not args.questions:
            raise InputError("give one or more questions, or --topics FILE --run OUT")
        return None
    if args.questions:
        raise InputError("give questions or --topics, not both")
    if args.json:
        raise InputError("--json prints hits of questions; --topics writes a run file (--run)")
    if not Path(args.run).resolve().parent.is_dir():
        raise InputError(f"--run {args.run}: its folder does not exist")
    return load_topics(args.topics)


def write_run(index, topics: dict[str, str], args: argparse.Namespace, params: dict, where, allowed) -> int:
    """Search every topic (one batched search, the query's filters applied) and write the TREC run file
    ``args.run`` tagged with the pipeline (:func:`~hopgraph.engine.evaluation.write_trec_run`: the
    ranking's order, strictly decreasing scores): the run ``hopgraph eval`` scores for that depth."""
    from ..engine.evaluation import rows_run, write_trec_run

    qids = list(topics)
    rows, scores = index.search_arrays(list(topics.values()), pipeline=args.pipeline, k=args.k,
                                       group_by_document=args.group_by_document, allowed_ids=allowed, where=where,
                                       **params)
    write_trec_run(args.run, rows_run(qids, rows, scores, index.corpus.ids), args.pipeline)
    print(f"wrote {args.run} ({len(qids)} queries, {args.pipeline}, {args.k} deep)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``hopgraph eval``: score pipelines on a benchmark folder (:func:`hopgraph.evaluate.evaluate`)
    and print the table; ``--json``, ``--plot`` and ``--per-query`` write the report's other forms.
    Returns the exit status."""
    from ..engine.errors import InputError
    from ..evaluate import evaluate, format_table, json_report, plot_report

    if args.k is not None:  # the deprecated spelling of --ks
        if args.ks_given:
            raise InputError("give --ks only (--k is its deprecated alias)")
        log.warning("--k is deprecated, use --ks")
        args.ks = args.k
    check_before_work(args.pipelines, cli_params(args))
    for flag, value in (("--json", args.json), ("--plot", args.plot), ("--per-query", args.per_query)):
        if value is not None and not Path(value).resolve().parent.is_dir():
            raise InputError(f"{flag} {value}: its folder does not exist")
    report = evaluate(args.data_dir, args.pipelines, args.ks, embedder=args.embedder, cache_dir=args.cache_dir,
                      device=args.device, progress=not args.quiet, ablations=args.ablations, params=cli_params(args),
                      split=args.split, qrels=args.qrels, topics=args.topics, corpus=args.corpus, depth=args.depth,
                      run_dir=args.run_dir, baseline=args.baseline, strict=args.strict, index_dir=args.index)
    print(format_table(report))
    if args.plot:
        plot_report(report, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(json_report(report), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.per_query:
        with open(args.per_query, "w", encoding="utf-8") as f:
            f.write("pipeline\tquery_id\tmeasure\tvalue\n")
            for label, scores in report["per_query"].items():
                for qid, values in scores.items():
                    f.writelines(f"{label}\t{qid}\t{m}\t{v:.6f}\n" for m, v in values.items())
        print(f"wrote {args.per_query}")
    for path in [*report["table_run_files"].values(), *report["run_files"].values()]:
        print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction, known: str) -> None:
    """Add the search and evaluation commands to ``sub`` (``known``: the pipeline names, for help texts)."""
    from ..cache_dir import default_cache_dir

    p = sub.add_parser("search", help="query an index")
    p.add_argument("index", help="index directory")
    p.add_argument("questions", nargs="*", help="one or more questions (or --topics)")
    p.add_argument("--topics", metavar="FILE", help="search every query of this file (TREC topics: QID<TAB>TEXT "
                   "lines or <top> blocks; or .jsonl, BEIR queries) and write a TREC run file (--run)")
    p.add_argument("--run", metavar="OUT", help="the TREC run file of --topics (K passages a query, tag PIPELINE)")
    p.add_argument("--pipeline", default="g3rag", help=f"the pipeline to search with, one of: {known}")
    p.add_argument("--k", type=int, default=5, help="passages returned per question")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--group-by-document", action="store_true",
                   help="one hit per document (a chunked index's best passage of each)")
    p.add_argument("--where", action="append", metavar="FIELD=VALUE",
                   help="only passages whose metadata passes: FIELD=VALUE, FIELD!=VALUE, FIELD>VALUE, >=, <, <= "
                   "(VALUE read as JSON, else text), or a JSON filter ('{\"$or\": [...]}'); repeatable, all must "
                   "hold, a field given twice with = takes either value")
    p.add_argument("--allowed-ids", metavar="FILE", help="only these passages: a file of ids, one per line")
    param_option(p, "for this search (PIPELINE defaults to --pipeline; fit parameters refit in memory)")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", help="nDCG@10, MRR@10, MAP@100, Recall@k and P@k on a benchmark (hopgraph, BEIR "
                       "or TREC), with per-query scores, TREC run files and paired tests")
    p.add_argument("data_dir", help="folder with corpus.jsonl and questions.jsonl (hopgraph), or queries.jsonl and "
                   "qrels/SPLIT.tsv (BEIR)")
    p.add_argument("--split", default="test", help="the BEIR qrels split (qrels/SPLIT.tsv)")
    p.add_argument("--qrels", metavar="FILE", help="TREC qrels (QID ITER DOCID REL), with --topics")
    p.add_argument("--topics", metavar="FILE", help="TREC topics (QID<TAB>TEXT lines or <top> blocks), with --qrels")
    p.add_argument("--corpus", metavar="PATH", help="the corpus, in any format `index` reads (default: "
                   "DATA_DIR/corpus.jsonl)")
    p.add_argument("--pipelines", type=name_list, default="dense,bm25,g3rag",
                   help=f"comma-separated pipelines to evaluate, of: {known}")
    p.add_argument("--ks", type=int_list, default="2,5,8", action=StoreKs,
                   help="comma-separated k of the Recall@k columns")
    p.add_argument("--k", type=int_list, help=argparse.SUPPRESS)  # deprecated alias of --ks
    p.set_defaults(ks_given=False)
    p.add_argument("--depth", type=int, help="passages retrieved per query (default: 100, or the largest k)")
    p.add_argument("--baseline", help="the row every other is compared with by paired tests of nDCG@10 "
                   "(default: the first pipeline)")
    p.add_argument("--json", help="write the report (every measure with its standard error, per-query scores, "
                   "paired tests; schema in docs/cli.md) to this file")
    p.add_argument("--per-query", metavar="FILE", help="write every query's scores as TSV (pipeline, query_id, "
                   "measure, value)")
    p.add_argument("--run-dir", metavar="DIR", help="write a TREC run file PIPELINE.run per pipeline to this folder")
    p.add_argument("--index", metavar="DIR", help="evaluate this built index (its corpus, embedder and fitted "
                   "pipelines) instead of building or caching one; DATA_DIR then needs no corpus")
    p.add_argument("--cache-dir", help="where built indexes are cached (default: $HOPGRAPH_CACHE_DIR, else the "
                   f"platform cache directory; here: {default_cache_dir()})")
    p.add_argument("--strict", action="store_true", help="refuse qrels that judge documents the corpus does not "
                   "hold (by default they are counted, warned about and reported)")
    p.add_argument("--ablations", action="store_true", help="also evaluate each pipeline's named ablations")
    p.add_argument("--plot", help="write the Recall@k curve of every pipeline to this PNG")
    param_option(p, "of the evaluated index (cached pipelines are updated or refitted)")
    common(p)
    p.set_defaults(func=cmd_eval)
