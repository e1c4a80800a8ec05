"""The scenarios of pravega_client's own Python tests, through ``rillet.pravega``.

Ported from pravega-client-python's tests (pravega_client_test.py, pravega_reader_test.py, test.py):
only the import and the controller URI change (``url``, the standalone stack's controller, instead
of ``tcp://127.0.0.1:9090``), plus unique scope names and exact assertions where the originals
printed. Large events and event counts are scaled down to keep the file fast.
"""

from __future__ import annotations

import asyncio

import pytest

import rillet
import rillet.pravega as pravega_client  # the one line a user of pravega_client changes
from rillet.pravega import StreamRetentionPolicy, StreamScalingPolicy, TxnFailedException

WAIT_S = 30


@pytest.fixture
def manager(url) -> pravega_client.StreamManager:
    return pravega_client.StreamManager(url)


async def acquire(reader: pravega_client.StreamReader) -> pravega_client.Slice:
    """The next slice with events: like pravega_client, an acquisition yields an empty slice when
    nothing is ready within about a second, and the application asks again."""
    async def first_with_events() -> pravega_client.Slice:
        while True:
            segment_slice = await reader.get_segment_slice_async()
            if segment_slice.segment is not None:
                return segment_slice

    return await asyncio.wait_for(first_with_events(), WAIT_S)


def read_all(reader: pravega_client.StreamReader, idle_ms: int = 1500) -> list[bytes]:
    """Every event the reader gets until none arrives for ``idle_ms``, releasing each slice."""
    events = []
    while True:
        segment_slice = reader.get_segment_slice(timeout_ms=idle_ms)
        got = [e.data() for e in segment_slice]
        reader.release_segment(segment_slice)
        if not got:
            return events
        events.extend(got)


# -- pravega_client_test.py ------------------------------------------------------------------------


def test_tags(manager, unique):
    scope = unique
    assert manager.create_scope(scope) is True
    assert manager.create_stream(scope, "testStream", 1) is True
    assert manager.get_stream_tags(scope, "testStream") == []
    assert manager.update_stream_with_policy(scope_name=scope, stream_name="testStream", tags=["t1"])
    assert manager.get_stream_tags(scope, "testStream") == ["t1"]

    # auto-scaling by data rate: 10 KB/s per segment, scale factor 2, 1 initial segment
    policy = StreamScalingPolicy.auto_scaling_policy_by_data_rate(10, 2, 1)
    retention = StreamRetentionPolicy.none()
    assert manager.create_stream_with_policy(scope_name=scope, stream_name="testStream1", scaling_policy=policy,
                                             retention_policy=retention)
    assert manager.update_stream_with_policy(scope_name=scope, stream_name="testStream1", scaling_policy=policy,
                                             tags=["t1", "t2"])
    assert manager.get_stream_tags(scope, "testStream1") == ["t1", "t2"]
    retention = StreamRetentionPolicy.by_size(10 * 1024 * 1024 * 1024)
    assert manager.update_stream_with_policy(scope, "testStream1", policy, retention, tags=["t4", "t5"])
    assert manager.get_stream_tags(scope, "testStream1") == ["t4", "t5"]
    configuration = rillet.StreamManager(manager.endpoint).get_stream_info(scope, "testStream1").configuration
    assert configuration.scaling_policy == rillet.ScalingPolicy.by_data_rate(10, 2, 1)
    assert configuration.retention_policy == rillet.RetentionPolicy.by_size(10 * 1024 * 1024 * 1024)

    assert scope in manager.list_scope()
    assert sorted(manager.list_stream(scope)) == ["testStream", "testStream1"]
    assert manager.list_stream(unique + "false") == []
    assert manager.list_stream("") == []


def test_write_event(manager, unique):
    assert manager.create_scope(unique) is True
    assert manager.create_stream(unique, "testStream", 1) is True
    w1 = manager.create_writer(unique, "testStream")
    w1.write_event("test event1")
    w1.write_event("test event2")
    with pytest.raises(TypeError):
        w1.write_event(b"not a str")
    events = list(rillet.EventStreamClientFactory(unique, manager.endpoint).create_stream_reader(
        "testStream", rillet.UTF8StringSerializer()))
    assert [e.event for e in events] == ["test event1", "test event2"]  # acknowledged before returning


def test_delete_scope(manager, unique):
    assert manager.create_scope(unique) is True
    assert manager.create_scope(unique) is False
    assert manager.delete_scope(unique) is True
    assert unique not in manager.list_scope()


def test_seal_delete_stream(manager, unique):
    scope = unique
    assert manager.create_scope(scope) is True
    assert manager.create_stream(scope, "testSealStream", 1) is True
    policy = StreamScalingPolicy.auto_scaling_policy_by_event_rate(10, 2, 1)
    retention = StreamRetentionPolicy.by_time(24 * 60 * 60 * 1000)
    assert manager.update_stream_with_policy(scope, "testSealStream", policy, retention)

    w1 = manager.create_writer(scope, "testSealStream")
    w1.write_event("test event1", "key")
    w1.write_event("test event2", "key")
    assert manager.seal_stream(scope, "testSealStream")
    with pytest.raises(ValueError) as raised:  # what pravega_client raises; also Rillet's typed error
        w1.write_event("test event3", "key")
    assert isinstance(raised.value, rillet.errors.SegmentSealed)
    assert manager.delete_stream(scope, "testSealStream")
    assert manager.list_stream(scope) == []


def test_byte_stream(manager, unique):
    assert manager.create_scope(unique) is True
    assert manager.create_stream(unique, "testStream", 1) is True
    bs = manager.create_byte_stream(unique, "testStream")
    assert bs.write(b"bytesfortesting") == 15
    assert bs.write(b"bytesfortesting") == 15
    assert bs.write(b"bytesfortesting") == 15
    bs.flush()
    assert bs.current_tail_offset() == 45
    buf = bytearray(10)
    assert bs.readinto(buf) == 10 and buf == b"bytesforte"
    assert bs.tell() == 10
    assert bs.seekable()

    assert bs.seek(10, 0) == 10
    buf = bytearray(2)
    assert bs.readinto(buf) == 2 and buf == b"st"
    assert bs.tell() == 12
    bs.seek(5, 1)  # from the current position: 17
    buf = bytearray(8)
    assert bs.readinto(buf) == 8 and buf == b"tesforte"
    assert bs.tell() == 25
    bs.seek(-10, 2)  # from the end: 35
    buf = bytearray(8)
    assert bs.readinto(buf) == 8 and buf == b"fortesti"
    assert bs.tell() == 43

    bs.truncate(2)
    assert bs.current_head_offset() == 2
    with pytest.raises(ValueError):
        bs.seek(3, 6)
    bs.seek(0)
    with pytest.raises(OSError):  # below the head now
        bs.readinto(bytearray(1))


def test_write_txn(manager, unique):
    scope = unique
    assert manager.create_scope(scope) is True
    assert manager.create_stream(scope, "testTxn", 1) is True
    w1 = manager.create_transaction_writer(scope, "testTxn", 1)
    txn1 = w1.begin_txn()
    txn1_id = txn1.get_txn_id()
    assert isinstance(txn1_id, int)
    txn1.write_event("test event1")
    txn1.write_event("test event2")
    assert txn1.is_open()
    txn1.commit()
    assert w1.get_txn(txn1_id).is_open() is False

    txn2 = w1.begin_txn()
    txn2.write_event("test event3")
    txn2.write_event_bytes(b"test event4")
    assert txn2.is_open()
    txn2.abort()
    assert txn2.is_open() is False

    group = manager.create_reader_group("rg", scope, "testTxn")
    assert read_all(group.create_reader("r1")) == [b"test event1", b"test event2"]  # committed only


def test_txn_error(manager, unique):
    scope = unique
    assert manager.create_scope(scope) is True
    assert manager.create_stream(scope, "testTxn", 1) is True
    w1 = manager.create_transaction_writer(scope, "testTxn", 1)
    txn1 = w1.begin_txn()
    txn1.write_event("test event1")
    txn1.write_event("test event2")
    assert txn1.is_open()
    txn1.commit()
    assert txn1.is_open() is False
    with pytest.raises(TxnFailedException):  # write to a committed transaction
        txn1.write_event("Error")
    with pytest.raises(TxnFailedException):  # commit a closed transaction
        txn1.commit()
    with pytest.raises(TxnFailedException):  # abort a closed transaction
        txn1.abort()
    with pytest.raises(TxnFailedException):  # the same through a resumed handle
        w1.get_txn(txn1.get_txn_id()).abort()
    assert issubclass(TxnFailedException, rillet.TxnFailed)


# -- pravega_reader_test.py and test.py ------------------------------------------------------------


def test_write_event_and_read(manager, unique):
    async def run():
        scope, stream = unique, "testStream"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
        w1 = manager.create_writer(scope, stream)
        w1.write_event("test event")
        w1.write_event("test event")
        w1.flush()
        rg_config = pravega_client.StreamReaderGroupConfig(False, scope, stream)
        reader_group = manager.create_reader_group_with_config("rg", scope, rg_config)
        r1 = reader_group.create_reader("reader-1")
        segment_slice = await acquire(r1)
        events = list(segment_slice)
        assert [e.data() for e in events] == [b"test event", b"test event"]
        assert [e.offset() for e in events] == [0, 14]  # 4-byte header + 10 bytes each
        reader_group.reader_offline("reader-1")
        reader_group.reader_offline("reader-1")  # idempotent
        manager.delete_reader_group("rg", scope)
        with pytest.raises(ValueError):
            reader_group.create_reader("reader-2")

    asyncio.run(run())
    with pytest.raises(ValueError):
        pravega_client.StreamReaderGroupConfig(False, unique)  # no stream


def test_read_from_tail(manager, unique):
    async def run():
        scope, stream = unique, "testStream"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
        w1 = manager.create_writer(scope, stream)
        w1.write_event("test event")
        w1.write_event("test event")
        w1.flush()
        rg_config = pravega_client.StreamReaderGroupConfig(True, scope, stream)
        reader_group = manager.create_reader_group_with_config("rg", scope, rg_config)
        r1 = reader_group.create_reader("reader-1")
        assert list(r1.get_segment_slice(timeout_ms=700)) == []  # nothing after the tail yet
        w1.write_event("test event at Tail")
        w1.write_event("test event at Tail")
        segment_slice = await acquire(r1)
        assert [e.data() for e in segment_slice] == [b"test event at Tail"] * 2
        reader_group.reader_offline("reader-1")
        manager.delete_reader_group("rg", scope)

    asyncio.run(run())


def test_async_event_write_and_read(manager, unique):
    async def run():
        scope, stream = unique, "testAsyncEventWriteStream"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
        w1 = manager.create_writer(scope, stream)
        await w1.write_event_async("test async write event")
        await w1.write_event_async("test async write event")
        await w1.write_event_async("test async write event with routing key", "key1")
        await w1.write_event_async("test async write event with routing key", "key2")
        w1.flush()
        rg_config = pravega_client.StreamReaderGroupConfig(False, scope, stream)
        reader_group = manager.create_reader_group_with_config("rg", scope, rg_config)
        r1 = reader_group.create_reader("reader-1")
        data = [e.data() for e in await acquire(r1)]
        assert data.count(b"test async write event") == 2
        assert data.count(b"test async write event with routing key") == 2
        assert len(data) == 4

    asyncio.run(run())


def test_write_event_with_inflight_and_read(manager, unique):
    async def run():
        scope, stream = unique, "testStream"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
        w1 = manager.create_writer(scope, stream, 10)
        for i in range(10):
            w1.write_event(f"test event {i}")
        w1.flush()
        reader_group = manager.create_reader_group("rg", scope, stream)
        r1 = reader_group.create_reader("reader-1")
        assert [e.data() for e in await acquire(r1)] == [f"test event {i}".encode() for i in range(10)]

    asyncio.run(run())


def test_multiple_readers(manager, unique):
    """Two segments: the first reader consumes one slice, releases it and goes offline; the second
    reader gets the rest. All 100 events are read exactly once."""

    async def run():
        scope, stream = unique, "testMulti"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 2)
        w1 = manager.create_writer(scope, stream)
        for i in range(100):
            w1.write_event(f"data{i}", f"key{i % 7}")
        w1.flush()
        reader_group = manager.create_reader_group("rg-multi", scope, stream)
        r1 = reader_group.create_reader("r1")
        slice1 = await acquire(r1)
        read = [e.data() for e in slice1]
        assert 0 < len(read) < 100  # one segment's events
        r1.release_segment(slice1)
        r1.reader_offline()
        with pytest.raises(OSError):
            r1.get_segment_slice(timeout_ms=100)

        r2 = reader_group.create_reader("r2")
        slice2 = await acquire(r2)
        read += [e.data() for e in slice2]
        assert sorted(read) == sorted(f"data{i}".encode() for i in range(100))

    asyncio.run(run())


def test_multiple_readers_partial_read(manager, unique):
    """The first reader takes one event of its slice, releases the slice and goes offline: the
    second reader reads the other 99, from the first event not taken."""

    async def run():
        scope, stream = unique, "testPartial"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 2)
        w1 = manager.create_writer(scope, stream)
        for i in range(100):
            w1.write_event(f"data{i}", f"key{i % 7}")
        w1.flush()
        reader_group = manager.create_reader_group("rg-partial", scope, stream)
        r1 = reader_group.create_reader("r1")
        slice1 = await acquire(r1)
        read = [next(slice1).data()]
        r1.release_segment(slice1)
        assert next(slice1, None) is None  # released: nothing more from it
        r1.reader_offline()

        r2 = reader_group.create_reader("r2")
        slice2 = await acquire(r2)
        read += [e.data() for e in slice2]
        if len(read) != 100:
            slice3 = await acquire(r2)
            read += [e.data() for e in slice3]
        assert sorted(read) == sorted(f"data{i}".encode() for i in range(100))

    asyncio.run(run())


def test_slices_of_one_reader(manager, unique):
    """Slices are per segment and hand back what was not taken; one reader reads everything once."""
    scope, stream = unique, "s"
    manager.create_scope(scope)
    manager.create_stream(scope, stream, 3)
    w1 = manager.create_writer(scope, stream, 50)
    for i in range(60):
        w1.write_event(f"e{i}", f"key{i % 5}")
    w1.flush()
    r1 = manager.create_reader_group("rg", scope, stream).create_reader("r1")
    first = r1.get_segment_slice(timeout_ms=WAIT_S * 1000)
    taken = [next(first).data(), next(first).data()]
    r1.release_segment(first)  # the rest of it comes again
    again = r1.get_segment_slice(timeout_ms=WAIT_S * 1000)
    superseded = r1.get_segment_slice(timeout_ms=WAIT_S * 1000)
    if superseded.segment == again.segment:  # one segment buffered: the new slice replaces the old one
        assert list(again) == []
    taken += [e.data() for e in again] + [e.data() for e in superseded] + read_all(r1, idle_ms=800)
    assert sorted(taken) == sorted(f"e{i}".encode() for i in range(60))
    per_key = {}
    for event in taken:
        per_key.setdefault(int(event[1:]) % 5, []).append(int(event[1:]))
    assert all(numbers == sorted(numbers) for numbers in per_key.values())  # per key in order


def test_large_events(manager, unique):
    async def run():
        scope, stream = unique, "testLargeEvent"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
        w1 = manager.create_writer(scope, stream)
        payload = "a" * 100_000
        for _ in range(30):
            w1.write_event(payload)
        w1.flush()
        reader_group = manager.create_reader_group("rg", scope, stream)
        r1 = reader_group.create_reader("reader-1")
        count = 0
        while count < 30:
            segment_slice = await acquire(r1)
            for event in segment_slice:
                count += 1
                assert event.data() == b"a" * 100_000
            r1.release_segment(segment_slice)
        assert count == 30

    asyncio.run(run())


def test_get_streamcut(manager, unique):
    async def run():
        scope, stream = unique, "testStream"
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
        w1 = manager.create_writer(scope, stream)
        w1.write_event("event1")
        w1.write_event("event2")
        w1.flush()
        reader_group = manager.create_reader_group("rgnew", scope, stream, True)  # from the tail
        cut = reader_group.get_streamcut()
        assert cut.get_segment_offset_map() == {0: 20}  # after two 6-byte events with headers
        w1.write_event("event3")
        w1.write_event("event4")
        w1.write_event("event5")
        w1.flush()
        reader_group2 = manager.create_reader_group("rgcut", scope, stream, False, cut)
        r1 = reader_group2.create_reader("reader-1")
        segment_slice = await acquire(r1)
        assert [e.data() for e in segment_slice] == [b"event3", b"event4", b"event5"]
        r1.release_segment(segment_slice)
        r1.reader_offline()
        assert reader_group2.get_streamcut().get_segment_offset_map() == {0: 50}

    asyncio.run(run())


# -- switching ---------------------------------------------------------------------------------------


def test_uri_forms_and_errors(url, unique):
    """A tcp:// URI means http://; failures are pravega_client's ValueError and Rillet's typed errors."""
    manager = pravega_client.StreamManager(url.replace("http://", "tcp://"))
    assert manager.endpoint == url
    assert manager.create_scope(unique) is True
    with pytest.raises(ValueError) as raised:
        manager.create_stream(unique + "missing", "s", 1)
    assert isinstance(raised.value, rillet.ScopeNotFound)
    with pytest.raises(ValueError):
        manager.create_writer(unique, "missing")
    with pytest.raises(ValueError):
        pravega_client.StreamManager("grpc://127.0.0.1:9090")
