"""The ``hopgraph`` command line: index, add, delete, compact, verify, search, eval (``--ablations``), train-gnn,
train-gate (DMAR, SPEC §3), demo, serve."""
from __future__ import annotations

import sys
from typing import Sequence

from .. import __version__, logs
from ..logs import LEVELS
from . import index_commands, other_commands, search_commands
from .options import ArgumentParser

#: exit status of a user error (bad input, bad index, missing file, ...): one line on stderr
EXIT_USER_ERROR = 2
#: exit status of an internal error (a bug in hopgraph): the traceback, then one summary line
EXIT_INTERNAL_ERROR = 1
#: exit status after Ctrl-C / SIGINT (128 + 2, as shells report it): one line on stderr
EXIT_INTERRUPTED = 130


def build_parser() -> ArgumentParser:
    """The ``hopgraph`` parser: one subcommand per command module."""
    from ..engine.pipelines import pipeline_names

    parser = ArgumentParser(prog="hopgraph", description="GPU-accelerated multi-hop graph retrieval")
    parser.add_argument("--version", action="version", version=f"hopgraph {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    known = ", ".join(pipeline_names())
    for module in (index_commands, search_commands, other_commands):
        module.register(sub, known)
    for command in sub.choices.values():
        if not any("--log-level" in a.option_strings for a in command._actions):
            command.add_argument("--log-level", default="warning", choices=LEVELS,
                                 help="the least severe log records shown on stderr (one line each)")
    return parser


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
    from ..engine.errors import HopgraphError

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
    Log records of ``--log-level`` and above, and every warning, are one line each on stderr
    (:func:`hopgraph.logs.configure`) while the command runs.
    """
    args = build_parser().parse_args(argv)
    logs.configure(args.log_level, prefix=f"hopgraph {args.command}")
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
    finally:
        logs.reset()
