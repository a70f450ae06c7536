"""What the packs of a `LocalDataPlane` directory hold: from locator to record, read from the
packs themselves (there is no index file a crash could make lie).

`refresh` lists the directory, forgets packs that are gone and reads what each other pack
gained since it was last read. Only complete records count: a header whose crc32 checks and,
for rows, a body whose sha256 checks (in a pack that ends with its seal, the headers only:
its writer fsynced every row before the seal). Where reading stops (the bytes end inside a
record, or a header does not check) is where it starts again next time, so a record a live
writer is still writing is picked up once whole. A row whose body fails its sha256 in a settled pack
(torn by a crash, or damaged on disk) is passed over and the rows after it are read; in a
pack that still has a writer, reading waits there. A header that does not check ends what
can be read of a settled pack. Dead marks delete the row record they name, whichever pack
holds the mark and whichever is read first. The writer's own packs are not read: it adds
its records itself once they are durable (`add_row`, `add_mark`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from .pack_format import (DEAD, MAGIC, ROW, Record, body_offset, is_pack_name, read_records, seal_bytes,
                          sealed)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class Row:
    """A row record: its locator, where it is, its whole length, where its stored rows start
    and how long they are, their sha256, and whether this data plane wrote and fsynced it."""

    locator: str
    pack: str
    offset: int
    length: int
    body: int
    size: int
    digest: bytes
    here: bool = False


@dataclass
class Pack:
    """What is known of one pack file."""

    name: str
    size: int = 0                  # its bytes, as last read (or written)
    read_to: int = 0               # records before this offset were read
    seen: tuple | None = None      # (size, mtime) when it was last read
    rows: dict[int, Row] = field(default_factory=dict)     # its live rows, by offset
    row_bytes: int = 0             # their records' lengths
    marks: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # offset -> (pack, offset, length)
    mark_bytes: dict[str, int] = field(default_factory=dict)   # marked pack -> its marks' lengths here
    sealed: bool = False           # its writer sealed it: bodies are not hashed


class PackIndex:
    def __init__(self, root: str):
        self.root = root
        self.packs: dict[str, Pack] = {}
        self._rows: dict[str, list[Row]] = {}     # locator -> its live copies
        self._dead: dict[str, set[int]] = {}      # pack -> offsets of its rows marked dead

    # -- lookups ---------------------------------------------------------------------------

    def copies(self, locator: str) -> list[Row]:
        """The live records of `locator` (more than one: the same rows put again by another
        writer, or a conflict when their digests differ)."""
        return list(self._rows.get(locator, ()))

    def locators(self) -> list[str]:
        return list(self._rows)

    def live_bytes(self, name: str) -> int:
        """The bytes of pack `name` that reclaiming it would copy: its live rows, and its dead
        marks of rows in other packs that are still there."""
        p = self.packs[name]
        return p.row_bytes + sum(n for target, n in p.mark_bytes.items() if target != name and target in self.packs)

    # -- changes ---------------------------------------------------------------------------

    def pack(self, name: str) -> Pack:
        p = self.packs.get(name)
        if p is None:
            p = self.packs[name] = Pack(name)
        return p

    def add_row(self, row: Row) -> None:
        p = self.pack(row.pack)
        if row.offset in p.rows or row.offset in self._dead.get(row.pack, ()):
            return
        p.rows[row.offset] = row
        p.row_bytes += row.length
        self._rows.setdefault(row.locator, []).append(row)

    def add_mark(self, name: str, offset: int, length: int, target: str, target_offset: int) -> None:
        p = self.pack(name)
        if offset in p.marks:
            return
        p.marks[offset] = (target, target_offset, length)
        p.mark_bytes[target] = p.mark_bytes.get(target, 0) + length
        self._dead.setdefault(target, set()).add(target_offset)
        t = self.packs.get(target)
        row = t.rows.pop(target_offset, None) if t is not None else None
        if row is not None:
            t.row_bytes -= row.length
            self._forget(row)

    def forget_row(self, row: Row) -> None:
        """A delete marked `row` dead (its mark not written yet): it is gone from now on."""
        p = self.packs.get(row.pack)
        if p is not None and p.rows.pop(row.offset, None) is not None:
            p.row_bytes -= row.length
            self._forget(row)
        self._dead.setdefault(row.pack, set()).add(row.offset)

    def drop(self, name: str) -> None:
        """Pack `name` is gone: its rows with it, and the marks of rows in it (moot)."""
        p = self.packs.pop(name, None)
        self._dead.pop(name, None)
        for row in p.rows.values() if p is not None else ():
            self._forget(row)

    def _forget(self, row: Row) -> None:
        locator = row.locator
        left = [r for r in self._rows[locator] if r is not row]
        if left:
            self._rows[locator] = left
        else:
            del self._rows[locator]

    # -- reading the packs -----------------------------------------------------------------

    def refresh(self, skip: Callable[[str], bool], settled: Callable[[str], bool]) -> None:
        """List the directory, forget packs that are gone, read what the others gained (not
        those `skip` names: the writer's own)."""
        listed = {n for n in os.listdir(self.root) if is_pack_name(n)}
        for name in [n for n in self.packs if n not in listed]:
            self.drop(name)
        for name in sorted(listed):
            if not skip(name):
                self.read(name, settled)

    def read(self, name: str, settled: Callable[[str], bool], force: bool = False) -> None:
        """Read the records pack `name` gained since it was last read (with `force` even if its
        size and time did not change: it settled since)."""
        path = os.path.join(self.root, name)
        try:
            fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        except FileNotFoundError:
            self.drop(name)
            return
        try:
            st = os.fstat(fd)
            p = self.pack(name)
            if not force and p.seen == (st.st_size, st.st_mtime_ns):
                return
            p.seen, p.size = (st.st_size, st.st_mtime_ns), max(p.size, st.st_size)
            n = seal_bytes(name)
            if not p.sealed and st.st_size >= n:
                p.sealed = sealed(os.pread(fd, n, st.st_size - n), name, st.st_size)
            data = os.pread(fd, st.st_size - p.read_to, p.read_to) if st.st_size > p.read_to else b""
        finally:
            os.close(fd)
        records = read_records(memoryview(data), p.read_to, verify=not p.sealed)
        waits = None
        for rec in records:
            if not rec.intact:
                waits = not settled(path) if waits is None else waits
                if waits:
                    return
            else:
                self._apply(name, rec)
            p.read_to = rec.offset + rec.length
        if p.read_to == 0 and data[:len(MAGIC)] == MAGIC:
            p.read_to = len(MAGIC)

    def _apply(self, name: str, rec: Record) -> None:
        if rec.tag == ROW:
            self.add_row(Row(rec.name, name, rec.offset, rec.length, body_offset(rec.offset, rec.name),
                             rec.value, rec.digest))
        elif rec.tag == DEAD:
            self.add_mark(name, rec.offset, rec.length, rec.name, rec.value)
