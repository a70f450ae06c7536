"""Each cut of a journal and whether restore may use it: valid, stale, incomplete, or which
check of the chain of checks it fails (its number and name in `snapshot.checks.CHECKS`).

A cut is read with `snapshot.read_cut` (every check of the chain but the anchor)
and anchored with `snapshot.catalog.anchor_problem` (the anchor: run, timeline, LSN and
chain on the active history), or, when a scan of the active history already passed
its LSN, with what that scan saw there (`Anchors`): the journal is not read again.
With `contents=False` only the checks that unpickle nothing run
(`snapshot.checks.check_cut_files`: manifest, files, sha256 streamed) before the
anchor, and each entry's `checked` says which ran. Temporary directories of an unfinished compaction
are listed as incomplete; restore never reads them.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Mapping

from journal import Reader
from journal.history import checkpoint_markers
from journal.state import latest_checkpoint
from snapshot import Cut, JournalMismatch, ManifestMissing, RestoreError, read_cut
from snapshot.checks import CHECKS, FILE_CHECKS, check_cut_files, check_of
from journal.layout import MANIFEST_NAME, SNAPSHOTS_DIR, TMP_PREFIX, cut_dirs
from snapshot.catalog import ManifestView, anchor_problem
import journal

MANIFEST_CHECK, ANCHOR_CHECK = check_of(ManifestMissing), check_of(JournalMismatch)
ALL_CHECKED = f"checks 1-{len(CHECKS)}"
FILES_CHECKED = f"checks 1-{len(FILE_CHECKS)} and {ANCHOR_CHECK.number} (contents not loaded)"


def cut_entry(path: str, lsn: int | None, timeline: int | None) -> dict:
    """A cut's entry before any check ran (LSN and timeline as its directory names them)."""
    return {"name": os.path.basename(path), "path": path, "lsn": lsn, "timeline": timeline,
            "step": None, "status": None, "check": None, "error": None, "reason": None,
            "restore_base": False, "counts": None, "created": None, "checked": None}


Anchors = dict[int, tuple[int, int]]  # LSN -> (timeline, chain) of the active history there


def anchor_lsns(path: str) -> set[int]:
    """The LSNs of the journal's cuts, as their directories name them: where a scan of the
    active history takes the `Anchors` that spare `list_cuts` a read of the journal per cut."""
    return {lsn for lsn, _timeline, _path in cut_dirs(path)}


def _anchored(reader: Reader, cut: Cut | ManifestView, anchors: Anchors | None) -> bool:
    """The cut is on the active history by what a scan of it saw at the cut's LSN (same run,
    timeline and chain). False also when the scan did not pass that LSN: `anchor_problem`
    decides then, and says why a cut is not anchored."""
    m = cut.manifest
    if anchors is None or (reader.run_id is not None and m.run_id != reader.run_id.hex()):
        return False
    return m.lsn == 0 or anchors.get(m.lsn) == (m.timeline, m.chain)


def classify_cut(path: str, reader: Reader | None, entry: dict | None = None, *,
                 contents: bool = True, anchors: Anchors | None = None
                 ) -> tuple[dict, Cut | ManifestView | None]:
    """Read one cut through the chain of checks; returns its entry and the cut when valid or
    stale. `contents=False`: checks 1-4 and the anchor only, and a `ManifestView` for the cut.
    `anchors`: the active history at cut LSNs a scan already passed (no read of the journal
    for a cut it anchors)."""
    e = entry or cut_entry(path, None, None)
    e["checked"] = ALL_CHECKED if contents else FILES_CHECKED
    if not os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        e["status"] = "incomplete"
        e["reason"] = f"no {MANIFEST_NAME}: an unfinished or foreign cut (restore skips it)"
        e["check"], e["error"] = MANIFEST_CHECK.number, "ManifestMissing"
        return e, None
    try:
        cut = read_cut(path) if contents else ManifestView(path, check_cut_files(path))
    except RestoreError as exc:
        check = check_of(exc)
        e["status"], e["check"], e["error"] = "invalid", check.number, type(exc).__name__
        e["reason"] = f"check {check.number} ({check.what}) fails: {exc}"
        return e, None
    m = cut.manifest
    e.update(lsn=m.lsn, timeline=m.timeline, step=m.checkpoint_step, counts=dict(m.counts),
             created=(datetime.fromtimestamp(m.created_unix, timezone.utc).isoformat(timespec="seconds")
                      if m.created_unix else None))
    problem = None
    if reader is not None and not _anchored(reader, cut, anchors):
        try:
            problem = anchor_problem(reader, cut)
        except journal.JournalCorrupt as exc:
            problem = f"the anchor cannot be checked: the journal is damaged there ({exc})"
    if problem is not None:
        e["status"], e["check"], e["error"] = "stale", ANCHOR_CHECK.number, "JournalMismatch"
        e["reason"] = problem
        return e, cut
    e["status"] = "valid"
    return e, cut


def latest_checkpoint_lsn(reader: Reader, cut: Cut | None) -> int | None:
    """The checkpoint_begun LSN of the newest committed checkpoint of the active history, scanning
    only the tail after `cut` (markers only)."""
    _end, committed = checkpoint_markers(reader.records(start_lsn=(cut.lsn + 1) if cut else 1),
                                         cut.state if cut else None, tolerant=reader.mode == "salvage")
    latest = latest_checkpoint(committed)
    return latest[1] if latest is not None else None


def is_cut(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MANIFEST_NAME))


def is_journal(path: str) -> bool:
    """A directory with segment files or a snapshots/ directory (a journal whose segments were
    all retired still has its cuts)."""
    return bool(journal.reader.list_segments(path)) or os.path.isdir(os.path.join(path, SNAPSHOTS_DIR))


def check_one_cut(path: str) -> dict:
    """A cut directory's entry; anchored on its journal when it sits in one's snapshots/."""
    parent = os.path.dirname(path)
    reader = None
    if os.path.basename(parent) == SNAPSHOTS_DIR and journal.reader.list_segments(os.path.dirname(parent)):
        reader = Reader(os.path.dirname(parent), "salvage")
    e, _ = classify_cut(path, reader)
    return e


def list_cuts(path: str, reader: Reader, restore_lsn: int | None = None, *,
              find_restore: bool = True, contents: bool = True,
              anchors: Anchors | None = None, classified: Mapping[str, dict] | None = None) -> list[dict]:
    """Every cut of the journal at `path`, newest LSN first, temporary directories last.
    `contents`, `anchors`: see `classify_cut`; without `contents` give `restore_lsn` or
    find_restore=False (finding the restore point reads the newest valid cut's state).
    `classified`: cut path -> its entry, for the cuts a caller already classified (they are
    not read again; with find_restore=False only, as their cuts are not kept)."""
    out, valid = [], []
    for lsn, timeline, cut_path in cut_dirs(path):
        if classified is not None and cut_path in classified:
            e, cut = classified[cut_path], None
        else:
            e, cut = classify_cut(cut_path, reader, cut_entry(cut_path, lsn, timeline), contents=contents,
                                  anchors=anchors)
        out.append(e)
        if e["status"] == "valid":
            valid.append((e, cut))
    root = os.path.join(path, SNAPSHOTS_DIR)
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            if name.startswith(TMP_PREFIX) and os.path.isdir(os.path.join(root, name)):
                e = cut_entry(os.path.join(root, name), None, None)
                e["status"] = "incomplete"
                e["reason"] = "temporary directory of a compaction that did not finish (never read)"
                out.append(e)
    if restore_lsn is None and find_restore and valid:
        restore_lsn = latest_checkpoint_lsn(reader, valid[0][1])
    if restore_lsn is not None:
        base = next((e for e, _cut in valid if e["lsn"] <= restore_lsn), None)
        if base is not None:
            base["restore_base"] = True
    return out


def tally(entries: list[dict]) -> dict[str, int]:
    counts = {"valid": 0, "stale": 0, "incomplete": 0, "invalid": 0}
    for e in entries:
        counts[e["status"]] += 1
    return counts
