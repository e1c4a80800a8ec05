"""A transaction's maximum execution time over HTTP, on a stack whose bound is set the way a deployment
sets it (RILLET_TXN_MAX_EXECUTION_MS in the functions' environment): a ping whose lease would end past
it reaches the SDK as the typed TxnFailed (status MAX_EXECUTION_TIME_EXCEEDED), and the transaction
stays open: its writer still writes to it and commits it."""

from __future__ import annotations

import pytest

import rillet
from controlplane import models as control_models
from dataplane import models as data_models
from dataplane.deployment import Deployment
from rillet import (
    EventWriterConfig,
    ScalingPolicy,
    StreamConfiguration,
    TxnFailed,
    TxnState,
    UTF8StringSerializer,
)
from standalone.resources import bind_all
from standalone.stack import Stack, StackConfig

BOUND_MS = 5_000
SER = UTF8StringSerializer()


@pytest.fixture(scope="module")
def bounded_url():
    config = StackConfig.ephemeral(RILLET_TXN_MAX_EXECUTION_MS=str(BOUND_MS))
    config.workers = {"controller": 1, "append": 1, "read": 1, "tails": 1}
    meta, data = control_models.MetadataItem.Meta, data_models.SegmentMeta.Meta
    previous = Deployment(region=meta.region, endpoint_url=meta.host, metadata_table=meta.table_name,
                          segments_table=data.table_name)
    with Stack(config) as stack:
        yield stack.controller_url
    bind_all(previous)  # the stack bound the models to its own moto


def test_a_refused_ping_leaves_the_transaction_open_and_committable(bounded_url, unique):
    with rillet.StreamManager(bounded_url) as manager:
        manager.create_scope(unique)
        manager.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with rillet.EventStreamClientFactory(unique, bounded_url) as factory:
        writer = factory.create_transactional_writer("s", SER, EventWriterConfig(max_latency_ms=10))
        txn = writer.begin(lease_ms=BOUND_MS)  # 1,000 leases would be 83 min: the stack's bound holds
        began = txn.info
        assert began.max_expiry_ms == began.lease_expiry_ms
        txn.write_event("before", routing_key="k")
        with pytest.raises(TxnFailed) as e:
            txn.ping(2 * BOUND_MS)
        assert e.value.code == "TxnFailed"
        assert e.value.details == {"status": "MAX_EXECUTION_TIME_EXCEEDED", "max_expiry_ms": began.max_expiry_ms}
        assert txn.check_status() == TxnState.OPEN and txn.info.lease_expiry_ms == began.lease_expiry_ms
        txn.write_event("after", routing_key="k")
        txn.commit()
        assert txn.check_status() == TxnState.COMMITTED
        assert [r.event for r in factory.create_stream_reader("s", SER)] == ["before", "after"]
