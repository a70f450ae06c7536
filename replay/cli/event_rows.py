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

from typing import Iterator

from journal import (Admitted, CheckpointBegun, CheckpointCommitted, Discarded, Diverted, Finished,
                     IdentityRecorded, Record, Restored, RolloutFailed, RolloutProgress, RolloutSealed, Taken,
                     Trained)
from journal.events import event_name
from journal.identity import to_hex

from . import render
from .render import id_list


def groups_of(event) -> list[int]:
    """The group ids an event names (taken: the allocated ids; an event that moves no group, a
    checkpoint marker or the identity: none)."""
    t = type(event)
    if t is Taken:
        return [g.group_id for g in event.groups]
    if t.to is None:
        return []
    if t is RolloutSealed or t is RolloutFailed:
        return list(dict.fromkeys(r.group_id for r in event.rollouts))
    if t is RolloutProgress:
        return [event.rollout.group_id]
    return list(event.groups)


def names_group(event, gid: int) -> bool:
    t = type(event)
    if t is Taken:
        gs = event.groups
        return bool(gs) and gs[0].group_id <= gid <= gs[-1].group_id and any(
            g.group_id == gid for g in gs)
    if t.to is None:
        return False
    if t is RolloutSealed or t is RolloutFailed:
        return any(r.group_id == gid for r in event.rollouts)
    if t is RolloutProgress:
        return event.rollout.group_id == gid
    return gid in event.groups


def _hex(b: bytes | None) -> str | None:
    return b.hex() if b is not None else None


def event_dict(rec: Record, index: int, event) -> dict:
    c = rec.commit
    d = {"lsn": c.lsn, "timeline": rec.timeline, "segment": rec.segment, "offset": rec.offset,
         "index": index, "kind": event_name(event), "groups": groups_of(event)}
    t = type(event)
    if t is Taken:
        d["rows"] = [{"group_id": g.group_id, "idx": g.idx, "task_name": g.task_name,
                      "epoch": g.epoch, "fingerprint": _hex(g.fingerprint)} for g in event.groups]
        d["loader_state"] = event.loader_state is not None
    elif t is Admitted:
        d["target_step"] = event.target_step
        d["policy_version"] = event.policy_version
        d["replaces"] = event.replaces
        d["rollouts"] = event.rollouts
    elif t is RolloutSealed or t is RolloutFailed:
        d["rollouts"] = [{"group_id": r.group_id, "index": r.index, "attempt": r.attempt,
                          "locator": r.locator} for r in event.rollouts]
        if t is RolloutSealed:
            d["policy_version"] = event.policy_version
        else:
            d["reason"] = event.reason
    elif t is RolloutProgress:
        r = event.rollout
        d["rollouts"] = [{"group_id": r.group_id, "index": r.index, "attempt": r.attempt, "locator": r.locator}]
        d["tokens"], d["turn"], d["policy_version"] = event.tokens, event.turn, event.policy_version
    elif t is Finished:
        d["policy_version"] = event.policy_version
        d["locators"] = event.locators
    elif t is Trained:
        d["step"] = event.step
    elif t is Discarded:
        d["reason"] = event.reason
    elif t is CheckpointBegun or t is CheckpointCommitted:
        d["step"] = event.step
    elif t is IdentityRecorded:
        d["identity"] = to_hex(event.digests)
    elif t is Restored:
        d.update({name: getattr(event, name) for name in ("point", "step", "crash_lsn", "time", "max_policy_lag",
                                                          "dropped", "regenerate", "seconds_lost")})
        d["kept"] = [{"lead": k.lead, "groups": k.groups, "rollouts": k.rollouts, "prefixes": k.prefixes,
                      "tokens": k.tokens} for k in event.kept]
    elif t is Diverted:
        pass
    return d


def record_events(rec: Record) -> Iterator[tuple[int, object]]:
    return enumerate(rec.commit.events)


def _idx_text(groups, focus: tuple[int, str | None] | None) -> str:
    """The rows' idx values; the rows matching `focus` (idx, task or None) first, in brackets."""
    idxs = [g.idx for g in groups]
    if focus is not None:
        hit = [g for g in groups if g.idx == focus[0] and focus[1] in (None, g.task_name)]
        idxs = [f"[{g.idx}]" for g in hit] + [str(g.idx) for g in groups if g not in hit]
    elif len(idxs) > 1 and idxs == list(range(idxs[0], idxs[0] + len(idxs))):
        return f"idx={idxs[0]}..{idxs[-1]}"
    return "idx=" + ",".join(map(str, idxs[:8])) + (f" (+{len(idxs) - 8} more)" if len(idxs) > 8 else "")


def details(event, focus: tuple[int, str | None] | None = None) -> str:
    """The event's own fields as `key=value` text; `focus`: see `_idx_text`."""
    t = type(event)
    if t is Taken:
        gs = event.groups
        parts = [_idx_text(gs, focus)]
        tasks = sorted({g.task_name for g in gs}, key=lambda x: (x is None, x or ""))
        if tasks != [None]:
            parts.append("task=" + ",".join("-" if x is None else x for x in tasks))
        epochs = sorted({g.epoch for g in gs}, key=lambda x: (x is None, x or 0))
        if epochs != [None]:
            parts.append("epoch=" + ",".join("-" if x is None else str(x) for x in epochs))
        if event.loader_state is not None:
            parts.append("loader_state")
        return " ".join(parts)
    if t is Admitted:
        parts = [f"target_step={event.target_step}"]
        if event.policy_version is not None:
            parts.append(f"policy={event.policy_version}")
        if event.replaces is not None:
            parts.append(f"replaces={event.replaces}")
        if event.rollouts is not None:
            parts.append(f"rollouts={event.rollouts}")
        return " ".join(parts)
    if t is RolloutSealed or t is RolloutFailed:
        return _rollouts_text(event)
    if t is RolloutProgress:
        r = event.rollout
        return " ".join([f"rollout={r.group_id}/{r.index}@{r.attempt}={r.locator}", f"tokens={event.tokens}"]
                        + ([f"turn={event.turn}"] if event.turn is not None else [])
                        + ([f"policy={event.policy_version}"] if event.policy_version is not None else []))
    if t is Finished:
        parts = []
        if event.policy_version is not None:
            parts.append(f"policy={event.policy_version}")
        if event.locators:
            loc = event.locators
            parts.append("locator=" + ",".join(loc[:3]) + (f" (+{len(loc) - 3} more)" if len(loc) > 3 else ""))
        return " ".join(parts)
    if t is Trained or t is CheckpointBegun or t is CheckpointCommitted:
        return f"step={event.step}"
    if t is Discarded:
        return f"reason={event.reason}"
    if t is IdentityRecorded:
        return render.identity(to_hex(event.digests))
    if t is Restored:
        kept = ",".join(f"{k.lead}:{k.rollouts}r/{k.prefixes}p/{k.groups}g" for k in event.kept)
        return " ".join([f"point={event.point}", f"step={event.step}", f"crash_lsn={event.crash_lsn}",
                         f"lag={event.max_policy_lag}"] + ([f"kept_by_lead={kept}"] if kept else [])
                        + [f"dropped={k}:{n}" for k, n in event.dropped.items()]
                        + [f"regenerate={event.regenerate}"])
    return ""


def _rollouts_text(event) -> str:
    """`group/index@attempt` of each rollout (with a sealed one's locator), then the policy
    version of a seal or the reason of a failure."""
    refs = [f"{r.group_id}/{r.index}@{r.attempt}" + (f"={r.locator}" if r.locator is not None else "")
            for r in event.rollouts[:6]]
    text = "rollout=" + ",".join(refs) + (f" (+{len(event.rollouts) - 6} more)" if len(event.rollouts) > 6 else "")
    if type(event) is RolloutFailed:
        return f"{text} reason={event.reason}"
    return text + (f" policy={event.policy_version}" if event.policy_version is not None else "")


LINE_HEADER = f"{'LSN':>10}  {'TL':>3}  {'KIND':<20}  {'GROUPS':<24}  DETAILS"


def event_line(rec: Record, event, *, note: str = "", focus: tuple[int, str | None] | None = None) -> str:
    kind = event_name(event)
    line = (f"{rec.commit.lsn:>10}  {rec.timeline:>3}  {kind:<20}  {id_list(groups_of(event), 4):<24}  "
            f"{details(event, focus)}")
    return (line + ("  " + note if note else "")).rstrip()
