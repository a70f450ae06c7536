"""Each event kind, declared once: the table of kinds (`KINDS`).

A kind is its record (its struct in `events.py`: the tag, the fields and their bounds) and its
row here, a `Kind`: the call that records it, the owners a group it names may have and where it
moves them, its fold step (`rules.py`), what it names (groups, rows taken, rollouts, the attempt
a rollout event shows dispatched, the checkpoint it marks) and how inspection shows it (a
JSON-ready row and a line of text). Everything else reads those:

* the fold's dispatch (`fold.py`), the ownership table (`TRANSITIONS`) and the README's
  (`transition_table_markdown`);
* the transition calls of `Transaction`, `Draft`, `Journal` and `AsyncJournal`
  (`transaction.py`, `async_journal.py`) and the argument messages (`ARGUMENT_RULES`);
* the readers (the row ledger, the audit, the dead tail, `ever`, `journal-inspect`), which
  walk the projections (`groups`, `takes`, `rollouts`, `dispatched`, `row`, `text`) or name
  the kinds they fold with `handlers`, never testing an event's type.

Adding a kind is its struct in `events.py` (and in `EVENT_TYPES`) and its row here; a kind that
moves no group and needs no text of its own declares nothing but its call.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import msgspec

from . import arguments, rules
from . import loader_state as _loader_state
from .events import (EVENT_TYPES, LIVE_OWNERS, Admitted, CheckpointBegun, CheckpointCommitted, Discarded,
                     Diverted, Finished, GroupRef, IdentityRecorded, Owner, Restored, RolloutFailed,
                     RolloutProgress, RolloutRef, RolloutSealed, Taken, TakenGroup, Trained)
from .identity import digests, hex_line, to_hex
from .state import LoaderState


def _nothing(event) -> tuple:
    return ()


def _unchanged(kind, state):
    """The fold step of a kind that changes no state (a record, such as `restored`)."""
    return _nothing_to_fold


def _nothing_to_fold(state, event, lsn: int, record, undo, blobs) -> None:
    pass


def _json(value):
    """`value` as JSON holds it: a struct as a map of its fields, bytes as hex."""
    if isinstance(value, msgspec.Struct):
        return {f: _json(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value.hex() if isinstance(value, bytes) else value


def _fields_row(event) -> dict:
    """An event's own fields, JSON-ready, less the groups it moves (its row's `groups`)."""
    return {f: _json(getattr(event, f)) for f in event.__struct_fields__ if f != "groups"}


def _fields_text(event, focus=None) -> str:
    """`key=value` of the fields of its row that hold something."""
    return " ".join(f"{k}={v}" for k, v in _fields_row(event).items() if v is not None)


class Kind:
    """One event kind: its record and everything said of it (see the module docstring).

    `struct`: its record; `name`: its tag; `call`: the method of `Journal`, `Transaction`,
    `Draft` and `AsyncJournal` that records it; `record(recorder, ...)`: that call's body
    (argument checks, the event it builds, what it returns); `from_owners`: the owners a group
    it names may have (empty for `taken`: the group comes from the loader, which the journal
    does not track); `to`: where it moves them (None: it moves no group); `fold(kind, state)`:
    the factory of `rules.py` that makes its fold step on `state` from this declaration (none:
    it changes no state); `checkpoint`: the checkpoint it marks (`rules.Mark`, None for other
    kinds).

    Projections, each of an event of the kind: `groups` (the group ids it names: the ids a
    `taken` allocated, a rollout event's groups), `takes` (the `TakenGroup` rows it takes from
    the loader), `rollouts` (the `RolloutRef`s it names), `dispatched(ref)` (the attempt of
    rollout `ref` it shows dispatched; None for a kind that names no rollout), `row` (its own
    fields, JSON-ready) and `text(event, focus)` (them on one line; `focus`, (idx, task or
    None), brings a `taken`'s matching rows first)."""

    __slots__ = ("struct", "name", "call", "record", "from_owners", "to", "fold", "checkpoint", "groups",
                 "takes", "rollouts", "dispatched", "row", "text", "returns", "moves_into")

    def __init__(self, struct: type, record: Callable, *, from_owners: Iterable[Owner] = (),
                 to: Owner | None = None, fold: Callable | None = None, checkpoint: rules.Mark | None = None,
                 groups: Callable = _nothing, takes: Callable = _nothing, rollouts: Callable = _nothing,
                 dispatched: Callable | None = None, row: Callable = _fields_row,
                 text: Callable = _fields_text):
        self.struct, self.name, self.call, self.record = struct, struct.__struct_config__.tag, record.__name__, record
        self.from_owners, self.to = frozenset(from_owners), to
        self.checkpoint, self.groups, self.takes, self.rollouts = checkpoint, groups, takes, rollouts
        self.dispatched, self.row, self.text = dispatched, row, text
        self.fold = fold if fold is not None else _unchanged
        # what the call returns, when it returns more than the commit's LSN (`_returning`)
        self.returns: tuple[str, str] | None = getattr(record, "returns", None)
        # the owner its groups enter (None: it moves none, or keeps them where they are)
        self.moves_into = to if to is not None and to not in self.from_owners else None

    def __repr__(self) -> str:
        return f"<Kind {self.name}>"


def _returning(journal: str, transaction: str):
    """A call that returns a value: what `Journal.<call>` and `Transaction.<call>` return (the
    other calls: the commit's LSN on the journal, None in a transaction)."""
    def mark(call):
        call.returns = (journal, transaction)
        return call
    return mark


# Each kind below: its call (whose docstring is the method's, `transaction.py` adding what it
# returns and raises there), its projections, then its row of the table (`KINDS`, at the end).

# -- taken ---------------------------------------------------------------------------------------

@_returning("the group ids", "the group ids (valid once the block commits)")
def taken(tx, refs: Sequence[GroupRef], *, loader_state: Any = None, dataset_size: int | None = None) -> list[int]:
    """Record that the loader handed out `refs` (one `GroupRef` per row: idx, task name,
    epoch, fingerprint): from the loader to RESERVED. The group ids allocated to them, in
    order, are above every id the journal ever allocated (a `GroupRef.group_id` given
    explicitly must be: else an `OwnershipError`). `loader_state` is the loader's
    `state_dict()` *after* the take, what a restore hands back (a `LoaderState` read back from
    a journal is recorded as it is, packed); `dataset_size=len(dataset)` records the dataset's
    length, which restore checks."""
    refs = arguments.group_refs(refs, tx._path)
    packed = None
    if loader_state is not None:
        packed, blobs = ((loader_state.packed, loader_state.blobs) if isinstance(loader_state, LoaderState)
                         else _loader_state.pack(loader_state))
        tx._blobs.update(blobs)
    first = tx._first_free_id() if tx._next_gid is None else tx._next_gid
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
        rules.taken_next_id(groups, first, None)
    tx._next_gid = nxt
    tx._events.append(Taken(groups, packed, dataset_size))
    return [g.group_id for g in groups]


def _taken_groups(event: Taken) -> list[int]:
    return [g.group_id for g in event.groups]


def _taken_rows(event: Taken) -> list[TakenGroup]:
    return event.groups


def _taken_row(event: Taken) -> dict:
    return {"rows": [{"group_id": g.group_id, "idx": g.idx, "task_name": g.task_name, "epoch": g.epoch,
                      "fingerprint": _json(g.fingerprint)} for g in event.groups],
            "loader_state": event.loader_state is not None}


def _taken_text(event: Taken, focus: tuple[int, str | None] | None = None) -> str:
    gs = event.groups
    parts = [_idx_text(gs, focus)]
    tasks = sorted({g.task_name for g in gs}, key=lambda x: (x is None, x or ""))
    if tasks != [None]:
        parts.append("task=" + ",".join("-" if x is None else x for x in tasks))
    epochs = sorted({g.epoch for g in gs}, key=lambda x: (x is None, x or 0))
    if epochs != [None]:
        parts.append("epoch=" + ",".join("-" if x is None else str(x) for x in epochs))
    if event.loader_state is not None:
        parts.append("loader_state")
    return " ".join(parts)


def _idx_text(groups, focus: tuple[int, str | None] | None) -> str:
    """The rows' idx values; the rows matching `focus` (idx, task or None) first, in brackets."""
    idxs = [g.idx for g in groups]
    if focus is not None:
        hit = [g for g in groups if g.idx == focus[0] and focus[1] in (None, g.task_name)]
        idxs = [f"[{g.idx}]" for g in hit] + [str(g.idx) for g in groups if g not in hit]
    elif len(idxs) > 1 and idxs == list(range(idxs[0], idxs[0] + len(idxs))):
        return f"idx={idxs[0]}..{idxs[-1]}"
    return "idx=" + ",".join(map(str, idxs[:8])) + (f" (+{len(idxs) - 8} more)" if len(idxs) > 8 else "")


# -- the moves of live groups --------------------------------------------------------------------

def _moved(event) -> list[int]:
    return event.groups


def diverted(tx, group_ids: Iterable[int]) -> None:
    """Put these groups into the replacement reserve: RESERVED -> SPARE (`admitted`
    takes a spare later, with `replaces=`)."""
    tx._events.append(Diverted(arguments.group_list("diverted", group_ids, tx._path)))


def admitted(tx, group_ids: Iterable[int], *, target_step: int, policy_version: int | None = None,
             replaces: int | None = None, rollouts: int | None = None) -> None:
    """Admit groups for generation, to be trained at `target_step`: RESERVED or SPARE ->
    ADMITTED. `policy_version`: the weights that generate them; `replaces`: the group a
    spare substitutes for (it must have been taken; in one transaction with `discarded`
    of the failed group, a spare replaces it atomically); with `rollouts=N` each of their
    N rollouts is tracked (sealed and failed one by one, by attempt; see
    `rollout_sealed`)."""
    tx._events.append(Admitted(arguments.group_list("admitted", group_ids, tx._path), target_step,
                               policy_version, replaces, rollouts))


def _admitted_text(event: Admitted, focus=None) -> str:
    parts = [f"target_step={event.target_step}"]
    if event.policy_version is not None:
        parts.append(f"policy={event.policy_version}")
    if event.replaces is not None:
        parts.append(f"replaces={event.replaces}")
    if event.rollouts is not None:
        parts.append(f"rollouts={event.rollouts}")
    return " ".join(parts)


def finished(tx, group_ids: Iterable[int], *, policy_version: int | None = None,
             locators: Sequence[str] | None = None) -> None:
    """Record that these groups' rows are durable in the data plane: ADMITTED -> REPLAY
    (a restore trains them directly, never regenerates them). `policy_version`: the
    weights that generated them (default: the admitting one); `locators`: one data-plane
    locator per group, in order (write the rows first). A group admitted with
    `rollouts=N` needs all N sealed (by this commit's `rollout_sealed` too) and takes no
    locator (its rows are its rollouts'). A locator count other than the groups' is an
    `OwnershipError`."""
    tx._events.append(Finished(arguments.group_list("finished", group_ids, tx._path), policy_version,
                               list(locators) if locators is not None else None))


def _finished_text(event: Finished, focus=None) -> str:
    parts = []
    if event.policy_version is not None:
        parts.append(f"policy={event.policy_version}")
    if event.locators:
        loc = event.locators
        parts.append("locator=" + ",".join(loc[:3]) + (f" (+{len(loc) - 3} more)" if len(loc) > 3 else ""))
    return " ".join(parts)


def trained(tx, group_ids: Iterable[int], *, step: int) -> None:
    """Record that the update of training step `step` uses these groups (journal it
    before the update): REPLAY -> TRAINED, for good."""
    tx._events.append(Trained(arguments.group_list("trained", group_ids, tx._path), step))


def discarded(tx, group_ids: Iterable[int], *, reason: str) -> None:
    """Drop these groups for good (`reason`: why, counted by the audit): any live owner
    (RESERVED, ADMITTED, REPLAY, SPARE) -> DROPPED; tracked rollouts go with them."""
    tx._events.append(Discarded(arguments.group_list("discarded", group_ids, tx._path), reason))


# -- rollouts ------------------------------------------------------------------------------------

def _rollout_groups(event) -> list[int]:
    return list(dict.fromkeys(r.group_id for r in event.rollouts))


def _named(event) -> Sequence[RolloutRef]:
    return event.rollouts


def rollout_sealed(tx, refs: Sequence[RolloutRef], *, policy_version: int | None = None,
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
    tx._events.append(RolloutSealed(arguments.rollout_list("rollout_sealed", refs, tx._path),
                                    policy_version, since_version))


def _sealed_row(event: RolloutSealed) -> dict:
    return {"rollouts": _json(event.rollouts), "policy_version": event.policy_version}


def _sealed_text(event: RolloutSealed, focus=None) -> str:
    return _refs_text(event.rollouts) + (f" policy={event.policy_version}" if event.policy_version is not None
                                         else "")


def _refs_text(refs: Sequence[RolloutRef]) -> str:
    """`group/index@attempt` of each rollout, with a locator it has."""
    shown = [f"{r.group_id}/{r.index}@{r.attempt}" + (f"={r.locator}" if r.locator is not None else "")
             for r in refs[:6]]
    return "rollout=" + ",".join(shown) + (f" (+{len(refs) - 6} more)" if len(refs) > 6 else "")


def rollout_failed(tx, refs: Sequence[RolloutRef], *, reason: str) -> None:
    """Give these rollouts up (`reason` says why): the group stays ADMITTED -> ADMITTED,
    each rollout's attempt goes up by one (dispatch it again with that attempt; a result
    of the old one is then refused as stale). The same rules as `rollout_sealed`, no
    locator."""
    tx._events.append(RolloutFailed(arguments.rollout_list("rollout_failed", refs, tx._path), reason))


def _failed_text(event: RolloutFailed, focus=None) -> str:
    return f"{_refs_text(event.rollouts)} reason={event.reason}"


def rollout_progress(tx, ref: RolloutRef, *, tokens: int, turn: int | None = None,
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
    tx._events.append(RolloutProgress(arguments.progress_ref(ref, tx._path), tokens, turn, policy_version,
                                      since_version))


def _progress_row(event: RolloutProgress) -> dict:
    return {"rollouts": _json(event.rollouts), "tokens": event.tokens, "turn": event.turn,
            "policy_version": event.policy_version}


def _progress_text(event: RolloutProgress, focus=None) -> str:
    return " ".join([_refs_text(event.rollouts), f"tokens={event.tokens}"]
                    + ([f"turn={event.turn}"] if event.turn is not None else [])
                    + ([f"policy={event.policy_version}"] if event.policy_version is not None else []))


# -- markers: no group moves ---------------------------------------------------------------------

def begin_checkpoint(tx, *, step: int) -> None:
    """Mark that the state at the commit's LSN is what the trainer's step-`step`
    checkpoint captures (no group moves). Begin, save the weights durably, then
    `commit_checkpoint`; save the LSN with the weights. An `OwnershipError` too when
    `step` is at or below a committed step or a checkpoint this writer began is not
    committed yet (checked at the call, after the events recorded before it in the same
    commit), and a `ValueError` for a negative step."""
    arguments.checkpoint_step("begin_checkpoint", step, tx._path)
    if type(tx._events) is list:  # outside the block the append refuses it
        tx._refuse_begin(step, tx._events)
    tx._events.append(CheckpointBegun(step))


def commit_checkpoint(tx, *, step: int) -> None:
    """Mark the step-`step` checkpoint durable (call once the trainer's files are
    fsynced): restore lands on its `begin_checkpoint` LSN from now on. No group moves. An
    `OwnershipError` too when step `step` was not begun, and a `ValueError` for a negative
    step."""
    tx._events.append(CheckpointCommitted(arguments.checkpoint_step("commit_checkpoint", step, tx._path)))


def record_identity(tx, identity: Mapping[str, Any]) -> None:
    """Record the run identity from this commit on: `identity` maps str keys (the
    tokenizer, the sampling parameters, the prompt template, the reward version) to values
    of the types a fingerprint encodes (str, int, float, bool, None, bytes, lists, dicts,
    tensors); per key the fingerprint of its value is stored (`journal/identity.py`), and
    it replaces the identity recorded before. No group moves. `Journal.open(identity=)`
    calls it only when the identity differs from the one recorded; a `TypeError` names a
    key that is not a str or a value that cannot be fingerprinted."""
    tx._events.append(IdentityRecorded(digests(identity)))


def _identity_row(event: IdentityRecorded) -> dict:
    return {"identity": to_hex(event.digests)}


def _identity_text(event: IdentityRecorded, focus=None) -> str:
    return hex_line(to_hex(event.digests))


def record_restore(tx, restored: Restored) -> None:
    """Record what a restore decided (`Restored`: the point and checkpoint it restored, the
    crash point, the work it kept by lead and what it regenerated). No group moves.
    `Journal.open(resume=state)` records the restore's own in its first commit; a
    `TypeError` for anything but a `Restored`."""
    if not isinstance(restored, Restored):
        raise TypeError(f"record_restore() takes a journal.Restored, not {type(restored).__name__}")
    tx._events.append(restored)


def _restored_text(event: Restored, focus=None) -> str:
    kept = ",".join(f"{k.lead}:{k.rollouts}r/{k.prefixes}p/{k.groups}g" for k in event.kept)
    return " ".join([f"point={event.point}", f"step={event.step}", f"crash_lsn={event.crash_lsn}",
                     f"lag={event.max_policy_lag}"] + ([f"kept_by_lead={kept}"] if kept else [])
                    + [f"dropped={k}:{n}" for k, n in event.dropped.items()]
                    + [f"regenerate={event.regenerate}"])


# -- the table -----------------------------------------------------------------------------------

_R, _A, _P, _S = Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE
_ROLLOUT = {"from_owners": {_A}, "to": _A, "groups": _rollout_groups, "rollouts": _named}

_SPECS = (
    Kind(Taken, taken, to=_R, fold=rules.take, groups=_taken_groups, takes=_taken_rows, row=_taken_row,
         text=_taken_text),
    Kind(Diverted, diverted, from_owners={_R}, to=_S, fold=rules.move, groups=_moved),
    Kind(Admitted, admitted, from_owners={_R, _S}, to=_A, fold=rules.admit, groups=_moved, text=_admitted_text),
    Kind(Finished, finished, from_owners={_A}, to=_P, fold=rules.finish, groups=_moved, text=_finished_text),
    Kind(Trained, trained, from_owners={_P}, to=Owner.TRAINED, fold=rules.end, groups=_moved),
    Kind(Discarded, discarded, from_owners=LIVE_OWNERS, to=Owner.DROPPED, fold=rules.end, groups=_moved),
    Kind(RolloutSealed, rollout_sealed, **_ROLLOUT, fold=rules.seal, dispatched=rules.dispatched_by_result,
         row=_sealed_row, text=_sealed_text),
    Kind(RolloutFailed, rollout_failed, **_ROLLOUT, fold=rules.fail, dispatched=rules.dispatched_by_failure,
         text=_failed_text),
    Kind(RolloutProgress, rollout_progress, **_ROLLOUT, fold=rules.extend, dispatched=rules.dispatched_by_result,
         row=_progress_row, text=_progress_text),
    Kind(CheckpointBegun, begin_checkpoint, fold=rules.checkpoint, checkpoint=rules.Mark.BEGUN),
    Kind(CheckpointCommitted, commit_checkpoint, fold=rules.checkpoint, checkpoint=rules.Mark.COMMITTED),
    Kind(IdentityRecorded, record_identity, fold=rules.identify, row=_identity_row, text=_identity_text),
    Kind(Restored, record_restore, text=_restored_text),
)

# every kind, in the order of the records (`events.EVENT_TYPES`), which the README's table and
# `journal-inspect` list them in; a record without a row here fails the import
KINDS: tuple[Kind, ...] = tuple({k.struct: k for k in _SPECS}[t] for t in EVENT_TYPES)
KIND_OF: dict[type, Kind] = {k.struct: k for k in KINDS}  # event type -> its kind
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
# event type -> (its call, [(field, argument, rule)], [(list field, item name, item rules)]),
# the argument messages' rules read from the record's bounds (`arguments.explain`)
ARGUMENT_RULES = {k.struct: (k.call, *arguments.rules_of(k.struct)) for k in KINDS}


def kind_of(event) -> Kind:
    """The kind of `event`."""
    return KIND_OF[type(event)]


def event_name(event) -> str:
    """The kind of `event` by name (its tag): "taken", "admitted", ..."""
    return KIND_OF[type(event)].name


def checkpoint_marks(events: Iterable) -> list[tuple[rules.Mark, int]]:
    """(mark, step) of each checkpoint marker of `events`, in order."""
    return [(k.checkpoint, ev.step) for ev in events if (k := KIND_OF[type(ev)]).checkpoint is not None]


def handlers(by_name: Mapping[str, Callable]) -> dict[type, Callable]:
    """A reader's dispatch: `by_name` maps the kinds it reads (by name) to what it does with an
    event of each, keyed here by event type for its loop (`table.get(type(event))`: None for a
    kind it does not read). A name that is no kind's raises KeyError naming it."""
    unknown = sorted(set(by_name) - set(BY_NAME))
    if unknown:
        raise KeyError(f"no event kind named {', '.join(unknown)} (kinds: {', '.join(BY_NAME)})")
    return {BY_NAME[name].struct: fn for name, fn in by_name.items()}


class Transition(NamedTuple):
    """One row of the ownership table: an event moves each group it names from one of
    `from_owners` to `to` (see `Kind`)."""

    event: str
    from_owners: frozenset
    to: Owner | None


TRANSITIONS: dict[str, Transition] = {k.name: Transition(k.name, k.from_owners, k.to) for k in KINDS}


def transition_table_markdown() -> str:
    """The ownership table as the README shows it (event | from | to)."""
    def owners(t: Transition) -> str:
        if t.to is None:
            return "-"
        if not t.from_owners:
            return "loader"
        if t.from_owners == LIVE_OWNERS:
            return "any live owner"
        return ", ".join(o.name for o in sorted(t.from_owners))
    rows = ["| event | from | to |", "| --- | --- | --- |"]
    rows += [f"| `{t.event}` | {owners(t)} | {t.to.name if t.to is not None else '-'} |"
             for t in TRANSITIONS.values()]
    return "\n".join(rows)
