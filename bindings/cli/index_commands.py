"""``hopgraph index | add | delete | compact | verify``: building and updating index directories."""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from .options import (
    check_before_work,
    cli_params,
    common,
    corpus_options,
    ids_from,
    name_list,
    param_option,
    read_corpus_args,
    refuse_search_params,
)

log = logging.getLogger("hopgraph.cli")


def cmd_index(args: argparse.Namespace) -> int:
    """``hopgraph index``: build an index of a corpus file and write it to ``--out`` (sharded with
    ``--shards``); the names and parameters are checked before any work, and an interrupted build
    continues from its work directory with ``--resume``. Returns the exit status."""
    from ..engine import storage
    from ..engine.ingest import streaming
    from ..index import Index

    check_before_work(args.pipelines, cli_params(args))
    refuse_search_params(cli_params(args))
    t0 = time.perf_counter()
    out = output_dir(args.out)
    work_dir = streaming.work_dir_for(out)
    if args.shards is not None:
        return _index_sharded(args, out, work_dir, t0)
    # the output's write lock is held from before the build to the commit: a second build to the same
    # --out (and its OUT.work) is refused at once, and an --out that may not be replaced before any work
    with storage.TargetGuard(out, overwrite=args.overwrite, flag="--overwrite"):
        corpus = read_corpus_args(args)
        index = Index.build(corpus, embedder=args.embedder, embeddings=args.embeddings, device=args.device,
                            pipelines=args.pipelines, params=cli_params(args), progress=not args.quiet,
                            batch_size=args.batch_size, work_dir=work_dir, resume=args.resume, ray_address=args.ray,
                            chunk_tokens=args.chunk_tokens, chunk_overlap=args.chunk_overlap)
        index.save(out, overwrite=args.overwrite)
        streaming.finish(work_dir)
    print(f"indexed {len(index.corpus)} passages ({', '.join(index.pipelines)}) into {args.out} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


def _index_sharded(args: argparse.Namespace, out: Path, work_dir: Path, t0: float) -> int:
    """``hopgraph index ... --shards S``: build (on Ray with ``--ray``), then write it sharded
    (:func:`hopgraph.shards.shard_index`) instead of as one index."""
    from ..engine.errors import InputError
    from ..engine.ingest import streaming
    from ..index import Index
    from ..shards import shard_index

    if args.overwrite:
        raise InputError("--overwrite does not go with --shards: a sharded index is written to a new directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out} exists and is not an empty directory")
    index = Index.build(read_corpus_args(args), embedder=args.embedder, embeddings=args.embeddings,
                        device=args.device, pipelines=args.pipelines, params=cli_params(args),
                        progress=not args.quiet, batch_size=args.batch_size, work_dir=work_dir, resume=args.resume,
                        ray_address=args.ray, chunk_tokens=args.chunk_tokens, chunk_overlap=args.chunk_overlap)
    shard_index(index, args.shards, out, progress=not args.quiet)
    streaming.finish(work_dir)
    print(f"indexed {len(index.corpus)} passages ({', '.join(index.pipelines)}) into {args.shards} shards in "
          f"{args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def output_dir(out: str) -> Path:
    """``--out`` as a path that names a new index directory; InputError for ``.``, ``..``, ``/`` and
    other paths without a name of their own (an index replaces its directory as a whole)."""
    from ..engine.errors import InputError

    path = Path(out)
    if path.name in ("", ".", ".."):
        raise InputError(f"--out {out!r}: give the index directory a name of its own (e.g. --out my-index); "
                         "the index is written as a new directory, not into an existing one")
    return path


def cmd_verify(args: argparse.Namespace) -> int:
    """Full check of an index: every segment's files' sizes and checksums, then every stored structure (a load)."""
    from ..engine import storage
    from ..engine.errors import IndexFormatError
    from ..index import Index

    try:
        problems = storage.verify_index(args.index, "full")
        if not problems:
            Index.load(args.index, verify="fast", progress=False)
    except IndexFormatError as e:
        problems = [str(e)]
    for p in problems:
        print(p)
    if not problems:
        print("ok")
    return 2 if problems else 0


def cmd_add(args: argparse.Namespace) -> int:
    """Append passages to an index: only they are embedded; committed as a new generation.
    ``--embeddings`` is read as ``hopgraph index`` reads it (a ``.npy`` or a folder of shards, never
    with pickled objects)."""
    from ..engine.ingest.precomputed import open_embeddings
    from ..index import Index

    t0 = time.perf_counter()
    corpus = read_corpus_args(args)
    embeddings = open_embeddings(args.embeddings, progress=False) if args.embeddings else None
    with Index.updating(args.index, embedder=args.embedder, device=args.device, progress=not args.quiet) as index:
        r = index.add(corpus, upsert=args.upsert, embeddings=embeddings, batch_size=args.batch_size,
                      chunk_tokens=args.chunk_tokens, chunk_overlap=args.chunk_overlap)
    replaced = f", {len(r.replaced)} replaced" if r.replaced else ""
    print(f"added {len(r.added)} passages{replaced} to {args.index} ({index.n_live} live) in "
          f"{time.perf_counter() - t0:.1f} s (embedding {r.embed_seconds:.1f} s, update {r.update_seconds:.1f} s)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    """Tombstone passages of an index: no search returns them from the new commit on. Ids the index
    does not hold are named (a warning); none of the ids held is a user error (exit status 2)."""
    from ..engine.errors import InputError
    from ..index import Index

    ids = ids_from(args)
    with Index.updating(args.index, progress=False) as index:
        r = index.delete(ids)
    if r.unknown:
        more = f" (and {len(r.unknown) - 5} more)" if len(r.unknown) > 5 else ""
        unknown = f"{len(r.unknown)} id(s) not in the index: {', '.join(map(repr, r.unknown[:5]))}{more}"
        if not r.deleted:
            raise InputError(f"no passage deleted from {args.index}: {unknown}")
        log.warning("%s", unknown)
    print(f"deleted {len(r.deleted)} passages from {args.index} ({index.n_live} live)")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    """Drop deleted passages and rebuild every structure exactly (no re-embedding)."""
    from ..index import Index

    t0 = time.perf_counter()
    with Index.updating(args.index, embedder=args.embedder, device=args.device, progress=not args.quiet) as index:
        before = len(index.X)
        index.compact()
    print(f"compacted {args.index}: {before} -> {len(index.X)} passages, {', '.join(index.pipelines)} rebuilt "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_shard(args: argparse.Namespace) -> int:
    """Split an index by passage into shard indexes and a router state (:mod:`hopgraph.shards`)."""
    from ..index import Index
    from ..shards import shard_index

    t0 = time.perf_counter()
    index = Index.load(args.index, embedder=args.embedder, progress=not args.quiet)
    out = shard_index(index, args.shards, args.out, progress=not args.quiet)
    print(f"sharded {args.index} ({len(index.X)} passages, {', '.join(index.pipelines)}) into {args.shards} shards "
          f"in {out} in {time.perf_counter() - t0:.1f} s; serve it with hopgraph serve --ray ADDRESS --shards {out}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Merge an index's segments by the tiered policy (``--max-segments 1``: compact)."""
    from ..index import Index

    t0 = time.perf_counter()
    index = Index.load(args.index, progress=not args.quiet, verify="fast")
    try:
        r = index.merge(max_segments=args.max_segments)
    finally:
        index.close()
    print(f"merged {args.index}: {r.segments_before} -> {r.segments_after} segments ({len(r.merges)} merges) "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


def register(sub: argparse._SubParsersAction, known: str) -> None:
    """Add the index-building commands to ``sub`` (``known``: the pipeline names, for help texts)."""
    p = sub.add_parser("index", help="build an index directory from a JSON-lines corpus")
    p.add_argument("corpus", help='JSON lines {"id", "title", "text"} (or BEIR/Pyserini), a JSON array, '
                   "CSV/TSV with a header row, Parquet, or a folder of .txt/.md files")
    corpus_options(p)
    p.add_argument("--out", required=True, help="index directory to write (new, empty, or a hopgraph index "
                   "with --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace the hopgraph index at --out (atomically)")
    p.add_argument("--embeddings", help="precomputed passage embeddings: a .npy (row i = passage i) or a folder "
                   "of .npy shards; ids alongside (NAME.ids.txt / NAME.ids.npy) place rows by passage id")
    p.add_argument("--pipelines", type=name_list, default="dense,bm25,g3rag",
                   help=f"comma-separated pipelines to fit, of: {known}")
    p.add_argument("--batch-size", type=int, default=64, help="passages per embedder forward pass")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted build from its last finished batch (work dir OUT.work)")
    p.add_argument("--shards", type=int, metavar="S", help="write the index as S shards and a router "
                   "(hopgraph shard's output, served by hopgraph serve --ray ADDRESS --shards DIR)")
    p.add_argument("--ray", metavar="ADDRESS", help="build on a Ray cluster ('auto', 'ray://host:port', 'local'); "
                   "needs hopgraph[distributed]")
    param_option(p, "stored in the index (fit parameters)")
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

    p = sub.add_parser("shard", help="split an index by passage into S shard indexes and a router state "
                       "(served by hopgraph serve --ray ADDRESS --shards DIR)")
    p.add_argument("index", help="index directory (no deleted passages: compact it first)")
    p.add_argument("--shards", type=int, required=True, metavar="S", help="number of shards")
    p.add_argument("--out", required=True, metavar="DIR", help="new directory for the shards and the router")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_shard)

    p = sub.add_parser("merge", help="merge an index's segments (a tiered policy; a new commit)")
    p.add_argument("index", help="index directory")
    p.add_argument("--max-segments", type=int, default=None, metavar="N",
                   help="merge further until at most N segments remain (1: compact)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("verify", help="check an index: every file's checksum and every stored structure "
                       "(prints each problem or 'ok'; exit status 0 or 2)")
    p.add_argument("index", help="index directory")
    p.set_defaults(func=cmd_verify)
