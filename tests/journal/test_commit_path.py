"""The writer's commit path builds frames from length-prefixed records chained one at a time
(what `encode_frame` would write), and the file system seam writes a frame whole even when the
OS writes it in pieces."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from journal import format as fmt
from journal.vfs import OsFileSystem


@given(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_prefixed_records_chained_one_by_one_make_the_frame_encode_frame_makes(records, chain_before):
    chain, prefixed, chains_one_by_one = chain_before, [], []
    for r in records:
        prefixed.append(fmt.length_prefixed(r))
        chain = fmt.frame_chain(prefixed[-1], chain)
        chains_one_by_one.append(chain)
    frame, chains = fmt.encode_frame(records, chain_before)
    assert chains_one_by_one == chains == fmt.record_chains(records, chain_before)
    assert fmt.frame_of_prefixed(prefixed, chain) == frame


def test_a_short_write_is_continued_until_the_whole_frame_is_written(tmp_path, monkeypatch):
    fs = OsFileSystem()
    f = fs.create(str(tmp_path / "seg"))
    real = os.pwrite
    calls = []

    def three_bytes_at_a_time(fd, data, offset):
        calls.append(offset)
        return real(fd, bytes(data[:3]), offset)

    monkeypatch.setattr(os, "pwrite", three_bytes_at_a_time)
    f.write(b"0123456789")
    f.write(b"abcd")
    monkeypatch.undo()
    f.close()
    assert (tmp_path / "seg").read_bytes() == b"0123456789abcd"
    assert (f.offset, f.allocated) == (14, 14) and calls == [0, 3, 6, 9, 10, 13]
