"""The run identity at restore (DESIGN 13, docs/recovery.md "Run identity"): `restore(identity=)`
compares the identity given now with the one recorded at the restore point, from a journal and
from a cut alone, and each policy does what it says: "error" raises `IdentityChanged` naming the
keys added, removed and changed; "regenerate" keeps ownership and the loader position but
brings every group that holds generated work back to generate again; "accept" keeps everything
and reports the change. A session restarted with a changed sampling temperature is refused,
then regenerates on request, and the run stays exactly-once."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from journal import GroupRef, Journal, JournalWarning, Owner, RolloutRef
from journal.identity import IdentityChanges, digests
from journal.layout import MANIFEST_NAME
from replay import (IdentityChanged, LocalDataPlane, RestoreError, Session, audit, restore)
from snapshot import compact, read_cut

from tests.support.cli_run import cli, cli_json

OLD = {"tokenizer": "tiny-bpe-v3", "temperature": 0.7, "top_p": 0.95, "reward": "exact-v1"}
NEW = {"tokenizer": "tiny-bpe-v3", "temperature": 0.9, "top_p": 0.95, "template": "<|user|>{p}"}


def _history(path: str, identity=OLD) -> tuple[int, int, int, int]:
    """At the committed checkpoint of step 1: `a` finished (REPLAY, both rollouts sealed), `b`
    ADMITTED with rollout 0 of 2 sealed, `c` ADMITTED with none sealed, `d` RESERVED."""
    with Journal.open(path, identity=identity) as j:
        a, b, c, d = j.taken([GroupRef(idx=i, task_name="math") for i in range(4)], loader_state={"pos": 4})
        j.admitted([a, b, c], target_step=1, policy_version=0, rollouts=2)
        j.rollout_sealed([RolloutRef(a, 0, 0, "rows/a0"), RolloutRef(a, 1, 0, "rows/a1")], policy_version=0)
        j.finished([a])
        j.rollout_sealed([RolloutRef(b, 0, 0, "rows/b0")], policy_version=0)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    return a, b, c, d


def test_error_names_the_keys_added_removed_and_changed(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path)
    with pytest.raises(IdentityChanged) as info:
        restore(path, identity=NEW)
    assert isinstance(info.value, RestoreError)
    assert info.value.changes == IdentityChanges(added=("template",), removed=("reward",),
                                                 changed=("temperature",))
    msg = str(info.value)
    for words in (path, "LSN 7", "step 1", "changed: temperature", "added: template",
                  "removed: reward", 'on_identity_changed="regenerate"'):
        assert words in msg, (words, msg)
    assert "tokenizer" not in msg and "top_p" not in msg  # the keys that agree are not named
    with pytest.raises(ValueError, match="on_identity_changed must be one of"):
        restore(path, identity=NEW, on_identity_changed="warn")


def test_without_identity_nothing_is_checked_and_the_same_one_passes(fast_tmp):
    path = str(fast_tmp / "j")
    _history(path)
    plain = restore(path)
    assert plain.identity_check == "unchecked" and plain.identity_changes is None
    same = restore(path, identity=dict(reversed(list(OLD.items()))))
    assert same.identity_check == "same"
    assert [g.group_id for g in same.replay] == [g.group_id for g in plain.replay]
    assert same.regenerated == [] and same.dropped_rollouts == []


def test_regenerate_keeps_ownership_and_the_loader_and_drops_every_generated_result(fast_tmp):
    path = str(fast_tmp / "j")
    a, b, c, d = _history(path)
    st = restore(path, identity=NEW, on_identity_changed="regenerate")
    assert st.identity_check == "changed" and st.identity_changes.changed == ("temperature",)
    assert st.loader_state == {"pos": 4} and st.step == 1
    assert [g.group_id for g in st.reserved] == [d] and st.replay == []
    regenerated = {g.replaces: g for g in st.regenerated}
    assert set(regenerated) == {a, b}
    assert all(g.group_id > d and g.owner == Owner.ADMITTED for g in st.regenerated)
    for g in st.regenerated:   # nothing of it kept: every rollout to generate, at attempt 0
        assert [(r.sealed, r.attempt, r.locator) for r in g.rollouts] == [(False, 0, None)] * 2
    assert sorted(st.dropped_rollouts) == [(a, 0), (a, 1), (b, 0)]
    kept = next(g for g in st.admitted if g.group_id == c)  # had nothing generated: as it was
    assert [r.attempt for r in kept.pending] == [1, 1]
    assert {g.group_id for g in st.admitted} == {c} | {g.group_id for g in st.regenerated}
    with Journal.open(path, resume=st, identity=NEW) as j:
        assert j.owner_of(a) == j.owner_of(b) == Owner.DROPPED
        assert all(j.owner_of(g.group_id) == Owner.ADMITTED for g in st.admitted)
        assert j.owner_of(d) == Owner.RESERVED
        assert j.identity() == digests(NEW)


def test_accept_keeps_everything_and_reports_the_change(fast_tmp):
    path = str(fast_tmp / "j")
    a, b, c, d = _history(path)
    st = restore(path, identity=NEW, on_identity_changed="accept")
    assert st.identity_check == "changed" and st.identity_changes.keys == ("reward", "temperature", "template")
    plain = restore(path)
    assert [g.group_id for g in st.replay] == [a] == [g.group_id for g in plain.replay]
    b_now = next(g for g in st.admitted if g.group_id == b)
    assert [r.sealed for r in b_now.rollouts] == [True, False]
    assert st.regenerated == [] and st.dropped_rollouts == []
    with Journal.open(path, resume=st, identity=NEW) as j:
        assert j.identity() == digests(NEW)


def test_the_identity_is_compared_at_the_restore_point_not_the_end(fast_tmp):
    """The crashed run recorded NEW after its last checkpoint: the work at the checkpoint was
    still generated under OLD."""
    path = str(fast_tmp / "j")
    _history(path)
    Journal.open(path, identity=NEW).close()
    with pytest.raises(IdentityChanged):
        restore(path, identity=NEW)
    assert restore(path, identity=NEW, at="end").identity_check == "same"
    assert restore(path, identity=OLD).identity_check == "same"


def test_a_cut_carries_the_identity_and_restores_alone(fast_tmp):
    path, alone = str(fast_tmp / "j"), str(fast_tmp / "ckpt" / "ownership")
    _history(path)
    compact(path, into=alone)
    with open(os.path.join(alone, MANIFEST_NAME)) as f:
        assert json.load(f)["identity"] == {k: v.hex() for k, v in digests(OLD).items()}
    assert read_cut(alone).state.identity == digests(OLD)
    with pytest.raises(IdentityChanged, match="changed: temperature"):
        restore(alone, identity=NEW)
    assert restore(alone, identity=OLD).identity_check == "same"
    regenerated = restore(alone, identity=NEW, on_identity_changed="regenerate")
    assert len(regenerated.regenerated) == 2 and regenerated.source == "cut"
    compact(path)  # the journal's own cut under snapshots/: restore stands on it
    st = restore(path, identity=OLD)
    assert st.base_cut is not None and st.identity_check == "same"


def test_a_bucket_restore_compares_the_identity_and_names_the_bucket(fast_tmp):
    from obstore.store import MemoryStore

    from journal.replica.store import Location
    store = MemoryStore()
    path = str(fast_tmp / "j")
    with Journal.open(path, identity=OLD, replica=store, ship_interval=0.05) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
        j.flush_replica(timeout=30)
    with pytest.raises(IdentityChanged, match="changed: temperature") as info:
        restore(store, identity=NEW)
    assert Location.of(store).where in str(info.value) and "oj-replica-" not in str(info.value)
    assert restore(store, identity=OLD).identity_check == "same"


def test_nothing_restored_compares_nothing_and_no_recorded_identity_differs(fast_tmp):
    first = restore(str(fast_tmp / "new"), identity=OLD)   # a first start
    assert first.first_start and first.identity_check == "nothing_restored"
    path = str(fast_tmp / "j")
    with Journal.open(path, identity=OLD) as j:   # no committed checkpoint: the point is LSN 0
        j.taken([GroupRef(idx=0)])
    assert restore(path, identity=NEW).identity_check == "nothing_restored"
    older = str(fast_tmp / "older")
    _history(older, identity=None)   # a history that never recorded an identity
    with pytest.raises(IdentityChanged, match="recorded no run identity") as info:
        restore(older, identity=OLD)
    assert info.value.changes.added == tuple(sorted(OLD)) and not info.value.changes.changed


def test_inspect_shows_the_identity_keys_and_short_digests(fast_tmp):
    path, alone = str(fast_tmp / "j"), str(fast_tmp / "cut")
    _history(path)
    compact(path, into=alone)
    want = {k: v.hex() for k, v in digests(OLD).items()}
    assert cli_json("summary", path)["identity"] == want
    assert cli_json("state", path)["identity"] == want
    assert cli_json("summary", alone)["identity"] == want
    short = f"temperature={want['temperature'][:12]}"
    for args in (("summary", path), ("state", path), ("summary", alone)):
        assert short in cli(*args).stdout, args
    log = cli("log", path, "--kind", "identity_recorded").stdout
    assert "identity_recorded" in log and short in log


DATASET = [{"idx": i, "task_name": "math", "x": float(i)} for i in range(12)]


def _collate(rows):
    return {"idx": [r["idx"] for r in rows], "task_name": [r["task_name"] for r in rows]}


def _session(root, identity, **kw) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)  # the first start warns
        return Session.open(str(root / "journal"), dataset=DATASET, collate_fn=_collate,
                            loader=StatefulDataLoader(DATASET, batch_size=2, collate_fn=_collate),
                            data_plane=LocalDataPlane(str(root / "rows")), identity=identity, **kw)


def test_a_session_restarted_with_another_temperature(fast_tmp):
    sampling = {"tokenizer": "tiny-bpe-v3", "temperature": 0.7, "reward": "exact-v1"}
    with _session(fast_tmp, sampling) as s:
        batches = s.batches()
        done = s.take(next(batches))
        s.admit(done, step=1, rollouts=2)
        for g in done:
            for r in s.pending(g):
                s.seal(g, r.index, r.attempt, {"t": torch.tensor([0.7])})
        s.trained(done, step=1)
        half = s.take(next(batches))
        s.admit(half, step=2, rollouts=2)
        s.seal(half[0], 0, 0, {"t": torch.tensor([0.7])})
        s.checkpoint(1, save=lambda: None)
    with _session(fast_tmp, sampling) as s:   # the same identity: nothing recorded again
        assert s.restored.identity_check == "same" and s.stats()["restored"]["identity"] == "same"
    hotter = {**sampling, "temperature": 0.9}
    with pytest.raises(IdentityChanged, match="changed: temperature") as info:
        _session(fast_tmp, hotter)
    assert info.value.changes.keys == ("temperature",)
    with _session(fast_tmp, hotter, on_identity_changed="regenerate") as s:
        assert s.restored.identity_check == "changed"
        gen = [w for w in s.resume_work if w.kind == "generate"]
        assert len(gen) == 2 and all(len(w.pending) == 2 for w in gen)   # the sealed one dropped too
        assert {g.replaces for g in s.restored.regenerated} == {half[0]}
        assert s.journal.identity() == digests(hotter)
        assert not any(f"g{half[0]}-" in loc for loc in s.data_plane.locators())   # its rows reclaimed
        for w in gen:
            for r in w.pending:
                s.seal(w.group_id, r.index, r.attempt, {"t": torch.tensor([0.9])})
        s.trained([w.group_id for w in gen], step=2)
        s.checkpoint(2, save=lambda: None)
    with _session(fast_tmp, hotter) as s:   # the new identity holds from the next checkpoint on
        assert s.restored.identity_check == "same"
    from journal import IdentityRecorded, Reader
    kinds = [type(ev) for rec in Reader(str(fast_tmp / "journal")).records() for ev in rec.commit.events]
    assert kinds.count(IdentityRecorded) == 2   # the first start's and the change's
    report = audit(str(fast_tmp / "journal"))
    assert report.totals["trained_more_count"] == 0 and report.totals["lost_count"] == 0
