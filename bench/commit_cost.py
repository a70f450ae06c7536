"""The commit path's CPU cost per commit, stage by stage (rows of `python -m bench append`), and
what a `rollout_progress` commit costs beside a `rollout_sealed` one.

Each stage is timed as a cumulative pipeline over the same one-event commits (each group
through taken -> admitted -> finished -> trained): build the event records; then encode them;
then the decode check; then the chain; then the fold (`apply`); then the frame and its write.
A stage costs the difference between two consecutive pipelines; what `Journal` spends beyond
the last one is its own machinery (argument checks, the lock, the queue, the undo record, the
batch). CPU time of this process (`time.process_time`), best of `RUNS`: the load of other jobs
on a shared machine distorts it less than wall time.
"""

from __future__ import annotations

import os
import resource
import time

from journal import (Admitted, Commit, Finished, GroupRef, Journal, RolloutRef, Taken, TakenGroup, Trained,
                     format as fmt)
from journal.reader import list_segments
from journal.vfs import OsFileSystem
from journal.events import commit_decoder, commit_encoder
from journal.fold import apply
from journal.state import State

from .common import scratch_dir

TASK = "math"
RUNS = 3
STAGES = ("event records built", "encode (msgpack)", "decode check (schema)", "length prefix + chain (CRC-32)",
          "fold (apply)", "frame + write")


def _life(n: int) -> tuple[list, list, list, list]:
    """The four one-event commits of group `n`'s life, as the transition methods build them."""
    return ([Taken([TakenGroup(n, n, TASK, 0)])], [Admitted([n], 1, 1)],
            [Finished([n], 1, [f"replay/{n:08d}"])], [Trained([n], 1)])


def _pipeline(stages: int, lives: int, f) -> None:
    """The first `stages` stages of the commit path for `lives` group lives (4 commits each),
    writing frames to the open `journal.vfs.File` `f`."""
    state, chain, lsn = State(), 0, 0
    encode, decode = commit_encoder.encode, commit_decoder.decode
    for n in range(lives):
        for events in _life(n):
            lsn += 1
            if stages < 2:
                continue
            record = encode(Commit(lsn, events, []))
            if stages < 3:
                continue
            commit = decode(record)
            if stages < 4:
                continue
            prefixed = fmt.length_prefixed(record)
            chain = fmt.frame_chain(prefixed, chain)
            if stages < 5:
                continue
            apply(state, commit, chain=chain, timeline=1)
            if stages < 6:
                continue
            f.write(fmt.frame_of_prefixed([prefixed], chain))


def _journal(path: str, lives: int) -> None:
    with Journal.open(path, sync="none") as j:
        for n in range(lives):
            (g,) = j.taken([GroupRef(idx=n, task_name=TASK, epoch=0)])
            j.admitted([g], target_step=1, policy_version=1)
            j.finished([g], policy_version=1, locators=[f"replay/{n:08d}"])
            j.trained([g], step=1)


def _cpu_ns_per_commit(run, commits: int) -> float:
    best = float("inf")
    for _ in range(RUNS):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best / commits * 1e9


def breakdown(parent: str | None, lives: int) -> dict[str, float]:
    """CPU ns per one-event commit of each stage (STAGES), of the whole `Journal` commit with
    sync="none" on one thread ("journal"), and of the journal's own machinery ("rest")."""
    commits = 4 * lives
    with scratch_dir(parent, "commit-cost-") as d:
        fs = OsFileSystem()
        cumulative = []
        for stages in range(1, len(STAGES) + 1):
            def run(k=stages):
                f = fs.create(os.path.join(d, f"frames-{k}-{time.monotonic_ns()}"))
                try:
                    _pipeline(k, lives, f)
                finally:
                    f.close()
            cumulative.append(_cpu_ns_per_commit(run, commits))
        whole = _cpu_ns_per_commit(lambda: _journal(os.path.join(d, f"j-{time.monotonic_ns()}"), lives),
                                   commits)
    costs = {STAGES[0]: cumulative[0]}
    for name, before, after in zip(STAGES[1:], cumulative, cumulative[1:]):
        costs[name] = max(0.0, after - before)
    costs["journal"] = whole
    costs["rest"] = max(0.0, whole - cumulative[-1])
    return costs


ROLLOUTS = 8  # per group, in the progress-vs-seal comparison


def _in_flight(path: str, groups: int) -> Journal:
    """An open journal (sync="none") of `groups` groups admitted with rollouts=ROLLOUTS, none sealed."""
    j = Journal.open(path, sync="none")
    for start in range(0, groups, 1000):
        gids = j.taken([GroupRef(idx=n, task_name=TASK, epoch=0) for n in range(start, min(groups, start + 1000))])
        j.admitted(gids, target_step=1, policy_version=1, rollouts=ROLLOUTS)
    return j


def _written(path: str) -> int:
    """Bytes the journal at `path` holds (its segments' used sizes, not the preallocated ones)."""
    return sum(seg.size for seg in list_segments(path))


def _rollout_commits(kind: str, path: str, commits: int) -> tuple[float, float]:
    """(CPU ns, bytes) per one-event commit of `commits` commits of `kind` on a fresh journal of
    rollouts in flight, one per rollout in turn: "seal" seals it (`rollout_sealed` with its
    locator and version), "progress" records a prefix of it (`rollout_progress`: locator,
    tokens, turn, version). The journal is built outside the timing."""
    j = _in_flight(path, -(-commits // ROLLOUTS))
    try:
        first = j.state_copy().groups()[0].group_id
        before = _written(path)
        start = time.process_time()
        if kind == "seal":
            for k in range(commits):
                g, i = first + k // ROLLOUTS, k % ROLLOUTS
                j.rollout_sealed([RolloutRef(g, i, 0, f"g{g}-r{i}-a0.rows")], policy_version=1)
        else:
            for k in range(commits):
                g, i = first + k // ROLLOUTS, k % ROLLOUTS
                j.rollout_progress(RolloutRef(g, i, 0, f"g{g}-r{i}-a0-p1.rows"), tokens=4096, turn=None,
                                   policy_version=1)
        elapsed = time.process_time() - start
        return elapsed / commits * 1e9, (_written(path) - before) / commits
    finally:
        j.close()


def progress_vs_seal(parent: str | None, commits: int) -> dict[str, float]:
    """CPU ns and bytes per one-event commit, sync="none", one thread, of a `rollout_progress`
    ("progress_ns", "progress_bytes") and of a `rollout_sealed` ("seal_ns", "seal_bytes"):
    best of RUNS rounds, the two alternating within each round (see `_rollout_commits`)."""
    best = {"progress": (float("inf"), 0.0), "seal": (float("inf"), 0.0)}
    with scratch_dir(parent, "progress-cost-") as d:
        for run in range(RUNS):
            for kind in ("progress", "seal") if run % 2 == 0 else ("seal", "progress"):
                ns, size = _rollout_commits(kind, os.path.join(d, f"{kind}-{run}"), commits)
                best[kind] = min(best[kind], (ns, size))
    return {"progress_ns": best["progress"][0], "progress_bytes": best["progress"][1],
            "seal_ns": best["seal"][0], "seal_bytes": best["seal"][1]}


def usage_per_commit(measure, seconds: float) -> tuple[float, dict[str, float]]:
    """(the rate `measure()` returned, in one-event commits per second over `seconds`; this
    process's CPU us, user us, system us and voluntary context switches per commit meanwhile)."""
    before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    rate = measure()
    after, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time() - cpu
    n = max(1.0, rate * seconds)
    return rate, {"cpu_us": cpu / n * 1e6, "user_us": (after.ru_utime - before.ru_utime) / n * 1e6,
                  "sys_us": (after.ru_stime - before.ru_stime) / n * 1e6,
                  "switches": (after.ru_nvcsw - before.ru_nvcsw) / n}
