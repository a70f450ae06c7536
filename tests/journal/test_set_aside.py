"""Damage in an old segment that a valid cut wholly covers (here the last segment of the timeline
a restart branched off, read on every open for its torn tail) does not block `Journal.open`: the
open starts from the cut's state file, moves the damaged segment (and the older history before
it) into `damaged/` (never deleted), and warns naming it and where it went. The journal then
restores, resumes, compacts, verifies and audits clean. Damage the cut does not cover still
stops the open."""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

from journal import Journal, JournalCorrupt, JournalWarning, Reader
from journal.layout import DAMAGED_DIR
from replay import audit, restore, verify
from snapshot import compact
from tests.support.cli_journals import Loader, Trainer, restarted_run

SEGMENT = 4096


def _flip(path: str, segment: str, offset: int) -> None:
    with open(os.path.join(path, segment), "r+b") as f:
        f.seek(offset + 16)
        b = f.read(1)
        f.seek(offset + 16)
        f.write(bytes([b[0] ^ 0x5A]))


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """20 steps, a crash two steps past a checkpoint, a restart (timeline 2), 30 more steps with
    a cut at step 40 (retention off: every segment stays)."""
    path = str(tmp_path_factory.mktemp("restarted") / "journal")
    restarted_run(path, before=20, dead=2, after=30, compact_every=20, segment_bytes=SEGMENT)
    return path


def _damaged(restarted, tmp_path, which: str) -> tuple[str, str]:
    """A copy with a frame of timeline 1's last segment flipped: in the part the active history
    holds ("active") or in its dead tail ("dead"). Returns (path, the segment)."""
    path = str(tmp_path / "journal")
    shutil.copytree(restarted, path)
    reader = Reader(path)
    branch = reader.timelines[2].branch_lsn
    lsn = branch - 3 if which == "active" else branch + 3
    rec = next(r for r in reader.timeline_records(1) if r.commit.lsn == lsn)
    assert rec.segment == reader.timelines[1].segments[-1].name
    _flip(path, rec.segment, rec.offset)
    return path, rec.segment


def _open_warnings(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, JournalWarning)]


@pytest.mark.parametrize("which", ["active", "dead"])
@pytest.mark.parametrize("resume", [False, True], ids=["open", "resume"])
def test_damage_a_cut_covers_is_set_aside(restarted, tmp_path, which, resume):
    path, segment = _damaged(restarted, tmp_path, which)
    older = [s.name for s in Reader(path, "salvage").timelines[1].segments[:-1]]
    want = restore(path)  # restore does not need the segment: the cut covers it
    kwargs = {"resume": want} if resume else {}
    warned = _open_warnings(lambda: Journal.open(path, sync="none", segment_bytes=SEGMENT, **kwargs).close())
    aside = os.path.join(path, DAMAGED_DIR)
    assert sorted(os.listdir(aside)) == sorted(older + [segment])  # moved, never deleted
    assert not os.path.exists(os.path.join(path, segment))
    (message,) = [w for w in warned if segment in w]
    assert os.path.join(aside, segment) in message and "damaged" in message
    for name in older:
        assert name in message

    again = restore(path)
    assert (again.lsn, again.step) == (want.lsn, want.step) and again.damage == []
    t = Trainer(path, Loader(500), segment_bytes=SEGMENT, resume=True)
    for _ in range(2):
        t.step()
    t.checkpoint()
    compact(path, journal=t.j, retention="archive")
    t.j.close()
    assert verify(path).clean
    assert audit(path).clean
    assert _open_warnings(lambda: Journal.open(path, sync="none").close()) == []  # once only


def test_damage_no_cut_covers_still_stops_the_open(restarted, tmp_path):
    """The same damage without the cut: nothing covers it, nothing is moved."""
    path, segment = _damaged(restarted, tmp_path, "active")
    shutil.rmtree(os.path.join(path, "snapshots"))
    with pytest.raises(JournalCorrupt, match="journal-inspect rescue"):
        Journal.open(path, sync="none")
    assert os.path.exists(os.path.join(path, segment)) and not os.path.exists(os.path.join(path, DAMAGED_DIR))
