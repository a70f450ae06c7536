"""Journal events as flat rows: a JSON-ready dict per event and a one-line text form.

Used by `log`, `group` and `export`. A row names the commit (`lsn`, `timeline`,
`segment`, `offset`), the event's position in the commit (`index`), its `kind`,
the `groups` it names and the event's own fields. Bytes (fingerprints) are hex.

    {"lsn": 7, "timeline": 1, "segment": "...", "offset": 912, "index": 0,
     "kind": "taken", "groups": [4, 5],
     "rows": [{"group_id": 4, "idx": 40, "task_name": "math", "epoch": 0,
               "fingerprint": null}, ...], "loader_state": true}

Words: a *row* is a dataset row (idx, task, epoch, fingerprint: what `taken`
records); a *locator* is where a finished rollout, or a rollout's prefix
(`rollout_progress`), lies in the data plane (the strings `finished` records).
Text and JSON use them in these senses only.
"""

from __future__ import annotations

from journal import Record
from journal.kinds import KIND_OF

from .render import id_list


def groups_of(event) -> list[int]:
    """The group ids an event names (taken: the allocated ids; an event that moves no group, a
    checkpoint marker or the identity: none)."""
    return KIND_OF[type(event)].groups(event)


def names_group(event, gid: int) -> bool:
    return gid in KIND_OF[type(event)].groups(event)


def event_dict(rec: Record, index: int, event) -> dict:
    """The event's row: the commit's position, its own, its kind, the groups it names, and its
    kind's row of its fields (`Kind.row`)."""
    c, kind = rec.commit, KIND_OF[type(event)]
    d = {"lsn": c.lsn, "timeline": rec.timeline, "segment": rec.segment, "offset": rec.offset,
         "index": index, "kind": kind.name, "groups": kind.groups(event)}
    d.update(kind.row(event))
    return d


LINE_HEADER = f"{'LSN':>10}  {'TL':>3}  {'KIND':<20}  {'GROUPS':<24}  DETAILS"


def event_line(rec: Record, event, *, note: str = "", focus: tuple[int, str | None] | None = None) -> str:
    """The event on one line: its commit, kind and groups, then its fields (`Kind.text`; `focus`,
    (idx, task or None): a `taken`'s rows matching it first, in brackets)."""
    kind = KIND_OF[type(event)]
    line = (f"{rec.commit.lsn:>10}  {rec.timeline:>3}  {kind.name:<20}  {id_list(kind.groups(event), 4):<24}  "
            f"{kind.text(event, focus)}")
    return (line + ("  " + note if note else "")).rstrip()
