"""Retention rules exactly as Pravega's controller states them (StreamMetadataTasks.retention):

* with consumption-based retention and no subscriber, the time/size limits apply at once;
* the maximum holds whatever the subscribers do (Rillet's subscriber timeout: silent subscribers do
  not keep more than the maximum);
* the retention set loses the cut truncated at, and every older one (``deleteStreamCutBefore``);
* an unknown stream named in a subscriber's cut update is STREAM_NOT_FOUND, not an invalid cut.
"""

import pytest

from controlplane.models import RetentionRecord, stream_pk
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.errors import StreamNotFound
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

EVENT = frame(b"x" * 96)  # 100 bytes per event


@pytest.fixture
def controller(deployment):
    return Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))


def _stream(controller, scope, policy):
    controller.streams.create_scope(scope)
    controller.streams.create_stream(scope, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(1), retention_policy=policy))


def _grow(controller, scope, ticks, start=0):
    """One 100-byte event, then a retention cycle, ``ticks`` times, 1 s apart (t = start+1 .. start+ticks)."""
    decisions = []
    for t in range(start, start + ticks):
        controller.segments.append(segment_name(scope, "s", 0), "w", t, 1, EVENT)
        decisions.append(controller.retention.cycle(scope, "s", now=(t + 1) * 1000))
    return decisions


def _head(controller, scope):
    return {p.segment.segment_id: p.offset for p in controller.streams.head(scope, "s")}


def _silent_subscriber(controller, scope):
    """A subscriber at the head that was last heard of at t=0."""
    cut = controller.streams.resolve_cut(scope, "s", {0: 0})
    controller.retention.add_subscriber(scope, "s", f"{scope}/g", 0, cut)
    (sub,) = controller.retention.subscribers(scope, "s")
    sub.update(actions=[type(sub).updated_ms.set(0)])


def _retention_set_sizes(scope):
    return [r.size for r in RetentionRecord.query(stream_pk(scope, "s"), RetentionRecord.sk.startswith("rs#"),
                                                   consistent_read=True)]


def test_without_any_subscriber_the_size_limits_apply_at_once(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(250).with_consumption(subscriber_timeout=10**9))
    decisions = _grow(controller, unique, ticks=6)
    # Tail sizes 100..600: from t=4 (400 B) the cut at 100 keeps 300 >= 250, as without consumption.
    assert [d.outcome for d in decisions[:3]] == ["kept"] * 3
    assert decisions[-1].outcome == "truncated"
    assert decisions[-1].reason == "no subscriber: the time/size policy applies"
    assert _head(controller, unique) == {0: 300}


def test_silent_subscribers_never_keep_more_than_the_maximum(controller, unique):
    policy = RetentionPolicy.by_size(100, 350).with_consumption(subscriber_timeout=1_000)
    _stream(controller, unique, policy)
    _silent_subscriber(controller, unique)
    decisions = _grow(controller, unique, ticks=6, start=100)  # long after the subscriber went silent
    # No fallback is configured: within the maximum nothing is truncated ...
    assert [d.outcome for d in decisions[:3]] == ["kept"] * 3
    assert "within the maximum" in decisions[2].reason
    # ... and once the stream keeps more than 350 B it is truncated back to the maximum, not the minimum.
    # Tails 400, 500, 600: each time at the oldest cut keeping at most 350 B (300 B), not at the minimum.
    assert [d.outcome for d in decisions[3:]] == ["truncated"] * 3
    assert all("maximum" in d.reason for d in decisions[3:])
    assert [d.retained_bytes for d in decisions[3:]] == [300, 300, 300]
    assert _head(controller, unique) == {0: 300}


def test_the_retention_set_drops_the_cut_it_truncated_at(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(250))
    decisions = _grow(controller, unique, ticks=4)
    assert decisions[-1].outcome == "truncated" and _head(controller, unique) == {0: 100}
    # The cut at 100 B (the truncation point) is gone with every older one; 200..400 remain.
    assert _retention_set_sizes(unique) == [200, 300, 400]


def test_a_subscriber_cut_update_on_an_unknown_stream_is_stream_not_found(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9))
    with pytest.raises(StreamNotFound):
        controller.retention.update_truncation_cut(unique, "nope", f"{unique}/g", 0, {0: 0})


def test_the_retention_table_explains_a_truncation_at_the_maximum(deployment, unique):
    """The decision the Dagster run shows names the rule: the maximum applied with no active subscriber."""
    controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))
    policy = RetentionPolicy.by_size(100, 200).with_consumption(subscriber_timeout=1_000)
    _stream(controller, unique, policy)
    _silent_subscriber(controller, unique)
    decisions = _grow(controller, unique, ticks=4, start=100)
    last = decisions[-1]
    assert last.outcome == "truncated" and last.consumption
    assert last.reason == "no active subscriber: the stream keeps more than the maximum, truncate at the maximum"
    assert [s.active for s in last.subscribers] == [False]
