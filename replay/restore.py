"""restore(): the state a trainer resumes from, with exactly the in-flight work it lost.

The default point is the latest *committed* checkpoint: the model weights of
step S saw only groups trained at or before `checkpoint_begun(S)`, so that is
the LSN whose ownership state matches them (docs/recovery.md, "Restoring"). The state
there is the newest usable cut at or before it plus the journal tail replayed
with the journal's own fold; what comes after it on disk is a dead tail,
read only for salvage (which also adopts the takes it holds: `restore_rules.py`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import journal
from journal import LoaderStateError, Owner, Reader, State
from journal.ever import admitted_groups, attempts_used, max_group_id
from journal.state import LoaderState
from journal.reader import list_segments
from journal.identity import digests
from journal.layout import DirKind, SNAPSHOTS_DIR, describe_entries, dir_kind
from journal.replica.names import CUTS_PREFIX
from snapshot import DataPlane, read_cut
from snapshot.state_at import state_at
from snapshot.catalog import check_anchor
from snapshot.damaged import (check_anchor_past_damage, damage_of, describe, group_id_ceiling,
                              point_past_damage)
from snapshot.row_ledger import RowLedger, ledger_at
from snapshot.cut import base_cut_writer

from .errors import (DamagedCutWarning, DamagedJournalWarning, FirstStartWarning, IdentityChanged,
                     JournalCorrupt, NothingToRestore, OwnershipError, RestoreError, Unreadable)
from .identity import IDENTITY_POLICIES, compare_identity
from .recovered_state import RecoveredState
from .dead_tail import DeadTail, read_dead_tail
from .restore_rules import recover, restore_record
from .rehydrate import ROW_CHANGED_POLICIES, check_identity, rehydrate
from .source import Source


def _wrap_journal_errors(fn, *args, **kwargs):
    """Run `fn`, re-raising the journal's own errors as the `RestoreError` subclasses of check 9."""
    try:
        return fn(*args, **kwargs)
    except RestoreError:
        raise
    except journal.OwnershipError as exc:
        raise OwnershipError(str(exc), group_id=exc.group_id, lsn=exc.lsn) from exc
    except journal.JournalCorrupt as exc:
        raise JournalCorrupt(str(exc), segment=exc.segment, offset=exc.offset, lsn=exc.lsn) from exc
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        raise Unreadable(f"{exc.filename}: cannot be read: {exc.strerror}") from exc


def _decode_loader(loader: LoaderState | None, state: State, where: str) -> Any:
    """The loader state handed back: that of the last adopted take (`loader`), else the one as
    of the point."""
    if loader is None:
        return None
    try:
        return loader.decode()
    except LoaderStateError as exc:
        which = "of the last take adopted from the dead tail" if loader is not state.loader else "as of"
        raise JournalCorrupt(f"{where}: the loader state {which} LSN {state.lsn} does not decode: {exc}",
                             lsn=state.lsn) from None


def _id_allocator(state: State, reader: Reader | None) -> Callable[[], int]:
    """Fresh group ids for demoted groups: beyond every id the history ever allocated, dead
    tails and damaged frames included (read only when a group is demoted, which is rare)."""
    counter = None

    def next_id() -> int:
        nonlocal counter
        if counter is None:
            top = _wrap_journal_errors(group_id_ceiling, reader) if reader is not None else -1
            counter = itertools.count(max(state.next_group_id, top + 1))
        return next(counter)
    return next_id


def _every_history(reader: Reader | None, tail: DeadTail | None, lsn: int, read: Callable,
                   with_tail: Callable, empty: Callable) -> Callable[[set], Any]:
    """One of `recover`'s questions to every history of the journal (`empty()` without one):
    `read` over the segments that may name the keys, the active history up to `lsn` known from
    the state there; after `lsn` the salvage's read of the dead tail answers instead
    (`with_tail(found, keys)`), when there was one."""
    def ask(keys: set):
        if reader is None:
            return empty()
        if tail is None:
            return _wrap_journal_errors(read, reader, keys, known_to=lsn)
        return with_tail(_wrap_journal_errors(read, reader, keys, skip_active_after=lsn, known_to=lsn), keys)
    return ask


def _attempts_used(reader: Reader | None, tail: DeadTail | None, lsn: int) -> Callable[[set], dict]:
    """`recover`'s `attempts_used`: the highest attempt any history dispatched each rollout in."""
    def with_tail(found: dict, keys: set) -> dict:
        for key in keys & tail.attempts.keys():
            found[key] = max(found.get(key, 0), tail.attempts[key])
        return found
    return _every_history(reader, tail, lsn, attempts_used, with_tail, dict)


def _admitted_ever(reader: Reader | None, tail: DeadTail | None, lsn: int) -> Callable[[set], set]:
    """`recover`'s `admitted_ever`: which of the given groups any history admitted."""
    return _every_history(reader, tail, lsn, admitted_groups, lambda found, gids: found | (gids & tail.admitted), set)


def _ledger_of(cut) -> RowLedger | None:
    """The row ledger of the cut the restore point stands on; None when it has none or it does
    not load (an audit of a journal resumed from it then reports what it cannot cover)."""
    try:
        return RowLedger.of_cut(cut)
    except RestoreError:
        return None


def _ledger_later(reader: Reader, base, state: State) -> Callable[[], RowLedger | None]:
    """The row ledger at `state`, computed once on first use from the journal the restore read
    (a second read of its tail, which only a resume that seeds a cut needs); None when the
    journal no longer holds the history restored (changed or removed since). Read past damage
    (a salvage `reader`), only from the base cut's ledger on: the commits before it may be
    damaged."""
    @functools.cache
    def ledger() -> RowLedger | None:
        try:
            if reader.mode == "salvage" and base is not None:
                start = _ledger_of(base)
                return ledger_at(reader, (), state, start=start) if start is not None else None
            return ledger_at(reader, [base] if base is not None else [], state)
        except (journal.JournalError, OSError):
            return None
    return ledger


def _empty_state(identity: dict[str, bytes] | None) -> RecoveredState:
    """The state of a first start: there is no history to restore (nor an identity to compare
    with the `identity` given)."""
    state = State()
    return RecoveredState(loader_state=None, reserved=[], admitted=[], replay=[], spare=[], lsn=0,
                          step=None, counts={o.name: 0 for o in Owner}, source="journal",
                          base_cut=None, fold_state=state, first_start=True,
                          identity_check=compare_identity(state, identity, policy="error", where="",
                                                          step=None)[0])


def _no_history(path: str) -> str:
    """Why the local `path` of a first start holds no history, for the warning and the error."""
    if not os.path.exists(path):
        return "does not exist"
    return "is an empty directory" if not os.listdir(path) else "is a journal without a commit"


def _first_start(where: str, why: str, must_exist: bool) -> None:
    """A restore that found no history: an error with `must_exist`, else a warning naming the
    place, so a mistyped path never silently restarts a run from scratch."""
    if must_exist:
        raise NothingToRestore(f"{where}: {why}, so there is no history to restore (must_exist=True): "
                               f"check the path; a first start restores without must_exist=True")
    warnings.warn(FirstStartWarning(
        f"{where}: {why}: a first start, from the empty state. If this run continues an earlier "
        f"one, check the path (Session.open(..., must_exist=True), or restore's, makes this an "
        f"error)"), stacklevel=3)


def _warn_damaged_cuts(result: RecoveredState) -> None:
    """One warning per damaged cut the restore passed over, naming it and the check it fails
    (stale cuts are normal after a resume and stay in `skipped` only)."""
    for s in result.skipped:
        if s.damaged:
            base = f"the cut {result.base_cut}" if result.base_cut else "the journal alone"
            warnings.warn(DamagedCutWarning(
                f"{s.path}: damaged, passed over: check {s.check.number} ({s.check.what}) fails: "
                f"{s.reason}. The state was restored from {base} instead; `journal-inspect cuts` "
                f"lists every cut and the check it fails"), stacklevel=3)


@dataclass
class _Restored:
    """The state at the restore point and where it came from."""

    state: State
    step: int | None
    source: str                       # "journal" or "cut"
    base: str | None                  # the cut it was built on
    run_id: bytes | None
    committed_later: dict[int, int]   # step -> begun LSN of checkpoints committed on the history
    crash_lsn: int                    # the end of the history read (the dead tail's last LSN)
    skipped: list = field(default_factory=list)
    first_start: bool = False         # the journal holds no history (see `_from_journal`)
    reader: Reader | None = None      # the journal it belongs to, if any (dead tail, ids)
    tail: DeadTail | None = None      # what the dead tail did, when salvage reads it
    # computes the audit's row ledger at the point once, on first use (None when not known)
    ledger: Callable[[], RowLedger | None] = lambda: None
    notes: list[str] = field(default_factory=list)  # what reading past damage passed over


def journal_of_cut(path: str) -> str | None:
    """The journal directory the cut at `path` lies in (`<journal>/snapshots/<cut>`, a journal
    with segments), or None."""
    owner = os.path.dirname(os.path.dirname(path))
    if os.path.basename(os.path.dirname(path)) == SNAPSHOTS_DIR and list_segments(owner):
        return owner
    return None


def _reader_of_cut(path: str, cut, past_damage: bool) -> tuple[Reader | None, list[str]]:
    """A reader of the journal the cut lies in (None for a cut elsewhere), for the ids and
    attempts its histories used, with the cut's anchor checked on it (check 8). `past_damage`:
    the journal is damaged, so it is read in salvage mode and the anchor is checked where the
    damage left it (`snapshot.damaged`); the notes say what was not checked."""
    owner_journal = journal_of_cut(path)
    if owner_journal is None:
        return None, []
    reader = _wrap_journal_errors(Reader, owner_journal, "salvage" if past_damage else "strict")
    if past_damage:
        return reader, _wrap_journal_errors(check_anchor_past_damage, reader, cut)
    _wrap_journal_errors(check_anchor, reader, cut)
    return reader, []


def _from_cut(path: str, at, step: int | None, past_damage: bool) -> _Restored:
    """A cut directory named on its own: checks 1-4 and its state file (else 5-7, see
    `read_cut(tables=False)`), and 8 when it lies in a journal's snapshots/."""
    cut = read_cut(path, tables=False)
    reader, notes = _reader_of_cut(path, cut, past_damage)
    if step is not None and cut.manifest.checkpoint_step != step:
        raise RestoreError(f"{path}: the cut is of step {cut.manifest.checkpoint_step}, not {step}")
    if isinstance(at, int) and not isinstance(at, bool) and at != cut.lsn:
        raise RestoreError(f"{path}: the cut is at LSN {cut.lsn}; a cut alone cannot restore LSN {at}")
    point_step = cut.manifest.checkpoint_step
    # a cut alone knows nothing after it: only its own checkpoint is known to be durable
    return _Restored(cut.state, point_step, "cut", path, bytes.fromhex(cut.manifest.run_id),
                     {point_step: cut.lsn} if point_step is not None else {}, cut.lsn, reader=reader,
                     ledger=functools.cache(lambda: _ledger_of(cut)), notes=notes)


def _from_journal(path: str, at, step: int | None, salvage: bool,
                  data_plane: DataPlane | None, past_damage: bool) -> _Restored:
    """The state at the point of a journal directory. `past_damage`: the journal is damaged,
    so the point is one whose state does not need the damaged frames (`snapshot.damaged`)."""
    if past_damage:
        reader = _wrap_journal_errors(Reader, path, "salvage")
        point, notes = _wrap_journal_errors(point_past_damage, path, at, step=step, reader=reader)
    else:
        reader, notes = _wrap_journal_errors(Reader, path, "strict"), []
        point = _wrap_journal_errors(state_at, path, at, step=step, reader=reader)
    tail = None
    if salvage and data_plane is not None and point.lsn < point.end_lsn:
        tail = _wrap_journal_errors(read_dead_tail, reader, point.state, point.dead_tail)
    at_base = point.base is not None and point.base.lsn == point.state.lsn
    # the base cut of a resume carries the row ledger at its LSN, so that an audit of a history
    # that starts at that cut (a resume on a fresh node, its journal restored from a bucket)
    # still covers the rows taken before it
    base = point.base
    ledger = functools.cache(lambda: _ledger_of(base)) if at_base else _ledger_later(reader, base, point.state)
    # no history: nothing on the active history and no other timeline (a resume at LSN 0
    # branches, so a journal whose run crashed before its first commit of a branch has two)
    first_start = point.end_lsn == 0 and len(reader.timelines) <= 1
    return _Restored(point.state, point.step, "journal",
                     point.base.path if point.base is not None else None, reader.run_id,
                     point.committed, point.end_lsn, point.skipped, first_start, reader, tail, ledger, notes)


def _kind_of(path: str, at, step: int | None) -> DirKind | None:
    """What `path` is; None for a path that does not exist yet (a first start). Refuses what
    cannot be restored."""
    if not os.path.exists(path):
        if step is None and at in ("latest-checkpoint", "end", 0):
            return None
        wanted = f"step {step}" if step is not None else f"LSN {at}"
        raise RestoreError(f"{path}: no such journal or cut directory, so there is no {wanted} "
                           f"to restore (a first start restores with the default at=)")
    kind, entries = dir_kind(path)
    if kind is DirKind.NOT_A_DIRECTORY:
        raise RestoreError(f"{path}: not a directory: restore takes a journal or a cut directory")
    if kind is DirKind.FOREIGN:
        raise RestoreError(f"{path}: neither a journal nor a cut directory (it holds "
                           f"{describe_entries(entries)}, none of them a segment, LOCK, torn/, "
                           f"snapshots/ or a cut file): check the path")
    return kind


def restore(path: str, at: str | int = "latest-checkpoint", *, step: int | None = None,
            dataset: Any = None, collate_fn: Callable | None = None, on_row_changed: str = "error",
            data_plane: DataPlane | None = None, salvage: bool = False, must_exist: bool = False,
            replica_options: dict | None = None, identity: Mapping[str, Any] | None = None,
            on_identity_changed: str = "error", max_policy_lag: int = 0) -> RecoveredState:
    """Rebuild the state to resume from. `path` is a journal directory or a cut directory;
    `at` is "latest-checkpoint" (default), "end" (forensics) or an LSN; `step=S` picks the
    committed checkpoint of step S. Raises a `RestoreError` subclass naming what failed.

    A first start (`RecoveredState.first_start`): a path that does not exist yet, an empty
    directory or a journal without a commit restores to the empty state, as a journal without
    a committed checkpoint does (restore never creates it), and warns (`FirstStartWarning`, a
    `journal.JournalWarning`, naming the path); with `must_exist=True` it raises
    `NothingToRestore` instead.

    `salvage=True` with a `data_plane`: work done after the point is kept where the rules allow
    (`replay/restore_rules.py`): results by weights within the bound whose rows the data plane
    still has, and the loader's takes on the dead tail, adopted under fresh group ids with the
    loader state after them (`RecoveredState.adopted`).

    `max_policy_lag=k` (the trainer's own off-policy bound, in steps): the bound is the
    restored step plus k, so sealed rollouts, finished groups and prefixes made by weights up
    to k steps newer than the restored ones are kept too (each says how it was made:
    `policy_span`, `lead`); work beyond it regenerates and is listed in `beyond_lag`. The
    default 0 keeps nothing newer than the restored checkpoint. k > 0 needs salvage=True and a
    data plane (the rows it keeps must be there).

    `path` may also be a replica (a URL such as `s3://bucket/runs/42` with `replica_options`,
    an obstore store, or a `journal.replica.Location`): the bucket alone is read
    (`replay/source.py`); a bucket that holds no history is a first start too.

    `identity` (the run's tokenizer, sampling parameters, prompt template, reward version, as
    `Journal.open(identity=)` records it) is compared with the identity the history recorded at
    the restore point; when they differ, `on_identity_changed` says what happens: "error"
    raises `IdentityChanged` naming the keys added, removed and changed; "regenerate" keeps
    ownership and the loader position but drops every generated result of the recovered groups
    (they come back to generate again under fresh ids, in `regenerated`; nothing is salvaged);
    "accept" keeps everything. Either way `identity_check` and `identity_changes` report it.
    Without `identity` nothing is compared (`identity_check == "unchecked"`)."""
    if on_identity_changed not in IDENTITY_POLICIES:
        raise ValueError(f"on_identity_changed must be one of {IDENTITY_POLICIES}, not {on_identity_changed!r}")
    check_policy_lag(max_policy_lag, salvage=salvage, data_plane=data_plane)
    options = dict(step=step, dataset=dataset, collate_fn=collate_fn, on_row_changed=on_row_changed,
                   data_plane=data_plane, salvage=salvage, max_policy_lag=max_policy_lag,
                   identity=digests(identity) if identity is not None else None,
                   on_identity_changed=on_identity_changed)
    source = Source(path, replica_options)
    if source.location is not None:
        result = _restore_replica(source, at, **options)
        if result.first_start:
            _first_start(source.where, "holds no journal history", must_exist)
    else:
        result = _restore_dir(path, at, **options)
        if result.first_start:
            _first_start(os.path.abspath(path), _no_history(os.path.abspath(path)), must_exist)
    _warn_damaged_cuts(result)
    return result


def check_policy_lag(max_policy_lag, *, salvage: bool, data_plane) -> None:
    """`max_policy_lag` is a step count >= 0; above 0 it keeps rows of the dead tail, so it
    needs salvage and a data plane."""
    if isinstance(max_policy_lag, bool) or not isinstance(max_policy_lag, int) or max_policy_lag < 0:
        raise ValueError(f"max_policy_lag must be an int >= 0 (the trainer's off-policy bound in steps), "
                         f"not {max_policy_lag!r}")
    if max_policy_lag and not (salvage and data_plane is not None):
        raise ValueError(f"max_policy_lag={max_policy_lag} keeps work done after the checkpoint, read "
                         "from the dead tail with its rows in the data plane: pass salvage=True and "
                         "data_plane= too (Session.open does, given a data plane)")


def _restore_dir(path: str, at: str | int, *, step: int | None, dataset: Any,
                 collate_fn: Callable | None, on_row_changed: str, data_plane: DataPlane | None,
                 salvage: bool, identity: dict[str, bytes] | None,
                 on_identity_changed: str, max_policy_lag: int) -> RecoveredState:
    """`restore` of a journal or cut directory (`path`), without the first start's warning."""
    if not (at in ("latest-checkpoint", "end") or isinstance(at, int) and not isinstance(at, bool)):
        raise ValueError(f"at must be 'latest-checkpoint', 'end' or an LSN, not {at!r}")
    if on_row_changed not in ROW_CHANGED_POLICIES:
        raise ValueError(f"on_row_changed must be one of {ROW_CHANGED_POLICIES}, not {on_row_changed!r}")
    path = os.path.abspath(path)
    kind = _kind_of(path, at, step)
    if kind is None:
        return _empty_state(identity)
    checked = (identity, on_identity_changed)
    try:
        result = _restore_local(path, kind, at, step, salvage, data_plane, checked, max_policy_lag,
                                past_damage=False)
    except JournalCorrupt:  # the journal is damaged: restore what does not need the damage
        result = _restore_local(path, kind, at, step, salvage, data_plane, checked, max_policy_lag,
                                past_damage=True)
    if dataset is not None:  # the in-flight rows first: their errors name the groups at stake
        rehydrate(result.groups, dataset, collate_fn, on_row_changed, result.changed_rows)
        result.changed_sample = check_identity(dataset, result.fold_state.dataset_size,
                                               result.fold_state.row_sample, on_row_changed, collate_fn)
    return result


def _restore_local(path: str, kind: DirKind, at, step: int | None, salvage: bool,
                   data_plane: DataPlane | None, identity: tuple[dict[str, bytes] | None, str],
                   lag: int, past_damage: bool) -> RecoveredState:
    """`restore` of a journal or cut directory, before rehydration; `identity`: the digests
    given and the policy; `past_damage`: its journal is damaged (read in salvage mode; the
    damage passed over is in `damage`, and warned of)."""
    r = _from_cut(path, at, step, past_damage) if kind is DirKind.CUT else \
        _from_journal(path, at, step, salvage, data_plane, past_damage)
    state = r.state
    identity_check, identity_changes = compare_identity(state, *identity, path, r.step)
    regenerate = identity_changes is not None and identity[1] == "regenerate"
    recommit = sorted((s for s, lsn in state.pending_checkpoints.items() if r.committed_later.get(s) == lsn),
                      key=state.pending_checkpoints.get)
    marks = recommit + ([r.step] if r.step in state.pending_checkpoints and r.step not in recommit else [])
    tail = None if regenerate else r.tail  # what came after L was generated under some identity
    groups = recover(state, r.step, path=path, tail=tail, data_plane=data_plane, recommit=marks,
                     next_free_id=_id_allocator(state, r.reader),
                     attempts_used=_attempts_used(r.reader, r.tail, state.lsn),
                     admitted_ever=_admitted_ever(r.reader, r.tail, state.lsn), regenerate=regenerate,
                     lag=lag)
    loader = groups.loader if groups.loader is not None else state.loader
    result = RecoveredState(
        loader_state=_decode_loader(loader, state, path),
        loader_epoch=loader.epoch if loader is not None else None,
        reserved=groups.reserved, admitted=groups.admitted, replay=groups.replay, spare=groups.spare,
        lsn=state.lsn, step=r.step, counts={o.name: state.counts[o] for o in Owner},
        source=r.source, base_cut=r.base, skipped=r.skipped, demoted=groups.demoted,
        salvaged=groups.salvaged, completed=groups.completed, salvaged_rollouts=groups.salvaged_rollouts,
        lost_rollouts=groups.lost_rollouts, adopted=groups.adopted, adopted_rollouts=groups.adopted_rollouts,
        beyond_lag=groups.beyond_lag, max_policy_lag=lag, kept_by_lead=groups.kept_by_lead,
        reissued=groups.reissued, run_id=r.run_id, fold_state=state,
        recommit=recommit,
        first_commit=groups.first_commit, first_commit_blobs=groups.first_commit_blobs,
        ledger_source=r.ledger,
        write_base_cut=base_cut_writer(state, r.run_id, r.ledger), first_start=r.first_start,
        identity_check=identity_check, identity_changes=identity_changes,
        regenerated=groups.regenerated, dropped_rollouts=groups.dropped_rollouts,
        restored=restore_record(groups, point=state.lsn, step=r.step, crash_lsn=max(r.crash_lsn, state.lsn),
                                lag=lag, data_plane=data_plane),
        salvaged_progress=groups.salvaged_progress,
        lost_progress=groups.lost_progress, dropped_progress=groups.dropped_progress)
    if past_damage:
        met = damage_of(r.reader) if r.reader is not None else []
        result.damage = [describe(p) for p in met] + r.notes
        result.damaged_segments = sorted({p.segment for p in met})
        warnings.warn(DamagedJournalWarning(
            f"{path}: restored LSN {state.lsn} (step {r.step}) past damage its state does not need "
            f"({result.damage[0] if result.damage else 'none found'}; all of it in state.damage). "
            f"`journal-inspect rescue {path} NEWDIR` continues the run from here in a fresh "
            "journal directory"), stacklevel=4)
    return result


def _restore_replica(source: Source, at, **kwargs) -> RecoveredState:
    """`restore` of a replica, with every local check: the newest complete cut and the segments
    from it on fetched into a temporary journal directory (removed afterwards) and restored;
    when that restore does not stand on a fetched cut (the cut is unusable, or the restore
    point is before it), the next older cut and its segments are fetched too, and so on, last
    the whole history (`Source.fetch_in_steps`)."""
    with tempfile.TemporaryDirectory(prefix="oj-replica-") as tmp:
        for last in source.fetch_in_steps(tmp, at):
            if not os.listdir(tmp):
                return _empty_state(kwargs["identity"])
            try:
                result = _restore_dir(tmp, at, **kwargs)
            except IdentityChanged as exc:  # the point's identity, whichever cut it stands on
                raise IdentityChanged(str(exc).replace(tmp, source.where), exc.changes) from None
            except RestoreError:
                if last:
                    raise
                continue
            if last or result.base_cut is not None:
                break
        result.ledger  # computed now: the files it is read from go with the temporary directory
        # a writer continuing on another node cannot read these ids off its own disk
        result.group_id_floor = _wrap_journal_errors(max_group_id, Reader(tmp)) + 1
    # the cuts named as the bucket names them: the temporary directory is gone
    fetched_cuts, in_bucket = os.path.join(tmp, SNAPSHOTS_DIR) + os.sep, f"{source.where}/{CUTS_PREFIX}"
    if result.base_cut is not None:
        result.base_cut = result.base_cut.replace(fetched_cuts, in_bucket)
    result.skipped = [dataclasses.replace(s, path=s.path.replace(fetched_cuts, in_bucket),
                                          reason=s.reason.replace(fetched_cuts, in_bucket))
                      for s in result.skipped]
    return result
