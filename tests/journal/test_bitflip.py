"""Test 4: a single flipped bit anywhere in a sealed (non-last) segment is detected: a
strict Reader over the journal raises JournalCorrupt naming that segment, and so does
Journal.open, which leaves the files alone."""

from __future__ import annotations

import os
import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import Journal, JournalCorrupt, Reader
from tests.support.journal_model import Model, assert_state_matches, drive, segment_files, tree_bytes


@pytest.fixture(scope="module")
def sealed(fast_tmp_module):
    """segment_bytes=4096: a small first segment (sealed early by a big commit that does
    not fit), a second one holding that commit, a third of many mixed commits with loader
    state blobs, and a live fourth one."""
    path = str(fast_tmp_module / "flip")
    history = [Model()]
    rng = random.Random(5)
    with Journal.open(path, segment_bytes=4096) as j:
        # small commits (a small loader state, no blob): every bit of this segment is flipped
        drive(j, history[-1], rng, 4, history, loader_every=2, loader_bytes=8, max_take=1)
        drive(j, history[-1], rng, 1, history, take_weight=1000, max_take=1, fingerprint_bytes=3900)
        while len(segment_files(path)) < 4:
            drive(j, history[-1], rng, 1, history, loader_every=3)
        drive(j, history[-1], rng, 3, history)
    segs = segment_files(path)
    assert len(segs) == 4
    assert os.path.getsize(os.path.join(path, segs[0])) < 600
    assert_state_matches(Reader(path).fold(), history[-1])
    return path, history


def flip(path: str, bit: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(bit // 8)
        b = fh.read(1)[0]
        fh.seek(bit // 8)
        fh.write(bytes([b ^ (1 << (bit % 8))]))


def assert_detected(d: str, seg: str) -> None:
    with pytest.raises(JournalCorrupt) as info:
        for _ in Reader(d).records():
            pass
    assert info.value.segment == seg, str(info.value)


def test_every_bit_of_a_small_sealed_segment(sealed, fast_tmp):
    src, _ = sealed
    d = shutil.copytree(src, str(fast_tmp / "j"))
    seg = segment_files(d)[0]
    p = os.path.join(d, seg)
    nbits = os.path.getsize(p) * 8
    for bit in range(nbits):
        flip(p, bit)
        assert_detected(d, seg)
        flip(p, bit)
    assert_state_matches(Reader(d).fold(), sealed[1][-1])  # flipped back: clean again


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_sampled_bits_of_full_sealed_segments(sealed, fast_tmp, data):
    src, _ = sealed
    d = str(fast_tmp / "j")
    if not os.path.isdir(d):
        shutil.copytree(src, d)
    seg = segment_files(d)[data.draw(st.sampled_from([1, 2]), label="segment")]
    p = os.path.join(d, seg)
    bit = data.draw(st.integers(0, os.path.getsize(p) * 8 - 1), label="bit")
    flip(p, bit)
    try:
        assert_detected(d, seg)
    finally:
        flip(p, bit)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_open_refuses_a_flipped_sealed_segment(sealed, fast_tmp, which):
    src, _ = sealed
    d = shutil.copytree(src, str(fast_tmp / "j"))
    seg = segment_files(d)[which]
    p = os.path.join(d, seg)
    rng = random.Random(which)
    for bit in rng.sample(range(os.path.getsize(p) * 8), 20):
        flip(p, bit)
        before = tree_bytes(d)
        with pytest.raises(JournalCorrupt) as info:
            Journal.open(d, segment_bytes=4096)
        assert info.value.segment == seg
        assert tree_bytes(d) == before
        flip(p, bit)
