"""Per-trigger limits (``max_bytes_per_trigger``, ``max_events_per_trigger``): where a micro-batch's
bytes end within them."""

from __future__ import annotations

from dataclasses import replace

from rillet_spark.planning import _Piece
from rillet_spark.reading import _fetch


def _limited(connection, pieces: list[_Piece], max_bytes: int | None, max_events: int | None) -> list[_Piece]:
    """``pieces`` brought back within a per-trigger limit in bytes and one in events (the tighter wins).

    Bytes: each segment with bytes to read gets an equal share and ends at the last appended block (an
    event boundary) inside it, from its read plan, or after its first block when even that is larger:
    every batch moves on. Events: offsets are bytes and the read plan has no event counts, so the driver
    walks the frame headers of the pieces (after the byte limit, so at most that much), reading through
    the read API in windows of ``COUNT_WINDOW_BYTES``: one request per window, or per event for events
    larger than that. The limit is split equally between the segments with data (one more for the first
    ones while it does not divide); when it is smaller than their number, the segments with the most
    bytes pending take one event each, the others wait, so each batch holds at most ``max_events``.
    """
    pending = [piece for piece in pieces if piece.size]
    if max_bytes and sum(piece.size for piece in pending) > max_bytes:
        share = max(1, max_bytes // len(pending))
        pending = [_bytes_within(connection, piece, share) if piece.size > share else piece for piece in pending]
    if max_events:
        ranked = sorted(pending, key=lambda piece: -piece.size)
        shares = [max_events // len(ranked) + (i < max_events % len(ranked)) for i in range(len(ranked))]
        pending = [replace(piece, end=_after_events(connection, piece, share)) for piece, share in zip(ranked, shares)]
    stops = {(p.scope, p.stream, p.segment_id): p.end for p in pending}
    return [replace(p, end=stops.get((p.scope, p.stream, p.segment_id), p.end)) for p in pieces]


def _bytes_within(connection, piece: _Piece, share: int) -> _Piece:
    parts = connection.segments.plan(piece.scope, piece.stream, piece.segment_id, piece.start, piece.end,
                                     piece.incarnation).parts
    stop = parts[0].offset + parts[0].length
    for part in parts:
        if part.offset + part.length > piece.start + share:
            break
        stop = part.offset + part.length
    return replace(piece, end=stop)


COUNT_WINDOW_BYTES = 256 * 1024


def _after_events(connection, piece: _Piece, count: int) -> int:
    """The offset after the first ``count`` whole events of ``piece`` (its end when it holds fewer)."""
    from rillet.framing import FRAME_HEADER, HEADER_SIZE, body_size

    position, counted = piece.start, 0
    while counted < count and position < piece.end:
        window = _fetch(connection.segments, piece.scope, piece.stream, piece.segment_id, position,
                        min(COUNT_WINDOW_BYTES, piece.end - position), piece.incarnation)
        at = 0
        while counted < count and at + HEADER_SIZE <= len(window):
            at += HEADER_SIZE + body_size(FRAME_HEADER.unpack_from(window, at)[0])
            counted += 1
        if at == 0:
            raise ValueError(f"segment {piece.segment_id} of {piece.scope}/{piece.stream}: no whole frame header "
                             f"at {position}")
        position += at  # past the window when its last event runs on: the next read starts at the next header
    return position
