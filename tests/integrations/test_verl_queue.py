"""verl's message queue evicts its oldest sample when full (verl 0.9.1 `MessageQueue.put_sample`:
a log line and False for the *new* sample); `ReportingMessageQueue` reports which sample went,
so the journaled rollouter drops that one. A real Ray actor on 127.0.0.1, started here."""

from __future__ import annotations

import asyncio
import os
import tempfile

import pytest
import ray
from verl.experimental.fully_async_policy.detach_utils import RolloutSample

from replay.integrations.verl import ReportingQueueClient, reporting_queue_actor


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             _temp_dir=tempfile.mkdtemp(prefix="ojray", dir="/tmp"),
             runtime_env={"env_vars": {"PYTHONPATH": os.getcwd()}})
    yield
    ray.shutdown()


def _sample(sample_id: str) -> bytes:
    return ray.cloudpickle.dumps(RolloutSample(full_batch=None, sample_id=sample_id, epoch=0, rollout_status={}))


def test_overflow_eviction_reports_the_oldest_sample(local_ray):
    client = ReportingQueueClient(reporting_queue_actor(num_cpus=0).remote(None, 2))
    evicted = []
    client.on_evicted = evicted.append

    async def scenario():
        puts = [await client.put_sample(_sample(f"group_{i}")) for i in range(4)]
        first, _ = await client.get_sample()
        return puts, ray.cloudpickle.loads(first).sample_id

    puts, first_left = asyncio.run(scenario())
    assert puts == [True, True, False, False]        # verl's answer for the new sample, unchanged
    assert evicted == ["group_0", "group_1"]         # the ones that actually left the queue
    assert first_left == "group_2"
