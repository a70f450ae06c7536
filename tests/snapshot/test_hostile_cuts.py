"""Issue 7.4: hostile cuts and unreadable files.

* A `.pt` holding a pickle that would run `os.system("touch <marker>")` (checked to really
  run it under a plain `torch.load`) is rejected without running, by each defence alone:
  - the manifest's sha256 matches the malicious bytes, so only `weights_only=True` stands
    in the way -> `CorruptRecord`, marker absent;
  - the sha256 does not match, and `torch.load` is replaced by a spy that would unpickle
    *without* `weights_only` -> `ChecksumMismatch` before any load: the spy never ran.
* Manifests naming `../x`, `a/../../x`, absolute paths, or listing a symlink (to a file or a
  directory) that leads outside the cut -> `UnsafePath`, and the outside file is never read;
  restoring the journal skips such a cut.
* Unreadable files. This suite runs as root, and `chmod 000` does not stop root
  (CAP_DAC_OVERRIDE). So: (1) a directory where a file is expected (MANIFEST.json, a listed
  .pt, a segment); (2) `open` monkeypatched to raise PermissionError for one path;
  (3) real permissions: `chmod 000` checked in a child process that runs as root *without*
  CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (`setpriv --bounding-set=-dac_override,...`), or
  directly when not root. Each gives an error naming the file: a `RestoreError` for cut
  files, an `OSError` carrying the path for journal segments.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.support.crash_oracle import Run, loader
from journal import Journal, JournalError, Reader
from replay import (ChecksumMismatch, CorruptRecord, ManifestMissing, MissingFile, RestoreError, Unreadable,
                    UnsafePath, restore)
from snapshot import compact, read_cut
from journal.layout import SNAPSHOTS_DIR, STATE_FILE

PT_FILES = ("train_dataloader.pt", "rollout_recovery.pt", "replay_buffer_metadata.pt")


class Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def evil_bytes(marker: str) -> bytes:
    buf = io.BytesIO()
    torch.save({"schema_version": 1, "payload": Evil(marker)}, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def journal_with_cut(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hostile") / "journal")
    run = Run(root)
    j = run.open()
    for i in range(4):
        g = run.taken(j, [i], loader(i))
        run.call(j, "admitted", g, target_step=1)
    run.call(j, "finished", g, locators=["x"])
    run.call(j, "begin_checkpoint", step=1)
    run.call(j, "commit_checkpoint", step=1)
    j.close()
    res = compact(root, retention=None)
    return root, res.cut_path


@pytest.fixture
def cut_copy(journal_with_cut, tmp_path):
    root, cut = journal_with_cut
    j = shutil.copytree(root, str(tmp_path / "journal"), symlinks=True)
    c = os.path.join(j, SNAPSHOTS_DIR, os.path.basename(cut))
    baseline = restore(root)
    return j, c, baseline


def _manifest(cut: str) -> dict:
    with open(os.path.join(cut, "MANIFEST.json"), "rb") as fh:
        return json.loads(fh.read())


def _save_manifest(cut: str, m: dict) -> None:
    with open(os.path.join(cut, "MANIFEST.json"), "w") as fh:
        json.dump(m, fh, indent=2)


def _drop_state_file(cut: str) -> None:
    os.unlink(os.path.join(cut, STATE_FILE))
    m = _manifest(cut)
    del m["files"][STATE_FILE]
    _save_manifest(cut, m)


def _vouch(cut: str, name: str) -> None:
    m = _manifest(cut)
    with open(os.path.join(cut, name), "rb") as fh:
        data = fh.read()
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _save_manifest(cut, m)


def _same(a, b) -> bool:
    return (a.lsn, a.step, sorted((g.group_id, g.owner) for g in a.groups)) == \
        (b.lsn, b.step, sorted((g.group_id, g.owner) for g in b.groups))


def test_the_payload_really_runs_under_a_plain_load(tmp_path):
    marker = str(tmp_path / "ran")
    torch.load(io.BytesIO(evil_bytes(marker)), weights_only=False)
    assert os.path.exists(marker), "the malicious pickle is not effective; the tests below prove nothing"


@pytest.mark.parametrize("name", PT_FILES)
def test_weights_only_alone_stops_a_malicious_pickle(cut_copy, tmp_path, monkeypatch, name):
    """The manifest vouches for the malicious bytes (sha256 matches): only weights_only=True
    is left, and it refuses the pickle before any global is called."""
    journal, cut, baseline = cut_copy
    marker = str(tmp_path / "ran")
    with open(os.path.join(cut, name), "wb") as fh:
        fh.write(evil_bytes(marker))
    _vouch(cut, name)
    loads = []
    real_load = torch.load

    def spy(*args, **kwargs):
        loads.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    with pytest.raises(CorruptRecord) as info:
        read_cut(cut)  # verify's read: every table loaded
    assert "weights_only" in str(info.value) and name in str(info.value)
    assert _same(restore(cut), baseline)  # a restore takes the state from the journal state file
    _drop_state_file(cut)  # without it, a restore loads the tables
    with pytest.raises(CorruptRecord):
        restore(cut)
    skipped = restore(journal)  # the journal restores without the hostile cut, and says so
    assert _same(skipped, baseline)
    assert any(os.path.basename(cut) in s.path for s in skipped.skipped)
    assert loads and all(w is True for w in loads), f"torch.load called with weights_only={loads}"
    assert not os.path.exists(marker), "the malicious pickle ran"


@pytest.mark.parametrize("name", PT_FILES)
def test_the_hash_check_alone_stops_a_malicious_pickle(cut_copy, tmp_path, monkeypatch, name):
    """The manifest's sha256 does not match, and torch.load is replaced by one that would run
    the pickle (weights_only ignored): the hash check must stop it before any load."""
    journal, cut, baseline = cut_copy
    marker = str(tmp_path / "ran")
    evil = evil_bytes(marker)
    with open(os.path.join(cut, name), "wb") as fh:
        fh.write(evil)
    m = _manifest(cut)
    m["files"][name]["size"] = len(evil)  # the size agrees, only the digest tells them apart
    _save_manifest(cut, m)
    calls = []
    real_load = torch.load

    def unsafe_load(f, *args, **kwargs):
        calls.append(1)
        kwargs["weights_only"] = False
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", unsafe_load)
    with pytest.raises(ChecksumMismatch) as info:
        read_cut(cut)
    assert name in str(info.value)
    with pytest.raises(ChecksumMismatch):
        restore(cut)
    calls_before_journal = len(calls)
    assert calls_before_journal == 0, "torch.load ran on a file whose sha256 did not match"
    monkeypatch.setattr(torch, "load", real_load)
    assert _same(restore(journal), baseline)
    assert not os.path.exists(marker), "the malicious pickle ran"


# -- paths leading out of the cut ------------------------------------------------------------


def _list_outside(cut: str, tmp_path, entry: str, *, link: str | None = None, link_dir=False) -> str:
    """List `entry` in the manifest with the hash of a file outside the cut (so only the path
    checks can object); `link`: make that entry a symlink to the outside file or directory."""
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir(exist_ok=True)
    outside = outside_dir / "secret.pt"
    shutil.copy(os.path.join(cut, "rollout_recovery.pt"), outside)
    data = outside.read_bytes()
    m = _manifest(cut)
    m["files"][entry] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if link is not None:
        target = str(outside_dir) if link_dir else str(outside)
        full = os.path.join(cut, link)
        if os.path.lexists(full):
            os.unlink(full)
        os.symlink(target, full)
    _save_manifest(cut, m)
    return str(outside)


UNSAFE = {
    "dotdot": dict(entry="../x.pt"),
    "dotdot-deep": dict(entry="data_plane/../../x.pt"),
    "dotdot-middle": dict(entry="a/../rollout_recovery.pt"),
    "absolute": dict(entry="/etc/passwd"),
    "absolute-outside": dict(entry="{outside}"),
    "dot": dict(entry="./rollout_recovery.pt"),
    "backslash": dict(entry="..\\x.pt"),
    "nul": dict(entry="x\u0000.pt"),
    "symlink-file": dict(entry="rollout_recovery.pt", link="rollout_recovery.pt"),
    "symlink-new-file": dict(entry="extra.pt", link="extra.pt"),
    "symlink-dir": dict(entry="data_plane/secret.pt", link="data_plane", link_dir=True),
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_paths_leading_out_of_the_cut(cut_copy, tmp_path, monkeypatch, case):
    journal, cut, baseline = cut_copy
    spec = dict(UNSAFE[case])
    outside_path = str(tmp_path / "outside" / "secret.pt")
    spec["entry"] = spec["entry"].replace("{outside}", outside_path)
    _list_outside(cut, tmp_path, **spec)
    opened = []
    real_open = builtins.open

    def watch(file, *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and "outside" in os.fsdecode(file):
            opened.append(os.fsdecode(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", watch)
    with pytest.raises(UnsafePath) as info:
        read_cut(cut)
    assert cut in str(info.value)
    with pytest.raises(UnsafePath):
        restore(cut)
    assert _same(restore(journal), baseline)  # skipped and reported
    assert not opened, f"a file outside the cut was read: {opened}"


def test_unlisted_symlink_out_of_the_cut_is_an_orphan(cut_copy, tmp_path):
    journal, cut, _ = cut_copy
    (tmp_path / "o").mkdir()
    os.symlink(str(tmp_path / "o"), os.path.join(cut, "data_plane"))
    with pytest.raises(RestoreError) as info:
        read_cut(cut)
    assert "data_plane" in str(info.value)


# -- unreadable files ---------------------------------------------------------------------------


def _names_file(exc: BaseException, path: str) -> bool:
    return path in str(exc) or os.path.basename(path) in str(exc) or getattr(exc, "filename", None) == path


@pytest.mark.parametrize("name", ("MANIFEST.json",) + PT_FILES)
def test_a_directory_where_a_cut_file_belongs(cut_copy, name):
    journal, cut, baseline = cut_copy
    p = os.path.join(cut, name)
    os.unlink(p)
    os.mkdir(p)
    with pytest.raises(RestoreError) as info:
        read_cut(cut)
    assert _names_file(info.value, p), str(info.value)
    assert isinstance(info.value, (ManifestMissing, MissingFile, ChecksumMismatch))
    assert _same(restore(journal), baseline)


@pytest.mark.parametrize("name", ("MANIFEST.json",) + PT_FILES)
def test_permission_denied_on_a_cut_file(cut_copy, monkeypatch, name):
    """EACCES from open (what chmod 000 gives a non-root reader), simulated by monkeypatching
    open for that one path, since root ignores file modes."""
    journal, cut, baseline = cut_copy
    p = os.path.join(cut, name)
    real_open = builtins.open

    def deny(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.abspath(os.fspath(file)) == p:
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    with pytest.raises(RestoreError) as info:
        read_cut(cut)
    assert _names_file(info.value, p) and "ermission" in str(info.value), str(info.value)
    assert _same(restore(journal), baseline)


def _segment(journal: str) -> str:
    return os.path.join(journal, sorted(n for n in os.listdir(journal) if n.endswith(".wal"))[0])


def test_a_directory_where_a_segment_belongs(cut_copy):
    journal, _, _ = cut_copy
    seg = _segment(journal)
    os.rename(seg, seg + ".moved")
    os.mkdir(seg)
    for call in (lambda: list(Reader(journal).records()), lambda: restore(journal),
                 lambda: Journal.open(journal).close()):
        with pytest.raises((OSError, JournalError, RestoreError)) as info:
            call()
        assert _names_file(info.value, seg), repr(info.value)
    with pytest.raises(Unreadable):  # restore speaks RestoreError only
        restore(journal)


def test_permission_denied_on_a_segment(cut_copy, monkeypatch):
    journal, _, _ = cut_copy
    seg = _segment(journal)
    real_open = builtins.open

    def deny(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.abspath(os.fspath(file)) == seg:
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    for call in (lambda: list(Reader(journal).records()), lambda: restore(journal),
                 lambda: Journal.open(journal).close()):
        with pytest.raises((OSError, JournalError, RestoreError)) as info:
            call()
        assert _names_file(info.value, seg) and "ermission" in str(info.value), repr(info.value)
    with pytest.raises(Unreadable):  # restore speaks RestoreError only
        restore(journal)


CHILD = textwrap.dedent("""
    import json, os, sys
    sys.path[:0] = [sys.argv[1]]
    from journal import Journal, Reader
    from replay import restore
    from snapshot import read_cut
    journal, cut, seg, pt = sys.argv[2:6]
    out = {}
    def attempt(label, fn):
        try:
            fn()
            out[label] = ["ok", ""]
        except BaseException as exc:
            out[label] = [type(exc).__name__, str(exc)]
    os.chmod(pt, 0)
    attempt("read_cut", lambda: read_cut(cut))
    attempt("restore_cut", lambda: restore(cut))
    os.chmod(pt, 0o644)
    os.chmod(os.path.join(cut, "MANIFEST.json"), 0)
    attempt("read_cut_manifest", lambda: read_cut(cut))
    os.chmod(os.path.join(cut, "MANIFEST.json"), 0o644)
    os.chmod(seg, 0)
    attempt("reader", lambda: list(Reader(journal).records()))
    attempt("restore_journal", lambda: restore(journal))
    attempt("open", lambda: Journal.open(journal).close())
    os.chmod(seg, 0o644)
    print(json.dumps(out))
""")


def test_real_permissions(cut_copy):
    """chmod 000 for real: in a child process without the capabilities that let root ignore
    file modes (or directly, when the suite does not run as root)."""
    journal, cut, _ = cut_copy
    seg = _segment(journal)
    pt = os.path.join(cut, "rollout_recovery.pt")
    cmd = [sys.executable, "-c", CHILD, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
           journal, cut, seg, pt]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: chmod 000 cannot be tested for real")
        cmd = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for label in ("read_cut", "restore_cut"):
        kind, msg = out[label]
        assert kind == "MissingFile" and "rollout_recovery.pt" in msg and "ermission" in msg, out[label]
    kind, msg = out["read_cut_manifest"]
    assert kind == "ManifestMissing" and "MANIFEST.json" in msg and "ermission" in msg, out
    for label in ("reader", "restore_journal", "open"):
        kind, msg = out[label]
        assert kind != "ok" and os.path.basename(seg) in msg and "ermission" in msg, (label, out[label])
