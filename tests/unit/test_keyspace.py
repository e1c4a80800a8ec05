"""Segment ids, key ranges, even splits and routing-key hashing (rillet.keyspace): pure arithmetic."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.errors import InvalidArgument
from rillet.keyspace import (
    KeyRange,
    covers_exactly,
    hash_routing_key,
    merge_adjacent,
    segment_epoch,
    segment_id,
    segment_number,
    split_evenly,
)

U32_MAX = 2**32 - 1

# -- segment ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("epoch", "number", "expected"), [
    (0, 0, 0),
    (0, 7, 7),
    (1, 0, 1 << 32),
    (3, 5, 3 * 2**32 + 5),
    (U32_MAX, U32_MAX, 2**64 - 1),
])
def test_segment_id_layout_is_epoch_high_number_low(epoch, number, expected):
    sid = segment_id(epoch, number)
    assert sid == expected
    assert segment_epoch(sid) == epoch
    assert segment_number(sid) == number


@given(st.integers(0, U32_MAX), st.integers(0, U32_MAX))
def test_segment_id_round_trips(epoch, number):
    sid = segment_id(epoch, number)
    assert 0 <= sid < 2**64
    assert (segment_epoch(sid), segment_number(sid)) == (epoch, number)


@given(st.integers(0, 2**64 - 1))
def test_every_64_bit_id_decomposes_and_recomposes(sid):
    assert segment_id(segment_epoch(sid), segment_number(sid)) == sid


def test_segment_ids_order_by_epoch_first():
    assert segment_id(0, U32_MAX) < segment_id(1, 0) < segment_id(1, 1) < segment_id(2, 0)


@pytest.mark.parametrize(("epoch", "number"), [
    (2**32, 0), (0, 2**32), (-1, 0), (0, -1), (2**40, 2**40), (-(2**31), 5),
])
def test_segment_id_rejects_values_outside_32_bits(epoch, number):
    with pytest.raises(InvalidArgument):
        segment_id(epoch, number)


# -- key ranges -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (0.0, 0.5), (0.25, 0.75), (0.999, 1.0), (0.0, 1e-12)])
def test_valid_key_ranges(low, high):
    r = KeyRange(low, high)
    assert (r.low, r.high) == (low, high)


@pytest.mark.parametrize(("low", "high"), [
    (0.5, 0.5),  # empty
    (0.6, 0.5),  # reversed
    (-0.1, 0.5),  # below the key space
    (0.5, 1.0000001),  # above the key space
    (1.0, 1.0),
    (0.0, 0.0),
    (-1.0, 2.0),
])
def test_invalid_key_ranges_raise_invalid_argument(low, high):
    with pytest.raises(InvalidArgument):
        KeyRange(low, high)


def test_key_range_is_half_open():
    r = KeyRange(0.25, 0.5)
    assert r.contains(0.25)
    assert r.contains(0.4999)
    assert not r.contains(0.5)
    assert not r.contains(0.2499)


@pytest.mark.parametrize(("a", "b", "overlap"), [
    ((0.0, 0.5), (0.5, 1.0), False),  # adjacent half-open ranges share no point
    ((0.0, 0.5), (0.4, 1.0), True),
    ((0.0, 1.0), (0.3, 0.4), True),  # containment
    ((0.2, 0.3), (0.2, 0.3), True),  # identical
    ((0.0, 0.1), (0.9, 1.0), False),
    ((0.1, 0.2), (0.0, 0.1), False),
])
def test_key_range_overlap(a, b, overlap):
    ra, rb = KeyRange(*a), KeyRange(*b)
    assert ra.overlaps(rb) is overlap
    assert rb.overlaps(ra) is overlap  # symmetric


def test_key_ranges_are_frozen():
    r = KeyRange(0.0, 0.5)
    with pytest.raises(AttributeError):
        r.low = 0.1  # type: ignore[misc]


# -- split_evenly and covers_exactly ----------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 10, 64, 100, 333, 1000])
def test_split_evenly_tiles_the_key_space(parts):
    ranges = split_evenly(0.0, 1.0, parts)
    assert len(ranges) == parts
    assert ranges[0].low == 0.0 and ranges[-1].high == 1.0
    assert covers_exactly(ranges, 0.0, 1.0)
    widths = [r.high - r.low for r in ranges]
    assert max(widths) - min(widths) < 1e-9  # "evenly"


@settings(max_examples=300, deadline=None)
@given(low=st.floats(0.0, 1.0), high=st.floats(0.0, 1.0), parts=st.integers(1, 1000))
def test_split_evenly_covers_any_range_exactly(low, high, parts):
    low, high = min(low, high), max(low, high)
    # Below float resolution a range cannot be cut into ``parts`` non-empty pieces; not a real case.
    if (high - low) / parts < 1e-12:
        return
    ranges = split_evenly(low, high, parts)
    assert len(ranges) == parts
    assert covers_exactly(ranges, low, high)
    assert all(a.high == b.low for a, b in itertools.pairwise(ranges))  # already in order, adjacent
    assert not any(a.overlaps(b) for a, b in itertools.pairwise(ranges))


@given(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 200))
def test_every_point_of_a_split_falls_in_exactly_one_part(point, parts):
    ranges = split_evenly(0.0, 1.0, parts)
    assert sum(r.contains(point) for r in ranges) == 1


@pytest.mark.parametrize("parts", [0, -1])
def test_split_evenly_needs_at_least_one_part(parts):
    with pytest.raises(InvalidArgument):
        split_evenly(0.0, 1.0, parts)


def K(low, high):
    return KeyRange(low, high)


@pytest.mark.parametrize(("ranges", "low", "high"), [
    ([K(0.0, 1.0)], 0.0, 1.0),
    ([K(0.0, 0.5), K(0.5, 1.0)], 0.0, 1.0),
    ([K(0.5, 1.0), K(0.0, 0.25), K(0.25, 0.5)], 0.0, 1.0),  # order does not matter
    ([K(0.25, 0.5), K(0.5, 0.75)], 0.25, 0.75),
])
def test_covers_exactly_true(ranges, low, high):
    assert covers_exactly(ranges, low, high)


@pytest.mark.parametrize(("ranges", "low", "high"), [
    ([], 0.0, 1.0),  # nothing
    ([K(0.0, 0.4), K(0.5, 1.0)], 0.0, 1.0),  # gap
    ([K(0.0, 0.6), K(0.5, 1.0)], 0.0, 1.0),  # overlap
    ([K(0.0, 0.5), K(0.5, 1.0), K(0.2, 0.3)], 0.0, 1.0),  # an extra range inside
    ([K(0.0, 1.0), K(0.0, 1.0)], 0.0, 1.0),  # duplicate
    ([K(0.0, 1.0), K(0.5, 1.0)], 0.0, 1.0),  # nested at the end
    ([K(0.1, 1.0)], 0.0, 1.0),  # does not start at low
    ([K(0.0, 0.9)], 0.0, 1.0),  # does not reach high
    ([K(0.0, 1.0)], 0.0, 0.5),  # goes beyond high
])
def test_covers_exactly_false(ranges, low, high):
    assert not covers_exactly(ranges, low, high)


def test_merge_adjacent_coalesces_touching_and_overlapping_ranges():
    merged = merge_adjacent([K(0.5, 0.75), K(0.0, 0.25), K(0.25, 0.5), K(0.8, 0.9), K(0.85, 1.0)])
    assert merged == [K(0.0, 0.75), K(0.8, 1.0)]


# -- routing-key hashing ----------------------------------------------------------------------------


def _expected_point(key: str) -> float:
    """The documented hash, derived independently: BLAKE2b with an 8-byte digest, its top 53 bits."""
    (word,) = struct.unpack(">Q", hashlib.new("blake2b", key.encode("utf-8"), digest_size=8).digest())
    return math.ldexp(word >> 11, -53)


KEYS = ["", "a", "key-1", "key-2", "routing/key with spaces", "ünïcödé", "日本語", "x" * 10_000]


@pytest.mark.parametrize("key", KEYS)
def test_hash_routing_key_matches_the_documented_function(key):
    point = hash_routing_key(key)
    assert isinstance(point, float)
    assert 0.0 <= point < 1.0
    assert point == _expected_point(key)


@given(st.text())
def test_hash_routing_key_is_in_unit_interval_and_deterministic(key):
    point = hash_routing_key(key)
    assert 0.0 <= point < 1.0
    assert hash_routing_key(key) == point


def test_hash_routing_key_is_stable_across_processes():
    """Not Python's randomized hash(): another interpreter with another hash seed agrees."""
    code = "import sys; from rillet.keyspace import hash_routing_key as h; print(repr([h(k) for k in sys.argv[1:]]))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, *KEYS[:6]], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert eval(out) == [hash_routing_key(k) for k in KEYS[:6]]


def test_hash_routing_key_spreads_keys_over_the_key_space():
    buckets = [0] * 10
    for i in range(10_000):
        buckets[int(hash_routing_key(f"key-{i}") * 10)] += 1
    assert all(800 < b < 1200 for b in buckets), buckets
    assert len({hash_routing_key(f"key-{i}") for i in range(10_000)}) == 10_000
