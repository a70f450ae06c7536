"""The cut's readers of this project's own pre-release schemas: cuts written before the current
schema (`manifest.SCHEMA_VERSION`, 4) restore and verify as they did (tests/fixtures/v1 holds
cuts of schema 1), and only their tables reach this module. The current reader branches here
once for a table's version (`tables.table_version`) and once for its rollouts
(`tables.decode_table`):

| older cut schema | what its group tables are | replaced by, since |
| --- | --- | --- |
| 1 | their version under NeMo-RL's key `schema_version`; no rollouts (every group all-or-nothing) | schema 2, since cuts carry each rollout (3fcc240) |
| 2 | their version under `schema_version`; the rollout table without prefixes | schema 3, since each table names its own format (`format`, `format_version`; a582f32) |
| 3 | tagged; the rollout table without prefixes (no `progress_table`, and an unsealed rollout with a locator or policy version is corrupt) | schema 4, since `rollout_progress` (3660358) |

The row ledger (`row_ledger.LEDGER_VERSION`, 2) of a cut also has an older version:

| older row ledger | what it is | replaced by, since |
| --- | --- | --- |
| 1 | its rollout figures without the prefixes' `tokens_kept` and `tokens_regenerated` (read as 0: no prefix existed) | version 2, since `rollout_progress` (b36a7fb) |

The journal's older formats (state file, segment headers) are `journal.compat`'s. This module
is imported by `manifest` for `OLDER_SCHEMAS`, so it imports the current modules it reads
with (`manifest`, `tables`: torch) where an older table is met.
"""

from __future__ import annotations

from .errors import CorruptRecord

OLDER_SCHEMAS = frozenset({1, 2, 3})
UNTAGGED_SCHEMAS = frozenset({1, 2})  # their tables' version under `schema_version`
OLDER_LEDGER_VERSIONS = (1,)
_LEDGER_V1_LACKS = ("tokens_kept", "tokens_regenerated")  # of `row_ledger.ROLLOUT_FIGURES`


def untagged_table_version(table: dict, where: str, cut_schema: int) -> int:
    """The version of a group table of a cut of schema `cut_schema` (one of `UNTAGGED_SCHEMAS`)
    loaded from `where`; `SchemaMismatch` for one this code does not read."""
    from .manifest import check_schema
    return check_schema(table.get("schema_version"), where, UNTAGGED_SCHEMAS,
                        f"in a cut of schema {cut_schema}, schema version")


def older_rollouts(table: dict, n: int, gids: list, phases: list, where: str, schema: int) -> list:
    """Each group's `Rollouts` (None for an untracked group) of a group table of an older
    `schema` (its `n` groups `gids`, their `phases`): none in schema 1, and in schemas 2 and 3
    the rollout table with no prefix (`CorruptRecord` for an unsealed rollout with a locator
    or policy version)."""
    if schema == 1:
        return [None] * n
    from .tables import rollout_rows
    rows = rollout_rows(table, n, gids, phases, where)
    for gid, r in zip(gids, rows):
        if r is not None and any(r.locators[k] is not None or r.versions[k] is not None for k in r.unsealed()):
            raise CorruptRecord(f"{where}: group {gid} has an unsealed rollout with a locator "
                                "or policy version")
    return rows


def older_ledger_rollouts(figures):
    """The rollout figures of a row ledger of version 1 as version 2 has them: the prefixes'
    token figures at 0 (no prefix existed then); anything but a dict as it is (the caller
    refuses it)."""
    return {**dict.fromkeys(_LEDGER_V1_LACKS, 0), **figures} if isinstance(figures, dict) else figures
