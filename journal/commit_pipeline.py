"""The writer's group commit (`CommitPipeline`, a part of `Journal`).

A commit runs in two halves. Under the journal's lock it is checked and folded into the
in-memory state (an illegal transition raises here and nothing is queued), given the next LSN
and encoded (`submit`). Then one thread, the leader, takes every queued commit, writes them as
one frame per segment and fsyncs once; the other committers wait for it (`wait_durable`). If
the write or the fsync fails, the queued commits are taken back out of the state, the journal
fails (fail-stop) and every later call raises `JournalFailed`: the bytes on disk are unknown,
and retrying an fsync that failed can report success for lost data.
"""

from __future__ import annotations

import collections
from _thread import allocate_lock as _allocate_lock
from typing import Callable, Sequence, TypeVar

import msgspec

from . import arguments
from . import format as fmt
from .errors import JournalClosed, JournalError, JournalFailed
from .events import Blob, Commit, Taken, commit_encoder
from .events import commit_decoder as _commit_decoder
from .fold import apply
from .kinds import ARGUMENT_RULES
from .position import Position
from .state import Undo
from .segments import SegmentPlan
from .transaction import Transaction, queue_one

T = TypeVar("T")
RECENT_FRAMES = 256   # the frames whose positions the writer remembers (`frame_position`)


class Pending:
    """A commit queued, folded and not yet durable; `lsn` is its LSN."""

    __slots__ = ("segment", "prefixed", "lsn", "undo", "chain", "waiter")

    def __init__(self, segment: SegmentPlan, prefixed: bytes, lsn: int, undo: Undo, chain: int):
        self.segment, self.lsn, self.undo = segment, lsn, undo
        self.prefixed = prefixed  # the encoded commit as its frame holds it (format.length_prefixed)
        self.chain = chain  # the chain after this commit
        self.waiter = None  # a held lock its committer sleeps on (see `_await_commit`)


def _wake(pendings: list[Pending]) -> None:
    """Release the committers sleeping on these commits (journal lock held)."""
    for p in pendings:
        w = p.waiter
        if w is not None:
            p.waiter = None
            w.release()


def _encode(lsn: int, events: list, refs: Sequence[bytes], blobs: dict[bytes, bytes], seg: SegmentPlan) -> bytes:
    new = [Blob(d, blobs[d]) for d in dict.fromkeys(refs) if d not in seg.blobs] if refs else []
    return commit_encoder.encode(Commit(lsn, events, new))


class CommitPipeline:
    """The commit path of `Journal`: queueing (`submit`), the group commit (`wait_durable`),
    `flush` and fail-stop. Its fields are set by `Journal.open`."""

    # -- the public seam (AsyncJournal) -------------------------------------------------

    def submit(self, fill: Callable[[Transaction], T]) -> tuple[Pending | None, T]:
        """Queue the commit of the transitions `fill(tx)` records on a new transaction: checked
        and folded, not durable yet. Returns (the queued commit, whose `lsn` is its LSN, or None
        when `fill` recorded nothing; what `fill` returned). An illegal transition raises and
        nothing is queued. Make it durable with `wait_durable(pending.lsn)`."""
        tx = Transaction(self)
        tx.__enter__()
        try:
            result = fill(tx)
        except BaseException:
            tx._end(commit=False)
            raise
        return tx._end(commit=True), result

    def submit_event(self, name: str, args: tuple, kwargs: dict) -> tuple[Pending, object]:
        """`submit` of the one transition `Journal.<name>(*args, **kwargs)` records, without a
        `Transaction` of its own: (the queued commit, what the transition returns)."""
        pending, result = queue_one(self, getattr(Transaction, name), args, kwargs)
        self._lock.release()
        return pending, result

    def wait_durable(self, lsn: int) -> int:
        """Return once commit `lsn` is durable (the caller may lead the group commit that makes
        it so); the LSN everything up to which is durable then. `JournalFailed` when the write
        of a commit up to `lsn` failed (`durable_lsn` then says which are durable)."""
        with self._cond:
            self._wait(lsn)
            return self._durable_lsn

    def frame_position(self, lsn: int) -> Position | None:
        """Where the frame holding commit `lsn` starts (`journal.position.Position`, without a
        group bound or blobs), when it is one of the last RECENT_FRAMES this writer wrote and is
        durable; None otherwise (a reader finds it by reading the segment)."""
        with self._lock:
            if lsn > self._durable_lsn:
                return None
            for last, timeline, segment_lsn, offset, first, chain in reversed(self._frames):
                if first <= lsn <= last:
                    return Position(timeline, segment_lsn, offset, first, chain, 0)
                if last < lsn:
                    return None
        return None

    @property
    def durable_lsn(self) -> int:
        """Every commit up to this LSN is durable (written, and fsynced under sync="always")."""
        with self._lock:
            return self._durable_lsn

    # -- queueing --------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise JournalFailed(f"journal {self.path} failed earlier ({self._failed!r}) and refuses "
                                "every call; reopen it to see what is on disk") from None
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")

    def _commit(self, events: list, blobs: dict[bytes, bytes] | None = None) -> int:
        self._lock.acquire()
        try:
            self._check_usable()
            pending = self._enqueue(events, blobs or {})
        except BaseException:
            self._lock.release()
            raise
        return self._await_commit(pending)

    def _enqueue(self, events: list, blobs: dict[bytes, bytes]) -> Pending:
        state = self._state
        lsn = state.lsn + 1
        seg = self._segment
        # the digests of the loader-state blobs the commit references (only a taken() with
        # loader_state= brings blobs along)
        refs = [d for ev in events if type(ev) is Taken and ev.loader_state is not None
                for d in ev.loader_state.refs] if blobs else ()
        try:
            record = _encode(lsn, events, refs, blobs, seg)
        except (TypeError, OverflowError) as exc:  # a value msgpack cannot hold
            raise self._bad_argument(lsn, events, exc) from None
        if self._files.policy.overflows(seg.size, len(record)):
            seg = self._files.plan_next(self.run_id, self.timeline, seg, lsn, state.chain,
                                        state.next_group_id)
            record = _encode(lsn, events, refs, blobs, seg)
        # Encoding does not check field types, decoding does: the commit is decoded before it
        # is folded, so a value of the wrong type is refused here with nothing written, and
        # the fold runs on exactly what every reader will fold.
        try:
            commit = _commit_decoder.decode(record)
        except msgspec.ValidationError as exc:
            raise self._bad_argument(lsn, events, exc) from None
        prefixed = fmt.length_prefixed(record)
        chain = fmt.frame_chain(prefixed, state.chain)
        table = {d: blobs[d] for d in refs} if refs else None
        undo = apply(state, commit, chain=chain, timeline=self.timeline, blobs=table)
        seg.blobs.update(refs)
        seg.size += fmt.FRAME_HEADER_SIZE + len(prefixed)
        self._segment = seg
        p = Pending(seg, prefixed, lsn, undo, chain)
        self._pending.append(p)
        return p

    def _bad_argument(self, lsn: int, events: list, exc: Exception) -> Exception:
        """The error for a commit whose events do not fit the schema, naming the argument."""
        found = arguments.explain(events, ARGUMENT_RULES)
        cls, what = (type(found), str(found)) if found is not None else (TypeError, f"{exc}")
        return cls(f"{what} (journal {self.path}, commit LSN {lsn}; nothing was written)")

    # -- the group commit ------------------------------------------------------------------

    def _await_commit(self, mine: Pending) -> int:
        """Return once commit `mine` is written (and fsynced under sync="always"), letting go
        of the journal lock the caller took once for it.

        While a batch is in flight the committer sleeps on a lock of its own, so a batch wakes
        its committers only, not every thread waiting on the journal; one woken because its
        commit is durable returns without taking the journal lock again. With no batch in
        flight, or handed the lead (`_pass_lead`), it leads (`_wait`)."""
        lock, held = self._lock, True
        try:
            while self._flushing and self._failed is None and self._durable_lsn < mine.lsn:
                waiter = _allocate_lock()
                waiter.acquire()
                mine.waiter = waiter
                saved = lock._release_save()  # fully, like Condition.wait
                held = False
                try:
                    waiter.acquire()
                except BaseException:  # interrupted: do not stay the one the lead is handed to
                    lock._acquire_restore(saved)
                    held = True
                    mine.waiter = None
                    if not self._flushing:
                        self._pass_lead()
                    raise
                if saved[0] == 1 and self._failed is None and self._durable_lsn >= mine.lsn:
                    return mine.lsn
                lock._acquire_restore(saved)
                held = True
            return self._wait(mine.lsn)
        finally:
            if held:
                lock.release()

    def _wait(self, lsn: int) -> int:
        """Return once commit `lsn` is written (and fsynced under sync="always"); lock held.

        With no batch in flight the caller leads: it writes every queued commit as one batch,
        then wakes that batch's committers and hands the lead to the oldest queued one."""
        while True:
            if self._failed is not None:
                self._check_usable()
            if self._durable_lsn >= lsn:
                return lsn
            if self._flushing:
                self._cond.wait()
                continue
            self._flushing = True
            batch, self._pending = self._pending, []
            self._cond.release()
            error = None
            try:
                frames = self._write_batch(batch)
            except BaseException as exc:  # fail-stop on anything, including KeyboardInterrupt
                error = exc
            finally:
                self._cond.acquire()
            self._flushing = False
            if error is not None:
                self._fail(error, batch)
                raise JournalFailed(f"journal {self.path}: writing LSNs {batch[0].lsn}..{batch[-1].lsn} "
                                    f"failed: {error!r}; the journal now refuses every call") from error
            self._frames.extend(frames)
            self._durable_lsn = batch[-1].lsn
            if self._replica is not None and self.sync == "always":
                self._note_durable()
            _wake(batch)
            self._pass_lead()

    def _pass_lead(self) -> None:
        """No batch in flight any more: wake the oldest queued committer (it leads the next
        batch) and every thread waiting on the condition."""
        for p in self._pending:
            if p.waiter is not None:
                _wake([p])
                break
        self._cond.notify_all()

    def _fail(self, error: BaseException, batch: list[Pending]) -> None:
        self._failed = error
        _wake(batch)
        _wake(self._pending)
        self._cond.notify_all()
        for p in reversed(batch + self._pending):
            p.undo.revert(self._state)
        self._pending = []

    def _write_batch(self, batch: list[Pending]) -> list[tuple]:
        """Write queued commits as one frame per segment, rotating where the plan says, then
        fsync; (last LSN, timeline, segment LSN, offset, first LSN, chain before) of each frame
        written (`frame_position`)."""
        files, frames = self._files, []
        i, n = 0, len(batch)
        while i < n:
            seg = batch[i].segment
            j = n
            if batch[-1].segment is not seg:  # the batch goes on in a later segment
                j = i + 1
                while batch[j].segment is seg:
                    j += 1
            at = files.write_frame(seg, fmt.frame_of_prefixed([p.prefixed for p in batch[i:j]], batch[j - 1].chain))
            head = seg.header
            frames.append((batch[j - 1].lsn, head.timeline, head.first_lsn, at, batch[i].lsn, self._written_chain))
            self._written_chain = batch[j - 1].chain
            i = j
        if self.sync != "always":
            self._dirty = True
        files.batch_written()
        return frames

    # -- flushing --------------------------------------------------------------------------

    def _sync_loop(self) -> None:
        while not self._stop_syncer.wait(self.sync_interval):
            with self._cond:
                if self._closed or self._failed is not None:
                    return
            try:
                self.flush()
            except JournalError:
                return

    def flush(self) -> None:
        """Make every commit so far durable (fsync), whatever the sync mode; returns once it
        is. Raises `JournalFailed` when the fsync fails (the journal is then fail-stop) or
        failed earlier, `JournalClosed` after `close()`."""
        with self._cond:
            self._check_usable()
            while self._flushing:
                self._cond.wait()
            # re-check: the flush or batch waited for may have failed (fail-stop: never fsync
            # again after a failed fsync and report success)
            self._check_usable()
            if self._pending:
                self._wait(self._pending[-1].lsn)
            if not self._dirty:
                return
            self._flushing = True
            self._cond.release()
            error = None
            try:
                self._files.sync_all()
            except BaseException as exc:
                error = exc
            finally:
                self._cond.acquire()
                self._flushing = False
            if error is not None:
                self._fail(error, [])
                self._cond.notify_all()
                raise JournalFailed(f"journal {self.path}: fsync failed: {error!r}; the journal now "
                                    "refuses every call") from error
            self._dirty = False
            if self._replica is not None:
                self._note_durable()
            self._files.close_sealed()
            self._pass_lead()

