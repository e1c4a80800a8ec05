"""The AWS price table (one place) and the request-unit model applied to metered requests.

Prices: AWS on-demand list prices, us-east-1, as published in 2025 (DynamoDB on-demand after the
November 2024 reduction; Lambda on arm64, which the Terraform deploys).
"""

from __future__ import annotations

import base64
import math
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
    "kinesis_on_demand_ingest_gb": 0.08,  # for comparison only
}
S3_PUT_CLASS = {"PutObject", "CopyObject", "ListObjectsV2", "ListObjects", "DeleteObjects", "CreateBucket"}


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


def _write_units(item: dict | None) -> int:
    return max(1, math.ceil(item_size(item) / 1024))


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
    """Request counts and DynamoDB request units of metered requests (records must keep bodies)."""
    result = Usage(lambda_requests=lambda_requests, lambda_gb_seconds=lambda_gb_seconds)
    for r in records:
        result.requests[(r.service, r.operation)] += 1
        if r.service != "dynamodb":
            continue
        req, resp = r.request or {}, r.response or {}
        consistent = bool(req.get("ConsistentRead"))
        op = r.operation
        if op == "PutItem":
            result.write_units += _write_units(req.get("Item"))
        elif op == "UpdateItem" or op == "DeleteItem":
            result.write_units += _write_units(resp.get("Attributes") or req.get("Key"))
        elif op == "TransactWriteItems":
            for action in req.get("TransactItems", []):
                (body,) = action.values()
                result.write_units += 2 * _write_units(body.get("Item") or body.get("Key"))
        elif op == "BatchWriteItem":
            for writes in req.get("RequestItems", {}).values():
                for w in writes:
                    body = w.get("PutRequest") or w.get("DeleteRequest") or {}
                    result.write_units += _write_units(body.get("Item") or body.get("Key"))
        elif op == "GetItem":
            result.read_units += _read_units(item_size(resp.get("Item")), consistent)
        elif op == "Query":
            result.read_units += _read_units(sum(item_size(i) for i in resp.get("Items", [])), consistent)
        elif op == "BatchGetItem":
            for items in resp.get("Responses", {}).values():
                result.read_units += sum(_read_units(item_size(i), consistent) for i in items)
    return result
