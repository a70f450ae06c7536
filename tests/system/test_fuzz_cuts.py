"""Issue 7.3, cut side: hypothesis mutates a real cut's MANIFEST.json and .pt files, then
`read_cut`, `restore(cut)` and `restore(journal)` run over it.

MANIFEST.json: bit flips, truncation, random bytes, and JSON-level edits (a field set to a
hostile value: huge or negative integers, wrong types, `..`/absolute/NUL names, file sizes
of 2^62 or -5, missing or extra keys). .pt files: byte-level mutations with the manifest's
size and sha256 updated (so the load itself is fuzzed, not only check 4), and table-level
edits re-saved with torch.save (dtypes, shapes, offsets, counts, run lengths, phases, ids,
a non-tensor where a tensor belongs).

Allowed: success or a `RestoreError` subclass. Never another exception, a hang, or an
allocation driven by a length (tracemalloc peak, and peak virtual size for torch). Also:
restoring the *journal* with a damaged cut is still exactly the restore without the cut
(the cut is skipped and reported), unless the mutation kept the cut valid.
"""

from __future__ import annotations

import hashlib
import io
import json
import os

import msgspec
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_support import (DERANDOMIZE, EXAMPLES, Guard, build_corpus, copy_corpus,
                                        summary_fixture)
from replay import RestoreError, restore
from snapshot import read_cut
from journal.layout import SNAPSHOTS_DIR

COUNTS: dict[str, int] = {}
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


def _fingerprint(rs) -> tuple:
    return (rs.lsn, rs.step, sorted((g.group_id, g.owner) for g in rs.groups),
            sorted(rs.counts.items()), rs.fold_state.next_group_id if rs.fold_state else None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzzcut") / "journal")
    build_corpus(root)
    snaps = os.path.join(root, SNAPSHOTS_DIR)
    cuts = sorted(n for n in os.listdir(snaps) if n.startswith("cut-"))
    assert cuts
    baseline = {at: _fingerprint(restore(root, at)) for at in ("latest-checkpoint", "end")}
    return root, cuts, baseline


def _read(p):
    with open(p, "rb") as fh:
        return fh.read()


def _write(p, data):
    with open(p, "wb") as fh:
        fh.write(data)


def _rehash(cut: str, name: str) -> None:
    """Make the manifest agree with the file `name` as it now is (size and sha256)."""
    mpath = os.path.join(cut, "MANIFEST.json")
    m = json.loads(_read(mpath))
    data = _read(os.path.join(cut, name))
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _write(mpath, json.dumps(m, indent=2).encode())


HOSTILE = [None, True, -1, 0, 1, -5, 2 ** 31, 2 ** 62, 2 ** 63, 2 ** 64 + 3, -(2 ** 63) - 1, 10 ** 30,
           1.5, float("1e308"), "", "x", "../x", "/etc/passwd", "a/../b", "./x", "a\\b", "x\u0000y",
           "\u2603", [], [1, 2], {}, {"size": 1}, {"x": {"size": 2 ** 62, "sha256": "0" * 64}}]


def _hostile_json(obj, draw, depth=0):
    if isinstance(obj, (dict, list)) and obj and depth < 4 and draw(st.integers(0, 2)):
        keys = list(obj) if isinstance(obj, dict) else list(range(len(obj)))
        k = draw(st.sampled_from(keys))
        how = draw(st.sampled_from(("replace", "replace", "recurse", "recurse", "delete", "rename")))
        if how == "delete" and isinstance(obj, dict):
            del obj[k]
        elif how == "rename" and isinstance(obj, dict):
            obj[draw(st.sampled_from(["../x", "/abs", "data_plane/../../x", "MANIFEST.json", "new.pt", ""]))] = \
                obj.pop(k)
        elif how == "recurse":
            obj[k] = _hostile_json(obj[k], draw, depth + 1)
        else:
            obj[k] = draw(st.sampled_from(HOSTILE))
        return obj
    return draw(st.sampled_from(HOSTILE))


def manifest_mutation(cut: str, draw) -> str:
    mpath = os.path.join(cut, "MANIFEST.json")
    raw = _read(mpath)
    kind = draw(st.sampled_from(("json", "json", "json", "file-size", "bitflips", "truncate", "random")))
    if kind == "json":
        m = json.loads(raw)
        m = _hostile_json(m, draw)
        data = msgspec.json.encode(m) if not isinstance(m, float) else b"1e308"
    elif kind == "file-size":
        m = json.loads(raw)
        name = draw(st.sampled_from(sorted(m["files"])))
        m["files"][name]["size"] = draw(st.sampled_from([2 ** 62, 2 ** 40, 2 ** 31, -5, -1, 0, 10 ** 20]))
        data = json.dumps(m).encode()
    elif kind == "bitflips":
        b = bytearray(raw)
        for bit in draw(st.lists(st.integers(0, len(b) * 8 - 1), min_size=1, max_size=6)):
            b[bit // 8] ^= 1 << (bit % 8)
        data = bytes(b)
    elif kind == "truncate":
        data = raw[:draw(st.integers(0, len(raw) - 1))]
    else:
        data = draw(st.binary(max_size=512))
    _write(mpath, data)
    return "manifest-" + kind


def _hostile_tensor(t, draw):
    how = draw(st.sampled_from(("dtype", "shape", "values", "huge", "negative", "non-tensor", "empty")))
    if not isinstance(t, torch.Tensor):
        return draw(st.sampled_from([None, 1, "x", [1], torch.zeros(3)]))
    if how == "dtype":
        return t.to(draw(st.sampled_from([torch.int8, torch.int32, torch.float32, torch.bool, torch.uint8])))
    if how == "shape":
        return torch.cat([t.reshape(-1), t.reshape(-1)]) if t.numel() else torch.zeros(2, dtype=t.dtype)
    if how == "values" and t.numel():
        t = t.clone()
        flat = t.reshape(-1)
        flat[draw(st.integers(0, flat.numel() - 1))] = draw(st.sampled_from([0, 1, -1, 127]))
        return t
    if how == "huge" and t.numel():
        t = t.clone()
        flat = t.reshape(-1)
        big = {torch.int64: 2 ** 62, torch.int32: 2 ** 31 - 1, torch.int8: 127, torch.uint8: 255}.get(t.dtype, 1)
        flat[draw(st.integers(0, flat.numel() - 1))] = big
        return t
    if how == "negative" and t.numel() and t.dtype in (torch.int64, torch.int32, torch.int8):
        t = t.clone()
        t.reshape(-1)[0] = -2 ** 62 if t.dtype == torch.int64 else -1
        return t
    if how == "non-tensor":
        return draw(st.sampled_from([None, 3, "s", [1, 2], {"a": 1}]))
    return t[:0]


def _mutate_obj(obj, draw, depth=0):
    if isinstance(obj, dict) and obj and depth < 4:
        k = draw(st.sampled_from(sorted(obj, key=str)))
        how = draw(st.sampled_from(("recurse", "recurse", "recurse", "delete", "int")))
        if how == "delete":
            del obj[k]
        elif how == "int":
            obj[k] = draw(st.sampled_from([-1, 0, 2 ** 40, 2 ** 62, 10 ** 25, "x", None]))
        else:
            obj[k] = _mutate_obj(obj[k], draw, depth + 1)
        return obj
    if isinstance(obj, (list, tuple)) and obj and depth < 4:
        obj = list(obj)
        i = draw(st.integers(0, len(obj) - 1))
        obj[i] = _mutate_obj(obj[i], draw, depth + 1)
        return obj
    if isinstance(obj, torch.Tensor):
        return _hostile_tensor(obj, draw)
    return draw(st.sampled_from([None, -1, 2 ** 62, "x", b"\x00" * 4, 1.5]))


def pt_mutation(cut: str, draw) -> str:
    names = sorted(n for n in os.listdir(cut) if n.endswith(".pt"))
    name = draw(st.sampled_from(names))
    p = os.path.join(cut, name)
    raw = _read(p)
    kind = draw(st.sampled_from(("table", "table", "table", "bitflips", "overwrite", "truncate", "random")))
    if kind == "table":
        obj = torch.load(io.BytesIO(raw), weights_only=True)
        obj = _mutate_obj(obj, draw)
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = buf.getvalue()
    elif kind == "bitflips":
        b = bytearray(raw)
        for bit in draw(st.lists(st.integers(0, len(b) * 8 - 1), min_size=1, max_size=4)):
            b[bit // 8] ^= 1 << (bit % 8)
        data = bytes(b)
    elif kind == "overwrite":
        pos = draw(st.integers(0, len(raw) - 1))
        junk = draw(st.binary(min_size=1, max_size=32))
        data = raw[:pos] + junk + raw[pos + len(junk):]
    elif kind == "truncate":
        data = raw[:draw(st.integers(0, len(raw) - 1))]
    else:
        data = draw(st.binary(max_size=2048))
    _write(p, data)
    if draw(st.integers(0, 5)):  # mostly: the manifest vouches for the new bytes
        _rehash(cut, name)
        return f"pt-{kind}-rehashed"
    return f"pt-{kind}"


def _exercise(journal: str, cut: str, baseline: dict) -> None:
    valid = True
    try:
        read_cut(cut)
    except RestoreError:
        valid = False
    try:
        restore(cut)
    except RestoreError:
        pass
    for at, want in baseline.items():
        try:
            got = _fingerprint(restore(journal, at))
        except RestoreError:
            if not valid:
                raise AssertionError(f"restore({at!r}) of the journal failed because of a damaged cut "
                                     "it should have skipped") from None
            continue
        if not valid:
            assert got == want, f"restore({at!r}) with a damaged (skipped) cut differs from the baseline"


@SETTINGS
@given(data=st.data())
def test_fuzz_manifest(corpus, data, tmp_path_factory):
    src, cuts, baseline = corpus
    d = copy_corpus(src, str(tmp_path_factory.getbasetemp() / "fuzz-manifest"))
    cut = os.path.join(d, SNAPSHOTS_DIR, data.draw(st.sampled_from(cuts)))
    kind = manifest_mutation(cut, data.draw)
    COUNTS[kind] = COUNTS.get(kind, 0) + 1
    with Guard(os.path.getsize(os.path.join(cut, "MANIFEST.json"))):
        _exercise(d, cut, baseline)


@SETTINGS
@given(data=st.data())
def test_fuzz_pt_files(corpus, data, tmp_path_factory):
    src, cuts, baseline = corpus
    d = copy_corpus(src, str(tmp_path_factory.getbasetemp() / "fuzz-pt"))
    cut = os.path.join(d, SNAPSHOTS_DIR, data.draw(st.sampled_from(cuts)))
    kind = pt_mutation(cut, data.draw)
    COUNTS[kind] = COUNTS.get(kind, 0) + 1
    with Guard(sum(os.path.getsize(os.path.join(cut, n)) for n in os.listdir(cut))):
        _exercise(d, cut, baseline)


summary = summary_fixture(COUNTS, "cut")
