"""One process of verl's fully_async run on the CPU, journaled or verl alone, for
tests/integrations/test_verl.py (`python -m tests.support.verl_child --mode journal|verl --run DIR`).

The process starts its own Ray (127.0.0.1, its own temp dir), makes the rollouter and the message
queue Ray actors and runs the trainer here, in the order of verl's fully_async main
(`replay.integrations.verl.run_fully_async`), with verl's config (hydra, fully_async_ppo_trainer)
and the stand-ins of tests/support/verl_cpu.py. Both modes keep the same event log
(tests/support/trl_events.py: `start`, `dispatched`, `restored`, `trained`, `dropped_stale`) at the
same hooks, so tests/support/trl_events.audit_events counts them alike.

    --mode journal   JournaledFullyAsyncRollouter/Trainer, ReportingMessageQueue; the journal decides
    --mode verl      verl's classes and MessageQueue; verl's resume (latest_checkpointed_iteration.txt, data.pt)

`--die-after-checkpoint V`: SIGKILL this process group right after verl's `_save_checkpoint` of
param version V returned (journaled: committed), recording what each queue held then.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import ray  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from verl.experimental.fully_async_policy.message_queue import MessageQueue, MessageQueueClient  # noqa: E402

import verl  # noqa: E402
from replay import LocalDataPlane  # noqa: E402
from replay.integrations.verl import (JournaledFullyAsyncRollouter, JournaledFullyAsyncTrainer,  # noqa: E402
                                      JournalOptions, ReportingQueueClient, reporting_queue_actor,
                                      run_fully_async)
from replay.integrations.verl_rollouter import POSITION, PlainRollouter, verl_feed_sample_id  # noqa: E402
from replay.integrations.verl_rows import sample_id_of  # noqa: E402
from replay.integrations.verl_trainer import PlainTrainer  # noqa: E402
from tests.support.trl_events import EventLog, next_segment  # noqa: E402
from tests.support.verl_cpu import CpuRollouter, CpuTrainer, OneDevice  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Recorded:
    """The rollouter's event hooks, shared by both modes."""

    events_path, segment = None, 0

    def _event(self, name, **fields):
        if not hasattr(self, "_events"):
            self._events = EventLog(self.events_path, self.segment)
        self._events(name, **fields)


class JournaledRollouter(_Recorded, CpuRollouter, JournaledFullyAsyncRollouter):
    def _feed(self, prompt):
        self._event("dispatched", gid=sample_id_of(prompt.group_id), epoch=prompt.epoch,
                    idx=int(prompt.batch[POSITION][0]))
        return super()._feed(prompt)

    def _evicted(self, sample_id):
        super()._evicted(sample_id)
        self._event("dropped_stale", gid=sample_id, step=self._policy_step)

    async def load_checkpoint(self):
        for work in self._open_session().resume_work:
            if work.kind == "train":
                self._event("restored", gid=sample_id_of(work.group_id), epoch=work.epoch, idx=work.idx)
        return await super().load_checkpoint()

    def queue_sizes(self):
        return {"pending": self.pending_queue.qsize(), "active": len(self.active_tasks)}


class VerlRollouter(_Recorded, CpuRollouter, PlainRollouter):
    def _create_continuous_iterator(self):
        for epoch, batch in super()._create_continuous_iterator():
            self._event("dispatched", gid=verl_feed_sample_id(epoch, self.global_steps), epoch=epoch,
                        idx=int(batch["index"][0]))
            yield epoch, batch

    def queue_sizes(self):
        return {"pending": self.pending_queue.qsize(), "active": len(self.active_tasks)}


class _RecordedTrainer:
    events = None
    die_after = None

    def _fit_update_actor(self, batch):
        batch = super()._fit_update_actor(batch)
        gids = sorted({u[len("uid_"):] for u in batch.non_tensor_batch["uid"]})
        # trigger_parameter_sync_step is 1: this step's weights are param version + 1
        self.events("trained", step=self.current_param_version + 1, gids=gids)
        return batch

    async def load_checkpoint(self):
        version = await super().load_checkpoint()
        self.events("start", resumed_at=int(version or 0))
        return version

    def _save_checkpoint(self):
        super()._save_checkpoint()
        if self.current_param_version == self.die_after:
            sizes = ray.get(self.rollouter.queue_sizes.remote())
            sizes["message_queue"] = self.message_queue_client.get_queue_size_sync()
            self.events("died_after_checkpoint", version=self.current_param_version, **sizes)
            os.killpg(os.getpgid(0), signal.SIGKILL)


class JournaledTrainer(_RecordedTrainer, CpuTrainer, JournaledFullyAsyncTrainer):
    pass


class VerlTrainer(_RecordedTrainer, CpuTrainer, PlainTrainer):
    pass


def verl_config(a):
    folder = os.path.join(os.path.dirname(verl.__file__), "experimental", "fully_async_policy", "config")
    overrides = [
        f"data.train_files=arith-{a.dataset_size}", f"data.val_files=arith-{a.dataset_size}",
        "data.custom_cls.path=pkg://tests.support.verl_data", "data.custom_cls.name=ArithPrompts",
        "data.train_batch_size=0", "data.gen_batch_size=1", "data.shuffle=False", "data.dataloader_num_workers=0",
        f"trainer.total_epochs={a.epochs}", f"trainer.save_freq={a.save_freq}", "trainer.test_freq=-1",
        "trainer.val_before_train=False", "trainer.logger=[console]", "trainer.balance_batch=False",
        f"trainer.default_local_dir={os.path.join(a.run, 'checkpoints')}", "trainer.device=cpu",
        "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "rollout.nnodes=1", "rollout.n_gpus_per_node=1",
        "rollout.total_rollout_steps=null", f"rollout.n={a.n}",
        f"actor_rollout_ref.rollout.n={a.n}", "actor_rollout_ref.rollout.calculate_log_probs=True",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={a.prompts_per_step}",
        "actor_rollout_ref.actor.use_dynamic_bsz=False", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "async_training.trigger_parameter_sync_step=1", f"async_training.staleness_threshold={a.staleness}",
        "async_training.require_batches=1", "async_training.concurrent_samples_per_replica=4",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.hybrid_engine=False",
    ]
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="fully_async_ppo_trainer", overrides=overrides)


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tests.support.verl_child")
    p.add_argument("--mode", choices=["journal", "verl"], required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--dataset-size", type=int, default=24)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--n", type=int, default=2)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--save-freq", type=int, default=2)
    p.add_argument("--staleness", type=float, default=1.0)
    p.add_argument("--generation-delay", type=float, default=0.05)
    p.add_argument("--training-delay", type=float, default=0.0)
    p.add_argument("--die-after-checkpoint", type=int)
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    os.makedirs(a.run, exist_ok=True)
    events_path = os.path.join(a.run, "events.jsonl")
    events = EventLog(events_path, next_segment(events_path))
    config = verl_config(a)
    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             _temp_dir=tempfile.mkdtemp(prefix="ojray", dir="/tmp"), log_to_driver=True,
             runtime_env={"env_vars": {"PYTHONPATH": ROOT, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}})
    journaled = a.mode == "journal"
    rollouter_cls = JournaledRollouter if journaled else VerlRollouter
    rollouter_cls.events_path, rollouter_cls.segment = events_path, events.segment
    rollouter_cls.generation_delay_s = a.generation_delay
    kwargs = {"journal": JournalOptions(os.path.join(a.run, "journal"),
                                        LocalDataPlane(os.path.join(a.run, "rows")))} if journaled else {}
    rollouter = ray.remote(num_cpus=0, max_concurrency=100)(rollouter_cls).remote(
        config, None, None, "cpu", **kwargs)
    trainer = (JournaledTrainer if journaled else VerlTrainer)(config, None, {}, OneDevice(), device_name="cpu")
    trainer.events, trainer.die_after = events, a.die_after_checkpoint
    trainer.training_delay_s = a.training_delay
    queue = reporting_queue_actor(num_cpus=0) if journaled else MessageQueue.options(num_cpus=0)
    run_fully_async(config, rollouter=rollouter, trainer=trainer, queue_actor=queue,
                    client_cls=ReportingQueueClient if journaled else MessageQueueClient, trainer_as_actor=False)
    if journaled:
        ray.get(rollouter.journal_close.remote())
    events("end", version=trainer.current_param_version)
    print(f"done at param version {trainer.current_param_version}", flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
