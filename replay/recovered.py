"""What `restore` hands the trainer: the recovered groups and rollouts, by owner."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import journal
from journal import Group, Owner, OsFileSystem, State
from snapshot import MANIFEST_NAME, SNAPSHOTS_DIR, RestoreError, Skipped, cut_dirs, write_cut
from journal.layout import cut_dir_name, replaced_name
from snapshot.manifest import decode as _decode_manifest
from snapshot.row_ledger import RowLedger


@dataclass
class RecoveredRollout:
    """One rollout of a group admitted with `rollouts=N`. A sealed one's row is in the data
    plane at `locator`; an unsealed one is to be dispatched with `attempt`, the attempt the
    resumed history expects (a worker of the dead run still holding an older one is fenced)."""

    index: int
    attempt: int
    sealed: bool
    locator: str | None = None
    policy_version: int | None = None


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

    @property
    def pending(self) -> list[RecoveredRollout]:
        """The rollouts to dispatch (unsealed); empty for a group without rollouts=."""
        return [r for r in self.rollouts or () if not r.sealed]

    @classmethod
    def of(cls, g: Group) -> "RecoveredGroup":
        r = g.rollouts
        rollouts = None if r is None else [
            RecoveredRollout(i, r.attempts[i], r.is_sealed(i), r.locators[i], r.versions[i])
            for i in range(r.n)]
        return cls(g.group_id, g.idx, g.task_name, g.epoch, g.fingerprint, g.owner, g.target_step,
                   g.policy_version, g.locator, g.replaces, rollouts=rollouts)


@dataclass
class RecoveredState:
    """What a trainer resumes from. Feed `loader_state` to `dataloader.load_state_dict`,
    redispatch `admitted` (all their rollouts, or for groups admitted with `rollouts=N` only
    `pending`), send `reserved` through admission again, train `replay` directly, keep `spare`
    in the reserve. Then `Journal.open(path, resume=state)` continues the history at `lsn`:
    its first commit (`first_commit`) records what restore decided (re-marked checkpoints,
    salvaged groups and rollouts, demoted groups under their new ids, the attempts of
    unsealed rollouts raised), so the journal says exactly what the trainer was handed."""

    loader_state: Any
    reserved: list[RecoveredGroup]     # ordered by group id
    admitted: list[RecoveredGroup]     # ordered by target_step, then group id
    replay: list[RecoveredGroup]
    spare: list[RecoveredGroup]
    lsn: int
    step: int | None
    counts: dict[str, int]            # the journal's per-owner counts at `lsn` (before salvage/demotion)
    source: str                       # "journal" or "cut"
    base_cut: str | None              # the cut the state was built on, if any
    skipped: list[Skipped] = field(default_factory=list)    # stale or incomplete cuts passed over
    demoted: list[RecoveredGroup] = field(default_factory=list)   # rows lost: a fresh id, regenerate
    salvaged: list[RecoveredGroup] = field(default_factory=list)  # admitted -> replay: finished later
    salvaged_rollouts: list[tuple[int, int]] = field(default_factory=list)  # (group, index) sealed later
    lost_rollouts: list[tuple[int, int]] = field(default_factory=list)  # (old group, index): row gone
    changed_rows: list[RecoveredGroup] = field(default_factory=list)  # fingerprint differs, accepted
    changed_sample: list = field(default_factory=list)  # sampled rows whose fingerprint differs, accepted
    run_id: bytes | None = None
    fold_state: State | None = None   # the journal's state at `lsn` (what resume continues from)
    # checkpoints begun at or before `lsn` whose checkpoint_committed came after it (on what
    # becomes the dead tail): their weights are durable, so a resume marks them committed again
    recommit: list[int] = field(default_factory=list)
    # the events of the resume's first commit (see the class docstring); empty: nothing to record
    first_commit: list = field(default_factory=list)
    # the audit's row ledger at `lsn`, when the cut the state stands on at exactly `lsn` has one
    # (a resume that seeds a cut writes it there, so the resumed journal can still be audited)
    ledger: RowLedger | None = None

    @property
    def groups(self) -> list[RecoveredGroup]:
        return self.reserved + self.admitted + self.replay + self.spare

    def seed_journal(self, journal_path: str, fs: OsFileSystem | None = None) -> str | None:
        """Make sure `<journal>/snapshots` holds a cut at `lsn` of this state.

        `Journal.open(path, resume=state)` calls it when the history on disk
        starts right after `lsn` (a fresh directory resumed from a cut, or one
        whose head was retired): without such a cut the journal could never be
        restored or compacted again. Returns the cut written, None if one with
        the same anchor was already there."""
        state = self.fold_state
        if state is None or state.lsn == 0 or self.run_id is None:
            return None
        for lsn, _timeline, cut_path in cut_dirs(journal_path):
            if lsn != state.lsn:
                continue
            try:
                with open(os.path.join(cut_path, MANIFEST_NAME), "rb") as f:
                    m = _decode_manifest(f.read(), cut_path)
            except (OSError, RestoreError):
                continue
            if m.run_id == self.run_id.hex() and m.chain == state.chain:
                return None
        fs = fs or journal.DEFAULT_FS
        target = os.path.join(journal_path, SNAPSHOTS_DIR, cut_dir_name(state.timeline, state.lsn))
        if os.path.exists(target):  # a damaged or foreign cut under that name: keep it, aside
            fs.rename(target, os.path.join(os.path.dirname(target),
                                           replaced_name(os.path.basename(target), int(time.time()))))
            fs.fsync_dir(os.path.dirname(target))
        return write_cut(target, state, run_id=self.run_id, timeline=state.timeline, fs=fs,
                         ledger=self.ledger)
