"""`rescue(source, into)`: continue a run in a fresh journal directory from the newest point the
source restores to.

The way on when a journal cannot be continued in place (`Journal.open` raises `JournalCorrupt`:
frames of its history are damaged). `restore` finds the newest point whose state does not need
the damaged frames (`snapshot.damaged`); the fresh directory is then opened with `resume=` that
state, as a resume on a fresh node does: a base cut of the state goes into its `snapshots/`
(with the row ledger, so it audits), then the resume's first commit. Group ids continue above
every id the source can have allocated, damaged frames and dead tails included. The source is
only read: keep it for forensics.
"""

from __future__ import annotations

import os
import shlex
import warnings
from dataclasses import dataclass, field

from journal import Journal, Reader
from journal.layout import DirKind, cut_dirs, dir_kind
from snapshot import DataPlane
from snapshot.damaged import group_id_ceiling

from .errors import DamagedJournalWarning
from .restore import journal_of_cut, restore


@dataclass
class RescueReport:
    """What `rescue` did."""

    source: str                  # the journal (or cut) restored
    into: str                    # the new journal directory
    lsn: int                     # the point restored, where the new history starts
    step: int | None             # its checkpoint step
    base_cut: str | None         # the cut the restore stood on
    seeded_cut: str | None       # the cut written into the new journal's snapshots/
    end_lsn: int                 # the new journal's last LSN (after the resume's first commit)
    group_id_floor: int          # the new journal allocates group ids from here on
    damage: list[str] = field(default_factory=list)   # damage passed over (not needed)
    skipped: list[str] = field(default_factory=list)  # cuts passed over, with the reason
    source_is_journal: bool = True  # the source is a journal directory (not a cut)

    def lines(self) -> list[str]:
        """The report as text, one line each."""
        base = f"the cut {self.base_cut}" if self.base_cut else "the journal's history from LSN 1"
        out = [f"rescued {self.source} into {self.into}",
               f"  restored LSN {self.lsn}" + (f", step {self.step}" if self.step is not None else
                                              " (no committed checkpoint)") + f", from {base}"]
        if self.damage:
            out.append("  damage passed over (the restored state does not need it):")
            out += [f"    {d}" for d in self.damage]
        if self.skipped:
            out.append("  cuts passed over:")
            out += [f"    {s}" for s in self.skipped]
        out.append(f"  new journal {self.into}: history up to LSN {self.end_lsn}"
                   + (f", base cut {self.seeded_cut}" if self.seeded_cut else "")
                   + f"; group ids from {self.group_id_floor}")
        return out + self.next_steps()

    def next_steps(self) -> list[str]:
        """How the run goes on from the new journal: for a trainer on `replay.Session`, the
        commands that put it in the source's place (the damaged one kept beside it), so that the
        trainer's own `Session.open` restores it; on the low-level API, the two calls."""
        step = f"step {self.step}" if self.step is not None else f"LSN {self.lsn}"
        out = ["next, for a trainer on replay.Session:"]
        if self.source_is_journal:
            out += ["  stop the trainer, then put the rescued journal in the damaged one's place (that one "
                    "is kept beside it):",
                    f"  mv {shlex.quote(self.source)} {shlex.quote(self.source + '.damaged')} && "
                    f"mv {shlex.quote(self.into)} {shlex.quote(self.source)}",
                    f"  and start the trainer as before: Session.open({self.source!r}, ...) with the same "
                    f"arguments restores {step}",
                    f"  (or, moving nothing: Session.open({self.into!r}, ...), your other arguments unchanged)"]
        else:
            out.append(f"  Session.open({self.into!r}, ...) with the trainer's other arguments restores {step}")
        out.append(f"next, on the low-level API: state = replay.restore({self.into!r}); "
                   f"Journal.open({self.into!r}, resume=state)")
        return out


def _check_into(source: str, into: str) -> None:
    """`into` must be a new or empty directory outside `source`."""
    if os.path.commonpath([source, into]) == source:
        raise ValueError(f"rescue into {into}: it is inside {source}; give a directory outside it")
    if os.path.lexists(into) and (not os.path.isdir(into) or os.listdir(into)):
        raise FileExistsError(f"rescue into {into}: it exists and is not an empty directory; give "
                              "a new or empty directory")


def rescue(source: str, into: str, *, at: str | int = "latest-checkpoint", step: int | None = None,
           data_plane: DataPlane | None = None, salvage: bool = False, sync: str = "always") -> RescueReport:
    """Continue the run of `source` (a journal directory, or a cut) in the new journal
    directory `into`, from the point `restore(source, at, step=...)` returns; the report says
    what was restored and what was passed over. `into` must not exist yet or be empty; a
    source that holds no history is `NothingToRestore`."""
    source, into = os.path.abspath(source), os.path.abspath(into)
    _check_into(source, into)
    with warnings.catch_warnings():  # the damage it warns of is in the report
        warnings.simplefilter("ignore", DamagedJournalWarning)
        state = restore(source, at, step=step, data_plane=data_plane, salvage=salvage, must_exist=True)
    is_cut = dir_kind(source)[0] is DirKind.CUT
    journal_dir = journal_of_cut(source) if is_cut else source
    if journal_dir is not None:  # ids above every id its histories can have allocated
        state.group_id_floor = max(state.group_id_floor, group_id_ceiling(Reader(journal_dir, "salvage")) + 1)
    with Journal.open(into, resume=state, sync=sync) as j:
        end = j.lsn
        floor = j.state_copy().next_group_id
    seeded = cut_dirs(into)
    return RescueReport(source, into, state.lsn, state.step, state.base_cut,
                        seeded[0][2] if seeded else None, end, floor, list(state.damage),
                        [f"{s.path}: {s.reason}" for s in state.skipped], source_is_journal=not is_cut)
