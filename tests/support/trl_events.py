"""An append-only log of where each prompt group went in a TRL run, kept by the test's own hooks
(independent of the journal), and the audit over it: the same rules for TRL alone and for the
journaled trainer, so the two are counted alike.

One JSON line per event, appended with O_APPEND (a SIGKILL loses nothing the kernel has):
`start` (the segment's resumed step), `dispatched` and `restored` (group id -> (epoch, idx)),
`dropped_stale` (at the trainer's step), `trained` (a completed optimizer step's groups).
A segment is one process. Its training counts up to the checkpoint the next segment resumed from
(later steps were rolled back with the kill); a prompt occurrence is (epoch, idx).
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time


class EventLog:
    def __init__(self, path: str, segment: int):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.segment = segment
        self.lock = threading.Lock()

    def __call__(self, event: str, **fields) -> None:
        line = json.dumps({"seg": self.segment, "t": round(time.time(), 3), "ev": event, **fields}) + "\n"
        with self.lock:
            os.write(self.fd, line.encode())


def read_events(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def trained_past_resume(path: str, segment: int, steps: int) -> bool:
    """Whether `segment` trained a step at least `steps` past the step it resumed at."""
    events = [e for e in read_events(path) if e["seg"] == segment]
    start = next((e for e in events if e["ev"] == "start"), None)
    return start is not None and any(e["ev"] == "trained" and e["step"] >= start["resumed_at"] + steps
                                     for e in events)


def next_segment(path: str) -> int:
    return 1 + max((e["seg"] for e in read_events(path)), default=-1)


def audit_events(path: str, dataset_size: int, run_occurrences: int | None = None) -> dict:
    """trained_twice: occurrences whose training counted more than once; lost: occurrences
    dispatched, never counted as trained nor dropped, below the highest one trained (below
    `run_occurrences`, the epochs times the dataset size, for a run that went to its end);
    never_taken: occurrences below it never dispatched at all; regenerated: occurrences
    dispatched again."""
    events = read_events(path)
    segments = sorted({e["seg"] for e in events})
    resumed_at = {e["seg"]: e["resumed_at"] for e in events if e["ev"] == "start"}
    trained: list[tuple[int, int]] = []
    dispatched: collections.Counter = collections.Counter()
    dropped: set[tuple[int, int]] = set()
    for seg in segments:
        cut = None if seg == segments[-1] else resumed_at.get(seg + 1, 0)
        where: dict[int, tuple[int, int]] = {}
        for e in (e for e in events if e["seg"] == seg):
            if e["ev"] in ("dispatched", "restored"):
                where[e["gid"]] = (e["epoch"], e["idx"])
                if e["ev"] == "dispatched":
                    dispatched[where[e["gid"]]] += 1
            elif e["ev"] == "dropped_stale" and (cut is None or e["step"] < cut):
                dropped.add(where[e["gid"]])
            elif e["ev"] == "trained" and (cut is None or e["step"] <= cut):
                trained += [where[g] for g in e["gids"]]
    counts = collections.Counter(trained)
    flat = lambda p: p[0] * dataset_size + p[1]  # noqa: E731
    high = run_occurrences if run_occurrences is not None else max(map(flat, counts), default=-1)
    lost = sorted(p for p in dispatched if p not in counts and p not in dropped and flat(p) < high)
    seen = {flat(p) for p in dispatched}
    return {"segments": len(segments), "trained_occurrences": len(trained), "distinct_trained": len(counts),
            "trained_twice": sum(1 for n in counts.values() if n > 1), "lost": len(lost),
            "never_taken": sum(1 for f in range(high) if f not in seen), "dropped_stale": len(dropped),
            "regenerated": sum(1 for n in dispatched.values() if n > 1),
            "twice_sample": sorted(p for p, n in counts.items() if n > 1)[:10], "lost_sample": lost[:10]}
