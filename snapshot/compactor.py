"""compact(): fold the journal into a cut, then apply retention.

The cut is written by `cut.write_cut` (atomic). Retention runs only after the
new cut is durable; it removes cuts that are no longer needed and retires
segments wholly covered by the oldest cut kept. Leftover temporary
directories and archive files from a compaction that crashed are removed
first. Correctness never depends on compaction: restore folds from whatever
cut is usable, or from LSN 1. Every OS error (a full disk) is raised as
`journal.JournalIOError` naming the file and the operation.
"""

from __future__ import annotations

import concurrent.futures
import os
import secrets
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from journal import Journal, Reader, position
from journal.vfs import DEFAULT_FS, OsFileSystem
from journal.history import checkpoint_markers
from journal.layout import SNAPSHOTS_DIR, cut_dir_name, cut_tmp_name, delete_tmp_name
from journal.leftovers import remove_compaction_leftovers
from journal.locks import compaction_lock
from journal.replica.retention import RetentionDecision, RetentionRequest

from .catalog import Skipped, anchor_problem, anchored_cuts, newest_readable, usable_cuts
from .checks import read_cut
from .cut import DATA_PLANE_DIR, Cut, write_cut
from .data_plane import DataPlane
from .errors import RestoreError
from .io_errors import io_step
from .retention import RETENTION_MODES, retire, retirable_segments
from .row_ledger import ledger_at
from .state_at import state_at


@dataclass
class CompactResult:
    cut_path: str
    lsn: int
    step: int | None
    removed_cuts: list[str] = field(default_factory=list)
    retired_segments: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    bucket_retention: RetentionRequest | None = None  # what the journal's replica was asked to delete


def _remove_tmp_dirs(fs: OsFileSystem, parent: str, prefix: str) -> None:
    """Remove the unfinished cuts a crashed `compact(into=)` left under `parent` (`prefix*`
    directories, which nothing ever reads)."""
    if not os.path.isdir(parent):
        return
    removed = False
    for name in sorted(os.listdir(parent)):
        full = os.path.join(parent, name)
        if name.startswith(prefix) and os.path.isdir(full) and not os.path.islink(full):
            with io_step("remove a temporary cut directory left by an earlier compaction", full):
                fs.rmtree(full)
            removed = True
    if removed:
        with io_step("fsync the directory", parent):
            fs.fsync_dir(parent)


def _discard_cut(fs: OsFileSystem, cut_path: str) -> None:
    """Delete a cut directory crash-safely: rename it to a `.tmp-` name first (atomic, so no half
    deleted cut is ever listed), fsync the parent, then remove the tree."""
    parent, name = os.path.split(cut_path)
    doomed = os.path.join(parent, delete_tmp_name(name, secrets.token_hex(4)))
    with io_step("delete the cut", cut_path):
        fs.rename(cut_path, doomed)
        fs.fsync_dir(parent)
        fs.rmtree(doomed)  # (failing, what is left has a .tmp- name: never read, removed later)
        fs.fsync_dir(parent)


def compact(path: str, at: str | int = "latest-checkpoint", into: str | None = None, *,
            journal: Journal | None = None, data_plane: DataPlane | None = None, keep_cuts: int = 2,
            pin_steps: Iterable[int] = (), retention: str | None = "archive",
            fs: OsFileSystem | None = None) -> CompactResult:
    """Fold the journal at `path` into a cut at `at` ("latest-checkpoint", "end" or an LSN).

    The cut goes to `<path>/snapshots/` or, with `into=`, to that directory
    (which must not exist: e.g. `ckpt/step_8/ownership`). `journal=` is the
    live writer, when compacting from inside the writing process: at "end" its
    in-memory durable state is copied (appends wait only for that copy; all
    file I/O happens after). `data_plane=` saves the REPLAY groups' rows into
    the cut's `data_plane/` (hashed in the manifest). Retention then keeps the
    newest `keep_cuts` cuts, the cut just written, the cuts of committed checkpoints in `pin_steps`
    and, for the latest committed checkpoint and each pinned one, the newest
    cut at or before it (what restoring that checkpoint starts from); segments
    wholly covered by the oldest cut kept are archived (`retention="archive"`,
    zstd) or deleted (`"delete"`); `retention=None` retires nothing. With no
    committed checkpoint nothing is retired (a restart resumes from LSN 0). When `journal`
    has a replica, it is handed the retention decision and trims the bucket by the same rule
    once the kept cuts are in it (`bucket_retention`: the request made).
    """
    with compaction_lock(os.path.abspath(path)):
        return _compact(path, at, into, journal, data_plane, keep_cuts, pin_steps, retention, fs)


def _compact(path, at, into, journal, data_plane, keep_cuts, pin_steps, retention, fs) -> CompactResult:
    """`compact`, under the compaction lock: no other compaction runs, and a writer's open
    leaves this one's temporary files alone."""
    fs = fs or (journal.fs if journal is not None else DEFAULT_FS)
    path = os.path.abspath(path)
    if retention is not None and retention not in RETENTION_MODES:
        raise ValueError(f"retention must be one of {RETENTION_MODES} or None, not {retention!r}")
    if isinstance(keep_cuts, bool) or not isinstance(keep_cuts, int) or keep_cuts < 1:
        raise ValueError(f"keep_cuts must be an integer of at least 1, not {keep_cuts!r}")
    pins = set(pin_steps)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"journal directory {path!r} does not exist")
    if into is not None:
        target = os.path.abspath(into)
        if os.path.lexists(target):
            raise FileExistsError(f"compact(into={into!r}): {target} already exists; a cut is written "
                                  "into a directory that does not exist yet (e.g. "
                                  "ckpt/step_8/ownership), never over or into an existing one")
    snapshots = os.path.join(path, SNAPSHOTS_DIR)
    remove_compaction_leftovers(fs, path)
    if journal is not None and at == "end":
        state = journal.state_copy()  # the only moment appends wait
        latest = state.latest_committed_checkpoint()
        step = latest[0] if latest is not None and latest[1] == state.lsn else None
        run_id, skipped = journal.run_id, []
        reader, base = Reader(path, "strict"), None
    else:
        reader = Reader(path, "strict")
        point = state_at(path, at, reader=reader)
        state, step, skipped, base = point.state, point.step, point.skipped, point.base
        run_id = journal.run_id if journal is not None else (reader.run_id or b"")
    timeline = state.timeline
    ledger = _ledger(reader, path, base, state, journal)
    where = _position(reader, journal, state)
    if into is not None:
        _remove_tmp_dirs(fs, os.path.dirname(target), cut_tmp_name(os.path.basename(target), ""))
        write_cut(target, state, run_id=run_id, timeline=timeline, data_plane=data_plane, fs=fs,
                  ledger=ledger, where=where)
    else:
        target = os.path.join(snapshots, cut_dir_name(timeline, state.lsn))
        if os.path.lexists(target) and not _reusable(path, target, data_plane):
            _discard_cut(fs, target)  # damaged, stale, or without the data plane asked for
        if not os.path.lexists(target):
            write_cut(target, state, run_id=run_id, timeline=timeline, data_plane=data_plane, fs=fs,
                      ledger=ledger, where=where)
    result = CompactResult(target, state.lsn, step, skipped=skipped)
    if retention is not None:
        decision = _apply_retention(fs, path, keep_cuts, pins, retention, result, protect=target)
        if decision is not None and journal is not None and journal.replica is not None:
            result.bucket_retention = journal.replica.apply_retention(decision)
    return result


def _position(reader: Reader, journal: Journal | None, state) -> position.Position | None:
    """Where the frame holding the cut's LSN starts: as the live writer remembers it when it
    wrote it lately (nothing read), else found by reading its segment (`position_of`)."""
    blobs = state.loader.blobs if state.loader is not None else None
    known = journal.frame_position(state.lsn) if journal is not None else None
    if known is not None and known.timeline == state.timeline:
        return position.with_blobs(known._replace(next_group_id=state.next_group_id), blobs or {})
    return position.position_of(reader, state.lsn, state.next_group_id, blobs)


def _ledger(reader: Reader, path: str, base: Cut | None, state, journal: Journal | None):
    """The row ledger of the cut of `state`: from the one the live writer's last compaction
    built (`Journal.compaction_memo`: a writer's history only grows, so it stays a point of it)
    when it is at or before the point, else from the newest cut that has one (see `ledger_at`)."""
    cached = journal.compaction_memo if journal is not None else None
    if cached is not None and cached.lsn <= state.lsn:
        ledger = ledger_at(reader, (), state, start=cached)
    else:
        ledger = ledger_at(reader, _ledger_bases(reader, path, base, state.lsn), state)
    if journal is not None and ledger is not None:
        journal.compaction_memo = ledger
    return ledger


def _ledger_bases(reader: Reader, path: str, base: Cut | None, lsn: int) -> Iterator[Cut]:
    """The cuts the new cut's row ledger may build on, newest first: the state's base cut, then
    (read only when it has no ledger) the other usable cuts at or before `lsn`."""
    if base is not None:
        yield base
    yield from (c for c in usable_cuts(reader, path, []) if c.lsn <= lsn
                and (base is None or c.path != base.path))


def _reusable(journal_path: str, cut_path: str, data_plane: DataPlane | None) -> bool:
    """Whether an existing cut at the same point can stand for the one being asked for."""
    try:
        cut = read_cut(cut_path)
    except RestoreError:
        return False
    if anchor_problem(Reader(journal_path, "strict"), cut) is not None:
        return False  # same timeline and LSN, other chain: LSNs reused after a lost tail
    has_dp = any(name.startswith(DATA_PLANE_DIR + "/") for name in cut.manifest.files) or \
        os.path.isdir(os.path.join(cut_path, DATA_PLANE_DIR))
    return data_plane is None or has_dp


def _apply_retention(fs: OsFileSystem, path: str, keep_cuts: int, pins: set[int], mode: str,
                     result: CompactResult, protect: str) -> RetentionDecision | None:
    """Choose the cuts to keep from their manifests (`anchored_cuts`: nothing else is read), then
    load in full only those retention stands on: the newest one, whose checkpoint markers the
    tail is folded onto, and the base of each point kept restorable. Segments are retired only
    up to the oldest cut kept, which is at or before every verified base. The decision (None
    when nothing is retired), for a replica to trim the bucket by the same rule."""
    reader = Reader(path, "strict")
    views = anchored_cuts(reader, path, [])  # newest first
    loaded: dict[str, Cut] = {}

    def verified(below: int | None) -> Cut | None:
        """The newest cut at or before `below` (any if None) that passes every check of
        `read_cut`, loaded once; one that fails is dropped from `views` (left alone)."""
        while True:
            view = next((v for v in views if below is None or v.lsn <= below), None)
            if view is None:
                return None
            if view.path not in loaded:
                cut = newest_readable([view], None, [])
                if cut is None:
                    views.remove(view)
                    continue
                loaded[view.path] = cut
            return loaded[view.path]

    newest = verified(None)
    if newest is None:
        return None
    _, committed = checkpoint_markers(reader.records(start_lsn=newest.lsn + 1), newest.state)
    latest = max(committed.values()) if committed else 0  # no checkpoint: a restart resumes at 0
    points = {latest} | {committed[s] for s in pins if s in committed}
    keep = {v.path for v in views[:keep_cuts]} | {protect}  # never the cut just asked for
    keep |= {v.path for v in views if v.manifest.checkpoint_step is not None
             and v.manifest.checkpoint_step in pins and v.lsn == committed.get(v.manifest.checkpoint_step)}
    boundary = None
    for p in sorted(points):
        base = verified(p)
        if base is None:
            boundary = 0  # restoring this point folds from LSN 1: retire nothing
        else:
            keep.add(base.path)
    for v in views:
        if v.path not in keep:
            _discard_cut(fs, v.path)
            result.removed_cuts.append(os.path.basename(v.path))
    if boundary is None:
        boundary = min(v.lsn for v in views if v.path in keep)
    if boundary <= 0:
        return None
    result.retired_segments = retire(fs, path, retirable_segments(reader, boundary), mode)
    return RetentionDecision(frozenset(keep), boundary, reader)


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
