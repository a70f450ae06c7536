"""Writing `journal-inspect` output: one JSON document, JSON lines, or text lines, to stdout.

JSON goes through msgspec (fast enough for `log --json` over millions of
events); bytes become hex strings and owners their names.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, TextIO

import msgspec


def _default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


_encoder = msgspec.json.Encoder(enc_hook=_default)


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def json_document(obj: Any, out: TextIO) -> None:
    out.write(msgspec.json.format(_encoder.encode(obj), indent=2).decode())
    out.write("\n")


def json_line(obj: Any, out: TextIO) -> None:
    out.write(_encoder.encode(obj).decode())
    out.write("\n")


def text(lines: Iterable[str], out: TextIO) -> None:
    for line in lines:
        out.write(line)
        out.write("\n")
