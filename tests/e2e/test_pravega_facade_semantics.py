"""Where applications rely on pravega_client's exact behaviour, the facade behaves the same.

Each test states what Pravega's Python client (pravega-client-python, on the Rust client) does:
``get_segment_slice_async`` is a future that yields an empty slice when nothing arrived within about
a second; ``write_event_async`` is a future whose write runs whether or not it is awaited;
``TxnFailedException`` carries the transaction id; a reader name already online in the group is
refused; ``auth_enabled`` is a constructor argument; a byte stream's ``write`` sends the bytes (flush
only waits for them); ``readinto`` takes a bytearray.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import time

import pytest

import rillet
import rillet.pravega as pravega_client  # the one line a user of pravega_client changes
from rillet.pravega import TxnFailedException

WAIT_S = 30


@pytest.fixture
def manager(url) -> pravega_client.StreamManager:
    return pravega_client.StreamManager(url)


def _stream(manager, scope: str, segments: int = 1) -> str:
    manager.create_scope(scope)
    manager.create_stream(scope, "s", segments)
    return "s"


def _eventually(condition, what: str) -> None:
    """Poll ``condition`` until it holds (an outcome, not a duration, is under test)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A loop's default executor that counts what is submitted to it."""

    submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


# -- readers ------------------------------------------------------------------------------------------


def test_an_idle_reader_gets_an_empty_slice_without_the_default_executor(manager, unique):
    """Pravega's acquire_segment gives up after 1 s without data and the future yields an empty slice;
    the wait holds no thread of the loop's default executor."""
    stream = _stream(manager, unique)
    reader = manager.create_reader_group("rg", unique, stream).create_reader("r1")

    async def run():
        executor = CountingExecutor(max_workers=1)
        asyncio.get_running_loop().set_default_executor(executor)
        acquisition = reader.get_segment_slice_async()
        assert asyncio.isfuture(acquisition)
        try:
            empty = await asyncio.wait_for(acquisition, WAIT_S)
        finally:
            reader.reader_offline()  # ends an acquisition that never returns, so that the loop can close
        assert list(empty) == []
        reader.release_segment(empty)  # releasing an empty slice is allowed, as in Pravega
        return executor.submitted

    assert asyncio.run(run()) == 0


def test_cancelling_an_acquisition_stops_its_wait(manager, unique):
    """Cancelling the awaiting task ends the wait: the reader is not polled for it any more, and
    events written later go to the next acquisition."""
    stream = _stream(manager, unique)
    reader = manager.create_reader_group("rg", unique, stream).create_reader("r1")
    polls = []
    read_next_event = reader.reader.read_next_event
    reader.reader.read_next_event = lambda *a, **k: polls.append(1) or read_next_event(*a, **k)

    async def run():
        try:
            waiting = asyncio.ensure_future(reader.get_segment_slice_async())
            await asyncio.sleep(0.3)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            # a look already under way finishes: the reader's one thread runs this after it
            await asyncio.get_running_loop().run_in_executor(reader._executor, lambda: None)
            after_cancel = len(polls)
            await asyncio.sleep(0.5)
            assert len(polls) == after_cancel, "the cancelled wait still polls the reader"
            writer = manager.create_writer(unique, stream)
            writer.write_event("after")
            writer.flush()
            events = []
            while not events:
                events = [e.data() for e in await asyncio.wait_for(reader.get_segment_slice_async(), WAIT_S)]
            assert events == [b"after"]
        finally:
            reader.reader_offline()  # also ends a wait that cancelling did not stop, so that the loop can close

    asyncio.run(run())


def test_a_reader_name_already_online_is_refused(manager, unique):
    """Pravega's add_reader fails for a reader id that is online in the group; after reader_offline
    the name can join again."""
    stream = _stream(manager, unique)
    group = manager.create_reader_group("rg", unique, stream)
    first = group.create_reader("r1")
    with pytest.raises(ValueError) as raised:
        group.create_reader("r1")
    assert isinstance(raised.value, rillet.AlreadyExists)
    assert "r1" in str(raised.value)
    first.reader_offline()
    group.create_reader("r1").reader_offline()


def test_the_server_refuses_a_reader_name_already_online(manager, unique, monkeypatch):
    """Two readers created at the same moment with one name: whatever the client believed about who
    is online (here: nobody), the server lets only one of them in."""
    stream = _stream(manager, unique)
    group = manager.create_reader_group("rg", unique, stream)
    monkeypatch.setattr(group.group, "get_online_readers", list)  # as seen before the other joined: nobody
    first = group.create_reader("r1")
    with pytest.raises(ValueError) as raised:
        group.create_reader("r1")
    assert isinstance(raised.value, rillet.AlreadyExists)
    assert "r1" in str(raised.value)
    first.reader_offline()
    group.create_reader("r1").reader_offline()


# -- writers and transactions ---------------------------------------------------------------------------


def test_write_event_async_is_a_running_future(manager, unique):
    """pravega_client returns an asyncio future whose write is already under way: the event is
    written even if nobody awaits it."""
    stream = _stream(manager, unique)
    writer = manager.create_writer(unique, stream)

    async def run():
        unawaited = writer.write_event_async("not awaited")
        assert asyncio.isfuture(unawaited)
        awaited = writer.write_event_async("awaited")
        assert asyncio.isfuture(awaited)
        await asyncio.wait_for(awaited, WAIT_S)
        await asyncio.wait_for(asyncio.shield(unawaited), WAIT_S)
        writer.write_event_async("left behind by a loop that closes now")

    asyncio.run(run())
    writer.flush()
    events = rillet.EventStreamClientFactory(unique, manager.endpoint).create_stream_reader(
        stream, rillet.UTF8StringSerializer())
    assert [e.event for e in events] == ["not awaited", "awaited", "left behind by a loop that closes now"]


def test_txn_failed_exception_carries_the_transaction_id(manager, unique):
    """pravega_client raises TxnFailedException(txn_id): its one argument is the id as an int."""
    stream = _stream(manager, unique)
    txn = manager.create_transaction_writer(unique, stream, 1).begin_txn()
    txn.write_event("e")
    txn.commit()
    for closed in (lambda: txn.write_event("late"), txn.commit, txn.abort):
        with pytest.raises(TxnFailedException) as raised:
            closed()
        assert raised.value.args == (txn.get_txn_id(),)
        assert isinstance(raised.value, rillet.TxnFailed)  # Rillet's typed error too


# -- the manager ----------------------------------------------------------------------------------------


def test_auth_enabled_means_sigv4_signing(url, unique):
    """pravega_client's StreamManager takes auth_enabled; here it signs every request with SigV4."""
    manager = pravega_client.StreamManager(url, auth_enabled=True)
    assert manager.connection.controller.transport.sign is True
    assert manager.create_scope(unique) is True


def test_auth_enabled_without_a_region_says_what_to_configure(url, monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="AWS_REGION"):
        pravega_client.StreamManager(url, auth_enabled=True).list_scope()


# -- byte streams ---------------------------------------------------------------------------------------


def test_byte_stream_write_sends_without_flush(manager, unique):
    """Pravega's byte writer sends on write and flush only waits: readers see written bytes before
    any flush, and flush returns once they are durable."""
    stream = _stream(manager, unique)
    writer = manager.create_byte_stream(unique, stream)
    reader = manager.create_byte_stream(unique, stream)
    assert writer.write(b"visible before flush") == 20
    _eventually(lambda: reader.current_tail_offset() == 20, "written bytes never reached the stream")
    buf = bytearray(20)
    assert reader.readinto(buf) == 20 and buf == b"visible before flush"
    writer.write(b"+more")
    writer.flush()
    assert reader.current_tail_offset() == 25


def test_a_dropped_byte_stream_keeps_its_written_bytes(manager, unique):
    stream = _stream(manager, unique)
    writer = manager.create_byte_stream(unique, stream)
    writer.write(b"x" * 1000)
    writer.write(b"y" * 24)
    del writer
    gc.collect()
    reader = manager.create_byte_stream(unique, stream)
    _eventually(lambda: reader.current_tail_offset() == 1024, "a dropped byte stream lost its written bytes")
    assert reader.read(2048) == b"x" * 1000 + b"y" * 24


def test_readinto_a_bytes_object_raises_before_reading(manager, unique):
    """pravega_client's readinto takes a bytearray (TypeError otherwise) and reads nothing."""
    stream = _stream(manager, unique)
    bs = manager.create_byte_stream(unique, stream)
    bs.write(b"0123456789")
    bs.flush()
    with pytest.raises(TypeError):
        bs.readinto(b"immutable")
    assert bs.tell() == 0
    buf = bytearray(4)
    assert bs.readinto(buf) == 4 and buf == b"0123"
