"""``rillet rg``, ``rillet txn`` and ``rillet retention``: reader groups, transactions and retention
from a shell, with policies in human terms ("time >= 7d") rather than raw fields."""

from __future__ import annotations

import argparse
import json
import time

from rillet.cli.commands import HELP
from rillet.cli.data import resolve_cut
from rillet.cli.format import counted, describe_retention
from rillet.connection import Connection
from rillet.errors import ReaderGroupNotFound, RilletError, StreamNotFound
from rillet.models import (
    StreamCutBody,
    StreamDataRetention,
    TxnInfo,
    TxnState,
)
from rillet.names import split_scoped_name, validate_scope_name
from rillet.reader_group import ReaderGroupManager, group_config
from rillet.serializers import BytesSerializer
from rillet.stream_cut import StreamCut
from rillet.transaction import TransactionalEventStreamWriter
from rillet.units import human_bytes, human_duration, rounded_duration


def _print(args: argparse.Namespace, data: object, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str) if args.json else text)


# -- reader groups ---------------------------------------------------------------------------------

class ReaderGroupStreamsGone(RilletError):
    """``rg reset`` of a group whose every stream was deleted: nothing is left to read again, so the
    only way on is to delete the group (exit 1, not 3: the group exists)."""

    code, status = "ReaderGroupStreamsGone", 409


def _group(args: argparse.Namespace) -> tuple[ReaderGroupManager, str]:
    scope, name = split_scoped_name(args.group, "reader group")
    return ReaderGroupManager(scope, Connection(args.endpoint)), name


def rg_create(args: argparse.Namespace) -> None:
    groups, name = _group(args)
    retention = StreamDataRetention.NONE
    if args.subscriber:
        retention = (StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT if args.subscriber == "checkpoint"
                     else StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT)
    created = groups.create_reader_group(name, group_config(args.stream, retention_type=retention))
    _print(args, {"group": args.group, "created": created},
           f"reader group {args.group} {'created' if created else 'already exists'}")


def rg_list(args: argparse.Namespace) -> None:
    names = list(Connection(args.endpoint).controller.list_reader_groups(validate_scope_name(args.scope)))
    _print(args, names, "\n".join(names) or "(no reader groups)")


def _segment_rows(groups: ReaderGroupManager, cuts: dict[str, StreamCut], owners: dict[tuple[str, int], str]) -> list[dict]:
    """Per segment the group has yet to finish: where it is (offset), where the segment ends now (end)
    and the lag between, from its position to the tail (one slices request per stream; a successor it
    has not reached yet starts at 0), with the reader that holds it. A stream deleted since (the group
    outlives it, with its positions) has a row per position the group kept, ``gone`` and without end
    or lag: nothing is left to read."""
    rows = []
    for name, cut in cuts.items():
        try:
            pieces = groups.connection.controller.slices(cut.scope, cut.stream, cut.to_text()).slices
        except StreamNotFound:
            rows += [{"stream": name, "segment": p.segment.number, "segment_id": p.segment.segment_id,
                      "range": [p.segment.low, p.segment.high], "offset": p.offset, "end": None, "lag_bytes": None,
                      "owner": owners.get((name, p.segment.segment_id)), "gone": True} for p in cut.positions]
            continue
        for piece in pieces:
            rows.append({"stream": name, "segment": piece.segment.number, "segment_id": piece.segment.segment_id,
                         "range": [piece.segment.low, piece.segment.high], "offset": piece.start_offset,
                         "end": piece.end_offset, "lag_bytes": piece.end_offset - piece.start_offset,
                         "owner": owners.get((name, piece.segment.segment_id)), "gone": False})
    return rows


def _unread(rows: list[dict]) -> int:
    return sum(row["lag_bytes"] for row in rows if not row["gone"])


def _gone_streams(rows: list[dict]) -> list[str]:
    return sorted({row["stream"] for row in rows if row["gone"]})


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in (header, *rows)]


def rg_describe(args: argparse.Namespace) -> None:
    """The group, then a table of its segments (offset, end, lag, owner) like ``kafka-consumer-groups
    --describe``, whether or not a reader is online; silent checkpoints (the SDK's own, taken to cut
    the streams exactly) are not shown as the last checkpoint. The lag is the sum of the rows', read
    once: a second figure read at another moment (or from other positions) would disagree with them."""
    groups, name = _group(args)
    group = groups.get_reader_group(name)
    info = group.info()
    cuts = group.get_stream_cuts()
    readers = groups.connection.controller.reader_statuses(groups.scope, name)
    acknowledged = groups.connection.controller.acknowledged_cuts(groups.scope, name)
    owners = {(s.stream, s.segment.segment_id): r.reader for r in readers for s in r.segments}
    rows = _segment_rows(groups, cuts, owners)
    unread, gone = _unread(rows), _gone_streams(rows)
    last = info.last_checkpoint.name if info.last_checkpoint and not info.last_checkpoint.name.startswith("silent-") \
        else None
    data = {"group": args.group, "generation": info.config.generation,
            "streams": [s.scoped_name for s in info.config.streams], "gone_streams": gone,
            "subscriber": info.config.retention_type.value, "online_readers": info.online_readers,
            "unassigned_segments": info.unassigned_segments, "unread_bytes": unread,
            "outstanding_checkpoints": [c for c in info.outstanding_checkpoints if not c.startswith("silent-")],
            "last_checkpoint": last, "segments": rows,
            "positions": {stream: cut.to_text() for stream, cut in cuts.items()}}
    now_ms = time.time() * 1000
    seen = {r.reader: f"{r.reader} (seen {_ago(now_ms - r.last_seen_ms)})" for r in readers}
    lines = [f"reader group  {args.group} (generation {info.config.generation})",
             f"streams       {', '.join(s + (' (gone)' if s in gone else '') for s in data['streams'])}",
             f"subscriber    {'no' if info.config.retention_type == StreamDataRetention.NONE else info.config.retention_type.value}",
             f"readers       {', '.join(seen.get(r, r) for r in info.online_readers) or '(none online)'}",
             f"unassigned    {counted(info.unassigned_segments, 'segment')}",
             f"lag           {human_bytes(unread)} unread",
             f"checkpoints   last {last or '-'}; outstanding {', '.join(data['outstanding_checkpoints']) or '-'}"]
    if gone:
        lines.append(f"gone          {', '.join(gone)}: deleted since the group read it; `rg reset` reads the "
                     f"other streams again without it{'' if len(gone) < len(cuts) else ', `rg delete` ends the group'}")
    several = len(info.config.streams) > 1
    lines += [""] + _table(
        [*(["STREAM"] if several else []), "SEGMENT", "RANGE", "OFFSET", "END", "LAG", "OWNER"],
        [[*([r["stream"]] if several else []), str(r["segment"]), f"[{r['range'][0]:.2f}, {r['range'][1]:.2f})",
          f"{r['offset']:,}", "gone" if r["gone"] else f"{r['end']:,}",
          "-" if r["gone"] else human_bytes(r["lag_bytes"]), r["owner"] or "-"] for r in rows])
    data["readers"] = [r.model_dump(mode="json") for r in readers]
    data["acknowledged_cuts"] = {f"{a.cut.scope}/{a.cut.stream}": {
        "cut": _cut_text(a.cut), "updated_ms": a.updated_ms, "generation": a.generation} for a in acknowledged}
    for a in acknowledged:
        held = ", ".join(f"{p.segment.number}@{p.offset:,}" for p in a.cut.positions)
        lines.append(f"acknowledged  {a.cut.scope}/{a.cut.stream} {held} ({_ago(now_ms - a.updated_ms)})")
    _print(args, data, "\n".join(lines))


def _lag(groups: ReaderGroupManager, name: str) -> tuple[int, list[str]]:
    """What the group has yet to read, and the streams of it that are gone. The controller's sum fails
    for a group with a stream gone: then the sum of ``describe``'s rows over the other streams."""
    group = groups.get_reader_group(name)
    try:
        return group.unread_bytes(), []
    except StreamNotFound:
        rows = _segment_rows(groups, group.get_stream_cuts(), {})
        return _unread(rows), _gone_streams(rows)


def rg_lag(args: argparse.Namespace) -> None:
    """One line per group: what it has yet to read (a group, or every group of a scope). A group with
    a stream gone shows the lag of the others and names it; every group of a scope is shown, but for
    one deleted since the listing."""
    if "/" in args.target:
        scope, group = split_scoped_name(args.target, "reader group")
        names = [group]
    else:
        scope = validate_scope_name(args.target)
        names = list(Connection(args.endpoint).controller.list_reader_groups(scope))
    groups = ReaderGroupManager(scope, Connection(args.endpoint))
    lags: dict[str, tuple[int, list[str]]] = {}
    for name in names:
        try:
            lags[f"{scope}/{name}"] = _lag(groups, name)
        except ReaderGroupNotFound:
            if "/" in args.target:  # the group asked for: exit 3
                raise
    width = max((len(n) for n in lags), default=0)
    data = {n: b if not gone else {"unread_bytes": b, "gone_streams": gone} for n, (b, gone) in lags.items()}
    lines = [f"{n.ljust(width)}  {human_bytes(b)} unread" + (f" (gone: {', '.join(gone)})" if gone else "")
             for n, (b, gone) in lags.items()]
    _print(args, data, "\n".join(lines) or "(no reader groups)")


def _cut_text(body: StreamCutBody) -> str:
    return StreamCut.of(body.scope, body.stream, list(body.positions), body.incarnation).to_text()


def _ago(ms: float) -> str:
    """``3s ago``, ``2h ago``: rounded down (clocks of different hosts differ)."""
    return f"{rounded_duration(ms)} ago" if ms >= 1000 else "just now"


def rg_reset(args: argparse.Namespace) -> None:
    """The same streams again, each from ``--from`` (head, tail or a stream cut): a new generation.
    A stream deleted since is left out of the new generation (said so); a group with no stream left
    is refused with ReaderGroupStreamsGone, which tells to delete it."""
    groups, name = _group(args)
    group = groups.get_reader_group(name)
    config = group.info().config
    streams, gone = [], []
    for s in config.streams:
        try:
            start = resolve_cut(groups.connection, s.scope, s.stream, args.from_cut)
        except StreamNotFound:
            gone.append(s.scoped_name)
            continue
        streams.append(s.model_copy(update={"start": list(start.positions), "incarnation": start.incarnation}))
    if not streams:
        raise ReaderGroupStreamsGone(f"every stream reader group {args.group} reads is deleted ({', '.join(gone)}): "
                                     f"nothing to read again; delete the group (rillet rg delete {args.group})")
    new = group.reset_reader_group(config.model_copy(update={"streams": streams}))
    _print(args, {"group": args.group, "generation": new.generation, "dropped_streams": gone},
           f"reader group {args.group} reset to {args.from_cut} (generation {new.generation})"
           + (f"; left out {', '.join(gone)} (deleted)" if gone else ""))


def rg_delete(args: argparse.Namespace) -> None:
    groups, name = _group(args)
    if not groups.delete_reader_group(name):  # exit 3, as every delete of what does not exist
        raise ReaderGroupNotFound(f"reader group {args.group} does not exist")
    _print(args, {"group": args.group, "deleted": True}, f"reader group {args.group} deleted")


# -- transactions ----------------------------------------------------------------------------------


def _txn_info_text(info: TxnInfo) -> str:
    text = (f"transaction {info.txn_id} of {info.scope}/{info.stream}: {info.state.value}, epoch {info.epoch}, "
            f"{counted(len(info.segments), 'segment')}")
    if info.state != TxnState.OPEN:  # only an open transaction has a lease that matters
        return text
    now_ms = time.time() * 1000
    lease = ("ended" if info.lease_expiry_ms <= now_ms
             else f"ends in {human_duration(int(info.lease_expiry_ms - now_ms) // 1000 * 1000 or 1000)}")
    return f"{text}, lease {lease}"


def _txn(args: argparse.Namespace):
    scope, stream = split_scoped_name(args.stream)
    writer = TransactionalEventStreamWriter(Connection(args.endpoint), scope, stream, BytesSerializer())
    return writer.get_txn(args.txn_id)


def txn_list(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    txns = list(Connection(args.endpoint).controller.list_transactions(scope, stream))
    _print(args, [t.model_dump(mode="json") for t in txns],
           "\n".join(_txn_info_text(t) for t in txns) or "(no open transactions)")


def txn_info(args: argparse.Namespace) -> None:
    info = _txn(args).info
    _print(args, info.model_dump(mode="json"), _txn_info_text(info))


def txn_abort(args: argparse.Namespace) -> None:
    """Abort an open transaction; one already aborted is reported as such (aborting twice is harmless)."""
    txn = _txn(args)
    if txn.info.state != TxnState.ABORTED:
        txn.abort()
    _print(args, txn.info.model_dump(mode="json"), _txn_info_text(txn.info))


# -- retention -------------------------------------------------------------------------------------


def retention_status(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    info = connection.controller.stream_info(scope, stream)
    retained = connection.controller.slices(scope, stream).size_bytes
    policy = info.configuration.retention_policy
    status = connection.controller.retention_status(scope, stream)
    data = {"stream": args.stream, "policy": describe_retention(policy),
            "retention_policy": policy.model_dump(mode="json") if policy else None, "retained_bytes": retained,
            "head": [{"segment_id": p.segment.segment_id, "offset": p.offset} for p in info.head],
            **status.model_dump(mode="json")}
    lines = [f"stream     {args.stream}", f"policy     {data['policy']}",
             f"retained   {human_bytes(retained)} between head and tail",
             "head       " + ", ".join(f"{p.segment.number}@{p.offset}" for p in info.head)]
    now_ms = time.time() * 1000
    last = status.last_decision
    if last is not None:
        lines.append(f"decision   {last.outcome} {_ago(now_ms - last.decided_ms)}"
                     f"{' at ' + _cut_text(last.cut) if last.cut else ''}: {last.reason}")
    else:  # a stream without a policy is never cycled: it is not waiting for a cycle
        lines.append("decision   none yet (no retention cycle has run)" if policy else
                     "decision   none: the stream has no retention policy, so the retention cycle leaves it alone")
    for sub in status.subscribers:
        state = "" if sub.active is None else (" active," if sub.active else " timed out,")
        lines.append(f"subscriber {sub.group}:{state} lag {human_bytes(sub.lag_bytes)}, "
                     f"acknowledged {_ago(now_ms - sub.updated_ms)} at {_cut_text(sub.cut)}")
    _print(args, data, "\n".join(lines))


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``rg``, ``txn`` and ``retention`` to ``rillet``."""
    rg = commands.add_parser("rg", help=HELP["rg"]).add_subparsers(
        dest="action", required=True)
    p = rg.add_parser("list", help="the reader groups of a scope")
    p.add_argument("scope")
    p.set_defaults(func=rg_list)
    p = rg.add_parser("lag", help="what a group (or every group of a scope) has yet to read, one line each")
    p.add_argument("target", metavar="SCOPE[/GROUP]")
    p.set_defaults(func=rg_lag)
    p = rg.add_parser("create", help="create a reader group over streams (from their heads)")
    p.add_argument("group", help="SCOPE/GROUP")
    p.add_argument("--stream", action="append", required=True, help="SCOPE/STREAM to read (repeatable)")
    p.add_argument("--subscriber", choices=["checkpoint", "manual"],
                   help="a subscriber of consumption-based retention: releases at its checkpoints or at cuts it acknowledges")
    p.set_defaults(func=rg_create)
    for name, fn, help_text in (("describe", rg_describe, "readers, positions, lag and checkpoints"),
                                ("delete", rg_delete, "delete a reader group")):
        p = rg.add_parser(name, help=help_text)
        p.add_argument("group", help="SCOPE/GROUP")
        p.set_defaults(func=fn)
    p = rg.add_parser("reset", help="read the same streams again from head, tail or a cut (a new generation)")
    p.add_argument("group", help="SCOPE/GROUP")
    p.add_argument("--from", dest="from_cut", default="head", help="head (default), tail or a stream cut")
    p.set_defaults(func=rg_reset)

    txn = commands.add_parser("txn", help=HELP["txn"]).add_subparsers(dest="action", required=True)
    p = txn.add_parser("list", help="a stream's open, committing and aborting transactions")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.set_defaults(func=txn_list)
    for name, fn, help_text in (("info", txn_info, "a transaction's state, epoch and lease"),
                                ("abort", txn_abort, "abort an open transaction")):
        p = txn.add_parser(name, help=help_text)
        p.add_argument("stream", help="SCOPE/STREAM")
        p.add_argument("txn_id")
        p.set_defaults(func=fn)

    retention = commands.add_parser("retention", help=HELP["retention"]).add_subparsers(dest="action", required=True)
    p = retention.add_parser("status", help="the policy in human terms, what the stream retains, the last decision "
                                           "and the subscribers' lag")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.set_defaults(func=retention_status)
