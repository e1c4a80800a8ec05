"""Model validation (rillet.models): Pravega's rules for scaling, retention and tags."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from rillet.models import (
    MAX_SUBLOG_SHARDS,
    MAX_TAG_COUNT,
    MAX_TAG_LENGTH,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamConfigurationChange,
)

# -- scaling ----------------------------------------------------------------------------------------


def test_fixed_policy():
    p = ScalingPolicy.fixed(3)
    assert (p.scale_type, p.min_num_segments) == (ScaleType.FIXED_NUM_SEGMENTS, 3)
    assert ScalingPolicy().min_num_segments == 1


@pytest.mark.parametrize("n", [0, -1, 1001])
def test_fixed_policy_bounds(n):
    with pytest.raises(ValidationError):
        ScalingPolicy.fixed(n)


def test_rate_policies():
    e = ScalingPolicy.by_event_rate(100, 2, 3)
    assert (e.scale_type, e.target_rate, e.scale_factor, e.min_num_segments) == (
        ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 3)
    d = ScalingPolicy.by_data_rate(1024, 4, 1)
    assert (d.scale_type, d.target_rate, d.scale_factor) == (ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 1024, 4)


@pytest.mark.parametrize(("target", "factor", "minimum"), [(0, 2, 1), (10, 0, 1), (10, 2, 0), (-5, 2, 1)])
@pytest.mark.parametrize("factory", [ScalingPolicy.by_event_rate, ScalingPolicy.by_data_rate])
def test_rate_policies_need_positive_target_factor_and_minimum(factory, target, factor, minimum):
    with pytest.raises(ValidationError):
        factory(target, factor, minimum)


def test_scaling_policy_rejects_unknown_fields():
    with pytest.raises(ValidationError):
        ScalingPolicy.model_validate({"min_num_segments": 1, "bogus": 1})


# -- retention --------------------------------------------------------------------------------------


def test_retention_by_time_from_timedelta():
    p = RetentionPolicy.by_time(timedelta(hours=1), timedelta(days=1))
    assert p.retention_type == RetentionType.TIME
    assert p.retention_param == 3_600_000
    assert p.retention_max == 86_400_000


def test_retention_by_time_from_milliseconds_and_sub_second_timedeltas():
    assert RetentionPolicy.by_time(1500).retention_param == 1500
    assert RetentionPolicy.by_time(timedelta(milliseconds=250)).retention_param == 250
    assert RetentionPolicy.by_time(timedelta(minutes=5)).retention_max is None


def test_retention_by_size():
    p = RetentionPolicy.by_size(10, 20)
    assert (p.retention_type, p.retention_param, p.retention_max) == (RetentionType.SIZE, 10, 20)


@pytest.mark.parametrize("make", [
    lambda: RetentionPolicy.by_size(100, 99),
    lambda: RetentionPolicy.by_time(timedelta(days=2), timedelta(days=1)),
    lambda: RetentionPolicy.by_size(-1),
])
def test_retention_max_below_min_or_negative_fails(make):
    with pytest.raises(ValidationError):
        make()


def test_retention_max_equal_to_min_is_allowed():
    assert RetentionPolicy.by_size(5, 5).retention_max == 5


def test_consumption_based_retention_from_timedeltas():
    p = RetentionPolicy.by_size(0).with_consumption(timedelta(seconds=30), timedelta(minutes=10))
    assert p.consumption.subscriber_timeout_ms == 30_000
    assert p.consumption.fallback_after_ms == 600_000
    assert RetentionPolicy.by_size(0).with_consumption(1000).consumption.fallback_after_ms is None


@pytest.mark.parametrize(("timeout", "fallback"), [(0, None), (1000, 0), (-1, None)])
def test_consumption_limits_must_be_positive(timeout, fallback):
    with pytest.raises(ValidationError):
        RetentionPolicy.by_size(0).with_consumption(timeout, fallback)


# -- stream configuration and tags ------------------------------------------------------------------


def test_tag_count_limit():
    assert len(StreamConfiguration(tags=frozenset(f"t{i}" for i in range(MAX_TAG_COUNT - 1))).tags) == 127
    with pytest.raises(ValidationError):
        StreamConfiguration(tags=frozenset(f"t{i}" for i in range(MAX_TAG_COUNT)))


def test_tag_length_limit():
    assert StreamConfiguration(tags=frozenset({"x" * (MAX_TAG_LENGTH - 1)}))
    with pytest.raises(ValidationError):
        StreamConfiguration(tags=frozenset({"x" * MAX_TAG_LENGTH}))


def test_empty_tag_fails():
    with pytest.raises(ValidationError):
        StreamConfiguration(tags=frozenset({""}))


@pytest.mark.parametrize("field", ["timestamp_aggregation_timeout_ms", "rollover_size_bytes"])
def test_negative_numbers_fail(field):
    with pytest.raises(ValidationError):
        StreamConfiguration(**{field: -1})


def test_configuration_round_trips_through_json():
    config = StreamConfiguration(
        scaling_policy=ScalingPolicy.by_event_rate(100, 2, 3),
        retention_policy=RetentionPolicy.by_time(timedelta(days=1), timedelta(days=7)).with_consumption(60_000),
        timestamp_aggregation_timeout_ms=5000, tags=frozenset({"a", "b"}))
    wire = config.model_dump(mode="json")
    assert sorted(wire["tags"]) == ["a", "b"]
    assert StreamConfiguration.model_validate(wire) == config
    assert StreamConfiguration.model_validate_json(config.model_dump_json()) == config


def test_configuration_rejects_unknown_fields_and_is_frozen():
    with pytest.raises(ValidationError):
        StreamConfiguration.model_validate({"scaling_policy": {"min_num_segments": 1}, "surprise": True})
    config = StreamConfiguration()
    with pytest.raises(ValidationError):
        config.tags = frozenset({"x"})  # type: ignore[misc]


def test_segment_range_exposes_epoch_number_and_key_range():
    s = SegmentRange(segment_id=(2 << 32) | 5, low=0.25, high=0.5)
    assert (s.epoch, s.number) == (2, 5)
    assert s.key_range.contains(0.3) and not s.key_range.contains(0.5)


# -- sub-log mode -----------------------------------------------------------------------------------


def test_a_configuration_that_leaves_sub_logs_to_the_deployment_does_not_name_them():
    """So that an SDK from before the option, whose models refuse a field they do not know, still reads
    every stream that does not use it."""
    assert "sublog_shards" not in StreamConfiguration().model_dump(mode="json")
    assert StreamConfiguration(sublog_shards=0).model_dump(mode="json")["sublog_shards"] == 0
    assert StreamConfiguration.model_validate(StreamConfiguration(sublog_shards=8).model_dump()).sublog_shards == 8
    assert StreamConfiguration.model_validate(StreamConfiguration().model_dump()).sublog_shards is None


@pytest.mark.parametrize("shards", [-1, MAX_SUBLOG_SHARDS + 1])
def test_sublog_shards_bounds(shards):
    with pytest.raises(ValidationError):
        StreamConfiguration(sublog_shards=shards)
    with pytest.raises(ValidationError):
        StreamConfigurationChange(sublog_shards=shards)


def test_a_change_keeps_sub_logs_when_absent_and_hands_them_back_when_null():
    chosen = StreamConfiguration(sublog_shards=8)
    assert StreamConfigurationChange.model_validate({"tags": ["t"]}).applied_to(chosen).sublog_shards == 8
    assert StreamConfigurationChange.model_validate({"sublog_shards": 2}).applied_to(chosen).sublog_shards == 2
    assert StreamConfigurationChange.model_validate({"sublog_shards": None}).applied_to(chosen).sublog_shards is None
