"""The appending process of the SIGKILL crash loop (tests/journal/test_crash_loop.py).

    python crash_child.py run DIR SEED SEGMENT_BYTES
        open the journal at DIR (sync="always") and append random legal transitions
        forever: takes with a loader state holding a tensor, diverts, admissions (some with
        replaces=, some with rollouts=N), rollout seals (with and without locators) and
        failures, finishes with locators (or, for groups with rollouts, once all are sealed),
        trains, discards, transactions (one seals a group's last rollouts, fails another's
        and finishes the first) and checkpoint markers, chosen from the journal's own state,
        and now and then a compaction at "end" (a cut and its journal state file, which the
        next open starts from; a kill can land inside it)
        (so a run continues whatever history the previous, killed, run left). A seal of an
        attempt that was failed must raise StaleAttempt (and is not a commit). Writes one
        line per acknowledged commit to stdout:
            OPEN <lsn>                     after Journal.open returned
            ACK <lsn> <json events>        after the call returned (the commit is durable)
        Events use the vocabulary of tests/support/journal_model.py: ["taken", [gids], n] where n
        is the loader-state counter, ["admitted", [gids], replaces(, n)], ["finished", [gids],
        locators], ["sealed", [[gid, index, attempt, locator], ...], policy_version],
        ["failed", [[gid, index, attempt], ...]], ["begin", step], ...

    python crash_child.py serve
        a zygote: imports the journal (and torch) once, prints READY, then reads commands on
        stdin. "run DIR SEED SEGMENT_BYTES" forks a child that does what `run` does and
        prints "PID <pid>"; "wait PID" reaps it and prints "EXIT <pid> <status>" (a negative
        status is the signal). The parent SIGKILLs the forked children; forking saves the
        ~1.5 s torch import per run. Every line is one os.write (atomic on a pipe).
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from journal import GroupRef, Journal, JournalWarning, Owner, RolloutRef, StaleAttempt  # noqa: E402

from snapshot import compact  # noqa: E402
from tests.support.loader_states import loader_state  # noqa: E402  (imports torch)


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def refs_json(refs: list[RolloutRef], sealing: bool) -> list[list]:
    return [[r.group_id, r.index, r.attempt] + ([r.locator] if sealing else []) for r in refs]


def run(path: str, seed: int, segment_bytes: int) -> None:
    rng = random.Random(seed)
    with warnings.catch_warnings():  # it continues the killed history as it is, on purpose
        warnings.simplefilter("ignore", JournalWarning)
        j = Journal.open(path, sync="always", segment_bytes=segment_bytes)
    say(f"OPEN {j.lsn}")
    while True:
        by = {o: [g.group_id for g in j.groups(o)] for o in (Owner.RESERVED, Owner.ADMITTED,
                                                          Owner.REPLAY, Owner.SPARE)}
        st = j.state_copy()
        live = sorted(g for v in by.values() for g in v)
        tracked = [st.live[g] for g in by[Owner.ADMITTED] if st.live[g].rollouts is not None]
        unsealed = [RolloutRef(g.group_id, i, g.rollouts.attempts[i]) for g in tracked
                    for i in g.rollouts.unsealed()]
        finishable = [g for g in by[Owner.ADMITTED]
                      if st.live[g].rollouts is None or st.live[g].rollouts.all_sealed()]
        kinds = ["taken"] * 3
        if by[Owner.RESERVED]:
            kinds += ["diverted", "admitted"]
        if by[Owner.SPARE]:
            kinds += ["admitted"]
        if by[Owner.ADMITTED]:
            kinds += ["tx"]
        if finishable:
            kinds += ["finished", "finished"]
        if unsealed:
            kinds += ["sealed", "sealed", "sealed", "failed", "rollout_tx", "stale"]
        if by[Owner.REPLAY]:
            kinds += ["trained", "trained"]
        if live:
            kinds += ["discarded"]
        kinds += ["commit"] if st.pending_checkpoints else ["begin"]
        kind = "compact" if rng.random() < 0.03 else rng.choice(kinds)
        if kind == "compact":  # a cut with its state file (the next open folds from it)
            compact(path, "end", journal=j, retention=None)
            continue

        def some(gs):
            return sorted(rng.sample(gs, rng.randint(1, min(3, len(gs)))))

        if kind == "taken":
            n = st.next_group_id
            ls = loader_state(n, n // 25, blob_bytes=5000) if rng.random() < 0.5 else None
            gids = j.taken([GroupRef(idx=rng.randrange(1000), task_name="math", epoch=n // 25)
                            for _ in range(rng.randint(1, 3))], loader_state=ls)
            lsn, evs = j.lsn, [["taken", gids, n if ls is not None else None]]
        elif kind == "tx":
            bad = rng.choice(by[Owner.ADMITTED])
            spare = by[Owner.RESERVED] + by[Owner.SPARE]
            evs = [["discarded", [bad]]]
            with j.transaction() as tx:
                tx.discarded([bad], reason="rollout_failed")
                if spare:
                    g = rng.choice(spare)
                    tx.admitted([g], target_step=st.lsn, replaces=bad)
                    evs.append(["admitted", [g], bad])
            lsn = tx.lsn
        elif kind == "begin":
            s = st.lsn
            lsn, evs = j.begin_checkpoint(step=s), [["begin", s]]
        elif kind == "commit":
            s = rng.choice(sorted(st.pending_checkpoints))
            lsn, evs = j.commit_checkpoint(step=s), [["commit", s]]
        elif kind == "diverted":
            gs = some(by[Owner.RESERVED])
            lsn, evs = j.diverted(gs), [["diverted", gs]]
        elif kind == "admitted":
            gs = some(by[Owner.RESERVED] + by[Owner.SPARE])
            rep = rng.choice(live) if rng.random() < 0.3 else None
            n = rng.randint(1, 4) if rng.random() < 0.5 else None
            lsn = j.admitted(gs, target_step=st.lsn, replaces=rep, rollouts=n)
            evs = [["admitted", gs, rep] + ([n] if n is not None else [])]
        elif kind in ("sealed", "failed"):
            refs = rng.sample(unsealed, rng.randint(1, min(3, len(unsealed))))
            if kind == "sealed":
                refs = [RolloutRef(r.group_id, r.index, r.attempt, f"dp/{r.group_id}/{r.index}/{r.attempt}")
                        for r in refs]
                pv = rng.choice((None, 1, 2))
                lsn, evs = j.rollout_sealed(refs, policy_version=pv), [["sealed", refs_json(refs, True), pv]]
            else:
                lsn, evs = j.rollout_failed(refs, reason="timeout"), [["failed", refs_json(refs, False)]]
        elif kind == "rollout_tx":  # seal one group's last rollouts, fail another's, finish the first
            g = st.live[rng.choice(sorted({r.group_id for r in unsealed}))]
            last = [RolloutRef(g.group_id, r.index, r.attempt, f"dp/{g.group_id}/{r.index}/{r.attempt}")
                    for r in unsealed if r.group_id == g.group_id]
            others = [r for r in unsealed if r.group_id != g.group_id]
            with j.transaction() as tx:
                tx.rollout_sealed(last, policy_version=2)
                evs = [["sealed", refs_json(last, True), 2]]
                if others:
                    bad = [rng.choice(others)]
                    tx.rollout_failed(bad, reason="worker_lost")
                    evs.append(["failed", refs_json(bad, False)])
                tx.finished([g.group_id], policy_version=2)
                evs.append(["finished", [g.group_id], None])
            lsn = tx.lsn
        elif kind == "stale":  # a late result of a failed attempt is fenced, nothing is written
            failed = [r for r in unsealed if r.attempt > 0]
            if not failed:
                continue
            r = rng.choice(failed)
            try:
                j.rollout_sealed([RolloutRef(r.group_id, r.index, r.attempt - 1, "dp/late")])
            except StaleAttempt:
                continue
            raise AssertionError(f"a seal of attempt {r.attempt - 1} of group {r.group_id} rollout "
                                 f"{r.index} (current {r.attempt}) was accepted")
        elif kind == "finished":
            gs = some(finishable)
            locs = [f"buf/{g}" for g in gs] if rng.random() < 0.5 and not any(
                st.live[g].rollouts is not None for g in gs) else None
            lsn, evs = j.finished(gs, policy_version=1, locators=locs), [["finished", gs, locs]]
        elif kind == "trained":
            gs = some(by[Owner.REPLAY])
            lsn, evs = j.trained(gs, step=st.lsn), [["trained", gs]]
        else:
            gs = some(live)
            lsn, evs = j.discarded(gs, reason="stale"), [["discarded", gs]]
        say(f"ACK {lsn} {json.dumps(evs, separators=(',', ':'))}")


def serve() -> None:
    say("READY")
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            pid = os.fork()
            if pid == 0:
                try:
                    run(cmd[1], int(cmd[2]), int(cmd[3]))
                except BaseException:  # run() never returns: anything here is a failure
                    traceback.print_exc()
                finally:
                    os._exit(3)
            say(f"PID {pid}")
        elif cmd[0] == "wait":
            pid, status = os.waitpid(int(cmd[1]), 0)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            say(f"EXIT {pid} {code}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
