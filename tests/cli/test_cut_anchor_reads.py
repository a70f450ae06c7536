"""A cut whose LSN the scan of the active history passes is anchored by what that scan saw there:
`summary` reads no segment again for it (it reads what it reads without cuts), and a cut the
scan saw on another branch is still stale."""

from __future__ import annotations

import collections
import json
import os
import shutil

from snapshot import compact

from replay.cli.source import open_source
from replay.cli.summary import summarize
from tests.support.cli_journals import clean_run
from tests.support.segment_reads import spy_segment_reads


def _journal(tmp_path) -> str:
    path = str(tmp_path / "journal")
    clean_run(path, rows=200, steps_after=40, segment_bytes=4096)
    compact(path, retention=None)
    return path


def test_summary_reads_no_segment_again_for_a_cut(tmp_path, monkeypatch):
    path = _journal(tmp_path)
    bare = shutil.copytree(path, str(tmp_path / "without-cuts"), ignore=shutil.ignore_patterns("snapshots"))
    reads = spy_segment_reads(monkeypatch)
    without = summarize(open_source(bare))
    reads_without = collections.Counter(reads)
    reads.clear()
    with_cut = summarize(open_source(path))
    assert with_cut["cuts"]["valid"] == 1 and with_cut["cuts"]["restore_base"]
    assert len(reads_without) > 3  # several segments, the active history's and the dead tail's
    assert collections.Counter(reads) == reads_without
    assert with_cut["owners"] == without["owners"]


def test_a_cut_the_scan_saw_on_another_branch_is_stale(tmp_path):
    path = _journal(tmp_path)
    s = summarize(open_source(path))
    cut = os.path.join(path, "snapshots", os.listdir(os.path.join(path, "snapshots"))[0])
    dead = s["dead_tails"][0]
    # the cut's directory renamed and its manifest moved to an LSN of the dead tail that the
    # active history also holds: the scan passes that LSN on the active timeline
    with open(os.path.join(cut, "MANIFEST.json")) as f:
        m = json.load(f)
    lsn = dead["first_lsn"]
    assert lsn <= s["active"]["end_lsn"]
    m["lsn"], m["timeline"] = lsn, dead["timeline"]
    with open(os.path.join(cut, "MANIFEST.json"), "w") as f:
        json.dump(m, f)
    os.rename(cut, os.path.join(path, "snapshots", f"cut-{dead['timeline']:08d}-{lsn:020d}"))
    after = summarize(open_source(path))
    assert (after["cuts"]["valid"], after["cuts"]["stale"]) == (0, 1)
