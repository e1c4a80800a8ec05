"""A segment that no longer knows the writer id it acknowledged blocks under (deleted and created again
under the same name): the writer stops writing to that key range, rather than going on under a new
writer id into the new segment. Against the fake segment store of test_writer_contract."""

from __future__ import annotations

import pytest
from test_writer_contract import FakeConnection, FakeSegments, outcome, writer_on

from rillet.errors import EventsNotAcknowledged, OutOfOrder, SegmentNotFound
from rillet.writer import EventWriterConfig


def test_a_segment_that_forgot_the_writer_takes_nothing_more_from_it():
    store = FakeSegments([0])

    def recreated_after_e0(call, applied):
        if not applied and call["first"] > 0:  # what the server answers a writer id it never saw
            raise OutOfOrder("not appended yet", last_event_number=-1, awaiting_event_number=call["first"] - 1)

    with writer_on(FakeConnection(store), EventWriterConfig(batch_size_bytes=1, max_latency_ms=0)) as writer:
        assert outcome(writer.write_event("e0", routing_key="k")) == "ok"
        store.fault = recreated_after_e0
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in (1, 2, 3)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        assert [outcome(f) for f in futures] == [SegmentNotFound] * 3
        assert outcome(writer.write_event("e4", routing_key="k")) is SegmentNotFound
    assert store.stored(0) == ["e0"]
    assert {c["writer"] for c in store.calls} == {store.calls[0]["writer"]}  # no new writer id was started
