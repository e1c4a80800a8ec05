"""Read API: where a segment's bytes are (presigned S3 GETs, inline bytes), binary byte ranges, and a
tail check of many segments in one request (also served, at less memory, by the tails function).

A reader fetches the bytes in S3 objects itself, with URLs this function presigns only after the
caller's READ grant on the stream was checked (lambdas/authorization.py, as for every route); each URL
names one object and one byte range, and expires in minutes. A waiting reader asks for its segments'
tails in one request and backs off while nothing changes (client/rillet/segments.py), so no
invocation waits for data: a read at the tail answers at once.
"""

from __future__ import annotations

import base64
from typing import Annotated

import boto3
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config

from dataplane import models
from dataplane.deployment import Deployment
from dataplane.segment_store import MAX_LOCATE_BYTES, SegmentStore
from lambdas import tail_check
from lambdas.http import OCTETS, Incarnation, ScopeName, SegmentToken, StreamName, build_resolver, powertools
from rillet import api
from rillet.api import (
    PlanPart,
    ReadLocation,
    ReadLocations,
    ReadPlan,
    SegmentStatus,
)
from rillet.framing import MAX_READ_SIZE
from rillet.names import segment_name

logger, metrics, tracer = powertools("read")
app = build_resolver(logger)
deployment = Deployment.from_env()
models.bind(deployment)
store = SegmentStore(deployment)
URL_EXPIRY_S = 300  # a reader fetches a location right away; five minutes cover a slow or retried GET
# Presigned URLs are SigV4 (botocore presigns SigV2 by default), so the Range header is signed with the
# URL; path-style against a local endpoint (standalone's moto), virtual-hosted on AWS.
presigner = boto3.session.Session().client(
    "s3", region_name=deployment.region, endpoint_url=deployment.endpoint_url,
    config=Config(signature_version="s3v4", s3={"addressing_style": "path" if deployment.endpoint_url else "virtual"}))
# Presign once while the function initializes (no request is made): botocore loads the S3 model and the
# signer on first use, which would otherwise add a few hundred milliseconds to an instance's first read.
presigner.generate_presigned_url("get_object", Params={"Bucket": deployment.bucket, "Key": "warm-up"}, ExpiresIn=1)
# Also here, for clients that learned only the read URL (a controller older than the tails function);
# included before the read route, whose <segment> would otherwise match "tails".
app.include_router(tail_check.router)


@app.get("/v1/segments/<scope>/<stream>/<segment>", summary="Read bytes of a segment from an offset",
         responses={200: {"description": "The bytes read; offsets and segment state in the x-rillet-* headers.",
                          "content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}}})
def read(
    scope: ScopeName,
    stream: StreamName,
    segment: SegmentToken,
    offset: Annotated[int, Query(ge=0, le=api.INT63_MAX)] = 0,
    max_bytes: Annotated[int, Query(ge=1, le=MAX_READ_SIZE)] = MAX_READ_SIZE,
    incarnation: Incarnation = None,
):  # no return annotation: binary bodies must bypass powertools' (JSON) response validation
    result = store.read(segment_name(scope, stream, segment), offset, max_bytes, incarnation)
    return Response(status_code=200, content_type=OCTETS, body=result.data, headers={
        api.OFFSET: str(result.offset),
        api.NEXT_OFFSET: str(result.next_offset),
        api.START_OFFSET: str(result.start_offset),
        api.LENGTH: str(result.length),
        api.SEALED: str(result.sealed).lower(),
        api.END_OF_SEGMENT: str(result.end_of_segment).lower(),
    })


@app.get("/v1/segments/<scope>/<stream>/<segment>/locations",
         summary="Where the bytes from an offset are: presigned ranged GETs of S3 objects, and inline bytes")
def locations(scope: ScopeName, stream: StreamName, segment: SegmentToken,
              offset: Annotated[int, Query(ge=0, le=api.INT63_MAX)] = 0,
              max_bytes: Annotated[int, Query(ge=1, le=MAX_LOCATE_BYTES)] = MAX_LOCATE_BYTES,
              incarnation: Incarnation = None) -> ReadLocations:
    result = store.locate(segment_name(scope, stream, segment), offset, max_bytes, incarnation=incarnation)
    return ReadLocations(offset=result.offset, next_offset=result.next_offset, start_offset=result.start_offset,
                         length=result.length, sealed=result.sealed, end_of_segment=result.end_of_segment,
                         expires_in_s=URL_EXPIRY_S, locations=[_location(x) for x in result.locations])


def _location(x) -> ReadLocation:
    if x.data is not None:
        return ReadLocation(offset=x.offset, length=x.length, data=base64.b64encode(x.data).decode())
    byte_range = f"bytes={x.object_offset}-{x.object_offset + x.length - 1}"
    url = presigner.generate_presigned_url("get_object", ExpiresIn=URL_EXPIRY_S, Params={
        "Bucket": deployment.bucket, "Key": x.object_key, "Range": byte_range})
    return ReadLocation(offset=x.offset, length=x.length, url=url, range=byte_range)


@app.get("/v1/segments/<scope>/<stream>/<segment>/plan",
         summary="Where the bytes of a range are: S3 object ranges, and inline ranges to read through this API")
def plan(scope: ScopeName, stream: StreamName, segment: SegmentToken,
         start: Annotated[int, Query(alias="from", ge=0, le=api.INT63_MAX)],
         end: Annotated[int, Query(alias="to", ge=0, le=api.INT63_MAX)],
         incarnation: Incarnation = None) -> ReadPlan:
    parts = store.plan(segment_name(scope, stream, segment), start, end, incarnation)
    return ReadPlan(bucket=deployment.bucket, parts=[PlanPart(offset=p.offset, length=p.length, object_key=p.object_key,
                                                              object_offset=p.object_offset) for p in parts])


@app.get("/v1/segments/<scope>/<stream>/<segment>/info", summary="Start offset, length, sealed flag and rates")
def info(scope: ScopeName, stream: StreamName, segment: SegmentToken) -> SegmentStatus:
    i = store.info(segment_name(scope, stream, segment))
    return SegmentStatus(segment=i.name, start_offset=i.start_offset, length=i.length, sealed=i.sealed,
                         created_at_ms=i.created_ms, stream_incarnation=i.stream_incarnation, event_rates=list(i.event_rates), byte_rates=list(i.byte_rates))


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
