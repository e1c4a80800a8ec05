"""When a segment's blocks were appended, from its index items (read-only).

The data plane keeps no time index, but each append block's ``e#`` entry records when the block was
claimed (``created_ms``: the data plane's clock just before the block commits), and a segment's
blocks are claimed one after another in offset order (a claim is made at the committed length). So
an entry claimed before a time proves that every byte up to its end was appended before it.

Tiering packs runs of small blocks into ``c#`` chunks and deletes their entries; a chunk's own time
is when tiering ran, later than any block in it, so a chunk tiered before a time proves the same for
its bytes, and a chunk tiered after it proves nothing. The position answered is the end of the last
item (entry or chunk) that proves "before the time": nothing appended at or after the time lies
before it, and it is exact unless a chunk tiered after the time, holding blocks from before it, lies
just after it.
"""

from __future__ import annotations

from dataplane.models import IndexEntry, chunk_key, entry_key

# Offsets are below 2**63 and every step halves the range searched: at most this many steps (two
# queries each, one per key prefix).
MAX_STEPS = 64


def appended_before(segment: str, start: int, length: int, time_ms: int) -> int:
    """The offset in [start, length] up to which every byte of ``segment`` was appended before
    ``time_ms``, as far as its index items prove: from there a reader misses nothing appended at or
    after the time. ``length`` when every block was; ``start`` when none is known to be."""
    position, low, high = start, start, length
    covering = _last_item_from(segment, start)  # a block or chunk a truncation cut through
    if covering is not None and covering.end > start and covering.created_ms < time_ms:
        position = low = min(covering.end, length)
    for _ in range(MAX_STEPS):
        if low >= high:
            break
        middle = (low + high) // 2
        item = _first_item_in(segment, middle, high)
        if item is not None and item.created_ms < time_ms:
            position = low = max(position, item.end)
        else:  # none starts in [middle, high), or the first one may hold later blocks: look before middle
            high = middle
    return min(position, length)


def _first_item_in(segment: str, low: int, high: int) -> IndexEntry | None:
    """The entry or chunk starting first in [low, high), if any."""
    found = []
    for key in (entry_key, chunk_key):
        query = IndexEntry.query(segment, IndexEntry.sk.between(key(low), key(high - 1)), limit=1,
                                 consistent_read=True)
        found.extend(query)
    return min(found, key=lambda item: item.offset, default=None)


def _last_item_from(segment: str, offset: int) -> IndexEntry | None:
    """The entry or chunk starting last at or before ``offset``, if any."""
    found = []
    for key in (entry_key, chunk_key):
        query = IndexEntry.query(segment, IndexEntry.sk.between(key(0), key(offset)), limit=1,
                                 scan_index_forward=False, consistent_read=True)
        found.extend(query)
    return max(found, key=lambda item: item.offset, default=None)
