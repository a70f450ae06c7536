"""A session whose journal ships to a bucket and whose rows live in the same bucket survives
the loss of its node: a session on a fresh node (an empty local journal) restores from the
bucket alone and hands back the work in flight with its rows."""

from __future__ import annotations

import shutil
import warnings

from torchdata.stateful_dataloader import StatefulDataLoader

from journal import JournalWarning
from replay import ObjectStoreDataPlane, Session
from tests.replica.test_replica import SHIP
from tests.replay.test_session import DATASET, collate
from tests.support.s3_support import S3, options


def _open(node, url, opts) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JournalWarning)
        return Session.open(str(node / "journal"), dataset=DATASET, collate_fn=collate,
                            loader=StatefulDataLoader(DATASET, batch_size=2, collate_fn=collate),
                            data_plane=ObjectStoreDataPlane(url, opts), replica=url,
                            replica_options=opts)


def test_a_session_on_a_fresh_node_resumes_from_the_bucket_alone(s3, prefix, tmp_path):
    url, opts = S3.url(prefix), options(s3.endpoint)
    with _open(tmp_path / "node1", url, opts) as s:
        batches = s.batches()
        trained = s.take(next(batches))
        s.admit(trained, step=1, rollouts=2)
        for g in trained:
            for r in s.pending(g):
                s.seal(g, r.index, r.attempt, {"g": g, "i": r.index})
        s.trained(trained, step=1)
        ready, half = s.take(next(batches))
        s.admit([ready, half], step=2, rollouts=2)
        s.seal(ready, 0, 0, {"g": ready, "i": 0})
        s.seal(ready, 1, 0, {"g": ready, "i": 1})
        s.seal(half, 1, 0, {"g": half, "i": 1})
        s.checkpoint(1, save=lambda: None)
        expected_next = next(batches)["idx"]
        s.journal.flush_replica(timeout=30)
    shutil.rmtree(tmp_path / "node1")   # the node and its local disk are gone

    with _open(tmp_path / "node2", url, opts) as s:
        assert s.step == 1 and s.restored.source == "journal"
        assert [(w.kind, w.group_id) for w in s.resume_work] == [("train", ready), ("generate", half)]
        assert s.rows(ready) == [{"g": ready, "i": 0}, {"g": ready, "i": 1}]
        assert [r.index for r in s.pending(half)] == [0]
        assert next(s.batches())["idx"] == expected_next   # the loader goes on where it was
        assert not any(loc.startswith(f"g{trained[0]}-") for loc in s.data_plane.locators())
