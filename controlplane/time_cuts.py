"""The stream cut at a time: where a reader starts to see everything appended at or after it.

Pravega has no time index; Rillet's data plane records, in each append block's index entry, when the
block was claimed (its clock just before the block commits). The cut at time T:

* never misses an event appended at or after T (by those times);
* is exact (no event before it was appended at or after T, none after it before T) except where a
  chunk that tiering packed after T (so its blocks' own times are gone) lies right after it, or a
  scale was under way at T: there it is earlier, so a reader may also see events from before T;
* is never before the head (truncated events are gone: for a T before the head it is the head), and
  for a T after the last append it is the tail.

Steps: the epoch current at T (a binary search over epoch numbers by creation time); one epoch back
while a segment that epoch's scale sealed took a block at or after T (the scale was under way then,
and the epoch's creation time is when it began); in each segment of that epoch the end of what its
index proves was appended before T (dataplane.time_index); then the later of that and the head, key
by key.
Requests: about log2(epochs) epoch reads, one segment read and about 2 x log2(offset) index queries per
segment of the epoch, and the stream's segment list once.
"""

from __future__ import annotations

from controlplane.cuts import upper_bound
from controlplane.models import EpochRecord
from controlplane.streams import StreamTasks
from dataplane.time_index import appended_before
from rillet.errors import SegmentNotFound
from rillet.models import SegmentPosition, SegmentRange
from rillet.names import segment_name


def cut_at_time(streams: StreamTasks, scope: str, stream: str, time_ms: int) -> list[SegmentPosition]:
    """The earliest cut from which a reader sees every event of the stream appended at or after ``time_ms``."""
    record = streams.store.get_stream(scope, stream)
    epoch = _epoch_at(streams, scope, stream, record.current_epoch, time_ms)
    while epoch.epoch > 0 and _sealed_after(streams, scope, stream, epoch, time_ms):
        epoch = streams.store.get_epoch(scope, stream, epoch.epoch - 1)
    head = streams.head(scope, stream, record)
    first = min(int(sid) for sid, _, _ in epoch.segments)
    records = {r.segment_id: r for r in streams.store.list_segments(
        scope, stream, min([first, *(p.segment.segment_id for p in head)]))}
    cut = []
    for sid, low, high in epoch.segments:
        segment = SegmentRange(segment_id=int(sid), low=low, high=high)
        try:
            offset = _appended_before(streams, scope, stream, segment.segment_id, time_ms)
        except SegmentNotFound:  # deleted by truncation: wholly before the head, which wins below
            offset = records[segment.segment_id].sealed_size or 0
        cut.append(SegmentPosition(segment=segment, offset=offset))
    return upper_bound([cut, head], records)


def _epoch_at(streams: StreamTasks, scope: str, stream: str, current: int, time_ms: int) -> EpochRecord:
    """The last epoch created at or before ``time_ms`` (the first epoch for earlier times)."""
    low, high = 0, current  # the answer lies in [low, high]
    chosen = None
    while low <= high:
        middle = (low + high) // 2
        epoch = streams.store.get_epoch(scope, stream, middle)
        if epoch.created_ms <= time_ms:
            chosen, low = epoch, middle + 1
        else:
            high = middle - 1
    return chosen or streams.store.get_epoch(scope, stream, 0)


def _sealed_after(streams: StreamTasks, scope: str, stream: str, epoch: EpochRecord, time_ms: int) -> bool:
    """Whether a segment sealed by the scale that made ``epoch`` took a block at or after ``time_ms``."""
    kept = {int(s) for s, _, _ in epoch.segments}
    previous = streams.store.get_epoch(scope, stream, epoch.epoch - 1)
    for sid, _, _ in previous.segments:
        if int(sid) in kept:
            continue
        try:
            info = streams.segments.info(segment_name(scope, stream, int(sid)))
        except SegmentNotFound:
            continue
        if appended_before(info.name, info.start_offset, info.length, time_ms) < info.length:
            return True
    return False


def _appended_before(streams: StreamTasks, scope: str, stream: str, sid: int, time_ms: int) -> int:
    info = streams.segments.info(segment_name(scope, stream, sid))
    return appended_before(info.name, info.start_offset, info.length, time_ms)
