"""`state`: the owners of every live group at one point of the active history.

The point is the latest committed checkpoint (what `restore` returns), the
end, an LSN, or the committed checkpoint of a step. Strict mode uses
`snapshot.state_at` (the newest valid cut at or before the point plus the
journal tail, exactly as restore builds it); point_in_time folds from LSN 1 up
to the first damage; salvage folds from LSN 1 skipping what cannot be applied.
A cut directory shows the state it holds.
"""

from __future__ import annotations

import sys
from typing import Any

import journal
from journal import Owner, State
from journal.history import NoSuchPoint, checkpoint_markers, restore_point
from journal.identity import hex_line, to_hex
from snapshot import RestoreError, read_cut
from snapshot.state_at import state_at

from ..inspection import Fold
from . import options, render
from .source import InspectError, Source, open_source

HELP = "owners of the live groups at a checkpoint, the end, or an LSN"
DESCRIPTION = (
    "The ownership state at one point of the active history, built as restore builds it "
    "(newest valid cut at or before the point plus the journal tail): counts per owner, "
    "the loader state, the run identity (each key with the first digits of its value's "
    "fingerprint), and every live group with its dataset row and, once its rollout is "
    "finished, its data-plane locator. Trained and dropped groups "
    "are counted, not listed.")
EPILOG = ("examples:\n  journal-inspect state J                        # the latest committed checkpoint\n"
          "  journal-inspect state J --at end\n  journal-inspect state J --at 5120\n"
          "  journal-inspect state J --step 800 --owner admitted,replay\n"
          "  journal-inspect state J --json | jq '.groups | length'")

LIVE = (Owner.RESERVED, Owner.ADMITTED, Owner.REPLAY, Owner.SPARE)


def add_arguments(parser) -> None:
    options.add_all(parser)
    parser.add_argument("--at", default="latest-checkpoint", metavar="POINT",
                        help="latest-checkpoint (default: what restore returns), end, or an LSN")
    parser.add_argument("--step", type=int, metavar="S", help="the committed checkpoint of step S")
    parser.add_argument("--owner", action="append", metavar="OWNER",
                        help="only these owners (repeat or comma-separate): reserved, admitted, "
                             "replay, spare, in_flight")


def parse_at(text: str) -> str | int:
    if text in ("latest-checkpoint", "end"):
        return text
    try:
        lsn = int(text)
    except ValueError:
        raise InspectError(f"--at takes latest-checkpoint, end or an LSN, not {text!r}") from None
    if lsn < 0:
        raise InspectError(f"--at {lsn}: an LSN is 0 or more")
    return lsn


def parse_owners(values: list[str] | None) -> set[Owner] | None:
    if not values:
        return None
    out = set()
    for v in values:
        for name in v.split(","):
            name = name.strip().upper()
            if not name:
                continue
            if name == "IN_FLIGHT":
                out |= {Owner.RESERVED, Owner.ADMITTED}
                continue
            try:
                out.add(Owner[name])
            except KeyError:
                raise InspectError(f"unknown owner {name!r} (owners: "
                                   f"{', '.join(o.name.lower() for o in LIVE)}, in_flight)") from None
    bad = out - set(LIVE)
    if bad:
        raise InspectError(f"--owner {', '.join(o.name.lower() for o in bad)}: only live groups are "
                           "listed (trained and dropped groups are counted, not kept)")
    return out


def jsonable(value: Any) -> Any:
    """A loader state as JSON: tensors by dtype and shape (values when small), bytes as hex."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"bytes": len(value), "hex": value[:32].hex()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "dtype") and hasattr(value, "shape"):  # a tensor
        d = {"tensor": str(value.dtype).removeprefix("torch."), "shape": list(value.shape)}
        if value.numel() <= 16:
            d["values"] = value.tolist()
        return d
    return repr(value)


def _reading_point(src: Source, at, step):
    reader = src.reader
    tolerant = src.mode == "salvage"
    end, committed = checkpoint_markers(reader.records(), tolerant=tolerant)
    try:
        target, target_step = restore_point(at, step, end, committed)
    except NoSuchPoint as exc:
        raise InspectError(f"{exc} (the history read in {src.mode} mode)") from None
    fold = Fold(tolerant=tolerant)
    if target:
        fold.add_all(reader.records(stop_lsn=target))
    return fold.state, target_step, end, None, [], fold.skipped


def compute(src: Source, at, step: int | None) -> dict:
    skipped_commits = []
    if src.kind == "cut":
        cut = read_cut(src.path)
        if isinstance(at, int) and at != cut.lsn:
            raise InspectError(f"{src.path} is a cut at LSN {cut.lsn}; it cannot show LSN {at}")
        if step is not None and step != cut.manifest.checkpoint_step:
            raise InspectError(f"{src.path} is the cut of step {cut.manifest.checkpoint_step}, not {step}")
        state, point_step, end, base, skipped = cut.state, cut.manifest.checkpoint_step, cut.lsn, src.path, []
    elif src.mode != "strict":  # read up to the damage, or around it: fold from LSN 1
        state, point_step, end, base, skipped, skipped_commits = _reading_point(src, at, step)
    else:
        try:
            p = state_at(src.path, at, step=step, reader=src.reader)
        except RestoreError as exc:
            if isinstance(exc, journal.JournalCorrupt):
                raise
            raise InspectError(str(exc)) from None
        state, point_step, end = p.state, p.step, p.end_lsn
        base = p.base.path if p.base is not None else None
        skipped = [{"path": s.path, "reason": s.reason} for s in p.skipped]
    return {"path": src.path, "mode": src.mode, "at": at if step is None else f"step {step}",
            "lsn": state.lsn, "step": point_step, "end_lsn": end, "base_cut": base,
            "skipped_cuts": skipped, "skipped_commits": [s._asdict() for s in skipped_commits],
            "counts": {o.name: state.counts[o] for o in Owner}, "next_group_id": state.next_group_id,
            "identity": to_hex(state.identity),
            "checkpoints": {"committed": {str(k): v for k, v in state.committed_checkpoints.items()},
                            "pending": {str(k): v for k, v in state.pending_checkpoints.items()}},
            "_state": state}


def group_dict(g) -> dict:
    return {"group_id": g.group_id, "owner": g.owner.name, "idx": g.idx, "task_name": g.task_name,
            "epoch": g.epoch, "fingerprint": g.fingerprint.hex() if g.fingerprint else None,
            "target_step": g.target_step, "policy_version": g.policy_version, "locator": g.locator,
            "replaces": g.replaces}


def run(args) -> int:
    src = open_source(args.path, args.mode)
    out = sys.stdout
    at = parse_at(args.at)
    owners = parse_owners(args.owner)
    doc = compute(src, at, args.step)
    st: State = doc.pop("_state")
    groups = [g for g in st.groups() if owners is None or g.owner in owners]
    loader = st.loader.decode() if st.loader is not None else None
    doc["loader_state"] = jsonable(loader)
    doc["owner_filter"] = sorted(o.name for o in owners) if owners else None
    doc["groups"] = [group_dict(g) for g in groups]
    if args.json:
        render.json_document(doc, out)
        return 0
    point = f"LSN {doc['lsn']}" + (f" (checkpoint of step {doc['step']})" if doc["step"] is not None else "")
    lines = render.keyvalues([
        ("source", doc["path"]), ("at", f"{doc['at']} -> {point}"),
        ("active history ends", f"LSN {doc['end_lsn']}"),
        ("built from", (f"cut {doc['base_cut']} + journal tail" if doc["base_cut"] else "the journal from LSN 1")
         if src.kind == "journal" else "the cut"),
        ("next group id", doc["next_group_id"]),
        ("loader state", "none" if loader is None else _loader_brief(loader)),
        ("run identity", hex_line(doc["identity"])),
    ])
    for s in doc["skipped_cuts"]:
        lines.append(f"skipped cut {s['path']}: {s['reason']}")
    for s in doc["skipped_commits"]:
        lines.append(f"skipped commit {s['segment']} offset {s['offset']} (LSN {s['lsn']}): {s['message']}")
    lines += ["", "owners"] + render.table(list(doc["counts"]), [list(doc["counts"].values())], indent="  ")
    title = "live groups" + (f" ({', '.join(doc['owner_filter'])})" if owners else "")
    lines += ["", f"{title}: {len(groups)}"]
    if groups:
        lines += render.capped_table(
            ["group", "owner", "idx", "task", "epoch", "target_step", "policy", "locator", "replaces"],
            [[g.group_id, g.owner.name, g.idx, g.task_name, g.epoch, g.target_step, g.policy_version,
              g.locator, g.replaces] for g in groups], args.show_all, indent="  ")
    render.text(lines, out)
    return 0


def _loader_brief(loader: Any) -> str:
    if isinstance(loader, dict):
        keys = list(loader)
        return "dict with keys " + ", ".join(map(str, keys[:8])) + (" ..." if len(keys) > 8 else "")
    return type(loader).__name__
