"""`python -m bench snapshot`: how fast and how big a cut is, against what the reference ledger does.

Workload: a journal whose live set has N groups (1k, 10k, 100k): 30% RESERVED,
30% ADMITTED, 30% REPLAY (with a data-plane locator), 10% SPARE, each with an
idx, a task name, an epoch and a 16-byte fingerprint, plus as many groups
already trained (terminal), and a loader state. Figures, each beside a
reference measured in the same run, in interleaved rounds (medians):

1. cut time at N: `compact(path, "end", journal=j, retention=None)` on the
   live journal, from the copy of the in-memory state to the fsynced cut
   (four .pt files + manifest, temporary directory, renames, directory
   fsyncs). The previous cut is removed between rounds, outside the timing.
   Reported as cuts/s. A live writer's first cut also folds the row ledger
   (`audit_rows.pt`) from LSN 1, later ones only the commits since: the first cut
   of each journal is timed before the rounds and reported on its own row, the
   rounds time the cuts after it. Reference, the **peer**: what the reference ledger
   (NeMo-RL `rollout_recovery.py`) does at checkpoint time for the same
   groups: `torch.save` of a list of per-group dicts (the same ten fields)
   into a file plus the sha256 of those bytes (no fsync: the peer is given
   the benefit). Target at 100k groups: >= 5x the peer.
2. cut size at N (all files of the cut) vs the peer's file; bytes per group.
   The same two for 100,000 live groups admitted with rollouts=8 (half
   ADMITTED with 0-7 rollouts sealed, half REPLAY with all 8 sealed, one
   rollout in 32 at attempt 1), against the peer's NeMo-RL v3-style ledger:
   per group a dict of its fields and a list of 8 sibling dicts (index,
   attempt, state, receipt, policy version), `torch.save` + sha256. Targets:
   >= 5x the peer, and a smaller cut than the peer's file.
3. history independence: the same live set after 1x and after 10x as much
   history (groups taken, admitted, finished, trained before the live set was
   taken). (a) the cut from the live journal at "end" (`journal=j`; its first
   cut, which folds the row ledger from LSN 1, on its own row) and (b)
   the cut from disk at "latest-checkpoint" (no live journal: newest usable
   cut, read and verified, plus the tail folded, then written), with a recent
   cut taken at the previous checkpoint and retention having archived the
   older history (1 MiB segments here; see DISK_SEGMENT_BYTES). Reported as
   cuts/s after 10x over cuts/s after 1x: target >= 0.83 (cut time ratio <= 1.2).
   On the same from-disk pair, `Journal.open(path)` without resume= (newest cut's state
   file plus the tail) and `replay.restore(path)`: opens/s and restores/s after 10x over
   after 1x, the same target.
   Prefixes: the same live set of rollouts (10k groups with --quick, 100k full) with a prefix
   (`rollout_progress`: locator, tokens, policy version) on every unsealed rollout of the
   ADMITTED half, against the same set without: cut CPU time (the least of the rounds; the
   wall time beside it) and cut size, target <= 1.2x each (a prefix costs per prefix, not
   per rollout: docs/format.md).
4. the state file's share (100k groups, and x 8 rollouts): `state_file.encode` of
   the state from the columns of the cut's three group tables (built outside the
   timing, as the cut builds them for the tables), beside the cut's time, and its size.
5. peak memory per live group while cutting (tracemalloc peak during the
   cut, run separately from the timing), beside the peer's peak for the same
   groups; and how long appends wait while a cut copies the state
   (`Journal.state_copy`), informational.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import os
import shutil
import statistics
import time
import tracemalloc

import torch

from journal import GroupRef, Journal, Owner, RolloutRef, state_file
from replay import restore
from snapshot import compact, read_cut

from .common import Figure, Report, Rounds, Target, log, scratch_dir

SIZES = (1_000, 10_000, 100_000)
ROLLOUT_GROUPS = 100_000
PREFIX_GROUPS = {True: 10_000, False: 100_000}  # the prefixes figures' live groups, by --quick
PREFIX_TARGET = 1.2  # a cut with prefixes at most this many times one without (time and size)
ROLLOUTS = 8
BATCH = 1_000
PEER_TARGET = 5.0
TABLE_OWNERS = ((Owner.RESERVED, Owner.ADMITTED), (Owner.REPLAY,), (Owner.SPARE,))  # a cut's tables
HISTORY_TARGET = 1 / 1.2
# The from-disk case spreads its history over 1 MiB segments, as a long run spreads it over
# 64 MiB ones: the cost of a from-disk cut follows the size of the segment holding the newest
# cut (read from its start to find that LSN), and retention retires the ones before it.
DISK_SEGMENT_BYTES = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds, medians reported (default 2 quick, 5 full)")
    parser.add_argument("--history-live", type=int, default=None,
                        help="live groups for the history-independence figures "
                             "(default 10k quick, 100k full)")


# -- building journals ---------------------------------------------------------------------------

def _refs(first_idx: int, n: int) -> list[GroupRef]:
    return [GroupRef(idx=first_idx + i, task_name=("math", "code")[i % 2], epoch=0,
                     fingerprint=hashlib.blake2b((first_idx + i).to_bytes(8, "little"),
                                                 digest_size=16).digest())
            for i in range(n)]


def _loader_state(pos: int) -> dict:
    return {"_num_yielded": pos, "_sampler_iter_state": {"samples_yielded": pos,
            "generator": torch.arange(5056, dtype=torch.int64).to(torch.uint8)}}


def churn(j: Journal, groups: int, first_idx: int) -> int:
    """Run `groups` groups through taken -> admitted -> finished -> trained (the history)."""
    idx = first_idx
    for start in range(0, groups, BATCH):
        n = min(BATCH, groups - start)
        gids = j.taken(_refs(idx, n), loader_state=_loader_state(idx + n))
        idx += n
        j.admitted(gids, target_step=idx, policy_version=idx)
        j.finished(gids, policy_version=idx, locators=[f"tq/{g}" for g in gids])
        j.trained(gids, step=idx)
    return idx


def live_set(j: Journal, groups: int, first_idx: int) -> int:
    """Take `groups` groups and leave them live: 30% RESERVED, 30% ADMITTED, 30% REPLAY, 10% SPARE."""
    idx = first_idx
    for start in range(0, groups, BATCH):
        n = min(BATCH, groups - start)
        gids = j.taken(_refs(idx, n), loader_state=_loader_state(idx + n))
        idx += n
        a, b, c = (3 * n) // 10, (6 * n) // 10, (9 * n) // 10
        j.admitted(gids[a:c], target_step=7, policy_version=6)
        j.finished(gids[b:c], policy_version=6, locators=[f"tq/{g}" for g in gids[b:c]])
        j.diverted(gids[c:])
    return idx


def rollout_live_set(j: Journal, groups: int, first_idx: int) -> int:
    """Take `groups` groups, admit them with rollouts=ROLLOUTS and leave them live: half ADMITTED
    with 0..7 of their rollouts sealed, half REPLAY (all sealed, then finished). The last
    rollout of every 4th group failed once first, so it is at attempt 1."""
    idx = first_idx
    for start in range(0, groups, BATCH):
        n = min(BATCH, groups - start)
        gids = j.taken(_refs(idx, n), loader_state=_loader_state(idx + n))
        idx += n
        j.admitted(gids, target_step=7, policy_version=6, rollouts=ROLLOUTS)
        last = ROLLOUTS - 1
        failed = set(gids[::4])
        j.rollout_failed([RolloutRef(g, last, 0) for g in failed], reason="worker lost")
        half = n // 2
        sealed = [RolloutRef(g, i, int(g in failed and i == last), f"tq/{g}/{i}")
                  for p, g in enumerate(gids) for i in range(p % ROLLOUTS if p < half else ROLLOUTS)]
        j.rollout_sealed(sealed, policy_version=6)
        j.finished(gids[half:], policy_version=6)
    return idx


def with_prefixes(j: Journal) -> int:
    """Record a prefix of every unsealed rollout of the ADMITTED groups (as a trainer that writes
    progress every K tokens holds them), a transaction per BATCH; how many."""
    refs = [RolloutRef(g.group_id, i, g.rollouts.attempts[i], f"g{g.group_id}-r{i}-a{g.rollouts.attempts[i]}-p3.rows")
            for g in j.groups(Owner.ADMITTED) for i in g.rollouts.unsealed()]
    for start in range(0, len(refs), BATCH):
        with j.transaction() as tx:
            for k, ref in enumerate(refs[start:start + BATCH]):
                tx.rollout_progress(ref, tokens=1024 + (start + k) % 7919, policy_version=6)
    return len(refs)


def build(path: str, live: int, history: int, segment_bytes: int = 64 << 20,
          rollouts: bool = False, prefixes: bool = False) -> Journal:
    """An open journal (sync="none" while building) with `history` groups trained, then `live`
    groups live (`rollout_live_set` with `rollouts`, else `live_set`; `with_prefixes` too with
    `prefixes`), then a committed checkpoint."""
    j = Journal.open(path, sync="none", segment_bytes=segment_bytes)
    idx = churn(j, history, 0)
    if rollouts:
        rollout_live_set(j, live, idx)
        if prefixes:
            with_prefixes(j)
    else:
        live_set(j, live, idx)
    j.begin_checkpoint(step=1)
    j.commit_checkpoint(step=1)
    j.flush()
    return j


# -- measurements --------------------------------------------------------------------------------

def cut_size(cut: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cut) for f in fs)


def time_cut_live(j: Journal) -> tuple[float, str]:
    gc.collect()
    t = time.perf_counter()
    result = compact(j.path, "end", journal=j, retention=None)
    elapsed = time.perf_counter() - t
    return elapsed, result.cut_path


def time_state_file(j: Journal) -> tuple[float, int]:
    """(seconds, bytes) of the state file of `j`'s state as a cut encodes it: from the columns
    of its group tables, built outside the timing (the cut builds them for the tables)."""
    state = j.state_copy()
    groups = state.groups()
    columns = [state_file.group_columns([g for g in groups if g.owner in owners])
               for owners in TABLE_OWNERS]
    gc.collect()
    t = time.perf_counter()
    data = state_file.encode(state, j.run_id, columns)
    return time.perf_counter() - t, len(data)


def peer_groups(j: Journal) -> list[dict]:
    """The peer's in-memory ledger: one dict per live group, the same ten fields."""
    out = []
    for g in j.groups():
        d = g.as_dict()
        d["owner"] = int(d["owner"])
        out.append(d)
    return out


def peer_rollout_groups(j: Journal) -> list[dict]:
    """The peer's ledger of groups with rollouts, NeMo-RL v3-style: per group a dict of its
    fields and a list of its sibling dicts (index, attempt, state, receipt, policy version)."""
    out = []
    for g in j.groups():
        d = g.as_dict()
        d["owner"] = int(d["owner"])
        r = d.pop("rollouts")
        d["siblings"] = [{"index": i, "attempt": r.attempts[i],
                          "state": "sealed" if r.is_sealed(i) else "dispatched",
                          "receipt": r.locators[i], "policy_version": r.versions[i]}
                         for i in range(r.n)]
        out.append(d)
    return out


def time_peer(records: list[dict], directory: str) -> tuple[float, int]:
    path = os.path.join(directory, "rollout_recovery_peer.pt")
    gc.collect()
    t = time.perf_counter()
    buf = io.BytesIO()
    torch.save(records, buf)
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    hashlib.sha256(data).hexdigest()
    elapsed = time.perf_counter() - t
    os.unlink(path)
    return elapsed, len(data)


def traced_peak(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def time_cut_disk(path: str) -> float:
    """compact at the latest checkpoint from disk (no live journal); the output cut is removed
    afterwards, so every round writes it."""
    gc.collect()
    t = time.perf_counter()
    result = compact(path, "latest-checkpoint", retention=None)
    elapsed = time.perf_counter() - t
    shutil.rmtree(result.cut_path)
    return elapsed


def time_open(path: str) -> float:
    """Journal.open without resume= and close (the state comes from the newest cut's state file
    and the tail after it)."""
    gc.collect()
    t = time.perf_counter()
    Journal.open(path, sync="none").close()
    return time.perf_counter() - t


def time_restore(path: str) -> float:
    """replay.restore at the latest checkpoint (newest usable cut plus the tail)."""
    gc.collect()
    t = time.perf_counter()
    restore(path)
    return time.perf_counter() - t


def prepare_disk_case(j: Journal) -> None:
    """A recent cut at the checkpoint (retention archives the history it covers), then a short
    tail and a newer committed checkpoint: what a compaction at "latest-checkpoint" finds."""
    compact(j.path, journal=j, keep_cuts=1, retention="archive")
    idx = 10 ** 9
    for _ in range(5):
        idx = churn(j, 200, idx)
    j.begin_checkpoint(step=2)
    j.commit_checkpoint(step=2)
    j.flush()


# -- the benchmark --------------------------------------------------------------------------------

def measure_prefixes(root: str, groups: int, rounds: int) -> dict[str, list[float]]:
    """Cut CPU time and wall time (s) and size (bytes) of `groups` live groups x ROLLOUTS
    rollouts without and with prefixes (`with_prefixes`), in alternating rounds, each journal's
    first cut (which folds its row ledger from LSN 1) taken before them; and how many prefixes.
    CPU time: this process's (`time.process_time`), which the load of other jobs on a shared
    machine moves much less than the wall time."""
    plain = build(os.path.join(root, f"prefixes-without-{groups}"), groups, groups, rollouts=True)
    held = build(os.path.join(root, f"prefixes-with-{groups}"), groups, groups, rollouts=True, prefixes=True)
    out: dict[str, list[float]] = {f"{m}_{key}": [] for m in ("cpu", "wall", "size") for key in ("with", "without")}
    try:
        for j in (plain, held):
            shutil.rmtree(time_cut_live(j)[1])
        for i in range(rounds):
            for key, j in (("without", plain), ("with", held)) if i % 2 == 0 else (("with", held), ("without", plain)):
                cpu = time.process_time()
                wall, cut = time_cut_live(j)
                out[f"cpu_{key}"].append(time.process_time() - cpu)
                out[f"wall_{key}"].append(wall)
                out[f"size_{key}"].append(cut_size(cut))
                if i == 0 and key == "with":
                    state = read_cut(cut).state
                    n = sum(p is not None for g in state.groups() for p in g.rollouts.progress or ())
                    assert n == sum(len(g.rollouts.unsealed()) for g in held.groups(Owner.ADMITTED)) > 0
                    out["prefixes"] = [n]
                shutil.rmtree(cut)
    finally:
        plain.close()
        held.close()
    return out


def add_prefix_figures(report: Report, m: dict[str, list[float]], groups: int) -> None:
    """The two prefixes figures (module docstring, 2): the cut's CPU time in the round whose
    ratio to the cut without prefixes is the median of the rounds' (both cut in the same round,
    one after the other), and the cut's size, each against the same live set without prefixes."""
    label = f"{groups:,} live groups x {ROLLOUTS} rollouts, {m['prefixes'][0]:,} prefixes"
    ratios = [w / wo for w, wo in zip(m["cpu_with"], m["cpu_without"])]
    i = ratios.index(statistics.median_low(ratios))
    wall = [w / wo for w, wo in zip(m["wall_with"], m["wall_without"])]
    report.add(Figure(
        "cut_prefixes", f"cut CPU time with prefixes, {label}", m["cpu_with"][i] * 1e3, "ms",
        reference=m["cpu_without"][i] * 1e3, reference_label="the same live set without prefixes",
        target=Target(max_ratio=PREFIX_TARGET), samples=[x * 1e3 for x in m["cpu_with"]],
        reference_samples=[x * 1e3 for x in m["cpu_without"]],
        note=f"process CPU, the median round of {len(ratios)} (per-round ratios {min(ratios):.2f}-"
             f"{max(ratios):.2f}x; wall time {statistics.median(wall):.2f}x, per round "
             f"{min(wall):.2f}-{max(wall):.2f}x); a prefix on every unsealed rollout of the ADMITTED half"))
    report.add(Figure(
        "size_prefixes", f"cut size with prefixes, {label}", m["size_with"][-1], "bytes",
        reference=m["size_without"][-1], reference_label="the same live set without prefixes",
        target=Target(max_ratio=PREFIX_TARGET),
        note=f"{(m['size_with'][-1] - m['size_without'][-1]) / m['prefixes'][0]:.0f} B per prefix"))


def run(args) -> Report:
    quick = args.quick
    rounds = args.rounds or (2 if quick else 5)
    hist_live = args.history_live or (10_000 if quick else 100_000)
    parent = os.path.abspath(args.dir) if args.dir else None
    report = Report("snapshot", quick=quick, directory=parent)
    if parent:
        os.makedirs(parent, exist_ok=True)
    report.meta.update(rounds=rounds, sizes=list(SIZES), history_live=hist_live,
                       torch=torch.__version__, torch_threads=torch.get_num_threads())
    with scratch_dir(parent, "bench-snapshot-") as root:
        journals: dict[int, Journal] = {}
        peers: dict[int, list[dict]] = {}
        for n in SIZES:
            log(f"building a journal with {n:,} live groups (and {n:,} trained)")
            journals[n] = build(os.path.join(root, f"live-{n}"), n, n)
            peers[n] = peer_groups(journals[n])
        log(f"building a journal with {ROLLOUT_GROUPS:,} live groups x {ROLLOUTS} rollouts "
            f"(and {ROLLOUT_GROUPS:,} trained)")
        rj = build(os.path.join(root, "rollouts"), ROLLOUT_GROUPS, ROLLOUT_GROUPS, rollouts=True)
        rpeer = peer_rollout_groups(rj)
        log(f"building the history-independence pair: {hist_live:,} live groups after "
            f"{hist_live:,} and after {10 * hist_live:,} groups of history")
        hist = {k: build(os.path.join(root, f"hist-{k}x"), hist_live, k * hist_live) for k in (1, 10)}
        disk = {}
        for k, j in hist.items():
            disk[k] = os.path.join(root, f"disk-{k}x")
            dj = build(disk[k], hist_live, k * hist_live, segment_bytes=DISK_SEGMENT_BYTES)
            prepare_disk_case(dj)
            dj.close()
        log("first cut of each live journal (its row ledger folded from LSN 1)")
        first = {}
        for key, j in [*journals.items(), ("rollouts", rj), *((f"hist{k}", j) for k, j in hist.items())]:
            first[key], cut = time_cut_live(j)
            shutil.rmtree(cut)
        r = Rounds()
        sizes, peer_sizes, copy_ms, sf_sizes = {}, {}, {}, {}
        for i in range(rounds):
            log(f"round {i + 1}/{rounds}")
            for n in SIZES:
                j = journals[n]
                elapsed, cut = time_cut_live(j)
                r.add(f"cut{n}", 1 / elapsed)
                sizes[n] = cut_size(cut)
                if i == 0:
                    assert sum(read_cut(cut).manifest.counts[o.name]
                               for o in (Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE)) == n
                shutil.rmtree(cut)
                elapsed, peer_sizes[n] = time_peer(peers[n], root)
                r.add(f"peer{n}", 1 / elapsed)
                t = time.perf_counter()
                j.state_copy()
                copy_ms.setdefault(n, []).append((time.perf_counter() - t) * 1e3)
            elapsed, sf_sizes[SIZES[-1]] = time_state_file(journals[SIZES[-1]])
            r.add(f"sf{SIZES[-1]}", elapsed * 1e3)
            elapsed, sf_sizes["rollouts"] = time_state_file(rj)
            r.add("sf_rollouts", elapsed * 1e3)
            elapsed, cut = time_cut_live(rj)
            r.add("cut_rollouts", 1 / elapsed)
            sizes["rollouts"] = cut_size(cut)
            if i == 0:
                got = read_cut(cut).state.groups()
                assert len(got) == ROLLOUT_GROUPS and all(g.rollouts.n == ROLLOUTS for g in got)
            shutil.rmtree(cut)
            elapsed, peer_sizes["rollouts"] = time_peer(rpeer, root)
            r.add("peer_rollouts", 1 / elapsed)
            for k in (1, 10):
                elapsed, cut = time_cut_live(hist[k])
                shutil.rmtree(cut)
                r.add(f"hist_live{k}", 1 / elapsed)
                r.add(f"hist_disk{k}", 1 / time_cut_disk(disk[k]))
                r.add(f"hist_open{k}", 1 / time_open(disk[k]))
                r.add(f"hist_restore{k}", 1 / time_restore(disk[k]))
            log("  " + "  ".join(f"{n:,}: cut {1e3 / r.samples[f'cut{n}'][-1]:.1f} ms, peer "
                                 f"{1e3 / r.samples[f'peer{n}'][-1]:.1f} ms" for n in SIZES)
                + f"  {ROLLOUT_GROUPS:,} x {ROLLOUTS} rollouts: cut "
                  f"{1e3 / r.samples['cut_rollouts'][-1]:.1f} ms, peer "
                  f"{1e3 / r.samples['peer_rollouts'][-1]:.1f} ms")
        for n in SIZES:
            target = Target(min_ratio=PEER_TARGET) if n == SIZES[-1] else None
            f = report.add(r.figure(
                f"cut_{n}", f"cut of {n:,} live groups (live journal, fsynced)", "cuts/s",
                value=f"cut{n}", reference=f"peer{n}",
                reference_label="peer: torch.save(list of dicts) + sha256", target=target))
            f.note = (f"cut {1e3 / f.value:.1f} ms vs peer {1e3 / f.reference:.1f} ms "
                      f"({f.ratio:.1f}x faster)")
        for key, suffix, label in (
                (SIZES[-1], str(SIZES[-1]), f"{SIZES[-1]:,} live groups"),
                ("rollouts", "_rollouts", f"{ROLLOUT_GROUPS:,} live groups x {ROLLOUTS} rollouts")):
            f = report.add(Figure(
                f"first_cut_{key}", f"first cut of a live writer, {label} (row ledger folded from LSN 1)",
                1 / first[key], "cuts/s", reference=r.median(f"peer{suffix}"),
                reference_label="peer, median of the rounds"))
            f.note = f"cut {1e3 * first[key]:.1f} ms, once; the rounds time the cuts after it"
            cut_ms = 1e3 / r.median(f"cut{suffix}")
            f = report.add(r.figure(f"state_file_{key}", f"state file encode, {label}", "ms",
                                    value=f"sf{suffix}"))
            f.reference, f.reference_label = cut_ms, "the whole cut (median of the rounds)"
            groups = ROLLOUT_GROUPS if key == "rollouts" else key
            f.note = (f"{f.value / cut_ms:.0%} of the cut's time; {sf_sizes[key] / 1e6:.2f} MB "
                      f"({sf_sizes[key] / groups:.0f} B/group)")
        for n in SIZES:
            report.add(Figure(f"size_{n}", f"cut size, {n:,} live groups", sizes[n], "bytes",
                              reference=peer_sizes[n], reference_label="peer file",
                              note=f"{sizes[n] / n:.0f} B/group vs peer {peer_sizes[n] / n:.0f} B/group"))
        f = report.add(r.figure(
            "cut_rollouts", f"cut of {ROLLOUT_GROUPS:,} live groups x {ROLLOUTS} rollouts "
            "(live journal, fsynced)", "cuts/s", value="cut_rollouts", reference="peer_rollouts",
            reference_label="peer: torch.save(NeMo-RL v3-style group dicts with sibling lists) + sha256",
            target=Target(min_ratio=PEER_TARGET)))
        f.note = (f"cut {1e3 / f.value:.1f} ms vs peer {1e3 / f.reference:.1f} ms "
                  f"({f.ratio:.1f}x faster)")
        report.add(Figure(
            "size_rollouts", f"cut size, {ROLLOUT_GROUPS:,} live groups x {ROLLOUTS} rollouts",
            sizes["rollouts"], "bytes", reference=peer_sizes["rollouts"],
            reference_label="peer file", target=Target(max_value=peer_sizes["rollouts"]),
            note=f"{sizes['rollouts'] / ROLLOUT_GROUPS:.0f} B/group vs peer "
                 f"{peer_sizes['rollouts'] / ROLLOUT_GROUPS:.0f} B/group; target: smaller than the peer"))
        f = report.add(Figure(
            "hist_first_cut", f"history independence: first cut of a live writer at 'end' (row ledger "
            f"folded from LSN 1), {hist_live:,} live after 10x history", 1 / first["hist10"], "cuts/s",
            reference=1 / first["hist1"], reference_label="same live set after 1x history",
            target=Target(min_ratio=HISTORY_TARGET)))
        f.note = (f"{1e3 * first['hist10']:.1f} ms after 10x vs {1e3 * first['hist1']:.1f} ms after 1x "
                  f"(once each): time ratio {first['hist10'] / first['hist1']:.2f} (target <= 1.2)")
        for k_name, label, unit in (
                ("hist_live", "history independence: cut from the live journal at 'end'", "cuts/s"),
                ("hist_disk", "history independence: cut from disk at 'latest-checkpoint', recent cut",
                 "cuts/s"),
                ("hist_open", "Journal.open after 10x history (from disk, recent cut)", "opens/s"),
                ("hist_restore", "restore after 10x history (from disk, recent cut)", "restores/s")):
            f = report.add(r.figure(
                f"{k_name}", f"{label}, {hist_live:,} live after 10x history", unit,
                value=f"{k_name}10", reference=f"{k_name}1",
                reference_label="same live set after 1x history",
                target=Target(min_ratio=HISTORY_TARGET)))
            f.note = (f"{1e3 / f.value:.1f} ms after 10x vs {1e3 / f.reference:.1f} ms after 1x: "
                      f"time ratio {f.reference / f.value:.2f} (target <= 1.2)")

        groups = PREFIX_GROUPS[quick]
        log(f"prefixes: {groups:,} live groups x {ROLLOUTS} rollouts without and with prefixes")
        add_prefix_figures(report, measure_prefixes(root, groups, rounds), groups)

        log("peak memory (tracemalloc, separate runs)")
        for n in SIZES:
            j = journals[n]
            holder = {}
            ours = traced_peak(lambda: holder.setdefault("r", compact(j.path, "end", journal=j,
                                                                        retention=None)))
            shutil.rmtree(holder["r"].cut_path)
            theirs = traced_peak(lambda: time_peer(peers[n], root))
            report.add(Figure(f"mem_{n}", f"peak memory while cutting, per live group ({n:,})",
                              ours / n, "B/group", reference=theirs / n,
                              reference_label="peer while saving (its dicts not counted)",
                              note="Python-heap peak (tracemalloc) above what was allocated before"))
        copy = sorted(copy_ms[SIZES[-1]])[len(copy_ms[SIZES[-1]]) // 2]
        report.add(Figure("append_wait", f"appends wait while a cut copies {SIZES[-1]:,} live groups",
                          copy, "ms", note="Journal.state_copy under the journal's lock; the "
                                           "encoding and file I/O run after it"))
        for j in list(journals.values()) + list(hist.values()) + [rj]:
            j.close()
    report.note(f"from-disk history case: {DISK_SEGMENT_BYTES >> 20} MiB segments; a history "
                "shorter than one segment is re-read from the segment start by every from-disk "
                "compaction (anchor check, marker scan, tail fold)")
    report.note("the peer does no fsync; the cut fsyncs each file, its directory and the parent")
    report.note(f"torch intra-op threads: {torch.get_num_threads()}; on a loaded machine "
                "every figure moves, the ratios much less (both sides run in the same rounds)")
    return report
