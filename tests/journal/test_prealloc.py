"""Preallocated segments: the writer zero-fills the active segment ahead of its frames and
overwrites the zeros, so a commit's fdatasync writes no metadata (docs/format.md, "Torn tails
and damage").

* While a journal is open its active segment ends in allocated zeros, fsynced before a frame
  lands in them; a reader beside the writer takes them for the end of the log; sealing a
  segment (rotation) and a clean close cut them off.
* Zeros to the end of the last segment end the log; a zero frame header followed by an intact
  frame, and zeros ending a sealed segment, are corruption naming segment, offset and LSN; a
  zero frame header followed by bytes that hold no frame is a torn tail (a torn zero-fill).
* Crash states: a crash after every recorded operation of a run that zero-fills and rotates
  (during a preallocation, with zeros never used, inside a torn frame over zeros) reopens to
  every acknowledged commit, and a later append verifies.
* I/O errors of the new steps (the preallocation, its fsync, the cut of the zeros) fail the
  journal (a commit) or raise `JournalIOError` (close), and lose nothing acknowledged.
* The next segment is prepared by a background thread (journal/segments.py) and published by
  a rename at the rotation; a failed preparation is removed and the rotation creates the
  segment; a failed publication fails the journal; a prepared file a crash left is removed.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil

import pytest

from journal import Journal, JournalCorrupt, JournalFailed, JournalIOError, Reader
from journal.format import HEADER_SIZE, encode_frame
from journal.layout import PREPARED_NAME
from journal.segments import PREALLOCATE_MIN
from tests.support.cli_run import cli
from tests.support.faultfs import FaultFS
from tests.support.journal_model import (Model, append_and_verify, assert_journal_matches, drive, frames,
                                         segment_files, tree_bytes)

SEGMENT = 4096
SEGMENT_1 = "00000001-"  # in the names of timeline 1's segments, not in the prepared file's


def data_end(path: str, seg: str) -> int:
    """Where the frames of segment `seg` end (the zeros after them excluded)."""
    return [f for f in frames(path) if f[0] == seg][-1][2]


def closed_journal(path: str, n: int = 25, **open_kw) -> Model:
    with Journal.open(path, **open_kw) as j:
        return drive(j, Model(), random.Random(5), n)


# -- the writer ------------------------------------------------------------------------------


def test_active_segment_is_zero_filled_ahead_and_cut_on_close(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs)
    m = drive(j, Model(), random.Random(1), 20)
    (seg,) = segment_files(path)
    p = os.path.join(path, seg)
    end = data_end(path, seg)
    assert os.path.getsize(p) > end  # zeros ahead of the frames
    with open(p, "rb") as fh:
        assert fh.read()[end:].count(0) == os.path.getsize(p) - end
    r = Reader(path)  # beside the live writer: the zeros are the end of the log, not a problem
    assert [rec.commit.lsn for rec in r.records()] == list(range(1, m.lsn + 1)) and r.problems == []
    # the zeros are durable before a frame is written into them
    kinds = [o.kind for o in fs.ops if o.path == p]
    first = kinds.index("allocate")
    assert kinds[first + 1] == "fsync" and "write" in kinds[first + 2:]
    j.close()
    assert os.path.getsize(p) == end
    assert [o.kind for o in fs.ops if o.path == p][-3:] == ["truncate", "fsync", "close"]
    append_and_verify(path, m)


def test_zero_fill_grows_ahead_of_the_frames(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    with Journal.open(path, fs=fs) as j:
        m = drive(j, Model(), random.Random(9), 30, take_weight=1000, max_take=1, fingerprint_bytes=6000)
        (seg,) = segment_files(path)
        sizes = [o.size for o in fs.ops if o.kind == "allocate" and o.path.endswith(seg)]
        first = HEADER_SIZE + PREALLOCATE_MIN  # then doubling: the segment's size so far each time
        assert data_end(path, seg) > 2 * first and sizes[:2] == [first, 2 * first]
        assert sizes == sorted(sizes) and os.path.getsize(os.path.join(path, seg)) == sizes[-1]
    append_and_verify(path, m)


def test_rotation_cuts_the_zeros_of_the_sealed_segment(fast_tmp):
    path = str(fast_tmp / "j")
    history = [Model()]
    with Journal.open(path, segment_bytes=SEGMENT) as j:
        while len(segment_files(path)) < 3:
            drive(j, history[-1], random.Random(len(history)), 1, history)
        segs = segment_files(path)
        for seg in segs[:-1]:  # sealed: frames only
            assert os.path.getsize(os.path.join(path, seg)) == data_end(path, seg) <= SEGMENT
        last = os.path.join(path, segs[-1])
        assert os.path.getsize(last) > data_end(path, segs[-1])
    assert Reader(path).problems == []
    append_and_verify(path, history[-1])


def test_sync_none_does_not_preallocate(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    with Journal.open(path, sync="none", fs=fs) as j:
        drive(j, Model(), random.Random(2), 10)
    assert fs.count("allocate") == 0


# -- the reader's rule ---------------------------------------------------------------------------


def test_zeros_then_an_intact_frame_are_corruption(fast_tmp):
    """A zero frame header, then an intact frame: that frame was written after the one that
    should be at the zeros was durable, so frames are missing from an acknowledged history."""
    path = str(fast_tmp / "j")
    m = closed_journal(path)
    (seg,) = segment_files(path)
    p = os.path.join(path, seg)
    end = os.path.getsize(p)
    stale, _ = encode_frame([b"\x93\x01\x90\x90"], 0)
    with open(p, "ab") as fh:
        fh.write(bytes(100) + stale + bytes(50))
    before = tree_bytes(path)
    with pytest.raises(JournalCorrupt) as info:
        list(Reader(path).records())
    e = info.value
    assert (e.segment, e.offset, e.lsn) == (seg, end, m.lsn + 1)
    assert f"zero-filled frame header followed by non-zero bytes at offset {end + 100}" in str(e)
    with pytest.raises(JournalCorrupt):
        Journal.open(path)
    assert tree_bytes(path) == before, "a failed open must not repair or move anything"
    pit = Reader(path, "point_in_time")
    assert [r.commit.lsn for r in pit.records()] == list(range(1, m.lsn + 1))
    assert [(p.kind, p.offset) for p in pit.problems] == [("damaged", end)]


def test_zeros_then_bytes_that_are_no_frame_are_a_torn_tail(fast_tmp):
    """A zero-fill torn by a crash, its lost part holding stale bytes: never acknowledged."""
    path = str(fast_tmp / "j")
    m = closed_journal(path)
    (seg,) = segment_files(path)
    p = os.path.join(path, seg)
    end = os.path.getsize(p)
    garbage = bytes(512) + bytes(range(1, 200)) * 3
    with open(p, "ab") as fh:
        fh.write(garbage + bytes(300))
    r = Reader(path)
    list(r.records())
    assert [(p.kind, p.offset) for p in r.problems] == [("torn", end)]
    with Journal.open(path) as j:
        assert_journal_matches(j, m)
    assert os.path.getsize(p) == end
    (copy,) = os.listdir(os.path.join(path, "torn"))
    with open(os.path.join(path, "torn", copy), "rb") as fh:
        assert fh.read() == garbage
    append_and_verify(path, m)


def test_zeros_ending_a_sealed_segment_are_corruption(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, segment_bytes=SEGMENT) as j:
        m = Model()
        while len(segment_files(path)) < 2:
            m = drive(j, m, random.Random(m.lsn), 1)
    first = segment_files(path)[0]
    p = os.path.join(path, first)
    end = os.path.getsize(p)
    lsn = [f for f in frames(path) if f[0] == first][-1][3][-1] + 1
    with open(p, "ab") as fh:
        fh.write(bytes(64))
    with pytest.raises(JournalCorrupt) as info:
        list(Reader(path).records())
    assert (info.value.segment, info.value.offset, info.value.lsn) == (first, end, lsn)
    assert "cut to its frames when it is sealed" in str(info.value)


# -- crash states --------------------------------------------------------------------------------


def run_recorded(path: str, commits: int):
    """A run that zero-fills and rotates (small segments), through FaultFS: the ops and, per
    commit, how many ops had been issued when it was acknowledged, with the model after it."""
    fs = FaultFS(root=path)
    acks, history = [], [Model()]
    with Journal.open(path, segment_bytes=SEGMENT, fs=fs) as j:
        rng = random.Random(11)
        for _ in range(commits):
            drive(j, history[-1], rng, 1, history, loader_every=4)
            acks.append(len(fs.ops))
    assert fs.count("allocate") >= 3 and len(segment_files(path)) >= 3
    assert any(o.kind == "rename" and PREPARED_NAME in o.path for o in fs.ops)  # a prepared one used
    return fs, acks, history


def test_crash_after_every_op_of_a_preallocating_run_loses_nothing_acknowledged(fast_tmp):
    fs, acks, history = run_recorded(str(fast_tmp / "run"), 120)
    allocs = [i for i, o in enumerate(fs.ops) if o.kind == "allocate"]
    points = sorted(set(range(0, len(fs.ops) + 1, 3)) | {i + d for i in allocs for d in (0, 1, 2)})
    for k in points:  # every third op, and around each preallocation (before, after, its fsync)
        acked = sum(1 for a in acks if a <= k)
        for mode in ("durable", "volatile"):
            img = fs.crash_image(str(fast_tmp / f"c{k}-{mode}"), upto=k, mode=mode)
            with Journal.open(img, segment_bytes=SEGMENT) as j:
                assert j.lsn >= acked, (k, mode)
                assert_journal_matches(j, history[j.lsn])
            assert Reader(img).problems == []
            shutil.rmtree(img)
    img = fs.crash_image(str(fast_tmp / "last"), mode="volatile")
    append_and_verify(img, history[-1])


@pytest.mark.parametrize("keep", [1, 11, 12, 13, 40])
def test_torn_frame_over_zeros_is_cut_and_copied_without_the_zeros(fast_tmp, keep):
    """The live journal's files (a process crash) with the next frame's first `keep` bytes
    written over the zeros: a torn tail; its bytes are copied aside, the zeros are not."""
    path = str(fast_tmp / "j")
    j = Journal.open(path)
    m = drive(j, Model(), random.Random(3), 15)
    (seg,) = segment_files(path)
    end = data_end(path, seg)
    img = shutil.copytree(path, str(fast_tmp / "img"))
    j.close()
    p = os.path.join(img, seg)
    size = os.path.getsize(p)
    frame, _ = encode_frame([b"\x93" + b"\x01" * 99], 0)  # longer than any `keep`: never whole
    torn = frame[:keep]
    with open(p, "r+b") as fh:
        fh.seek(end)
        fh.write(torn)
    assert os.path.getsize(p) == size > end + keep  # still zeros after the torn bytes
    with Journal.open(img) as j2:
        assert_journal_matches(j2, m)
    assert os.path.getsize(p) == end
    copies = os.listdir(os.path.join(img, "torn"))
    assert len(copies) == 1 and copies[0].startswith(f"{seg}.{end}.")
    with open(os.path.join(img, "torn", copies[0]), "rb") as fh:
        assert fh.read() == torn.rstrip(b"\0")
    append_and_verify(img, m)


# -- I/O errors of the new steps ---------------------------------------------------------------------


@pytest.mark.parametrize("kind,nth", [("allocate", 1), ("fsync", None), ("truncate", 1), ("truncate", 2)])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_failed_zero_fill_or_cut_fails_the_journal_and_loses_nothing(fast_tmp, kind, nth, code):
    """The zero-fill ahead of the active segment's frames (in the commit path), its fsync, and
    the cut of a sealed segment's zeros."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, segment_bytes=SEGMENT, fs=fs)
    if kind == "fsync":  # the fsync of the zeros the segment's zero-fill wrote (the one after it)
        fs.on("allocate", lambda k, p: SEGMENT_1 in p and fs.inject("fsync", nth=1, error=code))
    else:
        fs.inject(kind, nth=nth, error=code, path_contains=SEGMENT_1)
    history, rng, failed = [Model()], random.Random(11), None
    try:
        for _ in range(300):
            drive(j, history[-1], rng, 1, history, loader_every=4)
    except JournalFailed as exc:
        failed = exc
    assert failed is not None, "the fault must have fired"
    assert os.strerror(code) in str(failed)
    j.close()
    acked = history[-1]
    img = fs.crash_image(str(fast_tmp / "img"))  # a power loss right after the failure
    for d in (path, img):
        with Journal.open(d, segment_bytes=SEGMENT) as j2:
            assert_journal_matches(j2, acked)
        append_and_verify(d, acked)


def test_failed_cut_on_close_is_a_journal_io_error_and_loses_nothing(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    j = Journal.open(path, fs=fs)
    m = drive(j, Model(), random.Random(4), 10)
    fs.inject("truncate", nth=1, error=errno.EIO)
    with pytest.raises(JournalIOError) as info:
        j.close()
    (seg,) = segment_files(path)
    assert info.value.path == os.path.join(path, seg) and "zero-filled" in str(info.value)
    with Journal.open(path) as j2:  # the lock was released; the zeros left are the end of the log
        assert_journal_matches(j2, m)
    assert Reader(path).problems == []


def test_inspect_verify_takes_a_zero_tail_for_the_end(fast_tmp):
    """`journal-inspect verify` of the files a crash leaves (the active segment preallocated):
    no problem, no torn tail, nothing written."""
    path = str(fast_tmp / "j")
    j = Journal.open(path)
    drive(j, Model(), random.Random(6), 12)
    img = shutil.copytree(path, str(fast_tmp / "img"))
    j.close()
    r = Reader(img)
    list(r.records())
    assert r.zero_tails and not r.problems
    before = tree_bytes(img)
    report = json.loads(cli("verify", img, "--json").stdout)
    assert report["problems"] == []
    assert tree_bytes(img) == before


# -- the next segment, prepared in the background ------------------------------------------------


def rotate(j, path: str, m: Model, segments: int) -> Model:
    """Commit until the journal has `segments` segments."""
    while len(segment_files(path)) < segments:
        m = drive(j, m, random.Random(m.lsn), 1)
    return m


def test_rotation_publishes_the_segment_prepared_in_the_background(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    prepared = os.path.join(path, PREPARED_NAME)
    with Journal.open(path, segment_bytes=SEGMENT, fs=fs) as j:
        m = rotate(j, path, Model(), 4)
        on_prepared = [o.kind for o in fs.ops if o.path == prepared]
        assert on_prepared[:4] == ["create", "allocate", "fsync", "write"]  # zero-filled, then the header
        made = [o for o in fs.ops if o.kind == "create" and o.path.endswith(".wal")]
        renamed = [o.dst for o in fs.ops if o.kind == "rename" and o.path == prepared]
        assert len(made) == 1 and renamed == [os.path.join(path, s) for s in segment_files(path)[1:]]
        allocs = [o for o in fs.ops if o.kind == "allocate" and o.path == prepared]
        assert all(o.size == SEGMENT for o in allocs)
    assert PREPARED_NAME not in os.listdir(path)  # a clean close removes a prepared file
    append_and_verify(path, m)


@pytest.mark.parametrize("content", [b"", bytes(SEGMENT), b"header" + bytes(100)])
def test_a_prepared_file_a_crash_left_is_removed_on_open(fast_tmp, content):
    path = str(fast_tmp / "j")
    m = closed_journal(path)
    with open(os.path.join(path, PREPARED_NAME), "wb") as fh:
        fh.write(content)
    with Journal.open(path) as j:
        assert_journal_matches(j, m)
        assert PREPARED_NAME not in os.listdir(path)
    append_and_verify(path, m)


@pytest.mark.parametrize("kind", ["create", "allocate", "fsync"])
def test_a_failed_preparation_is_removed_and_the_rotation_creates_the_segment(fast_tmp, kind):
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    fs.inject(kind, nth=1, error=errno.ENOSPC, path_contains=PREPARED_NAME)
    with Journal.open(path, segment_bytes=SEGMENT, fs=fs) as j:
        m = rotate(j, path, Model(), 3)
        assert fs.count(failed=True) >= 1
        assert sum(o.kind == "create" and o.path.endswith(".wal") for o in fs.ops) >= 2  # the fallback
        assert_journal_matches(j, m)
    assert PREPARED_NAME not in os.listdir(path)
    append_and_verify(path, m)


@pytest.mark.parametrize("kind", ["write", "fsync", "rename", "fsync_dir"])
def test_a_failed_publication_fails_the_journal_and_loses_nothing(fast_tmp, kind):
    """The rotation's steps on the prepared file (header write, its fsync, the rename, the
    directory fsync) fail: fail-stop, and every acknowledged commit is there after a reopen."""
    path = str(fast_tmp / "j")
    fs = FaultFS(root=path)
    after = {"write": None, "fsync": "write", "rename": None, "fsync_dir": "rename"}[kind]
    if after is None:  # the prepared file's first write is the header; only a rotation renames it
        fs.inject(kind, nth=1, error=errno.EIO, path_contains=PREPARED_NAME)
    else:  # the header's fsync follows its write; the directory fsync follows the rename
        fs.on(after, lambda _k, p: PREPARED_NAME in p and fs.inject(
            kind, nth=1, error=errno.EIO, path_contains=None if kind == "fsync_dir" else PREPARED_NAME))
    history = [Model()]
    j = Journal.open(path, segment_bytes=SEGMENT, fs=fs)
    with pytest.raises(JournalFailed) as info:
        for _ in range(300):
            drive(j, history[-1], random.Random(len(history)), 1, history)
    assert "publish the prepared next segment" in str(info.value.__cause__)
    j.close()
    img = fs.crash_image(str(fast_tmp / "img"))
    for d in (path, img):
        with Journal.open(d, segment_bytes=SEGMENT) as j2:
            assert_journal_matches(j2, history[-1])
        assert PREPARED_NAME not in os.listdir(d)
        append_and_verify(d, history[-1])
