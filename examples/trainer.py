"""An asynchronous GRPO-shaped trainer that embeds the ownership journal.

    python -m examples.trainer --out runs/demo            # start, or resume after any crash
    python -m examples.trainer --out runs/demo --baseline # the same loop without the journal

The shape is the one of an async RL framework (NeMo-RL, verl, ...):

* a `torchdata` `StatefulDataLoader` with shuffling hands out prompt batches;
* `--workers` generator tasks produce `--rollouts` rollouts per prompt group with random
  latency, from a copy of the policy at the version the group was admitted with
  (generation runs one step ahead of training);
* a rollout can fail (`--failure-rate`): its group is discarded and replaced by a group
  from the spare pool (whole loader batches are diverted into the pool when it runs dry);
* a finished group's rollouts go to a local data plane (`examples.data_plane`), durably;
* a tiny policy trains on each step's groups with a GRPO loss;
* every `--ckpt-every` steps a checkpoint: `begin_checkpoint` when the state is captured,
  weights (and an ownership cut) written and fsynced, then `commit_checkpoint`;
  background compaction with retention runs after each commit.

Every ownership change is journaled *before* the trainer acts on it, through the public
API only (`Journal`, `AsyncJournal`, `replay.restore`, `snapshot.compact`,
`BackgroundCompactor`). On start the trainer restores (the same code for a first start and
a restart): `replay.restore(journal, dataset=, collate_fn=, data_plane=, salvage=True)`,
`Journal.open(journal, resume=state)`, `dataloader.load_state_dict(state.loader_state)`,
then it redispatches the admitted groups, re-admits the reserved ones, trains the replay
ones and puts the spares back in the pool. Without a journal directory it resumes from
the ownership cut inside the newest checkpoint directory.

With `--baseline` there is no journal: it saves the loader's `state_dict()` with the
weights at checkpoint time and drops whatever was in flight on a restart, as async
frameworks do today. Both write a ledger (`examples.bookkeeping`) the chaos driver audits.

It announces what it does on stdout, one line each, so `journal-demo` can aim its kills:
`RESUMED ...`, `STEP n ...`, `PHASE checkpoint_save step=n`, `PHASE checkpoint_committed
step=n`, `PHASE compaction`, `PHASE compaction_done ...`, `DONE ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import copy
import io
import os
import random
import re
import secrets
import shutil
import sys
import threading
from dataclasses import dataclass

import torch

from journal import DEFAULT_FS, AsyncJournal, GroupRef, Journal, list_segments
from replay import fingerprint, restore
from snapshot import BackgroundCompactor, compact

from .bookkeeping import Ledger
from .data_plane import LocalDataPlane
from .dataset import ANSWERS, PROMPT_TOKENS, VOCAB, PromptDataset, collate_fn
from .loader import stateful_loader

RESERVED, ADMITTED, REPLAY, SPARE, TRAINED, DROPPED = "RESERVED", "ADMITTED", "REPLAY", "SPARE", "TRAINED", "DROPPED"
CKPT_NAME = re.compile(r"^step_(\d{8})$")
TMP = ".tmp-"

_print_lock = threading.Lock()


def announce(*parts) -> None:
    """One line on stdout, flushed (the chaos driver reads it to aim its kills)."""
    line = " ".join(str(p) for p in parts)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@dataclass
class Config:
    out: str
    seed: int = 0
    epochs: int = 2
    dataset_size: int = 2048
    batch_size: int = 16
    rollouts: int = 4
    workers: int = 8
    failure_rate: float = 0.02
    latency_ms: tuple = (2.0, 12.0)
    ckpt_every: int = 4
    ckpt_save_seconds: float = 0.05
    keep_ckpts: int = 2
    segment_bytes: int = 64 << 10
    lr: float = 0.02
    baseline: bool = False

    @property
    def journal_dir(self) -> str:
        return os.path.join(self.out, "journal")

    @property
    def ckpt_dir(self) -> str:
        return os.path.join(self.out, "ckpt")

    @property
    def rows_dir(self) -> str:
        return os.path.join(self.out, "rows")

    @property
    def ledger_path(self) -> str:
        return os.path.join(self.out, "ledger.log")


# -- the policy ------------------------------------------------------------------------------


class TinyPolicy(torch.nn.Module):
    """Prompt tokens -> logits over the answer tokens."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.hidden = torch.nn.Linear(16 * PROMPT_TOKENS, 64)
        self.head = torch.nn.Linear(64, ANSWERS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens).flatten(1)
        return self.head(torch.relu(self.hidden(h)))


class MomentumSGD:
    """SGD with momentum, with `state_dict`/`load_state_dict` like `torch.optim` (whose first use
    imports `torch._dynamo`: seconds added to every restart of a demo that restarts a lot)."""

    def __init__(self, params, lr: float, momentum: float = 0.9):
        self.params = list(params)
        self.lr, self.momentum = lr, momentum
        self.buf = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, b in zip(self.params, self.buf):
            if p.grad is not None:
                b.mul_(self.momentum).add_(p.grad)
                p.sub_(self.lr * b)

    def state_dict(self) -> dict:
        return {"lr": self.lr, "momentum": self.momentum, "buf": [b.clone() for b in self.buf]}

    def load_state_dict(self, sd: dict) -> None:
        self.lr, self.momentum = sd["lr"], sd["momentum"]
        for b, saved in zip(self.buf, sd["buf"]):
            b.copy_(saved)


def grpo_loss(policy: TinyPolicy, rows: list[dict]) -> torch.Tensor:
    """Group-relative advantages, clipped importance ratio against the generating policy."""
    tokens = torch.stack([r["tokens"] for r in rows])                 # G x T
    answers = torch.stack([r["answers"] for r in rows])               # G x R
    old_logp = torch.stack([r["old_logprobs"] for r in rows])         # G x R
    rewards = torch.stack([r["rewards"] for r in rows])               # G x R
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    logp = torch.log_softmax(policy(tokens), -1).gather(1, answers)   # G x R
    ratio = torch.exp(logp - old_logp)
    return -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()


# -- prompt groups in memory -------------------------------------------------------------------


class Work:
    """A prompt group as the trainer holds it (the journal holds its ownership)."""

    __slots__ = ("gid", "idx", "epoch", "task", "tokens", "answer", "status", "target_step",
                 "policy_version", "locator", "rows", "failed", "done", "answers", "old_logprobs",
                 "rewards")

    def __init__(self, gid: int, idx: int, epoch: int, task: str, tokens: torch.Tensor, answer: int,
                 status: str):
        self.gid, self.idx, self.epoch, self.task = gid, idx, epoch, task
        self.tokens, self.answer, self.status = tokens, answer, status
        self.target_step = None
        self.policy_version = None
        self.locator = None
        self.rows = None
        self.failed = False
        self.done = 0
        self.answers = self.old_logprobs = self.rewards = None

    @property
    def row_key(self) -> tuple[int, int]:
        return (self.epoch, self.idx)


# -- ownership: the journal, or nothing (baseline) -----------------------------------------------


class JournalOwnership:
    """Write-ahead ownership through the public journal API (awaitable: commits run in worker
    threads and share fsyncs)."""

    def __init__(self, j: Journal):
        self.j = j
        self.aj = AsyncJournal(j)

    async def taken(self, refs, loader_state, dataset_size: int) -> list[int]:
        return await self.aj.taken(refs, loader_state=loader_state, dataset_size=dataset_size)

    async def diverted(self, gids):
        await self.aj.diverted(gids)

    async def admitted(self, gids, target_step, policy_version):
        await self.aj.admitted(gids, target_step=target_step, policy_version=policy_version)

    async def finished(self, gid, policy_version, locator):
        await self.aj.finished([gid], policy_version=policy_version, locators=[locator])

    async def trained(self, gids, step):
        await self.aj.trained(gids, step=step)

    async def discard_and_replace(self, failed, reason, spare, target_step, policy_version):
        def commit():
            with self.j.transaction() as tx:
                tx.discarded([failed], reason=reason)
                if spare is not None:
                    tx.admitted([spare], target_step=target_step, policy_version=policy_version,
                                replaces=failed)
        await asyncio.to_thread(commit)

    async def begin_checkpoint(self, step) -> int:
        return await self.aj.begin_checkpoint(step=step)

    async def commit_checkpoint(self, step):
        await self.aj.commit_checkpoint(step=step)


class NoOwnership:
    """The baseline: group ids from a counter, nothing durable."""

    def __init__(self):
        self.next_gid = secrets.randbits(40) << 20  # unique across restarts (data plane keys)

    async def taken(self, refs, loader_state, dataset_size: int):
        gids = list(range(self.next_gid, self.next_gid + len(refs)))
        self.next_gid += len(refs)
        return gids

    async def diverted(self, gids):
        pass

    async def admitted(self, gids, target_step, policy_version):
        pass

    async def finished(self, gid, policy_version, locator):
        pass

    async def trained(self, gids, step):
        pass

    async def discard_and_replace(self, failed, reason, spare, target_step, policy_version):
        pass

    async def begin_checkpoint(self, step):
        return None

    async def commit_checkpoint(self, step):
        pass


# -- checkpoints on disk -----------------------------------------------------------------------



def checkpoint_dirs(ckpt_dir: str) -> list[tuple[int, str]]:
    """(step, path) of the complete checkpoint directories, newest step first."""
    if not os.path.isdir(ckpt_dir):
        return []
    out = []
    for name in os.listdir(ckpt_dir):
        m = CKPT_NAME.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(ckpt_dir, name)))
    return sorted(out, reverse=True)


def step_dir(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"step_{step:08d}")


def _save_fsynced(obj, path: str) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


# -- the trainer -------------------------------------------------------------------------------


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.ds = PromptDataset(cfg.dataset_size, seed=cfg.seed)
        gen = torch.Generator()
        gen.manual_seed(cfg.seed)
        self.dl = stateful_loader(self.ds, batch_size=cfg.batch_size, shuffle=True, generator=gen,
                                  collate_fn=collate_fn, num_workers=0)
        self.policy = TinyPolicy()
        self.opt = MomentumSGD(self.policy.parameters(), lr=cfg.lr)
        self.dp = LocalDataPlane(cfg.rows_dir)
        self.ledger = Ledger(cfg.ledger_path)
        self.rng = random.Random(f"{cfg.seed}-{secrets.token_hex(8)}")  # a new stream per run
        self.step = 0                # last trained step
        self.last_ckpt = 0
        self.epoch = 0               # epoch the loader is in
        self.loader_epoch = 0        # epoch of the last batch taken (what the journaled state is in)
        self.it = None
        self.exhausted = False
        self.live: dict[int, Work] = {}
        self.reserved: collections.deque[Work] = collections.deque()
        self.spares: collections.deque[Work] = collections.deque()
        self.policies: dict[int, TinyPolicy] = {}
        self.trained_locators: dict[int, list[str]] = collections.defaultdict(list)
        self.jobs: asyncio.Queue | None = None
        self.events: asyncio.Queue | None = None
        self.journal: Journal | None = None
        self.compactor: BackgroundCompactor | None = None
        self.compaction = None
        self.own = None
        self.stats = collections.Counter()
        self.gc_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rows-gc")

    # -- start: restore, resume --------------------------------------------------------------

    def _load_weights(self, step: int, expect_lsn: int | None) -> dict:
        path = os.path.join(step_dir(self.cfg.ckpt_dir, step), "model.pt")
        if not os.path.exists(path):
            raise RuntimeError(f"checkpoint of step {step} is committed but {path} is missing")
        ck = torch.load(path, weights_only=True, map_location="cpu")
        if expect_lsn is not None and ck["lsn"] != expect_lsn:
            raise RuntimeError(f"{path} was captured at LSN {ck['lsn']}, the journal restores the "
                               f"step-{step} checkpoint at LSN {expect_lsn}")
        self.policy.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optim"])
        self.step = self.last_ckpt = step
        return ck

    def _start_baseline(self) -> None:
        """What async frameworks do today: weights + loader state; in-flight work is gone."""
        announce("PHASE", "restore")
        self.own = NoOwnership()
        ckpts = checkpoint_dirs(self.cfg.ckpt_dir)
        step = 0
        if ckpts:
            step = ckpts[0][0]
            ck = self._load_weights(step, None)
            self.dl.load_state_dict(ck["loader_state"])
            self.epoch = self.loader_epoch = int(ck["epoch"])
        self.ledger.resumed(step)
        self.dp.sweep(())   # nothing in flight survives a baseline restart
        announce("RESUMED", "source=baseline", f"step={step}", "lsn=-", "reserved=0", "admitted=0",
                 "replay=0", "spare=0", "salvaged=0", "demoted=0", f"rollouts={self.cfg.rollouts}")

    def _start_journal(self) -> list[Work]:
        cfg = self.cfg
        announce("PHASE", "restore")
        jdir = cfg.journal_dir
        ckpts = [(s, p) for s, p in checkpoint_dirs(cfg.ckpt_dir)
                 if os.path.isdir(os.path.join(p, "ownership"))]
        journal_exists = os.path.isdir(jdir) and bool(list_segments(jdir))
        if journal_exists or not ckpts:
            os.makedirs(jdir, exist_ok=True)
            source = "journal"
            state = restore(jdir, dataset=self.ds, collate_fn=collate_fn, data_plane=self.dp, salvage=True)
        else:
            # the journal is gone: resume from the ownership cut the newest checkpoint carries
            source = "cut"
            cut = os.path.join(ckpts[0][1], "ownership")
            self.dp.import_cut(cut)
            state = restore(cut, dataset=self.ds, collate_fn=collate_fn, data_plane=self.dp, salvage=True)
        self.journal = Journal.open(jdir, resume=state, segment_bytes=cfg.segment_bytes)
        if source == "cut":
            compact(jdir, at="end", journal=self.journal, data_plane=self.dp)
        self.own = JournalOwnership(self.journal)
        self.compactor = BackgroundCompactor(self.journal, data_plane=self.dp, keep_cuts=2,
                                             retention="archive")
        ck = self._load_weights(state.step, state.lsn) if state.step is not None else None
        if state.loader_state is not None:
            self.dl.load_state_dict(state.loader_state)
            self.epoch = self.loader_epoch = int(ck["loader_epoch"]) if ck is not None else 0
        self.ledger.resumed(state.step or 0)
        # rows no restore can ask for any more (dead tails, trained groups) leave the data plane
        self.dp.sweep(g.locator for g in state.replay)

        def work(g, status) -> Work:
            prompt = g.prompt  # collate_fn([dataset[idx]]), checked against the journal's locator
            w = Work(g.group_id, g.idx, g.epoch if g.epoch is not None else 0, g.task_name,
                     prompt["tokens"][0], int(prompt["answer"][0]), status)
            w.target_step, w.policy_version, w.locator = g.target_step, g.policy_version, g.locator
            self.live[w.gid] = w
            return w

        for g in state.replay:                       # finished: train directly
            work(g, REPLAY)
        redispatch = [work(g, ADMITTED) for g in state.admitted]   # all rollouts regenerate
        for g in state.reserved:                     # back through admission
            self.reserved.append(work(g, RESERVED))
        for g in state.spare:
            self.spares.append(work(g, SPARE))
        self.stats.update(regenerated_groups=len(redispatch), salvaged_groups=len(state.salvaged),
                          demoted_groups=len(state.demoted))
        self.ledger.count(regenerated_groups=len(redispatch), salvaged_groups=len(state.salvaged),
                          demoted_groups=len(state.demoted))
        announce("RESUMED", f"source={source}", f"step={state.step or 0}", f"lsn={state.lsn}",
                 f"reserved={len(state.reserved)}", f"admitted={len(state.admitted)}",
                 f"replay={len(state.replay)}", f"spare={len(state.spare)}",
                 f"salvaged={len(state.salvaged)}", f"demoted={len(state.demoted)}",
                 f"skipped_cuts={len(state.skipped)}", f"rollouts={cfg.rollouts}",
                 f"base={state.base_cut or '-'}")
        return redispatch

    def _cleanup_tmp(self) -> None:
        os.makedirs(self.cfg.ckpt_dir, exist_ok=True)
        for name in os.listdir(self.cfg.ckpt_dir):
            if name.startswith(TMP):
                shutil.rmtree(os.path.join(self.cfg.ckpt_dir, name), ignore_errors=True)

    # -- the loader -------------------------------------------------------------------------------

    def _next_batch(self):
        while self.epoch < self.cfg.epochs:
            if self.it is None:
                self.it = iter(self.dl)
            try:
                return next(self.it), self.epoch
            except StopIteration:
                self.epoch += 1
                self.it = None
        self.exhausted = True
        return None

    async def _take(self) -> list[Work]:
        """Take one batch from the loader: journaled (with the loader state after the take)
        before the trainer holds it."""
        got = self._next_batch()
        if got is None:
            return []
        batch, epoch = got
        loader_state = self.dl.state_dict()
        idxs = batch["idx"].tolist()
        refs = [GroupRef(idx=i, task_name=batch["task_name"][k], epoch=epoch,
                         fingerprint=fingerprint(self.ds[i])) for k, i in enumerate(idxs)]
        gids = await self.own.taken(refs, loader_state, len(self.ds))
        self.loader_epoch = epoch
        out = []
        for k, (gid, i) in enumerate(zip(gids, idxs)):
            w = Work(gid, i, epoch, batch["task_name"][k], batch["tokens"][k], int(batch["answer"][k]),
                     RESERVED)
            self.live[gid] = w
            out.append(w)
        return out

    # -- admission, spares, failures ---------------------------------------------------------

    def _snapshot_policy(self) -> None:
        p = TinyPolicy()
        p.load_state_dict(self.policy.state_dict())
        p.eval()
        self.policies[self.step] = p

    def _dispatch(self, w: Work) -> None:
        w.failed = False
        w.done = 0
        R = self.cfg.rollouts
        w.answers = torch.zeros(R, dtype=torch.long)
        w.old_logprobs = torch.zeros(R)
        w.rewards = torch.zeros(R)
        for i in range(R):
            self.jobs.put_nowait((w, i))

    async def _admit(self, groups: list[Work], target: int) -> None:
        await self.own.admitted([w.gid for w in groups], target, self.step)
        for w in groups:
            w.status, w.target_step, w.policy_version = ADMITTED, target, self.step
            self._dispatch(w)

    async def _next_for_admission(self) -> list[Work]:
        B = self.cfg.batch_size
        if self.reserved:
            return [self.reserved.popleft() for _ in range(min(B, len(self.reserved)))]
        batch = await self._take()
        if batch:
            return batch
        return [self.spares.popleft() for _ in range(min(B, len(self.spares)))]  # end of data: drain

    async def _spare(self) -> Work | None:
        if not self.spares and not self.exhausted:
            batch = await self._take()
            if batch:
                await self.own.diverted([w.gid for w in batch])   # a whole batch into the pool
                for w in batch:
                    w.status = SPARE
                self.spares.extend(batch)
                self.stats["diverted_batches"] += 1
        return self.spares.popleft() if self.spares else None

    async def _failed(self, w: Work) -> None:
        if w.status != ADMITTED:
            return
        spare = await self._spare()
        await self.own.discard_and_replace(w.gid, "rollout_failed", spare.gid if spare else None,
                                           w.target_step, self.step)
        self.ledger.dropped("rollout_failed", [w.row_key])
        w.status = DROPPED
        del self.live[w.gid]
        self.stats["discarded"] += 1
        if spare is not None:
            spare.status, spare.target_step, spare.policy_version = ADMITTED, w.target_step, self.step
            self._dispatch(spare)

    async def _fill(self, t: int) -> None:
        """Gate: generation runs one step ahead (batches for t and t+1 admitted), and one more
        batch waits at the gate, RESERVED."""
        for target in (t, t + 1):
            if not any(w.status in (ADMITTED, REPLAY) and w.target_step == target for w in self.live.values()):
                groups = await self._next_for_admission()
                if groups:
                    await self._admit(groups, target)
        if not self.reserved and not self.exhausted:
            self.reserved.extend(await self._take())

    async def _handle(self, event) -> None:
        kind, what = event
        if kind == "failed":
            await self._failed(what)
        elif kind == "error":
            raise what

    async def _wait_ready(self, t: int) -> None:
        while True:
            while not self.events.empty():
                await self._handle(self.events.get_nowait())
            if not any(w.status == ADMITTED and w.target_step <= t for w in self.live.values()):
                return
            await self._handle(await self.events.get())

    # -- generation -------------------------------------------------------------------------------

    async def _worker(self, wid: int) -> None:
        rng = random.Random(f"{self.rng.random()}-{wid}")
        lo, hi = self.cfg.latency_ms
        try:
            while True:
                w, i = await self.jobs.get()
                if w.status != ADMITTED or w.failed:
                    continue
                await asyncio.sleep(rng.uniform(lo, hi) / 1000)
                if w.status != ADMITTED or w.failed:
                    continue
                if rng.random() < self.cfg.failure_rate:
                    w.failed = True
                    self.events.put_nowait(("failed", w))
                    continue
                policy = self.policies[w.policy_version]
                with torch.no_grad():
                    logp = torch.log_softmax(policy(w.tokens[None]), -1)[0]
                    gen = torch.Generator().manual_seed(rng.getrandbits(62))
                    a = int(torch.multinomial(logp.exp(), 1, generator=gen))
                w.answers[i] = a
                w.old_logprobs[i] = logp[a]
                w.rewards[i] = float(a == w.answer)
                w.done += 1
                if w.done == self.cfg.rollouts:
                    rows = {"tokens": w.tokens, "answers": w.answers, "old_logprobs": w.old_logprobs,
                            "rewards": w.rewards, "policy_version": torch.tensor(w.policy_version)}
                    # rows durable in the data plane first, then the journal says where they are
                    loc = await asyncio.to_thread(self.dp.put, w.gid, rows)
                    await self.own.finished(w.gid, w.policy_version, loc)
                    w.status, w.locator, w.rows = REPLAY, loc, rows
                    self.events.put_nowait(("finished", w))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surface it in the main loop
            self.events.put_nowait(("error", exc))

    # -- training ------------------------------------------------------------------------------

    async def _train(self, t: int, groups: list[Work]) -> None:
        groups.sort(key=lambda w: w.gid)
        rows = []
        for w in groups:
            if w.rows is None:   # restored REPLAY group: its rows are in the data plane
                w.rows = await asyncio.to_thread(self.dp.get, w.locator)
            rows.append(w.rows)
        await self.own.trained([w.gid for w in groups], t)     # write-ahead, then the update
        self.ledger.trained(t, [w.row_key for w in groups])
        loss = grpo_loss(self.policy, rows)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.step = t
        self._snapshot_policy()
        for w in groups:
            w.status = TRAINED
            del self.live[w.gid]
            if w.locator is not None:
                self.trained_locators[t].append(w.locator)
        reward = float(torch.stack([r["rewards"] for r in rows]).mean())
        announce("STEP", t, f"groups={len(groups)}", f"epoch={self.loader_epoch}",
                 f"loss={float(loss.detach()):.4f}", f"reward={reward:.3f}")
        in_use = {w.policy_version for w in self.live.values() if w.status == ADMITTED}
        for v in [v for v in self.policies if v != self.step and v not in in_use]:
            del self.policies[v]

    # -- checkpoints and compaction ---------------------------------------------------------

    async def _checkpoint(self, t: int) -> None:
        announce("PHASE", "checkpoint_save", f"step={t}")
        captured = {"model": copy.deepcopy(self.policy.state_dict()),
                    "optim": copy.deepcopy(self.opt.state_dict()),
                    "step": t, "loader_epoch": self.loader_epoch}
        if self.cfg.baseline:
            captured["loader_state"] = self.dl.state_dict()
            captured["epoch"] = self.epoch
        lsn = await self.own.begin_checkpoint(t)     # the journal's state here is what we captured
        captured["lsn"] = lsn
        self.ledger.checkpoint(t)
        tmp = os.path.join(self.cfg.ckpt_dir, f"{TMP}step_{t:08d}-{secrets.token_hex(4)}")
        os.makedirs(tmp)
        await asyncio.to_thread(_save_fsynced, captured, os.path.join(tmp, "model.pt"))
        if self.compactor is not None:
            # the ownership cut at the checkpoint's LSN goes with the weights, so the checkpoint
            # directory restores on its own; it runs on the compactor's one thread
            fut = self.compactor.submit(lsn, into=os.path.join(tmp, "ownership"), retention=None)
            await asyncio.wrap_future(fut)
        await asyncio.sleep(self.cfg.ckpt_save_seconds)   # stands in for writing large weights
        await asyncio.to_thread(self._publish_checkpoint, tmp, t)
        await self.own.commit_checkpoint(t)
        announce("PHASE", "checkpoint_committed", f"step={t}")
        self.last_ckpt = t
        self._retire_old(t)
        if self.compactor is not None:
            self._compact_in_background()

    def _publish_checkpoint(self, tmp: str, t: int) -> None:
        DEFAULT_FS.fsync_dir(tmp)
        final = step_dir(self.cfg.ckpt_dir, t)
        if os.path.exists(final):   # written by a run that died before committing it
            shutil.rmtree(final)
        os.rename(tmp, final)
        DEFAULT_FS.fsync_dir(self.cfg.ckpt_dir)

    def _retire_old(self, committed: int) -> None:
        """After the step-`committed` checkpoint is durable no restore goes back further: older
        checkpoint directories (but the newest few) and the rows of groups trained up to it go."""
        older = [(s, p) for s, p in checkpoint_dirs(self.cfg.ckpt_dir) if s < committed]
        for _, p in older[self.cfg.keep_ckpts - 1:]:
            shutil.rmtree(p, ignore_errors=True)
        done = [s for s in self.trained_locators if s <= committed]
        doomed = [loc for s in done for loc in self.trained_locators.pop(s)]
        if doomed:   # unlinking is slow on a busy disk: off the training loop
            self.gc_pool.submit(self.dp.delete, doomed)

    def _compact_in_background(self) -> None:
        if self.compaction is not None and not self.compaction.done():
            return
        announce("PHASE", "compaction")
        fut = self.compactor.submit("latest-checkpoint")

        def done(f):
            exc = f.exception()
            if exc is not None:
                announce("PHASE", "compaction_failed", repr(exc))
            else:
                r = f.result()
                announce("PHASE", "compaction_done", f"lsn={r.lsn}", f"step={r.step}",
                         f"retired={len(r.retired_segments)}", f"removed_cuts={len(r.removed_cuts)}")
        fut.add_done_callback(done)
        self.compaction = fut

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        self._cleanup_tmp()
        self.jobs, self.events = asyncio.Queue(), asyncio.Queue()
        redispatch = []
        if self.cfg.baseline:
            self._start_baseline()
        else:
            redispatch = self._start_journal()
        self._snapshot_policy()
        for w in redispatch:   # ordered by target step, then group id
            w.policy_version = self.step
            self._dispatch(w)
        workers = [asyncio.create_task(self._worker(i)) for i in range(self.cfg.workers)]
        try:
            while True:
                t = self.step + 1
                await self._fill(t)
                if not self.live:
                    break
                await self._wait_ready(t)
                ready = [w for w in self.live.values() if w.status == REPLAY and w.target_step <= t]
                if ready:
                    await self._train(t, ready)
                else:
                    self.step = t      # every group of this step failed with no spare left
                    self._snapshot_policy()
                if self.step - self.last_ckpt >= self.cfg.ckpt_every:
                    await self._checkpoint(self.step)
            if self.step > self.last_ckpt:
                await self._checkpoint(self.step)
            if self.compaction is not None:   # let it finish; a failure was announced already
                await asyncio.wait([asyncio.wrap_future(self.compaction)])
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if self.compactor is not None:
                self.compactor.close()
            self.gc_pool.shutdown(wait=True)
            if self.journal is not None:
                self.journal.close()
            self.ledger.close()
        announce("DONE", f"step={self.step}", f"epochs={self.cfg.epochs}",
                 *(f"{k}={v}" for k, v in sorted(self.stats.items())))


def parse_args(argv=None) -> Config:
    p = argparse.ArgumentParser(prog="python -m examples.trainer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="run directory (journal/, ckpt/, rows/, ledger.log)")
    p.add_argument("--seed", type=int, default=0, help="dataset and shuffling seed")
    p.add_argument("--epochs", type=int, default=2, help="passes over the dataset")
    p.add_argument("--dataset-size", type=int, default=2048, help="prompts in the dataset")
    p.add_argument("--batch-size", type=int, default=16, help="prompt groups per step")
    p.add_argument("--rollouts", type=int, default=4, help="rollouts per group")
    p.add_argument("--workers", type=int, default=8, help="generator tasks")
    p.add_argument("--failure-rate", type=float, default=0.02, help="probability a rollout fails")
    p.add_argument("--latency-ms", type=float, nargs=2, default=(2.0, 12.0), metavar=("LO", "HI"),
                   help="a rollout takes uniform(LO, HI) ms")
    p.add_argument("--ckpt-every", type=int, default=4, help="steps between checkpoints")
    p.add_argument("--ckpt-save-seconds", type=float, default=0.05,
                   help="extra time a checkpoint save takes (stands in for large weights)")
    p.add_argument("--segment-bytes", type=int, default=64 << 10, help="journal segment size")
    p.add_argument("--baseline", action="store_true",
                   help="no journal: save the loader state at checkpoint time, drop in-flight work")
    a = p.parse_args(argv)
    return Config(out=a.out, seed=a.seed, epochs=a.epochs, dataset_size=a.dataset_size,
                  batch_size=a.batch_size, rollouts=a.rollouts, workers=a.workers,
                  failure_rate=a.failure_rate, latency_ms=tuple(a.latency_ms), ckpt_every=a.ckpt_every,
                  ckpt_save_seconds=a.ckpt_save_seconds, segment_bytes=a.segment_bytes,
                  baseline=a.baseline)


def main(argv=None) -> int:
    cfg = parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(cfg.out, exist_ok=True)
    asyncio.run(Trainer(cfg).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
