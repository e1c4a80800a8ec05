"""Reader groups over HTTP against the standalone stack: a crashed reader taken offline at its last
position, end stream cuts, reset to a start cut, unread bytes, and truncation overtaking a reader.

Events are strings ``"<tag>:<n>"``; each test writes through an EventStreamWriter and waits for the
acknowledgements, so it knows exactly which events are in the stream and where the cuts lie.
"""

from __future__ import annotations

import threading
import time

import pytest

import rillet
from rillet import ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.reader_group import ReaderGroupManager, group_config

SER = UTF8StringSerializer()
REFRESH_MS = 100


class Setup:
    def __init__(self, url: str, scope: str, segments: int = 1) -> None:
        self.url, self.scope, self.stream = url, scope, "s"
        self.manager = rillet.StreamManager(url)
        self.manager.create_scope(scope)
        self.manager.create_stream(scope, self.stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments)))
        self.factory = rillet.EventStreamClientFactory(scope, url)
        self.groups = ReaderGroupManager(scope, url)
        self.writer = self.factory.create_event_writer(self.stream, SER, rillet.EventWriterConfig(max_latency_ms=2))
        self.written: list[str] = []

    def write(self, tag: str, n: int, keys: int = 4) -> list[str]:
        events = [f"{tag}:{i}" for i in range(n)]
        futures = [self.writer.write_event(e, routing_key=f"k{i % keys}") for i, e in enumerate(events)]
        for f in futures:
            f.result(timeout=30)
        self.written.extend(events)
        return events

    def scale(self, seal_index: list[int], ranges_of: callable) -> None:
        current = self.manager.get_stream_info(self.scope, self.stream).current_segments
        sealed = [current[i] for i in seal_index]
        self.manager.scale_stream(self.scope, self.stream, [s.segment_id for s in sealed],
                                  ranges_of(sealed[0].low, sealed[-1].high))

    def split(self, index: int = 0) -> None:
        self.scale([index], lambda lo, hi: [(lo, (lo + hi) / 2), ((lo + hi) / 2, hi)])

    def merge(self, first: int = 0) -> None:
        self.scale([first, first + 1], lambda lo, hi: [(lo, hi)])

    def group(self, name: str, streams=None, **kwargs) -> rillet.ReaderGroup:
        kwargs.setdefault("automatic_checkpoint_interval_ms", 0)
        kwargs.setdefault("group_refresh_time_ms", REFRESH_MS)
        self.groups.create_reader_group(name, group_config(streams or [f"{self.scope}/{self.stream}"], **kwargs))
        return self.groups.get_reader_group(name)

    def reader(self, reader_id: str, group: str) -> rillet.EventStreamReader:
        return self.factory.create_reader(reader_id, group, SER)

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
def setup_factory(url, unique):
    made = []

    def make(segments: int = 1) -> Setup:
        s = Setup(url, unique + str(len(made)), segments)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def read_until_idle(reader, idle_s: float = 1.5, limit_s: float = 30.0, count: int | None = None) -> list[str]:
    """Events (not checkpoints) until nothing arrived for ``idle_s``, or ``count`` events were read."""
    events: list[str] = []
    deadline = time.monotonic() + limit_s
    last = time.monotonic()
    while time.monotonic() < deadline:
        if count is not None and len(events) >= count:
            return events
        read = reader.read_next_event(timeout_ms=200)
        if read is None:
            if time.monotonic() - last >= idle_s:
                return events
            continue
        last = time.monotonic()
        if not read.is_checkpoint:
            events.append(read.event)
    raise AssertionError(f"still reading after {limit_s} s ({len(events)} events)")


def read_with_positions(reader, count: int, limit_s: float = 30.0) -> list[tuple[str, rillet.Position]]:
    out = []
    deadline = time.monotonic() + limit_s
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} events arrived"
        read = reader.read_next_event(timeout_ms=200)
        if read is not None and not read.is_checkpoint:
            out.append((read.event, read.position))
    return out


def assert_exactly_once(reads: list[str], expected: list[str]) -> None:
    duplicates = sorted({e for e in reads if reads.count(e) > 1})
    assert not duplicates, f"read more than once: {duplicates}"
    assert sorted(reads) == sorted(expected), (sorted(set(expected) - set(reads)), sorted(set(reads) - set(expected)))


def per_key_in_order(reads: list[str], keys: int = 4) -> None:
    for k in range(keys):
        mine = [e for e in reads if int(e.split(":")[1]) % keys == k]
        tags = {e.split(":")[0] for e in mine}
        for tag in tags:
            seq = [int(e.split(":")[1]) for e in mine if e.startswith(tag + ":")]
            assert seq == sorted(seq), (tag, k, seq)


# -- a crashed reader -------------------------------------------------------------------------------


def test_a_crashed_reader_taken_offline_at_its_last_position_loses_and_repeats_nothing(setup_factory):
    s = setup_factory(segments=2)
    s.write("a", 30)
    s.split(0)
    s.write("b", 30)
    group = s.group("g")
    r1 = s.reader("r1", "g")
    got = read_with_positions(r1, 25)
    first = [e for e, _ in got]
    last_position = got[-1][1]
    # r1 crashes: the application stops using it (no close) and reports it offline at the position it
    # recorded with its last processed event
    group.reader_offline("r1", last_position)
    assert "r1" not in group.get_online_readers()
    r2 = s.reader("r2", "g")
    rest = read_until_idle(r2)
    assert not set(first) & set(rest), f"re-read after the recorded position: {sorted(set(first) & set(rest))}"
    assert_exactly_once(first + rest, s.written)
    r2.close()


@pytest.mark.parametrize("how", ["crash", "close"])
def test_a_reader_leaving_right_after_the_last_event_of_a_sealed_segment_hands_it_over_as_done(setup_factory, how):
    """The reader's position after the last event of a sealed segment must say the segment is done
    (or at its end): otherwise the reader taking over reads that segment again from an older offset."""
    s = setup_factory(segments=1)
    first = s.write("a", 10)
    s.split(0)
    later = s.write("b", 10)
    group = s.group("g")
    r1 = s.reader("r1", "g")
    got = read_with_positions(r1, 10)  # S0 is read before its successors are handed out
    assert sorted(e for e, _ in got) == sorted(first)
    if how == "crash":
        group.reader_offline("r1", got[-1][1])
    else:
        r1.close()
    r2 = s.reader("r2", "g")
    rest = read_until_idle(r2)
    assert not set(first) & set(rest), f"read again: {sorted(set(first) & set(rest))}"
    assert sorted(rest) == sorted(later)
    r2.close()


# -- end cut, reset, unread bytes ---------------------------------------------------------------------


def test_an_end_cut_stops_reading_and_a_reset_starts_again_from_a_cut(setup_factory):
    s = setup_factory(segments=2)
    before = s.write("a", 20)
    s.merge(0)
    before += s.write("b", 10)
    cut = s.manager.get_tail(s.scope, s.stream)
    after = s.write("c", 10)
    s.split(0)
    after += s.write("d", 10)

    group = s.group("bounded", end=[cut])
    reader = s.reader("r", "bounded")
    reads = read_until_idle(reader)
    assert_exactly_once(reads, before)
    per_key_in_order(reads)
    assert reader.read_next_event(timeout_ms=300) is None  # at the end cut: nothing more, no error
    reader.close()

    # reset to start at the same cut, unbounded: exactly what came after it
    config = group.reset_reader_group(group_config([cut], automatic_checkpoint_interval_ms=0,
                                                   group_refresh_time_ms=REFRESH_MS))
    assert config.generation == 1
    assert group.get_online_readers() == []
    reader = s.reader("r", "bounded")
    reads = read_until_idle(reader)
    assert_exactly_once(reads, after)
    per_key_in_order(reads)
    reader.close()

    # reset to the head with the end cut again: the same bounded read as at first
    head = s.manager.get_head(s.scope, s.stream)
    group.reset_reader_group(group_config([head], end=[cut], automatic_checkpoint_interval_ms=0,
                                          group_refresh_time_ms=REFRESH_MS))
    reader = s.reader("r2", "bounded")
    assert_exactly_once(read_until_idle(reader), before)
    reader.close()


def framed_size(events: list[str]) -> int:
    return sum(4 + len(e.encode()) for e in events)


def wait_for(predicate, timeout_s: float = 10.0, poll=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        if poll:
            poll()
        time.sleep(0.05)


def test_unread_bytes_fall_as_readers_read_and_are_zero_at_the_tail(setup_factory):
    s = setup_factory(segments=2)
    s.write("a", 20)
    s.split(1)
    s.write("b", 20)
    total = framed_size(s.written)
    group = s.group("g")
    assert group.unread_bytes() == total
    r1 = s.reader("r1", "g")
    r2 = s.reader("r2", "g")  # joined: r1's fair share is one segment; r2 does not read yet
    r1_reads = read_until_idle(r1, idle_s=1.0)
    assert r1_reads and len(r1_reads) < len(s.written)
    wait_for(lambda: group.unread_bytes() == total - framed_size(r1_reads))
    middle = group.unread_bytes()
    assert 0 < middle < total
    r2_reads = read_until_idle(r2, idle_s=1.0)
    more_r1 = read_until_idle(r1, idle_s=1.0)  # successors may have gone to either reader
    assert_exactly_once(r1_reads + r2_reads + more_r1, s.written)
    wait_for(lambda: group.unread_bytes() == 0, poll=lambda: (r1.read_next_event(50), r2.read_next_event(50)))
    # new data is unread again, and read away again
    extra = s.write("c", 8)
    assert group.unread_bytes() == framed_size(extra)
    got = read_until_idle(r1, idle_s=0.5) + read_until_idle(r2, idle_s=0.5)
    assert sorted(got) == sorted(extra)
    wait_for(lambda: group.unread_bytes() == 0, poll=lambda: (r1.read_next_event(50), r2.read_next_event(50)))
    r1.close()
    r2.close()


# -- truncation overtakes a lagging reader ------------------------------------------------------------


def test_truncation_moves_a_lagging_group_reader_to_the_new_head(setup_factory):
    s = setup_factory(segments=1)
    early = s.write("a", 3)
    s.group("g")
    reader = s.reader("r", "g")
    assert sorted(e for e, _ in read_with_positions(reader, 3)) == sorted(early)
    # while the reader is idle: more data, a split, more data, truncation at the tail, more data
    s.write("skipped", 7)
    s.split(0)
    s.write("gone", 10)
    cut = s.manager.get_tail(s.scope, s.stream)
    s.manager.truncate_stream(s.scope, s.stream, cut)
    assert s.manager.get_head(s.scope, s.stream).compare(cut) == rillet.Ordering.EQUAL
    fresh = s.write("fresh", 10)
    # the reader finds its segment deleted and its successors truncated: it continues at the head
    reads = read_until_idle(reader)
    assert sorted(reads) == sorted(fresh)
    per_key_in_order(reads)
    reader.close()


# -- reader leases ------------------------------------------------------------------------------------

LEASE_MS = 2_000


def read_together_until_idle(readers, idle_s: float = 0.5, limit_s: float = 30.0) -> list[list[str]]:
    """Each reader's events, calling the readers in turn (so each keeps its lease) until none has
    read anything for ``idle_s``."""
    events: list[list[str]] = [[] for _ in readers]
    deadline, last = time.monotonic() + limit_s, time.monotonic()
    while time.monotonic() - last < idle_s:
        assert time.monotonic() < deadline, f"still reading after {limit_s} s"
        for i, reader in enumerate(readers):
            read = reader.read_next_event(timeout_ms=50)
            if read is not None:
                last = time.monotonic()
                if not read.is_checkpoint:
                    events[i].append(read.event)
    return events


def test_a_reader_killed_without_goodbye_loses_its_segments_to_the_others_and_cannot_come_back(setup_factory):
    """r1 is killed (the application just stops; no close, no reader_offline). Within its lease plus a
    refresh, r2's syncs take it offline at its last reported position and r2 reads its segment on from
    there: nothing lost, nothing twice. When r1's process "comes back", it gets ReaderNotInReaderGroup
    and not one more event; closing it does not disturb a new reader that took its id."""
    s = setup_factory(segments=2)
    first = s.write("a", 40)
    s.group("g", reader_lease_ms=LEASE_MS)
    r1, r2 = s.reader("r1", "g"), s.reader("r2", "g")
    reads_r1, reads_r2 = read_together_until_idle([r1, r2])  # to the tails; their positions are reported
    assert reads_r1 and reads_r2
    assert_exactly_once(reads_r1 + reads_r2, first)

    later = s.write("b", 40)  # r1 is dead now: half of these are in the segment it held
    reads_r2 += read_until_idle(r2, idle_s=LEASE_MS / 1000 + 1.5, limit_s=15)
    assert_exactly_once(reads_r1 + reads_r2, first + later)
    per_key_in_order(reads_r2)
    assert s.groups.get_reader_group("g").get_online_readers() == ["r2"]

    with pytest.raises(rillet.ReaderNotInReaderGroup):
        r1.read_next_event(timeout_ms=100)
    with pytest.raises(rillet.ReaderNotInReaderGroup):  # and on every later call: it must be recreated
        r1.read_next_event(timeout_ms=100)
    replacement = s.reader("r1", "g")
    r1.close()  # the dead reader's close must not take the replacement offline
    assert "r1" in s.groups.get_reader_group("g").get_online_readers()
    replacement.close()
    r2.close()


def test_a_checkpoint_completes_once_a_killed_reader_is_taken_offline(setup_factory):
    s = setup_factory(segments=2)
    written = s.write("a", 20)
    group = s.group("g", reader_lease_ms=LEASE_MS)
    r1, r2 = s.reader("r1", "g"), s.reader("r2", "g")
    reads_r1, reads_r2 = read_together_until_idle([r1, r2])
    assert_exactly_once(reads_r1 + reads_r2, written)
    # r1 is killed; a checkpoint begins and waits for it until its lease ends
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(cp=group.initiate_checkpoint("cp", timeout_s=20)))
    thread.start()
    seen_checkpoint = False
    deadline = time.monotonic() + 20
    while thread.is_alive():
        assert time.monotonic() < deadline, "the checkpoint never completed"
        read = r2.read_next_event(timeout_ms=200)
        seen_checkpoint |= read is not None and read.is_checkpoint
    thread.join()
    assert seen_checkpoint
    cuts = outcome["cp"].cuts
    assert set(cuts) == {f"{s.scope}/{s.stream}"}
    # the cut is where the two readers had got to: the tail of both segments
    tail = s.manager.get_tail(s.scope, s.stream)
    assert {p.segment.segment_id: p.offset for p in cuts[f"{s.scope}/{s.stream}"].positions} == {
        p.segment.segment_id: p.offset for p in tail.positions}
    r2.close()


# -- one online reader per name -----------------------------------------------------------------------


def test_a_reader_id_online_in_the_group_is_refused_to_another_reader_until_it_leaves(setup_factory):
    """As Pravega refuses a reader id that is online: a second EventStreamReader of the id gets
    AlreadyExists (and reads nothing); a join repeated with the reader's own token, or sent without a
    token by an older SDK, is accepted and leaves the reader its segments; after close the id is free."""
    s = setup_factory(segments=2)
    written = s.write("a", 20)
    group = s.group("g")
    r1 = s.reader("r1", "g")
    reads = read_until_idle(r1)
    assert_exactly_once(reads, written)
    with pytest.raises(rillet.AlreadyExists, match="r1"):
        s.reader("r1", "g")
    transport, path = group._transport, f"{group._path}/readers/r1"
    repeated = rillet.api.Assignment.model_validate(
        transport.json("POST", path, json_body={"instance": r1._instance}))
    assert len(repeated.segments) == 2
    assert len(rillet.api.Assignment.model_validate(transport.json("POST", path)).segments) == 2
    assert group.get_online_readers() == ["r1"]
    later = s.write("b", 20)
    assert_exactly_once(read_until_idle(r1), later)
    r1.close()
    r1_again = s.reader("r1", "g")
    assert group.get_online_readers() == ["r1"]
    r1_again.close()


def test_more_outstanding_checkpoints_than_the_ceiling_is_invalid_argument(setup_factory):
    """Above 10, max_outstanding_checkpoint_request is refused: by the SDK before sending, and with a
    400 InvalidArgument by the server to a client that sends it anyway."""
    s = setup_factory()
    with pytest.raises(rillet.InvalidArgument, match="max_outstanding_checkpoint_request"):
        group_config([f"{s.scope}/{s.stream}"], max_outstanding_checkpoint_request=11)
    config = group_config([f"{s.scope}/{s.stream}"], max_outstanding_checkpoint_request=10).model_dump(mode="json")
    transport = s.groups.connection.controller.transport
    with pytest.raises(rillet.InvalidArgument, match="max_outstanding_checkpoint_request") as refused:
        transport.json("POST", f"/v1/scopes/{s.scope}/reader-groups", json_body={
            "group": "g", "config": config | {"max_outstanding_checkpoint_request": 11}})
    assert refused.value.status == 400
    assert s.groups.create_reader_group("g", rillet.ReaderGroupConfig.model_validate(config))


def test_a_frozen_reader_whose_id_a_new_reader_took_reads_nothing_more_and_leaves_it_online(setup_factory):
    """r1 freezes past its lease; a new reader joins as r1 (its join takes the frozen one offline) and
    holds the segments. The frozen one, coming back, gets ReaderNotInReaderGroup rather than a second
    copy of the newcomer's events, and its close does not take the newcomer offline."""
    s = setup_factory(segments=2)
    first = s.write("a", 20)
    s.group("g", reader_lease_ms=LEASE_MS)
    frozen = s.reader("r1", "g")
    assert_exactly_once(read_until_idle(frozen), first)
    time.sleep(LEASE_MS / 1000 + 0.2)  # the freeze: no call for longer than the lease
    newcomer = s.reader("r1", "g")
    later = s.write("b", 20)
    with pytest.raises(rillet.ReaderNotInReaderGroup):
        frozen.read_next_event(timeout_ms=100)
    frozen.close()
    assert s.groups.get_reader_group("g").get_online_readers() == ["r1"]
    assert_exactly_once(read_until_idle(newcomer), later)
    newcomer.close()
