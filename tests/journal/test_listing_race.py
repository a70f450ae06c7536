"""Listing a journal's segments while retention retires them (a compactor beside the writer's
replica shipper, which lists the directory on every pass): a segment unlinked between the
directory listing and its stat is listed as its archive when it was archived, else not at
all; the listing never fails for it (a failure stopped the shipping for good)."""

from __future__ import annotations

import os

import zstandard

from journal import GroupRef, Journal, Reader, layout
from journal.reader import list_segments


def _journal(path: str) -> list:
    with Journal.open(path, sync="none", segment_bytes=4096) as j:
        for i in range(300):
            (g,) = j.taken([GroupRef(idx=i)])
            j.admitted([g], target_step=1)
    segs = list_segments(path)
    assert len(segs) >= 4
    return segs


def _retire_after_listing(monkeypatch, retire) -> None:
    """os.listdir returns the names, then `retire()` runs, as a retention would right after."""
    real = os.listdir

    def listdir(p):
        names = real(p)
        retire()
        monkeypatch.setattr(os, "listdir", real)
        return names

    monkeypatch.setattr(os, "listdir", listdir)


def test_a_segment_deleted_after_the_listing_is_not_listed(fast_tmp, monkeypatch):
    path = str(fast_tmp / "j")
    segs = _journal(path)
    victim = segs[1]
    _retire_after_listing(monkeypatch, lambda: os.unlink(victim.path))
    listed = list_segments(path)
    assert [s.name for s in listed] == [s.name for s in segs if s.name != victim.name]


def test_a_segment_archived_after_the_listing_is_listed_as_its_archive(fast_tmp, monkeypatch):
    path = str(fast_tmp / "j")
    segs = _journal(path)
    before = [(r.commit.lsn, r.chain) for r in Reader(path).records()]
    victim = segs[1]

    def archive():
        with open(victim.path, "rb") as f:
            data = zstandard.ZstdCompressor().compress(f.read())
        with open(os.path.join(path, layout.archive_name(victim.name)), "wb") as f:
            f.write(data)
        os.unlink(victim.path)

    _retire_after_listing(monkeypatch, archive)
    listed = list_segments(path)
    assert [(s.timeline, s.first_lsn) for s in listed] == [(s.timeline, s.first_lsn) for s in segs]
    (got,) = [s for s in listed if s.first_lsn == victim.first_lsn]
    assert got.archived and got.path.endswith(layout.ARCHIVE_SUFFIX)
    assert [(r.commit.lsn, r.chain) for r in Reader(path).records()] == before
