"""The request-unit model of bench/cost.py follows DynamoDB's billing rules, so the modeled dollars
of every benchmark rest on them: a write is charged on the larger of the item's size before and
after it, a strongly consistent read on the whole item per 4 KB."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from standalone.moto_server import RequestRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ is not an installed package
from bench.cost import usage

TABLE = "segments"


def _item(size_of_data: int) -> dict:
    return {"pk": {"S": "s/0"}, "sk": {"S": "m"}, "d": {"S": "x" * size_of_data}}


def _record(operation: str, request: dict, response: dict | None = None) -> RequestRecord:
    return RequestRecord("dynamodb", operation, {"TableName": TABLE, **request}, response or {}, 0, 0)


def test_an_update_that_shrinks_an_item_is_charged_on_its_size_before():
    big, small = _item(5000), _item(100)
    key = {"pk": big["pk"], "sk": big["sk"]}
    result = usage([_record("GetItem", {"Key": key, "ConsistentRead": True}, {"Item": big}),
                    _record("UpdateItem", {"Key": key, "ReturnValues": "ALL_NEW"}, {"Attributes": small})])
    assert result.read_units == 2  # 5 KB read strongly consistent: two 4 KB units
    assert result.write_units == 5  # the larger of 5 KB before and 0.1 KB after


def test_an_overwriting_put_and_a_delete_are_charged_on_the_item_they_replace():
    big, small = _item(3000), _item(10)
    key = {"pk": big["pk"], "sk": big["sk"]}
    result = usage([_record("PutItem", {"Item": big}), _record("PutItem", {"Item": small}),
                    _record("PutItem", {"Item": big}), _record("DeleteItem", {"Key": key})])
    assert result.write_units == 3 + 3 + 3 + 3



def test_logs_and_traces_are_priced_per_invocation_as_each_function_is_deployed():
    """Active tracing records every request of a function seeing under one a second and 5 % at volume,
    at $5 per million; START/END/REPORT lines cost $0.50 per GB ingested. Only the controller is Active by
    default; the tails function (PassThrough, no system lines below WARN) adds neither, which is what
    keeps an idle reader at cents a day."""
    from bench.cost import GB, PRICES, observability_dollars

    assert observability_dollars("tails", 1_000_000) == {"logs": 0.0, "tracing": 0.0}
    assert observability_dollars("append", 1_000_000)["tracing"] == 0.0  # PassThrough by default
    assert observability_dollars("controller", 1_000_000)["tracing"] == pytest.approx(0.05 * 5.00)
    busy = observability_dollars("append", 1_000_000, active=True)
    assert busy["tracing"] == pytest.approx(0.05 * 5.00)
    assert busy["logs"] == pytest.approx(350 * 1_000_000 / GB * PRICES["cloudwatch_logs_ingested_gb"])
    lone = observability_dollars("read", 45_474, per_second=1 / 1.9, active=True)  # a day of one reader's checks
    assert lone["tracing"] == pytest.approx(45_474 * 5e-6)
    assert lone["tracing"] > 15 * 45_474 * PRICES["lambda_request"]  # more than the requests themselves
