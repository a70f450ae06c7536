"""The tables `python -m bench recovery` prints after its figures (their data: the report's meta).

* `decomposition_table`: one shape, where each policy's loss per crash goes (in flight, taken
  after the checkpoint, (a) newer weights' work, (b) in flight on the checkpoint's weights, (c)
  the rest), retraining, prompts lost and twice; ours at k = 0, at the shape's own lag and at
  its checkpoint interval.
* `by_lag_table`: both shapes, loss per crash of every policy, ours against k, each beside how
  many times less it is than the best peer.
* `crossover_table`: both shapes, from which k ours beats each peer (`from_lag`).

The readings of a peer's rule that keep more than the rule says (`READINGS`) are rows beside the
peers' in each.
"""

from __future__ import annotations

from .common import fmt_num
from .recovery_policies import OURS, PEERS, READINGS, label, ours


def _count(n: int | None) -> str:
    return "n/a" if n is None else str(n)


def _times_less(reference: float, value: float) -> str:
    return "inf" if value == 0 else f"{reference / value:.1f}x"


def from_lag(summaries: dict, mode: str, peer: str, lags: list[int]) -> int | None:
    """The smallest bound k from which on (every bound priced at or above it) our `mode` loses
    less per crash than `peer`; None when it does not at the largest."""
    beaten = None
    for k in sorted(lags, reverse=True):
        if summaries[ours(mode, k)]["lost_per_crash"] >= summaries[peer]["lost_per_crash"]:
            break
        beaten = k
    return beaten


def decomposition_table(shape, summaries: dict, described: dict) -> str:
    lags = sorted({0, described["staleness"], shape.save_period})
    names = [*PEERS, *READINGS, *(ours(mode, k) for k in lags for mode in OURS)]
    rows = [f"**{shape.label}** (a checkpoint every {shape.save_period} steps; generation-seconds per crash, "
            "mean over the crashes; k: the restore's max_policy_lag):", "",
            "| policy | lost per crash | p10-p90 | of it in flight | of it taken after the checkpoint "
            "| (a) by newer weights | (b) in flight, checkpoint's weights | (c) other "
            "| retraining after the checkpoint | prompts lost | prompts twice |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in names:
        s = summaries[name]
        rows.append(f"| {label(name)} | {fmt_num(s['lost_per_crash'])} | {fmt_num(s['lost_p10'])}-"
                    f"{fmt_num(s['lost_p90'])} | {fmt_num(s['lost_in_flight'])} | "
                    f"{fmt_num(s['lost_taken_after_checkpoint'])} | {fmt_num(s['lost_newer_weights'])} | "
                    f"{fmt_num(s['lost_in_flight_checkpoint_weights'])} | {fmt_num(s['lost_other'])} | "
                    f"{fmt_num(s['lost_retrained_per_crash'])} "
                    f"| {_count(s['prompts_lost'])} | {_count(s['prompts_twice'])} |")
    return "\n".join(rows)


def by_lag_table(by_shape: dict) -> str:
    """`by_shape`: shape -> (summaries, described)."""
    shapes = list(by_shape)
    lags = sorted(set().union(*(d["lags"] for _, d in by_shape.values())))
    head = " | ".join(f"{s.label}: lost per crash | x less than the best peer" for s in shapes)
    rows = ["**Loss per crash against k** (generation-seconds, mean over the crashes; ours restored with "
            "max_policy_lag = k; the best peer of each shape is the peer that loses least, a reading of a "
            "peer's rule that keeps more than it says never is):", "",
            f"| policy | {head} |", "| --- |" + " ---: | ---: |" * len(shapes)]

    def row(text: str, name: str) -> str:
        cells = []
        for summaries, _ in by_shape.values():
            best = min(summaries[p]["lost_per_crash"] for p in PEERS)
            if name not in summaries:
                cells += ["-", "-"]
                continue
            lost = summaries[name]["lost_per_crash"]
            cells += [fmt_num(lost), _times_less(best, lost)]
        return f"| {text} | " + " | ".join(cells) + " |"

    rows += [row(label(name), name) for name in (*PEERS, *READINGS)]
    rows += [row(f"{OURS[mode][0]}, k = {k}", ours(mode, k)) for mode in OURS for k in lags]
    return "\n".join(rows)


def crossover_table(by_shape: dict) -> str:
    """From which k ours beats each peer, per shape; and by how much at the shape's own lag."""
    shapes = list(by_shape)
    head = " | ".join(f"{s.label}: its loss | seals beat it from k | with progress from k | with progress "
                      f"at the trainer's lag" for s in shapes)
    rows = ["**From which k ours beats each peer** (ours loses less per crash at that k and every k above "
            "it; -: not at any k priced):", "", f"| peer | {head} |", "| --- |" + " ---: | ---: | ---: | ---: |" * len(shapes)]
    for peer in (*PEERS, *READINGS):
        cells = []
        for summaries, described in by_shape.values():
            lost = summaries[peer]["lost_per_crash"]
            stale = summaries[ours("progress", described["staleness"])]["lost_per_crash"]
            cells += [fmt_num(lost), *(_k(from_lag(summaries, mode, peer, described["lags"])) for mode in OURS),
                      f"{_times_less(lost, stale)} less (k = {described['staleness']})"]
        rows.append(f"| {label(peer)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _k(k: int | None) -> str:
    return "-" if k is None else str(k)
