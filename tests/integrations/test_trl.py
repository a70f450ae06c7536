"""TRL's real AsyncGRPOTrainer (TRL 1.16.0: its Trainer loop, RolloutQueueDataset with its staleness
drop, FixedCountBatcher, collator, save and resume) on the CPU, journaled by
`replay.integrations.trl` and, for comparison, alone (its own rollout_state.json resume): a tiny
randomly initialised Llama and a tokenizer built in code (tests/support/trl_tiny.py, no download),
generation by the in-process worker (tests/support/trl_child.py runs one training process).

Each training process is forked from a process that imported torch, transformers and TRL once
(tests/support/zygote.py): a restart here costs about 5 s of imports, a fork none. A SIGKILL of the
forked process is a real crash of the training process, and each resume runs in a new process.

- the end-to-end run: train, checkpoint, resume, audit clean; a resume_from_checkpoint naming
  another folder and a damaged committed checkpoint are refused;
- the kill loop: SIGKILLs at seeded random moments (OJ_TRL_KILLS=N, default 10) plus one kill inside
  transformers' save and one after TRL's files, before the journal's commit; the journal's audit
  says 0 trained twice, 0 lost; the same schedule with TRL alone, counted by the same event-log rules;
- TRL #7274 (one slow group out of 150, max_staleness=4): groups trained twice after a resume.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

import replay
from journal import Reader
from tests.support.trl_events import audit_events, next_segment, read_events, trained_past_resume
from tests.support.zygote import Zygote

ENV = {"HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
KILLS = int(os.environ.get("OJ_TRL_KILLS", "10") or 10)
GROUPS_PER_STEP = 2   # trl_child's default
RUN_TIMEOUT = 240


@pytest.fixture(scope="module")
def zygote():
    z = Zygote("tests.support.trl_child", env=ENV)
    yield z
    z.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def run_segment(z: Zygote, run, argv: list[str], *, steps_past_resume: int | None = None,
                delay: float | None = None) -> int:
    """One training process; SIGKILLed `delay` s after it trained `steps_past_resume` steps past
    the step it resumed at (None: `delay` s after it started), not at all without a delay.
    Returns its exit code (-9: killed)."""
    events_path = os.path.join(run, "events.jsonl")
    segment = next_segment(events_path)
    pid = z.start(argv + ["--run", str(run)], os.path.join(run, "child.log"))
    if delay is not None:
        deadline = time.monotonic() + RUN_TIMEOUT
        while (steps_past_resume is not None and _alive(pid) and time.monotonic() < deadline
               and not trained_past_resume(events_path, segment, steps_past_resume)):
            time.sleep(0.01)
        time.sleep(delay)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    return z.wait(pid, RUN_TIMEOUT)


def _log_tail(run) -> str:
    with open(os.path.join(run, "child.log")) as f:
        return f.read()[-4000:]


def _starts(run) -> list[dict]:
    return [e for e in read_events(os.path.join(run, "events.jsonl")) if e["ev"] == "start"]


def _discard_reasons(journal_dir: str) -> list[str]:
    return [ev.reason for rec in Reader(journal_dir).records() for ev in rec.commit.events
            if type(ev).__name__ == "Discarded"]


def test_train_checkpoint_resume_audit_clean(zygote, fast_tmp):
    run = fast_tmp / "run"
    os.makedirs(run)
    journaled = ["--mode", "journal", "--save-steps", "5", "--save-total-limit", "2"]
    assert run_segment(zygote, run, journaled + ["--steps", "10"]) == 0, _log_tail(run)
    assert run_segment(zygote, run, journaled + ["--steps", "20"]) == 0, _log_tail(run)

    report = replay.audit(str(run / "journal"))
    assert report.clean, report.to_dict()
    assert report.totals["trained_once"] == 20 * GROUPS_PER_STEP, report.totals
    starts = _starts(run)
    assert [s["resumed_at"] for s in starts] == [0, 10]
    assert starts[1]["restored"].get("train", 0) > 0, starts   # queued at the checkpoint: from the data plane
    # TRL's model_version continues from the checkpoint's (weights synced after step 10, then 11)
    version = {(e["seg"], e["step"]): e["version"] for e in read_events(str(run / "events.jsonl"))
               if e["ev"] == "trained"}
    assert version[1, 11] == version[0, 10] + 1, version
    ledger = audit_events(str(run / "events.jsonl"), dataset_size=40)
    assert (ledger["trained_twice"], ledger["lost"], ledger["never_taken"]) == (0, 0, 0), ledger
    assert ledger["distinct_trained"] == 20 * GROUPS_PER_STEP, ledger
    assert len(_discard_reasons(str(run / "journal"))) == report.totals["dropped"]
    # rotation (save_total_limit=2) ran after each commit, and every kept folder is sealed
    assert sorted(os.listdir(run / "trainer")) == ["checkpoint-15", "checkpoint-20"]
    for step in (15, 20):
        assert os.path.isfile(run / "trainer" / f"checkpoint-{step}" / "journal-manifest.json")

    # the journal decides the checkpoint: another folder, even an older committed one, is refused
    wrong = str(run / "trainer" / "checkpoint-15")
    assert run_segment(zygote, run, journaled + ["--steps", "25", "--resume-from", wrong]) == 1
    assert "CheckpointNotCommitted" in _log_tail(run) and "checkpoint-20" in _log_tail(run)
    # a committed checkpoint whose file changed is refused before transformers loads anything
    with open(run / "trainer" / "checkpoint-20" / "optimizer.pt", "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert run_segment(zygote, run, journaled + ["--steps", "25"]) == 1
    assert "ChecksumMismatch" in _log_tail(run) and "optimizer.pt" in _log_tail(run)
    assert replay.audit(str(run / "journal")).totals["trained_once"] == 20 * GROUPS_PER_STEP


def _kill_plan(rng: random.Random, kills: int) -> list[tuple]:
    """(kind, steps past the resume, delay) per killed process: `kills` seeded random kills (one in
    five while the process starts or restores), and two deterministic kills inside a save."""
    plan = [("start", None, rng.uniform(0.1, 1.0)) if k and rng.random() < 0.2
            else ("steps", rng.randint(1, 12), rng.uniform(0, 0.05)) for k in range(kills)]
    plan.insert(min(2, len(plan)), ("save", "rng", None))      # in transformers' save: trainer_state.json not written
    plan.insert(min(6, len(plan)), ("save", "commit", None))   # TRL's files complete; the journal not committed
    return plan


def _kill_loop(z: Zygote, run, mode: str, plan: list[tuple], steps: int) -> list[int]:
    argv = ["--mode", mode, "--steps", str(steps), "--save-steps", "5"]
    codes = []
    for kind, arg, delay in plan:
        if kind == "save":
            codes.append(run_segment(z, run, argv + ["--die-in-save", arg]))
        else:
            codes.append(run_segment(z, run, argv, steps_past_resume=arg, delay=delay))
        assert codes[-1] == -signal.SIGKILL, (mode, kind, codes[-1], _log_tail(run))
    codes.append(run_segment(z, run, argv))
    assert codes[-1] == 0, (mode, _log_tail(run))
    return codes


def test_sigkills_journaled_exactly_once_and_trl_alone_compared(zygote, fast_tmp):
    plan = _kill_plan(random.Random(f"trl-kills-{KILLS}"), KILLS)
    steps = 10 * len(plan) + 20   # a killed process gets at most ~10 steps past its checkpoint
    results = {}
    for mode in ("journal", "trl"):
        run = fast_tmp / mode
        os.makedirs(run)
        _kill_loop(zygote, run, mode, plan, steps)
        ledger = audit_events(str(run / "events.jsonl"), dataset_size=40)
        results[mode] = {**ledger, "kills": len(plan),
                         "incomplete_checkpoints": sum(1 for e in read_events(str(run / "events.jsonl"))
                                                       if e["ev"] == "incomplete_checkpoint"),
                         "resumed_at": [s["resumed_at"] for s in _starts(run)]}
    print("\nTRL kill loop:", json.dumps(results))

    report = replay.audit(str(fast_tmp / "journal" / "journal"))
    assert report.clean, report.to_dict()
    assert report.totals["trained_once"] == steps * GROUPS_PER_STEP, report.totals
    assert report.dead_tails, "kills after a checkpoint leave dead tails"
    journaled = results["journal"]
    assert (journaled["trained_twice"], journaled["lost"], journaled["never_taken"]) == (0, 0, 0), journaled
    assert journaled["distinct_trained"] == steps * GROUPS_PER_STEP, journaled
    assert max(journaled["resumed_at"]) > 0, journaled
    # the kill after TRL's files and before the commit: that folder was set aside, never resumed from
    assert os.listdir(fast_tmp / "journal" / "trainer" / "uncommitted")
    # TRL alone on the same schedule loses or repeats groups (the regression guard of the comparison)
    alone = results["trl"]
    assert alone["trained_twice"] + alone["lost"] > 0, alone
    assert alone["incomplete_checkpoints"] >= 1, alone   # the kill inside transformers' save


def _issue_7274(z: Zygote, run, mode: str) -> dict:
    os.makedirs(run)
    common = ["--mode", mode, "--dataset-size", "150", "--max-staleness", "4"]
    first = common + ["--steps", "30", "--save-steps", "10", "--slow-idx", "2", "--slow-hold", "5"]
    assert run_segment(z, run, first) == 0, _log_tail(run)
    assert run_segment(z, run, common + ["--steps", "45", "--save-steps", "15"]) == 0, _log_tail(run)
    return audit_events(str(run / "events.jsonl"), dataset_size=150)


def test_issue_7274_one_stale_group_retrains_nothing_with_the_journal(zygote, fast_tmp):
    """One slow group (row 2) of 150 comes back 5 versions late and TRL drops it as stale
    (max_staleness=4); then a resume from the step-30 checkpoint. TRL alone's rollout_state.json
    stays pinned on the dropped group, so the resume trains again what the checkpoint had trained;
    the journal discarded the group (its staleness in the reason) and resumes at its loader
    position."""
    alone = _issue_7274(z=zygote, run=fast_tmp / "trl", mode="trl")
    journaled = _issue_7274(z=zygote, run=fast_tmp / "journal", mode="journal")
    print("\nTRL #7274:", json.dumps({"trl": alone, "journal": journaled}))
    with open(fast_tmp / "trl" / "trainer" / "checkpoint-30" / "rollout_state.json") as f:
        assert json.load(f)["prompt_index"] <= 2   # pinned on the dropped group
    assert alone["trained_twice"] > 0, alone    # the scenario still reproduces
    assert journaled["trained_twice"] == 0 and journaled["lost"] == 0, journaled
    report = replay.audit(str(fast_tmp / "journal" / "journal"))
    assert report.clean and report.totals["trained_once"] == 45 * GROUPS_PER_STEP, report.totals
    reasons = _discard_reasons(str(fast_tmp / "journal" / "journal"))
    assert any(r.startswith("stale: staleness ") and "> max_staleness 4" in r for r in reasons), reasons
