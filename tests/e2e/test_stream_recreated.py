"""What a client sees when its stream is deleted and created again under the same name (issue 36), over
HTTP against the standalone stack: every position it kept names the old incarnation, so a reader group,
a stream cut or a stream reader meets StreamRecreated (410) instead of reading the new stream at the old
offsets, and ``reset_reader_group`` moves a group onto the new stream.
"""

from __future__ import annotations

import threading
import time

import pytest

import rillet
from rillet import ScalingPolicy, StreamConfiguration, StreamCut, UTF8StringSerializer
from rillet.reader_group import ReaderGroupManager, group_config

SER = UTF8StringSerializer()
CONFIG = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1))


class Stream:
    def __init__(self, url: str, scope: str) -> None:
        self.url, self.scope, self.name = url, scope, "s"
        self.manager = rillet.StreamManager(url)
        self.manager.create_scope(scope)
        self.manager.create_stream(scope, self.name, CONFIG)
        self.factory = rillet.EventStreamClientFactory(scope, url)
        self.groups = ReaderGroupManager(scope, url)

    def write(self, tag: str, n: int) -> list[str]:
        events = [f"{tag}:{i}" for i in range(n)]  # every tag one letter: the same sizes in both lives
        with self.factory.create_event_writer(self.name, SER, rillet.EventWriterConfig(max_latency_ms=2)) as writer:
            for f in [writer.write_event(e, routing_key="k") for e in events]:
                f.result(timeout=30)
        return events

    def recreate(self) -> None:
        self.manager.seal_stream(self.scope, self.name)
        self.manager.delete_stream(self.scope, self.name)
        self.manager.create_stream(self.scope, self.name, CONFIG)


def _read(reader, n: int) -> list[str]:
    got = []
    while len(got) < n:
        read = reader.read_next_event(timeout_ms=2_000)
        assert read is not None, f"only {got} arrived"
        if not read.is_checkpoint:
            got.append(read.event)
    return got


@pytest.fixture
def stream(url, unique) -> Stream:
    return Stream(url, unique)


def test_a_group_of_the_old_stream_is_refused_then_reset_onto_the_new_one(stream):
    stream.write("a", 6)
    stream.groups.create_reader_group("g", group_config([f"{stream.scope}/s"], group_refresh_time_ms=100,
                                                        automatic_checkpoint_interval_ms=0))
    r1 = stream.factory.create_reader("r1", "g", SER)
    assert _read(r1, 4) == ["a:0", "a:1", "a:2", "a:3"]
    r1.close()  # offline at its position: after the fourth event
    stream.recreate()
    new = stream.write("b", 6)

    r2 = stream.factory.create_reader("r2", "g", SER)
    with pytest.raises(rillet.StreamRecreated) as refused:  # on today's main: "b:4", "b:5", the rest skipped
        r2.read_next_event(timeout_ms=2_000)
    assert refused.value.status == 410 and refused.value.details["expected"] != refused.value.details["current"]
    r2.close()

    group = stream.groups.get_reader_group("g")
    config = group.reset_reader_group(group_config([f"{stream.scope}/s"], group_refresh_time_ms=100,
                                                   automatic_checkpoint_interval_ms=0))
    incarnation = stream.manager.get_stream_info(stream.scope, "s").created_at_ms
    assert config.streams[0].incarnation == incarnation
    r3 = stream.factory.create_reader("r3", "g", SER)
    assert _read(r3, 6) == new
    assert {c.incarnation for c in group.get_stream_cuts().values()} == {incarnation}
    r3.close()


def test_cuts_and_readers_of_the_old_stream_are_refused(stream):
    stream.write("a", 3)
    head, tail = stream.manager.get_head(stream.scope, "s"), stream.manager.get_tail(stream.scope, "s")
    old = stream.manager.get_stream_info(stream.scope, "s").created_at_ms
    assert head.incarnation == tail.incarnation == old
    assert StreamCut.from_text(tail.to_text()) == tail and f"@{old}|" in tail.to_text()
    stream.recreate()
    stream.write("b", 3)

    with pytest.raises(rillet.StreamRecreated):
        stream.manager.truncate_stream(stream.scope, "s", tail)
    with pytest.raises(rillet.StreamRecreated):
        stream.factory.create_stream_reader("s", SER, tail).read_next_event(timeout_ms=500)
    with pytest.raises(rillet.StreamRecreated):
        stream.groups.create_reader_group("g", group_config([head]))
    with pytest.raises(rillet.StreamRecreated):
        head.compare(stream.manager.get_head(stream.scope, "s"))
    # a cut kept before incarnations were (no @incarnation in its text) reads as before
    legacy = StreamCut.from_text(stream.manager.get_head(stream.scope, "s").to_text().replace(
        f"@{stream.manager.get_stream_info(stream.scope, 's').created_at_ms}", ""))
    assert legacy.incarnation is None
    reader = stream.factory.create_stream_reader("s", SER, legacy)
    assert [reader.read_next_event(timeout_ms=2_000).event for _ in range(3)] == ["b:0", "b:1", "b:2"]


def test_a_byte_stream_reader_of_the_old_stream_is_refused(stream):
    stream.manager.create_stream(stream.scope, "bytes", CONFIG)
    factory = rillet.ByteStreamClientFactory(stream.scope, stream.url)
    with factory.create_byte_stream_writer("bytes") as writer:
        writer.write(b"old bytes")
        writer.flush()
    reader = factory.create_byte_stream_reader("bytes")
    assert reader.read(4) == b"old "
    stream.manager.seal_stream(stream.scope, "bytes")
    stream.manager.delete_stream(stream.scope, "bytes")
    stream.manager.create_stream(stream.scope, "bytes", CONFIG)
    with factory.create_byte_stream_writer("bytes") as writer:
        writer.write(b"new bytes")
        writer.flush()
    with pytest.raises(rillet.StreamRecreated):  # on today's main: b"byte", the new stream at the old offset
        reader.read(4)
    assert factory.create_byte_stream_reader("bytes").read(9) == b"new bytes"


class _History:
    """What the readers of a stream saw while its name was deleted and created again under them."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, int | None, str]] = []  # (reader kind, incarnation of the read, event)
        self.refusals: dict[str, int] = {"group": 0, "stream": 0}
        self.stop = threading.Event()
        self.errors: list[BaseException] = []


def _recreated_since(stream: Stream, incarnation: int | None) -> bool:
    """Whether the name holds another stream than ``incarnation`` now: how an application whose reader
    reached the end of a sealed stream learns that a new one took its name."""
    try:
        return stream.manager.get_stream_info(stream.scope, "s").created_at_ms != incarnation
    except rillet.StreamNotFound:
        return False


def _group_reader(stream: Stream, history: _History) -> None:
    """A slow group reader (it lags the writers, so a re-create meets it mid-stream) that, refused
    because the stream was re-created, or at the end of a sealed stream whose name holds a new one,
    resets the group onto the new stream and reads on."""
    name, generation = f"{stream.scope}/s", 0
    config = group_config([name], group_refresh_time_ms=100, automatic_checkpoint_interval_ms=0)
    group = stream.groups.get_reader_group("h")
    incarnation = stream.manager.get_stream_info(stream.scope, "s").created_at_ms
    reader = stream.factory.create_reader(f"r{generation}", "h", SER)
    while not history.stop.is_set():
        try:
            read = reader.read_next_event(timeout_ms=200)
            if read is not None and not read.is_checkpoint:
                history.delivered.append(("group", read.pointer.incarnation, read.event))
                time.sleep(0.05)
            if read is not None or not _recreated_since(stream, incarnation):
                continue
        except rillet.StreamRecreated:
            history.refusals["group"] += 1
        except (rillet.SegmentNotFound, rillet.StreamNotFound):
            time.sleep(0.1)  # the name holds no stream for a moment
            continue
        reader.close()
        while not history.stop.is_set():
            try:
                incarnation = group.reset_reader_group(config).streams[0].incarnation
                break
            except (rillet.StreamNotFound, rillet.IllegalState):
                time.sleep(0.1)
        generation += 1
        reader = stream.factory.create_reader(f"r{generation}", "h", SER)
    reader.close()


def _stream_reader(stream: Stream, history: _History) -> None:
    """A StreamReader from the head cut that, refused or at the end of a sealed stream whose name holds a
    new one, starts again from the new stream's head."""
    reader = None
    while not history.stop.is_set():
        try:
            if reader is None:
                reader = stream.factory.create_stream_reader("s", SER, stream.manager.get_head(stream.scope, "s"))
            read = reader.read_next_event(timeout_ms=200)
            if read is not None:
                history.delivered.append(("stream", read.pointer.incarnation, read.event))
            elif not reader.positions() and _recreated_since(stream, reader.incarnation):
                reader = None
        except rillet.StreamRecreated:
            history.refusals["stream"] += 1
            reader = None
        except (rillet.SegmentNotFound, rillet.StreamNotFound):
            reader = None
            time.sleep(0.1)


def _guarded(target, stream: Stream, history: _History):
    def run() -> None:
        try:
            target(stream, history)
        except Exception as e:  # noqa: BLE001 - reported by the test, not lost in the thread
            history.errors.append(e)
    return run


def test_a_history_of_deletes_and_creates_under_live_readers_delivers_each_event_as_its_own_streams(stream):
    """Three lives of one name. Readers run throughout; between the lives the name is sealed, deleted and
    created again. Writers write only within a life (an event is tagged with the life it was written in,
    of varied sizes so old offsets fall inside the new stream's frames). No reader may deliver an event
    under another incarnation than the one it was written in, and within a life each reader's events
    are the life's events in order from its head, with none skipped; the last life is read whole."""
    history = _History()
    stream.groups.create_reader_group("h", group_config([f"{stream.scope}/s"], group_refresh_time_ms=100,
                                                        automatic_checkpoint_interval_ms=0))
    threads = [threading.Thread(target=_guarded(t, stream, history)) for t in (_group_reader, _stream_reader)]
    for t in threads:
        t.start()
    incarnations, written = {}, {}
    try:
        for life in range(3):
            incarnations[life] = stream.manager.get_stream_info(stream.scope, "s").created_at_ms
            written[life] = []
            with stream.factory.create_event_writer("s", SER, rillet.EventWriterConfig(max_latency_ms=2)) as writer:
                for burst in range(3):
                    events = [f"{life}:{burst * 20 + i}:" + "x" * ((7 * i + 3 * life) % 23) for i in range(20)]
                    for f in [writer.write_event(e, routing_key="k") for e in events]:
                        f.result(timeout=30)
                    written[life] += events
                    time.sleep(0.3)
            if life < 2:
                time.sleep(0.5)
                stream.recreate()
        last = written[2]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                [e for kind, _, e in history.delivered if kind == reader and e.startswith("2:")] == last
                for reader in ("group", "stream")):
            time.sleep(0.2)
    finally:
        history.stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not history.errors, history.errors
    for kind in ("group", "stream"):
        seen = [(incarnation, e) for k, incarnation, e in history.delivered if k == kind]
        wrong = [(incarnation, e) for incarnation, e in seen if incarnation != incarnations[int(e.split(":")[0])]]
        assert not wrong, f"{kind} reader delivered events under another incarnation: {wrong[:5]}"
        for life, events in written.items():
            got = [e for _, e in seen if e.startswith(f"{life}:")]
            assert got == events[:len(got)], f"{kind} reader skipped or reordered events of life {life}"
        assert [e for _, e in seen if e.startswith("2:")] == written[2], f"{kind} reader did not read the last life"
    assert history.refusals["group"] + history.refusals["stream"] >= 1, "no reader ever met the re-created stream"
