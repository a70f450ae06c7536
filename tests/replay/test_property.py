"""Test 6 (hypothesis): for random histories with random checkpoint markers, random cuts
(compactions at random LSNs, some with archival of covered segments) and a random dead tail
(crash, restore at a random committed checkpoint, resume on a new branch, go on; up to
twice, so a later restore can land before an earlier branch point),
`restore(step=S)` equals the fold of the active history up to `checkpoint_begun(S)` (a group
waiting there that any history admitted back under a fresh id: rule 3), and the
restore a crashed run resumes from (`salvage=True`, a data plane that lost a few rows) is that
fold with the recovery rules applied: salvage of groups admitted at the point and finished on
the dead tail, demotion of groups whose rows are gone, adoption of the dead tail's takes.

The expected states come from an independent model of the ownership rules (a few dicts),
snapshotted when each `checkpoint_begun` is written, and of the recovery rules
(`recovered_by_the_rules`, over the model's log of the active history); they are compared on
live groups (every field), counts, loader state, next group id and LSN."""

from __future__ import annotations

import copy
import shutil
import tempfile

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import GroupRef, Journal, Owner
from replay import restore
from tests.support.equality import deep_equal
from tests.support.nosync import NOSYNC
from tests.support.replay_support import FIELDS, recovered_view
from snapshot import compact

LIVE = (Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE)


class Model:
    """The ownership state of the active history, kept without the journal's code."""

    def __init__(self) -> None:
        self.lsn = 0
        self.live: dict[int, dict] = {}
        self.counts = {o.name: 0 for o in Owner}
        self.next_gid = 0          # as the fold sees it: 1 + the highest id taken on this history
        self.loader = None
        self.pending: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.snaps: dict[int, dict] = {}   # step -> expected view at its checkpoint_begun
        self.taken: set[int] = set()       # every id taken on this history
        self.committed_at: dict[int, int] = {}  # step -> LSN of its checkpoint_committed
        # what each commit of the active history did to groups, in the recovery rules' terms:
        # (lsn, op), op one of ("take", [group dict], loader or None), ("divert", [gid]),
        # ("admit", [gid], target_step, policy_version, replaces), ("finish", [gid],
        # policy_version, locators or None), ("train" | "discard", [gid])
        self.log: list[tuple[int, tuple]] = []

    def view(self) -> dict:
        return {"lsn": self.lsn, "live": {gid: tuple(g[f] for f in FIELDS) for gid, g in self.live.items()},
                "counts": dict(self.counts), "next_group_id": self.next_gid,
                "loader": copy.deepcopy(self.loader), "taken": set(self.taken)}

    def of(self, *owners) -> list[int]:
        return sorted(gid for gid, g in self.live.items() if g["owner"] in owners)

    def move(self, gid: int, to: Owner, **fields) -> None:
        g = self.live[gid]
        self.counts[g["owner"].name] -= 1
        self.counts[to.name] += 1
        if to in LIVE:
            g.update(owner=to, **fields)
        else:
            del self.live[gid]


class _DataPlane:
    """The trainer's data plane as a restore asks it: which rows it still has."""

    def __init__(self, rows: set[str]) -> None:
        self.rows = rows

    def has(self, locator: str) -> bool:
        return locator in self.rows


class Recovered:
    """What the recovery rules make of the state at a checkpoint (`recovered_by_the_rules`):
    the live groups by id, the ids of the groups demoted and adopted (as the dead history named
    them) and their new ids, the loader state, and the resume's first commit in the log's terms."""

    def __init__(self, live: dict[int, dict], loader) -> None:
        self.live, self.loader = live, loader
        self.demoted_from: list[int] = []
        self.reissued_from: list[int] = []
        self.adopted_from: list[int] = []
        self.new_ids: list[int] = []
        self.log: list[tuple] = []

    def view(self) -> dict:
        return {gid: tuple(g[f] for f in FIELDS) for gid, g in self.live.items()}

    def counts(self, at_point: dict) -> dict:
        """The counts once the first commit is applied (`at_point`: at the checkpoint)."""
        out = {o.name: 0 for o in Owner}
        for g in self.live.values():
            out[g["owner"].name] += 1
        out["TRAINED"] = at_point["TRAINED"]
        out["DROPPED"] = at_point["DROPPED"] + len(self.demoted_from) + len(self.reissued_from)
        return out

    def next_gid(self, at_point: int) -> int:
        return max([at_point] + [g + 1 for g in self.new_ids])


def recovered_by_the_rules(want: dict, tail: list[tuple[int, tuple]], rows: set[str], step: int | None,
                           max_gid: int, admitted_ever: set[int], lag: int = 0) -> Recovered:
    """The recovery rules (docs/recovery.md, "Restoring" steps 5 and 6) for groups admitted without
    rollouts=, written again from the model's view at the checkpoint (`want`) and its log of the
    dead tail (`tail`): salvage, demotion, reissue, adoption, in that order; fresh ids above `max_gid`;
    work by weights up to `step + lag` kept (`max_policy_lag`)."""
    live = {gid: dict(zip(FIELDS, t)) for gid, t in want["live"].items()}
    rec = Recovered(live, want["loader"])
    if step is None:  # no checkpoint: the empty state, nothing kept
        return rec
    fresh = iter(range(max(want["next_group_id"], max_gid + 1), 1 << 62))
    finished, dropped = {}, set()
    for _, op in tail:
        if op[0] == "finish":
            for i, gid in enumerate(op[1]):
                finished[gid] = (op[2], op[3][i] if op[3] else None)
        elif op[0] == "discard":
            dropped.update(op[1])
    for gid in sorted(live):
        g = live[gid]
        pv, loc = finished.get(gid, (None, None))
        pv = pv if pv is not None else g["policy_version"]
        if (g["owner"] == Owner.ADMITTED and gid in finished and gid not in dropped and pv is not None
                and pv <= step + lag and loc in rows):
            g.update(owner=Owner.REPLAY, policy_version=pv, locator=loc)
            rec.log.append(("finish", [gid], pv, [loc]))
    for gid in sorted(live):
        g = live[gid]
        if g["owner"] == Owner.REPLAY and g["locator"] not in rows:
            new = next(fresh)
            del live[gid]
            live[new] = {**g, "group_id": new, "owner": Owner.ADMITTED, "locator": None, "replaces": gid}
            rec.demoted_from.append(gid)
            rec.new_ids.append(new)
            rec.log += [("discard", [gid]), ("take", [_taken(g, new)], None),
                        ("admit", [new], g["target_step"], g["policy_version"], gid)]
    waiting = {gid: _row(g) for gid, g in live.items() if g["owner"] in (Owner.RESERVED, Owner.SPARE)}
    _reissue(rec, admitted_ever, fresh, _tail_work(tail, waiting),
             lambda w, new: _follow(w, new, want, rows, step + lag, {}))
    _adopt(rec, want, tail, rows, step + lag, fresh)
    return rec


def _reissue(rec: Recovered, admitted_ever: set[int], fresh, work: dict | None = None, follow=None) -> None:
    """Rule 3 for the groups waiting at the point (reserved, then spare, each by id): one that
    any history admitted comes back under a fresh id, where it was, or (with the dead tail's
    `work`) as the tail admitted it, where its work there allows (`follow`)."""
    for owner in (Owner.RESERVED, Owner.SPARE):
        for gid in sorted(g for g, v in rec.live.items() if v["owner"] == owner and g in admitted_ever):
            new = next(fresh)
            rec.live[new] = {**rec.live.pop(gid), "group_id": new}
            rec.reissued_from.append(gid)
            rec.new_ids.append(new)
            rec.log += [("discard", [gid]), ("take", [_taken(rec.live[new], new)], None)]
            w = (work or {}).get(gid)
            if w is not None and "admit" in w:
                fields, log = follow(w, new)
                rec.live[new].update(fields)
                rec.log += log
            elif owner == Owner.SPARE:
                rec.log.append(("divert", [new]))


def _tail_work(tail: list[tuple[int, tuple]], waiting: dict[int, tuple]) -> dict[int, dict]:
    """What the tail did with each group waiting at the point (`waiting`: id -> row), under its
    id or under a re-take of its row (a take without a loader state in the commit that dropped
    it): its admission (target step, policy version, replaces) and its finish (policy version,
    locator)."""
    work: dict[int, dict] = {}
    alias, dropped = {}, {}  # re-take -> waiting group; (lsn, row) -> the group dropped then
    for lsn, op in tail:
        if op[0] == "discard":
            dropped.update(((lsn, waiting[g]), g) for g in op[1] if g in waiting)
        elif op[0] == "take" and op[2] is None:
            alias.update((g["group_id"], dropped[(lsn, _row(g))]) for g in op[1] if (lsn, _row(g)) in dropped)
        if op[0] not in ("admit", "finish"):
            continue
        for i, gid in enumerate(op[1]):
            gid = alias.get(gid, gid)
            if gid not in waiting:
                continue
            w = work.setdefault(gid, {})
            if op[0] == "admit":
                w["admit"] = op[2:]
            elif "admit" in w:
                w["finish"] = (op[2] if op[2] is not None else w["admit"][1], op[3][i] if op[3] else None)
    return work


def _follow(w: dict, new: int, want: dict, rows: set[str], bound: int, new_ids: dict) -> tuple[dict, list]:
    """A group the dead tail admitted (`w`: its work there), back under id `new`: the fields it
    gets and the log of its readmission (its finish kept when within `bound` with its row)."""
    ts, pv, rep = w["admit"]
    rep = new_ids.get(rep, rep if rep in want["taken"] else None)
    fields = {"owner": Owner.ADMITTED, "target_step": ts, "policy_version": pv, "replaces": rep}
    fpv, loc = w.get("finish", (None, None))
    if fpv is not None and fpv <= bound and loc in rows:
        fields.update(owner=Owner.REPLAY, policy_version=fpv, locator=loc)
    log = [("admit", [new], ts, fields["policy_version"], rep)]
    if fields["owner"] == Owner.REPLAY:
        log.append(("finish", [new], fpv, [loc]))
    return fields, log


def restored(want: dict, admitted_ever: set[int], max_gid: int) -> dict:
    """The view `restore` returns without salvage: the state at the point with rule 3 for the
    waiting groups applied (no other rule needs the dead tail or a data plane)."""
    rec = Recovered({gid: dict(zip(FIELDS, t)) for gid, t in want["live"].items()}, want["loader"])
    _reissue(rec, admitted_ever, iter(range(max(want["next_group_id"], max_gid + 1), 1 << 62)))
    return {**want, "live": rec.view()}


def _adopt(rec: Recovered, want: dict, tail: list[tuple[int, tuple]], rows: set[str], bound: int,
           fresh) -> None:
    """Rule 4: the loader's takes of the tail up to the last with a loader state (a take without
    one of a row its commit dropped is a demotion's re-take, not the loader's), under fresh ids,
    each where its work on the tail allows."""
    row_of = {gid: _row(dict(zip(FIELDS, t))) for gid, t in want["live"].items()}
    takes, work, upto, loader, dropped_rows = [], {}, 0, None, {}
    for lsn, op in tail:
        kind, gids = op[0], op[1]
        if kind == "take":
            for g in gids:
                row_of[g["group_id"]] = _row(g)
                if op[2] is None and _row(g) in dropped_rows.get(lsn, ()):
                    continue
                takes.append(g)
                work[g["group_id"]] = {}
            if op[2] is not None:
                upto, loader = len(takes), op[2]
            continue
        for i, gid in enumerate(gids):
            w = work.get(gid)
            if kind == "discard":
                dropped_rows.setdefault(lsn, set()).add(row_of.get(gid))
            elif w is None:
                continue
            elif kind == "divert":
                w["diverted"] = True
            elif kind == "admit":
                w["admit"] = op[2:]
            elif kind == "finish":
                w["finish"] = (op[2] if op[2] is not None else w["admit"][1], op[3][i] if op[3] else None)
    adopted = takes[:upto]
    if not adopted:
        return
    new_ids = {g["group_id"]: next(fresh) for g in adopted}
    spares, admissions = [], []
    for g in adopted:
        w, new = work[g["group_id"]], new_ids[g["group_id"]]
        n = _taken(g, new)
        if "admit" in w:
            fields, log = _follow(w, new, want, rows, bound, new_ids)
            n.update(fields)
            admissions += log
        elif w.get("diverted"):
            n["owner"] = Owner.SPARE
            spares.append(new)
        rec.live[new] = n
        rec.adopted_from.append(g["group_id"])
        rec.new_ids.append(new)
    rec.loader = loader
    rec.log.append(("take", [_taken(g, new_ids[g["group_id"]]) for g in adopted], loader))
    rec.log += ([("divert", spares)] if spares else []) + admissions


def _row(g: dict) -> tuple:
    return (g["epoch"], g["task_name"], g["idx"])


def _taken(g: dict, gid: int) -> dict:
    """Group `g`'s row as a `taken` under id `gid` records it (RESERVED, nothing else yet)."""
    return {**dict.fromkeys(FIELDS), "group_id": gid, "idx": g["idx"], "task_name": g["task_name"],
            "epoch": g["epoch"], "fingerprint": g["fingerprint"], "owner": Owner.RESERVED}


def _equal(got: dict, want: dict) -> None:
    assert got["lsn"] == want["lsn"]
    assert got["live"] == want["live"], (got["live"], want["live"])
    assert got["counts"] == want["counts"]
    assert got["next_group_id"] == want["next_group_id"]
    assert deep_equal(got["loader"], want["loader"]), (got["loader"], want["loader"])


class Run:
    """A journal driven by hypothesis-drawn operations, mirrored in the model."""

    def __init__(self, path: str, data) -> None:
        self.path, self.data = path, data
        self.m = Model()
        self.max_gid = -1          # the highest id ever handed out, on any branch
        self.step = 0
        self.j = Journal.open(path, sync="none", segment_bytes=4096, fs=NOSYNC)
        self.opened_at = 0         # the LSN when the writer opened: it began the later checkpoints
        self.rows: set[str] = set()  # the data plane: the rows finished groups named, less those lost
        self.admitted_ever: set[int] = set()  # every id any history admitted

    def commit(self) -> None:
        self.m.lsn += 1
        assert self.j.lsn == self.m.lsn

    def op(self) -> None:
        d, m, j = self.data, self.m, self.j
        kind = d.draw(st.sampled_from(("take", "take", "divert", "admit", "admit", "finish", "finish",
                                       "train", "train", "discard", "begin", "begin", "commit",
                                       "commit", "commit", "cut", "reopen")))
        if kind == "take":
            n = d.draw(st.integers(1, 3))
            pos = d.draw(st.integers(0, 10 ** 6))
            loader = {"pos": pos, "gen": torch.full((200,), pos % 3, dtype=torch.int32)}
            refs = [GroupRef(idx=d.draw(st.integers(0, 99)), task_name=d.draw(st.sampled_from((None, "math"))),
                             epoch=d.draw(st.sampled_from((None, 0, 1))),
                             fingerprint=d.draw(st.sampled_from((None, b"\x01" * 16)))) for _ in range(n)]
            gids = j.taken(refs, loader_state=loader)
            assert gids == list(range(max(m.next_gid, self.max_gid + 1), max(m.next_gid, self.max_gid + 1) + n))
            for gid, r in zip(gids, refs):
                m.live[gid] = {"group_id": gid, "idx": r.idx, "task_name": r.task_name, "epoch": r.epoch,
                               "fingerprint": r.fingerprint, "owner": Owner.RESERVED, "target_step": None,
                               "policy_version": None, "locator": None, "replaces": None}
                m.counts["RESERVED"] += 1
            m.next_gid = gids[-1] + 1
            self.max_gid = gids[-1]
            m.taken.update(gids)
            m.loader = loader
            self.commit()
            m.log.append((m.lsn, ("take", [dict(m.live[gid]) for gid in gids], loader)))
        elif kind == "divert" and m.of(Owner.RESERVED):
            gid = d.draw(st.sampled_from(m.of(Owner.RESERVED)))
            j.diverted([gid])
            m.move(gid, Owner.SPARE)
            self.commit()
            m.log.append((m.lsn, ("divert", [gid])))
        elif kind == "admit" and m.of(Owner.RESERVED, Owner.SPARE):
            pool = m.of(Owner.RESERVED, Owner.SPARE)
            gids = d.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
            ts, pv = self.step + d.draw(st.integers(1, 2)), d.draw(st.sampled_from((None, self.step)))
            rep = d.draw(st.sampled_from([None] + sorted(m.taken)[-6:]))  # a spare substitutes for it
            j.admitted(gids, target_step=ts, policy_version=pv, replaces=rep)
            self.admitted_ever.update(gids)
            for gid in gids:
                m.move(gid, Owner.ADMITTED, target_step=ts, policy_version=pv, replaces=rep)
            self.commit()
            m.log.append((m.lsn, ("admit", gids, ts, pv, rep)))
        elif kind == "finish" and m.of(Owner.ADMITTED):
            gids = d.draw(st.lists(st.sampled_from(m.of(Owner.ADMITTED)), min_size=1, max_size=2, unique=True))
            pv = d.draw(st.sampled_from((None, self.step)))
            with_loc = d.draw(st.booleans())
            locs = [f"tq/{g}" for g in gids] if with_loc else None
            self.rows.update(locs or ())  # rows durable in the data plane before the journal names them
            j.finished(gids, policy_version=pv, locators=locs)
            for i, gid in enumerate(gids):
                fields = {"locator": locs[i] if locs else None}
                if pv is not None:
                    fields["policy_version"] = pv
                m.move(gid, Owner.REPLAY, **fields)
            self.commit()
            m.log.append((m.lsn, ("finish", gids, pv, locs)))
        elif kind == "train" and m.of(Owner.REPLAY):
            gids = d.draw(st.lists(st.sampled_from(m.of(Owner.REPLAY)), min_size=1, max_size=3, unique=True))
            j.trained(gids, step=self.step + 1)
            for gid in gids:
                m.move(gid, Owner.TRAINED)
            self.commit()
            m.log.append((m.lsn, ("train", gids)))
        elif kind == "discard" and m.live:
            gid = d.draw(st.sampled_from(sorted(m.live)))
            j.discarded([gid], reason="rollout_failed")
            m.move(gid, Owner.DROPPED)
            self.commit()
            m.log.append((m.lsn, ("discard", [gid])))
        elif kind == "reopen":
            # the history continued as it is by a new writer: the checkpoints begun before are
            # no longer its own, so it may begin others while they are pending (which is how
            # several checkpoints come to be pending at once)
            self.j.close()
            self.j = Journal.open(self.path, sync="none", segment_bytes=4096, fs=NOSYNC)
            self.opened_at = m.lsn
        elif kind == "begin" and not any(lsn > self.opened_at for lsn in m.pending.values()):
            # one checkpoint of its own in flight per writer (a begin while it is pending is refused)
            self.step += 1
            lsn = j.begin_checkpoint(step=self.step)
            self.commit()
            assert lsn == m.lsn
            m.pending[self.step] = lsn
            m.snaps[self.step] = m.view()
        elif kind == "commit" and m.pending:
            s = d.draw(st.sampled_from(sorted(m.pending)))
            j.commit_checkpoint(step=s)
            self.commit()
            m.committed[s] = m.pending.pop(s)
            m.committed_at[s] = m.lsn
        elif kind == "cut":
            at = d.draw(st.integers(0, m.lsn))
            retention = d.draw(st.sampled_from((None, "archive")))
            compact(self.path, at=at, retention=retention, keep_cuts=d.draw(st.integers(1, 3)), fs=NOSYNC)

    def crash_and_resume(self) -> None:
        """Kill the run, restore a committed checkpoint (or the empty state): the fold there,
        and, with salvage and a data plane that lost a few rows, the recovery rules on top of
        it; resume from the latter."""
        m = self.m
        self.j.close()
        if m.committed:
            s0 = self.data.draw(st.sampled_from(sorted(m.committed)), label="restored step")
            want = m.snaps[s0]
        else:
            s0, want = None, Model().view()
        _equal(recovered_view(restore(self.path, step=s0)), restored(want, self.admitted_ever, self.max_gid))
        self.rows -= self.data.draw(st.sets(st.sampled_from(sorted(self.rows)), max_size=1)
                                    if self.rows else st.just(set()), label="rows lost")
        lag = self.data.draw(st.integers(0, 2), label="max_policy_lag")
        state = restore(self.path, step=s0, salvage=True, data_plane=_DataPlane(self.rows), max_policy_lag=lag)
        l0 = want["lsn"]
        rec = recovered_by_the_rules(want, [e for e in m.log if e[0] > l0], self.rows, s0, self.max_gid,
                                     self.admitted_ever, lag)
        _equal(recovered_view(state), {**want, "live": rec.view(), "loader": rec.loader})
        assert [g.adopted_from for g in state.adopted] == rec.adopted_from
        assert [g.replaces for g in state.demoted] == rec.demoted_from
        assert [g.group_id for g in state.reissued] == rec.new_ids[len(rec.demoted_from):][:len(rec.reissued_from)]
        self.admitted_ever.update(gid for op in rec.log if op[0] == "admit" for gid in op[1])
        # the model goes back to the checkpoint: its state then...
        back = Model()
        back.lsn, back.counts, back.next_gid = l0, rec.counts(want["counts"]), rec.next_gid(want["next_group_id"])
        back.loader, back.taken = rec.loader, set(want["taken"]) | set(rec.new_ids)
        back.live = rec.live
        back.log = [e for e in m.log if e[0] <= l0] + [(l0 + 1, op) for op in rec.log]
        self.max_gid = max([self.max_gid] + rec.new_ids)
        begun = {s: lsn for s, lsn in {**m.pending, **m.committed}.items() if lsn <= l0}
        back.committed = {s: begun[s] for s in begun if s in m.committed_at and m.committed_at[s] <= l0}
        back.committed_at = {s: m.committed_at[s] for s in back.committed}
        back.pending = {s: lsn for s, lsn in begun.items() if s not in back.committed}
        back.snaps = {s: m.snaps[s] for s in begun}
        # ...plus resume's first commit: every checkpoint pending then but committed on what is
        # now the dead tail is committed again (the restored one among them), and the groups
        # as the rules left them
        recommit = sorted((s for s in back.pending if s in m.committed), key=back.pending.get)
        assert sorted(state.recommit) == sorted(recommit)
        assert bool(state.first_commit) == bool(recommit or rec.log)
        # the resume writes its first commit, with the restore's record, when it has events or
        # branches: unless what it would abandon is only the checkpoint_committed markers it
        # writes again (then the history goes on at its end)
        tail = set(range(l0 + 1, m.lsn + 1))
        marks = {s for s, at in m.committed_at.items() if at in tail}
        rewrites = not rec.log and tail <= set(m.committed_at.values()) and marks == set(recommit)
        self.j = Journal.open(self.path, sync="none", segment_bytes=4096, resume=state, fs=NOSYNC)
        self.m = back
        if rewrites:
            back.lsn = m.lsn
            for s in recommit:
                back.committed[s] = back.pending.pop(s)
                back.committed_at[s] = m.committed_at[s]
        elif state.first_commit or tail:
            back.lsn += 1
            for s in recommit:
                back.committed[s] = back.pending.pop(s)
                back.committed_at[s] = back.lsn
        assert self.j.lsn == back.lsn
        self.opened_at = back.lsn
        self.step = max(back.pending.keys() | back.committed.keys(), default=0)

    def check(self) -> None:
        self.j.close()
        m = self.m
        for s in sorted(m.committed):
            got = restore(self.path, step=s)
            assert got.step == s
            _equal(recovered_view(got), restored(m.snaps[s], self.admitted_ever, self.max_gid))
        latest = restore(self.path)
        if m.committed:
            s = max(m.committed, key=m.committed.get)
            assert latest.step == s
            _equal(recovered_view(latest), restored(m.snaps[s], self.admitted_ever, self.max_gid))
        else:
            _equal(recovered_view(latest), Model().view())
        _equal(recovered_view(restore(self.path, at="end")), restored(m.view(), self.admitted_ever, self.max_gid))


@settings(max_examples=30, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_restore_equals_fold_up_to_checkpoint_begun(data):
    path = tempfile.mkdtemp(prefix="replay-prop-")
    try:
        run = Run(path, data)
        for _ in range(data.draw(st.integers(5, 40), label="ops before the crash")):
            run.op()
        for _ in range(data.draw(st.sampled_from((2, 1, 0)), label="dead tails")):
            run.crash_and_resume()
            for _ in range(data.draw(st.integers(0, 25), label="ops after the resume")):
                run.op()
        run.check()
    finally:
        shutil.rmtree(path, ignore_errors=True)
