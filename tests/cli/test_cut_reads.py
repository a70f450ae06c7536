"""A cut whose LSN the scan of the active history passes is anchored by what that scan saw there:
`summary` and `verify` read no segment again for it (they read what they read without cuts),
verify reads each cut once and still compares it with the fold, a cut the scan saw on another
branch is still stale, and summary of a retired history loads only the cut it folds from."""

from __future__ import annotations

import collections
import json
import os
import shutil

import replay
import replay.cut_status
from snapshot import compact, read_cut
from snapshot.cut import write_cut

from replay.cli.source import open_source
from replay.cli import summary as summary_module
from replay.cli.summary import summarize
from tests.support.cli_journals import clean_run
from tests.support.segment_reads import spy_segment_reads


def _journal(tmp_path) -> str:
    path = str(tmp_path / "journal")
    clean_run(path, rows=200, steps_after=40, segment_bytes=4096)
    compact(path, retention=None)
    return path


def _two_cuts(tmp_path) -> str:
    """The journal with a second, older cut, at an LSN in the middle of the active history."""
    path = _journal(tmp_path)
    newest = read_cut(_cuts(path)[0])
    compact(path, at=newest.lsn // 2, retention=None)
    assert len(_cuts(path)) == 2
    return path


def _cuts(path: str) -> list[str]:
    root = os.path.join(path, "snapshots")
    return sorted((os.path.join(root, n) for n in os.listdir(root)), reverse=True)


def test_verify_reads_each_cut_once_and_no_segment_again(tmp_path, monkeypatch):
    path = _two_cuts(tmp_path)
    bare = shutil.copytree(path, str(tmp_path / "without-cuts"), ignore=shutil.ignore_patterns("snapshots"))
    cut_reads: list[str] = []
    real_read_cut = replay.cut_status.read_cut

    def counting_read_cut(cut_dir):
        cut_reads.append(cut_dir)
        return real_read_cut(cut_dir)

    monkeypatch.setattr(replay.cut_status, "read_cut", counting_read_cut)
    reads = spy_segment_reads(monkeypatch)
    assert replay.verify(bare).clean
    reads_without = collections.Counter(reads)
    reads.clear()
    rep = replay.verify(path)
    assert rep.clean, rep.problems
    assert sorted(cut_reads) == sorted(_cuts(path))
    assert len(reads_without) > 3
    assert collections.Counter(reads) == reads_without
    assert sum(c.target.startswith("cut-") and c.result == "ok" for c in rep.checks) == 2


def test_verify_still_finds_a_cut_that_differs_from_the_fold(tmp_path):
    path = _two_cuts(tmp_path)
    older = _cuts(path)[1]
    cut = read_cut(older)
    state = cut.state.copy()
    state.committed_checkpoints = {}  # the files are whole and consistent; the history says otherwise
    state.pending_checkpoints = {}
    shutil.rmtree(older)
    write_cut(older, state, run_id=bytes.fromhex(cut.manifest.run_id), timeline=cut.timeline)
    rep = replay.verify(path)
    assert not rep.clean
    (problem,) = [p for p in rep.problems if p.kind == "cut"]
    assert problem.message.startswith(f"{os.path.basename(older)}: does not match the journal at LSN {cut.lsn}")
    assert "checkpoint markers differ" in problem.message


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


def _retired(tmp_path) -> tuple[str, list[str]]:
    """A journal whose first segments were deleted, with two cuts that both cover them (oldest
    first)."""
    path = str(tmp_path / "retired")
    clean_run(path, steps_before_crash=31, steps_after=20, segment_bytes=4096)
    newest = compact(path, retention=None).lsn
    compact(path, at=newest - 30, retention=None)
    assert compact(path, retention="delete", keep_cuts=2).retired_segments
    return path, sorted(_cuts(path))


def test_summary_of_a_retired_history_loads_only_the_cut_it_starts_from(tmp_path, monkeypatch):
    path, (older, newer) = _retired(tmp_path)
    loaded: list[str] = []
    real_read_cut = summary_module.read_cut

    def counting_read_cut(cut_dir):
        loaded.append(cut_dir)
        return real_read_cut(cut_dir)

    monkeypatch.setattr(summary_module, "read_cut", counting_read_cut)
    s = summarize(open_source(path))
    assert loaded == [older] and s["active"]["base_cut"] == older
    assert s["active"]["scanned_from_lsn"] == read_cut(older).lsn + 1
    loaded.clear()
    with open(os.path.join(older, "MANIFEST.json")) as f:
        files = json.load(f)["files"]
    name = sorted(files)[0]
    with open(os.path.join(older, name), "r+b") as f:  # its sha256 no longer matches: check 4 fails
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 1]))
    s = summarize(open_source(path))
    assert loaded == [older, newer] and s["active"]["base_cut"] == newer
