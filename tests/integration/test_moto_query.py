"""The standalone moto server answers a Query of one partition from that partition's items alone
(moto itself lists and sorts the whole table for each Query), with the answers moto gives: key
conditions, order, pages and filters unchanged."""

from __future__ import annotations

import uuid

import boto3
import pytest
from moto.dynamodb.models.table import Table

from standalone import moto_server


@pytest.fixture
def dynamodb(deployment):
    return boto3.client("dynamodb", endpoint_url=deployment.endpoint_url, region_name=deployment.region)


def _fill(dynamodb, table: str, pk: str, count: int) -> None:
    for i in range(count):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": f"e#{i:04d}"}, "n": {"N": str(i)}})


def _query_all(dynamodb, **request) -> list[int]:
    found, start = [], None
    while True:
        page = dynamodb.query(**request, **({"ExclusiveStartKey": start} if start else {}))
        found += [int(item["n"]["N"]) for item in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if not start:
            return found


def test_a_query_reads_only_its_partition_and_answers_as_moto_does(deployment, dynamodb, monkeypatch):
    table = deployment.segments_table
    mine, other = f"q{uuid.uuid4().hex}", f"q{uuid.uuid4().hex}"
    _fill(dynamodb, table, mine, 30)
    _fill(dynamodb, table, other, 5)
    whole_table_listed = []
    listing = moto_server.Table.all_items

    def spy(self):
        result = listing(self)
        if len(result) != 30:
            whole_table_listed.append(len(result))
        return result

    monkeypatch.setattr(Table, "all_items", spy)
    key = {"KeyConditionExpression": "pk = :p AND begins_with(sk, :e)",
           "ExpressionAttributeValues": {":p": {"S": mine}, ":e": {"S": "e#"}}}
    assert _query_all(dynamodb, TableName=table, ConsistentRead=True, Limit=7, **key) == list(range(30))
    assert _query_all(dynamodb, TableName=table, ScanIndexForward=False, Limit=4, **key) == list(range(29, -1, -1))
    between = {"KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
               "ExpressionAttributeValues": {":p": {"S": mine}, ":a": {"S": "e#0010"}, ":b": {"S": "e#0012"}}}
    assert _query_all(dynamodb, TableName=table, **between) == [10, 11, 12]
    filtered = _query_all(dynamodb, TableName=table, FilterExpression="n > :k",
                          KeyConditionExpression="pk = :p",
                          ExpressionAttributeValues={":p": {"S": mine}, ":k": {"N": "26"}})
    assert filtered == [27, 28, 29]
    assert _query_all(dynamodb, TableName=table, KeyConditionExpression="pk = :p",
                      ExpressionAttributeValues={":p": {"S": "q-nothing-here"}}) == []
    assert whole_table_listed == [0]  # the empty partition's listing; never the whole table's
