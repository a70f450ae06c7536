"""The run identity at restore: the identity given now against the one the history recorded at
the restore point (`journal/identity.py` holds the digests and the comparison)."""

from __future__ import annotations

from typing import Mapping

from journal import State
from journal.identity import IdentityChanges, changes

from .errors import IdentityChanged

IDENTITY_POLICIES = ("error", "regenerate", "accept")  # `restore(on_identity_changed=)`


def compare_identity(state: State, given: Mapping[str, bytes] | None, policy: str, where: str,
                     step: int | None) -> tuple[str, IdentityChanges | None]:
    """(`RecoveredState.identity_check`, the changes when there are any) of the restore of
    `state` (the point, of the journal or cut `where`) with the digests `given` now. Raises
    `IdentityChanged` naming the keys that differ when they differ and `policy` is "error".

    Nothing is compared without an identity given ("unchecked") or at LSN 0, where nothing was
    generated to reuse ("nothing_restored"). A history that recorded no identity at the point
    differs from any given one: every key is added (fail closed)."""
    if given is None:
        return "unchecked", None
    if state.lsn == 0:
        return "nothing_restored", None
    diff = changes(state.identity, given)
    if not diff:
        return "same", None
    if policy == "error":
        point = f"LSN {state.lsn}" + (f", the checkpoint of step {step}" if step is not None else "")
        recorded = ("" if state.identity is not None else
                    "; the history recorded no run identity up to that point")
        raise IdentityChanged(
            f"{where}: the run identity given differs from the one recorded at the restore point "
            f"({point}): {diff.describe()}{recorded}. The recovered rollouts and prefixes were "
            "generated under the recorded one: restore with the identity the run recorded, or "
            "with on_identity_changed=\"regenerate\" (generate them again; ownership and the "
            "loader position are kept) or \"accept\" (keep them)", changes=diff)
    return "changed", diff
