"""Shared helpers for the replay tests: a fake data plane, a dataset, a small trainer driver,
and a plain view of a state for comparisons."""

from __future__ import annotations

import json
import os
import warnings

from journal import GroupRef, Journal, Owner, State
from replay import fingerprint
from snapshot import row_locators

from tests.support.equality import deep_equal

ROLLOUTS_PER_GROUP = 4
FIELDS = ("group_id", "idx", "task_name", "epoch", "fingerprint", "owner", "target_step",
          "policy_version", "locator", "replaces")


def make_dataset(n: int, task: str = "math") -> list[dict]:
    """Rows as a NeMo-RL style dataset yields them: each row knows its own idx and task."""
    return [{"idx": i, "task_name": task, "problem": f"What is {i} + {i * 7 % 13}?"} for i in range(n)]


def collate(rows: list[dict]) -> dict:
    """The one-row collate the trainer dispatches with."""
    return {"idx": [r["idx"] for r in rows], "task_name": [r["task_name"] for r in rows],
            "text": [r["problem"] for r in rows]}


def ref_of(row: dict, *, with_fingerprint: bool = True, epoch: int | None = None) -> GroupRef:
    return GroupRef(idx=row["idx"], task_name=row["task_name"], epoch=epoch,
                    fingerprint=fingerprint(row) if with_fingerprint else None)


class FakeDataPlane:
    """The trainer's store of finished rollouts (TransferQueue's role), keyed by locator.

    `put` stores rollouts as they finish; a group's rows count as present (`has`) only when
    all `ROLLOUTS_PER_GROUP` rollouts are there. `lose` simulates rows evicted or lost."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict]] = {}
        self.has_calls: list[str] = []

    def put(self, locator: str, n: int = ROLLOUTS_PER_GROUP, **extra) -> str:
        self.rows.setdefault(locator, [])
        for _ in range(n):
            self.rows[locator].append({"rollout": len(self.rows[locator]), **extra})
        return locator

    def lose(self, locator: str) -> None:
        self.rows.pop(locator, None)

    def has(self, locator: str) -> bool:
        self.has_calls.append(locator)
        return len(self.rows.get(locator, ())) >= ROLLOUTS_PER_GROUP

    def save(self, directory: str, groups) -> None:
        for g in groups:
            with open(os.path.join(directory, f"group-{g.group_id}.json"), "w") as f:
                json.dump([self.rows.get(loc, []) for loc in row_locators(g)], f)


def locator_of(gid: int) -> str:
    return f"tq/{gid:06d}"


def stateful_loader(dataset, *, seed: int = 1234, batch_size: int = 1):
    """A real torchdata StatefulDataLoader over `dataset`, shuffled, one row per batch."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchdata.stateful_dataloader import StatefulDataLoader
    return StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(seed),
                              collate_fn=lambda batch: batch[0] if batch_size == 1 else batch)


def view(groups) -> dict[int, tuple]:
    """group id -> its fields, for Group and RecoveredGroup alike (prompt excluded)."""
    out = {}
    for g in groups:
        fields = tuple(getattr(g, f) for f in FIELDS)
        out[g.group_id] = fields
    return out


def state_view(state: State) -> dict:
    """Everything a restore must reproduce of a fold state."""
    return {"lsn": state.lsn, "live": view(state.live.values()),
            "counts": {o.name: state.counts[o] for o in Owner},
            "next_group_id": state.next_group_id,
            "loader": state.loader.decode() if state.loader is not None else None}


def recovered_view(rs) -> dict:
    """The same for a `RecoveredState` (live groups from its lists, next id from its fold state)."""
    return {"lsn": rs.lsn, "live": view(rs.groups), "counts": dict(rs.counts),
            "next_group_id": rs.fold_state.next_group_id, "loader": rs.loader_state}


def run_group(j: Journal, row: dict, *, step: int, policy_version: int, dp: FakeDataPlane | None = None,
              loader_state=None) -> int:
    """One group through its whole life (taken, admitted, finished, trained)."""
    (g,) = j.taken([ref_of(row)], loader_state=loader_state)
    j.admitted([g], target_step=step, policy_version=policy_version)
    loc = locator_of(g)
    if dp is not None:
        dp.put(loc)
    j.finished([g], policy_version=policy_version, locators=[loc])
    j.trained([g], step=step)
    return g


def assert_same(got: dict, want: dict) -> None:
    """Compare two views key by key (tensors by value), with a readable failure."""
    assert got.keys() == want.keys()
    for k in got:
        if k == "live" and got[k] != want[k]:
            g, w = got[k], want[k]
            diff = {gid: (g.get(gid), w.get(gid)) for gid in sorted(set(g) | set(w)) if g.get(gid) != w.get(gid)}
            raise AssertionError(f"live groups differ (got, want): {diff}")
        assert deep_equal(got[k], want[k]), f"{k}: got {got[k]!r}, want {want[k]!r}"
