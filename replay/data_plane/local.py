"""`LocalDataPlane`: rows as one crash-safe file per group or rollout attempt in a directory.

A put writes the rows' bytes (`rows.py`) to a temporary file `.tmp-<locator>-<random>`, fsyncs
it, hard-links it to the locator's name (which fails if that name exists: a row file is never
replaced), removes the temporary name and fsyncs the directory, all before it returns; so a
name a locator gives always holds complete, checksummed rows, after a SIGKILL or a power cut
too. A crash leaves at most a temporary file, which no locator names and
`remove_leftovers` removes. The directory may be shared (a network file system) by the
processes that put rows, e.g. Ray actors on other nodes: the object holds only its root and
pickles as such. It needs a file system with hard links (every local and network file system;
not an object-store mount: use `ObjectStoreDataPlane` there).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from typing import Any, Iterable, Iterator

from journal import DEFAULT_FS, Group
from snapshot.data_plane import row_locators
from snapshot.errors import RowConflict, RowsNotFound

from . import names
from .base import RowStore
from .rows import decode_rows

TMP_PREFIX = ".tmp-"
LEFTOVER_SECONDS = 3600.0  # a temporary file this old is a dead put's: no put takes this long


class LocalDataPlane(RowStore):
    """Rows under `root/`: `g<id>.rows` per group, `g<id>-r<index>-a<attempt>.rows` per
    rollout attempt. Implements `snapshot.DataPlane`; see there for each method's contract."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalDataPlane({self.root!r})"

    def _path(self, locator: str) -> str:
        return os.path.join(self.root, names.checked(locator, self.root))

    def _store(self, locator: str, data: bytes) -> None:
        """`data` durable under `locator`, unless other bytes are there already (`RowConflict`)."""
        final = self._path(locator)
        tmp = os.path.join(self.root, f"{TMP_PREFIX}{locator}-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, final)
            except FileExistsError:
                with open(final, "rb") as f:
                    if f.read() != data:
                        raise RowConflict(
                            f"data plane {self.root}: {locator} already holds other rows; rows "
                            "under a locator never change (is a second writer producing the "
                            "same group, rollout and attempt?)") from None
        finally:
            os.unlink(tmp)
        DEFAULT_FS.fsync_dir(self.root)

    def get(self, locator: str) -> Any:
        path = self._path(locator)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise RowsNotFound(f"data plane {self.root}: no rows under {locator} ({path} does not "
                               "exist): deleted, or never put") from None
        return decode_rows(data, path)

    def has(self, locator: str) -> bool:
        return os.path.isfile(self._path(locator))

    def delete(self, locators: Iterable[str]) -> int:
        paths = [self._path(loc) for loc in locators]
        gone = 0
        for path in paths:
            try:
                os.unlink(path)
                gone += 1
            except FileNotFoundError:
                pass
        return gone

    def locators(self) -> Iterator[str]:
        return (name for name in os.listdir(self.root) if names.is_locator(name))

    def save(self, directory: str, groups: list[Group]) -> None:
        """Hard links into the cut when it is on the same file system, else copies."""
        for g in groups:
            for locator in row_locators(g):
                src, dst = self._path(locator), os.path.join(directory, locator)
                try:
                    os.link(src, dst)
                except FileNotFoundError:
                    raise RowsNotFound(f"data plane {self.root}: the rows of group {g.group_id} "
                                       f"({locator}) are missing, so the cut cannot carry them") from None
                except OSError:  # another file system
                    shutil.copyfile(src, dst)

    def remove_leftovers(self, older_than: float = LEFTOVER_SECONDS) -> int:
        """Remove the temporary files of puts that died (those older than `older_than`
        seconds: a live put's is younger); returns how many. No locator names them."""
        gone = 0
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            try:
                if name.startswith(TMP_PREFIX) and time.time() - os.lstat(path).st_mtime > older_than:
                    os.unlink(path)
                    gone += 1
            except FileNotFoundError:  # its put finished meanwhile
                pass
        return gone
