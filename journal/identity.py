"""The run identity: what makes recovered generation reusable beyond the dataset (the tokenizer,
the sampling parameters, the prompt template, the reward version), as the journal holds it.

A trainer names its identity as a mapping of str keys to values of the types `fingerprint.py`
encodes (str, int, float, bool, None, bytes, lists, dicts, tensors). The journal keeps, per
key, the value's canonical fingerprint (`digests`): 16 bytes, never the tokenizer or the
template itself. `Journal.open(identity=)` records them (an `identity_recorded` event) when they
differ from those recorded last, so a restart with the same identity writes nothing; the fold
keeps the latest (`State.identity`) and every cut carries it. `replay.restore(identity=)`
compares the identity recorded at the restore point with the one given now (`changes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .fingerprint import fingerprint

SHORT_DIGEST_CHARS = 12  # hex digits of a digest as inspection shows it


def digests(identity: Mapping[str, Any]) -> dict[str, bytes]:
    """Per key of `identity`, the fingerprint of its value, keys sorted. TypeError naming the
    key whose value cannot be fingerprinted, or a key that is not a str."""
    if not isinstance(identity, Mapping):
        raise TypeError(f"identity must be a mapping of str keys to values, got "
                        f"{type(identity).__name__}")
    out = {}
    for key in sorted(identity, key=lambda k: (not isinstance(k, str), str(k))):
        if not isinstance(key, str):
            raise TypeError(f"identity keys must be str, got {key!r} ({type(key).__name__})")
        try:
            out[key] = fingerprint(identity[key])
        except TypeError as exc:
            raise TypeError(f"identity[{key!r}]: {exc}") from None
    return out


def to_hex(identity: Mapping[str, bytes] | None) -> dict[str, str] | None:
    """Digests as text (a cut's manifest, inspection's JSON): each in hex."""
    return {key: d.hex() for key, d in identity.items()} if identity is not None else None


def hex_line(identity: Mapping[str, str] | None) -> str:
    """An identity as `to_hex` shows it, on one line: each key with the first digits of its
    value's fingerprint (what inspection shows)."""
    if identity is None:
        return "none recorded"
    return " ".join(f"{key}={d[:SHORT_DIGEST_CHARS]}" for key, d in identity.items()) or "recorded, no keys"


def from_hex(identity: Mapping[str, str] | None) -> dict[str, bytes] | None:
    """`to_hex`'s digests back; ValueError for a value that is not hex."""
    return {key: bytes.fromhex(d) for key, d in identity.items()} if identity is not None else None


@dataclass(frozen=True)
class IdentityChanges:
    """How the identity given now differs from the one recorded: keys given now that the
    record lacks (`added`), keys recorded that are not given now (`removed`), keys whose value
    differs (`changed`), each sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key that differs, sorted."""
        return tuple(sorted(self.added + self.removed + self.changed))

    def describe(self) -> str:
        """'changed: temperature; added: template' (the non-empty parts)."""
        parts = [f"{what}: {', '.join(keys)}" for what, keys in
                 (("changed", self.changed), ("added", self.added), ("removed", self.removed)) if keys]
        return "; ".join(parts) or "no key differs"


def changes(recorded: Mapping[str, bytes] | None, given: Mapping[str, bytes]) -> IdentityChanges:
    """How digests `given` differ from digests `recorded` (None: nothing recorded, so every
    given key is added)."""
    recorded = recorded or {}
    return IdentityChanges(
        added=tuple(sorted(given.keys() - recorded.keys())),
        removed=tuple(sorted(recorded.keys() - given.keys())),
        changed=tuple(sorted(k for k in given.keys() & recorded.keys() if given[k] != recorded[k])))
