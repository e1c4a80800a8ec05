"""A streaming query's backlog, as Kafka's source reports offsets behind latest, two ways.

``RilletLagListener`` works on every Spark 4 line: when a query reports its progress, it asks the
controller for the bytes between the end of the batch just read (the progress' ``endOffset``) and the
streams' tails then, per segment. Spark 4.0 and 4.1 do not ask a Python source for its latest offset,
so on them the progress alone cannot show a backlog: its ``latestOffset`` is the batch's end.

``backlog_bytes(progress)`` needs no request, but Spark 4.2 or later: there the source reports the
streams' tails (``reportLatestOffset``), so each source in ``query.lastProgress["sources"]`` carries
the batch's end (``endOffset``) and the tails when it was planned (``latestOffset``), both as stream
cuts. On 4.0 and 4.1 it reads 0.
"""

from __future__ import annotations

import ast
import json
import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.streaming import StreamingQueryListener

from rillet.stream_cut import StreamCut


def backlog_bytes(progress: dict) -> dict[str, int]:
    """Bytes between the end of the last batch and the tails, per ``scope/stream``, for every Rillet
    source of a query's progress (``query.lastProgress``). A segment the batch has not reached yet
    counts from its start; one the tail has left (sealed and read) counts nothing."""
    backlog: dict[str, int] = {}
    for source in progress.get("sources", []):
        end, latest = _cuts(source.get("endOffset")), _cuts(source.get("latestOffset"))
        for name, tail in latest.items():
            reached = {p.segment.segment_id: p.offset for p in end[name].positions} if name in end else {}
            backlog[name] = backlog.get(name, 0) + sum(
                max(0, p.offset - reached.get(p.segment.segment_id, 0)) for p in tail.positions)
    return backlog


@dataclass(frozen=True)
class Lag:
    """A query's backlog when it reported a batch's progress: per segment, the bytes between the end of
    that batch and the segment's tail (Rillet's offsets are bytes where Kafka's count events)."""

    query_id: str
    batch_id: int
    segments: dict[str, dict[int, int]]  # bytes behind by "scope/stream", then by segment id

    @property
    def streams(self) -> dict[str, int]:
        """Bytes behind per ``scope/stream``."""
        return {name: sum(behind.values()) for name, behind in self.segments.items()}

    @property
    def metrics(self) -> dict[str, float]:
        """Kafka's source metrics ``min/avg/maxOffsetsBehindLatest`` in bytes, over the segments of the
        query's Rillet sources."""
        behind = [b for segments in self.segments.values() for b in segments.values()] or [0]
        return {"minBytesBehindLatest": min(behind), "avgBytesBehindLatest": statistics.fmean(behind),
                "maxBytesBehindLatest": max(behind)}


class RilletLagListener(StreamingQueryListener):
    """The lag of every query reading Rillet streams from the controller at ``endpoint``, at each of its
    progress reports, on every Spark 4 line (``spark.streams.addListener(RilletLagListener(url))``).

    ``latest`` holds each query's newest ``Lag`` by query id, ``on_lag`` (optional) is called with each,
    and each is logged on the ``rillet_spark`` logger at INFO. A measurement costs one controller
    request per stream of the query, on Spark's listener thread; one that fails is logged and skipped,
    as a monitor must not stop at an unreachable controller.
    """

    def __init__(self, endpoint: str, on_lag: Callable[[Lag], None] | None = None) -> None:
        from rillet.connection import Connection

        self.controller = Connection(endpoint).controller
        self.on_lag = on_lag
        self.latest: dict[str, Lag] = {}

    def measure(self, progress: dict) -> Lag | None:
        """The lag now behind the batch of ``progress`` (an event's or ``query.lastProgress``); None for a
        query without a Rillet source."""
        segments: dict[str, dict[int, int]] = {}
        for source in progress["sources"]:
            for name, end in _cuts(source.get("endOffset")).items():
                behind = segments.setdefault(name, {})
                for piece in self.controller.slices(end.scope, end.stream, end.to_text()).slices:
                    segment_id = piece.segment.segment_id
                    behind[segment_id] = behind.get(segment_id, 0) + piece.end_offset - piece.start_offset
        return Lag(str(progress["id"]), progress["batchId"], segments) if segments else None

    def onQueryStarted(self, event) -> None:
        """Nothing to measure before a batch ends."""

    def onQueryProgress(self, event) -> None:
        try:
            lag = self.measure(event.progress)
        except Exception:
            logging.getLogger("rillet_spark").warning("no lag for query %s", event.progress.id, exc_info=True)
            return
        if lag is None:
            return
        self.latest[lag.query_id] = lag
        logging.getLogger("rillet_spark").info("query %s, batch %d: bytes behind %s", lag.query_id, lag.batch_id,
                                               lag.streams)
        if self.on_lag:
            self.on_lag(lag)

    def onQueryTerminated(self, event) -> None:
        """A stopped query keeps its last lag in ``latest``: how far behind it stopped."""


def _cuts(offset) -> dict[str, StreamCut]:
    """The cuts of a Rillet source offset as the progress gives it; none for another source's or for
    none (a first batch's ``startOffset``). A listener's progress and ``lastProgress`` on 4.3 hold JSON;
    ``lastProgress`` on 4.0 (pyspark 4.0.5) holds the repr of the parsed JSON (``"{'cuts': [...]}"``,
    ``"None"``), read as a Python literal (never evaluated). Text that is neither raises ValueError: a lag read from
    it would be wrong, not empty."""
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            try:
                offset = ast.literal_eval(offset)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise ValueError(f"a source offset in the progress is neither JSON nor a Python literal: "
                                 f"{offset[:200]!r}") from None
    if not isinstance(offset, dict) or not ("cuts" in offset or "cut" in offset):
        return {}
    cuts = [StreamCut.from_text(text) for text in (offset["cuts"] if "cuts" in offset else [offset["cut"]])]
    return {f"{cut.scope}/{cut.stream}": cut for cut in cuts}
