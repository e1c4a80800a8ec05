"""pravega_client's writers: ``StreamWriter`` (events, at most ``max_inflight_events`` awaiting their
acknowledgement) and ``StreamTxnWriter`` with its ``StreamTransaction``."""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress

from rillet.errors import RilletError, TxnFailed
from rillet.models import TxnState
from rillet.pravega.errors import TxnFailedException, compatible, raising
from rillet.transaction import Transaction, TransactionalEventStreamWriter
from rillet.writer import EventStreamWriter

_TIMEOUT_S = 120.0  # pravega_client's bound on a write, commit or abort


def _utf8(event: str) -> bytes:
    """The bytes ``write_event`` sends: pravega_client takes str there and bytes in ``write_event_bytes``."""
    if not isinstance(event, str):
        raise TypeError(f"write_event takes a str (write_event_bytes takes bytes), not {type(event).__name__}")
    return event.encode("utf-8")


class StreamWriter:
    """Writes events to a stream; each is in the stream exactly once, in order per routing key."""

    def __init__(self, writer: EventStreamWriter[bytes], max_inflight_events: int = 0) -> None:
        self.writer = writer
        self.max_inflight_events = max(0, int(max_inflight_events))
        self._inflight: deque[Future] = deque()
        self._async: set[Future] = set()  # acknowledgements of write_event_async not yet received

    def write_event(self, event: str, routing_key: str | None = None) -> None:
        self.write_event_bytes(_utf8(event), routing_key)

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        """Write; return once at most ``max_inflight_events`` events await their acknowledgement."""
        with raising(ValueError):
            self._inflight.append(self.writer.write_event(bytes(event), routing_key))
            while len(self._inflight) > self.max_inflight_events:
                self._inflight.popleft().result(timeout=_TIMEOUT_S)

    def write_event_async(self, event: str, routing_key: str | None = None) -> asyncio.Future[None]:
        """Write now; the returned asyncio future (of the running loop) completes when the event is
        durable. As in pravega_client, the write goes ahead whether or not the future is awaited."""
        if not isinstance(event, str):
            raise TypeError(f"write_event_async takes a str, not {type(event).__name__}")
        loop = asyncio.get_running_loop()
        with raising(OSError):
            future = self.writer.write_event(event.encode("utf-8"), routing_key)
        self._async.add(future)
        future.add_done_callback(self._async.discard)
        acknowledged = loop.create_future()
        future.add_done_callback(lambda done: _settle_from_any_thread(loop, acknowledged, done))
        return acknowledged

    def flush(self) -> None:
        """Wait until every event written so far is durable; raise the first failure."""
        pending = list(self._inflight)
        self._inflight.clear()
        with raising(ValueError):
            self.writer.flush()
            for future in pending:
                future.result(timeout=_TIMEOUT_S)

    def __del__(self) -> None:
        """Stop the threads of a dropped writer that has nothing outstanding (then close does no I/O)."""
        idle = all(f.done() for f in getattr(self, "_inflight", ())) and not getattr(self, "_async", True)
        if idle and not sys.is_finalizing():
            with suppress(Exception):
                self.writer.close()

    def __repr__(self) -> str:
        return f"StreamWriter(Stream: {self.writer.scope}/{self.writer.stream})"


def _settle_from_any_thread(loop: asyncio.AbstractEventLoop, acknowledged: asyncio.Future[None],
                            done: Future) -> None:
    """Hand the writer's outcome to the loop, unless the loop is gone (then nobody can await it)."""
    with suppress(RuntimeError):  # the loop closed
        loop.call_soon_threadsafe(_settle, acknowledged, done)


def _settle(acknowledged: asyncio.Future[None], done: Future) -> None:
    """Complete the loop's future as the writer's future completed (its error as an OSError too)."""
    if acknowledged.cancelled():
        return
    error = done.exception()
    if error is None:
        acknowledged.set_result(None)
    else:
        acknowledged.set_exception(compatible(error, OSError) if isinstance(error, RilletError) else error)


class StreamTxnWriter:
    """Begins transactions on a stream, or resumes one by id."""

    def __init__(self, writer: TransactionalEventStreamWriter[bytes]) -> None:
        self.writer = writer

    def begin_txn(self) -> StreamTransaction:
        with raising(ValueError):
            return StreamTransaction(self.writer.begin())

    def get_txn(self, txn_id: int) -> StreamTransaction:
        with raising(ValueError):
            return StreamTransaction(self.writer.get_txn(f"{int(txn_id):032x}"))

    def __repr__(self) -> str:
        return f"StreamTxnWriter(Stream: {self.writer.scope}/{self.writer.stream})"


class StreamTransaction:
    """Events that become visible all at once on commit, or never."""

    def __init__(self, txn: Transaction[bytes]) -> None:
        self.txn = txn

    def get_txn_id(self) -> int:
        return int(self.txn.txn_id, 16)

    def is_open(self) -> bool:
        with raising(ValueError):
            return self.txn.check_status() == TxnState.OPEN

    def write_event(self, event: str, routing_key: str | None = None) -> None:
        self.write_event_bytes(_utf8(event), routing_key)

    def write_event_bytes(self, event: bytes, routing_key: str | None = None) -> None:
        """Write to the transaction and wait until it is durable there (TxnFailedException once closed)."""
        with self._raising():
            self.txn.write_event(bytes(event), routing_key).result(timeout=_TIMEOUT_S)

    def commit(self) -> None:
        with self._raising():
            self.txn.commit(timeout_s=_TIMEOUT_S)

    def commit_timestamp(self, timestamp: int) -> None:
        """Commit, noting ``timestamp`` (milliseconds) as the writer's time for watermarks."""
        with self._raising():
            self.txn.commit(timestamp_ms=timestamp, timeout_s=_TIMEOUT_S)

    def abort(self) -> None:
        with self._raising():
            self.txn.abort()

    @contextmanager
    def _raising(self) -> Iterator[None]:
        """pravega_client's errors: TxnFailedException(txn id) for a closed transaction, else ValueError."""
        try:
            with raising(ValueError):
                yield
        except TxnFailed as e:
            raise TxnFailedException(self.get_txn_id(), e.message, **e.details) from e

    def __repr__(self) -> str:
        return f"StreamTransaction(Txn id: {self.get_txn_id()}, {self.txn.info.scope}/{self.txn.info.stream})"
