"""Retention decisions say what held a stream back: a stream above its size minimum that no recorded cut
can truncate yet (its retention set is younger than its growth) is not "below the minimum"."""

from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

EVENT = frame(b"x" * 96)  # 100 bytes


def _stream(controller: Controller, scope: str, policy: RetentionPolicy, events: int) -> None:
    controller.streams.create_scope(scope)
    controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1),
                                                                     retention_policy=policy))
    for n in range(events):
        controller.segments.append(segment_name(scope, "s", 0), "w", n, 1, EVENT)


def test_a_stream_above_its_size_minimum_without_an_older_cut_says_so(deployment, unique):
    controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=60_000))
    _stream(controller, unique, RetentionPolicy.by_size(250), events=7)
    decision = controller.retention.cycle(unique, "s", now=1_000_000)  # the first cut is the tail: keeps 0 B
    assert decision.outcome == "kept"
    assert not decision.reason.startswith("below the minimum"), decision.reason
    assert "700 B" in decision.reason and "250 B" in decision.reason and "every 1m" in decision.reason


def test_a_stream_below_its_size_minimum_says_how_far(deployment, unique):
    controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))
    _stream(controller, unique, RetentionPolicy.by_size(250), events=2)
    decision = controller.retention.cycle(unique, "s", now=1_000_000)
    assert decision.outcome == "kept"
    assert decision.reason.startswith("below the minimum") and "200 B" in decision.reason and "250 B" in decision.reason


def test_a_time_policy_without_a_cut_old_enough_says_how_old_the_oldest_is(deployment, unique):
    controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1_000))
    _stream(controller, unique, RetentionPolicy.by_time(60_000), events=3)
    controller.retention.cycle(unique, "s", now=1_000_000)
    decision = controller.retention.cycle(unique, "s", now=1_030_000)
    assert decision.outcome == "kept"
    assert "is 30s old" in decision.reason and "minimum is 1m" in decision.reason, decision.reason
