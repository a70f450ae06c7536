"""The transition calls, each written once: `Transaction.<call>` records its event into the
transaction's commit, and `Journal.<call>` is a transaction of that one event.

A call's event kind is declared in `events.py` (its `call`, its from/to owners, its argument
bounds); what a call does beyond building its event (allocating group ids, packing the
loader state, the append-time refusals of `arguments.py`, the checkpoint protocol) is here.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any, Iterable, Mapping, Sequence

from . import arguments
from . import loader_state as _loader_state
from .errors import TransactionClosed
from .events import (EVENT_TYPES, Admitted, CheckpointBegun, CheckpointCommitted, Discarded, Diverted,
                     Finished, GroupRef, IdentityRecorded, Restored, RolloutFailed, RolloutProgress, RolloutRef,
                     RolloutSealed, Taken,
                     TakenGroup, Trained)
from .identity import digests
from .fold import taken_next_id


class _Refusing:
    """A transaction's event list outside its `with` block: every call that records an event
    raises TransactionClosed instead (so the methods pay no check of their own). It refers to
    its transaction weakly (no reference cycle per transaction); None: not entered yet."""

    __slots__ = ("tx",)

    def __init__(self, tx: "weakref.ref[Transaction] | None"):
        self.tx = tx

    def __bool__(self) -> bool:
        return False

    def append(self, event) -> None:
        tx = self.tx() if self.tx is not None else None
        what = (f"{tx!r}: its `with` block has ended" if tx is not None
                else "a transaction used outside a `with` block")
        raise TransactionClosed(f"{type(event).call}() on {what}, so nothing was "
                                "recorded; use `with journal.transaction() as tx:` and call tx "
                                "methods inside the block")


_NOT_ENTERED = _Refusing(None)

_IN_TRANSACTION = ("\n\nIn a transaction: recorded into its commit, made when the block ends;\n"
                   "returns {returns}. Raises as the class docstring says.")
_ONE_EVENT = ("\n\nOn the journal: a transaction of this one event; returns {returns}\n"
              "once its commit is durable. Raises as every transition does (class docstring).")


def _transition(*, journal_returns: str = "the commit's LSN", tx_returns: str = "None"):
    """A transition call of `Transaction`, whose docstring says what it records; the text for
    either class is that plus what the call returns there and what it raises."""
    def declare(method):
        body = inspect.cleandoc(method.__doc__)
        method.__doc__ = body + _IN_TRANSACTION.format(returns=tx_returns)
        method.journal_doc = body + _ONE_EVENT.format(returns=journal_returns)
        return method
    return declare


class Transaction:
    """Transitions collected by `Journal.transaction()`, committed atomically on exit.

    It holds the journal's lock for the whole block (so allocated ids stay in order); keep
    transactions short. Its methods record the events of `Journal`'s methods of the same
    names into the one commit made when the block ends, and return None (`taken`: the ids
    it allocates); after the block `tx.lsn` is the commit's LSN (None when it recorded
    nothing). They raise what `Journal`'s raise, in two places: at the call, a bad argument
    (`ValueError`, `TypeError`), an explicit group id of `taken` that is not above every id
    so far and a `begin_checkpoint` the checkpoint rules refuse (`OwnershipError`); when the
    block ends, the ownership rules' `OwnershipError` and `JournalFailed`. An exception
    inside the block, or an `OwnershipError` when it ends, writes nothing of it. Its methods work only
    inside the block: before or after it they raise `TransactionClosed` and record nothing."""

    __slots__ = ("_j", "_events", "_blobs", "_next_gid", "_held", "_phase", "lsn", "__weakref__")

    def __init__(self, journal):
        self._j = journal
        self._events: list | _Refusing = _NOT_ENTERED  # a list inside the `with` block only
        self._blobs: dict[bytes, bytes] = {}
        self._next_gid: int | None = None
        self._held = False
        self._phase = "new"  # "open" inside the `with` block, then "ended"
        self.lsn: int | None = None  # the commit's LSN, once the block ended with events

    def __enter__(self) -> "Transaction":
        if self._phase != "new":
            raise TransactionClosed(f"{self!r} was already used; take a new one with "
                                    "journal.transaction()")
        self._j._lock.acquire()
        self._held = True
        try:
            self._j._check_usable()
        except BaseException:
            self._release()
            raise
        self._phase = "open"
        self._events = []
        return self

    def __repr__(self) -> str:
        state = {"new": "not entered", "open": "open"}.get(self._phase)
        if state is None:
            state = f"committed at LSN {self.lsn}" if self.lsn is not None else "ended without a commit"
        return f"<Transaction on journal {self._j.path}, {state}>"

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._j._lock.release()

    def __exit__(self, exc_type, exc, tb) -> None:
        j = self._j
        pending = self._end(commit=exc_type is None, hand_over=True)
        if pending is not None:
            # The wait takes over the transaction's hold and lets go of it: the lock is held
            # once, so the leader's release while it writes and fsyncs frees it for the other
            # committers, who queue their commits into the next batch meanwhile.
            self.lsn = j._await_commit(pending)

    def _end(self, *, commit: bool, hand_over: bool = False):
        """End the block: queue its commit (folded, not yet durable) unless `commit` is false
        or it holds no event, and let go of the journal's lock; with `hand_over`, a queued
        commit keeps the lock held once for the caller's `CommitPipeline._await_commit`. The queued
        commit, if any."""
        j, pending, events = self._j, None, self._events
        self._phase, self._events = "ended", _Refusing(weakref.ref(self))
        try:
            if commit and events:
                j._check_usable()
                pending = j._enqueue(events, self._blobs)
        finally:
            if hand_over and pending is not None:
                self._held = False
            else:
                self._release()
        return pending

    # -- the transition calls ----------------------------------------------------------------

    @_transition(journal_returns="the group ids", tx_returns="the group ids (valid once the block commits)")
    def taken(self, refs: Sequence[GroupRef], *, loader_state: Any = None,
              dataset_size: int | None = None) -> list[int]:
        """Record that the loader handed out `refs` (one `GroupRef` per row: idx, task name,
        epoch, fingerprint): from the loader to RESERVED. The group ids allocated to them, in
        order, are above every id the journal ever allocated (a `GroupRef.group_id` given
        explicitly must be: else an `OwnershipError`). `loader_state` is the loader's
        `state_dict()` *after* the take, what a restore hands back; `dataset_size=len(dataset)`
        records the dataset's length, which restore checks."""
        refs = arguments.group_refs(refs, self._j.path)
        packed = None
        if loader_state is not None:
            packed, blobs = _loader_state.pack(loader_state)
            self._blobs.update(blobs)
        first = self._j._state.next_group_id if self._next_gid is None else self._next_gid
        nxt, groups, explicit = first, [], False
        for ref in refs:
            gid = nxt
            if ref.group_id is not None:
                gid, explicit = ref.group_id, True
                if arguments.id_problem(gid) is not None:
                    raise arguments.invalid("GroupRef.group_id", gid, arguments.id_problem(gid))
            groups.append(TakenGroup(gid, ref.idx, ref.task_name, ref.epoch, ref.fingerprint))
            nxt = gid + 1
        if explicit:  # only an explicit id can break the rule
            taken_next_id(groups, first, None)
        self._next_gid = nxt
        self._events.append(Taken(groups, packed, dataset_size))
        return [g.group_id for g in groups]

    @_transition()
    def diverted(self, group_ids: Iterable[int]) -> None:
        """Put these groups into the replacement reserve: RESERVED -> SPARE (`admitted`
        takes a spare later, with `replaces=`)."""
        self._events.append(Diverted(arguments.group_list("diverted", group_ids, self._j.path)))

    @_transition()
    def admitted(self, group_ids: Iterable[int], *, target_step: int, policy_version: int | None = None,
                 replaces: int | None = None, rollouts: int | None = None) -> None:
        """Admit groups for generation, to be trained at `target_step`: RESERVED or SPARE ->
        ADMITTED. `policy_version`: the weights that generate them; `replaces`: the group a
        spare substitutes for (it must have been taken; in one transaction with `discarded`
        of the failed group, a spare replaces it atomically); with `rollouts=N` each of their
        N rollouts is tracked (sealed and failed one by one, by attempt; see
        `rollout_sealed`)."""
        self._events.append(Admitted(arguments.group_list("admitted", group_ids, self._j.path), target_step,
                                     policy_version, replaces, rollouts))

    @_transition()
    def finished(self, group_ids: Iterable[int], *, policy_version: int | None = None,
                 locators: Sequence[str] | None = None) -> None:
        """Record that these groups' rows are durable in the data plane: ADMITTED -> REPLAY
        (a restore trains them directly, never regenerates them). `policy_version`: the
        weights that generated them (default: the admitting one); `locators`: one data-plane
        locator per group, in order (write the rows first). A group admitted with
        `rollouts=N` needs all N sealed (by this commit's `rollout_sealed` too) and takes no
        locator (its rows are its rollouts'). A locator count other than the groups' is an
        `OwnershipError`."""
        self._events.append(Finished(arguments.group_list("finished", group_ids, self._j.path), policy_version,
                                     list(locators) if locators is not None else None))

    @_transition()
    def trained(self, group_ids: Iterable[int], *, step: int) -> None:
        """Record that the update of training step `step` uses these groups (journal it
        before the update): REPLAY -> TRAINED, for good."""
        self._events.append(Trained(arguments.group_list("trained", group_ids, self._j.path), step))

    @_transition()
    def rollout_sealed(self, refs: Sequence[RolloutRef], *, policy_version: int | None = None,
                       since_version: int | None = None) -> None:
        """Record that these rollouts' results are durable in the data plane, each at its
        `RolloutRef.locator` (required): the group stays ADMITTED -> ADMITTED, the rollout is
        sealed. The group must have been admitted with `rollouts=N`, the rollout unsealed and
        named with its current attempt: a late result of an attempt that was given up raises
        `StaleAttempt` (an `OwnershipError`) and nothing is written. `policy_version`: the
        (newest) version of the weights that generated it; `since_version`: the oldest, when
        other weights made some of it (a rollout generated across a weight update). The journal
        keeps the newest and the oldest of these and of the prefix the rollout completes (a
        rollout continued from a prefix spans the prefix's versions too)."""
        self._events.append(RolloutSealed(arguments.rollout_list("rollout_sealed", refs, self._j.path),
                                          policy_version, since_version))

    @_transition()
    def rollout_failed(self, refs: Sequence[RolloutRef], *, reason: str) -> None:
        """Give these rollouts up (`reason` says why): the group stays ADMITTED -> ADMITTED,
        each rollout's attempt goes up by one (dispatch it again with that attempt; a result
        of the old one is then refused as stale). The same rules as `rollout_sealed`, no
        locator."""
        self._events.append(RolloutFailed(arguments.rollout_list("rollout_failed", refs, self._j.path), reason))

    @_transition()
    def rollout_progress(self, ref: RolloutRef, *, tokens: int, turn: int | None = None,
                         policy_version: int | None = None, since_version: int | None = None) -> None:
        """Record a durable prefix of one rollout's result: its partial row (the tokens so far,
        or the turns so far and the environment's exported state) is in the data plane at
        `ref.locator` (required), holding `tokens` tokens and, for a multi-turn rollout,
        `turn` completed turns, generated by weights `policy_version`. The group stays ADMITTED
        -> ADMITTED. The fence of `rollout_sealed`: a rollout of a group admitted with
        `rollouts=N`, unsealed (else `RolloutEnded`), named with its current attempt (else
        `StaleAttempt`). It supersedes the rollout's previous progress; a seal or a failure
        ends it, and a restore hands the latest back for the next attempt to continue from.
        `since_version`: as `rollout_sealed`'s (a newer prefix of the attempt spans the
        versions of the one before it)."""
        self._events.append(RolloutProgress(arguments.progress_ref(ref, self._j.path), tokens, turn,
                                            policy_version, since_version))

    @_transition()
    def discarded(self, group_ids: Iterable[int], *, reason: str) -> None:
        """Drop these groups for good (`reason`: why, counted by the audit): any live owner
        (RESERVED, ADMITTED, REPLAY, SPARE) -> DROPPED; tracked rollouts go with them."""
        self._events.append(Discarded(arguments.group_list("discarded", group_ids, self._j.path), reason))

    @_transition()
    def begin_checkpoint(self, *, step: int) -> None:
        """Mark that the state at the commit's LSN is what the trainer's step-`step`
        checkpoint captures (no group moves). Begin, save the weights durably, then
        `commit_checkpoint`; save the LSN with the weights. An `OwnershipError` too when
        `step` is at or below a committed step or a checkpoint this writer began is not
        committed yet (checked at the call, after the events recorded before it in the same
        commit), and a `ValueError` for a negative step."""
        arguments.checkpoint_step("begin_checkpoint", step, self._j.path)
        if type(self._events) is list:  # outside the block the append refuses it
            self._j._refuse_begin(step, self._events)
        self._events.append(CheckpointBegun(step))

    @_transition()
    def commit_checkpoint(self, *, step: int) -> None:
        """Mark the step-`step` checkpoint durable (call once the trainer's files are
        fsynced): restore lands on its `begin_checkpoint` LSN from now on. No group moves. An
        `OwnershipError` too when step `step` was not begun, and a `ValueError` for a negative
        step."""
        self._events.append(CheckpointCommitted(arguments.checkpoint_step("commit_checkpoint", step,
                                                                            self._j.path)))

    @_transition()
    def record_identity(self, identity: Mapping[str, Any]) -> None:
        """Record the run identity from this commit on: `identity` maps str keys (the
        tokenizer, the sampling parameters, the prompt template, the reward version) to values
        of the types a fingerprint encodes (str, int, float, bool, None, bytes, lists, dicts,
        tensors); per key the fingerprint of its value is stored (`journal/identity.py`), and
        it replaces the identity recorded before. No group moves. `Journal.open(identity=)`
        calls it only when the identity differs from the one recorded; a `TypeError` names a
        key that is not a str or a value that cannot be fingerprinted."""
        self._events.append(IdentityRecorded(digests(identity)))

    @_transition()
    def record_restore(self, restored: Restored) -> None:
        """Record what a restore decided (`Restored`: the point and checkpoint it restored, the
        crash point, the work it kept by lead and what it regenerated). No group moves.
        `Journal.open(resume=state)` records the restore's own in its first commit; a
        `TypeError` for anything but a `Restored`."""
        if not isinstance(restored, Restored):
            raise TypeError(f"record_restore() takes a journal.Restored, not {type(restored).__name__}")
        self._events.append(restored)


class _OneEvent(Transaction):
    """The transaction of a `Journal.<call>`: the call records its one event into it under the
    journal's lock, which the call holds from the check to the commit's queueing, as a
    transaction's block does. Nobody else holds it, so it keeps no phase of its own."""

    __slots__ = ()

    def __init__(self, journal):
        self._j, self._events, self._blobs, self._next_gid = journal, [], {}, None


def queue_one(journal, record, args: tuple, kwargs: dict):
    """(the commit queued, what `record` returned) of the one event the `Transaction` method
    `record` records on `journal`; the journal's lock is held on return (for the caller's
    `CommitPipeline._await_commit`, or to let go of), and let go of when it raises."""
    tx = _OneEvent(journal)
    lock = journal._lock
    lock.acquire()
    try:
        journal._check_usable()
        result = record(tx, *args, **kwargs)
        return journal._enqueue(tx._events, tx._blobs), result
    except BaseException:
        lock.release()
        raise


def _one_event(name: str):
    """`Journal.<name>`: a transaction of the one event `Transaction.<name>` records."""
    record = getattr(Transaction, name)

    def call(self, *args, **kwargs):
        pending, result = queue_one(self, record, args, kwargs)
        lsn = self._await_commit(pending)  # lets go of the lock
        return result if result is not None else lsn

    sig = inspect.signature(record)
    call.__signature__ = sig if name == "taken" else sig.replace(return_annotation="int")
    call.__name__, call.__qualname__ = name, f"Journal.{name}"
    call.__doc__ = record.journal_doc
    return call


def add_one_event_calls(journal_class: type) -> None:
    """Give `journal_class` (`Journal`) a call per event kind (`events.py`), `Transaction`'s own."""
    for kind in EVENT_TYPES:
        call = _one_event(kind.call)
        call.__module__ = journal_class.__module__
        setattr(journal_class, kind.call, call)
