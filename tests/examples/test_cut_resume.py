"""The example trainer resumes from a cut alone: its journal directory (and its data plane) are
removed, only the ownership cut inside the checkpoint directory is left. It restores the cut,
opens a new journal from it, and still trains every row exactly once from that checkpoint on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter

from journal import Discarded, Reader, Taken, Trained
from snapshot import read_cut

from examples import chaos
from examples.bookkeeping import read_ledger
from examples.trainer import checkpoint_dirs

DATASET, EPOCHS, BATCH = 384, 2, 32


def _trainer(out) -> list[str]:
    return [sys.executable, "-m", "examples.trainer", "--out", str(out), "--seed", "3",
            "--epochs", str(EPOCHS), "--dataset-size", str(DATASET), "--batch-size", str(BATCH),
            "--ckpt-every", "3", "--failure-rate", "0.03"]


def _run_until(out, stop) -> list[str]:
    """Run the trainer and SIGKILL it right after a line for which `stop(parts)` is true;
    returns the lines it printed."""
    out.mkdir(parents=True, exist_ok=True)
    child = chaos.Child(_trainer(out), str(out / "stderr.log"))
    lines = []
    while True:
        line = child.lines.get(timeout=120)
        assert line is not None, "the trainer ended before the kill:\n" + "\n".join(lines[-5:])
        lines.append(line)
        if stop(line.split()):
            child.kill()
            break
    while (line := child.lines.get(timeout=60)) is not None:
        lines.append(line)
    assert child.close() == -signal.SIGKILL
    return lines


def _fields(line: str) -> dict:
    return dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)


def _locators(events_source, into: dict) -> None:
    for g in events_source:
        into[g.group_id] = (g.epoch, g.idx)


def _trained_rows(journal_dir, stop_lsn=None, base_groups=()) -> tuple[Counter, set]:
    """(epoch, idx) trained on the active history (up to `stop_lsn`), and the dropped ones."""
    loc: dict[int, tuple] = {}
    _locators(base_groups, loc)
    trained, dropped = Counter(), set()
    for rec in Reader(str(journal_dir)).records(stop_lsn=stop_lsn):
        for ev in rec.commit.events:
            if type(ev) is Taken:
                _locators(ev.groups, loc)
            elif type(ev) is Trained:
                trained.update(loc[g] for g in ev.groups)
            elif type(ev) is Discarded:
                dropped.update(loc[g] for g in ev.groups)
    return trained, dropped


def test_resume_from_checkpoint_cut_alone(fast_tmp):
    out = fast_tmp / "run"
    _run_until(out, lambda p: p[:2] == ["PHASE", "checkpoint_committed"] and int(p[2][5:]) >= 6)
    # the newest checkpoint directory is the one a trainer without its journal resumes from
    committed, ckpt = checkpoint_dirs(str(out / "ckpt"))[0]
    assert committed >= 6
    cut = read_cut(os.path.join(ckpt, "ownership"))
    L = cut.lsn
    assert cut.manifest.checkpoint_step == committed
    # what the first run trained up to the checkpoint (read before the journal goes)
    before, dropped_before = _trained_rows(out / "journal", stop_lsn=L)
    assert before and max(before.values()) == 1
    live_at_cut = cut.state.groups()
    assert live_at_cut, "in-flight work at the checkpoint is what the cut must carry"

    shutil.rmtree(out / "journal")
    shutil.rmtree(out / "rows")   # the data plane too: the cut's data_plane/ must suffice

    # resume from the cut, and die again before the next checkpoint: the journal it started
    # must itself be restorable (it holds a base cut from the start)
    lines = _run_until(out, lambda p: p[:1] == ["STEP"])
    fields = _fields(next(line for line in lines if line.startswith("RESUMED")))
    assert fields["source"] == "cut" and int(fields["step"]) == committed and int(fields["lsn"]) == L
    assert int(fields["demoted"]) == 0, "the cut's data plane rows were not used"

    r = subprocess.run(_trainer(out), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    fields = _fields(next(line for line in r.stdout.splitlines() if line.startswith("RESUMED")))
    assert fields["source"] == "journal" and int(fields["step"]) == committed and int(fields["lsn"]) == L
    assert r.stdout.splitlines()[-1].startswith("DONE")

    # the new journal carries on from the cut and passes the whole chain of checks
    v = subprocess.run([sys.executable, "-c", "import sys; from replay.cli import main; sys.exit(main())",
                        "verify", str(out / "journal")], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr

    # before the cut (old journal) + after it (new journal): every row exactly once or dropped
    after, dropped_after = _trained_rows(out / "journal", base_groups=live_at_cut)
    total = before + after
    assert max(total.values()) == 1, [k for k, n in total.items() if n > 1][:10]
    rows = {(e, i) for e in range(EPOCHS) for i in range(DATASET)}
    assert set(total) | dropped_before | dropped_after == rows
    assert len(after) > 0

    # and the trainer's own ledger tells the same story
    h = read_ledger(str(out / "ledger.log"))
    rep = h.report(DATASET, EPOCHS)
    assert rep["trained_twice"] == 0 and rep["lost"] == 0
    assert Counter(h.trained) == total
