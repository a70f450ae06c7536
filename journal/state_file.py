"""The journal's own state checkpoint: a fold `State` at one LSN, so that `Journal.open`
without resume= folds only the commits after it instead of the whole history.

Every cut holds one (`layout.STATE_FILE`, listed in its manifest with its sha256 like each
file of the cut, so it is written by the cut's atomic protocol: temporary directory, each
file fsynced, rename, parent fsynced). The format is this module's, read by the journal
alone (no torch, no pickle):

    magic "OWNJST01" | crc32 of the payload: u32 | payload length: u64 | payload

The payload is a zstandard frame (level 1: the group records' field names repeat, it
shrinks them about 25-fold for a few ms per 100k groups) of msgpack of `_Body`: the run id
and every field of the `State`. `read` checks the magic, the length and the CRC, then
decompresses and decodes with the schema, so a torn, damaged or foreign file is a
`StateFileCorrupt`, never a wrong state. Whether the state is a point
of the journal's active history (its LSN, chain and timeline) is the opener's check.
"""

from __future__ import annotations

import os
import struct
import zlib

import msgspec
import zstandard

from . import layout
from .errors import StateFileCorrupt
from .events import PackedLoaderState
from .fold import Group, LoaderState, SampledRow, State, TerminalOwners

MAGIC = b"OWNJST01"
_HEAD = struct.Struct("<8sIQ")


class _Body(msgspec.Struct, array_like=True):
    run_id: bytes
    lsn: int
    chain: int
    timeline: int
    next_group_id: int
    live: list[Group]
    terminal_codes: bytes
    terminal_sparse: dict[int, int]
    counts: list[int]
    loader: PackedLoaderState | None
    loader_blobs: dict[bytes, bytes]
    pending_checkpoints: dict[int, int]
    committed_checkpoints: dict[int, int]
    dataset_size: int | None
    row_sample: list[SampledRow]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Body)


def encode(state: State, run_id: bytes) -> bytes:
    """The state file of `state` (a state of the run `run_id`)."""
    loader = state.loader
    body = _Body(run_id, state.lsn, state.chain, state.timeline, state.next_group_id,
                 list(state.live.values()), bytes(state.terminal.codes), state.terminal.sparse,
                 state.counts, loader.packed if loader is not None else None,
                 loader.blobs if loader is not None else {}, state.pending_checkpoints,
                 state.committed_checkpoints, state.dataset_size, list(state.row_sample))
    payload = zstandard.ZstdCompressor(level=1).compress(_encoder.encode(body))
    return _HEAD.pack(MAGIC, zlib.crc32(payload), len(payload)) + payload


def decode(data: bytes, where: str) -> tuple[State, bytes]:
    """(state, run id) of a state file's bytes; StateFileCorrupt naming `where` when they are
    torn, damaged or not a state file."""
    if len(data) < _HEAD.size:
        raise StateFileCorrupt(f"{where}: {len(data)} bytes, shorter than the {_HEAD.size}-byte "
                               "header (a torn or foreign file)")
    magic, crc, length = _HEAD.unpack_from(data)
    payload = memoryview(data)[_HEAD.size:]
    if magic != MAGIC:
        raise StateFileCorrupt(f"{where}: bad magic {magic!r}, not a journal state file")
    if length != len(payload):
        raise StateFileCorrupt(f"{where}: the header says {length} payload bytes, the file holds "
                               f"{len(payload)} (a torn file)")
    if zlib.crc32(payload) != crc:
        raise StateFileCorrupt(f"{where}: payload checksum mismatch (damaged)")
    try:
        # a decompressobj grows its output with what comes out, never to a size a frame claims
        body = _decoder.decode(zstandard.ZstdDecompressor().decompressobj().decompress(payload))
    except (msgspec.DecodeError, ValueError, zstandard.ZstdError) as exc:
        raise StateFileCorrupt(f"{where}: the payload does not decode as a state: {exc}") from None
    return _state_of(body), body.run_id


def _state_of(body: _Body) -> State:
    s = State()
    s.lsn, s.chain, s.timeline, s.next_group_id = body.lsn, body.chain, body.timeline, body.next_group_id
    s.live = {g.group_id: g for g in body.live}
    s.terminal = TerminalOwners()
    s.terminal.codes, s.terminal.sparse = bytearray(body.terminal_codes), body.terminal_sparse
    s.counts = body.counts
    s.loader = LoaderState(body.loader, body.loader_blobs) if body.loader is not None else None
    s.pending_checkpoints, s.committed_checkpoints = body.pending_checkpoints, body.committed_checkpoints
    s.dataset_size, s.row_sample = body.dataset_size, tuple(body.row_sample)
    return s


def read(path: str) -> tuple[State, bytes]:
    """(state, run id) of the state file at `path`; StateFileCorrupt, or OSError of the read."""
    with open(path, "rb") as f:
        data = f.read()
    return decode(data, path)


def candidates(journal_path: str) -> list[str]:
    """The state files of the cuts under `<journal>/snapshots`, newest LSN first (a cut's file
    that does not exist is listed all the same: reading it fails and the next one is tried)."""
    root = os.path.join(journal_path, layout.SNAPSHOTS_DIR)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    cuts = sorted(((parsed[1], parsed[0], name) for name in names
                   if (parsed := layout.parse_cut_dir_name(name)) is not None), reverse=True)
    return [os.path.join(root, name, layout.STATE_FILE) for _lsn, _timeline, name in cuts]
