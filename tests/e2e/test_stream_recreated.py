"""What a client sees when its stream is deleted and created again under the same name (issue 36), over
HTTP against the standalone stack: every position it kept names the old incarnation, so a reader group,
a stream cut or a stream reader meets StreamRecreated (410) instead of reading the new stream at the old
offsets, and ``reset_reader_group`` moves a group onto the new stream.
"""

from __future__ import annotations

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
