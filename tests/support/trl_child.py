"""One training process of TRL's AsyncGRPOTrainer on the CPU, journaled or TRL alone, for the tests
in tests/integrations/ (run forked from `tests.support.zygote`, or `python -m tests.support.trl_child`).

    --mode journal   JournaledAsyncGRPOTrainer: train(resume_from_checkpoint=True), the journal decides
    --mode trl       TRL alone: its own rollout_state.json resume, from the newest complete checkpoint

Both generate with the same in-process worker pipeline and the tiny model (tests/support/trl_tiny.py),
and both keep the same event log (tests/support/trl_events.py) at the same hooks. TRL-alone's worker
subclasses TRL's `AsyncRolloutWorker` (its `__init__`, which needs vLLM, is not called) only so that
TRL's own `_save_checkpoint` and `_inner_training_loop` write and read rollout_state.json for it:
its numbers are TRL's resume rule, not a reimplementation.

`--slow-idx I --slow-hold H`: the group of dataset row I is delivered only once the trainer's
model_version is H past the version it was dispatched at (a slow generation, made deterministic by
counting versions). `--die-in-save rng|commit`: SIGKILL itself at the run's first checkpoint save,
inside transformers' save (before the RNG state and trainer_state.json are written) or once all of
TRL's files are written (journaled: sealed, before the journal commits).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import signal
import threading

import torch
from transformers.trainer_utils import get_last_checkpoint
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

from replay import LocalDataPlane
from replay.integrations.trl import JournaledAsyncGRPOTrainer, TrainedAtOptimizerStep
from replay.integrations.pipeline import PromptGroup
from replay.integrations.trl_worker import JournaledRolloutWorker, TrlRolloutWorker
from tests.support.trl_cpu import CPU_ARGS, InProcessWeightTransfer, LocalModelGenerator, apply_cpu_workarounds
from tests.support.trl_events import EventLog, next_segment
from tests.support.trl_tiny import build_dataset, build_model_dir, build_tokenizer, make_reward

HOLD_POLL_S = 0.005


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class SlowGroup:
    """`generate` whose group of dataset row `idx` is delivered only once `version_fn()` is `hold`
    past its value at dispatch (generated at once, under the weights it was dispatched with)."""

    def __init__(self, generate, idx: int, hold: int):
        self.generate, self.idx, self.hold = generate, idx, hold
        self.version_fn = None

    def __call__(self, row, num_generations):
        samples = self.generate(row, num_generations)
        if row["idx"] != self.idx:
            return samples
        release, done = self.version_fn() + self.hold, concurrent.futures.Future()

        def deliver():
            while self.version_fn() < release:
                threading.Event().wait(HOLD_POLL_S)
            done.set_result(samples)
        threading.Thread(target=deliver, daemon=True).start()
        return done


# -- journaled ---------------------------------------------------------------------------------------


class RecordedJournaledWorker(JournaledRolloutWorker):
    events = None

    def _next_group(self) -> PromptGroup:
        group = super()._next_group()
        self.events("dispatched", gid=group.group_id, idx=group.idx, epoch=group.epoch)
        return group

    def _queue_restored(self, work, rows) -> None:
        self.events("restored", gid=work.group_id, idx=work.idx, epoch=work.epoch)
        super()._queue_restored(work, rows)


class RecordedJournaledTrainer(JournaledAsyncGRPOTrainer):
    worker_class = RecordedJournaledWorker

    def __init__(self, *args, events, die_in_save=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.events, self.die_in_save = events, die_in_save
        self.rollout_worker.events = events

    def _resume_point(self, requested):
        point = super()._resume_point(requested)
        s = self.session
        kinds = [w.kind for w in s.resume_work]
        self.events("start", resumed_at=s.step or 0, restored={k: kinds.count(k) for k in set(kinds)})
        return point

    def _groups_trained(self, step, groups):
        super()._groups_trained(step, groups)
        self.events("trained", step=step, gids=sorted(groups), version=self.model_version)

    def _discard_stale(self, sample, staleness):
        super()._discard_stale(sample, staleness)
        self.events("dropped_stale", gid=sample.group_id, step=self.state.global_step, staleness=staleness)

    def _save_rng_state(self, output_dir):
        if self.die_in_save == "rng":
            _die()
        super()._save_rng_state(output_dir)

    def _write_checkpoint(self, model, trial, folder):
        super()._write_checkpoint(model, trial, folder)
        if self.die_in_save == "commit":
            _die()


# -- TRL alone ---------------------------------------------------------------------------------------


class TrlAloneWorker(TrlRolloutWorker, AsyncRolloutWorker):
    """The same pipeline in TRL's own order: prompts from `dataset_start_index` (which TRL's resume
    sets from rollout_state.json), wrapping around, group ids from 0 in each run."""

    def __init__(self, generate, dataset, *, events, **kwargs):
        TrlRolloutWorker.__init__(self, generate, **kwargs)
        self._loop_kwargs = {"dataset_start_index": 0}
        self.dataset, self.events = dataset, events

    def _restore(self) -> None:
        self._groups = self._prompt_groups()

    def _prompt_groups(self):
        n = len(self.dataset)
        for gid, position in enumerate(itertools.count(self._loop_kwargs["dataset_start_index"])):
            epoch, idx = divmod(position, n)
            self.events("dispatched", gid=gid, idx=idx, epoch=epoch)
            yield PromptGroup(gid, self.dataset[idx], idx, epoch)

    def _next_group(self) -> PromptGroup:
        return next(self._groups)


class TrlAloneTrainer(TrainedAtOptimizerStep, AsyncGRPOTrainer):
    def __init__(self, *args, events, die_in_save=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.events, self.die_in_save = events, die_in_save
        self._count_groups_per_step()
        self.rollout_worker.bind(self, lambda sample, staleness: events(
            "dropped_stale", gid=sample.group_id, step=self.state.global_step, staleness=staleness))

    def _groups_trained(self, step, groups):
        self.events("trained", step=step, gids=sorted(groups))

    def _save_rng_state(self, output_dir):
        if self.die_in_save == "rng":
            _die()
        super()._save_rng_state(output_dir)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.die_in_save == "commit":
            _die()


def _complete(folder: str) -> bool:
    try:
        with open(os.path.join(folder, "trainer_state.json")) as f:
            json.load(f)
        return True
    except (OSError, ValueError):
        return False


def trl_resume_point(output_dir: str, events) -> str | None:
    """What a TRL user's `resume_from_checkpoint=True` would take (`get_last_checkpoint`), except
    that an incomplete folder, on which transformers raises at every restart, is counted and passed
    over for the newest complete one (what the user would do by hand)."""
    last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    folders = sorted((os.path.join(output_dir, d) for d in os.listdir(output_dir) if d.startswith("checkpoint-")),
                     key=lambda p: int(p.rsplit("-", 1)[1])) if last else []
    complete = next((f for f in reversed(folders) if _complete(f)), None)
    if last != complete:
        events("incomplete_checkpoint", folder=os.path.basename(last))
    return complete


# -- a run -------------------------------------------------------------------------------------------


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tests.support.trl_child")
    p.add_argument("--mode", choices=["journal", "trl"], required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-steps", type=int, default=5)
    p.add_argument("--save-total-limit", type=int)
    p.add_argument("--dataset-size", type=int, default=40)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--groups-per-step", type=int, default=2)
    p.add_argument("--queue-steps", type=int, default=2, help="rollout_buffer size, in steps of samples")
    p.add_argument("--max-staleness", type=int, default=4)
    p.add_argument("--slow-idx", type=int)
    p.add_argument("--slow-hold", type=int, default=0)
    p.add_argument("--die-in-save", choices=["rng", "commit"])
    p.add_argument("--resume-from", help="journal mode: resume_from_checkpoint (default True)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    apply_cpu_workarounds()
    torch.set_num_threads(1)   # the trainer and the worker thread share 2 cores
    os.makedirs(a.run, exist_ok=True)
    events_path = os.path.join(a.run, "events.jsonl")
    events = EventLog(events_path, next_segment(events_path))
    tokenizer = build_tokenizer()
    model_dir = build_model_dir(os.path.join(a.run, "tiny-model"), tokenizer)
    dataset = build_dataset(a.dataset_size)
    generator = LocalModelGenerator(model_dir, tokenizer, make_reward(tokenizer), max_new_tokens=4,
                                    seed=events.segment)
    generate = generator if a.slow_idx is None else SlowGroup(generator, a.slow_idx, a.slow_hold)
    per_step = a.generations * a.groups_per_step
    config = AsyncGRPOConfig(
        output_dir=os.path.join(a.run, "trainer"), **CPU_ARGS, token_budget=0, max_steps=a.steps,
        save_strategy="steps", save_steps=a.save_steps,
        save_total_limit=a.save_total_limit, per_device_train_batch_size=per_step,
        num_generations=a.generations, max_completion_length=4, max_staleness=a.max_staleness,
        queue_maxsize=per_step * a.queue_steps, learning_rate=3e-3, logging_steps=1000, report_to="none",
        disable_tqdm=True, seed=0, heartbeat_stale_after_s=120.0)
    common = dict(args=config, train_dataset=dataset, processing_class=tokenizer,
                  weight_transfer=InProcessWeightTransfer(generator), events=events, die_in_save=a.die_in_save)
    if a.mode == "journal":
        trainer = RecordedJournaledTrainer(model_dir, generate=generate, journal_dir=os.path.join(a.run, "journal"),
                                           data_plane=LocalDataPlane(os.path.join(a.run, "rows")), **common)
        resume = a.resume_from or True
    else:
        worker = TrlAloneWorker(generate, dataset, events=events, num_generations=a.generations,
                                queue_maxsize=config.queue_maxsize)
        trainer = TrlAloneTrainer(model_dir, rollout_worker=worker, **common)
        resume = trl_resume_point(config.output_dir, events)
        events("start", resumed_at=int(resume.rsplit("-", 1)[1]) if resume else 0)
    if a.slow_idx is not None:
        generate.version_fn = lambda: trainer.model_version
    trainer.train(resume_from_checkpoint=resume)
    events("end", global_step=trainer.state.global_step)
    print(f"done at step {trainer.state.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
