"""The contract between a restore and the writer that continues the history from it.

`replay.restore` builds a `ResumePlan` (its `RecoveredState` is one); `Journal.open(path,
resume=plan)` writes it and knows nothing else about restores:

1. the history continues at `fold_state` (its LSN, chain and timeline are the anchor that
   must lie on the journal's active history; below the end, a new branch starts there);
2. when the directory holds no history up to that point (a fresh directory, or a head that
   retention removed), `write_base_cut(journal_path, fs)` first puts a cut of the state into
   `<journal>/snapshots/`, so the journal can be restored and compacted again;
3. the resume's first commit is `first_commit` (re-marked checkpoints, salvaged groups and
   rollouts, raised attempts, demoted and adopted groups under their new ids), so the journal
   says exactly what the trainer was handed; `first_commit_blobs` holds the blobs a loader
   state in it references (digest -> bytes);
   `restored`, the restore's own record (`events.Restored`), is added to that first commit
   when it writes one or branches (a restore that abandoned a dead tail), so every restore
   that changed the history says what it decided;
4. group ids from `group_id_floor` up are free: every id below it was allocated by a history
   the restore read (a bucket's, which the directory may not hold), dead tails included. The
   writer allocates above it and above every id on its own disk;
5. `damaged_segments` names the segments whose damage the restore read past (its state does
   not need their damaged frames): while one of them is still in the directory, the history
   there cannot be continued in place (`JournalCorrupt`; `replay.rescue` continues it in a
   fresh directory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .events import Restored
from .state import State
from .vfs import OsFileSystem


@dataclass(kw_only=True)
class ResumePlan:
    fold_state: State = field(default_factory=State)  # where the history continues
    run_id: bytes | None = None                # the run the state belongs to
    first_commit: list = field(default_factory=list)
    first_commit_blobs: dict[bytes, bytes] = field(default_factory=dict)  # see 3. above
    write_base_cut: Callable[[str, OsFileSystem], object] | None = None
    base_cut: str | None = None                # the cut the state was read from, for messages
    group_id_floor: int = 0                    # ids below it were allocated (see 4. above)
    damaged_segments: list[str] = field(default_factory=list)  # see 5. above
    restored: Restored | None = None           # see 3. above

    @classmethod
    def of(cls, resume: "ResumePlan | State") -> "ResumePlan":
        """The plan for `Journal.open(resume=...)`: a plan as it is, or a bare fold state
        (continue at it, with nothing else to write)."""
        if isinstance(resume, ResumePlan):
            return resume
        if isinstance(resume, State):
            return cls(fold_state=resume)
        raise TypeError(f"resume= takes a replay.RecoveredState (a journal.ResumePlan) or a "
                        f"journal.State, not {type(resume).__name__}")
