"""The chain of checks of a cut is one ordered list, `snapshot.checks.CHECKS`: its order is the
numbering every report shows (cut_status, `journal-inspect cuts`, `verify`, docs/recovery.md),
`read_cut` runs its functions in that order, and `rollout_recovery.pt`'s optional entries
are one tuple both `write_cut` and `read_cut` follow."""

from __future__ import annotations

import os
import re

import pytest

import replay
import replay.errors
import snapshot
import snapshot.errors
from journal import GroupRef, Journal
from replay.cli import cuts as cuts_cli
from replay.cut_status import check_one_cut
from snapshot import checks as chain, compact, cut as cut_module, read_cut
from snapshot.checks import CHECKS, check_of

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")


@pytest.fixture
def cut_path(tmp_path):
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    j.taken([GroupRef(idx=i) for i in range(3)], loader_state={"pos": 3})
    j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    j.close()
    return compact(path, retention=None).cut_path


def test_the_list_order_is_the_numbering():
    assert [c.number for c in CHECKS] == list(range(1, len(CHECKS) + 1))
    assert len({c.error for c in CHECKS}) == len(CHECKS), "one error class per check"
    assert all(issubclass(c.error, snapshot.RestoreError) for c in CHECKS)
    # the anchor needs the journal: it is the one check read_cut cannot run
    assert [c.error for c in CHECKS if c.run is None] == [snapshot.JournalMismatch]


def test_every_error_of_the_cut_belongs_to_one_check():
    defined = [v for v in vars(snapshot.errors).values()
               if isinstance(v, type) and issubclass(v, snapshot.RestoreError) and v is not snapshot.RestoreError]
    for cls in defined:
        assert check_of(cls) is not None, cls
    assert check_of(snapshot.UnsafePath).error is snapshot.ManifestMissing
    assert check_of(snapshot.TwoOwners).error is snapshot.CorruptRecord
    assert check_of(ValueError("x")) is None


def test_replay_re_exports_the_same_classes():
    """`replay.errors` is the documented home of every restore error; the cut's classes are
    snapshot's own objects, so `except replay.RestoreError` catches what compaction raises."""
    for c in CHECKS:
        assert getattr(replay, c.error.__name__) is c.error
        assert getattr(replay.errors, c.error.__name__) is c.error
    assert replay.RestoreError is snapshot.RestoreError is replay.errors.RestoreError


def test_read_cut_runs_the_checks_in_list_order(cut_path, monkeypatch):
    ran = []

    def noted(check):
        return lambda reading: (ran.append(check.number), check.run(reading))[1]

    monkeypatch.setattr(chain, "CHECKS", tuple(c._replace(run=noted(c)) if c.run else c for c in CHECKS))
    read_cut(cut_path)
    assert ran == [c.number for c in CHECKS if c.run is not None]


def test_reports_show_the_numbers_of_the_list(cut_path):
    os.unlink(os.path.join(cut_path, "replay_buffer_metadata.pt"))
    e = check_one_cut(cut_path)
    missing = check_of(snapshot.MissingFile)
    assert e["check"] == missing.number and e["error"] == "MissingFile"
    assert e["reason"].startswith(f"check {missing.number} ({missing.what}) fails")
    for c in CHECKS:
        assert f"{c.number} {c.what}" in cuts_cli.DESCRIPTION


def test_the_docs_list_the_checks_in_list_order():
    with open(os.path.join(DOCS, "inspect.md"), encoding="utf-8") as f:
        assert f"which check (1-{len(CHECKS)}) fails" in f.read()
    with open(os.path.join(DOCS, "recovery.md"), encoding="utf-8") as f:
        text = f.read()
    para = text[text.index("Checks, in order"):]
    para = para[:para.index("\n\n")]
    assert f"`snapshot.checks.CHECKS` 1-{len(CHECKS)}" in para
    positions = [re.search(rf"`{c.error.__name__}`", para).start() for c in CHECKS]
    assert positions == sorted(positions), "docs/recovery.md names the checks in another order"


def test_an_optional_entry_is_written_and_read_back_through_one_tuple(tmp_path, monkeypatch):
    """The extension point of `rollout_recovery.pt`: an entry added to `OPTIONAL_ENTRIES` is
    written by `write_cut`, decoded by `read_cut` (check 7), and absent from older cuts."""
    path = str(tmp_path / "journal")
    j = Journal.open(path, sync="none")
    j.taken([GroupRef(idx=0)])
    j.close()
    old_cut = compact(path, at="end", retention=None).cut_path
    seen = []
    extra = cut_module.OptionalEntry("extra", lambda state: {"n": state.next_group_id},
                                     lambda value, where, state: seen.append((value, where)))
    monkeypatch.setattr(cut_module, "OPTIONAL_ENTRIES", cut_module.OPTIONAL_ENTRIES + (extra,))
    read_cut(old_cut)
    assert seen == [], "a cut written before the entry existed has none"
    new_cut = cut_module.write_cut(str(tmp_path / "new"), read_cut(old_cut).state, run_id=b"\0" * 16,
                                   timeline=1)
    read_cut(new_cut)
    assert seen == [({"n": 1}, os.path.join(new_cut, "rollout_recovery.pt") + " extra")]
