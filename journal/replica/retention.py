"""Retention in the bucket: what compaction's retention decision (`RetentionDecision`, which
`snapshot.compact` returns to the replica) deletes from the journal's replica; and the segments
local retention may retire in a journal with a replica (`shipped_filter`).

Local retention (`snapshot/compactor.py`) keeps the cuts the newest restorable point and
every pinned checkpoint stand on, and retires the segments wholly at or before the oldest kept
cut's LSN (the boundary). The bucket follows the same rule, computed from what the replica
knows the bucket holds (the shipper's inventory, no LIST):

* a cut that is neither kept nor on disk any more: its MANIFEST.json first (from then on no
  reader takes it for a complete cut), then its other files;
* on the active history's lineage (the branches a restore follows), root first, and on each
  timeline oldest first: each segment whose sealed object ends at or before the boundary
  (and the timeline's branch point), its tail pieces first and then its sealed object, never
  the last segment of a timeline (a restore reads its header to find the lineage). The first
  segment of a timeline that does not qualify ends the walk on that timeline, so each
  timeline in the bucket only ever starts later, never has a hole: the shape local
  retention (`snapshot.retention.retirable_segments`) leaves on disk.

Nothing else is deleted: not the lease, not a timeline off the lineage, nothing after the
boundary. The shipper carries the request out (`Shipper.apply_retention`)
only once every kept cut's MANIFEST.json and the history through the newest kept cut are in
the bucket, after checking that it still holds the lease. Without a committed checkpoint point
that a kept cut covers (boundary 0) compaction decides nothing and nothing is requested.
"""

from __future__ import annotations

import os
from typing import Iterable, NamedTuple

from .. import history, layout
from ..reader import Reader
from . import names


class RetentionDecision(NamedTuple):
    """What compaction's retention decided, for the replica to apply (`ReplicaLink.apply_retention`)."""

    kept: frozenset[str]         # the cut directories kept (paths)
    boundary: int                # segments wholly at or before this LSN are retired (> 0)
    reader: Reader               # the history as compaction read it, before it retired anything


class RetentionRequest(NamedTuple):
    """What the shipper is asked to delete, and what must be in the bucket first."""

    deletions: tuple[str, ...]   # object names, in the order they are deleted
    needs_cuts: tuple[str, ...]  # cut directory names whose MANIFEST.json must be in the bucket
    needs_lsn: int               # the history must be shipped through this LSN


def retention_request(decision: RetentionDecision, bucket: Iterable[str], journal_path: str,
                      on_disk: Iterable[str]) -> RetentionRequest:
    """The request that carries `decision` out in a bucket holding `bucket` (object names),
    for the journal at `journal_path` whose `snapshots/` holds the cuts `on_disk` (names)."""
    snapshots = os.path.join(journal_path, layout.SNAPSHOTS_DIR)
    needs = sorted(os.path.basename(p) for p in decision.kept if os.path.dirname(p) == snapshots
                   and layout.parse_cut_dir_name(os.path.basename(p)) is not None)
    return RetentionRequest(
        tuple(bucket_deletions(bucket, decision.reader, set(needs) | set(on_disk), decision.boundary)),
        tuple(needs), max((layout.parse_cut_dir_name(c)[1] for c in needs), default=decision.boundary))


def bucket_deletions(bucket: Iterable[str], reader: Reader, spared_cuts: set[str],
                     boundary: int) -> list[str]:
    """The objects of `bucket` (names relative to the prefix) to delete, in order: the cuts not
    in `spared_cuts`, then the segment objects of `reader`'s lineage wholly at or before
    `boundary`."""
    objects = [o for o in map(names.parse_replica_object, bucket) if o is not None]
    return _cut_deletions(objects, spared_cuts) + _segment_deletions(objects, reader, boundary)


def _cut_deletions(objects: list[names.ReplicaObject], spared: set[str]) -> list[str]:
    files: dict[str, list[str]] = {}
    for obj in objects:
        if obj.kind == "cut" and obj.cut not in spared:
            files.setdefault(obj.cut, []).append(obj.rel)
    out = []
    for cut in sorted(files, key=lambda c: layout.parse_cut_dir_name(c)[::-1]):  # oldest first
        for rel in sorted(files[cut], key=lambda r: (r != layout.MANIFEST_NAME, r)):  # manifest first
            out.append(names.cut_object_name(cut, rel))
    return out


def _segment_deletions(objects: list[names.ReplicaObject], reader: Reader, boundary: int) -> list[str]:
    sealed: dict[tuple[int, int], names.ReplicaObject] = {}
    pieces: dict[tuple[int, int], list[names.ReplicaObject]] = {}
    for obj in objects:
        key = (obj.timeline, obj.seg_first_lsn)
        if obj.kind == "sealed":
            sealed[key] = obj
        elif obj.kind == "piece":
            pieces.setdefault(key, []).append(obj)
    out = []
    for span in history.spans(reader.timelines):
        tl = span.timeline
        limit = boundary if span.limit is None else min(boundary, span.limit)
        last_first = tl.segments[-1].first_lsn  # the timeline's last segment always stays
        keys = sorted(k for k in set(sealed) | set(pieces) if k[0] == tl.timeline and k[1] < last_first)
        for key in keys:
            whole = sealed.get(key)
            if whole is None or whole.to_lsn > limit:
                break  # the rest of this timeline stays: it never has a hole
            out += [p.name for p in sorted(pieces.get(key, ()), key=lambda p: p.offset)] + [whole.name]
    return out


def shipped_filter(journal_path: str, segments: list) -> list:
    """The `segments` local retention may retire: all of them without a replica, else only those
    whose `replica/<segment>.shipped` marker says they are in the bucket."""
    if not os.path.isdir(os.path.join(journal_path, layout.REPLICA_DIR)):
        return segments
    return [s for s in segments if os.path.exists(
        os.path.join(journal_path, layout.shipped_marker_name(s.timeline, s.first_lsn)))]
