"""Rollout workers as Ray actors, for the example trainer's Ray mode (`--ray`).

The trainer process (the Ray driver) is the journal's one writer. It sends an actor
`(group_id, index, attempt)` with the weights of the group's policy version; the actor
generates, writes the rollout's row into the data plane directory itself (a directory every
node reads, as a shared file system would be) and returns only its locator. It never
touches the journal: the driver seals the locator, or, when the attempt was given up
meanwhile, the journal rejects the seal and the driver deletes the row.

Actors are detached and named in a namespace of their run directory, so they outlive a
controller that is SIGKILLed. A result an actor finishes for a controller that died is
kept in the actor's outbox and handed over to the next controller (with the first answer
it gets from it); that controller offers it to the journal, which fences it (restore gave
every unsealed rollout a new attempt), and deletes its row.

Every Ray process listens on 127.0.0.1 only: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set
before `ray` is first imported (Ray reads it at import), so processes started from here, and
their children, take the loopback address as the node's. `ray` is imported here only; the
trainer imports this module in Ray mode only.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import secrets

# before `import ray`: Ray decides at import which address its processes bind
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import ray  # noqa: E402

OBJECT_STORE_BYTES = 80 * 1024**2
ACTOR_CPUS = 1
NAME_PREFIX = "rollout-"


def namespace_for(out: str) -> str:
    """The Ray namespace of a run directory: the actors of its controllers live there."""
    return "oj-" + hashlib.sha256(os.path.abspath(out).encode()).hexdigest()[:12]


def connect(address: str | None, namespace: str) -> None:
    """Join the cluster at `address`, or start a small local one (no dashboard)."""
    if address:
        ray.init(address=address, namespace=namespace, log_to_driver=False)
    else:
        ray.init(namespace=namespace, num_cpus=4, include_dashboard=False,
                 object_store_memory=OBJECT_STORE_BYTES, log_to_driver=False)


def start_cluster(worker_nodes: int = 2, cpus_per_node: int = 2):
    """A head (no CPUs: actors run on the worker nodes) and `worker_nodes` worker nodes on this
    machine, all on loopback, small object stores. Shut it down with `cluster.shutdown()`."""
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args=node_args(0))
    for _ in range(worker_nodes):
        cluster.add_node(**node_args(cpus_per_node))
    cluster.wait_for_nodes()
    return cluster


def node_args(cpus: int) -> dict:
    return {"num_cpus": cpus, "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False}


class RolloutWorker:
    """One rollout actor (async: several rollouts in flight). Its `outbox` keeps every result
    it returned, `(run, group_id, index, attempt, locator, seconds)`, until the controller
    `run` acknowledges it; a later controller gets the rest handed over."""

    def __init__(self, data_plane):
        import torch

        torch.set_num_threads(1)
        self.dp = data_plane   # the controller's, pickled: the rows go to the same store
        self.policies: dict[tuple[str, int], object] = {}
        self.outbox: list[tuple] = []

    async def ready(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def handover(self, run: str, acked=()) -> list[tuple]:
        """Forget the results `run` acknowledges (`acked`: (group_id, index, attempt)); return
        (and forget) those of other controllers, which `run` replaced."""
        acked = {(run, *k) for k in acked}
        out = [r for r in self.outbox if r[0] != run]
        self.outbox = [r for r in self.outbox if r[0] == run and r[:4] not in acked]
        return out

    def _policy(self, run: str, version: int, weights: dict):
        from .trainer import TinyPolicy
        key = (run, version)
        if key not in self.policies:
            p = TinyPolicy()
            p.load_state_dict(weights)
            p.eval()
            self.policies = {k: v for k, v in self.policies.items() if k[0] == run}
            self.policies[key] = p
        return self.policies[key]

    async def generate(self, run: str, acked: list, group_id: int, index: int, attempt: int,
                       version: int, weights: dict, tokens, answer: int, seed: int,
                       seconds: float, fail: bool) -> dict:
        """Rollout `index` of `group_id` in `attempt`: `seconds` of generation, its row durable
        in the data plane, then its locator (None: the generation failed), and the results
        handed over from earlier controllers."""
        import torch

        from .trainer import _rollout_row
        handed = await self.handover(run, acked)
        await asyncio.sleep(seconds)
        if fail:
            return {"locator": None, "handover": handed}
        with torch.no_grad():
            logp = torch.log_softmax(self._policy(run, version, weights)(tokens[None]), -1)[0]
            gen = torch.Generator().manual_seed(seed)
            a = int(torch.multinomial(logp.exp(), 1, generator=gen))
        row = _rollout_row((a, float(logp[a]), float(a == answer)), seconds, version)
        loc = await asyncio.to_thread(self.dp.put_rollout, group_id, index, attempt, row)
        self.outbox.append((run, group_id, index, attempt, loc, seconds))
        return {"locator": loc, "handover": handed}


class ActorPool:
    """`size` live rollout actors for one controller (`run`), replaced when they die. A slot
    holds `(name, handle)`; `acks[name]`: results of that actor this controller handled, sent
    with its next call."""

    def __init__(self, data_plane, size: int):
        self.data_plane = data_plane
        self.run = secrets.token_hex(4)
        self.slots: list[tuple[str, object] | None] = [None] * size
        self.starting: list[asyncio.Task | None] = [None] * size
        self.acks: dict[str, list] = {}
        self.weights: dict[int, ray.ObjectRef] = {}
        self.replaced = 0
        self.cls = ray.remote(num_cpus=ACTOR_CPUS)(RolloutWorker)

    def adopt(self) -> list[tuple]:
        """Take over the live actors of earlier controllers of this run directory (beyond `size`
        they are killed) and return what they finished for those, to fence."""
        handed = []
        names = sorted(n for n in ray.util.list_named_actors() if n.startswith(NAME_PREFIX))
        for name in names:
            try:
                actor = ray.get_actor(name)
            except ValueError:
                continue   # died meanwhile
            try:
                handed += ray.get(actor.handover.remote(self.run), timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                ray.kill(actor)   # dying, or never started: it must not hold a CPU
                continue
            if None in self.slots:
                self.slots[self.slots.index(None)] = (name, actor)
            else:
                ray.kill(actor)
        return handed

    async def actor(self, slot: int) -> tuple[str, object]:
        """The live actor of `slot`, started (and waited for) if it has none."""
        while self.slots[slot] is None:
            if self.starting[slot] is None:
                self.starting[slot] = asyncio.create_task(self._start(slot))
            task = self.starting[slot]
            try:
                await task
            except ray.exceptions.RayError:
                await asyncio.sleep(0.5)   # it died starting (its node went): start another
            finally:
                if self.starting[slot] is task:
                    self.starting[slot] = None
        return self.slots[slot]

    async def _start(self, slot: int) -> None:
        name = f"{NAME_PREFIX}{self.run}-{slot}-{secrets.token_hex(3)}"
        actor = self.cls.options(name=name, lifetime="detached").remote(self.data_plane)
        await actor.ready.remote()
        self.slots[slot] = (name, actor)

    def lost(self, slot: int, held: tuple[str, object]) -> None:
        """The actor `held` of `slot` died: the next rollout of the slot starts a fresh one."""
        self.acks.pop(held[0], None)
        if self.slots[slot] is held:
            self.slots[slot] = None
            self.replaced += 1

    def ack(self, held: tuple[str, object], group_id: int, index: int, attempt: int) -> None:
        """This controller handled the result of (group_id, index, attempt) from `held`."""
        self.acks.setdefault(held[0], []).append((group_id, index, attempt))

    def policy_weights(self, version: int, policy, keep) -> ray.ObjectRef:
        """The weights of policy `version` in the object store (versions not in `keep` go)."""
        if version not in self.weights:
            self.weights[version] = ray.put(policy.state_dict())
        for v in [v for v in self.weights if v not in keep]:
            del self.weights[v]
        return self.weights[version]

    def generate(self, held: tuple[str, object], w, index: int, attempt: int, weights, seed: int,
                 seconds: float, fail: bool) -> asyncio.Future:
        name, actor = held
        ref = actor.generate.remote(self.run, self.acks.pop(name, []), w.gid, index, attempt,
                                    w.policy_version, weights, w.tokens, w.answer, seed, seconds,
                                    fail)
        return asyncio.wrap_future(ref.future())

    def close(self) -> None:
        """The run is over: its actors go."""
        for held in self.slots:
            if held is not None:
                ray.kill(held[1])
        self.slots = [None] * len(self.slots)


def is_actor_death(exc: BaseException) -> bool:
    """Whether `exc` says the actor (or its node) is gone, rather than a bug in the rollout."""
    return isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                            ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError))


class ClusterChaos:
    """Kills for the Ray chaos runs: one actor of a run directory's controllers, or a whole
    worker node (then a fresh node joins)."""

    def __init__(self, cluster, out: str, seed: int):
        self.cluster = cluster
        self.namespace = namespace_for(out)
        self.rng = random.Random(f"ray-chaos-{seed}")
        self.counts = {"actors_killed": 0, "nodes_replaced": 0}

    def actor_names(self) -> list[str]:
        return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                      if a["namespace"] == self.namespace and a["name"].startswith(NAME_PREFIX))

    def kill_actor(self) -> str | None:
        names = self.actor_names()
        if not names:
            return None
        name = self.rng.choice(names)
        try:
            ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        except ValueError:
            return None   # it died on its own meanwhile
        self.counts["actors_killed"] += 1
        return name

    def replace_node(self, cpus: int = 2) -> None:
        workers = [n for n in self.cluster.worker_nodes]
        if workers:
            self.cluster.remove_node(self.rng.choice(workers), allow_graceful=False)
        self.cluster.add_node(**node_args(cpus))
        self.counts["nodes_replaced"] += 1
