"""A local data plane: finished rollouts, one file per group or per rollout attempt, crash-safe.

`put` writes a group's tensors (`g<id>.pt`), `put_rollout` one rollout's result as
one attempt produced it (`g<id>-r<index>-a<attempt>.pt`), to a temporary file,
fsyncs it, renames it into place and fsyncs the directory, *before* the trainer
journals `finished` / `rollout_sealed` with the returned locator; so a locator the
journal holds always names complete rows, even after a SIGKILL or a power cut.
Group ids are never reused by the journal and the attempt is part of a rollout's
name, so a file never confuses an old row with a new prompt, and a late result of a
given-up attempt never overwrites the result of the attempt that replaced it.

It implements `snapshot.DataPlane` (`save`, `has`): a cut copies (hard-links) the
rows of its REPLAY groups into its own `data_plane/` directory, and `import_cut`
brings them back when a trainer resumes from a cut alone.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import shutil
from typing import Iterable

import torch

from journal import DEFAULT_FS, Group

_LOCATOR = re.compile(r"^g(\d+)(-r\d+-a\d+)?\.pt$")
_TMP = ".tmp-"


def _write_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f"{_TMP}{os.path.basename(path)}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    DEFAULT_FS.fsync_dir(directory)


def rows_of(group: Group) -> list[str]:
    """The data-plane locators holding a group's rows: its sealed rollouts' for a group
    admitted with rollouts=N, else its own."""
    if group.rollouts is None:
        return [group.locator]
    return [loc for loc in group.rollouts.locators if loc is not None]


class LocalDataPlane:
    """Rows of finished groups (`g<id>.pt`) and sealed rollouts (`g<id>-r<index>-a<attempt>.pt`)
    under `root/`."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    @staticmethod
    def locator_for(group_id: int) -> str:
        return f"g{int(group_id)}.pt"

    @staticmethod
    def rollout_locator(group_id: int, index: int, attempt: int) -> str:
        return f"g{int(group_id)}-r{int(index)}-a{int(attempt)}.pt"

    def _path(self, locator: str) -> str:
        if not isinstance(locator, str) or not _LOCATOR.match(locator):
            raise ValueError(f"not a data-plane locator: {locator!r}")
        return os.path.join(self.root, locator)

    # -- the trainer's side ------------------------------------------------------------

    def put(self, group_id: int, rows: dict[str, torch.Tensor]) -> str:
        """Persist one group's rows durably; returns the locator to journal with `finished`."""
        return self._put(self.locator_for(group_id), rows)

    def put_rollout(self, group_id: int, index: int, attempt: int, rows: dict[str, torch.Tensor]) -> str:
        """Persist one rollout's result durably; returns the locator to journal with
        `rollout_sealed` (delete it if the journal rejects the seal)."""
        return self._put(self.rollout_locator(group_id, index, attempt), rows)

    def _put(self, locator: str, rows: dict[str, torch.Tensor]) -> str:
        buf = io.BytesIO()
        torch.save(rows, buf)
        _write_atomic(self._path(locator), buf.getvalue())
        return locator

    def get(self, locator: str) -> dict[str, torch.Tensor]:
        with open(self._path(locator), "rb") as f:
            return torch.load(io.BytesIO(f.read()), weights_only=True, map_location="cpu")

    def delete(self, locators: Iterable[str]) -> int:
        """Forget rows no restore can ask for any more; returns how many files went."""
        n = 0
        for loc in locators:
            try:
                os.unlink(self._path(loc))
                n += 1
            except FileNotFoundError:
                pass
        if n:
            DEFAULT_FS.fsync_dir(self.root)
        return n

    def sweep(self, keep: Iterable[str]) -> int:
        """Remove every row file not in `keep`, and temporary files of writes that crashed."""
        keep = set(keep)
        gone = 0
        for name in os.listdir(self.root):
            if name.startswith(_TMP) or (_LOCATOR.match(name) and name not in keep):
                os.unlink(os.path.join(self.root, name))
                gone += 1
        if gone:
            DEFAULT_FS.fsync_dir(self.root)
        return gone

    def import_cut(self, cut_dir: str) -> int:
        """Copy the rows a cut carries (its `data_plane/`) into this store; returns how many."""
        return self.import_rows(os.path.join(cut_dir, "data_plane"))

    def import_rows(self, src: str) -> int:
        """Copy the row files of directory `src` into this store; returns how many."""
        if not os.path.isdir(src):
            return 0
        n = 0
        for name in sorted(os.listdir(src)):
            if not _LOCATOR.match(name):
                continue
            with open(os.path.join(src, name), "rb") as f:
                data = f.read()
            _write_atomic(self._path(name), data)
            n += 1
        return n

    # -- snapshot.DataPlane ----------------------------------------------------------------

    def has(self, locator: str) -> bool:
        try:
            return os.path.isfile(self._path(locator))
        except ValueError:
            return False

    def save(self, directory: str, replay_groups: list) -> None:
        """Put the rows of `replay_groups` into a cut's `data_plane/` (hard links when possible;
        the compactor fsyncs them). A REPLAY group without rows is an error, never a silent gap."""
        for g in replay_groups:
            for loc in rows_of(g):
                if not self._link(loc, directory):
                    raise FileNotFoundError(f"data plane {self.root}: rows of group {g.group_id} "
                                            f"({loc}) are missing")

    def _link(self, locator: str, directory: str) -> bool:
        src, dst = self._path(locator), os.path.join(directory, locator)
        try:
            os.link(src, dst)
        except FileNotFoundError:
            return False
        except OSError:
            shutil.copyfile(src, dst)
        return True
