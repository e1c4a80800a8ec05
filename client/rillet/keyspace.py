"""Segment ids, key ranges and routing-key hashing: the arithmetic both sides must agree on.

A segment id is 64 bits: the epoch that created the segment in the high 32 bits and the segment's
number within its stream in the low 32 bits, as in Pravega. Key ranges are half-open intervals of
[0, 1); a routing key hashes to a point of that interval, so it maps to exactly one segment of an
epoch.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from functools import lru_cache

from rillet.errors import InvalidArgument

_EPOCH_SHIFT = 32
_NUMBER_MASK = (1 << _EPOCH_SHIFT) - 1


def segment_id(epoch: int, number: int) -> int:
    if not (0 <= epoch <= _NUMBER_MASK and 0 <= number <= _NUMBER_MASK):
        raise InvalidArgument(f"epoch {epoch} and number {number} must each fit in 32 bits")
    return (epoch << _EPOCH_SHIFT) | number


def segment_epoch(sid: int) -> int:
    return sid >> _EPOCH_SHIFT


def segment_number(sid: int) -> int:
    return sid & _NUMBER_MASK


def hash_routing_key(routing_key: str) -> float:
    """A stable point in [0, 1) for a routing key (the first 53 bits of BLAKE2b, so exact in a float).

    A key is text with a UTF-8 form (the bytes hashed); anything else is InvalidArgument, checked
    before the cache, which would otherwise fail on an unhashable key with a TypeError."""
    if not isinstance(routing_key, str):
        raise InvalidArgument(f"a routing key is a str, not {type(routing_key).__name__}")
    return _hash_text(routing_key)


@lru_cache(maxsize=1 << 16)  # writers see the same keys again and again
def _hash_text(routing_key: str) -> float:
    try:
        encoded = routing_key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("a routing key must be text with a UTF-8 form (no lone surrogates)") from None
    digest = hashlib.blake2b(encoded, digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) / float(1 << 53)


@dataclass(frozen=True, order=True)
class KeyRange:
    """A half-open interval [low, high) of the routing-key space [0, 1)."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (0.0 <= self.low < self.high <= 1.0):
            raise InvalidArgument(f"key range [{self.low}, {self.high}) must satisfy 0 <= low < high <= 1")

    def contains(self, point: float) -> bool:
        return self.low <= point < self.high

    def overlaps(self, other: KeyRange) -> bool:
        return self.low < other.high and other.low < self.high


def split_evenly(low: float, high: float, parts: int) -> list[KeyRange]:
    """``parts`` adjacent ranges covering [low, high) exactly (the last one ends at ``high``)."""
    if parts < 1:
        raise InvalidArgument("a range is split into at least one part")
    step = (high - low) / parts
    bounds = [low + i * step for i in range(parts)] + [high]
    return [KeyRange(bounds[i], bounds[i + 1]) for i in range(parts)]


def covers_exactly(ranges: list[KeyRange], low: float, high: float) -> bool:
    """True when ``ranges`` tile [low, high) with no gap and no overlap."""
    ordered = sorted(ranges)
    if not ordered or ordered[0].low != low or ordered[-1].high != high:
        return False
    return all(a.high == b.low for a, b in itertools.pairwise(ordered))


def merge_adjacent(ranges: list[KeyRange]) -> list[KeyRange]:
    """Coalesce touching ranges: the union of ``ranges`` as a sorted list of disjoint intervals."""
    merged: list[KeyRange] = []
    for r in sorted(ranges):
        if merged and merged[-1].high >= r.low:
            last = merged.pop()
            merged.append(KeyRange(last.low, max(last.high, r.high)))
        else:
            merged.append(r)
    return merged
