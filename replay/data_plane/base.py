"""What both library data planes share: locators made from numbers, rows encoded before they
are stored, and a cut's rows imported; a subclass stores bytes under a locator durably
(`_store`, and `_store_all` for many at once) and does the rest of `snapshot.DataPlane` its own
way."""

from __future__ import annotations

import os
from typing import Any

from journal.layout import DATA_PLANE_DIR
from snapshot.errors import RowsCorrupt

from . import names
from .rows import checked_body, encode_rows

IMPORT_BATCH_BYTES = 64 << 20   # import_cut stores a cut's rows this many bytes at a time


class RowStore:
    """`put`, `put_rollout`, `put_progress` and `import_cut` over the subclass's `_store(locator, data)`, which
    makes `data` durable under `locator` unless other bytes are there (`RowConflict`).

    `BATCHES`: the subclass's `store_batch(items)` makes many `(locator, data)` durable with one
    sync, an outcome per item (a session then stores the rows of the seals in flight together,
    `replay/session/row_commits.py`)."""

    BATCHES = False

    def _store(self, locator: str, data: bytes) -> None:
        raise NotImplementedError

    def _store_all(self, items: list[tuple[str, bytes]]) -> None:
        """`_store` of each `(locator, data)`; a subclass may make them durable together."""
        for locator, data in items:
            self._store(locator, data)

    def put(self, group_id: int, rows: Any) -> str:
        return self._put(names.group_locator(group_id), rows)

    def put_rollout(self, group_id: int, index: int, attempt: int, rows: Any) -> str:
        return self._put(names.rollout_locator(group_id, index, attempt), rows)

    def put_progress(self, group_id: int, index: int, attempt: int, part: int, rows: Any) -> str:
        return self._put(names.progress_locator(group_id, index, attempt, part), rows)

    def _put(self, locator: str, rows: Any) -> str:
        self._store(locator, encode_rows(rows))
        return locator

    def import_cut(self, cut_dir: str) -> int:
        """Each row file of the cut's `data_plane/`, checked (`RowsCorrupt` names a damaged one,
        or one that is not a plain file), stored in locator order, IMPORT_BATCH_BYTES at a time;
        files that are no row locator (another data plane's) are passed over."""
        src = os.path.join(cut_dir, DATA_PLANE_DIR)
        if not os.path.isdir(src):
            return 0
        n, batch, size = 0, [], 0
        for name in sorted(filter(names.is_locator, os.listdir(src))):
            path = os.path.join(src, name)
            if os.path.islink(path) or not os.path.isfile(path):
                raise RowsCorrupt(f"{path}: not a plain file; a cut's rows are plain files")
            with open(path, "rb") as f:
                data = f.read()
            checked_body(data, path)
            batch.append((name, data))
            size += len(data)
            n += 1
            if size >= IMPORT_BATCH_BYTES:
                self._store_all(batch)
                batch, size = [], 0
        self._store_all(batch)
        return n
