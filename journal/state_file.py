"""The journal's own state checkpoint: a fold `State` at one LSN, so that `Journal.open`
without resume= folds only the commits after it instead of the whole history.

Every cut holds one (`layout.STATE_FILE`, listed in its manifest with its sha256 like each
file of the cut, so it is written by the cut's atomic protocol: temporary directory, each
file fsynced, rename, parent fsynced). The format is this module's, read by the journal
alone (no torch, no pickle):

    magic "OWNJST02" | crc32 of the payload: u32 | payload length: u64 | payload

The payload is a zstandard frame (level `ZSTD_LEVEL`) of msgpack of `Body`: the run id and
every field of the `State` (the last ones with a default, which files written before them
lack: the loader's epoch, the run identity), the live groups as column blocks (`_Block`: per
field of `Group` the values of the block's groups, the owners as one code byte each, the rollouts
flattened, a prefix's locator and version in its unsealed rollout's slots and its tokens and turn
in two sparse columns, then the spans' oldest versions in two more (`SINCE_COLUMNS`): the last
ones, with defaults too). A cut builds the columns
of each of its group tables once (`group_columns`) and hands the same lists to the state file.
Files of an older format (another magic) are `compat`'s to read. `read` checks
the magic, the length and the CRC, then decompresses and decodes with the schema, so a torn,
damaged or foreign file is a `StateFileCorrupt`, never a wrong state. Whether the state is a
point of the journal's active history (its LSN, chain and timeline) is the opener's check.
"""

from __future__ import annotations

import itertools
import operator
import os
import struct
import zlib
from typing import Iterator, Mapping, Sequence

import msgspec
import zstandard

from . import layout
from .errors import StateFileCorrupt
from .events import LIVE_OWNERS, PackedLoaderState
from .state import GROUP_FIELDS, Group, LoaderState, Progress, Rollouts, SampledRow, State, TerminalOwners

MAGIC = b"OWNJST02"
# the columns are small ints, short strings and 16-byte fingerprints (which do not compress):
# level 1 took 2-2.5x level -1's time for 6-10% less output
ZSTD_LEVEL = -1
_HEAD = struct.Struct("<8sIQ")
_GETTERS = tuple((name, operator.attrgetter(name)) for name in GROUP_FIELDS)
# per tracked group (admitted with rollouts=N) its N (0 for the others, in `rollout_n`) and
# sealed bits; per rollout, in group order and then by index, its attempt, locator, version
ROLLOUT_COLUMNS = ("rollout_n", "rollout_sealed", "rollout_attempt", "rollout_locator",
                   "rollout_version")
# An unsealed rollout has no result, so the rollout columns `rollout_locator` and
# `rollout_version` hold its prefix's locator and policy version when it has a `Progress`: a
# prefix is an unsealed rollout with a locator. Per prefix, in rollout order, its tokens and
# turn (the few prefixes cost a few bytes each; a rollout without one nothing)
PROGRESS_COLUMNS = ("progress_tokens", "progress_turn")
# Work that older weights began (`Rollouts.since`, `Progress.since`): per such rollout, its slot
# among the flattened rollouts and the oldest version; the slot's seal says which it is (a sealed
# rollout's, or an unsealed one's prefix's). Empty while no work spans versions.
SINCE_COLUMNS = ("rollout_since_at", "rollout_since")
_PLAIN_FIELDS = tuple(n for n in GROUP_FIELDS if n not in ("owner", "rollouts"))  # stored as is
_BLOCK_COLUMNS = _PLAIN_FIELDS + ROLLOUT_COLUMNS + PROGRESS_COLUMNS + SINCE_COLUMNS
_SEALED_OF = operator.attrgetter("sealed")
_ATTEMPTS_OF = operator.attrgetter("attempts")
_LOCATORS_OF = operator.attrgetter("locators")
_VERSIONS_OF = operator.attrgetter("versions")
_PROGRESS_OF = operator.attrgetter("progress")
_SINCE_OF = operator.attrgetter("since")
_LIVE_OWNER_OF_CODE = {int(o): o for o in LIVE_OWNERS}


class _Block(msgspec.Struct, array_like=True):
    """Live groups by column: per field of `Group` but `rollouts` one value per group (the
    owners as one code byte each), then their rollouts flattened (`ROLLOUT_COLUMNS`)."""

    group_id: list[int]
    idx: list[int]
    task_name: list[str | None]
    epoch: list[int | None]
    fingerprint: list[bytes | None]
    owner: bytes
    target_step: list[int | None]
    policy_version: list[int | None]
    locator: list[str | None]
    replaces: list[int | None]
    rollout_n: list[int]
    rollout_sealed: list[int]
    rollout_attempt: list[int]
    rollout_locator: list[str | None]
    rollout_version: list[int | None]
    # the prefixes' tokens and turns (`PROGRESS_COLUMNS`); files written before them lack them
    progress_tokens: list[int] = []
    progress_turn: list[int | None] = []
    # `SINCE_COLUMNS`; files written before them lack them
    rollout_since_at: list[int] = []
    rollout_since: list[int] = []


class Body(msgspec.Struct, array_like=True):
    """What a state file's payload holds (`compat` reads older bodies as subclasses of it)."""

    run_id: bytes
    lsn: int
    chain: int
    timeline: int
    next_group_id: int
    live: list[_Block]
    terminal_codes: bytes
    terminal_sparse: dict[int, int]
    counts: list[int]
    loader: PackedLoaderState | None
    loader_blobs: dict[bytes, bytes]
    pending_checkpoints: dict[int, int]
    committed_checkpoints: dict[int, int]
    dataset_size: int | None
    row_sample: list[SampledRow]
    loader_epoch: int | None = None
    identity: dict[str, bytes] | None = None  # `State.identity` (files written before it lack it)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Body)


def group_columns(groups: Sequence[Group]) -> dict[str, list]:
    """Per field of `Group` (`GROUP_FIELDS`), its values over `groups` in their order, their
    rollouts flattened (`ROLLOUT_COLUMNS`, a prefix in its unsealed rollout's locator and
    version) and their prefixes' `PROGRESS_COLUMNS`: one attribute pass, shared by the state
    file and the cut's group tables."""
    columns = {name: list(map(getter, groups)) for name, getter in _GETTERS}
    tracked = [r for r in columns["rollouts"] if r is not None]
    chain = itertools.chain.from_iterable
    columns["rollout_n"] = [0 if r is None else r.n for r in columns["rollouts"]]
    columns["rollout_sealed"] = list(map(_SEALED_OF, tracked))
    columns["rollout_attempt"] = list(chain(map(_ATTEMPTS_OF, tracked)))
    locators = columns["rollout_locator"] = list(chain(map(_LOCATORS_OF, tracked)))
    versions = columns["rollout_version"] = list(chain(map(_VERSIONS_OF, tracked)))
    tokens, turns = columns["progress_tokens"], columns["progress_turn"] = [], []
    since_at, since = columns["rollout_since_at"], columns["rollout_since"] = [], []
    held = list(itertools.compress(range(len(tracked)), map(_PROGRESS_OF, tracked)))  # None or a tuple
    spanning = list(itertools.compress(range(len(tracked)), map(_SINCE_OF, tracked)))
    if held or spanning:
        starts = [0, *itertools.accumulate(map(len, map(_ATTEMPTS_OF, tracked)))]
        oldest = {}
        for k in held:  # an unsealed rollout's slots hold its prefix's locator and version
            start = starts[k]
            for i, p in enumerate(tracked[k].progress):
                if p is not None:
                    locators[start + i], versions[start + i] = p.locator, p.policy_version
                    tokens.append(p.tokens)
                    turns.append(p.turn)
                    if p.since is not None:
                        oldest[start + i] = p.since
        for k in spanning:
            oldest.update((starts[k] + i, v) for i, v in enumerate(tracked[k].since) if v is not None)
        since_at += sorted(oldest)
        since += map(oldest.__getitem__, since_at)
    return columns


def with_since(tracked: list[Rollouts], gids: Sequence[int], at: Sequence[int], values: Sequence[int],
               where: str) -> list[Rollouts]:
    """`tracked` (the rollouts of the groups `gids`, prefixes already in their `Progress`) with
    the oldest versions of `SINCE_COLUMNS` (`at`: flat rollout slots, `values`) in place: a
    sealed slot's in `Rollouts.since`, an unsealed one's in its prefix's `Progress.since`;
    `ValueError` naming `where` and the group for a slot out of range, given twice, of an
    unsealed rollout without a prefix, or not older than its newest version."""
    if len(at) != len(values):
        raise ValueError(f"{where}: {len(at)} span slots but {len(values)} oldest versions")
    if not at:
        return tracked
    out, todo = list(tracked), dict(zip(at, values))
    if len(todo) != len(at):
        raise ValueError(f"{where}: a span slot is given twice")
    start = 0
    for k, r in enumerate(tracked):
        here = {slot - start: todo.pop(slot) for slot in range(start, start + r.n) if slot in todo}
        start += r.n
        if not here:
            continue
        since, progress = list(r.since or (None,) * r.n), list(r.progress or (None,) * r.n)
        for i, v in here.items():
            newest = r.versions[i] if r.is_sealed(i) else progress[i] and progress[i].policy_version
            if newest is None or v >= newest:
                raise ValueError(f"{where}: group {gids[k]} rollout {i} has an oldest version {v} not "
                                 f"below its newest ({newest})")
            if r.is_sealed(i):
                since[i] = v
            else:
                progress[i] = msgspec.structs.replace(progress[i], since=v)
        out[k] = Rollouts(r.attempts, r.sealed, r.locators, r.versions,
                          tuple(progress) if r.progress is not None else None,
                          tuple(since) if any(x is not None for x in since) else None)
    if todo:
        raise ValueError(f"{where}: span slot {min(todo)} is past the {start} rollouts")
    return out


def split_prefixes(tracked: list[Rollouts], gids: Sequence[int], tokens: list, turns: list,
                   where: str) -> list[Rollouts]:
    """`tracked` (the rollouts of the groups `gids`, as the columns store them) with each prefix
    (an unsealed rollout with a locator) moved into its `Progress`, taking `tokens` and `turns`
    in order; `ValueError` naming `where` and the group when an unsealed rollout has a version
    but no locator, or the prefixes and their tokens do not match in number."""
    if len(tokens) != len(turns):
        raise ValueError(f"{where}: {len(tokens)} prefix tokens but {len(turns)} turns")
    out, k = [], 0
    for gid, r in zip(gids, tracked):
        full = (1 << len(r.attempts)) - 1
        if r.sealed != full and any(r.locators[i] is not None or r.versions[i] is not None
                                    for i in range(len(r.attempts)) if not r.sealed >> i & 1):
            progress, locators, versions = [None] * len(r.attempts), list(r.locators), list(r.versions)
            for i in range(len(r.attempts)):
                if r.sealed >> i & 1 or (locators[i] is None and versions[i] is None):
                    continue
                if locators[i] is None:
                    raise ValueError(f"{where}: group {gid} rollout {i} is unsealed with a policy version "
                                     "but no locator")
                if k >= len(tokens):
                    raise ValueError(f"{where}: group {gid} rollout {i} is unsealed with a locator (a "
                                     f"prefix), but the prefix columns hold only {len(tokens)} prefixes")
                progress[i] = Progress(locators[i], tokens[k], turns[k], versions[i])
                locators[i] = versions[i] = None
                k += 1
            r = Rollouts(r.attempts, r.sealed, tuple(locators), tuple(versions), tuple(progress))
        out.append(r)
    if k != len(tokens):
        raise ValueError(f"{where}: {len(tokens)} prefix tokens for {k} prefixes")
    return out


def encode(state: State, run_id: bytes, live_columns: Sequence[Mapping[str, list]] | None = None) -> bytes:
    """The state file of `state` (a state of the run `run_id`). `live_columns`: the
    `group_columns` of a partition of `state.live` (each live group in exactly one), when the
    caller has them; by default those of `state.live` as one block."""
    if live_columns is None:
        live_columns = (group_columns(list(state.live.values())),)
    blocks = [_Block(owner=bytes(cols["owner"]), **{name: cols[name] for name in _BLOCK_COLUMNS})
              for cols in live_columns]
    loader = state.loader
    body = Body(run_id, state.lsn, state.chain, state.timeline, state.next_group_id, blocks,
                 bytes(state.terminal.codes), state.terminal.sparse, state.counts,
                 loader.packed if loader is not None else None,
                 loader.blobs if loader is not None else {}, state.pending_checkpoints,
                 state.committed_checkpoints, state.dataset_size, list(state.row_sample),
                 loader.epoch if loader is not None else None, state.identity)
    payload = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(_encoder.encode(body))
    return _HEAD.pack(MAGIC, zlib.crc32(payload), len(payload)) + payload


def decode(data: bytes, where: str) -> tuple[State, bytes]:
    """(state, run id) of a state file's bytes (this format, or an older one `compat` reads);
    StateFileCorrupt naming `where` when they are torn, damaged or not a state file."""
    magic = header_magic(data, where)
    if magic != MAGIC:
        from . import compat  # it reads the older formats with this module's body and checks
        return compat.decode_older_state_file(magic, data, where)
    body = decode_body(_decoder, data, where)
    return state_of(body, _live_of(body.live, where)), body.run_id


def header_magic(data: bytes, where: str) -> bytes:
    """The magic of a state file's bytes; StateFileCorrupt naming `where` when they are
    shorter than the header."""
    if len(data) < _HEAD.size:
        raise StateFileCorrupt(f"{where}: {len(data)} bytes, shorter than the {_HEAD.size}-byte "
                               "header (a torn or foreign file)")
    return _HEAD.unpack_from(data)[0]


def decode_body(decoder: msgspec.msgpack.Decoder, data: bytes, where: str):
    """The body `decoder` decodes from a state file's bytes (its magic already known), after
    checking the payload's length and CRC; StateFileCorrupt naming `where` on any failure."""
    _magic, crc, length = _HEAD.unpack_from(data)
    payload = memoryview(data)[_HEAD.size:]
    if length != len(payload):
        raise StateFileCorrupt(f"{where}: the header says {length} payload bytes, the file holds "
                               f"{len(payload)} (a torn file)")
    if zlib.crc32(payload) != crc:
        raise StateFileCorrupt(f"{where}: payload checksum mismatch (damaged)")
    try:
        # a decompressobj grows its output with what comes out, never to a size a frame claims
        return decoder.decode(zstandard.ZstdDecompressor().decompressobj().decompress(payload))
    except (msgspec.DecodeError, ValueError, zstandard.ZstdError) as exc:
        raise StateFileCorrupt(f"{where}: the payload does not decode as a state: {exc}") from None


def _live_of(blocks: list[_Block], where: str) -> dict[int, Group]:
    """The live groups of the column blocks; StateFileCorrupt naming `where` for a block whose
    columns disagree in length, an owner that is not a live one, or a group id given twice."""
    live: dict[int, Group] = {}
    total = 0
    for i, block in enumerate(blocks):
        n = len(block.group_id)
        lengths = [len(getattr(block, name)) for name in _PLAIN_FIELDS + ("owner", "rollout_n")]
        if any(length != n for length in lengths):
            raise StateFileCorrupt(f"{where}: live block {i} has columns of lengths {lengths}, "
                                   f"not all {n}")
        values = {name: getattr(block, name) for name in _PLAIN_FIELDS}
        try:
            values["owner"] = list(map(_LIVE_OWNER_OF_CODE.__getitem__, block.owner))
        except KeyError as exc:
            raise StateFileCorrupt(f"{where}: live block {i} has a group of owner code {exc}, "
                                   "not a live owner") from None
        values["rollouts"] = _rollouts_of(block, f"{where}: live block {i}")
        groups = map(Group, *(values[name] for name in GROUP_FIELDS))
        live.update(zip(block.group_id, groups))
        total += n
    if len(live) != total:
        raise StateFileCorrupt(f"{where}: {total} live groups listed, {total - len(live)} of "
                               "their ids twice")
    return live


def _rollouts_of(block: _Block, where: str) -> list[Rollouts | None]:
    """Each group's `Rollouts` (None for an untracked one) from a block's rollout columns."""
    ns = [n for n in block.rollout_n if n]
    ends = list(itertools.accumulate(ns))
    rows = ends[-1] if ends else 0
    if min(ns, default=1) < 1 or len(ns) != len(block.rollout_sealed) or any(
            len(c) != rows for c in (block.rollout_attempt, block.rollout_locator, block.rollout_version)):
        raise StateFileCorrupt(f"{where}: the rollout columns do not hold the {len(ns)} tracked "
                               f"groups' {rows} rollouts")
    if len(set(ns)) == 1:  # one N for every tracked group (the usual trainer): zip N-tuples
        def per_group(column: list) -> Iterator[tuple]:
            return zip(*[iter(column)] * ns[0])
    else:
        rows_of = list(map(slice, [0] + ends[:-1], ends))

        def per_group(column: list) -> Iterator[tuple]:
            return map(tuple, map(column.__getitem__, rows_of))

    tracked = list(map(Rollouts, per_group(block.rollout_attempt), block.rollout_sealed,
                       per_group(block.rollout_locator), per_group(block.rollout_version)))
    if block.progress_tokens or block.rollout_since_at:
        gids = list(itertools.compress(block.group_id, block.rollout_n))
        try:
            tracked = split_prefixes(tracked, gids, block.progress_tokens, block.progress_turn, where)
            tracked = with_since(tracked, gids, block.rollout_since_at, block.rollout_since, where)
        except ValueError as exc:
            raise StateFileCorrupt(str(exc)) from None
    it = iter(tracked)
    return [next(it) if n else None for n in block.rollout_n]


def state_of(body: Body, live: dict[int, Group]) -> State:
    """The `State` a decoded body and its live groups hold."""
    s = State()
    s.lsn, s.chain, s.timeline, s.next_group_id = body.lsn, body.chain, body.timeline, body.next_group_id
    s.live = live
    s.terminal = TerminalOwners()
    s.terminal.codes, s.terminal.sparse = bytearray(body.terminal_codes), body.terminal_sparse
    s.counts = body.counts
    s.loader = (LoaderState(body.loader, body.loader_blobs, body.loader_epoch)
                if body.loader is not None else None)
    s.pending_checkpoints, s.committed_checkpoints = body.pending_checkpoints, body.committed_checkpoints
    s.dataset_size, s.row_sample, s.identity = body.dataset_size, tuple(body.row_sample), body.identity
    return s


def read(path: str) -> tuple[State, bytes]:
    """(state, run id) of the state file at `path`; StateFileCorrupt, or OSError of the read."""
    with open(path, "rb") as f:
        data = f.read()
    return decode(data, path)


def candidates(journal_path: str) -> list[str]:
    """The state files of the cuts under `<journal>/snapshots`, newest LSN first (a cut's file
    that does not exist is listed all the same: reading it fails and the next one is tried)."""
    return [os.path.join(path, layout.STATE_FILE) for _lsn, _timeline, path in layout.cut_dirs(journal_path)]
