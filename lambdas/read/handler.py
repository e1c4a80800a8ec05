"""Read API: binary byte ranges of segments, with a bounded long poll at the tail."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from dataplane import models
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore
from lambdas.http import OCTETS, ScopeName, SegmentToken, StreamName, build_resolver, powertools
from rillet import api
from rillet.api import PlanPart, ReadPlan, SegmentStatus
from rillet.framing import MAX_READ_SIZE
from rillet.names import segment_name

MAX_WAIT_MS = 20_000

logger, metrics, tracer = powertools("read")
app = build_resolver(logger)
deployment = Deployment.from_env()
models.bind(deployment)
store = SegmentStore(deployment)


@app.get("/v1/segments/<scope>/<stream>/<segment>", summary="Read bytes of a segment from an offset",
         responses={200: {"description": "The bytes read; offsets and segment state in the x-rillet-* headers.",
                          "content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}}})
def read(
    scope: ScopeName,
    stream: StreamName,
    segment: SegmentToken,
    offset: Annotated[int, Query(ge=0, le=api.INT63_MAX)] = 0,
    max_bytes: Annotated[int, Query(ge=1, le=MAX_READ_SIZE)] = MAX_READ_SIZE,
    wait_ms: Annotated[int, Query(ge=0, le=MAX_WAIT_MS, description="Long-poll bound at the tail.")] = 0,
):  # no return annotation: binary bodies must bypass powertools' (JSON) response validation
    result = store.read(segment_name(scope, stream, segment), offset, max_bytes, wait_ms)
    return Response(status_code=200, content_type=OCTETS, body=result.data, headers={
        api.OFFSET: str(result.offset),
        api.NEXT_OFFSET: str(result.next_offset),
        api.START_OFFSET: str(result.start_offset),
        api.LENGTH: str(result.length),
        api.SEALED: str(result.sealed).lower(),
        api.END_OF_SEGMENT: str(result.end_of_segment).lower(),
    })


@app.get("/v1/segments/<scope>/<stream>/<segment>/plan",
         summary="Where the bytes of a range are: S3 object ranges, and inline ranges to read through this API")
def plan(scope: ScopeName, stream: StreamName, segment: SegmentToken,
         start: Annotated[int, Query(alias="from", ge=0, le=api.INT63_MAX)],
         end: Annotated[int, Query(alias="to", ge=0, le=api.INT63_MAX)]) -> ReadPlan:
    parts = store.plan(segment_name(scope, stream, segment), start, end)
    return ReadPlan(bucket=deployment.bucket, parts=[PlanPart(offset=p.offset, length=p.length, object_key=p.object_key,
                                                              object_offset=p.object_offset) for p in parts])


@app.get("/v1/segments/<scope>/<stream>/<segment>/info", summary="Start offset, length, sealed flag and rates")
def info(scope: ScopeName, stream: StreamName, segment: SegmentToken) -> SegmentStatus:
    i = store.info(segment_name(scope, stream, segment))
    return SegmentStatus(segment=i.name, start_offset=i.start_offset, length=i.length, sealed=i.sealed,
                         created_at_ms=i.created_ms, event_rates=list(i.event_rates), byte_rates=list(i.byte_rates))


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
