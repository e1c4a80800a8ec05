"""Streaming reads: offsets are stream cuts, one per stream, and each micro-batch reads the bytes between
two of them (see ``_StreamReader`` for how Spark 4.0/4.1 and 4.2+ differ)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from pyspark.sql.datasource import DataSourceStreamReader

from rillet_spark.limits import _limited
from rillet_spark.options import _Options
from rillet_spark.planning import RangePartition, _at_least, _partitions, _Piece, _pieces, _split_size
from rillet_spark.reading import _read

try:  # Spark 4.2 and later: Trigger.AvailableNow for Python sources (admission control comes with it)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _AVAILABLE_NOW: tuple = (SupportsTriggerAvailableNow,)
except ImportError:  # Spark 4.0 and 4.1
    _AVAILABLE_NOW = ()


def _cuts(offset: dict) -> dict[str, str]:
    """An offset's cuts (text forms) by stream name. Offsets are ``{"cuts": [cut, ...]}``, one cut per
    stream; ``{"cut": cut}`` is how checkpoints of single-stream queries before several streams hold it."""
    texts = offset["cuts"] if "cuts" in offset else [offset["cut"]]
    return {text.split("|", 1)[0].split("@", 1)[0]: text for text in texts}  # "scope/stream@incarnation|..."


def _offset(cuts: dict[str, str]) -> dict:
    return {"cuts": [cuts[name] for name in sorted(cuts)]}


@contextmanager
def _what_to_do_when_recreated() -> Iterator[None]:
    """A StreamRecreated met by a streaming query says how to go on: the checkpoint's offsets are of the
    deleted stream and will be refused on every restart, so only a new checkpoint reads the new one."""
    from rillet.errors import StreamRecreated

    try:
        yield
    except StreamRecreated as recreated:
        raise StreamRecreated(
            f"{recreated.message}. This query's checkpoint holds offsets of the deleted stream, which every restart "
            "on it meets again. To read the new stream, start the query with a new checkpointLocation: it starts "
            "where starting_position, start_cut or starting_timestamp_ms say (by default the stream's head); with "
            "subscriber, also under a new subscriber name, or after deleting the old one's reader group, which "
            "still names the deleted stream.",
            **recreated.details) from recreated


class _StreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):
    """Offsets are stream cuts, one per stream; each batch ends at the controller's ``next-cut`` after
    its start, brought back to ``max_bytes_per_trigger`` and ``max_events_per_trigger`` when set.

    Spark 4.2 and later pass the start (and the engine's read limit) to ``latestOffset(start, limit)``.
    Spark 4.0 and 4.1 call ``latestOffset()`` with nothing, so the reader keeps the end of the last batch
    itself: the end it last returned, or, after a restart, the end of the batch Spark re-plans or
    commits first (Spark plans the last batch of its offset log when a query restarts, as its own
    simple-reader wrapper relies on). Both signatures are one method with optional arguments; Spark 4.2
    tells them apart by the parameter count.

    A stream added to ``streams`` since the checkpoint joins at its start position (a batch that reads
    nothing of it); one dropped from it is no longer read.
    """

    def __init__(self, options: _Options) -> None:
        self.options = options
        self._last_end: dict | None = None  # the end of the newest batch known to this reader
        self._target: dict[str, dict[int, int]] | None = None  # Trigger.AvailableNow: the tails at its start
        self._started = False

    def _start(self) -> None:
        """Refuse batch-only options and register the subscriber, at the first call rather than in the
        constructor: pyspark's runner calls ``reader.stop()`` in a ``finally`` around the construction,
        so an error raised there ended in an UnboundLocalError after the real message."""
        if self._started:
            return
        o = self.options
        if o.end_cut or o.ending_timestamp_ms is not None:
            raise ValueError("end_cut and ending_timestamp_ms are for batch reads: a streaming query reads "
                             "until it is stopped")
        if o.subscriber:
            self._subscribe()
        self._started = True

    def _subscribe(self) -> None:
        """Register the query's reader group (in the first stream's scope) at its start; an existing group
        is kept as it is."""
        from rillet.models import StreamDataRetention
        from rillet.reader_group import ReaderGroupManager, group_config

        o = self.options
        connection = o.connection()
        ReaderGroupManager(o.streams[0][0], connection).create_reader_group(
            o.subscriber, group_config([o.start(connection, *s) for s in o.streams], automatic_checkpoint_interval_ms=0,
                                       retention_type=StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT))

    def initialOffset(self) -> dict:
        self._start()
        connection = self.options.connection()
        return _offset({f"{scope}/{stream}": self.options.start(connection, scope, stream).to_text()
                        for scope, stream in self.options.streams})

    def getDefaultReadLimit(self):
        """Spark 4.2 and later: the engine's read limit. Its Python API has one limit at a time (no
        composite), so it says only whether the options' limits apply: ``latestOffset`` applies both."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

        o = self.options
        if o.max_events_per_trigger:
            return ReadMaxRows(o.max_events_per_trigger)
        return ReadMaxBytes(o.max_bytes_per_trigger) if o.max_bytes_per_trigger else ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        """Spark 4.2 and later: the streams' tails now, which a query's progress shows as its
        ``latestOffset`` beside the end of the batch it read (``endOffset``): the bytes between them,
        per segment, are the query's backlog (``backlog_bytes``), as Kafka's offsets behind latest."""
        from rillet.stream_cut import StreamCut

        controller = self.options.connection().controller
        tails = {}
        for scope, stream in self.options.streams:
            info = controller.stream_info(scope, stream)
            tails[f"{scope}/{stream}"] = StreamCut.of(scope, stream, info.tail, info.created_at_ms).to_text()
        return _offset(tails)

    def prepareForTriggerAvailableNow(self) -> None:
        """Spark 4.2 and later, ``Trigger.AvailableNow``: the streams' tails now are where the run ends;
        it gets there in batches within the per-trigger limits."""
        controller = self.options.connection().controller
        self._target = {f"{scope}/{stream}": {p.segment.segment_id: p.offset
                                              for p in controller.stream_info(scope, stream).tail}
                        for scope, stream in self.options.streams}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        with _what_to_do_when_recreated():
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict | None, limit: object) -> dict:
        from rillet.stream_cut import StreamCut

        self._start()
        o = self.options
        connection = o.connection()
        starts = _cuts(start or self._last_end or self.initialOffset())
        limited = (limit is None or type(limit).__name__ != "ReadAllAvailable") and bool(
            o.max_bytes_per_trigger or o.max_events_per_trigger)  # 4.0/4.1 give none; else the default limit
        ends, pieces = {}, []
        for scope, stream in o.streams:
            name = f"{scope}/{stream}"
            if name not in starts:  # added since the checkpoint: it joins at its start
                ends[name] = o.start(connection, scope, stream).to_text()
                continue
            cut = connection.controller.next_cut(scope, stream, starts[name])
            ends[name] = StreamCut.of(scope, stream, cut.positions, cut.incarnation).to_text()
            if limited or self._target is not None:
                pieces += _pieces(scope, stream, connection.controller.slices(scope, stream, starts[name],
                                                                              ends[name]).slices, cut.incarnation)
        if self._target is not None:
            pieces = [_before(piece, self._target[f"{piece.scope}/{piece.stream}"]) for piece in pieces]
        if limited:
            pieces = _limited(connection, pieces, o.max_bytes_per_trigger, o.max_events_per_trigger)
        stops = {(p.scope, p.stream, p.segment_id): p.end for p in pieces}
        for name, text in list(ends.items()):
            cut = StreamCut.from_text(text)
            ends[name] = StreamCut.of(cut.scope, cut.stream, [
                p.model_copy(update={"offset": stops.get((cut.scope, cut.stream, p.segment.segment_id), p.offset)})
                for p in cut.positions], cut.incarnation).to_text()
        self._last_end = _offset(ends)
        return self._last_end

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        with _what_to_do_when_recreated():
            return self._partitions(start, end)

    def _partitions(self, start: dict, end: dict) -> list[RangePartition]:
        from rillet.errors import SegmentNotFound, Truncated

        self._start()
        o = self.options
        self._last_end = self._last_end or end
        starts, ranges = _cuts(start), {}
        for name, stop in _cuts(end).items():
            scope, stream = name.split("/", 1)
            if name in starts and (scope, stream) in o.streams:  # else joining (nothing of it yet) or dropped
                ranges[(scope, stream, starts[name], stop)] = self._pieces(scope, stream, starts[name], stop)
        # One partition per segment (each key's events in order) unless min_partitions asks for more.
        max_bytes = _split_size(o, [piece for pieces in ranges.values() for piece in pieces], None)
        partitions = []
        for (scope, stream, begin, stop), pieces in ranges.items():
            try:
                partitions += _partitions(o, pieces, max_bytes)
            except (Truncated, SegmentNotFound) as lost:  # truncated since the slices were listed
                head = self._data_lost(scope, stream, begin, lost)
                partitions += _partitions(o, self._pieces(scope, stream, head, stop), max_bytes)
        return _at_least(partitions, o.min_partitions)

    def _pieces(self, scope: str, stream: str, begin: str, stop: str) -> list[_Piece]:
        """The stream's pieces of the batch from ``begin`` to ``stop``: from the head when retention
        truncated what the query had not read (``fail_on_data_loss``), none when all of it lies below."""
        from rillet.errors import InvalidArgument, SegmentNotFound, Truncated
        from rillet.stream_cut import StreamCut

        controller = self.options.connection().controller
        incarnation = StreamCut.from_text(stop).incarnation
        try:
            return _pieces(scope, stream, controller.slices(scope, stream, begin, stop).slices, incarnation)
        except (Truncated, SegmentNotFound) as lost:
            head = self._data_lost(scope, stream, begin, lost)
        try:
            return _pieces(scope, stream, controller.slices(scope, stream, head, stop).slices, incarnation)
        except (Truncated, SegmentNotFound, InvalidArgument):
            return []  # the stream's part of the batch lies below its head: the next batch goes on

    def _data_lost(self, scope: str, stream: str, start: str, lost: Exception) -> str:
        """Retention truncated bytes this query had not read (it was stopped, or slower than the policy):
        Kafka's failOnDataLoss. By default the query fails, naming the range; with
        ``fail_on_data_loss=false`` it goes on from the stream's head and logs what it skipped."""
        import logging

        from rillet.stream_cut import StreamCut

        cut = self.options.connection().controller.head_cut(scope, stream)
        head = StreamCut.of(scope, stream, cut.positions, cut.incarnation).to_text()
        what = f"{scope}/{stream}: bytes from {start} up to the head {head} were truncated before this query " \
               f"read them ({lost})"
        if self.options.fail_on_data_loss:
            raise RuntimeError(f"{what}. Set fail_on_data_loss=false to go on from the head.")
        logging.getLogger("rillet_spark").warning("skipped %s", what)
        return head

    def read(self, partition: RangePartition) -> Iterator:
        with _what_to_do_when_recreated():
            yield from _read(self.options, partition)

    def commit(self, end: dict) -> None:
        self._last_end = self._last_end or end
        with _what_to_do_when_recreated():
            self._publish(end)

    def _publish(self, end: dict) -> None:
        """With ``subscriber``: the committed end cut becomes the group's retention cut."""
        if self.options.subscriber:
            from rillet.reader_group import ReaderGroup
            from rillet.stream_cut import StreamCut

            o = self.options
            group = ReaderGroup(o.connection(), o.streams[0][0], o.subscriber)
            for name, text in _cuts(end).items():
                if tuple(name.split("/", 1)) in o.streams:
                    group.update_retention_stream_cut(StreamCut.from_text(text))


def _before(piece: _Piece, target: dict[int, int]) -> _Piece:
    """``piece`` ended at the AvailableNow target (the tails when the run began): a segment of the target
    at its offset there, a segment created since (a larger id) where the piece starts; an older segment,
    sealed before the target, keeps its end."""
    if piece.segment_id in target:
        return replace(piece, end=min(piece.end, max(piece.start, target[piece.segment_id])))
    if piece.segment_id > max(target, default=-1):
        return replace(piece, end=piece.start)
    return piece
