"""The byte stream sender tells the server how long ago a block was first sent, so that a resend
the server can no longer de-duplicate (its writer id expired) is refused instead of stored twice."""

from __future__ import annotations

import time

import pytest
from test_byte_sender import Store

from rillet.byte_stream import _Sender
from rillet.errors import OutcomeUnknown


def test_a_resend_carries_the_age_of_its_first_attempt():
    store = Store()
    sender = _Sender(store.append, block_size=4)
    store.faults = ["lost"]
    sender.put(b"abcd")
    with pytest.raises(OutcomeUnknown):
        sender.drain()
    time.sleep(0.01)  # the resend is at least 10 ms after the first attempt
    sender.drain()
    assert bytes(store.data) == b"abcd"
    assert store.ages[0] == 0 and store.ages[1] >= 10


def test_a_conditional_append_is_first_sent_with_age_zero():
    store = Store()
    sender = _Sender(store.append, block_size=4)
    assert sender.send_now(b"ab", expected_offset=0) == 2
    assert store.ages == [0]
