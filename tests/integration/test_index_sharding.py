"""No deployment-wide hot key (issue 38): the sparse "due" indexes spread their items over write-sharded
partition keys and project only what their jobs read.

A few dozen streams, segments, transactions and groups are put in each index, then the index is scanned
as DynamoDB holds it: no partition key holds most of the items (before sharding each index had one key
for all of them), and every item carries only the keys and the projected names. The jobs still find
every item, whichever shard it is in, and items written under the old single key too.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import boto3
import pytest

from controlplane.models import INDEXED_NAMES, StreamRecord
from controlplane.service import Controller
from dataplane.models import META_KEY, SegmentMeta
from dataplane.scale_signals import first_check_ms, unmark_actions
from dataplane.segment_store import StoreSettings
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

N = 40


@pytest.fixture
def controller(isolated_deployment) -> Controller:
    # tier_max_age_ms 0: every inline append makes its segment due at once
    return Controller.for_deployment(isolated_deployment(f"shards-{uuid.uuid4().hex[:8]}"),
                                     StoreSettings(tier_min_age_ms=0, tier_max_age_ms=0))


def _index(controller: Controller, table: str, index: str) -> list[dict]:
    """Every item of the index as DynamoDB holds it (a scan of the index: its projection, its keys)."""
    client = boto3.client("dynamodb", endpoint_url=controller.deployment.endpoint_url,
                          region_name=controller.deployment.region)
    items, start = [], None
    while True:
        page = client.scan(TableName=table, IndexName=index, **({"ExclusiveStartKey": start} if start else {}))
        items += page["Items"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def _spread(items: list[dict], key: str) -> Counter:
    return Counter(item[key]["S"] for item in items)


def test_each_due_index_spreads_its_items_and_projects_only_what_its_job_reads(controller):
    c, scope = controller, "s" + uuid.uuid4().hex[:6]
    c.streams.create_scope(scope)
    rate = StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(100, 2, 1))
    for i in range(N):
        c.streams.create_stream(scope, f"a{i}", rate)
        c.segments.append(segment_name(scope, f"a{i}", 0), "w", 0, 1, frame(b"x" * 10))  # inline: due
        c.watermarks.note_time(scope, f"a{i}", "w", 1_000, {0: 0})
    c.streams.create_stream(scope, "t", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    txns = [c.transactions.begin(scope, "t").txn_id for _ in range(N)]

    metadata, segments = c.deployment.metadata_table, c.deployment.segments_table
    for table, index, key, projected in [
            (segments, "tiering", "ts", {"pk", "sk", "ts", "ta", "k"}),
            (segments, "scale-candidates", "ss", {"pk", "sk", "ss", "sa", "k"}),
            (metadata, "watermarks", "watermarked", {"pk", "sk", "watermarked", *INDEXED_NAMES}),
            (metadata, "txn-deadlines", "deadline_shard", {"pk", "sk", "deadline_shard", "deadline_ms",
                                                          *INDEXED_NAMES})]:
        items = _index(c, table, index)
        mine = [item for item in items if scope in item["pk"]["S"]]
        assert len(mine) >= N, (index, len(mine))
        spread = _spread(mine, key)
        assert len(spread) >= 8 and max(spread.values()) <= len(mine) // 4, (index, spread)
        extra = {name for item in mine for name in item} - projected
        assert not extra, f"the {index} index copies {sorted(extra)}, which its job never reads"

    # created marked, due once their longest rate window has passed
    later = first_check_ms(int(time.time() * 1000))
    assert {segment_name(scope, f"a{i}", 0) for i in range(N)} <= {name for name, _ in c.autoscaler.candidates(later)}
    assert {(scope, f"a{i}") for i in range(N)} <= set(c.watermarks.candidates())
    due = set(c.segments.segments_due_for_tiering(limit=1_000))
    assert {segment_name(scope, f"a{i}", 0) for i in range(N)} <= due
    assert not set(txns) & {t.txn_id for t in c.transactions.expired(limit=1_000)}


def test_a_stream_indexed_under_the_old_single_key_gets_its_segments_marked(controller):
    """A deployment upgraded in place holds auto-scaled streams in the metadata table's old ``autoscale``
    index (under the bare key "1" if written before it was sharded), whose segments carry no scale
    signals: the auto-scaler's backfill marks their segments due now and takes them out of it."""
    c, scope = controller, "s" + uuid.uuid4().hex[:6]
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, "old", StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(100, 2, 1)))
    name = segment_name(scope, "old", 0)
    SegmentMeta.get(name, META_KEY).update(actions=[SegmentMeta.scaling.remove(), *unmark_actions()])
    record = c.store.get_stream(scope, "old")
    record.update(actions=[StreamRecord.autoscale.set("1")])  # as written before the index was sharded
    now = int(time.time() * 1000)
    assert c.autoscaler.backfill(now) == 1
    assert name in {n for n, _ in c.autoscaler.candidates(int(time.time() * 1000))}
    assert SegmentMeta.get(name, META_KEY).scaling is not None  # appends signal from now on
    assert c.store.get_stream(scope, "old").autoscale is None
    assert c.autoscaler.backfill(now) == 0  # found empty: not asked again by this process
