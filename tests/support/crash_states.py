"""ALICE-style crash-state generation from the operations a workload issued through the I/O seam.

`tests/support/faultfs.py` records every operation (`FaultFS.ops`); its `crash_image`
gives the one *pessimistic* image of a crash after the first k operations
(only what an fsync made durable survives). A real disk can leave many more
states, because an operation that was not yet made durable may or may not
have reached the platter, in part, or out of order. This module enumerates
them, in the manner of ALICE (Pillai et al., OSDI 2014) and CrashMonkey:

* every **prefix** of the operations (crash right after operation k);
* for the operations of that prefix that no later fsync made durable (the
  *volatile* ones: a write or truncate not followed by an fsync of the same
  file, a create/mkdir/rename/unlink/rmtree not followed by an fsync of its
  directory):
  - all of them persisted (``all``) or none (``prefix``: faultfs's image);
  - **each one dropped** while the others persist (``drop``); for a rename or
    unlink this is the entry change **undone**;
  - each write **torn** at the 512-byte and 4 KiB boundaries inside it (file
    offsets), the lost part absent, **zero-filled** or **garbage** (``torn``);
    the volatile ops before it persisted, those after it lost;
  - two writes of one file in one fsync window **reordered**: the later one
    persisted without the earlier one (``reorder``) or both applied in the
    other order (``swap``, which only differs when they overlap);
  - every directory-entry change undone while the data persisted
    (``names-undone``) and the reverse (``data-lost``);
  - an `rmtree` that removed one of the directory's files only (``rmtree-part``) or all of
    them but not the directory (``rmtree-emptied``): it is one recorded op, not one atomic
    change on a disk.

Durable operations are never dropped. A crash state is a dict
``{relative path: bytes}`` (``None`` for a directory); identical states are
generated many times and deduplicated by content (`CrashStates.distinct`).

The model deliberately stays close to POSIX and pessimistic: an fsync of a
file makes its data durable, not its name; `rename` is atomic once its target
directory was fsynced; `rmtree` is one operation (faultfs records it so).
Reads do not go through the seam, so they are not operations.

Typical use (see `tests/system/test_crash_states.py`)::

    fs = FaultFS(root=path)
    ... run the workload with fs=fs, calling acks.append(len(fs.ops)) after each ack ...
    gen = CrashStates(fs.baseline, fs.ops, root=path)
    for state in gen.distinct(sample=200, seed=7):
        d = write_tree(state.tree, tmp / f"s{state.index}")
        ... open, restore, check ...
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import traceback
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

SECTOR = 512
PAGE = 4096
FILLS = ("missing", "zeros", "garbage")
_EFFECT = frozenset({"create", "mkdir", "write", "truncate", "unlink", "rmtree", "rename"})
_NAMESPACE = frozenset({"create", "mkdir", "unlink", "rmtree", "rename"})
_INF = float("inf")


@dataclass
class AOp:
    """One recorded operation resolved to inodes (identity taken from the run as it happened)."""

    index: int              # position in the recorded op list
    kind: str
    inode: int | None = None        # the file written/truncated/fsynced, the entry's inode
    dir: int | None = None          # directory holding the entry (create/mkdir/unlink/rmtree/rename src)
    name: str | None = None
    dst_dir: int | None = None      # rename target directory and name
    dst_name: str | None = None
    offset: int = 0
    data: bytes = b""
    size: int = 0
    window: int = 0         # writes: fsync window of their file (how many fsyncs of it came before)
    children: list = field(default_factory=list)  # rmtree: (name, inode) directly inside
    covered_at: float = _INF  # index of the first later op that makes this one durable

    @property
    def effect(self) -> bool:
        return self.kind in _EFFECT

    @property
    def namespace(self) -> bool:
        return self.kind in _NAMESPACE


@dataclass
class CrashState:
    point: int          # crash right after this many recorded ops
    variant: str        # how the volatile ops were resolved (see the module docstring)
    tree: dict          # {relative path: bytes | None}
    digest: str = ""
    index: int = 0      # position among the distinct states

    def describe(self) -> str:
        return f"crash after op {self.point} [{self.variant}]"


def _tree_digest(tree: dict) -> str:
    h = hashlib.sha256()
    for path in sorted(tree):
        content = tree[path]
        h.update(path.encode() + b"\0")
        h.update(b"D" if content is None else b"F%d:" % len(content) + content)
    return h.hexdigest()


class CrashStates:
    """Crash states of one recorded run. `baseline` is `snapshot_tree(root)` before the run
    (taken as durable), `ops` the `FaultFS.ops` of the run."""

    def __init__(self, baseline: dict, ops: Iterable, *, root: str, seed: int = 0,
                 max_cuts_per_write: int = 12):
        self.root = os.path.abspath(root)
        self.baseline = dict(baseline)
        self.ops = list(ops)
        self.seed = seed
        self.max_cuts_per_write = max_cuts_per_write
        self._annotate()

    # -- phase 1: resolve every op to inodes, as the process saw the tree ------------------

    def _annotate(self) -> None:
        self.base_content: dict[int, bytes] = {}
        self.base_entries: dict[int, dict[str, int]] = {0: {}}
        self.is_dir: dict[int, bool] = {0: True}
        nxt = 1
        by_path: dict[str, int] = {".": 0}
        for rel in sorted(self.baseline, key=lambda p: p.count(os.sep)):
            parent = by_path[os.path.dirname(rel) or "."]
            ino = nxt
            nxt += 1
            content = self.baseline[rel]
            self.is_dir[ino] = content is None
            if content is None:
                self.base_entries[ino] = {}
            else:
                self.base_content[ino] = content
            self.base_entries[parent][os.path.basename(rel)] = ino
            by_path[rel] = ino
        vol = {d: dict(e) for d, e in self.base_entries.items()}  # the namespace as the process saw it
        handles: dict[int, int] = {}
        fsyncs: dict[int, int] = {}
        outside = -1  # inodes of files outside root (tracked, never materialised)

        def split(path: str) -> tuple[int | None, str | None]:
            rel = os.path.relpath(path, self.root)
            if rel == "." or rel == ".." or rel.startswith(".." + os.sep):
                return None, None
            node = 0
            for part in rel.split(os.sep)[:-1]:
                node = vol.get(node, {}).get(part)
                if node is None:
                    return None, None
            return node, rel.split(os.sep)[-1]

        self.aops: list[AOp] = []
        for op in self.ops:
            k = "write" if op.kind == "allocate" else op.kind  # a preallocation writes its zeros
            if op.failed and not (k == "write" and op.data):
                continue  # a failed op had no effect (a short write: the part that reached the file)
            a = AOp(op.seq, k)
            if k in ("create", "mkdir"):
                d, name = split(op.path)
                if d is None:
                    if k == "create":
                        handles[op.handle] = outside
                        outside -= 1
                    continue
                ino, nxt = nxt, nxt + 1
                self.is_dir[ino] = k == "mkdir"
                if k == "mkdir":
                    vol[ino] = {}
                vol[d][name] = ino
                if k == "create":
                    handles[op.handle] = ino
                a.inode, a.dir, a.name = ino, d, name
            elif k == "open":
                d, name = split(op.path)
                ino = vol.get(d, {}).get(name) if d is not None else None
                handles[op.handle] = ino if ino is not None else outside
                outside -= 1
                continue
            elif k in ("write", "truncate", "fsync"):
                ino = handles.get(op.handle)
                if ino is None or ino < 0:
                    continue
                a.inode = ino
                if k == "write":
                    a.offset, a.data, a.window = op.offset, op.data or b"", fsyncs.get(ino, 0)
                elif k == "truncate":
                    a.size, a.window = op.size, fsyncs.get(ino, 0)
                else:
                    fsyncs[ino] = fsyncs.get(ino, 0) + 1
            elif k in ("unlink", "rmtree"):
                d, name = split(op.path)
                if d is None or name not in vol.get(d, {}):
                    continue
                a.dir, a.name, a.inode = d, name, vol[d].pop(name)
                if k == "rmtree":  # its direct children, for the partly-removed states
                    a.children = sorted(vol.get(a.inode, {}).items())
            elif k == "rename":
                d, name = split(op.path)
                dd, dname = split(op.dst)
                if d is None or dd is None or name not in vol.get(d, {}):
                    continue
                a.dir, a.name, a.dst_dir, a.dst_name = d, name, dd, dname
                a.inode = vol[d].pop(name)
                vol[dd][dname] = a.inode
            elif k == "fsync_dir":
                d, name = split(op.path)
                ino = 0 if os.path.abspath(op.path) == self.root else (
                    vol.get(d, {}).get(name) if d is not None else None)
                if ino is None:
                    continue
                a.inode = ino
            else:  # close
                continue
            self.aops.append(a)
        # which later op makes each effect op durable
        for i, a in enumerate(self.aops):
            if not a.effect:
                continue
            for b in self.aops[i + 1:]:
                if a.kind in ("write", "truncate"):
                    if b.kind == "fsync" and b.inode == a.inode:
                        a.covered_at = b.index
                        break
                elif b.kind == "fsync_dir" and b.inode == (a.dst_dir if a.kind == "rename" else a.dir):
                    a.covered_at = b.index
                    break

    # -- phase 2: build one crash state ----------------------------------------------------

    def _build(self, applied: list[AOp]) -> dict:
        content = {ino: bytearray(c) for ino, c in self.base_content.items()}
        entries = {d: dict(e) for d, e in self.base_entries.items()}
        for a in applied:
            k = a.kind
            if k in ("create", "mkdir"):
                entries.setdefault(a.dir, {})[a.name] = a.inode
                if k == "mkdir":
                    entries.setdefault(a.inode, {})
                else:
                    content.setdefault(a.inode, bytearray())
            elif k == "write":
                buf = content.setdefault(a.inode, bytearray())
                if len(buf) < a.offset:
                    buf.extend(bytes(a.offset - len(buf)))
                buf[a.offset:a.offset + len(a.data)] = a.data
            elif k == "truncate":
                buf = content.setdefault(a.inode, bytearray())
                del buf[a.size:]
                if len(buf) < a.size:
                    buf.extend(bytes(a.size - len(buf)))
            elif k in ("unlink", "rmtree"):
                if entries.get(a.dir, {}).get(a.name) == a.inode:
                    del entries[a.dir][a.name]
            elif k == "rename":
                src = entries.get(a.dir, {})
                if src.get(a.name) == a.inode:
                    del src[a.name]
                entries.setdefault(a.dst_dir, {})[a.dst_name] = a.inode
        tree: dict = {}
        seen = set()

        def emit(d: int, prefix: str) -> None:
            if d in seen:
                return
            seen.add(d)
            for name, ino in sorted(entries.get(d, {}).items()):
                rel = os.path.join(prefix, name) if prefix else name
                if self.is_dir.get(ino):
                    tree[rel] = None
                    emit(ino, rel)
                else:
                    tree[rel] = bytes(content.get(ino, b""))

        emit(0, "")
        return tree

    def _torn(self, a: AOp, cut: int, fill: str) -> AOp:
        """`a` persisted only up to file offset `cut`; the rest absent, zeros or garbage."""
        keep = a.data[:cut - a.offset]
        lost = len(a.data) - len(keep)
        if fill == "missing":
            data = keep
        elif fill == "zeros":
            data = keep + bytes(lost)
        else:
            rng = random.Random(f"{self.seed}:{a.index}:{cut}")
            data = keep + rng.randbytes(lost)
        return AOp(a.index, "write", inode=a.inode, offset=a.offset, data=data, window=a.window)

    def _cuts(self, a: AOp) -> list[int]:
        lo, hi = a.offset, a.offset + len(a.data)
        cuts = [lo] + [b for b in range((lo // SECTOR + 1) * SECTOR, hi, SECTOR)]
        pages = [c for c in cuts if c % PAGE == 0]
        if len(cuts) > self.max_cuts_per_write:  # keep every page boundary, sample the sectors
            rng = random.Random(f"{self.seed}:cuts:{a.index}")
            rest = [c for c in cuts if c % PAGE and c != lo]
            cuts = sorted(set([lo] + pages[:self.max_cuts_per_write]
                              + rng.sample(rest, min(len(rest), self.max_cuts_per_write // 2))))
        return cuts

    def variants(self, point: int) -> Iterator[tuple[str, list[AOp]]]:
        """(variant name, ops applied) of every crash state right after `point` recorded ops."""
        prefix = [a for a in self.aops if a.index < point and a.effect]
        durable = [a for a in prefix if a.covered_at < point]
        volatile = [a for a in prefix if a.covered_at >= point]

        def merged(extra: Iterable[AOp]) -> list[AOp]:
            return sorted(durable + list(extra), key=lambda a: a.index)

        yield "prefix", durable
        if not volatile:
            return
        yield "all", merged(volatile)
        for v in volatile:
            yield f"drop#{v.index}:{v.kind}", merged(x for x in volatile if x is not v)
        if any(v.namespace for v in volatile) and any(not v.namespace for v in volatile):
            yield "names-undone", merged(x for x in volatile if not x.namespace)
            yield "data-lost", merged(x for x in volatile if x.namespace)
        for v in volatile:  # rmtree is not atomic on a disk: files gone, the directory still there
            if v.kind != "rmtree" or not v.children:
                continue
            rest = [x for x in volatile if x is not v]
            for name, ino in v.children:
                part = AOp(v.index, "unlink", inode=ino, dir=v.inode, name=name)
                yield f"rmtree-part#{v.index}:{name}", merged(rest + [part])
            yield f"rmtree-emptied#{v.index}", merged(rest + [AOp(v.index, "unlink", inode=ino, dir=v.inode,
                                                                  name=name) for name, ino in v.children])
        for i, w in enumerate(volatile):
            if w.kind != "write" or not w.data:
                continue
            before = volatile[:i]
            for cut in self._cuts(w):
                for fill in FILLS:
                    yield f"torn#{w.index}@{cut}:{fill}", merged(before + [self._torn(w, cut, fill)])
        for i, a in enumerate(volatile):
            for b in volatile[i + 1:]:
                if a.kind == b.kind == "write" and a.inode == b.inode and a.window == b.window:
                    yield f"reorder#{a.index}<{b.index}", merged(volatile[:i] + [b])
                    if a.offset < b.offset + len(b.data) and b.offset < a.offset + len(a.data):
                        order = [x for x in merged(volatile) if x is not a]
                        order.insert(order.index(b) + 1, a)
                        yield f"swap#{a.index}<{b.index}", order

    def points(self) -> range:
        return range(len(self.ops) + 1)

    def all_states(self, points: Iterable[int] | None = None) -> Iterator[CrashState]:
        """Every crash state (with repeats) at the given crash points (default: every prefix)."""
        for point in (self.points() if points is None else points):
            for name, applied in self.variants(point):
                yield CrashState(point, name, self._build(applied))

    def distinct(self, points: Iterable[int] | None = None, *, sample: int | None = None,
                 seed: int | None = None, keep: Iterable[str] = ()) -> "StateSet":
        """The distinct crash states (first occurrence kept), optionally a seeded sample of
        `sample` of them. States whose variant starts with one of `keep` are always kept."""
        produced = 0
        seen: dict[str, CrashState] = {}
        for s in self.all_states(points):
            produced += 1
            s.digest = _tree_digest(s.tree)
            if s.digest not in seen:
                seen[s.digest] = s
        states = list(seen.values())
        distinct = len(states)
        if sample is not None and len(states) > sample:
            rng = random.Random(self.seed if seed is None else seed)
            keep = tuple(keep)
            must = [s for s in states if keep and s.variant.startswith(keep)]
            rest = [s for s in states if not (keep and s.variant.startswith(keep))]
            n = max(0, sample - len(must))
            states = sorted(must + rng.sample(rest, min(n, len(rest))), key=lambda s: (s.point, s.variant))
        for i, s in enumerate(states):
            s.index = i
        return StateSet(states, produced, distinct)


@dataclass
class StateSet:
    states: list[CrashState]
    produced: int      # states generated, repeats included
    distinct: int      # distinct states (before sampling)
    checked: int = 0
    failures: list = field(default_factory=list)

    def __iter__(self) -> Iterator[CrashState]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)


def failures_of(states: "StateSet", scratch: str, check: Callable[[str, CrashState], None]) -> list[str]:
    """Each state written under `scratch` and held to `check(its directory, the state)`; what
    broke, each with the state that broke it (the directories removed)."""
    failures = []
    for s in states:
        img = write_tree(s.tree, os.path.join(scratch, f"s{s.index}"))
        try:
            check(img, s)
        except Exception as exc:  # every failure is collected with the state that caused it
            failures.append(f"{s.describe()}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
        finally:
            shutil.rmtree(img, ignore_errors=True)
    return failures


def write_tree(tree: dict, dest: str) -> str:
    """Materialise a crash state into `dest` (created; must not exist)."""
    os.makedirs(dest)
    for rel in sorted(tree, key=lambda p: (p.count(os.sep), p)):
        full = os.path.join(dest, rel)
        if tree[rel] is None:
            os.makedirs(full, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as fh:
                fh.write(tree[rel])
    return dest
