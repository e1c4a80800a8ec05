"""Key order and exactly-once reading across scaling, checked on a recorded history (tests/history.py).

Four writers (threads, each its own EventStreamWriter with a small linger) write ``w<writer>:k<key>:<seq>``
for five keys each, while a driver scales the stream at least five times (splits, a split into three,
merges) against its current segments, and a reader group of changing membership reads: readers join
at different times, one leaves with close() and rejoins, a new one joins late, and checkpoints are
initiated along the way. Every acknowledged write and every read (with a global sequence number taken
right after read_next_event returns) is recorded; the checker then requires every acknowledged event
read exactly once, nothing read that was not written, and per (writer, key) the read order to equal
the write order.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback

import pytest

import rillet
from rillet import ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.reader_group import ReaderGroupManager, group_config
from rillet.stream_cut import validity_problem

try:
    from history import History, event_text
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import History, event_text

SER = UTF8StringSerializer()
WRITERS, KEYS, EVENTS_PER_WRITER = 4, 5, 160
WRITE_PAUSE_S = 0.05  # ~8 s of writing per writer
SCALES = ["split", "split", "merge", "split3", "merge", "merge", "split"]
BOUND_S = 60


class Run:
    def __init__(self, url: str, scope: str) -> None:
        self.url, self.scope, self.stream, self.group_name = url, scope, "s", "g"
        self.manager = rillet.StreamManager(url)
        self.factory = rillet.EventStreamClientFactory(scope, url)
        self.history = History()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.writers_done = threading.Event()
        self.scales: list[tuple[str, int]] = []
        self.checkpoints: list[rillet.Checkpoint] = []
        self.membership: list[tuple[float, str, str]] = []
        self.t0 = time.monotonic()

    def guarded(self, name: str, body) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except BaseException:  # noqa: BLE001 - reported by the test
                self.errors.append(f"{name}: {traceback.format_exc()}")
        return threading.Thread(target=run, name=name, daemon=True)

    def at(self, seconds: float) -> None:
        """Sleep until ``seconds`` after the start (or until the run is stopped)."""
        self.stop.wait(max(0.0, self.t0 + seconds - time.monotonic()))

    # -- the actors ------------------------------------------------------------------------------

    def writer(self, w: int) -> None:
        writer = self.factory.create_event_writer(self.stream, SER, rillet.EventWriterConfig(max_latency_ms=10))
        futures = []
        for i in range(EVENTS_PER_WRITER):
            key, seq = i % KEYS, i // KEYS
            event = event_text(w, key, seq)
            self.history.attempt(event)
            future = writer.write_event(event, routing_key=f"w{w}-k{key}")
            future.add_done_callback(lambda f, e=event: f.exception() is None and self.history.acknowledge(e))
            futures.append((event, future))
            time.sleep(WRITE_PAUSE_S)
        writer.flush()
        for event, future in futures:
            if future.exception(timeout=30) is not None:
                self.errors.append(f"writer {w}: {event} failed: {future.exception()!r}")
        writer.close()

    def driver(self) -> None:
        for i, op in enumerate(SCALES):
            self.at(0.6 + 0.6 * i)
            current = self.manager.get_stream_info(self.scope, self.stream).current_segments
            if op.startswith("split"):
                target = max(current, key=lambda s: s.high - s.low)
                parts = 3 if op == "split3" else 2
                step = (target.high - target.low) / parts
                bounds = [target.low + step * j for j in range(parts)] + [target.high]
                seal, ranges = [target.segment_id], list(itertools.pairwise(bounds))
            else:
                a, b = min(itertools.pairwise(current), key=lambda p: p[1].high - p[0].low)
                seal, ranges = [a.segment_id, b.segment_id], [(a.low, b.high)]
            epoch = self.manager.scale_stream(self.scope, self.stream, seal, ranges)
            assert self.manager.check_scale(self.scope, self.stream, epoch)
            self.scales.append((op, epoch))

    def checkpointer(self, group: rillet.ReaderGroup) -> None:
        for i, when in enumerate((1.5, 3.2, 5.0, 7.0)):
            self.at(when)
            if self.stop.is_set():
                return
            self.checkpoints.append(group.initiate_checkpoint(f"cp{i}", timeout_s=25))

    def reader(self, reader_id: str, join_at: float, leave_at: float | None = None,
               rejoin_at: float | None = None) -> None:
        self.at(join_at)
        reader = self.factory.create_reader(reader_id, self.group_name, SER)
        self.membership.append((time.monotonic() - self.t0, reader_id, "joined"))
        while not self.stop.is_set():
            if leave_at is not None and time.monotonic() - self.t0 >= leave_at:
                reader.close()
                self.membership.append((time.monotonic() - self.t0, reader_id, "left"))
                leave_at = None
                self.at(rejoin_at)
                if self.stop.is_set():
                    return
                reader = self.factory.create_reader(reader_id, self.group_name, SER)
                self.membership.append((time.monotonic() - self.t0, reader_id, "rejoined"))
            read = reader.read_next_event(timeout_ms=200)
            if read is None:
                continue
            if read.is_checkpoint:
                self.history.checkpoint(reader_id, read.checkpoint_name)
            else:
                self.history.read(reader_id, read.event)
        reader.close()


@pytest.mark.timeout(BOUND_S + 60)
def test_key_order_and_exactly_once_across_scaling_with_a_changing_reader_group(url, unique):
    run = Run(url, unique)
    run.manager.create_scope(run.scope)
    run.manager.create_stream(run.scope, run.stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    ReaderGroupManager(run.scope, url).create_reader_group(run.group_name, group_config(
        [f"{run.scope}/{run.stream}"], automatic_checkpoint_interval_ms=0, group_refresh_time_ms=200))
    group = ReaderGroupManager(run.scope, url).get_reader_group(run.group_name)

    writers = [run.guarded(f"writer-{w}", lambda w=w: run.writer(w)) for w in range(WRITERS)]
    readers = [
        run.guarded("r1", lambda: run.reader("r1", 0.0)),
        run.guarded("r2", lambda: run.reader("r2", 1.0, leave_at=3.6, rejoin_at=5.4)),
        run.guarded("r3", lambda: run.reader("r3", 2.0)),
        run.guarded("r4", lambda: run.reader("r4", 6.0)),
    ]
    others = [run.guarded("driver", run.driver), run.guarded("checkpointer", lambda: run.checkpointer(group))]
    threads = writers + readers + others
    run.t0 = time.monotonic()
    for t in threads:
        t.start()
    deadline = run.t0 + BOUND_S
    try:
        for t in writers + others:
            t.join(max(0.1, deadline - time.monotonic()))
        while (run.history.unread_acknowledged() or len(run.history.acknowledged) < WRITERS * EVENTS_PER_WRITER) \
                and time.monotonic() < deadline and not run.errors:
            time.sleep(0.2)
        time.sleep(1.5)  # let any late duplicate show up
    finally:
        run.stop.set()
        for t in readers:
            t.join(15)

    assert not run.errors, "\n".join(run.errors)
    assert len(run.history.acknowledged) == WRITERS * EVENTS_PER_WRITER
    assert [op for op, _ in run.scales] == SCALES and len(run.scales) >= 5
    assert [e for _, e in run.scales] == list(range(1, len(SCALES) + 1))
    problems = run.history.check()
    assert not problems, (f"{len(problems)} problems, membership {run.membership}, scales {run.scales}:\n"
                          + "\n".join(problems[:40]))
    # the checkpoints completed, each with a valid cut of the stream, and every reader online at the
    # time emitted them (each reader at most once per checkpoint)
    assert [c.name for c in run.checkpoints] == ["cp0", "cp1", "cp2", "cp3"]
    for checkpoint in run.checkpoints:
        cut = checkpoint.cuts[f"{run.scope}/{run.stream}"]
        assert validity_problem(cut.segments) is None
    emitted = [(reader, name) for _, reader, name in run.history.checkpoints]
    assert len(emitted) == len(set(emitted)) and emitted
    # the group really shared the work (r4 reads only if the last rebalance gives it a segment)
    readers = {r.reader for r in run.history.reads}
    assert {"r1", "r2", "r3"} <= readers, (readers, run.membership)
    info = run.manager.get_stream_info(run.scope, run.stream)
    assert info.current_epoch == len(SCALES)
