"""Tests 2 and 3: torn tails and damaged sectors.

* Truncating a journal at every byte offset inside its last three commits (including a
  segment rotation and the new segment's header) reopens to exactly the complete commits,
  takes a later append, and verifies under a strict Reader.
* Garbage tails are cut off and copied into `torn/`; zero-filled tails end the log and are
  cut off without a copy.
* A zeroed 512-byte sector inside the last commit is a torn tail; inside an earlier commit
  it is damage: JournalCorrupt (strict) naming segment, offset and LSN, `point_in_time`
  stops before it, `salvage` skips it and reports it.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import Journal, JournalCorrupt, Reader
from journal.format import HEADER_SIZE
from tests.support.journal_model import (Model, append_and_verify, assert_journal_matches,
                                         assert_state_matches, drive, fold_records, frames, segment_files,
                                         tree_bytes)

TORN = "torn"


def torn_files(path: str) -> dict[str, bytes]:
    d = os.path.join(path, TORN)
    if not os.path.isdir(d):
        return {}
    out = {}
    for name in os.listdir(d):
        with open(os.path.join(d, name), "rb") as fh:
            out[name] = fh.read()
    return out


def read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


# -- test 2: every truncation point inside the last three commits ---------------------------


@pytest.fixture(scope="module")
def rotated(fast_tmp_module):
    """A journal whose last commit is the first of a new segment (so the last three commits
    straddle a rotation), and one whose last three commits share a segment."""
    base = str(fast_tmp_module / "trunc")
    out = {}
    path = os.path.join(base, "rot")
    history = [Model()]
    rng = random.Random(2)
    with Journal.open(path, segment_bytes=4096) as j:
        # loader states (blobs) early in the first segment; small commits up to the rotation
        drive(j, history[-1], rng, 20, history, loader_every=2, max_take=2)
        while len(segment_files(path)) < 2:
            drive(j, history[-1], rng, 1, history, loader_every=0, max_take=2)
        out["rotation"] = (shutil.copytree(path, os.path.join(base, "rotation")), list(history))
        for _ in range(3):
            drive(j, history[-1], rng, 1, history, loader_every=0, max_take=2)
    assert len(segment_files(path)) == 2, "the three commits after the rotation must fit"
    out["one-segment"] = (path, history)
    return out


def cut_points(path: str):
    """(segment index, offset) for every byte offset inside the last three commits, counting
    each offset of a segment that starts inside them from 0 (its header). (Cuts inside the zeros
    after them: tests/journal/test_prealloc.py.)"""
    segs = segment_files(path)
    fr = frames(path)
    first = fr[-3] if len(fr[-3][3]) == 1 else None
    assert first is not None
    start_seg = segs.index(first[0])
    for i in range(start_seg, len(segs)):
        lo = first[1] if i == start_seg else 0
        ends = [f[2] for f in fr if f[0] == segs[i]]  # the zeros of a preallocated segment after
        size = ends[-1] if ends else os.path.getsize(os.path.join(path, segs[i]))  # are not cut
        for off in range(lo, size + 1):
            yield i, off


@pytest.mark.parametrize("case", ["rotation", "one-segment"])
def test_truncate_at_every_offset_of_last_three_commits(rotated, fast_tmp, case):
    src, history = rotated[case]
    segs = segment_files(src)
    fr = frames(src)
    n = len(fr)
    assert [f[3] for f in fr] == [[i] for i in range(1, n + 1)]  # one commit per frame
    data = {s: read(os.path.join(src, s)) for s in segs}
    seen_lsns = set()
    for k, (i, off) in enumerate(cut_points(src)):
        d = str(fast_tmp / f"c{k}")
        os.mkdir(d)
        shutil.copy(os.path.join(src, "LOCK"), d)
        for s in segs[:i]:
            shutil.copy(os.path.join(src, s), d)
        seg = segs[i]
        with open(os.path.join(d, seg), "wb") as fh:
            fh.write(data[seg][:off])
        complete = [f for f in fr if segs.index(f[0]) < i or (f[0] == seg and f[2] <= off)]
        lsn = len(complete)
        seen_lsns.add(lsn)
        partial = [f for f in fr if f[0] == seg and f[1] < off < f[2]]
        # reopen: exactly the complete commits, the cut bytes copied aside
        with Journal.open(d, segment_bytes=4096) as j:
            assert j.lsn == lsn, (i, off)
            assert_journal_matches(j, history[lsn])
        torn = torn_files(d)
        if off < HEADER_SIZE:  # the new segment never got its header: it goes away entirely
            assert seg not in os.listdir(d)
            # an empty file holds nothing to keep aside: no 0-byte copy
            assert list(torn.values()) == ([data[seg][:off]] if off else [])
            assert off == 0 or next(iter(torn)).startswith(f"{seg}.0.")
        elif partial:
            (f,) = partial
            assert os.path.getsize(os.path.join(d, seg)) == f[1]
            # zeros ending the cut bytes cannot be told from a preallocated rest: not copied
            assert list(torn.values()) == [data[seg][f[1]:off].rstrip(b"\0")]
            assert next(iter(torn)).startswith(f"{seg}.{f[1]}.")
        else:
            assert torn == {}
            assert os.path.getsize(os.path.join(d, seg)) == off
        append_and_verify(d, history[lsn])
        shutil.rmtree(d)
    assert seen_lsns == {n - 3, n - 2, n - 1, n}


# -- test 3: zero and garbage tails ---------------------------------------------------------------


@pytest.fixture(scope="module")
def small_journal(fast_tmp_module):
    path = str(fast_tmp_module / "tails")
    history = [Model()]
    with Journal.open(path) as j:
        drive(j, history[-1], random.Random(3), 25, history)
    return path, history


def check_tail_cut(src: str, history, d: str, tail: bytes) -> None:
    shutil.copytree(src, d)
    (seg,) = segment_files(d)
    p = os.path.join(d, seg)
    size = os.path.getsize(p)
    with open(p, "ab") as fh:
        fh.write(tail)
    r = Reader(d)  # strict, read-only: a torn tail is not damage
    assert fold_records(r.records()).owners == history[-1].owners
    assert [pr.kind for pr in r.problems] == ["torn"]
    assert (r.problems[0].segment, r.problems[0].offset) == (seg, size)
    with Journal.open(d) as j:
        assert_journal_matches(j, history[-1])
    assert os.path.getsize(p) == size
    assert list(torn_files(d).values()) == [tail.rstrip(b"\0")]  # zeros after it: never written
    append_and_verify(d, history[-1])


@pytest.mark.parametrize("n", [1, 11, 12, 13, 100, 512, 4096])
def test_zero_filled_tail_ends_the_log_and_is_cut_without_a_copy(small_journal, fast_tmp, n):
    """Zeros after the last frame are the unwritten rest of a preallocated segment: the end of
    the log, not a problem; the writer cuts them off on open and keeps no copy (they hold nothing)."""
    src, history = small_journal
    d = shutil.copytree(src, str(fast_tmp / "z"))
    (seg,) = segment_files(d)
    p = os.path.join(d, seg)
    size = os.path.getsize(p)
    with open(p, "ab") as fh:
        fh.write(bytes(n))
    r = Reader(d)
    assert fold_records(r.records()).owners == history[-1].owners
    assert r.problems == [] and [t.offset for t in r.zero_tails.values()] == [size]
    with Journal.open(d) as j:
        assert_journal_matches(j, history[-1])
        assert os.path.getsize(p) == size
    assert torn_files(d) == {}
    append_and_verify(d, history[-1])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.binary(min_size=1, max_size=3000).filter(lambda t: any(t[:12])))  # zeros: above
def test_garbage_tail_is_cut(small_journal, fast_tmp, tail):
    d = str(fast_tmp / f"g{random.getrandbits(64)}")
    check_tail_cut(*small_journal, d, tail)
    shutil.rmtree(d)


# -- test 3: a zeroed sector ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_commits(fast_tmp_module):
    """Small commits, a ~6 KB commit at LSN `mid`, more small commits, a ~6 KB last commit."""
    path = str(fast_tmp_module / "sector")
    history = [Model()]
    rng = random.Random(4)
    with Journal.open(path) as j:
        drive(j, history[-1], rng, 10, history)
        drive(j, history[-1], rng, 1, history, take_weight=1000, max_take=1, fingerprint_bytes=6000)
        mid = history[-1].lsn
        drive(j, history[-1], rng, 10, history)
        drive(j, history[-1], rng, 1, history, take_weight=1000, max_take=1, fingerprint_bytes=6000)
    return path, history, mid


def sector_inside(frame) -> int:
    _, start, end, _ = frame
    s = (start + 511) // 512 * 512
    if s == start:
        s += 512
    assert s + 512 <= end, "the commit is too small to hold a whole sector"
    return s


def zero_sector(path: str, seg: str, at: int) -> None:
    with open(os.path.join(path, seg), "r+b") as fh:
        fh.seek(at)
        fh.write(bytes(512))


def test_zeroed_sector_in_last_commit_is_cut(big_commits, fast_tmp):
    src, history, _ = big_commits
    d = shutil.copytree(src, str(fast_tmp / "j"))
    last = frames(d)[-1]
    seg, start = last[0], last[1]
    zero_sector(d, seg, sector_inside(last))
    damaged = read(os.path.join(d, seg))
    with Journal.open(d) as j:
        assert_journal_matches(j, history[-2])
    assert os.path.getsize(os.path.join(d, seg)) == start
    assert list(torn_files(d).values()) == [damaged[start:]]
    append_and_verify(d, history[-2])


def test_zeroed_sector_in_earlier_commit_is_damage(big_commits, fast_tmp):
    src, history, mid = big_commits
    d = shutil.copytree(src, str(fast_tmp / "j"))
    fr = frames(d)
    target = next(f for f in fr if f[3] == [mid])
    seg, start = target[0], target[1]
    zero_sector(d, seg, sector_inside(target))
    before = tree_bytes(d)
    n = history[-1].lsn

    with pytest.raises(JournalCorrupt) as info:
        list(Reader(d).records())
    e = info.value
    assert (e.segment, e.offset, e.lsn) == (seg, start, mid)
    assert seg in str(e) and f"offset {start}" in str(e) and f"LSN {mid}" in str(e)

    with pytest.raises(JournalCorrupt) as info:
        Journal.open(d)
    assert (info.value.segment, info.value.offset, info.value.lsn) == (seg, start, mid)
    assert tree_bytes(d) == before, "a failed open must not repair or move anything"

    pit = Reader(d, "point_in_time")
    assert [r.commit.lsn for r in pit.records()] == list(range(1, mid))
    assert_state_matches(Reader(d, "point_in_time").fold(), history[mid - 1])
    assert [(p.kind, p.segment, p.offset, p.lsn) for p in pit.problems] == [("damaged", seg, start, mid)]

    sal = Reader(d, "salvage")
    assert [r.commit.lsn for r in sal.records()] == [x for x in range(1, n + 1) if x != mid]
    assert [(p.kind, p.segment, p.offset, p.lsn) for p in sal.problems] == [("damaged", seg, start, mid)]
    assert tree_bytes(d) == before


def test_zeroed_header_of_last_segment_with_commits_is_damage(big_commits, fast_tmp):
    """Sector 0 of the only segment (its header and first commits) zeroed: those commits
    were acknowledged, so this is damage, not a torn segment to delete."""
    src, history, _ = big_commits
    d = shutil.copytree(src, str(fast_tmp / "j"))
    (seg,) = segment_files(d)
    zero_sector(d, seg, 0)
    before = tree_bytes(d)
    with pytest.raises(JournalCorrupt) as info:
        Journal.open(d)
    assert info.value.segment == seg and info.value.offset == 0
    assert tree_bytes(d) == before
    with pytest.raises(JournalCorrupt):
        list(Reader(d).records())
