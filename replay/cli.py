"""`journal-inspect`: argument parsing and dispatch. The work is in the modules named per command.

Read-only: never takes the writer lock, never writes inside the journal.
Exit codes: 0 clean, 1 problems found (or a damaged journal read in strict
mode), 2 usage error or unreadable path; user errors print one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from journal import EVENT_KINDS, MODES

from .inspect_source import USAGE, InspectError, open_source, user_error

PROG = "journal-inspect"

_DESCRIPTION = """\
Look inside an ownership journal: what it holds, one group's history, the owners at
any checkpoint, whether every cut is usable, whether every dataset row was trained
exactly once. Read-only: it never takes the writer lock and never writes inside the
journal, so it is safe on a journal a trainer is appending to, on archived segments
(*.wal.zst) and on damaged journals (--mode)."""

_EPILOG = """\
exit codes: 0 clean, 1 problems found (verify, audit; or a damaged journal read in
strict mode), 2 usage error or unreadable path.

examples:
  journal-inspect summary runs/exp1/journal
  journal-inspect audit runs/exp1/journal          # did my resume lose or repeat prompts?
  journal-inspect verify runs/exp1/journal --json
  journal-inspect log runs/exp1/journal --idx 41
  journal-inspect state runs/exp1/journal --at latest-checkpoint --owner admitted

Run `journal-inspect <command> --help` for each command's options and examples."""

# name -> (help line, description, epilog)
_COMMANDS = {
    "summary": (
        "runs, branches, LSN range, segments, cuts, checkpoints, owner counts, size",
        "What the journal holds: the run, its branches (one per restore) and their dead tails, "
        "the LSN range of the active history, segments live and archived, cuts, checkpoints, "
        "owner counts at the end, events by kind, size on disk, and every problem met on the "
        "way. In --mode salvage it reads around damage and lists what it skipped.",
        "examples:\n  journal-inspect summary runs/exp1/journal\n"
        "  journal-inspect summary runs/exp1/journal --mode salvage   # a damaged journal\n"
        "  journal-inspect summary ckpt/step_8/ownership              # a cut directory"),
    "log": (
        "events one per line, filtered by LSN range, group, dataset row, kind",
        "Print the events of the active history (or of one timeline's history) one per line, "
        "oldest first: LSN, timeline, kind, groups, details. With --json, one JSON object per "
        "line. Filters combine (all must match).",
        "examples:\n  journal-inspect log J --from 1000 --to 1200\n"
        "  journal-inspect log J --group 4711            # every event naming group 4711\n"
        "  journal-inspect log J --idx 41 --task math    # row 41 of task math: takes and what followed\n"
        "  journal-inspect log J --kind discarded,checkpoint_committed\n"
        "  journal-inspect log J --timeline 1 --from 900 # a dead tail, for forensics\n"
        "  journal-inspect log J --json | jq -c 'select(.kind==\"trained\")'"),
    "group": (
        "one group's whole history, on every branch",
        "Every event that names the group, on the active history and on every dead tail, "
        "with LSNs and the branch each is on; its locator; its owner at the end of the active "
        "history; the spare that replaced it, if any. Exit 1 if the group never appears.",
        "examples:\n  journal-inspect group runs/exp1/journal 4711\n"
        "  journal-inspect group runs/exp1/journal 4711 --json"),
    "state": (
        "owners of the live groups at a checkpoint, the end, or an LSN",
        "The ownership state at one point of the active history, built as restore builds it "
        "(newest valid cut at or before the point plus the journal tail): counts per owner, "
        "the loader state, and every live group with its locator. Trained and dropped groups "
        "are counted, not listed.",
        "examples:\n  journal-inspect state J                        # the latest committed checkpoint\n"
        "  journal-inspect state J --at end\n  journal-inspect state J --at 5120\n"
        "  journal-inspect state J --step 800 --owner admitted,replay\n"
        "  journal-inspect state J --json | jq '.groups | length'"),
    "cuts": (
        "each cut: valid, stale, incomplete, or which check fails",
        "List every cut under <journal>/snapshots (newest first) through the chain of checks: "
        "1 manifest, 2 listed files present, 3 no unlisted files, 4 sha256, 5 schema, 6 counts, "
        "7 records, 8 anchor on the active history (a stale cut belongs to a dead branch). "
        "Marks the cut restore would start from.",
        "examples:\n  journal-inspect cuts runs/exp1/journal\n"
        "  journal-inspect cuts ckpt/step_8/ownership --json"),
    "verify": (
        "the whole chain of checks over journal and cuts (exit 1 on problems)",
        "Check everything restore relies on: every segment header, frame checksum, chain link "
        "and LSN on every timeline; each branch continues its parent's chain; the ownership rules "
        "over the active history and every dead tail; every cut through checks 1-8 and against the "
        "journal's own fold at its LSN; and that the restore point is reachable. Problems name "
        "segment, offset and LSN. Torn tails (never acknowledged) and stale cuts are warnings. "
        "Whatever --mode says, verify reads every frame as salvage does, so it reports all the "
        "damage, not only the first.",
        "examples:\n  journal-inspect verify runs/exp1/journal && echo clean\n"
        "  journal-inspect verify runs/exp1/journal --json | jq '.problems'"),
    "audit": (
        "exactly-once report per loader epoch (exit 1 if a row was trained twice or lost)",
        "Per epoch of the loader, over the active history: dataset rows trained exactly once, "
        "more than once (listed, with groups and steps), lost (listed: taken - on the active "
        "history or on a dead tail - but never trained, not dropped and not live at the end), "
        "dropped by reason, still in flight; and per restore, the work its dead tail held "
        "(rollouts finished there, salvaged, regenerated; groups trained there and retrained). "
        "A row taken only on a dead tail that the resumed run has not reached yet is 'pending', "
        "not lost.",
        "examples:\n  journal-inspect audit runs/exp1/journal\n"
        "  journal-inspect audit runs/exp1/journal --json | jq '.epochs[].trained_more'"),
    "export": (
        "events as JSON lines to a file (.jsonl or zstandard .jsonl.zst)",
        "Write the events of the active history (or of --timeline's) as JSON lines, one event "
        "per line (the same objects as `log --json`); a name ending in .zst is compressed with "
        "zstandard. The file is written beside its final name and renamed when complete.",
        "examples:\n  journal-inspect export runs/exp1/journal --out events.jsonl\n"
        "  journal-inspect export runs/exp1/journal --out events.jsonl.zst --from 1000\n"
        "  zstdcat events.jsonl.zst | jq -c 'select(.kind==\"discarded\")'"),
    "timeline": (
        "owner counts per training step as a table (--png: a plot)",
        "Owner counts after each training step (the last commit of a `trained(step=S)`): in "
        "flight (reserved + admitted), replay, spare, trained and dropped so far, and how many "
        "groups the step trained. --png draws them (needs matplotlib: pip install "
        "'ownership-journal[plot]').",
        "examples:\n  journal-inspect timeline runs/exp1/journal\n"
        "  journal-inspect timeline runs/exp1/journal --every 100\n"
        "  journal-inspect timeline runs/exp1/journal --png owners.png"),
}


def _int_at_least(low: int, what: str):
    """An argparse type: an integer >= `low`, with a message naming what it is."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} is an integer, not {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{what} is {low} or more, not {v}")
        return v
    return parse


_lsn = _int_at_least(0, "an LSN")
_positive = _int_at_least(1, "N")


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
                        "cuts and verify, a cut directory)")
    common.add_argument("--json", action="store_true",
                        help="machine-readable output: one JSON document (JSON lines for log)")
    common.add_argument("--mode", choices=MODES, default="strict",
                        help="how to read damage: strict stops with an error (default), "
                             "point_in_time ends the history at the first damage, salvage skips "
                             "damaged frames and says what it skipped")
    p = {}
    for name, (help_line, description, epilog) in _COMMANDS.items():
        p[name] = sub.add_parser(name, parents=[common], help=help_line, description=description,
                                 epilog=epilog, formatter_class=fmt)
    lg = p["log"]
    lg.add_argument("--from", dest="from_lsn", type=_lsn, metavar="LSN", help="first LSN (default 1)")
    lg.add_argument("--to", dest="to_lsn", type=_lsn, metavar="LSN", help="last LSN (default: the end)")
    lg.add_argument("--group", type=int, metavar="ID", help="only events naming this group")
    lg.add_argument("--idx", type=int, metavar="ROW", help="only this dataset row: the taken events "
                    "of its groups and every later event naming them")
    lg.add_argument("--task", metavar="NAME", help="with --idx: only groups of this task")
    lg.add_argument("--kind", action="append", metavar="KIND",
                    help=f"only these event kinds (repeat or comma-separate): {', '.join(EVENT_KINDS)}")
    lg.add_argument("--timeline", type=int, metavar="T",
                    help="read timeline T's history instead of the active one (a dead branch)")
    p["group"].add_argument("group_id", type=int, metavar="ID", help="the group id")
    st = p["state"]
    st.add_argument("--at", default="latest-checkpoint", metavar="POINT",
                    help="latest-checkpoint (default: what restore returns), end, or an LSN")
    st.add_argument("--step", type=int, metavar="S", help="the committed checkpoint of step S")
    st.add_argument("--owner", action="append", metavar="OWNER",
                    help="only these owners (repeat or comma-separate): reserved, admitted, "
                         "replay, spare, in_flight")
    ex = p["export"]
    ex.add_argument("--out", required=True, metavar="FILE",
                    help="FILE.jsonl, or FILE.jsonl.zst for zstandard (not inside the journal)")
    ex.add_argument("--from", dest="from_lsn", type=_lsn, metavar="LSN", help="first LSN")
    ex.add_argument("--to", dest="to_lsn", type=_lsn, metavar="LSN", help="last LSN")
    ex.add_argument("--timeline", type=int, metavar="T", help="timeline T's history (default: active)")
    ex.add_argument("--force", action="store_true", help="replace FILE if it exists")
    tl = p["timeline"]
    tl.add_argument("--png", metavar="FILE", help="also draw the counts into FILE (needs matplotlib)")
    tl.add_argument("--every", type=_positive, default=1, metavar="N",
                    help="show every N-th step in the table (the last step is always shown)")
    return parser


def _handler(name: str) -> Callable:
    if name == "summary":
        from .summary import command
    elif name in ("log", "group"):
        from . import log_view
        command = getattr(log_view, name)
    elif name == "state":
        from .state_view import state as command
    elif name == "cuts":
        from .cuts_view import command
    elif name == "verify":
        from .verify import command
    elif name == "audit":
        from .audit import command
    elif name == "export":
        from .export import command
    else:
        from .step_timeline import command
    return command


_JOURNAL_ONLY = {"log", "group", "audit", "export", "timeline"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        try:
            src = open_source(args.path, args.mode, allow_cut=args.command not in _JOURNAL_ONLY)
            code = _handler(args.command)(src, args, sys.stdout)
            sys.stdout.flush()
        except BaseException as exc:
            err = user_error(exc)
            if err is None:
                raise
            raise err from None
    except InspectError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return exc.code
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
