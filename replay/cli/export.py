"""`export`: the events of a history as JSON lines in a file, optionally zstandard-compressed.

One line per event, the objects of `log --json` (see `event_rows`). The file is
written as `<out>.tmp-<pid>` beside its final name and renamed into place only
when complete, so a reader never sees half an export. The journal itself is
never written: an output path inside the journal directory is refused.
"""

from __future__ import annotations

import os
import sys

import zstandard

from ..inspection import history_bytes
from . import options, render
from .event_rows import event_dict
from .source import InspectError, Source, open_source

HELP = "events as JSON lines to a file (.jsonl or zstandard .jsonl.zst)"
DESCRIPTION = (
    "Write the events of the active history (or of --timeline's) as JSON lines, one event "
    "per line (the same objects as `log --json`); a name ending in .zst is compressed with "
    "zstandard. The file is written beside its final name and renamed when complete.")
EPILOG = ("examples:\n  journal-inspect export runs/exp1/journal --out events.jsonl\n"
          "  journal-inspect export runs/exp1/journal --out events.jsonl.zst --from 1000\n"
          "  zstdcat events.jsonl.zst | jq -c 'select(.kind==\"discarded\")'")

ZSTD_LEVEL = 3
_CHUNK = 1 << 20


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="FILE.jsonl, or FILE.jsonl.zst for zstandard (not inside the journal)")
    options.add_lsn_range(parser)
    options.add_timeline(parser)
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")


def _target(src: Source, out_path: str, force: bool) -> str:
    full = os.path.abspath(out_path)
    if os.path.commonpath([full, src.path]) == src.path:
        raise InspectError(f"--out {out_path} is inside the journal directory; journal-inspect never "
                           "writes there (choose another place)")
    if os.path.isdir(full):
        raise InspectError(f"--out {out_path} is a directory")
    if os.path.exists(full) and not force:
        raise InspectError(f"--out {out_path} exists (use --force to replace it)")
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise InspectError(f"--out {out_path}: directory {parent} does not exist")
    return full


def run(args) -> int:
    src = open_source(args.path, args.mode, allow_cut=False)
    reader = src.reader
    target = _target(src, args.out, args.force)
    compressed = target.endswith(".zst")
    if args.timeline is not None and args.timeline not in reader.timelines:
        raise InspectError(f"no timeline {args.timeline} (timelines: {sorted(reader.timelines)})")
    lo = args.from_lsn if args.from_lsn is not None else 1
    if args.to_lsn is not None and args.to_lsn < lo:
        raise InspectError(f"--to {args.to_lsn} is before --from {lo}")
    tmp = f"{target}.tmp-{os.getpid()}"
    events = commits = 0
    first = last = None
    records = src.scan("export", reader.records(timeline=args.timeline, start_lsn=lo, stop_lsn=args.to_lsn),
                       history_bytes(reader, lo, args.to_lsn, timeline=args.timeline))
    try:
        with open(tmp, "wb") as raw:
            sink = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(raw, closefd=False) \
                if compressed else raw
            buf: list[bytes] = []
            size = 0
            for rec in records:
                commits += 1
                first = rec.commit.lsn if first is None else first
                last = rec.commit.lsn
                for i, ev in enumerate(rec.commit.events):
                    line = render.encode(event_dict(rec, i, ev)) + b"\n"
                    buf.append(line)
                    size += len(line)
                    events += 1
                if size >= _CHUNK:
                    sink.write(b"".join(buf))
                    buf, size = [], 0
            sink.write(b"".join(buf))
            if compressed:
                sink.flush(zstandard.FLUSH_FRAME)
                sink.close()
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    doc = {"out": target, "compressed": compressed, "events": events, "commits": commits,
           "first_lsn": first, "last_lsn": last, "timeline": args.timeline, "bytes": os.path.getsize(target)}
    if args.json:
        render.json_document(doc, sys.stdout)
    else:
        sys.stdout.write(f"wrote {events} event(s) of {commits} commit(s) (LSN {first}..{last}) to {target}"
                  f"{' (zstandard)' if compressed else ''}, {doc['bytes']} bytes\n")
    return 0
