"""A stream whose time policy cannot truncate yet costs a retention cycle no truncation work (issue 39):
with no tail to record and no recorded cut old enough to keep the minimum, the cycle reads the stream
record and its retention set and nothing else (no segments, no tail, no decision write)."""

from __future__ import annotations

from collections import Counter

import botocore.endpoint
import pytest

from controlplane.retention import RetentionSettings, RetentionTasks
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

DAY_MS = 86_400_000


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


def test_a_time_policy_that_cannot_truncate_yet_reads_only_the_record_and_the_set(controller, unique, monkeypatch):
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(2), retention_policy=RetentionPolicy.by_time(DAY_MS)))
    controller.segments.append(segment_name(unique, "s", 0), "w", 0, 1, frame(b"e" * 96))
    retention = RetentionTasks(controller.streams, RetentionSettings(frequency_ms=30 * 60_000))
    first = retention.cycle(unique, "s", now=1_000_000)
    assert first.measured and first.size_bytes == 100  # the first cycle records the tail

    sent: Counter = Counter()
    make_request = botocore.endpoint.Endpoint.make_request

    def counted(self, operation_model, request_dict):
        sent[operation_model.name] += 1
        return make_request(self, operation_model, request_dict)

    monkeypatch.setattr(botocore.endpoint.Endpoint, "make_request", counted)
    later = retention.cycle(unique, "s", now=1_000_000 + 60_000)  # no tail due, no cut a day old
    assert (later.outcome, later.measured) == ("kept", False)
    assert "no cut to truncate at yet" in later.reason
    # cuts come from the cycle's runs, at most every frequency_ms: not "every 30m" whatever the schedule
    assert "the retention cycle records a cut at most every 30m" in later.reason, later.reason
    assert dict(sent) == {"GetItem": 1, "Query": 1}
    assert retention.status(unique, "s").last_decision.retained_bytes == 100  # the measured one stays

    monkeypatch.setattr(botocore.endpoint.Endpoint, "make_request", make_request)
    due = retention.cycle(unique, "s", now=1_000_000 + 30 * 60_000)  # a tail to record: measured again
    assert due.measured and due.outcome == "kept"
