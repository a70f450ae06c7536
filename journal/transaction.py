"""The transition calls on a commit in the making: `Transaction` (a journal's, made when its
`with` block ends), `Journal.<call>` (a transaction of that one event) and `Draft` (no journal:
a commit planned now for a writer to make later, such as a resume's first commit).

Each call is its kind's, written once in the table of kinds (`kinds.py`: its arguments' checks,
the event it builds, what it returns) and installed here on every recorder: `Transaction`,
`Draft` and `Journal` get one method per kind (`AsyncJournal` its own, `async_journal.py`).
"""

from __future__ import annotations

import inspect
import types
import weakref

from .errors import OwnershipError, TransactionClosed
from .kinds import KIND_OF, KINDS, Kind, checkpoint_marks
from .rules import begin_refused
from .state import State


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
        raise TransactionClosed(f"{KIND_OF[type(event)].call}() on {what}, so nothing was "
                                "recorded; use `with journal.transaction() as tx:` and call tx "
                                "methods inside the block")


_NOT_ENTERED = _Refusing(None)


class _Recorder:
    """What a kind's call records into (`Kind.record(recorder, ...)`): the events of one commit
    (`_events`), the loader-state blobs they reference (`_blobs`), the next id a `taken`
    allocates (`_next_gid`; None: the recorder's first free one) and the journal directory its
    messages name (`_path`)."""

    __slots__ = ("_events", "_blobs", "_next_gid", "_path")

    def _first_free_id(self) -> int:
        """The lowest id a `taken` may allocate: above every id of the history it goes on."""
        raise NotImplementedError

    def _refuse_begin(self, step: int, queued: list) -> None:
        """OwnershipError, nothing recorded, when the checkpoint protocol refuses
        `begin_checkpoint(step)` after the `queued` events of the commit."""
        raise NotImplementedError


def _refuse_begin(state: State, step, begun_after: int, queued: list, where: str) -> None:
    """OwnershipError when the checkpoint protocol refuses `checkpoint_begun(step)` after the
    `queued` events of the commit that follows `state` (`rules.begin_refused`; checkpoints
    begun after LSN `begun_after` are the recorder's own); `where` names the journal."""
    if not isinstance(step, int):
        return  # not a step at all: the schema's message names it
    why = begin_refused(state, step, begun_after=begun_after, queued=checkpoint_marks(queued))
    if why is not None:
        lsn = state.lsn + 1
        raise OwnershipError(f"{why} ({where}, commit LSN {lsn}; nothing was written)", lsn=lsn)


class Transaction(_Recorder):
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

    __slots__ = ("_j", "_held", "_phase", "lsn", "__weakref__")

    def __init__(self, journal):
        self._j, self._path = journal, journal.path
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

    def _first_free_id(self) -> int:
        return self._j._state.next_group_id

    def _refuse_begin(self, step: int, queued: list) -> None:
        # the checkpoints begun after the writer opened the history are its own
        j = self._j
        _refuse_begin(j._state, step, j._open_lsn, queued, f"journal {j.path}")


class _OneEvent(Transaction):
    """The transaction of a `Journal.<call>`: the call records its one event into it under the
    journal's lock, which the call holds from the check to the commit's queueing, as a
    transaction's block does. Nobody else holds it, so it keeps no phase of its own."""

    __slots__ = ()

    def __init__(self, journal):
        self._j, self._path, self._events, self._blobs, self._next_gid = journal, journal.path, [], {}, None


class Draft(_Recorder):
    """Transitions recorded with no journal, for a writer to commit later: each call checks its
    arguments and builds its event exactly as `Transaction`'s does, into `events` (the blobs a
    loader state in them references into `blobs`), and returns what it returns there. A
    restore plans a resume's first commit as drafts (`ResumePlan.first_commit`), and
    `Journal.open(resume=...)` commits it under the ownership rules, as every commit.

    `state` is where that commit goes on: a `taken` allocates ids above `state.next_group_id`
    (a given one must be), a `begin_checkpoint` is refused as a writer opened at `state`
    refuses it. `path`: the journal directory its messages name."""

    __slots__ = ("_state",)

    def __init__(self, state: State, path: str):
        self._state, self._path = state, path
        self._events: list = []
        self._blobs: dict[bytes, bytes] = {}
        self._next_gid: int | None = None

    @property
    def events(self) -> list:
        """The events recorded so far, in order."""
        return self._events

    @property
    def blobs(self) -> dict[bytes, bytes]:
        """The loader-state blobs the events reference (digest -> bytes)."""
        return self._blobs

    def __repr__(self) -> str:
        return f"<Draft for journal {self._path} after LSN {self._state.lsn}, {len(self._events)} event(s)>"

    def _first_free_id(self) -> int:
        return self._state.next_group_id

    def _refuse_begin(self, step: int, queued: list) -> None:
        _refuse_begin(self._state, step, self._state.lsn, queued, f"a draft for journal {self._path}")


_IN_TRANSACTION = ("\n\nIn a transaction: recorded into its commit, made when the block ends;\n"
                   "returns {returns}. Raises as the class docstring says.")
_IN_DRAFT = ("\n\nIn a draft: recorded into `events`, for a writer to commit later; returns\n"
             "{returns}. Raises what `Transaction.{call}` raises at the call.")
_ONE_EVENT = ("\n\nOn the journal: a transaction of this one event; returns {returns}\n"
              "once its commit is durable. Raises as every transition does (class docstring).")


def _returns(kind: Kind) -> tuple[str, str]:
    """What `kind`'s call returns on the journal, and in a transaction or a draft."""
    return kind.returns if kind.returns is not None else ("the commit's LSN", "None")


def _signature(kind: Kind, returns: str | None = None) -> inspect.Signature:
    """The call's signature as a method (its recorder `self`), returning `returns` if given."""
    sig = inspect.signature(kind.record)
    first, *params = sig.parameters.values()
    sig = sig.replace(parameters=[first.replace(name="self"), *params])
    return sig if returns is None else sig.replace(return_annotation=returns)


def _method(kind: Kind, owner: type, doc: str):
    """`kind`'s call as a method of `owner` with docstring `doc`: the call's own code, in a
    function of its own (so each class documents it its way)."""
    record = kind.record
    method = types.FunctionType(record.__code__, record.__globals__, kind.call, record.__defaults__,
                                record.__closure__)
    method.__kwdefaults__ = record.__kwdefaults__
    method.__qualname__, method.__module__ = f"{owner.__name__}.{kind.call}", owner.__module__
    method.__doc__, method.__signature__ = doc, _signature(kind)
    return method


def queue_one(journal, record, args: tuple, kwargs: dict):
    """(the commit queued, what `record` returned) of the one event a kind's call `record`
    (`Kind.record`) records on `journal`; the journal's lock is held on return (for the caller's
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


def _one_event(kind: Kind):
    """`Journal.<call>`: a transaction of the one event `kind`'s call records."""
    record = kind.record

    def call(self, *args, **kwargs):
        pending, result = queue_one(self, record, args, kwargs)
        lsn = self._await_commit(pending)  # lets go of the lock
        return result if result is not None else lsn

    call.__signature__ = _signature(kind, None if kind.returns is not None else "int")
    call.__name__, call.__qualname__ = kind.call, f"Journal.{kind.call}"
    call.__doc__ = inspect.cleandoc(record.__doc__) + _ONE_EVENT.format(returns=_returns(kind)[0])
    return call


def add_one_event_calls(journal_class: type) -> None:
    """Give `journal_class` (`Journal`) a call per event kind (`kinds.KINDS`), `Transaction`'s own."""
    for kind in KINDS:
        call = _one_event(kind)
        call.__module__ = journal_class.__module__
        setattr(journal_class, kind.call, call)


def _install_calls() -> None:
    """The recorders' calls, one per kind, each documented as its class runs it."""
    for kind in KINDS:
        body, returns = inspect.cleandoc(kind.record.__doc__), _returns(kind)[1]
        setattr(Transaction, kind.call, _method(kind, Transaction, body + _IN_TRANSACTION.format(returns=returns)))
        setattr(Draft, kind.call, _method(kind, Draft, body + _IN_DRAFT.format(returns=returns, call=kind.call)))


_install_calls()
