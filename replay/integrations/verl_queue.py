"""verl's message queue with its overflow eviction reported, so the journal can drop the sample
verl drops.

verl's `MessageQueue.put_sample` evicts the *oldest* queued sample when the queue is full and
returns False; the rollouter counts the new sample as dropped, and the evicted one leaves only a
log line. `ReportingMessageQueue` is the same actor (its plain class, subclassed: a Ray actor
class cannot be) whose `put_sample_reporting` also returns the evicted sample's id; the
`ReportingQueueClient` (verl's `MessageQueueClient`, which verl's rollouter and trainer call
unchanged) hands that id to `on_evicted`, which the journaled rollouter sets.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Callable

import ray
from verl.experimental.fully_async_policy.message_queue import MessageQueue, MessageQueueClient

from .verl_errors import VerlInternalsChanged

PlainMessageQueue = MessageQueue.__ray_metadata__.modified_class.__mro__[1]


class _EvictionDeque(collections.deque):
    """verl's queue deque, remembering what its last `popleft` returned."""

    last_out: Any = None

    def popleft(self):
        self.last_out = super().popleft()
        return self.last_out


class ReportingMessageQueue(PlainMessageQueue):
    def __init__(self, config, max_queue_size: int = 1000):
        super().__init__(config, max_queue_size)
        if not isinstance(self.queue, collections.deque):
            raise VerlInternalsChanged(f"verl's MessageQueue.queue is a {type(self.queue).__name__}, not a deque")
        self.queue = _EvictionDeque(self.queue, maxlen=self.queue.maxlen)

    async def put_sample_reporting(self, sample: Any) -> tuple[bool, str | None]:
        """verl's `put_sample`, and the id of the sample its overflow evicted (None if none).
        verl's put pops and appends under its lock without awaiting in between, so nothing else
        runs on this actor's loop between that pop and the read of `last_out` here."""
        self.queue.last_out = None
        ok = await self.put_sample(sample)
        if ok:
            return True, None
        evicted = self.queue.last_out
        return False, None if evicted is None else ray.cloudpickle.loads(evicted).sample_id


def reporting_queue_actor(num_cpus: float = 2, max_concurrency: int = 20):
    """The Ray actor class of `ReportingMessageQueue` (verl's own resources by default)."""
    return ray.remote(num_cpus=num_cpus, max_concurrency=max_concurrency)(ReportingMessageQueue)


class ReportingQueueClient(MessageQueueClient):
    """verl's client; `put_sample` returns verl's bool and reports an eviction to `on_evicted`
    (set in the process that puts: the rollouter's)."""

    on_evicted: Callable[[str], None] | None = None

    async def put_sample(self, sample: Any) -> bool:
        ok, evicted = await self._reporting_put(sample)
        if evicted is not None and self.on_evicted is not None:
            self.on_evicted(evicted)
        return ok

    async def _reporting_put(self, sample: Any) -> tuple[bool, str | None]:
        future = self.queue_actor.put_sample_reporting.remote(sample)
        return await asyncio.wrap_future(future.future())
