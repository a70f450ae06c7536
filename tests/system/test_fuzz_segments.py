"""Issue 7.3, journal side: hypothesis mutates real segment files (live and archived) and every
reader runs over the result: `Reader` in its three modes (records, fold, dead tails, max group
id), `restore` (latest checkpoint and end) and `Journal.open` (which may repair).

Mutations: bit flips, overwritten bytes, truncation, appended bytes, splices (a range of one
segment copied into another, overwriting or inserted), a whole file of random bytes, frame
length fields set huge (or just past the end), record length prefixes set huge with the frame
CRC fixed, header fields changed with the header CRC fixed (timeline, parent, first LSN,
chain seed, version), and record-level mutations re-encoded with valid CRCs *and* chain so
they reach msgspec's decoder, the fold and the loader-state unpacker.

Allowed outcomes: success, `JournalError` (JournalCorrupt, OwnershipError, ...) from the
journal, `RestoreError` from restore. Never another exception, never a hang (SIGALRM), never
an allocation peak driven by a length field (tracemalloc; see fuzz_support.Guard).
`OJ_FUZZ_EXAMPLES` (default 60) sets the examples per test.
"""

from __future__ import annotations

import os
import struct

import msgspec
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_support import (DERANDOMIZE, EXAMPLES, Guard, build_corpus, copy_corpus, crc_fix,
                                        encode_segment, frame_offsets, read_everything, segment_frames,
                                        summary_fixture)
from journal import format as fmt, layout
from journal.ever import max_group_id
from journal.reader import read_segment_bytes, list_segments

COUNTS: dict[str, int] = {}
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzz") / "journal")
    build_corpus(root)
    names = sorted(n for n in os.listdir(root) if layout.parse_segment_name(n))
    assert any(n.endswith(".zst") for n in names) and len({n[:8] for n in names}) == 2
    return root, names


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _raw(path: str) -> bytes:
    """The segment's bytes (decompressed for an archive)."""
    seg = next(s for s in list_segments(os.path.dirname(path)) if s.path == path)
    return read_segment_bytes(seg)


def _store(path: str, data: bytes) -> None:
    if path.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    with open(path, "wb") as fh:
        fh.write(data)


# -- mutators: (data, draw, other segments' bytes) -> new bytes --------------------------------


def m_bitflips(d, draw, others):
    b = bytearray(d)
    for bit in draw(st.lists(st.integers(0, len(b) * 8 - 1), min_size=1, max_size=8)):
        b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def m_overwrite(d, draw, others):
    pos = draw(st.integers(0, len(d) - 1))
    junk = draw(st.binary(min_size=1, max_size=64))
    return d[:pos] + junk + d[pos + len(junk):]


def m_truncate(d, draw, others):
    return d[:draw(st.integers(0, len(d) - 1))]


def m_append(d, draw, others):
    return d + draw(st.binary(min_size=1, max_size=200))


def m_splice(d, draw, others):
    src = draw(st.sampled_from(others + [d]))
    a = draw(st.integers(0, len(src) - 1))
    n = draw(st.integers(1, min(2000, len(src) - a)))
    pos = draw(st.integers(0, len(d)))
    chunk = src[a:a + n]
    if draw(st.booleans()):
        return d[:pos] + chunk + d[pos:]
    return d[:pos] + chunk + d[pos + n:]


def m_random_file(d, draw, others):
    return draw(st.binary(max_size=4096))


HUGE = [0, 1, 2 ** 30, 2 ** 30 + 1, 2 ** 31, 2 ** 32 - 1, 0x7FFFFFFF]


def m_huge_frame_length(d, draw, others):
    offs = frame_offsets(d)
    if not offs:
        return d
    pos = draw(st.sampled_from(offs))
    b = bytearray(d)
    left = len(d) - pos - fmt.FRAME_HEADER_SIZE
    value = draw(st.sampled_from(HUGE + [left + 1, left - 1, max(left - 1, 0)]))
    struct.pack_into("<I", b, pos, value & 0xFFFFFFFF)
    return bytes(b)


def m_huge_record_length(d, draw, others):
    offs = frame_offsets(d)
    if not offs:
        return d
    pos = draw(st.sampled_from(offs))
    b = bytearray(d)
    struct.pack_into("<I", b, pos + fmt.FRAME_HEADER_SIZE, draw(st.sampled_from(HUGE)))
    crc_fix(b, pos)
    return bytes(b)


def m_header_fields(d, draw, others):
    try:
        h = fmt.decode_header(d)
    except fmt.HeaderError:
        return d
    field = draw(st.sampled_from(("timeline", "parent_timeline", "first_lsn", "chain_seed", "run_id")))
    if field == "run_id":
        new = h._replace(run_id=draw(st.binary(min_size=16, max_size=16)))
    elif field == "first_lsn":
        new = h._replace(first_lsn=draw(st.sampled_from([0, 1, h.first_lsn + 1, max(h.first_lsn - 1, 0),
                                                         2 ** 63, 2 ** 64 - 1])))
    elif field == "chain_seed":
        new = h._replace(chain_seed=draw(st.integers(0, 2 ** 32 - 1)))
    else:
        new = h._replace(**{field: draw(st.sampled_from([0, 1, 2, 3, 7, 2 ** 32 - 1]))})
    return fmt.encode_header(new) + d[fmt.HEADER_SIZE:]


def _msgpack_mutation(rec: bytes, draw) -> bytes:
    kind = draw(st.sampled_from(("flip", "set", "cut", "insert", "array32", "bin32", "swap-decoded")))
    if kind == "swap-decoded":  # a well-formed commit with fuzzed values
        obj = msgspec.msgpack.decode(rec)
        obj = _fuzz_obj(obj, draw)
        return msgspec.msgpack.encode(obj)
    pos = draw(st.integers(0, len(rec) - 1))
    if kind == "flip":
        b = bytearray(rec)
        b[pos] ^= 1 << draw(st.integers(0, 7))
        return bytes(b)
    if kind == "set":
        return rec[:pos] + bytes([draw(st.integers(0, 255))]) + rec[pos + 1:]
    if kind == "cut":
        return rec[:max(pos, 1)]
    if kind == "insert":
        return rec[:pos] + draw(st.binary(min_size=1, max_size=16)) + rec[pos:]
    if kind == "array32":  # an array header claiming 2^32-1 elements
        return rec[:pos] + b"\xdd\xff\xff\xff\xff" + rec[pos:]
    return rec[:pos] + b"\xc6\xff\xff\xff\x7f" + rec[pos:]  # a bin of 2 GiB


def _fuzz_obj(obj, draw, depth=0):
    """Replace one leaf of a decoded msgpack tree with a hostile value."""
    hostile = st.sampled_from([-1, 0, 2 ** 63 - 1, -(2 ** 63), 2 ** 64 - 1, 1.5, "", "x" * 100, None,
                               True, [], [[]], {}, b"", b"\x00" * 16,
                               msgspec.msgpack.Ext(2, msgspec.msgpack.encode(["float32", [2 ** 28], b""])),
                               msgspec.msgpack.Ext(2, msgspec.msgpack.encode(["int64", [-1], b""])),
                               msgspec.msgpack.Ext(2, msgspec.msgpack.encode(["int8", [3, 2 ** 62], b"ab"])),
                               msgspec.msgpack.Ext(2, msgspec.msgpack.encode(["Tensor", [1], b"a"])),
                               msgspec.msgpack.Ext(1, b"\xdd\xff\xff\xff\xff"),
                               msgspec.msgpack.Ext(3, b"\x00" * 16), msgspec.msgpack.Ext(9, b"")])
    if isinstance(obj, (list, dict)) and obj and depth < 6:
        keys = list(range(len(obj))) if isinstance(obj, list) else list(obj)
        k = draw(st.sampled_from(keys))
        if draw(st.integers(0, 3)) == 0:
            obj[k] = draw(hostile)
        else:
            obj[k] = _fuzz_obj(obj[k], draw, depth + 1)
        return obj
    if isinstance(obj, bytes) and obj and draw(st.booleans()):
        try:  # a packed loader-state tree: fuzz inside it
            inner = msgspec.msgpack.decode(obj)
            return msgspec.msgpack.encode(_fuzz_obj(inner, draw, depth + 1))
        except Exception:
            pass
    return draw(hostile)


def m_records(d, draw, others):
    try:
        header, frames = segment_frames(d)
        fmt.decode_header(header)
    except Exception:
        return d
    if not frames:
        return d
    fi = draw(st.integers(0, len(frames) - 1))
    ri = draw(st.integers(0, len(frames[fi]) - 1))
    op = draw(st.sampled_from(("mutate", "mutate", "mutate", "drop", "duplicate", "reorder")))
    recs = frames[fi]
    if op == "mutate":
        recs[ri] = _msgpack_mutation(recs[ri], draw) or b"\x00"
    elif op == "drop" and len(frames) > 1:
        del frames[fi]
    elif op == "duplicate":
        frames.insert(fi, list(recs))
    elif op == "reorder" and len(frames) > 1:
        fj = draw(st.integers(0, len(frames) - 1))
        frames[fi], frames[fj] = frames[fj], frames[fi]
    return encode_segment(header, frames)


MUTATORS = {f.__name__[2:]: f for f in (m_bitflips, m_overwrite, m_truncate, m_append, m_splice,
                                         m_random_file, m_huge_frame_length, m_huge_record_length,
                                         m_header_fields, m_records)}


@SETTINGS
@given(data=st.data())
def test_fuzz_segment_files(corpus, data, tmp_path_factory):
    src, names = corpus
    d = copy_corpus(src, str(tmp_path_factory.getbasetemp() / "fuzz-seg"))
    name = data.draw(st.sampled_from(names), label="segment")
    kind = data.draw(st.sampled_from(sorted(MUTATORS)), label="mutation")
    path = os.path.join(d, name)
    raw = _raw(path)
    others = [_raw(os.path.join(d, n)) for n in names if n != name]
    mutated = MUTATORS[kind](raw, data.draw, others)
    _store(path, mutated)
    COUNTS[kind] = COUNTS.get(kind, 0) + 1
    with Guard(sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
                   if os.path.isfile(os.path.join(d, n)))):
        read_everything(d)


@SETTINGS
@given(data=st.data())
def test_fuzz_archive_bytes(corpus, data, tmp_path_factory):
    """The compressed bytes of an archived segment mutated (not recompressed)."""
    src, names = corpus
    d = copy_corpus(src, str(tmp_path_factory.getbasetemp() / "fuzz-zst"))
    name = data.draw(st.sampled_from([n for n in names if n.endswith(".zst")]))
    path = os.path.join(d, name)
    z = _read(path)
    kind = data.draw(st.sampled_from(("bitflips", "overwrite", "truncate", "append", "random_file")))
    with open(path, "wb") as fh:
        fh.write(MUTATORS[kind](z, data.draw, []))
    COUNTS["zst-" + kind] = COUNTS.get("zst-" + kind, 0) + 1
    with Guard(len(z)):
        read_everything(d)


def test_archive_declaring_a_huge_content_size(corpus, tmp_path):
    """A 2 KB archive whose zstd frame header claims 1.5 GiB of content: reading it must not
    allocate what the header claims."""
    src, names = corpus
    d = copy_corpus(src, str(tmp_path / "j"))
    name = next(n for n in names if n.endswith(".zst"))
    path = os.path.join(d, name)
    raw = read_segment_bytes(next(s for s in list_segments(d) if s.path == path))
    z = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(raw))
    fhd = z[4]
    fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
    size_len = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fcs_flag]
    pos = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3]
    assert size_len in (2, 4, 8), "the test needs a frame with a multi-byte content size field"
    value = 3 << 29  # 1.5 GiB
    if size_len == 2:  # widen the field: rewrite as an 8-byte content size
        z = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(raw + bytes(70000)))
        fhd = z[4]
        fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
        size_len = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fcs_flag]
        pos = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3]
    z[pos:pos + size_len] = (value if size_len == 8 else min(value, 2 ** 32 - 1)).to_bytes(size_len, "little")
    with open(path, "wb") as fh:
        fh.write(bytes(z))
    with Guard(len(z)) as g:
        read_everything(d)
    assert g.peak < 256 << 20


summary = summary_fixture(COUNTS, "segment")


def _append_commit(path: str, make_events) -> None:
    """Append to the active timeline's last segment one commit at the next LSN, in a frame
    with a valid CRC and chain (so only the fold and the loader-state decoder can object)."""
    from journal import Commit, Reader
    from journal.events import commit_encoder
    r = Reader(path)
    recs = list(r.records())
    last = recs[-1]
    seg = os.path.join(path, last.segment)
    data = _read(seg)
    header, frames = segment_frames(data)
    gid = max_group_id(r) + 1
    record = commit_encoder.encode(Commit(last.commit.lsn + 1, make_events(gid)))
    frames.append([record])
    with open(seg, "wb") as fh:
        fh.write(encode_segment(header, frames))


HOSTILE_LEAVES = {
    "empty leaf claiming 2^28 floats": ["float32", [2 ** 28], b""],
    "negative dimension": ["int64", [-1], b""],
    "non-int dimension": ["int64", ["a"], b""],
    "overflowing shape": ["int8", [2 ** 62, 2 ** 62], b"ab"],
    "shape larger than its bytes": ["float32", [1000], b"abcd"],
}


@pytest.mark.parametrize("label", list(HOSTILE_LEAVES) + ["nested tuples", "blob refers to itself"])
def test_hostile_loader_state_in_a_valid_frame(corpus, tmp_path, label):
    """A commit that verifies (CRC, chain, LSN) but whose loader state is hostile: restore and
    Journal.loader_state() raise their documented errors, allocate nothing the input does not
    hold, and every other reader still works."""
    from journal import Journal, LoaderStateError, Taken, TakenGroup
    from journal.events import PackedLoaderState
    from replay import RestoreError, restore
    enc = msgspec.msgpack.encode
    src, _ = corpus
    d = copy_corpus(src, str(tmp_path / "j"))
    refs, blobs = [], []
    if label in HOSTILE_LEAVES:
        tree = enc({"gen": msgspec.msgpack.Ext(2, enc(HOSTILE_LEAVES[label]))})
    elif label == "nested tuples":
        tree = enc([])
        for _ in range(5000):
            tree = enc(msgspec.msgpack.Ext(1, tree))
    else:
        digest = b"\x01" * 16
        tree = enc(msgspec.msgpack.Ext(3, digest))
        refs = [digest]
        from journal.events import Blob
        blobs = [Blob(digest, enc(msgspec.msgpack.Ext(3, digest)))]

    def events(gid):
        return [Taken([TakenGroup(gid, 7, "t")], PackedLoaderState(tree=tree, refs=refs))]

    if blobs:  # the blob travels in the commit
        from journal import Commit, Reader
        from journal.events import commit_encoder
        r = Reader(d)
        last = list(r.records())[-1]
        seg = os.path.join(d, last.segment)
        header, frames = segment_frames(_read(seg))
        rec = commit_encoder.encode(Commit(last.commit.lsn + 1, events(max_group_id(r) + 1), blobs))
        frames.append([rec])
        with open(seg, "wb") as fh:
            fh.write(encode_segment(header, frames))
    else:
        _append_commit(d, events)
    with Guard(2 << 20):
        with pytest.raises(RestoreError):
            restore(d, "end")
        read_everything(d)
        j = Journal.open(d)
        try:
            with pytest.raises(LoaderStateError):
                j.loader_state()
        finally:
            j.close()


@pytest.mark.parametrize("kw", [dict(target_step=2 ** 64 - 1), dict(target_step=1, policy_version=2 ** 63),
                                dict(target_step=-(2 ** 63)), dict(idx=2 ** 64 - 1), dict(idx=-5),
                                dict(epoch=-(2 ** 63))])
def test_integers_a_cut_cannot_hold_are_refused_when_appended(tmp_path, kw):
    """Found by the table-level fuzzing of cuts: the journal took integers the cut format
    cannot represent (int64 columns, -2**63 = none; no negative idx), wrote them durably, and
    then every compaction failed (ValueError) or wrote a cut its own reader rejects. They are
    refused at the call now (nothing written), and a compaction of what was accepted works."""
    from journal import GroupRef, Journal
    from replay import restore
    from snapshot import compact
    d = str(tmp_path / "j")
    with Journal.open(d) as j:
        ref = GroupRef(idx=kw.get("idx", 1), epoch=kw.get("epoch"))
        # out of range: a ValueError naming the argument (and its value)
        if "idx" in kw or "epoch" in kw:
            with pytest.raises(ValueError, match=f"GroupRef.{next(iter(kw))} must be"):
                j.taken([ref])
            g = j.taken([GroupRef(idx=1)])
        else:
            g = j.taken([ref])
            with pytest.raises(ValueError, match=f"argument {list(kw)[-1]} must be"):
                j.admitted(g, **kw)
        assert j.lsn == 1
        j.admitted(g, target_step=-3, policy_version=2 ** 63 - 1)
        j.begin_checkpoint(step=1)
        j.commit_checkpoint(step=1)
    cut = compact(d).cut_path
    (got,) = restore(cut).admitted
    assert (got.target_step, got.policy_version) == (-3, 2 ** 63 - 1)


def test_frame_like_bytes_cannot_make_the_resync_scan_quadratic(tmp_path):
    """Bytes crafted so that every 8th offset passes the resync scan's filters (lead byte,
    lengths in bounds) and claims a 1 MiB frame: checksumming each candidate made reading a
    4 MiB segment take minutes (quadratic). The scan now gives up after a budget linear in the
    bytes scanned and calls it damage (never a torn tail: nothing is cut off on a guess)."""
    from journal import GroupRef, Journal, JournalCorrupt, Reader
    d = str(tmp_path / "j")
    with Journal.open(d) as j:
        j.taken([GroupRef(idx=1)])
    seg = os.path.join(d, sorted(n for n in os.listdir(d) if n.endswith(".wal"))[0])
    before = os.path.getsize(seg)
    word = fmt.COMMIT_LEAD_BYTE | (0x10 << 16)
    with open(seg, "ab") as fh:
        fh.write(struct.pack("<II", word, 5) * ((4 << 20) // 8))
    with Guard(8 << 20, limit=64 << 20):
        with pytest.raises(JournalCorrupt, match="too many frame-like candidates"):
            list(Reader(d).records())
        assert [r.commit.lsn for r in Reader(d, "point_in_time").records()] == [1]
        with pytest.raises(JournalCorrupt):
            Journal.open(d)
    assert os.path.getsize(seg) > before  # not truncated on a guess
