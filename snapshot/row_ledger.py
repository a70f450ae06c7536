"""The row ledger: what the exactly-once audit needs of the history up to an LSN, so a cut can
stand for the history before it (a head retired with `retention="delete"`, or a journal
resumed from a cut into an empty directory).

Per (epoch, task_name) of the loader, three byte counters per dataset row `idx`: how often the
row was taken, how often trained (both saturating at 255) and the code of the reason of its
last drop (0: never dropped; codes index `reasons`, 255 stands for any reason past the 254th).
Besides: the groups taken, trained and dropped, the rollout figures (sealed, regenerated,
failed, abandoned on restore; the tokens of the prefixes a resume continued and of those it
ended without continuing them) and the rollout violations found (a rollout sealed twice into a
trained group, a group with rollouts trained without all N sealed).

`RowLedger.add(commit)` folds one commit that the ownership fold accepted. It resolves the
rows of `trained` and `discarded` from its own map of live groups (seeded from a cut's state),
so it runs without the ownership fold where the commits are known to apply (compaction).

In a cut the ledger is `LEDGER_FILE`, hashed in the manifest like every file: the counters
run-length encoded (a run per change of value, so a history where every row was taken and
trained once costs a run per counter), the few outliers past the dense tables as id/value
columns. `torch.load(weights_only=True)` loads it. Cuts written before it existed lack it:
`of_cut` then returns None and the audit reports the history before such a cut as not covered.
"""

from __future__ import annotations

import hashlib
import io
import os
from typing import Callable, Iterable

from journal import Commit, Reader, State
from journal.kinds import handlers
from journal.layout import LEDGER_FILE

from . import compat
from .cut import Cut
from .errors import ChecksumMismatch, CorruptRecord, MissingFile, RestoreError

LEDGER_VERSION = 2
_READS = (*compat.OLDER_LEDGER_VERSIONS, LEDGER_VERSION)
ABANDONED_ON_RESTORE = "abandoned_on_restore"  # the reason of the fences a resume writes
DENSE_GAP = 1 << 20   # indices further than this past a dense table go to its dict
OTHER_REASON = 255    # the drop code of every reason past the 254th
# the tokens figures: a resume's fence ends the prefix the rollout held (`rollout_progress`);
# the same commit records it again under the new attempt when the restore continues it
# ("tokens_kept"), else its tokens are generated again ("tokens_regenerated")
ROLLOUT_FIGURES = ("sealed", "regenerated", "failed", "abandoned_on_restore", "groups_trained",
                   "tokens_kept", "tokens_regenerated")


class Bytes:
    """Saturating byte counters indexed by a non-negative int; outliers in a dict."""

    __slots__ = ("dense", "sparse")

    def __init__(self) -> None:
        self.dense = bytearray()
        self.sparse: dict[int, int] = {}

    def _slot(self, i: int) -> bool:
        n = len(self.dense)
        if 0 <= i < n:
            return True
        if n <= i < n + DENSE_GAP:
            self.dense.extend(bytes(i - n + 1 + (n >> 1)))
            return True
        return False

    def add(self, i: int) -> int:
        """Increment; returns the value before."""
        if self._slot(i):
            v = self.dense[i]
            if v < 255:
                self.dense[i] = v + 1
            return v
        v = self.sparse.get(i, 0)
        self.sparse[i] = min(v + 1, 255)
        return v

    def set(self, i: int, v: int) -> None:
        if self._slot(i):
            self.dense[i] = v
        else:
            self.sparse[i] = v

    def get(self, i: int) -> int:
        if 0 <= i < len(self.dense):
            return self.dense[i]
        return self.sparse.get(i, 0)


class Rows:
    """Per-row counters of one (epoch, task): takes and trains, last drop."""

    __slots__ = ("taken", "trained", "dropped")

    def __init__(self) -> None:
        self.taken, self.trained, self.dropped = Bytes(), Bytes(), Bytes()


FirstTake = Callable[[int, "int | None"], None]  # (lsn, epoch) of a row taken for the first time


class RowLedger:
    """The audit's counters over LSNs 1..`lsn` of one history (see the module docstring)."""

    def __init__(self) -> None:
        self.lsn = 0
        self.tables: dict[tuple, Rows] = {}
        self.reasons: list[str] = []
        self.reason_code: dict[str, int] = {}
        self.groups = {"taken": 0, "trained": 0, "dropped": 0}
        self.rollouts = dict.fromkeys(ROLLOUT_FIGURES, 0)
        self.violations: list[dict] = []
        # live groups: their row, and per group admitted with rollouts=N the seals of each rollout
        self.live: dict[int, tuple] = {}
        self.seals: dict[int, bytearray] = {}
        self.prefixes: dict[tuple[int, int], int] = {}  # (group, index) -> its prefix's tokens

    @classmethod
    def starting_at(cls, state: State) -> "RowLedger":
        """An empty ledger whose live groups are `state`'s (the counters before it are unknown)."""
        ledger = cls()
        ledger._seed(state)
        return ledger

    def _seed(self, state: State) -> None:
        self.lsn = state.lsn
        for gid, g in state.live.items():
            self.live[gid] = (g.epoch, g.task_name, g.idx)
            r = g.rollouts
            if r is not None:
                self.seals[gid] = bytearray(int(r.is_sealed(i)) for i in range(r.n))
                for i, p in enumerate(r.progress or ()):
                    if p is not None:
                        self.prefixes[(gid, i)] = p.tokens

    def rows(self, epoch, task) -> Rows:
        key = (epoch, task)
        t = self.tables.get(key)
        if t is None:
            t = self.tables[key] = Rows()
        return t

    def _reason(self, reason: str) -> int:
        code = self.reason_code.get(reason)
        if code is None:
            if len(self.reasons) >= OTHER_REASON - 1:
                return OTHER_REASON
            self.reasons.append(reason)
            code = self.reason_code[reason] = len(self.reasons)
        return code

    def reason_of(self, code: int) -> str:
        return self.reasons[code - 1] if code != OTHER_REASON else "(other reasons)"

    def add(self, commit: Commit, first_take: FirstTake | None = None) -> None:
        """Fold `commit`, which the ownership fold accepted; `first_take(lsn, epoch)` is told of
        every row taken for the first time."""
        lsn = commit.lsn
        fenced: dict[tuple[int, int], int] = {}  # prefixes this commit's fences ended
        for ev in commit.events:
            fold = _FOLDS.get(type(ev))
            if fold is not None:
                fold(self, ev, lsn, first_take, fenced)
        if fenced:
            self.rollouts["tokens_regenerated"] += sum(fenced.values())
        self.lsn = lsn

    # What each kind the ledger counts does to it (`_FOLDS`), each `(ledger, event, lsn,
    # first_take, fenced)`: `fenced` collects the prefixes a resume's fences in the commit ended
    # (see ROLLOUT_FIGURES), and loses each that the commit records again.

    def _taken(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        self.groups["taken"] += len(ev.groups)
        for g in ev.groups:
            self.live[g.group_id] = (g.epoch, g.task_name, g.idx)
            if self.rows(g.epoch, g.task_name).taken.add(g.idx) == 0 and first_take is not None:
                first_take(lsn, g.epoch)

    def _trained(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        self.groups["trained"] += len(ev.groups)
        for gid in ev.groups:
            row = self.live.pop(gid, None)
            if row is not None:
                self.rows(row[0], row[1]).trained.add(row[2])
            counts = self.seals.pop(gid, None)
            if counts is not None:
                self._check_trained_rollouts(gid, counts, lsn, ev.step)

    def _discarded(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        self.groups["dropped"] += len(ev.groups)
        code, prefixes = self._reason(ev.reason), self.prefixes
        for gid in ev.groups:
            row = self.live.pop(gid, None)
            if row is not None:
                self.rows(row[0], row[1]).dropped.set(row[2], code)
            counts = self.seals.pop(gid, None)
            for i in range(len(counts) if counts is not None and prefixes else 0):
                prefixes.pop((gid, i), None)

    def _admitted(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        if ev.rollouts is not None:
            for gid in ev.groups:
                self.seals[gid] = bytearray(ev.rollouts)

    def _progress(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        for ref in ev.rollouts:
            key = (ref.group_id, ref.index)
            self.prefixes[key] = ev.tokens
            if fenced.pop(key, None) is not None:
                self.rollouts["tokens_kept"] += ev.tokens

    def _sealed(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        for ref in ev.rollouts:
            self.rollouts["sealed"] += 1
            self.rollouts["regenerated"] += ref.attempt > 0
            self.prefixes.pop((ref.group_id, ref.index), None)
            counts = self.seals.get(ref.group_id)
            if counts is not None and ref.index < len(counts):
                counts[ref.index] = min(counts[ref.index] + 1, 255)

    def _failed(self, ev, lsn: int, first_take: FirstTake | None, fenced: dict) -> None:
        self.rollouts["failed"] += len(ev.rollouts)
        restore = ev.reason == ABANDONED_ON_RESTORE
        if restore:
            self.rollouts["abandoned_on_restore"] += len(ev.rollouts)
        for ref in ev.rollouts:
            tokens = self.prefixes.pop((ref.group_id, ref.index), None)
            if restore and tokens is not None:
                fenced[(ref.group_id, ref.index)] = tokens

    def _check_trained_rollouts(self, gid: int, counts: bytearray, lsn: int, step: int) -> None:
        self.rollouts["groups_trained"] += 1
        where = {"group_id": gid, "trained_lsn": lsn, "trained_step": step}
        for index, n in enumerate(counts):
            if n > 1:
                self.violations.append({**where, "check": "rollout trained twice", "index": index,
                                        "seals": n})
        unsealed = [i for i, n in enumerate(counts) if n == 0]
        if unsealed:
            self.violations.append({**where, "check": "trained without all rollouts sealed",
                                    "rollouts": len(counts), "unsealed": unsealed})

    # -- in a cut -----------------------------------------------------------------------------

    def encode(self) -> dict:
        from .tables import _int_tensor

        keys = list(self.tables)
        tabs = [self.tables[k] for k in keys]
        return {"version": LEDGER_VERSION, "lsn": self.lsn,
                "epochs": _int_tensor([e for e, _ in keys]),
                "tasks": [task for _, task in keys],
                "counters": [{name: _encode_bytes(getattr(t, name)) for name in Rows.__slots__}
                             for t in tabs],
                "reasons": list(self.reasons), "groups": dict(self.groups),
                "rollouts": dict(self.rollouts), "violations": [dict(v) for v in self.violations]}

    @classmethod
    def decode(cls, obj, where: str, state: State) -> "RowLedger":
        """The ledger of `encode`'s dict, validated, its live groups `state`'s."""
        from .tables import NONE

        want = {"version", "lsn", "epochs", "tasks", "counters", "reasons", "groups", "rollouts",
                "violations"}
        if not isinstance(obj, dict) or set(obj) != want or obj["version"] not in _READS:
            raise CorruptRecord(f"{where}: not a row ledger of version {' or '.join(map(str, _READS))}")
        if obj["lsn"] != state.lsn:
            raise CorruptRecord(f"{where}: the row ledger covers LSN {obj['lsn']!r}, the cut is at "
                                f"LSN {state.lsn}")
        epochs, tasks, counters = obj["epochs"], obj["tasks"], obj["counters"]
        if not (_is_int_column(epochs) and isinstance(tasks, list) and isinstance(counters, list)
                and len(tasks) == len(counters) == epochs.numel()
                and all(t is None or isinstance(t, str) for t in tasks)):
            raise CorruptRecord(f"{where}: row ledger keys: bad layout")
        reasons = obj["reasons"]
        if not (isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)
                and len(reasons) < OTHER_REASON):
            raise CorruptRecord(f"{where}: row ledger reasons: bad layout")
        ledger = cls()
        for e, task, c in zip(epochs.tolist(), tasks, counters):
            if not isinstance(c, dict) or set(c) != set(Rows.__slots__):
                raise CorruptRecord(f"{where}: row ledger counters of epoch {e} task {task}: bad layout")
            rows = ledger.rows(None if e == NONE else e, task)
            for name in Rows.__slots__:
                _decode_bytes(c[name], getattr(rows, name), f"{where} epoch {e} task {task} {name}")
        ledger.reasons = reasons
        ledger.reason_code = {r: i + 1 for i, r in enumerate(reasons)}
        for name, keys in (("groups", set(ledger.groups)), ("rollouts", set(ROLLOUT_FIGURES))):
            figures = obj[name]
            if name == "rollouts" and obj["version"] != LEDGER_VERSION:
                figures = compat.older_ledger_rollouts(figures)
            if not (isinstance(figures, dict) and set(figures) == keys
                    and all(isinstance(v, int) and v >= 0 for v in figures.values())):
                raise CorruptRecord(f"{where}: row ledger {name} figures: bad layout")
            setattr(ledger, name, dict(figures))
        if not (isinstance(obj["violations"], list) and all(isinstance(v, dict) for v in obj["violations"])):
            raise CorruptRecord(f"{where}: row ledger violations: bad layout")
        ledger.violations = list(obj["violations"])
        ledger._seed(state)
        return ledger

    @classmethod
    def of_cut(cls, cut: Cut) -> "RowLedger | None":
        """The ledger of a cut that passed `read_cut`, None for a cut written without one. Its
        bytes are checked against the manifest again before they are unpickled."""
        entry = cut.manifest.files.get(LEDGER_FILE)
        if entry is None:
            return None
        where = os.path.join(cut.path, LEDGER_FILE)
        try:
            with open(where, "rb") as f:
                data = f.read(entry.size + 1)
        except OSError as exc:
            raise MissingFile(f"{where}: cannot be read: {exc}") from None
        if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise ChecksumMismatch(f"{where}: changed since the cut was checked (size {len(data)}, "
                                   f"the manifest says {entry.size})")
        import torch

        try:
            obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as exc:  # any unpickling failure of a file whose hash matched
            raise CorruptRecord(f"{where}: does not load with weights_only=True: {exc}") from None
        return cls.decode(obj, where, cut.state)


# the kinds the ledger counts, and what each does to it (the others count nothing)
_FOLDS = handlers({"taken": RowLedger._taken, "trained": RowLedger._trained, "discarded": RowLedger._discarded,
                   "admitted": RowLedger._admitted, "rollout_progress": RowLedger._progress,
                   "rollout_sealed": RowLedger._sealed, "rollout_failed": RowLedger._failed})


def ledger_at(reader: Reader, cuts: Iterable[Cut], state: State,
              start: RowLedger | None = None) -> RowLedger | None:
    """The ledger at `state`, a point of `reader`'s active history (so its commits apply):
    `start` (a ledger of that history at or before the point) if given, else that of the
    first of `cuts` (cuts of that history at or before the point, newest first) that has a
    loadable ledger, or an empty one at LSN 0, with the commits after it up to `state.lsn`
    added. None when neither is there (the cuts were written without a ledger and the
    history on disk does not start at LSN 1), or when the commits read do not end at
    `state`'s anchor."""
    ledger = start
    for cut in cuts if ledger is None else ():
        try:
            ledger = RowLedger.of_cut(cut)
        except RestoreError:
            continue
        if ledger is not None:
            break
    if ledger is None:
        first = next(iter(reader.records(start_lsn=1, stop_lsn=state.lsn)), None)
        if first is not None and first.commit.lsn != 1 or first is None and state.lsn > 0:
            return None
        ledger = RowLedger()
    chain = None
    for rec in reader.records(start_lsn=ledger.lsn + 1, stop_lsn=state.lsn):
        ledger.add(rec.commit)
        chain = rec.chain
    if ledger.lsn != state.lsn or chain is not None and chain != state.chain:
        return None  # the history read is not the one `state` is a point of
    return ledger


def _encode_bytes(b: Bytes) -> dict:
    """The dense counters as runs (`dense` the value of each run, `run_lengths` their lengths)
    or, when runs would not be smaller (rows alternating), as the raw bytes (`run_lengths`
    None); the sparse outliers as id/value columns."""
    import torch

    from .tables import _int_tensor

    raw = bytearray(bytes(b.dense).rstrip(b"\0"))
    dense = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    lengths = None
    if dense.numel():
        changed = dense[1:] != dense[:-1]
        # a run costs a value byte and an int64 length (counted first: listing the changes of
        # a table whose rows alternate would cost more than it saves)
        if (int(torch.count_nonzero(changed)) + 1) * 9 < dense.numel():
            starts = torch.cat([torch.zeros(1, dtype=torch.int64), torch.nonzero(changed).flatten() + 1])
            lengths = torch.diff(starts, append=torch.tensor([dense.numel()]))
            dense = dense[starts]
    ids = sorted(b.sparse)
    return {"dense": dense.clone(), "run_lengths": lengths, "sparse_ids": _int_tensor(ids),
            "sparse_values": torch.tensor([b.sparse[i] for i in ids], dtype=torch.uint8)}


def _decode_bytes(obj, into: Bytes, where: str) -> None:
    import torch

    from .tables import _tensor_bytes

    if not isinstance(obj, dict) or set(obj) != {"dense", "run_lengths", "sparse_ids", "sparse_values"}:
        raise CorruptRecord(f"{where}: bad layout")
    dense, lengths, ids, svalues = obj["dense"], obj["run_lengths"], obj["sparse_ids"], obj["sparse_values"]
    if not (isinstance(dense, torch.Tensor) and dense.dtype == torch.uint8 and dense.dim() == 1
            and (lengths is None or _is_int_column(lengths) and lengths.shape == dense.shape)
            and _is_int_column(ids) and isinstance(svalues, torch.Tensor)
            and svalues.dtype == torch.uint8 and svalues.shape == ids.shape):
        raise CorruptRecord(f"{where}: tensors have the wrong dtype or shape")
    if lengths is not None and lengths.numel():
        if int(lengths.min()) <= 0 or int(lengths.sum()) > 1 << 40:
            raise CorruptRecord(f"{where}: a run is empty or the runs are implausibly long")
        dense = torch.repeat_interleave(dense, lengths)
    into.dense = bytearray(_tensor_bytes(dense))
    sids = ids.tolist()
    if sids and (sids[0] < len(into.dense) or any(a >= b for a, b in zip(sids, sids[1:]))):
        raise CorruptRecord(f"{where}: sparse ids overlap the dense table or are out of order")
    into.sparse = dict(zip(sids, svalues.tolist()))


def _is_int_column(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.dim() == 1
