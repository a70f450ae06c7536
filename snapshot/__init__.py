"""snapshot: cuts (files with NeMo-RL's checkpoint names plus a sha256 manifest), compaction, retention.

The group tables have NeMo-RL's file names, not its layout: each names its own format
(`tables.TABLE_FORMATS`), so NeMo-RL's loader rejects them instead of misreading them.

A cut at LSN L is a directory written atomically that holds the state folded
up to L. See `cut.py` for the write protocol, `checks.py` for the chain of checks a cut is read
through, and README "Cuts".
"""

from .compactor import BackgroundCompactor, CompactResult, compact
from .checks import read_cut
from .cut import Cut
from .data_plane import DataPlane, row_locators
from .errors import (ChecksumMismatch, CorruptRecord, CountMismatch, JournalMismatch, ManifestMissing,
                     MissingFile, OrphanFile, RestoreError, SchemaMismatch, TwoOwners, UnsafePath)
from .errors import (DataPlaneError, DataPlaneIOError, DataPlaneUnreachable, InvalidLocator, RowConflict,
                     RowsCorrupt, RowsNotFound, RowsNotStorable)
from .retention import RETENTION_MODES

# What a user needs: compaction, reading a cut, the data-plane protocol, and the errors a cut or
# a data plane raises. The chain of checks, the catalogue, the names on disk and the rest are
# importable from their modules (`snapshot.checks`, `snapshot.catalog`, `journal.layout`, ...).
__all__ = [
    "compact", "CompactResult", "BackgroundCompactor", "RETENTION_MODES", "Cut", "read_cut",
    "DataPlane", "row_locators",
    "RestoreError", "ManifestMissing", "UnsafePath", "MissingFile", "OrphanFile", "ChecksumMismatch",
    "SchemaMismatch", "CountMismatch", "CorruptRecord", "TwoOwners", "JournalMismatch",
    "DataPlaneError", "InvalidLocator", "RowsNotFound", "RowConflict", "RowsCorrupt", "RowsNotStorable",
    "DataPlaneUnreachable", "DataPlaneIOError",
]
