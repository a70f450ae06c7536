"""MANIFEST.json: what a cut holds and the anchor that ties it to one point of one history.

Written last, so a cut without a manifest is incomplete by construction.
"""

from __future__ import annotations

import os
import posixpath

import msgspec

from .errors import ManifestMissing, SchemaMismatch, UnsafePath

FORMAT_NAME = "ownership-journal-cut"
# what this code writes: 2 added the rollout table; 3 tags each group table with its own format
# name and version (`tables.TABLE_FORMATS`) instead of the `schema_version` key NeMo-RL reads;
# 4 added the progress table (the rollouts' latest durable prefixes)
SCHEMA_VERSION = 4
READABLE_SCHEMAS = frozenset({1, 2, 3, 4})  # what it reads
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
    loader_epoch: int | None = None   # the loader state's epoch (`journal.LoaderState.epoch`)
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
        if raw.get("schema_version") not in READABLE_SCHEMAS:
            raise SchemaMismatch(f"{cut_dir}/{MANIFEST_NAME}: schema version "
                                 f"{raw.get('schema_version')!r}, this code reads "
                                 f"{sorted(READABLE_SCHEMAS)}") from None
        raise ManifestMissing(f"{cut_dir}/{MANIFEST_NAME} has a bad field: {exc}") from None
    for name in m.files:
        safe_relpath(name, cut_dir)
    return m
