"""AWS requests per control operation, through the control API of a standalone stack.

Each operation is sent over HTTP to the controller handler; the moto server counts the DynamoDB and S3
requests it caused (one warm-up round first, so per-process set-up such as DescribeTable is excluded).
Run: ``.venv/bin/python -m bench.control_ops``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

import rillet
from rillet.models import ScalingPolicy, StreamConfiguration
from standalone.stack import Stack, StackConfig


def _operations(manager: rillet.StreamManager, url: str, scope: str) -> list[tuple[str, Callable[[], object]]]:
    factory = rillet.EventStreamClientFactory(scope, url)
    groups = rillet.ReaderGroupManager(scope, url)
    three = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3))
    txns = factory.create_transactional_writer("s", rillet.BytesSerializer())
    state: dict = {}

    def commit() -> None:
        state["txn"].commit()

    return [
        ("create scope", lambda: manager.create_scope(scope)),
        ("create stream (3 segments)", lambda: manager.create_stream(scope, "s", three)),
        ("stream info", lambda: manager.get_stream_info(scope, "s")),
        ("list streams", lambda: list(manager.list_streams(scope))),
        ("update stream", lambda: manager.update_stream(scope, "s", three)),
        ("current segments", lambda: factory.connection.controller.current_segments(scope, "s")),
        ("scale (split 1 into 2)", lambda: manager.scale_stream(scope, "s", [0], [(0.0, 1 / 6), (1 / 6, 1 / 3)])),
        ("successors", lambda: factory.connection.controller.successors(scope, "s", 0)),
        ("begin transaction", lambda: state.update(txn=txns.begin())),
        ("commit transaction (empty)", commit),
        ("create reader group", lambda: groups.create_reader_group("g", rillet.group_config([f"{scope}/s"]))),
        ("truncate at the tail", lambda: manager.truncate_stream(scope, "s", manager.get_tail(scope, "s"))),
        ("seal stream", lambda: manager.seal_stream(scope, "s")),
        ("delete stream", lambda: manager.delete_stream(scope, "s")),
        ("delete reader group", lambda: groups.delete_reader_group("g")),
        ("delete scope", lambda: manager.delete_scope(scope)),
    ]


def run() -> list[tuple[str, Counter]]:
    results = []
    with Stack(StackConfig.ephemeral()) as stack:
        manager = rillet.StreamManager(stack.controller_url)
        for warm_up in (True, False):
            scope = "ops" + uuid.uuid4().hex[:8]
            for name, operation in _operations(manager, stack.controller_url, scope):
                stack.requests.reset()
                operation()
                counts, _ = stack.requests.snapshot()
                if not warm_up:
                    results.append((name, counts))
    return results


def report(results: list[tuple[str, Counter]]) -> str:
    lines = ["AWS requests per control operation (through the control API):"]
    for name, counts in results:
        detail = ", ".join(f"{op} {n}" for (_, op), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"  {name:<30} {sum(counts.values()):>3}  ({detail})")
    return "\n".join(lines)


def main() -> None:
    print(report(run()))


if __name__ == "__main__":
    main()
