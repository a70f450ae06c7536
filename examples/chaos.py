"""journal-demo: SIGKILL the example trainer at random moments until it finishes, then prove
exactly-once from the journal.

    journal-demo                    # the journal trainer, default kills, 1-3 minutes
    journal-demo --group-level      # the same, groups admitted without rollouts= (all-or-nothing)
    journal-demo --baseline         # the same trainer and kills, without the journal
    journal-demo --ray              # rollout workers as Ray actors on a local 3-node cluster
    journal-demo --ray --kill-kinds actor   # ... killing single actors only
    journal-demo --replica s3://bucket/demo-1 --replica-options JSON   # node-loss kills

The driver runs the trainer (`python -m examples.trainer`; installed, `replay.demo.trainer`)
as a child process and kills it (SIGKILL: no cleanup, no flush, no atexit) at moments it
picks with `--seed`: while it is saving a checkpoint, while compaction runs in the
background, while it restores, and at random moments of training. It restarts the child after each kill, and once the kills are spent
lets it run to the end of `--epochs`. Then it audits the final history:

* the journal run: `replay.audit` of the journal, in-process (what `journal-inspect audit`
  prints; the active history: what the surviving model was trained on), cross-checked row for row against the trainer's own
  ledger (`examples.bookkeeping`). Exit status 1 on any prompt trained twice or lost.
* `--baseline`: the trainer's ledger only (there is no journal). It shows how many prompts
  an async trainer that saves its loader state at checkpoint time loses or repeats.

Every row of every epoch ends up in exactly one of: trained once, trained more than once,
dropped (a rollout failed; the reason is recorded), lost (never trained, never dropped).

It also reports what the kills cost in generation: the rollouts restores handed back to
regenerate (rollout-level: only the unsealed ones; group-level: every rollout of an
unfinished group), and the generation-seconds lost: the generation time of completed
rollouts that no surviving history used and the trainer did not throw away itself (from the
ledger: generated - trained - discarded by failures and fenced late results). A rollout in
flight at the moment of a kill is not counted. And the late results of slow workers: fenced
by the journal (rollout-level), or dropped with their discarded group (group-level).
Generation time the final history dropped with failed groups, and late results, are
reported apart: no kill threw them away.

With `--ray` the driver starts a Ray cluster on this machine (a head and two worker nodes,
loopback only), the trainer runs its rollout workers as actors there, and besides the
controller kills the driver kills single actors and replaces a whole worker node
(`examples.ray_workers.ClusterChaos`), each when the trainer announces a step the seed picks
(`ray_kill_plan`), so runs with the same seed see the same kills. `--kill-kinds` picks which
of the three kinds (actor, node, controller) the run gets.

With `--replica URL` every kill is a node loss: the trainer ships its journal to the bucket,
and at each kill the driver also deletes the trainer's local `journal/` directory, so each
restart restores from the bucket alone. The weights (`ckpt/`) and the data plane (`rows/`)
stand for shared storage and survive. The audit is read from the bucket
(`replay.audit(URL, replica_options=...)`), cross-checked with the ledger. The prefix must be
empty. No bucket at hand? moto's S3 server on this machine is one (`pip install
'moto[server]'`):

    python -m moto.server -H 127.0.0.1 -p 9000 &
    python -c "import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:9000',
        aws_access_key_id='test', aws_secret_access_key='test',
        region_name='us-east-1').create_bucket(Bucket='demo')"
    journal-demo --replica s3://demo/run-1 --replica-options '{"endpoint":
        "http://127.0.0.1:9000", "access_key_id": "test", "secret_access_key": "test",
        "region": "us-east-1", "client_options": {"allow_http": true}}'

A `file://` URL is refused: obstore's local store has no compare-and-swap (`PutMode::Update`),
which the journal's lease needs; `memory://` lives in one process and dies with the trainer.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from .bookkeeping import read_ledger
from .extras import require
from .replica_options import add_replica_arguments, parse_replica_options

TRAINER_MODULE = f"{__package__}.trainer"   # examples.trainer in a checkout, replay.demo.trainer installed
RAY_DEADLINE_MS = 1000      # a Ray round trip on a busy machine takes far more than a thread's
RAY_KILL_KINDS = ("actor", "node", "controller")
DEFAULT_PROGRESS_EVERY = 16  # journal-demo's --progress-every
KINDS = ("checkpoint_save", "compaction", "restore", "random")
KIND_TEXT = {"checkpoint_save": "in a checkpoint save", "compaction": "in compaction",
             "restore": "in a restore", "random": "at a random moment"}
KIND_TOTAL = dict(KIND_TEXT, random="at random moments")
# one line per run: where it resumed, what restore handed back, how it ended (<= 100 columns)
RUN_HEADER = ("  each run: the step and LSN it resumed at, the groups restore handed back (regen: the\n"
              "  rollouts it regenerates, resv: reserved, salv: salvaged), how it ended\n"
              f"  {'run':>3} {'step':>5} {'lsn':>6} {'admitted':>8} {'regen':>5} {'resv':>4} {'replay':>6} "
              f"{'spare':>5} {'salv':>4}  then")


@dataclass
class Options:
    out: str | None = None
    seed: int = 0
    epochs: int = 2
    kills: int = 20
    workers: int = 8
    rollouts: int = 8
    failure_rate: float = 0.02
    dataset_size: int = 2048
    batch_size: int = 16
    ckpt_every: int = 4
    progress_every: int = 0           # the trainer's --progress-every (rollout-level with the journal)
    max_policy_lag: int = 0           # the trainer's --max-policy-lag (restores keep newer weights' work)
    baseline: bool = False
    group_level: bool = False
    ray: bool = False
    kill_kinds: tuple = RAY_KILL_KINDS   # Ray mode: which kinds of kill the run gets
    actor_kills: int = 8                 # Ray mode: single actors killed (at steps of the plan)
    node_kills: int = 1                  # Ray mode: worker nodes removed (a fresh one joins each)
    replica: str | None = None        # node-loss kills: the journal's bucket (see the module doc)
    replica_options: dict | None = None
    timeout: float = 900.0
    verbose: bool = True
    trainer_args: list = field(default_factory=list)


@dataclass
class Kill:
    aim: str            # what the driver aimed at
    landed: str         # what was in progress when the child died
    step: int           # last step the child reported
    detail: str = ""


def _trainer_cmd(o: Options, out: str) -> list[str]:
    cmd = [sys.executable, "-m", TRAINER_MODULE, "--out", out, "--seed", str(o.seed),
           "--epochs", str(o.epochs), "--workers", str(o.workers), "--rollouts", str(o.rollouts),
           "--failure-rate", str(o.failure_rate),
           "--dataset-size", str(o.dataset_size), "--batch-size", str(o.batch_size),
           "--ckpt-every", str(o.ckpt_every)]
    if o.baseline:
        cmd.append("--baseline")
    if o.group_level:
        cmd.append("--group-level")
    if o.progress_every:
        cmd += ["--progress-every", str(o.progress_every)]
    if o.max_policy_lag:
        cmd += ["--max-policy-lag", str(o.max_policy_lag)]
    if o.ray:
        cmd += ["--ray", "--deadline-ms", str(RAY_DEADLINE_MS)]
    if o.replica is not None:
        cmd += ["--replica", o.replica, "--replica-options", json.dumps(o.replica_options or {})]
    return cmd + list(o.trainer_args)


def kill_plan(kills: int, seed: int, total_steps: int) -> list[tuple[str, int, float]]:
    """(aim, step, parameter) per kill, spread over the run: the kill comes once the trainer has
    reached `step` (steps are absolute, so a restarted trainer gets there again) at the next
    checkpoint save, compaction or restore it announces, or `parameter` seconds later for a
    random moment (for a restore: `parameter` seconds after it begins)."""
    rng = random.Random(f"journal-demo-kills-{seed}")
    aims = ["checkpoint_save", "compaction", "restore"][:kills]
    aims += rng.choices(["random", "random", "random", "checkpoint_save", "compaction", "restore"],
                        k=max(0, kills - len(aims)))
    rng.shuffle(aims)
    steps = sorted(rng.randint(1, max(1, int(total_steps * 0.8))) for _ in aims)
    return [(aim, step, rng.uniform(0.0, 0.15) if aim == "restore" else rng.uniform(0.0, 0.6))
            for aim, step in zip(aims, steps)]


def ray_kill_plan(o: Options, total_steps: int) -> list[tuple[int, str]]:
    """(step, kind) of the actor kills and node replacements of a Ray run, by step: each comes
    when the trainer first announces that step (an absolute step, reached again after a
    restore). A function of the seed; the kinds not in `o.kill_kinds` are left out."""
    rng = random.Random(f"journal-demo-ray-kills-{o.seed}")
    plan = [(rng.randint(1, max(1, int(total_steps * 0.8))), kind)
            for kind, n in (("actor", o.actor_kills), ("node", o.node_kills)) for _ in range(n)]
    return sorted(k for k in plan if k[1] in o.kill_kinds)


def _total_steps(o: Options) -> int:
    """Steps the run will take (the spare pool takes ~ one batch in 12 at the default failure rate)."""
    return o.epochs * -(-o.dataset_size // o.batch_size) * 9 // 10


class Child:
    """One incarnation of the trainer, its stdout read line by line on a thread."""

    def __init__(self, cmd: list[str], stderr_path: str):
        self.err = open(stderr_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, env=env)
        self.lines: queue.Queue = queue.Queue()
        self.started = time.monotonic()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def kill(self) -> None:
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> int:
        rc = self.proc.wait()
        self.err.close()
        return rc

    def stop(self) -> None:
        """Kill and reap it (the driver is leaving early: Ctrl-C, a timeout, an error)."""
        if self.proc.poll() is None:
            self.kill()
        self.close()


class Progress:
    """What the child said it is doing (from its PHASE/STEP/RESUMED lines)."""

    def __init__(self):
        self.resumed = None          # the RESUMED line's fields
        self.step = 0
        self.saving = None           # step of a checkpoint save not yet committed
        self.compacting = False
        self.done = None
        self.counts = Counter()

    def feed(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        head = parts[0]
        if head == "RESUMED":
            self.resumed = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            self.step = int(self.resumed.get("step", 0))
        elif head == "STEP":
            self.step = int(parts[1])
        elif head == "PHASE" and len(parts) > 1:
            kind = parts[1]
            self.counts[kind] += 1
            if kind == "checkpoint_save":
                self.saving = int(parts[2].split("=")[1])
            elif kind == "checkpoint_committed":
                self.saving = None
            elif kind == "compaction":
                self.compacting = True
            elif kind in ("compaction_done", "compaction_failed"):
                self.compacting = False
        elif head == "DONE":
            self.done = line

    def in_progress(self) -> list[str]:
        if self.resumed is None:
            return ["restore"]
        out = []
        if self.saving is not None:
            out.append("checkpoint_save")
        if self.compacting:
            out.append("compaction")
        return out or ["random"]


def _say(o: Options, text: str) -> None:
    if o.verbose:
        print(text, flush=True)


def _run_line(n: int, p: Progress, then: str) -> str:
    """One row under RUN_HEADER: where run `n` resumed, what it got back, how it ended."""
    r = p.resumed or {}
    cols = [r.get(k, "-") for k in ("step", "lsn", "admitted", "regenerated", "reserved", "replay", "spare",
                                    "salvaged")]
    return (f"  {n:>3} {cols[0]:>5} {cols[1]:>6} {cols[2]:>8} {cols[3]:>5} {cols[4]:>4} {cols[5]:>6} "
            f"{cols[6]:>5} {cols[7]:>4}  {then}")


def _run_children(o: Options, out: str, at_step=None) -> tuple[list[Kill], list[Progress]]:
    """Start, kill and restart the trainer until its plan of kills is spent and it finishes;
    `at_step(step)` runs on the driver's thread whenever the trainer announces a step."""
    plan = kill_plan(o.kills, o.seed, _total_steps(o))
    cmd = _trainer_cmd(o, out)
    kills: list[Kill] = []
    runs: list[Progress] = []
    need = {"checkpoint_save", "compaction"} if o.kills >= 2 else set()
    if o.baseline:
        need.discard("compaction")
    extra = 0
    deadline = time.monotonic() + o.timeout
    n = 0
    _say(o, RUN_HEADER + ("\n  (the baseline has no lsn and drops in-flight work)" if o.baseline else ""))
    while True:
        n += 1
        landed_kinds = {k.landed for k in kills}
        if plan:
            aim, target, param = plan.pop(0)
        elif need - landed_kinds and extra < 6:
            # an aimed kill that missed (the phase ended first): aim again
            extra += 1
            aim, target, param = sorted(need - landed_kinds)[0], 0, 0.0
        else:
            aim, target, param = None, 0, 0.0
        p = Progress()
        runs.append(p)
        child = None
        try:
            child = Child(cmd, os.path.join(out, "trainer-stderr.log"))
            killed = _watch(o, child, p, aim, target, param, deadline, n, at_step)
        except BaseException:   # Ctrl-C, a timeout: no trainer outlives the driver
            if child is not None:
                child.stop()
            raise
        rc = child.close()
        if not killed:
            if rc != 0 or p.done is None:
                raise RuntimeError(f"journal-demo: the trainer exited with status {rc} on its own "
                                   f"(run {n}); see {os.path.join(out, 'trainer-stderr.log')}:\n"
                                   + _tail(os.path.join(out, "trainer-stderr.log")))
            _say(o, _run_line(n, p, f"finished at step {p.step}"))
            return kills, runs
        if rc != -signal.SIGKILL:
            raise RuntimeError(f"journal-demo: run {n} exited with status {rc}, not by the SIGKILL")
        after = p.in_progress()
        landed = aim if aim in after else after[0]
        detail = f"checkpoint of step {p.saving} in progress" if "checkpoint_save" in after else ""
        kills.append(Kill(aim, landed, p.step, detail))
        _say(o, _run_line(n, p, f"killed {KIND_TEXT[landed]}, step {p.step}"))
        if o.replica is not None:   # a node loss: the local disk goes with the trainer
            shutil.rmtree(os.path.join(out, "journal"), ignore_errors=True)


def _watch(o: Options, child: Child, p: Progress, aim: str | None, target: int, param: float,
           deadline: float, n: int, at_step=None) -> bool:
    """Follow one child's announcements until it exits, killing it as `aim` says; returns
    whether it was killed."""
    kill_at = None
    killed = False
    trigger = {"checkpoint_save": "checkpoint_save",
               # the baseline does not compact: its kill lands where compaction would begin
               "compaction": "checkpoint_committed" if o.baseline else "compaction"}
    while True:
        now = time.monotonic()
        if now > deadline:
            raise RuntimeError(f"journal-demo: timed out after {o.timeout:.0f} s (run {n})")
        if kill_at is not None and not killed and now >= kill_at:
            child.kill()
            killed = True
        wait = 0.5 if kill_at is None or killed else max(0.0, kill_at - now)
        try:
            line = child.lines.get(timeout=wait)
        except queue.Empty:
            continue
        if line is None:
            break
        p.feed(line)   # after a kill: still in the pipe, so it happened before the kill
        parts = line.split()
        if at_step is not None and not killed and parts and parts[0] == "STEP":
            at_step(p.step)
        if killed or aim is None or not parts:
            continue
        if aim == "random":
            if kill_at is None and p.resumed is not None and p.step >= target:
                kill_at = time.monotonic() + param
        elif aim == "restore" and parts[:2] == ["PHASE", "restore"]:
            kill_at = time.monotonic() + param
        elif aim == "restore" and parts[0] == "RESUMED":
            kill_at = time.monotonic()   # restore was faster than the aim: kill now
        elif aim in trigger and parts[:2] == ["PHASE", trigger[aim]] and p.step >= target:
            child.kill()
            killed = True
    return killed


def _tail(path: str, n: int = 25) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def audit_report(journal: str, replica_options: dict | None = None) -> dict:
    """`replay.audit` of the journal (a directory, or a replica URL read from the bucket alone),
    as the document `journal-inspect audit --json` prints."""
    from replay import audit
    return audit(journal, replica_options=replica_options).to_dict()


# obstore's LocalStore has no PutMode::Update (the lease's compare-and-swap); a MemoryStore
# lives in one process
UNUSABLE_REPLICA_SCHEMES = {
    "file": "obstore's local store cannot compare-and-swap (PutMode::Update), which the journal's "
            "lease needs",
    "memory": "a memory store lives in one process and dies with the trainer"}


def check_replica(url: str, options: dict | None) -> None:
    """Refuse a replica the demo cannot use: a scheme without a lease, a prefix that holds
    objects already (the first start would restore someone else's history), a store that does
    not answer."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme in UNUSABLE_REPLICA_SCHEMES:
        raise RuntimeError(f"journal-demo: --replica {url}: {UNUSABLE_REPLICA_SCHEMES[scheme]}; use "
                           "an S3-compatible bucket (journal-demo --help says how to start one here)")
    import obstore
    from obstore.store import from_url
    try:
        first = next(iter(obstore.list(from_url(url, **(options or {})), chunk_size=1)), [])
    except Exception as exc:  # obstore's own classes: a bad option, no server, no bucket
        raise RuntimeError(f"journal-demo: cannot list --replica {url}: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0]} (journal-demo --help says how to start a "
                           "local S3 server)") from exc
    if first:
        raise RuntimeError(f"journal-demo: --replica {url} already holds objects ({first[0]['path']}); "
                           "pick a new prefix")


def report_from_audit(doc: dict, dataset_size: int, epochs: int) -> dict:
    """The audit in the shape of `History.report`; a row the loader never handed out in an
    epoch the run finished is lost too (the journal only knows rows that were taken)."""
    by_epoch = {e["epoch"]: e for e in doc["epochs"]}
    per_epoch, tot = [], Counter()
    reasons_total: Counter = Counter()
    for ep in range(epochs):
        e = by_epoch.get(ep, {"rows_taken": 0, "trained_once": 0, "trained_more_count": 0,
                              "dropped": {}, "lost_count": 0, "in_flight": 0, "pending_retake": 0})
        never_taken = dataset_size - e["rows_taken"]
        row = {"epoch": ep, "rows": dataset_size, "trained_once": e["trained_once"],
               "trained_twice": e["trained_more_count"], "dropped": sum(e["dropped"].values()),
               "dropped_reasons": dict(e["dropped"]), "in_flight": e["in_flight"],
               "lost": e["lost_count"] + e.get("pending_retake", 0) + never_taken,
               "never_taken": never_taken}
        per_epoch.append(row)
        for k in ("trained_once", "trained_twice", "dropped", "in_flight", "lost"):
            tot[k] += row[k]
        reasons_total.update(e["dropped"])
    extra = sorted(set(by_epoch) - set(range(epochs)))
    return {"source": "replay.audit", "epochs": per_epoch, "trained_once": tot["trained_once"],
            "trained_twice": tot["trained_twice"], "dropped": tot["dropped"],
            "dropped_reasons": dict(reasons_total), "lost": tot["lost"], "in_flight": tot["in_flight"],
            "unexpected_epochs": extra}


def compare_reports(audit: dict, ledger: dict) -> list[str]:
    """Where the journal's audit and the trainer's ledger disagree (per epoch and class)."""
    diffs = []
    for a, b in zip(audit["epochs"], ledger["epochs"]):
        for key in ("trained_once", "trained_twice", "dropped_reasons", "lost", "in_flight"):
            if a[key] != b[key]:
                diffs.append(f"epoch {a['epoch']}: {key} {a[key]} in the journal, {b[key]} in the ledger")
    if audit.get("unexpected_epochs"):
        diffs.append(f"the journal has rows of epochs {audit['unexpected_epochs']} the run never had")
    if ledger.get("unexpected_rows"):
        diffs.append(f"the ledger has {ledger['unexpected_rows']} rows outside the dataset")
    return diffs


def new_run_dir(baseline: bool) -> str:
    return tempfile.mkdtemp(prefix="journal-demo-baseline-" if baseline else "journal-demo-")


def run(o: Options, cluster=None) -> dict:
    """Run the chaos demo; returns the summary (what `main` prints). With `--ray`, `cluster`
    (a `ray.cluster_utils.Cluster` this process is connected to) is used instead of a new one."""
    t0 = time.monotonic()
    out = o.out or new_run_dir(o.baseline)
    os.makedirs(out, exist_ok=True)
    if any(n in os.listdir(out) for n in ("journal", "ckpt", "ledger.log", "rows")):
        raise RuntimeError(f"journal-demo: {out} already holds a run; pick a new --out")
    if o.replica is not None:
        check_replica(o.replica, o.replica_options)
    level = "group-level" if o.baseline or o.group_level else "rollout-level"
    mode = "baseline (no journal)" if o.baseline else f"journal, {level}"
    mode += ", Ray actors" if o.ray else ""
    mode += f", node-loss kills, replica {o.replica}" if o.replica else ""
    _say(o, f"journal-demo [{mode}]: {o.epochs} epochs x {o.dataset_size} prompts, batch "
            f"{o.batch_size}, {o.rollouts} rollouts per group,\n  {o.workers} generator workers, rollout "
            f"failure rate {o.failure_rate}, {o.kills} kills, seed {o.seed}"
            f"{f', progress every {o.progress_every} tokens' if o.progress_every else ''}\n  run dir {out}")
    if o.ray:
        kills, runs, ray_counts = _run_on_ray(o, out, cluster)
    else:
        kills, runs, ray_counts = (*_run_children(o, out), None)
    ledger = read_ledger(os.path.join(out, "ledger.log"))
    summary = {"mode": "baseline" if o.baseline else "journal", "level": level, "out": out, "seed": o.seed,
               "rollouts_per_group": o.rollouts, "progress_every": o.progress_every,
               "max_policy_lag": o.max_policy_lag,
               "epochs": o.epochs, "dataset_size": o.dataset_size,
               "kills": len(kills), "kills_by_phase": dict(Counter(k.landed for k in kills)),
               "kills_aimed": dict(Counter(k.aim for k in kills)), "restarts": len(runs) - 1}
    ledger_report = ledger.report(o.dataset_size, o.epochs)
    summary["ledger"] = ledger_report
    if o.baseline:
        audit = ledger_report
        summary["audit_source"] = "ledger"
    else:
        source = o.replica if o.replica is not None else os.path.join(out, "journal")
        cli = audit_report(source, o.replica_options)
        audit = report_from_audit(cli, o.dataset_size, o.epochs)
        summary["audit_source"] = "replay.audit" + (" of the bucket" if o.replica else "")
        summary["replica"] = o.replica
        summary["cli_audit"] = cli
        summary["ledger_mismatches"] = compare_reports(audit, ledger_report)
        summary["cli_clean"] = bool(cli.get("clean"))
    summary["audit"] = audit
    resumed = [p.resumed for p in runs[1:] if p.resumed]
    for key, field_name in (("regenerated_groups", "admitted"), ("regenerated_rollouts", "regenerated"),
                            ("continued_rollouts", "continued"), ("kept_tokens", "kept_tokens"),
                            ("salvaged_groups", "salvaged"), ("salvaged_rollouts", "salvaged_rollouts"),
                            ("demoted_groups", "demoted"), ("lost_rollouts", "lost_rollouts"),
                            ("kept_newer_rollouts", "kept_newer_rollouts"),
                            ("kept_newer_prefixes", "kept_newer_prefixes"), ("kept_newer_groups", "kept_newer_groups")):
        summary[key] = sum(int(r.get(field_name, 0)) for r in resumed)
    summary.update(generation_report(ledger_report, len(kills)))
    summary["restores"] = len(resumed)
    summary["restored_from"] = dict(Counter(r.get("source", "-") for r in resumed))
    if ray_counts is not None:
        summary["ray"] = dict(ray_counts, rollouts_lost_with_actor=ledger_report["counters"].get("actors_lost", 0))
    summary["wall_seconds"] = round(time.monotonic() - t0, 1)
    summary["twice"] = audit["trained_twice"]
    summary["lost"] = audit["lost"] + audit["in_flight"]
    summary["ok"] = (summary["twice"] == 0 and summary["lost"] == 0
                     and not summary.get("ledger_mismatches") and summary.get("cli_clean", True))
    return summary


def _run_on_ray(o: Options, out: str, cluster=None):
    """`_run_children` with the trainer's rollout workers on a local Ray cluster (a new one
    unless `cluster` is given), killing single actors and replacing worker nodes at the steps
    of `ray_kill_plan` (Ray adds nodes from the main thread only: the driver's thread does it);
    SIGKILLs of the controller only when `o.kill_kinds` has "controller"."""
    from .ray_workers import ClusterChaos, start_cluster   # first: it makes Ray bind loopback
    import ray
    own_cluster = cluster is None
    if own_cluster:
        cluster = start_cluster()
    try:
        if own_cluster:
            ray.init(address=cluster.address, log_to_driver=False)
        chaos = ClusterChaos(cluster, out, o.seed)
        plan = ray_kill_plan(o, _total_steps(o))

        def kill_at(step: int):
            while plan and plan[0][0] <= step:
                if plan.pop(0)[1] == "actor":
                    chaos.kill_actor()
                else:
                    chaos.replace_node()

        o = dataclasses.replace(o, kills=o.kills if "controller" in o.kill_kinds else 0,
                                trainer_args=["--ray-address", cluster.address, *o.trainer_args])
        kills, runs = _run_children(o, out, at_step=kill_at)
        return kills, runs, dict(chaos.counts)
    finally:
        if own_cluster:
            ray.shutdown()
            cluster.shutdown()


def generation_report(ledger_report: dict, kills: int) -> dict:
    """Generation time and late results from the trainer's ledger, summed over every run."""
    c = ledger_report["counters"]
    generated = c.get("generation_us", 0)
    wasted = c.get("rejected_us", 0) + ledger_report["dropped_generation_us"]
    lost = generated - ledger_report["used_generation_us"] - wasted
    in_flight = generated - c.get("settled_us", 0)
    return {"generation_seconds": generated / 1e6,
            "generation_seconds_used": ledger_report["used_generation_us"] / 1e6,
            "generation_seconds_wasted": wasted / 1e6, "generation_seconds_lost": lost / 1e6,
            "generation_seconds_lost_per_kill": lost / 1e6 / kills if kills else 0.0,
            "generation_seconds_in_flight_lost": in_flight / 1e6,
            "generation_seconds_in_flight_lost_per_kill": in_flight / 1e6 / kills if kills else 0.0,
            "fenced_late_results": c.get("fenced_late_results", 0),
            "late_results_ignored": c.get("late_results_ignored", 0),
            "rollouts_retried": c.get("rollouts_retried", 0)}


def _generation_lines(s: dict) -> list[str]:
    """What the kills cost in generation, and the slow workers' late results."""
    lines = []
    if s["mode"] == "journal":
        only = "only the unsealed ones" if s["level"] == "rollout-level" else "all of each unfinished group"
        lines.append(f"rollouts regenerated {s['regenerated_rollouts']} after {s['restores']} restores ({only}; "
                     f"{s['regenerated_groups']} groups)")
        lines.append(f"  salvaged           {s['salvaged_groups']} groups, {s['salvaged_rollouts']} rollouts; "
                     f"demoted {s['demoted_groups']} groups")
    lines.append(f"generation lost     {s['generation_seconds_lost']:.2f} s to kills "
                 f"({s['generation_seconds_lost_per_kill']:.3f} s per kill) of {s['generation_seconds']:.1f} s "
                 "generated")
    lines.append(f"  in flight         {s['generation_seconds_in_flight_lost']:.2f} s of it in rollouts in flight at "
                 f"a kill ({s['generation_seconds_in_flight_lost_per_kill']:.3f} s per kill)")
    if s.get("progress_every"):
        lines.append(f"  progress          every {s['progress_every']} tokens and every turn: "
                     f"{s['continued_rollouts']} rollouts continued, {s['kept_tokens']} tokens kept")
    elif s["level"] == "rollout-level" and s["mode"] == "journal":
        lines.append("  progress          off (--progress-every K: restores continue rollouts from a prefix)")
    if s["mode"] == "journal":
        k = s["max_policy_lag"]
        lines.append(f"  newer weights     --max-policy-lag {k}: {s['kept_newer_rollouts']} rollouts, "
                     f"{s['kept_newer_prefixes']} prefixes, {s['kept_newer_groups']} groups kept" if k else
                     "  newer weights     none kept (--max-policy-lag K keeps work up to K steps newer)")
    lines.append(f"  and discarded     {s['generation_seconds_wasted']:.2f} s by failed groups and late results")
    if s["level"] == "rollout-level":
        lines.append(f"late results        {s['fenced_late_results']} fenced by the journal (rows deleted); "
                     f"{s['rollouts_retried']} rollouts retried")
    else:
        lines.append(f"late results        {s['late_results_ignored']} dropped with their discarded group "
                     "(group-level: no attempt to fence)")
    return lines


def render(s: dict) -> str:
    a = s["audit"]
    lines = []
    title = ("final history of the baseline (its ledger; there is no journal)" if s["mode"] == "baseline"
             else f"exactly-once audit of the final history ({s['audit_source']})")
    lines.append(title)
    lines.append(f"  {'epoch':>5} {'rows':>6} {'trained once':>13} {'twice':>6} {'lost':>6} {'dropped':>8}  reasons")
    for e in a["epochs"]:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(e["dropped_reasons"].items())) or "-"
        lines.append(f"  {e['epoch']:>5} {e['rows']:>6} {e['trained_once']:>13} {e['trained_twice']:>6} "
                     f"{e['lost'] + e['in_flight']:>6} {e['dropped']:>8}  {reasons}")
    lines.append(f"  {'all':>5} {sum(e['rows'] for e in a['epochs']):>6} {a['trained_once']:>13} "
                 f"{a['trained_twice']:>6} {a['lost'] + a['in_flight']:>6} {a['dropped']:>8}")
    if s["mode"] == "journal":
        mism = s.get("ledger_mismatches") or []
        lines.append("  own bookkeeping (the trainer's ledger.log): " + (
            "agrees with the audit in every epoch and class" if not mism else "DISAGREES with the audit:"))
        lines += [f"    {m}" for m in mism]
        tails = s["cli_audit"].get("dead_tails", [])
        if tails:
            lines.append(f"  dead tails: {len(tails)} (one per restore), holding "
                         f"{sum(t.get('finished', 0) for t in tails)} finished and "
                         f"{sum(t.get('trained', 0) for t in tails)} trained groups")
            lines.append("  (work the final history redid: retrained, salvaged or regenerated)")
    by = s["kills_by_phase"]
    parts = [f"{by.get(k, 0)} {KIND_TOTAL[k]}" for k in KINDS if by.get(k)]
    lines.append(f"kills survived      {s['kills']}" + (f": {', '.join(parts)}" if parts else ""))
    lines += _generation_lines(s)
    if "ray" in s:
        r = s["ray"]
        lines.append(f"ray                 {r['actors_killed']} actors killed, {r['nodes_replaced']} nodes "
                     f"replaced; {r['rollouts_lost_with_actor']} rollouts given up with their actor")
    lines.append(f"wall time           {s['wall_seconds']} s")
    if s["mode"] == "baseline":
        lines.append(f"BASELINE: {s['lost']} prompts lost, {s['twice']} trained more than once "
                     f"(of {sum(e['rows'] for e in a['epochs'])})")
    elif s["ok"]:
        lines.append(f"OK: every prompt trained exactly once or dropped with a reason "
                     f"({s['twice']} twice, {s['lost']} lost)")
    else:
        lines.append(f"FAILED: {s['twice']} prompts trained more than once, {s['lost']} lost")
    lines += _next_steps(s)
    return "\n".join(lines)


def _next_steps(s: dict) -> list[str]:
    """Where the run's files are and what to look at next."""
    if s["mode"] == "baseline":
        ledger = shlex.quote(os.path.join(s["out"], "ledger.log"))
        return [f"ledger    {ledger}  (the baseline has no journal)",
                "next      journal-demo   # the same seed and kills, with the journal"]
    if s.get("replica"):   # the options are not echoed: they may hold credentials
        url = shlex.quote(s["replica"])
        return [f"replica   {url}  (the trainer's last local journal is {shlex.quote(os.path.join(s['out'], 'journal'))})",
                f"next      journal-inspect audit {url} --replica-options \"$OPTS\"",
                f"          journal-inspect summary {url} --replica-options \"$OPTS\"",
                f"          journal-inspect log {url} --replica-options \"$OPTS\" --kind discarded",
                "          (OPTS: the JSON given to --replica-options)"]
    j = shlex.quote(os.path.join(s["out"], "journal"))
    return [f"journal   {j}",
            f"next      journal-inspect audit {j}",
            f"          journal-inspect timeline {j} --png owners.png",
            f"          journal-inspect summary {j}",
            f"          journal-inspect log {j} --kind discarded",
            "          (--png needs the plot extra: pip install 'ownership-journal[plot]')"]


def _kill_kinds(text: str) -> tuple:
    """`--kill-kinds`: a comma-separated subset of RAY_KILL_KINDS, in their order."""
    kinds = {k.strip() for k in text.split(",") if k.strip()}
    unknown = sorted(kinds - set(RAY_KILL_KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kill kind(s) {', '.join(unknown)}: pick from "
                                         f"{', '.join(RAY_KILL_KINDS)}")
    return tuple(k for k in RAY_KILL_KINDS if k in kinds)


def parse_args(argv=None) -> tuple[Options, bool]:
    p = argparse.ArgumentParser(
        prog="journal-demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__,
        epilog=f"The trainer (python -m {TRAINER_MODULE} --help) announces its phases on stdout;\n"
               "the driver aims kills at them. Its files stay in --out: journal/ (inspect it with\n"
               "journal-inspect), ckpt/step_N/ (weights + ownership cut), rows/ (the data plane),\n"
               "ledger.log, trainer-stderr.log.\n\n"
               "exit status: 0 every prompt trained exactly once or dropped with a reason (the\n"
               "baseline always exits 0); 1 a prompt trained twice or lost; 2 the trainer failed.")
    p.add_argument("--seed", type=int, default=0, help="dataset, shuffling and kill plan (default 0)")
    p.add_argument("--epochs", type=int, default=2, help="passes over the dataset (default 2)")
    p.add_argument("--kills", type=int, default=20,
                   help="SIGKILLs before the trainer may finish (default 20; at least one during a "
                        "checkpoint save and one during compaction when >= 2)")
    p.add_argument("--workers", type=int, default=8, help="generator workers (default 8)")
    p.add_argument("--failure-rate", type=float, default=0.02,
                   help="probability that one rollout fails: it is retried with its next attempt "
                        "(rollout-level; its group is dropped and replaced from the spare pool after "
                        "3 attempts, or at once group-level) (default 0.02)")
    p.add_argument("--out", default=None, help="run directory (default: a new temporary directory)")
    p.add_argument("--group-level", action="store_true",
                   help="admit groups without rollouts= (all-or-nothing, as before rollout-level "
                        "ownership): the same seed and kills, to compare what restores regenerate")
    p.add_argument("--rollouts", type=int, default=8, help="rollouts per group (default 8)")
    p.add_argument("--baseline", action="store_true",
                   help="run the trainer without the journal (loader state saved at checkpoint "
                        "time, in-flight work dropped) and report what it lost or repeated")
    p.add_argument("--dataset-size", type=int, default=2048, help="prompts per epoch (default 2048)")
    p.add_argument("--batch-size", type=int, default=16, help="prompt groups per step (default 16)")
    p.add_argument("--ckpt-every", type=int, default=4, help="steps between checkpoints (default 4)")
    p.add_argument("--progress-every", type=int, default=DEFAULT_PROGRESS_EVERY,
                   help="the trainer records a rollout's durable prefix every this many tokens and "
                        "every turn of a multi-turn rollout; a restore continues from it (0: off; "
                        f"rollout-level with the journal only) (default {DEFAULT_PROGRESS_EVERY})")
    p.add_argument("--max-policy-lag", type=int, default=0,
                   help="the trainer's off-policy bound: each restore to the checkpoint of step S keeps "
                        "the work of weights up to S + K (sealed rollouts, finished groups, prefixes; "
                        "DESIGN 14), which the trainer's loss weighs by its tokens' behaviour "
                        "log-probabilities (default 0: nothing newer than the checkpoint; the journal only)")
    p.add_argument("--ray", action="store_true",
                   help="rollout workers as Ray actors on a local 3-node cluster (loopback only), "
                        "also killing actors and replacing a node; needs the ray extra")
    p.add_argument("--kill-kinds", default=",".join(RAY_KILL_KINDS), type=_kill_kinds,
                   help="with --ray: the kinds of kill, comma-separated, of actor (single actors "
                        "killed), node (a worker node removed, a fresh one joins), controller "
                        "(the trainer SIGKILLed: --kills of them) (default all three)")
    add_replica_arguments(p, "node-loss kills: the trainer ships its journal to this bucket prefix "
                             "(empty; s3://, gs://, az://), each kill also deletes its local journal/, "
                             "each restart restores from the bucket alone, and the audit reads the "
                             "bucket (see above for a local S3 server)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-run lines")
    a = p.parse_args(argv)
    if a.ray:
        require(p, "--ray", "ray", "ray")
    if not a.ray and a.kill_kinds != RAY_KILL_KINDS:
        p.error("--kill-kinds needs --ray (without it every kill is a controller kill)")
    if a.progress_every < 0:
        p.error(f"--progress-every must be >= 0, not {a.progress_every}")
    if a.baseline or a.group_level or a.ray:
        a.progress_every = 0   # no rollout_progress without rollout-level groups in the journal
    if a.replica is not None and a.baseline:
        p.error("--replica ships the journal: the baseline has none")
    if a.max_policy_lag < 0:
        p.error(f"--max-policy-lag must be >= 0, not {a.max_policy_lag}")
    if a.max_policy_lag and a.baseline:
        p.error("--max-policy-lag bounds what a restore keeps: the baseline has no restore")
    replica_options = parse_replica_options(p, a)
    o = Options(out=a.out, seed=a.seed, epochs=a.epochs, kills=a.kills, workers=a.workers,
                failure_rate=a.failure_rate, dataset_size=a.dataset_size, batch_size=a.batch_size,
                ckpt_every=a.ckpt_every, progress_every=a.progress_every, max_policy_lag=a.max_policy_lag,
                baseline=a.baseline,
                group_level=a.group_level, rollouts=a.rollouts,
                ray=a.ray, kill_kinds=a.kill_kinds, replica=a.replica, replica_options=replica_options,
                timeout=a.timeout, verbose=not (a.quiet or a.json))
    return o, a.json


@contextlib.contextmanager
def _stdout_to_stderr(enabled: bool):
    """While enabled, file descriptor 1 is stderr's, for this process and every process it
    starts (the trainer, Ray's raylets and workers, which print to stdout from C++ and from
    threads): stdout then carries only what is printed after, the JSON document."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv=None) -> int:
    o, as_json = parse_args(argv)
    o.out = o.out or new_run_dir(o.baseline)
    try:
        with _stdout_to_stderr(as_json):
            s = run(o)
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # the trainer child was killed and reaped on the way out
        print(f"journal-demo: interrupted; the trainer was stopped, its files are in {o.out}",
              file=sys.stderr)
        return 130
    if as_json:
        print(json.dumps(s, indent=2, default=str))
    else:
        print(render(s))
    if o.baseline:
        return 0
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
