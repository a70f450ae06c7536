"""The run identity in the journal (`journal/identity.py`, DESIGN 13): `Journal.open(identity=)`
records a fingerprint per key only when it differs from the identity recorded last (a restart
writes nothing), the fold keeps the latest atomically with its commit, the state file carries
it (so an open that starts from a cut's state file knows it), it moves no group (an open
without resume= does not take it for ownership after the checkpoint), and `changes` names the
keys added, removed and changed."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import GroupRef, IdentityRecorded, Journal, JournalWarning, OwnershipError, Reader, state_file
from journal.fingerprint import fingerprint
from journal.identity import IdentityChanges, changes, digests
from journal.layout import STATE_FILE
from snapshot import compact

IDENTITY = {"tokenizer": "tiny-bpe-v3", "temperature": 0.7, "top_p": 1.0, "max_tokens": 512,
            "template": b"<|user|>{prompt}", "stop": ["</s>", "\n\n"], "reward": {"name": "exact", "v": 2},
            "seed": None, "greedy": False, "vocab_scale": torch.tensor([1.0, 0.5])}


def _identity_records(path: str) -> list[tuple[int, IdentityRecorded]]:
    return [(rec.commit.lsn, ev) for rec in Reader(path).records() for ev in rec.commit.events
            if type(ev) is IdentityRecorded]


def test_a_restart_with_the_same_identity_writes_nothing(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, identity=IDENTITY) as j:
        assert j.lsn == 1 and j.identity() == digests(IDENTITY)
        j.taken([GroupRef(idx=0)])
    reordered = dict(reversed(list(IDENTITY.items())))
    reordered["vocab_scale"] = torch.tensor([1.0, 0.5])  # another tensor, the same values
    for again in (IDENTITY, reordered):
        with Journal.open(path, identity=again) as j:
            assert j.lsn == 2
    assert [lsn for lsn, _ in _identity_records(path)] == [1]
    with Journal.open(path, identity={**IDENTITY, "temperature": 0.9}) as j:
        assert j.lsn == 3
        assert j.identity()["temperature"] == fingerprint(0.9)
    with Journal.open(path) as j:  # no identity given: nothing recorded, the last one kept
        assert j.lsn == 3 and j.identity()["temperature"] == fingerprint(0.9)
    records = _identity_records(path)
    assert [lsn for lsn, _ in records] == [1, 3]
    assert records[1][1].digests == digests({**IDENTITY, "temperature": 0.9})


def test_identity_digests_are_per_key_and_name_a_bad_value(fast_tmp):
    d = digests(IDENTITY)
    assert list(d) == sorted(IDENTITY)
    assert all(len(v) == 16 for v in d.values())
    assert d["vocab_scale"] != digests({"vocab_scale": torch.tensor([1.0, 0.25])})["vocab_scale"]
    path = str(fast_tmp / "never")
    with pytest.raises(TypeError, match=r"identity\['tokenizer'\]: cannot fingerprint a object"):
        Journal.open(path, identity={"temperature": 0.7, "tokenizer": object()})
    with pytest.raises(TypeError, match="identity keys must be str, got 3"):
        Journal.open(path, identity={3: "x"})
    with pytest.raises(TypeError, match="identity must be a mapping"):
        Journal.open(path, identity=[("temperature", 0.7)])
    assert not os.path.exists(path)  # refused before anything was opened or created


def test_the_identity_is_folded_with_its_commit_or_not_at_all(fast_tmp):
    path = str(fast_tmp / "j")
    with Journal.open(path, identity={"temperature": 0.7}) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        with pytest.raises(OwnershipError):
            with j.transaction() as tx:
                tx.record_identity({"temperature": 0.9})
                tx.trained([g], step=1)  # RESERVED: refused, so the commit is taken back whole
        assert j.identity() == digests({"temperature": 0.7}) and j.lsn == 2
        with j.transaction() as tx:
            tx.record_identity({"temperature": 0.9})
            tx.admitted([g], target_step=1)
        assert j.identity() == digests({"temperature": 0.9}) and j.lsn == 3
    with Journal.open(path) as j:  # folded again from the segments
        assert j.identity() == digests({"temperature": 0.9})


def test_an_open_from_a_cuts_state_file_knows_the_identity(fast_tmp):
    """The head of the journal is deleted by retention: the open folds from the cut's state
    file, which must carry the identity, or the open would record it a second time."""
    path = str(fast_tmp / "j")
    with Journal.open(path, identity=IDENTITY, segment_bytes=4096) as j:
        for i in range(60):
            (g,) = j.taken([GroupRef(idx=i)], loader_state={"i": i})
            j.discarded([g], reason="r")
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    result = compact(path, retention="delete")
    state, _ = state_file.read(os.path.join(result.cut_path, STATE_FILE))
    assert state.identity == digests(IDENTITY)
    assert not any(lsn == 1 for lsn, _ in _identity_records(path))  # LSN 1's segment is gone
    with Journal.open(path, identity=IDENTITY) as j:
        assert j.lsn == state.lsn + 1 and j.identity() == digests(IDENTITY)
    assert _identity_records(path) == []


def test_an_identity_after_the_checkpoint_is_not_ownership(fast_tmp):
    """An open without resume= warns when the history goes on past the latest committed
    checkpoint with ownership events; a new identity recorded there moves no group."""
    path = str(fast_tmp / "j")
    with Journal.open(path, identity={"temperature": 0.7}) as j:
        (g,) = j.taken([GroupRef(idx=0)])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JournalWarning)
        Journal.open(path, identity={"temperature": 0.9}).close()
        with Journal.open(path) as j:
            assert j.identity() == digests({"temperature": 0.9})
            j.admitted([g], target_step=2)
    with pytest.warns(JournalWarning, match="opened without resume="):
        Journal.open(path).close()


_KEYS = st.sampled_from(["tokenizer", "temperature", "top_p", "template", "reward"])
_VALUES = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(0, 2) | st.text(max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES), st.dictionaries(_KEYS, _VALUES), st.booleans())
def test_changes_name_exactly_the_keys_that_differ(recorded, given_now, nothing_recorded):
    before = None if nothing_recorded else digests(recorded)
    diff = changes(before, digests(given_now))
    old = {} if nothing_recorded else recorded
    assert set(diff.added) == given_now.keys() - old.keys()
    assert set(diff.removed) == old.keys() - given_now.keys()
    assert set(diff.changed) == {k for k in old.keys() & given_now.keys()
                                 if fingerprint(old[k]) != fingerprint(given_now[k])}
    assert bool(diff) == (diff.keys != ())
    assert diff.keys == tuple(sorted(set(diff.added) | set(diff.removed) | set(diff.changed)))


def test_changes_describe_each_kind_of_difference():
    diff = changes(digests({"temperature": 0.7, "reward": "v1", "tokenizer": "t"}),
                   digests({"temperature": 0.9, "template": "x", "tokenizer": "t"}))
    assert diff == IdentityChanges(added=("template",), removed=("reward",), changed=("temperature",))
    assert diff.describe() == "changed: temperature; added: template; removed: reward"
