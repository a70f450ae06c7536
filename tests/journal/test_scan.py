"""Reading damaged bytes: the frame-chain identity of the format, typed problem kinds, torn tails
asked for explicitly, and one classification for headers and frames (a branch off a timeline at
or after the bad bytes makes them corruption of an acknowledged history, never a torn tail).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from journal import GroupRef, Journal, JournalCorrupt, Reader, format as fmt, layout
from journal.reader import ProblemKind
from tests.support.journal_model import tree_bytes


@given(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_a_frames_chain_is_one_crc_over_its_payload(records, chain_before):
    frame, chains = fmt.encode_frame(records, chain_before)
    payload = frame[fmt.FRAME_HEADER_SIZE:]
    assert [bytes(r) for r in fmt.split_records(payload)] == records
    assert chains == fmt.record_chains(records, chain_before)
    assert fmt.frame_chain(payload, chain_before) == chains[-1] == fmt.decode_frame_header(frame, 0).chain


def journal_of(path: str, commits: int, **kw) -> None:
    with Journal.open(path, sync="none", **kw) as j:
        for i in range(commits):
            j.taken([GroupRef(idx=i, task_name="t")])


def segment_paths(path: str) -> list[str]:
    return [s.path for s in Reader(path).segments]


def test_problem_kinds_are_typed_and_read_as_their_names(fast_tmp):
    path = str(fast_tmp / "j")
    journal_of(path, 5)
    (seg,) = segment_paths(path)
    with open(seg, "r+b") as f:  # a flipped byte in the first frame's payload
        f.seek(fmt.HEADER_SIZE + fmt.FRAME_HEADER_SIZE + 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    r = Reader(path, "salvage")
    assert [rec.commit.lsn for rec in r.records()] == [2, 3, 4, 5]
    (p,) = r.problems
    assert p.kind is ProblemKind.DAMAGED
    assert (p.kind == "damaged", str(p.kind), f"{p.kind}", json.dumps(p._asdict()["kind"])) == \
        (True, "damaged", "damaged", '"damaged"')


def test_torn_tails_are_found_by_an_explicit_call(fast_tmp):
    path = str(fast_tmp / "j")
    journal_of(path, 3)
    (seg,) = segment_paths(path)
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:
        f.write(b"\x07" * 9)  # a frame header cut short: a torn tail
    r = Reader(path)
    assert r.problems == []  # the headers are fine; the tail is found by scanning the frames
    (torn,) = r.torn_tails()
    assert (torn.segment.path, torn.offset, torn.size) == (seg, size, size + 9)
    assert [(p.kind, p.offset) for p in r.problems] == [(ProblemKind.TORN, size)]
    assert [rec.commit.lsn for rec in Reader(path).records()] == [1, 2, 3]


def test_an_unfinished_header_under_a_branch_is_corruption_not_a_torn_header(fast_tmp):
    """Timeline 2 branches off timeline 1 at an LSN of timeline 1's last segment, so that
    segment's commits were acknowledged: its header lost (all zero, no frame after it) is
    damage, and opening the journal removes nothing."""
    path = str(fast_tmp / "j")
    journal_of(path, 200, segment_bytes=4096)
    last = Reader(path).timelines[1].segments[-1]
    assert last.first_lsn > 1
    state = Reader(path).fold(stop_lsn=last.first_lsn)
    with Journal.open(path, resume=state, sync="none") as j:
        j.taken([GroupRef(idx=100, task_name="t")])
    assert Reader(path).timelines[2].branch_lsn == last.first_lsn
    with open(last.path, "r+b") as f:
        f.truncate(fmt.HEADER_SIZE)
        f.write(bytes(fmt.HEADER_SIZE))
    before = tree_bytes(path)
    with pytest.raises(JournalCorrupt, match=r"bad segment header.*timeline 2 branches off timeline 1 .*acknowledged"):
        Reader(path)
    with pytest.raises(JournalCorrupt):
        Journal.open(path, sync="none")
    assert tree_bytes(path) == before, "an acknowledged segment was removed as a torn header"
    (p,) = [p for p in Reader(path, "salvage").problems]
    assert (p.kind, p.segment) == (ProblemKind.DAMAGED, last.name)


def test_a_group_commit_frame_is_read_up_to_the_first_lsn_that_does_not_follow(fast_tmp):
    """Frames of several commits are read on the fast path; at a commit whose LSN does not follow
    (in a frame whose checksum and chain verify) the full read takes over from that commit."""
    import msgspec
    from journal.events import Commit, Trained

    path = str(fast_tmp / "j")
    os.makedirs(path)
    parts, chain, chains_of = [fmt.encode_header(fmt.SegmentHeader(b"r" * 16, 1, 0, 1, 0))], 0, []
    for lsns in ([1, 2, 3], [4, 5, 7], [8]):
        records = [msgspec.msgpack.encode(Commit(n, [Trained([n], n)])) for n in lsns]
        frame, chains = fmt.encode_frame(records, chain)
        chain = chains[-1]
        chains_of += chains
        parts.append(frame)
    with open(os.path.join(path, layout.segment_name(1, 1)), "wb") as f:
        f.write(b"".join(parts))
    pit = Reader(path, "point_in_time")
    assert [(r.commit.lsn, r.chain) for r in pit.records()] == list(zip([1, 2, 3, 4, 5], chains_of))
    assert [(p.kind, p.lsn) for p in pit.problems] == [(ProblemKind.GAP, 6)]
    assert [r.commit.lsn for r in Reader(path, "salvage").records()] == [1, 2, 3, 4, 5, 7, 8]
    with pytest.raises(JournalCorrupt, match="commit LSN 7 inside a frame does not follow 5") as info:
        list(Reader(path).records())
    assert info.value.lsn == 6
