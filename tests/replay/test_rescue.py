"""A journal with a damaged frame (bytes flipped) before, inside or after the segment holding the
newest cut's anchor: the `JournalCorrupt` of `Journal.open` names a command that works
(`journal-inspect rescue J NEWDIR`), and following it to the end gives a journal that restores,
resumes, commits and audits clean. A cut inside the damaged journal restores on its own, and
`restore(journal)` uses the newest point whose state does not need the damaged frames."""

from __future__ import annotations

import os
import re
import shlex
import warnings

import pytest

from journal import Journal, JournalCorrupt, JournalWarning, Reader, Taken
from replay import DamagedJournalWarning, NothingToRestore, audit, rescue, restore
from snapshot import compact
from tests.support.cli_journals import Loader, Trainer
from tests.support.cli_run import cli

SEGMENT = 4096


def _run(path: str) -> tuple[Trainer, str]:
    """Checkpoints every second step; a cut at step 24's checkpoint (retention off: every
    segment stays); 24 more steps, then a crash. Returns the trainer and the cut."""
    t = Trainer(path, Loader(500), segment_bytes=SEGMENT)
    t.start()
    cut = None
    for _ in range(48):
        t.step()
        if t.step_no % 2 == 0:
            t.checkpoint()
        if t.step_no == 24:
            cut = compact(path, retention=None, journal=t.j).cut_path
    t.step()  # the dead tail: a step after the last checkpoint
    t.crash()
    return t, cut


def _flip(path: str, lsn: int) -> str:
    """Flip a byte inside the payload of the frame holding commit `lsn`; the segment's name."""
    rec = next(r for r in Reader(path).records(start_lsn=lsn, stop_lsn=lsn))
    seg = os.path.join(path, rec.segment)
    with open(seg, "r+b") as f:
        f.seek(rec.offset + 16)
        b = f.read(1)
        f.seek(rec.offset + 16)
        f.write(bytes([b[0] ^ 0x5A]))
    return rec.segment


def _checkpoints(path: str) -> dict[int, int]:
    """step -> checkpoint_begun LSN of the committed checkpoints (read before the damage)."""
    return dict(Reader(path).fold().committed_checkpoints)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("healthy") / "journal")
    _t, cut = _run(path)
    reader = Reader(path)
    cut_lsn = int(os.path.basename(cut).rsplit("-", 1)[1])
    segs = [s.first_lsn for s in reader.segments]
    holding = max(i for i, first in enumerate(segs) if first <= cut_lsn)
    assert 0 < holding < len(segs) - 1, "the cut's segment must have segments before and after it"
    assert segs[holding] + 2 < cut_lsn < segs[holding + 1] - 3
    return path, os.path.basename(cut), cut_lsn, segs, holding, _checkpoints(path)


def _position(healthy, where: str) -> int:
    """The LSN whose frame is damaged: a commit taking rows (not a checkpoint marker, whose loss
    would hide that a checkpoint was committed)."""
    path, _cut, cut_lsn, segs, holding, _ckpts = healthy
    near = {"before": segs[holding - 1] + 2, "inside-before": cut_lsn - 4, "inside-after": cut_lsn + 2,
            "after": segs[holding + 1] + 20}[where]
    return next(r.commit.lsn for r in Reader(path).records(start_lsn=near)
                if any(type(ev) is Taken for ev in r.commit.events))


def _expected_step(healthy, damaged_lsn: int) -> int:
    """The newest committed checkpoint whose state does not need the damaged frame: any, when the
    damage is before the cut (the cut covers it); else one begun before the damage."""
    _path, _cut, cut_lsn, _segs, _holding, ckpts = healthy
    ok = [s for s, lsn in ckpts.items() if damaged_lsn < cut_lsn <= lsn or lsn < damaged_lsn]
    return max(ok, key=ckpts.get)


def _damaged_copy(healthy, tmp_path, where: str) -> tuple[str, int, int]:
    """A copy of the healthy journal damaged `where`: (its path, the damaged LSN, the step a
    restore should come back at)."""
    import shutil
    path = str(tmp_path / "journal")
    shutil.copytree(healthy[0], path)
    lsn = _position(healthy, where)
    _flip(path, lsn)
    return path, lsn, _expected_step(healthy, lsn)


WHERE = ["before", "inside-before", "inside-after", "after"]
# before the newest cut's position (in the segments before its own, or in its own before the
# frame holding its LSN): a restore and a resume read the journal from that position on
BEFORE_THE_CUT = ("before", "inside-before")


@pytest.mark.parametrize("where", WHERE)
def test_restore_uses_the_newest_point_the_damage_does_not_touch(healthy, tmp_path, where):
    path, lsn, want = _damaged_copy(healthy, tmp_path, where)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = restore(path)
    assert state.step == want and state.lsn == healthy[5][want]
    warned = [str(w.message) for w in caught if issubclass(w.category, DamagedJournalWarning)]
    if where not in BEFORE_THE_CUT:  # the damage was met
        assert state.damage and any(f"LSN {lsn}" in d for d in state.damage), state.damage
        assert len(warned) == 1 and f"journal-inspect rescue {path} NEWDIR" in warned[0]
    cut_state = restore(os.path.join(path, "snapshots", healthy[1]))  # a cut restores on its own
    assert cut_state.lsn == healthy[2] and cut_state.source == "cut"


@pytest.mark.parametrize("where", WHERE)
def test_the_printed_recipe_works_to_the_end(healthy, tmp_path, where):
    path, _lsn, want = _damaged_copy(healthy, tmp_path, where)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        try:
            Journal.open(path, resume=restore(path), sync="none").close()
            opened = True
        except JournalCorrupt as exc:
            opened, message = False, str(exc)
    if opened:  # the damage is before the newest cut's position: the resume does not read it
        assert where in BEFORE_THE_CUT
        command = f"journal-inspect rescue {shlex.quote(path)} NEWDIR"  # works all the same
    else:
        assert f"journal-inspect rescue {path} NEWDIR" in message and "snapshots/cut-" not in message
        command = re.search(r"`(journal-inspect rescue [^`]+)`", message).group(1)
    new = str(tmp_path / "rescued")
    args = shlex.split(command.replace("NEWDIR", new))[1:]
    out = cli(*args).stdout
    assert f"into {new}" in out and f"step {want}" in out

    # then: restore the new journal, resume it, commit, audit
    t = Trainer(new, Loader(500), segment_bytes=SEGMENT, resume=True)
    assert t.step_no == want
    for _ in range(3):
        t.step()
    t.checkpoint()
    t.j.close()
    again = restore(new)
    assert again.step == want + 3 and again.damage == []
    report = audit(new)
    assert report.clean, report.to_dict()
    cli("verify", new)


def test_rescue_refuses_a_directory_in_use(healthy, tmp_path):
    path, _lsn, _want = _damaged_copy(healthy, tmp_path, "after")
    os.makedirs(tmp_path / "busy")
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="busy"):
        rescue(path, str(tmp_path / "busy"))
    with pytest.raises(ValueError, match="inside"):
        rescue(path, os.path.join(path, "new"))
    with pytest.raises(NothingToRestore):  # a mistyped source never starts an empty run
        rescue(str(tmp_path / "no-such-journal"), str(tmp_path / "new"))
    assert not os.path.exists(tmp_path / "new")
    err = cli("rescue", path, str(tmp_path / "busy"), code=2).stderr
    assert "not an empty directory" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path / "busy")) == ["notes.txt"]
