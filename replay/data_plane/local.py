"""`LocalDataPlane`: rows packed into append-only files in a directory.

Each data-plane object that writes appends its records to a pack of its own
(`pack_writer.py`); the bytes are `pack_format.py`'s. A put queues its record and returns once
a batch holding it was written and fdatasynced: puts made at the same time (seals from
several threads) share one write and one fdatasync (`group_commit.py`). A row is listed only
as a complete record (`pack_index.py`: header crc32 and body sha256 checked), so a crash
leaves nothing but whole rows under locators, and a put that returned has its rows durable.
A put of bytes already stored is done at once when this object wrote and fsynced them itself;
rows another writer stored are written again (durable by this object's own fsync).

Delete writes dead marks (not fsynced: a crash may bring a deleted row back, which the
session's sweep at open deletes again); the rows are gone from this object at once, and while
a batch is being written the marks go with the next one (a delete does not wait for a put's
fdatasync). Then reclaiming: a settled pack whose live bytes (rows
not deleted, marks of rows still on disk) are at most `RECLAIM_LIVE_FRACTION` of its size is
compacted: its live records are copied into the active pack, fsynced, and the pack is removed
(with no live byte it is only removed). The data plane's own active pack is retired first when
it is that dead. So the directory holds at most about twice the live rows, plus each writer's
active pack (up to `pack_writer.PACK_BYTES`).

The directory may be shared (a network file system) by the processes that put rows, e.g. Ray
actors: each object writes its own packs and reads everyone's. The object pickles as its root,
and an unpickled copy is a writer of its own. Reclaiming runs in the process that deletes (the
trainer's): two processes deleting at once may each bring back, while compacting, a row the
other just deleted (only storage: the next sweep deletes it). Two writers that put other rows
under one locator at the same instant are not stopped at the put (each checks the rows it
knows of); a `get` of such a locator raises `RowConflict` naming both packs.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Iterable, Iterator

from journal import Group
from journal.vfs import DEFAULT_FS, FileSystem
from snapshot.data_plane import cut_rows
from snapshot.errors import DataPlaneIOError, RowConflict, RowsCorrupt, RowsNotFound

from . import names
from .base import RowStore
from .group_commit import GroupCommit, Item
from .pack_format import dead_record, digest_of, row_head
from .pack_index import PackIndex, Row
from .pack_writer import TMP_PREFIX, PackWriter, settled
from .rows import checked_body, decode_rows

RECLAIM_LIVE_FRACTION = 0.5   # a settled pack with at most this share of live bytes is compacted
LEFTOVER_SECONDS = 3600.0     # a pack being created this long ago is a dead writer's
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _Write(Item):
    """A record to append, as the parts it is written from: a row (`locator`, its stored rows'
    `digest` and `size`) or a dead mark (`target`)."""

    def __init__(self, parts: tuple[bytes, ...], sync: bool, locator: str | None = None,
                 digest: bytes = b"", size: int = 0, target: tuple[str, int] | None = None):
        self.parts, self.length, self.sync = parts, sum(map(len, parts)), sync
        self.locator, self.digest, self.size, self.target = locator, digest, size, target
        self.pack, self.offset = "", 0

    @classmethod
    def row(cls, locator: str, data: bytes, digest: bytes) -> "_Write":
        return cls((row_head(locator, len(data)), data), True, locator, digest, len(data))

    @classmethod
    def mark(cls, pack: str, offset: int, sync: bool) -> "_Write":
        return cls((dead_record(pack, offset),), sync, target=(pack, offset))


class LocalDataPlane(RowStore):
    """Rows in pack files under `root/`, under the locators `g<id>.rows` (a group's) and
    `g<id>-r<index>-a<attempt>.rows` (a rollout attempt's). Implements `snapshot.DataPlane`
    (see there for each method's contract); `fs` is the I/O seam (`journal.vfs`)."""

    BATCHES = True

    def __init__(self, root: str, *, fs: FileSystem | None = None):
        self.root = os.path.abspath(root)
        self._fs = fs if fs is not None else DEFAULT_FS
        self._fs.makedirs(self.root)
        self._lock = threading.Lock()
        self._index = PackIndex(self.root)
        self._loaded = False
        self._writer = PackWriter(self.root, self._fs)
        self._commits = GroupCommit(self._lock, self._write, self._written)
        self._queued: dict[str, _Write] = {}   # rows being written, by locator
        self._deleting = threading.Lock()
        weakref.finalize(self, self._writer.retire, False)   # (at exit a put may be in flight)

    def __reduce__(self):
        return type(self), (self.root,)

    def __repr__(self) -> str:
        return f"LocalDataPlane({self.root!r})"

    def close(self) -> None:
        """Seal and retire the active pack (it settles, so others may compact it, and read it
        without hashing its rows); a later put starts a new one. Optional: at the process's
        exit the pack settles unsealed."""
        with self._lock:
            self._commits.exclusive(lambda: self._writer.retire(seal=True))

    # -- writing ---------------------------------------------------------------------------

    def _store(self, locator: str, data: bytes) -> None:
        self._store_all([(locator, data)])

    def _store_all(self, items: list[tuple[str, bytes]]) -> None:
        """Each `(locator, stored rows)` durable, in one batch with whatever else is being
        written: done already when this data plane wrote the same bytes; `RowConflict` (before
        anything is written) when a locator holds other bytes."""
        with self._lock:
            self._load()
            planned = []
            try:
                for locator, data in items:
                    planned.append(self._plan(locator, data))
            except BaseException:
                self._unqueue(planned)
                raise
            self._write_planned(planned)

    def store_batch(self, items: list[tuple[str, bytes]]) -> list[BaseException | None]:
        """`_store_all` with an outcome per item instead of one for all: None once the item is
        durable, its `RowConflict` (nothing written for it), or the error of the batch's write
        (`DataPlaneIOError`) for every other item."""
        outcomes: list[BaseException | None] = [None] * len(items)
        with self._lock:
            self._load()
            planned = []
            for k, (locator, data) in enumerate(items):
                try:
                    planned.append(self._plan(locator, data))
                except RowConflict as exc:
                    outcomes[k] = exc
            try:
                self._write_planned(planned)
            except BaseException as exc:  # the batch's own error, for every item it held
                return [exc if out is None else out for out in outcomes]
        return outcomes

    def _plan(self, locator: str, data: bytes) -> tuple[_Write | None, _Write | None]:
        """(the record to write, the one queued already with the same bytes) for one put: both
        None when this data plane wrote and fsynced the same bytes; `RowConflict` when the
        locator holds, or is being given, other bytes. Lock held."""
        names.checked(locator, self.root)
        digest = digest_of(data)
        copies = self._index.copies(locator)
        queued = self._queued.get(locator)
        other = next((c for c in copies if (c.digest, c.size) != (digest, len(data))), None)
        if other is not None or (queued and (queued.digest, queued.size) != (digest, len(data))):
            raise self._conflict(locator, other)
        if queued is not None:
            return None, queued
        if any(c.here for c in copies):   # only what this writer fsynced is known durable
            return None, None
        write = self._queued[locator] = _Write.row(locator, data, digest)
        return write, None

    def _write_planned(self, planned: list[tuple[_Write | None, _Write | None]]) -> None:
        """Write the planned records in one batch (with whatever else is queued) and wait for
        the ones another put queued; lock held on entry and on return."""
        try:
            self._commits.submit([w for w, _ in planned if w is not None],
                                 queued=[q for _, q in planned if q is not None])
        finally:
            self._unqueue(planned)

    def _unqueue(self, planned: list[tuple[_Write | None, _Write | None]]) -> None:
        for w, _ in planned:
            if w is not None and self._queued.get(w.locator) is w:
                del self._queued[w.locator]

    def _conflict(self, locator: str, other: Row | None) -> RowConflict:
        where = f" (pack {other.pack}, offset {other.offset})" if other is not None else " (being put)"
        return RowConflict(f"data plane {self.root}: {locator} already holds other rows{where}; rows "
                           "under a locator never change (is a second writer producing the same "
                           "group, rollout and attempt?)")

    def _write(self, batch: list[_Write]) -> None:
        """The leader, without the lock: the batch's records appended in one write, fsynced
        once when any of them must be durable."""
        data = b"".join(part for w in batch for part in w.parts)   # the one copy of the rows
        name, offset = self._writer.append(data, any(w.sync for w in batch))
        for w in batch:
            w.pack, w.offset = name, offset
            offset += w.length

    def _written(self, batch: list[_Write]) -> None:
        """Under the lock, before the batch's writers return: its records join the index."""
        for w in batch:
            end = w.offset + w.length
            if w.target is None:
                self._index.add_row(Row(w.locator, w.pack, w.offset, w.length, end - w.size, w.size,
                                        w.digest, here=True))
            else:
                self._index.add_mark(w.pack, w.offset, w.length, *w.target)
            w.parts = ()
        p = self._index.pack(batch[-1].pack)
        p.size = p.read_to = end

    # -- reading ---------------------------------------------------------------------------

    def _load(self) -> None:
        if not self._loaded:
            self._refresh()
            self._loaded = True

    def _refresh(self) -> None:
        self._index.refresh(self._writer.owns, lambda name: settled(os.path.join(self.root, name)))

    def _copies(self, locator: str) -> list[Row]:
        """The live records of `locator`, the directory read again when none is known."""
        with self._lock:
            self._load()
            copies = self._index.copies(locator)
            if not copies:
                self._refresh()
                copies = self._index.copies(locator)
            return copies

    def _stored(self, locator: str) -> tuple[bytes, str] | None:
        """The stored rows of `locator` and where they are (for messages); None if there are
        none. Another process compacting their pack away meanwhile is followed."""
        while True:
            copies = self._copies(locator)
            if not copies:
                return None
            if len({(c.digest, c.size) for c in copies}) > 1:
                raise RowConflict(f"data plane {self.root}: {locator} is stored with different rows in "
                                  f"packs {sorted({c.pack for c in copies})}: two writers put it at "
                                  "once; rows under a locator never change, so neither is served")
            row = next((c for c in copies if c.here), copies[-1])
            where = f"data plane {self.root}: {locator} (pack {row.pack}, offset {row.offset})"
            try:
                fd = os.open(os.path.join(self.root, row.pack), os.O_RDONLY | _CLOEXEC)
            except FileNotFoundError:
                with self._lock:
                    self._refresh()
                continue
            try:
                data = os.pread(fd, row.size, row.body)
            finally:
                os.close(fd)
            if len(data) != row.size:
                raise RowsCorrupt(f"{where}: the pack ends {row.size - len(data)} bytes short of "
                                  "the rows; it was cut off; the rollouts must be generated again")
            return data, where

    def get(self, locator: str) -> Any:
        found = self._stored(names.checked(locator, self.root))
        if found is None:
            raise RowsNotFound(f"data plane {self.root}: no rows under {locator}: deleted, or never put")
        return decode_rows(*found)

    def has(self, locator: str) -> bool:
        return bool(self._copies(names.checked(locator, self.root)))

    def locators(self) -> Iterator[str]:
        with self._lock:
            self._refresh()
            self._loaded = True
            return iter(self._index.locators())

    def save(self, directory: str, groups: list[Group]) -> None:
        """One file per locator, its bytes as `put` stored them, checked on the way."""
        for g in groups:
            for locator, required in cut_rows(g):
                found = self._stored(names.checked(locator, self.root))
                if found is None and not required:
                    continue
                if found is None:
                    raise RowsNotFound(f"data plane {self.root}: the rows of group {g.group_id} "
                                       f"({locator}) are missing, so the cut cannot carry them")
                checked_body(*found)
                self._save_file(os.path.join(directory, locator), found[0])

    def _save_file(self, path: str, data: bytes) -> None:
        try:
            f = self._fs.create(path)
            try:
                f.write(data)
            finally:
                f.close()
        except OSError as exc:
            raise DataPlaneIOError(exc.errno, f"data plane {self.root}: could not write {path} into "
                                   f"the cut: {exc}") from exc

    # -- deleting and reclaiming ----------------------------------------------------------------

    def delete(self, locators: Iterable[str]) -> int:
        """Dead marks for every record of `locators` (not fsynced; written now, or with the batch
        after the one in flight), then reclaiming. Deletes run one at a time, so a compaction
        never copies a row a delete is marking."""
        wanted = list(dict.fromkeys(names.checked(loc, self.root) for loc in locators))
        with self._deleting, self._lock:
            self._load()
            if any(not self._index.copies(loc) for loc in wanted):
                self._refresh()
            copies = [c for loc in wanted for c in self._index.copies(loc)]
            gone = sum(1 for loc in wanted if self._index.copies(loc))
            for c in copies:
                self._index.forget_row(c)
            if copies:
                self._commits.submit([_Write.mark(c.pack, c.offset, sync=False) for c in copies], wait=False)
            self._reclaim()
        return gone

    def _reclaim(self) -> None:
        """Retire the active pack when it is mostly dead, then compact or remove every settled
        pack that is; twice, since what the first pass removes can make the dead marks of the
        new active pack moot (locks held)."""
        for _ in range(2):
            active = self._writer.name   # (while a batch is written, not all its rows are known)
            if active in self._index.packs and not self._commits.leading and self._dead_enough(active):
                self._commits.exclusive(lambda: self._writer.retire(seal=True))
            for name in sorted(self._index.packs):
                if name in self._index.packs and name != self._writer.name \
                        and self._dead_enough(name) and settled(os.path.join(self.root, name)):
                    self._compact(name)

    def _dead_enough(self, name: str) -> bool:
        return self._index.live_bytes(name) <= RECLAIM_LIVE_FRACTION * self._index.packs[name].size

    def _compact(self, name: str) -> None:
        """Copy the live records of settled pack `name` into the active pack (fsynced), then
        remove it (lock held)."""
        if not self._writer.owns(name):   # read to its end: it may have gained records since
            self._index.read(name, lambda _: True, force=True)
            if name not in self._index.packs or not self._dead_enough(name):
                return
        p = self._index.packs[name]
        rows = [r for r in p.rows.values() if not any(c.pack != name for c in self._index.copies(r.locator))]
        marks = [(t, o) for (t, o, _) in p.marks.values() if t != name and t in self._index.packs]
        try:
            fd = os.open(os.path.join(self.root, name), os.O_RDONLY | _CLOEXEC)
        except FileNotFoundError:   # another process compacted it
            self._index.drop(name)
            return
        try:
            copies = [(r, os.pread(fd, r.size, r.body)) for r in rows]
        finally:
            os.close(fd)
        writes = [_Write.row(r.locator, data, r.digest) for r, data in copies]
        writes += [_Write.mark(t, o, sync=True) for t, o in marks]
        if writes:
            self._commits.submit(writes)
        try:
            self._fs.unlink(os.path.join(self.root, name))
        except FileNotFoundError:   # another process compacted it meanwhile
            pass
        except OSError as exc:
            raise DataPlaneIOError(exc.errno, f"data plane {self.root}: could not remove compacted "
                                   f"pack {name}: {exc}; its rows are copied, it is only storage; "
                                   "the next delete tries again") from exc
        self._index.drop(name)

    def remove_leftovers(self, older_than: float = LEFTOVER_SECONDS) -> int:
        """Remove the packs whose creation a crash interrupted (temporary files older than
        `older_than` seconds: a live writer renames its own at once); returns how many. No
        locator names them."""
        gone = 0
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            try:
                if name.startswith(TMP_PREFIX) and time.time() - os.lstat(path).st_mtime > older_than:
                    self._fs.unlink(path)
                    gone += 1
            except FileNotFoundError:
                pass
        return gone
