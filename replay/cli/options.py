"""Argument types and options shared by several `journal-inspect` subcommands."""

from __future__ import annotations

import argparse


def int_at_least(low: int, what: str):
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


lsn = int_at_least(0, "an LSN")
positive = int_at_least(1, "N")


def add_lsn_range(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_lsn", type=lsn, metavar="LSN", help="first LSN (default 1)")
    parser.add_argument("--to", dest="to_lsn", type=lsn, metavar="LSN", help="last LSN (default: the end)")


def add_timeline(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeline", type=int, metavar="T",
                        help="read timeline T's history instead of the active one (a dead branch)")


def add_all(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", dest="show_all", action="store_true",
                        help="show every item of long listings (text output shows the first 20 of "
                             "each and says how many it left out; --json always has every item)")
