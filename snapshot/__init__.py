"""snapshot: cuts (files with NeMo-RL's checkpoint names plus a sha256 manifest), compaction, retention.

The group tables have NeMo-RL's file names, not its layout: each names its own format
(`tables.TABLE_FORMATS`), so NeMo-RL's loader rejects them instead of misreading them.

A cut at LSN L is a directory written atomically that holds the state folded
up to L. See `cut.py` for the write protocol, `checks.py` for the chain of checks a cut is read
through, and README "Cuts".
"""

from .compactor import BackgroundCompactor, CompactResult, compact
from .checks import CHECKS, FILE_CHECKS, CutCheck, check_cut_files, check_of, read_cut
from .cut import (DATA_PLANE_DIR, DATALOADER_FILE, RECOVERY_FILE, REPLAY_FILE, RESERVE_FILE,
                  TMP_PREFIX, Cut, write_cut)
from .data_plane import DataPlane, row_locators
from .errors import (ChecksumMismatch, CorruptRecord, CountMismatch, JournalMismatch, ManifestMissing,
                     MissingFile, OrphanFile, RestoreError, SchemaMismatch, TwoOwners, UnsafePath)
from .errors import (DataPlaneError, DataPlaneIOError, DataPlaneUnreachable, InvalidLocator, RowConflict,
                     RowsCorrupt, RowsNotFound, RowsNotStorable)
from .manifest import FORMAT_NAME, MANIFEST_NAME, SCHEMA_VERSION, Manifest
from .retention import RETENTION_MODES
from .catalog import (SNAPSHOTS_DIR, ManifestView, Skipped, anchor_problem, check_anchor, cut_dirs,
                      usable_cuts)
from .state_at import Point, state_at

__all__ = [
    "compact", "CompactResult", "BackgroundCompactor", "Cut", "DataPlane", "row_locators", "read_cut",
    "write_cut",
    "CHECKS", "FILE_CHECKS", "CutCheck", "check_cut_files", "check_of",
    "state_at", "Point", "Skipped", "usable_cuts", "cut_dirs", "ManifestView", "anchor_problem", "check_anchor",
    "RestoreError", "ManifestMissing", "UnsafePath", "MissingFile", "OrphanFile", "ChecksumMismatch",
    "SchemaMismatch", "CountMismatch", "CorruptRecord", "TwoOwners", "JournalMismatch",
    "DataPlaneError", "InvalidLocator", "RowsNotFound", "RowConflict", "RowsCorrupt", "RowsNotStorable",
    "DataPlaneUnreachable", "DataPlaneIOError",
    "Manifest", "FORMAT_NAME", "MANIFEST_NAME", "SCHEMA_VERSION", "SNAPSHOTS_DIR", "RETENTION_MODES",
    "DATALOADER_FILE", "RECOVERY_FILE", "REPLAY_FILE", "RESERVE_FILE", "DATA_PLANE_DIR", "TMP_PREFIX",
]
