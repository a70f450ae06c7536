"""verl's fully_async run, in the order of `fully_async_main.FullyAsyncTaskRunner`
(`_initialize_components`, then `_run_training_loop`), with the classes given: verl's main builds
its own actors inside a Ray actor, so the journaled ones need a runner of their own.

The rollouter and the message queue are Ray actors (as in verl); the trainer is a Ray actor
(`trainer_as_actor=True`, verl's layout) or an object in this process.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import ray


class _Trainer:
    """The trainer's calls, whether it is an actor or an object here."""

    def __init__(self, trainer: Any, as_actor: bool):
        self.trainer, self.as_actor = trainer, as_actor
        self.loop = None if as_actor else asyncio.new_event_loop()

    def __call__(self, name: str, *args):
        if self.as_actor:
            return ray.get(getattr(self.trainer, name).remote(*args))
        result = getattr(self.trainer, name)(*args)
        return self.loop.run_until_complete(result) if inspect.isawaitable(result) else result


def run_fully_async(config, *, rollouter, trainer, queue_actor, client_cls, trainer_as_actor: bool) -> None:
    """`rollouter`: a Ray actor handle of a rollouter (created, not initialised); `trainer`: a
    trainer actor handle or object (created, not initialised); `queue_actor`: the message queue's
    Ray actor class; `client_cls`: its client class. Returns when both loops ended."""
    call = _Trainer(trainer, trainer_as_actor)
    call("init_workers")
    ray.get(rollouter.init_workers.remote())
    ray.get(rollouter.set_max_required_samples.remote())
    call("set_rollouter", rollouter)
    call("set_total_train_steps", ray.get(rollouter.get_total_train_steps.remote()))
    queue = queue_actor.remote(config, ray.get(rollouter.get_max_queue_size.remote()))
    client = client_cls(queue)
    ray.get(rollouter.set_message_queue_client.remote(client))
    call("set_message_queue_client", client)
    call("load_checkpoint")
    ray.get(rollouter.load_checkpoint.remote())
    call("_fit_update_weights")
    if config.trainer.get("val_before_train", True):
        call("_fit_validate", True)
    rolling = rollouter.fit.remote()
    try:
        call("fit")
        ray.get(rolling)
    finally:
        ray.get(queue.clear_queue.remote())
