"""The cut's readers of this project's own pre-release formats: cuts written before the current
schema (`manifest.SCHEMA_VERSION`, 5) restore and verify as they did (tests/fixtures/v1 holds
cuts of schema 1), and only their files reach this module. The current readers branch here
once each: for a table's version (`tables.table_version`), for its rollouts
(`tables.decode_table`) and for a row ledger's rollout figures (`row_ledger.RowLedger.decode`).
The older formats it reads, and what replaced them:

- cut schema 1: group tables with their version under NeMo-RL's key `schema_version` and no
  rollouts (every group all-or-nothing); replaced by schema 2 since cuts carry each rollout
  (3fcc240).
- cut schema 2: the version under `schema_version`, the rollout table without prefixes;
  replaced by schema 3 since each table names its own format (`format`, `format_version`;
  a582f32).
- cut schema 3: tagged tables, the rollout table without prefixes (no `progress_table`, and an
  unsealed rollout with a locator or policy version is corrupt); replaced by schema 4 since
  `rollout_progress` (3660358).
- cut schema 4: the rollout table without the spans of work older weights began (no
  `since_at`, `since`: every sealed rollout and prefix by one version); replaced by schema 5
  since `max_policy_lag` (policy spans).
- row ledger version 1: the rollout figures without the prefixes' `tokens_kept` and
  `tokens_regenerated` (read as 0: no prefix existed); replaced by version 2 since
  `rollout_progress` (b36a7fb).

The journal's older formats (state file, segment headers) are `journal.compat`'s. `manifest`
imports this module for `OLDER_SCHEMAS`, so this one imports the current modules it reads with
(`manifest`, `tables`, which loads torch) only where an older table is met.
"""

from __future__ import annotations

from .errors import CorruptRecord

OLDER_SCHEMAS = frozenset({1, 2, 3, 4})
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
    `schema` (its `n` groups `gids`, their `phases`): none in schema 1, in schemas 2 and 3
    the rollout table with no prefix (`CorruptRecord` for an unsealed rollout with a locator
    or policy version), in schema 4 with prefixes and no spans."""
    if schema == 1:
        return [None] * n
    from .tables import ROLLOUT_KEYS_V4, decode_progress, rollout_rows
    rows = rollout_rows(table, n, gids, phases, where, ROLLOUT_KEYS_V4)
    if schema == 4:
        return decode_progress(table, rows, gids, where)
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
