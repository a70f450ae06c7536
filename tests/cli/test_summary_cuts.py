"""`journal-inspect summary` checks a journal's cuts without loading their contents (checks 1-4,
sha256 streamed, and the anchor; no torch), says so, and still reports every cut those checks
fail; `verify` keeps the whole chain."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from snapshot import compact
from journal.layout import MANIFEST_NAME, REPLAY_FILE

from tests.support.cli_journals import clean_run
from tests.support.cli_run import cli, cli_json

_PROBE = ("import sys, replay.cli as c\n"
          "rc = c.main(sys.argv[1:])\n"
          "sys.stdout.flush()\n"
          "print('TORCH-LOADED' if 'torch' in sys.modules else 'NO-TORCH', rc, file=sys.stderr)\n")


@pytest.fixture
def journal(tmp_path) -> str:
    path = str(tmp_path / "journal")
    clean_run(path)
    compact(path, retention=None)
    return path


def _cut(journal: str) -> str:
    root = os.path.join(journal, "snapshots")
    (name,) = os.listdir(root)
    return os.path.join(root, name)


def _rewrite(cut: str, name: str, data: bytes) -> None:
    """Replace a cut file and list its new size and sha256 in the manifest: the bytes are
    consistent with the manifest, the contents are not a table."""
    with open(os.path.join(cut, name), "wb") as f:
        f.write(data)
    mpath = os.path.join(cut, MANIFEST_NAME)
    with open(mpath) as f:
        manifest = json.load(f)
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(mpath, "w") as f:
        json.dump(manifest, f)


def test_summary_checks_cuts_without_importing_torch(journal):
    p = subprocess.run([sys.executable, "-c", _PROBE, "summary", journal], capture_output=True,
                       text=True, timeout=120)
    verdict, code = p.stderr.strip().splitlines()[-1].split()
    assert (verdict, code) == ("NO-TORCH", "0"), p.stderr
    assert "1 valid, 0 stale, 0 incomplete, 0 invalid" in p.stdout
    assert "sha256 and anchor checked, `journal-inspect verify` checks their contents" in p.stdout
    doc = cli_json("summary", journal)
    assert doc["cuts"]["valid"] == 1 and doc["cuts"]["checked"] == "checks 1-4 and 8 (contents not loaded)"


def test_summary_reports_a_cut_whose_sha256_does_not_match(journal):
    cut = _cut(journal)
    with open(os.path.join(cut, REPLAY_FILE), "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    doc = cli_json("summary", journal)
    assert (doc["cuts"]["valid"], doc["cuts"]["invalid"]) == (0, 1)
    assert doc["cuts"]["restore_base"] is None


def test_summary_claims_only_the_file_checks_and_verify_loads_the_contents(journal):
    """A table that is not a pickle but matches its manifest passes what summary checks, and
    summary says which checks those were; `cuts` and verify load it and fail it."""
    cut = _cut(journal)
    _rewrite(cut, REPLAY_FILE, b"not a torch file")
    summary = cli_json("summary", journal)
    assert summary["cuts"]["valid"] == 1
    assert summary["cuts"]["checked"] == "checks 1-4 and 8 (contents not loaded)"
    listing = cli_json("cuts", journal)
    (entry,) = [c for c in listing["cuts"] if c["path"] == cut]
    assert (entry["status"], entry["checked"]) == ("invalid", "checks 1-8")
    assert "does not load with weights_only=True" in entry["reason"]
    r = cli("verify", journal, code=1)
    assert "does not load with weights_only=True" in r.stdout
