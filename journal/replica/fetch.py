"""Fetching a replica's history back: the bucket's objects laid out as a local journal directory,
which `replay` then reads with every local check (its `Source`).

`replay.restore(URL, replica_options=...)` lists the bucket once (`Listing`) and fetches into a
temporary directory only what it needs (`fetch_in_steps`): the newest complete cut and the
segments from it on (with each timeline's last segment, as local retention leaves a journal);
only when the restore does not stand on a fetched cut is the next older cut fetched too, and so
on, last the whole history. verify, audit and journal-inspect fetch the whole history
(`fetched`). Before a byte is used:

* names are parsed (`names.parse_replica_object`): anything else, also a name with `..`, `.`
  or empty parts, is never turned into a local path;
* every segment object's bytes (streamed to disk, never held whole) must hash to the sha256
  prefix in its name and have the listed size: a truncated object or other bytes under a
  valid name is `ReplicaCorrupt` naming it;
* the objects of each timeline must be contiguous in byte offset and LSN: the first gap is
  `ReplicaGap` naming the missing LSN range, or, with `at="end"`, the end of that timeline
  (the point-in-time end; what follows the gap is not used);
* a cut's files are fetched only when its MANIFEST.json (uploaded last, so present only for
  a complete cut) decodes and names safe paths (`ManifestFiles`: the cut format is the
  snapshot package's); the local checks then verify every sha256.

The chain of checksums across objects and segments is the local reader's check. Requests are
retried under the one policy (`retry.py`) FETCH_ATTEMPTS times.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Callable, Iterable, Iterator

from .. import layout
from . import names, retry
from .errors import ReplicaChanged, ReplicaCorrupt, ReplicaError, ReplicaGap, ReplicaUnreachable
from .store import Bucket, Location

FETCH_ATTEMPTS = 5

ManifestFiles = Callable[[bytes, str], "Iterable[str] | None"]
"""The files a cut's MANIFEST.json names, given its bytes and where it was read (for messages);
None when it does not decode or names an unsafe path."""


def _retry(fn, what: str, where: str):
    try:
        return retry.retrying(fn, what, tries=FETCH_ATTEMPTS,
                              final=(FileNotFoundError, FileExistsError, ReplicaError))
    except ReplicaError as exc:  # the bucket's content, not the network: final
        raise ReplicaCorrupt(str(exc), object=exc.object) from None
    except retry.GaveUp as exc:
        raise ReplicaUnreachable(f"replica {where}: {exc}; check that the store is reachable and "
                                 "retry the restore") from exc.last


class _Segment:
    def __init__(self, timeline: int, first_lsn: int):
        self.timeline, self.first_lsn = timeline, first_lsn
        self.sealed: list[names.ReplicaObject] = []
        self.pieces: list[names.ReplicaObject] = []

    def objects(self, sizes: dict[str, int], where: str) -> tuple[list, int, tuple | None]:
        """(objects to concatenate, last LSN, the gap (first, last LSN) that ends it, if any)."""
        if len(self.sealed) > 1:
            claims = ", ".join(o.name for o in self.sealed)
            raise ReplicaCorrupt(f"replica {where}: two objects claim segment {self.timeline}/"
                                 f"{self.first_lsn}: {claims}", object=self.sealed[1].name)
        if self.sealed:
            return self.sealed, self.sealed[0].to_lsn, None
        out, offset, lsn = [], 0, self.first_lsn - 1
        for piece in sorted(self.pieces, key=lambda p: p.offset):
            if piece.offset < offset or (piece.offset == offset and piece.from_lsn != lsn + 1):
                raise ReplicaCorrupt(f"replica {where}: {piece.name} overlaps the bytes before it "
                                     f"(offset {piece.offset}, expected {offset})", object=piece.name)
            if piece.offset > offset:
                return out, lsn, (lsn + 1, piece.from_lsn - 1)
            out.append(piece)
            offset, lsn = offset + sizes[piece.name], piece.to_lsn
        return out, lsn, None


def _plan(listed: dict[str, int], where: str, at_end: bool) -> tuple[dict, dict]:
    """({(timeline, first LSN): objects} of the segments to fetch, {cut: {rel: name}}) of the
    objects `listed` (name -> size)."""
    segments: dict[tuple[int, int], _Segment] = {}
    cuts: dict[str, dict[str, str]] = {}
    for name in listed:
        obj = names.parse_replica_object(name)
        if obj is None:
            continue
        if obj.kind == "cut":
            cuts.setdefault(obj.cut, {})[obj.rel] = name
            continue
        key = (obj.timeline, obj.seg_first_lsn)
        seg = segments.setdefault(key, _Segment(*key))
        (seg.sealed if obj.kind == "sealed" else seg.pieces).append(obj)
    chosen: dict[tuple[int, int], list] = {}
    ended: set[int] = set()
    previous: dict[int, int] = {}  # timeline -> last LSN of its segment before
    for key in sorted(segments):
        tl, first = key
        if tl in ended:
            continue
        gap = None
        if tl in previous and first != previous[tl] + 1:
            gap, objs = (previous[tl] + 1, first - 1), []
        else:
            objs, previous[tl], gap = segments[key].objects(listed, where)
            if objs:
                chosen[key] = objs
        if gap is not None:
            if not at_end:
                raise ReplicaGap(
                    f"replica {where}: LSNs {gap[0]}..{gap[1]} of timeline {tl} are not in the "
                    f"bucket (no object holds them, but objects after them exist): the history "
                    f"cannot be restored past LSN {gap[0] - 1}; restore(URL, at='end') restores up "
                    "to the gap", timeline=tl, first_lsn=gap[0], last_lsn=gap[1])
            ended.add(tl)
    return chosen, cuts


def _download(bucket: Bucket, name: str, path: str, where: str) -> tuple[int, str]:
    """Object `name` streamed into `path` (retried from the start); (size, sha256 hex)."""
    def once():
        if os.path.exists(path):
            os.unlink(path)
        return bucket.download(name, path)
    try:
        return _retry(once, f"download {name}", where)
    except FileNotFoundError:
        raise ReplicaChanged(f"replica {where}: object {name} was listed but is gone (deleted while "
                             "the restore ran, e.g. by retention or a lifecycle rule); nothing was "
                             "restored: restore again", object=name) from None


def _fetch_object(bucket: Bucket, obj: names.ReplicaObject, size: int, path: str, where: str) -> None:
    got, sha = _download(bucket, obj.name, path, where)
    if got != size or not sha.startswith(obj.sha):
        raise ReplicaCorrupt(f"replica {where}: object {obj.name} holds {got} bytes with sha256 "
                             f"{sha[:16]}..., not the bytes its name says ({size} listed, sha256 "
                             f"{obj.sha}...): it is truncated or was replaced; nothing of it is used",
                             object=obj.name)


def _fetch_segment(bucket: Bucket, key: tuple[int, int], objs: list, sizes: dict[str, int],
                   into: str, where: str) -> None:
    final = os.path.join(into, layout.segment_name(*key))
    part = final + ".part"
    with open(final, "wb") as out:
        for obj in objs:
            _fetch_object(bucket, obj, sizes[obj.name], part, where)
            with open(part, "rb") as f:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            os.unlink(part)


def _fetch_cut(bucket: Bucket, cut: str, files: dict[str, str], into: str, where: str,
               manifest_files: ManifestFiles) -> None:
    """The cut's manifest, and the files it names when it decodes and names only safe paths
    (else the local checks report the manifest, and the restore skips the cut)."""
    if layout.MANIFEST_NAME not in files:
        return  # not complete: the manifest is uploaded last
    cut_dir = os.path.join(into, layout.SNAPSHOTS_DIR, cut)
    os.makedirs(cut_dir)
    manifest_path = os.path.join(cut_dir, layout.MANIFEST_NAME)
    _download(bucket, files[layout.MANIFEST_NAME], manifest_path, where)
    with open(manifest_path, "rb") as f:
        data = f.read()
    for rel in manifest_files(data, f"{where}/{names.CUTS_PREFIX}{cut}") or ():
        if rel in files and rel != layout.MANIFEST_NAME:
            local = os.path.join(cut_dir, *rel.split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            _download(bucket, files[rel], local, where)


class Listing:
    """One LIST of a replica and what it holds: the segment objects to fetch (names checked,
    each timeline contiguous; with `at_end` a gap ends its timeline) and the cuts; `fetch` lays
    some or all of it out as a journal."""

    def __init__(self, location: Location, *, at_end: bool, manifest_files: ManifestFiles):
        self.where, self.manifest_files = location.where, manifest_files
        self.bucket = location.open()
        self.sizes = _retry(self.bucket.list, "list the bucket", self.where)
        self.segments, self.cuts = _plan(self.sizes, self.where, at_end)

    def complete_cuts(self) -> list[str]:
        """The cuts whose MANIFEST.json (uploaded last) is in the bucket, newest first."""
        done = [c for c, files in self.cuts.items() if layout.MANIFEST_NAME in files]
        return sorted(done, key=lambda c: layout.parse_cut_dir_name(c)[::-1], reverse=True)

    def fetch(self, into: str, *, from_lsn: int | None, cuts: list[str]) -> None:
        """Into `into`, what it lacks of: the segments a history from cut LSN `from_lsn` needs
        (all with None: else those holding a commit after it, and the last of each timeline,
        whose header the lineage is read from, as local retention leaves a journal) and `cuts`."""
        last_of = {tl: first for tl, first in sorted(self.segments)}  # timeline -> its last segment
        for key, objs in sorted(self.segments.items()):
            needed = from_lsn is None or last_of[key[0]] == key[1] or objs[-1].to_lsn > from_lsn
            if needed and not os.path.exists(os.path.join(into, layout.segment_name(*key))):
                _fetch_segment(self.bucket, key, objs, self.sizes, into, self.where)
        for cut in cuts:
            if not os.path.exists(os.path.join(into, layout.SNAPSHOTS_DIR, cut)):
                _fetch_cut(self.bucket, cut, self.cuts[cut], into, self.where, self.manifest_files)


def fetch_in_steps(listing: Listing, into: str, at) -> Iterator[bool]:
    """Fill `into` step by step for a restore at `at` to try after each (yielded: whether this
    is the last step, the whole history): the newest complete cut (at or before `at` when it is
    an LSN) and the segments from it on; then also the next older cut and the segments from
    it; and so on; last everything."""
    cuts = listing.complete_cuts()
    if isinstance(at, int) and not isinstance(at, bool):
        cuts = [c for c in cuts if layout.parse_cut_dir_name(c)[1] <= at]
    for i, cut in enumerate(cuts):
        listing.fetch(into, from_lsn=layout.parse_cut_dir_name(cut)[1], cuts=cuts[:i + 1])
        yield False
    listing.fetch(into, from_lsn=None, cuts=sorted(listing.cuts))
    yield True


@contextlib.contextmanager
def fetched(listing: Listing) -> Iterator[str]:
    """A temporary journal directory holding all of the history `listing` lists (removed
    afterwards)."""
    with tempfile.TemporaryDirectory(prefix="oj-replica-") as tmp:
        listing.fetch(tmp, from_lsn=None, cuts=sorted(listing.cuts))
        yield tmp
