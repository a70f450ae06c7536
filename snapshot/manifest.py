"""MANIFEST.json: what a cut holds and the anchor that ties it to one point of one history.

Written last, so a cut without a manifest is incomplete by construction.
"""

from __future__ import annotations

import os
import posixpath

import msgspec

from .compat import OLDER_SCHEMAS
from .errors import ManifestMissing, SchemaMismatch, UnsafePath

FORMAT_NAME = "ownership-journal-cut"
# what this code writes: each group table tagged with its own format name and version
# (`tables.TABLE_FORMATS`), its rollout table, its progress table (the rollouts' latest durable
# prefixes) and the spans of work older weights began; what each older schema lacks is `compat`'s
SCHEMA_VERSION = 5
READABLE_SCHEMAS = OLDER_SCHEMAS | {SCHEMA_VERSION}  # what it reads
from journal.layout import MANIFEST_NAME  # noqa: E402,F401 (every name on disk is layout's)


class FileEntry(msgspec.Struct, frozen=True):
    size: int
    sha256: str


class Manifest(msgspec.Struct, kw_only=True):
    format: str
    schema_version: int
    run_id: str                   # hex
    timeline: int
    lsn: int
    chain: int                    # chain checksum after LSN `lsn`
    checkpoint_step: int | None   # the step whose checkpoint_begun is at `lsn`, if any
    counts: dict[str, int]        # per owner name, terminal ones included
    next_group_id: int
    pending_checkpoints: dict[str, int]    # step -> checkpoint_begun LSN (JSON keys are strings)
    committed_checkpoints: dict[str, int]
    has_loader_state: bool
    files: dict[str, FileEntry]   # relative path (posix) -> size and sha256
    created_unix: float = 0.0
    loader_epoch: int | None = None   # the loader state's epoch (`journal.state.LoaderState.epoch`)
    # the run identity as of `lsn` (`journal.State.identity`), each fingerprint in hex; None when
    # the history recorded none, or the cut was written before manifests carried it
    identity: dict[str, str] | None = None


def encode(m: Manifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(m), indent=2) + b"\n"


def safe_relpath(name: str, cut_dir: str) -> str:
    """The on-disk path of manifest entry `name`, refusing anything that leaves the cut."""
    if (not name or "\\" in name or "\0" in name or name.startswith("/") or os.path.isabs(name)
            or posixpath.normpath(name) != name or name.split("/")[0] == ".."
            or ".." in name.split("/")):
        raise UnsafePath(f"{cut_dir}: manifest names {name!r}, which is not a plain path inside the cut")
    full = os.path.join(cut_dir, *name.split("/"))
    probe = cut_dir
    for part in name.split("/"):
        probe = os.path.join(probe, part)
        if os.path.islink(probe):
            raise UnsafePath(f"{cut_dir}: manifest entry {name!r} goes through the link {probe}")
    real_root = os.path.realpath(cut_dir)
    if os.path.commonpath([real_root, os.path.realpath(full)]) != real_root:
        raise UnsafePath(f"{cut_dir}: manifest entry {name!r} resolves outside the cut")
    return full


def check_schema(version, where: str, readable: frozenset = READABLE_SCHEMAS,
                 what: str = "schema version") -> int:
    """`version` when it is one of the `readable` versions (of the manifest at `where`, or of
    one of its tables); else `SchemaMismatch` naming it: the one schema-version check."""
    if version not in readable:
        raise SchemaMismatch(f"{where}: {what} {version!r}, this code reads {sorted(readable)}")
    return version


def decode(data: bytes, cut_dir: str) -> Manifest:
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ManifestMissing(f"{cut_dir}/{MANIFEST_NAME} does not parse: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise ManifestMissing(f"{cut_dir}/{MANIFEST_NAME} is not an {FORMAT_NAME} manifest")
    try:
        m = msgspec.convert(raw, Manifest)
    except msgspec.ValidationError as exc:
        check_schema(raw.get("schema_version"), f"{cut_dir}/{MANIFEST_NAME}")
        raise ManifestMissing(f"{cut_dir}/{MANIFEST_NAME} has a bad field: {exc}") from None
    for name in m.files:
        safe_relpath(name, cut_dir)
    return m
