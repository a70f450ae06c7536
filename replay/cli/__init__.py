"""`journal-inspect`: argument parsing and dispatch to one module per subcommand.

Each subcommand module has `HELP` (one line), `DESCRIPTION`, `EPILOG`,
`add_arguments(parser)` and `run(args) -> int`; `COMMANDS` maps the names to
them. They never take the writer lock and never write inside the journal.
Exit codes: 0 clean, 1 problems found (or a damaged journal read in strict
mode), 2 usage error or unreadable path, 130 interrupted; user errors print one
line on stderr. Every subcommand but `rescue` is read-only; `rescue` writes only
into the new directory it is given.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from journal.reader import MODES
from journal.replica import parse_options

from . import audit, cuts, export, group, log, rescue, restores, state, steps, summary, verify
from ..source import Source
from .progress import erase_line
from .source import INTERRUPTED, USAGE, InspectError, user_error

PROG = "journal-inspect"

COMMANDS = {"summary": summary, "log": log, "group": group, "state": state, "cuts": cuts,
            "verify": verify, "audit": audit, "export": export, "steps": steps, "restores": restores,
            "rescue": rescue}
ALIASES = {"steps": ["timeline"]}

_DESCRIPTION = """\
Look inside an ownership journal: what it holds, one group's history, the owners at
any checkpoint, whether every cut is usable, whether every dataset row was trained
exactly once. It never takes the writer lock and never writes inside the journal, so it
is safe on a journal a trainer is appending to, on archived segments (*.wal.zst) and on
damaged journals (--mode); `rescue` continues a damaged run in a new directory."""

_EPILOG = """\
exit codes: 0 clean, 1 problems found (verify, audit; or a damaged journal read in
strict mode), 2 usage error or unreadable path, 130 interrupted (Ctrl-C).

examples:
  journal-inspect summary runs/exp1/journal
  journal-inspect audit runs/exp1/journal          # did my resume lose or repeat prompts?
  journal-inspect restores runs/exp1/journal       # what did each crash cost, what was kept?
  journal-inspect verify runs/exp1/journal --json
  journal-inspect log runs/exp1/journal --idx 41
  journal-inspect state runs/exp1/journal --at latest-checkpoint --owner admitted
  journal-inspect audit s3://bucket/runs/42 --replica-options '{"region": "us-east-1"}'
  journal-inspect rescue runs/exp1/journal runs/exp1/journal-rescued   # a damaged journal

Run `journal-inspect <command> --help` for each command's options and examples."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints the usage too)
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(USAGE)


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog=PROG, description=_DESCRIPTION, epilog=_EPILOG, formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", metavar="<command>", title="commands",
                                parser_class=_Parser)
    sub.required = True
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("path", metavar="PATH", help="journal directory (or, for summary, state, "
                        "cuts, verify and rescue, a cut directory), or a replica URL (s3://..., gs://..., "
                        "az://..., file://...): the bucket's history is read alone")
    common.add_argument("--replica-options", metavar="JSON", default=None,
                        help="with a replica URL: the keyword arguments of obstore.store.from_url "
                             "as a JSON object, e.g. '{\"endpoint\": \"http://127.0.0.1:9000\", "
                             "\"region\": \"us-east-1\"}' (credentials also from the environment)")
    common.add_argument("--json", action="store_true",
                        help="machine-readable output: one JSON document (JSON lines for log)")
    common.add_argument("--mode", choices=MODES, default="strict",
                        help="how to read damage: strict stops with an error (default), "
                             "point_in_time ends the history at the first damage, salvage skips "
                             "damaged frames and says what it skipped")
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, parents=[common], help=module.HELP, description=module.DESCRIPTION,
                           epilog=module.EPILOG, formatter_class=fmt, aliases=ALIASES.get(name, []))
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # a bucket: its history, fetched read-only into a temporary journal
        with Source(args.path, _replica_options(args.replica_options)).directory(at_end=True) as args.path:
            code = args.run(args)
        sys.stdout.flush()
        return code
    except BaseException as exc:
        err = user_error(exc)
        if err is None:
            raise
        raise err from None


def _replica_options(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        return parse_options(text)
    except ValueError as exc:
        raise InspectError(str(exc)) from None


def _interrupted(signum, frame):
    # the first Ctrl-C stops the command; the ones a user adds while it stops (and while the
    # interpreter exits) are ignored, so the stop - one line on stderr, exit 130 - is never cut short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run `journal-inspect ARGV` (default: the program's own command line). As the program
    (argv None, main thread), the first SIGINT stops it and later ones are ignored."""
    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupted)
    try:
        return _run(argv)
    except InspectError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return exc.code
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        erase_line()
        sys.stderr.write(f"{PROG}: interrupted\n")
        return INTERRUPTED
