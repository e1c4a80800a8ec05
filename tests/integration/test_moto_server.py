"""The standalone moto server answers a Query of one partition from that partition's items alone
(moto itself lists and sorts the whole table for each Query), with the answers moto gives: key
conditions, order, pages and filters unchanged. And a refused transaction is rolled back from copies
of its own items (moto copies every table it names), leaving everything else as it was."""

from __future__ import annotations

import http.client
import uuid
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError
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


def _item(dynamodb, table: str, pk: str, sk: str) -> dict | None:
    return dynamodb.get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True).get("Item")


def test_a_refused_transaction_restores_its_items_without_copying_the_table(deployment, dynamodb, monkeypatch):
    table = deployment.segments_table
    pk = f"x{uuid.uuid4().hex}"
    _fill(dynamodb, table, pk, 3)
    tables_copied = []
    deepcopy = moto_server.copy.deepcopy

    def spy(value, memo=None):
        if isinstance(value, Table):
            tables_copied.append(value.name)
        return deepcopy(value, memo)

    monkeypatch.setattr(moto_server.copy, "deepcopy", spy)

    def key(sk: str) -> dict:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    refused = [
        {"Put": {"TableName": table, "Item": {**key("e#new"), "n": {"N": "9"}}}},
        {"Update": {"TableName": table, "Key": key("e#0000"), "UpdateExpression": "SET n = :v",
                    "ExpressionAttributeValues": {":v": {"N": "100"}}}},
        {"Delete": {"TableName": table, "Key": key("e#0001")}},
        {"ConditionCheck": {"TableName": table, "Key": key("e#0002"), "ConditionExpression": "n = :z",
                            "ExpressionAttributeValues": {":z": {"N": "7"}}}},
    ]
    with pytest.raises(ClientError) as refusal:
        dynamodb.transact_write_items(TransactItems=refused)
    assert refusal.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _item(dynamodb, table, pk, "e#new") is None
    assert _item(dynamodb, table, pk, "e#0000")["n"] == {"N": "0"}
    assert _item(dynamodb, table, pk, "e#0001")["n"] == {"N": "1"}
    assert _query_all(dynamodb, TableName=table, KeyConditionExpression="pk = :p",
                      ExpressionAttributeValues={":p": {"S": pk}}) == [0, 1, 2]

    accepted = refused[:3] + [{"ConditionCheck": {**refused[3]["ConditionCheck"],
                                                  "ExpressionAttributeValues": {":z": {"N": "2"}}}}]
    dynamodb.transact_write_items(TransactItems=accepted)
    assert _item(dynamodb, table, pk, "e#new")["n"] == {"N": "9"}
    assert _item(dynamodb, table, pk, "e#0000")["n"] == {"N": "100"}
    assert _item(dynamodb, table, pk, "e#0001") is None
    assert tables_copied == []


def test_item_answers_sent_as_json_equal_what_moto_serializes(deployment, dynamodb, monkeypatch):
    """The JSON fast path for item operations gives botocore the same answer moto's serializer would:
    binary values (top level, in maps, in lists and sets), numbers, nulls, pages, batches."""
    compared, differences = [], []

    def compare(fast, slow):
        compared.append(fast)
        if fast != slow:
            differences.append((fast, slow))

    monkeypatch.setattr(moto_server.DynamoResult, "execute_result", moto_server.DynamoResult.execute_result)
    moto_server._item_answers_as_json(check=compare)
    table, pk = deployment.segments_table, f"j{uuid.uuid4().hex}"
    item = {"pk": {"S": pk}, "sk": {"S": "e#0"}, "b": {"B": b"\x00\xffbytes"}, "n": {"N": "12.5"},
            "m": {"M": {"inner": {"B": b"\x01"}, "s": {"S": "x"}, "nothing": {"NULL": True}}},
            "l": {"L": [{"B": b"\x02"}, {"N": "1"}]}, "bs": {"BS": [b"\x03", b"\x04"]}, "t": {"BOOL": False}}
    key = {"pk": item["pk"], "sk": item["sk"]}
    dynamodb.put_item(TableName=table, Item=item, ReturnConsumedCapacity="TOTAL")
    dynamodb.put_item(TableName=table, Item={**item, "sk": {"S": "e#1"}}, ReturnValues="ALL_OLD")
    got = dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert got["b"] == {"B": b"\x00\xffbytes"} and got["m"]["M"]["inner"] == {"B": b"\x01"}
    dynamodb.update_item(TableName=table, Key=key, UpdateExpression="SET n = n + :one",
                         ExpressionAttributeValues={":one": {"N": "1"}}, ReturnValues="ALL_NEW")
    dynamodb.query(TableName=table, KeyConditionExpression="pk = :p", Limit=1,
                   ExpressionAttributeValues={":p": {"S": pk}})
    dynamodb.batch_get_item(RequestItems={table: {"Keys": [key]}})
    dynamodb.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": key}}])
    dynamodb.batch_write_item(RequestItems={table: [{"DeleteRequest": {"Key": {**key, "sk": {"S": "e#1"}}}}]})
    dynamodb.delete_item(TableName=table, Key=key, ReturnValues="ALL_OLD")
    assert len(compared) >= 8 and differences == []


def test_one_connection_carries_requests_whatever_their_bodies(deployment):
    """The server keeps a connection open as AWS does (the churn of one connection per request filled
    most local ports in a full run), and a body the application never reads, or one sent after a
    100 Continue, does not bleed into the next request on that connection."""
    address = urlsplit(deployment.endpoint_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    key = f"keep-alive-{uuid.uuid4().hex}"

    def answer(method: str, body: bytes | None = None, **headers: str) -> tuple[int, bytes]:
        operation = {"PUT": "put_object", "DELETE": "delete_object"}.get(method, "get_object")
        url = urlsplit(deployment.s3.generate_presigned_url(
            operation, Params={"Bucket": deployment.bucket, "Key": key}, HttpMethod=method))
        connection.request(method, f"{url.path}?{url.query}", body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        assert response.getheader("Connection", "").lower() != "close"
        return response.status, data

    assert answer("PUT", b"x" * 5000, Expect="100-continue")[0] == 200
    socket = connection.sock
    assert answer("GET", b"a body no GET reads") == (200, b"x" * 5000)
    assert answer("GET") == (200, b"x" * 5000)
    assert answer("DELETE")[0] == 204
    assert answer("GET")[0] == 404
    assert connection.sock is socket  # http.client reconnects after a close; it never had to
    connection.close()
