"""An idle reader-group reader over HTTP (standalone stack, issue 27): at the tail of its segments it
sends one tail check per stream for all of them, backing off, and syncs with its group less often
while nothing changes; new data reaches it as soon as a tail check shows it."""

from __future__ import annotations

import time

import rillet
from rillet.framing import frame


def test_an_idle_group_reader_sends_only_backing_off_tail_checks_and_wakes_on_data(stack, manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(4)))
    groups = rillet.ReaderGroupManager(unique, url)
    groups.create_reader_group("g", rillet.group_config([f"{unique}/s"], automatic_checkpoint_interval_ms=0,
                                                        group_refresh_time_ms=200, reader_lease_ms=60_000))
    factory = rillet.EventStreamClientFactory(unique, url)
    reader = factory.create_reader("r1", "g", rillet.BytesSerializer(), backoff=rillet.TailBackoff(first_s=0.05, max_s=0.4))
    reads, syncs = [], []
    for segments in (reader.connection.segments.read_transport, reader.connection.segments.tails_transport):
        read_request = segments.request
        segments.request = lambda method, path, original=read_request, **kw: reads.append(path) or original(method, path, **kw)
    controller = reader.group._transport
    controller_request = controller.request
    controller.request = lambda method, path, **kw: syncs.append(path) or controller_request(method, path, **kw)

    assert reader.read_next_event(timeout_ms=500) is None  # holds the 4 segments, each read once: at the tail
    assert len(reader._held) == 4
    reads.clear()
    syncs.clear()
    started = time.monotonic()
    assert reader.read_next_event(timeout_ms=3000) is None
    elapsed = time.monotonic() - started
    assert reads and all(path.endswith("/tails") for path in reads), reads  # one request checks all 4
    assert len(reads) <= elapsed / 0.4 + 6, (len(reads), elapsed)
    # syncs back off from 200 ms towards 10 s while nothing changes: 200, 400, 800, 1600 ms, ...
    assert 1 <= len(syncs) <= 6, syncs

    segment = next(iter(reader._held.values())).assigned.segment.segment_id
    reader.connection.segments.append(unique, "s", segment, "w", 0, 1, frame(b"news"))
    event = reader.read_next_event(timeout_ms=5000)
    assert event is not None and event.event == b"news" and event.pointer.segment_id == segment
    reader.close()


class _CountingBackoff(rillet.TailBackoff):
    """A fixed 100 ms cadence that counts how often a reader asked it for its next pause."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def next_delay(self) -> float:
        self.asked += 1
        return 0.1


def test_both_readers_check_tails_at_the_cadence_the_application_gives(stack, manager, url, unique):
    """``backoff`` of create_reader and create_stream_reader sets the tail-check cadence (latency against
    the requests an idle reader sends)."""
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(2)))
    groups = rillet.ReaderGroupManager(unique, url)
    groups.create_reader_group("g", rillet.group_config([f"{unique}/s"], automatic_checkpoint_interval_ms=0))
    factory = rillet.EventStreamClientFactory(unique, url)
    group_cadence, stream_cadence = _CountingBackoff(), _CountingBackoff()
    with factory.create_reader("r1", "g", rillet.BytesSerializer(), backoff=group_cadence) as reader:
        assert reader.read_next_event(timeout_ms=2000) is None
    assert factory.create_stream_reader("s", rillet.BytesSerializer(), backoff=stream_cadence) \
        .read_next_event(timeout_ms=2000) is None
    # about 20 pauses each at 100 ms (the default would never ask this object); 3 leaves room for a loaded machine
    assert group_cadence.asked >= 3 and stream_cadence.asked >= 3, (group_cadence.asked, stream_cadence.asked)
