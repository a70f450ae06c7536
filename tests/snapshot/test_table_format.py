"""The cut's group tables have NeMo-RL's file names but a layout of ours, so each names its own
format (`format`, `format_version`) and carries no `schema_version`, the key NeMo-RL's loader
checks (`schema_version == 1`, /work/shared/reference/rollout-recovery-ledger.txt, check 4):
that loader rejects our files instead of misreading them, and ours rejects a table of
another format. Tables written before the tag (cut schemas 1 and 2) still read."""

from __future__ import annotations

import hashlib
import io
import json
import os

import pytest
import torch

import replay
import replay.cli
from journal import GroupRef, Journal, RolloutRef
from journal.layout import STATE_FILE
from replay import restore
from snapshot import compact, read_cut
from snapshot.manifest import SCHEMA_VERSION

TABLES = {"rollout_recovery.pt": "ownership-journal/rollout-recovery",
          "replay_buffer_metadata.pt": "ownership-journal/replay-buffer-metadata",
          "replacement_reserve.pt": "ownership-journal/replacement-reserve"}


def nemo_rl_accepts(table) -> bool:
    """NeMo-RL's loader, as far as it decides whether a file is its own (check 4 of its chain:
    the schema number it reads is `schema_version`, and it reads version 1)."""
    return isinstance(table, dict) and table.get("schema_version") == 1


@pytest.fixture
def cut(tmp_path) -> str:
    """A cut holding all three tables: reserved, admitted with rollouts, replay and spare groups."""
    path = str(tmp_path / "journal")
    with Journal.open(path, sync="none") as j:
        r, a, p, s = j.taken([GroupRef(idx=i, task_name="math") for i in range(4)], loader_state={"pos": 4})
        j.diverted([s])
        j.admitted([a], target_step=1, rollouts=2)
        j.admitted([p], target_step=1)
        j.finished([p], locators=["dp/p"])
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    return compact(path, retention=None).cut_path


def _load(cut: str, name: str):
    return torch.load(os.path.join(cut, name), weights_only=True)


def _rewrite(cut: str, name: str, mutate, manifest_schema: int | None = None) -> None:
    """Let `mutate` change table `name`, save it and re-hash it in the manifest (so only the
    format check can catch it)."""
    table = _load(cut, name)
    mutate(table)
    buf = io.BytesIO()
    torch.save(table, buf)
    data = buf.getvalue()
    with open(os.path.join(cut, name), "wb") as f:
        f.write(data)
    with open(os.path.join(cut, "MANIFEST.json")) as f:
        m = json.load(f)
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if manifest_schema is not None:
        m["schema_version"] = manifest_schema
    with open(os.path.join(cut, "MANIFEST.json"), "w") as f:
        json.dump(m, f)


def _drop_state_file(cut: str) -> None:
    """Remove the cut's journal state file (a cut written before it existed): a restore then
    loads the tables."""
    os.unlink(os.path.join(cut, STATE_FILE))
    with open(os.path.join(cut, "MANIFEST.json")) as f:
        m = json.load(f)
    del m["files"][STATE_FILE]
    with open(os.path.join(cut, "MANIFEST.json"), "w") as f:
        json.dump(m, f)


def test_each_table_names_its_own_format_and_nemo_rl_rejects_it(cut):
    for name, fmt in TABLES.items():
        table = _load(cut, name)
        assert table["format"] == fmt and table["format_version"] == SCHEMA_VERSION
        assert "schema_version" not in table
        assert not nemo_rl_accepts(table), f"NeMo-RL's loader would take {name} for its own"
    assert SCHEMA_VERSION == 5


@pytest.mark.parametrize("mutate, words", [
    (lambda t: t.update(format="ownership-journal/replay-buffer-metadata"), "replay-buffer-metadata"),
    (lambda t: t.update(format="nemo-rl/rollout-recovery"), "nemo-rl/rollout-recovery"),
    (lambda t: t.update(format_version=9), "format_version 9"),
    (lambda t: (t.pop("format"), t.pop("format_version")), "no format"),
])
def test_a_table_of_another_format_is_refused_naming_it(cut, mutate, words):
    """Where the tables are loaded: `verify`'s read of a cut, and a restore from a cut whose
    journal state file is missing (a restore takes the state from that file otherwise)."""
    _rewrite(cut, "rollout_recovery.pt", mutate)
    with pytest.raises(replay.SchemaMismatch) as info:
        read_cut(cut)
    assert "rollout_recovery.pt" in str(info.value) and words in str(info.value), str(info.value)
    restore(cut)
    _drop_state_file(cut)
    with pytest.raises(replay.SchemaMismatch, match="rollout_recovery.pt"):
        restore(cut)


def test_tables_of_schema_4_without_spans_still_read(cut):
    """A cut of schema 4 (the last before policy spans): no since columns, nothing spans."""
    want = restore(cut)
    for name in TABLES:
        def unspan(t):
            del t["rollout_table"]["since_at"], t["rollout_table"]["since"]
            t["format_version"] = 4
        _rewrite(cut, name, unspan, manifest_schema=4)
    got = restore(cut)
    assert [(g.group_id, g.owner, g.rollouts) for g in got.groups] == \
        [(g.group_id, g.owner, g.rollouts) for g in want.groups]
    assert read_cut(cut).state.live[got.groups[1].group_id].rollouts is not None


def test_tables_of_schema_3_without_progress_still_read(cut):
    """A cut of schema 3 (the last before progress): no progress_table, no rollout has progress."""
    want = restore(cut)
    for name in TABLES:
        def untable(t):
            del t["progress_table"], t["rollout_table"]["since_at"], t["rollout_table"]["since"]
            t["format_version"] = 3
        _rewrite(cut, name, untable, manifest_schema=3)
    got = restore(cut)
    assert [(g.group_id, g.owner, g.rollouts) for g in got.groups] == \
        [(g.group_id, g.owner, g.rollouts) for g in want.groups]
    assert got.groups[1].rollouts is not None


def test_a_schema_3_table_with_an_unsealed_rollout_holding_a_locator_is_corrupt(tmp_path):
    """Schema 3 had no prefixes: an unsealed rollout with a locator there is damage, not a prefix."""
    path = str(tmp_path / "journal")
    with Journal.open(path, sync="none") as j:
        (g,) = j.taken([GroupRef(idx=1)])
        j.admitted([g], target_step=1, rollouts=2)
        j.rollout_sealed([RolloutRef(g, 1, 0, "dp/1")])
    cut = compact(path, at="end", retention=None).cut_path

    def untable(t):
        del t["progress_table"], t["rollout_table"]["since_at"], t["rollout_table"]["since"]
        t["format_version"] = 3
    for name in ("rollout_recovery.pt", "replay_buffer_metadata.pt"):   # the tables this cut has
        _rewrite(cut, name, untable, manifest_schema=3)
    assert read_cut(cut).state.live[g].rollouts.locators == (None, "dp/1")
    _rewrite(cut, "rollout_recovery.pt", lambda t: t["rollout_table"].update(sealed=torch.tensor([False, False])))
    with pytest.raises(replay.CorruptRecord, match=f"group {g} has an unsealed rollout with a locator"):
        read_cut(cut)


def test_tables_written_before_the_tag_still_read(cut):
    """A cut of schema 2 (the last before the tag): each table's version under `schema_version`."""
    want = restore(cut)
    _drop_state_file(cut)  # the tables are what is read
    for name in TABLES:
        def untag(t):
            del t["format"], t["format_version"], t["rollout_table"]["since_at"], t["rollout_table"]["since"]
            t["schema_version"] = 2
        _rewrite(cut, name, untag, manifest_schema=2)
    got = restore(cut)
    assert [(g.group_id, g.owner, g.locator, g.rollouts) for g in got.groups] == \
        [(g.group_id, g.owner, g.locator, g.rollouts) for g in want.groups]
    assert got.groups[1].rollouts is not None  # schema 2 carried the rollout table


def _journal_of(cut: str) -> str:
    return os.path.dirname(os.path.dirname(cut))


@pytest.mark.parametrize("name", list(TABLES))
@pytest.mark.parametrize("mutate, words", [
    (lambda t: t.update(schema_version=99), "schema_version 99"),   # NeMo-RL's key, as a foreign writer sets it
    (lambda t: t.update(format_version=3), "format_version 3"),    # readable, but not the manifest's schema
])
def test_a_table_stating_another_schema_than_the_manifest_fails_verify_and_cuts(cut, name, mutate, words,
                                                                                capsys):
    """Each table's own version is checked against the manifest's schema version, not only
    against the versions this code reads: `verify` and `journal-inspect cuts` report the cut as
    failing check 5, naming the file and what it states (the sha256 in the manifest matches)."""
    journal = _journal_of(cut)
    assert replay.verify(journal).clean
    _rewrite(cut, name, mutate)
    with pytest.raises(replay.SchemaMismatch) as info:
        read_cut(cut)
    message = str(info.value)
    assert name in message and words in message and f"schema version {SCHEMA_VERSION}" in message, message
    report = replay.verify(journal)
    assert not report.clean and any(name in str(p) for p in report.problems), report.to_dict()
    assert replay.cli.main(["cuts", journal, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["cuts"]
    assert (entry["status"], entry["check"], entry["error"]) == ("invalid", 5, "SchemaMismatch"), entry
    assert words in entry["reason"]
