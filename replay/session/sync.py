"""`Session`: the journal, a restore, a data plane and compaction behind the calls a trainer
makes (open, take, admit, seal, trained, checkpoint)."""

from __future__ import annotations

from typing import Any, Callable

from journal import RolloutRef

from .core import Begun, Core, Fill
from .fence import refuse_progress
from .row_steps import RowStep, progress_step, seal_step


class Session(Core):
    """A trainer's ownership journal in three steps (see README "Integrate it"):

        s = Session.open("run/journal", dataset=ds, loader=dl, collate_fn=collate,
                         data_plane=LocalDataPlane("run/rows"), load_weights=load)
        for w in s.resume_work: ...            # train / generate / admit what was in flight
        for batch in s.batches():
            gids = s.take(batch)
            s.admit(gids, step=t, policy_version=v, rollouts=4)
            s.seal(gid, index, attempt, rows)  # the last seal of a group finishes it
            s.trained(gids, step=t)
            s.checkpoint(t, save=lambda: save_weights(t))

    Every call journals its transition durably before it returns (sync="always"); an illegal
    one raises (`journal.OwnershipError`) and writes nothing. A first start and a restart run
    the same code. Thread-safe: rollout workers may seal from several threads (their commits
    share fsyncs)."""

    def __init__(self, *args, **kwargs):  # use Session.open
        raise TypeError("use Session.open(journal_dir, ...)")

    @classmethod
    def open(cls, journal_dir: str, *, dataset: Any = None, loader: Any = None,
             collate_fn: Callable | None = None, data_plane: Any = None,
             load_weights: Callable[[int], Any] | None = None, sync: str = "always",
             salvage: bool = True, must_exist: bool = False, replica: Any = None,
             replica_options: dict | None = None, compact_every: int | None = 10,
             key: Callable | None = None, on_row_changed: str = "error",
             identity: dict | None = None, on_identity_changed: str = "error",
             max_policy_lag: int = 0) -> "Session":
        """Open (or start) the run whose journal is `journal_dir`, doing what a restart needs,
        in order: `replay.restore` of the latest committed checkpoint (salvaging work finished
        after it when a data plane is given), `load_weights(step)` (only when a checkpoint was
        restored), `loader.load_state_dict(...)`, `Journal.open(resume=...)`, and deleting
        rows of the data plane the journal no longer names. Then `resume_work` lists what was
        in flight.

        A path that holds no journal is a first start: it warns (`journal.JournalWarning`
        naming it), or with `must_exist=True` raises `replay.NothingToRestore`. With `replica`
        (a URL such as "s3://bucket/runs/42" and `replica_options`) the journal ships to
        object storage, and a start whose local journal holds no history (a fresh node)
        restores from the bucket. `compact_every`: every that many checkpoints a background
        compaction folds the journal into a cut and retires what it covers (None: never).
        `key(batch)`: the rows of a batch as `(idx, task_name)` pairs, for batches that are
        not a mapping with an "idx" column. `identity` (the run's tokenizer, sampling
        parameters, prompt template, reward version: a mapping of str keys to plain values or
        tensors) is compared at the restore point (`replay.restore(identity=,
        on_identity_changed=)`: a change raises `replay.IdentityChanged` by default) and recorded
        in the journal when it differs from the one recorded (`s.restored.identity_check` says
        what the restore found). `max_policy_lag=k`: the trainer's own off-policy bound in
        steps (its staleness limit): a restore to step S also keeps the sealed rollouts,
        finished groups and prefixes that weights up to S + k made after the checkpoint (they
        train k steps off-policy, as any sample k steps old; each says how it was made:
        `policy_span`, `lead`); 0 keeps nothing newer than S. It needs a data plane. For it
        to keep anything, the versions must be known: pass `policy_version=` to `admit` (a
        seal or a prefix without one is read as made by its admission's weights)."""
        return cls._start(journal_dir, dataset=dataset, loader=loader, collate_fn=collate_fn,
                          data_plane=data_plane, load_weights=load_weights, sync=sync,
                          salvage=salvage, must_exist=must_exist, replica=replica,
                          replica_options=replica_options, compact_every=compact_every, key=key,
                          on_row_changed=on_row_changed, identity=identity,
                          on_identity_changed=on_identity_changed, max_policy_lag=max_policy_lag)

    def _commit(self, fill: Fill) -> Any:
        with self.journal.transaction() as tx:
            return fill(tx)

    # -- the loop ----------------------------------------------------------------------------

    def take(self, batch: Any, *, divert: bool = False) -> list[int]:
        """Record that the loader handed out `batch` (call it right after the batch came out
        of the loader, before anything else reads the loader); returns the new group ids, one
        per row. With `divert=True` they go to the replacement reserve (`spares`)."""
        return self._commit(self.take_fill(batch, divert))

    def admit(self, group_ids: list[int], *, step: int, policy_version: int | None = None,
              rollouts: int | None = None) -> None:
        """Admit reserved or spare groups for training step `step` (generation starts); with
        `rollouts=N` each of their N rollouts is sealed on its own (`seal`), else a group's rows
        come at once (`finish`)."""
        self.journal.admitted(group_ids, target_step=step, policy_version=policy_version,
                                     rollouts=rollouts)

    def seal(self, group_id: int, index: int, attempt: int, rows: Any, *,
             policy_version: int | None = None) -> str:
        """Store rollout `index`'s `rows` (generated by `attempt`) durably in the data plane,
        then journal it sealed; the group's last seal also journals it finished (ready to
        train). Returns the rows' locator. A late result of an attempt that was given up
        raises `journal.StaleAttempt` and its rows are deleted."""
        return self._store_and_commit(seal_step(self, group_id, index, attempt, policy_version), rows)

    def progress(self, group_id: int, index: int, attempt: int, rows: Any, *, tokens: int,
                 turn: int | None = None, policy_version: int | None = None) -> str:
        """Store a durable prefix of rollout `index` (generated by `attempt`: the tokens so far,
        or the turns so far and the environment's exported state) in the data plane, then
        journal it (`rollout_progress`: `tokens` generated, `turn` turns completed, by weights
        `policy_version`). Returns the prefix's locator. A restore hands the rollout back with
        its latest prefix (`RolloutWork.progress`) for the next attempt to continue from; the
        prefix it supersedes is deleted (see `replay/session/core.py`). A prefix of an
        attempt that was given up raises `journal.StaleAttempt`, of a sealed rollout
        `journal.RolloutEnded`, before its rows are written (`fence.py`)."""
        refuse_progress(self.journal, group_id, index, attempt, tokens, turn, policy_version)
        return self._store_and_commit(progress_step(self, group_id, index, attempt, tokens, turn, policy_version),
                                      rows)

    def _store_and_commit(self, step: RowStep, rows: Any) -> str:
        """The rows durable, then the commit naming them: as one step shared by the calls in
        flight when the data plane batches (`RowCommits`), else one after the other. Rows whose
        commit was refused are deleted; the rows it supersedes, once it is durable."""
        if self.row_commits is not None:
            self.row_commits.run(step.locator, rows, step.fill(step.locator), lambda _: step.after())
            return step.locator
        locator = step.put(rows)
        try:
            self._commit(step.fill(locator))
        except Exception as exc:
            if self.refused(exc, locator):
                self.data_plane.delete([locator])
            raise
        self._drop(step.after())
        return locator

    def _drop(self, rows: list[str]) -> None:
        if rows:
            self._reclaimed += self.plane().delete(rows)

    def finish(self, group_id: int, rows: Any, *, policy_version: int | None = None) -> str:
        """For a group admitted without `rollouts=`: store its rows durably in the data plane,
        then journal it finished (ready to train). Returns the rows' locator."""
        self.check_version(group_id, self.journal.group(group_id), policy_version, "the rows")
        locator = self.plane().put(group_id, rows)
        self.journal.finished([group_id], policy_version=policy_version, locators=[locator])
        return locator

    def fail(self, group_id: int, index: int, attempt: int, *, reason: str) -> int:
        """Give rollout `index` of its `attempt` up (failed, timed out, its worker died);
        returns the attempt to dispatch it again with. A result that `attempt` still sends
        later is refused (`StaleAttempt`)."""
        self.journal.rollout_failed([RolloutRef(group_id, index, attempt)], reason=reason)
        if self.data_plane is not None:
            self._drop(self.prefix_moved(group_id, index, None))
        return attempt + 1

    def divert(self, group_ids: list[int]) -> None:
        """Move reserved groups into the replacement reserve (`spares`)."""
        self.journal.diverted(group_ids)

    def discard(self, group_ids: list[int], *, reason: str) -> None:
        """Drop live groups for good, with the reason (the audit counts them as dropped)."""
        self.note_left(self._commit(self.leaving_fill(
            group_ids, lambda tx: tx.discarded(group_ids, reason=reason))))

    def replace(self, failed: int, spare: int, *, reason: str, step: int,
                policy_version: int | None = None, rollouts: int | None = None) -> None:
        """Drop group `failed` and admit group `spare` (reserved or spare) in its place, in one
        commit."""
        def move(tx) -> None:
            tx.discarded([failed], reason=reason)
            tx.admitted([spare], target_step=step, policy_version=policy_version, replaces=failed,
                        rollouts=rollouts)
        self.note_left(self._commit(self.leaving_fill([failed], move)))

    def rows(self, group_id: int) -> list[Any]:
        """The rows of a finished group, read back from the data plane: one item per rollout
        in index order (a group admitted with `rollouts=N`), or the one item `finish` stored."""
        dp = self.plane()
        return [dp.get(loc) for loc in self.locators_of(group_id)]

    def trained(self, group_ids: list[int], *, step: int) -> None:
        """Record that training step `step` consumed these finished groups: call it once the
        optimizer step that used their rows is done, before the checkpoint that saves those
        weights begins. Refused, writing nothing: a step below the committed checkpoint's
        (`StepBeforeCheckpoint`), and any while a checkpoint's save() has failed
        (`CheckpointUnsaved`: save it again first)."""
        self.check_trained(step)
        self.note_left(self._commit(self.leaving_fill(
            group_ids, lambda tx: tx.trained(group_ids, step=step))))
        self.note_trained()

    def checkpoint(self, step: int, *, save: Callable[[], Any]) -> int:
        """Checkpoint step `step`: journal that it begins (the state at that LSN is what the
        weights saw), `save()` your weights durably, journal it committed; then delete the
        rows no restore can need and, every `compact_every` checkpoints, compact in the
        background. Returns the begin LSN. The step committed last (or restored), with nothing
        trained since, is checkpointed already: its begin LSN comes back and nothing is saved
        (a run's final checkpoint is safe to call again after a restart).

        If `save()` raises, the checkpoint stays uncommitted and the exception propagates: call
        `checkpoint(step, save=...)` again to save and commit it (`trained` and any other
        checkpoint raise `CheckpointUnsaved` until then), or restart (the restart restores the
        previous checkpoint)."""
        again = self.committed_again(step)
        if again is not None:
            return again
        begun = self.retry_of(step)
        if begun is None:
            rows, held = self.take_reclaimable()
            try:
                begun = Begun(step, self.journal.begin_checkpoint(step=step), rows, prefixes=held)
            except BaseException:
                self.give_back(rows)
                raise
        try:
            save()
        except BaseException:
            self.save_failed(begun)
            raise
        self.journal.commit_checkpoint(step=step)
        if self.journal.sync != "always":
            self.journal.flush()  # the commit is durable before anything it allows goes
        self.pin(begun)
        if begun.rows:
            self._reclaimed += self.plane().delete(begun.rows)
        self.after_checkpoint(step, begun.lsn)
        return begun.lsn

    def close(self) -> None:
        """Wait for a background compaction, then close the journal. Live groups stay in the
        journal: the next start hands them back in `resume_work`."""
        try:
            self.before_close()
        finally:
            self.journal.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
