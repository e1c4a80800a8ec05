"""The segment store on moto: append/read, de-duplication, concurrency, crashes, truncation, seal, merge.

Each test uses fresh segments (``unique``) in the session's tables, with a small ``inline_max`` so
that blocks take both the inline path and the S3-object path.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from botocore.exceptions import ClientError
from dataplane_model import (
    SegmentModel,
    SimulatedCrash,
    check_reads,
    event_block,
    index_entries,
    inject_crash,
    object_keys,
    parse_events,
    payload,
    read_all,
)
from pynamodb.exceptions import UpdateError

from dataplane import append_path, models
from dataplane.models import META_KEY, IndexEntry, SegmentMeta, entry_key
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.errors import (
    InvalidArgument,
    OffsetMismatch,
    SegmentNotFound,
    SegmentSealed,
    TooLarge,
    Truncated,
)
from rillet.framing import MAX_BLOCK_SIZE

INLINE_MAX = 64
SETTINGS = StoreSettings(inline_max=INLINE_MAX, chunk_target=400, tier_min_age_ms=0)


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)  # another test's stack may have pointed the models elsewhere
    return SegmentStore(deployment, SETTINGS)


@pytest.fixture
def seg(store, unique) -> str:
    name = f"{unique}/s/0"
    assert store.create(name) is True
    return name


def _sample_offsets(rng: random.Random, boundaries: list[int], length: int, n: int = 8) -> list[int]:
    """Entry boundaries, the byte after each (inside an entry, or a 1-byte entry's end), and random ones."""
    offsets = {0, length}
    for b in boundaries:
        offsets.update(x for x in (b, b + 1) if 0 <= x <= length)
    offsets.update(rng.randrange(0, length + 1) for _ in range(n))
    return sorted(offsets)


# -- 1. append / read round trip ------------------------------------------------------------------


def test_round_trip_inline_objects_and_chunks(store, seg):
    rng = random.Random(1)
    model = SegmentModel()
    sizes = [10, INLINE_MAX, INLINE_MAX + 1, 300, 1, 5000, 20, 33, 64, 2000, 7, 8]
    boundaries = []
    for i, size in enumerate(sizes):
        block = payload(f"b{i}", size)
        result = store.append(seg, "w1", i, 1, block)
        assert result.offset == model.length and not result.duplicate
        model.append(block)
        assert result.length == model.length
        boundaries.append(result.offset)
    assert store.create(seg) is False  # creation is idempotent

    entries = index_entries(seg)
    assert [e.offset for e in entries] == boundaries
    for entry, size in zip(entries, sizes):
        if size <= INLINE_MAX:
            assert entry.data is not None and entry.object_key is None
        else:
            assert entry.data is None and entry.object_key is not None
    assert len(object_keys(store, seg)) == sum(1 for s in sizes if s > INLINE_MAX)
    assert read_all(store, seg) == bytes(model.data)
    assert read_all(store, seg, chunk=97) == bytes(model.data)
    check_reads(store, seg, model, _sample_offsets(rng, boundaries, model.length))

    # Tier the inline runs into chunks, then add more inline and object blocks: a read now spans
    # chunks, S3-object entries and inline entries.
    assert store.tier(seg) > 0
    for i, size in enumerate([5, 200, 9, 12], start=len(sizes)):
        block = payload(f"b{i}", size)
        boundaries.append(store.append(seg, "w1", i, 1, block).offset)
        model.append(block)
    kinds = {("chunk" if e.object_key and "/c/" in e.object_key else "object" if e.object_key else "inline")
             for e in index_entries(seg)}
    assert kinds == {"chunk", "object", "inline"}
    assert store.read(seg, 0).data == bytes(model.data)
    check_reads(store, seg, model, _sample_offsets(rng, boundaries, model.length))


def test_read_arguments_and_unknown_segment(store, seg, unique):
    store.append(seg, "w1", 0, 1, b"abc")
    assert store.read(seg, 3).data == b""  # at the tail: empty, not an error
    with pytest.raises(InvalidArgument):
        store.read(seg, 4)
    with pytest.raises(InvalidArgument):
        store.read(seg, 0, 0)
    with pytest.raises(InvalidArgument):
        store.read(seg, -1)
    with pytest.raises(SegmentNotFound):
        store.read(f"{unique}/s/404", 0)
    with pytest.raises(SegmentNotFound):
        store.append(f"{unique}/s/404", "w1", 0, 1, b"x")
    with pytest.raises(SegmentNotFound):
        store.append(f"{unique}/s/404", "w1", 0, 1, b"x" * (INLINE_MAX + 1))
    with pytest.raises(InvalidArgument):
        store.append(seg, "w1", 1, 1, b"")
    with pytest.raises(InvalidArgument):
        store.append(seg, "w1", 1, 0, b"x")
    with pytest.raises(InvalidArgument):
        store.append(seg, "bad writer!", 0, 1, b"x")
    with pytest.raises(TooLarge):
        store.append(seg, "w1", 1, 1, b"x" * (MAX_BLOCK_SIZE + 1))
    with pytest.raises(InvalidArgument):
        store.create("bad name with spaces")
    assert store.info(seg).length == 3


# -- 2. de-duplication ----------------------------------------------------------------------------


def test_dedup_resend_older_gap_and_interleaved_writers(store, seg):
    a0 = b"a0" * 5
    r = store.append(seg, "wa", 0, 2, a0)  # events 0-1
    assert (r.offset, r.length, r.duplicate) == (0, 10, False)
    again = store.append(seg, "wa", 0, 2, a0)
    assert (again.offset, again.length, again.duplicate) == (0, 10, True)

    big = payload("a-big", 500)  # an S3-object block
    r2 = store.append(seg, "wa", 2, 3, big)  # events 2-4
    assert (r2.offset, r2.duplicate) == (10, False)
    objects = object_keys(store, seg)
    again2 = store.append(seg, "wa", 2, 3, big)
    assert (again2.offset, again2.length, again2.duplicate) == (10, 510, True)
    assert object_keys(store, seg) == objects

    older = store.append(seg, "wa", 0, 2, a0)  # an older block than the last: found in the index
    assert (older.offset, older.length, older.duplicate) == (0, 510, True)

    with pytest.raises(InvalidArgument) as gap:
        store.append(seg, "wa", 6, 1, b"gap")
    assert gap.value.details.get("expected_event_number") == 5
    with pytest.raises(InvalidArgument):  # overlaps the last block: neither a duplicate nor a continuation
        store.append(seg, "wa", 4, 2, b"overlap")

    # Two writers interleaved keep their own numbering; a writer's first block may start anywhere.
    rb0 = store.append(seg, "wb", 100, 1, b"b100")
    ra5 = store.append(seg, "wa", 5, 1, b"a5")
    rb1 = store.append(seg, "wb", 101, 2, b"b101-102")
    assert (rb0.offset, ra5.offset, rb1.offset) == (510, 514, 516)
    assert store.append(seg, "wb", 100, 1, b"b100").offset == 510  # older than wb's last: found
    assert store.append(seg, "wa", 5, 1, b"a5").offset == 514
    assert store.append(seg, "wb", 102, 1, b"x").offset is None  # inside wb's last block: older
    with pytest.raises(InvalidArgument):
        store.append(seg, "wb", 104, 1, b"x")
    assert store.read(seg, 0).data == a0 + big + b"b100" + b"a5" + b"b101-102"
    assert store.info(seg).length == 524


@pytest.mark.parametrize("size", [20, 500], ids=["inline", "object"])
def test_acknowledged_bytes_never_change_on_a_resend_with_other_bytes(store, seg, size):
    """A writer that resends an acknowledged event number with different bytes (a client bug, or a
    hostile one) gets a duplicate ack, and the bytes at the offset stay what was acknowledged."""
    original = payload("original", size)
    assert store.append(seg, "wa", 0, 1, original).offset == 0
    impostor = payload("impostor", size)
    result = store.append(seg, "wa", 0, 1, impostor)
    assert result.duplicate and result.offset == 0 and result.length == size
    assert store.read(seg, 0).data == original


def test_expected_offset_is_a_conditional_append(store, seg):
    assert store.append(seg, "w", 0, 1, b"abc", expected_offset=0).length == 3
    with pytest.raises(OffsetMismatch) as e:
        store.append(seg, "w", 1, 1, b"def", expected_offset=0)
    assert e.value.details.get("length") == 3
    assert store.append(seg, "w", 1, 1, b"def", expected_offset=3).length == 6
    assert store.read(seg, 0).data == b"abcdef"


# -- 3. concurrency -------------------------------------------------------------------------------


def test_concurrent_writers_on_one_segment(store, seg):
    writers, blocks = 8, 12
    rng = random.Random(3)
    plan = {w: [rng.choice([16, 40, INLINE_MAX, 90, 300]) for _ in range(blocks)] for w in range(writers)}
    results: dict[int, list[tuple[int, bytes]]] = {w: [] for w in range(writers)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(writers)

    def run(w: int) -> None:
        try:
            barrier.wait()
            for seq, size in enumerate(plan[w]):
                block = event_block(f"w{w}:{seq}", size)
                r = store.append(seg, f"writer{w}", seq, 1, block)
                # Appended by this request, even when another writer helped its claim through.
                assert not r.duplicate and r.offset is not None
                results[w].append((r.offset, block))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    data = read_all(store, seg)
    assert len(data) == sum(sum(s) for s in plan.values()) == store.info(seg).length

    events = parse_events(data)
    tags = [p.split(b"|", 1)[0].decode() for _, p in events]
    assert len(tags) == len(set(tags)) == writers * blocks  # nothing lost, nothing duplicated
    position = {tag: pos for (pos, _), tag in zip(events, tags)}
    offsets = [off for w in range(writers) for off, _ in results[w]]
    assert len(set(offsets)) == len(offsets)
    for w in range(writers):
        mine = [position[f"w{w}:{seq}"] for seq in range(blocks)]
        assert mine == sorted(mine)  # a writer's blocks are in its event-number order
        for seq, (offset, block) in enumerate(results[w]):
            assert offset == position[f"w{w}:{seq}"]
            assert data[offset:offset + len(block)] == block


def _append_paused_after_claim(store: SegmentStore, monkeypatch, seg: str, writer: str, first: int,
                               count: int, block: bytes):
    """Start an append in a thread that stops between its claim and its advance.

    Returns ``resume()``, which lets it finish and returns its AppendResult.
    """
    claimed, go = threading.Event(), threading.Event()
    original_advance = SegmentStore._advance
    slow_thread: list[int] = []
    out: dict[str, object] = {}

    def advance(self, meta, tail, claimed_block, **kwargs):
        if threading.get_ident() in slow_thread and not go.is_set():
            claimed.set()
            assert go.wait(30)
        return original_advance(self, meta, tail, claimed_block, **kwargs)

    monkeypatch.setattr(SegmentStore, "_advance", advance)

    def run() -> None:
        slow_thread.append(threading.get_ident())
        out["result"] = store.append(seg, writer, first, count, block)

    t = threading.Thread(target=run)
    t.start()
    assert claimed.wait(30)

    def resume():
        go.set()
        t.join(30)
        return out["result"]

    return resume


def test_retry_while_the_original_is_in_flight_deterministic(store, seg, monkeypatch):
    """The original has claimed the tail but not advanced when its retry arrives: one append, one
    offset, and only the request whose claim it was reports it as appended."""
    store.append(seg, "other", 0, 1, b"x" * 5)
    block = payload("in-flight", 200)
    resume = _append_paused_after_claim(store, monkeypatch, seg, "wr", 7, 3, block)
    retry = store.append(seg, "wr", 7, 3, block)  # completes the claim the original made
    first = resume()
    assert retry.offset == first.offset == 5
    assert (first.duplicate, retry.duplicate) == (False, True)
    assert store.read(seg, 0).data == b"x" * 5 + block
    assert store.info(seg).length == 205


def test_a_claim_helped_through_by_another_writer_counts_as_appended(store, seg, monkeypatch):
    """Writer A has claimed the tail when writer B appends: B completes A's block first, then its own.
    A is acknowledged at its offset as appended (not as a duplicate: it was appended once, by A)."""
    block = payload("slow", 100)
    resume = _append_paused_after_claim(store, monkeypatch, seg, "wa", 0, 1, block)
    other = store.append(seg, "wb", 0, 1, b"fast")
    slow = resume()
    assert (slow.offset, slow.duplicate) == (0, False)
    assert (other.offset, other.duplicate) == (100, False)
    again = store.append(seg, "wa", 0, 1, block)
    assert (again.offset, again.duplicate) == (0, True)
    assert store.read(seg, 0).data == block + b"fast"


def test_a_writer_that_meets_a_live_claim_pauses_for_its_owner_instead_of_racing_it(store, seg, monkeypatch):
    """Writer B finds A's claim at the tail and pauses (StoreSettings.contention_pause_ms); A commits its
    own block meanwhile, so B never writes for A's claim: one commit per block, no racing writes."""
    block = payload("slow", 100)
    resume = _append_paused_after_claim(store, monkeypatch, seg, "wa", 0, 1, block)
    advanced_by_b: list[str] = []
    advance = SegmentStore._advance  # A's pause-after-claim wrapper

    def counting_advance(self, meta, tail, claimed_block, **kwargs):
        advanced_by_b.append(claimed_block.writer)
        return advance(self, meta, tail, claimed_block, **kwargs)

    pauses: list[float] = []

    class _Clock:  # append_path's ``time``: B's first pause lets A finish its append
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            pauses.append(seconds)
            if len(pauses) == 1:
                finished.append(resume())

    finished: list = []
    monkeypatch.setattr(append_path, "time", _Clock)
    monkeypatch.setattr(SegmentStore, "_advance", counting_advance)
    other = store.append(seg, "wb", 0, 1, b"fast")
    assert (finished[0].offset, finished[0].duplicate) == (0, False)
    assert (other.offset, other.duplicate) == (100, False)
    assert len(pauses) == 1 and 0 <= pauses[0] <= StoreSettings().contention_pause_max_ms / 1000
    assert advanced_by_b == ["wb"]  # B only ever committed its own block
    assert store.read(seg, 0).data == block + b"fast"


def _lose_the_tail_twice(store: SegmentStore, monkeypatch, seg: str, on_first_pause=lambda: None) -> tuple:
    """Append "wb"'s block while it loses the tail to A's claim, then to C's: each of its pauses lets the
    claim it lost to commit (``on_first_pause`` runs first in the first). Returns B's AppendResult, its
    pauses and A's and C's AppendResults."""
    resume_a = _append_paused_after_claim(store, monkeypatch, seg, "wa", 0, 1, b"a" * 10)
    resumes, pauses, finished = [], [], []

    class _Clock:  # append_path's ``time``
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            pauses.append(seconds)
            if len(pauses) == 1:
                on_first_pause()
                finished.append(resume_a())
                resumes.append(_append_paused_after_claim(store, monkeypatch, seg, "wc", 0, 1, b"c" * 20))
            elif len(pauses) == 2:
                finished.append(resumes[0]())

    monkeypatch.setattr(append_path, "time", _Clock)
    return store.append(seg, "wb", 0, 1, b"b" * 5), pauses, finished


def test_an_appender_that_loses_the_tail_twice_takes_a_ticket_and_marks_it_served(store, seg, monkeypatch):
    """B loses the tail to A, then to C: only the second time it takes a ticket (one atomic add on the
    head record), pauses for the holders the queue says are ahead of it, and its commit marks its
    ticket served. The queue here says 3 ahead: tickets up to 5 were taken, 2 was the last served."""
    store.append(seg, "w0", 0, 1, b"0")
    head = SegmentMeta.get(seg, META_KEY, consistent_read=True)
    head.update(actions=[SegmentMeta.tickets.set(5), SegmentMeta.served.set(2)])
    tickets_at_first_pause = []
    b, pauses, finished = _lose_the_tail_twice(store, monkeypatch, seg, lambda: tickets_at_first_pause.append(
        SegmentMeta.get(seg, META_KEY, consistent_read=True).tickets))
    assert [(r.offset, r.duplicate) for r in finished] == [(1, False), (11, False)]
    assert (b.offset, b.duplicate) == (31, False)
    assert tickets_at_first_pause == [5]  # no ticket on the first loss
    # ticket 6, served 2: three holders ahead, three round trips each of at least contention_pause_ms
    assert len(pauses) == 2 and pauses[1] >= 0.75 * 3 * 3 * StoreSettings().contention_pause_ms / 1000
    head = SegmentMeta.get(seg, META_KEY, consistent_read=True)
    assert (head.tickets, head.served) == (6, 6)
    assert store.read(seg, 0).data == b"0" + b"a" * 10 + b"c" * 20 + b"b" * 5


def test_an_append_whose_ticket_cannot_be_taken_goes_on_without_one(store, seg, monkeypatch):
    """A ticket only sets pauses: when its add fails (here throttled; a merge's transaction on the head
    record under way fails it too), the append still commits, and no ticket is recorded."""
    adds = []
    update = SegmentMeta.update

    def throttled_add(self, actions, *args, **kwargs):
        if any(str(action).startswith("qt ") for action in actions):
            adds.append(actions)
            raise UpdateError("Failed to update item", ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateItem"))
        return update(self, actions, *args, **kwargs)

    monkeypatch.setattr(SegmentMeta, "update", throttled_add)
    b, _, _ = _lose_the_tail_twice(store, monkeypatch, seg)
    assert (b.offset, b.duplicate) == (30, False)
    assert len(adds) == 1
    head = SegmentMeta.get(seg, META_KEY, consistent_read=True)
    assert (head.tickets, head.served) == (None, None)


def test_a_ticket_holder_pauses_about_the_commits_of_those_before_it(store):
    """Three round trips (a head read, a claim, an advance) per appender ahead, or contention_pause_max_ms
    if less, within a quarter either way (holders far back do not all wake at once); without anyone
    ahead, a random part of the claim's round trip."""
    longest = StoreSettings().contention_pause_max_ms / 1000
    far_back = {store._pause_s(2, 10.0, 10_000) for _ in range(20)}
    for _ in range(20):
        assert 0.75 * 5 * 3 * 0.010 <= store._pause_s(2, 10.0, 5) <= 1.25 * 5 * 3 * 0.010
        assert 0 <= store._pause_s(2, 10.0, 0) <= 0.010
        assert 0 <= store._pause_s(1, 10.0, None) <= 0.005
    assert all(0.75 * longest <= pause <= 1.25 * longest for pause in far_back) and len(far_back) > 1


def _send_twice_at_once(store: SegmentStore, seg: str, writer: str, first: int, block: bytes) -> list:
    barrier = threading.Barrier(2)
    acks = []

    def send() -> None:
        barrier.wait()
        acks.append(store.append(seg, writer, first, 1, block))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return acks


def test_retry_while_the_original_is_in_flight_stress(store, seg):
    rounds = 12
    for n in range(rounds):
        acks = _send_twice_at_once(store, seg, "wd", n, event_block(f"dup{n}", 30 if n % 2 else 200))
        assert len(acks) == 2 and acks[0].offset == acks[1].offset is not None
        assert sorted(a.duplicate for a in acks) == [False, True]
    tags = [p.split(b"|", 1)[0] for _, p in parse_events(read_all(store, seg))]
    assert tags == [f"dup{n}".encode() for n in range(rounds)]


# -- 4. crash during an append ----------------------------------------------------------------------


class _Crash(SimulatedCrash):
    pass


def _crash_next_advance(monkeypatch) -> None:
    original = SegmentStore._advance
    state = {"armed": True}

    def advance(self, meta, tail, block, **kwargs):
        if state["armed"]:
            state["armed"] = False
            raise _Crash("the appender died after its claim")
        return original(self, meta, tail, block, **kwargs)

    monkeypatch.setattr(SegmentStore, "_advance", advance)


@pytest.mark.parametrize("size", [20, 300], ids=["inline", "object"])
def test_crash_after_claim_then_same_writer_retries(store, seg, monkeypatch, size):
    store.append(seg, "w0", 0, 1, b"head")
    block = payload("crashy", size)
    _crash_next_advance(monkeypatch)
    with pytest.raises(_Crash):
        store.append(seg, "wa", 0, 1, block)
    assert store.info(seg).length == 4  # not committed
    assert IndexEntry.get(seg, entry_key(4), consistent_read=True).writer == "wa"  # but claimed
    assert store.read(seg, 0).data == b"head"  # a claim is not data

    retry = store.append(seg, "wa", 0, 1, block)
    assert (retry.offset, retry.length) == (4, 4 + size)
    assert retry.duplicate  # the crashed request made the claim; the retry only completed it
    again = store.append(seg, "wa", 0, 1, block)
    assert again.duplicate and again.offset == 4
    assert store.read(seg, 0).data == b"head" + block


@pytest.mark.parametrize("size", [20, 300], ids=["inline", "object"])
def test_crash_after_claim_another_writer_helps_it_through(store, seg, monkeypatch, size):
    block = payload("crashy", size)
    _crash_next_advance(monkeypatch)
    with pytest.raises(_Crash):
        store.append(seg, "wa", 0, 1, block)
    assert store.info(seg).length == 0

    other = store.append(seg, "wb", 0, 1, b"next")  # not blocked: completes wa's claim first
    assert other.offset == size and not other.duplicate
    retry = store.append(seg, "wa", 0, 1, block)
    assert retry.duplicate and retry.offset == 0
    assert store.read(seg, 0).data == block + b"next"
    assert store.append(seg, "wa", 1, 1, b"wa1").offset == size + 4  # and wa carries on


@pytest.mark.parametrize("size", [20, 300], ids=["inline", "object"])
def test_crash_before_each_mutating_request_of_an_append(store, unique, size):
    """Kill the appender before its k-th write request for k = 1, 2, ...: another writer is never
    blocked, and the crashed block ends up in the segment exactly once after its writer retries."""
    block = event_block("victim", size)
    k = 0
    while True:
        k += 1
        assert k < 10, "the append never completed"
        seg = f"{unique}/k{k}/0"
        store.create(seg)
        store.append(seg, "w0", 0, 1, event_block("first", 12))
        with inject_crash(k) as injector:
            try:
                done = store.append(seg, "wa", 0, 1, block)
            except SimulatedCrash:
                done = None
        if done is not None:
            assert done.offset == 12 and not done.duplicate
            break
        tail = 12
        other = store.append(seg, "wb", 0, 1, event_block("other", 15))
        retry = store.append(seg, "wa", 0, 1, block)
        claimed = injector.crashed_before == "UpdateItem"  # the claim was made, the advance was not
        if claimed:
            assert other.offset == tail + size and retry.duplicate and retry.offset == tail
        else:
            assert other.offset == tail and not retry.duplicate and retry.offset == tail + 15
        tags = [p.split(b"|", 1)[0] for _, p in parse_events(read_all(store, seg))]
        assert sorted(tags) == sorted([b"first", b"other", b"victim"])
    # inline: claim, advance; object: S3 put, claim, advance
    assert k == (3 if size == 20 else 4)


# -- 6. truncation --------------------------------------------------------------------------------


def test_truncation(store, seg):
    model = SegmentModel()
    offsets = []
    for i, size in enumerate([10, 300, 20, 30, 400, 15, 25]):
        block = payload(f"t{i}", size)
        offsets.append(store.append(seg, "w", i, 1, block).offset)
        model.append(block)
    store.tier(seg)  # the first inline runs become chunks (objects that truncation must delete too)
    for i, size in enumerate([12, 500, 13], start=7):
        block = payload(f"t{i}", size)
        offsets.append(store.append(seg, "w", i, 1, block).offset)
        model.append(block)
    before_keys = object_keys(store, seg)
    before_entries = index_entries(seg)

    cut = offsets[5]
    store.truncate(seg, cut)
    model.truncate(cut)
    with pytest.raises(Truncated) as e:
        store.read(seg, 0)
    assert e.value.details.get("start_offset") == cut
    with pytest.raises(Truncated):
        store.read(seg, cut - 1, 1)
    assert store.read(seg, cut).data == bytes(model.data[cut:])
    check_reads(store, seg, model, [0, offsets[1] + 3, cut - 1, cut, cut + 1, offsets[8] + 7, model.length])
    assert store.info(seg).start_offset == cut

    # Entries and objects wholly below the start are gone; those at or above it stay.
    after_entries = index_entries(seg)
    assert all(e.end > cut for e in after_entries)
    assert [e.offset for e in after_entries] == [e.offset for e in before_entries if e.end > cut]
    kept = {e.object_key for e in after_entries if e.object_key}
    dropped = {e.object_key for e in before_entries if e.object_key and e.end <= cut}
    assert dropped and kept
    remaining = object_keys(store, seg)
    assert not (remaining & dropped)
    assert kept <= remaining
    assert remaining <= before_keys

    store.truncate(seg, offsets[2])  # backwards: a no-op
    assert store.info(seg).start_offset == cut
    with pytest.raises(Truncated):
        store.read(seg, offsets[2])
    with pytest.raises(InvalidArgument):
        store.truncate(seg, model.length + 1)
    assert store.info(seg).start_offset == cut

    # Truncating inside an entry keeps that entry; the tail itself is a valid start.
    inside = offsets[8] + 100
    store.truncate(seg, inside)
    model.truncate(inside)
    check_reads(store, seg, model, [offsets[8], inside - 1, inside, inside + 1, offsets[9], model.length])
    store.truncate(seg, model.length)
    model.truncate(model.length)
    assert store.read(seg, model.length).data == b""
    with pytest.raises(Truncated):
        store.read(seg, model.length - 1)
    assert store.append(seg, "w", 10, 1, b"after").offset == model.length  # appends carry on


def test_read_racing_a_truncation_raises_truncated(store, seg, deployment):
    """A read whose head record predates a truncation that then releases its range: Truncated, not a 500."""
    offsets = [store.append(seg, "w", i, 1, payload(f"r{i}", 20 + i)).offset for i in range(8)]
    truncator = SegmentStore(deployment, SETTINGS)
    real_meta = SegmentStore._meta
    fired = []

    def meta_then_truncate(segment):
        meta = real_meta(store, segment)
        if not fired:
            fired.append(True)
            truncator.truncate(segment, offsets[5])
        return meta

    store._meta = meta_then_truncate  # this store instance only
    with pytest.raises(Truncated):
        store.read(seg, 0)
    assert fired


# -- 7. sealed segments and long polls ------------------------------------------------------------


def test_seal(store, seg, unique):
    store.append(seg, "w", 0, 1, b"abc")
    store.append(seg, "w", 1, 1, payload("big", 100))
    assert store.seal(seg) == 103
    assert store.seal(seg) == 103  # idempotent
    with pytest.raises(SegmentSealed) as e:
        store.append(seg, "w", 2, 1, b"more")
    assert e.value.details.get("length") == 103
    with pytest.raises(SegmentSealed):
        store.append(seg, "other", 0, 1, payload("big2", 100))
    dup = store.append(seg, "w", 1, 1, payload("big", 100))  # a retry of an acknowledged block is still acked
    assert dup.duplicate and dup.offset == 3
    info = store.info(seg)
    assert info.sealed and info.length == 103
    end = store.read(seg, 103)
    assert end.data == b"" and end.end_of_segment and end.sealed
    last = store.read(seg, 100)
    assert last.data == payload("big", 100)[-3:] and last.end_of_segment
    assert not store.read(seg, 0, 10).end_of_segment
    with pytest.raises(SegmentNotFound):
        store.seal(f"{unique}/s/404")


def test_delete_removes_everything_and_is_idempotent(store, unique):
    seg, source = f"{unique}/s/0", f"{unique}/s/0.txn"
    store.create(seg)
    store.create(source)
    store.append(seg, "w", 0, 1, b"small")
    store.append(seg, "w", 1, 1, payload("large", 300))
    store.append(source, "ws", 0, 1, payload("txn", 200))
    store.merge(seg, source)
    assert object_keys(store, seg) and object_keys(store, source)
    store.delete(seg)
    for name in (seg, source):
        with pytest.raises(SegmentNotFound):
            store.info(name)
        with pytest.raises(SegmentNotFound):
            store.read(name, 0)
        assert not index_entries(name) and not object_keys(store, name)
    store.delete(seg)  # again: nothing left, no error
    with pytest.raises(SegmentNotFound):
        store.append(seg, "w", 2, 1, b"late")
    assert not index_entries(seg)


# -- 8. merge -------------------------------------------------------------------------------------


def test_merge_is_zero_copy_atomic_and_idempotent(store, unique):
    target, source = f"{unique}/s/1", f"{unique}/s/1.txn"
    store.create(target)
    store.create(source)
    model = SegmentModel()
    for i, size in enumerate([20, 200, 30]):
        block = payload(f"t{i}", size)
        store.append(target, "wt", i, 1, block)
        model.append(block)
    src = b""
    for i, size in enumerate([25, 300, 10, 15]):
        block = payload(f"s{i}", size)
        store.append(source, "ws", i, 1, block)
        src += block
    objects_before = object_keys(store, target) | object_keys(store, source)
    entries_before = len(index_entries(target))

    offset = store.merge(target, source)
    assert offset == model.length
    model.append(src)
    assert store.merge(target, source) == offset  # idempotent
    assert store.info(target).length == model.length  # no double bytes
    assert store.info(source).sealed
    with pytest.raises(SegmentSealed):
        store.append(source, "ws", 4, 1, b"late")
    assert object_keys(store, target) | object_keys(store, source) == objects_before  # nothing copied
    entries = index_entries(target)
    assert len(entries) == entries_before + 1
    assert entries[-1].source == source and entries[-1].offset == offset and entries[-1].size == len(src)
    assert entries[-1].data is None and entries[-1].object_key is None

    assert store.read(target, 0).data == bytes(model.data)
    check_reads(store, target, model, [offset - 1, offset, offset + 1, offset + 25, offset + 100,
                                       offset + 325, model.length - 1, model.length])
    # Appends after the merge land behind it; reads cross the reference entry.
    store.append(target, "wt", 3, 1, b"after-merge")
    model.append(b"after-merge")
    check_reads(store, target, model, [offset + 300, model.length - 11])
    assert store.read(target, offset + 5).data == bytes(model.data[offset + 5:])

    with pytest.raises(InvalidArgument):  # merged into a different target already
        store.merge(f"{unique}/s/2", source)

    # Truncating the target past the merged range releases the source segment.
    store.truncate(target, offset + len(src))
    with pytest.raises(SegmentNotFound):
        store.info(source)
    assert not object_keys(store, source)
    assert not index_entries(source)
    assert store.read(target, offset + len(src)).data == b"after-merge"


def test_merge_resumes_after_a_crash(store, unique):
    """Crash before each mutating request of a merge in turn; running it again completes it once."""
    k = 0
    while True:
        k += 1
        assert k < 10, "the merge never completed"
        target, source = f"{unique}/m{k}/1", f"{unique}/m{k}/1.txn"
        store.create(target)
        store.create(source)
        store.append(target, "wt", 0, 1, b"target")
        store.append(source, "ws", 0, 1, b"source")
        with inject_crash(k):
            try:
                offset = store.merge(target, source)
            except SimulatedCrash:
                offset = None
        if offset is not None:
            assert offset == 6
            break
        assert store.merge(target, source) == 6
        assert store.merge(target, source) == 6
        assert store.read(target, 0).data == b"targetsource"
        assert store.info(target).length == 12 and store.info(source).sealed
    assert k > 2  # seal, claim, advance, mark the source


def test_merging_empty_sources_keeps_the_target_appendable(store, unique):
    """Transactions that wrote nothing to a segment: merging the empty transaction segment appends
    nothing and releases it (so a repeated merge finds it gone)."""
    target = f"{unique}/s/1"
    store.create(target)
    store.append(target, "wt", 0, 1, b"before")
    for n in range(3):
        source = f"{unique}/s/1.txn{n}"
        store.create(source)
        assert store.merge(target, source) == 6
        with pytest.raises(SegmentNotFound):
            store.merge(target, source)
        with pytest.raises(SegmentNotFound):
            store.info(source)
    full = f"{unique}/s/1.txnfull"
    store.create(full)
    store.append(full, "ws", 0, 1, b"-txn")
    assert store.merge(target, full) == 6
    assert store.append(target, "wt", 1, 1, b"-after").offset == 10
    assert store.read(target, 0).data == b"before-txn-after"
    assert store.info(target).length == 16


def test_an_empty_merge_appends_nothing_and_releases_its_source(store, unique):
    target, source = f"{unique}/s/1", f"{unique}/s/1.txn"
    store.create(target)
    store.create(source)
    store.append(target, "wt", 0, 1, b"before")
    assert store.merge(target, source) == 6
    store.append(target, "wt", 1, 1, b"after")
    store.truncate(target, 11)
    with pytest.raises(SegmentNotFound):
        store.info(source)
