"""The writer remembers where it wrote its last frames (`Journal.frame_position`): for every
commit of those frames, the position (segment, offset, the frame's first LSN, the chain before
it) a reader finds by reading the segment (`position.position_of`), across group-committed
frames and a rotation; nothing for a commit not durable yet or older than the frames it
remembers. A cut of the live writer takes its position from there and reads nothing for it."""

from __future__ import annotations

import threading
import time

from journal import GroupRef, Journal, Reader, position
from journal.commit_pipeline import RECENT_FRAMES
from journal.reader import list_segments
from snapshot import compact, read_cut
from tests.support.faultfs import FaultFS


def _commits_from_threads(j: Journal, threads: int, each: int) -> None:
    def run(k: int) -> None:
        for i in range(each):
            (g,) = j.taken([GroupRef(idx=k * 1000 + i)])
            j.admitted([g], target_step=1)

    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def test_each_remembered_frame_holds_the_position_a_reader_finds(fast_tmp):
    path = str(fast_tmp / "j")
    fs = FaultFS()
    with Journal.open(path, sync="always", segment_bytes=16 << 10, fs=fs) as j:
        _commits_from_threads(j, 8, 60)                   # rotations
        (g,) = j.taken([GroupRef(idx=0)])
        held, gate = fs.hold_segment_fsyncs()
        first = threading.Thread(target=j.admitted, args=([g],), kwargs={"target_step": 1})
        first.start()
        assert held.wait(10)                              # its fsync waits while others queue
        behind = threading.Thread(target=_commits_from_threads, args=(j, 4, 1))
        behind.start()
        while len(j._pending) < 4:
            time.sleep(0.001)
        gate.set()                                        # the last frame holds several commits
        first.join()
        behind.join()
        assert len(list_segments(path)) > 1
        reader = Reader(path)
        remembered = [lsn for lsn in range(1, j.lsn + 1) if j.frame_position(lsn) is not None]
        assert remembered == list(range(remembered[0], j.lsn + 1))   # the newest frames, whole
        firsts = {j.frame_position(lsn).lsn for lsn in remembered}
        assert len(firsts) <= RECENT_FRAMES and len(firsts) < len(remembered)  # some frames hold several
        for lsn in remembered:
            assert j.frame_position(lsn) == position.position_of(reader, lsn, 0), lsn
        assert remembered[0] > 1 or len(firsts) < RECENT_FRAMES
        assert j.frame_position(j.lsn + 1) is None


def test_a_commit_older_than_the_remembered_frames_has_no_position(fast_tmp):
    with Journal.open(str(fast_tmp / "j"), sync="none") as j:
        for i in range(RECENT_FRAMES + 10):
            j.taken([GroupRef(idx=i)])
        assert j.frame_position(1) is None and j.frame_position(j.lsn) is not None


def test_a_cut_of_the_live_writer_takes_its_position_from_it(fast_tmp, monkeypatch):
    path = str(fast_tmp / "j")
    with Journal.open(path, sync="always") as j:
        _commits_from_threads(j, 4, 20)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        want = position.position_of(Reader(path), j.lsn, j.state_copy().next_group_id)

        def unread(*args, **kwargs):
            raise AssertionError("the live writer's cut read the journal for its position")

        monkeypatch.setattr(position, "position_of", unread)
        cut = read_cut(compact(path, "end", journal=j, retention=None).cut_path)
    with open(f"{cut.path}/{position.layout.POSITION_FILE}", "rb") as f:
        got = position.decode(f.read())
    assert got == want and got.lsn <= cut.lsn
