"""`verify(path)`: the whole chain of checks over a journal (or a cut) and its cuts, in one pass
per timeline; returns a `VerifyReport`.

1. Every segment header (magic, version, checksum, run id, name) - `Reader`.
2. Every frame of every timeline: checksum, chain link, LSN continuity, segment
   seeds (read as salvage reads, so all damage is found, not just the first).
3. Each branch continues its parent's history: its first segment's chain seed
   is the chain after its branch LSN.
4. The ownership rules (the journal's own `apply`) over the active history and
   every dead tail: each timeline's own commits are folded once, starting from
   a copy of the state at its branch point taken while its parent was folded.
5. Every cut: checks 1-8 of the chain (`cut_status`), and a valid cut's live
   groups, counts and checkpoints equal the fold at its LSN.
6. The restore point (latest committed checkpoint) is on an undamaged part of
   the active history.

A torn tail (never acknowledged), a stale cut and a leftover temporary
directory are warnings; everything else is a problem (exit 1). Rehydration
(check 10) needs the dataset and is restore's.
"""

from __future__ import annotations

import os

import journal
from journal import Owner, Reader, State
from snapshot import read_cut

from .cut_status import check_one_cut, is_cut, is_journal, list_cuts
from .reports import Check, Finding, NotAJournal, VerifyReport
from .walk import Progress, active_lineage, no_progress, span_bytes, tracked, unique_problems


class _Report(VerifyReport):
    def check(self, name: str, target: str, ok: bool | None, detail: str = "") -> None:
        self.checks.append(Check(name, target, "ok" if ok else ("warn" if ok is None else "FAIL"), detail))

    def problem(self, kind: str, message: str, segment=None, offset=None, lsn=None, warn=False) -> None:
        (self.warnings if warn else self.problems).append(Finding(kind, message, segment, offset, lsn))


def _differs(cut_state: State, fold: State) -> str | None:
    """How a cut's state differs from the journal's fold at the same LSN (None: it does not)."""
    if cut_state.counts != fold.counts:
        diff = {o.name: (cut_state.counts[o], fold.counts[o]) for o in Owner
                if cut_state.counts[o] != fold.counts[o]}
        return f"owner counts differ (cut, journal): {diff}"
    if cut_state.live.keys() != fold.live.keys():
        extra = sorted(cut_state.live.keys() - fold.live.keys())[:5]
        missing = sorted(fold.live.keys() - cut_state.live.keys())[:5]
        return f"live groups differ: in the cut only {extra}, in the journal only {missing}"
    for gid, g in fold.live.items():
        if cut_state.live[gid] != g:
            return f"group {gid} differs: cut {cut_state.live[gid].as_dict()}, journal {g.as_dict()}"
    if cut_state.committed_checkpoints != fold.committed_checkpoints or \
            cut_state.pending_checkpoints != fold.pending_checkpoints:
        return "checkpoint markers differ"
    if cut_state.next_group_id < fold.next_group_id:
        return (f"next group id {cut_state.next_group_id} is below the journal's "
                f"{fold.next_group_id} (ids would be reused)")
    if (cut_state.loader is None) != (fold.loader is None):
        return "one holds a loader state, the other does not"
    return None


def _owner_of(timelines: dict, t: int, x: int) -> int | None:
    """The timeline whose own commits include LSN x of timeline t's parent history."""
    o = timelines[t].parent
    while o in timelines and timelines[o].branch_lsn >= x:
        o = timelines[o].parent
    return o if o in timelines else None


def verify(path: str, *, progress: Progress = no_progress) -> VerifyReport:
    """Every check restore relies on, over the journal or cut directory at `path`; raises
    `NotAJournal` when it is neither. `progress(label, total_bytes)` makes the scan's bar."""
    full = os.path.abspath(path)
    if is_cut(full):
        return _verify_cut(full)
    if not os.path.isdir(full) or not is_journal(full):
        raise NotAJournal(f"{path}: not a journal directory (no segment files *.wal or *.wal.zst, "
                          "no snapshots/) and not a cut directory (no MANIFEST.json)")
    return _verify_journal(full, progress)


def _verify_journal(path: str, progress: Progress) -> VerifyReport:
    rep = _Report(path)
    reader = Reader(path, "salvage")  # finds every damage, not only the first
    tls = reader.timelines
    segs = reader.segments
    header_problems = [p for p in reader.problems]
    rep.check("segment headers", f"{len(segs)} segment(s), {sum(s.archived for s in segs)} archived",
              not any(p.kind != "torn" for p in header_problems))
    lineage = active_lineage(reader)
    active_limit = {tl.timeline: (lineage[i + 1].branch_lsn if i + 1 < len(lineage) else None)
                    for i, tl in enumerate(lineage)}
    cuts = list_cuts(path, reader, find_restore=False)
    valid_cuts = {}
    for e in cuts:
        if e["status"] == "valid":
            valid_cuts.setdefault(e["lsn"], e)
    loaded = {}  # lsn -> Cut (for the content check)
    # where each child timeline starts: (owner timeline, LSN) -> children
    wanted: dict[int, dict[int, list[int]]] = {}
    roots = []
    for t, tl in sorted(tls.items()):
        if not tl.parent or tl.parent not in tls:
            roots.append(t)
            continue
        o = _owner_of(tls, t, tl.branch_lsn)
        root, seen = tl.parent, {t}
        while tls[root].parent in tls and root not in seen:
            seen.add(root)
            root = tls[root].parent
        if o is None and tls[root].branch_lsn == tl.branch_lsn:
            # it branches where its root begins (a journal resumed from a cut, restored again
            # to that same checkpoint): it starts from the same base cut, like a root
            roots.append(t)
            continue
        if o is None:
            rep.problem("branch", f"timeline {t} branches at LSN {tl.branch_lsn} from timeline "
                        f"{tl.parent}, whose history does not hold that LSN", tl.segments[0].name, 0,
                        tl.branch_lsn)
            continue
        wanted.setdefault(o, {}).setdefault(tl.branch_lsn, []).append(t)
    # cuts compared while their timeline is folded
    compare: dict[int, dict[int, list[dict]]] = {}
    for lsn, e in valid_cuts.items():
        owner = next((tl.timeline for tl in lineage if tl.branch_lsn < lsn and (
            active_limit[tl.timeline] is None or lsn <= active_limit[tl.timeline])), None)
        if owner is not None:
            compare.setdefault(owner, {}).setdefault(lsn, []).append(e)
    starts: dict[int, tuple[State | None, int | None]] = {}  # timeline -> (state at branch, chain)
    on_lineage = {tl.timeline for tl in lineage}
    for t in roots:
        tl = tls[t]
        if tl.branch_lsn == 0:
            starts[t] = (State(), 0)
        elif t in on_lineage:
            base = min((lsn for lsn in valid_cuts if lsn >= tl.branch_lsn), default=None)
            if base is None:
                rep.check("ownership rules", f"timeline {t}", None,
                          f"the segments before LSN {tl.branch_lsn + 1} were retired and no valid cut "
                          "covers them: ownership not checked")
                starts[t] = (None, None)
            else:
                cut = read_cut(valid_cuts[base]["path"])
                starts[t] = (cut.state.copy(), None)
        else:
            starts[t] = (None, None)
    sizes = {s.name: s.size for s in segs}
    scanned = set(roots).union(*(cs for by_lsn in wanted.values() for cs in by_lsn.values()))
    bar = progress("verify", sum(span_bytes(reader, t, tls[t].branch_lsn + 1) for t in scanned))
    end_state = None
    try:
        for t, tl in sorted(tls.items()):
            if t not in starts:
                continue
            state, seed_expected = starts[t]
            first_seg = tl.segments[0]
            if seed_expected is not None and first_seg.header.chain_seed != seed_expected:
                rep.problem("chain", f"timeline {t} does not continue its parent's chain at LSN "
                            f"{tl.branch_lsn} (seed {first_seg.header.chain_seed:#010x}, expected "
                            f"{seed_expected:#010x})", first_seg.name, 0, tl.branch_lsn)
            children = wanted.get(t, {})
            cut_here = compare.get(t, {})
            n, lo, hi = 0, None, None
            broken = None
            for rec in tracked(reader.timeline_records(t, start_lsn=tl.branch_lsn + 1), bar, sizes):
                lsn = rec.commit.lsn
                n += 1
                lo = lsn if lo is None else lo
                hi = lsn
                if state is not None and lsn > state.lsn:
                    if lsn != state.lsn + 1:
                        broken = f"LSNs {state.lsn + 1}..{lsn - 1} unreadable"
                        state = None
                    else:
                        try:
                            journal.apply(state, rec.commit, chain=rec.chain, timeline=rec.timeline,
                                          blobs=rec.blobs)
                        except (journal.OwnershipError, journal.JournalCorrupt) as exc:
                            rep.problem("ownership", str(exc), rec.segment, rec.offset, lsn)
                            broken = f"stopped at LSN {lsn}"
                            state = None
                if lsn in children:
                    for c in children[lsn]:
                        starts[c] = (state.copy() if state is not None else None, rec.chain)
                if lsn in cut_here and state is not None:
                    for e in cut_here[lsn]:
                        cut = loaded.get(lsn) or read_cut(e["path"])
                        why = _differs(cut.state, state)
                        if why:
                            rep.problem("cut", f"{e['name']}: does not match the journal at LSN {lsn}: {why}",
                                        None, None, lsn)
                            e["status"], e["reason"] = "invalid", f"does not match the journal: {why}"
            for x, cs in children.items():
                for c in cs:
                    if c not in starts:
                        rep.problem("branch", f"timeline {c} branches at LSN {x}, but timeline {t} "
                                    f"ends at LSN {hi}", tls[c].segments[0].name, 0, x)
                        starts[c] = (None, None)
            span = f"LSN {lo}..{hi}, {n} commit(s)" if n else "no commits"
            role = "active" if t in active_limit else "dead branch"
            ok_frames = not any(p.kind != "torn" and p.segment in {s.name for s in tl.segments}
                                for p in reader.problems)
            rep.check("frames, checksums, chain, LSNs", f"timeline {t} ({role})", ok_frames, span)
            if starts[t][0] is not None or state is not None:
                rep.check("ownership rules", f"timeline {t} ({role})", broken is None,
                          "ok" if broken is None else broken)
            else:
                rep.check("ownership rules", f"timeline {t} ({role})", None,
                          "not checked: the state at its branch point is unknown (damage or retired "
                          "segments before it)")
            if lineage and t == lineage[-1].timeline:
                end_state = state
    finally:
        bar.close()
    for p in unique_problems(reader):
        if p.kind == "torn":
            rep.problem("torn", f"{p.message.removeprefix('torn tail: ')} ({p.length} bytes never "
                        "acknowledged; the writer cuts it off when it opens the journal)", p.segment,
                        p.offset, p.lsn, warn=True)
        else:
            rep.problem(p.kind, p.message + f" ({p.length} bytes)", p.segment, p.offset, p.lsn)
    for e in cuts:
        target = e["name"]
        if e["status"] == "valid":
            rep.check("cut: checks 1-8 and content", target, True, f"LSN {e['lsn']}")
        elif e["status"] in ("stale", "incomplete"):
            rep.check(f"cut ({e['status']})", target, None, e["reason"])
            rep.problem("cut", f"{target}: {e['status']}: {e['reason']}", warn=True)
        else:
            rep.check("cut: checks 1-8 and content", target, False, e["reason"])
            if not any(p.kind == "cut" and p.message.startswith(target) for p in rep.problems):
                rep.problem("cut", f"{target}: {e['reason']}", None, None, e["lsn"])
    for name in sorted(os.listdir(path)):
        if name.endswith(".wal.zst.tmp"):
            rep.problem("leftover", f"{name}: temporary archive of a compaction that crashed", name,
                        None, None, warn=True)
    if end_state is not None:
        latest = end_state.latest_committed_checkpoint()
        damaged = [p for p in reader.problems if p.kind != "torn"]
        if latest is None:
            rep.check("restore point", "latest committed checkpoint", True,
                      "none committed: restore starts empty")
        else:
            step, lsn = latest
            base = next((e for e in cuts if e["status"] == "valid" and e["lsn"] <= lsn), None)
            rep.check("restore point", "latest committed checkpoint", not damaged,
                      f"step {step} at LSN {lsn}, from " + (f"cut {base['name']} + tail" if base else
                                                            "the journal from LSN 1"))
    elif lineage:
        rep.check("restore point", "latest committed checkpoint", False,
                  "the active history could not be folded to its end")
    return rep


def _verify_cut(path: str) -> VerifyReport:
    rep = _Report(path)
    e = check_one_cut(path)
    ok = e["status"] == "valid"
    rep.check("cut: checks 1-8" if e["check"] != 8 or ok else "cut: anchor", e["name"], ok,
              e["reason"] or f"LSN {e['lsn']}")
    if not ok:
        rep.problem("cut", f"{e['name']}: {e['status']}: {e['reason']}", None, None, e["lsn"])
    return rep
