"""The ``hopgraph`` command line: index, add, delete, compact, verify, search, eval (``--ablations``), train-gnn,
train-gate (DMAR, SPEC §3), demo, serve."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import __version__
from .engine.errors import HopgraphError, InputError


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _params(args: argparse.Namespace, default_pipeline: str | None = None) -> dict[str, dict]:
    """``--param [PIPELINE.]NAME=VALUE`` items as ``{pipeline: {name: value}}`` (values read as JSON)."""
    from .engine.params import parse_assignments

    return parse_assignments(args.param or [], default_pipeline)


def _check_before_work(pipelines: Sequence[str], params: Mapping[str, Mapping[str, Any]],
                       flag: str = "--pipelines") -> None:
    """Refuse unknown pipeline names and invalid ``--param`` items before any embedding or loading
    (:class:`InputError` naming the known pipelines, or the parameter and its allowed values)."""
    from .engine.pipelines import pipeline_class
    from .index import validate_params

    if not pipelines:
        raise InputError(f"{flag} names no pipeline")
    for name in pipelines:
        pipeline_class(name)
    validate_params(params)


@contextlib.contextmanager
def _warnings_to_stderr(command: str) -> Iterator[None]:
    """Print each :class:`PassageLengthWarning` raised inside as one line ``hopgraph COMMAND:
    warning: ...`` on stderr (other warnings are shown as usual)."""
    from .engine.ingest.chunking import PassageLengthWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PassageLengthWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, PassageLengthWarning):
                    print(f"hopgraph {command}: warning: {w.message}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def cmd_index(args: argparse.Namespace) -> int:
    from .index import Index

    from .engine import storage
    from .engine.ingest import streaming

    _check_before_work(args.pipelines, _params(args))
    t0 = time.perf_counter()
    out = Path(args.out)
    work_dir = streaming.work_dir_for(out)
    # the output's write lock is held from before the build to the commit: a second build to the same
    # --out (and its OUT.work) is refused at once, and an --out that may not be replaced before any work
    with storage.TargetGuard(out, overwrite=args.overwrite, flag="--overwrite"):
        corpus = _read_corpus_args(args)
        with _warnings_to_stderr("index"):
            index = Index.build(corpus, embedder=args.embedder, embeddings=args.embeddings, device=args.device,
                                pipelines=args.pipelines, params=_params(args), progress=not args.quiet,
                                batch_size=args.batch_size,
                                work_dir=work_dir, resume=args.resume, ray_address=args.ray,
                                chunk_tokens=args.chunk_tokens, chunk_overlap=args.chunk_overlap)
        index.save(out, overwrite=args.overwrite)
        streaming.finish(work_dir)
    print(f"indexed {len(index.corpus)} passages ({', '.join(index.pipelines)}) into {args.out} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Full check of an index: every file's size and checksum, then every stored structure (a load)."""
    from .engine import storage
    from .engine.errors import IndexFormatError
    from .index import Index

    try:
        gen, manifest, lease = storage.open_index(args.index)
        lease.close()
        problems = storage.verify_files(gen, manifest, "full")
        if not problems:
            Index.load(args.index, verify="fast", progress=False)
    except IndexFormatError as e:
        problems = [str(e)]
    for p in problems:
        print(p)
    if not problems:
        print("ok")
    return 2 if problems else 0


def _read_corpus_args(args: argparse.Namespace):
    from .engine.components.corpus import read_corpus

    return read_corpus(args.corpus, id_field=args.id_field, title_field=args.title_field,
                       text_field=args.text_field, metadata_fields=args.metadata_fields)


def cmd_add(args: argparse.Namespace) -> int:
    """Append passages to an index (issue 13): only they are embedded; committed as a new generation."""
    import numpy as np

    from .index import Index

    t0 = time.perf_counter()
    corpus = _read_corpus_args(args)
    embeddings = np.load(args.embeddings, allow_pickle=False) if args.embeddings else None
    with Index.updating(args.index, embedder=args.embedder, device=args.device, progress=not args.quiet) as index:
        with _warnings_to_stderr("add"):
            r = index.add(corpus, upsert=args.upsert, embeddings=embeddings, batch_size=args.batch_size,
                          chunk_tokens=args.chunk_tokens, chunk_overlap=args.chunk_overlap)
    replaced = f", {len(r.replaced)} replaced" if r.replaced else ""
    print(f"added {len(r.added)} passages{replaced} to {args.index} ({index.n_live} live) in "
          f"{time.perf_counter() - t0:.1f} s (embedding {r.embed_seconds:.1f} s, update {r.update_seconds:.1f} s)")
    return 0


def _ids_from(args: argparse.Namespace) -> list[str]:
    """Passage ids given on the command line and in ``--ids-file`` (one per line, ``-`` = stdin)."""
    ids = list(args.ids or [])
    if args.ids_file:
        text = sys.stdin.read() if args.ids_file == "-" else Path(args.ids_file).read_text(encoding="utf-8")
        ids += [line.strip() for line in text.splitlines() if line.strip()]
    if not ids:
        raise InputError("no passage ids given (IDs on the command line or --ids-file FILE)")
    return ids


def cmd_delete(args: argparse.Namespace) -> int:
    """Tombstone passages of an index: no search returns them from the new commit on."""
    from .index import Index

    ids = _ids_from(args)
    with Index.updating(args.index, progress=False) as index:
        r = index.delete(ids)
    unknown = ""
    if r.unknown:
        more = f" (and {len(r.unknown) - 5} more)" if len(r.unknown) > 5 else ""
        unknown = f"; {len(r.unknown)} id(s) not in the index: {', '.join(map(repr, r.unknown[:5]))}{more}"
    print(f"deleted {len(r.deleted)} passages from {args.index} ({index.n_live} live){unknown}")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    """Drop deleted passages and rebuild every structure exactly (no re-embedding)."""
    from .index import Index

    t0 = time.perf_counter()
    with Index.updating(args.index, embedder=args.embedder, device=args.device, progress=not args.quiet) as index:
        before = len(index.X)
        index.compact()
    print(f"compacted {args.index}: {before} -> {len(index.X)} passages, {', '.join(index.pipelines)} rebuilt "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


def _where(items: Sequence[str] | None) -> dict[str, Any] | None:
    """``--where FIELD=VALUE`` items as a ``where`` mapping: a value is read as JSON when it parses
    (``year=1999``, ``draft=false``), else as a string; a field given twice takes either value."""
    if not items:
        return None
    where: dict[str, list] = {}
    for item in items:
        field, sep, raw = item.partition("=")
        if not sep or not field.strip():
            raise InputError(f"--where expects FIELD=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        values = value if isinstance(value, list) else [value]
        where.setdefault(field.strip(), []).extend(values)
    return where


def cmd_search(args: argparse.Namespace) -> int:
    from .index import Index

    params = _params(args, args.pipeline)
    other = sorted(set(params) - {args.pipeline})
    if other:
        raise InputError(f"--param names pipeline(s) {', '.join(other)}, but the search uses {args.pipeline!r}")
    _check_before_work([args.pipeline], params, flag="--pipeline")
    where = _where(args.where)
    allowed = None
    if args.allowed_ids:
        text = Path(args.allowed_ids).read_text(encoding="utf-8")
        allowed = [line.strip() for line in text.splitlines() if line.strip()]
    index = Index.load(args.index, embedder=args.embedder, device=args.device, progress=not args.quiet)
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


def cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import evaluate, format_table, json_report, plot_report

    if args.k is not None:  # the deprecated spelling of --ks
        if args.ks_given:
            raise InputError("give --ks only (--k is its deprecated alias)")
        print("hopgraph eval: warning: --k is deprecated, use --ks", file=sys.stderr)
        args.ks = args.k
    _check_before_work(args.pipelines, _params(args))
    report = evaluate(args.data_dir, args.pipelines, args.ks, embedder=args.embedder, cache_dir=args.cache_dir,
                      device=args.device, progress=not args.quiet, ablations=args.ablations, params=_params(args))
    print(format_table(report, args.ks))
    if args.plot:
        plot_report(report, args.ks, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(json_report(report, args.ks), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve.runner import cmd_serve as run

    return run(args)


def cmd_train_gnn(args: argparse.Namespace) -> int:
    from .dmar_training import train_gnn_index

    r = train_gnn_index(args.index, steps=args.steps, seed=args.seed, embedder=args.embedder,
                        progress=not args.quiet)
    print(f"trained the DMAR GNN ({r['steps']} steps, {r['n_subgraphs']} subgraphs) in {r['seconds']:.1f} s: "
          f"triplet loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}; saved in {args.index}")
    return 0


def cmd_train_gate(args: argparse.Namespace) -> int:
    from .dmar_training import train_gate_index

    r = train_gate_index(args.index, args.questions, holdout=args.holdout, seed=args.seed, k=args.k,
                         embedder=args.embedder, progress=not args.quiet, always_save=args.always_save)
    k = args.k
    outcome = (f"saved in {args.index}" if r["saved"] else
               f"not better on the held-out split: {args.index} keeps the untrained (equal-weight) gate")
    print(f"trained the DMAR gate on {r['n_train']} questions; held-out split ({r['n_held_out']} questions) "
          f"Recall@{k}: untrained {r[f'held_out_recall@{k}_untrained']:.3f}, "
          f"trained {r[f'held_out_recall@{k}_trained']:.3f}; {outcome}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(embedder=args.embedder, device=args.device, progress=not args.quiet)


def _bench_suite() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``parse_groups`` and ``run`` of the benchmark suite, which lives in the source checkout's
    ``bench/`` folder (benchmarks are not installed with the package)."""
    bench_dir = Path(__file__).resolve().parents[1] / "bench"
    if not (bench_dir / "suite" / "__init__.py").is_file():
        raise InputError(f"hopgraph bench runs from a source checkout: {bench_dir / 'suite'} not found "
                         "(clone the repository and install it with `pip install -e .`)")
    if str(bench_dir) not in sys.path:
        sys.path.insert(0, str(bench_dir))
    import suite

    return suite.parse_groups, suite.run


def cmd_bench(args: argparse.Namespace) -> int:
    """``hopgraph bench``: side-by-side benchmark tables (``bench/suite`` of a source checkout);
    ``--gpu-compile`` / ``--gpu-model``: the Triton kernels compiled for sm_80/sm_90 / their performance
    model instead (exit status 1 when a build violates the compile check)."""
    parse_groups, run = _bench_suite()

    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        raise InputError(f"--json {args.json}: its folder does not exist")
    if args.keep is not None and not args.gpu_compile:
        raise InputError("--keep DIR goes with --gpu-compile")
    if args.gpu_compile or args.gpu_model:
        from suite import gpu_compile, gpu_model

        emit = lambda text: print(text, flush=True)  # noqa: E731
        if args.gpu_model:
            gpu_model.run(json_path=args.json, emit=emit)
            return 0
        records = gpu_compile.run(json_path=args.json, keep=args.keep, emit=emit)
        return 1 if any(gpu_compile.violations(gpu_compile.Record(**r)) for r in records) else 0
    groups = parse_groups(args.only)
    report = run(full=args.full, scale=args.scale, groups=groups, data=args.data, embedder=args.embedder,
                 progress=not args.quiet, emit=lambda text: print(text, flush=True))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless it has none (None, an unset flag) or names it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or "(default" in text or not action.option_strings or action.default is None
                or action.default is False or action.default is argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """hopgraph's parser: :class:`HelpFormatter` for it and its subcommands (``add_subparsers``
    makes subparsers of the parser's own class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


class _StoreKs(argparse.Action):
    """``--ks``: stores the list and notes that it was given (``--k`` is its deprecated alias)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.ks_given = True


def build_parser() -> argparse.ArgumentParser:
    from .engine.pipelines import pipeline_names
    from .evaluate import default_cache_dir

    known = ", ".join(pipeline_names())
    parser = ArgumentParser(prog="hopgraph", description="GPU-accelerated multi-hop graph retrieval")
    parser.add_argument("--version", action="version", version=f"hopgraph {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    def param_option(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument("--param", action="append", metavar="[PIPELINE.]NAME=VALUE",
                       help=f"a pipeline parameter {what} (repeatable; VALUE read as JSON, e.g. "
                            "g3rag.gamma=0.05, bm25.k1=1.2, stitch.relevance=dense); checked against the "
                            "pipeline's parameters, an invalid one is refused naming the allowed values")

    def corpus_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--id-field", help="the field/column holding passage ids (default: detected)")
        p.add_argument("--title-field", help="the field/column holding titles (default: detected)")
        p.add_argument("--text-field", help="the field/column holding the text (default: detected)")
        p.add_argument("--metadata-fields", type=_name_list, metavar="A,B",
                       help="fields/columns kept as passage metadata (default: all others)")
        p.add_argument("--chunk-tokens", type=int, metavar="N",
                       help="split documents into passages of N whitespace words (ids DOCID#k)")
        p.add_argument("--chunk-overlap", type=int, default=0, metavar="M",
                       help="words shared by consecutive passages of a document (with --chunk-tokens)")

    def common(p: argparse.ArgumentParser, embedder_default: str | None = "minilm") -> None:
        p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                       help="where to compute (auto: cuda when available, else cpu)")
        p.add_argument("--embedder", default=embedder_default,
                       help="'minilm' (all-MiniLM-L6-v2), 'hashing-DIM', 'st:MODEL_FOLDER_OR_CACHED_NAME', 'openai:MODEL'" +
                            ("" if embedder_default else " (default: the index's embedder)"))
        p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")

    p = sub.add_parser("index", help="build an index directory from a JSON-lines corpus")
    p.add_argument("corpus", help='JSON lines {"id", "title", "text"} (or BEIR/Pyserini), a JSON array, '
                   "CSV/TSV with a header row, Parquet, or a folder of .txt/.md files")
    corpus_options(p)
    p.add_argument("--out", required=True, help="index directory to write (new, empty, or a hopgraph index "
                   "with --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace the hopgraph index at --out (atomically)")
    p.add_argument("--embeddings", help="precomputed passage embeddings: a .npy (row i = passage i) or a folder "
                   "of .npy shards; ids alongside (NAME.ids.txt / NAME.ids.npy) place rows by passage id")
    p.add_argument("--pipelines", type=_name_list, default="dense,bm25,g3rag",
                   help=f"comma-separated pipelines to fit, of: {known}")
    p.add_argument("--batch-size", type=int, default=64, help="passages per embedder forward pass")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted build from its last finished batch (work dir OUT.work)")
    p.add_argument("--ray", metavar="ADDRESS", help="build on a Ray cluster ('auto', 'ray://host:port', 'local'); "
                   "needs hopgraph[distributed]")
    param_option(p, "stored in the index (fit-time and query-time)")
    common(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("add", help="append passages to an index without rebuilding it (a new commit)")
    p.add_argument("index", help="index directory")
    p.add_argument("corpus", help="the passages to add, in any format `index` reads")
    corpus_options(p)
    p.add_argument("--upsert", action="store_true", help="replace passages whose id the index already holds")
    p.add_argument("--embeddings", help="precomputed embeddings of the added passages (.npy, row i = passage i)")
    p.add_argument("--batch-size", type=int, default=64, help="passages per embedder forward pass")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("delete", help="delete passages from an index (no search returns them; a new commit)")
    p.add_argument("index", help="index directory")
    p.add_argument("ids", nargs="*", metavar="ID", help="passage ids to delete")
    p.add_argument("--ids-file", metavar="FILE", help="more ids, one per line ('-' reads standard input)")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("compact", help="drop deleted passages and rebuild every structure exactly (a new commit)")
    p.add_argument("index", help="index directory")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("verify", help="check an index: every file's checksum and every stored structure "
                       "(prints each problem or 'ok'; exit status 0 or 2)")
    p.add_argument("index", help="index directory")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("search", help="query an index")
    p.add_argument("index", help="index directory")
    p.add_argument("questions", nargs="+", help="one or more questions")
    p.add_argument("--pipeline", default="g3rag", help=f"the pipeline to search with, one of: {known}")
    p.add_argument("--k", type=int, default=5, help="passages returned per question")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--group-by-document", action="store_true",
                   help="one hit per document (a chunked index's best passage of each)")
    p.add_argument("--where", action="append", metavar="FIELD=VALUE",
                   help="only passages whose metadata FIELD equals VALUE (JSON or text); repeatable, a field "
                   "given twice takes either value")
    p.add_argument("--allowed-ids", metavar="FILE", help="only these passages: a file of ids, one per line")
    param_option(p, "for this search (PIPELINE defaults to --pipeline; fit-time ones refit in memory)")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", help="Recall@k on a benchmark folder (corpus.jsonl + questions.jsonl)")
    p.add_argument("data_dir", help="folder with corpus.jsonl and questions.jsonl")
    p.add_argument("--pipelines", type=_name_list, default="dense,bm25,g3rag",
                   help=f"comma-separated pipelines to evaluate, of: {known}")
    p.add_argument("--ks", type=_int_list, default="2,5,8", action=_StoreKs,
                   help="comma-separated k of the Recall@k columns")
    p.add_argument("--k", type=_int_list, help=argparse.SUPPRESS)  # deprecated alias of --ks
    p.set_defaults(ks_given=False)
    p.add_argument("--json", help="write the results (Recall@k with standard errors) as JSON to this file")
    p.add_argument("--cache-dir", help="where built indexes are cached (default: $HOPGRAPH_CACHE_DIR, else the "
                   f"platform cache directory; here: {default_cache_dir()})")
    p.add_argument("--ablations", action="store_true", help="also evaluate each pipeline's named ablations")
    p.add_argument("--plot", help="write a bar chart of Recall@k per pipeline to this PNG")
    param_option(p, "of the evaluated index (cached pipelines are updated or refitted)")
    common(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("train-gnn", help="pre-train DMAR's Siamese GNN (triplet loss) inside an index")
    p.add_argument("index", help="index directory (dmar is fitted first if missing)")
    p.add_argument("--steps", type=int, default=600, help="training steps")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_train_gnn)

    p = sub.add_parser("train-gate", help="train DMAR's fusion gate on questions with gold passages")
    p.add_argument("index", help="index directory (dmar is fitted first if missing)")
    p.add_argument("questions", help="questions.jsonl with gold_ids")
    p.add_argument("--holdout", type=float, default=0.2, help="held-out fraction reported")
    p.add_argument("--always-save", action="store_true",
                   help="save the trained gate even when it is worse on the held-out split")
    p.add_argument("--k", type=int, default=5, help="k of the held-out Recall@k that decides the save")
    p.add_argument("--seed", type=int, default=0, help="random seed of the split and the training")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_train_gate)

    p = sub.add_parser("demo", help="index the bundled demo corpus and query every pipeline")
    common(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench", help="benchmark tables to size a deployment: kernels vs their anchors, the "
                       "fresh-process build, build costs, queries/s with and without question embedding")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, a few minutes on 2 cores (the default)")
    size.add_argument("--full", action="store_true", help="the README's sizes (N = 20,000 gain-kNN, 10⁵-chunk "
                      "PPR graphs with 10⁶ edges, 20,000 passages; tens of minutes)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every size by this factor")
    p.add_argument("--only", metavar="GROUPS", help="comma-separated subset of kernels,cold_start,pipelines")
    p.add_argument("--data", type=Path, metavar="DIR", help="pipelines on a benchmark folder (corpus.jsonl + "
                   "questions.jsonl) instead of a generated corpus")
    p.add_argument("--json", metavar="FILE", help="also write every table as JSON")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu-compile", action="store_true", help="instead of the tables: compile every Triton kernel "
                     "for sm_80 and sm_90 (no GPU needed) and print registers, spills, shared memory, warps and "
                     "tensor-core use; exit status 1 when a build fails the check")
    gpu.add_argument("--gpu-model", action="store_true", help="instead of the tables: bytes, FLOPs, H100/H200 "
                     "roofline and estimated seconds of each kernel at the 10^6 shapes, from its compiled SASS")
    p.add_argument("--keep", metavar="DIR", help="with --gpu-compile: keep each build's cubin as "
                   "DIR/{kernel}-{config}-{target}.cubin")
    p.add_argument("--embedder", default="minilm", help="the pipelines' embedder: 'minilm', 'hashing-DIM', ...")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_bench)

    from .serve.limits import add_serve_arguments

    p = sub.add_parser("serve", help="serve an index over HTTP (POST /search; needs the [serve] extra)")
    add_serve_arguments(p)
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_serve)
    return parser


#: exit status of a user error (bad input, bad index, missing file, ...): one line on stderr
EXIT_USER_ERROR = 2
#: exit status of an internal error (a bug in hopgraph): the traceback, then one summary line
EXIT_INTERNAL_ERROR = 1
#: exit status after Ctrl-C / SIGINT (128 + 2, as shells report it): one line on stderr
EXIT_INTERRUPTED = 130


def describe_user_error(e: BaseException) -> str | None:
    """The one-line message of a user error, or None when ``e`` is not one (a bug).

    User errors are what a user can fix: :class:`HopgraphError` (``InputError``, invalid
    parameters, ``IndexFormatError``, an unavailable device), ``NotImplementedError`` (a
    pipeline absent from this version), ``OSError`` (a missing, unreadable or unwritable
    file: the message names the path) and ``UnicodeError`` (a file that is not UTF-8 text,
    where no reader of ours named it first). Every other exception, a bare ``ValueError``,
    ``KeyError`` or ``TypeError`` included, means hopgraph failed to check something or has
    a bug: it is not dressed up as a user error.
    """
    if isinstance(e, (HopgraphError, NotImplementedError)):
        return str(e)
    if isinstance(e, OSError):
        what = e.strerror or str(e) or type(e).__name__
        paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
        return f"{what}: {' -> '.join(paths)}" if paths else what
    if isinstance(e, UnicodeError):
        return f"input is not valid UTF-8 text ({e})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hopgraph`` command line; returns the exit status.

    0 on success; :data:`EXIT_USER_ERROR` (2) with one line ``hopgraph COMMAND: error: ...``
    on stderr for a user error (see :func:`describe_user_error`), no traceback;
    :data:`EXIT_INTERNAL_ERROR` (1) with the traceback and a line saying it is a bug for
    anything else; :data:`EXIT_INTERRUPTED` (130) with one line for Ctrl-C / SIGINT (an interrupted
    ``index`` leaves its work directory for ``--resume``). argparse's own usage errors exit 2 as usual.
    """
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        hint = "; add --resume to continue from the last finished chunk" if args.command == "index" else ""
        print(f"hopgraph {args.command}: interrupted{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        message = describe_user_error(e)
        if message is not None:
            print(f"hopgraph {args.command}: error: {message}", file=sys.stderr)
            return EXIT_USER_ERROR
        import traceback

        traceback.print_exc()
        print(f"hopgraph {args.command}: internal error (a bug in hopgraph, please report it with the "
              f"traceback above): {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
