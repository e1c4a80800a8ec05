"""A facade with the API of Pravega's official Python client (``pravega_client``), on Rillet.

Code written for ``pravega_client`` switches by changing the import and the controller URI::

    import rillet.pravega as pravega_client
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

from rillet.pravega.byte_stream import ByteStream
from rillet.pravega.errors import TxnFailedException
from rillet.pravega.manager import StreamManager, StreamRetentionPolicy, StreamScalingPolicy
from rillet.pravega.readers import (
    EventData,
    Slice,
    StreamCuts,
    StreamReader,
    StreamReaderGroup,
    StreamReaderGroupConfig,
)
from rillet.pravega.writers import StreamTransaction, StreamTxnWriter, StreamWriter

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
