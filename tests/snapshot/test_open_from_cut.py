"""`Journal.open` without resume= starts from the newest cut's state file on the active history
(`journal/state_file.py`) and folds only the tail after it: the state is the full fold's, the
segments before the cut are not read (nor needed: retention may have deleted them), a state
file that is torn, damaged, foreign or off the active history is passed over for an older one
or the fold from LSN 1, and the forgotten-resume warning says what the full fold says."""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import GroupRef, Journal, JournalError, JournalWarning, Reader, State, state_file
from journal.layout import STATE_FILE
from snapshot import compact
from tests.support.journal_model import fold_records
from tests.support.segment_reads import scan_max_group_id, spy_segment_reads
from tests.support.snapshot_support import HypothesisPicker, assert_same_state, drive

SEGMENT = 4096


@pytest.fixture
def segment_reads(monkeypatch):
    return spy_segment_reads(monkeypatch)


def full_fold(path: str) -> State:
    """The reference: the active history folded from LSN 1, the next id above every id any
    timeline allocated."""
    r = Reader(path)
    state = r.fold()
    state.next_group_id = max(state.next_group_id, scan_max_group_id(r) + 1)
    return state


def opened_state(path: str) -> tuple[State, list[str]]:
    """The state `Journal.open` starts from, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Journal.open(path, sync="none", segment_bytes=SEGMENT) as j:
            state = j.state_copy()
    return state, [str(w.message) for w in caught if issubclass(w.category, JournalWarning)]


def churn(j: Journal, n: int, first_idx: int = 0) -> list[int]:
    gids = []
    for i in range(n):
        (gid,) = j.taken([GroupRef(idx=first_idx + i)])
        j.admitted([gid], target_step=1)
        gids.append(gid)
    return gids


def checkpoint(j: Journal, step: int) -> None:
    j.begin_checkpoint(step=step)
    j.commit_checkpoint(step=step)


def two_cuts(path: str) -> tuple[str, str]:
    """A journal with a cut after 150 commits, another after 300, and a tail: (older, newer)."""
    with Journal.open(path, sync="none", segment_bytes=SEGMENT) as j:
        churn(j, 150)
        checkpoint(j, 1)
        older = compact(path, "end", journal=j, retention=None).cut_path
        churn(j, 150, 1000)
        checkpoint(j, 2)
        newer = compact(path, "end", journal=j, retention=None).cut_path
        churn(j, 20, 5000)
        checkpoint(j, 3)
    return older, newer


def retire_before(path: str, lsn: int) -> None:
    """Delete every segment wholly at or before `lsn` (what retention="delete" does)."""
    segs = Reader(path).segments
    for seg, nxt in zip(segs, segs[1:]):
        if nxt.first_lsn - 1 <= lsn:
            os.unlink(seg.path)


def test_open_folds_only_the_tail_after_the_newest_cut(fast_tmp, segment_reads):
    path = str(fast_tmp / "j")
    _, newer = two_cuts(path)
    want = full_fold(path)
    cut_lsn = state_file.read(os.path.join(newer, STATE_FILE))[0].lsn
    segs = Reader(path).segments
    before = {s.name for s, nxt in zip(segs, segs[1:]) if nxt.first_lsn <= cut_lsn}
    assert len(before) > 3
    segment_reads.clear()
    got, warned = opened_state(path)
    assert_same_state(got, want, "open from the newest cut")
    assert not warned
    assert not before & set(segment_reads), "open read segments before the cut"


def test_open_after_the_head_was_retired(fast_tmp):
    path = str(fast_tmp / "j")
    _, newer = two_cuts(path)
    want = full_fold(path)
    retire_before(path, state_file.read(os.path.join(newer, STATE_FILE))[0].lsn)
    assert Reader(path).segments[0].first_lsn > 1
    got, _ = opened_state(path)
    assert_same_state(got, want, "open with the head retired")


def _truncate(n):
    def damage(p: str, _other: str) -> None:
        with open(p, "rb") as f:
            data = f.read()
        with open(p, "wb") as f:
            f.write(data[:n] if n >= 0 else data[:len(data) + n])
    return damage


def _flip(offset: int):
    def damage(p: str, _other: str) -> None:
        with open(p, "r+b") as f:
            f.seek(offset if offset >= 0 else os.path.getsize(p) + offset)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x20]))
    return damage


def _missing(p: str, _other: str) -> None:
    os.unlink(p)


def _a_directory(p: str, _other: str) -> None:
    os.unlink(p)
    os.mkdir(p)


def _another_run(p: str, _other: str) -> None:
    state, _ = state_file.read(p)
    with open(p, "wb") as f:
        f.write(state_file.encode(state, b"x" * 16))


def _off_the_history(p: str, _other: str) -> None:
    state, run_id = state_file.read(p)
    state.chain ^= 1  # the same LSN on another branch
    with open(p, "wb") as f:
        f.write(state_file.encode(state, run_id))


def _columns_disagree(p: str, _other: str) -> None:
    """A checksummed file whose live columns differ in length (a writer's bug, not the disk's)."""
    state, run_id = state_file.read(p)
    columns = state_file.group_columns(list(state.live.values()))
    columns["idx"] = columns["idx"][:-1]
    with open(p, "wb") as f:
        f.write(state_file.encode(state, run_id, [columns]))


DAMAGE = {"empty": _truncate(0), "header only": _truncate(20), "last byte lost": _truncate(-1),
          "payload bit": _flip(-7), "magic bit": _flip(2), "crc bit": _flip(9), "missing": _missing,
          "a directory": _a_directory, "another run": _another_run, "off the history": _off_the_history,
          "columns that disagree": _columns_disagree}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_bad_state_file_is_passed_over_for_the_older_one(fast_tmp, kind):
    path = str(fast_tmp / "j")
    older, newer = two_cuts(path)
    want = full_fold(path)
    DAMAGE[kind](os.path.join(newer, STATE_FILE), os.path.join(older, STATE_FILE))
    # the head before the older cut is gone: only the older state file can give the state
    retire_before(path, state_file.read(os.path.join(older, STATE_FILE))[0].lsn)
    got, _ = opened_state(path)
    assert_same_state(got, want, f"newest state file {kind}")


def test_without_a_usable_state_file_open_folds_from_lsn_1_or_asks_for_a_restore(fast_tmp):
    path = str(fast_tmp / "j")
    older, newer = two_cuts(path)
    want = full_fold(path)
    for cut in (older, newer):
        _truncate(-1)(os.path.join(cut, STATE_FILE), "")
    got, _ = opened_state(path)
    assert_same_state(got, want, "no usable state file, head on disk")
    retire_before(path, 200)
    with pytest.raises(JournalError, match="were retired and no cut .* holds a usable state file"):
        Journal.open(path, sync="none")


def _warning_case(path: str, kind: str) -> None:
    with Journal.open(path, sync="none", segment_bytes=SEGMENT) as j:
        churn(j, 120)
        if kind == "clean shutdown":           # markers only after begun: no warning
            checkpoint(j, 1)
        elif kind == "ownership after begun":  # begun(1), taken, committed(1): warns
            j.begin_checkpoint(step=1)
            j.taken([GroupRef(idx=777)])
            j.commit_checkpoint(step=1)
        elif kind == "no checkpoint at all":   # warns (LSN 0)
            pass
        compact(path, "end", journal=j, retention=None)  # the cut is at the end: no tail


@pytest.mark.parametrize("kind,warns", [("clean shutdown", False), ("ownership after begun", True),
                                        ("no checkpoint at all", True)])
def test_the_forgotten_resume_warning_is_the_full_folds(fast_tmp, kind, warns):
    path = str(fast_tmp / "j")
    _warning_case(path, kind)
    got, warned = opened_state(path)
    assert_same_state(got, full_fold(path), kind)
    assert bool(warned) == warns, warned


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_open_via_the_newest_state_file_equals_the_full_fold(tmp_path_factory, data):
    """Random histories with branches (resumes at earlier points leave dead tails) and cuts at
    random points (some on what later becomes a dead tail): every open equals the full fold."""
    path = str(tmp_path_factory.mktemp("prop") / "j")
    pick = HypothesisPicker(data)
    for run in range(pick.int(1, 4)):
        resume = None
        if run and pick.bool(0.6):
            r = Reader(path)
            end = r.fold().lsn
            resume = r.fold(stop_lsn=pick.int(max(0, end - 30), end))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)
            j = Journal.open(path, sync="none", segment_bytes=SEGMENT, resume=resume)
        with j:
            model = fold_records(Reader(path).records())  # what is legal next
            model.next_gid = j.state_copy().next_group_id  # above the dead tails' ids too
            for _ in range(pick.int(0, 2)):
                model = drive(j, pick, pick.int(1, 40), model)
                if pick.bool(0.7):
                    compact(path, "end", journal=j, retention=None)
        got, _ = opened_state(path)
        assert_same_state(got, full_fold(path), f"open after run {run}")
