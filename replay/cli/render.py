"""Rendering for `journal-inspect`: aligned tables, key/value blocks, sizes, capped listings,
and writing one JSON document, JSON lines or text lines to stdout.

Text helpers are pure functions from values to lines; nothing here reads a
journal. Numbers are right-aligned, everything else left-aligned; `None` shows
as `-`. JSON goes through msgspec (fast enough for `log --json` over millions
of events); bytes become hex strings, owners their names, report structs their
fields.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, Sequence, TextIO

import msgspec



def cell(value: Any) -> str:
    """How one value looks in a table."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, indent: str = "",
          right: Sequence[bool] | None = None) -> list[str]:
    """Lines of an aligned table: a header, a rule, one line per row. Columns whose values are
    all numbers are right-aligned unless `right` says otherwise."""
    rows = [list(r) for r in rows]
    n = len(headers)
    if right is None:
        right = [bool(rows) and all(_is_number(r[i]) or r[i] is None for r in rows) for i in range(n)]
    texts = [[cell(v) for v in r] for r in rows]
    widths = [max([len(headers[i])] + [len(t[i]) for t in texts]) for i in range(n)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[i]) if right[i] else v.ljust(widths[i]) for i, v in enumerate(values)]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(list(headers)), indent + "  ".join("-" * w for w in widths)]
    out += [line(t) for t in texts]
    return out


def keyvalues(pairs: Iterable[tuple[str, Any]], *, indent: str = "") -> list[str]:
    """`key: value` lines with the values aligned."""
    pairs = [(k, cell(v)) for k, v in pairs]
    if not pairs:
        return []
    width = max(len(k) for k, _ in pairs) + 1
    return [f"{indent}{(k + ':').ljust(width)} {v}".rstrip() for k, v in pairs]


def size(n: int | None) -> str:
    """Bytes as a human size (binary units)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def id_list(ids, limit: int = 8) -> str:
    """Group ids compactly: runs as `a-b`, at most `limit` runs, then `(+N more)` ids."""
    if not ids:
        return "-"
    runs: list[list[int]] = []
    for x in ids:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit])
    rest = sum(b - a + 1 for a, b in runs[limit:])
    return text + (f" (+{rest} more)" if rest else "")


LIMIT = 20  # items of a listing shown in text output unless --all (JSON always has all)


def capped(items: Iterable[Any], show_all: bool, limit: int = LIMIT) -> tuple[list[Any], int]:
    """(the items to show, how many were left out)."""
    items = list(items)
    if show_all or len(items) <= limit:
        return items, 0
    return items[:limit], len(items) - limit


def more(left_out: int) -> str:
    """The note that replaces what a capped listing left out ('' when nothing was)."""
    return f"... {left_out:,} more (--all shows every one)" if left_out else ""


def capped_lines(lines: Iterable[str], show_all: bool, *, indent: str = "  ") -> list[str]:
    """A listing of one line per item, capped, with the note on a line of its own."""
    shown, left = capped(lines, show_all)
    return shown + ([indent + more(left)] if left else [])


def capped_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], show_all: bool, *,
                 indent: str = "", right: Sequence[bool] | None = None) -> list[str]:
    """`table` of the first rows, then the note of what it left out."""
    shown, left = capped(rows, show_all)
    return table(headers, shown, indent=indent, right=right) + ([indent + more(left)] if left else [])


def joined(items: Iterable[str], show_all: bool, sep: str = ", ") -> str:
    """A listing on one line, capped, the note at its end."""
    shown, left = capped(items, show_all)
    return sep.join(shown) + (f" {more(left)}" if left else "")


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
