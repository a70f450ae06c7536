"""The loader's epoch travels with its state: restore hands back the pass of the last group
taken before the restore point, from the journal, from a cut's state file and from a cut's
`.pt` files alone (the state file removed), so a trainer goes on in the right pass."""

from __future__ import annotations

import glob
import os

import pytest

from journal import GroupRef, Journal
from replay import restore
from snapshot import compact
from snapshot.manifest import MANIFEST_NAME


def _run(path: str) -> Journal:
    j = Journal.open(path, sync="none")
    j.taken([GroupRef(idx=0, epoch=2)], loader_state={"pos": 1})
    j.taken([GroupRef(idx=1, epoch=2), GroupRef(idx=2, epoch=3)], loader_state={"pos": 3})
    j.taken([GroupRef(idx=4, epoch=9)])  # no loader state: the loader's epoch stays 3
    j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    return j


def test_restore_from_the_journal_gives_the_epoch_of_the_loader_state(fast_tmp):
    path = str(fast_tmp / "j")
    _run(path).close()
    state = restore(path)
    assert (state.loader_state, state.loader_epoch) == ({"pos": 3}, 3)


@pytest.mark.parametrize("drop_state_file", [False, True])
def test_a_cut_keeps_the_epoch(fast_tmp, drop_state_file):
    path = str(fast_tmp / "j")
    j = _run(path)
    compact(path, journal=j, retention=None)
    j.close()
    cut = glob.glob(os.path.join(path, "snapshots", "cut-*"))[0]
    if drop_state_file:  # the .pt tables and the manifest alone
        from journal.layout import STATE_FILE
        import json
        os.unlink(os.path.join(cut, STATE_FILE))
        manifest = json.loads(open(os.path.join(cut, MANIFEST_NAME)).read())
        del manifest["files"][STATE_FILE]
        open(os.path.join(cut, MANIFEST_NAME), "w").write(json.dumps(manifest))
    state = restore(cut)
    assert (state.loader_state, state.loader_epoch) == ({"pos": 3}, 3)
