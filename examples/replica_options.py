"""`--replica URL --replica-options JSON` of the example trainer and `journal-demo`."""

from __future__ import annotations

import argparse

from journal.replica import parse_options

from .extras import require


def add_replica_arguments(p: argparse.ArgumentParser, replica_help: str) -> None:
    p.add_argument("--replica", default=None, metavar="URL", help=replica_help)
    p.add_argument("--replica-options", default=None, metavar="JSON",
                   help="obstore.store.from_url keyword arguments for --replica, as a JSON object "
                        "(endpoint, access_key_id, secret_access_key, region, client_options)")


def parse_replica_options(p: argparse.ArgumentParser, a: argparse.Namespace) -> dict | None:
    """The parsed `--replica-options` (None without it); a usage error names what is wrong."""
    if a.replica and a.baseline:
        p.error("--replica ships the journal: the baseline has none")
    if a.replica is not None:
        require(p, "--replica", "obstore", "replica")
    if a.replica_options is None:
        return None
    if a.replica is None:
        p.error("--replica-options needs --replica")
    try:
        return parse_options(a.replica_options)
    except ValueError as exc:
        p.error(str(exc))
