"""When may a segment be read? After all of its predecessors have been read to their end.

This is the rule that keeps per-key order across scaling for readers: a successor created by a
merge (S3 from S1 and S2) is held until both S1 and S2 are done, so no event of S3 is read before
an earlier event with the same key in S2. Readers and reader groups share this logic; a reader group
keeps the same state in its shared DynamoDB record.

A predecessor that lies before where reading started (the start stream cut already covers its key
range with later segments) counts as done: nobody will ever read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rillet.models import SegmentRange
from rillet.stream_cut import segment_is_before


@dataclass
class SegmentOrder:
    """The segments that are done, and successors waiting for their predecessors."""

    start: list[SegmentRange]  # the segments of the start stream cut
    completed: set[int] = field(default_factory=set)
    waiting: dict[int, tuple[SegmentRange, set[int]]] = field(default_factory=dict)
    released: set[int] = field(default_factory=set)  # every segment handed out so far

    def __post_init__(self) -> None:
        self.released.update(s.segment_id for s in self.start)

    def complete(self, segment_id: int,
                 successors: list[tuple[SegmentRange, list[SegmentRange]]]) -> list[SegmentRange]:
        """Record that ``segment_id`` was read to its end; return the successors now ready to read.

        ``successors`` lists each successor with all of its predecessors (with key ranges).
        """
        self.completed.add(segment_id)
        for successor, predecessors in successors:
            sid = successor.segment_id
            if sid in self.released or sid in self.waiting:
                continue
            needed = {p.segment_id for p in predecessors
                      if p.segment_id not in self.completed and not segment_is_before(p, self.start)}
            self.waiting[sid] = (successor, needed)
        ready = []
        for sid, (successor, needed) in list(self.waiting.items()):
            needed.discard(segment_id)
            needed.difference_update(self.completed)
            if not needed:
                del self.waiting[sid]
                self.released.add(sid)
                ready.append(successor)
        return ready
