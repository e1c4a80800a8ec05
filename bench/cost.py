"""The AWS price table (one place) and the request-unit model applied to metered requests.

Prices: AWS on-demand list prices, us-east-1, as published in 2025 (DynamoDB on-demand after the
November 2024 reduction; Lambda on arm64, which the Terraform deploys).
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections import Counter
from dataclasses import dataclass, field

from standalone.moto_server import RequestRecord

PRICES = {
    "dynamodb_write_request_unit": 0.625 / 1_000_000,
    "dynamodb_read_request_unit": 0.125 / 1_000_000,
    "s3_put": 0.005 / 1_000,  # PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1_000,  # GET and all other requests
    "lambda_request": 0.20 / 1_000_000,
    "lambda_gb_second": 0.0000133334,  # arm64
    "xray_trace_recorded": 5.00 / 1_000_000,
    "cloudwatch_logs_ingested_gb": 0.50,
    "s3_standard_gb_month": 0.023,
    # Kinesis Data Streams, for comparison only (aws.amazon.com/kinesis/data-streams/pricing,
    # us-east-1, as listed in 2025). On-demand: ingest per GB (each record rounded up to 1 KiB) plus
    # an hourly charge per stream. Provisioned: per shard-hour (1 MB/s or 1,000 records/s of ingest
    # each) plus PUT payload units (25 KB each, every record at least one).
    "kinesis_on_demand_ingest_gb": 0.08,
    "kinesis_on_demand_stream_hour": 0.04,
    "kinesis_shard_hour": 0.015,
    "kinesis_put_payload_unit": 0.014 / 1_000_000,
}
# Function duration is modeled, not taken from the emulation's wall time (which moves with the machine's
# load): a constant per request kind, in milliseconds, for a warm arm64 instance, which Lambda bills
# per millisecond. The constants are estimates of the work each request does on AWS, where a DynamoDB
# request takes a few milliseconds and an S3 GET of 4 MiB some tens:
#   append - an S3 PUT of up to 4 MiB (inline blocks skip it), three DynamoDB requests, base64 of the body
#   read  - head record GetItem, an index Query, one S3 GET of up to 4 MiB, base64 of the answer
#   empty_read - a read at the tail that found nothing: the head record GetItem alone
#   plan  - head record GetItem, an index Query (no S3 request)
#   locations - head record GetItem, an index Query, presigning a URL per object (local HMACs)
#   info  - head record GetItem
#   tails - one BatchGetItem of the head records (eventually consistent), no S3 request: served by the
#           tails function (the SDK sends tail checks there; the read function serves them only for
#           clients of a deployment without it)
FUNCTION_MS = {"append": {"append": 40}, "read": {"read": 30, "empty_read": 5, "plan": 10, "locations": 10, "info": 5},
               "tails": {"tails": 5}}
FUNCTION_MEMORY_MB = 512  # the controller's, append's and read's memory (infra/terraform/lambda.tf)
TAILS_MEMORY_MB = 128  # the tails function's (infra/terraform/lambda.tf)
MEMORY_MB = {"tails": TAILS_MEMORY_MB}  # functions whose memory is not FUNCTION_MEMORY_MB
SERVED_BY = {"tails": "tails"}  # request kinds a client sends to a function of their own
# Lambda gives a function CPU in proportion to its memory (one vCPU at 1,769 MB). FUNCTION_MS assumes a
# warm instance's short burst runs at full speed; where it ran at the memory's share instead, a tail
# check's CPU time (one core, measured by bench/tails_memory.py) would stretch to ``cpu_share_ms``.
VCPU_MB = 1769
TAIL_CHECK_CPU_MS = 1.9
# What each invocation adds to CloudWatch Logs and X-Ray (infra/terraform/lambda.tf). Logs: Lambda's
# START, END and REPORT lines, about 350 bytes with CloudWatch's 26 bytes of metadata per event (the
# handlers log nothing per request at INFO); the tails function sends no system lines below WARN.
# Traces: Active tracing records the first request of each second and 5 % of the rest (Lambda's
# sampling, not configurable), so a busy function pays for 5 % of its requests at the margin, and a
# function seeing under one request a second for all of them. Only the controller is Active by
# default; the append and read functions follow var.data_path_tracing (PassThrough by default: the
# SDK sends no trace header) and the tails function is PassThrough.
LOG_BYTES_PER_INVOCATION = {"append": 350, "read": 350, "controller": 350, "tails": 0}
ACTIVE_TRACED_SHARE = 0.05
TRACED_SHARE_AT_VOLUME = {"append": 0.0, "read": 0.0, "controller": ACTIVE_TRACED_SHARE, "tails": 0.0}
GB = 1024 ** 3


def observability_dollars(function: str, invocations: int, per_second: float | None = None,
                          active: bool | None = None) -> dict[str, float]:
    """Logs and traces of ``invocations`` of ``function`` as deployed (or with Active tracing, ``active``):
    traces at the marginal share, or of every request when it sees fewer than one a second
    (``per_second``), as a lone idle client's function does."""
    traced = ACTIVE_TRACED_SHARE if active else TRACED_SHARE_AT_VOLUME[function]
    if traced and per_second is not None and per_second <= 1:
        traced = 1.0
    return {"logs": invocations * LOG_BYTES_PER_INVOCATION[function] / GB * PRICES["cloudwatch_logs_ingested_gb"],
            "tracing": invocations * traced * PRICES["xray_trace_recorded"]}


S3_PUT_CLASS = {"PutObject", "CopyObject", "ListObjectsV2", "ListObjects", "DeleteObjects", "CreateBucket"}


def function_gb_seconds(function: str, requests_by_kind: dict[str, int]) -> float:
    """Modeled GB-seconds of serving these requests of ``function``'s client (``FUNCTION_MS``): each kind at
    the memory of the function that serves it, so a read path's tail checks bill at the tails function's."""
    seconds_mb = 0.0
    for kind, n in requests_by_kind.items():
        server = SERVED_BY.get(kind, function)
        seconds_mb += FUNCTION_MS[server][kind] / 1000 * n * MEMORY_MB.get(server, FUNCTION_MEMORY_MB)
    return seconds_mb / 1024


def cpu_share_ms(cpu_ms: float, memory_mb: int) -> float:
    """How long ``cpu_ms`` of one core's work takes at ``memory_mb``'s share of a vCPU."""
    return cpu_ms * VCPU_MB / min(memory_mb, VCPU_MB)


def _value_size(value: dict) -> int:
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return len(v.strip("-").replace(".", "").lstrip("0")) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(v))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(x) + 1 for k, x in v.items())
    if kind == "L":
        return 3 + sum(_value_size(x) + 1 for x in v)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: x}) for x in v)
    return 0


def item_size(item: dict | None) -> int:
    """DynamoDB's item size: attribute names plus values (as its documentation defines it)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in (item or {}).items())


def _write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def _read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


@dataclass
class Usage:
    requests: Counter = field(default_factory=Counter)
    write_units: float = 0.0
    read_units: float = 0.0
    lambda_requests: int = 0
    lambda_gb_seconds: float = 0.0

    def dollars(self) -> dict[str, float]:
        s3_put = sum(n for (svc, op), n in self.requests.items() if svc == "s3" and op in S3_PUT_CLASS)
        s3_get = sum(n for (svc, op), n in self.requests.items() if svc == "s3" and op not in S3_PUT_CLASS)
        parts = {
            "dynamodb_writes": self.write_units * PRICES["dynamodb_write_request_unit"],
            "dynamodb_reads": self.read_units * PRICES["dynamodb_read_request_unit"],
            "s3_put": s3_put * PRICES["s3_put"],
            "s3_get": s3_get * PRICES["s3_get"],
            "lambda_requests": self.lambda_requests * PRICES["lambda_request"],
            "lambda_duration": self.lambda_gb_seconds * PRICES["lambda_gb_second"],
        }
        parts["total"] = sum(parts.values())
        return parts


def usage(records: list[RequestRecord], lambda_requests: int = 0, lambda_gb_seconds: float = 0.0) -> Usage:
    """Request counts and DynamoDB request units of metered requests (records must keep bodies).

    A write is charged on the larger of the item's size before and after it (DynamoDB's rule for
    updates, overwriting puts and deletes). The size before is the last one these records showed for
    the key (a read, a put, an update's ALL_NEW answer); a write to a key not seen before is charged
    on what it shows alone, so a window that starts without reading an item may undercount it.
    """
    result = Usage(lambda_requests=lambda_requests, lambda_gb_seconds=lambda_gb_seconds)
    seen: dict[tuple, int] = {}  # (table, pk, sk) -> the item's last known size

    def key_of(table: str, item: dict) -> tuple:
        return table, json.dumps(item.get("pk")), json.dumps(item.get("sk"))

    def write(table: str, key: dict, after: dict | None, deleted: bool = False) -> int:
        """Write units of a write that leaves ``after`` (None: unknown, or deleted) at ``key``."""
        k = key_of(table, key)
        size = max(seen.get(k, 0), item_size(after) if after is not None else item_size(key))
        if deleted:
            seen.pop(k, None)
        elif after is not None:
            seen[k] = item_size(after)
        return _write_units(size)

    def read(table: str, items: list[dict]) -> int:
        for item in items:
            seen[key_of(table, item)] = item_size(item)
        return sum(item_size(i) for i in items)

    for r in records:
        result.requests[(r.service, r.operation)] += 1
        if r.service != "dynamodb":
            continue
        req, resp = r.request or {}, r.response or {}
        table = req.get("TableName", "")
        consistent = bool(req.get("ConsistentRead"))
        op = r.operation
        if op == "PutItem":
            result.write_units += write(table, req["Item"], req["Item"])
        elif op == "UpdateItem":
            new = resp.get("Attributes") if req.get("ReturnValues") == "ALL_NEW" else None
            result.write_units += write(table, req["Key"], new)
        elif op == "DeleteItem":
            result.write_units += write(table, resp.get("Attributes") or req["Key"], None, deleted=True)
        elif op == "TransactWriteItems":
            for action in req.get("TransactItems", []):
                (kind, body), = action.items()
                name = body.get("TableName", "")
                if kind == "Put":
                    result.write_units += 2 * write(name, body["Item"], body["Item"])
                elif kind == "Delete":
                    result.write_units += 2 * write(name, body["Key"], None, deleted=True)
                else:  # Update (its new size is not answered) or ConditionCheck
                    result.write_units += 2 * write(name, body["Key"], None)
        elif op == "BatchWriteItem":
            for name, writes in req.get("RequestItems", {}).items():
                for w in writes:
                    if "PutRequest" in w:
                        result.write_units += write(name, w["PutRequest"]["Item"], w["PutRequest"]["Item"])
                    else:
                        result.write_units += write(name, w["DeleteRequest"]["Key"], None, deleted=True)
        elif op == "GetItem":
            item = resp.get("Item")
            result.read_units += _read_units(read(table, [item] if item else []), consistent)
        elif op == "Query":
            result.read_units += _read_units(read(table, resp.get("Items", [])), consistent)
        elif op == "BatchGetItem":
            for name, items in resp.get("Responses", {}).items():
                strong = bool(req.get("RequestItems", {}).get(name, {}).get("ConsistentRead"))  # set per table here
                result.read_units += sum(_read_units(read(name, [i]), strong) for i in items)
    return result


class RequestCounter:
    """Counts the read path's requests of one SegmentClient (client side) by kind, for ``FUNCTION_MS``:
    those to the read API, and the tail checks it sends to the tails API."""

    def __init__(self, segments) -> None:
        self.kinds: Counter = Counter()
        self._lock = threading.Lock()
        for transport in {id(t): t for t in (segments.read_transport, segments.tails_transport)}.values():
            self._count(transport)

    def _count(self, transport) -> None:
        original = transport.request

        def request(method, path, **kwargs):
            response = original(method, path, **kwargs)
            with self._lock:
                kind = _kind(path)
                self.kinds["empty_read" if kind == "read" and not response.data else kind] += 1
            return response

        transport.request = request

    def reset(self) -> None:
        with self._lock:
            self.kinds.clear()


def _kind(path: str) -> str:
    for suffix in ("tails", "locations", "plan", "info"):
        if path.endswith("/" + suffix):
            return suffix
    return "read"
