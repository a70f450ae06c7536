"""The names of a replica's objects, relative to its prefix; every object is immutable:

    wal/<timeline:08d>-<first lsn:020d>-<last lsn:020d>-<sha:16>.wal
                                             a sealed segment, whole (`sealed_object_name`)
    tail/<timeline:08d>-<first lsn:020d>/<offset:016d>-<from lsn:020d>-<to lsn:020d>-<sha:16>.part
                                             bytes [offset, offset + size) of a segment, holding
                                             commits from..to (the durable tail, `piece_name`)
    cuts/<cut>/<file>                        a cut's files; its MANIFEST.json uploaded last
    LEASE                                    the writer's lease (JSON, replaced by compare-and-swap)

`<sha:16>` is the first 16 hex digits of the object's sha256, so a truncated object or wrong
bytes under a valid name are detected before anything is read from them. What the journal
directory holds (the local `replica/<segment>.shipped` markers too) is in `journal/layout.py`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

WAL_PREFIX = "wal/"
TAIL_PREFIX = "tail/"
CUTS_PREFIX = "cuts/"
LEASE_NAME = "LEASE"

_SEALED_OBJECT = re.compile(r"^wal/(\d{8})-(\d{20})-(\d{20})-([0-9a-f]{16})\.wal$")
_PIECE_OBJECT = re.compile(r"^tail/(\d{8})-(\d{20})/(\d{16})-(\d{20})-(\d{20})-([0-9a-f]{16})\.part$")
_CUT_OBJECT = re.compile(r"^cuts/(cut-\d{8}-\d{20})/([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*)$")


def sealed_object_name(timeline: int, first_lsn: int, last_lsn: int, sha: str) -> str:
    return f"{WAL_PREFIX}{timeline:08d}-{first_lsn:020d}-{last_lsn:020d}-{sha[:16]}.wal"


def piece_name(timeline: int, seg_first_lsn: int, offset: int, from_lsn: int, to_lsn: int,
               sha: str) -> str:
    return (f"{TAIL_PREFIX}{timeline:08d}-{seg_first_lsn:020d}/{offset:016d}-{from_lsn:020d}-"
            f"{to_lsn:020d}-{sha[:16]}.part")


def cut_object_name(cut: str, rel: str) -> str:
    return f"{CUTS_PREFIX}{cut}/{rel}"


class ReplicaObject(NamedTuple):
    """What a replica object's name says. kind: "sealed", "piece" or "cut"."""

    kind: str
    name: str
    timeline: int = 0
    seg_first_lsn: int = 0
    offset: int = 0            # pieces: where in the segment the bytes go (sealed: 0)
    from_lsn: int = 0
    to_lsn: int = 0
    sha: str = ""
    cut: str = ""              # cuts: the cut's directory name
    rel: str = ""              # cuts: the file's path inside the cut


def parse_replica_object(name: str) -> ReplicaObject | None:
    """What object `name` (relative to the replica's prefix) is; None for a name that is
    none of ours, also one with `..`, `.` or empty parts (never turned into a local path)."""
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    if m := _SEALED_OBJECT.match(name):
        tl, first, last = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return ReplicaObject("sealed", name, tl, first, 0, first, last, m.group(4))
    if m := _PIECE_OBJECT.match(name):
        return ReplicaObject("piece", name, int(m.group(1)), int(m.group(2)), int(m.group(3)),
                             int(m.group(4)), int(m.group(5)), m.group(6))
    if m := _CUT_OBJECT.match(name):
        return ReplicaObject("cut", name, cut=m.group(1), rel=m.group(2))
    return None
