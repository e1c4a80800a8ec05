"""Transactions through the SDK over HTTP against the standalone stack (invariant 5).

* The transactional writer end to end: begin, write (invisible until commit), flush, ping, status,
  commit (visible at once, contiguous in each segment), abort (never visible), and TxnFailed for any
  operation on a closed transaction.
* ``get_txn`` resumes a transaction begun by another writer object (another process, say), which
  writes more and commits.
* Exactly-once production: a producer turns inputs 0..N-1 into events, a batch per transaction,
  recording ``{"txn": id, "upto": k}`` in its checkpoint store before committing. It is made to die at
  chosen and random points; each new instance recovers from the checkpoint (a committed transaction
  is kept, an open one aborted and its batch redone). Reading the stream afterwards must give every
  input exactly once, in order per key.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter, defaultdict

import pytest

import rillet
from rillet import (
    EventWriterConfig,
    LeaseTooLarge,
    ScalingPolicy,
    StreamConfiguration,
    TxnFailed,
    TxnNotFound,
    TxnState,
    UTF8StringSerializer,
)

SER = UTF8StringSerializer()
STREAM = "s"
FAST = EventWriterConfig(max_latency_ms=10)


@pytest.fixture
def factory(manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    with rillet.EventStreamClientFactory(unique, url) as f:
        yield f


def read_all(factory) -> list[rillet.EventRead]:
    return list(factory.create_stream_reader(STREAM, SER))


def assert_contiguous(reads: list[rillet.EventRead], events: set[str]) -> None:
    """In every segment, the given events sit back to back (no other event between them)."""
    by_segment = defaultdict(list)
    for r in reads:
        if r.event in events:
            by_segment[r.pointer.segment_id].append(r.pointer)
    assert sum(len(p) for p in by_segment.values()) == len(events)
    for sid, pointers in by_segment.items():
        pointers.sort(key=lambda p: p.offset)
        for a, b in itertools.pairwise(pointers):
            assert a.offset + a.length == b.offset, f"segment {sid}: another event between {a} and {b}"


def test_transactional_writer_end_to_end(factory):
    plain = factory.create_event_writer(STREAM, SER, FAST)
    for i in range(6):
        plain.write_event(f"plain-before-{i}", routing_key=f"k{i}")
    plain.flush()
    writer = factory.create_transactional_writer(STREAM, SER, FAST)
    txn = writer.begin(lease_ms=30_000)
    assert txn.check_status() == TxnState.OPEN
    assert len(txn.info.segments) == 3
    events = [f"txn-{i}" for i in range(30)]
    futures = [txn.write_event(e, routing_key=f"k{i % 6}") for i, e in enumerate(events)]
    txn.flush()
    assert all(f.exception(timeout=30) is None for f in futures)
    for i in range(6):  # plain writes go on beside the open transaction
        plain.write_event(f"plain-during-{i}", routing_key=f"k{i}")
    plain.flush()
    assert {r.event for r in read_all(factory)} == {f"plain-before-{i}" for i in range(6)} | {
        f"plain-during-{i}" for i in range(6)}  # nothing of the transaction is visible

    info = txn.ping(60_000)
    assert info.state == TxnState.OPEN and info.lease_expiry_ms > time.time() * 1000 + 50_000
    with pytest.raises(LeaseTooLarge) as e:
        txn.ping(10**9)
    assert e.value.code == "LeaseTooLarge"

    txn.commit()
    assert txn.check_status() == TxnState.COMMITTED
    reads = read_all(factory)
    counts = Counter(r.event for r in reads)
    assert all(counts[e] == 1 for e in events) and len(reads) == 12 + len(events)
    assert_contiguous(reads, set(events))
    # per key: the transaction's events in the order written, after the plain ones written before
    for k in range(6):
        keyed = [r.event for r in reads if r.event.endswith(f"-{k}") or (
            r.event.startswith("txn-") and int(r.event[4:]) % 6 == k)]
        txn_part = [e for e in keyed if e.startswith("txn-")]
        assert txn_part == [e for i, e in enumerate(events) if i % 6 == k]
        assert keyed.index(f"plain-before-{k}") < keyed.index(txn_part[0])

    # a committed transaction accepts nothing more
    with pytest.raises(TxnFailed):
        txn.write_event("late", routing_key="k0")
    with pytest.raises(TxnFailed):
        txn.commit()
    with pytest.raises(TxnFailed):
        txn.abort()
    with pytest.raises(TxnFailed):
        txn.ping(10_000)

    # abort: never visible, and closed afterwards
    aborted = writer.begin()
    for i in range(10):
        aborted.write_event(f"aborted-{i}", routing_key=f"k{i}")
    aborted.abort()
    assert aborted.check_status() == TxnState.ABORTED
    for operation in (lambda: aborted.write_event("late"), aborted.commit, aborted.abort, lambda: aborted.ping(10_000)):
        with pytest.raises(TxnFailed):
            operation()
    assert not [r for r in read_all(factory) if r.event.startswith("aborted-")]
    plain.close()


def test_server_side_outcomes_over_the_wire(factory):
    """Another writer object (knowing only the id) sees the outcome the server keeps."""
    writer = factory.create_transactional_writer(STREAM, SER, FAST)
    other = factory.create_transactional_writer(STREAM, SER, FAST)
    committed, aborted = writer.begin(), writer.begin()
    committed.write_event("c", routing_key="a")
    committed.commit()
    aborted.abort()

    late = other.get_txn(committed.txn_id)
    assert late.check_status() == TxnState.COMMITTED
    with pytest.raises(TxnFailed):
        late.write_event("late")
    with pytest.raises(TxnFailed):
        late.abort()
    assert other.get_txn(aborted.txn_id).check_status() == TxnState.ABORTED
    with pytest.raises(TxnNotFound):
        other.get_txn("0" * 32)

    # the raw API: outcomes never change, repeating answers the same
    transport = factory.connection.controller.transport
    base = f"/v1/scopes/{committed.info.scope}/streams/{STREAM}/transactions"
    assert transport.json("POST", f"{base}/{committed.txn_id}/commit", json_body={})["state"] == "COMMITTED"
    with pytest.raises(TxnFailed) as e:
        transport.json("POST", f"{base}/{committed.txn_id}/abort", json_body={})
    assert e.value.details.get("status") == "COMMITTED"
    with pytest.raises(TxnFailed) as e:
        transport.json("POST", f"{base}/{aborted.txn_id}/commit", json_body={})
    assert e.value.details.get("status") == "ABORTED"
    with pytest.raises(TxnFailed) as e:
        transport.json("POST", f"{base}/{committed.txn_id}/ping", json_body={"lease_ms": 10_000})
    assert e.value.details.get("status") == "COMMITTED"
    assert [r.event for r in read_all(factory)] == ["c"]


def test_get_txn_resumes_a_transaction_begun_by_another_writer(factory, url, unique):
    first = factory.create_transactional_writer(STREAM, SER, FAST)
    txn = first.begin(lease_ms=30_000)
    for i in range(9):
        txn.write_event(f"first-{i}", routing_key=f"k{i % 3}")
    txn.flush()

    with rillet.EventStreamClientFactory(unique, url) as elsewhere:  # another connection, another writer
        second = elsewhere.create_transactional_writer(STREAM, SER, FAST)
        resumed = second.get_txn(txn.txn_id)
        assert resumed.check_status() == TxnState.OPEN
        assert [s.segment_id for s in resumed.info.segments] == [s.segment_id for s in txn.info.segments]
        for i in range(9):
            resumed.write_event(f"second-{i}", routing_key=f"k{i % 3}")
        resumed.commit()
        assert resumed.check_status() == TxnState.COMMITTED

    reads = read_all(factory)
    names = [r.event for r in reads]
    assert sorted(names) == sorted([f"first-{i}" for i in range(9)] + [f"second-{i}" for i in range(9)])
    assert_contiguous(reads, set(names))
    for k in range(3):  # per key: the first writer's events (flushed earlier), then the second's
        keyed = [n for n in names if int(n.split("-")[1]) % 3 == k]
        assert keyed == [f"first-{i}" for i in range(9) if i % 3 == k] + [f"second-{i}" for i in range(9) if i % 3 == k]

    # the first writer's object does not know: its late event fails, so its commit fails too (saying
    # the transaction is COMMITTED), so does its abort, and the late event never reaches the stream
    late = txn.write_event("late", routing_key="k0")
    with pytest.raises(TxnFailed):
        late.result(timeout=60)
    with pytest.raises(TxnFailed) as e:
        txn.commit()
    assert e.value.details["status"] == "COMMITTED"
    assert txn.check_status() == TxnState.COMMITTED
    with pytest.raises(TxnFailed):
        txn.abort()
    assert sorted(r.event for r in read_all(factory)) == sorted(names)


# -- exactly-once production across producer deaths ---------------------------------------------------


class Died(Exception):
    """The producer process died here; nothing after this point of its run happens."""


class Producer:
    """One incarnation of a producer; ``store`` is its durable checkpoint store (it survives deaths)."""

    def __init__(self, factory, store: dict, inputs: int, batch: int, deaths: list[str], rng: random.Random,
                 log: list) -> None:
        self.writer = factory.create_transactional_writer(STREAM, SER, FAST)
        self.store, self.inputs, self.batch = store, inputs, batch
        self.scripted, self.rng, self.log = deaths, rng, log
        self.open: list = []  # transaction objects a death abandons (closed by the test at the end)

    def maybe_die(self, point: str) -> None:
        if (self.scripted and self.scripted[0] == point) or (not self.scripted and self.rng.random() < 0.2):
            if self.scripted:
                self.scripted.pop(0)
            self.log.append(("died", point))
            raise Died(point)

    def recover(self) -> int:
        done = self.store.get("done", 0)
        pending = self.store.get("pending")
        if pending:
            txn = self.writer.get_txn(pending["txn"])
            state = txn.check_status()
            for _ in range(100):
                if state != TxnState.COMMITTING:
                    break
                time.sleep(0.1)
                state = txn.check_status()
            if state == TxnState.COMMITTED:
                done = pending["upto"]
                self.log.append(("recovered committed", pending["upto"]))
            else:
                if state == TxnState.OPEN:
                    txn.abort()
                self.log.append(("recovered by redoing", pending["upto"]))
            self.store["done"] = done
            del self.store["pending"]
        return done

    def run(self) -> None:
        done = self.recover()
        while done < self.inputs:
            upto = min(self.inputs, done + self.batch)
            txn = self.writer.begin(lease_ms=60_000)
            self.open.append(txn)
            for i in range(done, upto):
                if i == (done + upto) // 2:
                    self.maybe_die("while writing")
                txn.write_event(str(i), routing_key=f"k{i % 4}")
            txn.flush()
            self.store["pending"] = {"txn": txn.txn_id, "upto": upto}
            self.maybe_die("before commit")
            txn.commit()
            self.maybe_die("after commit")
            self.store["done"] = upto
            del self.store["pending"]
            self.log.append(("committed", upto))
            done = upto


def check_exactly_once(inputs: int, reads: list[str], key_of) -> list[str]:
    """The history checker: every input read exactly once, nothing else read, per key in input order."""
    problems = []
    counts = Counter(reads)
    missing = [i for i in range(inputs) if counts[str(i)] == 0]
    duplicated = sorted((int(e), n) for e, n in counts.items() if n > 1)
    unexpected = [e for e in counts if not e.isdigit() or int(e) >= inputs]
    if missing:
        problems.append(f"lost: {missing}")
    if duplicated:
        problems.append(f"duplicated (input, times): {duplicated}")
    if unexpected:
        problems.append(f"never produced: {unexpected}")
    per_key = defaultdict(list)
    for e in reads:
        if e.isdigit():
            per_key[key_of(int(e))].append(int(e))
    for key, seen in per_key.items():
        if seen != sorted(seen):
            problems.append(f"key {key} out of order: {seen}")
    return problems


def test_check_exactly_once_finds_loss_duplicates_and_disorder():
    assert check_exactly_once(4, ["0", "1", "2", "3"], lambda i: i % 2) == []
    assert check_exactly_once(4, ["0", "1", "3"], lambda i: i % 2) == ["lost: [2]"]
    assert check_exactly_once(3, ["0", "1", "1", "2"], lambda i: 0) == ["duplicated (input, times): [(1, 2)]"]
    assert check_exactly_once(3, ["0", "2", "1"], lambda i: 0) == ["key 0 out of order: [0, 2, 1]"]
    assert check_exactly_once(2, ["0", "1", "7"], lambda i: i) == ["never produced: ['7']"]


def test_producer_dying_anywhere_writes_every_input_exactly_once(factory):
    inputs, batch = 48, 6
    store: dict = {}
    # the first incarnations die at each kind of point once; later ones die at random (seeded)
    deaths = ["while writing", "before commit", "after commit", "before commit", "after commit"]
    rng, log, producers = random.Random(20240605), [], []
    for _ in range(60):
        if store.get("done", 0) >= inputs and "pending" not in store:
            break
        producer = Producer(factory, store, inputs, batch, deaths, rng, log)
        producers.append(producer)
        try:
            producer.run()
        except Died:
            continue
    assert store == {"done": inputs}, (store, log)
    died = Counter(point for what, point in log if what == "died")
    assert set(died) == {"while writing", "before commit", "after commit"}, log
    assert {"recovered committed", "recovered by redoing"} <= {what for what, _ in log}, log
    try:
        reads = [r.event for r in read_all(factory)]
        problems = check_exactly_once(inputs, reads, key_of=lambda i: i % 4)
        assert not problems, f"{problems}\nlog: {log}"
    finally:
        for producer in producers:  # the abandoned transaction objects of dead producers
            for txn in producer.open:
                txn._writer.close()
