"""Self-tests of tests/support/faultfs.py, so other tests can trust its fault and crash models."""

from __future__ import annotations

import errno
import os

import pytest

from tests.support.faultfs import FaultFS, materialize


def files(d: str) -> dict[str, bytes]:
    out = {}
    for dp, _, fns in os.walk(d):
        for n in fns:
            with open(os.path.join(dp, n), "rb") as fh:
                out[os.path.relpath(os.path.join(dp, n), d)] = fh.read()
    return out


def test_crash_model(fast_tmp):
    root = str(fast_tmp / "r")
    os.mkdir(root)
    with open(os.path.join(root, "old"), "wb") as fh:
        fh.write(b"baseline")
    fs = FaultFS(root=root)
    a = fs.create(os.path.join(root, "a"))
    a.write(b"hello")
    a.sync()
    a.write(b" world")                        # never fsynced
    marks = {"a-synced, entry not durable": len(fs.ops)}
    fs.fsync_dir(root)
    marks["entry durable"] = len(fs.ops)
    fs.rename(os.path.join(root, "old"), os.path.join(root, "new"))
    marks["renamed, not durable"] = len(fs.ops)
    fs.fsync_dir(root)
    marks["rename durable"] = len(fs.ops)
    a.truncate(2)
    a.sync()
    a.close()
    fs.unlink(os.path.join(root, "a"))
    marks["unlinked, not durable"] = len(fs.ops)
    fs.mkdir(os.path.join(root, "sub"))
    fs.write_file(os.path.join(root, "sub", "f"), b"x")  # create, write, fsync, close, fsync_dir(sub)
    marks["sub not in root yet"] = len(fs.ops)
    fs.fsync_dir(root)

    n = iter(range(100))

    def image(upto, mode="durable"):
        return files(fs.crash_image(str(fast_tmp / f"img{next(n)}"), upto=upto, mode=mode))

    assert image(0) == {"old": b"baseline"}
    assert image(marks["a-synced, entry not durable"]) == {"old": b"baseline"}
    assert image(marks["entry durable"]) == {"old": b"baseline", "a": b"hello"}
    assert image(marks["renamed, not durable"]) == {"old": b"baseline", "a": b"hello"}
    assert image(marks["rename durable"]) == {"new": b"baseline", "a": b"hello"}
    assert image(marks["unlinked, not durable"]) == {"new": b"baseline", "a": b"he"}
    assert image(marks["sub not in root yet"]) == {"new": b"baseline", "a": b"he"}  # unlink not durable yet
    assert image(len(fs.ops)) == {"new": b"baseline", os.path.join("sub", "f"): b"x"}
    assert image(marks["entry durable"], "volatile") == {"old": b"baseline", "a": b"hello world"}
    assert image(len(fs.ops), "volatile") == files(root)
    # the free function gives the same image from a kept ops list
    again = materialize(fs.baseline, fs.ops, str(fast_tmp / "again"), root=root)
    assert files(again) == image(len(fs.ops))


def test_faults(fast_tmp):
    root = str(fast_tmp / "r")
    fs = FaultFS(root=root)
    fs.makedirs(root)
    f = fs.create(os.path.join(root, "a"))
    fs.inject("write", nth=2, error=errno.ENOSPC, short=3)
    f.write(b"12345")
    with pytest.raises(OSError) as info:
        f.write(b"abcdef")
    assert info.value.errno == errno.ENOSPC
    f.write(b"ok")  # once: the next write works
    with open(os.path.join(root, "a"), "rb") as fh:
        assert fh.read() == b"12345abcok"
    assert [(o.kind, o.data, o.error) for o in fs.ops_of("write")] == [
        ("write", b"12345", None), ("write", b"abc", errno.ENOSPC), ("write", b"ok", None)]

    fs.inject("fsync", nth=1, error=errno.EIO, persistent=True)
    for _ in range(3):
        with pytest.raises(OSError) as info:
            f.sync()
        assert info.value.errno == errno.EIO
    assert fs.count("fsync", failed=True) == 3
    fs.clear_faults()
    f.sync()

    fs.inject(None, nth=2, error=errno.EIO)  # the 2nd op of any kind from now
    f.write(b"!")
    with pytest.raises(OSError):
        f.sync()
    fs.inject("fsync_dir", error=errno.EIO, path_contains="nowhere")
    fs.fsync_dir(root)  # path does not match: no fault
    f.close()
    seen = []
    fs.on("unlink", lambda kind, p: seen.append((kind, os.path.basename(p))))
    fs.unlink(os.path.join(root, "a"))
    assert seen == [("unlink", "a")]
