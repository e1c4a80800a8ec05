"""A reader's sync, and segment assignment: which reader reads which segment, from which offset.

The rules, as in Pravega:

* Segments of the start cut are unassigned at first; a reader acquires unassigned segments up to
  its fair share (ceil(segments / readers)), never while a checkpoint is outstanding.
* A reader that reads a segment to its end reports it completed. Its successors become available
  once all their predecessors are completed (a merge's successor is held until every predecessor is
  read: the R1, R2, S3 example of seed 004); successors past the group's end cut are never handed out.

A sync carries all of it at once: the reader's offsets, the segments it completed, the checkpoint
it passed; it answers the reader's :class:`Assignment`. These are pure transitions of
:class:`GroupState`; successors come from the caller (the control plane's stream records).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from controlplane.reader_groups.checkpoints import maybe_auto_checkpoint, pass_checkpoint
from controlplane.reader_groups.readers import another_instance, expire_readers
from controlplane.reader_groups.state import (
    Completed,
    GroupState,
    Held,
    ReaderEntry,
    Waiting,
    forget_superseded_completions,
)
from rillet.api import AssignedSegment, Assignment, SegmentOffset, SyncRequest
from rillet.errors import ReaderNotInReaderGroup
from rillet.models import SuccessorInfo
from rillet.stream_cut import segment_is_after, segment_is_before

# (scoped stream, segment id, the group's incarnation of the stream) -> successors
Successors = Callable[[str, int, int | None], list[SuccessorInfo]]


def sync(state: GroupState, reader: str, request: SyncRequest, now: int, successors: Successors) -> Assignment:
    """A reader's sync: it renews its lease, reports its offsets, completions and the checkpoint it
    passed, and takes unassigned segments up to its fair share (ReaderNotInReaderGroup if it is offline)."""
    entry = state.readers.get(reader)
    if entry is None or another_instance(entry, request.instance):
        raise ReaderNotInReaderGroup(
            f"reader {reader} is not in this group: it was taken offline (by reader_offline or because its "
            "lease expired, and its segments went to other readers; another reader may have joined under its "
            "name since), or the group was reset; close it and create a new reader",
            generation=state.config.generation)
    entry.seen_ms = now
    if entry.join is None:  # joined before reader items existed: from now on it has one
        entry.join = uuid.uuid4().hex[:16]
    expire_readers(state, now, sparing=reader)
    for p in request.positions:
        key = f"{p.stream}/{p.segment_id}"
        if key in entry.segments:
            entry.segments[key].offset = p.offset
    for c in request.completed:
        _complete(state, entry, c, successors)
    if request.checkpoint:
        pass_checkpoint(state, reader, entry, request.checkpoint)
    maybe_auto_checkpoint(state, now)
    _acquire(state, entry)
    return assignment(state, reader)


def assignment(state: GroupState, reader: str) -> Assignment:
    entry = state.readers[reader]
    checkpoint = next((c for c in state.checkpoints if reader in c.pending), None)
    return Assignment(
        generation=state.config.generation,
        segments=[AssignedSegment(stream=h.stream, segment=h.segment, offset=h.offset, end_offset=h.end_offset,
                                  incarnation=state.incarnation(h.stream))
                  for h in entry.segments.values()],
        checkpoint=checkpoint.name if checkpoint else None,
        silent=checkpoint.silent if checkpoint else False,
        end_of_data=state.end_of_data())


def _acquire(state: GroupState, entry: ReaderEntry) -> None:
    """Take unassigned segments up to the fair share; never while a checkpoint is outstanding."""
    if not state.checkpoints:
        while len(entry.segments) < state.fair_share() and state.unassigned:
            key = min(state.unassigned)
            entry.segments[key] = state.unassigned.pop(key)


def _complete(state: GroupState, entry: ReaderEntry, done: SegmentOffset, successors: Successors) -> None:
    key = f"{done.stream}/{done.segment_id}"
    held = entry.segments.pop(key, None)
    if held is None:
        return
    state.completed[key] = Completed(stream=held.stream, segment=held.segment, end_offset=done.offset)
    for checkpoint in state.checkpoints:
        if checkpoint.pending and key not in checkpoint.positions:
            checkpoint.positions[key] = Held(stream=held.stream, segment=held.segment, offset=done.offset)
    end_cut = [p.segment for p in state.end.get(held.stream, [])]
    end_offsets = {p.segment.segment_id: p.offset for p in state.end.get(held.stream, [])}
    if held.end_offset is not None:
        return  # read up to the end cut: nothing after it belongs to the group
    start = state.start.get(held.stream, [])
    for info in successors(held.stream, held.segment.segment_id, state.incarnation(held.stream)):
        successor = Held(stream=held.stream, segment=info.segment, end_offset=end_offsets.get(info.segment.segment_id))
        if state.known(successor.key) or (end_cut and successor.segment.segment_id not in end_offsets
                                          and segment_is_after(successor.segment, end_cut)):
            continue
        waiting = [f"{held.stream}/{p.segment_id}" for p in info.predecessors
                   if f"{held.stream}/{p.segment_id}" not in state.completed and not segment_is_before(p, start)]
        state.future[successor.key] = Waiting(held=successor, predecessors=waiting)
    for fkey, waiting in list(state.future.items()):
        waiting.predecessors = [p for p in waiting.predecessors if p not in state.completed]
        if not waiting.predecessors:
            del state.future[fkey]
            state.unassigned[fkey] = waiting.held
    forget_superseded_completions(state)
