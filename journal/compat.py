"""The journal's readers of this project's own pre-release formats: files written before the
current formats open as they did (tests/fixtures/v1 and tests/fixtures/state_file_v1.bin are
what they were kept for), and only older files reach this module. Each current reader branches
here once, where it meets an older format. The older formats it reads, and what replaced them:

- state file format 1 (magic "OWNJST01": format 2's body with the live groups one msgpack map
  of `state.Group` each), met by `state_file.decode` (the magic); replaced by format 2
  ("OWNJST02", the live groups by column) since the state file's column blocks (c91e54a).
- segment headers without a group mark (`UNMARKED`: the reserved bytes left zero), met by
  `format.SegmentHeader.next_group_id` (None: not recorded, so the readers read every segment
  no mark covers); replaced by headers with the mark since marks were added (e649d67).

The cut's older schemas are `snapshot.compat`'s (cuts are the snapshot package's).
"""

from __future__ import annotations

import msgspec

from . import state_file
from .errors import StateFileCorrupt
from .state import Group, State

STATE_FILE_MAGIC_V1 = b"OWNJST01"
# the group mark of a segment header written before marks (`format.SegmentHeader.group_mark`)
UNMARKED = 0


class _StateBodyV1(state_file.Body, array_like=True):
    """State file format 1's body: the same fields, the live groups one `Group` map each."""

    live: list[Group]  # type: ignore[assignment]


_state_decoder_v1 = msgspec.msgpack.Decoder(_StateBodyV1)


def decode_older_state_file(magic: bytes, data: bytes, where: str) -> tuple[State, bytes]:
    """(state, run id) of a state file of format 1 (`magic`, its header's); StateFileCorrupt
    naming `where` when it is torn or damaged, or `magic` is no state file's."""
    if magic != STATE_FILE_MAGIC_V1:
        raise StateFileCorrupt(f"{where}: bad magic {magic!r}, not a journal state file (this code "
                               f"reads {state_file.MAGIC!r} and {STATE_FILE_MAGIC_V1!r})")
    body = state_file.decode_body(_state_decoder_v1, data, where)
    return state_file.state_of(body, {g.group_id: g for g in body.live}), body.run_id
