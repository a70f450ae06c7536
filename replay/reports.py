"""What `replay.verify` and `replay.audit` return: typed reports, and the error for a path
that holds neither a journal nor a cut.

A report is data; `journal-inspect` prints a rendering of it, and `--json` is
`report.to_dict()` serialised. `clean` is derived, never stored, so it cannot
disagree with the findings.
"""

from __future__ import annotations

from typing import Any

import msgspec

from snapshot import RestoreError


class NotAJournal(RestoreError):
    """The path is neither a journal directory nor a cut directory (or does not exist)."""


class Check(msgspec.Struct):
    check: str    # which check ("frames, checksums, chain, LSNs", "ownership rules", ...)
    target: str   # what it ran on (a timeline, a cut, ...)
    result: str   # "ok", "warn" or "FAIL"
    detail: str = ""


class Finding(msgspec.Struct):
    kind: str     # "torn" (a torn tail), "damaged", "chain", "gap", "branch", "ownership", "cut", "leftover"
    message: str  # says what and where, without repeating `kind`
    segment: str | None = None
    offset: int | None = None
    lsn: int | None = None


class VerifyReport(msgspec.Struct):
    path: str
    checks: list[Check] = []
    problems: list[Finding] = []   # each one fails the verification
    warnings: list[Finding] = []   # torn tails, stale cuts, leftovers: restore copes with them

    @property
    def clean(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "clean": self.clean, "checks": msgspec.to_builtins(self.checks),
                "problems": msgspec.to_builtins(self.problems),
                "warnings": msgspec.to_builtins(self.warnings)}


class AuditReport(msgspec.Struct):
    """The exactly-once audit of the active history (the keys of each part: `replay.audit`)."""

    path: str
    mode: str
    active: dict            # timeline, first_lsn, end_lsn, base_lsn and base_cut (the cut counted before first_lsn)
    epochs: list[dict]      # per loader epoch: rows taken, trained once / more, lost, dropped, ...
    totals: dict            # the epochs' counts summed
    groups: dict            # groups taken, trained, dropped on the active history
    dead_tails: list[dict]  # per restore: the work its dead tail held
    rollouts: dict          # sealed, regenerated, failed, abandoned_on_restore, groups_trained, violations
    reader_problems: list[dict]   # damage met while reading (torn tails included)
    skipped_commits: list[dict]   # commits salvage could not apply
    not_covered: list[str]  # what the audit could not read: never clean while this is non-empty
    # the groups live at the end of the active history (`replay.audit`): groups, by_owner,
    # sealed_not_finished
    in_flight: dict = {}

    @property
    def drained(self) -> bool:
        """Whether no group is in flight at the end: every group taken was trained or dropped
        (a spare in the reserve is in flight: its row was taken and never trained)."""
        return self.in_flight.get("groups", 0) == 0

    @property
    def problems(self) -> int:
        """Rows trained more than once, rows lost and rollout violations."""
        return (self.totals["trained_more_count"] + self.totals["lost_count"]
                + len(self.rollouts["violations"]))

    @property
    def complete(self) -> bool:
        return not self.not_covered

    @property
    def clean(self) -> bool:
        return self.complete and self.problems == 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "mode": self.mode, "active": self.active, "clean": self.clean,
                "complete": self.complete, "drained": self.drained,
                **{f: getattr(self, f) for f in self.__struct_fields__[3:]}}
