"""Columnar group tables: the contents of rollout_recovery.pt, replay_buffer_metadata.pt
and replacement_reserve.pt.

The files have NeMo-RL's names, not its layout: each table names its own format and version
(`TABLE_FORMATS`, under `format` and `format_version`) and has no `schema_version`, the key
NeMo-RL's loader reads its layout's version from, so that loader rejects our files rather than
misreading them, and ours rejects a table of another format (`SchemaMismatch`). The tables of
older cut schemas are `compat`'s to read.

Integer columns are int64 tensors (`NONE` marks a missing optional value);
string and bytes columns are one uint8 tensor of concatenated bytes plus int64
offsets and a bool `present` mask. `phase` is an int8 column (1 RESERVED,
2 ADMITTED, 3 REPLAY, 4 SPARE). Everything loads with
`torch.load(..., weights_only=True)` and no extra globals, and a table of 100k
groups is a handful of tensors rather than 100k pickled dicts.

Encoding and decoding make one attribute pass over the groups and otherwise
work column by column in C (`array`, `bytes.join`, tensor ops), so a table of
100k groups costs tens of milliseconds.

This module imports torch; `cut.py` imports it inside the functions that write or read a cut,
so `import snapshot` stays torch-free.
"""

from __future__ import annotations

import itertools
import operator
import re
from array import array
from typing import Mapping, Sequence

import torch

from journal import Group, Owner, Rollouts
from journal.state import SampledRow
from journal.state_file import split_prefixes, with_since
from journal.layout import RECOVERY_FILE, REPLAY_FILE, RESERVE_FILE

from . import compat
from .errors import CorruptRecord, SchemaMismatch
from .manifest import READABLE_SCHEMAS, SCHEMA_VERSION, check_schema

TABLE_FORMATS = {RECOVERY_FILE: "ownership-journal/rollout-recovery",   # file -> its format name
                 REPLAY_FILE: "ownership-journal/replay-buffer-metadata",
                 RESERVE_FILE: "ownership-journal/replacement-reserve"}
TAGGED_SCHEMAS = READABLE_SCHEMAS - compat.UNTAGGED_SCHEMAS  # tables with a format name

NONE = -(2 ** 63)  # int64 sentinel for "no value"
_INT_COLUMNS = ("group_id", "idx", "epoch", "target_step", "policy_version", "replaces")
_OPTIONAL_INT = ("epoch", "target_step", "policy_version", "replaces")
_BYTES_COLUMNS = ("task_name", "fingerprint", "locator")
_STR_COLUMNS = frozenset({"task_name", "locator"})
_PHASES = {Owner.RESERVED: 1, Owner.ADMITTED: 2, Owner.REPLAY: 3, Owner.SPARE: 4}
_PHASE_OWNERS = {v: k for k, v in _PHASES.items()}
_TRACKS_ROLLOUTS = frozenset({_PHASES[Owner.ADMITTED], _PHASES[Owner.REPLAY]})


def _int_tensor(values: Sequence[int | None]) -> torch.Tensor:
    if not values:
        return torch.empty(0, dtype=torch.int64)
    if None in values:
        values = [NONE if v is None else v for v in values]
    try:
        return torch.frombuffer(array("q", values), dtype=torch.int64)
    except OverflowError:
        raise ValueError("an integer field does not fit in int64") from None


def _bytes_column(values: Sequence[bytes | str | None], is_str: bool) -> dict:
    """`values` as one blob, its offsets and which are present (None: absent, stored as empty);
    every pass over the values is a C loop (`filter`, `map`), none a Python one, except over the
    encoded values of a column that is not ASCII."""
    n = len(values)
    present = torch.frombuffer(bytearray(map(operator.is_not, values, itertools.repeat(None))),
                               dtype=torch.bool) if n else torch.empty(0, dtype=torch.bool)
    lengths = map(operator.length_hint, values)   # a None's is 0
    if is_str:
        text = "".join(filter(None, values))
        if text.isascii():  # one byte per character: lengths in characters are lengths in bytes
            blob = text.encode("ascii")
        else:
            encoded = [v.encode() if v is not None else b"" for v in values]
            blob, lengths = b"".join(encoded), map(len, encoded)
    else:
        blob = b"".join(filter(None, values))
    offsets = torch.frombuffer(array("q", itertools.accumulate(lengths, initial=0)), dtype=torch.int64)
    data = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)
    return {"data": data, "offsets": offsets, "present": present}


def _tensor_bytes(data: torch.Tensor) -> bytes:
    """The bytes of a uint8 tensor (a bulk copy; iterating a storage is per element, slow)."""
    if not data.numel():
        return b""
    buf = bytearray(data.numel())
    torch.frombuffer(buf, dtype=torch.uint8).copy_(data)
    return bytes(buf)


def _read_bytes_column(col, n: int, where: str) -> list[bytes | None]:
    if not isinstance(col, dict) or set(col) != {"data", "offsets", "present"}:
        raise CorruptRecord(f"{where}: bad column layout")
    data, offsets, present = col["data"], col["offsets"], col["present"]
    if not (isinstance(data, torch.Tensor) and data.dtype == torch.uint8 and data.dim() == 1
            and isinstance(offsets, torch.Tensor) and offsets.dtype == torch.int64
            and offsets.shape == (n + 1,) and isinstance(present, torch.Tensor)
            and present.dtype == torch.bool and present.shape == (n,)):
        raise CorruptRecord(f"{where}: column tensors have the wrong dtype or shape")
    offs = offsets.tolist()
    if offs[0] != 0 or offs[-1] != data.numel() or not all(map(operator.le, offs, offs[1:])):
        raise CorruptRecord(f"{where}: offsets are not increasing within the data")
    raw = _tensor_bytes(data)
    out = list(map(raw.__getitem__, map(slice, offs[:-1], offs[1:])))
    pres = present.tolist()
    if False in pres:
        for i in itertools.compress(range(n), map(operator.not_, pres)):
            if out[i]:
                raise CorruptRecord(f"{where}: record {i} is absent but has bytes")
            out[i] = None
    return out


def encode_table(file: str, by_name: Mapping[str, list], owner: Owner | None = None) -> dict:
    """The table of cut file `file` (a key of `TABLE_FORMATS`) of the groups whose columns are
    `by_name` (`state_file.group_columns` of live records of the owners this file holds; a cut
    hands the same lists to its state file), in their order. `owner`: every group has this
    owner (the caller partitioned them), so its phase is constant."""
    n = len(by_name["group_id"])
    table = {"format": TABLE_FORMATS[file], "format_version": SCHEMA_VERSION, "count": n}
    for name in _INT_COLUMNS:
        table[name] = _int_tensor(by_name[name])
    try:
        phase = bytes((_PHASES[owner],)) * n if owner is not None else \
            bytes(map(_PHASES.__getitem__, by_name["owner"]))
    except KeyError:
        raise ValueError("only live groups (RESERVED, ADMITTED, REPLAY, SPARE) go in a table") from None
    table["phase"] = torch.frombuffer(bytearray(phase), dtype=torch.int8) if n else torch.empty(0, dtype=torch.int8)
    for name in _BYTES_COLUMNS:
        table[name] = _bytes_column(by_name[name], name in _STR_COLUMNS)
    table.update(_encode_rollouts(by_name))
    return table


# -- rollouts ----------------------------------------------------------------------------------
#
# A group table has a `rollouts` column (N, or NONE for a group admitted without rollouts=)
# and a `rollout_table`: one row per rollout of those groups, in the table's group order and
# then by index, with columns group_id, index, attempt, sealed, locator and policy_version, and
# two sparse int64 columns for the work older weights began (`state_file.SINCE_COLUMNS`):
# `since_at`, a row number, and `since`, the oldest version of its tokens (a sealed rollout's,
# or an unsealed one's prefix's), both empty while no work spans versions.

# column -> (array typecode, dtype): an index fits int16 (N <= 65535), an attempt int32 (it
# grows by one per failure), a policy version needs the int64 "none" sentinel
_ROLLOUT_INT_COLUMNS = {"group_id": ("q", torch.int64), "index": ("h", torch.int16),
                        "attempt": ("i", torch.int32), "policy_version": ("q", torch.int64)}
ROLLOUT_KEYS_V4 = frozenset(_ROLLOUT_INT_COLUMNS) | {"sealed", "locator"}  # schemas 2-4 (`compat`)
_ROLLOUT_KEYS = ROLLOUT_KEYS_V4 | {"since_at", "since"}
_BIT_OF_CHAR = bytes.maketrans(b"01", b"\x00\x01")   # "0101" -> b"\0\1\0\1"
_CHAR_OF_BIT = bytes.maketrans(b"\x00\x01", b"01")


def _typed_tensor(values: list, column: str) -> torch.Tensor:
    code, dtype = _ROLLOUT_INT_COLUMNS[column]
    if not values:
        return torch.empty(0, dtype=dtype)
    if dtype is torch.int64:
        return _int_tensor(values)
    try:
        return torch.frombuffer(array(code, values), dtype=dtype)
    except OverflowError:
        raise ValueError(f"a rollout {column} does not fit the cut's {dtype} column") from None


def _encode_rollouts(columns: Mapping[str, list]) -> dict:
    """The `rollouts` column and the `rollout_table` of a table's groups, from their
    `state_file.group_columns` (the rollouts already flattened there)."""
    per_group = columns["rollout_n"]
    ns = list(filter(None, per_group))
    chain = itertools.chain.from_iterable
    tracked_gids = itertools.compress(columns["group_id"], per_group)
    table = {"group_id": _typed_tensor(list(chain(map(itertools.repeat, tracked_gids, ns))), "group_id"),
             "index": _typed_tensor(list(chain(map(range, ns))), "index"),
             "attempt": _typed_tensor(columns["rollout_attempt"], "attempt"),
             "policy_version": _typed_tensor(columns["rollout_version"], "policy_version")}
    # sealed bit i of each group is its index i: its binary digits, lowest first
    bits = "".join([format(sealed, f"0{n}b")[::-1]
                    for sealed, n in zip(columns["rollout_sealed"], ns)]).encode()
    table["sealed"] = torch.frombuffer(bytearray(bits.translate(_BIT_OF_CHAR)), dtype=torch.bool) \
        if bits else torch.empty(0, dtype=torch.bool)
    table["locator"] = _bytes_column(columns["rollout_locator"], True)
    table["since_at"], table["since"] = _int_tensor(columns["rollout_since_at"]), _int_tensor(columns["rollout_since"])
    return {"rollouts": _int_tensor([n or NONE for n in per_group]), "rollout_table": table,
            "progress_table": _encode_progress(columns)}


# A rollout with a `Progress` (an unsealed rollout's latest durable prefix) holds its prefix's
# locator and policy version in its `rollout_table` row (an unsealed rollout has no result to
# put there), and a group table has a `progress_table`: per such rollout, in rollout order, its
# `tokens` and `turn` (int64, NONE for none; `turn` is empty when no prefix has a turn, as a
# single-turn trainer's do not).
_PROGRESS_KEYS = frozenset({"tokens", "turn"})


def _encode_progress(columns: Mapping[str, list]) -> dict:
    turns = columns["progress_turn"]
    return {"tokens": _int_tensor(columns["progress_tokens"]),
            "turn": _int_tensor(turns if any(t is not None for t in turns) else [])}


def decode_progress(table: dict, rollouts: list, gids: list, where: str) -> list:
    """`rollouts` (each group's, None when untracked; prefixes still in the rollout slots) with
    each prefix moved into its `Progress`, the tokens and turns from `table`'s `progress_table`."""
    pt = table.get("progress_table")
    if not isinstance(pt, dict) or set(pt) != _PROGRESS_KEYS:
        raise CorruptRecord(f"{where}: bad progress_table layout")
    tokens, turn = pt["tokens"], pt["turn"]
    if not (isinstance(tokens, torch.Tensor) and tokens.dtype == torch.int64 and tokens.dim() == 1
            and isinstance(turn, torch.Tensor) and turn.dtype == torch.int64
            and turn.shape in (tokens.shape, (0,))):
        raise CorruptRecord(f"{where}: the progress columns are not int64 tensors of one length "
                            "(or no turns)")
    tokens_list = tokens.tolist()
    if tokens_list and min(tokens_list) < 0:
        raise CorruptRecord(f"{where}: a prefix has negative tokens")
    turns = [None if v == NONE else v for v in turn.tolist()] if turn.numel() else [None] * len(tokens_list)
    tracked = [r for r in rollouts if r is not None]
    try:
        split = iter(split_prefixes(tracked, [g for g, r in zip(gids, rollouts) if r is not None],
                                    tokens_list, turns, where))
    except ValueError as exc:
        raise CorruptRecord(str(exc)) from None
    return [None if r is None else next(split) for r in rollouts]


def _decode_since(table: dict, rollouts: list, gids: list, where: str) -> list:
    """`rollouts` (prefixes in their `Progress`) with the rollout table's spans in place
    (`state_file.with_since`)."""
    rt = table["rollout_table"]
    at, since = rt["since_at"], rt["since"]
    if not all(isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.dim() == 1 for t in (at, since)) \
            or at.shape != since.shape:
        raise CorruptRecord(f"{where}: the rollout columns 'since_at' and 'since' are not int64 tensors "
                            "of one length")
    tracked = [r for r in rollouts if r is not None]
    try:
        spanned = iter(with_since(tracked, [g for g, r in zip(gids, rollouts) if r is not None],
                                  at.tolist(), since.tolist(), where))
    except ValueError as exc:
        raise CorruptRecord(str(exc)) from None
    return [None if r is None else next(spanned) for r in rollouts]


def rollout_rows(table: dict, n: int, gids: list, phases: list, where: str,
                 keys: frozenset = _ROLLOUT_KEYS) -> list:
    """Each group's `Rollouts` (None for an untracked group) of `table`'s rollout table (its
    columns `keys`: the current schema's by default), validated against its group; a prefix
    still in its unsealed rollout's slots, no span yet."""
    counts_t, rt = table.get("rollouts"), table.get("rollout_table")
    if not isinstance(counts_t, torch.Tensor) or counts_t.dtype != torch.int64 or counts_t.shape != (n,):
        raise CorruptRecord(f"{where}: column 'rollouts' is not an int64 tensor of {n} values")
    if not isinstance(rt, dict) or set(rt) != keys:
        raise CorruptRecord(f"{where}: bad rollout_table layout")
    counts = counts_t.tolist()
    m = sum(c for c in counts if c != NONE)
    cols = {}
    for name, (_, dtype) in _ROLLOUT_INT_COLUMNS.items():
        t = rt[name]
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.shape != (m,):
            raise CorruptRecord(f"{where}: rollout column {name!r} is not a {dtype} tensor of {m} values")
        cols[name] = t.tolist()
    sealed_t = rt["sealed"]
    if not isinstance(sealed_t, torch.Tensor) or sealed_t.dtype != torch.bool or sealed_t.shape != (m,):
        raise CorruptRecord(f"{where}: rollout column 'sealed' is not a bool tensor of {m} values")
    sealed = _tensor_bytes(sealed_t.view(torch.uint8)).translate(_CHAR_OF_BIT)  # b"0110..."
    locators = _decode_str(_read_bytes_column(rt["locator"], m, f"{where} rollout column 'locator'"),
                           where, "rollout locator")
    versions = [None if v == NONE else v for v in cols["policy_version"]]
    out, pos = [], 0
    for i, c in enumerate(counts):
        if c == NONE:
            out.append(None)
            continue
        gid = gids[i]
        if not 1 <= c <= 65535 or phases[i] not in _TRACKS_ROLLOUTS:
            raise CorruptRecord(f"{where}: group {gid} has {c} rollouts in phase {phases[i]}")
        end = pos + c
        if cols["group_id"][pos:end] != [gid] * c or cols["index"][pos:end] != list(range(c)) \
                or min(cols["attempt"][pos:end]) < 0:
            raise CorruptRecord(f"{where}: the rollout rows of group {gid} are not its indices "
                                f"0..{c - 1} with attempts >= 0")
        bits = int(sealed[pos:end][::-1], 2)
        r = Rollouts(tuple(cols["attempt"][pos:end]), bits, tuple(locators[pos:end]),
                     tuple(versions[pos:end]))
        if phases[i] == _PHASES[Owner.REPLAY] and not r.all_sealed():
            raise CorruptRecord(f"{where}: group {gid} is REPLAY but not all its rollouts are sealed")
        out.append(r)
        pos = end
    if pos != m:
        raise CorruptRecord(f"{where}: the rollout table has {m} rows, the groups have {pos}")
    return out


def _decode_str(values: list, where: str, name: str) -> list:
    try:
        return [v.decode() if v is not None else None for v in values]
    except UnicodeDecodeError:
        bad = next(i for i, v in enumerate(values) if v is not None and not _utf8(v))
        raise CorruptRecord(f"{where}: record {bad} has a {name} that is not UTF-8") from None


def _utf8(v: bytes) -> bool:
    try:
        v.decode()
        return True
    except UnicodeDecodeError:
        return False


def table_version(table: dict, file: str, where: str, cut_schema: int) -> int:
    """The version of the table of cut file `file` loaded from `where`, in a cut of schema
    `cut_schema`: the manifest's, or `SchemaMismatch` for a table of another format, of a
    version this code does not read, or stating another version than the manifest's (a table
    of one schema in a cut of another is not ours, whatever the manifest's sha256 says)."""
    if cut_schema not in TAGGED_SCHEMAS:
        key, version = "schema_version", compat.untagged_table_version(table, where, cut_schema)
    else:
        key, version = "format_version", _tagged_version(table, file, where, cut_schema)
    if version != cut_schema:
        raise SchemaMismatch(f"{where}: states {key} {version}, but the cut's manifest states schema "
                             f"version {cut_schema}: a table of another cut, or written by other code")
    return version


def _tagged_version(table: dict, file: str, where: str, cut_schema: int) -> int:
    """The `format_version` of a table that names its format (cut schemas 3 on); one that also
    states NeMo-RL's `schema_version` claims two layouts at once."""
    want, fmt = TABLE_FORMATS[file], table.get("format")
    if fmt is None:
        raise SchemaMismatch(f"{where}: no format name, where a {want} table names it under 'format': "
                             "written by other code (NeMo-RL's files have these names but another layout)")
    if fmt != want:
        raise SchemaMismatch(f"{where}: a table of format {fmt!r}, not {want!r}: written by other code")
    if "schema_version" in table:
        raise SchemaMismatch(f"{where}: a {want} table that also states schema_version "
                             f"{table['schema_version']!r} (NeMo-RL's key, never written in a cut of "
                             f"schema version {cut_schema}): written by other code")
    return check_schema(table.get("format_version"), where, TAGGED_SCHEMAS, f"{want} format_version")


def decode_table(table, file: str, where: str, allowed: frozenset, cut_schema: int) -> list[Group]:
    """Groups from the loaded table of cut file `file` (loaded from `where`), in a cut of schema
    `cut_schema`; `allowed` owners for its phase column. Raises the check's error."""
    if not isinstance(table, dict):
        raise CorruptRecord(f"{where}: expected a dict table, found {type(table).__name__}")
    schema = table_version(table, file, where, cut_schema)
    n = table.get("count")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise CorruptRecord(f"{where}: bad count {n!r}")
    tensors = {}
    for name in _INT_COLUMNS:
        t = table.get(name)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.shape != (n,):
            raise CorruptRecord(f"{where}: column {name!r} is not an int64 tensor of {n} values")
        tensors[name] = t
    phase = table.get("phase")
    if not isinstance(phase, torch.Tensor) or phase.dtype != torch.int8 or phase.shape != (n,):
        raise CorruptRecord(f"{where}: column 'phase' is not an int8 tensor of {n} values")
    cols = {name: t.tolist() for name, t in tensors.items()}
    phases = phase.tolist()
    gids = cols["group_id"]
    allowed_codes = {_PHASES[o] for o in allowed}
    if n and not set(phases) <= allowed_codes:
        i = next(i for i, p in enumerate(phases) if p not in allowed_codes)
        raise CorruptRecord(f"{where}: group {gids[i]} has phase {phases[i]}, which does not "
                            "belong in this file")
    if n and (min(gids) < 0 or min(cols["idx"]) < 0):
        i = next(i for i in range(n) if gids[i] < 0 or cols["idx"][i] < 0)
        raise CorruptRecord(f"{where}: group {gids[i]} has a negative group id or idx "
                            f"({cols['idx'][i]})")
    for name in _OPTIONAL_INT:
        vals = cols[name]
        if NONE in vals:
            cols[name] = [None if v == NONE else v for v in vals]
    steps = cols["target_step"]
    if None in steps:
        for i in itertools.compress(range(n), map(operator.is_, steps, itertools.repeat(None))):
            if phases[i] in (_PHASES[Owner.ADMITTED], _PHASES[Owner.REPLAY]):
                raise CorruptRecord(f"{where}: group {gids[i]} is {_PHASE_OWNERS[phases[i]].name} "
                                    "but has no target_step")
    tasks = _read_bytes_column(table.get("task_name"), n, f"{where} column 'task_name'")
    fps = _read_bytes_column(table.get("fingerprint"), n, f"{where} column 'fingerprint'")
    locs = _read_bytes_column(table.get("locator"), n, f"{where} column 'locator'")
    tasks = _decode_str(tasks, where, "task_name")
    locs = _decode_str(locs, where, "locator")
    owners = list(map(_PHASE_OWNERS.__getitem__, phases))
    if schema == SCHEMA_VERSION:
        rollouts = decode_progress(table, rollout_rows(table, n, gids, phases, where), gids, where)
        rollouts = _decode_since(table, rollouts, gids, where)
    else:
        rollouts = compat.older_rollouts(table, n, gids, phases, where, schema)
    return list(map(Group, cols["group_id"], cols["idx"], tasks, cols["epoch"], fps, owners,
                    cols["target_step"], cols["policy_version"], locs, cols["replaces"], rollouts))


# -- terminal owners -------------------------------------------------------------------------------
#
# A cut also records which group ids reached a terminal owner (TRAINED or DROPPED), so the state
# read back from it is the fold's state exactly: the tail replayed on top can check
# `admitted(replaces=g)` against a group that was trained or dropped before the cut, and
# messages name a terminal group's owner. The journal keeps one byte per group id; the cut stores
# it run-length encoded (a run per change of owner), so its size follows the number of drops, not
# the length of the history.

_TERMINAL_CODES = (int(Owner.TRAINED), int(Owner.DROPPED))


_RUN = re.compile(rb"\x00+|\x05+|\x06+|[\x01-\x04\x07-\xff]")  # runs of 0/TRAINED/DROPPED


def encode_terminal(codes: bytes | bytearray, sparse: dict[int, int]) -> dict:
    """Run-length encode the terminal owner codes (one byte per group id, 0 = not terminal) and
    the ids beyond the dense table (`sparse`: id -> code)."""
    dense = bytes(codes).rstrip(b"\0")
    values, lengths = array("B"), array("q")
    for m in _RUN.finditer(dense):  # C-speed scan; one Python step per run, not per group
        values.append(dense[m.start()])
        lengths.append(m.end() - m.start())
    ids = sorted(sparse)
    return {"run_codes": torch.frombuffer(values, dtype=torch.uint8) if values else
            torch.empty(0, dtype=torch.uint8),
            "run_lengths": _int_tensor(lengths.tolist()),
            "sparse_ids": _int_tensor(ids),
            "sparse_codes": torch.tensor([sparse[i] for i in ids], dtype=torch.uint8)}


def decode_terminal(obj, where: str, next_group_id: int) -> tuple[bytearray, dict[int, int]]:
    """(dense codes, sparse id -> code) from `encode_terminal`'s dict, validated."""
    if not isinstance(obj, dict) or set(obj) != {"run_codes", "run_lengths", "sparse_ids", "sparse_codes"}:
        raise CorruptRecord(f"{where}: terminal owners: bad layout")
    codes, lengths, ids, scodes = (obj["run_codes"], obj["run_lengths"], obj["sparse_ids"],
                                   obj["sparse_codes"])
    if not (isinstance(codes, torch.Tensor) and codes.dtype == torch.uint8 and codes.dim() == 1
            and isinstance(lengths, torch.Tensor) and lengths.dtype == torch.int64
            and lengths.shape == codes.shape and isinstance(ids, torch.Tensor)
            and ids.dtype == torch.int64 and ids.dim() == 1 and isinstance(scodes, torch.Tensor)
            and scodes.dtype == torch.uint8 and scodes.shape == ids.shape):
        raise CorruptRecord(f"{where}: terminal owners: tensors have the wrong dtype or shape")
    run_codes, run_lengths = codes.tolist(), lengths.tolist()
    if run_codes and (min(run_lengths) <= 0 or not set(run_codes) <= {0, *_TERMINAL_CODES}):
        raise CorruptRecord(f"{where}: terminal owners: a run is empty or holds a non-terminal owner")
    total = sum(run_lengths)
    if total > next_group_id:
        raise CorruptRecord(f"{where}: terminal owners cover {total} group ids, but the next group id "
                            f"is {next_group_id}")
    dense = bytearray(b"".join(map(bytes.__mul__, map(_BYTE.__getitem__, run_codes), run_lengths)))
    sids, scs = ids.tolist(), scodes.tolist()
    if sids and (sids[0] < total or sids[-1] >= next_group_id
                 or not all(map(operator.lt, sids, sids[1:])) or not set(scs) <= set(_TERMINAL_CODES)):
        raise CorruptRecord(f"{where}: terminal owners: sparse ids out of order or range, or a "
                            "non-terminal owner")
    return dense, dict(zip(sids, scs))


_BYTE = [bytes((i,)) for i in range(256)]


# -- the dataset's identity --------------------------------------------------------------------
#
# What the history recorded about the dataset (`State.dataset_size`, `State.row_sample`), so a
# restore from the cut alone checks the dataset as a restore from the journal does. Cuts
# written before it was recorded have no such entry: the state then has no size and no sample.

_SAMPLE_KEYS = {"size", "group_id", "idx", "task_name", "fingerprint"}


def encode_row_sample(size: int | None, sample: Sequence[SampledRow]) -> dict:
    return {"size": NONE if size is None else size,
            "group_id": _int_tensor([r.group_id for r in sample]),
            "idx": _int_tensor([r.idx for r in sample]),
            "task_name": _bytes_column([r.task_name for r in sample], True),
            "fingerprint": _bytes_column([r.fingerprint for r in sample], False)}


def decode_row_sample(obj, where: str) -> tuple[int | None, tuple[SampledRow, ...]]:
    """(dataset size, row sample) from `encode_row_sample`'s dict, validated."""
    if not isinstance(obj, dict) or set(obj) != _SAMPLE_KEYS:
        raise CorruptRecord(f"{where}: bad layout")
    size = obj["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 and size != NONE:
        raise CorruptRecord(f"{where}: dataset size {size!r} is not an integer >= 0")
    gids, idxs = obj["group_id"], obj["idx"]
    if not (isinstance(gids, torch.Tensor) and gids.dtype == torch.int64 and gids.dim() == 1
            and isinstance(idxs, torch.Tensor) and idxs.dtype == torch.int64
            and idxs.shape == gids.shape):
        raise CorruptRecord(f"{where}: columns 'group_id' and 'idx' are not int64 tensors of one length")
    n = gids.numel()
    gid_list, idx_list = gids.tolist(), idxs.tolist()
    if n and (min(gid_list) < 0 or min(idx_list) < 0):
        raise CorruptRecord(f"{where}: a sampled row has a negative group id or idx")
    tasks = _decode_str(_read_bytes_column(obj["task_name"], n, f"{where} column 'task_name'"),
                        where, "task_name")
    fps = _read_bytes_column(obj["fingerprint"], n, f"{where} column 'fingerprint'")
    if None in fps:
        raise CorruptRecord(f"{where}: a sampled row has no fingerprint")
    return (None if size == NONE else size), tuple(map(SampledRow, gid_list, idx_list, tasks, fps))
