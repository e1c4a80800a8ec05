"""A scale that would leave a stream wider than MAX_CURRENT_SEGMENTS is refused with a typed 400 before
anything changes (docs/limits.md): past some 14,500 segments the stream's own records would no longer
fit in a DynamoDB item, and the scale would fail half done."""

from __future__ import annotations

import pytest

from controlplane.streams import MAX_CURRENT_SEGMENTS
from rillet.errors import InvalidArgument
from rillet.keyspace import segment_id
from rillet.models import ScalingPolicy, StreamConfiguration

pytestmark = pytest.mark.timeout(300)


def test_a_scale_past_the_widest_stream_is_refused(controller, unique):
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(MAX_CURRENT_SEGMENTS)))
    first = controller.streams.current_segments(unique, "s")[0]
    halves = [(first.low, (first.low + first.high) / 2), ((first.low + first.high) / 2, first.high)]
    with pytest.raises(InvalidArgument, match=f"at most {MAX_CURRENT_SEGMENTS}"):
        controller.streams.scale_stream(unique, "s", [first.segment_id], halves)
    record = controller.store.get_stream(unique, "s")
    assert (record.state, record.current_epoch, record.workflow) == ("ACTIVE", 0, None)
    # A merge makes room; then the split fits again.
    second = controller.streams.current_segments(unique, "s")[1]
    controller.streams.scale_stream(unique, "s", [first.segment_id, second.segment_id], [(first.low, second.high)])
    merged = segment_id(1, MAX_CURRENT_SEGMENTS)
    controller.streams.scale_stream(unique, "s", [merged], [(first.low, first.high), (first.high, second.high)])
    assert len(controller.streams.current_segments(unique, "s")) == MAX_CURRENT_SEGMENTS
