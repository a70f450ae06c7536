"""The chaos run of the example trainer (examples/): SIGKILLs at random moments, including during
a checkpoint save and during compaction, then the journal's audit says every prompt was trained
exactly once or dropped with a reason; the baseline (no journal) with the same seed and kills
loses or repeats prompts. The journal run is rollout-level (8 rollouts per group, slow workers):
every trained group had all its rollouts sealed, and late results were fenced.

The journal run records each rollout's progress (every 16 tokens and every turn of a
multi-turn rollout; restores continue from the prefixes they keep). CI size by default (a few kills, a small dataset, two epochs so restores cross an epoch
boundary). Soak: OJ_CHAOS_KILLS=300 (or any number) runs the full-size dataset with that many
kills. Run directories live on tmpfs when there is one: a SIGKILL loses nothing the kernel
already has, so tmpfs crashes exactly like a disk for this test, only faster.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from journal import Admitted, Reader, RolloutFailed, RolloutProgress, RolloutSealed, Trained

from examples import chaos

SOAK_KILLS = int(os.environ.get("OJ_CHAOS_KILLS", "0") or 0)
PROGRESS_EVERY = 16


def _options(out, baseline: bool, verbose: bool = False) -> chaos.Options:
    """The journal run records progress (every PROGRESS_EVERY tokens and every turn)."""
    progress = 0 if baseline else PROGRESS_EVERY
    if SOAK_KILLS:
        return chaos.Options(out=str(out), seed=7, epochs=2, kills=SOAK_KILLS, dataset_size=2048,
                             batch_size=16, baseline=baseline, progress_every=progress, verbose=verbose,
                             timeout=max(900.0, 12.0 * SOAK_KILLS))
    return chaos.Options(out=str(out), seed=7, epochs=2, kills=5, dataset_size=384, batch_size=32,
                         ckpt_every=3, baseline=baseline, progress_every=progress, verbose=verbose,
                         timeout=300.0)


@pytest.fixture(scope="module")
def journal_demo(fast_tmp_module):
    """The journal run and everything `journal-demo` prints for it."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        s = chaos.run(_options(fast_tmp_module / "journal-run", baseline=False, verbose=True))
    return s, printed.getvalue() + chaos.render(s) + "\n"


@pytest.fixture(scope="module")
def journal_run(journal_demo):
    return journal_demo[0]


@pytest.fixture(scope="module")
def baseline_run(fast_tmp_module):
    return chaos.run(_options(fast_tmp_module / "baseline-run", baseline=True))


def test_chaos_kills_land_in_checkpoint_saves_and_compactions(journal_run):
    s = journal_run
    assert s["kills"] >= (SOAK_KILLS or 5), s["kills_by_phase"]
    assert s["kills_by_phase"].get("checkpoint_save", 0) >= 1, s["kills_by_phase"]
    assert s["kills_by_phase"].get("compaction", 0) >= 1, s["kills_by_phase"]
    assert s["restarts"] == s["kills"]


def test_chaos_audit_zero_duplicates_zero_losses(journal_run):
    s = journal_run
    cli = s["cli_audit"]
    assert cli["clean"] is True
    epochs = {e["epoch"]: e for e in cli["epochs"]}
    assert sorted(epochs) == [0, 1]
    for e in epochs.values():
        assert e["trained_more_count"] == 0 and e["trained_more"] == []
        assert e["lost_count"] == 0 and e["in_flight"] == 0 and e["pending_retake"] == 0
        # every row of the epoch was handed out, and trained once or dropped with a reason
        assert e["rows_taken"] == s["dataset_size"]
        assert e["trained_once"] + sum(e["dropped"].values()) == s["dataset_size"]
        assert set(e["dropped"]) <= {"rollout_failed"}
    assert s["twice"] == 0 and s["lost"] == 0
    # the trainer's own ledger agrees with the journal, epoch by epoch and class by class
    assert s["ledger_mismatches"] == []
    assert s["ledger"]["trained_twice"] == 0 and s["ledger"]["lost"] == 0
    assert s["ok"] is True
    # restores really had in-flight work to hand back (the point of the journal)
    assert s["regenerated_groups"] + s["salvaged_groups"] > 0
    assert cli["dead_tails"], "a SIGKILL after the first checkpoint leaves a dead tail"


def test_chaos_restores_that_adopt_takes_across_an_epoch_boundary_keep_the_loaders_pass(fast_tmp):
    """A small dataset, many passes and a checkpoint every other step: restores adopt takes of a
    crashed run that crossed into the next pass of the loader, and the trainer goes on in the
    pass of the last take adopted (not the one its checkpoint recorded): every row of every
    pass is trained once."""
    with contextlib.redirect_stdout(io.StringIO()):
        s = chaos.run(chaos.Options(out=str(fast_tmp / "run"), seed=1, epochs=6, kills=6, dataset_size=48,
                                    batch_size=16, ckpt_every=2, baseline=False, timeout=300.0))
    cli = s["cli_audit"]
    assert cli["clean"] is True and s["twice"] == 0 and s["lost"] == 0
    assert [(e["epoch"], e["trained_once"] + sum(e["dropped"].values())) for e in cli["epochs"]] == \
        [(e, 48) for e in range(6)]


def _rollout_history(journal_dir):
    """From the active history: rollouts= of each group's admission, the rollout indexes sealed
    per group, the groups trained, and the reasons of rollout_failed events."""
    admitted, sealed, trained, failed = {}, defaultdict(list), [], defaultdict(int)
    for rec in Reader(journal_dir).records():
        for ev in rec.commit.events:
            kind = type(ev)
            if kind is Admitted:
                admitted.update(dict.fromkeys(ev.groups, ev.rollouts))
            elif kind is RolloutSealed:
                for r in ev.rollouts:
                    sealed[r.group_id].append(r.index)
            elif kind is RolloutFailed:
                failed[ev.reason] += len(ev.rollouts)
            elif kind is Trained:
                trained += ev.groups
    return admitted, sealed, trained, failed


def test_chaos_rollout_level_counters_agree_with_the_journal(journal_run):
    s = journal_run
    assert s["level"] == "rollout-level" and s["rollouts_per_group"] == 8
    admitted, sealed, trained, failed = _rollout_history(os.path.join(s["out"], "journal"))
    # every group the final history trained was admitted with rollouts=8 and had all 8 sealed
    assert len(trained) == s["audit"]["trained_once"]
    assert {admitted[g] for g in trained} == {8}
    assert [g for g in trained if sorted(sealed[g]) != list(range(8))] == []
    # rollouts were retried instead of discarding their groups: slow workers missed deadlines,
    # and their late results were rejected by the journal (StaleAttempt) and counted
    assert failed["deadline"] > 0 and s["rollouts_retried"] > 0
    assert s["fenced_late_results"] > 0 and s["late_results_ignored"] == 0
    # restores hand back only unsealed rollouts; the generation figures add up
    assert 0 <= s["regenerated_rollouts"] <= 8 * s["regenerated_groups"]
    assert s["generation_seconds"] > 0 and s["generation_seconds_lost"] >= 0
    assert s["generation_seconds"] >= s["generation_seconds_used"] + s["generation_seconds_wasted"]
    if s["kills"]:
        assert s["generation_seconds_lost_per_kill"] == pytest.approx(s["generation_seconds_lost"] / s["kills"])
    # what was in flight at the kills is part of what the kills lost
    assert 0 <= s["generation_seconds_in_flight_lost"] <= s["generation_seconds_lost"] + 1e-6


def test_chaos_progress_is_journaled_per_turn_and_every_k_tokens(journal_run):
    s = journal_run
    assert s["progress_every"] == PROGRESS_EVERY
    turns, single = set(), set()
    for rec in Reader(os.path.join(s["out"], "journal")).records():
        for ev in rec.commit.events:
            if type(ev) is RolloutProgress:
                (turns.add(ev.turn) if ev.turn is not None else single.add(ev.tokens))
    # multi-turn rollouts at every turn; single-turn ones at multiples of K tokens
    assert {1, 2, 3} <= turns
    assert single and all(n % PROGRESS_EVERY == 0 for n in single)
    assert 0 <= s["continued_rollouts"] and s["kept_tokens"] >= s["continued_rollouts"]


def test_baseline_same_seed_loses_or_repeats(baseline_run):
    s = baseline_run
    assert s["mode"] == "baseline"
    # The kill plan aims at absolute steps; a baseline that lost prompts has fewer steps to
    # run and can finish before its last planned kills (seen once under load: 4 of 5).
    assert s["kills"] >= 1
    assert s["lost"] + s["twice"] >= 1, s["audit"]
    # group-level: no attempt to fence a slow worker with; its late result is dropped in memory
    assert s["level"] == "group-level" and s["late_results_ignored"] > 0 and s["fenced_late_results"] == 0


def test_demo_exit_status_and_help(capsys):
    with pytest.raises(SystemExit) as exc:
        chaos.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--seed", "--epochs", "--kills", "--workers", "--failure-rate", "--out", "--baseline",
                 "--group-level", "--rollouts"):
        assert flag in text


def test_demo_output_names_the_run_dir_once_and_ends_with_what_to_run_next(journal_demo):
    s, text = journal_demo
    lines = text.splitlines()
    journal = os.path.join(s["out"], "journal")
    # the run dir at the top, and afterwards only inside the journal's path
    assert [i for i, line in enumerate(lines) if s["out"] in line.replace(journal, "")] == [2]
    assert lines[2] == f"  run dir {s['out']}"
    # a run killed in its restore resumed nowhere: "-" for its step and LSN
    runs = [line for line in lines if re.match(r"^ +\d+ +(\d+|-) +(\d+|-) .*  (killed|finished) ", line)]
    assert len(runs) == s["restarts"] + 1, text
    assert lines[-6:] == [f"journal   {journal}",
                          f"next      journal-inspect audit {journal}",
                          f"          journal-inspect timeline {journal} --png owners.png",
                          f"          journal-inspect summary {journal}",
                          f"          journal-inspect log {journal} --kind discarded",
                          "          (--png needs the plot extra: pip install 'ownership-journal[plot]')"]
    # at most 100 columns with a run dir as long as the default one (/tmp/journal-demo-XXXXXXXX)
    default_length = text.replace(s["out"], "/tmp/journal-demo-abcd1234")
    assert [line for line in default_length.splitlines() if len(line) > 100] == []


def _children(pid: int) -> list[int]:
    """Pids of the live processes whose parent is `pid`."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(name))
    return out


def test_ctrl_c_prints_one_line_and_leaves_no_trainer_running(fast_tmp):
    out = fast_tmp / "interrupted"
    demo = subprocess.Popen([sys.executable, "-m", "examples.chaos", "--out", str(out), "--kills", "0",
                             "--epochs", "50", "--dataset-size", "384", "--batch-size", "32"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trainers = []
    try:
        deadline = time.monotonic() + 120
        ledger = out / "ledger.log"
        # the trainer has restored and is training once its ledger records the restart
        while not (ledger.exists() and ledger.read_text().startswith("R ")):
            assert time.monotonic() < deadline and demo.poll() is None, demo.stderr.read()
            time.sleep(0.1)
        trainers = _children(demo.pid)
        assert len(trainers) == 1
        demo.send_signal(signal.SIGINT)
        stdout, stderr = demo.communicate(timeout=60)
        assert demo.returncode == 130, stderr
        assert stderr.splitlines() == [f"journal-demo: interrupted; the trainer was stopped, its files "
                                       f"are in {out}"], stderr
        assert not os.path.exists(f"/proc/{trainers[0]}"), "the trainer outlived journal-demo"
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        for pid in trainers:   # only if the driver left it behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


_NOISY_RUN = """
import os, sys, threading
from examples import chaos

def noisy_run(o):  # what Ray's raylets and a driver thread print while a --ray run goes on
    os.system("echo from-a-child-process")
    t = threading.Thread(target=print, args=("from-a-thread",))
    t.start()
    t.join()
    return {"ok": True, "out": o.out}

chaos.run = noisy_run
sys.exit(chaos.main(["--json", "--kills", "0", "--out", sys.argv[1]]))
"""


def test_json_output_is_only_the_document_whatever_the_run_prints(fast_tmp):
    p = subprocess.run([sys.executable, "-c", _NOISY_RUN, str(fast_tmp / "run")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"ok": True, "out": str(fast_tmp / "run")}
    assert "from-a-child-process" in p.stderr and "from-a-thread" in p.stderr
