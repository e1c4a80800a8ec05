"""Transactional writes: events that become visible all at once, or never (Pravega's transactions).

``begin()`` asks the controller for a transaction (with a lease) and writes its events to the
transaction's own segments, one per segment of the epoch it began in, with the same batching and
de-duplication as the plain writer. ``commit()`` flushes, then commits: the events appear in the
stream contiguously, in one step, even if the stream scaled meanwhile. ``abort()`` (or a lease
that runs out) discards them. Once a transaction is committing, committed, aborting or aborted,
every operation on it raises :class:`rillet.errors.TxnFailed`. So does ``commit()`` when a write to
the transaction failed: it does not commit the other events without that one.

A writer that dies mid-transaction leaves it to time out; ``get_txn(txn_id)`` resumes one whose id
was kept, to write more, commit or abort it.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import Future
from typing import Generic, TypeVar
from urllib.parse import quote

from rillet import api
from rillet.connection import Connection
from rillet.errors import RilletError, TxnFailed
from rillet.models import SegmentRange, TxnInfo, TxnState
from rillet.names import txn_segment_token
from rillet.serializers import Serializer
from rillet.writer import EventStreamWriter, EventWriterConfig
from rillet.writer_state import _SegmentQueue

T = TypeVar("T")


class _TxnSegmentsWriter(EventStreamWriter[T]):
    """The plain writer, aimed at a transaction's segments; a sealed or missing one means it closed."""

    raises_unseen_failures = False  # a failed write fails the commit (TxnFailed): all or nothing

    def __init__(self, connection: Connection, info: TxnInfo, serializer: Serializer[T],
                 config: EventWriterConfig | None) -> None:
        self.txn_id = info.txn_id
        super().__init__(connection, info.scope, info.stream, serializer, config, segments=info.segments)

    def _target(self, segment: SegmentRange) -> str:
        return txn_segment_token(segment.segment_id, self.txn_id)

    def _gone(self, error: RilletError) -> RilletError:
        return TxnFailed(f"transaction {self.txn_id} is closed: {error.message}")

    def _resolve_sealed(self, queue: _SegmentQueue) -> None:
        with self._cond:
            held = self._take_held(queue)
            queue.closed_by = TxnFailed(f"transaction {self.txn_id} is committing or closed")
            for item in held:
                self._enqueue(item)
            self._cond.notify_all()


class Transaction(Generic[T]):
    def __init__(self, connection: Connection, info: TxnInfo, serializer: Serializer[T],
                 config: EventWriterConfig | None, writer_id: str) -> None:
        self.connection = connection
        self.writer_id = writer_id  # the transactional writer's: its commit times are one writer's marks
        self.info = info
        self.txn_id = info.txn_id
        self._path = (f"/v1/scopes/{quote(info.scope, safe='')}/streams/{quote(info.stream, safe='')}"
                      f"/transactions/{info.txn_id}")
        self._writer = _TxnSegmentsWriter(connection, info, serializer, config)
        self._closed: TxnState | None = None
        self._write_failure: BaseException | None = None  # the first write of this object that failed

    def write_event(self, event: T, routing_key: str | None = None, timestamp_ms: int | None = None) -> Future:
        self._check_open()
        future = self._writer.write_event(event, routing_key, timestamp_ms)
        future.add_done_callback(self._note_failure)
        return future

    def _note_failure(self, future: Future) -> None:
        if self._write_failure is None and future.exception() is not None:
            self._write_failure = future.exception()

    def flush(self) -> None:
        """Wait until every event written so far is durable in the transaction (still invisible)."""
        self._writer.flush()

    def ping(self, lease_ms: int) -> TxnInfo:
        """Renew the lease to ``lease_ms`` from now. LeaseTooLarge above the deployment's maximum;
        TxnFailed once closed, or with ``details["status"] == "MAX_EXECUTION_TIME_EXCEEDED"`` if the new
        lease would end past ``info.max_expiry_ms``: then the transaction stays open, and can still be
        committed, until its current lease ends (Pravega's pingTxn)."""
        self._check_open()
        self.info = api.parse_answer(TxnInfo, self._call("POST", "/ping", api.PingTxnRequest(lease_ms=lease_ms).model_dump()))
        return self.info

    def check_status(self) -> TxnState:
        self.info = api.parse_answer(TxnInfo, self.connection.controller.transport.json("GET", self._path))
        return self.info.state

    def commit(self, timestamp_ms: int | None = None, timeout_s: float = 120.0) -> None:
        """Flush, then commit; returns once the transaction is COMMITTED (its events are visible).

        With ``timestamp_ms`` the writer also notes that time for watermarks, at the stream's tail.
        """
        self._check_open()
        self._writer.flush()
        if self._write_failure is not None:
            # All or nothing: committing now would make the other events visible without this one.
            # An open transaction stays open: abort it (or let its lease run out) and write it again.
            state = self.check_status()
            raise TxnFailed(f"transaction {self.txn_id} ({state.value}) is not committed by this writer: a write "
                            f"to it failed ({self._write_failure})", status=state.value)
        body = api.CommitTxnRequest(timestamp_ms=timestamp_ms, writer_id=self.writer_id).model_dump()
        deadline = time.monotonic() + timeout_s
        while True:
            self.info = api.parse_answer(TxnInfo, self._call("POST", "/commit", body))
            if self.info.state == TxnState.COMMITTED:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"transaction {self.txn_id} is still {self.info.state.value}")
            time.sleep(0.2)  # another workflow holds the stream; asking again drives the commit
        self._finish(TxnState.COMMITTED)

    def abort(self) -> None:
        self._check_open()
        self.info = api.parse_answer(TxnInfo, self._call("POST", "/abort", None))
        self._finish(TxnState.ABORTED)

    def _finish(self, state: TxnState) -> None:
        self._closed = state
        self._writer.close()

    def _check_open(self) -> None:
        if self._closed is not None:
            raise TxnFailed(f"transaction {self.txn_id} is {self._closed.value}", status=self._closed.value)

    def _call(self, method: str, suffix: str, body: dict | None) -> dict:
        return self.connection.controller.transport.json(method, self._path + suffix, json_body=body or {})


class TransactionalEventStreamWriter(Generic[T]):
    def __init__(self, connection: Connection, scope: str, stream: str, serializer: Serializer[T],
                 config: EventWriterConfig | None = None) -> None:
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.serializer = serializer
        self.config = config or EventWriterConfig()
        self._path = f"/v1/scopes/{quote(scope, safe='')}/streams/{quote(stream, safe='')}/transactions"
        self.writer_id = uuid.uuid4().hex

    def begin(self, lease_ms: int | None = None) -> Transaction[T]:
        data = self.connection.controller.transport.json("POST", self._path,
                                                         json_body=api.BeginTxnRequest(lease_ms=lease_ms).model_dump())
        return Transaction(self.connection, api.parse_answer(TxnInfo, data), self.serializer, self.config, self.writer_id)

    def get_txn(self, txn_id: str) -> Transaction[T]:
        """Resume a transaction by id (for instance one begun by a writer that died)."""
        data = self.connection.controller.transport.json("GET", f"{self._path}/{txn_id}")
        info = api.parse_answer(TxnInfo, data)
        txn = Transaction(self.connection, info, self.serializer, self.config, self.writer_id)
        if info.state != TxnState.OPEN:
            txn._closed = info.state
        return txn

    def commit_batch(self, sink: str, batch_id: int, txn_ids: list[str]) -> bool:
        """Commit the transactions of batch ``batch_id`` of streaming writer ``sink`` exactly once.

        Returns False when that batch is the sink's last committed batch again (a re-execution); the
        given transactions are then aborted. A batch older than the last committed raises IllegalState
        (another writer under this sink name, or a restart from scratch); its transactions are aborted.
        """
        body = api.CommitBatchRequest(batch_id=batch_id, txn_ids=txn_ids).model_dump()
        data = self.connection.controller.transport.json(
            "POST", self._path.rsplit("/", 1)[0] + f"/sinks/{quote(sink, safe='')}/batches", json_body=body)
        return api.parse_answer(api.CommitBatchResult, data).committed

    def close(self) -> None:
        """Nothing to release: each transaction owns its writer."""
