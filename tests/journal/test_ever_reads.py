"""The fences' reads (`journal/ever.py`) after a read of the same `Reader`: a question about every
history with `known_to=K` (the caller knows the active history up to LSN K) goes on from the
frame where a read of the active segment stopped after K, or ended (`Reader.stops`), instead of
reading again from the newest cut's position; and not at all when that read passed the whole
segment and ended at or before K (`Reader.ends`). The answers equal those of a fresh reader."""

from __future__ import annotations

import pytest

from journal import GroupRef, Journal, Reader
from journal.ever import admitted_groups
from snapshot import compact


def _journal(path: str) -> tuple[int, int, int]:
    """A cut early on, a long tail; a group waiting at LSN K (a checkpoint's begin) and admitted
    at K + 1. Returns (K, the waiting group, the last LSN)."""
    with Journal.open(path, sync="none") as j:
        for i in range(20):
            (g,) = j.taken([GroupRef(idx=i)])
            j.admitted([g], target_step=1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        compact(path, journal=j, retention=None)
        for i in range(20, 400):
            (g,) = j.taken([GroupRef(idx=i)])
            j.admitted([g], target_step=1)
        (waiting,) = j.taken([GroupRef(idx=1000)])
        k = j.begin_checkpoint(step=2)
        j.admitted([waiting], target_step=2)
        return k, waiting, j.lsn


def _counting(reader: Reader) -> list:
    """The records `reader.segment_records` yields from now on."""
    seen, real = [], reader.segment_records

    def counted(*args, **kwargs):
        for rec in real(*args, **kwargs):
            seen.append(rec.commit.lsn)
            yield rec
    reader.segment_records = counted
    return seen


@pytest.mark.parametrize("first_read", ["to the end", "stopped at K"])
def test_a_fence_reads_only_what_follows_the_point_a_read_reached(fast_tmp, first_read):
    path = str(fast_tmp / "j")
    k, waiting, end = _journal(path)
    reader = Reader(path)
    if first_read == "to the end":
        reader.fold()
    else:
        reader.fold(stop_lsn=k)
    seen = _counting(reader)
    assert admitted_groups(reader, {waiting}, known_to=k) == {waiting}   # admitted at K + 1
    assert admitted_groups(Reader(path), {waiting}, known_to=k) == {waiting}
    assert seen and min(seen) >= k, f"read again from LSN {min(seen)}, the point is {k}"
    seen.clear()
    admitted_groups(reader, {waiting}, known_to=end)      # the whole active history known
    assert seen == []                                     # a read passed it all: nothing to read
