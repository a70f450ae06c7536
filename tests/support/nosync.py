"""`NoSyncFS`: the real file system without fsync, for tests whose crashes are simulated by
closing or by editing files (the page cache is the disk there), so that they do not wait on
the device. Crash safety itself is tested through `tests/support/faultfs.py`."""

from __future__ import annotations

from journal.vfs import OsFileSystem


class NoSyncFS(OsFileSystem):
    def fsync(self, f) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


NOSYNC = NoSyncFS()
