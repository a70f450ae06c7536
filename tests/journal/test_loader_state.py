"""loader_state: exact round-trips (a real StatefulDataLoader with shuffle=True, and arbitrary
nested values with tensors and numpy arrays: tests/support/trees.py), restoring it into a fresh
loader yields the same next batches, and the repeated generator tensor is stored once per
segment, not on every `taken`."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from journal import GroupRef, Journal, Reader
from tests.support.equality import deep_equal
from tests.support.journal_model import segment_files
from tests.support.trees import AWKWARD, values

warnings.filterwarnings("ignore", message=".*set_vital.*")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*set_vital")

DATASET = list(range(40))


def loader(seed: int = 0) -> StatefulDataLoader:
    return StatefulDataLoader(DATASET, batch_size=4, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))


class Stream:
    """Batches of a loader across epoch ends (a new iterator per epoch, as a trainer does)."""

    def __init__(self, dl):
        self.dl, self.it = dl, iter(dl)

    def take(self, n):
        out = []
        while len(out) < n:
            try:
                out.append(next(self.it).tolist())
            except StopIteration:
                self.it = iter(self.dl)
        return out


@pytest.mark.parametrize("consumed", [0, 3, 9, 13])  # 10 batches per epoch: 13 is in epoch 2
def test_stateful_dataloader_round_trip_and_resume(fast_tmp, consumed):
    path = str(fast_tmp / "j")
    dl = loader()
    stream = Stream(dl)
    stream.take(consumed)
    sd = dl.state_dict()
    assert any(isinstance(v, torch.Tensor) for v in _leaves(sd)), "expected a generator tensor"
    with Journal.open(path) as j:
        j.taken([GroupRef(idx=consumed)], loader_state=sd)
        assert deep_equal(j.loader_state(), sd, key_order=True)
    rest = 10 - consumed % 10  # batches left in the current epoch
    expected = stream.take(rest)
    with Journal.open(path) as j:
        got = j.loader_state()
    assert deep_equal(got, sd, key_order=True)
    assert deep_equal(Reader(path).fold().loader.decode(), sd, key_order=True)
    fresh = loader(seed=123)  # a different seed: everything must come from the state
    fresh.load_state_dict(got)
    assert Stream(fresh).take(rest) == expected
    # beyond the epoch StatefulDataLoader itself does not promise the same order; what
    # the journal must promise is that its copy restores exactly like the original dict
    a, b = loader(seed=5), loader(seed=5)
    a.load_state_dict(got)
    b.load_state_dict(sd)
    assert Stream(a).take(25) == Stream(b).take(25)


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def blob_counts(path: str) -> dict[str, int]:
    """Blob records per segment, counted from what a Reader decodes."""
    out: dict[str, int] = {}
    for rec in Reader(path).records():
        out[rec.segment] = out.get(rec.segment, 0) + len(rec.commit.blobs)
    return out


def test_generator_blob_stored_once_per_segment(fast_tmp):
    dl = loader()
    path = str(fast_tmp / "one")
    it = iter(dl)
    gen_bytes = dl.state_dict()["_sampler_iter_state"]["sampler_iter_state"]["generator"].numel()
    assert gen_bytes >= 4096
    n = 9  # every batch of the first epoch after the first: the generator state is the same
    with Journal.open(path) as j:
        for k in range(n):
            next(it)
            j.taken([GroupRef(idx=k)], loader_state=dl.state_dict())
    (seg,) = segment_files(path)
    assert blob_counts(path) == {seg: 1}
    size = os.path.getsize(os.path.join(path, seg))
    assert size < gen_bytes + n * 400, f"{size} bytes for {n} takens: the generator is repeated"

    # with small segments every segment that references the blob stores it once
    path = str(fast_tmp / "many")
    dl = loader()
    stream = Stream(dl)
    with Journal.open(path, segment_bytes=8192) as j:
        for k in range(30):  # three epochs: the generator state changes at each epoch start
            stream.take(1)
            j.taken([GroupRef(idx=k)], loader_state=dl.state_dict())
    counts = blob_counts(path)
    assert len(counts) >= 3
    digests_per_segment: dict[str, set] = {}
    for rec in Reader(path).records():
        for ev in rec.commit.events:
            digests_per_segment.setdefault(rec.segment, set()).update(ev.loader_state.refs)
    for seg, n_blobs in counts.items():
        assert n_blobs == len(digests_per_segment[seg]), (seg, n_blobs)
    with Journal.open(path) as j:
        assert deep_equal(j.loader_state(), dl.state_dict(), key_order=True)


# -- arbitrary nested values ------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(obj=values)
def test_arbitrary_loader_states_round_trip_through_the_journal(fast_tmp, obj):
    path = str(fast_tmp / f"j{os.urandom(6).hex()}")
    with Journal.open(path, sync="none") as j:
        j.taken([GroupRef(idx=0)], loader_state=obj)
        j.taken([GroupRef(idx=1)], loader_state=obj)  # the second one reuses any blobs
        assert deep_equal(j.loader_state(), obj, key_order=True)
    with Journal.open(path) as j:
        assert deep_equal(j.loader_state(), obj, key_order=True)


@pytest.mark.parametrize("name", sorted(AWKWARD))
def test_awkward_tensors_round_trip(fast_tmp, name):
    t = AWKWARD[name]()
    state = {"t": t, "nested": [t, (t, {"again": t})]}
    path = str(fast_tmp / "j")
    with Journal.open(path) as j:
        j.taken([GroupRef(idx=0)], loader_state=state)
        assert deep_equal(j.loader_state(), state, key_order=True)
    with Journal.open(path) as j:
        got = j.loader_state()
    assert deep_equal(got, state, key_order=True)
    assert not got["t"].is_conj() and not got["t"].is_neg()
