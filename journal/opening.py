"""Opening a journal for writing: recovery and repair (like etcd's `repair.go`), a part of
`Journal`.

The open reads the history on disk strictly (`Reader(path, "strict")`), copies every torn tail
aside into `torn/` and cuts it off, cuts off the zeros a crash left after a preallocated
segment's last frame, removes what crashes left that is provably garbage (`journal.leftovers`),
and sets a damaged segment that a cut covers aside into `damaged/` (`journal.set_aside`). Then
the state comes from the newest state checkpoint on the active history with the commits after
it folded on, or from a resume plan (`journal.resume`): the history continues at its LSN, a
new branch when that is below the end.
"""

from __future__ import annotations

import os
import secrets
import shlex

from . import format as fmt
from . import layout, leftovers, locks, set_aside, state_file
from .errors import JournalCorrupt, JournalError, StateFileCorrupt, io_step
from .kinds import KIND_OF
from .rules import Mark
from .ever import group_mark_top, max_group_id
from .fold import apply
from .state import State
from .reader import Reader
from .resume import ResumePlan
from .segments import SegmentPlan, remove_prepared


def check_journal_dir(path: str) -> None:
    """Refuse a path that is not a journal directory, an empty one or a missing one."""
    kind, entries = layout.dir_kind(path)
    if kind is layout.DirKind.NOT_A_DIRECTORY:
        raise JournalError(f"journal path {path} is not a directory: a journal must be a directory "
                           "(give a new or empty directory, or an existing journal)")
    if kind is layout.DirKind.CUT:
        raise JournalError(f"{path} is a cut directory (it holds {layout.MANIFEST_NAME} or a cut "
                           "file), not a journal: restore it with state = replay.restore(path) and "
                           "resume into a journal directory, Journal.open(journal_dir, resume=state)")
    if kind is layout.DirKind.FOREIGN:
        raise JournalError(f"{path} is neither a journal nor empty (it holds "
                           f"{layout.describe_entries(entries)}, none of them a segment, "
                           f"{layout.LOCK_NAME}, {layout.TORN_DIR}/ or {layout.SNAPSHOTS_DIR}/): "
                           "choose a new or empty directory for the journal")


class Opening:
    """The open of `Journal`: recover, repair, and choose the segment commits go to next."""

    def _remove_leftovers(self) -> None:
        """Remove what crashes left that is provably garbage (see `leftovers`): torn/ duplicates
        and unpublished segments always (the writer lock is held), a crashed compaction's files only when no compaction
        runs now (the compaction lock is free)."""
        with io_step("remove duplicate torn-tail copies", os.path.join(self.path, layout.TORN_DIR)):
            leftovers.remove_torn_garbage(self.fs, self.path)
        prepared = os.path.join(self.path, layout.PREPARED_NAME)
        with io_step("remove the prepared next segment a crash left", prepared):
            remove_prepared(self.fs, self.path)
        with io_step("remove the unpublished segment of a resume that did not finish", self.path):
            leftovers.remove_unpublished(self.fs, self.path)
        fd = locks.try_compaction_lock(self.path)
        if fd is None:
            return
        try:
            with io_step("remove what a crashed compaction left", self.path):
                leftovers.remove_compaction_leftovers(self.fs, self.path)
        finally:
            os.close(fd)

    def _recover(self, resume: ResumePlan | State | None) -> None:
        """Recover the history on disk (`_recover_history`); damage in a segment a cut covers is
        set aside and the recovery runs again (each round moves a segment out: it ends)."""
        plan = ResumePlan.of(resume) if resume is not None else None
        while True:
            try:
                self._recover_history(plan)
                return
            except JournalCorrupt as exc:
                if exc.segment is None or not self._set_aside(exc, plan):
                    raise JournalCorrupt(f"journal {self.path}: {exc}. {_continue_elsewhere(self.path)}",
                                         segment=exc.segment, offset=exc.offset, lsn=exc.lsn) from exc

    def _set_aside(self, damage: JournalCorrupt, plan: ResumePlan | None) -> bool:
        """Move the segment `damage` names into `damaged/` when the newest state checkpoint on
        the active history (and the resume point, if any) covers it, with the history before
        it (`journal.set_aside`); whether it moved. The open then starts from that state file."""
        reader = Reader(self.path, "salvage")
        lineage = reader.lineage() if reader.timelines else []
        if not lineage:
            return False
        state = self._checkpoint_state(reader, lineage, lineage[0].segments[0].first_lsn)
        if state is None:
            return False
        covered = set_aside.covered_segments(
            reader, damage.segment, state.lsn if plan is None else min(state.lsn, plan.fold_state.lsn))
        if not covered:
            return False
        moved = set_aside.move_aside(self.fs, self.path, covered)
        older = [os.path.basename(p) for p in moved[:-1]]
        self._set_aside_warnings.append(
            f"journal {self.path}: segment {damage.segment} is damaged ({damage}); the cut at LSN "
            f"{state.lsn} covers it, so it was moved to {moved[-1]}"
            + (f", with the {len(older)} older segment(s) of the history before it ("
               f"{', '.join(older)}), so that the history on disk starts after it" if older else "")
            + ". Nothing was deleted; the journal goes on from the cut's state")
        return True

    def _recover_history(self, plan: ResumePlan | None) -> None:
        self._refuse_damaged_resume(plan)
        reader = Reader(self.path, "strict")
        self._repair_torn(reader)
        lineage = reader.lineage() if reader.timelines else []
        first_lsn = lineage[0].segments[0].first_lsn if lineage else 1
        self.run_id = reader.run_id or (plan.run_id if plan else None) or secrets.token_bytes(16)
        self.timeline = lineage[-1].timeline if lineage else 1
        first_commit = list(plan.first_commit) if plan is not None else []
        if plan is None:
            state, end_lsn, end_blobs = self._fold_on_disk(reader, lineage, first_lsn)
        else:
            end_lsn, end_blobs = self._check_resume_point(reader, lineage, first_lsn, plan.fold_state)
            state = plan.fold_state.copy()
            if state.lsn < end_lsn and _rewrites_tail(reader, state, first_commit):
                first_commit = []  # the tail holds it already: continue the timeline at its end
        # ids are never reused, not even those allocated on a dead tail or counted by a segment's
        # mark (a commit folded before a rotation planned the segment, never made durable); the
        # fold of a single timeline has seen every other id it allocated
        top_gid = max_group_id(reader) if plan is not None or len(reader.timelines) > 1 else group_mark_top(reader)
        state.next_group_id = max(state.next_group_id, top_gid + 1, plan.group_id_floor if plan else 0)
        branching = plan is not None and (state.lsn < end_lsn or not lineage and state.lsn > 0)
        if plan is not None and plan.restored is not None and (first_commit or branching):
            first_commit.append(plan.restored)
        segment = self._open_segment(reader, lineage, state, end_lsn, end_blobs, branching)
        self._state = state
        self._segment = self._files.active = segment
        self._durable_lsn = state.lsn
        self._written_chain = state.chain
        if plan is not None:
            point = plan.fold_state.lsn  # where the plan's state is (`state` may have gone on)
            if plan.write_base_cut is not None and point > 0 and (not lineage or point == first_lsn - 1):
                plan.write_base_cut(self.path, self.fs)  # the history on disk starts after it
            if first_commit:
                self._commit(first_commit, plan.first_commit_blobs)
        self._open_lsn = self._state.lsn
        if segment.file is not None and segment.file.path != segment.path:
            self._files.publish(segment)

    def _refuse_damaged_resume(self, plan: ResumePlan | None) -> None:
        """JournalCorrupt when the plan was restored past damage in a segment still here."""
        for name in plan.damaged_segments if plan is not None else ():
            if os.path.exists(os.path.join(self.path, name)):
                raise JournalCorrupt(f"{name}: the state to resume from was restored past damage in "
                                     "this segment (its state does not need the damaged frames, but "
                                     "the history here cannot be read through them)", segment=name)

    def _fold_on_disk(self, reader: Reader, lineage: list, first_lsn: int) -> tuple[State, int, dict]:
        """The state at the end of the history on disk (an open without `resume=`): the newest
        state checkpoint on the active history (`_checkpoint_state`) with the commits after it
        folded on, else the fold from LSN 1; noting whether it continues past the latest
        committed checkpoint (`_forgotten_resume`)."""
        state = self._checkpoint_state(reader, lineage, first_lsn)
        if state is None and first_lsn > 1:
            raise JournalError(
                f"journal {self.path}: the segments before LSN {first_lsn} were retired and no cut "
                f"under {layout.SNAPSHOTS_DIR}/ holds a usable state file at or after LSN "
                f"{first_lsn - 1}; open it with resume=replay.restore(path) so the state comes "
                "from a cut")
        state = state or State()
        start = state.lsn
        blobs, last_ownership_lsn = self._fold_tail(reader, state)
        if blobs is None:  # nothing after the checkpoint state: its segment's table
            blobs = self._history_end(reader, lineage)[1] if lineage else {}
        latest = state.latest_committed_checkpoint()
        begun = latest[1] if latest is not None else 0
        if last_ownership_lsn <= begun < start:  # the commits (begun, start] are in the state
            last_ownership_lsn = max((rec.commit.lsn for rec in reader.records(
                start_lsn=begun + 1, stop_lsn=start) if _holds_ownership(rec)), default=0)
        self._open_warning = self._forgotten_resume(state, last_ownership_lsn)
        return state, state.lsn, blobs

    @staticmethod
    def _fold_tail(reader: Reader, state: State) -> tuple[dict | None, int]:
        """Fold the commits after `state` onto it; (blob table of the last one's segment, None
        when there is none; LSN of the last commit holding an event other than a checkpoint
        marker, 0 when none). The first commit must continue `state`: its LSN, and its
        segment's chain seed when it is that segment's first commit."""
        blobs, last_ownership_lsn, first = None, 0, True
        for rec in reader.records(start_lsn=state.lsn + 1):
            if first and state.lsn > 0:
                _check_continues(reader, rec, state)
            first = False
            apply(state, rec.commit, chain=rec.chain, timeline=rec.timeline, blobs=rec.blobs)
            blobs = rec.blobs
            if _holds_ownership(rec):
                last_ownership_lsn = rec.commit.lsn
        return blobs, last_ownership_lsn

    def _checkpoint_state(self, reader: Reader, lineage: list, first_lsn: int) -> State | None:
        """The newest state checkpoint (a cut's state file, `journal.state_file`) that is a
        point of the active history, or None. A file that does not read, does not verify or is
        not on the history (another run, a dead branch, LSNs written again after a lost tail)
        is passed over for the next older one: never a wrong state."""
        if not lineage:
            return None
        for path in state_file.candidates(self.path):
            try:
                state, run_id = state_file.read(path)
            except (OSError, StateFileCorrupt):
                continue
            if run_id == reader.run_id and self._on_history(reader, lineage, first_lsn, state.lsn,
                                                            state.chain, state.timeline):
                return state
        return None

    @staticmethod
    def _on_history(reader: Reader, lineage: list, first_lsn: int, lsn: int, chain: int,
                    timeline: int | None = None) -> bool:
        """Whether (LSN `lsn`, `chain`, written by `timeline` unless None) is a point of the
        active history: its commit at `lsn` has that chain, or `lsn` is just before the first
        commit on disk and that segment's seed is `chain`. Reads the one segment holding it."""
        if lsn == first_lsn - 1:
            return lineage[0].segments[0].header.chain_seed == chain
        for rec in reader.records(start_lsn=lsn, stop_lsn=lsn):
            return rec.chain == chain and (timeline is None or rec.timeline == timeline)
        return False

    @staticmethod
    def _history_end(reader: Reader, lineage: list) -> tuple[int, dict]:
        """(LSN, blob table of its segment) of the last commit of the active history, reading
        only the last segments of its newest timeline (back to the first holding a commit)."""
        tip = lineage[-1]
        for seg in reversed(tip.segments):
            last, at = None, reader.position_in(seg)  # its commits after a cut's position will do
            for last in reader.records(start_lsn=at.lsn if at is not None else seg.first_lsn):
                pass
            if last is not None:
                return last.commit.lsn, last.blobs
        return tip.branch_lsn, {}

    def _check_resume_point(self, reader: Reader, lineage: list, first_lsn: int,
                            state: State) -> tuple[int, dict]:
        """(end LSN, blob table of its segment) of the history on disk; JournalError unless
        the resume point's anchor lies on it."""
        if not lineage:
            return state.lsn, {}
        end_lsn, end_blobs = self._history_end(reader, lineage)
        if state.lsn > end_lsn or not self._on_history(reader, lineage, first_lsn, state.lsn, state.chain):
            raise JournalError(
                f"resume point (LSN {state.lsn}, chain {state.chain:#010x}) is not on the active "
                f"history of journal {self.path} (LSNs {first_lsn}..{end_lsn}): the state comes "
                "from another run or branch")
        return end_lsn, end_blobs

    def _open_segment(self, reader: Reader, lineage: list, state: State, end_lsn: int,
                      end_blobs: dict, branching: bool) -> SegmentPlan:
        """The segment commits go to next: a new branch's first segment (unpublished until its
        first commit is durable, see `SegmentFiles.publish`), the last segment of the history, or the
        first segment of a new journal."""
        if branching:
            # the rest of the active history becomes a dead tail. The branch's parent is the
            # timeline of the lineage that holds commit state.lsn, which is not the newest one
            # when the resume point is before the newest branch point (restore(step=S) of an
            # older checkpoint): a child of the newest timeline would make readers follow the
            # old timeline past the resume point.
            parent = next((tl.timeline for tl in reversed(lineage) if tl.branch_lsn < state.lsn),
                          lineage[0].timeline) if lineage else 0
            self.timeline = max(max(reader.timelines) if lineage else state.timeline,
                                self._timeline_floor) + 1
            return self._files.create(fmt.SegmentHeader(
                self.run_id, self.timeline, parent, state.lsn + 1, state.chain,
                fmt.group_mark(state.next_group_id)), publish=False, opening=True)
        if lineage:
            last = lineage[-1].segments[-1]
            f = self.fs.open_append(last.path)
            # `end_blobs` is the table of the segment holding the last commit; when the last
            # segment has no commit yet (crash right after a rotation) that is an earlier
            # segment, and claiming its blobs would leave the next `taken` without them
            stored = set(end_blobs) if end_lsn >= last.first_lsn else set()
            return SegmentPlan(last.header, last.path, f.offset, stored, f)
        # a new history; a resume at LSN 0 from a replica's history starts above its timelines
        self.timeline = self._timeline_floor + 1
        return self._files.create(fmt.SegmentHeader(self.run_id, self.timeline, 0, 1, 0,
                                                      fmt.group_mark(state.next_group_id)), opening=True)

    def _forgotten_resume(self, state: State, last_ownership_lsn: int) -> str | None:
        """The warning for an open without `resume=` that continues ownership history a restore
        would drop: a commit after the latest committed checkpoint's `checkpoint_begun` (LSN B, 0
        if none) holding an event that moves groups. Commits after B that hold only checkpoint
        markers (the `checkpoint_committed` of a clean shutdown) or an identity do not count."""
        latest = state.latest_committed_checkpoint()
        begun = latest[1] if latest is not None else 0
        if last_ownership_lsn <= begun:
            return None
        where = (f"the latest committed checkpoint (step {latest[0]}, checkpoint_begun at LSN "
                 f"{begun})" if latest is not None else "LSN 0 (no checkpoint was ever committed)")
        return (f"journal {self.path}: opened without resume=, but its history continues past {where} "
                f"with ownership events up to LSN {state.lsn} (the end); they are continued as they "
                "are. After a crash, restore first: state = replay.restore(path); "
                "Journal.open(path, resume=state)")

    def _repair_torn(self, reader: Reader) -> None:
        """Copy every torn tail aside into `torn/`, then cut it off (never acknowledged bytes):
        left in place, the writer would append after it and the next open would see a bad
        frame followed by good ones (JournalCorrupt). Cut off the zeros after the last frame of a
        preallocated segment too (a crash left them; they hold nothing, so nothing is copied):
        the segment is continued at its end, and zero-filled again as it grows."""
        for torn in reader.torn_tails():
            self._cut_torn(torn)
        for tail in reader.zero_tails.values():
            self._truncate_segment(tail.segment, tail.offset, "the zero-filled rest")

    def _cut_torn(self, torn) -> None:
        seg = torn.segment
        if seg.archived:
            return
        with open(seg.path, "rb") as f:
            f.seek(torn.offset)
            tail = f.read(torn.size - torn.offset)
        with io_step("copy the torn tail aside into torn/ from", seg.path):
            leftovers.copy_torn_tail(self.fs, self.path, seg.name, torn.offset, tail)
        if torn.offset == 0:
            # a torn header keeps the segment out of the reader's lists: only the file goes
            with io_step("remove the torn segment", seg.path):
                self.fs.unlink(seg.path)
                self.fs.fsync_dir(self.path)
        else:
            self._truncate_segment(seg, torn.offset, "the torn tail")

    def _truncate_segment(self, seg, offset: int, what: str) -> None:
        """Cut segment `seg` at `offset` (fsynced): `what` is what goes, for the error."""
        with io_step(f"cut off {what} at offset {offset} of", seg.path):
            f = self.fs.open_append(seg.path)
            try:
                f.truncate(offset)
                f.sync()
            finally:
                f.close()
        seg.size = offset


def _holds_ownership(rec) -> bool:
    """Whether a record's commit holds an event that moves groups (not a checkpoint marker nor
    an identity: those declare no `to` owner)."""
    return any(KIND_OF[type(ev)].to is not None for ev in rec.commit.events)


def _rewrites_tail(reader: Reader, state: State, first_commit: list) -> bool:
    """Whether the commits after `state` (what a branch at it would leave dead) hold nothing but
    the `checkpoint_committed` markers that `first_commit` (the resume's) would write again, and
    it nothing else: then they are folded onto `state`, whose history goes on at its end as if
    the resume had branched and written them (same state, same markers, no dead tail, no new
    segment). A restart of a run whose last commit marked its last checkpoint committed."""
    if not _only_committed_marks(first_commit):
        return False
    want = sorted(ev.step for ev in first_commit)
    tail, marks = [], []
    for rec in reader.records(start_lsn=state.lsn + 1):
        if not _only_committed_marks(rec.commit.events):
            return False
        marks += [ev.step for ev in rec.commit.events]
        if len(marks) > len(want):
            return False
        tail.append(rec)
    if sorted(marks) != want:
        return False
    for rec in tail:
        apply(state, rec.commit, chain=rec.chain, timeline=rec.timeline, blobs=rec.blobs)
    return True


def _check_continues(reader: Reader, rec, state: State) -> None:
    """JournalCorrupt unless `rec` is the commit after `state` on its history: LSN state.lsn + 1,
    and a segment seed equal to the state's chain when it opens its segment."""
    seg = next(s for s in reader.segments if s.name == rec.segment)
    if rec.commit.lsn != state.lsn + 1:
        raise JournalCorrupt(f"{seg.name}: the history after the state checkpoint at LSN {state.lsn} "
                             f"resumes at LSN {rec.commit.lsn} (a segment is missing)",
                             segment=seg.name, offset=rec.offset, lsn=state.lsn + 1)
    if rec.commit.lsn == seg.first_lsn and seg.header.chain_seed != state.chain:
        raise JournalCorrupt(f"{seg.name}: segment chain seed {seg.header.chain_seed:#010x} does not "
                             f"continue the chain {state.chain:#010x} at LSN {state.lsn}",
                             segment=seg.name, offset=0, lsn=rec.commit.lsn)


def _continue_elsewhere(path: str) -> str:
    """How to go on when the history on disk is damaged: `replay.rescue` continues the run in a
    fresh directory from the newest point whose state does not need the damaged frames."""
    return ("This history cannot be continued in place. To continue the run in a fresh directory "
            f"from the newest checkpoint the damage does not touch: `journal-inspect rescue "
            f"{shlex.quote(path)} NEWDIR` (or replay.rescue({path!r}, NEWDIR)), which prints how "
            "the run goes on: for a trainer on replay.Session, the commands that put NEWDIR in this "
            "directory's place, then the same Session.open; on the low-level API, state = "
            "replay.restore(NEWDIR); Journal.open(NEWDIR, resume=state). Keep this directory for forensics")


def _only_committed_marks(events) -> bool:
    """Whether every event of `events` marks a checkpoint committed."""
    return all(KIND_OF[type(ev)].checkpoint is Mark.COMMITTED for ev in events)
