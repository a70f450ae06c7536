"""What `restore` hands the trainer: the recovered groups and rollouts, by owner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from journal import Group, Owner, Progress, ResumePlan
from journal.identity import IdentityChanges
from snapshot.catalog import Skipped
from snapshot.row_ledger import RowLedger


def with_version(p: Progress | None, admitted_by: int | None) -> Progress | None:
    """Prefix `p`, read as made by `admitted_by` (the weights that admitted its group) when it
    was recorded without a policy version: a version is never lost on the way."""
    if p is None or p.policy_version is not None or admitted_by is None:
        return p
    return Progress(p.locator, p.tokens, p.turn, admitted_by)


def sealed_span(version: int | None, since: int | None) -> tuple[int, int] | None:
    """The policy span of a sealed result made by `version`, begun by `since` when older."""
    return None if version is None else (since if since is not None else version, version)


@dataclass(frozen=True)
class BeyondLag:
    """Work of the dead tail (or at the point) that the restore did not keep because its
    weights are beyond the bound: `policy_version` > `bound`, the restored step plus
    `max_policy_lag`. It regenerates. `kind`: "rollout" (a sealed rollout, `index`), "prefix"
    (a rollout's prefix, `index`), "group" (the rows of a group admitted without rollouts=,
    `index` None); `group_id` as the history that recorded it named it."""

    group_id: int
    index: int | None
    kind: str
    policy_version: int
    bound: int
    locator: str | None = None  # its row in the data plane (left there; no history names it)

    def __str__(self) -> str:
        what = f"group {self.group_id}" + (f" rollout {self.index}" if self.index is not None else "")
        made = {"rollout": "sealed", "prefix": "its prefix recorded", "group": "finished"}[self.kind]
        return (f"{what}: {made} by policy version {self.policy_version}, beyond the bound "
                f"{self.bound} (the restored step plus max_policy_lag): regenerated")


@dataclass
class KeptWork:
    """What a restore handed back of generated work made by weights `lead` steps past the
    restored checkpoint (0: at or before it): groups handed back to train whole (admitted
    without rollouts=), sealed rollouts, prefixes to continue and the tokens they hold."""

    groups: int = 0
    rollouts: int = 0
    prefixes: int = 0
    tokens: int = 0


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
    # the policy versions (oldest, newest) that generated its kept work (its row when sealed,
    # else its prefix; a prefix continued by other weights spans both), and `lead`, newest
    # minus the restored step (> 0 only for work of weights that died with the crash); None
    # when it keeps nothing or the versions are unknown
    policy_span: tuple[int, int] | None = None
    lead: int | None = None


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
    # as `RecoveredRollout`'s, over the group's kept work: its rows (a group without rollouts=
    # handed back to train) or its rollouts' kept work
    policy_span: tuple[int, int] | None = None
    lead: int | None = None

    @property
    def pending(self) -> list[RecoveredRollout]:
        """The rollouts to dispatch (unsealed); empty for a group without rollouts=."""
        return [r for r in self.rollouts or () if not r.sealed]

    @classmethod
    def of(cls, g: Group) -> "RecoveredGroup":
        """The fold's record `g`, a rollout's seal or prefix recorded without a policy version
        read as made by the weights that admitted its group (`with_version`)."""
        r = g.rollouts
        pv = g.policy_version
        rollouts = None
        if r is not None:
            rollouts = [RecoveredRollout(i, r.attempts[i], False, progress=with_version(r.progress_of(i), pv))
                        for i in range(r.n)]
            for i in range(r.n):
                if r.is_sealed(i):
                    v = r.versions[i] if r.versions[i] is not None else pv
                    rollouts[i] = RecoveredRollout(i, r.attempts[i], True, r.locators[i], v,
                                                   policy_span=sealed_span(v, r.since_of(i)))
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
    # work by weights beyond the bound (`step` + `max_policy_lag`), not kept: it regenerates
    beyond_lag: list[BeyondLag] = field(default_factory=list)
    max_policy_lag: int = 0
    # the generated work handed back, by lead (`KeptWork`: newest version minus `step`, 0 for
    # work of the restored weights or older)
    kept_by_lead: dict[int, KeptWork] = field(default_factory=dict)
    # groups waiting at `lsn` (reserved, spare) that a later history admitted, back under fresh
    # ids (each also in its owner's list): that admission handed out their attempts 0. With
    # salvage each comes back where the dead tail's work on it allows, as an adopted take does
    reissued: list[RecoveredGroup] = field(default_factory=list)
    # prefixes (`RecoveredRollout.progress`), each (group as the history that recorded it named
    # it, index): recorded after `lsn` and kept under the salvage rule; whose row the data plane
    # no longer has, dropped; dropped by on_identity_changed="regenerate" (those by weights
    # beyond the bound: `beyond_lag`, `newer_progress`)
    salvaged_progress: list[tuple[int, int]] = field(default_factory=list)
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
    def newer_weights(self) -> list[tuple[int, int]]:
        """The sealed rollouts of `beyond_lag`: (group as the dead tail named it, index)."""
        return [(b.group_id, b.index) for b in self.beyond_lag if b.kind == "rollout"]

    @property
    def newer_progress(self) -> list[tuple[int, int]]:
        """The prefixes of `beyond_lag`: (group as the history that recorded it named it, index)."""
        return [(b.group_id, b.index) for b in self.beyond_lag if b.kind == "prefix"]

    @property
    def ledger(self) -> RowLedger | None:
        """The audit's row ledger at `lsn`, when it is known: a resume that seeds a cut writes it
        there, so the resumed journal can still be audited. Computed on first use (only such a
        resume needs it, so a restore does not read its tail a second time for it), from the
        files the restore read; None when they no longer hold the history it restored."""
        return self.ledger_source() if self.ledger_source is not None else None
