"""`verify(path)`: the whole chain of checks over a journal (or a cut) and its cuts, in one pass
per timeline; returns a `VerifyReport`.

1. Every segment header (magic, version, checksum, run id, name) - `Reader`.
2. Every frame of every timeline: checksum, chain link, LSN continuity, segment
   seeds (read as salvage reads, so all damage is found, not just the first).
3. Each branch continues its parent's history: its first segment's chain seed
   is the chain after its branch LSN.
4. The ownership rules (the journal's own fold) over the active history and
   every dead tail: each timeline's own commits are folded once, starting from
   a copy of the state at its branch point taken while its parent was folded.
5. Every cut: every check of the chain (`snapshot.checks.CHECKS`, via `cut_status`), and a valid cut's live
   groups, counts and checkpoints equal the fold at its LSN. Each cut is read once; one on the
   active history is read when the fold reaches its LSN and anchored by the record there.
6. The restore point (latest committed checkpoint) is on an undamaged part of
   the active history.

A torn tail (never acknowledged), a stale cut and a leftover temporary
directory are warnings; everything else is a problem (exit 1). Rehydration
needs the dataset and is restore's.
"""

from __future__ import annotations

import os

import journal
from journal import Owner, Reader, State, history
from journal.reader import ProblemKind
from snapshot import Cut
from snapshot.checks import CHECKS
from journal.layout import cut_dirs

from .cut_status import check_one_cut, classify_cut, cut_entry, is_cut, is_journal, list_cuts
from .reports import Check, Finding, NotAJournal, VerifyReport
from .source import Source
from .inspection import Progress, no_progress, span_bytes, tracked, unique_problems

CUT_CHECKS = f"checks 1-{len(CHECKS)}"  # the whole chain of a cut, as the labels name it


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


def verify(path: str, *, progress: Progress = no_progress,
           replica_options: dict | None = None) -> VerifyReport:
    """Every check restore relies on, over the journal or cut directory at `path`; raises
    `NotAJournal` when it is neither. `progress(label, total_bytes)` makes the scan's bar.
    A replica URL (with `replica_options`) is verified from the bucket alone."""
    source = Source(path, replica_options)
    if source.location is not None:
        return source.report(verify, at_end=False, progress=progress)
    full = os.path.abspath(path)
    if is_cut(full):
        return _verify_cut(full)
    if not os.path.isdir(full) or not is_journal(full):
        raise NotAJournal(f"{path}: not a journal directory (no segment files *.wal or *.wal.zst, "
                          "no snapshots/) and not a cut directory (no MANIFEST.json)")
    return _verify_journal(full, progress)


def _verify_journal(path: str, progress: Progress) -> VerifyReport:
    v = _JournalVerification(path)
    roots = v.plan_branches()
    v.start_states(roots)
    v.plan_cut_checks()
    end_state = v.scan(roots, progress)
    v.cuts = list_cuts(path, v.reader, find_restore=False, classified=v.classified)
    v.report_damage()
    v.report_cuts()
    v.report_leftovers()
    v.check_restore_point(end_state)
    return v.rep


class _JournalVerification:
    """The state shared by the steps of one journal's verification."""

    def __init__(self, path: str):
        self.path = path
        self.rep = _Report(path)
        self.reader = reader = Reader(path, "salvage")  # finds every damage, not only the first
        self.tls = reader.timelines
        segs = reader.segments
        self.rep.check("segment headers", f"{len(segs)} segment(s), {sum(s.archived for s in segs)} archived",
                       not any(p.kind is not ProblemKind.TORN for p in reader.problems))
        self.spans = history.spans(self.tls)
        self.lineage = [s.timeline for s in self.spans]
        self.active_limit = {s.timeline.timeline: s.limit for s in self.spans}
        # Each cut is read once: a base cut when its timeline's start state is chosen, a cut on
        # the active history when the scan reaches its LSN (anchored by the record there, its
        # state compared with the fold's), every other one with the rest after the scan.
        self.cut_dirs = cut_dirs(path)
        self.classified: dict[str, dict] = {}  # cut path -> its entry, once read
        self.cuts: list[dict] = []            # every cut's entry, once the scan is done
        self.wanted: dict[int, dict[int, list[int]]] = {}  # owner timeline -> LSN -> children
        self.compare: dict[int, dict[int, list[tuple]]] = {}  # timeline -> LSN -> cut dirs to check
        self.starts: dict[int, tuple[State | None, int | None]] = {}  # timeline -> (state, chain)

    def plan_branches(self) -> list[int]:
        """Where each child timeline starts (into `wanted`); returns the roots."""
        tls, roots = self.tls, []
        for t, tl in sorted(tls.items()):
            if not tl.parent or tl.parent not in tls:
                roots.append(t)
                continue
            o = history.holder(tls, tl.parent, tl.branch_lsn)
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
                self.rep.problem("branch", f"timeline {t} branches at LSN {tl.branch_lsn} from timeline "
                                 f"{tl.parent}, whose history does not hold that LSN", tl.segments[0].name,
                                 0, tl.branch_lsn)
                continue
            self.wanted.setdefault(o, {}).setdefault(tl.branch_lsn, []).append(t)
        return roots

    def plan_cut_checks(self) -> None:
        """Each cut not read yet whose LSN the active history holds is checked while the active
        timeline holding that LSN is folded."""
        for cut in self.cut_dirs:
            lsn, _timeline, cut_path = cut
            owner = next((s.timeline.timeline for s in self.spans if s.holds(lsn)), None)
            if owner is not None and cut_path not in self.classified:
                self.compare.setdefault(owner, {}).setdefault(lsn, []).append(cut)

    def start_states(self, roots: list[int]) -> None:
        """The state each root timeline starts from: empty, a cut's, or unknown."""
        on_lineage = {tl.timeline for tl in self.lineage}
        for t in roots:
            tl = self.tls[t]
            if tl.branch_lsn == 0:
                self.starts[t] = (State(), 0)
            elif t in on_lineage:
                base = self._base_cut(tl.branch_lsn)
                if base is None:
                    self.rep.check("ownership rules", f"timeline {t}", None,
                                   f"the segments before LSN {tl.branch_lsn + 1} were retired and no "
                                   "valid cut covers them: ownership not checked")
                    self.starts[t] = (None, None)
                else:
                    self.starts[t] = (base.state.copy(), None)
            else:
                self.starts[t] = (None, None)

    def _base_cut(self, branch_lsn: int) -> Cut | None:
        """The oldest valid cut at or after `branch_lsn` (read, oldest first, until one is)."""
        for lsn, timeline, cut_path in sorted(self.cut_dirs):
            if lsn < branch_lsn:
                continue
            e, cut = classify_cut(cut_path, self.reader, cut_entry(cut_path, lsn, timeline))
            self.classified[cut_path] = e
            if e["status"] == "valid" and e["lsn"] >= branch_lsn:
                return cut
        return None

    def scan(self, roots: list[int], progress: Progress) -> State | None:
        """Fold every timeline once; returns the state at the end of the active history."""
        reader, tls = self.reader, self.tls
        sizes = {s.name: s.size for s in reader.segments}
        scanned = set(roots).union(*(cs for by_lsn in self.wanted.values() for cs in by_lsn.values()))
        bar = progress("verify", sum(span_bytes(reader, t, tls[t].branch_lsn + 1) for t in scanned))
        end_state = None
        try:
            for t, tl in sorted(tls.items()):
                if t not in self.starts:
                    continue
                records = tracked(reader.timeline_records(t, start_lsn=tl.branch_lsn + 1), bar, sizes)
                state = self._scan_timeline(t, records)
                if self.lineage and t == self.lineage[-1].timeline:
                    end_state = state
        finally:
            bar.close()
        return end_state

    def _scan_timeline(self, t: int, records) -> State | None:
        """Fold timeline `t`'s own commits one by one (its children's start states and the cut
        comparisons are taken at given LSNs, and the frames are still counted after the fold
        stops at its first fault) and report it; returns the state at its end (None: stopped)."""
        rep, tl = self.rep, self.tls[t]
        state, seed_expected = self.starts[t]
        first_seg = tl.segments[0]
        if seed_expected is not None and first_seg.header.chain_seed != seed_expected:
            rep.problem(ProblemKind.CHAIN.value, f"timeline {t} does not continue its parent's chain at LSN "
                        f"{tl.branch_lsn} (seed {first_seg.header.chain_seed:#010x}, expected "
                        f"{seed_expected:#010x})", first_seg.name, 0, tl.branch_lsn)
        children = self.wanted.get(t, {})
        cut_here = self.compare.get(t, {})
        n, lo, hi = 0, None, None
        broken = None
        for rec in records:
            lsn = rec.commit.lsn
            n += 1
            lo = lsn if lo is None else lo
            hi = lsn
            if state is not None and lsn > state.lsn:
                # a gap is frames the salvage read skipped (reported as damage), not an ownership
                # fault, so it is told apart before the fold, which would refuse it too
                if lsn != state.lsn + 1:
                    broken = f"LSNs {state.lsn + 1}..{lsn - 1} unreadable"
                    state = None
                else:
                    try:
                        journal.fold.fold_records(state, (rec,))
                    except (journal.OwnershipError, journal.JournalCorrupt) as exc:
                        rep.problem("ownership", str(exc), rec.segment, rec.offset, lsn)
                        broken = f"stopped at LSN {lsn}"
                        state = None
            for c in children.get(lsn, ()):
                self.starts[c] = (state.copy() if state is not None else None, rec.chain)
            if lsn in cut_here:
                self._check_cuts(cut_here[lsn], rec, state)
        for x, cs in children.items():
            for c in cs:
                if c not in self.starts:
                    rep.problem("branch", f"timeline {c} branches at LSN {x}, but timeline {t} "
                                f"ends at LSN {hi}", self.tls[c].segments[0].name, 0, x)
                    self.starts[c] = (None, None)
        span = f"LSN {lo}..{hi}, {n} commit(s)" if n else "no commits"
        role = "active" if t in self.active_limit else "dead branch"
        names = {s.name for s in tl.segments}
        ok_frames = not any(p.kind is not ProblemKind.TORN and p.segment in names for p in self.reader.problems)
        rep.check("frames, checksums, chain, LSNs", f"timeline {t} ({role})", ok_frames, span)
        if self.starts[t][0] is not None or state is not None:
            rep.check("ownership rules", f"timeline {t} ({role})", broken is None,
                      "ok" if broken is None else broken)
        else:
            rep.check("ownership rules", f"timeline {t} ({role})", None,
                      "not checked: the state at its branch point is unknown (damage or retired "
                      "segments before it)")
        return state

    def _check_cuts(self, cuts: list[tuple], rec, state: State | None) -> None:
        """Read the cuts at `rec`'s LSN of the active history, anchor them by `rec`, and compare
        a valid one's state with the fold's there (when the fold got that far)."""
        lsn = rec.commit.lsn
        for cut_lsn, timeline, cut_path in cuts:
            e, cut = classify_cut(cut_path, self.reader, cut_entry(cut_path, cut_lsn, timeline),
                                  anchors={lsn: (rec.timeline, rec.chain)})
            self.classified[cut_path] = e
            if e["status"] != "valid" or state is None:
                continue
            why = _differs(cut.state, state)
            if why:
                self.rep.problem("cut", f"{e['name']}: does not match the journal at LSN {lsn}: {why}",
                                 None, None, lsn)
                e["status"], e["reason"] = "invalid", f"does not match the journal: {why}"

    def report_damage(self) -> None:
        for p in unique_problems(self.reader):
            if p.kind is ProblemKind.TORN:
                self.rep.problem(ProblemKind.TORN.value, f"{p.message.removeprefix('torn tail: ')} ({p.length} bytes "
                                 "never acknowledged; the writer cuts it off when it opens the journal)",
                                 p.segment, p.offset, p.lsn, warn=True)
            else:
                self.rep.problem(p.kind.value, p.message + f" ({p.length} bytes)", p.segment, p.offset, p.lsn)

    def report_cuts(self) -> None:
        rep = self.rep
        for e in self.cuts:
            target = e["name"]
            if e["status"] == "valid":
                rep.check(f"cut: {CUT_CHECKS} and content", target, True, f"LSN {e['lsn']}")
            elif e["status"] in ("stale", "incomplete"):
                rep.check(f"cut ({e['status']})", target, None, e["reason"])
                rep.problem("cut", f"{target}: {e['status']}: {e['reason']}", warn=True)
            else:
                rep.check(f"cut: {CUT_CHECKS} and content", target, False, e["reason"])
                if not any(p.kind == "cut" and p.message.startswith(target) for p in rep.problems):
                    rep.problem("cut", f"{target}: {e['reason']}", None, None, e["lsn"])

    def report_leftovers(self) -> None:
        for name in sorted(os.listdir(self.path)):
            if name.endswith(".wal.zst.tmp"):
                self.rep.problem("leftover", f"{name}: temporary archive of a compaction that crashed",
                                 name, None, None, warn=True)

    def check_restore_point(self, end_state: State | None) -> None:
        what = ("restore point", "latest committed checkpoint")
        if end_state is None:
            if self.lineage:
                self.rep.check(*what, False, "the active history could not be folded to its end")
            return
        latest = end_state.latest_committed_checkpoint()
        if latest is None:
            self.rep.check(*what, True, "none committed: restore starts empty")
            return
        step, lsn = latest
        damaged = any(p.kind is not ProblemKind.TORN for p in self.reader.problems)
        base = next((e for e in self.cuts if e["status"] == "valid" and e["lsn"] <= lsn), None)
        self.rep.check(*what, not damaged, f"step {step} at LSN {lsn}, from " + (
            f"cut {base['name']} + tail" if base else "the journal from LSN 1"))


def _verify_cut(path: str) -> VerifyReport:
    rep = _Report(path)
    e = check_one_cut(path)
    ok = e["status"] == "valid"
    anchor_only = e["check"] == CHECKS[-1].number and not ok
    rep.check("cut: anchor" if anchor_only else f"cut: {CUT_CHECKS}", e["name"], ok,
              e["reason"] or f"LSN {e['lsn']}")
    if not ok:
        rep.problem("cut", f"{e['name']}: {e['status']}: {e['reason']}", None, None, e["lsn"])
    return rep
