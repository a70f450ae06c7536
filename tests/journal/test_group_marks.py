"""The group-id mark of segment headers (docs/format.md, "Marks"): every new segment records
the lowest id no history had allocated, so `ever.max_group_id` and `ever.attempts_used`
read the headers plus the segments the marks do not cover, and give what a scan of every
timeline gives; a header without a mark (older journals) falls back to reading."""

from __future__ import annotations

import os
import shutil
import struct
import zlib

import pytest

from journal import GroupRef, Journal, Reader, RolloutRef, Taken
from journal.ever import attempts_used, max_group_id
from journal import format as fmt, layout
from tests.support.crash_oracle import attempts_on_disk
from tests.support.segment_reads import scan_max_group_id, spy_segment_reads

FIXTURE_V1 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "v1")


@pytest.fixture
def segment_reads(monkeypatch):
    return spy_segment_reads(monkeypatch)


def _history(path: str, commits: int) -> None:
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for i in range(commits):
            (gid,) = j.taken([GroupRef(idx=i)])
            j.admitted([gid], target_step=1)


def test_every_new_segment_header_records_the_lowest_unallocated_id(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path, 300)
    r = Reader(path)
    assert len(r.segments) > 3
    allocated_before = {}
    top = -1
    for rec in r.records():
        allocated_before.setdefault(rec.commit.lsn, top)
        for ev in rec.commit.events:
            if type(ev) is Taken:
                top = max(top, ev.groups[-1].group_id)
    for seg in r.segments:
        assert seg.header.next_group_id == allocated_before[seg.first_lsn] + 1, seg.name


def test_a_header_without_a_mark_decodes_as_not_recorded():
    body = struct.pack("<8sI16sIIQI12x", fmt.MAGIC, fmt.FORMAT_VERSION, b"r" * 16, 1, 0, 1, 0)
    old = body + struct.pack("<I", zlib.crc32(body))
    h = fmt.decode_header(old)
    assert h.group_mark == 0 and h.next_group_id is None
    marked = h._replace(group_mark=fmt.group_mark(41))
    assert fmt.decode_header(fmt.encode_header(marked)).next_group_id == 41
    assert fmt.encode_header(h) == old  # an unmarked header is byte for byte the old one


def test_max_group_id_reads_only_the_newest_segment_and_counts_dead_tails(fast_tmp, segment_reads):
    path = str(fast_tmp / "j")
    _history(path, 300)
    branch_at = Reader(path).fold(stop_lsn=200)
    with Journal.open(path, sync="none", segment_bytes=4096, resume=branch_at) as j:
        (gid,) = j.taken([GroupRef(idx=9999)])
    r = Reader(path)
    assert gid == scan_max_group_id(r) == 299 + 1  # above the ids of the dead tail
    assert len(r.timelines) == 2
    segment_reads.clear()
    assert max_group_id(r) == gid
    newest = r.timelines[2].segments[-1].name
    assert segment_reads == [newest]


def test_max_group_id_of_a_journal_without_marks_reads_everything(fast_tmp, segment_reads):
    path = str(fast_tmp / "v1")
    shutil.copytree(FIXTURE_V1, path)
    r = Reader(path)
    assert all(s.header.next_group_id is None for s in r.segments)
    segment_reads.clear()
    assert max_group_id(r) == scan_max_group_id(r)
    assert set(segment_reads) == {s.name for s in r.segments}


def test_attempts_used_reads_only_segments_since_the_lowest_group_was_taken(fast_tmp, segment_reads):
    path = str(fast_tmp / "j")
    _history(path, 300)  # segments that cannot name the groups below
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        gids = j.taken([GroupRef(idx=10_000 + i) for i in range(4)])
        j.admitted(gids, target_step=2, rollouts=3)
        j.rollout_failed([RolloutRef(g, 1, 0) for g in gids], reason="worker lost")
        j.rollout_sealed([RolloutRef(gids[0], 0, 0, "tq/0")], policy_version=1)
        point = j.state_copy()
        j.rollout_failed([RolloutRef(g, 1, 1) for g in gids[:2]], reason="worker lost")
    with Journal.open(path, sync="none", segment_bytes=4096, resume=point) as j:  # a dead tail
        j.rollout_failed([RolloutRef(gids[3], 2, 0)], reason="worker lost")
    r = Reader(path)
    keys = {(g, i) for g in gids for i in range(3)}
    segment_reads.clear()
    used = attempts_used(r, keys)
    read = set(segment_reads)
    assert used == {k: a for k, a in attempts_on_disk(path).items() if k in keys}
    assert used[(gids[0], 1)] == 2 and used[(gids[3], 2)] == 1 and used[(gids[0], 0)] == 0
    covering = [s.name for s in r.segments if s.header.next_group_id is not None
                and s.header.next_group_id <= gids[0]]
    before = {covering[i] for i in range(len(covering) - 1)}  # wholly before the groups existed
    assert before and not before & read


def test_a_plain_reopen_never_hands_out_an_id_a_mark_counted(fast_tmp):
    """A rotation plans its segment with the ids of the commits folded before it, durable or
    not: the writer died after that segment's header reached the disk and before the commit
    that took ids 2..49 did. Those ids count as used (docs/format.md, "Marks"): the next
    plain reopen of the one timeline allocates above them."""
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        j.taken([GroupRef(idx=0), GroupRef(idx=1)])
    r = Reader(path)
    (seg,) = r.segments
    last = list(r.records())[-1]
    header = seg.header._replace(first_lsn=last.commit.lsn + 1, chain_seed=last.chain,
                                 group_mark=fmt.group_mark(50))
    with open(os.path.join(path, layout.segment_name(seg.timeline, last.commit.lsn + 1)), "wb") as f:
        f.write(fmt.encode_header(header).ljust(fmt.HEADER_SIZE, b"\0"))
    with Journal.open(path) as j:
        assert j.taken([GroupRef(idx=2)]) == [50]
