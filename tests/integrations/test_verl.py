"""verl's fully_async loop (verl 0.9.1: its rollouter with its loader, pending queue and tasks, its
message queue actor, its trainer's fit_step with GRPO advantages and a real optimizer step on a tiny
policy) on the CPU, journaled by `replay.integrations.verl` and alone, each training process a
child (tests/support/verl_child.py) with its own Ray, SIGKILLed as a process group.

- verl #4199's TODO: a checkpoint with prompts pending, in flight and in the message queue, a
  crash right after it, a resume: verl alone loses what the queues held; journaled, nothing;
- the kill loop: SIGKILLs at seeded random moments (OJ_VERL_KILLS=N, default 1), then a run to the
  end; both modes counted by the same event-log rules (tests/support/trl_events.py);
- the message queue's overflow eviction is reported with the evicted sample's id.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import replay
from journal import Reader
from replay.restore_rules import REISSUED
from tests.support.trl_events import audit_events, next_segment, read_events, trained_past_resume

KILLS = int(os.environ.get("OJ_VERL_KILLS", "1") or 1)
SIZE = 24            # prompts; one epoch
RUN_TIMEOUT = 300
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# generation faster than training, so the message queue holds samples at a checkpoint
SHAPE = ["--dataset-size", str(SIZE), "--generation-delay", "0.1", "--training-delay", "0.4", "--staleness", "2"]


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        return False


def run_segment(run, mode: str, extra: list[str] = (), steps_past_resume: int | None = None,
                delay: float = 0.0) -> int:
    """One training process (and its Ray) in its own process group; SIGKILLed as a group `delay` s
    after it trained `steps_past_resume` steps past its resume (never, with None). Returns its
    exit code (-9: killed)."""
    os.makedirs(run, exist_ok=True)
    events_path = os.path.join(run, "events.jsonl")
    segment = next_segment(events_path)
    with open(os.path.join(run, "child.log"), "a") as log:
        child = subprocess.Popen([sys.executable, "-m", "tests.support.verl_child", "--mode", mode, "--run", str(run),
                                  *SHAPE, *extra], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        if steps_past_resume is not None:
            while child.poll() is None and time.monotonic() < deadline and \
                    not trained_past_resume(events_path, segment, steps_past_resume):
                time.sleep(0.05)
            time.sleep(delay)
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
        return child.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if _alive(child.pid):   # the group's Ray processes, after a kill or a timeout
            os.killpg(child.pid, signal.SIGKILL)


def _log_tail(run) -> str:
    with open(os.path.join(run, "child.log")) as f:
        return f.read()[-4000:]


def _ledger(run) -> dict:
    return audit_events(os.path.join(run, "events.jsonl"), dataset_size=SIZE, run_occurrences=SIZE)


def _audit_journal(run) -> dict:
    report = replay.audit(os.path.join(run, "journal"))
    assert report.clean, report.to_dict()
    assert report.totals["trained_once"] + report.totals["dropped"] == SIZE, report.totals
    reasons = [ev.reason for rec in Reader(os.path.join(run, "journal")).records() for ev in rec.commit.events
               if type(ev).__name__ == "Discarded"]
    # a drop is verl's queue overflow or a restore's: a prompt that waited at the checkpoint and
    # was admitted after it comes back under a fresh id, the old one dropped (docs/recovery.md)
    assert all(r.startswith("evicted: verl's message queue was full") or r == REISSUED for r in reasons), reasons
    return report.totals


def test_issue_4199_checkpoint_with_samples_in_every_queue(fast_tmp):
    results = {}
    for mode in ("journal", "verl"):
        run = fast_tmp / mode
        assert run_segment(run, mode, ["--die-after-checkpoint", "4"]) == -signal.SIGKILL, _log_tail(run)
        (held,) = [e for e in read_events(str(run / "events.jsonl")) if e["ev"] == "died_after_checkpoint"]
        assert held["pending"] > 0 and held["active"] > 0 and held["message_queue"] > 0, held   # every queue
        assert run_segment(run, mode) == 0, _log_tail(run)
        results[mode] = {**_ledger(run), "queues_at_checkpoint": held}
    print("\nverl #4199:", json.dumps(results))
    journaled, alone = results["journal"], results["verl"]
    assert (journaled["trained_twice"], journaled["lost"]) == (0, 0), journaled
    assert journaled["distinct_trained"] + journaled["dropped_stale"] == SIZE, journaled
    _audit_journal(fast_tmp / "journal")
    # verl alone: data.pt's position is past everything its queues held, so none of it is trained
    assert alone["lost"] > 0 and alone["lost"] + alone["distinct_trained"] == SIZE, alone


def _kill_plan(rng: random.Random, kills: int) -> list[tuple[int, float]]:
    return [(rng.randint(1, 4), rng.uniform(0.0, 0.5)) for _ in range(kills)]


def test_sigkills_journaled_exactly_once_and_verl_alone_compared(fast_tmp):
    plan = _kill_plan(random.Random(f"verl-kills-{KILLS}"), KILLS)
    results = {}
    for mode in ("journal", "verl"):
        run = fast_tmp / mode
        for steps, delay in plan:
            assert run_segment(run, mode, steps_past_resume=steps, delay=delay) == -signal.SIGKILL, _log_tail(run)
        assert run_segment(run, mode) == 0, _log_tail(run)
        results[mode] = {**_ledger(run), "kills": len(plan),
                         "resumed_at": [e["resumed_at"] for e in read_events(str(run / "events.jsonl"))
                                        if e["ev"] == "start"]}
    print("\nverl kill loop:", json.dumps(results))
    journaled = results["journal"]
    assert (journaled["trained_twice"], journaled["lost"], journaled["never_taken"]) == (0, 0, 0), journaled
    assert journaled["distinct_trained"] + journaled["dropped_stale"] == SIZE, journaled
    assert max(journaled["resumed_at"]) > 0, journaled
    totals = _audit_journal(fast_tmp / "journal")
    assert totals["dropped"] == journaled["dropped_stale"], (totals, journaled)
    alone = results["verl"]
    assert alone["trained_twice"] + alone["lost"] > 0, alone   # the comparison still shows verl's losses
