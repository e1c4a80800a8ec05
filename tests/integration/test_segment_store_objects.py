"""S3 objects of the segment store: reads whose object S3 refuses (403 without ListBucket), and
objects that failed appends leave behind."""

from __future__ import annotations

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from dataplane_model import payload

from dataplane import models
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.errors import Truncated

SETTINGS = StoreSettings(inline_max=64, chunk_target=10_000, tier_min_age_ms=0, poll_interval_ms=20)


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)
    return SegmentStore(deployment, SETTINGS)


@pytest.fixture
def refused_gets(store):
    """Make S3 answer GetObject with ``code`` (after running ``before``), as real S3 does for a
    missing key when the caller lacks s3:ListBucket: 403 AccessDenied."""
    events = store.deployment.s3.meta.events
    installed = []

    def install(code: str, status: int, before=lambda: None):
        def refuse(**_):
            before()
            return AWSResponse("https://s3", status, {}, None), {
                "Error": {"Code": code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": status}}

        events.register("before-call.s3.GetObject", refuse)
        installed.append(refuse)

    yield install
    for handler in installed:
        events.unregister("before-call.s3.GetObject", handler)


def _segment(store: SegmentStore, name: str, blocks: int = 4) -> tuple[list[int], bytes]:
    store.create(name)
    offsets, data = [], b""
    for i in range(blocks):
        block = payload(f"b{i}", 200)  # above inline_max: each block is an S3 object
        offsets.append(store.append(name, "w", i, 1, block).offset)
        data += block
    return offsets, data


@pytest.mark.parametrize("code,status", [("AccessDenied", 403), ("NoSuchKey", 404)])
def test_an_object_refused_after_a_truncation_released_it_reads_as_truncated(store, unique, refused_gets, code,
                                                                            status):
    seg = f"{unique}/s/0"
    offsets, _ = _segment(store, seg)
    refused_gets(code, status, before=lambda: store.truncate(seg, offsets[2]))
    with pytest.raises(Truncated) as refused:
        store.read(seg, 0)
    assert refused.value.details == {"start_offset": offsets[2]}


@pytest.mark.parametrize("code,status", [("AccessDenied", 403), ("NoSuchKey", 404)])
def test_an_object_refused_above_the_start_stays_an_error(store, unique, refused_gets, code, status):
    """A genuine permission problem (or a missing object of live data) is not dressed up as a
    truncation: the caller sees an error, a 500 on the read API."""
    seg = f"{unique}/s/0"
    _segment(store, seg)
    refused_gets(code, status)
    with pytest.raises(ClientError) as refused:
        store.read(seg, 0)
    assert refused.value.response["Error"]["Code"] == code
    assert not isinstance(refused.value, Truncated)

