"""An independent model of the ownership rules (README "Ownership model") for the journal tests.

Deliberately not built on `journal.fold`: a dict gid -> owner, the next group
id, the LSN and the checkpoint markers, with the transition table written out
again. Tests compare the library (writer state, `Reader` folds) against it.

Rollouts (groups admitted with rollouts=N) are a dict gid -> [attempts, {index: (locator,
policy_version, since)} of the sealed ones], kept while the group is live; their prefixes a dict
(gid, index) -> (locator, tokens, turn, policy_version, since) of the unsealed ones that hold
one. `since`: the oldest version of the tokens when older than `policy_version` (a prefix spans
the one it supersedes; a seal the prefix it completes), else None.

Events are plain tuples:
    ("taken", [gid, ...], loader_state_or_None)
    ("diverted" | "trained" | "discarded", [gid, ...])
    ("admitted", [gid, ...], replaces_or_None)      or, with rollouts=N,
    ("admitted", [gid, ...], replaces_or_None, N)
    ("finished", [gid, ...], locators_or_None)
    ("sealed", [[gid, index, attempt, locator], ...], policy_version_or_None[, since_version])
    ("failed", [[gid, index, attempt], ...])
    ("progress", [gid, index, attempt, locator], tokens, turn_or_None, policy_version_or_None[, since_version])
    ("begin" | "commit", step)
    ("identity", {key: fingerprint})                 (the run identity; moves no group)
    ("restored", point, step)                        (a restore's record; moves no group)
"""

from __future__ import annotations

import os

from journal import layout
from journal import (Admitted, CheckpointBegun, CheckpointCommitted, Discarded, Diverted, Finished,
                     GroupRef, IdentityRecorded, Owner, Progress, Restored, RolloutFailed, RolloutProgress,
                     RolloutRef, RolloutSealed, Taken, Trained)

from tests.support.loader_states import loader_state

R, A, P, S, T, D = Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE, Owner.TRAINED, Owner.DROPPED
LIVE = {R, A, P, S}
RULES = {  # kind: (allowed from-owners, to-owner)
    "diverted": ({R}, S),
    "admitted": ({R, S}, A),
    "finished": ({A}, P),
    "trained": ({P}, T),
    "discarded": (LIVE, D),
}


class Illegal(Exception):
    """The model rejects a commit (the library must raise OwnershipError)."""


class Model:
    def __init__(self) -> None:
        self.owners: dict[int, Owner] = {}
        self.next_gid = 0
        self.lsn = 0
        self.pending: dict[int, int] = {}    # step -> checkpoint_begun LSN
        self.committed: dict[int, int] = {}  # step -> checkpoint_begun LSN
        self.open_lsn = 0                    # the LSN when the writer opened: it began the later begins
        # the rules of a reader's fold; True: a writer's append-time rules too (to predict what
        # it refuses: tests/journal/test_stateful.py)
        self.appending = False
        self.loader = None                   # the last loader_state a taken carried (as given)
        self.has_loader = False
        self.rollouts: dict[int, list] = {}  # live gid -> [attempts, {index: (locator, version)}]
        self.progress: dict[tuple[int, int], tuple] = {}  # (gid, index) -> (locator, tokens, turn, version)
        self.identity: dict | None = None    # the run identity recorded last

    def copy(self) -> "Model":
        m = Model()
        m.owners = dict(self.owners)
        m.next_gid, m.lsn = self.next_gid, self.lsn
        m.pending, m.committed = dict(self.pending), dict(self.committed)
        m.open_lsn, m.appending = self.open_lsn, self.appending
        m.loader, m.has_loader, m.identity = self.loader, self.has_loader, self.identity
        m.rollouts = {g: [list(a), dict(s)] for g, (a, s) in self.rollouts.items()}
        m.progress = dict(self.progress)
        return m

    def counts(self) -> dict[Owner, int]:
        out = {o: 0 for o in Owner}
        for o in self.owners.values():
            out[o] += 1
        return out

    def live(self) -> dict[int, Owner]:
        return {g: o for g, o in self.owners.items() if o in LIVE}

    def recovered(self) -> dict[int, Owner]:
        """The owner a restore at this state hands each live group back with: its own, but
        REPLAY for an ADMITTED group whose rollouts are all sealed (the resume finishes it)."""
        done = {g for g, (attempts, sealed) in self.rollouts.items()
                if self.owners[g] == A and len(sealed) == len(attempts)}
        return {g: P if g in done else o for g, o in self.live().items()}

    def unsealed(self) -> list[tuple[int, int, int]]:
        """(gid, index, attempt) of every unsealed rollout of an ADMITTED group, by gid and index:
        the rollouts a resume at this state fences."""
        return [(g, i, a) for g in sorted(self.rollouts) if self.owners[g] == A
                for i, a in enumerate(self.rollouts[g][0]) if i not in self.rollouts[g][1]]

    def fenced_attempt(self, gid: int, index: int, used: dict) -> int:
        """The attempt a resume at this state hands an unsealed rollout of an ADMITTED group:
        above its attempt here and above every attempt any history dispatched it in (`used`:
        (gid, index) -> highest attempt, as read off the disk)."""
        return max(self.rollouts[gid][0][index], used.get((gid, index), 0)) + 1

    def recovered_rollouts(self, gid: int, used: dict, version: int | None = None) -> list[tuple] | None:
        """What restore hands back for `gid`'s rollouts: (index, attempt, sealed, locator,
        policy_version), an unsealed rollout of an ADMITTED group with its attempt fenced; a
        seal recorded without a version read as made by `version` (the group's)."""
        if gid not in self.rollouts:
            return None
        attempts, sealed = self.rollouts[gid]
        admitted = self.owners[gid] == A
        return [(i, a, True, sealed[i][0], _or(sealed[i][1], version)) if i in sealed else
                (i, self.fenced_attempt(gid, i, used) if admitted else a, False, None, None)
                for i, a in enumerate(attempts)]

    def recovered_progress(self, gid: int, index: int, step: int | None,
                           version: int | None = None) -> Progress | None:
        """The prefix restore (without a data plane) hands back for an unsealed rollout of an
        ADMITTED group at this state, the checkpoint's `step`: the one it holds, unless
        weights newer than `step` made it (one recorded without a version: `version`'s, the
        group's)."""
        p = self.progress.get((gid, index))
        if p is None or self.owners.get(gid) != A:
            return None
        p = Progress(*p[:3], _or(p[3], version), p[4])
        if p.policy_version is not None and (step is None or p.policy_version > step):
            return None
        return p

    def carried_progress(self, used: dict, step: int | None, versions: dict | None = None) -> list:
        """The `rollout_progress` events a resume at this state writes after its fences: each
        prefix handed back, under the rollout's fenced attempt, by gid and index (`versions`:
        each group's, for prefixes recorded without one)."""
        out = []
        for g, i, _ in self.unsealed():
            p = self.recovered_progress(g, i, step, (versions or {}).get(g))
            if p is not None:
                out.append(RolloutProgress(RolloutRef(g, i, self.fenced_attempt(g, i, used), p.locator),
                                           p.tokens, p.turn, p.policy_version, p.since))
        return out

    def fence_rounds(self, used: dict) -> list[list[tuple[int, int, int]]]:
        """The `rollout_failed` rounds a resume at this state writes, each as (gid, index,
        attempt) in gid and index order: round k fails attempt a+k of every unsealed rollout
        whose fenced attempt is above a+k (a failure raises an attempt by one)."""
        targets = [(g, i, a, self.fenced_attempt(g, i, used)) for g, i, a in self.unsealed()]
        rounds = max((new - a for _, _, a, new in targets), default=0)
        return [[(g, i, a + k) for g, i, a, new in targets if a + k < new] for k in range(rounds)]

    def _rollout(self, kind: str, ref: list, seen: set) -> list:
        """The rollout record `ref` ([gid, index, attempt, ...]) names, if `kind` may change it."""
        g, index, attempt = ref[0], ref[1], ref[2]
        if self.owners.get(g) != A or g not in self.rollouts:
            raise Illegal(f"{kind} of group {g}: owner {self.owners.get(g)}, "
                          f"rollouts tracked: {g in self.rollouts}")
        attempts, sealed = self.rollouts[g]
        if not 0 <= index < len(attempts) or (g, index) in seen or index in sealed:
            raise Illegal(f"{kind} of rollout {index} of group {g}: out of range, twice or sealed")
        if attempt != attempts[index]:
            raise Illegal(f"{kind} of rollout {index} of group {g}: attempt {attempt} != {attempts[index]}")
        seen.add((g, index))
        return self.rollouts[g]

    def event(self, ev: tuple, lsn: int) -> None:
        """Apply one event in place (callers work on a copy); raise Illegal if not allowed."""
        kind = ev[0]
        if kind == "taken":
            for g in ev[1]:
                if g < self.next_gid:
                    raise Illegal(f"taken {g} < next {self.next_gid}")
                self.owners[g] = R
                self.next_gid = g + 1
            if ev[2] is not None:
                self.loader, self.has_loader = ev[2], True
        elif kind in RULES:
            gids = ev[1]
            if len(set(gids)) != len(gids):
                raise Illegal("a group named twice")
            if kind == "admitted" and ev[2] is not None and ev[2] not in self.owners:
                raise Illegal(f"replaces {ev[2]} was never taken")
            if kind == "finished" and ev[2] is not None and len(ev[2]) != len(gids):
                raise Illegal("locators do not match groups")
            allowed, to = RULES[kind]
            for g in gids:
                if self.owners.get(g) not in allowed:
                    raise Illegal(f"{kind} {g} from {self.owners.get(g)}")
                if kind == "finished" and g in self.rollouts and (
                        ev[2] is not None or len(self.rollouts[g][1]) != len(self.rollouts[g][0])):
                    raise Illegal(f"finished {g}: locators given, or not all its rollouts sealed")
                self.owners[g] = to
                if kind == "admitted" and len(ev) > 3 and ev[3] is not None:
                    self.rollouts[g] = [[0] * ev[3], {}]
                elif to not in LIVE:
                    self.rollouts.pop(g, None)
                    self.progress = {k: p for k, p in self.progress.items() if k[0] != g}
        elif kind == "sealed":
            seen: set = set()
            for ref in ev[1]:
                before = self.progress.pop((ref[0], ref[1]), None)  # a seal ends the prefix
                self._rollout(kind, ref, seen)[1][ref[1]] = (ref[3], *_span(ev[2], ev[3:], before))
        elif kind == "failed":
            seen = set()
            for ref in ev[1]:
                self._rollout(kind, ref, seen)[0][ref[1]] += 1
                self.progress.pop((ref[0], ref[1]), None)  # so does a failure
        elif kind == "progress":
            ref = ev[1]
            self._rollout(kind, ref, set())
            before = self.progress.get((ref[0], ref[1]))  # the newer supersedes, spanning it
            self.progress[(ref[0], ref[1])] = (ref[3], ev[2], ev[3], *_span(ev[4], ev[5:], before))
        elif kind == "begin":
            if ev[1] in self.committed:
                raise Illegal("step already committed")
            # the writer's rules (append time only): one checkpoint of its own in flight, and
            # steps above every committed one
            if self.appending and any(begun > self.open_lsn for begun in self.pending.values()):
                raise Illegal("a checkpoint this writer began is not committed yet")
            if self.appending and self.committed and ev[1] < max(self.committed):
                raise Illegal("step below a committed one")
            self.pending[ev[1]] = lsn
        elif kind == "commit":
            if ev[1] not in self.pending:
                raise Illegal("no pending begin")
            self.committed[ev[1]] = self.pending.pop(ev[1])
        elif kind == "identity":
            self.identity = dict(ev[1])
        elif kind == "restored":  # a restore's record: no group moves
            pass
        else:
            raise ValueError(kind)

    def commit(self, events: list[tuple]) -> "Model":
        """The model after one atomic commit of `events` (self is unchanged); raises Illegal."""
        m = self.copy()
        m.lsn += 1
        for ev in events:
            m.event(ev, m.lsn)
        return m


def _or(recorded, fallback):
    return recorded if recorded is not None else fallback


def _span(version, given: tuple, before: tuple | None) -> tuple:
    """(version, since) kept for work recorded with `version` (and `given`, its event's
    since_version if it has one) that extends `before` (a prefix tuple, or None): the newest
    and, when older, the oldest of every version known."""
    known = [v for v in (version, *given, *((before[4], before[3]) if before is not None else ())) if v is not None]
    if not known:
        return None, None
    return max(known), (min(known) if min(known) < max(known) else None)


def events_of(commit) -> list[tuple]:
    """A journal `Commit` (as read from disk) in the model's vocabulary (loader state: the
    packed struct, not decoded)."""
    out = []
    for ev in commit.events:
        t = type(ev)
        if t is Taken:
            out.append(("taken", [g.group_id for g in ev.groups], ev.loader_state))
        elif t is Diverted:
            out.append(("diverted", list(ev.groups)))
        elif t is Admitted:
            n = () if ev.rollouts is None else (ev.rollouts,)
            out.append(("admitted", list(ev.groups), ev.replaces, *n))
        elif t is Finished:
            out.append(("finished", list(ev.groups), ev.locators))
        elif t is Trained:
            out.append(("trained", list(ev.groups)))
        elif t is Discarded:
            out.append(("discarded", list(ev.groups)))
        elif t is RolloutSealed:
            out.append(("sealed", [[r.group_id, r.index, r.attempt, r.locator] for r in ev.rollouts],
                        ev.policy_version, *(() if ev.since_version is None else (ev.since_version,))))
        elif t is RolloutFailed:
            out.append(("failed", [[r.group_id, r.index, r.attempt] for r in ev.rollouts]))
        elif t is RolloutProgress:
            r = ev.ref
            out.append(("progress", [r.group_id, r.index, r.attempt, r.locator], ev.tokens, ev.turn,
                        ev.policy_version, *(() if ev.since_version is None else (ev.since_version,))))
        elif t is CheckpointBegun:
            out.append(("begin", ev.step))
        elif t is CheckpointCommitted:
            out.append(("commit", ev.step))
        elif t is IdentityRecorded:
            out.append(("identity", dict(ev.digests)))
        elif t is Restored:
            out.append(("restored", ev.point, ev.step))
        else:
            raise AssertionError(f"unknown event {ev!r}")
    return out


def fold_records(records) -> Model:
    """The model folded over `Reader.records()` output; LSNs must run 1, 2, 3, ...
    (loader states are decoded, so `.loader` compares with what the writer was given)."""
    from journal.loader_state import unpack
    m = Model()
    for rec in records:
        assert rec.commit.lsn == m.lsn + 1, f"LSN {rec.commit.lsn} after {m.lsn}"
        evs = [("taken", ev[1], unpack(ev[2], rec.blobs)) if ev[0] == "taken" and ev[2] is not None
               else ev for ev in events_of(rec.commit)]
        m = m.commit(evs)
    return m


def assert_journal_matches(j, model: Model, *, probe_extra: int = 2) -> None:
    """The open journal `j` agrees with `model`: owner map, counts, next id, LSN, checkpoints."""
    assert j.lsn == model.lsn
    top = model.next_gid + probe_extra
    probes = range(-1, top) if top < 5000 else sorted(set(model.owners) | {-1, top - 1, top})
    for g in probes:
        assert j.owner_of(g) == model.owners.get(g), f"group {g}"
    assert j.counts() == model.counts()
    assert {g.group_id: g.owner for g in j.groups()} == model.live()
    st = j.state_copy()
    assert_state_matches(st, model)


def assert_state_matches(st, model: Model) -> None:
    """A `journal.State` (from the writer or a Reader fold) agrees with `model`."""
    assert st.lsn == model.lsn
    assert st.next_group_id == model.next_gid
    assert {g: grp.owner for g, grp in st.live.items()} == model.live()
    for g, o in model.owners.items():
        assert st.owner_of(g) == o, f"group {g}"
    assert st.owner_counts() == model.counts()
    assert st.pending_checkpoints == model.pending
    assert st.committed_checkpoints == model.committed
    assert st.identity == model.identity
    tracked = {g: grp.rollouts for g, grp in st.live.items() if grp.rollouts is not None}
    assert set(tracked) == set(model.rollouts), "groups whose rollouts are tracked"
    for g, r in tracked.items():
        attempts, sealed = model.rollouts[g]
        assert list(r.attempts) == attempts, f"group {g} attempts"
        assert {i for i in range(r.n) if r.is_sealed(i)} == set(sealed), f"group {g} sealed"
        assert [(r.locators[i], r.versions[i], r.since_of(i)) for i in range(r.n)] == \
            [sealed.get(i, (None, None, None)) for i in range(r.n)], f"group {g} locators, versions and spans"
        assert [r.progress_of(i) for i in range(r.n)] == \
            [Progress(*p) if (p := model.progress.get((g, i))) else None for i in range(r.n)], \
            f"group {g} prefixes"


def tree_bytes(path: str) -> dict[str, bytes]:
    """{relative path: contents} of every file under `path` (to prove nothing was written),
    but the spare segment (`layout.PREPARED_NAME`): it holds no commit, and a writer zero-fills
    it in the background once its active segment is half full, at any moment after a commit."""
    out = {}
    for dirpath, _, files in os.walk(path):
        for name in files:
            if name == layout.PREPARED_NAME:
                continue
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


def segment_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".wal"))


def clone(src: str, dst: str) -> str:
    """Copy a journal directory (files only, LOCK included) with plain file I/O."""
    import shutil
    shutil.copytree(src, dst)
    return dst




# -- a random legal workload, shared by the torn-tail, bit-flip, fault and crash tests ----------


def step(j, m: Model, rng, *, loader_every: int = 3, loader_bytes: int = 600, max_take: int = 3,
         fingerprint_bytes: int = 0, take_weight: int = 3) -> Model:
    """Issue one random *legal* call on journal `j` (state `m`); return the model after it."""
    live = m.live()
    by = {o: [g for g, x in live.items() if x == o] for o in (R, A, P, S)}
    kinds = ["taken"] * take_weight
    if by[R]:
        kinds += ["diverted", "admitted", "admitted"]
    if by[S]:
        kinds += ["admitted"]
    if by[A]:
        kinds += ["finished", "finished", "tx"]
    if by[P]:
        kinds += ["trained", "trained"]
    if live:
        kinds += ["discarded"]
    kinds += ["begin"] if not m.pending else ["commit"]
    kind = rng.choice(kinds)

    def some(gs):
        return sorted(rng.sample(gs, rng.randint(1, min(3, len(gs)))))

    if kind == "taken":
        k = rng.randint(1, max_take)
        refs = [GroupRef(idx=rng.randrange(10_000), task_name=rng.choice(("math", "code", None)),
                         epoch=m.next_gid // 20,
                         fingerprint=rng.randbytes(fingerprint_bytes) if fingerprint_bytes else None)
                for _ in range(k)]
        ls = None
        if loader_every and rng.randrange(loader_every) == 0:
            ls = loader_state(m.next_gid, m.next_gid // 20, blob_bytes=loader_bytes)
        gids = list(range(m.next_gid, m.next_gid + k))
        new = m.commit([("taken", gids, ls)])
        assert j.taken(refs, loader_state=ls) == gids
        assert j.lsn == new.lsn
        return new
    if kind == "tx":  # discard an admitted group and admit a replacement in one commit
        bad = rng.choice(by[A])
        spare = [g for g in by[R] + by[S]]
        evs = [("discarded", [bad])]
        with j.transaction() as tx:
            tx.discarded([bad], reason="rollout_failed")
            if spare:
                g = rng.choice(spare)
                tx.admitted([g], target_step=m.lsn, replaces=bad)
                evs.append(("admitted", [g], bad))
        new = m.commit(evs)
        assert tx.lsn == new.lsn
        return new
    if kind == "begin":
        # a writer begins a step above every committed one (an append-time rule; see fold.begin_refused)
        s = rng.choice(range(max(m.committed, default=-1) + 1, m.lsn + 2))
        new = m.commit([("begin", s)])
        assert j.begin_checkpoint(step=s) == new.lsn
        return new
    if kind == "commit":
        s = rng.choice(sorted(m.pending))
        new = m.commit([("commit", s)])
        assert j.commit_checkpoint(step=s) == new.lsn
        return new
    if kind == "diverted":
        gs = some(by[R])
        new = m.commit([("diverted", gs)])
        assert j.diverted(gs) == new.lsn
    elif kind == "admitted":
        gs = some(by[R] + by[S])
        rep = rng.choice([None, None, rng.choice(sorted(m.owners))])
        new = m.commit([("admitted", gs, rep)])
        assert j.admitted(gs, target_step=m.lsn, policy_version=rng.randrange(5), replaces=rep) == new.lsn
    elif kind == "finished":
        gs = some(by[A])
        locs = [f"buf/{g}" for g in gs] if rng.random() < 0.5 else None
        new = m.commit([("finished", gs, locs)])
        assert j.finished(gs, policy_version=rng.randrange(5), locators=locs) == new.lsn
    elif kind == "trained":
        gs = some(by[P])
        new = m.commit([("trained", gs)])
        assert j.trained(gs, step=m.lsn) == new.lsn
    else:
        gs = some(sorted(live))
        new = m.commit([("discarded", gs)])
        assert j.discarded(gs, reason="stale") == new.lsn
    return new


def drive(j, m: Model, rng, n: int, history: list | None = None, **kw) -> Model:
    """`n` random legal calls; appends the model after each to `history` if given."""
    for _ in range(n):
        m = step(j, m, rng, **kw)
        if history is not None:
            history.append(m)
    return m


def frames(path: str) -> list[tuple[str, int, int, list[int]]]:
    """(segment name, start offset, end offset, LSNs) of every frame of a clean journal, in order."""
    from journal import Reader
    r = Reader(path)
    out: list = []
    for rec in r.records():
        if out and out[-1][0] == rec.segment and out[-1][1] == rec.offset:
            out[-1][3].append(rec.commit.lsn)
        else:
            out.append([rec.segment, rec.offset, None, [rec.commit.lsn]])
    assert not r.problems, r.problems
    for i, f in enumerate(out):
        nxt = out[i + 1] if i + 1 < len(out) else None
        seg_path = os.path.join(path, f[0])
        zeros = r.zero_tails.get(seg_path)  # the last frame ends where the preallocated zeros start
        f[2] = (nxt[1] if nxt is not None and nxt[0] == f[0]
                else zeros.offset if zeros is not None else os.path.getsize(seg_path))
    return [tuple(f) for f in out]


def append_and_verify(path: str, m: Model) -> None:
    """Reopened journal at state `m`: two more commits (one reusing the last loader state, so
    its blob must be stored again if the segment does not hold it), then a strict read."""
    from journal import Journal, Reader
    with Journal.open(path, segment_bytes=4096) as j:
        assert_journal_matches(j, m)
        gids = j.taken([GroupRef(idx=7)], loader_state=m.loader)
        assert gids == [m.next_gid]
        m = m.commit([("taken", gids, m.loader)])
        j.diverted(gids)
        m = m.commit([("diverted", gids)])
        assert j.lsn == m.lsn
    reader = Reader(path)
    assert fold_records(reader.records()).owners == m.owners
    assert not reader.problems
    assert_state_matches(Reader(path).fold(), m)
