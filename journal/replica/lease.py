"""The writer's lease: who writes a replica now.

`LEASE` (JSON) is created with a create-only PUT and renewed by compare-and-swap on its ETag
(the store must declare `supports_cas`), every `LEASE_SECONDS / 3`. A second writer may take it
once it has not been renewed for its TTL, a resume at once. The lease reserves the timeline its
holder's new branch takes, above every timeline its previous holders reserved.
"""

from __future__ import annotations

import json
import os
import socket
import time

from ..errors import JournalLocked
from .errors import LeaseLost
from .names import LEASE_NAME
from .store import Bucket

LEASE_SECONDS = 30.0        # a lease not renewed for this long may be taken by another writer


class Lease:
    """The writer's lease object: who writes this replica now."""

    def __init__(self, bucket: Bucket):
        self.bucket = bucket
        self.token = os.urandom(8).hex()
        self.e_tag: str | None = None
        self.renewed = 0.0
        self.reserved = 0  # the timeline a new branch of this writer takes

    def _body(self, released: bool = False) -> dict:
        return {"holder": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                "renewed": time.time(), "ttl": 0.0 if released else LEASE_SECONDS,
                "reserved": self.reserved}

    def acquire(self, *, takeover: bool, floor: int) -> None:
        """Take the lease; `takeover` (a resume) takes it from a live holder too. The lease
        reserves a timeline above `floor` and above the one its previous holder reserved: a
        holder that was taken over before its first upload could otherwise pick the same
        number as the writer that took over, and their objects would share names."""
        current = self._read()
        previous = 0
        if current is not None:
            holder, e_tag = current
            previous = holder.get("reserved") if isinstance(holder.get("reserved"), int) else 0
            age = time.time() - holder["renewed"]
            if not takeover and age < holder["ttl"]:
                raise JournalLocked(
                    f"replica {self.bucket.where}: another writer holds its lease ({LEASE_NAME}: "
                    f"host {holder.get('host')!r}, pid {holder.get('pid')}, renewed {age:.1f} s ago, "
                    f"valid for {holder['ttl']:.0f} s). Stop that writer, wait for the "
                    "lease to expire, or take it over with a resume: state = restore(URL, ...); "
                    "Journal.open(path, resume=state, replica=URL)")
        else:
            e_tag = None
        self.reserved = max(previous, floor) + 1
        body = self._body()
        new = self._write(body, e_tag) or self._ours_after_all()
        if new is None:
            raise JournalLocked(f"replica {self.bucket.where}: another writer took its lease "
                                f"({LEASE_NAME}) at the same moment; try again")
        self.e_tag, self.renewed = new, time.monotonic()

    def check(self) -> None:
        """LeaseLost unless the lease's ETag is still ours (one HEAD)."""
        if self.bucket.e_tag(LEASE_NAME) != self.e_tag:
            raise LeaseLost(f"replica {self.bucket.where}: this writer lost its lease "
                            f"({LEASE_NAME} was replaced by another writer)", object=LEASE_NAME)

    def _read(self) -> tuple[dict, str] | None:
        """The lease's fields and ETag, None when there is no lease."""
        got = self.bucket.get_tagged(LEASE_NAME)
        return None if got is None else (_lease_fields(got[0]), got[1])

    def _write(self, body: dict, e_tag: str | None) -> str | None:
        """Create the lease (`e_tag` None) or swap it for `body` while its ETag is still
        `e_tag`; the new ETag, None when the precondition failed."""
        return self.bucket.swap(LEASE_NAME, json.dumps(body).encode(), e_tag)

    def _ours_after_all(self) -> str | None:
        """The lease's ETag if it holds our token: a write of ours whose answer was lost (its
        retry then failed its precondition) still made the lease ours."""
        current = self._read()
        return current[1] if current is not None and current[0].get("holder") == self.token else None

    def renew(self, *, released: bool = False) -> None:
        new = self._write(self._body(released), self.e_tag) or self._ours_after_all()
        if new is None:
            raise LeaseLost(f"replica {self.bucket.where}: renewing the lease failed: another "
                            f"writer replaced {LEASE_NAME}", object=LEASE_NAME)
        self.e_tag, self.renewed = new, time.monotonic()

    def renew_due(self) -> bool:
        return time.monotonic() - self.renewed >= LEASE_SECONDS / 3


def _lease_fields(data: bytes) -> dict:
    """The lease's JSON; one that does not parse, or has no numeric `renewed` and `ttl`, counts as
    expired (a writer may replace it)."""
    try:
        body = json.loads(data)
        if isinstance(body, dict) and all(isinstance(body.get(k), (int, float)) for k in ("renewed", "ttl")):
            return body
    except ValueError:
        pass
    return {"holder": None, "renewed": 0.0, "ttl": 0.0}
