"""Updating a stream to a higher minimum number of segments scales it up, as in Pravega."""

from rillet.models import ScalingPolicy, StreamConfiguration


def test_raising_the_minimum_number_of_segments_scales_the_stream_up(controller, unique):
    streams = controller.streams
    streams.create_scope(unique)
    streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    streams.update_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(5)))
    current = streams.current_segments(unique, "s")
    assert len(current) == 5
    assert current[0].low == 0.0 and current[-1].high == 1.0
    assert all(s.epoch == 1 for s in current)
    assert len(streams.successors(unique, "s", 0)) == 3  # [0, 0.5) now holds 2.5 of the 5 pieces
    streams.update_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    assert len(streams.current_segments(unique, "s")) == 5  # lowering the minimum does not merge
