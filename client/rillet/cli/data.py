"""``rillet stream write|read|tail``: events in and out of a stream from a shell.

Events are text, one per line (UTF-8). ``write`` keeps each event's routing key and time with it
(``EventWriterConfig.store_key_and_time``; ``--no-key-and-time`` writes bare events, as the SDK's
default writer does). ``read`` and ``tail`` print one event per line, or with ``--json`` one JSON object
per line (segment, offset, event, routing key and time, null where the writer kept none), so their
output pipes into other tools.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import TextIO

from rillet.connection import Connection
from rillet.errors import InvalidArgument, RilletError
from rillet.names import split_scoped_name
from rillet.reader import EventRead, StreamReader
from rillet.serializers import BytesSerializer
from rillet.stream_cut import StreamCut
from rillet.units import human_bytes
from rillet.writer import EventStreamWriter, EventWriterConfig

UNCONFIRMED_EVENTS = 10_000  # events written but not yet known durable, before ``write`` waits for the oldest
FOLLOW_POLL_MS = 2_000  # how long one read waits at the tail while following (the server long-polls)


class Progress:
    """Events, bytes and rate on one self-overwriting stderr line, drawn only when stderr is a terminal."""

    def __init__(self, verb: str, stream: TextIO | None = None) -> None:
        self.verb = verb
        self.out = stream or sys.stderr
        self.enabled = self.out.isatty()
        self.events = self.bytes = 0
        self._started = time.monotonic()
        self._drawn = 0.0

    def add(self, size: int) -> None:
        self.events += 1
        self.bytes += size
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.2:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.events / max(now - self._started, 1e-3)
        self.out.write(f"\r{self.verb} {self.events} events, {human_bytes(self.bytes)}, {rate:,.0f} events/s ")
        self.out.flush()

    def done(self) -> None:
        if self.enabled and self._drawn:
            self._draw(time.monotonic())
            self.out.write("\n")
            self.out.flush()


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return int(text)


_RELATIVE_TIME = re.compile(r"^-(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# "-1h" is a value, not an option: argparse takes an argument for one when it looks like a negative number
NEGATIVE_OR_RELATIVE = re.compile(r"^-\d+(\.\d+)?(ms|s|m|h|d)?$")


def parse_time_ms(text: str, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from ``now``, ``-1h`` (``-30s``, ``-15m``, ``-7d``: before now), an
    ISO-8601 time (``2026-11-25T01:00:00Z``; without a zone, UTC) or plain milliseconds since the epoch."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    if text == "now":
        return now_ms
    if text.isdigit():
        return int(text)
    relative = _RELATIVE_TIME.match(text)
    if relative:
        return max(0, now_ms - int(relative.group(1)) * _UNIT_MS[relative.group(2)])
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (use now, -1h, -30m, 2026-11-25T01:00:00Z or milliseconds since the epoch)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp() * 1000))


def accept_relative_times(parser: argparse.ArgumentParser) -> None:
    """Let ``-1h`` be an argument's value (argparse would take it for an unknown option)."""
    parser._negative_number_matcher = NEGATIVE_OR_RELATIVE  # argparse's own hook; no option here looks like it


def start_of(connection: Connection, scope: str, stream: str, args: argparse.Namespace) -> StreamCut:
    """Where ``read`` starts: the cut at ``--from-time``, else ``--from``."""
    if args.from_time is not None:
        at = connection.controller.cut_at_time(scope, stream, args.from_time)
        return StreamCut.of(scope, stream, at.positions, at.incarnation)
    return resolve_cut(connection, scope, stream, args.from_cut or "head")


def resolve_cut(connection: Connection, scope: str, stream: str, text: str) -> StreamCut:
    """``head``, ``tail`` or a stream cut in text form (as ``rillet stream cut`` prints it), with the
    stream incarnation it is of (a cut of another one is then refused: StreamRecreated)."""
    if text == "head":
        head = connection.controller.head_cut(scope, stream)
        return StreamCut.of(scope, stream, head.positions, head.incarnation)
    if text == "tail":
        info = connection.controller.stream_info(scope, stream)
        return StreamCut.of(scope, stream, info.tail, info.created_at_ms)
    try:
        cut = StreamCut.from_text(text)
    except InvalidArgument as e:  # e.g. "nonsense": it would be reported as a bad SCOPE/STREAM
        raise InvalidArgument(f"not a cut: {text!r} (use head, tail or a stream cut as `rillet stream cut` "
                              "prints it)") from e
    if (cut.scope, cut.stream) != (scope, stream):  # before its shape: the mistake is the stream
        raise InvalidArgument(f"the cut is of {cut.scope}/{cut.stream}, not of {scope}/{stream}")
    return cut.validate()


def _events_to_write(args: argparse.Namespace) -> Iterator[tuple[int, str, str | None]]:
    """(its number in the input, event, routing key) from the arguments, or from stdin one per line."""
    lines: Iterable[str] = args.events if args.events else (line.rstrip("\r\n") for line in sys.stdin)
    for number, line in enumerate(lines, 1):
        if not args.events and not line:
            continue  # a blank line of input is no event
        key = args.key
        if args.key_field:
            try:
                value = json.loads(line)[args.key_field]
            except (ValueError, TypeError, KeyError) as e:
                raise InvalidArgument(f"event {number} is not a JSON object with field {args.key_field!r}: "
                                      f"{line[:80]!r}") from e
            key = value if isinstance(value, str) else json.dumps(value)
        yield number, line, key


def _of_input_event(number: int, error: RilletError) -> RilletError:
    """The error, naming the event of the input it is about (a line of stdin, or an argument)."""
    return type(error)(f"event {number} of the input: {error.message}", **error.details)


def stream_write(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    progress = Progress("wrote")
    # (the event's number in the input, its future): at most UNCONFIRMED_EVENTS, so memory stays flat for any input
    unconfirmed: deque[tuple[int, Future]] = deque()

    def confirm(number: int, future: Future) -> None:
        """Raises the typed error of an event that was not stored (or whose outcome is unknown), naming it."""
        try:
            future.result()
        except RilletError as e:
            raise _of_input_event(number, e) from e

    try:
        config = EventWriterConfig(store_key_and_time=args.key_and_time)
        with EventStreamWriter(connection, scope, stream, BytesSerializer(), config) as writer:
            for number, event, key in _events_to_write(args):
                payload = event.encode("utf-8")
                try:
                    unconfirmed.append((number, writer.write_event(payload, routing_key=key)))
                except RilletError as e:  # refused at once: too large, or the writer's buffer full
                    raise _of_input_event(number, e) from e
                progress.add(len(payload))
                if len(unconfirmed) > UNCONFIRMED_EVENTS:
                    confirm(*unconfirmed.popleft())
            for number, future in unconfirmed:  # in the block: its own typed error, not EventsNotAcknowledged
                confirm(number, future)
    finally:
        progress.done()  # ends the progress line, so an error is printed on a line of its own
    _print(args, {"stream": args.stream, "events": progress.events, "bytes": progress.bytes},
           f"wrote {progress.events} event{'' if progress.events == 1 else 's'} ({human_bytes(progress.bytes)}) "
           f"to {args.stream}")


def _print(args: argparse.Namespace, data: object, text: str) -> None:
    print(json.dumps(data, sort_keys=True) if args.json else text)


def _print_event(args: argparse.Namespace, read: EventRead[bytes]) -> None:
    text = read.event.decode("utf-8", errors="backslashreplace")
    if args.json:
        print(json.dumps({"segment_id": read.pointer.segment_id, "offset": read.pointer.offset, "event": text,
                          "routing_key": read.routing_key, "timestamp_ms": read.timestamp_ms}), flush=True)
    else:
        print(text, flush=True)


def _end_offsets(connection: Connection, scope: str, stream: str, start: str, end: str) -> dict[int, int]:
    """Segment id -> the offset where reading stops, for every segment with bytes between two cuts."""
    slices = connection.controller.slices(scope, stream, start, end).slices
    return {s.segment.segment_id: s.end_offset for s in slices if s.start_offset < s.end_offset}


def stream_read(args: argparse.Namespace) -> None:
    """Events from a cut (the head by default) to another (the tail as it was when reading began).

    It stops once every segment is read up to the end cut, so appends racing the read do not keep it going."""
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    start = start_of(connection, scope, stream, args)
    end = resolve_cut(connection, scope, stream, args.to_cut)
    ends = _end_offsets(connection, scope, stream, start.to_text(), end.to_text())
    unfinished = set(ends)
    reader = StreamReader(connection, scope, stream, BytesSerializer(), start)
    progress = Progress("read")
    try:
        while unfinished and (args.max_events is None or progress.events < args.max_events):
            read = reader.read_next_event()
            if read is None:
                break  # the tail of every segment: the end cut's bytes are gone (truncated since) or all read
            segment, offset = read.pointer.segment_id, read.pointer.offset
            if offset >= ends.get(segment, 0):
                continue  # a segment after the end cut
            _print_event(args, read)
            progress.add(len(read.event))
            if offset + read.pointer.length >= ends[segment]:
                unfinished.discard(segment)
    finally:
        progress.done()  # ends the progress line, so an error is printed on a line of its own


def stream_tail(args: argparse.Namespace) -> None:
    """Events appended from now (or from ``--from``); with ``-f``, keep waiting for more until interrupted."""
    scope, stream = split_scoped_name(args.stream)
    connection = Connection(args.endpoint)
    reader = StreamReader(connection, scope, stream, BytesSerializer(),
                          resolve_cut(connection, scope, stream, args.from_cut))
    shown = 0
    while args.max_events is None or shown < args.max_events:  # Ctrl-C ends it: exit 130, no traceback (cli.main)
        read = reader.read_next_event(timeout_ms=FOLLOW_POLL_MS if args.follow else 0)
        if read is None:
            if not args.follow or not reader.positions():
                return  # at the tail without following, or the stream is sealed and read to its end
            continue
        _print_event(args, read)
        shown += 1


def register(actions: argparse._SubParsersAction) -> None:
    """Adds write, read and tail to ``rillet stream``."""
    p = actions.add_parser("write", help="write events: the arguments, or stdin one per line")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.add_argument("events", nargs="*", help="events to write (none: read stdin, one event per line)")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--key", help="routing key of every event (default: none, spread over segments)")
    keys.add_argument("--key-field", help="events are JSON objects; route each by this field's value")
    p.add_argument("--no-key-and-time", dest="key_and_time", action="store_false",
                   help="write bare events (default: each keeps its routing key and time, shown by read --json)")
    p.set_defaults(func=stream_write)

    p = actions.add_parser("read", help="print events between two cuts (head to tail by default)")
    p.add_argument("stream", help="SCOPE/STREAM")
    start = p.add_mutually_exclusive_group()
    # no default here: argparse lets an exclusive option through when its value is the default
    start.add_argument("--from", dest="from_cut", help="head (default), tail or a stream cut")
    start.add_argument("--from-time", type=parse_time_ms, metavar="TIME",
                       help="from the cut at a time: every event appended since (now, -1h, ISO-8601, ms)")
    accept_relative_times(p)
    p.add_argument("--to", dest="to_cut", default="tail", help="tail (default: as it is now), head or a stream cut")
    p.add_argument("--max-events", type=positive_int, help="stop after this many events")
    p.set_defaults(func=stream_read)

    p = actions.add_parser("tail", help="print events as they are appended")
    p.add_argument("stream", help="SCOPE/STREAM")
    p.add_argument("-f", "--follow", action="store_true", help="keep waiting for new events (Ctrl-C stops)")
    p.add_argument("--from", dest="from_cut", default="tail", help="tail (default), head or a stream cut")
    p.add_argument("--max-events", type=positive_int, help="stop after this many events")
    p.set_defaults(func=stream_tail)
