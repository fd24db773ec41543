"""What several commands share: the parser classes, the option groups, and the checks done before
any work (names and parameters refused before a corpus is embedded or an index loaded)."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..engine.errors import InputError


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
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def param_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--param", action="append", metavar="[PIPELINE.]NAME=VALUE",
                   help=f"a pipeline parameter {what} (repeatable; VALUE read as JSON, e.g. "
                        "g3rag.gamma=0.05, bm25.k1=1.2, stitch.relevance=dense); checked against the "
                        "pipeline's parameters, an invalid one is refused naming the allowed values")


def corpus_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id-field", help="the field/column holding passage ids (default: detected)")
    p.add_argument("--title-field", help="the field/column holding titles (default: detected)")
    p.add_argument("--text-field", help="the field/column holding the text (default: detected)")
    p.add_argument("--metadata-fields", type=name_list, metavar="A,B",
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


def cli_params(args: argparse.Namespace, default_pipeline: str | None = None) -> dict[str, dict]:
    """``--param [PIPELINE.]NAME=VALUE`` items as ``{pipeline: {name: value}}`` (values read as JSON)."""
    from ..engine.params import parse_assignments

    return parse_assignments(args.param or [], default_pipeline)


def check_before_work(pipelines: Sequence[str], params: Mapping[str, Mapping[str, Any]],
                       flag: str = "--pipelines") -> None:
    """Refuse unknown pipeline names and invalid ``--param`` items before any embedding or loading
    (:class:`InputError` naming the known pipelines, or the parameter and its allowed values)."""
    from ..engine.pipelines import pipeline_class
    from ..index import validate_params

    if not pipelines:
        raise InputError(f"{flag} names no pipeline")
    for name in pipelines:
        pipeline_class(name)
    validate_params(params)


def refuse_search_params(params: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse search parameters where only fit parameters can be stored (``hopgraph index``)."""
    from ..engine.pipelines import pipeline_class

    for name, values in params.items():
        cls = pipeline_class(name)
        search = sorted(k for k in values if not cls.FitParams.accepts(k))
        if search:
            raise InputError(f"--param {name}.{search[0]}: a search parameter, not stored with an index; give it to "
                             "`hopgraph search --param` (fit parameters of "
                             f"{name}: {', '.join(cls.FitParams.names()) or 'none'})")


@contextlib.contextmanager
def warnings_to_stderr(command: str) -> Iterator[None]:
    """Print each :class:`PassageLengthWarning` raised inside as one line ``hopgraph COMMAND:
    warning: ...`` on stderr (other warnings are shown as usual)."""
    from ..engine.ingest.chunking import PassageLengthWarning

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


def read_corpus_args(args: argparse.Namespace):
    from ..engine.components.corpus import read_corpus

    return read_corpus(args.corpus, id_field=args.id_field, title_field=args.title_field,
                       text_field=args.text_field, metadata_fields=args.metadata_fields)


def ids_from(args: argparse.Namespace) -> list[str]:
    """Passage ids given on the command line and in ``--ids-file`` (one per line, ``-`` = stdin)."""
    ids = list(args.ids or [])
    if args.ids_file:
        text = sys.stdin.read() if args.ids_file == "-" else Path(args.ids_file).read_text(encoding="utf-8")
        ids += [line.strip() for line in text.splitlines() if line.strip()]
    if not ids:
        raise InputError("no passage ids given (IDs on the command line or --ids-file FILE)")
    return ids


def where_filter(items: Sequence[str] | None) -> dict[str, Any] | None:
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
