"""Transactions across scaling (rolling transactions, seed 003), on moto with an in-process controller.

A transaction begun before the stream scaled is committed after it: the commit *rolls* it (a new
epoch of segments holding its events, sealed at once, then an epoch duplicating the current key
ranges). The stream is then read the way readers read it (the head's segments first, each successor
once all its predecessors are read, with :class:`rillet.ordering.SegmentOrder`, the readers' own
logic) and per routing key the events written before the commit come before the transaction's, which
come before those written after it.
"""

from __future__ import annotations

import threading

import pytest
from dataplane_model import segment_events

from controlplane.service import Controller
from controlplane.streams import now_ms
from dataplane.segment_store import SegmentStore
from rillet.errors import IllegalState
from rillet.framing import frame
from rillet.keyspace import hash_routing_key
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token
from rillet.ordering import SegmentOrder

STREAM = "s"
KEYS = [f"key-{i}" for i in (0, 1, 3, 4, 5, 8, 9, 11)]  # one in each of [0, .1), [.1, .125), ..., [.875, 1)


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """See tests/conftest.py."""


@pytest.fixture
def scope(controller: Controller, unique: str) -> str:
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return unique


def read_stream(c: Controller, scope: str) -> list[tuple[int, bytes]]:
    """The whole stream in an order a reader may read it: (segment id, event) pairs."""
    head = [p.segment for p in c.streams.head(scope, STREAM)]
    order = SegmentOrder(head)
    queue, out, read = list(head), [], set()
    while queue:
        segment = queue.pop(0)
        assert segment.segment_id not in read, f"segment {segment.segment_id} handed out twice"
        read.add(segment.segment_id)
        name = segment_name(scope, STREAM, segment.segment_id)
        out += [(segment.segment_id, e) for e in segment_events(c.segments, name)]
        if not c.segments.info(name).sealed:
            continue  # reading an open segment stops at its tail
        successors = c.streams.successors(scope, STREAM, segment.segment_id)
        queue += order.complete(segment.segment_id, [(s.segment, s.predecessors) for s in successors])
    unread = {r.segment_id for r in c.store.list_segments(scope, STREAM)} - read
    assert not unread, f"segments no reader reaches: {unread}"
    return out


class Keyed:
    """Writes events per routing key, plain ones to the current segment of the key and transactional
    ones to the transaction segment of the key; remembers each key's expected order."""

    def __init__(self, c: Controller, scope: str) -> None:
        self.c, self.scope = c, scope
        self.expected: dict[str, list[bytes]] = {k: [] for k in KEYS}
        self.numbers: dict[str, int] = {}
        self.txn_events: dict[str, dict[int, list[bytes]]] = {}

    def _append(self, name: str, writer: str, payload: bytes) -> None:
        number = self.numbers.get(writer, 0)
        self.c.segments.append(name, writer, number, 1, frame(payload))
        self.numbers[writer] = number + 1

    def plain(self, tag: str) -> None:
        current = self.c.streams.current_segments(self.scope, STREAM)
        for key in KEYS:
            point = hash_routing_key(key)
            (sid,) = [s.segment_id for s in current if s.low <= point < s.high]
            payload = f"plain:{key}:{tag}".encode()
            self._append(segment_name(self.scope, STREAM, sid), f"p-{key}", payload)

    def txn(self, txn: TxnInfo, tag: str, pad: int = 0) -> None:
        per_segment = self.txn_events.setdefault(txn.txn_id, {s.segment_id: [] for s in txn.segments})
        for i, key in enumerate(KEYS):
            point = hash_routing_key(key)
            (segment,) = [s for s in txn.segments if s.low <= point < s.high]
            payload = f"txn:{key}:{tag}:".encode() + (b"x" * pad if i == 0 else b"")
            self._append(segment_name(self.scope, STREAM, txn_segment_token(segment.segment_id, txn.txn_id)),
                         f"t-{txn.txn_id}-{key}", payload)
            per_segment[segment.segment_id].append(payload)

    def committed(self, txn: TxnInfo) -> None:
        """The transaction's events become part of each key's expected order, as of now."""
        for events in self.txn_events[txn.txn_id].values():
            for payload in events:
                self.expected[payload.split(b":")[1].decode()].append(payload)

    def wrote_plain(self, tag: str) -> None:
        for key in KEYS:
            self.expected[key].append(f"plain:{key}:{tag}".encode())

    def check(self, stream: list[tuple[int, bytes]]) -> None:
        got: dict[str, list[bytes]] = {k: [] for k in KEYS}
        for _, payload in stream:
            got[payload.split(b":")[1].decode()].append(payload)
        for key in KEYS:
            assert got[key] == self.expected[key], f"key {key}: read {got[key]}, expected {self.expected[key]}"


def epoch_ranges(c: Controller, scope: str, epoch: int) -> list[tuple[float, float]]:
    return [(lo, hi) for _, lo, hi in c.store.get_epoch(scope, STREAM, epoch).segments]


def assert_idle(c: Controller, scope: str) -> None:
    record = c.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None and record.pending is None
    assert not [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope]


def test_commit_after_a_split_and_a_merge_rolls_the_transaction(controller: Controller, scope: str):
    c = controller
    w = Keyed(c, scope)
    for tag in ("b0", "b1"):
        w.plain(tag)
        w.wrote_plain(tag)
    txn = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w.txn(txn, "t0", pad=5000)
    w.plain("b2")
    w.wrote_plain("b2")
    # split [0, .5) in two, then merge [.25, .5) with [.5, 1)
    assert c.streams.scale_stream(scope, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)]) == 1
    w.txn(txn, "t1")  # the transaction keeps its segments of epoch 0 across scaling
    w.plain("b3")
    w.wrote_plain("b3")
    _, s2, s3 = (s.segment_id for s in c.streams.current_segments(scope, STREAM))
    scale_epoch = c.streams.scale_stream(scope, STREAM, [s2, s3], [(0.25, 1.0)])
    assert scale_epoch == 2
    w.plain("b4")
    w.wrote_plain("b4")
    before_roll = {s.segment_id for s in c.streams.current_segments(scope, STREAM)}

    info = c.transactions.commit(scope, STREAM, txn.txn_id)
    assert info.state == TxnState.COMMITTED and info.epoch == 0
    w.committed(txn)
    for tag in ("a0", "a1"):
        w.plain(tag)
        w.wrote_plain(tag)

    record = c.store.get_stream(scope, STREAM)
    assert record.current_epoch == scale_epoch + 2
    assert_idle(c, scope)
    rolled = c.store.get_epoch(scope, STREAM, scale_epoch + 1).segments
    # the rolled epoch has the transaction's key ranges and its events; its segments are sealed
    assert [(lo, hi) for _, lo, hi in rolled] == [(s.low, s.high) for s in txn.segments]
    for (sid, _, _), parent in zip(rolled, txn.segments):
        name = segment_name(scope, STREAM, int(sid))
        assert c.segments.info(name).sealed
        (seg,) = c.store.get_segments(scope, STREAM, [int(sid)])
        assert seg.sealed_size == c.segments.info(name).length and seg.sealed_epoch == scale_epoch + 2
        assert segment_events(c.segments, name) == w.txn_events[txn.txn_id][parent.segment_id]
    # the segments current before the commit are sealed, and the epoch after duplicates their ranges
    for sid in before_roll:
        assert c.segments.info(segment_name(scope, STREAM, sid)).sealed
        assert c.store.get_segments(scope, STREAM, [sid])[0].sealed_epoch == scale_epoch + 1
    assert epoch_ranges(c, scope, scale_epoch + 2) == epoch_ranges(c, scope, scale_epoch)
    assert not {s.segment_id for s in c.streams.current_segments(scope, STREAM)} & before_roll

    stream = read_stream(c, scope)
    w.check(stream)  # every event once, and per key: before < transaction < after
    assert len(stream) == len({e for _, e in stream})


def test_transactions_of_two_epochs_committed_in_one_workflow(controller: Controller, scope: str, monkeypatch):
    """Both commit requests arrive while another workflow holds the stream. As in Pravega, the older
    epoch's transaction goes first and rolls (one duplicate of its epoch, one of the active epoch, whose
    reference is the active epoch); the newer one, begun in the active epoch, then commits in place
    into the duplicates: no second roll."""
    c = controller
    w = Keyed(c, scope)
    w.plain("b0")
    w.wrote_plain("b0")
    old = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w.txn(old, "old")
    c.streams.scale_stream(scope, STREAM, [1], [(0.5, 0.75), (0.75, 1.0)])
    new = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    assert new.epoch == 1 and len(new.segments) == 3
    w.txn(new, "new")
    w.plain("b1")
    w.wrote_plain("b1")

    drive = c.transactions.drive_commits
    monkeypatch.setattr(c.transactions, "drive_commits", lambda scope, stream, until=None: None)
    assert c.transactions.commit(scope, STREAM, old.txn_id).state == TxnState.COMMITTING
    assert c.transactions.commit(scope, STREAM, new.txn_id).state == TxnState.COMMITTING
    monkeypatch.setattr(c.transactions, "drive_commits", drive)
    assert c.store.get_stream(scope, STREAM).state == StreamState.ACTIVE.value  # the requests just wait
    c.transactions.drive_commits(scope, STREAM)
    assert c.transactions.status(scope, STREAM, old.txn_id).state == TxnState.COMMITTED
    assert c.transactions.status(scope, STREAM, new.txn_id).state == TxnState.COMMITTED
    w.committed(old)
    w.committed(new)
    w.plain("a0")
    w.wrote_plain("a0")
    record = c.store.get_stream(scope, STREAM)
    assert (record.current_epoch, record.segment_count) == (1 + 2, 4 + 2 + 3)
    assert c.store.get_epoch(scope, STREAM, 3).reference_epoch == 1
    for segment in new.segments:  # merged into the duplicate of its parent, not rolled
        (duplicate,) = [s for s in c.streams.current_segments(scope, STREAM) if s.low == segment.low]
        merged = w.txn_events[new.txn_id][segment.segment_id]
        assert segment_events(c.segments, segment_name(scope, STREAM, duplicate.segment_id))[:len(merged)] == merged
    assert_idle(c, scope)
    w.check(read_stream(c, scope))


def test_scale_waits_for_a_commit_workflow_and_a_transaction_begun_meanwhile_commits(
        controller: Controller, scope: str, monkeypatch):
    """The stream's COMMITTING_TXN state is a barrier for scaling; begin is still allowed, and a
    transaction begun while a roll is in flight (its epoch's segments are about to be sealed) commits
    correctly afterwards, in place: the roll's duplicate epoch has its epoch as reference."""
    c = controller
    w = Keyed(c, scope)
    old = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w.txn(old, "old")
    c.streams.scale_stream(scope, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])

    class Interrupted(Exception):
        pass

    finish = c.transactions.finish_commit_stream

    def interrupted(*args):
        raise Interrupted()

    monkeypatch.setattr(c.transactions, "finish_commit_stream", interrupted)
    with pytest.raises(Interrupted):
        c.transactions.commit(scope, STREAM, old.txn_id)
    monkeypatch.setattr(c.transactions, "finish_commit_stream", finish)
    assert c.store.get_stream(scope, STREAM).state == StreamState.COMMITTING_TXN.value
    current = [s.segment_id for s in c.streams.current_segments(scope, STREAM)]
    with pytest.raises(IllegalState):
        c.streams.scale_stream(scope, STREAM, [current[0]], [(0.0, 0.1), (0.1, 0.25)])
    meanwhile = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    assert meanwhile.epoch == 1
    w.txn(meanwhile, "meanwhile")

    assert c.transactions.commit(scope, STREAM, old.txn_id).state == TxnState.COMMITTED  # finishes the workflow
    w.committed(old)
    w.plain("between")
    w.wrote_plain("between")
    assert c.transactions.commit(scope, STREAM, meanwhile.txn_id).state == TxnState.COMMITTED
    w.committed(meanwhile)
    w.plain("after")
    w.wrote_plain("after")
    assert c.store.get_stream(scope, STREAM).current_epoch == 3
    assert_idle(c, scope)
    w.check(read_stream(c, scope))
    # and now the scale goes through
    current = [s.segment_id for s in c.streams.current_segments(scope, STREAM)]
    assert c.streams.scale_stream(scope, STREAM, [current[0]], [(0.0, 0.1), (0.1, 0.25)]) == 4


def test_a_slow_finisher_of_a_roll_does_not_overwrite_later_segment_metadata(
        controller: Controller, scope: str, monkeypatch):
    """Deterministic interleaving of a race between two finishers of one rolling commit.

    Caller A's roll is delayed right before its first step (the merge into the first rolled segment). The writer's retry (B)
    finishes the workflow, the stream then scales (sealing one of the duplicate segments, which
    records its successors and sealed size), and events are written to the new segments. When A
    resumes, the metadata written by the later scale must survive, so readers still find the
    duplicate segment's successors and read every event.
    """
    c = controller
    w = Keyed(c, scope)
    txn = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w.txn(txn, "t")
    c.streams.scale_stream(scope, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])
    paused, resume = threading.Event(), threading.Event()
    slow: list[threading.Thread] = []
    original = SegmentStore.merge

    def merge(self, target, source):
        if slow and threading.current_thread() is slow[0] and not paused.is_set():
            paused.set()
            assert resume.wait(timeout=60)
        return original(self, target, source)

    monkeypatch.setattr(SegmentStore, "merge", merge)
    outcome: list = []

    def caller_a() -> None:
        try:
            outcome.append(c.transactions.commit(scope, STREAM, txn.txn_id).state)
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)

    a = threading.Thread(target=caller_a, daemon=True)
    slow.append(a)
    a.start()
    assert paused.wait(timeout=60), "caller A never reached the roll"
    assert c.transactions.commit(scope, STREAM, txn.txn_id).state == TxnState.COMMITTED  # caller B
    w.committed(txn)
    duplicates = [s.segment_id for s in c.streams.current_segments(scope, STREAM)]
    epoch = c.streams.scale_stream(scope, STREAM, [duplicates[0]], [(0.0, 0.125), (0.125, 0.25)])
    w.plain("after")
    w.wrote_plain("after")
    resume.set()
    a.join(timeout=60)
    assert not a.is_alive()
    monkeypatch.setattr(SegmentStore, "merge", original)

    (sealed,) = c.store.get_segments(scope, STREAM, [duplicates[0]])
    problems = []
    if (sealed.sealed_epoch, sealed.sealed_size is None) != (epoch, False):
        problems.append(f"the later scale's seal record was overwritten: {sealed}")
    if len(sealed.successors) != 2:
        problems.append(f"the later scale's successors were overwritten: {sealed.successors}")
    if c.store.get_stream(scope, STREAM).current_epoch != epoch:
        problems.append("the current epoch moved back")
    try:
        w.check(read_stream(c, scope))
    except AssertionError as e:
        problems.append(f"readers no longer read the stream correctly: {e}")
    assert not problems, "\n".join(problems)


def test_twenty_scales_with_commits_between_roll_each_older_epoch_once(controller: Controller, scope: str):
    """No rolling cascade. Each round: a transaction begins in epoch E, the stream scales to E + 1, a
    second transaction begins there, and both commit. The first rolls (E + 2 has E's ranges and
    reference and holds its events, E + 3 duplicates E + 1 with E + 1 as reference); the second, begun
    in the duplicated epoch, commits in place into E + 3. So each round takes 3 epochs, and 20 rounds end at
    epoch 60 with 132 segments: 2 at first, then per split round 2 new + 2 rolled + 3 duplicates, per
    merge round 1 + 3 + 2. (Rolling every transaction of a non-current epoch, the second one too,
    ends at epoch 100 with 232 segments.)"""
    c = controller
    w = Keyed(c, scope)
    epoch, reference, references = 0, 0, {}
    for round_ in range(1, 21):
        before = c.transactions.begin(scope, STREAM, lease_ms=60_000)
        w.txn(before, f"before{round_}")
        w.plain(f"p{round_}")
        w.wrote_plain(f"p{round_}")
        first, second, *_ = c.streams.current_segments(scope, STREAM)
        if round_ % 2:  # split the first segment, then merge it back in the next round
            mid = (first.low + first.high) / 2
            scaled = c.streams.scale_stream(scope, STREAM, [first.segment_id], [(first.low, mid), (mid, first.high)])
        else:
            scaled = c.streams.scale_stream(scope, STREAM, [first.segment_id, second.segment_id],
                                            [(first.low, second.high)])
        assert scaled == epoch + 1
        after = c.transactions.begin(scope, STREAM, lease_ms=60_000)
        assert after.epoch == epoch + 1
        w.txn(after, f"after{round_}")
        for txn in (before, after):
            assert c.transactions.commit(scope, STREAM, txn.txn_id).state == TxnState.COMMITTED
            w.committed(txn)
        w.plain(f"q{round_}")
        w.wrote_plain(f"q{round_}")
        references.update({epoch + 2: reference, epoch + 3: epoch + 1})
        epoch, reference = epoch + 3, epoch + 1
        assert c.store.get_stream(scope, STREAM).current_epoch == epoch

    record = c.store.get_stream(scope, STREAM)
    assert (record.current_epoch, record.segment_count) == (60, 132)
    assert len(c.store.list_segments(scope, STREAM)) == 132
    assert len(c.streams.current_segments(scope, STREAM)) == 2
    # one roll per older epoch: the only duplicated epochs are each round's pair
    epochs = c.store.list_epochs(scope, STREAM)
    assert len(epochs) == 61
    assert {e.epoch: e.reference_epoch for e in epochs if e.reference_epoch is not None} == references
    assert_idle(c, scope)
    w.check(read_stream(c, scope))


def test_transactions_begun_in_a_duplicated_epoch_or_after_the_roll_commit_in_place(controller: Controller,
                                                                                   scope: str):
    """After a roll, the current epoch duplicates the one before it: a transaction begun in that older
    epoch (before the roll) and one begun after the roll both merge into the current segments, with
    no new epoch or segment."""
    c = controller
    w = Keyed(c, scope)
    old = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w.txn(old, "old")
    c.streams.scale_stream(scope, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])
    duplicated = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w.txn(duplicated, "duplicated")
    assert c.transactions.commit(scope, STREAM, old.txn_id).state == TxnState.COMMITTED
    w.committed(old)
    later = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    assert (duplicated.epoch, later.epoch) == (1, 3)
    w.txn(later, "later")
    w.plain("between")
    w.wrote_plain("between")
    counts = c.store.get_stream(scope, STREAM).segment_count
    for txn in (later, duplicated):
        assert c.transactions.commit(scope, STREAM, txn.txn_id).state == TxnState.COMMITTED
        w.committed(txn)
    w.plain("after")
    w.wrote_plain("after")
    record = c.store.get_stream(scope, STREAM)
    assert (record.current_epoch, record.segment_count) == (3, counts)
    assert_idle(c, scope)
    w.check(read_stream(c, scope))
