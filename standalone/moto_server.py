"""moto's server for DynamoDB and S3, in-process, made faithful enough to build on.

moto's backends are not safe under concurrent requests: two conditional writes racing on one item
can both pass their condition, which real DynamoDB never allows. The server here handles one request
at a time (requests still arrive on many connections), which restores the atomicity of conditional
writes and transactions that Rillet's correctness depends on.

It also counts every request by service and operation (the benchmarks read the counts), keeps
moto's request log quiet, and makes a Query of one partition cost what that partition holds (see
``_query_one_partition``), a transaction cost what it writes (see ``_transactions_copy_their_items``)
and an item's answer cost its JSON (see ``_item_answers_as_json``).
"""

from __future__ import annotations

import base64
import copy
import io
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import moto.dynamodb.models as dynamodb_backend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoResult
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

_queried = threading.local()  # (table, partition key) of the Query this thread is answering


def _query_one_partition() -> None:
    """moto (5.2) answers a Query on a table's key by listing and sorting every item of the table,
    then keeping the partition's; so each Query, and every append, read and workflow step that makes
    one, slows down as the table fills (a standalone stack left running, the test suite's shared
    tables). This hands that Query the queried partition's items alone, in the same order; the rest
    of moto's Query (conditions, filters, pages) runs unchanged. Index queries still list every item."""
    if getattr(Table.query, "one_partition", False):
        return
    original_query, original_all_items = Table.query, Table.all_items

    def all_items(table: Table) -> list:
        queried = getattr(_queried, "key", None)
        if queried is None or queried[0] is not table:
            return original_all_items(table)
        return sorted(table.items.get(queried[1], {}).values(), key=lambda item: item.range_key)

    def query(table: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        by_index = (args[6] if len(args) > 6 else kwargs.get("index_name")) is not None
        if by_index or hash_key is None or not table.range_key_attr:
            return original_query(table, hash_key, *args, **kwargs)
        _queried.key = (table, hash_key)
        try:
            return original_query(table, hash_key, *args, **kwargs)
        finally:
            _queried.key = None

    query.one_partition = True  # type: ignore[attr-defined]
    Table.query, Table.all_items = query, all_items


@dataclass
class RequestRecord:
    service: str
    operation: str
    request: dict[str, Any] | None  # the JSON body of a DynamoDB request
    response: dict[str, Any] | None  # the JSON body of a DynamoDB response
    request_bytes: int
    response_bytes: int


@dataclass
class RequestMeter:
    """Counts AWS requests; ``records`` keeps DynamoDB bodies for the cost model when asked to."""

    keep_records: bool = False
    counts: Counter = field(default_factory=Counter)
    records: list[RequestRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self.counts[(record.service, record.operation)] += 1
            if self.keep_records:
                self.records.append(record)

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.records.clear()

    def snapshot(self) -> tuple[Counter, list[RequestRecord]]:
        with self._lock:
            return Counter(self.counts), list(self.records)


def _s3_operation(method: str, path: str, query: dict[str, list[str]]) -> str:
    if path.strip("/") == "":
        return "ListBuckets"
    has_key = path.strip("/").count("/") >= 1
    if method == "PUT":
        return "PutObject" if has_key else "CreateBucket"
    if method == "GET":
        if not has_key:
            return "ListObjectsV2" if "list-type" in query else "ListObjects"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "DELETE":
        return "DeleteObject" if has_key else "DeleteBucket"
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    return f"{method} {path}"


def _transactions_copy_their_items() -> None:
    """moto (5.2) saves a deep copy of every table a TransactWriteItems names before applying it, to
    roll back a refused one: each transaction costs the size of the whole table (1 s at 25,000 items),
    and a slow moto makes clients time out and resend. This saves a copy of the items the transaction
    names instead, and restores those; moto's own rollback becomes a no-op (its "copy" of a table is
    the table). Safe because the server applies one request at a time. A transaction whose keys cannot
    be read here keeps moto's whole-table copy."""
    if getattr(dynamodb_backend.DynamoDBBackend.transact_write_items, "copies_items", False):
        return
    original = dynamodb_backend.DynamoDBBackend.transact_write_items
    whole_tables = threading.local()

    def deepcopy(value: Any, memo: dict | None = None) -> Any:
        if isinstance(value, Table) and not getattr(whole_tables, "on", False):
            return value
        return copy.deepcopy(value, memo)

    dynamodb_backend.copy = type("_CopyTablesByReference", (), {"deepcopy": staticmethod(deepcopy), "copy": staticmethod(copy.copy)})

    def slots(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Table, DynamoType, DynamoType | None]]:
        found = []
        for entry in transact_items:
            for op_type, op in entry.items():
                table = backend.tables.get(op.get("TableName"))
                if table is None:
                    continue
                key = op["Item"] if op_type == "Put" else op["Key"]
                range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                found.append((table, DynamoType(key[table.hash_key_attr]), range_value))
        return found

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        try:
            touched = slots(self, transact_items)
        except (KeyError, TypeError, AttributeError):
            whole_tables.on = True
            try:
                return original(self, transact_items)
            finally:
                whole_tables.on = False
        saved = [(table, h, r, copy.deepcopy(table.get_item(h, r))) for table, h, r in touched]
        try:
            return original(self, transact_items)
        except BaseException:
            for table, h, r, item in reversed(saved):
                partition = table.items[h] if r is not None else table.items
                slot = r if r is not None else h
                if item is None:
                    partition.pop(slot, None)
                else:
                    partition[slot] = item
            raise

    transact_write_items.copies_items = True  # type: ignore[attr-defined]
    dynamodb_backend.DynamoDBBackend.transact_write_items = transact_write_items


# Answers that moto builds in DynamoDB's wire form (attribute values as {"S": ...}) but for binary values,
# and without timestamps (table descriptions, which have them, keep moto's serializer).
_ITEM_OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan",
                              "BatchGetItem", "BatchWriteItem", "TransactGetItems", "TransactWriteItems"})


def _wire_form(value: Any) -> Any:
    """As botocore's shapes would write it: binary values base64, no null members (and the caller
    keeps only the answer's members, which drops moto's legacy ``ConsumedCapacityUnits``)."""
    if isinstance(value, dict):
        return {k: _wire_form(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_wire_form(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _item_answers_as_json(check: Callable[[Any, Any], None] | None = None) -> None:
    """moto (5.2) walks every answer through botocore's shape model to serialize it, which is half its
    time on an item with a map (a segment's head record) and grows with the item. The answers of item
    operations are already wire-form JSON, so they are sent as ``json.dumps`` of it. ``check``
    (tests) is given both encodings of each answer to compare."""
    original = DynamoResult.execute_result
    if getattr(original, "as_json", False) and check is None:
        return
    original = getattr(original, "moto_execute_result", original)

    def execute_result(self: DynamoResult, context: Any) -> Any:
        if context.operation_model.name not in _ITEM_OPERATIONS or not isinstance(self.result, dict):
            return original(self, context)
        members = context.operation_model.output_shape.members
        body = json.dumps(_wire_form({k: v for k, v in self.result.items() if k in members}))
        if check is not None:
            check(json.loads(body), json.loads(original(self, context)[2]))
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, body

    execute_result.as_json = True  # type: ignore[attr-defined]
    execute_result.moto_execute_result = original  # type: ignore[attr-defined]
    DynamoResult.execute_result = execute_result


class _SerializedApp:
    """WSGI middleware: one request at a time, and each one metered."""

    def __init__(self, app: Callable, meter: RequestMeter) -> None:
        self.app = app
        self.meter = meter
        self.lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        with self.lock:
            if target.startswith("DynamoDB_"):
                return self._dynamodb(environ, start_response, target.split(".", 1)[1], length)
            body = list(self.app(environ, start_response))
        operation = _s3_operation(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                                  parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        self.meter.add(RequestRecord("s3", operation, None, None, length, sum(len(b) for b in body)))
        return body

    def _dynamodb(self, environ: dict, start_response: Callable, operation: str, length: int) -> list[bytes]:
        raw = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        body = list(self.app(environ, start_response))
        payload = b"".join(body)
        keep = self.meter.keep_records
        self.meter.add(RequestRecord(
            "dynamodb", operation,
            json.loads(raw) if keep and raw else None,
            json.loads(payload) if keep and payload else None,
            len(raw), len(payload)))
        return body


class _QuietHandler(MotoRequestHandler):
    """Logs nothing, and keeps connections open as AWS's endpoints do.

    werkzeug's server answers every request with ``Connection: close``, because http.server cannot
    skip a body the application left unread before the next request line. So each AWS call opened a
    TCP connection of its own: about three per append, and up to 21,000 client sockets in TIME_WAIT
    during a full test run, most of the 28,000 local ports. Reading a request's whole body before the
    application runs removes that cause; a body of unknown length (chunked) still closes."""

    _keeps_alive = False
    # An answer leaves in several small writes (head, body, chunks). On a kept connection Nagle holds
    # each one after the first until the client's delayed ACK: about 40 ms per request, where a closed
    # connection flushed at once.
    disable_nagle_algorithm = True

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass

    def run_wsgi(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            super().run_wsgi()
            return
        if self.headers.get("Expect", "").lower().strip() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # the client sends the body after this
            del self.headers["Expect"]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        # werkzeug reads the request from rfile and afterwards drains whatever is left there; with the
        # body in memory, that drain cannot eat the next request of the connection.
        connection_reader, self.rfile = self.rfile, io.BytesIO(body)
        self._keeps_alive = True
        try:
            super().run_wsgi()
        finally:
            self.rfile, self._keeps_alive = connection_reader, False

    def send_header(self, keyword: str, value: str) -> None:
        if self._keeps_alive and keyword.lower() == "connection" and value.lower() == "close":
            return  # http.server then keeps the connection as the request asked (HTTP/1.1: open)
        super().send_header(keyword, value)


class MotoServer:
    """moto's DynamoDB and S3 on ``host:port`` in a background thread (port 0 picks a free one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, meter: RequestMeter | None = None) -> None:
        _query_one_partition()
        _transactions_copy_their_items()
        _item_answers_as_json()
        self.meter = meter or RequestMeter()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        app = _SerializedApp(DomainDispatcherApplication(create_backend_app), self.meter)
        self._server: BaseWSGIServer = make_server(host, port, app, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> MotoServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
