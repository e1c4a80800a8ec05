"""The SDK's Transaction against a fake connection (no HTTP): what it sends, when, and what it refuses.

All or nothing: a transaction some of whose writes failed must not be committed (its other events
would become visible without those), and every operation on a closed transaction raises TxnFailed.
"""

from __future__ import annotations

import threading

import pytest

from rillet import api
from rillet.errors import InvalidArgument, TxnFailed
from rillet.models import TxnState
from rillet.serializers import UTF8StringSerializer
from rillet.transaction import TransactionalEventStreamWriter
from rillet.writer import EventWriterConfig

TXN_ID = "a" * 32
SEGMENTS = [{"segment_id": 0, "low": 0.0, "high": 0.5}, {"segment_id": 1, "low": 0.5, "high": 1.0}]


class FakeTransport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.state = "OPEN"

    def json(self, method: str, path: str, json_body=None, **_):
        self.calls.append((method, path))
        if path.endswith("/commit"):
            self.state = "COMMITTED"
        elif path.endswith("/abort"):
            self.state = "ABORTED"
        return {"scope": "sc", "stream": "s", "txn_id": TXN_ID, "state": self.state, "epoch": 0,
                "segments": SEGMENTS, "lease_expiry_ms": 1, "max_expiry_ms": 2}


class FakeSegments:
    """Appends succeed, except to the segments in ``failing`` (a non-retryable error)."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.appended: dict[str, list[bytes]] = {}
        self.lock = threading.Lock()

    def append(self, scope, stream, segment, writer_id, first_event, event_count, block, expected_offset=None,
               raw=False, after=None, block_age_ms=None, deadline=None):
        if str(segment) in self.failing:
            raise InvalidArgument("rejected")
        with self.lock:
            data = self.appended.setdefault(str(segment), [])
            offset = sum(len(b) for b in data)
            data.append(block)
        return api.AppendAck(offset=offset, length=offset + len(block))


class FakeConnection:
    def __init__(self, failing: set[str] = frozenset()) -> None:
        self.controller = type("Controller", (), {})()
        self.controller.transport = FakeTransport()
        self.segments = FakeSegments(set(failing))


def begin(connection: FakeConnection):
    writer = TransactionalEventStreamWriter(connection, "sc", "s", UTF8StringSerializer(), EventWriterConfig(max_latency_ms=5))
    return writer.begin(lease_ms=10_000)


def sent(connection: FakeConnection) -> list[str]:
    return [path.rsplit("/", 1)[-1] for method, path in connection.controller.transport.calls if method == "POST"]


def test_commit_flushes_then_commits_and_closes():
    connection = FakeConnection()
    txn = begin(connection)
    for i in range(6):
        txn.write_event(f"e{i}", routing_key=f"k{i}")
    txn.commit()
    assert sent(connection) == ["transactions", "commit"]
    assert sum(len(v) for v in connection.segments.appended.values()) >= 1
    assert all(f"{TXN_ID}" in name for name in connection.segments.appended)  # only transaction segments
    for operation in (lambda: txn.write_event("late"), txn.commit, txn.abort, lambda: txn.ping(10_000)):
        with pytest.raises(TxnFailed) as e:
            operation()
        assert e.value.details["status"] == TxnState.COMMITTED.value
    assert sent(connection) == ["transactions", "commit"]  # nothing more went out


def test_a_transaction_with_a_failed_write_is_not_committed():
    connection = FakeConnection(failing={f"1.{TXN_ID}"})
    txn = begin(connection)
    futures = [txn.write_event(f"e{i}", routing_key=key) for i, key in enumerate(["a", "b", "c", "d", "e", "f"])]
    txn.flush()
    failed = [f for f in futures if f.exception(timeout=10) is not None]
    assert failed and len(failed) < len(futures)  # some events made it, some did not
    with pytest.raises(TxnFailed) as e:
        txn.commit()
    assert "commit" not in sent(connection), "a partial transaction was committed"
    assert e.value.details["status"] == "OPEN"
    txn.abort()  # the application can still abort it
    assert sent(connection) == ["transactions", "abort"]
