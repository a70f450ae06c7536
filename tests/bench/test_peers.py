"""`python -m bench peers`: the report's structure and the invariants whatever the speeds (every
side completes every group it starts, one at a time and with N in flight, every reopen resumes
after the last group, ours counts its syncs through the journal's seam and the trace agrees);
the sync count's parsing; straw's progress step and its batched step; and the clear exit when
straw-queue is missing."""

from __future__ import annotations

import pytest

from bench.peers import PROGRESS, TARGETS, WITHOUT_PROGRESS, count_syncs
from bench.peers_lifecycles import CONCURRENCY, Sqlite, Straw, durable_steps
from tests.support.bench_run import bench, quick_report

NAMED = {"peers_groups_vs_straw": ("value/reference", TARGETS["groups"]),
         "peers_payload_groups_vs_straw": ("value/reference", TARGETS["payload_groups"]),
         "peers_bytes_vs_straw": ("reference/value", TARGETS["bytes"]),
         "peers_rss_vs_straw": ("reference/value", TARGETS["rss"]),
         "peers_groups_vs_straw_64": ("value/reference", TARGETS["groups"]),
         "peers_payload_groups_vs_straw_64": ("value/reference", TARGETS["payload_groups"])}


@pytest.fixture(scope="module")
def report():
    return quick_report("peers", timeout=900)


def test_the_four_targets_and_their_ratios(report):
    assert report["benchmark"] == "peers" and report["mode"] == "quick"
    assert report["meta"]["straw_version"] == "0.1.6"
    figures = {f["name"]: f for f in report["figures"]}
    for name, (ratio_is, minimum) in NAMED.items():
        f = figures[name]
        assert f["ratio_is"] == ratio_is and f["target"]["min_ratio"] == minimum, name
        assert f["value"] > 0 and f["reference"] > 0 and f["result"] in ("PASS", "MISS"), f
        assert f["result"] == ("PASS" if f["ratio"] >= minimum else "MISS"), f
    for f in report["figures"]:
        if f["name"] not in NAMED:
            assert f["target"] is None and f["result"] in ("info", "NOT RUN"), f
    for label in ("1x", "10x"):
        assert {f"peers_reopen_{label}", f"peers_reopen_rss_{label}"} <= set(figures)
    assert "peers_reopen_100x" in figures


def test_every_side_completes_every_group_at_every_concurrency(report):
    totals = report["meta"]["totals"]
    assert report["meta"]["concurrency"] == list(CONCURRENCY)
    keys = ("ours", "ours_payload", "straw", "straw_payload", "sqlite")
    assert set(totals) == {k if n == 1 else f"c{n}_{k}" for n in CONCURRENCY for k in keys}
    for key, t in totals.items():
        assert t["groups"] > 0 and t["completed"] == t["groups"], key
        assert t["bytes"] > 0, key
    for n in CONCURRENCY[1:]:   # whole steps of N groups
        assert all(totals[f"c{n}_{k}"]["groups"] % n == 0 for k in keys), n
    names = {f["name"] for f in report["figures"]}
    assert {f"peers_{what}_{n}" for n in CONCURRENCY[1:]
            for what in ("groups_vs_straw", "payload_groups_vs_straw", "groups_vs_sqlite")} <= names
    for key in ("ours_payload", "straw_payload"):  # the payloads are on disk: 4 x 32 KiB a group
        assert totals[key]["bytes"] / totals[key]["groups"] >= 4 * 32 * 1024, key
    for label, size in report["meta"]["reopens"].items():
        for lib in ("ours", "straw"):
            assert size[lib]["history"]["completed"] == size["groups"], (label, lib)
            for reopened in size[lib]["reopens"]:
                assert reopened["cursor"] == size["groups"], (label, lib)  # resumes after the last group
                assert reopened["peak_rss_kib"] >= reopened["rss_after_imports_kib"] > 0
        assert all(x["live"] == 0 for x in size["ours"]["reopens"])
        assert all(x["processed"] == size["groups"] for x in size["straw"]["reopens"])


def test_ours_counts_syncs_through_the_seam_and_the_trace_agrees(report):
    totals = report["meta"]["totals"]
    figure = {f["name"]: f for f in report["figures"]}["peers_syncs"]
    assert "seam" in figure["label"] and figure["value"] >= 1  # every group's commits are fsynced
    assert totals["ours"]["seam_fsyncs"] >= totals["ours"]["groups"]
    syncs = report["meta"]["syncs"]
    if syncs["strace"] is None:
        assert figure["reference"] is None
        return
    for key in ("ours", "ours_payload", "straw", "straw_payload"):
        assert syncs[key]["completed"] == syncs[key]["groups"] and syncs[key]["per_group"] > 0, key
    for n in CONCURRENCY[1:]:
        for key in ("ours", "ours_payload", "straw", "straw_payload", "sqlite"):
            traced = syncs[f"c{n}_{key}"]
            assert traced["completed"] == traced["groups"] and traced["counted"] >= n, (n, key)
    # without payloads every sync of ours is the journal's: the seam and the trace count the same
    assert syncs["ours"]["seam_fsyncs"] == sum(syncs["ours"]["calls"].values())
    # with payloads the data plane syncs too, around the journal's seam
    assert sum(syncs["ours_payload"]["calls"].values()) > syncs["ours_payload"]["seam_fsyncs"]


def test_rows_say_whether_the_progress_step_ran(report):
    assert report["meta"]["progress"] == PROGRESS
    rows = [f for f in report["figures"] if f["name"].startswith(("peers_groups", "peers_payload_groups",
                                                                   "peers_bytes", "peers_syncs"))]
    assert rows and all((WITHOUT_PROGRESS in f["label"]) is not PROGRESS for f in rows)


def test_count_syncs_counts_every_thread_between_the_markers_only(tmp_path):
    trace = tmp_path / "t"
    trace.write_text(
        '100 fsync(3) = 0\n'
        '100 chdir("/x/marker-start") = 0\n'
        '100 fsync(3) = 0\n'
        '101 fdatasync(7 <unfinished ...>\n'
        '100 fsync(4) = 0\n'
        '101 <... fdatasync resumed>) = 0\n'
        '[pid 102] sync_file_range(5, 0, 0, 2) = 0\n'
        '100 chdir("/x/marker-stop") = 0\n'
        '100 fsync(3) = 0\n')
    assert count_syncs(str(trace)) == {"fsync": 2, "fdatasync": 1, "sync_file_range": 1, "syncfs": 0,
                                       "msync": 0}


def test_straws_progress_step_saves_the_prefix_as_the_tasks_input(tmp_path):
    life = Straw(str(tmp_path / "pool"), payloads=True, progress=True)
    try:
        life.group()
        life.group()
        status = life.queue.task_status("prompt:1")
        assert status["state"] == "completed" and status["spec"]["input_ref"]["tokens"] == 2048
        assert life.completed() == 2
    finally:
        life.close()


@pytest.mark.parametrize("lib", [Straw, Sqlite])
def test_a_batched_step_completes_its_n_groups_with_their_durable_steps(tmp_path, lib):
    life = lib(str(tmp_path / "pool"), payloads=False, progress=True, concurrency=4)
    try:
        assert life.run() == 4 and life.run() == 4
        assert life.completed() == 8
    finally:
        life.close()
    assert durable_steps(lib.name, 4, True) == {"straw": 1 + 7 / 4, "sqlite": 1 + 4 / 4}[lib.name]
    assert durable_steps(lib.name, 1, True) == {"straw": 5, "sqlite": 4}[lib.name]


def test_without_straw_the_bench_says_so_and_exits_2(tmp_path):
    hide = "import sys; sys.modules['straw'] = None; from bench.__main__ import main; sys.exit(main())"
    p = bench(["-c", hide, "peers", "--quick"], timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert "straw-queue==0.1.6" in p.stderr and "'.[peers]'" in p.stderr

