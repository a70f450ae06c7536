"""`export`: the events of a history as JSON lines in a file, optionally zstandard-compressed.

One line per event, the objects of `log --json` (see `event_rows`). The file is
written as `<out>.tmp-<pid>` beside its final name and renamed into place only
when complete, so a reader never sees half an export. The journal itself is
never written: an output path inside the journal directory is refused.
"""

from __future__ import annotations

import os
from typing import TextIO

import zstandard

from . import output
from .event_rows import event_dict
from .walk import history
from .inspect_source import InspectError, Source

ZSTD_LEVEL = 3
_CHUNK = 1 << 20


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


def command(src: Source, args, out: TextIO) -> int:
    reader = src.need_journal("export")
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
    bar = src.progress("export")
    try:
        with open(tmp, "wb") as raw:
            sink = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(raw, closefd=False) \
                if compressed else raw
            buf: list[bytes] = []
            size = 0
            for rec in bar.records(history(reader, timeline=args.timeline, start_lsn=lo,
                                                  stop_lsn=args.to_lsn), src.sizes):
                commits += 1
                first = rec.commit.lsn if first is None else first
                last = rec.commit.lsn
                for i, ev in enumerate(rec.commit.events):
                    line = output.encode(event_dict(rec, i, ev)) + b"\n"
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
    finally:
        bar.close()
    doc = {"out": target, "compressed": compressed, "events": events, "commits": commits,
           "first_lsn": first, "last_lsn": last, "timeline": args.timeline, "bytes": os.path.getsize(target)}
    if args.json:
        output.json_document(doc, out)
    else:
        out.write(f"wrote {events} event(s) of {commits} commit(s) (LSN {first}..{last}) to {target}"
                  f"{' (zstandard)' if compressed else ''}, {doc['bytes']} bytes\n")
    return 0
