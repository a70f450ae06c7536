"""What `Session` and `AsyncSession` share: the open sequence, the commits each call makes
(as functions that fill a `journal.Transaction`), the rows to reclaim, and `stats()`.

The two facades differ only in how they wait: `Session` commits with `Journal.transaction()`
and calls the data plane directly; `AsyncSession` awaits `AsyncJournal.commit` and runs the
data plane's blocking I/O in worker threads.

Rows and the journal: a rollout's or a group's rows are durable in the data plane *before*
the commit that names their locator, so every locator the journal holds names complete rows.
Rows no restore can need are deleted:
- rows written for a commit the journal refused as a late attempt (`StaleAttempt`): no
  history names them;
- at `checkpoint(S)`, once S is committed, the rows of groups trained or dropped before S
  began: the state S restores holds them as TRAINED or DROPPED. Rows of groups trained
  after the previous checkpoint are kept until then, since restoring that one needs them;
- at open, rows that the resumed state does not name (writes a crash cut off before their
  commit, attempts a restore gave up, groups trained before the restored checkpoint).

A rollout's prefixes (`progress`): once a newer prefix, or the rollout's seal or failure, is
durable, the older prefix's row is deleted at once, unless a restore may still hand it back:
the prefixes held at the last committed checkpoint's LSN (or at the restore point the session
opened at) and at a checkpoint begun since are "pinned" and wait for the checkpoint after the
one that unpins them, as the rows of groups gone do.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from journal import Journal, JournalWarning, Owner, RolloutEnded, RolloutRef, StaleAttempt, Transaction
from journal.reader import list_segments
from journal.replica.store import Location
from snapshot import BackgroundCompactor
from snapshot.data_plane import prefix_locators, row_locators

from ..data_plane.base import RowStore
from ..recovered_state import RecoveredState
from ..restore import restore
from .batch import Key
from .errors import CheckpointUnsaved, LoadWeightsFailed, RowsRegeneratedWarning, SessionError, StepBeforeCheckpoint
from .row_commits import RowCommits
from .row_steps import drop_rows
from .stats import MeasuredFileSystem
from .takes import Takes
from .work import RolloutWork, Work, resume_work

Fill = Callable[[Transaction], Any]


def _holds_history(journal_dir: str) -> bool:
    return os.path.isdir(journal_dir) and bool(list_segments(journal_dir))


class Opened:
    """The outcome of the open sequence: the journal continuing the restored state."""

    def __init__(self, journal: Journal, state: RecoveredState, fs: MeasuredFileSystem):
        self.journal, self.state, self.fs = journal, state, fs


def open_journal(journal_dir: str, *, dataset, loader, collate_fn, data_plane, load_weights,
                 sync: str, salvage: bool, must_exist: bool, replica, replica_options,
                 on_row_changed: str, identity, on_identity_changed: str, max_policy_lag: int) -> Opened:
    """What a (re)start needs, in order: restore (from the bucket when `replica` is given and
    the local journal holds no history: a fresh node) with the run identity checked, the
    weights of the restored step, the loader's state, then the journal continuing the restored
    history (recording the identity when it differs)."""
    local = os.path.abspath(journal_dir)
    if max_policy_lag and data_plane is None:
        raise SessionError(f"journal {local}: max_policy_lag={max_policy_lag} keeps rows made after the "
                           "checkpoint, which live in the data plane: pass Session.open(..., "
                           "data_plane=LocalDataPlane(dir)) too")
    replica = Location.of(replica, replica_options) if replica is not None else None
    source = replica if replica is not None and not _holds_history(local) else local
    state = restore(source, dataset=dataset, collate_fn=collate_fn, data_plane=data_plane,
                    salvage=salvage and data_plane is not None, must_exist=must_exist,
                    on_row_changed=on_row_changed, identity=identity,
                    on_identity_changed=on_identity_changed, max_policy_lag=max_policy_lag)
    _warn_regenerated(local, state, data_plane)
    if state.step is not None and load_weights is not None:
        try:
            load_weights(state.step)
        except Exception as exc:
            raise LoadWeightsFailed(
                f"journal {local} restores the committed checkpoint of step {state.step} (LSN "
                f"{state.lsn}), but load_weights({state.step}) failed: {type(exc).__name__}: {exc}. "
                f"A committed checkpoint's weights must stay until a newer checkpoint is "
                f"committed: put them back, then start again") from exc
    if loader is not None and state.loader_state is not None:
        loader.load_state_dict(state.loader_state)
    fs = MeasuredFileSystem()
    j = Journal.open(local, resume=state, sync=sync, fs=fs, replica=replica, identity=identity)
    return Opened(j, state, fs)


def _shown(items: list) -> str:
    return ", ".join(map(str, items[:8])) + (f", ... ({len(items)} in all)" if len(items) > 8 else "")


def _warn_regenerated(journal_dir: str, state: RecoveredState, data_plane) -> None:
    """A warning naming the work a restore hands back to generate again because the data plane
    no longer has its rows (a session deletes only rows no restore can need: something else
    deleted these)."""
    groups = [f"{g.replaces}->{g.group_id} (idx {g.idx})" for g in state.demoted]
    rollouts, prefixes = state.lost_rollouts, state.lost_progress
    if not (groups or rollouts or prefixes):
        return
    lost = ([f"finished groups old->new id {_shown(groups)}"] if groups else []) \
        + ([f"sealed rollouts (group, index) {_shown(rollouts)}"] if rollouts else []) \
        + ([f"prefixes (group, index) {_shown(prefixes)}"] if prefixes else [])
    warnings.warn(RowsRegeneratedWarning(
        f"journal {journal_dir}: the data plane {data_plane!r} no longer has rows the restored step "
        f"{state.step} names: {'; '.join(lost)}. Their work is generated again (resume_work lists those "
        "groups as \"generate\"); nothing is lost or trained twice. A session deletes only rows no "
        "restore can need: check what else deletes files in the data plane (another trainer or a "
        "cleanup job on the same rows)"), stacklevel=4)


@dataclass
class Begun:
    """A checkpoint begun at `lsn`, and the rows to delete once it is committed."""

    step: int
    lsn: int
    rows: list[str]
    prefixes: frozenset = frozenset()  # the prefixes held when it began (pinned once it commits)


class Core:
    """The session's state beside the journal: the loader pass, the rows to reclaim, what the
    restore handed back. Subclasses run the commits (`Session`, `AsyncSession`)."""

    def __init__(self, opened: Opened, *, dataset, loader, collate_fn, data_plane, key: Key | None,
                 compact_every: int | None):
        self.journal: Journal = opened.journal
        self.restored: RecoveredState = opened.state
        self.step: int | None = opened.state.step
        self.epoch: int = opened.state.loader_epoch or 0
        self.dataset, self.loader, self.data_plane = dataset, loader, data_plane
        self.takes = Takes(dataset, collate_fn, key)
        self._fs = opened.fs
        self._lsn_at_open = self.journal.lsn
        self.resume_work: list[Work] = resume_work(opened.state)
        self._reclaim: list[str] = []  # rows of groups gone since the last checkpoint began
        self._reclaim_lock = threading.Lock()
        self._reclaimed = 0
        self._checkpoints = 0
        self._compacted_at = 0  # the checkpoint count when the last compaction was submitted
        self._compact_every = compact_every
        self._compactor = BackgroundCompactor(self.journal) if compact_every else None
        self._compaction: concurrent.futures.Future | None = None
        self._compactions = 0
        self._compaction_error: str | None = None
        self._closed_stats: dict | None = None  # what `stats()` returned when the session closed
        self._unsaved: Begun | None = None  # the begun checkpoint whose save() failed
        self._unversioned_warned = False  # see `check_version`
        # the begin LSN of the checkpoint of `step` (restored, or committed since), and whether
        # groups were trained since it committed (then its weights are no longer the trainer's)
        self._step_lsn: int | None = opened.state.lsn if self.step is not None else None
        self._trained_since = False
        # the prefix each unsealed rollout holds now, group -> index -> locator (guarded by
        # the reclaim lock), the parts each attempt used, and the prefixes a restore may hand
        # back (see the module docstring)
        self._prefixes: dict[int, dict[int, str]] = {}
        self._parts: dict[int, dict[int, tuple[int, int]]] = {}  # group -> index -> (attempt, last part)
        for g in self.journal.groups(Owner.ADMITTED):
            if g.rollouts is not None and g.rollouts.progress is not None:
                self._prefixes[g.group_id] = {i: p.locator for i, p in enumerate(g.rollouts.progress)
                                              if p is not None}
        self._pinned: set[str] = {loc for held in self._prefixes.values() for loc in held.values()}
        # seals and prefixes with their rows as one durable step, when the data plane batches
        self.row_commits = (RowCommits(self.journal, data_plane, refused=self.refused,
                                       drop=lambda superseded, refused: drop_rows(self, superseded, refused))
                            if isinstance(data_plane, RowStore) and data_plane.BATCHES else None)

    @classmethod
    def _start(cls, journal_dir: str, *, dataset, loader, data_plane, key: Key | None,
               compact_every: int | None, **options) -> "Core":
        """A session of class `cls` on the journal `open_journal` opened (`Session.open`)."""
        opened = open_journal(journal_dir, dataset=dataset, loader=loader, data_plane=data_plane,
                              **options)
        self = object.__new__(cls)
        try:
            Core.__init__(self, opened, dataset=dataset, loader=loader, collate_fn=options["collate_fn"],
                          data_plane=data_plane, key=key, compact_every=compact_every)
            self._reclaimed += self.sweep()
        except BaseException:
            opened.journal.close()
            raise
        return self

    # -- reading ---------------------------------------------------------------------------

    @property
    def spares(self) -> list[int]:
        """Group ids in the replacement reserve (SPARE), oldest first."""
        return [g.group_id for g in self.journal.groups(Owner.SPARE)]

    def plane(self):
        if self.data_plane is None:
            raise SessionError("this call writes or reads rows, but the session has no data plane: "
                               "pass Session.open(..., data_plane=LocalDataPlane(dir))")
        return self.data_plane

    def pending(self, group_id: int) -> list[RolloutWork]:
        """The rollouts of an ADMITTED group (admitted with `rollouts=N`) still to generate, each
        with the attempt to dispatch it with, as of now; [] once all are sealed."""
        g = self.journal.group(group_id)
        if g is None or g.owner != Owner.ADMITTED or g.rollouts is None:
            raise SessionError(f"group {group_id} is not an ADMITTED group with rollouts= in journal "
                               f"{self.journal.path} (owner {self.journal.owner_of(group_id)}), so "
                               "it has no rollouts to generate")
        r = g.rollouts
        return [RolloutWork(i, r.attempts[i], False, progress=r.progress_of(i)) for i in r.unsealed()]

    def locators_of(self, group_id: int) -> list[str]:
        """The data-plane locators of a live group's rows, in rollout order."""
        g = self.journal.group(group_id)
        if g is None:
            raise SessionError(f"group {group_id} is not live in journal {self.journal.path} "
                               f"(owner {self.journal.owner_of(group_id)}): it has no rows to read")
        return row_locators(g)

    # -- the commits ---------------------------------------------------------------------------

    def take_fill(self, batch: Any, divert: bool) -> Fill:
        """`taken` of the batch's rows (with the loader state after the batch, the epoch, the
        prompts' fingerprints and the dataset size: `takes.py`, which refuses what it says),
        diverted into the reserve with `divert`."""
        refs = self.takes.refs(batch, self.epoch)
        loader_state = self.loader.state_dict() if self.loader is not None else None
        ds = self.dataset
        size = len(ds) if ds is not None and hasattr(ds, "__len__") else None

        def fill(tx: Transaction) -> list[int]:
            self.takes.live.refuse_retaken(self.journal, refs)
            gids = tx.taken(refs, loader_state=loader_state, dataset_size=size)
            self.takes.live.note(refs, gids)
            if divert:
                tx.diverted(gids)
            return gids
        return fill

    def check_version(self, group_id: int, g, policy_version: int | None, what: str) -> None:
        """Warn, once per session, of `what` (a seal, a prefix, a group's rows) recorded for
        group `group_id` (`g`: its record, None when unknown) with no policy version, neither
        its own nor its admission's: after a crash, work made after the checkpoint is kept only
        when the weights that made it are known."""
        if policy_version is not None or self._unversioned_warned or g is None or g.policy_version is not None:
            return
        self._unversioned_warned = True
        warnings.warn(JournalWarning(
            f"journal {self.journal.path}: {what} of group {group_id} has no policy_version, and the "
            "group was admitted without one: after a crash, nothing made after the last checkpoint "
            "can be kept (the restore cannot tell which weights made it). Pass policy_version= (the "
            "version of the weights generating) to admit(); seals and prefixes without one take the "
            "admission's. Warned once per session"), stacklevel=4)

    def seal_fill(self, group_id: int, index: int, attempt: int, locator: str,
                  policy_version: int | None) -> Fill:
        """`rollout_sealed`, and `finished` in the same commit when it is the group's last seal."""
        def fill(tx: Transaction) -> None:
            g = self.journal.group(group_id)  # as of the last commit: the transaction holds the lock
            self.check_version(group_id, g, policy_version, f"the seal of rollout {index}")
            tx.rollout_sealed([RolloutRef(group_id, index, attempt, locator)], policy_version=policy_version)
            r = g.rollouts if g is not None else None
            if r is not None and 0 <= index < r.n and r.sealed | (1 << index) == (1 << r.n) - 1 \
                    and not r.is_sealed(index):
                tx.finished([group_id], policy_version=policy_version)
        return fill

    def progress_fill(self, group_id: int, index: int, attempt: int, locator: str, tokens: int,
                      turn: int | None, policy_version: int | None) -> Fill:
        """`rollout_progress` of the prefix at `locator`."""
        def fill(tx: Transaction) -> None:
            self.check_version(group_id, self.journal.group(group_id), policy_version,
                               f"the prefix of rollout {index}")
            tx.rollout_progress(RolloutRef(group_id, index, attempt, locator), tokens=tokens, turn=turn,
                                policy_version=policy_version)
        return fill

    def leaving_fill(self, group_ids: list[int], move: Fill) -> Fill:
        """`move(tx)`, which moves `group_ids` out of the live set (TRAINED or DROPPED); the
        fill returns their rows and prefixes (read under the transaction's lock), for
        `note_left` once the commit is durable."""
        def fill(tx: Transaction) -> list[str]:
            gone = [loc for gid in group_ids if (g := self.journal.group(gid)) is not None
                    for loc in row_locators(g) + prefix_locators(g)]
            move(tx)
            with self._reclaim_lock:
                for gid in group_ids:
                    self._prefixes.pop(gid, None)
                    self._parts.pop(gid, None)
            return gone
        return fill

    # -- rows ---------------------------------------------------------------------------------

    def refused(self, exc: BaseException, locator: str) -> bool:
        """Whether rows written for a commit the journal refused with `exc` are to be deleted:
        a late or unknown attempt (`StaleAttempt`), or a prefix of a sealed rollout
        (`RolloutEnded`), whose locator no history names. Any other
        refusal may be a duplicate of a commit that named the same locator: kept (the next
        open's sweep removes it if nothing names it)."""
        return isinstance(exc, (StaleAttempt, RolloutEnded))

    def count_reclaimed(self, rows: int) -> None:
        with self._reclaim_lock:
            self._reclaimed += rows

    def next_part(self, group_id: int, index: int, attempt: int) -> int:
        """The part number of the next prefix of this rollout attempt (1, 2, ...): its locator
        is new (an attempt is dispatched once, and a restore raises it)."""
        with self._reclaim_lock:
            parts = self._parts.setdefault(group_id, {})
            last_attempt, last = parts.get(index, (attempt, 0))
            part = last + 1 if last_attempt == attempt else 1
            parts[index] = (attempt, part)
        return part

    def prefix_moved(self, group_id: int, index: int, locator: str | None) -> list[str]:
        """A durable commit gave rollout `index` of `group_id` the prefix at `locator` (None: a
        seal or a failure ended it). Returns the superseded prefix's row to delete now (none
        when there was none, or when it is pinned: then it waits for a checkpoint)."""
        with self._reclaim_lock:
            held = self._prefixes.setdefault(group_id, {})
            old = held.pop(index, None)
            if locator is not None:
                held[index] = locator
            else:
                if not held:
                    del self._prefixes[group_id]
                parts = self._parts.get(group_id)
                if parts is not None:
                    parts.pop(index, None)
                    if not parts:
                        del self._parts[group_id]
            if old is None or old == locator:
                return []
            if old in self._pinned:
                self._reclaim.append(old)
                return []
            return [old]

    def pin(self, begun: "Begun") -> None:
        """Checkpoint `begun` committed: a restore goes to it, so only the prefixes held when
        it began stay pinned (until it committed, those of the previous one were too)."""
        with self._reclaim_lock:
            self._pinned = set(begun.prefixes)

    def note_left(self, locators: list[str]) -> None:
        """Rows of groups a durable commit moved out of the live set: reclaimed at the next
        checkpoint (only commits that returned before that checkpoint began are included, so
        its LSN is above theirs)."""
        with self._reclaim_lock:
            self._reclaim += locators

    def take_reclaimable(self) -> tuple[list[str], frozenset]:
        """The rows to delete once the checkpoint about to begin is committed, and the prefixes
        held now (pinned from here on, beside those pinned already: see `pin`)."""
        with self._reclaim_lock:
            rows, self._reclaim = self._reclaim, []
            held = frozenset(loc for by_index in self._prefixes.values() for loc in by_index.values())
            self._pinned |= held
        return rows, held

    def give_back(self, rows: list[str]) -> None:
        """A checkpoint that did not begin: its rows wait for the next one."""
        with self._reclaim_lock:
            self._reclaim = rows + self._reclaim

    def committed_again(self, step: int) -> int | None:
        """The begin LSN of the checkpoint of `step` when it is the one committed last (or
        restored) and nothing was trained since: `checkpoint(step)` then has nothing to save, as
        a run's final checkpoint called again after a restart. None otherwise."""
        return self._step_lsn if step == self.step and not self._trained_since else None

    def retry_of(self, step: int) -> "Begun | None":
        """The begun checkpoint whose `save()` failed, when `checkpoint(step)` saves it again
        (nothing can be trained meanwhile: `check_trained`); None when no save failed. Another
        checkpoint cannot begin while that one is uncommitted: `CheckpointUnsaved`."""
        b = self._unsaved
        if b is None or b.step == step:
            return b
        raise CheckpointUnsaved(f"checkpoint({step}) in journal {self.journal.path}: {self._unsaved_now()}")

    def _unsaved_now(self) -> str:
        b = self._unsaved
        restored = f"step {self.step}" if self.step is not None else "the empty state"
        return (f"the step-{b.step} checkpoint begun at LSN {b.lsn} failed to save, and nothing else can "
                f"commit before it: call s.checkpoint({b.step}, save=...) again (it saves and commits that "
                f"checkpoint), or restart the trainer (it restores the last committed checkpoint, {restored})")

    def save_failed(self, begun: "Begun") -> None:
        self._unsaved = begun

    def check_trained(self, step: int) -> None:
        """Refuse `trained(step=step)` (nothing written) while a begun checkpoint's save()
        failed (it must commit with the weights it was begun for), and for a step below the
        committed checkpoint's (whose weights cannot hold a later training step)."""
        if self._unsaved is not None:
            raise CheckpointUnsaved(f"trained(step={step}) in journal {self.journal.path}: {self._unsaved_now()}")
        if self.step is not None and step < self.step:
            raise StepBeforeCheckpoint(
                f"trained(step={step}) in journal {self.journal.path}: the checkpoint of step {self.step} is "
                f"committed, and a training step after it is a later one: pass the step this update "
                f"makes, above {self.step} (a restarted trainer counts on from s.step)")

    def note_trained(self) -> None:
        self._trained_since = True

    def sweep(self) -> int:
        """Delete the rows that the journal's live state does not name (at open, before any
        new row is written); how many went."""
        dp = self.data_plane
        if dp is None:
            return 0
        keep = {loc for g in self.journal.groups() for loc in row_locators(g) + prefix_locators(g)}
        gone = [loc for loc in dp.locators() if loc not in keep]
        return dp.delete(gone) if gone else 0

    def after_checkpoint(self, step: int, lsn: int) -> None:
        """A committed checkpoint (begun at `lsn`): the step, the rows it frees are gone, and once `compact_every` checkpoints passed since
        the last compaction began, a compaction in the background (retiring the segments the
        cut covers); one at a time, the next as soon as the last finished."""
        self.step, self._step_lsn, self._unsaved, self._trained_since = step, lsn, None, False
        self._checkpoints += 1
        if self._compactor is None or self._checkpoints - self._compacted_at < self._compact_every:
            return
        self._collect_compaction()
        if self._compaction is None:
            self._compacted_at = self._checkpoints
            self._compaction = self._compactor.submit()

    def _collect_compaction(self) -> None:
        """The outcome of the background compaction, once it finished: a failure warns (the
        journal is intact without it) and is reported by `stats()`."""
        done = self._compaction
        if done is None or not done.done():
            return
        self._compaction = None
        exc = done.exception()
        if exc is None:
            self._compactions += 1
            self._compaction_error = None
            return
        self._compaction_error = f"{type(exc).__name__}: {exc}"
        warnings.warn(JournalWarning(f"journal {self.journal.path}: background compaction failed "
                                     f"({self._compaction_error}); the journal is intact, the next "
                                     "compaction tries again"), stacklevel=4)

    def before_close(self) -> None:
        """Wait for the background compaction, and keep the last stats for after the close."""
        if self.row_commits is not None:
            self.row_commits.close()
        if self._compactor is not None:
            self._compactor.close(wait=True)
            self._collect_compaction()
        self._closed_stats = self.stats()

    # -- batches and stats ---------------------------------------------------------------------

    def batches(self, epochs: int | None = None):
        """The loader's batches, pass after pass from where the restore left it, counting the
        passes (`epoch`, recorded with every `take`). `epochs=N` ends them once `epoch` reaches
        N: passes count from the run's start, so after a restart they go on to the end of the
        same N (a run that finished yields none). Without it they never end (but for a loader
        that yields nothing two passes in a row): end the run by a step count of your own."""
        if self.loader is None:
            raise SessionError("batches() needs the loader: pass Session.open(..., loader=dl)")
        if epochs is not None and (type(epochs) is not int or epochs < 0):
            raise SessionError(f"batches(epochs={epochs!r}): the number of passes over the loader the run "
                               "makes (an int >= 0), or None for no end")
        return self._passes(epochs)

    def _passes(self, epochs: int | None):
        empty = 0
        while empty < 2 and (epochs is None or self.epoch < epochs):
            yielded = False
            for batch in self.loader:
                yielded = True
                yield batch
            self.epoch += 1
            empty = 0 if yielded else empty + 1

    def stats(self) -> dict[str, Any]:
        """What a trainer logs each step, as a plain dict (after `close`: as it closed)."""
        if self._closed_stats is not None:
            return self._closed_stats
        self._collect_compaction()
        j, r = self.journal, self.restored
        rec = r.restored if not r.first_start else None
        kept = sum(1 for g in r.admitted + r.replay for x in g.rollouts or () if x.sealed)
        regenerated = sum(len(g.pending) for g in r.admitted)
        prefixes = [x.progress for g in r.admitted for x in g.pending if x.progress is not None]
        lag = j.replica_lag() if j.replica is not None else None
        with self._reclaim_lock:
            waiting = len(self._reclaim)
        return {
            "lsn": j.lsn, "step": self.step, "epoch": self.epoch,
            "owners": {o.name.lower(): n for o, n in j.counts().items()},
            "commits": j.lsn - self._lsn_at_open, "fsyncs": self._fs.fsyncs, **self._fs.latency_ms(),
            "replica_lag_s": lag.seconds if lag is not None else None,
            "replica_lag_lsns": lag.lsns if lag is not None else None,
            "restored": {"step": r.step, "lsn": r.lsn, "train": len(r.replay), "generate": len(r.admitted),
                         "admit": len(r.reserved), "spare": len(r.spare), "salvaged": len(r.salvaged),
                         "demoted": len(r.demoted), "adopted": len(r.adopted),
                         "rollouts_adopted": len(r.adopted_rollouts), "rollouts_kept": kept,
                         "rollouts_regenerated": regenerated, "rollouts_newer_weights": len(r.newer_weights),
                         "prefixes_continued": len(prefixes), "prefix_tokens_continued": sum(p.tokens for p in prefixes),
                         "prefixes_newer_weights": len(r.newer_progress),
                         "max_policy_lag": r.max_policy_lag, "beyond_lag": len(r.beyond_lag),
                         "kept_by_lead": {lead: dataclasses.asdict(w) for lead, w in r.kept_by_lead.items()},
                         # as `journal-inspect restores` shows this restore (None on a first start)
                         "crash_lsn": rec.crash_lsn if rec else None, "dropped": dict(rec.dropped) if rec else {},
                         "regenerate": rec.regenerate if rec else 0,
                         "seconds_lost": rec.seconds_lost if rec else None,
                         "identity": r.identity_check},
            "rows_reclaimed": self._reclaimed, "rows_awaiting_reclaim": waiting,
            "compactions": self._compactions, "compaction_error": self._compaction_error,
        }
