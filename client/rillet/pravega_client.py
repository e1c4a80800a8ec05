"""A facade with the API of Pravega's official Python client (``pravega_client``), on Rillet.

Code written for ``pravega_client`` switches by changing the import and the controller URI::

    import rillet.pravega_client as pravega_client
    manager = pravega_client.StreamManager("http://127.0.0.1:9090")   # was "tcp://127.0.0.1:9090"

(``tcp://`` and ``tls://`` URIs are accepted too and mean ``http://`` and ``https://``; a URI without
a scheme means ``http://``, or ``https://`` with ``tls_enabled=True``.)

Names, argument order, defaults and return values follow pravega_client 0.3.x:

=================================================  ==========================================================
pravega_client                                     Rillet
=================================================  ==========================================================
StreamManager(controller_uri, auth_enabled,        rillet.StreamManager + rillet.Connection; auth_enabled
  tls_enabled, disable_cert_verification)            means SigV4 signing (AWS Function URLs sign anyway)
                                                     with the standard AWS credentials and region
  .create_scope / delete_scope -> bool             StreamManager.create_scope / delete_scope
  .list_scope() / list_stream(scope) -> [str]      list_scopes / list_streams ([] for a missing scope)
  .create_stream(scope, stream, initial_segments)  create_stream(..., StreamConfiguration(fixed(n)))
  .create_stream_with_policy(scope, stream,        create_stream with ScalingPolicy / RetentionPolicy / tags
    scaling_policy, retention_policy, tags)
  .update_stream_with_policy(...) -> bool          update_stream (Rillet-only settings are kept)
  .get_stream_tags -> [str]                        get_stream_tags (sorted: Rillet keeps tags as a set)
  .seal_stream / delete_stream -> bool             seal_stream / delete_stream
  .create_writer(scope, stream,                    EventStreamWriter[bytes] (lowest latency), at most N unacked
    max_inflight_events=0) -> StreamWriter
  .create_transaction_writer(scope, stream,        TransactionalEventStreamWriter[bytes]; writer_id names
    writer_id) -> StreamTxnWriter                    the writer in commit-time watermarks
  .create_reader_group(name, scope, stream,        ReaderGroupManager.create_reader_group(group_config(...)),
    read_from_tail=False, stream_cut=None)           start at the head, the tail or the cut
  .create_reader_group_with_config(name, scope,    same, one StreamRange per stream of the config
    StreamReaderGroupConfig)
  .delete_reader_group(name, scope)                ReaderGroupManager.delete_reader_group
  .create_byte_stream(scope, stream) -> ByteStream ByteStreamWriter + ByteStreamReader
StreamScalingPolicy.fixed_scaling_policy /         ScalingPolicy.fixed / by_data_rate / by_event_rate
  auto_scaling_policy_by_data_rate / _event_rate
StreamRetentionPolicy.none / by_size / by_time     no policy / RetentionPolicy.by_size / by_time (ms)
StreamWriter.write_event(str, routing_key=None)    EventStreamWriter.write_event (UTF-8), waits as below
  .write_event_bytes / write_event_async / flush   write_event / asyncio future of the ack / flush + wait
StreamTxnWriter.begin_txn / get_txn(int)           begin / get_txn (the id as a 128-bit int)
StreamTransaction.write_event / write_event_bytes  Transaction.write_event, waiting for the write
  .commit / commit_timestamp(ts) / abort           commit() / commit(timestamp_ms=ts) / abort
  .is_open / get_txn_id                            check_status() == OPEN / int(txn_id, 16)
StreamReaderGroup.create_reader(name)              an EventStreamReader[bytes] of the group (a name online
                                                     in the group is refused)
  .reader_offline(name) / get_streamcut()          ReaderGroup.reader_offline / get_stream_cuts (first stream)
StreamReader.get_segment_slice_async()             a task: a slice, or an empty one after ~1 s without data
  .release_segment(slice) / reader_offline()       hands the slice back / EventStreamReader.close
Slice (iterator of EventData: data(), offset())    events of one segment, from the group reader's buffer
StreamCuts.get_segment_offset_map()                StreamCut.offsets (Rillet segment ids)
ByteStream.write / flush / readinto / seek /       ByteStreamWriter.write / flush, ByteStreamReader.readinto /
  seekable / tell / truncate /                       seek / tell, truncate_data_before, head_offset /
  current_head_offset / current_tail_offset          tail_offset
TxnFailedException(txn_id)                         a subclass of rillet.errors.TxnFailed
=================================================  ==========================================================

Errors: pravega_client raises ``ValueError`` from the manager, writers and transactions, ``OSError``
from readers and byte streams, and ``TxnFailedException`` for a transaction that is no longer open.
The facade raises Rillet's typed errors made to also be those: ``except ValueError`` (or ``OSError``)
catches them as before, and ``except rillet.StreamNotFound`` still works. ``TxnFailedException`` is a
``rillet.TxnFailed`` whose one argument, as in pravega_client, is the transaction's id.

``auth_enabled=True`` (pravega_client's switch for credentials) signs every request with SigV4, the
authentication of Rillet's Function URLs (which are signed even without it): credentials from the
standard AWS chain, the region from a Function URL, else AWS_REGION / AWS_DEFAULT_REGION / the
profile; with none, the constructor raises a ValueError that says so.

What differs, and why:

* Slices. pravega_client's ``get_segment_slice_async`` hands out the data of one segment read so far.
  Here a slice is the events the group reader has buffered for one of its segments when the slice
  is acquired (one read of the segment); iterating it consumes them in order. The reader's position,
  which it reports to the group (at syncs, checkpoints, ``reader_offline``), is after the last event
  the application took from a slice, so a partially read slice that is released, or whose reader goes
  offline, is read again from the first event not taken (by this reader or another). One slice per
  segment is live: acquiring the same segment again (after new data arrived, or when the previous
  slice was dropped unfinished) supersedes the previous one, which then ends; its untaken events are
  in the new one. A segment taken away from the reader by the group (rebalancing at a checkpoint)
  ends its slice, like a superseded one.
* ``get_segment_slice_async`` returns a task that yields a slice, or, like pravega_client, an empty
  slice when none is ready within about a second (ask again). Its look at the reader runs on the
  reader's own thread, never the loop's default executor, and the wait between looks is an
  ``asyncio.sleep``, so cancelling the task ends it; an idle reader holds no thread. The blocking
  ``get_segment_slice(timeout_ms=None)`` is public too; with a timeout it returns an
  empty slice when nothing arrived in time (an extension).
* Reader groups keep Rillet's (and Pravega Java's) defaults: automatic checkpoints every 30 s, at
  which segments are rebalanced between readers, and a 3 s refresh. The Rust client has no
  checkpoints; a reader passes them while the application acquires and iterates slices. Creating a
  group that exists returns the existing group unchanged.
* Writers send without lingering (like Pravega: ``EventWriterConfig.lowest_latency()``): a block leaves
  as soon as the one before it is answered, with what gathered behind it.
  ``write_event`` returns once at most ``max_inflight_events`` events are unacknowledged, raising the
  error of an earlier event if it failed. Transactional writes wait for their acknowledgement.
* ``get_stream_tags`` returns the tags sorted: Rillet stores them as a set. ``StreamCuts`` maps
  Rillet segment ids (epoch and number) to offsets, where Pravega uses segment numbers.
* ``commit_timestamp`` takes milliseconds (Rillet's watermark unit). ``disable_cert_verification`` is
  accepted and ignored. Byte streams need a single-segment stream, as in Pravega.
* The Rust client flushes a writer and takes a reader offline when they are dropped. A Python
  finalizer may run on any thread (inside a lock another request needs), so the facade does no
  network I/O in one: call ``flush()`` and ``reader_offline()`` (as pravega_client's README asks).
  A dropped writer with nothing outstanding just stops its threads. Byte streams need no flush to
  keep their bytes: as in Pravega, ``ByteStream.write`` sends them (a sender thread appends them in
  order and outlives a dropped ByteStream); ``flush`` waits until they are durable.
* Extension: ``ByteStream.read(size=-1)``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any

from rillet.byte_stream import ByteStreamReader, ByteStreamWriter
from rillet.connection import Connection
from rillet.errors import IllegalState, InvalidArgument, NotFound, RilletError, TxnFailed
from rillet.manager import StreamManager as _RilletStreamManager
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration, TxnState
from rillet.reader_group import (
    EventStreamReader,
    GroupEventRead,
    ReaderGroup,
    ReaderGroupManager,
    group_config,
)
from rillet.serializers import BytesSerializer
from rillet.stream_cut import StreamCut
from rillet.transaction import Transaction, TransactionalEventStreamWriter
from rillet.writer import EventStreamWriter, EventWriterConfig

__all__ = [
    "ByteStream",
    "EventData",
    "Slice",
    "StreamCuts",
    "StreamManager",
    "StreamReader",
    "StreamReaderGroup",
    "StreamReaderGroupConfig",
    "StreamRetentionPolicy",
    "StreamScalingPolicy",
    "StreamTransaction",
    "StreamTxnWriter",
    "StreamWriter",
    "TxnFailedException",
]

class TxnFailedException(TxnFailed):
    """A transaction is no longer open (committed, aborted, or timed out): pravega_client's exception.

    As there, its one argument is the transaction's id (an int); ``message`` and ``details`` say why.
    """

    def __init__(self, txn_id: int, message: str = "", **details: Any) -> None:
        super().__init__(message or f"transaction {txn_id:032x} is no longer open", **details)
        self.txn_id = txn_id
        self.args = (txn_id,)

_TIMEOUT_S = 120.0  # pravega_client's bound on a write, commit or abort
_ACQUIRE_S = 1.0  # pravega_client's get_segment_slice_async yields an empty slice after this without data
_POLL_S = 0.1  # the pause between a waiting acquisition's looks at the reader
_SERIALIZER = BytesSerializer()
_WRITER_CONFIG = EventWriterConfig.lowest_latency()


def _utf8(event: str) -> bytes:
    """The bytes ``write_event`` sends: pravega_client takes str there and bytes in ``write_event_bytes``."""
    if not isinstance(event, str):
        raise TypeError(f"write_event takes a str (write_event_bytes takes bytes), not {type(event).__name__}")
    return event.encode("utf-8")


# -- errors ----------------------------------------------------------------------------------------

_COMPATIBLE: dict[tuple[type, type], type] = {}


def _compatible(error: RilletError, kind: type[Exception]) -> Exception:
    """``error`` as an instance of its own class and of ``kind`` (ValueError or OSError)."""
    if isinstance(error, (kind, TxnFailed)):
        return error
    key = (type(error), kind)
    cls = _COMPATIBLE.get(key)
    if cls is None:
        cls = _COMPATIBLE.setdefault(key, type(type(error).__name__, key, {"__module__": __name__}))
    compatible = cls(error.message, **error.details)
    compatible.__dict__.update(error.__dict__)
    return compatible


@contextmanager
def _raising(kind: type[Exception]) -> Iterator[None]:
    try:
        yield
    except RilletError as e:
        compatible = _compatible(e, kind)
        if compatible is e:
            raise
        raise compatible from e


def _endpoint(controller_uri: str, tls_enabled: bool) -> str:
    scheme, separator, rest = controller_uri.partition("://")
    if not separator:
        scheme, rest = "http", controller_uri
    scheme = {"tcp": "http", "tls": "https"}.get(scheme.lower(), scheme.lower())
    if scheme not in ("http", "https"):
        raise ValueError(f"controller URI {controller_uri!r}: use http(s)://host:port (or tcp:// / tls://)")
    return f"{'https' if tls_enabled else scheme}://{rest}"


# -- policies --------------------------------------------------------------------------------------


class StreamScalingPolicy:
    """How many segments a stream has and whether it auto-scales."""

    def __init__(self, policy: ScalingPolicy | None = None) -> None:
        self.policy = policy or ScalingPolicy.fixed(1)

    @staticmethod
    def fixed_scaling_policy(initial_segments: int) -> StreamScalingPolicy:
        with _raising(ValueError):
            return StreamScalingPolicy(ScalingPolicy.fixed(initial_segments))

    @staticmethod
    def auto_scaling_policy_by_data_rate(target_rate_kbytes_per_sec: int, scale_factor: int,
                                         initial_segments: int) -> StreamScalingPolicy:
        return StreamScalingPolicy(ScalingPolicy.by_data_rate(target_rate_kbytes_per_sec, scale_factor,
                                                              initial_segments))

    @staticmethod
    def auto_scaling_policy_by_event_rate(target_events_per_sec: int, scale_factor: int,
                                          initial_segments: int) -> StreamScalingPolicy:
        return StreamScalingPolicy(ScalingPolicy.by_event_rate(target_events_per_sec, scale_factor,
                                                               initial_segments))

    def __repr__(self) -> str:
        return f"StreamScalingPolicy({self.policy!r})"


class StreamRetentionPolicy:
    """How much of a stream is kept (None: everything)."""

    def __init__(self, policy: RetentionPolicy | None = None) -> None:
        self.policy = policy

    @staticmethod
    def none() -> StreamRetentionPolicy:
        return StreamRetentionPolicy(None)

    @staticmethod
    def by_size(size_in_bytes: int) -> StreamRetentionPolicy:
        return StreamRetentionPolicy(RetentionPolicy.by_size(size_in_bytes))

    @staticmethod
    def by_time(time_in_millis: int) -> StreamRetentionPolicy:
        return StreamRetentionPolicy(RetentionPolicy.by_time(time_in_millis))

    def __repr__(self) -> str:
        return f"StreamRetentionPolicy({self.policy!r})"


# -- the manager -----------------------------------------------------------------------------------


class StreamManager:
    """Scopes, streams, and the factory of writers, reader groups and byte streams."""

    def __init__(self, controller_uri: str, auth_enabled: bool = False, tls_enabled: bool = False,
                 disable_cert_verification: bool = False) -> None:
        self.controller_uri = controller_uri
        self.endpoint = _endpoint(controller_uri, tls_enabled)
        sign = True if auth_enabled else None  # None: Function URLs are signed, others are not
        with _raising(ValueError):
            self.connection = Connection(self.endpoint, sign=sign)
            self.manager = _RilletStreamManager(self.endpoint, sign=sign)

    # -- scopes and streams ------------------------------------------------------------------------

    def create_scope(self, scope_name: str) -> bool:
        with _raising(ValueError):
            return self.manager.create_scope(scope_name)

    def delete_scope(self, scope_name: str) -> bool:
        with _raising(ValueError):
            return self.manager.delete_scope(scope_name)

    def list_scope(self) -> list[str]:
        with _raising(ValueError):
            return [s.scope for s in self.manager.list_scopes()]

    def list_stream(self, scope_name: str) -> list[str]:
        """The scope's streams; [] for a scope that does not exist (or an invalid name)."""
        try:
            with _raising(ValueError):
                return list(self.manager.list_streams(scope_name))
        except (NotFound, InvalidArgument):
            return []

    def create_stream_with_policy(self, scope_name: str, stream_name: str,
                                  scaling_policy: StreamScalingPolicy | None = None,
                                  retention_policy: StreamRetentionPolicy | None = None,
                                  tags: list[str] | None = None) -> bool:
        with _raising(ValueError):
            config = StreamConfiguration(scaling_policy=(scaling_policy or StreamScalingPolicy()).policy,
                                         retention_policy=(retention_policy or StreamRetentionPolicy()).policy,
                                         tags=frozenset(tags or ()))
            return self.manager.create_stream(scope_name, stream_name, config)

    def create_stream(self, scope_name: str, stream_name: str, initial_segments: int) -> bool:
        return self.create_stream_with_policy(scope_name, stream_name,
                                              StreamScalingPolicy.fixed_scaling_policy(initial_segments))

    def update_stream_with_policy(self, scope_name: str, stream_name: str,
                                  scaling_policy: StreamScalingPolicy | None = None,
                                  retention_policy: StreamRetentionPolicy | None = None,
                                  tags: list[str] | None = None) -> bool:
        """Replace the stream's scaling policy, retention policy and tags (the defaults when omitted)."""
        with _raising(ValueError):
            current = self.manager.get_stream_info(scope_name, stream_name).configuration
            config = StreamConfiguration(**{**dict(current),
                                            "scaling_policy": (scaling_policy or StreamScalingPolicy()).policy,
                                            "retention_policy": (retention_policy or StreamRetentionPolicy()).policy,
                                            "tags": frozenset(tags or ())})
            self.manager.update_stream(scope_name, stream_name, config)
            return True

    def get_stream_tags(self, scope_name: str, stream_name: str) -> list[str]:
        with _raising(ValueError):
            return sorted(self.manager.get_stream_tags(scope_name, stream_name))

    def seal_stream(self, scope_name: str, stream_name: str) -> bool:
        with _raising(ValueError):
            self.manager.seal_stream(scope_name, stream_name)
            return True

    def delete_stream(self, scope_name: str, stream_name: str) -> bool:
        with _raising(ValueError):
            return self.manager.delete_stream(scope_name, stream_name)

    # -- clients -----------------------------------------------------------------------------------

    def create_writer(self, scope_name: str, stream_name: str, max_inflight_events: int = 0) -> StreamWriter:
        with _raising(ValueError):
            writer = EventStreamWriter(self.connection, scope_name, stream_name, _SERIALIZER, _WRITER_CONFIG)
        return StreamWriter(writer, max_inflight_events)

    def create_transaction_writer(self, scope_name: str, stream_name: str, writer_id: int) -> StreamTxnWriter:
        with _raising(ValueError):
            self.manager.get_stream_info(scope_name, stream_name)  # the stream must exist
        writer = TransactionalEventStreamWriter(self.connection, scope_name, stream_name, _SERIALIZER,
                                                _WRITER_CONFIG)
        writer.writer_id = str(writer_id)
        return StreamTxnWriter(writer)

    def create_reader_group(self, reader_group_name: str, scope_name: str, stream_name: str,
                            read_from_tail: bool = False, stream_cut: StreamCuts | None = None) -> StreamReaderGroup:
        """A group reading the stream from its head, its tail, or ``stream_cut``."""
        with _raising(ValueError):
            if stream_cut is not None:
                start: str | StreamCut = StreamCut.of(scope_name, stream_name, list(stream_cut.cut.positions),
                                                      stream_cut.cut.incarnation)
            elif read_from_tail:
                start = self.manager.get_tail(scope_name, stream_name)
            else:
                start = f"{scope_name}/{stream_name}"
            return self._group(reader_group_name, scope_name, [start])

    def create_reader_group_with_config(self, reader_group_name: str, scope_name: str,
                                        rg_config: StreamReaderGroupConfig) -> StreamReaderGroup:
        with _raising(ValueError):
            starts: list[str | StreamCut] = [
                self.manager.get_tail(rg_config.scope_name, s) if rg_config.read_from_tail
                else f"{rg_config.scope_name}/{s}" for s in rg_config.stream_names]
            return self._group(reader_group_name, scope_name, starts)

    def _group(self, name: str, scope: str, starts: list[str | StreamCut]) -> StreamReaderGroup:
        ReaderGroupManager(scope, self.connection).create_reader_group(name, group_config(starts))
        streams = [s if isinstance(s, str) else f"{s.scope}/{s.stream}" for s in starts]
        return StreamReaderGroup(ReaderGroup(self.connection, scope, name), streams)

    def delete_reader_group(self, reader_group_name: str, scope_name: str) -> None:
        with _raising(ValueError):
            ReaderGroupManager(scope_name, self.connection).delete_reader_group(reader_group_name)

    def create_byte_stream(self, scope_name: str, stream_name: str) -> ByteStream:
        with _raising(OSError):
            return ByteStream(self.connection, scope_name, stream_name)

    def __repr__(self) -> str:
        return f"StreamManager(controller_uri={self.controller_uri!r}, endpoint={self.endpoint!r})"


# -- writers ---------------------------------------------------------------------------------------


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
        with _raising(ValueError):
            self._inflight.append(self.writer.write_event(bytes(event), routing_key))
            while len(self._inflight) > self.max_inflight_events:
                self._inflight.popleft().result(timeout=_TIMEOUT_S)

    def write_event_async(self, event: str, routing_key: str | None = None) -> asyncio.Future[None]:
        """Write now; the returned asyncio future (of the running loop) completes when the event is
        durable. As in pravega_client, the write goes ahead whether or not the future is awaited."""
        if not isinstance(event, str):
            raise TypeError(f"write_event_async takes a str, not {type(event).__name__}")
        loop = asyncio.get_running_loop()
        with _raising(OSError):
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
        with _raising(ValueError):
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
        acknowledged.set_exception(_compatible(error, OSError) if isinstance(error, RilletError) else error)


class StreamTxnWriter:
    """Begins transactions on a stream, or resumes one by id."""

    def __init__(self, writer: TransactionalEventStreamWriter[bytes]) -> None:
        self.writer = writer

    def begin_txn(self) -> StreamTransaction:
        with _raising(ValueError):
            return StreamTransaction(self.writer.begin())

    def get_txn(self, txn_id: int) -> StreamTransaction:
        with _raising(ValueError):
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
        with _raising(ValueError):
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
            with _raising(ValueError):
                yield
        except TxnFailed as e:
            raise TxnFailedException(self.get_txn_id(), e.message, **e.details) from e

    def __repr__(self) -> str:
        return f"StreamTransaction(Txn id: {self.get_txn_id()}, {self.txn.info.scope}/{self.txn.info.stream})"


# -- reader groups ---------------------------------------------------------------------------------


class StreamReaderGroupConfig:
    """The streams (of one scope) a reader group reads, all from their head or all from their tail."""

    def __init__(self, read_from_tail: bool, scope_name: str, *stream_names: str) -> None:
        if not stream_names:
            raise ValueError("No Pravega Streams present in the ReaderGroupConfiguration")
        self.read_from_tail = bool(read_from_tail)
        self.scope_name = scope_name
        self.stream_names = list(stream_names)

    def __repr__(self) -> str:
        return (f"StreamReaderGroupConfig(read_from_tail={self.read_from_tail}, scope={self.scope_name!r}, "
                f"streams={self.stream_names!r})")


class StreamCuts:
    """A position in a stream: an offset for each segment across the key space."""

    def __init__(self, cut: StreamCut) -> None:
        self.cut = cut

    def get_segment_offset_map(self) -> dict[int, int]:
        return dict(self.cut.offsets)

    def __repr__(self) -> str:
        return f"StreamCuts({self.cut.to_text()!r})"


class StreamReaderGroup:
    def __init__(self, group: ReaderGroup, streams: list[str]) -> None:
        self.group = group
        self.streams = streams

    def create_reader(self, reader_name: str) -> StreamReader:
        """A new reader of the group; a name already online in it is refused (AlreadyExists, also a
        ValueError), as pravega_client does: by the server, at the join, so of two created at once with
        one name exactly one gets in."""
        with _raising(ValueError):
            reader = _SlicingReader(self.group.connection, self.group.scope, self.group.name, reader_name,
                                    _SERIALIZER)
        return StreamReader(reader)

    def reader_offline(self, reader_name: str) -> None:
        """Hand the reader's segments back to the group at its last reported position (idempotent)."""
        with _raising(ValueError):
            self.group.reader_offline(reader_name, None)

    def get_streamcut(self) -> StreamCuts:
        """The group's position in its (first) stream, as of its readers' last reports."""
        with _raising(ValueError):
            cuts = self.group.get_stream_cuts()
            cut = next((cuts[s] for s in self.streams if s in cuts), None) or next(iter(cuts.values()), None)
            if cut is None:
                raise IllegalState(f"reader group {self.group.name} has no stream cut")
            return StreamCuts(cut)

    def __repr__(self) -> str:
        return f"StreamReaderGroup(ReaderGroup: {self.group.scope}/{self.group.name}, streams: {self.streams})"


_READY = object()  # peeking: some segment has buffered events
_GONE = object()  # a slice's segment has no buffered events (any more)


class _SlicingReader(EventStreamReader[bytes]):
    """The group reader, whose choice of the next buffered event can be narrowed for slices.

    ``_only`` None reads as usual; ``_READY`` only peeks (read_next_event returns ``_READY`` once any
    segment has buffered events, after syncing and fetching as usual); a segment key returns the
    next buffered event of that segment only, or ``_GONE``.
    """

    _only: object = None

    def _next_buffered(self) -> Any:
        only = self._only
        if only is None:
            return super()._next_buffered()
        if only is _READY:
            return _READY if any(h.events for h in self._held.values()) else None
        held = self._held.get(only)
        if held is None or not held.events:
            return _GONE
        self._next = sorted(self._held).index(only)  # the base class takes the next event from here
        return super()._next_buffered()


class EventData:
    """An event of a slice: its bytes and its offset in its segment."""

    __slots__ = ("_data", "_offset")

    def __init__(self, data: bytes, offset: int) -> None:
        self._data, self._offset = data, offset

    def data(self) -> bytes:
        return self._data

    def offset(self) -> int:
        return self._offset

    def __repr__(self) -> str:
        return f"EventData(offset {self._offset} data: {self._data!r})"


class Slice:
    """Events of one segment, in order; iterate it (or call ``next``) to consume them."""

    def __init__(self, reader: StreamReader | None, segment: str | None, count: int) -> None:
        self._reader = reader
        self.segment = segment
        self._remaining = count

    def __iter__(self) -> Slice:
        return self

    def __next__(self) -> EventData:
        event = self._reader._take(self) if self._remaining > 0 and self._reader is not None else None
        if event is None:
            self._remaining = 0
            raise StopIteration
        self._remaining -= 1
        return event

    def _end(self) -> None:
        self._remaining = 0

    def __repr__(self) -> str:
        return f"Slice(segment={self.segment!r}, remaining={self._remaining})"


class StreamReader:
    """A reader of a reader group, handing out its data as per-segment slices."""

    def __init__(self, reader: _SlicingReader) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[str, Slice] = weakref.WeakValueDictionary()
        self._turn = 0
        self._offline = False
        # The reader's own thread for the HTTP of async acquisitions: the loop's default executor stays
        # free, however many readers wait on an idle stream.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rillet-slice")

    def get_segment_slice_async(self) -> asyncio.Future[Slice]:
        """A future (a task of the running loop) of the next slice: empty if none is ready within about
        a second, as in pravega_client. Cancelling it ends the wait; nothing is lost, since events are
        only taken by iterating a slice."""
        return asyncio.ensure_future(self._acquire(_ACQUIRE_S))

    async def _acquire(self, timeout_s: float) -> Slice:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            with _raising(OSError):
                self._check_online()  # before submitting: reader_offline shuts the executor down
            found = await loop.run_in_executor(self._executor, self._look)
            remaining = deadline - loop.time()
            if found is not None or remaining <= 0:
                return found or Slice(None, None, 0)
            await asyncio.sleep(min(_POLL_S, remaining))

    def get_segment_slice(self, timeout_ms: int | None = None) -> Slice:
        """Wait for a slice (at most ``timeout_ms``, then return an empty one; forever if None)."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            found = self._look()
            if found is not None:
                return found
            remaining = _POLL_S if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return Slice(None, None, 0)
            time.sleep(min(_POLL_S, remaining))

    def _look(self) -> Slice | None:
        """A slice of a segment with buffered events, after one read of the reader's segments without
        waiting; None if there is none."""
        with self._lock, _raising(OSError):
            self._check_online()
            segment = self._buffered_segment()
            if segment is None:
                self._read(_READY, 0)
                segment = self._buffered_segment()
            return None if segment is None else self._slice(segment)

    def release_segment(self, slice: Slice) -> None:
        """Hand the slice back: events not taken from it are served again by the next slices."""
        with self._lock:
            if slice.segment is not None and self._live.get(slice.segment) is slice:
                del self._live[slice.segment]
            slice._end()

    def reader_offline(self) -> None:
        """Leave the group; its segments go back to the group after the last events taken from slices."""
        with self._lock, _raising(OSError):
            if not self._offline:
                self._offline = True
                self._executor.shutdown(wait=False)
                self.reader.close()

    def _check_online(self) -> None:
        if self._offline:
            raise IllegalState(f"reader {self.reader.reader_id} is offline")

    def _read(self, only: object, timeout_ms: int) -> GroupEventRead[bytes] | object | None:
        self.reader._only = only
        try:
            return self.reader.read_next_event(timeout_ms=timeout_ms)
        finally:
            self.reader._only = None

    def _buffered_segment(self) -> str | None:
        """A segment with buffered events, preferring those without an unfinished slice, in turn."""
        keys = sorted(k for k, h in self.reader._held.items() if h.events)
        if not keys:
            return None
        free = [k for k in keys if (s := self._live.get(k)) is None or s._remaining == 0]
        candidates = free or keys
        self._turn += 1
        return candidates[self._turn % len(candidates)]

    def _slice(self, segment: str) -> Slice:
        previous = self._live.get(segment)
        if previous is not None:
            previous._end()  # superseded: its events not taken are in the new slice
        new = Slice(self, segment, len(self.reader._held[segment].events))
        self._live[segment] = new
        return new

    def _take(self, slice: Slice) -> EventData | None:
        with self._lock, _raising(OSError):
            if self._offline or self._live.get(slice.segment) is not slice:
                return None
            for _ in range(16):  # checkpoint markers first: each call passes one
                read = self._read(slice.segment, 0)
                if isinstance(read, GroupEventRead):
                    if read.is_checkpoint:
                        continue
                    return EventData(read.event, read.pointer.offset)
                return None
            return None

    def __repr__(self) -> str:
        return f"StreamReader(reader: {self.reader.reader_id}, group: {self.reader.group.scope}/{self.reader.group.name})"


# -- byte streams ----------------------------------------------------------------------------------


class ByteStream:
    """A single-segment stream as a binary file: write (sent at once), flush (wait), read and seek anywhere."""

    def __init__(self, connection: Connection, scope: str, stream: str) -> None:
        self.scope, self.stream = scope, stream
        self.writer = ByteStreamWriter(connection, scope, stream)
        self.reader = ByteStreamReader(connection, scope, stream)

    def write(self, byte_array: bytes) -> int:
        """Send ``byte_array`` (returning before its acknowledgement; ``flush`` waits for it); returns
        the number of bytes taken."""
        with _raising(OSError):
            return self.writer.write(bytes(byte_array))

    def flush(self) -> None:
        with _raising(OSError):
            self.writer.flush()

    def readinto(self, buf: bytearray) -> int:
        """Read into ``buf`` (waiting for data at the tail); returns the number of bytes read.

        Like pravega_client, only a bytearray is taken (TypeError otherwise, before anything is read)."""
        if not isinstance(buf, bytearray):
            raise TypeError(f"readinto takes a bytearray, not {type(buf).__name__}")
        with _raising(OSError):
            return self.reader.readinto(buf)

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (an extension: io.RawIOBase's read)."""
        with _raising(OSError):
            return self.reader.read(size)

    def seek(self, position: int, whence: int | None = None) -> int:
        """Move the read position: whence 0 from the start, 1 from the current position, 2 from the end."""
        whence = 0 if whence is None else whence
        if whence not in (0, 1, 2):
            raise ValueError("whence should be one of 0: seek from start, 1: seek from current, or 2: seek from end")
        with _raising(ValueError):
            return self.reader.seek(position, whence)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.reader.tell()

    def current_head_offset(self) -> int:
        with _raising(OSError):
            return self.reader.head_offset()

    def current_tail_offset(self) -> int:
        with _raising(OSError):
            return self.reader.tail_offset()

    def truncate(self, offset: int) -> None:
        """Release all data before ``offset`` (flushing first)."""
        with _raising(OSError):
            self.writer.truncate_data_before(offset)

    def __repr__(self) -> str:
        return f"ByteStream(Stream: {self.scope}/{self.stream})"
