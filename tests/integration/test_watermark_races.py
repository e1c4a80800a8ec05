"""Watermarks under interrupted and overlapping jobs (issue 31 #3), staged with the real controller on moto.

A watermark job appends the next watermark with the stream record's count as its event number, then
records it on the stream record. A job that stops between the two, or two jobs that overlap, reuse
the number: the watermark stream must still only move forward, and the record must never name a
watermark the stream lacks. A silent writer's mark is forgotten only as it was read, whatever the
clocks say.
"""

from __future__ import annotations

import json

import pytest
from dataplane_model import SimulatedCrash, segment_events

from controlplane import watermarks as watermarks_module
from controlplane.models import WriterMarkRecord, stream_pk
from controlplane.service import Controller
from rillet.errors import WriteConflict
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import mark_stream_name, segment_name

EVENT = frame(b"m" * 96)  # 100 bytes
TIMEOUT_MS = 120_000


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


class Setup:
    def __init__(self, controller: Controller, scope: str) -> None:
        self.c, self.scope, self.written = controller, scope, 0
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(1), timestamp_aggregation_timeout_ms=TIMEOUT_MS))

    def write_and_note(self, writer: str, t: int) -> None:
        """Append one event, then ``writer`` notes time ``t`` at the tail."""
        self.c.segments.append(segment_name(self.scope, "s", 0), "w", self.written, 1, EVENT)
        self.written += 1
        self.c.watermarks.note_time(self.scope, "s", writer, t, {0: self.written * len(EVENT)})

    def compute(self):
        return self.c.watermarks.compute(self.scope, "s")

    def stream_lowers(self) -> list[int]:
        events = segment_events(self.c.segments, segment_name(self.scope, mark_stream_name("s"), 0))
        return [json.loads(e)["lower_ms"] for e in events]

    def recorded(self) -> tuple[int, int | None]:
        record = self.c.store.get_stream(self.scope, "s")
        return int(record.watermark_count or 0), record.last_watermark and record.last_watermark["lower_ms"]


def _stop_before_the_record_update(controller: Controller, monkeypatch, then=None) -> None:
    """The next compute stops (or runs ``then`` first) at its stream record update, after the append."""
    update = controller.store.update
    armed = [True]

    def update_once(record, actions, conflict):
        if armed:
            armed.clear()
            if then is None:
                raise SimulatedCrash("stopped between the append and the record update")
            then()
        return update(record, actions, conflict)

    monkeypatch.setattr(controller.store, "update", update_once)


def _assert_consistent(setup: Setup) -> None:
    lowers = setup.stream_lowers()
    assert lowers == sorted(lowers) and len(set(lowers)) == len(lowers), f"the watermark moved back: {lowers}"
    count, last = setup.recorded()
    assert count == len(lowers), f"the record counts {count} watermarks, the stream holds {lowers}"
    assert last == lowers[-1], f"the record names {last}, the stream's last watermark is {lowers[-1]}"


def test_a_job_stopped_between_append_and_record_update_never_moves_the_watermark_back(controller, unique,
                                                                                        monkeypatch):
    setup = Setup(controller, unique)
    setup.write_and_note("w1", 1_000)
    assert setup.compute().lower_ms == 1_000
    setup.write_and_note("w1", 3_000)
    _stop_before_the_record_update(controller, monkeypatch)
    with pytest.raises(SimulatedCrash):
        setup.compute()  # appended 3000 as watermark #1, never recorded it
    monkeypatch.undo()
    setup.write_and_note("w2", 2_500)  # a second writer, behind: the lowest time is now 2500
    setup.compute()  # number 1 again: the stream keeps 3000
    _assert_consistent(setup)
    setup.write_and_note("w2", 2_600)
    setup.compute()
    _assert_consistent(setup)
    setup.write_and_note("w2", 4_000)
    setup.write_and_note("w1", 5_000)
    assert setup.compute().lower_ms == 4_000  # and it goes on forward
    _assert_consistent(setup)
    assert setup.stream_lowers() == [1_000, 3_000, 4_000]


def test_two_overlapping_jobs_record_the_watermark_the_stream_holds(controller, unique, monkeypatch):
    setup = Setup(controller, unique)
    setup.write_and_note("w1", 1_000)
    setup.compute()
    setup.write_and_note("w1", 3_000)

    def the_other_job():  # runs while the first job has appended 3000 and not recorded it
        monkeypatch.undo()
        setup.write_and_note("w2", 2_500)
        try:
            setup.compute()
        except WriteConflict:
            pass

    _stop_before_the_record_update(controller, monkeypatch, then=the_other_job)
    try:
        setup.compute()
    except WriteConflict:
        pass
    _assert_consistent(setup)
    setup.write_and_note("w2", 2_600)
    setup.compute()
    _assert_consistent(setup)


def test_a_silent_writers_mark_is_forgotten_only_as_it_was_read(controller, unique, monkeypatch):
    setup = Setup(controller, unique)
    monkeypatch.setattr(watermarks_module, "now_ms", lambda: 10_000)  # the writer's clock: one millisecond
    setup.write_and_note("w1", 1_000)
    key = (stream_pk(unique, "s"), "mark#w1")
    delete = WriterMarkRecord.delete

    def note_then_delete(mark, *args, **kwargs):  # the writer notes again between the read and the delete
        monkeypatch.setattr(WriterMarkRecord, "delete", delete)
        setup.write_and_note("w1", 2_000)
        return delete(mark, *args, **kwargs)

    monkeypatch.setattr(WriterMarkRecord, "delete", note_then_delete)
    controller.watermarks.compute(unique, "s", now=10_000 + TIMEOUT_MS + 1)  # the job's clock: long after
    assert WriterMarkRecord.get(*key, consistent_read=True).timestamp_ms == 2_000


def test_a_note_that_stalled_across_a_delete_never_moves_the_new_streams_watermark(controller, unique, monkeypatch):
    """A writer's note reads the stream, then stalls while the stream is sealed, deleted and created again
    (segment ids repeat across incarnations); its mark lands in the new stream's partition with the old
    stream's offsets. The new stream's watermark is computed from the new stream's writers only: the old
    mark is forgotten, never taken as a position past the new stream's tail."""
    c, scope = controller, unique
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), timestamp_aggregation_timeout_ms=TIMEOUT_MS)
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, "s", config)
    segment = segment_name(scope, "s", 0)
    for number in range(5):
        c.segments.append(segment, "w", number, 1, EVENT)
    staged = []
    real_resolve = type(c.streams).resolve_cut

    def resolve_then_recreate(self, *args):
        answer = real_resolve(self, *args)
        if not staged:
            staged.append(True)
            c.streams.seal_stream(scope, "s")
            c.streams.delete_stream(scope, "s")
            c.streams.create_stream(scope, "s", config)
        return answer

    monkeypatch.setattr(type(c.streams), "resolve_cut", resolve_then_recreate)
    c.watermarks.note_time(scope, "s", "old", 5_000, {0: 5 * len(EVENT)})
    assert staged, "the staging never ran"
    monkeypatch.setattr(type(c.streams), "resolve_cut", real_resolve)
    c.segments.append(segment, "new", 0, 1, EVENT)
    c.watermarks.note_time(scope, "s", "new", 1_000, {0: len(EVENT)})
    watermark = c.watermarks.compute(scope, "s")
    assert watermark is not None
    assert (watermark.lower_ms, watermark.upper_ms) == (1_000, 1_000)
    assert [p.offset for p in watermark.cut] == [len(EVENT)]  # the new stream's tail, not the old 500
    assert [m.writer for m in WriterMarkRecord.query(stream_pk(scope, "s"), WriterMarkRecord.sk.startswith("mark#"))] \
        == ["new"]
