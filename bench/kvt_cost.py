"""Modeled dollars per million key-value table operations, next to plain DynamoDB doing the same.

Each operation runs for real on moto: Rillet's through ``controlplane.kvtables`` in-process (as the
controller function calls it), plain DynamoDB's as the few boto3 calls an application would make on a
table of its own (same key and value sizes, versions kept in an attribute). Their requests and
request units are priced from the real item sizes with bench/cost.py. Rillet's operations also pay a
Lambda invocation and its duration; the duration is the stated assumption ``LAMBDA_MS`` (not a
measurement), at the controller's 512 MB.

    python -m bench.kvt_cost
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from bench.cost import PRICES, usage
from bench.stack import moto_stack
from controlplane.kvtables import KeyValueTables
from controlplane.service import Controller
from dataplane.deployment import Deployment
from rillet.kvt_models import KeyValueTableConfiguration, TableKey, TableUpdate, UpdateType
from standalone.moto_server import RequestMeter

PRIMARY, SECONDARY, VALUE = 16, 4, 100  # bytes
LAMBDA_GB = 0.5  # the controller function's memory (infra/terraform/lambda.tf)
LAMBDA_MS = 20  # assumed billed duration of one warm invocation: a few DynamoDB round trips
ROUNDS = 5  # each operation is measured this many times and averaged


def _key(i: int, s: int = 0) -> TableKey:
    return TableKey(primary=i.to_bytes(PRIMARY, "big"), secondary=s.to_bytes(SECONDARY, "big"))


def _put(key: TableKey, kind: UpdateType = UpdateType.PUT, version: str | None = None) -> TableUpdate:
    return TableUpdate(type=kind, key=key, value=b"v" * VALUE, version=version)


class Plain:
    """What an application would do on a DynamoDB table of its own."""

    def __init__(self, deployment: Deployment) -> None:
        import boto3

        self.client = boto3.client("dynamodb", region_name=deployment.region, endpoint_url=deployment.endpoint_url)
        self.table = "plain-kv-" + uuid.uuid4().hex[:6]
        self.client.create_table(TableName=self.table, BillingMode="PAY_PER_REQUEST",
                                 AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "B"},
                                                       {"AttributeName": "sk", "AttributeType": "B"}],
                                 KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                            {"AttributeName": "sk", "KeyType": "RANGE"}])

    def item(self, key: TableKey, version: str) -> dict:
        return {"pk": {"B": key.primary}, "sk": {"B": key.secondary}, "value": {"B": b"v" * VALUE},
                "ver": {"S": version}}

    def put(self, key: TableKey) -> None:
        self.client.put_item(TableName=self.table, Item=self.item(key, uuid.uuid4().hex[:16]))

    def get(self, key: TableKey) -> str:
        """The key's version."""
        return self.client.get_item(TableName=self.table, Key={"pk": {"B": key.primary}, "sk": {"B": key.secondary}},
                                    ConsistentRead=True)["Item"]["ver"]["S"]

    def replace(self, key: TableKey, version: str) -> None:
        self.client.put_item(TableName=self.table, Item=self.item(key, uuid.uuid4().hex[:16]),
                             ConditionExpression="ver = :v", ExpressionAttributeValues={":v": {"S": version}})

    def get_all(self, keys: list[TableKey]) -> None:
        self.client.batch_get_item(RequestItems={self.table: {
            "Keys": [{"pk": {"B": k.primary}, "sk": {"B": k.secondary}} for k in keys], "ConsistentRead": True}})

    def transaction(self, keys: list[TableKey]) -> None:
        self.client.transact_write_items(TransactItems=[
            {"Put": {"TableName": self.table, "Item": self.item(k, uuid.uuid4().hex[:16])}} for k in keys])


def _measure(meter: RequestMeter, operation: Callable[[], object]) -> float:
    """DynamoDB dollars of one run of ``operation``."""
    meter.reset()
    operation()
    _, records = meter.snapshot()
    return usage(records).dollars()["total"]


def run() -> list[tuple[str, float, float, float]]:
    meter = RequestMeter(keep_records=True)
    with moto_stack(meter) as (_, deployment):
        controller = Controller.for_deployment(deployment)
        tables = KeyValueTables(controller.store)
        plain = Plain(deployment)
        scope = "cost" + uuid.uuid4().hex[:6]
        controller.streams.create_scope(scope)
        config = KeyValueTableConfiguration(partition_count=4, primary_key_length=PRIMARY,
                                            secondary_key_length=SECONDARY)
        tables.create(scope, "kv", config)
        ten = [_key(1000, s) for s in range(10)]
        for k in ten:
            plain.put(k)
        tables.update(scope, "kv", [_put(k) for k in ten])

        def replace() -> None:
            (entry,) = tables.get(scope, "kv", [_key(1)])
            tables.update(scope, "kv", [_put(_key(1), UpdateType.REPLACE, entry.version)])

        # (name, Rillet calls (Lambda invocations) per operation, Rillet's operation, plain DynamoDB's)
        operations: list[tuple[str, int, Callable[[], object], Callable[[], object]]] = [
            ("put", 1, lambda: tables.update(scope, "kv", [_put(_key(1))]), lambda: plain.put(_key(1))),
            ("get", 1, lambda: tables.get(scope, "kv", [_key(1)]), lambda: plain.get(_key(1))),
            ("conditional replace (after a get)", 2, replace, lambda: plain.replace(_key(1), plain.get(_key(1)))),
            ("get-all of 10", 1, lambda: tables.get(scope, "kv", ten), lambda: plain.get_all(ten)),
            ("transaction of 10 puts", 1, lambda: tables.update(scope, "kv", [_put(k) for k in ten]),
             lambda: plain.transaction(ten)),
        ]
        lambda_per_op = PRICES["lambda_request"] + LAMBDA_GB * LAMBDA_MS / 1000 * PRICES["lambda_gb_second"]
        results = []
        for name, calls, rillet_op, plain_op in operations:
            rillet_op()  # the items exist at their steady size before measuring
            rillet_dollars = sum(_measure(meter, rillet_op) for _ in range(ROUNDS)) / ROUNDS
            plain_op()
            plain_dollars = sum(_measure(meter, plain_op) for _ in range(ROUNDS)) / ROUNDS
            results.append((name, rillet_dollars * 1e6, (rillet_dollars + calls * lambda_per_op) * 1e6, plain_dollars * 1e6))
        return results


def main() -> None:
    print(f"Key-value table operations, {PRIMARY} B primary + {SECONDARY} B secondary key, {VALUE} B values")
    print(f"dollars per million operations (DynamoDB on-demand; Lambda {LAMBDA_GB * 1024:.0f} MB x {LAMBDA_MS} ms "
          "assumed per Rillet call)")
    print(f"{'operation':36} {'Rillet DynamoDB':>16} {'Rillet total':>13} {'plain DynamoDB':>15} {'ratio':>6}")
    for name, dynamo, total, plain in run():
        print(f"{name:36} {dynamo:16.3f} {total:13.3f} {plain:15.3f} {total / plain:6.1f}")


if __name__ == "__main__":
    main()
