"""What several commands share: the parser classes, the option groups, and the checks done before
any work (names and parameters refused before a corpus is embedded or an index loaded)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping, Sequence


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


class StoreKs(argparse.Action):
    """``--ks``: stores the list and notes that it was given (``--k`` is its deprecated alias)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.ks_given = True


def int_list(text: str) -> list[int]:
    """``"1,5,10"`` as ``[1, 5, 10]`` (an argparse ``type``: ArgumentTypeError for anything else)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def name_list(text: str) -> list[str]:
    """``"a, b,,c"`` as ``["a", "b", "c"]`` (an argparse ``type``: blank items dropped)."""
    return [x.strip() for x in text.split(",") if x.strip()]


def type_map(text: str) -> dict[str, str]:
    """``year=int,zip=str`` as ``{"year": "int", "zip": "str"}``."""
    out = {}
    for item in name_list(text):
        field, sep, kind = item.partition("=")
        if not sep or not field.strip():
            raise argparse.ArgumentTypeError(f"expected FIELD=TYPE items, got {item!r}")
        out[field.strip()] = kind.strip()
    return out


def param_option(p: argparse.ArgumentParser, what: str) -> None:
    """Add the repeatable ``--param [PIPELINE.]NAME=VALUE`` option to ``p`` (``what``: its help's
    clause saying what the parameter is for)."""
    p.add_argument("--param", action="append", metavar="[PIPELINE.]NAME=VALUE",
                   help=f"a pipeline parameter {what} (repeatable; VALUE read as JSON, e.g. "
                        "g3rag.gamma=0.05, bm25.k1=1.2, stitch.relevance=dense); checked against the "
                        "pipeline's parameters, an invalid one is refused naming the allowed values")


def corpus_options(p: argparse.ArgumentParser) -> None:
    """Add the options that say how a corpus file is read (its id, title, text and metadata
    fields, metadata types) and chunked (``--chunk-tokens``, ``--chunk-overlap``) to ``p``."""
    p.add_argument("--id-field", help="the field/column holding passage ids (default: detected)")
    p.add_argument("--title-field", help="the field/column holding titles (default: detected)")
    p.add_argument("--text-field", help="the field/column holding the text (default: detected)")
    p.add_argument("--metadata-fields", type=name_list, metavar="A,B",
                   help="fields/columns kept as passage metadata (default: all others)")
    p.add_argument("--metadata-types", type=type_map, metavar="FIELD=TYPE,...",
                   help="types of metadata fields: int, float, bool or str (default: as the file holds them; "
                   "CSV/TSV columns inferred)")
    p.add_argument("--chunk-tokens", type=int, metavar="N",
                   help="split documents into passages of at most N tokens of the embedder's tokenizer, "
                   "cut at sentence ends where possible (ids DOCID#k)")
    p.add_argument("--chunk-overlap", type=int, default=0, metavar="M",
                   help="tokens shared by consecutive passages of a document (with --chunk-tokens)")


def common(p: argparse.ArgumentParser, embedder_default: str | None = "minilm") -> None:
    """Add the options every command that computes takes to ``p``: ``--device``, ``--embedder``
    (default ``embedder_default``; None: the index's own) and ``--quiet``."""
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="where to compute (auto: cuda when available, else cpu)")
    p.add_argument("--embedder", default=embedder_default,
                   help="'minilm' (all-MiniLM-L6-v2), 'hashing-DIM', 'st:MODEL_FOLDER_OR_CACHED_NAME', 'openai:MODEL'" +
                        ("" if embedder_default else " (default: the index's embedder)"))
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")


def cli_params(args: argparse.Namespace, default_pipeline: str | None = None) -> dict[str, dict]:
    """``--param [PIPELINE.]NAME=VALUE`` items as ``{pipeline: {name: value}}`` (values read as JSON)."""
    from ..assignments import parse_assignments

    return parse_assignments(args.param or [], default_pipeline)


def check_before_work(pipelines: Sequence[str], params: Mapping[str, Mapping[str, Any]],
                       flag: str = "--pipelines") -> None:
    """Refuse unknown pipeline names and invalid ``--param`` items before any embedding or loading
    (:class:`InputError` naming the known pipelines, or the parameter and its allowed values)."""
    from ..engine.errors import InputError
    from ..engine.pipelines import pipeline_class
    from ..index import validate_params

    if not pipelines:
        raise InputError(f"{flag} names no pipeline")
    for name in pipelines:
        pipeline_class(name)
    validate_params(params)


def refuse_search_params(params: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse search parameters where only fit parameters can be stored (``hopgraph index``)."""
    from ..engine.errors import InputError
    from ..engine.pipelines import pipeline_class

    for name, values in params.items():
        cls = pipeline_class(name)
        search = sorted(k for k in values if not cls.FitParams.accepts(k))
        if search:
            raise InputError(f"--param {name}.{search[0]}: a search parameter, not stored with an index; give it to "
                             "`hopgraph search --param` (fit parameters of "
                             f"{name}: {', '.join(cls.FitParams.names()) or 'none'})")


def read_corpus_args(args: argparse.Namespace):
    """The corpus named by ``args.corpus``, read with the field options of :func:`corpus_options`
    (:func:`~hopgraph.engine.components.corpus.read_corpus`)."""
    from ..engine.components.corpus import read_corpus

    return read_corpus(args.corpus, id_field=args.id_field, title_field=args.title_field,
                       text_field=args.text_field, metadata_fields=args.metadata_fields,
                       metadata_types=args.metadata_types)


def id_lines(path: str, flag: str) -> list[str]:
    """The ids of a file given as ``flag``, one a line (blank lines skipped; ``-``: standard input);
    InputError naming the file: missing, not a regular file, or (with the line) not UTF-8."""
    from ..engine.components.records import input_path, read_text

    text = sys.stdin.read() if path == "-" else read_text(input_path(path, f"{flag} file"))
    return [line.strip() for line in text.splitlines() if line.strip()]


def ids_from(args: argparse.Namespace) -> list[str]:
    """Passage ids given on the command line and in ``--ids-file`` (one per line, ``-`` = stdin)."""
    from ..engine.errors import InputError

    ids = list(args.ids or [])
    if args.ids_file:
        ids += id_lines(args.ids_file, "--ids-file")
    if not ids:
        raise InputError("no passage ids given (IDs on the command line or --ids-file FILE)")
    return ids


#: the comparisons of ``--where FIELD<OP>VALUE``, longest first (so ``>=`` is not read as ``>``)
WHERE_OPERATORS = (("!=", "$ne"), (">=", "$gte"), ("<=", "$lte"), ("=", "$eq"), (">", "$gt"), ("<", "$lt"))


def where_filter(items: Sequence[str] | None) -> dict[str, Any] | None:
    """``--where`` items as one ``where`` filter (:mod:`hopgraph.engine.filters`): ``FIELD=VALUE``,
    ``FIELD!=VALUE``, ``FIELD>VALUE``, ``FIELD>=VALUE``, ``FIELD<VALUE``, ``FIELD<=VALUE`` (VALUE read
    as JSON when it parses — ``year>=1999``, ``draft=false``, ``tags=["a","b"]`` —, else as a
    string), or a whole filter as a JSON object (``{"$or": [...]}``). The items must all hold,
    except that equalities of one field given twice take either value."""
    from ..engine.errors import InputError

    if not items:
        return None
    equal: dict[str, list] = {}
    parts: list[dict[str, Any]] = []
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                where = json.loads(item)
            except ValueError as e:
                raise InputError(f"--where {item!r}: not a JSON object ({e})") from None
            parts.append(where)
            continue
        cut = min(((item.find(sym), sym, op) for sym, op in WHERE_OPERATORS if item.find(sym) > 0),
                  default=None, key=lambda c: (c[0], -len(c[1])))
        if cut is None or not item[:cut[0]].strip():
            raise InputError(f"--where expects FIELD=VALUE (or !=, >, >=, <, <=, or a JSON filter), got {item!r}")
        at, sym, op = cut
        field, raw = item[:at].strip(), item[at + len(sym):]
        if raw.lstrip()[:1] in ("=", "<", ">", "!"):
            raise InputError(f"--where {item!r}: the value {raw!r} starts with an operator (a typo?); a text "
                             f"value that does is given as JSON: {field}{sym}'\"{raw}\"'")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if op == "$eq":
            equal.setdefault(field, []).extend(value if isinstance(value, list) else [value])
        else:
            parts.append({field: {op: value}})
    parts = [{f: v[0] if len(v) == 1 else v} for f, v in equal.items()] + parts
    return parts[0] if len(parts) == 1 else {"$and": parts}
