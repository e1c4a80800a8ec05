"""Control API: scopes, streams and segment queries, as JSON over a Lambda Function URL."""

from __future__ import annotations

import os
from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from controlplane.scale_report import stream_rates
from controlplane.service import Controller, tune_collector
from controlplane.time_cuts import cut_at_time
from dataplane.deployment import Deployment
from dataplane.segment_store import now_ms
from lambdas.controller_api import grant_routes, kvt_routes
from lambdas.controller_api.path_names import GroupName, ScopeName, StreamName
from lambdas.http import build_resolver, powertools
from rillet.api import (
    INT63_MAX,
    SEGMENT_ID_MAX,
    Accepted,
    Assignment,
    BeginTxnRequest,
    CheckpointInfo,
    CheckpointRequest,
    CommitBatchRequest,
    CommitBatchResult,
    CommitTxnRequest,
    Created,
    CreateReaderGroupRequest,
    CreateScopeRequest,
    CreateStreamRequest,
    Deleted,
    Endpoints,
    JoinRequest,
    NoteTimeRequest,
    OfflineRequest,
    PingTxnRequest,
    PositionList,
    ReaderGroupInfo,
    ScaleRequest,
    ScaleStatus,
    ScopeList,
    SegmentList,
    SliceList,
    StreamCutList,
    StreamList,
    StreamStatus,
    Successors,
    SyncRequest,
    TruncateRequest,
    TruncationCutRequest,
    UnreadBytes,
)
from rillet.errors import InvalidArgument
from rillet.models import (
    AcknowledgedCutList,
    ReaderGroupConfig,
    ReaderGroupList,
    ReaderStatusList,
    RetentionStatus,
    ScopeInfo,
    SegmentRange,
    StreamConfiguration,
    StreamConfigurationChange,
    StreamCutBody,
    StreamInfo,
    StreamRates,
    TxnInfo,
    TxnList,
)
from rillet.names import validate_internal_stream_name, validate_scope_name, validate_stream_name
from rillet.stream_cut import StreamCut

logger, metrics, tracer = powertools("controller")
app = build_resolver(logger)
app.include_router(kvt_routes.router)
app.include_router(grant_routes.router)
controller = Controller.for_deployment(Deployment.from_env())
tune_collector()  # large reader groups' syncs: see controlplane.service.COLLECTOR_THRESHOLDS
streams = controller.streams
groups = controller.reader_groups
txns = controller.transactions
watermarks = controller.watermarks
ReaderName = Annotated[str, Path(pattern=r"^[A-Za-z0-9.\-]{1,250}$")]
SegmentId = Annotated[int, Path(ge=0, le=SEGMENT_ID_MAX, description="Creation epoch << 32 | segment number.")]
Epoch = Annotated[int, Path(ge=0, le=2**32 - 1)]

Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
Token = Annotated[str | None, Query(max_length=2048, description="next_token of the previous page.")]


@app.get("/v1/endpoints", summary="Where the append, read and tails APIs are served")
def get_endpoints() -> Endpoints:
    # RILLET_TAILS_URL unset (a deployment without the tails function): readers check tails at the read API.
    return Endpoints(append_url=os.environ["RILLET_APPEND_URL"], read_url=os.environ["RILLET_READ_URL"],
                     tails_url=os.environ.get("RILLET_TAILS_URL") or None)


@app.post("/v1/scopes", summary="Create a scope")
def create_scope(request: CreateScopeRequest) -> Created:
    return Created(created=streams.create_scope(request.scope))


@app.get("/v1/scopes", summary="List scopes")
def list_scopes(limit: Limit = 100, token: Token = None) -> ScopeList:
    scopes, next_token = streams.list_scopes(limit, token)
    return ScopeList(scopes=scopes, next_token=next_token)


@app.get("/v1/scopes/<scope>", summary="Describe a scope")
def get_scope(scope: ScopeName) -> ScopeInfo:
    return streams.get_scope(scope)


@app.delete("/v1/scopes/<scope>", summary="Delete an empty scope")
def delete_scope(scope: ScopeName) -> Deleted:
    return Deleted(deleted=streams.delete_scope(scope))


@app.post("/v1/scopes/<scope>/streams", summary="Create a stream")
def create_stream(scope: ScopeName, request: CreateStreamRequest) -> Created:
    return Created(created=streams.create_stream(scope, request.stream, request.configuration))


@app.get("/v1/scopes/<scope>/streams", summary="List the streams of a scope, optionally by tag")
def list_streams(scope: ScopeName, tag: Annotated[str | None, Query()] = None, limit: Limit = 100,
                 token: Token = None) -> StreamList:
    names, next_token = streams.list_streams(scope, tag, limit, token)
    return StreamList(streams=names, next_token=next_token)


@app.get("/v1/scopes/<scope>/streams/<stream>", summary="Stream state, configuration, segments, head and tail")
def get_stream(scope: ScopeName, stream: StreamName) -> StreamInfo:
    return streams.stream_info(scope, stream)


@app.put("/v1/scopes/<scope>/streams/<stream>/configuration", summary="Update a stream's configuration")
def update_stream(scope: ScopeName, stream: StreamName, configuration: StreamConfiguration) -> StreamStatus:
    streams.update_stream(scope, stream, configuration)
    return _status(scope, stream)


@app.patch("/v1/scopes/<scope>/streams/<stream>/configuration",
           summary="Change part of a stream's configuration: what the body names, nothing else")
def change_stream_configuration(scope: ScopeName, stream: StreamName, change: StreamConfigurationChange) -> StreamInfo:
    """Applied to the configuration as stored, conditioned on the version read: a concurrent update is
    read again, never overwritten. Answers the stream as it is after the change."""
    streams.change_stream_configuration(scope, stream, change)
    return streams.stream_info(scope, stream)


@app.post("/v1/scopes/<scope>/streams/<stream>/seal", summary="Seal a stream: no more appends")
def seal_stream(scope: ScopeName, stream: StreamName) -> StreamStatus:
    streams.seal_stream(scope, stream)
    return _status(scope, stream)


@app.delete("/v1/scopes/<scope>/streams/<stream>", summary="Delete a sealed stream")
def delete_stream(scope: ScopeName, stream: StreamName) -> Deleted:
    streams.delete_stream(scope, stream)
    return Deleted(deleted=True)


@app.get("/v1/scopes/<scope>/streams/<stream>/segments",
         summary="Current segments, or those current at a time (milliseconds since the epoch)")
def get_segments(scope: ScopeName, stream: StreamName,
                 at_ms: Annotated[int | None, Query(ge=0, le=INT63_MAX)] = None) -> SegmentList:
    if at_ms is None:
        return SegmentList(segments=streams.current_segments(scope, stream))
    return SegmentList(segments=streams.segments_at(scope, stream, at_ms))


@app.get("/v1/scopes/<scope>/streams/<stream>/head", summary="The head stream cut")
def get_head(scope: ScopeName, stream: StreamName) -> PositionList:
    record = streams.record(scope, stream)  # before the head: its incarnation is the positions'
    return PositionList(positions=streams.head(scope, stream, record), incarnation=int(record.created_ms))


@app.get("/v1/scopes/<scope>/streams/<stream>/segment-for-key", summary="The current segment of a routing key")
def get_segment_for_key(scope: ScopeName, stream: StreamName,
                        routing_key: Annotated[str, Query(max_length=4096)]) -> SegmentRange:
    return streams.segment_for_key(scope, stream, routing_key)


@app.get("/v1/scopes/<scope>/streams/<stream>/segments/<segment_id>/successors",
         summary="Successors of a sealed segment, each with all its predecessors")
def get_successors(scope: ScopeName, stream: StreamName, segment_id: SegmentId) -> Successors:
    return Successors(successors=streams.successors(scope, stream, segment_id))


@app.get("/v1/scopes/<scope>/streams/<stream>/segments/<segment_id>/predecessors",
         summary="Predecessors of a segment")
def get_predecessors(scope: ScopeName, stream: StreamName, segment_id: SegmentId) -> SegmentList:
    return SegmentList(segments=streams.predecessors(scope, stream, segment_id))


@app.post("/v1/scopes/<scope>/streams/<stream>/truncate",
          summary="Truncate at a stream cut (only forward, only at a valid cut)")
def truncate_stream(scope: ScopeName, stream: StreamName, request: TruncateRequest) -> StreamStatus:
    streams.truncate_stream(scope, stream, {p.segment_id: p.offset for p in request.positions}, request.incarnation)
    return _status(scope, stream)


@app.get("/v1/scopes/<scope>/streams/<stream>/slices",
         summary="The byte range of every segment between two stream cuts (head and tail by default)")
def get_slices(scope: ScopeName, stream: StreamName,
               start: Annotated[str | None, Query(alias="from", description="A stream cut in text form.")] = None,
               end: Annotated[str | None, Query(alias="to", description="A stream cut in text form.")] = None,
               ) -> SliceList:
    slices = streams.slices(scope, stream, _cut_offsets(scope, stream, start), _cut_offsets(scope, stream, end))
    return SliceList(slices=slices, size_bytes=sum(s.end_offset - s.start_offset for s in slices))


@app.get("/v1/scopes/<scope>/streams/<stream>/next-cut",
         summary="How far a reader at a cut can read without mixing a segment and its successors")
def get_next_cut(scope: ScopeName, stream: StreamName,
                 start: Annotated[str, Query(alias="from", description="A stream cut in text form.")]) -> PositionList:
    offsets = _cut_offsets(scope, stream, start)
    incarnation = StreamCut.from_text(start).incarnation
    return PositionList(positions=streams.next_cut(scope, stream, offsets, incarnation), incarnation=incarnation)


@app.get("/v1/scopes/<scope>/streams/<stream>/cut-at-time",
         summary="The earliest stream cut from which a reader sees every event appended at or after a time",
         description="Times are those the data plane recorded when each append block was claimed. The cut is "
                     "exact except where a chunk tiered after the time lies just after it or a scale was under "
                     "way at the time (then it is earlier); it is never before the head, and past the last "
                     "append it is the tail. See docs/cli.md (stream cut at).")
def get_cut_at_time(scope: ScopeName, stream: StreamName,
                    time_ms: Annotated[int, Query(ge=0, le=INT63_MAX, description="Milliseconds since the epoch.")],
                    ) -> PositionList:
    record = streams.record(scope, stream)  # before the cut: its incarnation is the positions'
    return PositionList(positions=cut_at_time(streams, scope, stream, time_ms), incarnation=int(record.created_ms))


def _cut_offsets(scope: str, stream: str, text: str | None) -> dict[int, int] | None:
    if text is None:
        return None
    cut = StreamCut.from_text(text)
    if (cut.scope, cut.stream) != (scope, stream):
        raise InvalidArgument(f"the stream cut is for {cut.scope}/{cut.stream}, not {scope}/{stream}")
    if cut.incarnation is not None:  # a cut of another incarnation is StreamRecreated, never its offsets here
        streams.check_incarnation(streams.record(scope, stream), cut.incarnation)
    return cut.offsets


@app.post("/v1/scopes/<scope>/streams/<stream>/scale",
          summary="Seal some current segments and replace them by segments with the given key ranges")
def scale_stream(scope: ScopeName, stream: StreamName, request: ScaleRequest) -> ScaleStatus:
    epoch = streams.scale_stream(scope, stream, request.seal, request.new_ranges)
    return ScaleStatus(epoch=epoch, status=streams.scale_status(scope, stream, epoch))


@app.get("/v1/scopes/<scope>/streams/<stream>/scale/<epoch>", summary="Whether the scale to an epoch finished")
def get_scale_status(scope: ScopeName, stream: StreamName, epoch: Epoch) -> ScaleStatus:
    return ScaleStatus(epoch=epoch, status=streams.scale_status(scope, stream, epoch))


# -- transactions ----------------------------------------------------------------------------------

TXNS = "/v1/scopes/<scope>/streams/<stream>/transactions"
TxnId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


@app.post(TXNS, summary="Begin a transaction (one transaction segment per current segment)")
def begin_txn(scope: ScopeName, stream: StreamName, request: BeginTxnRequest) -> TxnInfo:
    return txns.begin(scope, stream, request.lease_ms)


@app.get(TXNS, summary="A page of the stream's open, committing and aborting transactions")
def list_txns(scope: ScopeName, stream: StreamName, limit: Limit = 100, token: Token = None) -> TxnList:
    transactions, next_token = txns.list_unfinished(scope, stream, limit, token)
    return TxnList(transactions=transactions, next_token=next_token)


@app.get(TXNS + "/<txn_id>", summary="A transaction's state, segments and deadlines")
def get_txn(scope: ScopeName, stream: StreamName, txn_id: TxnId) -> TxnInfo:
    return txns.status(scope, stream, txn_id)


@app.post(TXNS + "/<txn_id>/ping",
          summary="Renew the lease (LeaseTooLarge; TxnFailed when closed, or when the new lease would end past the "
                  "maximum execution time: the transaction then stays open until its current lease ends)")
def ping_txn(scope: ScopeName, stream: StreamName, txn_id: TxnId, request: PingTxnRequest) -> TxnInfo:
    return txns.ping(scope, stream, txn_id, request.lease_ms)


@app.post(TXNS + "/<txn_id>/commit", summary="Commit: COMMITTED, or COMMITTING while another workflow runs")
def commit_txn(scope: ScopeName, stream: StreamName, txn_id: TxnId, request: CommitTxnRequest) -> TxnInfo:
    return txns.commit(scope, stream, txn_id, request.timestamp_ms, request.writer_id)


@app.post(TXNS + "/<txn_id>/abort", summary="Abort: the transaction's events are never visible")
def abort_txn(scope: ScopeName, stream: StreamName, txn_id: TxnId) -> TxnInfo:
    return txns.abort(scope, stream, txn_id)


@app.post("/v1/scopes/<scope>/streams/<stream>/sinks/<sink>/batches",
          summary="Commit the transactions of a streaming writer's batch exactly once (idempotent by batch id)")
def commit_batch(scope: ScopeName, stream: StreamName, sink: ReaderName,
                 request: CommitBatchRequest) -> CommitBatchResult:
    return CommitBatchResult(committed=txns.commit_batch(scope, stream, sink, request.batch_id, request.txn_ids))


# -- watermarks ------------------------------------------------------------------------------------


@app.post("/v1/scopes/<scope>/streams/<stream>/writers/<writer>/mark",
          summary="A writer notes a time at its position (for watermarks)")
def note_time(scope: ScopeName, stream: StreamName, writer: ReaderName, request: NoteTimeRequest) -> Accepted:
    watermarks.note_time(scope, stream, writer, request.timestamp_ms,
                         {p.segment_id: p.offset for p in request.position})
    return Accepted()


@app.delete("/v1/scopes/<scope>/streams/<stream>/writers/<writer>",
            summary="A writer leaves: it no longer holds watermarks back")
def remove_writer(scope: ScopeName, stream: StreamName, writer: ReaderName) -> Deleted:
    watermarks.remove_writer(scope, stream, writer)
    return Deleted(deleted=True)


# -- reader groups ---------------------------------------------------------------------------------

GROUP = "/v1/scopes/<scope>/reader-groups/<group>"


@app.post("/v1/scopes/<scope>/reader-groups", summary="Create a reader group")
def create_reader_group(scope: ScopeName, request: CreateReaderGroupRequest) -> Created:
    return Created(created=groups.create(scope, request.group, _named_streams(request.config)))


@app.get("/v1/scopes/<scope>/reader-groups", summary="List the reader groups of a scope")
def list_reader_groups(scope: ScopeName, limit: Limit = 100, token: Token = None) -> ReaderGroupList:
    names, next_token = groups.list_groups(scope, limit, token)
    return ReaderGroupList(groups=names, next_token=next_token)


@app.get(GROUP, summary="A reader group's configuration, readers and checkpoints")
def get_reader_group(scope: ScopeName, group: GroupName) -> ReaderGroupInfo:
    return groups.info(scope, group)


@app.put(GROUP + "/config", summary="Reset a reader group to a new configuration (a new generation)")
def reset_reader_group(scope: ScopeName, group: GroupName, config: ReaderGroupConfig) -> ReaderGroupConfig:
    return groups.reset(scope, group, _named_streams(config))


def _named_streams(config: ReaderGroupConfig) -> ReaderGroupConfig:
    """The configuration, once its streams' names are valid: a name no stream can have (an empty one
    cannot even key a DynamoDB lookup) is InvalidArgument, not a failed lookup."""
    for item in config.streams:
        validate_scope_name(item.scope)
        (validate_internal_stream_name if item.stream.startswith("_") else validate_stream_name)(item.stream)
    return config


@app.delete(GROUP, summary="Delete a reader group")
def delete_reader_group(scope: ScopeName, group: GroupName) -> Deleted:
    return Deleted(deleted=groups.delete(scope, group))


@app.post(GROUP + "/readers/<reader>", summary="A reader joins the group",
          description="A name is one online reader: a join with another instance token than the online "
                      "reader of that name gets 409 AlreadyExists; the same token (a repeated join) is "
                      "accepted. The body is optional; a join without a token is accepted by name.")
def add_reader(scope: ScopeName, group: GroupName, reader: ReaderName,
               request: JoinRequest | None = None) -> Assignment:
    return groups.add_reader(scope, group, reader, request.instance if request else None)


@app.post(GROUP + "/readers/<reader>/sync",
          summary="A reader reports positions, completed segments and passed checkpoints; gets its segments",
          description="Also the reader's lease: readers not heard from for the group's reader_lease_ms are "
                      "taken offline at their last reported positions. A reader taken offline gets 409 "
                      "ReaderNotInReaderGroup (details.generation is the group's; a new one means the group "
                      "was reset).")
def sync_reader(scope: ScopeName, group: GroupName, reader: ReaderName, request: SyncRequest) -> Assignment:
    return groups.sync(scope, group, reader, request)


@app.post(GROUP + "/readers/<reader>/offline", summary="Take a reader offline, handing its segments back")
def reader_offline(scope: ScopeName, group: GroupName, reader: ReaderName, request: OfflineRequest) -> Deleted:
    groups.reader_offline(scope, group, reader, request.position, request.instance)
    return Deleted(deleted=True)


@app.post(GROUP + "/checkpoints", summary="Initiate a checkpoint")
def initiate_checkpoint(scope: ScopeName, group: GroupName, request: CheckpointRequest) -> CheckpointInfo:
    return groups.initiate_checkpoint(scope, group, request.name, request.silent)


@app.get(GROUP + "/checkpoints/<name>", summary="Whether a checkpoint completed, and its stream cuts")
def get_checkpoint(scope: ScopeName, group: GroupName, name: str) -> CheckpointInfo:
    return groups.checkpoint(scope, group, name)


@app.post(GROUP + "/truncation-cut",
          summary="A MANUAL_RELEASE_AT_USER_STREAMCUT subscriber acknowledges consumption up to a stream cut")
def update_truncation_cut(scope: ScopeName, group: GroupName, cut: TruncationCutRequest) -> StreamCutBody:
    body = StreamCutBody(scope=cut.scope, stream=cut.stream, positions=cut.positions, incarnation=cut.incarnation)
    return groups.update_truncation_cut(scope, group, body, cut.group_incarnation)


@app.get(GROUP + "/stream-cuts", summary="The group's current position in each stream")
def get_group_stream_cuts(scope: ScopeName, group: GroupName) -> StreamCutList:
    return StreamCutList(cuts=groups.stream_cuts(scope, group))


@app.get(GROUP + "/readers", summary="The online readers, each with its segments, offsets and unread bytes")
def get_reader_statuses(scope: ScopeName, group: GroupName) -> ReaderStatusList:
    return ReaderStatusList(readers=groups.reader_statuses(scope, group))


@app.get(GROUP + "/acknowledged-cuts",
         summary="A subscriber group's acknowledged (truncation) cut in each of its streams")
def get_acknowledged_cuts(scope: ScopeName, group: GroupName) -> AcknowledgedCutList:
    return AcknowledgedCutList(cuts=groups.acknowledged_cuts(scope, group))


@app.get(GROUP + "/unread-bytes", summary="Bytes between the group's position and the tails of its streams")
def get_unread_bytes(scope: ScopeName, group: GroupName) -> UnreadBytes:
    return UnreadBytes(unread_bytes=groups.unread_bytes(scope, group))


@app.get("/v1/scopes/<scope>/streams/<stream>/retention",
         summary="The last retention decision and why, and every subscriber with its lag behind the tail")
def get_retention_status(scope: ScopeName, stream: StreamName) -> RetentionStatus:
    return controller.retention.status(scope, stream)


@app.get("/v1/scopes/<scope>/streams/<stream>/rates",
         summary="Why a stream has (not) scaled: each current segment's rates over the auto-scaler's windows with "
                 "the policy's thresholds and its cool-down left, what auto-scaling would decide now, and its last "
                 "decision and why")
def get_stream_rates(scope: ScopeName, stream: StreamName) -> StreamRates:
    return stream_rates(controller.autoscaler, scope, stream, now_ms())


def _status(scope: str, stream: str) -> StreamStatus:
    record = controller.store.get_stream(scope, stream)
    return StreamStatus(scope=scope, stream=stream, state=record.state)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
