"""`replay/data_plane/group_commit.py`: submitters share batches; each returns once the batch
holding its items was written (and `written` ran), or raises that batch's error; a batch wakes
the threads it concerns and one to lead the next; a waiter interrupted (Ctrl-C) leaves the
others going."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from replay.data_plane.group_commit import GroupCommit, Item


class Recorder:
    def __init__(self, hold: threading.Event | None = None, fail: set | None = None):
        self.lock = threading.Lock()
        self.batches: list[list[Item]] = []
        self.written: list[Item] = []
        self.hold, self.fail = hold, fail or set()
        self.commits = GroupCommit(self.lock, self.write, self.written.extend)

    def write(self, batch: list[Item]) -> None:
        self.batches.append(list(batch))
        if self.hold is not None:
            self.hold.wait(10)
        if any(id(item) in self.fail for item in batch):
            raise OSError(5, "injected")

    def submit(self, *items: Item) -> None:
        with self.lock:
            self.commits.submit(list(items))


def test_concurrent_submitters_share_batches_and_return_once_written():
    hold = threading.Event()
    r = Recorder(hold)
    first = Item()
    leader = threading.Thread(target=r.submit, args=(first,))
    leader.start()
    while not r.batches:                       # the first batch is being written
        time.sleep(0.001)
    items = [Item() for _ in range(16)]
    returned = []

    def submit(item):
        r.submit(item)
        returned.append(item in r.written)     # written (and `written` ran) before it returned

    threads = [threading.Thread(target=submit, args=(i,)) for i in items]
    for t in threads:
        t.start()
    while len(r.commits._queue) < 16:          # all queued behind the first batch
        time.sleep(0.001)
    hold.set()
    for t in [leader, *threads]:
        t.join()
    assert [len(b) for b in r.batches] == [1, 16] and all(returned) and len(returned) == 16


def test_a_failed_batch_raises_in_each_of_its_submitters_and_the_next_batch_goes_on():
    bad = Item()
    r = Recorder(fail={id(bad)})
    with pytest.raises(OSError, match="injected"):
        r.submit(bad, Item())
    good = Item()
    r.submit(good)
    assert good.done and good.error is None and r.written == [good]


def test_an_interrupted_waiter_leaves_the_others_going():
    """The main thread waits first behind a batch in flight (so it would lead the next), then
    another thread; the main thread is interrupted: the other leads and writes both items."""
    hold = threading.Event()
    r = Recorder(hold)
    leader = threading.Thread(target=r.submit, args=(Item(),))
    leader.start()
    while not r.batches:
        time.sleep(0.001)
    other = Item()
    waiting = threading.Thread(target=r.submit, args=(other,))

    def then_interrupt():
        while len(r.commits._waiting) < 1:    # the main thread waits
            time.sleep(0.001)
        waiting.start()
        while len(r.commits._waiting) < 2:    # and the other one behind it
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    helper = threading.Thread(target=then_interrupt)
    helper.start()
    mine = Item()
    with pytest.raises(KeyboardInterrupt):
        r.submit(mine)
    helper.join()
    hold.set()
    leader.join()
    waiting.join(5)
    assert not waiting.is_alive() and other.done and mine.done   # one batch took both
    assert r.commits._waiting == []
