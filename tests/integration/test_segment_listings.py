"""Segment listings read the live segments (issue 38): a stream keeps a record per segment it ever had,
and a reader's requests (slices, next cut, cut at time) read only those from its cut on, not every
record scaling and truncation left behind. Counted as DynamoDB counts a query's reads."""

from __future__ import annotations

import time

from scanned_items import ScannedItems

from controlplane.models import SegmentRecord, stream_pk
from controlplane.time_cuts import cut_at_time
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

SCALES = 12


def test_a_reader_reads_the_records_of_live_segments_only(controller, unique):
    c, scope, stream = controller, unique, "s"
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    for _ in range(SCALES):  # split, merge, split...: two records more each time
        current = c.streams.current_segments(scope, stream)
        c.segments.append(segment_name(scope, stream, current[0].segment_id), "w", 0, 1, frame(b"e"))
        ranges = [(0.0, 0.5), (0.5, 1.0)] if len(current) == 1 else [(0.0, 1.0)]
        c.streams.scale_stream(scope, stream, [s.segment_id for s in current], ranges)
    tail = {p.segment.segment_id: p.offset for p in c.streams.tail(scope, stream)}
    c.streams.truncate_stream(scope, stream, tail)
    kept = list(SegmentRecord.query(stream_pk(scope, stream), SegmentRecord.sk.startswith("segment#")))
    assert len(kept) > 3 * SCALES // 2

    live = len(tail)
    with ScannedItems() as listing:
        slices = c.streams.slices(scope, stream)
        cut = c.streams.next_cut(scope, stream, tail)
        at = cut_at_time(c.streams, scope, stream, int(time.time() * 1000))
    assert {s.segment.segment_id for s in slices} == set(tail)
    assert {p.segment.segment_id for p in cut} == {p.segment.segment_id for p in at} == set(tail)
    assert listing.items <= 3 * (live + 2), f"{listing.items} items read for {live} live segments of {len(kept)}"
