"""Columnar group tables: the contents of rollout_recovery.pt, replay_buffer_metadata.pt
and replacement_reserve.pt.

Integer columns are int64 tensors (`NONE` marks a missing optional value);
string and bytes columns are one uint8 tensor of concatenated bytes plus int64
offsets and a bool `present` mask. Everything loads with
`torch.load(..., weights_only=True)` and no extra globals, and a table of 100k
groups is a handful of tensors rather than 100k pickled dicts.
"""

from __future__ import annotations

from typing import Sequence

import torch

from journal import Group, Owner

from .errors import CorruptRecord, SchemaMismatch
from .manifest import SCHEMA_VERSION

NONE = -(2 ** 63)  # int64 sentinel for "no value"
_INT_COLUMNS = ("group_id", "idx", "epoch", "target_step", "policy_version", "replaces")
_OPTIONAL_INT = ("epoch", "target_step", "policy_version", "replaces")
_PHASES = {Owner.RESERVED: 1, Owner.ADMITTED: 2, Owner.REPLAY: 3, Owner.SPARE: 4}
_PHASE_OWNERS = {v: k for k, v in _PHASES.items()}


def _bytes_column(values: Sequence[bytes | None]) -> dict:
    present = torch.tensor([v is not None for v in values], dtype=torch.bool)
    lengths = [len(v) if v is not None else 0 for v in values]
    offsets = torch.zeros(len(values) + 1, dtype=torch.int64)
    if values:
        offsets[1:] = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
    blob = b"".join(v for v in values if v is not None)
    data = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)
    return {"data": data, "offsets": offsets, "present": present}


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
    if n and (offs[0] != 0 or offs[-1] != data.numel() or any(b < a for a, b in zip(offs, offs[1:]))):
        raise CorruptRecord(f"{where}: offsets are not increasing within the data")
    raw = bytes(data.clone().untyped_storage()) if data.numel() else b""
    pres = present.tolist()
    return [raw[offs[i]:offs[i + 1]] if pres[i] else None for i in range(n)]


def encode_table(groups: Sequence[Group]) -> dict:
    """The table of `groups` (live records), in group-id order."""
    n = len(groups)

    def ints(name: str) -> torch.Tensor:
        vals = [getattr(g, name) for g in groups]
        return torch.tensor([NONE if v is None else v for v in vals], dtype=torch.int64).reshape(n)

    table = {"schema_version": SCHEMA_VERSION, "count": n}
    for name in _INT_COLUMNS:
        table[name] = ints(name)
    table["phase"] = torch.tensor([_PHASES[g.owner] for g in groups], dtype=torch.int8).reshape(n)
    table["task_name"] = _bytes_column([g.task_name.encode() if g.task_name is not None else None
                                        for g in groups])
    table["fingerprint"] = _bytes_column([g.fingerprint for g in groups])
    table["locator"] = _bytes_column([g.locator.encode() if g.locator is not None else None
                                      for g in groups])
    return table


def decode_table(table, where: str, allowed: frozenset) -> list[Group]:
    """Groups from a loaded table; `allowed` owners for its phase column. Raises the check's error."""
    if not isinstance(table, dict):
        raise CorruptRecord(f"{where}: expected a dict table, found {type(table).__name__}")
    if table.get("schema_version") != SCHEMA_VERSION:
        raise SchemaMismatch(f"{where}: schema version {table.get('schema_version')!r}, this code "
                             f"reads {SCHEMA_VERSION}")
    n = table.get("count")
    if not isinstance(n, int) or n < 0:
        raise CorruptRecord(f"{where}: bad count {n!r}")
    cols = {}
    for name in _INT_COLUMNS:
        t = table.get(name)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.shape != (n,):
            raise CorruptRecord(f"{where}: column {name!r} is not an int64 tensor of {n} values")
        cols[name] = t.tolist()
    phase = table.get("phase")
    if not isinstance(phase, torch.Tensor) or phase.dtype != torch.int8 or phase.shape != (n,):
        raise CorruptRecord(f"{where}: column 'phase' is not an int8 tensor of {n} values")
    phases = phase.tolist()
    tasks = _read_bytes_column(table.get("task_name"), n, f"{where} column 'task_name'")
    fps = _read_bytes_column(table.get("fingerprint"), n, f"{where} column 'fingerprint'")
    locs = _read_bytes_column(table.get("locator"), n, f"{where} column 'locator'")
    out = []
    gid_col, idx_col = cols["group_id"], cols["idx"]
    for i in range(n):
        gid = gid_col[i]
        owner = _PHASE_OWNERS.get(phases[i])
        if owner not in allowed:
            raise CorruptRecord(f"{where}: group {gid} has phase {phases[i]}, which does not belong "
                                "in this file")
        if gid < 0 or idx_col[i] < 0:
            raise CorruptRecord(f"{where}: group {gid} has a negative group id or idx ({idx_col[i]})")
        opt = {name: (None if cols[name][i] == NONE else cols[name][i]) for name in _OPTIONAL_INT}
        if owner in (Owner.ADMITTED, Owner.REPLAY) and opt["target_step"] is None:
            raise CorruptRecord(f"{where}: group {gid} is {owner.name} but has no target_step")
        try:
            task = tasks[i].decode() if tasks[i] is not None else None
            loc = locs[i].decode() if locs[i] is not None else None
        except UnicodeDecodeError:
            raise CorruptRecord(f"{where}: group {gid} has a task_name or locator that is not UTF-8") from None
        out.append(Group(gid, idx_col[i], task, opt["epoch"], fps[i], owner, opt["target_step"],
                         opt["policy_version"], loc, opt["replaces"]))
    return out
