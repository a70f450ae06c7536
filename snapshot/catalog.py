"""The cut catalogue of a journal: its cut directories, their manifests and anchors.

`cut_dirs` (`journal.layout`'s) lists `<journal>/snapshots/cut-*` (never a temporary directory);
`anchor_problem` says whether a cut's anchor (run id, timeline, LSN, chain) is
a point of the journal's active history; `usable_cuts` yields the cuts that
pass the chain of checks of `read_cut` and are anchored, reporting the others
as `Skipped`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from journal import Reader
from journal.layout import cut_dirs

from . import manifest as mf
from .checks import CutCheck, check_of, read_cut
from .cut import Cut
from .errors import JournalMismatch, ManifestMissing, RestoreError


def anchor_problem(reader: Reader, cut: Cut) -> str | None:
    """Why `cut` is not a point of `reader`'s active history (None when it is)."""
    return anchor_check(reader, cut)[1]


def anchor_check(reader: Reader, cut: Cut) -> tuple[bool, str | None]:
    """(whether the journal holds what the cut's anchor names, the commit at its LSN or the
    seed of the segment after it; why the cut is not a point of the active history, None when
    it is). A damaged journal read in salvage mode may hold neither: the anchor is then not
    known (False, a problem)."""
    m = cut.manifest
    if reader.run_id is not None and m.run_id != reader.run_id.hex():
        return True, f"cut belongs to run {m.run_id}, the journal is run {reader.run_id.hex()}"
    if m.lsn == 0:
        return True, None
    lineage = reader.lineage()
    for rec in reader.records(start_lsn=m.lsn, stop_lsn=m.lsn):
        if rec.timeline != m.timeline or rec.chain != m.chain:
            return True, (f"cut anchor (timeline {m.timeline}, LSN {m.lsn}, chain {m.chain:#010x}) is not "
                          f"on the active history (timeline {rec.timeline}, chain {rec.chain:#010x} at "
                          "that LSN): a stale cut of a dead branch")
        return True, None
    first = next((s for tl in lineage for s in tl.segments), None)
    if first is not None and first.first_lsn == m.lsn + 1:
        if first.header.chain_seed == m.chain:
            return True, None  # the segments before the cut were retired; the next one continues its chain
        return True, (f"cut anchor (LSN {m.lsn}, chain {m.chain:#010x}) does not match the seed "
                      f"{first.header.chain_seed:#010x} of the segment after it, {first.name}")
    return False, f"the journal has no commit at LSN {m.lsn} to check the cut's anchor against"


@dataclass
class Skipped:
    """A cut a restore or compaction passed over, and why."""

    path: str
    reason: str
    check: CutCheck | None = None  # the check of `CHECKS` it failed; None: no fault (after the point)

    @classmethod
    def failed(cls, path: str, error: RestoreError) -> "Skipped":
        """The cut at `path` failed the check `error` belongs to."""
        return cls(path, f"{type(error).__name__}: {error}", check_of(error))

    @property
    def damaged(self) -> bool:
        """The cut itself is damaged or incomplete (a check of 1-7 failed). A cut that fails
        only the anchor is intact but belongs to another branch or run: every resume leaves
        such stale cuts behind."""
        return self.check is not None and self.check.error is not JournalMismatch


def usable_cuts(reader: Reader, journal_path: str, skipped: list[Skipped]) -> Iterator[Cut]:
    """Cuts under the journal that pass every check and sit on the active history, newest first;
    every other one is appended to `skipped` with the reason."""
    for view in anchored_cuts(reader, journal_path, skipped):
        try:
            yield read_cut(view.path)
        except RestoreError as exc:
            skipped.append(Skipped.failed(view.path, exc))


class ManifestView:
    """A cut known by its manifest only (enough for `anchor_problem`); loaded when used."""

    def __init__(self, path: str, manifest) -> None:
        self.path, self.manifest = path, manifest

    @property
    def lsn(self) -> int:
        return self.manifest.lsn


def anchored_cuts(reader: Reader, journal_path: str, skipped: list[Skipped]) -> list[ManifestView]:
    """Cuts whose manifest reads and whose anchor is on the active history, newest first; the
    others are reported. Only manifests are read here: nothing is hashed or unpickled."""
    out = []
    for _lsn, _timeline, path in cut_dirs(journal_path):
        try:
            with open(os.path.join(path, mf.MANIFEST_NAME), "rb") as f:
                raw = f.read()
            view = ManifestView(path, mf.decode(raw, path))
        except FileNotFoundError:
            skipped.append(Skipped.failed(path, ManifestMissing(
                f"{path}: no {mf.MANIFEST_NAME} (an incomplete or foreign cut)")))
            continue
        except (OSError, RestoreError) as exc:
            skipped.append(Skipped.failed(path, exc if isinstance(exc, RestoreError) else ManifestMissing(exc)))
            continue
        problem = anchor_problem(reader, view)
        if problem is not None:
            skipped.append(Skipped.failed(path, JournalMismatch(problem)))
            continue
        out.append(view)
    return out


def newest_readable(views: list[ManifestView], below: int | None, skipped: list[Skipped]) -> Cut | None:
    """The newest of `views` at or before `below` (any if None) that passes `read_cut(tables=
    False)` (checks 1-4, its state from its journal state file, else checks 5-7 on its tables);
    those that fail are reported and dropped from `views`."""
    for v in list(views):
        if below is not None and v.lsn > below:
            continue
        try:
            cut = read_cut(v.path, tables=False)
        except RestoreError as exc:
            skipped.append(Skipped.failed(v.path, exc))
            views.remove(v)
            continue
        m, seen = cut.manifest, v.manifest
        if (m.run_id, m.timeline, m.lsn, m.chain) != (seen.run_id, seen.timeline, seen.lsn, seen.chain):
            skipped.append(Skipped.failed(v.path, JournalMismatch("the cut's manifest changed while it was read")))
            views.remove(v)
            continue
        return cut
    return None


def check_anchor(reader: Reader, cut: Cut) -> None:
    problem = anchor_problem(reader, cut)
    if problem is not None:
        raise JournalMismatch(f"{cut.path}: {problem}")
