"""`python -m bench replay`: how fast restore replays a journal tail, and what a big restore costs.

Vocabulary: an **event** is one group's transition. An event record naming k
groups counts k (a 64-ref `taken` is 64 events), checkpoint markers count 0;
so "events/s" here is what `bench append` calls group-transitions/s. In the
rollout-heavy tail a `rollout_sealed` / `rollout_failed` counts the rollouts it
names (one seal of one rollout is one event).

The tail is trainer-shaped, as `examples/trainer.py` writes it: per step of
64 groups, one `taken` of 64 refs carrying a loader state (StatefulDataLoader's
layout with its 5 KB generator tensor, stored once per segment as a blob), one
`admitted` of 64, 64 one-group `finished` commits with data-plane locators
(rollouts finish one by one), one `trained` of 64, and a checkpoint pair every
10 steps. One writer thread, `sync="none"`: one commit per frame (group commit
under concurrent producers would only put more commits in a frame).

Figures (interleaved rounds, medians):

1. tail replay: `Reader.fold` of a 1,000,000-event tail (200,000 with
   --quick) vs the limit measured in the same run: a loop that reads the same
   segment files and only msgspec-decodes every commit of every frame (no
   checksum, chain, LSN or ownership checks, no fold). Target >= 1,500,000
   events/s; the ratio to the limit has none (the fold's cost in CPython bounds
   it: docs/benchmarks.md). Measured twice: wall time, and CPU time of this
   process (`time.process_time`, which other jobs on a shared machine disturb
   less).
2. the same fold for one-group events in one-event commits (every call its
   own commit: per-commit costs dominate), informational.
3. the same fold for a rollout-heavy tail of as many events (`rollout_tail`):
   groups admitted with rollouts=8 and each rollout sealed in its own commit
   as workers finish, 1 in 32 failing once and re-sealed, a group's `finished`
   after its last seal; vs the decode-only loop over its frames. Target
   >= 1,000,000 events/s and >= 0.5x the limit.
4. restore of a cut of 100,000 live groups (20,000 with --quick) plus the
   tail: `restore(path)` wall time in a fresh process, beside its floor timed
   the same way in another fresh process (loading the cut with `read_cut` +
   decoding the tail). Target <= 2x the floor: restore is the floor plus the fold of the
   tail and the recovery of every live group, and reads the tail once.
5. that restore's peak RSS, beside the same child's RSS right before it
   called `restore` (interpreter, torch, the library); the peak is reset
   (/proc/self/clear_refs) just before the call, so it is the restore's own.
   Target: the restore adds <= 512 MiB (<= 256 MiB quick).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

import torch

from journal import (GroupRef, Journal, Reader, RolloutFailed, RolloutRef, RolloutSealed, State,
                     format as fmt)
from journal.reader import list_segments
from journal.events import commit_decoder
from snapshot import compact

from .common import Figure, Report, Rounds, Target, log, scratch_dir

TASK = "math"
GROUPS_PER_STEP = 64
CHECKPOINT_EVERY = 10
ROLLOUTS_PER_GROUP = 8
TAIL_EVENTS_PER_SECOND = 1_500_000  # the trainer-shaped tail's target
RESTORE_TARGET = 2.0                # restore() against its floor
FAIL_EVERY = 32  # one rollout in 32 fails once and is sealed with its next attempt
ROLLOUT_EVENTS = (RolloutSealed, RolloutFailed)
_GENERATOR = torch.zeros(1300, dtype=torch.int32)  # ~5 KB, like torch.Generator().get_state()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=None,
                        help="tail events (default 1,000,000; 200,000 with --quick)")
    parser.add_argument("--live", type=int, default=None,
                        help="live groups in the cut (default 100,000; 20,000 with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds, medians reported (default 2 quick, 3 full)")


# -- building journals ---------------------------------------------------------------------------

def loader_state(position: int, epoch: int) -> dict:
    """A StatefulDataLoader.state_dict()-shaped loader state."""
    return {"_iterator_finished": False, "_num_yielded": position, "_sampler_iter_yielded": position,
            "_sampler_iter_state": {"generator": _GENERATOR, "yielded": position, "epoch": epoch},
            "_index_sampler_state": None, "_shared_seed": None, "_IterableDataset_len_called": None}


def trainer_tail(j: Journal, events: int, first_idx: int = 0, first_step: int = 1) -> tuple[int, int]:
    """Append a trainer-shaped tail of at least `events` events; (events written, last step)."""
    n, step, k = 0, first_step - 1, GROUPS_PER_STEP
    while n < events:
        step += 1
        pos = first_idx + n // 4 + k
        gids = j.taken([GroupRef(idx=first_idx + n // 4 + i, task_name=TASK, epoch=0) for i in range(k)],
                       loader_state=loader_state(pos, 0))
        j.admitted(gids, target_step=step, policy_version=step - 1)
        for g in gids:
            j.finished([g], policy_version=step - 1, locators=[f"replay/{step:06d}/{g:08d}"])
        j.trained(gids, step=step)
        n += 4 * k
        if step % CHECKPOINT_EVERY == 0:
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
    return n, step


def rollout_tail(j: Journal, events: int) -> tuple[int, int]:
    """Append a rollout-heavy trainer-shaped tail of at least `events` events; (events written,
    rollout events among them). Per step of 64 groups: one `taken` of 64 (loader state), one
    `admitted` of 64 with rollouts=8, then the 512 rollouts land one per commit in a shuffled
    order (workers finish out of order); one in FAIL_EVERY fails first (`rollout_failed`) and is
    sealed later with attempt 1; a group's `finished` follows its last seal; one `trained` of 64."""
    rng = random.Random(12)
    n = rollout_events = step = 0
    k, m = GROUPS_PER_STEP, ROLLOUTS_PER_GROUP
    while n < events:
        step += 1
        pv = step - 1
        gids = j.taken([GroupRef(idx=n + i, task_name=TASK, epoch=0) for i in range(k)],
                       loader_state=loader_state(n + k, 0))
        j.admitted(gids, target_step=step, policy_version=pv, rollouts=m)
        landing = [(g, i, 0) for g in gids for i in range(m)]  # (group, index, attempt)
        rng.shuffle(landing)
        left = dict.fromkeys(gids, m)
        for g, i, attempt in landing:  # a failed rollout is appended, to land again with attempt 1
            if attempt == 0 and rng.randrange(FAIL_EVERY) == 0:
                j.rollout_failed([RolloutRef(g, i, 0)], reason="worker lost")
                landing.append((g, i, 1))
                continue
            j.rollout_sealed([RolloutRef(g, i, attempt, f"replay/{step:06d}/{g:08d}/{i}.{attempt}")],
                             policy_version=pv)
            left[g] -= 1
            if not left[g]:
                j.finished([g], policy_version=pv)
        j.trained(gids, step=step)
        rollout_events += len(landing)
        n += 4 * k + len(landing)
        if step % CHECKPOINT_EVERY == 0:
            j.begin_checkpoint(step=step)
            j.commit_checkpoint(step=step)
    return n, rollout_events


def one_event_tail(j: Journal, events: int) -> int:
    """One-group events, each its own commit (taken, admitted, finished, trained per group)."""
    n = 0
    while n < events:
        (g,) = j.taken([GroupRef(idx=n // 4, task_name=TASK, epoch=0)])
        j.admitted([g], target_step=1, policy_version=0)
        j.finished([g], policy_version=0, locators=[f"replay/{g:08d}"])
        j.trained([g], step=1)
        n += 4
    return n


def live_head(j: Journal, live: int) -> None:
    """`live` groups left live in every owner: 40% admitted, 30% in replay, 25% reserved, 5% spare."""
    k = 512
    for start in range(0, live, k):
        gids = j.taken([GroupRef(idx=10_000_000 + start + i, task_name=TASK, epoch=0,
                                 fingerprint=(start + i).to_bytes(16, "little"))
                        for i in range(min(k, live - start))],
                       loader_state=loader_state(start + k, 0))
        a = len(gids) * 40 // 100
        r = len(gids) * 30 // 100
        s = len(gids) * 5 // 100
        j.admitted(gids[:a + r], target_step=1, policy_version=0)
        j.finished(gids[a:a + r], policy_version=0,
                   locators=[f"replay/head/{g:08d}" for g in gids[a:a + r]])
        j.diverted(gids[a + r:a + r + s])


def count_events(path: str) -> tuple[int, int]:
    """(events, rollout events among them): an event record counts the groups it names, a
    rollout_sealed / rollout_failed the rollouts it names."""
    n = rollouts = 0
    for rec in Reader(path).records():
        for ev in rec.commit.events:
            groups = getattr(ev, "groups", None)
            if groups is not None:
                n += len(groups)
            elif type(ev) in ROLLOUT_EVENTS:
                rollouts += len(ev.rollouts)
    return n + rollouts, rollouts


# -- measurements ----------------------------------------------------------------------------------

def decode_only(path: str) -> int:
    """The limit: read the segment files and msgspec-decode every commit of every frame."""
    decode, header, split = commit_decoder.decode, fmt.decode_frame_header, fmt.split_records
    commits = 0
    for seg in list_segments(path):
        with open(seg.path, "rb") as f:
            data = f.read()
        mv = memoryview(data)
        pos, end = fmt.HEADER_SIZE, len(data)
        while pos < end:
            length = header(data, pos)[0]
            body = pos + fmt.FRAME_HEADER_SIZE
            for record in split(mv[body:body + length]):
                decode(record)
                commits += 1
            pos = body + length
    return commits


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def timed_cpu(fn, *args) -> float:
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0


def fold_tail(path: str, base: State | None = None) -> State:
    return Reader(path, "strict").fold(state=base.copy() if base is not None else None)


_CHILD = r"""
import json, resource, sys, time
import torch  # a trainer has torch loaded before it restores: neither its import nor its RSS is restore's
from replay import restore
from snapshot import read_cut
from bench.replay import decode_only

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])  # kB

mode, path, cut = sys.argv[1:4]
if mode == "floor":  # the same fresh process, doing only what restore cannot avoid
    t0 = time.perf_counter()
    read_cut(cut)
    decode_only(path)
    print(json.dumps({"seconds": time.perf_counter() - t0}))
    sys.exit(0)
try:
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
        f.write("5")
    how = "VmHWM after clear_refs"
except OSError:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    how = "ru_maxrss"
t0 = time.perf_counter()
state = restore(path)
seconds = time.perf_counter() - t0
try:
    peak = status("VmHWM") if how.startswith("VmHWM") else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "lsn": state.lsn, "step": state.step, "live": len(state.groups),
                  "base_cut": state.base_cut, "rss_before_kib": before, "peak_kib": peak, "how": how}))
"""


def run_child(mode: str, path: str, cut: str) -> dict:
    """In a fresh interpreter: `restore(path)` ("restore": its wall time, measured around the
    call, and the process's peak RSS, os.wait4), or its floor ("floor": `read_cut(cut)` + the
    decode-only loop over the journal, timed alike)."""
    import tempfile
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        p = subprocess.Popen([sys.executable, "-c", _CHILD, mode, path, cut], stdout=out_f, stderr=err_f,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        _, status, usage = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        if code != 0:
            raise RuntimeError(f"restore child exited {code}: {err_f.read().decode(errors='replace')[-2000:]}")
        result = json.loads(out_f.read())
    if mode == "restore":
        result["peak_rss_kib"] = result.pop("peak_kib") or usage.ru_maxrss
    return result


# -- the benchmark ---------------------------------------------------------------------------------

def run(args) -> Report:
    quick = args.quick
    events = args.events or (200_000 if quick else 1_000_000)
    live = args.live if args.live is not None else (20_000 if quick else 100_000)
    rounds = args.rounds or (2 if quick else 3)
    parent = os.path.abspath(args.dir) if args.dir else None
    report = Report("replay", quick=quick, directory=parent)
    if parent:
        os.makedirs(parent, exist_ok=True)
    rss_target = 256 if quick else 512

    with scratch_dir(parent, "bench-replay-") as d:
        tail_path = os.path.join(d, "tail")
        one_path = os.path.join(d, "one")
        roll_path = os.path.join(d, "rollouts")
        big_path = os.path.join(d, "big")
        log(f"bench replay: building a {events:,}-event trainer-shaped tail ...")
        t0 = time.perf_counter()
        with Journal.open(tail_path, sync="none") as j:
            written, _ = trainer_tail(j, events)
        tail_events, _ = count_events(tail_path)
        tail_commits = decode_only(tail_path)
        log(f"  {tail_events:,} events in {tail_commits:,} commits, "
            f"{sum(s.size for s in list_segments(tail_path)) / 2**20:.1f} MiB, {time.perf_counter() - t0:.1f} s")
        one_n = min(events, 200_000)
        with Journal.open(one_path, sync="none") as j:
            one_events = one_event_tail(j, one_n)
        log(f"building a {events:,}-event rollout-heavy tail ({ROLLOUTS_PER_GROUP} rollouts per group) ...")
        with Journal.open(roll_path, sync="none") as j:
            rollout_tail(j, events)
        roll_events, roll_rollouts = count_events(roll_path)
        roll_commits = decode_only(roll_path)

        log(f"building a cut of {live:,} live groups plus the same tail ...")
        t0 = time.perf_counter()
        with Journal.open(big_path, sync="none") as j:
            live_head(j, live)
            j.begin_checkpoint(step=0)
            j.commit_checkpoint(step=0)
            j.flush()
            cut = compact(big_path, retention=None).cut_path
            _, last_step = trainer_tail(j, events, first_idx=20_000_000, first_step=1)
            j.begin_checkpoint(step=last_step + 1)
            j.commit_checkpoint(step=last_step + 1)
        log(f"  built in {time.perf_counter() - t0:.1f} s; cut {os.path.basename(cut)}")

        r = Rounds()
        children = []
        for i in range(rounds):
            log(f"round {i + 1}/{rounds}")
            r.add("limit", tail_events / timed(decode_only, tail_path))
            r.add("fold", tail_events / timed(fold_tail, tail_path))
            r.add("limit_cpu", tail_events / timed_cpu(decode_only, tail_path))
            r.add("fold_cpu", tail_events / timed_cpu(fold_tail, tail_path))
            r.add("one_limit", one_events / timed(decode_only, one_path))
            r.add("one_fold", one_events / timed(fold_tail, one_path))
            r.add("roll_limit", roll_events / timed(decode_only, roll_path))
            r.add("roll_fold", roll_events / timed(fold_tail, roll_path))
            r.add("floor", run_child("floor", big_path, cut)["seconds"])
            child = run_child("restore", big_path, cut)
            children.append(child)
            r.add("restore", child["seconds"])
            r.add("restore_rss", child["peak_rss_kib"] / 1024)
            r.add("restore_rss_before", child["rss_before_kib"] / 1024)
            log(f"  fold {r.samples['fold'][-1]:,.0f}/s (limit {r.samples['limit'][-1]:,.0f}/s)  "
                f"rollout tail {r.samples['roll_fold'][-1]:,.0f}/s (limit {r.samples['roll_limit'][-1]:,.0f}/s)  "
                f"restore {child['seconds']:.2f} s, peak RSS {child['peak_rss_kib'] / 1024:.0f} MiB")

    state = children[-1]
    report.meta.update(tail_events=tail_events, tail_commits=tail_commits, one_event_events=one_events,
                       rollout_tail_events=roll_events, rollout_tail_rollout_events=roll_rollouts,
                       rollout_tail_commits=roll_commits,
                       live_groups=live, restored_live=state["live"], restored_lsn=state["lsn"],
                       restored_step=state["step"], rounds=rounds, cut=os.path.basename(cut))
    report.add(r.figure(
        "tail_replay", f"tail replay (Reader.fold), {tail_events:,}-event trainer-shaped tail",
        "events/s", value="fold", reference="limit", reference_label="decode-only loop, same frames",
        target=Target(min_value=TAIL_EVENTS_PER_SECOND),
        note=f"{tail_commits:,} commits, one per frame; {tail_events / tail_commits:.1f} events per "
             "commit"))
    report.add(r.figure(
        "tail_replay_cpu", "the same tail replay, per CPU-second of the process", "events/s",
        value="fold_cpu", reference="limit_cpu", reference_label="decode-only loop, per CPU-second",
        target=Target(min_value=TAIL_EVENTS_PER_SECOND)))
    report.add(r.figure(
        "one_event_replay", f"tail replay, one-group events one per commit ({one_events:,})",
        "events/s", value="one_fold", reference="one_limit",
        reference_label="decode-only loop, same frames",
        note="worst case: per-commit costs (frame checks, undo record, Record) on every event"))
    f = report.add(r.figure(
        "rollout_tail_replay", f"tail replay (Reader.fold), {roll_events:,}-event rollout-heavy tail, "
        f"{ROLLOUTS_PER_GROUP} rollouts per group, one seal per commit",
        "events/s", value="roll_fold", reference="roll_limit",
        reference_label="decode-only loop, same frames",
        target=Target(min_value=1_000_000, min_ratio=0.5)))
    f.note = (f"an event is one group a group event names or one rollout a rollout_sealed / "
              f"rollout_failed names; {roll_rollouts:,} of the {roll_events:,} are rollout events "
              f"({roll_rollouts / roll_events * f.value:,.0f} rollout events/s); {roll_commits:,} commits, "
              f"{roll_events / roll_commits:.2f} events per commit")
    rss_before = r.median("restore_rss_before")
    report.add(r.figure(
        "restore_seconds", f"restore(): cut of {live:,} live groups + {tail_events:,}-event tail",
        "s", value="restore", reference="floor",
        reference_label="read_cut + decode-only of the journal, in a fresh process too",
        target=Target(max_ratio=RESTORE_TARGET),
        note=f"in a fresh process; restored {state['live']:,} live groups at LSN {state['lsn']:,} "
             f"(step {state['step']}) from {os.path.basename(state['base_cut'] or '-')}"))
    report.add(Figure(
        "restore_rss", "restore(): peak RSS of the process", r.median("restore_rss"), "MiB",
        reference=rss_before, reference_label="same process before restore()",
        target=Target(max_value=rss_before + rss_target),
        note=f"target: restore adds <= {rss_target} MiB to the {rss_before:.0f} MiB RSS of the "
             f"interpreter, torch and the library ({state['how']})",
        samples=list(r.samples["restore_rss"]), reference_samples=list(r.samples["restore_rss_before"])))
    return report
