"""A stream's own choice of sub-log mode (``StreamConfiguration.sublog_shards``) on moto, through the
controller: the segments it creates from then on (at creation, at a scale, at a transaction's rolled
commit) take the stream's choice over the deployment's, and a stream that leaves it takes the
deployment's. Sealed segments keep the mode they were created in.
"""

from __future__ import annotations

import pytest

from controlplane.service import Controller
from dataplane import models
from dataplane.segment_store import StoreSettings
from rillet.framing import frame
from rillet.keyspace import segment_id
from rillet.models import ScalingPolicy, StreamConfiguration, StreamConfigurationChange, TxnState
from rillet.names import segment_name, txn_segment_token


def _controller(deployment, deployment_shards: int) -> Controller:
    return Controller.for_deployment(deployment, StoreSettings(sublog_shards=deployment_shards))


def _modes(scope: str, stream: str, ids: list[int]) -> list[int]:
    """Each segment's sub-log shards as its head record says (0: the chain)."""
    return [int(models.SegmentMeta.get(segment_name(scope, stream, sid), "m", consistent_read=True).sublog_shards or 0)
            for sid in ids]


@pytest.mark.parametrize(("deployment_shards", "stream_shards", "expected"),
                         [(0, None, 0), (0, 4, 4), (8, None, 8), (8, 0, 0), (8, 2, 2)])
def test_a_streams_segments_take_its_choice_or_else_the_deployments(deployment, unique, deployment_shards,
                                                                    stream_shards, expected):
    controller = _controller(deployment, deployment_shards)
    controller.streams.create_scope(unique)
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2), sublog_shards=stream_shards)
    assert controller.streams.create_stream(unique, "s", config)
    assert _modes(unique, "s", [segment_id(0, 0), segment_id(0, 1)]) == [expected, expected]
    assert controller.streams.stream_info(unique, "s").configuration.sublog_shards == stream_shards


def test_a_change_applies_to_the_segments_created_after_it(deployment, unique):
    controller = _controller(deployment, 0)
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(sublog_shards=4))
    first = segment_id(0, 0)
    changed = controller.streams.change_stream_configuration(
        unique, "s", StreamConfigurationChange.model_validate({"sublog_shards": 2}))
    assert changed.sublog_shards == 2
    assert _modes(unique, "s", [first]) == [4]  # a segment keeps its mode for its life
    controller.streams.scale_stream(unique, "s", [first], [(0.0, 0.5), (0.5, 1.0)])
    split = [segment_id(1, 1), segment_id(1, 2)]
    assert _modes(unique, "s", [first, *split]) == [4, 2, 2]
    # Absent, it stays; null hands it back to the deployment (here the chain).
    controller.streams.change_stream_configuration(unique, "s",
                                                   StreamConfigurationChange.model_validate({"tags": ["t"]}))
    assert controller.streams.stream_info(unique, "s").configuration.sublog_shards == 2
    controller.streams.change_stream_configuration(unique, "s",
                                                   StreamConfigurationChange.model_validate({"sublog_shards": None}))
    controller.streams.scale_stream(unique, "s", split, [(0.0, 1.0)])
    assert _modes(unique, "s", [segment_id(2, 3)]) == [0]


def test_a_transactions_rolled_commit_creates_segments_in_the_streams_mode(deployment, unique):
    """A transaction begun before a scale commits by rolling: it creates the stream's segments again
    (rolled and duplicate), which take the stream's mode as any new segment of it does."""
    controller = _controller(deployment, 0)
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(sublog_shards=3))
    txn = controller.transactions.begin(unique, "s", lease_ms=60_000)
    (segment,) = txn.segments
    controller.segments.append(segment_name(unique, "s", txn_segment_token(segment.segment_id, txn.txn_id)),
                               "w", 0, 1, frame(b"in the transaction"))
    controller.streams.scale_stream(unique, "s", [segment_id(0, 0)], [(0.0, 0.5), (0.5, 1.0)])
    before_roll = {s.segment_id for s in controller.streams.current_segments(unique, "s")}
    assert controller.transactions.commit(unique, "s", txn.txn_id).state == TxnState.COMMITTED
    current = [s.segment_id for s in controller.streams.current_segments(unique, "s")]
    assert current and not set(current) & before_roll  # the duplicates of the rolled commit
    assert _modes(unique, "s", current) == [3] * len(current)
