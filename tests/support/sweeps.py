"""The loop of a stepped I/O-error sweep (tests/system/test_*io_errors.py): for N = 1, 2, 3, ...
one run with the N-th I/O operation failing, until a run completes without reaching N; and
what a failed operation that goes unreported may be (the retiring of a pack)."""

from __future__ import annotations

import os
from typing import Callable

MAX_N = int(os.environ.get("OJ_SWEEP_MAX_N", "400"))


def retiring(fs, failed) -> bool:
    """Whether the failed operation retired a pack: its seal (a write, an fsync) or its close,
    which nothing depends on (every row in it was fsynced; unsealed, it is read in full)."""
    later = [o.kind for o in fs.ops if o.handle == failed.handle and o.seq > failed.seq]
    return failed.kind == "close" or later[:1] == ["close"]


def sweep(what: str, run_at: Callable[[int, list[str]], bool]) -> None:
    """`run_at(n, failures)`: the run with the n-th operation failing, adding what broke to
    `failures`; whether the fault fired. Asserts more than 20 error points and no failure."""
    points, failures = 0, []
    for n in range(1, MAX_N + 1):
        if not run_at(n, failures):
            break
        points += 1
    else:
        failures.append(f"still reaching the fault at N={MAX_N}")
    print(f"{what}: {points} error points")
    assert points > 20
    assert not failures, f"{len(failures)} error points broke a guarantee:\n" + "\n".join(failures[:10])
