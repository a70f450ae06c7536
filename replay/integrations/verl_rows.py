"""A generated verl sample (`RolloutSample`: a `DataProto` of one prompt's `n` responses) as
data-plane rows, and back, without pickle: tensors stay tensors, `non_tensor_batch` columns
become lists, `meta_info` stays a plain mapping (the row codec refuses anything else, naming it).

The sample id the integration gives a sample is `group_<journal group id>`, so the uid verl
derives from it (`uid_<sample id>`) names the journal's group on the trainer's side too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.fully_async_policy.detach_utils import RolloutSample

from .verl_errors import VerlInternalsChanged

SAMPLE_PREFIX = "group_"
UID_PREFIX = "uid_"   # verl's `_process_single_sample_streaming`: uid = f"uid_{sample_id}"


def sample_id_of(group_id: int) -> str:
    return f"{SAMPLE_PREFIX}{group_id}"


def group_of_uid(uid: str) -> int:
    """The journal group of a trained row's uid (`uid_group_<id>`)."""
    prefix = UID_PREFIX + SAMPLE_PREFIX
    if not isinstance(uid, str) or not uid.startswith(prefix) or not uid[len(prefix):].isdigit():
        raise VerlInternalsChanged(
            f"a trained row has uid {uid!r}, not {prefix}<group id>: verl no longer derives the uid from the "
            "sample id the journaled rollouter set (fully_async_rollouter._process_single_sample_streaming)")
    return int(uid[len(prefix):])


def _column(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def rows_of(output: Any, epoch: int, policy_version: int) -> dict:
    """What the data plane stores of a generated sample: the agent loop's `DataProto` and where
    it came from. Not its uid (verl sets it after generation): `sample_of` derives it from the
    group the rows are handed back as."""
    return {"epoch": int(epoch), "policy_version": int(policy_version),
            "tensors": {k: v.contiguous() for k, v in output.batch.items()},
            "non_tensors": {k: np.asarray(v).tolist() for k, v in output.non_tensor_batch.items()},
            "meta_info": dict(output.meta_info)}


def sample_of(rows: dict, group_id: int) -> RolloutSample:
    """The `RolloutSample` that `rows_of` stored, as verl's trainer takes it from the queue, named
    after `group_id`: the group a restore handed the rows back as, which is not the one they were
    generated for when the restore gave the group a fresh id (docs/recovery.md), so the sample id
    and the uids are set from it (`rollout_status`, the rollouter's statistics at the put, is not
    kept: metrics only)."""
    sample_id = sample_id_of(group_id)
    responses = len(next(iter(rows["tensors"].values())))
    non_tensors = {k: _column(v) for k, v in rows["non_tensors"].items()}
    non_tensors["uid"] = _column([UID_PREFIX + sample_id] * responses)
    data = DataProto.from_dict(tensors=rows["tensors"], non_tensors=non_tensors, meta_info=rows["meta_info"])
    return RolloutSample(full_batch=data, sample_id=sample_id, epoch=rows["epoch"], rollout_status={})
