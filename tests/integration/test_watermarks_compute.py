"""Watermarks against moto (controlplane.watermarks): writer marks, the computed watermark, its stream.

Two writers at different speeds note increasing times at their positions. compute() appends a
watermark only when it moves forward: the lowest time strictly increases and the cut (the upper bound
of the writers' positions and of the previous watermark's cut) never moves back; lower is the lowest
active writer's time and upper the highest. A writer silent for longer than the stream's
timestamp_aggregation_timeout_ms is dropped and no longer holds the watermark back.
"""

from __future__ import annotations

import json

import pytest

from controlplane.models import WriterMarkRecord, stream_pk
from controlplane.service import Controller
from controlplane.watermarks import Watermark
from rillet.errors import InvalidArgument
from rillet.framing import frame, unframe
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import mark_stream_name, segment_name, txn_segment_token
from rillet.stream_cut import Ordering, compare_positions

EVENT = frame(b"m" * 96)  # 100 bytes
TIMEOUT_MS = 5_000  # for the test of dropped writers (it passes explicit times to compute: no sleeping)
LONG_MS = 120_000  # elsewhere: no writer is dropped however slow the machine is


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


class Setup:
    def __init__(self, controller: Controller, scope: str, segments: int = 2, timeout_ms: int = LONG_MS) -> None:
        self.c, self.scope = controller, scope
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(segments), timestamp_aggregation_timeout_ms=timeout_ms))
        self.numbers: dict[tuple[str, int], int] = {}
        self.appended: list[Watermark] = []

    def ids(self) -> list[int]:
        return [s.segment_id for s in self.c.streams.current_segments(self.scope, "s")]

    def write(self, writer: str, sid: int, n: int) -> None:
        for _ in range(n):
            number = self.numbers.get((writer, sid), 0)
            self.c.segments.append(segment_name(self.scope, "s", sid), writer, number, 1, EVENT)
            self.numbers[(writer, sid)] = number + 1

    def note(self, writer: str, t: int, offsets: dict[int, int]) -> None:
        self.c.watermarks.note_time(self.scope, "s", writer, t, offsets)

    def compute(self, now: int | None = None) -> Watermark | None:
        watermark = self.c.watermarks.compute(self.scope, "s", now)
        if watermark is not None:
            if self.appended:
                previous = self.appended[-1]
                assert watermark.lower_ms > previous.lower_ms
                assert compare_positions(watermark.cut, previous.cut) in (Ordering.AFTER, Ordering.EQUAL)
            self.appended.append(watermark)
        return watermark

    def heard(self, *writers: str) -> int:
        """When the latest of ``writers`` noted time (the marks' clock)."""
        return max(self.mark(w).updated_ms for w in writers)

    def mark(self, writer: str) -> WriterMarkRecord:
        return WriterMarkRecord.get(stream_pk(self.scope, "s"), f"mark#{writer}", consistent_read=True)

    def marks(self) -> set[str]:
        return {m.writer for m in WriterMarkRecord.query(stream_pk(self.scope, "s"),
                                                         WriterMarkRecord.sk.startswith("mark#"),
                                                         consistent_read=True)}

    def stored(self) -> list[dict]:
        """The watermarks as appended to the internal _MARK stream (length-prefixed JSON)."""
        data = self.c.segments.read(segment_name(self.scope, mark_stream_name("s"), 0), 0).data
        events, consumed = unframe(data)
        assert consumed == len(data)
        return [json.loads(e.payload) for e in events]


def _offsets(watermark: Watermark) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in watermark.cut}


def test_watermarks_follow_the_slowest_writer_and_move_only_forward(controller, unique):
    setup = Setup(controller, unique)
    s0, s1 = setup.ids()
    assert setup.compute() is None  # nobody noted time yet
    # fast writer A on segment 0, slow writer B on segment 1 (times in ms of event time)
    setup.write("A", s0, 2)
    setup.note("A", 1_000, {s0: 200, s1: 0})
    setup.write("B", s1, 1)
    setup.note("B", 500, {s0: 0, s1: 100})
    w1 = setup.compute()
    assert (w1.lower_ms, w1.upper_ms) == (500, 1_000)
    assert _offsets(w1) == {s0: 200, s1: 100}  # the upper bound of both positions

    # A moves on, B does not: the lowest time is still B's, nothing new is appended
    setup.write("A", s0, 2)
    setup.note("A", 2_000, {s0: 400, s1: 0})
    assert setup.compute() is None

    # B catches up a little: a new watermark, its cut covers A's later position too
    setup.write("B", s1, 1)
    setup.note("B", 700, {s0: 0, s1: 200})
    w2 = setup.compute()
    assert (w2.lower_ms, w2.upper_ms) == (700, 2_000)
    assert _offsets(w2) == {s0: 400, s1: 200}

    # B notes again at the same time: no progress
    setup.note("B", 700, {s0: 0, s1: 200})
    assert setup.compute() is None

    # a writer's time never goes back, and its position must be a valid cut of the stream
    with pytest.raises(InvalidArgument):
        setup.note("B", 699, {s0: 0, s1: 200})
    with pytest.raises(InvalidArgument):
        setup.note("B", 800, {s0: 0})
    with pytest.raises(InvalidArgument):
        setup.note("B", 800, {s0: 0, s1: 10_000})
    assert setup.mark("B").timestamp_ms == 700

    # every appended watermark is in the _MARK stream, in order, as {lower_ms, upper_ms, cut}
    stored = setup.stored()
    assert [(w["lower_ms"], w["upper_ms"]) for w in stored] == [(500, 1_000), (700, 2_000)]
    assert [{int(s): o for s, _, _, o in w["cut"]} for w in stored] == [_offsets(w1), _offsets(w2)]
    assert controller.watermarks.last(unique, "s").lower_ms == 700


def test_a_silent_writer_is_dropped_after_the_timeout_and_no_longer_holds_watermarks_back(controller, unique):
    setup = Setup(controller, unique, timeout_ms=TIMEOUT_MS)
    s0, s1 = setup.ids()
    setup.write("A", s0, 1)
    setup.note("A", 1_000, {s0: 100, s1: 0})
    setup.write("B", s1, 1)
    setup.note("B", 100, {s0: 0, s1: 100})
    b_heard = setup.heard("B")
    assert setup.compute(now=b_heard).lower_ms == 100

    setup.write("A", s0, 1)
    setup.note("A", 2_000, {s0: 200, s1: 0})
    a_heard = setup.heard("A")
    # B is not silent for *longer* than the timeout yet (A is not silent at all)
    assert a_heard <= b_heard + TIMEOUT_MS, "the machine stalled for longer than the timeout"
    assert setup.compute(now=b_heard + TIMEOUT_MS) is None
    assert setup.marks() == {"A", "B"}

    # later: B has been silent for longer than the timeout, A has not
    now = max(a_heard, b_heard + TIMEOUT_MS + 1)
    if now - a_heard > TIMEOUT_MS:  # the machine stalled between B's and A's notes: make A recent again
        setup.note("A", 2_000, {s0: 200, s1: 0})
        now = setup.heard("A")
    w = setup.compute(now=now)
    assert w is not None and (w.lower_ms, w.upper_ms) == (2_000, 2_000)
    assert _offsets(w) == {s0: 200, s1: 100}  # the previous cut still bounds it from below
    assert setup.marks() == {"A"}

    # B comes back with an earlier time than the watermark: nothing moves back
    setup.note("B", 300, {s0: 0, s1: 100})
    setup.note("A", 2_000, {s0: 200, s1: 0})
    assert setup.compute(now=setup.heard("A", "B")) is None
    assert setup.marks() == {"A", "B"}
    assert controller.watermarks.last(unique, "s").lower_ms == 2_000
    # B leaves for good (writer.close): A alone again decides
    controller.watermarks.remove_writer(unique, "s", "B")
    setup.note("A", 3_000, {s0: 200, s1: 0})
    assert setup.compute(now=setup.heard("A")).lower_ms == 3_000
    # and when the last writer leaves there is nothing to compute
    controller.watermarks.remove_writer(unique, "s", "A")
    assert setup.compute() is None
    assert [w["lower_ms"] for w in setup.stored()] == [100, 2_000, 3_000]


def test_the_default_timeout_is_a_minute(controller, unique):
    setup = Setup(controller, unique, segments=1, timeout_ms=0)
    (s0,) = setup.ids()
    setup.note("A", 10, {s0: 0})
    heard = setup.mark("A").updated_ms
    assert setup.compute(now=heard + 60_000).lower_ms == 10
    assert setup.marks() == {"A"}
    setup.note("A", 20, {s0: 0})
    heard = setup.mark("A").updated_ms
    assert setup.compute(now=heard + 60_001) is None
    assert setup.marks() == set()


def test_watermark_cut_is_the_upper_bound_of_positions_across_a_scale(controller, unique):
    setup = Setup(controller, unique, segments=1)
    (s0,) = setup.ids()
    setup.write("A", s0, 3)
    setup.note("A", 100, {s0: 300})
    setup.note("B", 50, {s0: 100})  # B is behind in the first epoch
    assert _offsets(setup.compute()) == {s0: 300}
    controller.streams.scale_stream(unique, "s", [s0], [(0.0, 0.5), (0.5, 1.0)])
    a, b = setup.ids()
    setup.write("A", a, 2)
    setup.note("A", 200, {a: 200, b: 0})  # A past the split
    setup.note("B", 60, {s0: 300})  # B at the sealed end of the old segment
    w = setup.compute()
    assert (w.lower_ms, w.upper_ms) == (60, 200)
    assert _offsets(w) == {a: 200, b: 0}
    setup.write("B", b, 1)
    setup.note("B", 90, {a: 0, b: 100})
    w = setup.compute()
    assert (w.lower_ms, _offsets(w)) == (90, {a: 200, b: 100})


def test_watermarking_starts_with_the_first_mark_and_run_covers_every_watermarked_stream(controller, unique):
    setup = Setup(controller, unique)
    s0, s1 = setup.ids()
    assert (unique, "s") not in controller.watermarks.candidates()
    setup.note("A", 5, {s0: 0, s1: 0})
    assert (unique, "s") in controller.watermarks.candidates()
    assert controller.store.get_stream(unique, mark_stream_name("s")) is not None
    appended = dict(controller.watermarks.run().appended)
    assert appended[f"{unique}/s"].lower_ms == 5
    assert f"{unique}/s" not in dict(controller.watermarks.run().appended)  # nothing new


def test_a_committed_transaction_notes_time_for_its_writer(controller, unique):
    setup = Setup(controller, unique)
    s0, s1 = setup.ids()
    setup.write("A", s0, 1)
    setup.note("A", 1_000, {s0: 100, s1: 0})
    txn = controller.transactions.begin(unique, "s")
    controller.segments.append(segment_name(unique, "s", txn_segment_token(s1, txn.txn_id)), "tx", 0, 1, EVENT)
    controller.transactions.commit(unique, "s", txn.txn_id, timestamp_ms=4_000, writer_id="tx")
    mark = setup.mark("tx")
    assert mark.timestamp_ms == 4_000
    tail = {p.segment.segment_id: p.offset for p in controller.streams.tail(unique, "s")}
    assert {int(s): o for s, _, _, o in mark.position} == tail and tail[s1] == 100
    w = setup.compute()
    assert (w.lower_ms, w.upper_ms) == (1_000, 4_000)
    assert _offsets(w) == tail


def test_a_silent_writers_mark_read_before_it_noted_again_is_not_deleted(controller, unique, monkeypatch):
    """compute() read A's mark as silent; A noted a time before compute deleted it: the mark stays."""
    setup = Setup(controller, unique, segments=1, timeout_ms=TIMEOUT_MS)
    (s0,) = setup.ids()
    setup.note("A", 1_000, {s0: 0})
    stale = setup.mark("A")
    noted_again = False
    real_query = WriterMarkRecord.query

    def query_then_note(*args, **kwargs):
        nonlocal noted_again
        marks = list(real_query(*args, **kwargs))
        if not noted_again:
            noted_again = True
            setup.note("A", 2_000, {s0: 0})
        return marks

    monkeypatch.setattr(WriterMarkRecord, "query", query_then_note)
    assert setup.compute(now=stale.updated_ms + TIMEOUT_MS + 1) is None  # A looked silent
    assert setup.marks() == {"A"} and setup.mark("A").timestamp_ms == 2_000


def test_a_note_racing_a_later_note_of_the_same_writer_cannot_move_its_time_back(controller, unique, monkeypatch):
    setup = Setup(controller, unique, segments=1)
    (s0,) = setup.ids()
    setup.note("A", 2_000, {s0: 0})

    def read_before_the_later_note(*_args, **_kwargs):
        raise WriterMarkRecord.DoesNotExist()

    monkeypatch.setattr(WriterMarkRecord, "get", read_before_the_later_note)
    with pytest.raises(InvalidArgument, match="time cannot go back"):
        setup.note("A", 1_000, {s0: 0})
    monkeypatch.undo()
    assert setup.mark("A").timestamp_ms == 2_000
