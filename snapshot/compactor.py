"""compact(): fold the journal into a cut, then apply retention.

The cut is written by `cut.write_cut` (atomic). Retention runs only after the
new cut is durable; it removes cuts that are no longer needed and retires
segments wholly covered by the oldest cut kept. Leftover temporary
directories and archive files from a compaction that crashed are removed
first. Correctness never depends on compaction: restore folds from whatever
cut is usable, or from LSN 1.
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass, field
from typing import Iterable

from journal import DEFAULT_FS, Journal, OsFileSystem, Reader

from .cut import TMP_PREFIX, DataPlane, read_cut, write_cut
from .errors import RestoreError
from .retention import RETENTION_MODES, remove_leftover_archives, retire, retirable_segments
from .state_at import SNAPSHOTS_DIR, Skipped, cut_dir_name, state_at, usable_cuts


@dataclass
class CompactResult:
    cut_path: str
    lsn: int
    step: int | None
    removed_cuts: list[str] = field(default_factory=list)
    retired_segments: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _remove_tmp_dirs(fs: OsFileSystem, parent: str, prefix: str = TMP_PREFIX) -> None:
    if not os.path.isdir(parent):
        return
    removed = False
    for name in os.listdir(parent):
        if name.startswith(prefix) and os.path.isdir(os.path.join(parent, name)):
            fs.rmtree(os.path.join(parent, name))
            removed = True
    if removed:
        fs.fsync_dir(parent)


def compact(path: str, at: str | int = "latest-checkpoint", into: str | None = None, *,
            journal: Journal | None = None, data_plane: DataPlane | None = None, keep_cuts: int = 2,
            pin_steps: Iterable[int] = (), retention: str | None = "archive",
            fs: OsFileSystem | None = None) -> CompactResult:
    """Fold the journal at `path` into a cut at `at` ("latest-checkpoint", "end" or an LSN).

    The cut goes to `<path>/snapshots/` or, with `into=`, to that directory
    (which must not exist: e.g. `ckpt/step_8/ownership`). `journal=` is the
    live writer, when compacting from inside the writing process: at "end" its
    in-memory state is copied (appends wait only for that copy). Retention
    keeps the newest `keep_cuts` cuts, the cuts of checkpoints in `pin_steps`
    and the newest cut at or before the latest committed checkpoint; segments
    wholly covered by the oldest kept cut are archived (`retention="archive"`)
    or deleted (`"delete"`); `retention=None` retires nothing.
    """
    fs = fs or (journal.fs if journal is not None else DEFAULT_FS)
    path = os.path.abspath(path)
    if retention is not None and retention not in RETENTION_MODES:
        raise ValueError(f"retention must be one of {RETENTION_MODES} or None, not {retention!r}")
    if keep_cuts < 1:
        raise ValueError(f"keep_cuts must be at least 1, not {keep_cuts}")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"journal directory {path!r} does not exist")
    snapshots = os.path.join(path, SNAPSHOTS_DIR)
    _remove_tmp_dirs(fs, snapshots)
    remove_leftover_archives(fs, path)
    if journal is not None and at == "end":
        state = journal.state_copy()
        step = next((s for s, lsn in state.committed_checkpoints.items() if lsn == state.lsn), None)
        run_id, skipped = journal.run_id, []
    else:
        point = state_at(path, at)
        state, step, skipped = point.state, point.step, point.skipped
        run_id = Reader(path).run_id or b""
        if journal is not None:
            run_id = journal.run_id
    timeline = state.timeline
    if into is not None:
        target = os.path.abspath(into)
        _remove_tmp_dirs(fs, os.path.dirname(target), f"{TMP_PREFIX}{os.path.basename(target)}-")
    else:
        target = os.path.join(snapshots, cut_dir_name(timeline, state.lsn))
    if into is None and os.path.isdir(target):
        try:
            read_cut(target)
        except RestoreError:
            fs.rmtree(target)  # a damaged cut at the same point: rewrite it
            fs.fsync_dir(snapshots)
    if not os.path.isdir(target) or into is not None:
        write_cut(target, state, run_id=run_id, timeline=timeline, data_plane=data_plane, fs=fs)
    result = CompactResult(target, state.lsn, step, skipped=skipped)
    if retention is not None:
        _apply_retention(fs, path, keep_cuts, set(pin_steps), retention, result)
    return result


def _apply_retention(fs: OsFileSystem, path: str, keep_cuts: int, pins: set[int], mode: str,
                     result: CompactResult) -> None:
    reader = Reader(path, "strict")
    ignored: list[Skipped] = []
    cuts = list(usable_cuts(reader, path, ignored))  # newest first
    if not cuts:
        return
    latest = None
    committed = cuts[0].state.committed_checkpoints
    if committed:
        latest = max(committed.values())
    keep = set(id(c) for c in cuts[:keep_cuts])
    for c in cuts:
        if c.manifest.checkpoint_step is not None and c.manifest.checkpoint_step in pins:
            keep.add(id(c))
    if latest is not None:
        restore_base = next((c for c in cuts if c.lsn <= latest), None)
        if restore_base is not None:
            keep.add(id(restore_base))
    else:
        keep.add(id(cuts[-1]))
    snapshots = os.path.join(path, SNAPSHOTS_DIR)
    for c in cuts:
        if id(c) not in keep:
            fs.rmtree(c.path)
            fs.fsync_dir(snapshots)
            result.removed_cuts.append(os.path.basename(c.path))
    kept = [c for c in cuts if id(c) in keep]
    boundary = min(c.lsn for c in kept)
    if latest is None:
        return  # nothing committed yet: the history from LSN 1 may still be what restore needs
    boundary = min(boundary, latest)
    result.retired_segments = retire(fs, path, retirable_segments(reader, boundary), mode)


class BackgroundCompactor:
    """Runs `compact` in one background thread of the writing process while appends go on.

    `submit()` returns a Future; a compaction already running makes the next
    one wait its turn. Exceptions surface through the Future."""

    def __init__(self, journal: Journal, **defaults):
        self.journal = journal
        self.defaults = defaults
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="compactor")

    def submit(self, at: str | int = "latest-checkpoint", **kwargs) -> concurrent.futures.Future:
        opts = {**self.defaults, **kwargs}
        return self._pool.submit(compact, self.journal.path, at, journal=self.journal, **opts)

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)

    def __enter__(self) -> "BackgroundCompactor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
