"""Issue 7.1: ALICE-style crash states of real workloads, each opened, restored and checked.

Every workload runs a real `Journal` (sync="always", small segments) and the
compactor through `FaultFS`, recording each acknowledged commit. `CrashStates`
(tests/support/crash_states.py) turns the recorded operations into crash states:
every prefix, each volatile op dropped, writes torn at 512 B / 4 KiB with the
rest missing, zeroed or garbage, reorders in one fsync window, renames and
unlinks undone. Each distinct state is written to a scratch directory and
`crash_oracle.check_journal` verifies it: strict open, every acknowledged
commit present with its exact events, nothing never written, restore to the
latest committed checkpoint equal to an independent model fold, every cut
readable, reopen (repairing the torn tail) and a later append.

CI checks a seeded sample per workload (`OJ_CRASH_STATES_SAMPLE`, default 60;
the "prefix" states, faultfs's pessimistic image at every point, are sampled
like the rest). `OJ_CRASH_STATES_FULL=1` checks every distinct state. The
counts are printed at the end of the module (and with `pytest -s`).
"""

from __future__ import annotations

import os
import shutil
import traceback

import pytest

from tests.support.crash_oracle import WORKLOADS, Run, Violation, check_journal, w_compact_archive
from tests.support.crash_states import CrashStates, write_tree
from tests.support.faultfs import materialize, snapshot_tree

FULL = os.environ.get("OJ_CRASH_STATES_FULL") == "1"
SAMPLE = None if FULL else int(os.environ.get("OJ_CRASH_STATES_SAMPLE", "60"))
SEED = int(os.environ.get("OJ_CRASH_STATES_SEED", "7"))

RESULTS: dict[str, tuple[int, int, int, int]] = {}


# -- the test ------------------------------------------------------------------------------


def record(workload, root: str) -> Run:
    run = Run(root)
    workload(run)
    return run


def check_states(run: Run, states, scratch: str) -> list[str]:
    failures = []
    for s in states:
        img = write_tree(s.tree, os.path.join(scratch, f"s{s.index}"))
        try:
            check_journal(img, run, s.point)
        except Exception as exc:  # every failure is collected with the state that caused it
            failures.append(f"{s.describe()}: {type(exc).__name__}: {exc}"
                            + ("" if isinstance(exc, Violation) else "\n" + traceback.format_exc(limit=4)))
        finally:
            shutil.rmtree(img, ignore_errors=True)
    return failures


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    yield
    if not RESULTS:
        return
    lines = ["crash states (workload: produced / distinct / checked / failed):"]
    for name, (produced, distinct, checked, failed) in RESULTS.items():
        lines.append(f"  {name:16s} {produced:7d} / {distinct:6d} / {checked:6d} / {failed}")
    tot = [sum(v[i] for v in RESULTS.values()) for i in range(4)]
    lines.append(f"  {'total':16s} {tot[0]:7d} / {tot[1]:6d} / {tot[2]:6d} / {tot[3]}"
                 + ("  (full enumeration)" if FULL else f"  (sample {SAMPLE} per workload, seed {SEED};"
                                                       " OJ_CRASH_STATES_FULL=1 for all)"))
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_crash_states(name, fast_tmp):
    run = record(WORKLOADS[name], str(fast_tmp / "journal"))
    gen = CrashStates(run.fs.baseline, run.fs.ops, root=run.root, seed=SEED)
    states = gen.distinct(sample=SAMPLE, seed=SEED)
    failures = check_states(run, states, str(fast_tmp / "images"))
    RESULTS[name] = (states.produced, states.distinct, len(states), len(failures))
    print(f"{name}: {len(run.fs.ops)} ops, {states.produced} crash states produced, "
          f"{states.distinct} distinct, {len(states)} checked, {len(failures)} failed")
    assert not failures, f"{len(failures)} of {len(states)} crash states broke a guarantee:\n" + \
        "\n".join(failures[:10])


def test_prefix_states_match_faultfs(fast_tmp):
    """The generator's pessimistic state at every prefix is faultfs's `crash_image` there."""
    run = record(w_compact_archive, str(fast_tmp / "journal"))
    gen = CrashStates(run.fs.baseline, run.fs.ops, root=run.root)
    for point in gen.points():
        name, applied = next(gen.variants(point))
        assert name == "prefix"
        mine = gen._build(applied)
        dest = str(fast_tmp / f"p{point}")
        materialize(run.fs.baseline, run.fs.ops[:point], dest, root=run.root)
        theirs = snapshot_tree(dest)
        assert mine == theirs, f"point {point}"
        shutil.rmtree(dest)


def test_generator_variants_on_a_tiny_run(tmp_path):
    """The variants a single unsynced append produces: dropped, torn at sector and page
    boundaries with the rest missing/zeroed/garbage; fsynced bytes are never dropped."""
    from tests.support.faultfs import FaultFS
    root = str(tmp_path / "d")
    os.mkdir(root)
    fs = FaultFS(root=root)
    f = fs.create(os.path.join(root, "a"))
    f.write(b"x" * 100)
    f.sync()
    fs.fsync_dir(root)
    f.write(b"y" * 5000)          # volatile: offsets 100..5100
    f.close()
    gen = CrashStates(fs.baseline, fs.ops, root=root)
    variants = dict((n, gen._build(a)) for n, a in gen.variants(len(fs.ops)))
    assert variants["prefix"] == {"a": b"x" * 100}
    assert variants["all"] == {"a": b"x" * 100 + b"y" * 5000}
    torn = {n: v["a"] for n, v in variants.items() if n.startswith("torn")}
    cuts = sorted({int(n.split("@")[1].split(":")[0]) for n in torn})
    assert cuts == [100] + list(range(512, 5100, 512))
    assert torn["torn#4@4096:missing"] == b"x" * 100 + b"y" * 3996
    assert torn["torn#4@4096:zeros"] == b"x" * 100 + b"y" * 3996 + bytes(1004)
    g = torn["torn#4@4096:garbage"]
    assert len(g) == 5100 and g[:4096] == b"x" * 100 + b"y" * 3996 and g[4096:] != bytes(1004)
    for v in variants.values():
        assert v["a"].startswith(b"x" * 100)  # the fsynced prefix always survives
    # before the directory fsync, the file's very name is volatile
    early = dict(gen.variants(3))  # create, write, fsync done; fsync_dir not yet
    assert gen._build(early["prefix"]) == {}
    assert gen._build(early["all"]) == {"a": b"x" * 100}
