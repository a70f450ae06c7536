"""Issue 3, test 4: retention loses no history.

* archive: after compaction retires segments into zstd archives, the strict
  reader reading archived + live segments yields the very same commits as
  before (msgspec-encoded commit bytes, chain checksum and timeline compared
  LSN by LSN), each archive decompresses to its segment byte for byte, and the
  fold of the whole history is unchanged;
* delete: the retired segments are gone, and the state restored from the cut
  plus the remaining tail equals the full fold (computed before the delete) at
  the latest checkpoint, at the end, and at every LSN from the cut on.
"""

from __future__ import annotations

import os
import random

import zstandard

from journal import Journal, Reader
from journal.reader import list_segments
from journal.events import commit_encoder
from journal.format import HEADER_SIZE
from snapshot import compact
from snapshot.state_at import state_at

from tests.support.snapshot_support import (RandomPicker, assert_same_state, committed_lsn, drive,
                                            reference_states)



def _zstd_frames(data: bytes) -> list[bytes]:
    """The contents of the zstd frames of `data`, in order (a plain zstd decoder's view)."""
    out = []
    while data:
        d = zstandard.ZstdDecompressor().decompressobj()
        out.append(d.decompress(data))
        data = d.unused_data
    return out

def _history(path: str, seed: int) -> None:
    pick = RandomPicker(random.Random(seed))
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        model = drive(j, pick, 150)
        # close every pending checkpoint so the latest committed one is near the end
        for step in list(model.pending):
            j.commit_checkpoint(step=step)
            model = model.commit([("commit", step)])
        j.begin_checkpoint(step=10_000)
        j.commit_checkpoint(step=10_000)
        model = model.commit([("begin", 10_000)]).commit([("commit", 10_000)])
        drive(j, pick, 10, model)  # a tail after it


def _commits(path: str) -> list[tuple[int, bytes, int, int]]:
    return [(r.commit.lsn, commit_encoder.encode(r.commit), r.chain, r.timeline)
            for r in Reader(path, "strict").records()]


def test_archive_keeps_every_commit_readable(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path, 1)
    before = _commits(path)
    raw_before = {s.name: open(s.path, "rb").read() for s in list_segments(path)}
    refs_end = reference_states(path)[-1]
    result = compact(path, keep_cuts=1, retention="archive")
    assert len(result.retired_segments) >= 3
    segs = list_segments(path)
    archived = [s for s in segs if s.archived]
    assert [s.name for s in archived] == result.retired_segments
    for s in archived:  # the live file is gone, the archive holds its exact bytes
        assert not os.path.exists(s.path[:-len(".zst")])
        frames = _zstd_frames(open(s.path, "rb").read())
        assert b"".join(frames) == raw_before[s.name[:-len(".zst")]]
        assert len(frames[0]) == HEADER_SIZE  # the header in a frame of its own
    assert _commits(path) == before
    assert_same_state(Reader(path, "strict").fold(), refs_end, "fold over archived + live segments")
    # and a second compaction (nothing new to retire) changes nothing
    compact(path, keep_cuts=1, retention="archive")
    assert _commits(path) == before
    with Journal.open(path) as j:  # the writer opens over archived segments too
        assert j.lsn == before[-1][0]


def test_delete_restores_from_cut_plus_tail(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path, 2)
    before = _commits(path)
    refs = reference_states(path)  # the full fold, before anything is deleted
    L = committed_lsn(refs[-1])
    result = compact(path, keep_cuts=1, retention="delete")
    assert len(result.retired_segments) >= 3
    segs = list_segments(path)
    first = segs[0].first_lsn
    assert first > 1 and not any(s.archived for s in segs)
    assert all(not os.path.exists(os.path.join(path, n)) for n in result.retired_segments)
    # the remaining segments still hold exactly the commits they held
    assert _commits(path) == [c for c in before if c[0] >= first]
    assert_same_state(state_at(path).state, refs[L], "latest checkpoint from cut + tail")
    assert_same_state(state_at(path, "end").state, refs[-1], "end from cut + tail")
    for lsn in range(result.lsn, len(refs)):
        assert_same_state(state_at(path, lsn).state, refs[lsn], f"LSN {lsn} from cut + tail")


def test_retention_chooses_by_manifest_and_never_loads_the_cuts_it_removes(fast_tmp, monkeypatch):
    import snapshot.catalog
    from journal import GroupRef, Journal

    path = str(fast_tmp / "j")
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for step in range(1, 7):  # six cuts, each at a committed checkpoint
            for i in range(40):
                (gid,) = j.taken([GroupRef(idx=step * 100 + i)])
                j.admitted([gid], target_step=step)
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
            compact(path, journal=j, retention=None)
    loads: list[str] = []
    real = snapshot.catalog.read_cut

    def spy(cut_path, *args, **kwargs):
        loads.append(os.path.basename(cut_path))
        return real(cut_path, *args, **kwargs)

    monkeypatch.setattr(snapshot.catalog, "read_cut", spy)
    result = compact(path, "end", keep_cuts=1, retention="archive")
    assert len(result.removed_cuts) >= 5
    assert not set(result.removed_cuts) & set(loads), loads
