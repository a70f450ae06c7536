"""`summary`'s event tally counts commits by shape and adds them up into kinds: the counts equal
an event-by-event count however many shapes pile up and however large a commit is, and each
timeline's first and last LSN are those of the records passed."""

from __future__ import annotations

import random

from journal import CheckpointBegun, CheckpointCommitted, Commit, Discarded, Record, Trained
from journal.events import Admitted, Diverted, Finished
from journal.kinds import BY_NAME

from replay.cli import summary

_MAKERS = (lambda: Admitted([1], target_step=1), lambda: Diverted([1]), lambda: Finished([1]),
           lambda: Trained([1], step=1), lambda: Discarded([1], reason="x"),
           lambda: CheckpointBegun(step=1), lambda: CheckpointCommitted(step=1))


def _records(seed: int, commits: int, big_every: int) -> list[Record]:
    """Commits of random shapes (nearly every one distinct), every `big_every`-th one larger
    than SHAPE_EVENTS events; LSNs 1.. over timelines 1, 1, ..., 2, 2, ..., 3."""
    rng = random.Random(seed)
    out = []
    for lsn in range(1, commits + 1):
        n = summary.SHAPE_EVENTS + 5 if lsn % big_every == 0 else rng.randint(1, 12)
        events = [rng.choice(_MAKERS)() for _ in range(n)]
        timeline = 1 if lsn <= commits // 3 else (2 if lsn <= 2 * commits // 3 else 3)
        out.append(Record(Commit(lsn, events), 0, timeline, "seg", 0, {}))
    return out


def _by_kind(records: list[Record]) -> dict[str, int]:
    out = {k: 0 for k in BY_NAME}
    for rec in records:
        for ev in rec.commit.events:
            out[type(ev).__struct_config__.tag] += 1
    return out


def test_tally_equals_an_event_by_event_count(monkeypatch):
    monkeypatch.setattr(summary, "SHAPES_HELD", 16)  # many add-ups in 600 commits
    records = _records(seed=7, commits=600, big_every=50)
    tally = summary.EventTally()
    passed = list(tally.counted(iter(records)))
    assert passed == records
    assert tally.events() == _by_kind(records)
    assert tally.commits == 600
    assert tally.lsn_range == {1: [1, 200], 2: [201, 400], 3: [401, 600]}
    assert len(tally.shapes) == 0


def test_shapes_held_stay_bounded(monkeypatch):
    monkeypatch.setattr(summary, "SHAPES_HELD", 16)
    tally = summary.EventTally()
    most, longest = 0, 0
    for _rec in tally.counted(iter(_records(seed=3, commits=300, big_every=7))):
        most = max(most, len(tally.shapes))
        longest = max([longest, *map(len, tally.shapes)])
    assert 1 < most <= 16
    assert 0 < longest <= summary.SHAPE_EVENTS
