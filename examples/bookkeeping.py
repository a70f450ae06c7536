"""The demo's own bookkeeping, independent of the journal: a ledger of what the trainer did.

The trainer appends one line per fact, with a single `write` on an `O_APPEND` file
(a SIGKILL cannot tear it):

    R <step>              the trainer (re)started from the checkpoint of <step> (0: scratch)
    C <step>              the step-<step> checkpoint captured the trainer's state here
    T <step> e:i,e:i,...  step <step> trained the rows (epoch e, dataset idx i)
    U <step> <us>         ... whose rollouts took <us> microseconds to generate (with its T line)
    D <reason> e:i,...    these rows were dropped (e.g. every rollout retry failed)
    W <us>                ... and the generation time of their rollouts went with them
    A <lsn> <time>        the journal acknowledged the commit at <lsn> at <time> (Unix seconds)
    X <key>=<n> ...       counters (regenerated, salvaged groups, generation microseconds
                          spent, or spent on results no history can use), summed over every run

The *final history* is what the surviving model saw: on `R s`, every `T`/`U`/`D`/`W`
written after the last `C s` is cut off (those steps died with the process).
All generation time spent (`X generation_us`) minus what the final history trained
(`U`) or dropped with its groups (`W`) and the results no history can use (`X
rejected_us`: fenced late results) is what the kills threw away.
The baseline trainer has only this ledger; the journal trainer's ledger must agree
with the journal's own audit (`journal-inspect audit`; see `examples.chaos`).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field


class Ledger:
    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _line(self, text: str, sync: bool = False) -> None:
        os.write(self._fd, (text + "\n").encode())
        if sync:
            os.fsync(self._fd)

    def resumed(self, step: int) -> None:
        self._line(f"R {step}", sync=True)

    def checkpoint(self, step: int) -> None:
        self._line(f"C {step}", sync=True)

    def trained(self, step: int, rows, generation_us: int = 0) -> None:
        # one write: a kill cannot keep the T line and lose its U line
        self._line(f"T {step} " + ",".join(f"{e}:{i}" for e, i in rows) + f"\nU {step} {int(generation_us)}")

    def dropped(self, reason: str, rows, generation_us: int = 0) -> None:
        if rows:
            self._line(f"D {reason} " + ",".join(f"{e}:{i}" for e, i in rows) + f"\nW {int(generation_us)}")

    def acked(self, lsn: int) -> None:
        self._line(f"A {lsn} {time.time():.6f}")

    def count(self, **counters: int) -> None:
        self._line("X " + " ".join(f"{k}={v}" for k, v in counters.items()))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _rows(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        if item:
            e, i = item.split(":")
            out.append((int(e), int(i)))
    return out


@dataclass
class History:
    """Per (epoch, idx): how often the final history trained it, and why it was dropped."""

    trained: Counter = field(default_factory=Counter)
    dropped: dict = field(default_factory=dict)        # (epoch, idx) -> last reason
    live: set = field(default_factory=set)             # (epoch, idx) still held in flight
    counters: Counter = field(default_factory=Counter)
    used_generation_us: int = 0                        # generation time of what was trained
    dropped_generation_us: int = 0                     # ... and of what was dropped
    restarts: int = 0
    source: str = ""

    def report(self, dataset_size: int, epochs: int) -> dict:
        """Exactly-once report: per epoch, rows trained once, more than once, dropped, lost."""
        per_epoch = []
        totals = Counter()
        reasons_total: Counter = Counter()
        for e in range(epochs):
            once = twice = lost = in_flight = 0
            reasons: Counter = Counter()
            for i in range(dataset_size):
                n = self.trained.get((e, i), 0)
                if n == 1:
                    once += 1
                elif n > 1:
                    twice += 1
                elif (e, i) in self.live:
                    in_flight += 1
                elif (e, i) in self.dropped:
                    reasons[self.dropped[(e, i)]] += 1
                else:
                    lost += 1
            dropped = sum(reasons.values())
            per_epoch.append({"epoch": e, "rows": dataset_size, "trained_once": once,
                              "trained_twice": twice, "dropped": dropped,
                              "dropped_reasons": dict(reasons), "in_flight": in_flight, "lost": lost})
            totals.update(trained_once=once, trained_twice=twice, dropped=dropped, lost=lost,
                          in_flight=in_flight)
            reasons_total.update(reasons)
        extra = sorted(k for k in set(self.trained) | set(self.dropped) if not (
            0 <= k[0] < epochs and 0 <= k[1] < dataset_size))
        return {"source": self.source, "epochs": per_epoch,
                "trained_once": totals["trained_once"], "trained_twice": totals["trained_twice"],
                "dropped": totals["dropped"], "dropped_reasons": dict(reasons_total),
                "lost": totals["lost"], "in_flight": totals["in_flight"],
                "unexpected_rows": len(extra), "counters": dict(self.counters),
                "used_generation_us": self.used_generation_us,
                "dropped_generation_us": self.dropped_generation_us, "restarts": self.restarts}


def read_acks(path: str, offset: int = 0) -> list[tuple[int, float]]:
    """(lsn, time) of every acknowledged commit (`A` line) written after byte `offset`, in order."""
    with open(path, "rb") as f:
        f.seek(offset)
        lines = f.read().decode().split("\n")[:-1]   # an unfinished last line never happened
    return [(int(lsn), float(t)) for kind, lsn, t in
            (line.split(" ") for line in lines if line.startswith("A "))]


def read_ledger(path: str) -> History:
    """Replay a ledger into the final history (see the module docstring)."""
    entries: list[tuple[str, str, list]] = []   # ("T", step, rows) / ("D", reason, rows) / ("U"|"W", us, [])
    marks: dict[int, int] = {}                  # checkpoint step -> len(entries) at its C line
    h = History(source="ledger")
    with open(path, "rb") as f:
        data = f.read().decode()
    lines = data.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]                     # an unfinished last line never happened
    for line in lines:
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind == "R":
            step = int(rest)
            h.restarts += 1
            if step and step not in marks:
                raise ValueError(f"{path}: restart from step {step} without its checkpoint line")
            keep = marks[step] if step else 0
            del entries[keep:]
            marks = {s: n for s, n in marks.items() if n <= keep and s <= step}
        elif kind == "C":
            marks[int(rest)] = len(entries)
        elif kind == "T":
            step, _, rows = rest.partition(" ")
            entries.append(("T", step, _rows(rows)))
        elif kind == "D":
            reason, _, rows = rest.partition(" ")
            entries.append(("D", reason, _rows(rows)))
        elif kind == "U":
            entries.append(("U", rest.partition(" ")[2], []))
        elif kind == "W":
            entries.append(("W", rest, []))
        elif kind == "X":
            for kv in rest.split():
                k, _, v = kv.partition("=")
                h.counters[k] += int(v)
    for kind, what, rows in entries:
        if kind == "U":
            h.used_generation_us += int(what)
        elif kind == "W":
            h.dropped_generation_us += int(what)
        for r in rows:
            if kind == "T":
                h.trained[r] += 1
            else:
                h.dropped[r] = what
    return h
