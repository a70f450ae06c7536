"""A live segment is read a window at a time (`journal.reader.WINDOW_BYTES`): a read holds about
a window, not the segment, and what it yields and finds (records, offsets, chains, problems,
torn tails, the strict mode's error) is the same as a read of the segment held whole, for any
window size, on intact, torn and damaged segments."""

from __future__ import annotations

import os
import random
import shutil
import tracemalloc

import pytest

from journal import GroupRef, Journal, JournalCorrupt, Reader, reader as reader_module
from journal.reader import list_segments

WHOLE = 1 << 30  # larger than any segment here: the segment is held whole


def _journal(path: str, commits: int, locator_bytes: int = 40, pad_bytes: int = 700, **options) -> str:
    """One writer, about `commits` groups' commits of varied sizes (a loader state on some)."""
    rng = random.Random(3)
    with Journal.open(path, sync="none", **options) as j:
        idx = 0
        while idx < commits:
            k = rng.randint(1, 4)
            gids = j.taken([GroupRef(idx=idx + i, task_name="math", epoch=0) for i in range(k)],
                           loader_state={"pos": idx, "pad": "x" * rng.randint(0, pad_bytes)} if idx % 5 == 0 else None)
            j.admitted(gids, target_step=1, policy_version=0)
            for g in gids:
                j.finished([g], policy_version=0, locators=["r" * rng.randint(1, locator_bytes)])
            j.trained(gids, step=1)
            idx += k
    return path


def _outcome(path: str, mode: str):
    """Everything a read reports: each record's LSN, chain, segment and offset, the problems and
    torn tails, or the strict mode's error."""
    r = Reader(path, mode)
    try:
        records = [(rec.commit.lsn, rec.chain, rec.segment, rec.offset) for rec in r.records()]
        end = r.fold().lsn if mode != "salvage" else None
    except JournalCorrupt as exc:
        return ("raised", str(exc), exc.segment, exc.offset, exc.lsn, list(r.problems))
    return records, end, list(r.problems), sorted((t.segment.name, t.offset) for t in r.torn_tails())


def test_a_read_holds_a_window_not_the_segment(tmp_path, monkeypatch):
    path = _journal(str(tmp_path / "j"), 9000, locator_bytes=400, pad_bytes=8)
    (seg,) = list_segments(path)
    assert seg.size > 2 << 20
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", 128 << 10)
    tracemalloc.start()
    try:
        n = sum(1 for _ in Reader(path).records())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n > 10_000
    assert peak < 1 << 20, f"reading a {seg.size:,}-byte segment peaked at {peak:,} bytes"


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> str:
    """Three segments of about 6 KiB (and a live fourth): frames cross every small window."""
    return _journal(str(tmp_path_factory.mktemp("window") / "j"), 160, segment_bytes=6000)


def _damaged_copies(src: str, root) -> list[str]:
    """Copies of `src` with a torn last segment, a flipped byte in a sealed one, a zeroed run
    inside a frame and a frame header whose length runs past the end."""
    segs = [s.path for s in list_segments(src)]
    out = []

    def copy(name: str) -> tuple[str, list[str]]:
        d = shutil.copytree(src, str(root / name))
        out.append(d)
        return d, [os.path.join(d, os.path.basename(p)) for p in segs]

    for cut in (5, 200, 1111):
        _d, files = copy(f"torn{cut}")
        os.truncate(files[-1], os.path.getsize(files[-1]) - cut)
    for where in (100, 2500, 5000):
        _d, files = copy(f"flip{where}")
        with open(files[1], "r+b") as f:
            f.seek(where)
            b = f.read(1)[0]
            f.seek(where)
            f.write(bytes([b ^ 0x10]))
    _d, files = copy("zeros")
    with open(files[0], "r+b") as f:
        f.seek(3000)
        f.write(bytes(300))
    _d, files = copy("runs-past")
    with open(files[-1], "ab") as f:
        f.write((1 << 20).to_bytes(4, "little") + bytes(40))
    return out


@pytest.mark.parametrize("window", [64, 997, 4096])
def test_a_windowed_read_finds_what_a_whole_read_finds(intact, tmp_path, monkeypatch, window):
    journals = [intact] + _damaged_copies(intact, tmp_path)
    modes = ("strict", "point_in_time", "salvage")
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", WHOLE)
    whole = {(j, m): _outcome(j, m) for j in journals for m in modes}
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", window)
    for j in journals:
        for m in modes:
            assert _outcome(j, m) == whole[(j, m)], f"{os.path.basename(j)} {m}, window {window}"
    assert len(list_segments(intact)) >= 3 and whole[(intact, "strict")][0][-1][0] > 300
    assert any(o[0] == "raised" for o in whole.values())
    assert any(o[0] != "raised" and o[3] for o in whole.values())  # a torn tail among them


def test_a_segment_unlinked_mid_read_is_still_read_whole_for_the_slow_path(intact, tmp_path, monkeypatch):
    """Compaction may archive and unlink a live segment while a read is inside it: the slow
    path re-reads the file the read opened, not the path, and finds what a whole read finds."""
    (damaged,) = [d for d in _damaged_copies(intact, tmp_path) if d.endswith("flip5000")]
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", WHOLE)
    expected = [(rec.commit.lsn, rec.offset) for rec in Reader(damaged, "salvage").records()]
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", 997)
    flipped = list_segments(damaged)[1].path
    records = Reader(damaged, "salvage").records()
    got = []
    for rec in records:
        got.append((rec.commit.lsn, rec.offset))
        if rec.segment == os.path.basename(flipped) and os.path.exists(flipped):
            os.unlink(flipped)       # the read holds the file open
    assert not os.path.exists(flipped) and got == expected


def test_the_zero_filled_rest_of_a_live_segment_is_read_a_window_at_a_time(tmp_path, monkeypatch):
    """A live writer's segment ends in preallocated zeros: a windowed read ends the log there
    without loading the segment whole, and finds what a whole read finds."""
    path = str(tmp_path / "j")
    j = Journal.open(path, sync="always")
    for i in range(40):
        j.taken([GroupRef(idx=i)], loader_state={"pos": i + 1})
    (seg,) = list_segments(path)
    with open(seg.path, "rb") as f:
        data = f.read()
    assert data.endswith(bytes(4096)) and len(data) > 4 * 997  # zeros ahead of the frames
    def outcome():
        r = Reader(path)
        records = [(rec.commit.lsn, rec.chain, rec.offset) for rec in r.records()]
        return records, list(r.problems), {p: (t.offset, t.size) for p, t in r.zero_tails.items()}
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", WHOLE)
    whole = outcome()
    assert len(whole[0]) == 40 and whole[2]
    monkeypatch.setattr(reader_module, "WINDOW_BYTES", 997)
    loads = []
    move_to = reader_module._SegmentWindow.move_to

    def spy(self, pos):
        got = move_to(self, pos)
        loads.append(got[1] is False)
        return got
    monkeypatch.setattr(reader_module._SegmentWindow, "move_to", spy)
    assert outcome() == whole
    assert not any(loads), "the segment was loaded whole for its zeros"
    j.close()
