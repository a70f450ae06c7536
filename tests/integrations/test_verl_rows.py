"""A verl sample as data-plane rows and back (`replay.integrations.verl_rows`), through a restore
that hands a finished group back under a fresh id (docs/recovery.md): the sample re-put on verl's
queue must name the group the journal holds, or the trainer's `trained()` names a dropped one."""

from __future__ import annotations

import numpy as np
import torch
from verl import DataProto

from journal import GroupRef, Journal, Owner
from replay import LocalDataPlane, Session
from replay.integrations.pipeline import finished_groups
from replay.integrations.verl_rows import group_of_uid, rows_of, sample_id_of, sample_of


def _output(n: int) -> DataProto:
    """What verl's agent loop returns for one prompt's `n` responses (before the uid is set)."""
    return DataProto.from_dict(tensors={"responses": torch.arange(3 * n).reshape(n, 3)},
                               non_tensors={"reward_model": np.array([{"gt": i} for i in range(n)], dtype=object)},
                               meta_info={"temperature": 1.0})


def test_a_finished_group_handed_back_under_a_fresh_id_is_queued_and_trained_under_that_id(fast_tmp):
    """The prompt waits at the step-2 checkpoint; the dead run admits it and finishes it by the
    checkpoint's weights (its rows name the old group). The restore hands it back finished
    under a fresh id; the sample rebuilt from its rows names that id in its sample id and in
    every uid, the tensors and the other columns as stored, and training it is accepted."""
    path, dp = str(fast_tmp / "j"), LocalDataPlane(str(fast_tmp / "rows"))
    with Journal.open(path) as j:
        (old,) = j.taken([GroupRef(idx=3)], loader_state={"pos": 1})
        j.begin_checkpoint(step=2)
        j.commit_checkpoint(step=2)
        j.admitted([old], target_step=3, policy_version=2)
        stored = rows_of(_output(2), epoch=0, policy_version=2)
        j.finished([old], policy_version=2, locators=[dp.put(old, stored)])
    with Session.open(path, data_plane=dp, compact_every=None) as s:
        ((work, rows),) = list(finished_groups(s))
        assert work.group_id != old and s.journal.owner_of(old) == Owner.DROPPED
        sample = sample_of(rows, work.group_id)
        assert sample.sample_id == sample_id_of(work.group_id)
        batch = sample.full_batch
        assert [group_of_uid(u) for u in batch.non_tensor_batch["uid"]] == [work.group_id] * 2
        assert torch.equal(batch.batch["responses"], torch.arange(6).reshape(2, 3))
        assert list(batch.non_tensor_batch["reward_model"]) == [{"gt": 0}, {"gt": 1}]
        s.trained([group_of_uid(batch.non_tensor_batch["uid"][0])], step=3)
        assert s.journal.owner_of(work.group_id) == Owner.TRAINED
