"""What `restore` hands the trainer: the recovered groups and rollouts, by owner."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from journal import Group, OsFileSystem, Owner, Progress, ResumePlan, State
from journal.identity import IdentityChanges
from snapshot import MANIFEST_NAME, SNAPSHOTS_DIR, RestoreError, Skipped, cut_dirs, write_cut
from journal.layout import cut_dir_name, replaced_name
from snapshot.manifest import decode as _decode_manifest
from snapshot.row_ledger import RowLedger


@dataclass
class RecoveredRollout:
    """One rollout of a group admitted with `rollouts=N`. A sealed one's row is in the data
    plane at `locator`; an unsealed one is to be dispatched with `attempt`, the attempt the
    resumed history expects (a worker of the dead run still holding an older one is fenced),
    and continues from `progress` when it has one: the durable prefix (`Progress`: its
    data-plane locator, tokens, turn, policy version) the resume records for that attempt."""

    index: int
    attempt: int
    sealed: bool
    locator: str | None = None
    policy_version: int | None = None
    progress: Progress | None = None


@dataclass
class RecoveredGroup:
    """One group handed back to the trainer."""

    group_id: int
    idx: int
    task_name: str | None
    epoch: int | None
    fingerprint: bytes | None
    owner: Owner
    target_step: int | None = None
    policy_version: int | None = None
    locator: str | None = None
    replaces: int | None = None
    prompt: Any = None
    rollouts: list[RecoveredRollout] | None = None  # groups admitted with rollouts=N
    adopted_from: int | None = None  # adopted: the id the dead tail took it under (dead for good)

    @property
    def pending(self) -> list[RecoveredRollout]:
        """The rollouts to dispatch (unsealed); empty for a group without rollouts=."""
        return [r for r in self.rollouts or () if not r.sealed]

    @classmethod
    def of(cls, g: Group) -> "RecoveredGroup":
        r = g.rollouts
        rollouts = None if r is None else [
            RecoveredRollout(i, r.attempts[i], r.is_sealed(i), r.locators[i], r.versions[i], r.progress_of(i))
            for i in range(r.n)]
        return cls(g.group_id, g.idx, g.task_name, g.epoch, g.fingerprint, g.owner, g.target_step,
                   g.policy_version, g.locator, g.replaces, rollouts=rollouts)


@dataclass
class RecoveredState(ResumePlan):
    """What a trainer resumes from (a `journal.ResumePlan`: `Journal.open(path, resume=state)`
    writes it). Feed `loader_state` to `dataloader.load_state_dict`,
    redispatch `admitted` (all their rollouts, or for groups admitted with `rollouts=N` only
    `pending`, never empty: a group with every rollout sealed comes back in `replay`), send `reserved` through admission again, train `replay` directly, keep `spare`
    in the reserve. Then `Journal.open(path, resume=state)` continues the history at `lsn`:
    its first commit (`first_commit`) records what restore decided (re-marked checkpoints,
    salvaged groups and rollouts, completed groups finished, demoted groups under their new ids, the attempts of
    unsealed rollouts raised, the dead tail's takes adopted under theirs with the loader state
    `loader_state`), so the journal says exactly what the trainer was handed."""

    loader_state: Any                  # feed to dataloader.load_state_dict (None: start fresh)
    reserved: list[RecoveredGroup]     # ordered by group id
    admitted: list[RecoveredGroup]     # ordered by target_step, then group id
    replay: list[RecoveredGroup]
    spare: list[RecoveredGroup]
    lsn: int
    step: int | None
    counts: dict[str, int]            # the journal's per-owner counts at `lsn` (before salvage/demotion)
    source: str                       # "journal" or "cut"
    skipped: list[Skipped] = field(default_factory=list)    # stale or incomplete cuts passed over
    demoted: list[RecoveredGroup] = field(default_factory=list)   # rows lost: a fresh id, regenerate
    salvaged: list[RecoveredGroup] = field(default_factory=list)  # admitted -> replay: finished later
    # admitted -> replay: every rollout sealed at `lsn`, `finished` never journaled there (the
    # resume's first commit journals it); in `replay` too, as `salvaged` is
    completed: list[RecoveredGroup] = field(default_factory=list)
    salvaged_rollouts: list[tuple[int, int]] = field(default_factory=list)  # (group, index) sealed later
    lost_rollouts: list[tuple[int, int]] = field(default_factory=list)  # (old group, index): row gone
    # the loader's takes after `lsn` on the dead tail, back under fresh ids (each also in its
    # owner's list; `adopted_from` names its dead id), in the order they were taken;
    # `loader_state` is then the state after the last of them
    adopted: list[RecoveredGroup] = field(default_factory=list)
    adopted_rollouts: list[tuple[int, int]] = field(default_factory=list)  # (new group, index) kept sealed
    # rollouts sealed on the dead tail by weights newer than `step`, never kept (they regenerate):
    # (group as the dead tail named it, index), of the groups handed back
    newer_weights: list[tuple[int, int]] = field(default_factory=list)
    # prefixes (`RecoveredRollout.progress`), each (group as the history that recorded it named
    # it, index): recorded after `lsn` and kept under the salvage rule; recorded by weights
    # newer than `step` (at `lsn` or after), dropped and never continued; whose row the data
    # plane no longer has, dropped; dropped by on_identity_changed="regenerate"
    salvaged_progress: list[tuple[int, int]] = field(default_factory=list)
    newer_progress: list[tuple[int, int]] = field(default_factory=list)
    lost_progress: list[tuple[int, int]] = field(default_factory=list)
    dropped_progress: list[tuple[int, int]] = field(default_factory=list)
    changed_rows: list[RecoveredGroup] = field(default_factory=list)  # fingerprint differs, accepted
    changed_sample: list = field(default_factory=list)  # sampled rows whose fingerprint differs, accepted
    # damage in the journal this restore read past (segment, offset, LSN, what), not needed by
    # the state at `lsn`, and what it could not check because of it; empty for a sound journal
    damage: list[str] = field(default_factory=list)
    # checkpoints begun at or before `lsn` whose checkpoint_committed came after it (on what
    # becomes the dead tail): their weights are durable, so a resume marks them committed again
    recommit: list[int] = field(default_factory=list)
    # the loader pass `loader_state` is in: that of the last group taken before `lsn` (or adopted)
    loader_epoch: int | None = None
    # no history to restore (the path does not exist, an empty directory, a journal without a
    # commit, a bucket without one): `restore` warned, or with must_exist=True raised
    first_start: bool = False
    # the run identity (`restore(identity=)`): "unchecked" (none given: nothing compared),
    # "nothing_restored" (the point is LSN 0: nothing generated to reuse), "same", or "changed"
    # (the keys in `identity_changes`; on_identity_changed was "regenerate" or "accept")
    identity_check: str = "unchecked"
    identity_changes: IdentityChanges | None = None
    # on_identity_changed="regenerate": the groups whose generated work was dropped, back under
    # fresh ids to generate again (in `admitted` too), and the sealed rollouts dropped
    # ((old group, index))
    regenerated: list[RecoveredGroup] = field(default_factory=list)
    dropped_rollouts: list[tuple[int, int]] = field(default_factory=list)
    # computes the audit's row ledger at `lsn` (None when it is not known); see `ledger`
    ledger_source: Callable[[], RowLedger | None] | None = field(default=None, repr=False, compare=False)

    @property
    def groups(self) -> list[RecoveredGroup]:
        return self.reserved + self.admitted + self.replay + self.spare

    @property
    def ledger(self) -> RowLedger | None:
        """The audit's row ledger at `lsn`, when it is known: a resume that seeds a cut writes it
        there, so the resumed journal can still be audited. Computed on first use (only such a
        resume needs it, so a restore does not read its tail a second time for it), from the
        files the restore read; None when they no longer hold the history it restored."""
        return self.ledger_source() if self.ledger_source is not None else None


def base_cut_writer(state: State, run_id: bytes | None,
                    ledger: Callable[[], RowLedger | None]) -> Callable[[str, OsFileSystem], str | None] | None:
    """The plan's `write_base_cut` for `state`: make sure `<journal>/snapshots` holds a cut at
    its LSN (none for an empty state), with the audit's row ledger (`ledger()`) when it is known. A cut
    with the same anchor already there is kept; a
    damaged or foreign one under that name is renamed aside first. Returns the cut written."""
    if state.lsn == 0 or run_id is None:
        return None

    def write(journal_path: str, fs: OsFileSystem) -> str | None:
        for lsn, _timeline, cut_path in cut_dirs(journal_path):
            if lsn != state.lsn:
                continue
            try:
                with open(os.path.join(cut_path, MANIFEST_NAME), "rb") as f:
                    m = _decode_manifest(f.read(), cut_path)
            except (OSError, RestoreError):
                continue
            if m.run_id == run_id.hex() and m.chain == state.chain:
                return None
        target = os.path.join(journal_path, SNAPSHOTS_DIR, cut_dir_name(state.timeline, state.lsn))
        if os.path.exists(target):
            fs.rename(target, os.path.join(os.path.dirname(target),
                                           replaced_name(os.path.basename(target), int(time.time()))))
            fs.fsync_dir(os.path.dirname(target))
        return write_cut(target, state, run_id=run_id, timeline=state.timeline, fs=fs, ledger=ledger())
    return write
