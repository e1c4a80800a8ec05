"""The byte stream writer's sender against a store that de-duplicates by block number, as the segment
store does: written bytes are sent without flush, in order, exactly once, across lost answers."""

from __future__ import annotations

import threading

import pytest

from rillet.byte_stream import _Sender
from rillet.errors import InvalidArgument, OffsetMismatch, OutcomeUnknown, SegmentSealed, ServiceUnavailable


class Store:
    """A segment that appends a block once per number, numbers contiguous (as the segment store);
    ``faults`` scripts what the next appends do."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.numbers: set[int] = set()
        # "lost": applied, then the answer is lost; "dropped": lost before applied; "refused": a typed 4xx
        self.faults: list[str] = []
        self.calls = 0
        self.ages: list[int] = []  # each attempt's age_ms
        self.release = threading.Event()
        self.release.set()

    def append(self, block: bytes, number: int, expected_offset: int | None, age_ms: int) -> int:
        self.calls += 1
        self.ages.append(age_ms)
        self.release.wait()
        fault = self.faults.pop(0) if self.faults else None
        if fault == "refused":
            raise SegmentSealed("sealed")
        if fault == "dropped":
            raise ServiceUnavailable("the connection was reset before the request arrived")
        if number > len(self.numbers):
            raise InvalidArgument(f"must continue at block {len(self.numbers)}, got {number}")
        if number not in self.numbers:
            if expected_offset not in (None, len(self.data)):
                raise OffsetMismatch(f"length is {len(self.data)}")
            self.numbers.add(number)
            self.data += block
        if fault == "lost":
            raise ServiceUnavailable("the answer was lost")
        return len(self.data)


def test_write_sends_without_flush_and_flush_waits():
    store = Store()
    sender = _Sender(store.append, block_size=4)
    store.release.clear()
    sender.put(b"abcdefghij")
    sender.put(b"kl")
    store.release.set()
    sender.drain()
    assert bytes(store.data) == b"abcdefghijkl"
    assert store.calls == 3  # 4-byte blocks: what queued behind the block in flight leaves with the next


def test_a_lost_answer_is_outcome_unknown_once_then_resent_under_the_same_number():
    store = Store()
    store.faults = ["lost"]
    sender = _Sender(store.append, block_size=1024)
    sender.put(b"first")
    with pytest.raises(OutcomeUnknown):
        sender.drain()
    sender.put(b"second")
    sender.drain()
    assert bytes(store.data) == b"firstsecond"  # stored once, in order


def test_a_refusal_is_raised_by_every_later_call():
    store = Store()
    store.faults = ["refused"]
    sender = _Sender(store.append, block_size=1024)
    sender.put(b"x")
    with pytest.raises(SegmentSealed):
        sender.drain()
    with pytest.raises(SegmentSealed):
        sender.put(b"y")
    with pytest.raises(SegmentSealed):
        sender.drain()
    assert store.data == b""


def test_a_conditional_append_follows_what_was_written():
    store = Store()
    sender = _Sender(store.append, block_size=1024)
    sender.put(b"abc")
    assert sender.send_now(b"def", expected_offset=3) == 6
    with pytest.raises(OffsetMismatch):  # refused: its number stays free
        sender.send_now(b"xyz", expected_offset=0)
    sender.put(b"ghi")
    sender.drain()
    assert bytes(store.data) == b"abcdefghi"


@pytest.mark.parametrize("fault", ["lost", "dropped"])
def test_a_conditional_append_of_unknown_outcome_is_resolved_before_the_next_block(fault):
    store = Store()
    sender = _Sender(store.append, block_size=1024)
    store.faults = [fault]
    with pytest.raises(ServiceUnavailable):
        sender.send_now(b"abc", expected_offset=0)
    store.data += b"" if fault == "lost" else b"other "  # another writer takes offset 0 meanwhile
    sender.put(b"def")
    sender.drain()
    assert bytes(store.data) == (b"abcdef" if fault == "lost" else b"other def")
