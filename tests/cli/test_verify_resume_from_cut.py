"""journal-inspect verify on a journal that was resumed from a cut (into an empty directory) and
then restored again to that same checkpoint: the second branch starts where the first one's base
cut is, which is legitimate (found by the example trainer's resume-from-cut test)."""

from __future__ import annotations

import json

from journal import GroupRef, Journal
from replay import restore
from replay.cli import main as inspect_main
from snapshot import compact


def test_verify_accepts_a_branch_at_the_base_cut_of_a_resumed_journal(tmp_path, capsys):
    j = Journal.open(str(tmp_path / "old"), sync="none")
    g = j.taken([GroupRef(1), GroupRef(2)], loader_state={"pos": 2})
    j.admitted(g, target_step=1)
    j.finished(g[:1])
    j.trained(g[:1], step=1)
    lsn = j.begin_checkpoint(step=1)
    compact(str(tmp_path / "old"), at=lsn, into=str(tmp_path / "ckpt" / "ownership"), journal=j)
    j.commit_checkpoint(step=1)
    j.close()

    new = str(tmp_path / "new")
    j = Journal.open(new, resume=restore(str(tmp_path / "ckpt" / "ownership")), sync="none")
    j.finished([g[1]])
    j.close()                                   # dies before its next checkpoint
    state = restore(new)
    assert state.lsn == lsn and state.step == 1
    j = Journal.open(new, resume=state, sync="none")
    j.finished([g[1]])
    j.trained([g[1]], step=2)
    j.begin_checkpoint(step=2)
    j.commit_checkpoint(step=2)
    j.close()

    capsys.readouterr()
    rc = inspect_main(["verify", "--json", new])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["clean"], doc["problems"]
    assert any(c["check"] == "restore point" and c["result"] == "ok" for c in doc["checks"]), doc["checks"]
