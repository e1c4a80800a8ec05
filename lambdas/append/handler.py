"""Append API: a binary block of framed events per request, de-duplicated by writer id and event number."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Header
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from dataplane import models
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore, StoreSettings
from lambdas.http import ScopeName, SegmentToken, StreamName, build_resolver, powertools, raw_body
from rillet import api
from rillet.api import AppendAck
from rillet.errors import InvalidArgument
from rillet.framing import count_frames
from rillet.names import segment_name

logger, metrics, tracer = powertools("append")
app = build_resolver(logger)
deployment = Deployment.from_env()
models.bind(deployment)
store = SegmentStore(deployment, StoreSettings.from_env())


@app.post("/v1/segments/<scope>/<stream>/<segment>", summary="Append a block of events to a segment")
def append(
    scope: ScopeName,
    stream: StreamName,
    segment: SegmentToken,
    writer_id: Annotated[str, Header(alias=api.WRITER_ID, min_length=1, max_length=64)],
    event_number: Annotated[int, Header(alias=api.EVENT_NUMBER, ge=0, le=api.INT63_MAX)],
    event_count: Annotated[int, Header(alias=api.EVENT_COUNT, ge=1, le=api.INT63_MAX)],
    expected_offset: Annotated[int | None, Header(alias=api.EXPECTED_OFFSET, ge=0, le=api.INT63_MAX)] = None,
    raw: Annotated[bool, Header(alias=api.RAW_BYTES)] = False,
    after: Annotated[int | None, Header(alias=api.AFTER_EVENT, ge=-1, le=api.INT63_MAX, description=(
        "The writer's last event number before this block (-1 for its first block): the block "
        "commits only after it, so a writer may pipeline blocks."))] = None,
    block_age_ms: Annotated[int | None, Header(alias=api.BLOCK_AGE_MS, ge=0, le=api.INT63_MAX, description=(
        "How long ago (ms) the writer first sent this block: a resend older than the writer expiry "
        "window from a writer id the segment no longer knows gets WriterExpired."))] = None,
) -> AppendAck:
    if event_number + event_count - 1 > api.INT63_MAX:
        raise InvalidArgument(f"the block's last event number must not exceed {api.INT63_MAX} (2**63 - 1)")
    block = raw_body(app)
    if not raw and count_frames(block) != event_count:
        raise InvalidArgument(f"the block holds {count_frames(block)} events, the header says {event_count}")
    result = store.append(segment_name(scope, stream, segment), writer_id, event_number, event_count, block,
                          expected_offset, after, raw=raw, block_age_ms=block_age_ms)
    if not result.duplicate:
        metrics.add_metric(name="AppendedBytes", unit=MetricUnit.Bytes, value=len(block))
        metrics.add_metric(name="AppendedEvents", unit=MetricUnit.Count, value=event_count)
    return AppendAck(offset=result.offset, length=result.length, duplicate=result.duplicate)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
