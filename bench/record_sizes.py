"""Sizes of the DynamoDB items that grow with use, written through the real control-plane code on moto.

Most control-plane items grow with the width of a stream (its current segments): the stream record
(its truncation record and last watermark are cuts), the epoch record, transactions (their epoch's
segments), retention-set records and writers' time marks (cuts), and a reader group's state (live
segments and online readers). This creates streams of a realistic and of the largest width a stream
can be created with, exercises each record once, and prints each item's size (DynamoDB's measure,
bench/cost.py) beside DynamoDB's 400 KB item limit. docs/limits.md carries the table and the ceilings.

    python -m bench.record_sizes            # widths 10 and 1,000 (the creation limit)
    python -m bench.record_sizes --quick    # widths 10 and 100
"""

from __future__ import annotations

import argparse
import time
import uuid

import boto3
from pynamodb.exceptions import UpdateError

from bench.cost import item_size
from bench.stack import moto_stack
from controlplane.models import epoch_sk, reader_group_pk, segment_sk, stream_pk, txn_sk
from controlplane.reader_groups import GROUP_KEY
from controlplane.service import Controller
from rillet.errors import RilletError
from rillet.keyspace import segment_id
from rillet.models import ReaderGroupConfig, RetentionPolicy, ScalingPolicy, StreamConfiguration, StreamRange

ITEM_LIMIT = 400 * 1024  # DynamoDB's item size limit (400 KB, names and values)
READERS = 10


def _measure_width(controller: Controller, items, scope: str, width: int) -> list[dict]:
    """Each growing record of a ``width``-segment stream, with its size."""
    stream = f"w{width}"
    pk = stream_pk(scope, stream)
    controller.streams.create_stream(scope, stream, StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(width), retention_policy=RetentionPolicy.by_time(86_400_000)))
    rows = [("stream record", f"{width} segments", items(controller.deployment.metadata_table, f"stream#{scope}/{stream}", "stream")),
            ("epoch record", f"{width} segments", items(controller.deployment.metadata_table, pk, epoch_sk(0)))]
    txn = controller.transactions.begin(scope, stream)
    rows.append(("transaction record", f"{width} segments", items(controller.deployment.metadata_table, pk, txn_sk(txn.txn_id))))
    controller.retention.cycle(scope, stream)
    rows.append(("retention-set record (each)", f"{width} segments",
                 _first(controller, pk, "rs#")))
    offsets = {segment_id(0, i): 0 for i in range(width)}
    controller.watermarks.note_time(scope, stream, "writer-" + uuid.uuid4().hex, int(time.time() * 1000), offsets)
    rows.append(("writer time mark (each)", f"{width} segments", _first(controller, pk, "mark#")))
    controller.watermarks.compute(scope, stream)
    controller.streams.truncate_stream(scope, stream, offsets)
    rows.append(("stream record, truncated, with a watermark", f"{width} segments",
                 items(controller.deployment.metadata_table, f"stream#{scope}/{stream}", "stream")))
    group = f"g{width}"
    config = ReaderGroupConfig(streams=[StreamRange(scope=scope, stream=stream)], automatic_checkpoint_interval_ms=0)
    controller.reader_groups.create(scope, group, config)
    rg = (controller.deployment.metadata_table, reader_group_pk(scope, group), GROUP_KEY)
    rows.append(("reader group state, created", f"{width} segments", items(*rg)))
    try:
        for r in range(READERS):
            controller.reader_groups.add_reader(scope, group, f"reader-{r:02d}-{uuid.uuid4().hex}", uuid.uuid4().hex)
        size: int | str = items(*rg)
    except RilletError as error:
        size = f"refused: {type(error).__name__}"
    except UpdateError as error:  # moto counts an attribute's old and new value together (docs/limits.md)
        size = f"moto refused the update at {items(*rg):,} B: {error.cause_response_code}"
    rows.append(("reader group state", f"{width} segments, {READERS} readers", size))
    # A scale that merges two segments: the new epoch is one narrower, and the merged segment lists its
    # predecessors (a split lists as many successors on the old one).
    first, second = controller.streams.current_segments(scope, stream)[:2]
    epoch = controller.streams.scale_stream(scope, stream, [first.segment_id, second.segment_id],
                                            [(first.low, second.high)])
    merged = max(s.segment_id for s in controller.streams.current_segments(scope, stream))
    rows.append(("epoch record after a merge", f"{width - 1} segments",
                 items(controller.deployment.metadata_table, pk, epoch_sk(epoch))))
    rows.append(("segment record (merged)", "2 predecessors",
                 items(controller.deployment.metadata_table, pk, segment_sk(merged))))
    return [{"record": name, "at": at, "bytes": size} for name, at, size in rows]


def _first(controller: Controller, pk: str, prefix: str) -> int:
    client = boto3.client("dynamodb", endpoint_url=controller.deployment.endpoint_url,
                          region_name=controller.deployment.region)
    items = client.query(TableName=controller.deployment.metadata_table, ConsistentRead=True,
                         KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                         ExpressionAttributeValues={":pk": {"S": pk}, ":p": {"S": prefix}})["Items"]
    return item_size(items[0])


def run(widths: tuple[int, ...] = (10, 1000)) -> dict:
    with moto_stack() as (server, deployment):
        controller = Controller.for_deployment(deployment)
        client = boto3.client("dynamodb", endpoint_url=server.url, region_name=deployment.region)

        def items(table: str, pk: str, sk: str) -> int:
            return item_size(client.get_item(TableName=table, ConsistentRead=True,
                                             Key={"pk": {"S": pk}, "sk": {"S": sk}})["Item"])

        scope = "bench" + uuid.uuid4().hex[:8]
        controller.streams.create_scope(scope)
        rows = [row for width in widths for row in _measure_width(controller, items, scope, width)]
    return {"widths": list(widths), "item_limit": ITEM_LIMIT, "rows": rows}


def report(result: dict) -> str:
    lines = ["sizes of the items that grow with use (real code on moto; DynamoDB's 400 KB item limit = "
             + f"{result['item_limit']:,} B)",
             f"  {'record':<44} {'at':<26} {'size':>12} {'of limit':>9}"]
    for r in result["rows"]:
        size = r["bytes"]
        if isinstance(size, int):
            lines.append(f"  {r['record']:<44} {r['at']:<26} {size:>10,} B {size / result['item_limit']:>8.1%}")
        else:
            lines.append(f"  {r['record']:<44} {r['at']:<26} {size}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="widths 10 and 100")
    print(report(run((10, 100) if parser.parse_args().quick else (10, 1000))))


if __name__ == "__main__":
    main()
