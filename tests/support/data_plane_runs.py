"""A `LocalDataPlane` workload recorded through the I/O seam, and the check of any directory it
may leave (a crash state, or what a failed operation left), for the crash-state enumeration
and the I/O-error sweep of the data plane (tests/system/test_data_plane_*.py).

The workload, with packs of about four rows: puts one by one across pack rotations, four puts
at once (one group commit), deletes whose dead marks make packs reclaimable (removed, or
compacted: copies fsynced, then the pack removed), more puts, an import of a cut's rows, three
rows stored as one batch (`store_batch`, as a session stores the seals in flight), and a save
into a cut's directory. `Record` notes when each put returned and each delete began, counted in
operations of the seam.

`check` opens the directory with the real file system: every row whose put returned is
listed (unless a delete of it had begun), every listed row decodes to exactly what was put
under its locator, and the data plane is usable: a put, and deleting everything, leave a
directory that a fresh data plane reads as empty.
"""

from __future__ import annotations

import os
import threading

from journal import Group, Owner
from replay import LocalDataPlane
from replay.data_plane.rows import decode_rows, encode_rows
from tests.support.equality import deep_equal


def rows_of(locator: str) -> dict:
    gid = int(locator[1:].split("-")[0].split(".")[0])
    return {"gid": gid, "tokens": bytes(range(gid % 7, gid % 7 + 200)) * 2, "text": locator}


def pack_bytes() -> int:
    """A pack size that retires packs after about four rows of `rows_of`."""
    return 8 + 4 * (len(encode_rows(rows_of("g10.rows"))) + 30)


class Record:
    """What the workload was told: puts that returned and deletes that began, by op count."""

    def __init__(self, fs) -> None:
        self.fs = fs
        self.puts: list[tuple[int, str]] = []      # (ops when the put returned, locator)
        self.deletes: list[tuple[int, str]] = []   # (ops when the delete began, locator)
        self._lock = threading.Lock()

    def put(self, dp: LocalDataPlane, gid: int, index: int | None = None) -> str:
        loc = f"g{gid}.rows" if index is None else f"g{gid}-r{index}-a0.rows"
        got = dp.put(gid, rows_of(loc)) if index is None else dp.put_rollout(gid, index, 0, rows_of(loc))
        with self._lock:
            self.puts.append((len(self.fs.ops), got))
        return got

    def store_batch(self, dp: LocalDataPlane, locators: list[str]) -> None:
        """`store_batch` of the rows of `locators`; raises the first item's error."""
        out = dp.store_batch([(loc, encode_rows(rows_of(loc))) for loc in locators])
        error = next((e for e in out if e is not None), None)
        if error is not None:
            raise error
        with self._lock:
            self.puts += [(len(self.fs.ops), loc) for loc in locators]

    def delete(self, dp: LocalDataPlane, locators: list[str]) -> None:
        self.deletes += [(len(self.fs.ops), loc) for loc in locators]
        dp.delete(locators)


def workload(dp: LocalDataPlane, rec: Record, cut: str, saved: str, base: int = 0) -> None:
    """Puts, group commits, deletes, reclaiming, an import of `cut`'s rows and a save into the
    new directory `saved` (group ids from `base`)."""
    for g in range(base, base + 5):
        rec.put(dp, g)
    at_once([lambda g=g: rec.put(dp, g, 0) for g in range(base + 5, base + 9)])
    rec.delete(dp, [f"g{g}.rows" for g in range(base, base + 4)])
    for g in range(base + 9, base + 11):
        rec.put(dp, g)
    rec.delete(dp, [f"g{g}-r0-a0.rows" for g in range(base + 5, base + 8)] + [f"g{base + 9}.rows"])
    imported = dp.import_cut(cut)
    rec.puts += [(len(rec.fs.ops), name) for name in sorted(os.listdir(os.path.join(cut, "data_plane")))]
    assert imported == 2
    rec.store_batch(dp, [f"g{g}-r1-a0.rows" for g in range(base + 12, base + 15)])
    rec.put(dp, base + 11)
    os.makedirs(saved)
    kept = [Group(g, 0, None, 0, None, Owner.REPLAY, locator=f"g{g}.rows") for g in (base + 4, base + 10)]
    dp.save(saved, kept)
    assert all(deep_equal(decode_rows(open(os.path.join(saved, g.locator), "rb").read(), g.locator),
                          rows_of(g.locator)) for g in kept)


def at_once(calls: list) -> None:
    """Run the calls each on a thread of its own, all at once; raise the first error."""
    errors: list[BaseException] = []

    def run(call) -> None:
        try:
            call()
        except BaseException as exc:   # re-raised on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def make_cut(path: str) -> str:
    """A cut directory whose data_plane/ carries two rows (group ids 500, 501)."""
    rows = os.path.join(path, "data_plane")
    os.makedirs(rows)
    for gid in (500, 501):
        with open(os.path.join(rows, f"g{gid}.rows"), "wb") as f:
            f.write(encode_rows(rows_of(f"g{gid}.rows")))
    return path


def check(root: str, rec: Record, point: int | None = None) -> None:
    """The guarantees on the directory `root` a run left after its first `point` operations
    (None: all of them); raises AssertionError naming what broke."""
    point = len(rec.fs.ops) if point is None else point
    dp = LocalDataPlane(root)
    listed = set(dp.locators())
    begun = {loc for at, loc in rec.deletes if at < point}
    missing = sorted(loc for at, loc in rec.puts if at <= point and loc not in begun and loc not in listed)
    assert not missing, f"rows whose put returned are not listed: {missing}"
    for loc in listed:
        assert deep_equal(dp.get(loc), rows_of(loc)), f"{loc} does not read back as it was put"
    new = dp.put(900, rows_of("g900.rows"))
    assert deep_equal(LocalDataPlane(root).get(new), rows_of(new)), "a put after the crash is lost"
    dp.delete(list(dp.locators()))
    dp.remove_leftovers(older_than=-1)
    assert os.listdir(root) == [], f"deleting every row left {sorted(os.listdir(root))}"
