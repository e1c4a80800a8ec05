"""The tail-check route, served by the tails function (its only route) and by the read function (so a
client that learned only the read URL, from an older controller, still checks tails there).

One router included by both handlers: the request is validated and authorized (READ on the stream,
lambdas/authorization.py) the same way wherever it is served, and the work is one eventually
consistent BatchGetItem of the segments' head records (dataplane/read_index.py ``tails``).
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import LambdaFunctionUrlRouter

from dataplane.deployment import Deployment
from dataplane.read_index import ReadIndex
from lambdas.http import Incarnation, ScopeName, StreamName
from rillet import api
from rillet.api import SegmentTail, SegmentTails
from rillet.names import segment_name

router = LambdaFunctionUrlRouter()
index = ReadIndex(Deployment.from_env())
SegmentList = Annotated[str, Query(
    pattern=rf"^[0-9]{{1,20}}(,[0-9]{{1,20}}){{0,{api.MAX_TAIL_SEGMENTS - 1}}}$",
    description=f"Segment ids, comma-separated, at most {api.MAX_TAIL_SEGMENTS}.")]


@router.get("/v1/segments/<scope>/<stream>/tails",
            summary="Start, length and sealed flag of many segments of a stream in one request "
                    "(eventually consistent: may lag a commit by a moment)")
def tails(scope: ScopeName, stream: StreamName, segments: SegmentList, incarnation: Incarnation = None) -> SegmentTails:
    ids = [int(s) for s in segments.split(",")]
    found = index.tails([segment_name(scope, stream, i) for i in ids], incarnation)
    return SegmentTails(tails=[SegmentTail(segment_id=i, found=t.found, start_offset=t.start_offset, length=t.length,
                                           sealed=t.sealed) for i, t in zip(ids, found, strict=True)])
