"""Every name on disk, with its format and parse helpers, and what kind of directory a path is.

A journal directory holds:

    <timeline:08d>-<first lsn:020d>.wal       a segment (`segment_name`)
    <segment>.wal.zst                        a retired segment, archived (zstandard)
    <segment>.wal.zst.tmp                    an archive being written (retention)
    <segment>.wal.new                        a new branch's first segment, not yet published
    LOCK                                     the writer lock (flock)
    torn/<segment>.<offset>.<usec>           a torn tail copied aside before it was cut off
    damaged/<segment>                        a damaged segment a cut covers, set aside by an open
                                             (with the older segments of the history before it)
    snapshots/cut-<timeline:08d>-<lsn:020d>  a cut (`cut_dir_name`)
    snapshots/.tmp-<cut>-<hex>               a cut being written
    snapshots/.tmp-del-<cut>-<hex>           a cut being deleted
    snapshots/<cut>.replaced-<seconds>       a cut set aside by a resume that wrote a new one
    replica/<segment stem>.shipped           the segment is in the bucket its content names (retention may retire it)

A cut directory holds MANIFEST.json and the files named below (`CUT_FILES`; `LEDGER_FILE`,
`STATE_FILE` and `POSITION_FILE` are optional: older cuts lack them).
A directory whose name starts with `.tmp-` is never read as a cut.

The names of a replica's objects (object storage) are in `journal/replica/names.py`.
"""

from __future__ import annotations

import enum
import os
import re

SEGMENT_SUFFIX = ".wal"
ARCHIVE_SUFFIX = ".wal.zst"
REPLACE_TMP_SUFFIX = ".tmp"  # `FileSystem.replace_file` writes `<path>.tmp`, then renames it
ARCHIVE_TMP_SUFFIX = ARCHIVE_SUFFIX + REPLACE_TMP_SUFFIX
UNPUBLISHED_SUFFIX = ".new"  # a new branch's first segment until its first commit is durable
PREPARED_NAME = "next.wal.prepared"  # the next segment, zero-filled ahead of need (journal/segments.py)
LOCK_NAME = "LOCK"
TORN_DIR = "torn"
DAMAGED_DIR = "damaged"
SNAPSHOTS_DIR = "snapshots"
TMP_PREFIX = ".tmp-"
DELETE_TMP_PREFIX = TMP_PREFIX + "del-"
REPLACED_INFIX = ".replaced-"

MANIFEST_NAME = "MANIFEST.json"
DATALOADER_FILE = "train_dataloader.pt"
RECOVERY_FILE = "rollout_recovery.pt"
REPLAY_FILE = "replay_buffer_metadata.pt"
RESERVE_FILE = "replacement_reserve.pt"
LEDGER_FILE = "audit_rows.pt"  # the row ledger: what the audit needs of the history before the cut
STATE_FILE = "journal_state.bin"  # the fold state at the cut, in the journal's format (state_file.py)
POSITION_FILE = "journal_position.bin"  # where reading the segment may start (position.py)
DATA_PLANE_DIR = "data_plane"
CUT_FILES = (MANIFEST_NAME, DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE, RESERVE_FILE, LEDGER_FILE,
             STATE_FILE, POSITION_FILE)

REPLICA_DIR = "replica"
SHIPPED_SUFFIX = ".shipped"

_SEGMENT_NAME = re.compile(r"^(\d{8})-(\d{20})\.wal(\.zst)?$")
_CUT_NAME = re.compile(r"^cut-(\d{8})-(\d{20})$")
_TORN_COPY = re.compile(r"^(\d{8}-\d{20}\.wal)\.(\d+)\.(\d+)$")


def segment_name(timeline: int, first_lsn: int) -> str:
    return f"{timeline:08d}-{first_lsn:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, int, bool] | None:
    """(timeline, first_lsn, archived) for a segment file name, None for any other file."""
    m = _SEGMENT_NAME.match(name)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3) is not None


def archive_name(segment: str) -> str:
    """The archive of segment file `segment` (`X.wal` -> `X.wal.zst`)."""
    return segment[:-len(SEGMENT_SUFFIX)] + ARCHIVE_SUFFIX


def torn_copy_name(segment: str, offset: int, stamp_us: int) -> str:
    """The name in `torn/` of the bytes of `segment` from `offset` on, copied at `stamp_us`."""
    return f"{segment}.{offset}.{stamp_us}"


def parse_torn_copy_name(name: str) -> tuple[str, int, int] | None:
    """(segment, offset, stamp) of a torn-tail copy's name, None for any other name."""
    m = _TORN_COPY.match(name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def cut_dir_name(timeline: int, lsn: int) -> str:
    return f"cut-{timeline:08d}-{lsn:020d}"


def parse_cut_dir_name(name: str) -> tuple[int, int] | None:
    """(timeline, lsn) of a cut directory's name, None for any other name."""
    m = _CUT_NAME.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def cut_dirs(journal_path: str) -> list[tuple[int, int, str]]:
    """(lsn, timeline, path) of every cut directory under `<journal>/snapshots`, newest LSN
    first; the one listing of cuts. A temporary directory of an unfinished compaction is never
    listed (its name does not parse)."""
    root = os.path.join(journal_path, SNAPSHOTS_DIR)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(((parsed[1], parsed[0], os.path.join(root, name)) for name in names
                   if (parsed := parse_cut_dir_name(name)) is not None), reverse=True)


def cut_tmp_name(cut: str, token: str) -> str:
    """The temporary sibling a cut named `cut` is written in before its rename."""
    return f"{TMP_PREFIX}{cut}-{token}"


def delete_tmp_name(cut: str, token: str) -> str:
    """What a cut named `cut` is renamed to before its tree is removed."""
    return f"{DELETE_TMP_PREFIX}{cut}-{token}"


def replaced_name(cut: str, stamp_s: int) -> str:
    """What a cut named `cut` is renamed to when a resume writes a new cut in its place."""
    return f"{cut}{REPLACED_INFIX}{stamp_s}"


def shipped_marker_name(timeline: int, first_lsn: int) -> str:
    """`replica/<name>`: the segment (timeline, first_lsn) is in the bucket."""
    return f"{REPLICA_DIR}/{timeline:08d}-{first_lsn:020d}{SHIPPED_SUFFIX}"


class DirKind(enum.Enum):
    """What a path is, for `Journal.open` and `restore`."""

    MISSING = "missing"
    NOT_A_DIRECTORY = "not a directory"
    EMPTY = "empty"
    JOURNAL = "journal"
    CUT = "cut"
    FOREIGN = "foreign"  # a non-empty directory that is neither a journal nor a cut


def is_journal_entry(name: str) -> bool:
    """Whether `name` is one of the entries only a journal directory has."""
    return (name in (LOCK_NAME, TORN_DIR, DAMAGED_DIR, SNAPSHOTS_DIR, REPLICA_DIR, PREPARED_NAME)
            or parse_segment_name(name) is not None
            or name.endswith(SEGMENT_SUFFIX + UNPUBLISHED_SUFFIX) or name.endswith(ARCHIVE_TMP_SUFFIX))


def dir_kind(path: str) -> tuple[DirKind, list[str]]:
    """The kind of `path` and, for FOREIGN, its entries (sorted). A journal is a directory
    holding a segment, LOCK, torn/ or snapshots/; a cut one holding a cut file (even
    without its manifest: that is a damaged cut, not an empty journal)."""
    if not os.path.lexists(path):
        return DirKind.MISSING, []
    if not os.path.isdir(path):
        return DirKind.NOT_A_DIRECTORY, []
    names = sorted(os.listdir(path))
    if not names:
        return DirKind.EMPTY, []
    if any(is_journal_entry(n) for n in names):
        return DirKind.JOURNAL, []
    if any(n in CUT_FILES for n in names):
        return DirKind.CUT, []
    return DirKind.FOREIGN, names


def describe_entries(names: list[str], limit: int = 3) -> str:
    """A few of `names` for a message: `'a', 'b', 'c' and 4 more`."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
