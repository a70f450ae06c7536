"""An asynchronous GRPO-shaped trainer that embeds the ownership journal.

    python -m examples.trainer --out runs/demo            # start, or resume after any crash
    python -m examples.trainer --out runs/demo --baseline # the same loop without the journal
    python -m examples.trainer --out runs/demo --ray      # rollout workers as Ray actors
    python -m examples.trainer --out runs/demo --no-journal  # the default loop, journal off
    python -m examples.trainer --out runs/demo --replica s3://bucket/runs/demo --replica-options JSON

The shape is the one of an async RL framework (NeMo-RL, verl, ...):

* a `torchdata` `StatefulDataLoader` with shuffling hands out prompt batches;
* `--workers` generator tasks produce `--rollouts` rollouts per prompt group token by token
  (`examples.generation`: one forward pass of the tiny policy per token, long-tailed lengths,
  a median rollout taking `--latency-ms`), from a copy of the policy at the version the group
  was admitted with (generation runs one step ahead of training); five prompts in eight are
  single-turn, the others multi-turn with one of three environments (`examples.environments`:
  one per recovery of `replay.environments`);
* `--progress-every K`: a rollout's prefix (its tokens so far, the environment's saved state)
  goes to the data plane every K tokens and every turn of a multi-turn rollout, then
  `rollout_progress`; after a restore its next attempt continues from that prefix;
* rollout-level ownership (the default): groups are admitted with `rollouts=N`; each
  rollout's result goes to a local data plane (`replay.LocalDataPlane`) under its own
  locator, durably, then `rollout_sealed`; the last seal and `finished` are one commit;
* a rollout can fail (`--failure-rate`), and a slow worker (`--slow-rate`) misses its
  `--deadline-ms`: the rollout gets `rollout_failed` and is dispatched again with the next
  attempt, up to `--max-attempts`; then its group is discarded and replaced by a group from
  the spare pool (whole loader batches are diverted into the pool when it runs dry). The
  slow worker answers later anyway: the journal rejects its seal (`StaleAttempt`, or the
  rollout is sealed already by its next attempt), the trainer deletes the row and counts a
  fenced late result;
* `--group-level`: groups admitted without `rollouts=` (all-or-nothing): any failed or late
  rollout discards its group, a finished group's rows go to the data plane as one file;
* `--ray`: the generator tasks send their rollouts to Ray actors (`examples.ray_workers`,
  on `--ray-address` or a local Ray); an actor writes the row itself and returns the locator,
  the trainer seals it; an actor's death gives the rollout up to its next attempt like a
  missed deadline, and a restarted trainer takes over the actors of the one that died
  (group-level and the baseline too: there the row is read back and the group's rows
  written once all are in);
* a tiny policy trains on each step's groups with a GRPO loss in AReaL's decoupled form: each
  rollout's row carries its tokens' behaviour log-probabilities and the versions of the weights
  that sampled them (`examples.generation`), and every token (and answer) is weighed by the
  importance weight of the weights being trained over its behaviour policy, clamped at
  IW_CLAMP;
* `--max-policy-lag K`: the trainer's off-policy bound. A restore to the checkpoint of step S
  keeps the sealed rollouts, finished groups and prefixes of weights up to S + K (DESIGN 14),
  which the loss weighs as any off-policy sample; a continued prefix keeps its tokens'
  versions, the tokens after it are the restored weights';
* every `--ckpt-every` steps a checkpoint: `begin_checkpoint` when the state is captured,
  weights (and an ownership cut) written and fsynced, then `commit_checkpoint`;
  background compaction with retention runs after each commit.

Every ownership change is journaled *before* the trainer acts on it, through the public
API only (`Journal`, `AsyncJournal`, `replay.restore`, `snapshot.compact`,
`BackgroundCompactor`). On start the trainer restores (the same code for a first start and
a restart): `replay.restore(journal, dataset=, collate_fn=, data_plane=, salvage=True,
max_policy_lag=K)`,
`Journal.open(journal, resume=state)`, `dataloader.load_state_dict(state.loader_state)`,
then it redispatches the admitted groups (only their pending rollouts, with the attempts
restore gives them; sealed ones are read back from the data plane), re-admits the reserved
ones, trains the replay ones and puts the spares back in the pool. Without a journal
directory it resumes from the ownership cut inside the newest checkpoint directory (its
`data_plane/` holds the rows of the replay groups and of the admitted groups' sealed rollouts).

With `--replica URL` the journal is shipped to a bucket (`Journal.open(..., replica=URL)`) and
the run survives the loss of its node: a start with an empty or missing `journal/` restores from
the bucket alone (`replay.restore(URL, replica_options=...)`), then
`Journal.open(journal, resume=state, replica=URL)` continues on a new timeline. What survives a
node loss is the bucket and the rest of `--out`: `journal/` is the node's local disk (gone with
it), while `ckpt/` (weights) and `rows/` (the data plane) stand for the shared file system or
bucket real runs keep them on. A restore from the bucket may come back to an older checkpoint
than the node had (the newest commits were not shipped yet), so checkpoint directories and rows
are retired only up to the newest checkpoint whose commit is in the bucket; cuts carry no copy of
the rows. A new run begins with a committed checkpoint of its initial weights.

With `--baseline` there is no journal: it saves the loader's `state_dict()` with the
weights at checkpoint time and drops whatever was in flight on a restart, as async
frameworks do today. `--no-journal` is the default (rollout-level) loop with the journal off:
rollouts are tracked, retried and fenced in memory only, and a restart resumes like the
baseline; it measures what journaling costs (`python -m bench ray`). Both write a ledger
(`examples.bookkeeping`) the chaos driver audits.

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
import time
import warnings
from dataclasses import dataclass

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from journal import AsyncJournal, GroupRef, Journal, OwnershipError, RolloutRef, StaleAttempt
from journal.vfs import DEFAULT_FS
from journal.reader import list_segments
from replay import FirstStartWarning, KeptWork, LocalDataPlane, fingerprint, restore
from snapshot import BackgroundCompactor, compact

from .bookkeeping import Ledger
from .dataset import ANSWERS, PROMPT_TOKENS, VOCAB, PromptDataset, collate_fn
from .environments import environment_for
from .extras import require
from .generation import BOS, LENGTH_MEDIAN, MAX_TOKENS, TOKEN_KEYS, Rollout, rollout_key, rollout_length
from .replica_options import add_replica_arguments, parse_replica_options

RESERVED, ADMITTED, REPLAY, SPARE, TRAINED, DROPPED = "RESERVED", "ADMITTED", "REPLAY", "SPARE", "TRAINED", "DROPPED"
IW_CLAMP = 2.0               # the behaviour importance weight's cap (AReaL's decoupled objective)
CKPT_NAME = re.compile(r"^step_(\d{8})$")
TMP = ".tmp-"
LATENCY_SIGMA = 0.8          # log-normal spread of a Ray actor's rollout latency: a long tail
CHUNK_TOKENS = 8             # tokens generated between two looks at the clock (and the ledger)
DISCARD_REASON = "rollout_failed"
REPLICA_FLUSH_SECONDS = 120.0   # the end of a run waits this long for the bucket to have it all
# The run identity the journal records and every restore checks: the token layout of the
# prompts, plain multinomial sampling from the policy, an exact-match reward. A restart with
# other settings is refused (`replay.IdentityChanged`) rather than training on kept rollouts.
RUN_IDENTITY = {"tokenizer": {"vocab": VOCAB, "prompt_tokens": PROMPT_TOKENS, "answers": ANSWERS},
                "sampling": {"temperature": 1.0}, "reward": "exact-answer-v1"}

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
    rollouts: int = 8
    workers: int = 8
    failure_rate: float = 0.02
    latency_ms: float = 3.0       # median rollout latency (LENGTH_MEDIAN tokens)
    progress_every: int = 0       # a progress row every this many tokens (multi-turn: every turn); 0 off
    max_policy_lag: int = 0       # restores keep work of weights up to this many steps newer (DESIGN 14)
    slow_rate: float = 0.01       # probability that a rollout's worker is slow (misses the deadline)
    deadline_ms: float = 50.0     # a rollout not delivered by then is given up
    max_attempts: int = 3         # attempts of one rollout before its group is discarded
    group_level: bool = False
    ckpt_every: int = 4
    ckpt_save_seconds: float = 0.05
    keep_ckpts: int = 2
    segment_bytes: int = 64 << 10
    lr: float = 0.02
    baseline: bool = False
    baseline_rollouts: bool = False  # the baseline tracks rollouts one by one in memory (--no-journal)
    ray: bool = False              # rollout workers are Ray actors (examples.ray_workers)
    ray_address: str | None = None  # the cluster to join (None: start a local one)
    ray_actors: int = 3
    replica: str | None = None     # the bucket the journal is shipped to (a node loss restores from it)
    replica_options: dict | None = None
    ship_interval: float = 1.0

    @property
    def rollout_level(self) -> bool:
        """Whether new groups are admitted with rollouts=N: each rollout tracked on its own (the
        baseline only with --no-journal, in memory)."""
        return not self.group_level and (self.baseline_rollouts or not self.baseline)

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
    """Prompt tokens -> logits over the answer tokens; and the next token of a rollout's trace
    from the prompt's encoding and the previous token (`examples.generation`)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.hidden = torch.nn.Linear(16 * PROMPT_TOKENS, 64)
        self.head = torch.nn.Linear(64, ANSWERS)
        self.token = torch.nn.Embedding(VOCAB, 64)
        self.out = torch.nn.Linear(64, VOCAB)

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.hidden(self.embed(tokens).flatten(1)))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(tokens))

    def prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt read once per rollout: the part of every next-token logit it fixes (`out`
        of its encoding), and the answer logits (`forward`'s)."""
        z = self.encode(tokens[None])[0]
        return self.out(z), self.head(z)

    def next_logits(self, base: torch.Tensor, prev: int) -> torch.Tensor:
        """One decoding step: logits of the token after `prev` (`base`: `prefill`'s)."""
        return torch.addmv(base, self.out.weight, self.token.weight[prev])

    def token_logprobs(self, tokens: torch.Tensor, trace: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities, under these weights, of the policy tokens at `positions` of a
        rollout's `trace` of the prompt `tokens` (each after the token before it, as
        `next_logits` decodes them): every step of the decoding at once."""
        base = self.out(self.encode(tokens[None])[0])
        prev = torch.where(positions > 0, trace[(positions - 1).clamp_min(0)], BOS)
        logits = base + self.token.weight[prev] @ self.out.weight.T
        return torch.log_softmax(logits, -1).gather(1, trace[positions][:, None])[:, 0]


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


def _decoupled(logp: torch.Tensor, behaviour: torch.Tensor, adv: torch.Tensor) -> tuple[torch.Tensor, int]:
    """AReaL's decoupled objective, per token: the importance weight of the proximal policy
    (these weights before the update) over the behaviour policy (the weights that sampled the
    token: older ones, or weights that died with a crashed run whose work a restore kept),
    clamped at IW_CLAMP, times the policy gradient term; and how many weights the clamp cut.
    One update per batch: the proximal ratio is 1 at the update, so PPO's clip of it never
    binds and is left out."""
    proximal = logp.detach()
    weight = torch.exp(proximal - behaviour)
    return -(weight.clamp(max=IW_CLAMP) * torch.exp(logp - proximal) * adv), int((weight > IW_CLAMP).sum())


def grpo_loss(policy: TinyPolicy, rows: list[dict]) -> tuple[torch.Tensor, int]:
    """Group-relative advantages; every answer and every policy token of the rollouts' traces
    weighed against the policy that sampled it (`_decoupled`, with the behaviour
    log-probabilities the rows carry). Returns the loss and how many importance weights the
    clamp cut."""
    tokens = torch.stack([r["tokens"] for r in rows])                 # G x T
    answers = torch.stack([r["answers"] for r in rows])               # G x R
    old_logp = torch.stack([r["old_logprobs"] for r in rows])         # G x R
    rewards = torch.stack([r["rewards"] for r in rows])               # G x R
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    logp = torch.log_softmax(policy(tokens), -1).gather(1, answers)   # G x R
    answer_terms, clamped = _decoupled(logp, old_logp, adv)
    terms = [answer_terms.flatten()]
    for g, row in enumerate(rows):
        for i, t in enumerate(row["rollout_tokens"]):
            if t is not None and len(t["token_positions"]):
                token_logp = policy.token_logprobs(row["tokens"], t["trace"], t["token_positions"])
                token_terms, cut = _decoupled(token_logp, t["token_logprobs"], adv[g, i])
                terms.append(token_terms)
                clamped += cut
    return torch.cat(terms).mean(), clamped


def staleness(groups: list["Work"], weights_version: int) -> int:
    """How many steps the oldest policy token of `groups` is behind the weights of step
    `weights_version` that train it (from the versions its row carries; 0 without tokens)."""
    versions = [int(t["token_versions"].min()) for w in groups for t in w.token_rows
                if t is not None and len(t["token_versions"])]
    return max(0, weights_version - min(versions)) if versions else 0


# -- prompt groups in memory -------------------------------------------------------------------


class Work:
    """A prompt group as the trainer holds it (the journal holds its ownership).

    `attempts` and `sealed` (per rollout: the attempt dispatched now, the locator of the sealed
    row) are None for a group admitted without rollouts= (all-or-nothing). The result slots
    (`answers`, `old_logprobs`, `rewards`, `seconds`: generation time, `versions`: the newest
    weights in the rollout, `token_rows`: its tokens with their behaviour log-probabilities and
    versions, None for a rollout generated without them) hold the rollouts done."""

    __slots__ = ("gid", "idx", "epoch", "task", "tokens", "answer", "status", "target_step",
                 "policy_version", "locator", "failed", "done", "answers", "old_logprobs",
                 "rewards", "seconds", "versions", "token_rows", "attempts", "sealed", "prefix", "progress",
                 "lock")

    def __init__(self, gid: int, idx: int, epoch: int, task: str, tokens: torch.Tensor, answer: int,
                 status: str):
        self.gid, self.idx, self.epoch, self.task = gid, idx, epoch, task
        self.tokens, self.answer, self.status = tokens, answer, status
        self.target_step = None
        self.policy_version = None
        self.locator = None
        self.failed = False
        self.done = 0
        self.answers = self.old_logprobs = self.rewards = self.seconds = self.versions = None
        self.token_rows = None
        self.attempts = self.sealed = self.prefix = self.progress = None
        self.lock = asyncio.Lock()   # orders the journal commits of one group's rollouts

    @property
    def row_key(self) -> tuple[int, int]:
        return (self.epoch, self.idx)

    def clear(self, n: int, rollout_level: bool) -> None:
        """Empty result slots for `n` rollouts (and, rollout-level, attempt 0 for each, no
        prefix to continue from, no progress row)."""
        self.failed, self.done = False, 0
        self.answers = torch.zeros(n, dtype=torch.long)
        self.old_logprobs, self.rewards, self.seconds = torch.zeros(n), torch.zeros(n), torch.zeros(n)
        self.versions, self.token_rows = torch.full((n,), -1, dtype=torch.long), [None] * n
        self.attempts, self.sealed = ([0] * n, [None] * n) if rollout_level else (None, None)
        self.prefix, self.progress = ([None] * n, [None] * n) if rollout_level else (None, None)

    def keep(self, i: int, result: tuple[int, float, float], seconds: float, version: int,
             tokens: dict | None) -> None:
        self.answers[i], self.old_logprobs[i], self.rewards[i] = result
        self.seconds[i], self.versions[i], self.token_rows[i] = seconds, version, tokens
        self.done += 1

    @property
    def newest_version(self) -> int:
        """The newest weights in the group: of its rollouts done and of the weights generating
        it now; what the journal records the finished group by."""
        return max(int(self.versions.max()), self.policy_version)

    def group_rows(self) -> dict:
        return {"tokens": self.tokens, "answers": self.answers, "old_logprobs": self.old_logprobs,
                "rewards": self.rewards, "seconds": self.seconds, "versions": self.versions,
                "rollout_tokens": self.token_rows, "policy_version": torch.tensor(self.newest_version)}

    def row_locators(self) -> list[str]:
        """Where this group's rows are in the data plane."""
        if self.sealed is None:
            return [self.locator] if self.locator is not None else []
        return [loc for loc in self.sealed if loc is not None]


# -- ownership: the journal, or nothing (baseline) -----------------------------------------------


def _since(span: tuple[int | None, int | None]) -> int | None:
    """The journal's `since_version` of work made by the weights of `span` (oldest, newest):
    the oldest when older than the newest, else None."""
    since, newest = span
    return since if since is not None and newest is not None and since < newest else None


class JournalOwnership:
    """Write-ahead ownership through the public journal API (awaitable: commits run in worker
    threads and share fsyncs)."""

    def __init__(self, j: Journal, acked):
        self.j = j
        self.aj = AsyncJournal(j)
        self.acked = acked     # acked(lsn): the commit at `lsn` was acknowledged (the ledger's A line)

    async def taken(self, refs, loader_state, dataset_size: int) -> list[int]:
        return await self.aj.taken(refs, loader_state=loader_state, dataset_size=dataset_size)

    async def diverted(self, gids):
        self.acked(await self.aj.diverted(gids))

    async def admitted(self, gids, target_step, policy_version, rollouts):
        self.acked(await self.aj.admitted(gids, target_step=target_step, policy_version=policy_version,
                                          rollouts=rollouts))

    async def finished(self, gid, policy_version, locator):
        await self.aj.finished([gid], policy_version=policy_version, locators=[locator])

    async def rollout_sealed(self, gid, index, attempt, locator, span, finished_version):
        """Seal one rollout made by the weights of `span` (oldest, newest version); with
        `finished_version` (it is the group's last: the newest weights in the group) its group
        finishes in the same commit. `StaleAttempt` if `attempt` was given up."""
        ref = RolloutRef(gid, index, attempt, locator)
        since, newest = _since(span), span[1]
        if finished_version is None:
            await self.aj.rollout_sealed([ref], policy_version=newest, since_version=since)
            return

        def commit():
            with self.j.transaction() as tx:
                tx.rollout_sealed([ref], policy_version=newest, since_version=since)
                tx.finished([gid], policy_version=finished_version)
        await asyncio.to_thread(commit)

    async def rollout_failed(self, gid, index, attempt, reason):
        await self.aj.rollout_failed([RolloutRef(gid, index, attempt)], reason=reason)

    async def rollout_progress(self, gid, index, attempt, locator, tokens, turn, span):
        await self.aj.rollout_progress(RolloutRef(gid, index, attempt, locator), tokens=tokens, turn=turn,
                                       policy_version=span[1], since_version=_since(span))

    async def trained(self, gids, step):
        self.acked(await self.aj.trained(gids, step=step))

    async def discard_and_replace(self, failed, reason, spare, target_step, policy_version, rollouts):
        def commit():
            with self.j.transaction() as tx:
                tx.discarded([failed], reason=reason)
                if spare is not None:
                    tx.admitted([spare], target_step=target_step, policy_version=policy_version,
                                replaces=failed, rollouts=rollouts)
        await asyncio.to_thread(commit)

    async def begin_checkpoint(self, step) -> int:
        lsn = await self.aj.begin_checkpoint(step=step)
        self.acked(lsn)
        return lsn

    async def commit_checkpoint(self, step) -> int:
        lsn = await self.aj.commit_checkpoint(step=step)
        self.acked(lsn)
        return lsn


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

    async def admitted(self, gids, target_step, policy_version, rollouts):
        pass

    async def finished(self, gid, policy_version, locator):
        pass

    async def rollout_sealed(self, gid, index, attempt, locator, span, finished_version):
        pass

    async def rollout_failed(self, gid, index, attempt, reason):
        pass

    async def rollout_progress(self, gid, index, attempt, locator, tokens, turn, span):
        pass

    async def trained(self, gids, step):
        pass

    async def discard_and_replace(self, failed, reason, spare, target_step, policy_version, rollouts):
        pass

    async def begin_checkpoint(self, step):
        return None

    async def commit_checkpoint(self, step):
        return None


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


def _restored_rows(g) -> list[str]:
    """The data-plane locators a restored group's rows live at (sealed rollouts' and the
    prefixes unsealed ones continue from)."""
    if g.rollouts is None:
        return [g.locator] if g.locator is not None else []
    return [r.locator if r.sealed else r.progress.locator for r in g.rollouts
            if r.sealed or r.progress is not None]


def _rollout_row(result: tuple[int, float, float], seconds: float, policy_version: int,
                 tokens: dict | None = None) -> dict:
    """One rollout's row in the data plane (`tokens`: its trace with each policy token's
    behaviour log-probability and version, `Rollout.token_rows`, when generated here)."""
    answer, logprob, reward = result
    return {"answer": torch.tensor(answer), "old_logprob": torch.tensor(logprob),
            "reward": torch.tensor(reward), "seconds": torch.tensor(seconds),
            "policy_version": torch.tensor(policy_version), **(tokens or {})}


def _token_rows(row: dict) -> dict | None:
    """The per-token part of a rollout's row (None: generated without it, by a Ray actor)."""
    return {k: row[k] for k in TOKEN_KEYS} if "trace" in row else None


def _kept_newer(state) -> KeptWork:
    """What the restore `state` kept of work by weights newer than its checkpoint's (within the
    run's --max-policy-lag): its `kept_by_lead` summed over the leads above 0."""
    newer = [k for lead, k in state.kept_by_lead.items() if lead > 0]
    return KeptWork(*(sum(getattr(k, f) for k in newer) for f in ("groups", "rollouts", "prefixes", "tokens")))


def _us(seconds: float) -> int:
    return int(round(seconds * 1e6))


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
        self.dl = StatefulDataLoader(self.ds, batch_size=cfg.batch_size, shuffle=True, generator=gen,
                                     collate_fn=collate_fn, num_workers=0)
        self.policy = TinyPolicy()
        self.opt = MomentumSGD(self.policy.parameters(), lr=cfg.lr)
        self.dp = LocalDataPlane(cfg.rows_dir)
        # the attempt a group without rollouts= dispatches its rollouts in: none is journaled, so
        # each process draws its own, and a dead run's worker writing a late row of the same
        # group never writes under the locator this process's worker writes
        self.group_attempt = secrets.randbits(31)
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
        self.restorable = 0          # newest checkpoint step a restore can come back to
        self.unshipped: dict[int, int] = {}   # replica: step -> LSN of a commit_checkpoint not known shipped
        self.stragglers: set[asyncio.Task] = set()   # slow workers that answer after their deadline
        self.sealing: set[asyncio.Task] = set()      # Ray mode: answers in time, being sealed
        self.jobs: asyncio.Queue | None = None
        self.events: asyncio.Queue | None = None
        self.journal: Journal | None = None
        self.compactor: BackgroundCompactor | None = None
        self.compaction = None
        self.own = None
        self.pool = None             # Ray mode: the rollout actors (examples.ray_workers.ActorPool)
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
        self.dp.delete(list(self.dp.locators()))   # nothing in flight survives a baseline restart
        announce("RESUMED", "source=baseline", f"step={step}", "lsn=-", "reserved=0", "admitted=0",
                 "replay=0", "spare=0", "salvaged=0", "demoted=0", "regenerated=0",
                 f"rollouts={self.cfg.rollouts}", f"mode={'rollout' if self.cfg.rollout_level else 'group'}")

    def _start_journal(self) -> list[tuple[Work, list[tuple[int, int]]]]:
        """Restore and resume; returns the admitted groups to redispatch, each with the
        (index, attempt) of the rollouts it still needs."""
        cfg = self.cfg
        announce("PHASE", "restore")
        jdir = cfg.journal_dir
        ckpts = [(s, p) for s, p in checkpoint_dirs(cfg.ckpt_dir)
                 if os.path.isdir(os.path.join(p, "ownership"))]
        journal_exists = os.path.isdir(jdir) and bool(list_segments(jdir))
        if cfg.replica is not None and not journal_exists:
            # the node is new (or its disk was lost): the bucket alone has the history
            source = "replica"
            state = restore(cfg.replica, replica_options=cfg.replica_options, dataset=self.ds,
                            collate_fn=collate_fn, data_plane=self.dp, salvage=True, identity=RUN_IDENTITY,
                            max_policy_lag=cfg.max_policy_lag)
        elif journal_exists or not ckpts:
            os.makedirs(jdir, exist_ok=True)
            source = "journal"
            with warnings.catch_warnings():
                if not journal_exists:  # a run directory with nothing in it: the first start is meant
                    warnings.simplefilter("ignore", FirstStartWarning)
                state = restore(jdir, dataset=self.ds, collate_fn=collate_fn, data_plane=self.dp, salvage=True,
                                identity=RUN_IDENTITY, max_policy_lag=cfg.max_policy_lag)
        else:
            # the journal is gone: resume from the ownership cut the newest checkpoint carries
            source = "cut"
            cut = os.path.join(ckpts[0][1], "ownership")
            self.dp.import_cut(cut)
            state = restore(cut, dataset=self.ds, collate_fn=collate_fn, data_plane=self.dp, salvage=True,
                            identity=RUN_IDENTITY, max_policy_lag=cfg.max_policy_lag)
        replica = {} if cfg.replica is None else {
            "replica": cfg.replica, "replica_options": cfg.replica_options, "ship_interval": cfg.ship_interval}
        self.journal = Journal.open(jdir, resume=state, segment_bytes=cfg.segment_bytes, identity=RUN_IDENTITY,
                                    **replica)
        # the checkpoint a restore from the bucket stands on is in the bucket; one restored
        # from the local journal may not be
        self.restorable = (state.step or 0) if source == "replica" else 0
        if cfg.replica is not None and state.lsn == 0:
            self._initial_checkpoint()
        if source == "cut":
            compact(jdir, at="end", journal=self.journal, data_plane=self.dp)
        self.own = JournalOwnership(self.journal, self.ledger.acked)
        # with a replica the data plane is shared storage that outlives the node: the cuts (which
        # the bucket receives) carry no second copy of its rows
        self.compactor = BackgroundCompactor(self.journal, data_plane=None if cfg.replica else self.dp,
                                             keep_cuts=2, retention="archive")
        ck = self._load_weights(state.step, state.lsn) if state.step is not None else None
        if state.loader_state is not None:
            # the pass of the last take restored: the checkpoint's, or that of the last take a
            # restore adopted from after it (the weights' own record is then behind)
            self.dl.load_state_dict(state.loader_state)
            self.epoch = self.loader_epoch = (state.loader_epoch if state.loader_epoch is not None
                                              else int(ck["loader_epoch"]) if ck is not None else 0)
        self.ledger.resumed(state.step or 0)
        # rows no restore can ask for any more (dead tails, given-up attempts, trained groups)
        # leave the data plane, and so do the temporary files of puts that died
        live = {loc for g in state.replay + state.admitted for loc in _restored_rows(g)}
        self.dp.delete(set(self.dp.locators()) - live)
        self.dp.remove_leftovers()

        def work(g, status) -> Work:
            prompt = g.prompt  # collate_fn([dataset[idx]]), checked against the journal's locator
            w = Work(g.group_id, g.idx, g.epoch if g.epoch is not None else 0, g.task_name,
                     prompt["tokens"][0], int(prompt["answer"][0]), status)
            w.target_step, w.policy_version, w.locator = g.target_step, g.policy_version, g.locator
            if status in (ADMITTED, REPLAY):
                self._reload_results(w, g)
            self.live[w.gid] = w
            return w

        for g in state.replay:                       # finished: train directly
            work(g, REPLAY)
        # only the pending rollouts regenerate (all of them for a group without rollouts=)
        redispatch = [(work(g, ADMITTED), [(r.index, r.attempt) for r in g.pending]
                       if g.rollouts is not None else [(i, self.group_attempt) for i in range(cfg.rollouts)])
                      for g in state.admitted]
        for g in state.reserved:                     # back through admission
            self.reserved.append(work(g, RESERVED))
        for g in state.spare:
            self.spares.append(work(g, SPARE))
        prefixes = [p for w, _ in redispatch for p in (w.prefix or ()) if p is not None]
        newer = _kept_newer(state)
        counts = {"regenerated_groups": len(redispatch), "kept_newer_rollouts": newer.rollouts,
                  "kept_newer_prefixes": newer.prefixes, "kept_newer_groups": newer.groups,
                  "regenerated_rollouts": sum(len(todo) for _, todo in redispatch),
                  "continued_rollouts": len(prefixes), "kept_tokens": sum(int(p["generated"]) for p in prefixes),
                  "salvaged_groups": len(state.salvaged), "salvaged_rollouts": len(state.salvaged_rollouts),
                  "demoted_groups": len(state.demoted), "lost_rollouts": len(state.lost_rollouts)}
        self.stats.update(counts)
        self.ledger.count(**counts)
        announce("RESUMED", f"source={source}", f"step={state.step or 0}", f"lsn={state.lsn}",
                 f"reserved={len(state.reserved)}", f"admitted={len(state.admitted)}",
                 f"replay={len(state.replay)}", f"spare={len(state.spare)}",
                 f"salvaged={len(state.salvaged)}", f"demoted={len(state.demoted)}",
                 f"regenerated={counts['regenerated_rollouts']}", f"continued={len(prefixes)}",
                 f"kept_tokens={counts['kept_tokens']}", f"salvaged_rollouts={len(state.salvaged_rollouts)}",
                 f"kept_newer_rollouts={newer.rollouts}", f"kept_newer_prefixes={newer.prefixes}",
                 f"kept_newer_groups={newer.groups}",
                 f"lost_rollouts={len(state.lost_rollouts)}", f"skipped_cuts={len(state.skipped)}",
                 f"rollouts={cfg.rollouts}", f"mode={'rollout' if cfg.rollout_level else 'group'}",
                 f"base={state.base_cut or '-'}")
        return redispatch

    def _initial_checkpoint(self) -> None:
        """A new run with a replica: its first commit after the identity is a committed
        checkpoint of the initial weights (begun and committed at once), so whenever the bucket
        holds a group's history it holds a checkpoint to restore."""
        lsn = self.journal.lsn + 1
        tmp = self._save_weights({"model": self.policy.state_dict(), "optim": self.opt.state_dict(),
                                  "step": 0, "loader_epoch": 0, "lsn": lsn}, 0)
        self._publish_checkpoint(tmp, 0)
        with self.journal.transaction() as tx:
            tx.begin_checkpoint(step=0)
            tx.commit_checkpoint(step=0)
        self.ledger.acked(lsn)

    def _reload_results(self, w: Work, g) -> None:
        """Fill `w`'s result slots from the data plane: a finished group's rows, or the sealed
        rollouts of a group admitted with rollouts=N (the others are pending)."""
        n = len(g.rollouts) if g.rollouts is not None else self.cfg.rollouts
        w.clear(n, g.rollouts is not None)
        if g.rollouts is None:
            if g.locator is not None:   # REPLAY: its rows; ADMITTED: regenerates, nothing kept
                rows = self.dp.get(g.locator)
                w.answers, w.old_logprobs = rows["answers"], rows["old_logprobs"]
                w.rewards, w.seconds, w.versions = rows["rewards"], rows["seconds"], rows["versions"]
                w.token_rows, w.done = rows["rollout_tokens"], n
            return
        for r in g.rollouts:
            w.attempts[r.index] = r.attempt
            if r.sealed:
                row = self.dp.get(r.locator)
                w.keep(r.index, (row["answer"], row["old_logprob"], row["reward"]), float(row["seconds"]),
                       int(row["policy_version"]), _token_rows(row))
                w.sealed[r.index] = r.locator
            elif r.progress is not None:   # its next attempt continues from this prefix
                w.prefix[r.index] = self.dp.get(r.progress.locator)
                w.progress[r.index] = r.progress.locator

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

    @property
    def _admit_rollouts(self) -> int | None:
        """`rollouts=` of new admissions: N rollout-level, None group-level."""
        return self.cfg.rollouts if self.cfg.rollout_level else None

    def _dispatch(self, groups: list[Work]) -> None:
        """Queue every rollout of newly admitted groups, at attempt 0 (a group without rollouts=:
        at this process's `group_attempt`)."""
        for w in groups:
            w.clear(self.cfg.rollouts, self.cfg.rollout_level)
        first = 0 if self.cfg.rollout_level else self.group_attempt
        self._queue([(w, i, first) for w in groups for i in range(self.cfg.rollouts)])

    def _queue(self, jobs: list[tuple[Work, int, int]]) -> None:
        """Queue (group, index, attempt) jobs interleaved across the groups of a step, as an
        inference engine batches every prompt's samples at once: the groups progress together,
        each done when its slowest rollout is. Earlier target steps first."""
        for job in sorted(jobs, key=lambda job: (job[0].target_step, job[1])):   # stable
            self.jobs.put_nowait(job)

    async def _admit(self, groups: list[Work], target: int) -> None:
        await self.own.admitted([w.gid for w in groups], target, self.step, self._admit_rollouts)
        for w in groups:
            w.status, w.target_step, w.policy_version = ADMITTED, target, self.step
        self._dispatch(groups)

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
        """Discard a group whose rollout failed (group-level) or ran out of attempts, and
        admit a spare in its place."""
        if w.status != ADMITTED:
            return
        async with w.lock:
            spare = await self._spare()
            await self.own.discard_and_replace(w.gid, DISCARD_REASON, spare.gid if spare else None,
                                               w.target_step, self.step, self._admit_rollouts)
            w.status = DROPPED
        # the rollouts it had done go with it
        self.ledger.dropped(DISCARD_REASON, [w.row_key], generation_us=_us(float(w.seconds.sum())))
        if w.sealed is not None:   # its sealed rows and the prefixes of its unsealed rollouts
            doomed = w.row_locators() + [loc for loc in w.progress if loc is not None]
            if doomed:
                self.gc_pool.submit(self.dp.delete, doomed)
        del self.live[w.gid]
        self.stats["discarded"] += 1
        if spare is not None:
            spare.status, spare.target_step, spare.policy_version = ADMITTED, w.target_step, self.step
            self._dispatch([spare])

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

    def _latency(self, rng: random.Random) -> float:
        """Seconds one rollout takes: log-normal (a long tail), or past the deadline for a slow
        worker."""
        if rng.random() < self.cfg.slow_rate:
            return self.cfg.deadline_ms / 1000 * rng.uniform(1.5, 4.0)
        return self.cfg.latency_ms / 1000 * rng.lognormvariate(0.0, LATENCY_SIGMA)

    def _generate(self, w: Work, rng: random.Random, r: Rollout | None = None) -> tuple[int, float, float]:
        """One rollout's answer: (answer, its log-probability under the generating policy,
        reward); `r`: the rollout whose prefill has the answer logits already."""
        with torch.no_grad():
            logits = r.answer_logits if r is not None else self.policies[w.policy_version](w.tokens[None])[0]
            logp = torch.log_softmax(logits, -1)
            gen = torch.Generator().manual_seed(rng.getrandbits(62))
            a = int(torch.multinomial(logp.exp(), 1, generator=gen))
        return a, float(logp[a]), float(a == w.answer)

    @staticmethod
    def _wanted(w: Work, i: int, attempt: int) -> bool:
        """Whether the trainer still waits for rollout `i` of `w` in `attempt`."""
        if w.status != ADMITTED or w.failed:
            return False
        return w.attempts is None or (w.attempts[i] == attempt and w.sealed[i] is None)

    def _rejected(self, seconds: float) -> None:
        """Generation time of a result no history can use (a late result, a rollout of a group
        discarded while its row was written)."""
        self.ledger.count(rejected_us=_us(seconds))

    def _guarded(self, coro) -> "asyncio.Future":
        """Run `coro` as a task whose exception surfaces in the main loop."""
        async def body():
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.events.put_nowait(("error", exc))
        return asyncio.create_task(body())

    async def _worker(self, wid: int) -> None:
        rng = random.Random(f"{self.rng.random()}-{wid}")
        while True:
            w, i, attempt = await self.jobs.get()
            if not self._wanted(w, i, attempt):
                continue
            self.ledger.count(rollouts_started=1)
            await self._roll(w, i, attempt, rng)

    def _rollout(self, w: Work, i: int) -> Rollout:
        """Rollout `i` of `w` on the weights it is generated with: continued from the durable
        prefix a restore handed back, else from its first token."""
        key = (self.cfg.seed, w.epoch, w.idx, i)
        args = (self.policies[w.policy_version], w.tokens, w.idx, rollout_key(*key), rollout_length(*key),
                environment_for(w.idx))
        prefix = w.prefix[i] if w.prefix is not None else None
        if prefix is None:
            return Rollout.start(*args, version=w.policy_version)
        return Rollout.resumed(*args, prefix, version=w.policy_version)

    def _token_us(self, rng: random.Random, r: Rollout) -> float:
        """Generation microseconds per token of this attempt: the median rollout takes
        `--latency-ms`; a slow worker's takes past the deadline (by 1.5-4x)."""
        if rng.random() < self.cfg.slow_rate:
            return self.cfg.deadline_ms * 1000 * rng.uniform(1.5, 4.0) / max(1, r.length - r.generated)
        return self.cfg.latency_ms * 1000 / LENGTH_MEDIAN

    async def _tokens(self, r: Rollout, n: int, token_us: float) -> int:
        """`n` tokens of `r` (real forward passes) in their generation time; returns the
        microseconds. The ledger counts them as they are generated: a kill loses what was not
        kept (DESIGN 12: what a durable prefix keeps)."""
        us = round(r.advance(n) * token_us)
        await asyncio.sleep(us / 1e6)
        r.us += us
        self.ledger.count(generation_us=us)
        return us

    async def _roll(self, w: Work, i: int, attempt: int, rng: random.Random) -> None:
        """Generate rollout `i` of `w` in `attempt` token by token, a progress row every
        `--progress-every` tokens (every turn of a multi-turn rollout), then deliver it; given
        up at its deadline (a slow worker goes on and answers late) or on a failure."""
        r = self._rollout(w, i)
        token_us = self._token_us(rng, r)
        fail_at = r.generated + int(rng.random() * (r.length - r.generated)) \
            if rng.random() < self.cfg.failure_rate else None
        deadline_us, spent = self.cfg.deadline_ms * 1000, 0
        every = self.cfg.progress_every if w.attempts is not None else 0
        try:
            while not r.done:
                # the deadline is looked at once it has passed, not a chunk later
                n = min(r.next_stop(every), CHUNK_TOKENS, int((deadline_us - spent) // token_us) + 1)
                if fail_at is not None:
                    n = min(n, max(1, fail_at - r.generated))
                spent += await self._tokens(r, n, token_us)
                if not self._wanted(w, i, attempt):
                    return self._settled(r, rejected=True)
                if spent > deadline_us:
                    # a slow worker: given up at the deadline, it keeps going and answers later
                    task = self._guarded(self._straggle(w, i, attempt, r, token_us, self._generate(w, rng, r)))
                    self.stragglers.add(task)
                    task.add_done_callback(self.stragglers.discard)
                    r = None   # the straggler settles it
                    return await self._give_up(w, i, attempt, "deadline")
                if fail_at is not None and r.generated >= fail_at:
                    self._settled(r, rejected=True)
                    return await self._give_up(w, i, attempt, "generation_failed")
                if r.stops(every):
                    await self._progress(w, i, attempt, r)
            self._settled(r)
            await self._deliver(w, i, attempt, self._generate(w, rng, r), r.us / 1e6, r)
        except asyncio.CancelledError:
            if r is not None and not r.settled:
                self._settled(r, rejected=True)
            raise

    def _settled(self, r: Rollout, rejected: bool = False) -> None:
        """`r` ended in this process (delivered, failed, given up, or its group left): its
        generation time, prefixes of earlier processes included, is no kill's loss (what is
        not settled was in flight at a kill); `rejected`: no history uses it."""
        r.settled = True
        self.ledger.count(settled_us=r.us)
        if rejected:
            self._rejected(r.us / 1e6)

    async def _straggle(self, w: Work, i: int, attempt: int, r: Rollout, token_us: float,
                        result: tuple) -> None:
        """A slow worker after its rollout was given up: it finishes its tokens, and its late
        `result` (drawn at the deadline, while its weights are kept) is offered to the journal
        (`_late`)."""
        try:
            while not r.done:
                await self._tokens(r, CHUNK_TOKENS, token_us)
        finally:
            self._settled(r, rejected=True)
        await self._late(w, i, attempt, result, r.us / 1e6, r.newest_version)

    async def _progress(self, w: Work, i: int, attempt: int, r: Rollout) -> None:
        """The prefix of rollout `i` of `w` durable in the data plane, then `rollout_progress`
        (while the trainer still waits for this attempt); the progress it supersedes goes."""
        loc = await asyncio.to_thread(self.dp.put_progress, w.gid, i, attempt, r.generated, r.progress_row())
        async with w.lock:
            if not self._wanted(w, i, attempt):
                await asyncio.to_thread(self.dp.delete, [loc])
                return
            await self.own.rollout_progress(w.gid, i, attempt, loc, r.generated, r.turn,
                                            (r.oldest_version, r.newest_version))
            old, w.progress[i] = w.progress[i], loc
        self.stats["progress_rows"] += 1
        if old is not None:
            self.gc_pool.submit(self.dp.delete, [old])

    # -- generation on Ray actors (--ray) -------------------------------------------------------

    async def _ray_worker(self, wid: int) -> None:
        """A generator task of Ray mode: its rollouts run on the actor of slot `wid` mod
        `--ray-actors` (replaced when it dies). The actor writes the row; the trainer seals its
        locator, or gives the rollout up (deadline, failure, actor death) to its next attempt."""
        from .ray_workers import is_actor_death
        rng = random.Random(f"{self.rng.random()}-{wid}")
        slot = wid % self.cfg.ray_actors
        deadline = self.cfg.deadline_ms / 1000
        while True:
            w, i, attempt = await self.jobs.get()
            if not self._wanted(w, i, attempt):
                continue
            held = await self.pool.actor(slot)
            if not self._wanted(w, i, attempt):
                continue
            self.ledger.count(rollouts_started=1)
            seconds = self._latency(rng)
            weights = self.pool.policy_weights(w.policy_version, self.policies[w.policy_version],
                                               self.policies)
            fut = self.pool.generate(held, w, i, attempt, weights, rng.getrandbits(62), seconds,
                                     rng.random() < self.cfg.failure_rate)
            done, _ = await asyncio.wait({fut}, timeout=deadline)
            if not done:
                # given up at the deadline: the actor keeps going and answers later (or dies)
                task = self._guarded(self._ray_answer(slot, held, w, i, attempt, fut, seconds, late=True))
                self.stragglers.add(task)
                task.add_done_callback(self.stragglers.discard)
                await self._give_up(w, i, attempt, "deadline")
                continue
            try:
                answer = fut.result()
            except Exception as exc:
                if not is_actor_death(exc):
                    raise
                self.pool.lost(slot, held)
                self.stats["actors_lost"] += 1
                self.ledger.count(actors_lost=1)
                await self._give_up(w, i, attempt, "actor_died")
                continue
            # the task takes its next rollout while this one is sealed: a seal waits for its
            # fsync, the actor need not (the group still trains only once every seal is durable)
            task = self._guarded(self._ray_settle(held, w, i, attempt, answer, seconds, late=False))
            self.sealing.add(task)
            task.add_done_callback(self.sealing.discard)

    async def _ray_answer(self, slot: int, held, w: Work, i: int, attempt: int, fut, seconds: float,
                          late: bool) -> None:
        """An actor's late answer to rollout `i` of `w` in `attempt`, fenced (see `_ray_settle`).
        A late answer of a dead actor is nothing."""
        from .ray_workers import is_actor_death
        try:
            answer = await fut
        except Exception as exc:
            if late and is_actor_death(exc):
                self.pool.lost(slot, held)
                return
            raise
        await self._ray_settle(held, w, i, attempt, answer, seconds, late=late)

    async def _ray_settle(self, held, w: Work, i: int, attempt: int, answer: dict, seconds: float,
                          late: bool) -> None:
        """An actor's answer to rollout `i` of `w` in `attempt`: in time it is sealed (a failed
        generation is given up), late it is fenced."""
        await self._fence_handover(answer["handover"])
        loc = answer["locator"]
        if loc is None:
            if not late:
                await self._give_up(w, i, attempt, "generation_failed")
            return
        self.pool.ack(held, w.gid, i, attempt)
        self.ledger.count(generation_us=_us(seconds), settled_us=_us(seconds))
        if late:
            self._rejected(seconds)
            await self._fence(w, w.gid, i, attempt, loc)
            return
        row = await asyncio.to_thread(self.dp.get, loc)
        result = (int(row["answer"]), float(row["old_logprob"]), float(row["reward"]))
        if w.attempts is not None:
            await self._seal(w, i, attempt, loc, result, seconds, (w.policy_version, w.policy_version), None)
            return
        # group-level: the result joins its group, whose rows are written once all are in
        await asyncio.to_thread(self.dp.delete, [loc])
        if self._wanted(w, i, attempt):
            await self._keep_group_result(w, i, result, seconds, w.policy_version, None)

    async def _fence_handover(self, results) -> None:
        """Results the actors finished for a controller that died: each is offered to the
        journal and fenced (the restore gave its rollout a new attempt, or its group left), but a
        row the restored history holds sealed stays."""
        for _run, gid, i, attempt, loc, seconds in results:
            w = self.live.get(gid)
            if w is not None and w.sealed is not None and w.sealed[i] == loc:
                continue
            if w is not None and w.attempts is not None and attempt >= w.attempts[i]:
                # restore hands out attempts above every one a history dispatched, so only a
                # restore from a cut alone (the journal gone) can get here: never sealed
                self.stats["handover_unfenced"] += 1
                continue
            self.ledger.count(generation_us=_us(seconds), settled_us=_us(seconds))
            self._rejected(seconds)
            await self._fence(w, gid, i, attempt, loc)
            self.stats["fenced_handover"] += 1

    async def _give_up(self, w: Work, i: int, attempt: int, reason: str) -> None:
        """Rollout `i` of `w` failed in `attempt`: rollout-level, `rollout_failed` (raising its
        attempt, so that attempt can never seal) and dispatch it again, while attempts are left;
        otherwise the main loop discards the group."""
        if w.attempts is not None:
            async with w.lock:
                if not self._wanted(w, i, attempt):
                    return
                await self.own.rollout_failed(w.gid, i, attempt, reason)
                w.attempts[i] = attempt + 1
                self._end_progress(w, i)   # a failure ends it: the next attempt starts afresh
            if attempt + 1 < self.cfg.max_attempts:
                self.stats["rollouts_retried"] += 1
                self.ledger.count(rollouts_retried=1)
                self.jobs.put_nowait((w, i, attempt + 1))
                return
        if not w.failed:
            w.failed = True   # its other rollouts stop; the main loop discards and replaces it
            self.events.put_nowait(("failed", w))

    async def _deliver(self, w: Work, i: int, attempt: int, result: tuple, seconds: float, r: Rollout) -> None:
        """A rollout done in time (`r`: its tokens): rollout-level, its row into the data plane,
        then sealed (the last one finishes the group in the same commit); group-level, the
        group's rows go to the data plane once all are done, then `finished`."""
        span, tokens = (r.oldest_version, r.newest_version), r.token_rows()
        if w.attempts is None:
            await self._keep_group_result(w, i, result, seconds, span[1], tokens)
            return
        loc = await asyncio.to_thread(self.dp.put_rollout, w.gid, i, attempt,
                                      _rollout_row(result, seconds, span[1], tokens))
        await self._seal(w, i, attempt, loc, result, seconds, span, tokens)

    def _end_progress(self, w: Work, i: int) -> None:
        """Rollout `i` of `w` was sealed or failed: its progress row is no restore's any more."""
        old, w.progress[i], w.prefix[i] = w.progress[i], None, None
        if old is not None:
            self.gc_pool.submit(self.dp.delete, [old])

    async def _keep_group_result(self, w: Work, i: int, result: tuple, seconds: float, version: int,
                                 tokens: dict | None) -> None:
        """Group-level: rollout `i` of `w` (the newest weights in it `version`, its per-token
        rows `tokens`) is done; with the last one the group's rows go to the data plane, then
        `finished` with the newest weights in the group."""
        w.keep(i, result, seconds, version, tokens)
        if w.done == self.cfg.rollouts:
            rows = w.group_rows()
            # rows durable in the data plane first, then the journal says where they are
            loc = await asyncio.to_thread(self.dp.put, w.gid, rows)
            await self.own.finished(w.gid, w.newest_version, loc)
            w.status, w.locator = REPLAY, loc
            self.events.put_nowait(("finished", w))

    async def _seal(self, w: Work, i: int, attempt: int, loc: str, result: tuple, seconds: float,
                    span: tuple[int, int], tokens: dict | None) -> None:
        """Rollout `i` of `w` in `attempt` is durable at `loc` (made by the weights of `span`:
        oldest, newest version): sealed while the trainer still waits for it, else its row goes;
        the last one finishes the group with the newest weights in it."""
        R = self.cfg.rollouts
        began = time.perf_counter()
        async with w.lock:
            if self._wanted(w, i, attempt):
                last = w.done == R - 1
                newest = max(span[1], w.newest_version) if last else None
                await self.own.rollout_sealed(w.gid, i, attempt, loc, span, newest)
                # how long the seal waited (the group's lock, the commit): the generator task's
                # wait, except in Ray mode, where a task of its own seals (see `_ray_worker`)
                self.stats["seal_wait_us"] += _us(time.perf_counter() - began)
                self.stats["seals"] += 1
                w.keep(i, result, seconds, span[1], tokens)
                w.sealed[i] = loc
                self._end_progress(w, i)
                if last:
                    w.status = REPLAY
                    self.events.put_nowait(("finished", w))
                return
        # its group was given up meanwhile (another rollout ran out of attempts)
        await asyncio.to_thread(self.dp.delete, [loc])
        self._rejected(seconds)

    async def _late(self, w: Work, i: int, attempt: int, result: tuple, seconds: float, version: int) -> None:
        """A slow worker's result, after its rollout was given up: rollout-level it lands in the
        data plane and the trainer tries to seal it, as any result; the journal rejects the
        given-up attempt, and the row goes. Group-level there is no attempt to fence with: the
        trainer drops it because its group was discarded."""
        if w.attempts is None:
            self.stats["late_results_ignored"] += 1
            self.ledger.count(late_results_ignored=1)
            return
        loc = await asyncio.to_thread(self.dp.put_rollout, w.gid, i, attempt, _rollout_row(result, seconds, version))
        await self._fence(w, w.gid, i, attempt, loc)

    async def _fence(self, w: Work | None, gid: int, i: int, attempt: int, loc: str) -> None:
        """Offer the journal a result of a given-up attempt of rollout `i` of group `gid` (`w`:
        the group, None once it left the trainer); it must reject the seal; the row at `loc`
        goes. Without a journal (the baseline) or for a group without rollouts= there is no
        attempt to fence with: the trainer gave the result up, and drops it."""
        if self.journal is None or (w is not None and w.attempts is None):
            await asyncio.to_thread(self.dp.delete, [loc])
            self.stats["late_results_ignored"] += 1
            self.ledger.count(late_results_ignored=1)
            return
        lock = w.lock if w is not None else asyncio.Lock()
        async with lock:
            try:
                if w is not None and w.failed:
                    # a group given up as a whole gives up its rollouts without a
                    # `rollout_failed` each: its discard, queued, drops them all
                    kind = "group_given_up"
                else:
                    version = w.policy_version if w is not None else None
                    await self.own.rollout_sealed(gid, i, attempt, loc, (version, version), None)
                    raise RuntimeError(f"the journal sealed a late result: group {gid} rollout {i} "
                                       f"attempt {attempt}, given up at its deadline")
            except StaleAttempt:
                kind = "stale_attempt"      # the fence: attempt `attempt` was given up
            except OwnershipError:
                if w is not None and w.status == ADMITTED and w.sealed[i] is None:
                    raise
                # the group left admission (finished, trained, discarded): rejected as well
                kind = "already_done"
        await asyncio.to_thread(self.dp.delete, [loc])
        self.stats["fenced_late_results"] += 1
        self.stats[f"fenced_{kind}"] += 1
        self.ledger.count(fenced_late_results=1)

    # -- training ------------------------------------------------------------------------------

    async def _train(self, t: int, groups: list[Work]) -> None:
        groups.sort(key=lambda w: w.gid)
        rows = [w.group_rows() for w in groups]
        await self.own.trained([w.gid for w in groups], t)     # write-ahead, then the update
        self.ledger.trained(t, [w.row_key for w in groups],
                            generation_us=sum(_us(float(w.seconds.sum())) for w in groups))
        loss, clamped = grpo_loss(self.policy, rows)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.step = t
        self._snapshot_policy()
        for w in groups:
            w.status = TRAINED
            del self.live[w.gid]
            self.trained_locators[t] += w.row_locators()
        reward = float(torch.stack([r["rewards"] for r in rows]).mean())
        self.stats["clamped_weights"] += clamped
        announce("STEP", t, f"groups={len(groups)}", f"epoch={self.loader_epoch}",
                 f"loss={float(loss.detach()):.4f}", f"reward={reward:.3f}",
                 f"staleness={staleness(groups, t - 1)}", f"clamped={clamped}")
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
        tmp = await asyncio.to_thread(self._save_weights, captured, t)
        if self.compactor is not None:
            # the ownership cut at the checkpoint's LSN goes with the weights, so the checkpoint
            # directory restores on its own; it runs on the compactor's one thread
            fut = self.compactor.submit(lsn, into=os.path.join(tmp, "ownership"), retention=None)
            await asyncio.wrap_future(fut)
        await asyncio.sleep(self.cfg.ckpt_save_seconds)   # stands in for writing large weights
        await asyncio.to_thread(self._publish_checkpoint, tmp, t)
        committed_lsn = await self.own.commit_checkpoint(t)
        announce("PHASE", "checkpoint_committed", f"step={t}")
        self.last_ckpt = t
        self._retire_old(self._restorable_step(t, committed_lsn))
        if self.compactor is not None:
            self._compact_in_background()

    def _save_weights(self, captured: dict, t: int) -> str:
        """The step-`t` checkpoint's weights, fsynced, in a new temporary directory (its path),
        which `_publish_checkpoint` renames into place."""
        tmp = os.path.join(self.cfg.ckpt_dir, f"{TMP}step_{t:08d}-{secrets.token_hex(4)}")
        os.makedirs(tmp)
        _save_fsynced(captured, os.path.join(tmp, "model.pt"))
        return tmp

    def _publish_checkpoint(self, tmp: str, t: int) -> None:
        DEFAULT_FS.fsync_dir(tmp)
        final = step_dir(self.cfg.ckpt_dir, t)
        if os.path.exists(final):   # written by a run that died before committing it
            shutil.rmtree(final)
        os.rename(tmp, final)
        DEFAULT_FS.fsync_dir(self.cfg.ckpt_dir)

    def _restorable_step(self, committed: int, lsn: int | None) -> int:
        """The newest checkpoint no restore goes back before: the step-`committed` one just
        committed, or with a replica the newest whose commit is in the bucket (a lost node takes
        the journal's unshipped commits with it)."""
        if self.cfg.replica is None:
            return committed
        self.unshipped[committed] = lsn
        shipped = self.journal.replica_lag().shipped_lsn
        for step in [s for s, at in self.unshipped.items() if at <= shipped]:
            self.restorable = max(self.restorable, step)
            del self.unshipped[step]
        return self.restorable

    def _retire_old(self, committed: int) -> None:
        """No restore goes back before the step-`committed` checkpoint: older checkpoint
        directories (but the newest few) and the rows of groups trained up to it go."""
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

    def _start_ray(self) -> list[tuple]:
        """Ray mode: join the cluster, take over the actors of earlier controllers of this run
        directory; returns what those finished for their dead controller, to fence."""
        from .ray_workers import ActorPool, connect, namespace_for
        connect(self.cfg.ray_address, namespace_for(self.cfg.out))
        self.pool = ActorPool(self.dp, self.cfg.ray_actors)
        handed = self.pool.adopt()
        announce("RAY", f"run={self.pool.run}", f"adopted={sum(s is not None for s in self.pool.slots)}",
                 f"handed_over={len(handed)}")
        return handed

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        # data-plane writes and journal commits wait on fsyncs in threads: enough of them that
        # every generator worker's write can be in flight at once (up to 32)
        io_pool = concurrent.futures.ThreadPoolExecutor(min(32, 2 * self.cfg.workers + 4),
                                                        thread_name_prefix="io")
        asyncio.get_running_loop().set_default_executor(io_pool)
        self._cleanup_tmp()
        self.jobs, self.events = asyncio.Queue(), asyncio.Queue()
        redispatch = []
        if self.cfg.baseline:
            self._start_baseline()
        else:
            redispatch = self._start_journal()
        self._snapshot_policy()
        for w, _ in redispatch:   # ordered by target step, then group id
            w.policy_version = self.step
        self._queue([(w, i, attempt) for w, todo in redispatch for i, attempt in todo])
        worker = self._worker
        if self.cfg.ray:
            worker = self._ray_worker
            await self._fence_handover(self._start_ray())
        workers = [self._guarded(worker(i)) for i in range(self.cfg.workers)]
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
            if self.cfg.replica is not None:   # the run's history is in the bucket when it ends
                await asyncio.to_thread(self.journal.flush_replica, REPLICA_FLUSH_SECONDS)
        finally:
            tasks = workers + list(self.stragglers) + list(self.sealing)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.compactor is not None:
                self.compactor.close()
            if self.pool is not None:
                self.pool.close()
            self.gc_pool.shutdown(wait=True)
            if self.journal is not None:
                self.journal.close()
            self.ledger.close()
        announce("DONE", f"step={self.step}", f"epochs={self.cfg.epochs}",
                 *(f"{k}={v}" for k, v in sorted(self.stats.items())))


def parse_args(argv=None) -> Config:
    p = argparse.ArgumentParser(prog=f"python -m {__package__}.trainer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="run directory (journal/, ckpt/, rows/, ledger.log)")
    p.add_argument("--seed", type=int, default=0, help="dataset and shuffling seed")
    p.add_argument("--epochs", type=int, default=2, help="passes over the dataset")
    p.add_argument("--dataset-size", type=int, default=2048, help="prompts in the dataset")
    p.add_argument("--batch-size", type=int, default=16, help="prompt groups per step")
    p.add_argument("--rollouts", type=int, default=8, help="rollouts per group")
    p.add_argument("--group-level", action="store_true",
                   help="admit groups without rollouts= (all-or-nothing): a failed or late rollout "
                        "discards its group, a restore regenerates every rollout of an admitted group")
    p.add_argument("--workers", type=int, default=8, help="generator tasks")
    p.add_argument("--failure-rate", type=float, default=0.02, help="probability a rollout fails")
    p.add_argument("--latency-ms", type=float, default=3.0,
                   help=f"generation time of a median rollout ({LENGTH_MEDIAN} tokens; lengths are "
                        f"log-normal, up to {MAX_TOKENS} tokens; Ray actors: a log-normal latency, "
                        f"sigma {LATENCY_SIGMA}) (default 3)")
    p.add_argument("--progress-every", type=int, default=0,
                   help="a rollout's durable prefix (rollout_progress) every this many tokens, and "
                        "every turn of a multi-turn rollout; a restore continues from it (0: off, "
                        "the default; rollout-level only)")
    p.add_argument("--max-policy-lag", type=int, default=0,
                   help="the trainer's off-policy bound in steps: a restore to the checkpoint of step S "
                        "keeps the sealed rollouts, finished groups and prefixes of weights up to S + K "
                        "(DESIGN 14; the loss weighs each token by its behaviour log-probability) "
                        "(default 0: nothing newer than the checkpoint)")
    p.add_argument("--slow-rate", type=float, default=0.01,
                   help="probability that a rollout's worker is slow: it misses the deadline by "
                        "1.5-4x and answers late (default 0.01)")
    p.add_argument("--deadline-ms", type=float, default=50.0,
                   help="a rollout not delivered by then is given up and dispatched again (default 50)")
    p.add_argument("--max-attempts", type=int, default=3,
                   help="attempts per rollout before its group is discarded (rollout-level; default 3)")
    p.add_argument("--ckpt-every", type=int, default=4, help="steps between checkpoints")
    p.add_argument("--ckpt-save-seconds", type=float, default=0.05,
                   help="extra time a checkpoint save takes (stands in for large weights)")
    p.add_argument("--segment-bytes", type=int, default=64 << 10, help="journal segment size")
    p.add_argument("--baseline", action="store_true",
                   help="no journal: save the loader state at checkpoint time, drop in-flight work")
    p.add_argument("--no-journal", action="store_true",
                   help="the default loop (rollouts tracked, retried and fenced one by one) with the "
                        "journal off: ownership in memory only, a restart resumes like --baseline")
    p.add_argument("--ray", action="store_true",
                   help="rollout workers are Ray actors (needs the ray extra)")
    p.add_argument("--ray-address", default=os.environ.get("OJ_RAY_ADDRESS"),
                   help="Ray cluster to join (default $OJ_RAY_ADDRESS, else a local one is started)")
    p.add_argument("--ray-actors", type=int, default=3, help="rollout actors in Ray mode (default 3)")
    add_replica_arguments(p, "ship the journal to this bucket (s3://, gs://, az://; needs the replica "
                             "extra); a start with no local journal restores from the bucket alone. A "
                             "node loss takes journal/ (the local disk) and what was not shipped yet; "
                             "the bucket, ckpt/ and rows/ (shared storage in a real run) survive it")
    p.add_argument("--ship-interval", type=float, default=1.0,
                   help="seconds between the replica's shipping passes (default 1.0)")
    a = p.parse_args(argv)
    if a.ray:
        require(p, "--ray", "ray", "ray")
    if a.no_journal and (a.baseline or a.group_level):
        p.error("--no-journal is the rollout-level loop without the journal: not with --baseline "
                "(group-level, no journal) or --group-level")
    if a.progress_every < 0:
        p.error(f"--progress-every must be >= 0, not {a.progress_every}")
    if a.max_policy_lag < 0:
        p.error(f"--max-policy-lag must be >= 0, not {a.max_policy_lag}")
    if a.max_policy_lag and (a.baseline or a.no_journal):
        p.error("--max-policy-lag bounds what a restore keeps: the baseline has no restore")
    if a.progress_every and (a.baseline or a.group_level or a.ray):
        p.error("--progress-every records rollout_progress: rollout-level with the journal only "
                "(not --baseline, --group-level or --ray)")
    if a.replica is not None and (a.baseline or a.no_journal):
        p.error("--replica ships the journal: it does not combine with --baseline or --no-journal")
    replica_options = parse_replica_options(p, a)
    return Config(out=a.out, seed=a.seed, epochs=a.epochs, dataset_size=a.dataset_size,
                  batch_size=a.batch_size, rollouts=a.rollouts, workers=a.workers,
                  failure_rate=a.failure_rate, latency_ms=a.latency_ms, progress_every=a.progress_every,
                  max_policy_lag=a.max_policy_lag,
                  slow_rate=a.slow_rate,
                  deadline_ms=a.deadline_ms, max_attempts=a.max_attempts, group_level=a.group_level,
                  ckpt_every=a.ckpt_every, ckpt_save_seconds=a.ckpt_save_seconds,
                  segment_bytes=a.segment_bytes, baseline=a.baseline or a.no_journal,
                  baseline_rollouts=a.no_journal, ray=a.ray,
                  ray_address=a.ray_address, ray_actors=a.ray_actors, replica=a.replica,
                  replica_options=replica_options, ship_interval=a.ship_interval)


def main(argv=None) -> int:
    cfg = parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(cfg.out, exist_ok=True)
    asyncio.run(Trainer(cfg).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
