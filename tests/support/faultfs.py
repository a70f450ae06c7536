"""Fault injection and crash simulation through the journal's I/O seam.

`FaultFS` is a drop-in `journal.vfs.OsFileSystem` (pass it as `fs=` to
`Journal.open`, or to anything else that takes a `FileSystem`). It performs
every operation on the real file system and

* **records** each one as an `Op` in `fs.ops` (in order, thread-safe):
  ``create``, ``open`` (open_append), ``write`` (path, offset, the bytes that
  reached the file), ``allocate`` (a preallocation: recorded as the zeros it writes, at
  the offset it starts from), ``fsync``, ``truncate``, ``close``, ``rename``, ``unlink``,
  ``mkdir``, ``rmtree``, ``fsync_dir``. Composite helpers (`durable_file` and the
  writes built on it, `fsync_file`, `makedirs`) are recorded as the primitives they are made of;
* **fails** chosen operations, armed with `fs.inject(...)`: the N-th operation
  (or the N-th of one kind, optionally only on paths containing a substring)
  counted from the moment the fault is armed, raising ``OSError(EIO)`` or
  ``OSError(ENOSPC)`` (any errno), once or persistently (that op and every later
  matching op). A failed op has no effect on disk, except a *short write*
  (``short=n``): the first ``n`` bytes are written, then the error is raised;
* calls optional **hooks** before an operation runs (`fs.on(kind, fn)`), e.g.
  to slow down fsync or block it on an event;
* **simulates a crash**: `fs.crash_image(dest, upto=k)` materialises into a
  fresh directory what would survive a power loss right after the first ``k``
  recorded operations (default: all of them) under a pessimistic model:

  - a file's contents are those of its last successful ``fsync`` (a file never
    fsynced is empty), whatever was written after that is lost;
  - a ``create``, ``mkdir``, ``rename`` or ``unlink`` only counts once the
    directory holding the entry was fsynced (``fsync_dir``); before that the
    old entry (or none) survives;
  - files that existed under ``root`` when the `FaultFS` was made are taken as
    durable (the baseline).

  Only the tree under ``root`` is materialised; the root directory itself is
  taken to exist. ``mode="volatile"`` instead materialises everything the ops
  did (what a process crash, SIGKILL, leaves). `materialize(baseline, ops, dest,
  root=...)` is the same as a free function, for ops lists kept from another run.

Typical uses::

    fs = FaultFS(root=path)                      # before Journal.open(path, fs=fs)
    j = Journal.open(path, fs=fs)
    fs.inject("fsync", nth=1, error=errno.EIO)   # the next fsync fails once
    fs.inject("write", nth=2, error=errno.ENOSPC, short=10, persistent=True)
    fs.count("fsync", path_contains=".wal")      # how many segment fsyncs so far
    mark = len(fs.ops)                           # ... later ...
    fs.crash_image(tmp / "after-crash", upto=mark)

Reads do not go through the seam (the journal reads with plain `open`), so a
crash image is checked by opening it with the ordinary `Journal`/`Reader`.
"""

from __future__ import annotations

import errno as _errno
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from journal.layout import PREPARED_NAME
from journal.vfs import File, OsFileSystem

KINDS = ("create", "open", "write", "allocate", "fsync", "truncate", "close", "rename", "unlink",
         "mkdir", "rmtree", "fsync_dir")


@dataclass(frozen=True)
class Op:
    """One recorded operation.

    `handle` identifies the open file (create/open/write/fsync/truncate/close);
    `data` is what reached the file for a write (a prefix for a short write);
    `size` is the truncate size; `dst` the rename target; `error` the errno if
    the operation failed (the op then had no effect beyond `data`)."""

    seq: int
    kind: str
    path: str
    handle: int | None = None
    offset: int | None = None
    data: bytes | None = None
    size: int | None = None
    dst: str | None = None
    error: int | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass
class Fault:
    """An armed fault; see `FaultFS.inject`. `fired` counts the operations it failed."""

    kind: str | None
    nth: int
    error: int
    persistent: bool = False
    short: int | None = None
    path_contains: str | None = None
    seen: int = 0
    fired: int = 0

    def matches(self, kind: str, path: str) -> bool:
        return ((self.kind is None or self.kind == kind)
                and (self.path_contains is None or self.path_contains in path))

    @property
    def exhausted(self) -> bool:
        return self.fired > 0 and not self.persistent


class FaultFS(OsFileSystem):
    """A recording, fault-injecting `OsFileSystem`. See the module docstring."""

    def __init__(self, root: str | None = None, *, prepared: bool = True):
        self.root = os.path.abspath(root) if root is not None else None
        # prepared=False: refuse (unrecorded, unfaulted) to create the next segment a writer
        # prepares in a background thread (journal/segments.py), so every op is the writer's
        # own, in a deterministic order, and every rotation creates its segment
        self.prepared = prepared
        self.ops: list[Op] = []
        self.faults: list[Fault] = []
        self.hooks: dict[str, list[Callable[[str, str], None]]] = {}
        self._mu = threading.RLock()
        self._handles = 0
        self.baseline: dict[str, bytes | None] = snapshot_tree(self.root) if self.root else {}

    # -- configuration -----------------------------------------------------------

    def inject(self, kind: str | None = None, *, nth: int = 1, error: int = _errno.EIO,
               persistent: bool = False, short: int | None = None,
               path_contains: str | None = None) -> Fault:
        """Fail the `nth` (1-based) operation of `kind` (None: any kind) issued from now on,
        on paths containing `path_contains` if given. `persistent`: every later matching
        op fails too. `short` (writes only): write that many bytes first, then fail."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown operation kind {kind!r}; one of {KINDS}")
        if short is not None and kind != "write":
            raise ValueError("short= only applies to kind='write'")
        f = Fault(kind, nth, error, persistent, short, path_contains)
        with self._mu:
            self.faults.append(f)
        return f

    def clear_faults(self) -> None:
        with self._mu:
            self.faults.clear()

    def on(self, kind: str, fn: Callable[[str, str], None]) -> None:
        """Call `fn(kind, path)` before every operation of `kind` runs (outside the record lock)."""
        self.hooks.setdefault(kind, []).append(fn)

    def hold_segment_fsyncs(self, seconds: float = 10) -> tuple[threading.Event, threading.Event]:
        """(held, gate): every fsync of a segment waits (at most `seconds`) until `gate` is set;
        `held` is set once one waits."""
        held, gate = threading.Event(), threading.Event()

        def hold(kind, p):
            if p.endswith(".wal") and not gate.is_set():
                held.set()
                gate.wait(seconds)

        self.on("fsync", hold)
        return held, gate

    # -- queries -------------------------------------------------------------------

    def ops_of(self, kind: str | None = None, *, path_contains: str | None = None,
               failed: bool | None = None) -> list[Op]:
        with self._mu:
            ops = list(self.ops)
        return [o for o in ops if (kind is None or o.kind == kind)
                and (path_contains is None or path_contains in o.path)
                and (failed is None or o.failed == failed)]

    def count(self, kind: str | None = None, *, path_contains: str | None = None,
              failed: bool | None = None) -> int:
        return len(self.ops_of(kind, path_contains=path_contains, failed=failed))

    def crash_image(self, dest: str, *, upto: int | None = None, mode: str = "durable") -> str:
        """Materialise into `dest` (created; must not exist) what survives a crash right
        after the first `upto` recorded ops (default: all). Returns `dest`.

        mode="durable" (default): a power loss, only what was fsynced (module docstring).
        mode="volatile": a process crash (SIGKILL), everything the ops did survives."""
        if self.root is None:
            raise ValueError("crash_image needs FaultFS(root=...)")
        with self._mu:
            ops = list(self.ops if upto is None else self.ops[:upto])
        return materialize(self.baseline, ops, dest, root=self.root, mode=mode)

    # -- the seam ----------------------------------------------------------------------

    def _run(self, kind: str, path: str) -> Fault | None:
        """Run the hooks, then decide whether this op fails (the fault that fires, or None)."""
        for fn in self.hooks.get(kind, ()):
            fn(kind, path)
        with self._mu:
            hit = None
            for f in self.faults:
                if f.exhausted or not f.matches(kind, path):
                    continue
                f.seen += 1
                if f.seen >= f.nth and hit is None:
                    hit = f
            if hit is not None:
                hit.fired += 1
            return hit

    def _record(self, kind: str, path: str, **fields) -> None:
        with self._mu:
            self.ops.append(Op(len(self.ops), kind, path, **fields))

    @staticmethod
    def _raise(fault: Fault, kind: str, path: str):
        raise OSError(fault.error, f"{os.strerror(fault.error)} (injected into {kind})", path)

    def _new_handle(self) -> int:
        with self._mu:
            self._handles += 1
            return self._handles

    def create(self, path: str) -> File:
        path = os.path.abspath(path)
        if not self.prepared and os.path.basename(path) == PREPARED_NAME:
            raise OSError(_errno.EPERM, "preparing the next segment is off in this FaultFS", path)
        fault = self._run("create", path)
        if fault:
            self._record("create", path, error=fault.error)
            self._raise(fault, "create", path)
        f = super().create(path)
        f._faultfs_handle = self._new_handle()
        self._record("create", path, handle=f._faultfs_handle)
        return f

    def open_append(self, path: str) -> File:
        path = os.path.abspath(path)
        fault = self._run("open", path)
        if fault:
            self._record("open", path, error=fault.error)
            self._raise(fault, "open", path)
        f = super().open_append(path)
        f._faultfs_handle = self._new_handle()
        self._record("open", path, handle=f._faultfs_handle, offset=f.offset)
        return f

    def write(self, f: File, data: bytes) -> None:
        data = bytes(data)
        fault = self._run("write", f.path)
        h, off = f._faultfs_handle, f.offset
        if fault:
            part = data[:fault.short] if fault.short else b""
            if part:
                super().write(f, part)
            self._record("write", f.path, handle=h, offset=off, data=part, error=fault.error)
            self._raise(fault, "write", f.path)
        super().write(f, data)
        self._record("write", f.path, handle=h, offset=off, data=data)

    def allocate(self, f: File, size: int) -> None:
        fault = self._run("allocate", f.path)
        h, start = f._faultfs_handle, f.allocated
        zeros = bytes(max(0, size - start))
        if fault:
            self._record("allocate", f.path, handle=h, offset=start, data=b"", size=size, error=fault.error)
            self._raise(fault, "allocate", f.path)
        super().allocate(f, size)
        self._record("allocate", f.path, handle=h, offset=start, data=zeros, size=size)

    def fsync(self, f: File) -> None:
        fault = self._run("fsync", f.path)
        if fault:
            self._record("fsync", f.path, handle=f._faultfs_handle, error=fault.error)
            self._raise(fault, "fsync", f.path)
        super().fsync(f)
        self._record("fsync", f.path, handle=f._faultfs_handle)

    def truncate(self, f: File, size: int) -> None:
        fault = self._run("truncate", f.path)
        if fault:
            self._record("truncate", f.path, handle=f._faultfs_handle, size=size, error=fault.error)
            self._raise(fault, "truncate", f.path)
        super().truncate(f, size)
        self._record("truncate", f.path, handle=f._faultfs_handle, size=size)

    def close(self, f: File) -> None:
        # closing always releases the descriptor; an injected error is reported after it
        fault = self._run("close", f.path)
        super().close(f)
        self._record("close", f.path, handle=getattr(f, "_faultfs_handle", None),
                     error=fault.error if fault else None)
        if fault:
            self._raise(fault, "close", f.path)

    def _simple(self, kind: str, path: str, real: Callable[[], None], **fields) -> None:
        fault = self._run(kind, path)
        if fault:
            self._record(kind, path, error=fault.error, **fields)
            self._raise(fault, kind, path)
        real()
        self._record(kind, path, **fields)

    def rename(self, src: str, dst: str) -> None:
        src, dst = os.path.abspath(src), os.path.abspath(dst)
        self._simple("rename", src, lambda: OsFileSystem.rename(self, src, dst), dst=dst)

    def unlink(self, path: str) -> None:
        path = os.path.abspath(path)
        self._simple("unlink", path, lambda: OsFileSystem.unlink(self, path))

    def mkdir(self, path: str) -> None:
        path = os.path.abspath(path)
        self._simple("mkdir", path, lambda: OsFileSystem.mkdir(self, path))

    def rmtree(self, path: str) -> None:
        path = os.path.abspath(path)
        self._simple("rmtree", path, lambda: OsFileSystem.rmtree(self, path))

    def fsync_dir(self, path: str) -> None:
        path = os.path.abspath(path)
        self._simple("fsync_dir", path, lambda: OsFileSystem.fsync_dir(self, path))


# -- crash simulation ------------------------------------------------------------------------


def snapshot_tree(root: str | None) -> dict[str, bytes | None]:
    """{relative path: bytes (file) or None (directory)} of everything under `root`."""
    out: dict[str, bytes | None] = {}
    if root is None or not os.path.isdir(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            out[rel] = None
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.normpath(os.path.join(rel, name))] = fh.read()
    return out


class _Inode:
    __slots__ = ("is_dir", "data", "synced", "entries", "durable_entries")

    def __init__(self, is_dir: bool, data: bytes = b""):
        self.is_dir = is_dir
        self.data = bytearray(data)      # what the page cache holds
        self.synced = bytes(data)        # contents as of the last fsync
        self.entries: dict[str, _Inode] = {}          # directories: names as the process sees them
        self.durable_entries: dict[str, _Inode] = {}  # names as of the last fsync_dir


class _Tree:
    """The volatile and durable views of the tree under `root`, driven by recorded ops."""

    def __init__(self, baseline: dict[str, bytes | None], root: str):
        self.root = root
        self.top = _Inode(True)
        for rel in sorted(baseline, key=lambda p: p.count(os.sep)):
            content = baseline[rel]
            parent, name = self._parent(rel)
            node = _Inode(content is None, content or b"")
            parent.entries[name] = parent.durable_entries[name] = node
        self.handles: dict[int, _Inode] = {}

    def _parent(self, rel: str) -> tuple[_Inode, str]:
        parts = rel.split(os.sep)
        node = self.top
        for p in parts[:-1]:
            node = node.entries[p]
        return node, parts[-1]

    def rel(self, path: str) -> str | None:
        r = os.path.relpath(path, self.root)
        return None if r == ".." or r.startswith(".." + os.sep) else r

    def lookup(self, path: str) -> _Inode | None:
        r = self.rel(path)
        if r is None:
            return None
        if r == ".":
            return self.top
        try:
            parent, name = self._parent(r)
        except KeyError:
            return None
        return parent.entries.get(name)

    def parent_of(self, path: str) -> tuple[_Inode, str] | None:
        r = self.rel(path)
        if r is None or r == ".":
            return None
        try:
            return self._parent(r)
        except KeyError:
            return None

    def apply(self, op: Op) -> None:
        k = op.kind
        if k in ("write", "allocate"):  # a preallocation is the write of its zeros
            node = self.handles.get(op.handle)
            if node is not None and op.data:
                end = op.offset + len(op.data)
                if len(node.data) < op.offset:
                    node.data.extend(bytes(op.offset - len(node.data)))
                node.data[op.offset:end] = op.data
            return
        if op.failed:
            return
        if k in ("create", "mkdir"):
            pn = self.parent_of(op.path)
            if pn is not None:
                node = _Inode(k == "mkdir")
                pn[0].entries[pn[1]] = node
                if k == "create":
                    self.handles[op.handle] = node
            elif k == "create":
                self.handles[op.handle] = _Inode(False)  # outside root: tracked, never materialised
        elif k == "open":
            self.handles[op.handle] = self.lookup(op.path) or _Inode(False)
        elif k == "fsync":
            node = self.handles.get(op.handle)
            if node is not None:
                node.synced = bytes(node.data)
        elif k == "truncate":
            node = self.handles.get(op.handle)
            if node is not None:
                del node.data[op.size:]
                if len(node.data) < op.size:
                    node.data.extend(bytes(op.size - len(node.data)))
        elif k == "close":
            self.handles.pop(op.handle, None)
        elif k in ("unlink", "rmtree"):
            pn = self.parent_of(op.path)
            if pn is not None:
                pn[0].entries.pop(pn[1], None)
        elif k == "rename":
            src, dst = self.parent_of(op.path), self.parent_of(op.dst)
            node = src[0].entries.pop(src[1], None) if src is not None else None
            if dst is not None and node is not None:
                dst[0].entries[dst[1]] = node
        elif k == "fsync_dir":
            node = self.lookup(op.path)
            if node is not None and node.is_dir:
                node.durable_entries = dict(node.entries)

    def write(self, dest: str, durable: bool) -> None:
        def emit(node: _Inode, path: str) -> None:
            for name, child in (node.durable_entries if durable else node.entries).items():
                full = os.path.join(path, name)
                if child.is_dir:
                    os.mkdir(full)
                    emit(child, full)
                else:
                    with open(full, "wb") as fh:
                        fh.write(child.synced if durable else child.data)

        emit(self.top, dest)


def materialize(baseline: dict[str, bytes | None], ops: Iterable[Op], dest: str, *,
                root: str, mode: str = "durable") -> str:
    """Write into `dest` (created, must not exist) the state of the tree under `root` after
    `ops`, starting from `baseline` (see `snapshot_tree`): with mode="durable" what a power
    loss leaves (see the module docstring), with mode="volatile" what a process crash
    leaves (every op's effect). Returns `dest`."""
    if mode not in ("durable", "volatile"):
        raise ValueError(f"mode must be 'durable' or 'volatile', not {mode!r}")
    tree = _Tree(baseline, os.path.abspath(root))
    for op in ops:
        tree.apply(op)
    os.makedirs(dest)
    tree.write(dest, durable=mode == "durable")
    return dest
