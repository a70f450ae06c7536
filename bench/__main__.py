"""`python -m bench <name> [--quick] [--json] [--dir DIR]`: run one registered benchmark.

To add a benchmark, write `bench/<name>.py` with `run(args) -> Report` (and
optionally `add_arguments(parser)`), then add one entry to `REGISTRY`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line summary shown by --help)
REGISTRY: dict[str, tuple[str, str]] = {
    "append": ("bench.append", "commit throughput vs raw fdatasync and sqlite, group commit, "
                               "bulk append, bytes per event"),
    "dataplane": ("bench.dataplane", "the session's lifecycle with 32 KiB rollout payloads in the packed "
                                     "data plane vs without payloads (and one file per row); bytes on "
                                     "disk per rollout"),
    "demo": ("bench.demo", "journal-demo's kills, rollout-level vs group-level: rollouts regenerated "
                           "after restores, generation-seconds lost per kill"),
    "inspect": ("bench.inspect", "journal-inspect summary and verify on 10M events: wall time and "
                                 "peak RSS vs the 300 MB target"),
    "recovery": ("bench.recovery", "generation-seconds lost per crash, prompts lost and trained twice: "
                                   "loader position only, NeMo-RL's ledger, Megatron-LM's rollout bank, "
                                   "verl RFC #7579's durable buffer, per-rollout seals and seals + progress "
                                   "at max_policy_lag 0..6; calibrated against verl RFC #7579"),
    "peers": ("bench.peers", "the same group lifecycle on this library's Session and on straw-queue 0.1.6 "
                             "(slime's queue), sqlite3 beside: groups/s with and without payloads, syncs "
                             "and bytes per group, reopen time and RSS after 1x/10x/100x history"),
    "ray": ("bench.ray", "the trainer's Ray mode: rollouts/s journal on vs off; per kill kind (actor, node, "
                         "controller) rollouts regenerated and generation-seconds lost, rollout-level vs "
                         "group-level vs the baseline"),
    "replay": ("bench.replay", "tail replay throughput vs a decode-only loop; restore of a cut of "
                               "100k live groups + a 1M-event tail: time and peak RSS"),
    "replica": ("bench.replica", "the replica on a local S3 server: lag p50/p99 at 1,000 commits/s, "
                                 "throughput with the shipper, requests idle and per 1M commits, "
                                 "restore from the bucket vs local"),
    "restart": ("bench.restart", "restore + Journal.open(resume=) in a fresh process after 1x/10x/100x "
                                 "history, in one segment and in rotated ones; 1M groups x 8 rollouts <= 1 s"),
    "snapshot": ("bench.snapshot", "cut time and size at 1k/10k/100k live groups vs the ledger's "
                                   "torch.save, history independence, memory per group"),
}


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks for ownership-journal. Every figure is printed beside a reference "
                    "measured in the same run, as a ratio, with its target and PASS/MISS.",
        epilog="Run `python -m bench <name> --help` for a benchmark's own options.")
    sub = parser.add_subparsers(dest="name", metavar="<name>", required=True,
                                title="benchmarks")
    for name, (module, summary) in REGISTRY.items():
        p = sub.add_parser(name, help=summary, description=summary)
        p.add_argument("--quick", action="store_true", help="short run (well under a minute)")
        p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
        p.add_argument("--dir", default=None,
                       help="parent directory for scratch files (default: the system temp dir); "
                            "put it on the file system you want measured")
        p.add_argument("--fail-on-miss", action="store_true", help="exit 1 if a target is missed")
        if name == selected:  # import only the benchmark being run
            hook = getattr(importlib.import_module(module), "add_arguments", None)
            if hook is not None:
                hook(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    selected = next((a for a in argv if a in REGISTRY), None)
    args = build_parser(selected).parse_args(argv)
    report = importlib.import_module(REGISTRY[args.name][0]).run(args)
    print(report.to_json() if args.json else report.to_markdown())
    return 1 if args.fail_on_miss and not report.all_passed else 0


if __name__ == "__main__":
    sys.exit(main())
