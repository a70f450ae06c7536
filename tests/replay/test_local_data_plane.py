"""`LocalDataPlane` beyond the shared contract (tests/replay/test_data_plane.py): a put fsyncs
the row's bytes before its name appears and the directory before it returns; a child process
SIGKILLed again and again while it puts rows leaves only complete rows under locator names
(never a torn file), and temporary files that no locator lists and `remove_leftovers` removes;
the object pickles as its root; a cut on another file system gets copies."""

from __future__ import annotations

import errno
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import torch

from journal import DEFAULT_FS, Group, Owner
from replay import LocalDataPlane
from replay.data_plane import local
from tests.support.equality import deep_equal

# numpy rows: the child starts without torch, so a kill loop costs little time
ROWS_FOR = '''
import numpy as np
def rows_for(gid, index=None):
    g = np.random.default_rng(gid * 7 + (index or 0))
    return {"gid": gid, "tokens": g.integers(0, 50000, (128, 1024)),
            "logprobs": g.standard_normal((128, 1024), dtype=np.float32)}
'''

CHILD = ROWS_FOR + '''
import itertools, sys
from replay import LocalDataPlane
dp = LocalDataPlane(sys.argv[1])
print("ready", flush=True)
for gid in itertools.count(int(sys.argv[2])):
    dp.put(gid, rows_for(gid))
    dp.put_rollout(gid, 0, 0, rows_for(gid, 0))
'''


def test_put_fsyncs_the_bytes_before_the_name_and_the_directory_before_it_returns(tmp_path, monkeypatch):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    events = []
    real_fsync, real_link, real_dir = os.fsync, os.link, DEFAULT_FS.fsync_dir

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path != dp.root:   # (the directory's own fsync is fsync_dir's)
            events.append(("fsync", os.path.basename(path)))
        real_fsync(fd)

    def link(src, dst):
        events.append(("link", os.path.basename(src), os.path.basename(dst)))
        real_link(src, dst)

    def fsync_dir(path):
        events.append(("fsync_dir", path))
        real_dir(path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(DEFAULT_FS, "fsync_dir", fsync_dir)
    loc = dp.put(3, {"x": torch.ones(4)})
    events.append(("returned",))
    (fsynced,), (linked,), (dir_synced,) = ([e for e in events if e[0] == k]
                                            for k in ("fsync", "link", "fsync_dir"))
    assert fsynced[1].startswith(".tmp-g3.rows-") and linked == ("link", fsynced[1], loc)
    assert dir_synced == ("fsync_dir", dp.root)
    assert [e[0] for e in events] == ["fsync", "link", "fsync_dir", "returned"]
    assert os.listdir(dp.root) == [loc]   # the temporary name is gone


def test_sigkill_while_putting_leaves_only_complete_rows_under_locators(tmp_path):
    scope: dict = {}
    exec(ROWS_FOR, scope)
    rows_for = scope["rows_for"]
    root = str(tmp_path / "rows")
    dp = LocalDataPlane(root)
    rng = random.Random(20)
    start, kills, leftovers_seen, checked = 0, 25, 0, set()
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, "-c", CHILD, root, str(start)], stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        names = os.listdir(root)
        temporary = [n for n in names if n.startswith(local.TMP_PREFIX)]
        leftovers_seen += len(temporary)
        complete = sorted(dp.locators())
        assert sorted(set(names) - set(temporary)) == complete   # nothing else under the root
        for loc in set(complete) - checked:        # every named row is whole (a name never changes)
            gid = int(loc[1:].split("-")[0].split(".")[0])
            want = rows_for(gid, 0) if "-r0-a0" in loc else rows_for(gid)
            assert deep_equal(dp.get(loc), want), loc
            checked.add(loc)
        # the next child starts over at the newest group: a put of identical rows is done already
        start = max((int(loc[1:].split("-")[0].split(".")[0]) for loc in complete), default=0)
    assert leftovers_seen > 0, "no kill landed inside a put"
    before = sorted(dp.locators())
    temporary = len(os.listdir(root)) - len(before)
    assert dp.remove_leftovers(older_than=0) == temporary
    assert sorted(os.listdir(root)) == before


def test_remove_leftovers_spares_the_temporary_file_of_a_live_put(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    live, dead = (os.path.join(dp.root, f".tmp-g{i}.rows-0000") for i in (1, 2))
    for path in (live, dead):
        open(path, "wb").close()
    os.utime(dead, (time.time() - 2 * local.LEFTOVER_SECONDS,) * 2)
    assert dp.remove_leftovers() == 1
    assert os.listdir(dp.root) == [os.path.basename(live)]


def test_pickles_as_its_root_only(tmp_path):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    assert vars(pickle.loads(pickle.dumps(dp))) == {"root": dp.root}


def test_save_copies_into_a_cut_on_another_file_system(tmp_path, monkeypatch):
    dp = LocalDataPlane(str(tmp_path / "rows"))
    loc = dp.put(4, {"x": 1})

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link", src)

    monkeypatch.setattr(os, "link", cross_device)
    (tmp_path / "cut").mkdir()
    dp.save(str(tmp_path / "cut"), [Group(4, 0, None, 0, None, Owner.REPLAY, locator=loc)])
    copied = tmp_path / "cut" / loc
    assert copied.read_bytes() == (tmp_path / "rows" / loc).read_bytes()
    assert os.stat(copied).st_ino != os.stat(tmp_path / "rows" / loc).st_ino
