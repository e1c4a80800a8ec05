"""Typed calls to the control API; the SDK's other classes talk to the controller only through this."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from urllib.parse import quote

from rillet import api, kvt_models
from rillet.models import (
    AcknowledgedCut,
    AcknowledgedCutList,
    ReaderGroupList,
    ReaderStatus,
    ReaderStatusList,
    RetentionStatus,
    ScopeInfo,
    SegmentPosition,
    SegmentRange,
    StreamConfiguration,
    StreamConfigurationChange,
    StreamInfo,
    StreamRates,
    StreamState,
    SuccessorInfo,
    TxnInfo,
    TxnList,
)
from rillet.names import validate_scope_name
from rillet.transport import Transport


def _stream_path(scope: str, stream: str) -> str:
    return f"/v1/scopes/{quote(scope, safe='')}/streams/{quote(stream, safe='')}"


def _group_path(scope: str, group: str) -> str:
    return f"/v1/scopes/{quote(scope, safe='')}/reader-groups/{quote(group, safe='')}"


def _table_path(scope: str, table: str) -> str:
    return f"/v1/scopes/{quote(scope, safe='')}/key-value-tables/{quote(table, safe='')}"


class ControllerClient:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @cached_property
    def endpoints(self) -> api.Endpoints:
        return api.parse_answer(api.Endpoints, self.transport.json("GET", "/v1/endpoints"))

    # -- scopes ----------------------------------------------------------------------------------

    def create_scope(self, scope: str) -> bool:
        validate_scope_name(scope)
        body = api.CreateScopeRequest(scope=scope).model_dump()
        return api.parse_answer(api.Created, self.transport.json("POST", "/v1/scopes", json_body=body)).created

    def get_scope(self, scope: str) -> ScopeInfo:
        return api.parse_answer(ScopeInfo, self.transport.json("GET", f"/v1/scopes/{quote(scope, safe='')}"))

    def list_scopes(self) -> Iterator[ScopeInfo]:
        token = None
        while True:
            page = api.parse_answer(api.ScopeList, self.transport.json("GET", "/v1/scopes", params={"token": token}))
            yield from page.scopes
            if not page.next_token:
                return
            token = page.next_token

    def delete_scope(self, scope: str) -> bool:
        return api.parse_answer(api.Deleted, 
            self.transport.json("DELETE", f"/v1/scopes/{quote(scope, safe='')}")).deleted

    # -- streams ---------------------------------------------------------------------------------

    def create_stream(self, scope: str, stream: str, configuration: StreamConfiguration) -> bool:
        body = api.CreateStreamRequest(stream=stream, configuration=configuration).model_dump(mode="json")
        path = f"/v1/scopes/{quote(scope, safe='')}/streams"
        return api.parse_answer(api.Created, self.transport.json("POST", path, json_body=body)).created

    def list_streams(self, scope: str, tag: str | None = None) -> Iterator[str]:
        token = None
        while True:
            page = api.parse_answer(api.StreamList, self.transport.json(
                "GET", f"/v1/scopes/{quote(scope, safe='')}/streams", params={"tag": tag, "token": token}))
            yield from page.streams
            if not page.next_token:
                return
            token = page.next_token

    def stream_info(self, scope: str, stream: str) -> StreamInfo:
        return api.parse_answer(StreamInfo, self.transport.json("GET", _stream_path(scope, stream)))

    def update_stream(self, scope: str, stream: str, configuration: StreamConfiguration) -> StreamState:
        data = self.transport.json("PUT", _stream_path(scope, stream) + "/configuration",
                                   json_body=configuration.model_dump(mode="json"))
        return api.parse_answer(api.StreamStatus, data).state

    def change_stream_configuration(self, scope: str, stream: str, change: StreamConfigurationChange) -> StreamInfo:
        data = self.transport.json("PATCH", _stream_path(scope, stream) + "/configuration",
                                   json_body=change.model_dump(mode="json", exclude_unset=True))
        return api.parse_answer(StreamInfo, data)

    def seal_stream(self, scope: str, stream: str) -> StreamState:
        return api.parse_answer(api.StreamStatus, 
            self.transport.json("POST", _stream_path(scope, stream) + "/seal")).state

    def delete_stream(self, scope: str, stream: str) -> bool:
        return api.parse_answer(api.Deleted, self.transport.json("DELETE", _stream_path(scope, stream))).deleted

    # -- key-value tables ------------------------------------------------------------------------

    def create_key_value_table(self, scope: str, table: str,
                               configuration: kvt_models.KeyValueTableConfiguration) -> bool:
        body = kvt_models.CreateKeyValueTableRequest(table=table, configuration=configuration).model_dump(mode="json")
        path = f"/v1/scopes/{quote(scope, safe='')}/key-value-tables"
        return api.parse_answer(api.Created, self.transport.json("POST", path, json_body=body)).created

    def list_key_value_tables(self, scope: str) -> Iterator[str]:
        token = None
        while True:
            page = api.parse_answer(kvt_models.KeyValueTableList, self.transport.json(
                "GET", f"/v1/scopes/{quote(scope, safe='')}/key-value-tables", params={"token": token}))
            yield from page.tables
            if not page.next_token:
                return
            token = page.next_token

    def key_value_table_info(self, scope: str, table: str) -> kvt_models.KeyValueTableInfo:
        return api.parse_answer(kvt_models.KeyValueTableInfo, self.transport.json("GET", _table_path(scope, table)))

    def seal_key_value_table(self, scope: str, table: str) -> kvt_models.KeyValueTableInfo:
        return api.parse_answer(kvt_models.KeyValueTableInfo, 
            self.transport.json("POST", _table_path(scope, table) + "/seal"))

    def delete_key_value_table(self, scope: str, table: str) -> bool:
        return api.parse_answer(api.Deleted, self.transport.json("DELETE", _table_path(scope, table))).deleted

    def update_entries(self, scope: str, table: str, request: kvt_models.UpdateRequest) -> list[str | None]:
        data = self.transport.json("POST", _table_path(scope, table) + "/entries/update",
                                   json_body=request.model_dump(mode="json"))
        return api.parse_answer(kvt_models.UpdateResult, data).versions

    def get_entries(self, scope: str, table: str,
                    keys: list[kvt_models.TableKey]) -> list[kvt_models.WireEntry | None]:
        body = kvt_models.GetRequest(keys=keys).model_dump(mode="json")
        data = self.transport.json("POST", _table_path(scope, table) + "/entries/get", json_body=body)
        return api.parse_answer(kvt_models.GetResult, data).entries

    def iterate_entries(self, scope: str, table: str, request: kvt_models.IterateRequest) -> kvt_models.IteratePage:
        data = self.transport.json("POST", _table_path(scope, table) + "/entries/iterate",
                                   json_body=request.model_dump(mode="json"))
        return api.parse_answer(kvt_models.IteratePage, data)

    # -- segments --------------------------------------------------------------------------------

    def current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        data = self.transport.json("GET", _stream_path(scope, stream) + "/segments")
        return api.parse_answer(api.SegmentList, data).segments

    def segments_at(self, scope: str, stream: str, at_ms: int) -> list[SegmentRange]:
        data = self.transport.json("GET", _stream_path(scope, stream) + "/segments", params={"at_ms": at_ms})
        return api.parse_answer(api.SegmentList, data).segments

    def head(self, scope: str, stream: str) -> list[SegmentPosition]:
        return self.head_cut(scope, stream).positions

    def head_cut(self, scope: str, stream: str) -> api.PositionList:
        """The head stream cut's positions and the stream incarnation they are of."""
        return api.parse_answer(api.PositionList, self.transport.json("GET", _stream_path(scope, stream) + "/head"))

    def segment_for_key(self, scope: str, stream: str, routing_key: str) -> SegmentRange:
        data = self.transport.json("GET", _stream_path(scope, stream) + "/segment-for-key",
                                   params={"routing_key": routing_key})
        return api.parse_answer(SegmentRange, data)

    def successors(self, scope: str, stream: str, segment_id: int) -> list[SuccessorInfo]:
        data = self.transport.json("GET", _stream_path(scope, stream) + f"/segments/{segment_id}/successors")
        return api.parse_answer(api.Successors, data).successors

    def scale_stream(self, scope: str, stream: str, seal: list[int],
                     new_ranges: list[tuple[float, float]]) -> api.ScaleStatus:
        body = api.ScaleRequest(seal=seal, new_ranges=new_ranges).model_dump()
        return api.parse_answer(api.ScaleStatus, 
            self.transport.json("POST", _stream_path(scope, stream) + "/scale", json_body=body))

    def scale_status(self, scope: str, stream: str, epoch: int) -> api.ScaleStatus:
        return api.parse_answer(api.ScaleStatus, 
            self.transport.json("GET", _stream_path(scope, stream) + f"/scale/{epoch}"))

    def truncate_stream(self, scope: str, stream: str, offsets: dict[int, int],
                        incarnation: int | None = None) -> StreamState:
        body = api.TruncateRequest(positions=[api.CutPosition(segment_id=s, offset=o) for s, o in offsets.items()],
                                   incarnation=incarnation)
        data = self.transport.json("POST", _stream_path(scope, stream) + "/truncate", json_body=body.model_dump())
        return api.parse_answer(api.StreamStatus, data).state

    def slices(self, scope: str, stream: str, start: str | None = None, end: str | None = None) -> api.SliceList:
        """Segment byte ranges between two cuts given in text form (head and tail by default)."""
        data = self.transport.json("GET", _stream_path(scope, stream) + "/slices", params={"from": start, "to": end})
        return api.parse_answer(api.SliceList, data)

    def note_time(self, scope: str, stream: str, writer_id: str, timestamp_ms: int,
                  position: list[dict[str, int]]) -> None:
        body = api.NoteTimeRequest(timestamp_ms=timestamp_ms,
                                   position=[api.CutPosition(**p) for p in position]).model_dump()
        self.transport.json("POST", _stream_path(scope, stream) + f"/writers/{writer_id}/mark", json_body=body)

    def remove_writer(self, scope: str, stream: str, writer_id: str) -> None:
        self.transport.json("DELETE", _stream_path(scope, stream) + f"/writers/{writer_id}")

    def next_cut(self, scope: str, stream: str, start: str) -> api.PositionList:
        """How far a reader at cut ``start`` (text form) reads without mixing predecessors and successors
        (of the start cut's incarnation)."""
        data = self.transport.json("GET", _stream_path(scope, stream) + "/next-cut", params={"from": start})
        return api.parse_answer(api.PositionList, data)

    def predecessors(self, scope: str, stream: str, segment_id: int) -> list[SegmentRange]:
        data = self.transport.json("GET", _stream_path(scope, stream) + f"/segments/{segment_id}/predecessors")
        return api.parse_answer(api.SegmentList, data).segments

    # -- listings for operators ------------------------------------------------------------------

    def list_reader_groups(self, scope: str) -> Iterator[str]:
        """The names of a scope's reader groups, page by page."""
        token = None
        while True:
            page = api.parse_answer(ReaderGroupList, self.transport.json(
                "GET", f"/v1/scopes/{quote(scope, safe='')}/reader-groups", params={"token": token}))
            yield from page.groups
            if not page.next_token:
                return
            token = page.next_token

    def list_transactions(self, scope: str, stream: str) -> Iterator[TxnInfo]:
        """A stream's unfinished transactions (open, committing or aborting), page by page."""
        token = None
        while True:
            page = api.parse_answer(TxnList, self.transport.json(
                "GET", _stream_path(scope, stream) + "/transactions", params={"token": token}))
            yield from page.transactions
            if not page.next_token:
                return
            token = page.next_token

    def reader_statuses(self, scope: str, group: str) -> list[ReaderStatus]:
        """A group's online readers with their segments, offsets and unread bytes."""
        data = self.transport.json("GET", _group_path(scope, group) + "/readers")
        return api.parse_answer(ReaderStatusList, data).readers

    def acknowledged_cuts(self, scope: str, group: str) -> list[AcknowledgedCut]:
        """A subscriber group's acknowledged cut in each of its streams (empty for other groups)."""
        data = self.transport.json("GET", _group_path(scope, group) + "/acknowledged-cuts")
        return api.parse_answer(AcknowledgedCutList, data).cuts

    def retention_status(self, scope: str, stream: str) -> RetentionStatus:
        """The stream's last retention decision and its subscribers with their lag."""
        return api.parse_answer(RetentionStatus, self.transport.json("GET", _stream_path(scope, stream) + "/retention"))

    def stream_rates(self, scope: str, stream: str) -> StreamRates:
        """Each current segment's rates as auto-scaling sees them, the thresholds, cool-down and mute left,
        what it would decide now and its last decision."""
        return api.parse_answer(StreamRates, self.transport.json("GET", _stream_path(scope, stream) + "/rates"))

    def cut_at_time(self, scope: str, stream: str, time_ms: int) -> api.PositionList:
        """The earliest cut from which every event appended at or after ``time_ms`` is read, and the
        stream incarnation it is of."""
        data = self.transport.json("GET", _stream_path(scope, stream) + "/cut-at-time", params={"time_ms": time_ms})
        return api.parse_answer(api.PositionList, data)
