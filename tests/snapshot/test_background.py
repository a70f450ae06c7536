"""Issue 3, test 5: compaction in a background thread while 4 threads append.

Four threads drive groups through their lives with `sync="always"` (one of
them also commits checkpoints) while a `BackgroundCompactor` cuts at "end"
(the live state, copied under the journal's lock) and at the latest
checkpoint (from disk), archiving retired segments, and a plain thread calls
`compact(..., journal=j)` too. No append may fail; every cut produced must
pass `read_cut` and equal the journal's own fold at its LSN; the appends must
all be in the history.
"""

from __future__ import annotations

import threading
import time

from journal import GroupRef, Journal
from snapshot import BackgroundCompactor, compact, read_cut

from tests.support.snapshot_support import assert_same_state, reference_states

THREADS = 4
SECONDS = 1.5


def test_background_compaction_while_four_threads_append(tmp_path):
    path = str(tmp_path / "j")
    j = Journal.open(path, sync="always", segment_bytes=16384)
    stop = threading.Event()
    errors: list[BaseException] = []
    appended = [0] * THREADS
    step_lock = threading.Lock()
    next_step = [1]

    def producer(t: int) -> None:
        idx = t * 1_000_000
        try:
            while not stop.is_set():
                gids = j.taken([GroupRef(idx=idx), GroupRef(idx=idx + 1)],
                               loader_state={"thread": t, "pos": idx})
                idx += 2
                j.admitted(gids, target_step=idx)
                j.finished(gids[:1], locators=[f"tq/{gids[0]}"])
                j.discarded(gids[1:], reason="rollout_failed")
                j.trained(gids[:1], step=idx)
                appended[t] += 5
                if t == 0 and idx % 8 == 0:
                    with step_lock:
                        step = next_step[0]
                        next_step[0] += 1
                    j.begin_checkpoint(step=step)
                    j.commit_checkpoint(step=step)
                    appended[t] += 2
        except BaseException as exc:  # reported below
            errors.append(exc)

    results = []
    with BackgroundCompactor(j, keep_cuts=3, retention="archive") as bg:
        threads = [threading.Thread(target=producer, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        futures = []
        deadline = time.monotonic() + SECONDS
        i = 0
        while time.monotonic() < deadline:
            futures.append(bg.submit("end" if i % 2 == 0 else "latest-checkpoint"))
            futures[-1].result()  # one at a time, back to back
            i += 1
            if i % 3 == 0:  # and from another thread, straight through compact()
                out = []
                th = threading.Thread(target=lambda: out.append(
                    compact(path, "end", journal=j, retention=None)))
                th.start()
                th.join()
                results.extend(out)
        stop.set()
        for th in threads:
            th.join()
        results.extend(f.result() for f in futures)
    lsn_end = j.lsn
    j.close()
    assert not errors, errors
    assert len(results) >= 4
    refs = reference_states(path)  # archived + live segments
    assert len(refs) - 1 == lsn_end == sum(appended)  # every append is in the history
    checked = 0
    for r in results:
        try:
            cut = read_cut(r.cut_path)
        except FileNotFoundError:
            continue
        except Exception as exc:
            # a cut retention removed afterwards is gone, never half there
            import os
            assert not os.path.exists(r.cut_path), f"{r.cut_path}: {exc!r}"
            continue
        assert_same_state(cut.state, refs[cut.lsn], f"background cut at LSN {cut.lsn}")
        checked += 1
    assert checked >= 3
    assert any(r.lsn > 0 for r in results)
