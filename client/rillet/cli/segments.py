"""``rillet stream segments|scale|rates|cut|truncate``: a stream's key space over time, moving it by
hand, and why it has (not) scaled by itself.

``segments`` draws the last epochs as rows over the key space [0, 1), so splits and merges show at a
glance. Segments are named by their number (the low 32 bits of the id; the epoch that created
them is the high 32 bits), as Pravega names them ``number.#epoch.E``.
"""

from __future__ import annotations

import argparse
import json
import time

from rillet.cli.data import accept_relative_times, parse_time_ms, positive_int, resolve_cut
from rillet.cli.format import counted, describe_scaling
from rillet.connection import Connection
from rillet.errors import InvalidArgument
from rillet.keyspace import KeyRange, covers_exactly, merge_adjacent, split_evenly
from rillet.models import SegmentRange, StreamRates
from rillet.names import split_scoped_name
from rillet.stream_cut import Ordering, StreamCut, compare_positions
from rillet.units import human_bytes, human_duration, rounded_duration, short_duration

DIAGRAM_WIDTH = 64  # columns for the key space [0, 1)
SCALE_WAIT_S = 60.0  # how long ``scale`` waits for the new epoch before reporting it still in progress


def epoch_history(connection: Connection, scope: str, stream: str, epochs: int) -> dict[int, list[SegmentRange]]:
    """Epoch -> its segments, for the last ``epochs`` epochs (walks predecessors back from the current
    segments, so the cost is bounded by the segments of those epochs)."""
    info = connection.controller.stream_info(scope, stream)
    first = max(0, info.current_epoch - epochs + 1)
    known: dict[int, SegmentRange] = {s.segment_id: s for s in info.current_segments}
    sealed_in: dict[int, int] = {}  # segment id -> the epoch whose scale sealed it
    pending = list(known.values())
    while pending:
        segment = pending.pop()
        if segment.epoch <= first:
            continue  # its predecessors were sealed before the window
        for predecessor in connection.controller.predecessors(scope, stream, segment.segment_id):
            sealed_in[predecessor.segment_id] = segment.epoch
            if predecessor.segment_id not in known:
                known[predecessor.segment_id] = predecessor
                pending.append(predecessor)
    return {e: sorted((s for s in known.values() if s.epoch <= e < sealed_in.get(s.segment_id, info.current_epoch + 1)),
                      key=lambda s: s.low)
            for e in range(first, info.current_epoch + 1)}


def draw_epoch(segments: list[SegmentRange], epoch: int, width: int = DIAGRAM_WIDTH) -> str:
    """One row: ``|`` at every boundary, each segment's number centred, ``=`` for segments this epoch
    created and ``-`` for those carried over from an earlier one."""
    row = []
    for s in segments:
        start, end = round(s.low * width), round(s.high * width)
        span = max(end - start - 1, len(str(s.number)))
        row.append("|" + str(s.number).center(span, "=" if s.epoch == epoch else "-"))
    return "".join(row) + "|"


def stream_segments(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    history = epoch_history(Connection(args.endpoint), scope, stream, args.epochs)
    if args.json:
        print(json.dumps({"stream": args.stream, "epochs": [
            {"epoch": e, "segments": [{"segment_id": s.segment_id, "number": s.number, "low": s.low, "high": s.high,
                                       "created_in_epoch": s.epoch == e} for s in segments]}
            for e, segments in history.items()]}, sort_keys=True))
        return
    label = max(len(str(e)) for e in history) + 7  # "epoch N "
    lines = ["key".ljust(label) + "0.0".ljust(DIAGRAM_WIDTH - 2) + "1.0"]
    lines += [f"epoch {e}".ljust(label) + draw_epoch(segments, e) for e, segments in history.items()]
    current = history[max(history)]
    lines.append("")
    lines.append("= created in that epoch, - carried over; current segments:")
    lines += [f"  {s.number:>4}  id {s.segment_id:<20} [{s.low:.4f}, {s.high:.4f})" for s in current]
    print("\n".join(lines))


def _scale_plan(current: list[SegmentRange], args: argparse.Namespace) -> tuple[list[int], list[tuple[float, float]]]:
    """The segments to seal and the ranges replacing them, for ``--split N --into K`` or ``--merge A B ...``."""
    by_number = {s.number: s for s in current}
    by_id = {s.segment_id: s for s in current}

    def find(name: int) -> SegmentRange:
        segment = by_id.get(name) or by_number.get(name)
        if segment is None:
            raise InvalidArgument(f"no current segment {name} (current: {', '.join(str(n) for n in sorted(by_number))})")
        return segment

    if args.split is not None:
        if args.into < 2:
            raise InvalidArgument("--into takes 2 or more parts")
        segment = find(args.split)
        return [segment.segment_id], [(r.low, r.high) for r in split_evenly(segment.low, segment.high, args.into)]
    merged = sorted({find(n).segment_id: find(n) for n in args.merge}.values(), key=lambda s: s.low)
    if len(merged) < 2:
        raise InvalidArgument("--merge needs at least two different segments")
    ranges = [KeyRange(s.low, s.high) for s in merged]
    if not covers_exactly(ranges, merged[0].low, merged[-1].high):
        raise InvalidArgument("--merge takes neighbouring segments (together one contiguous key range)")
    whole = merge_adjacent(ranges)[0]
    return [s.segment_id for s in merged], [(whole.low, whole.high)]


def stream_scale(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    current = connection.controller.current_segments(scope, stream)
    seal, ranges = _scale_plan(current, args)
    status = connection.controller.scale_stream(scope, stream, seal, ranges)
    deadline = time.monotonic() + SCALE_WAIT_S
    while status.status != "DONE" and time.monotonic() < deadline:
        time.sleep(0.5)
        status = connection.controller.scale_status(scope, stream, status.epoch)
    data = {"stream": args.stream, "epoch": status.epoch, "status": status.status, "sealed": seal,
            "new_ranges": [list(r) for r in ranges]}
    sealed = ", ".join(str(segment.number) for segment in current if segment.segment_id in seal)
    text = (f"{args.stream}: epoch {status.epoch} ({status.status}): sealed segment {sealed}; "
            f"{len(ranges)} new: " + ", ".join(f"[{low:.4f}, {high:.4f})" for low, high in ranges))
    print(json.dumps(data, sort_keys=True) if args.json else text)


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 1000 else f"{value:.1f}"


def _policy_text(rates: StreamRates) -> list[str]:
    """The scaling line(s): the policy, and for an auto-scaled stream its split and merge thresholds."""
    policy = rates.scaling_policy
    if not rates.auto_scaled:
        return [(f"scaling    {describe_scaling(policy)}: does not auto-scale (a fixed number of segments; "
                 f"`rillet stream scale` splits or merges by hand)")]
    unit = rates.unit
    windows = rates.segments[0].windows if rates.segments else []
    split = " or ".join(f"{w.split_above:g} {unit} over {human_duration(w.window_ms)}"
                        for w in windows if w.split_above is not None)
    merge = "/".join(f"{w.merge_below:g}" for w in windows)
    spans = "/".join(human_duration(w.window_ms) for w in windows)
    return [(f"scaling    {describe_scaling(policy)}: auto-scaled by {unit}, target {policy.target_rate} {unit} a "
             f"segment, split in up to {policy.scale_factor}, at least {counted(policy.min_num_segments, 'segment')}"),
            (f"split      a segment over {split} (each once the segment is older than the window), or over "
             f"{rates.append_request_split:g} append requests/s or {rates.waiting_split:g} waiting (appends "
             f"waiting for each other, on average)"),
            (f"merge      two neighbours each under {merge} {unit} over {spans} and under "
             f"{rates.append_request_split / 2:g} append requests/s and {rates.waiting_split / 2:g} waiting")]


def rates_text(rates: StreamRates) -> str:
    """``rillet stream rates`` in text: the policy and its thresholds, the cool-down and mute, what the
    auto-scaler would decide now and its last decision, then each segment's rates window by window."""
    now = rates.now_ms
    lines = [f"stream     {rates.scope}/{rates.stream} ({rates.state.value}, epoch {rates.epoch})", *_policy_text(rates)]
    if rates.auto_scaled:
        mute = (f"; the stream scaled {rounded_duration(now - rates.epoch_created_ms)} ago: left alone "
                f"{short_duration(rates.mute_left_ms)} more" if rates.mute_left_ms else "")
        lines.append(f"cool-down  {human_duration(rates.cooldown_ms)}: a segment younger than that never scales; "
                     f"after a scale the stream is left alone {human_duration(rates.mute_ms)} (mute){mute}")
    lines.append(f"now        {rates.decision_now}")
    last = rates.last_decision
    if last is None:
        lines.append(f"last       none recorded since epoch {rates.epoch} began "
                     f"({rounded_duration(now - rates.epoch_created_ms)} ago)")
    else:
        at = "" if last.epoch is None else f" at epoch {last.epoch}"
        lines.append(f"last       {rounded_duration(now - last.decided_ms)} ago{at}: {last.reason}; {last.outcome}")
    label = 13
    for view in rates.segments:
        s = view.segment
        cooldown = (f"cool-down {short_duration(view.cooldown_left_ms)} left" if view.cooldown_left_ms
                    else "cool-down over")
        if view.next_check_ms is None:
            look = "no look due (an append that crosses a threshold marks it)"
        elif view.next_check_ms <= now:
            look = "looked at on the next tick"
        else:
            look = f"next look in {short_duration(view.next_check_ms - now)}"
        lines += ["", (f"segment {s.number} (id {s.segment_id}) [{s.low:.4f}, {s.high:.4f}): "
                       f"age {short_duration(view.age_ms)}, {cooldown}, {look}")]
        rows = [["window", *(human_duration(w.window_ms) + ("" if w.window_passed else "*") for w in view.windows)],
                ["events/s", *(_rate(w.events_per_s) for w in view.windows)],
                ["KB/s", *(_rate(w.bytes_per_s / 1024) for w in view.windows)],
                ["appends/s", *(_rate(w.append_requests_per_s) for w in view.windows)],
                ["waiting", *(_rate(w.waiting_appends) for w in view.windows)]]
        if rates.auto_scaled:
            rows += [["split above", *("-" if w.split_above is None else f"{w.split_above:g}" for w in view.windows)],
                     ["merge below", *(f"{w.merge_below:g}" for w in view.windows)]]
        widths = [max(len(row[c]) for row in rows) for c in range(1, len(rows[0]))]
        lines += ["  " + row[0].ljust(label) + "  ".join(cell.rjust(width) for cell, width in zip(row[1:], widths))
                  for row in rows]
        lines.append(f"  {view.status}: {view.why}")
    if any(not w.window_passed for v in rates.segments for w in v.windows):
        lines += ["", ("* the segment is not older than this window yet: its split rule waits, and its rates are over "
                       "its life so far")]
    return "\n".join(lines)


def stream_rates(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    rates = Connection(args.endpoint).controller.stream_rates(scope, stream)
    if args.json:
        print(json.dumps(rates.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        print(rates_text(rates))


def stream_cut(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    if (args.where == "at") != (args.time is not None):
        raise InvalidArgument("give a time after `at` (and only there): cut head, cut tail or cut at TIME")
    if args.where == "at":
        at = connection.controller.cut_at_time(scope, stream, args.time)
        cut = StreamCut.of(scope, stream, at.positions, at.incarnation)
    else:
        cut = resolve_cut(connection, scope, stream, args.where)
    if args.json:
        print(json.dumps({"stream": args.stream, "cut": cut.to_text(),
                          "positions": [{"segment_id": p.segment.segment_id, "offset": p.offset}
                                        for p in cut.positions]}, sort_keys=True))
    else:
        print(cut.to_text())


def stream_truncate(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    cut = resolve_cut(connection, scope, stream, args.cut)
    behind = {Ordering.BEFORE: "before the stream's head", Ordering.OVERLAPPING: "before the head for some keys"}.get(
        compare_positions(list(cut.positions), connection.controller.head(scope, stream)))
    if behind:  # said in the user's terms, not as the slices' "start cut after the end cut"
        raise InvalidArgument(f"the cut lies {behind} (the stream is truncated up to there already): truncation "
                              f"only moves forward; `rillet stream cut {args.stream} head` prints the head")
    released = connection.controller.slices(scope, stream, None, cut.to_text()).size_bytes
    connection.controller.truncate_stream(scope, stream, cut.offsets, cut.incarnation)
    data = {"stream": args.stream, "truncated_at": cut.to_text(), "released_bytes": released}
    print(json.dumps(data, sort_keys=True) if args.json
          else f"{args.stream} truncated: {human_bytes(released)} before the cut released")


def register(actions: argparse._SubParsersAction) -> None:
    """Adds segments, scale, rates, cut and truncate to ``rillet stream``."""
    p = actions.add_parser("segments", help="the epoch history drawn over the key space")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.add_argument("--epochs", type=positive_int, default=20, help="how many recent epochs to draw (default 20)")
    p.set_defaults(func=stream_segments)

    p = actions.add_parser("scale", help="split a segment in N, or merge neighbouring segments")
    p.add_argument("stream", help="SCOPE/STREAM")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--split", type=int, metavar="SEGMENT", help="the segment (number or id) to split")
    how.add_argument("--merge", type=int, nargs="+", metavar="SEGMENT", help="neighbouring segments to merge")
    p.add_argument("--into", type=positive_int, default=2, help="with --split: how many parts (default 2)")
    p.set_defaults(func=stream_scale)

    p = actions.add_parser("rates", help="why a stream has (not) scaled: each segment's rates over the auto-scaler's "
                                         "windows, the thresholds, the cool-down left and the last decision")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.set_defaults(func=stream_rates)

    p = actions.add_parser("cut", help="print the head, tail or at-a-time stream cut (for --from/--to/--cut)")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.add_argument("where", choices=["head", "tail", "at"])
    p.add_argument("time", nargs="?", type=parse_time_ms,
                   help="with at: now, -1h (-30s, -15m, -7d), an ISO-8601 time or milliseconds since the epoch")
    accept_relative_times(p)
    p.set_defaults(func=stream_cut)

    p = actions.add_parser("truncate", help="truncate a stream at a stream cut")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.add_argument("--cut", required=True, help="a stream cut (as `rillet stream cut` prints it), or tail")
    p.set_defaults(func=stream_truncate)
