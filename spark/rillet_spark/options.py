"""A source's or sink's options, parsed and checked once, before anything is read or written; and where
a read starts and ends (``start``, ``end``), which several options decide between."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PARTITION_BYTES = 64 * 1024 * 1024
DEFAULT_LEASE_MS = 120_000

# What Spark itself adds to a source's or sink's options.
_SPARK_OPTIONS = {"checkpointlocation", "path"}


@dataclass
class _Options:
    endpoint: str
    streams: list[tuple[str, str]]  # (scope, stream), at least one; several only for reads
    encoding: str = "binary"
    start_cut: str | None = None
    end_cut: str | None = None
    starting_position: str = "head"
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    max_bytes_per_trigger: int | None = None
    max_events_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_partition_bytes: int = DEFAULT_PARTITION_BYTES
    s3_endpoint: str | None = None
    subscriber: str | None = None
    sink_id: str | None = None
    checkpoint_location: str | None = None
    lease_ms: int = DEFAULT_LEASE_MS
    event_column: str = "event"
    routing_key_column: str = "routing_key"
    timestamp_column: str = "timestamp"
    store_key_and_time: bool = True

    @classmethod
    def parse(cls, options: dict, write: bool = False) -> _Options:
        given = {k.lower(): v for k, v in options.items()}
        known = {"endpoint", "stream", "scope"} | {f.lower() for f in cls.__dataclass_fields__} - {"checkpoint_location"}
        unknown = sorted(set(given) - known - _SPARK_OPTIONS)
        if unknown:
            raise ValueError(f"the rillet data source has no option {', '.join(map(repr, unknown))}; "
                             f"its options are: {', '.join(sorted(known))}")
        get = given.get
        endpoint = get("endpoint")
        if get("stream") and get("streams"):
            raise ValueError('options "stream" and "streams" both name what to read: give one')
        names = [name.strip() for name in (get("streams") or get("stream") or "").split(",") if name.strip()]
        streams = []
        for name in names:
            scope, stream = name.split("/", 1) if "/" in name else (get("scope"), name)
            if not scope or not stream:
                break
            streams.append((scope, stream))
        if not endpoint or not names or len(streams) != len(names):
            raise ValueError('the rillet data source needs options "endpoint" and "stream" ("scope/stream"; or '
                             '"streams", a comma-separated list of them, for reads)')
        if write and len(streams) > 1:
            raise ValueError('a write goes to one stream: option "stream", not "streams"')
        if len(set(streams)) != len(streams):
            raise ValueError(f'option "streams" names a stream twice: {get("streams")!r}')
        encoding = (get("encoding") or "binary").lower()
        if encoding not in ("binary", "utf-8", "utf8"):
            raise ValueError('option "encoding" is "binary" or "utf-8"')
        starting_position = (get("starting_position") or "head").lower()
        if starting_position not in ("head", "tail"):
            raise ValueError('option "starting_position" is "head" or "tail"')
        starts = [name for name in ("start_cut", "starting_position", "starting_timestamp_ms") if get(name)]
        if len(starts) > 1:
            raise ValueError(f"options {' and '.join(starts)} both say where to start: give one")
        fail_on_data_loss = _boolean(get, "fail_on_data_loss")
        if get("end_cut") and get("ending_timestamp_ms"):
            raise ValueError("options end_cut and ending_timestamp_ms both say where to end: give one")
        parsed = cls(endpoint=endpoint, streams=streams, encoding=encoding,
                     start_cut=get("start_cut"), end_cut=get("end_cut"), starting_position=starting_position,
                     starting_timestamp_ms=_integer(get, "starting_timestamp_ms"),
                     ending_timestamp_ms=_integer(get, "ending_timestamp_ms"),
                     max_bytes_per_trigger=_integer(get, "max_bytes_per_trigger", minimum=1),
                     max_events_per_trigger=_integer(get, "max_events_per_trigger", minimum=1),
                     fail_on_data_loss=fail_on_data_loss,
                     min_partitions=_integer(get, "min_partitions", minimum=1),
                     max_partition_bytes=_integer(get, "max_partition_bytes", minimum=1) or DEFAULT_PARTITION_BYTES,
                     s3_endpoint=get("s3_endpoint"), subscriber=get("subscriber"),
                     sink_id=get("sink_id"), checkpoint_location=get("checkpointlocation"),
                     lease_ms=_integer(get, "lease_ms", minimum=1) or DEFAULT_LEASE_MS,
                     event_column=get("event_column") or "event",
                     routing_key_column=get("routing_key_column") or "routing_key",
                     timestamp_column=get("timestamp_column") or "timestamp",
                     store_key_and_time=_boolean(get, "store_key_and_time"))
        parsed._given_cuts("start_cut")  # a cut naming no stream of the source is an error before any read
        parsed._given_cuts("end_cut")
        return parsed

    @property
    def text(self) -> bool:
        return self.encoding != "binary"

    @property
    def names(self) -> list[str]:
        return [f"{scope}/{stream}" for scope, stream in self.streams]

    @property
    def target(self) -> tuple[str, str]:
        """The stream a write goes to (a write's options name one: ``parse(write=True)``)."""
        return self.streams[0]

    def connection(self):
        from rillet.connection import Connection

        return Connection(self.endpoint)

    def _given_cuts(self, option: str) -> dict:
        """The cuts of ``start_cut`` or ``end_cut`` (comma-separated text forms, each naming its stream),
        by stream name."""
        from rillet.stream_cut import StreamCut

        cuts = {}
        for text in filter(None, (part.strip() for part in (getattr(self, option) or "").split(","))):
            cut = StreamCut.from_text(text)
            name = f"{cut.scope}/{cut.stream}"
            if name not in self.names or name in cuts:
                raise ValueError(f'option "{option}": the cut of {name} is not one per stream of the source '
                                 f"({', '.join(self.names)})")
            cuts[name] = cut
        return cuts

    def start(self, connection, scope: str, stream: str):
        """The cut a stream is read from: its ``start_cut``, the cut at ``starting_timestamp_ms``, or
        head/tail."""
        from rillet.stream_cut import StreamCut

        controller = connection.controller
        given = self._given_cuts("start_cut").get(f"{scope}/{stream}")
        if given is not None:
            return given
        if self.starting_timestamp_ms is not None:
            cut = controller.cut_at_time(scope, stream, self.starting_timestamp_ms)
            return StreamCut.of(scope, stream, cut.positions, cut.incarnation)
        if self.starting_position == "tail":
            info = controller.stream_info(scope, stream)
            return StreamCut.of(scope, stream, info.tail, info.created_at_ms)
        head = controller.head_cut(scope, stream)
        return StreamCut.of(scope, stream, head.positions, head.incarnation)

    def end(self, connection, scope: str, stream: str):
        """The cut a batch read of a stream ends at (None: the tail)."""
        from rillet.stream_cut import StreamCut

        given = self._given_cuts("end_cut").get(f"{scope}/{stream}")
        if given is not None:
            return given
        if self.ending_timestamp_ms is not None:
            cut = connection.controller.cut_at_time(scope, stream, self.ending_timestamp_ms)
            return StreamCut.of(scope, stream, cut.positions, cut.incarnation)
        return None


def _boolean(get, name: str) -> bool:
    value = (get(name) or "true").lower()
    if value not in ("true", "false"):
        raise ValueError(f'option "{name}" is "true" or "false", not {get(name)!r}')
    return value == "true"


def _integer(get, name: str, minimum: int = 0) -> int | None:
    value = get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f'option "{name}" is a whole number, not {value!r}') from None
    if number < minimum:
        raise ValueError(f'option "{name}" is at least {minimum}, not {number}')
    return number
