"""Test helpers for scaling, stream cuts and reader groups.

Two independent parts:

* :class:`ScalingHistory`: a pure model of a stream's segments through a sequence of scale events
  (splits, merges, and mixed replacements of adjacent segments), with the per-key chain of segments
  that serves as an oracle for stream-cut comparison, and the cuts that are valid over it (one per
  downward-closed set of scale events). Used by the unit property tests and the integration tests.
* :class:`History`: a recorder of acknowledged writes and of reads (with a global sequence number
  taken right after a read returns) and the checker of the reader-group guarantees over it: every
  acknowledged event read exactly once, nothing read that was not written, and per (writer, key) the
  read order equals the write order. With faults injected it also records failed writes: an event
  whose future failed with a typed refusal is known not to be stored, so reading it is a violation;
  one that failed with ``OutcomeUnknown`` may or may not be read (at most once); a failure that proves
  neither (a 5xx, a throttle, a transport error) breaks the outcome rule by itself. :class:`Anomalies`
  counts each kind of violation for the fault benchmark's report.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from hypothesis import strategies as st

import rillet
from rillet.keyspace import segment_id
from rillet.models import SegmentPosition, SegmentRange
from rillet.stream_cut import StreamCut

# -- a model of scaling histories ---------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleEvent:
    epoch: int  # the epoch this event created
    sealed: tuple[int, ...]  # ids of the sealed segments (adjacent, in key order)
    created: tuple[int, ...]  # ids of the new segments (tiling exactly the sealed ones' union)


@dataclass
class ScalingHistory:
    """Segments with key ranges through epochs; epoch ``e`` is ``epochs[e]`` (ids in key order)."""

    segments: dict[int, SegmentRange] = field(default_factory=dict)
    epochs: list[list[int]] = field(default_factory=list)
    events: list[ScaleEvent] = field(default_factory=list)
    count: int = 0  # segments created so far (the next segment's number)

    @classmethod
    def start(cls, bounds: list[float]) -> ScalingHistory:
        """Epoch 0 with segments [bounds[i], bounds[i+1])."""
        history = cls()
        history.epochs.append([history._new(0, lo, hi) for lo, hi in itertools.pairwise(bounds)])
        return history

    def _new(self, epoch: int, low: float, high: float) -> int:
        sid = segment_id(epoch, self.count)
        self.count += 1
        self.segments[sid] = SegmentRange(segment_id=sid, low=low, high=high)
        return sid

    @property
    def current(self) -> list[int]:
        return self.epochs[-1]

    def scale(self, first: int, count: int, inner_bounds: list[float]) -> ScaleEvent:
        """Replace ``count`` adjacent current segments from index ``first`` by segments whose
        boundaries inside their union are ``inner_bounds`` (sorted, strictly inside)."""
        sealed = self.current[first:first + count]
        low, high = self.segments[sealed[0]].low, self.segments[sealed[-1]].high
        bounds = [low, *inner_bounds, high]
        assert all(a < b for a, b in itertools.pairwise(bounds)), bounds
        epoch = len(self.epochs)
        created = [self._new(epoch, lo, hi) for lo, hi in itertools.pairwise(bounds)]
        self.epochs.append(self.current[:first] + created + self.current[first + count:])
        event = ScaleEvent(epoch, tuple(sealed), tuple(created))
        self.events.append(event)
        return event

    # -- the oracle ----------------------------------------------------------------------------

    def probe_points(self) -> list[float]:
        """One key point inside every elementary interval formed by all segment boundaries."""
        bounds = sorted({b for s in self.segments.values() for b in (s.low, s.high)})
        return [(a + b) / 2 for a, b in itertools.pairwise(bounds)]

    def chain(self, point: float) -> list[int]:
        """The segments containing ``point``, oldest first: the order a key's events are in."""
        seen: list[int] = []
        for epoch in self.epochs:
            for sid in epoch:
                s = self.segments[sid]
                if s.low <= point < s.high and sid not in seen:
                    seen.append(sid)
        return seen

    def successors(self, sid: int) -> list[int]:
        s = self.segments[sid]
        for event in self.events:
            if sid in event.sealed:
                return [c for c in event.created
                        if self.segments[c].low < s.high and s.low < self.segments[c].high]
        return []

    def predecessors(self, sid: int) -> list[int]:
        s = self.segments[sid]
        for event in self.events:
            if sid in event.created:
                return [p for p in event.sealed
                        if self.segments[p].low < s.high and s.low < self.segments[p].high]
        return []

    # -- cuts ----------------------------------------------------------------------------------

    def cut_segments(self, applied: list[bool]) -> list[int]:
        """The segments of the cut reached by applying the events marked in ``applied`` (in order;
        an event whose sealed segments are not all in the cut by then cannot apply and is skipped)."""
        cut = list(self.epochs[0])
        for event, apply in zip(self.events, applied):
            if apply and all(s in cut for s in event.sealed):
                at = cut.index(event.sealed[0])
                cut[at:at + len(event.sealed)] = list(event.created)
        return cut

    def cut(self, segments: list[int], offsets: dict[int, int], scope: str = "sc", stream: str = "st") -> StreamCut:
        return StreamCut.of(scope, stream, [SegmentPosition(segment=self.segments[s], offset=offsets[s])
                                            for s in segments])

    def position_at(self, cut: StreamCut, point: float) -> tuple[int, int]:
        """Where ``cut`` is for a key: (index of its segment in the key's chain, offset)."""
        chain = self.chain(point)
        for p in cut.positions:
            if p.segment.low <= point < p.segment.high:
                return chain.index(p.segment.segment_id), p.offset
        raise AssertionError(f"cut {cut} does not cover key point {point}")


@st.composite
def histories(draw, max_events: int = 6) -> ScalingHistory:
    """A hypothesis strategy: 1-4 even segments, then up to ``max_events`` splits into 2-3, merges of
    2-3 adjacent segments, or mixed replacements of 1-3 adjacent segments by 1-4 new ranges."""
    n0 = draw(st.integers(1, 4))
    history = ScalingHistory.start([i / n0 for i in range(n0)] + [1.0])
    for _ in range(draw(st.integers(0, max_events))):
        current = history.current
        kind = draw(st.sampled_from(["split", "merge", "replace"]))
        if kind == "merge" and len(current) < 2:
            kind = "split"
        if kind == "split":
            first, count, parts = draw(st.integers(0, len(current) - 1)), 1, draw(st.integers(2, 3))
        elif kind == "merge":
            count = draw(st.integers(2, min(3, len(current))))
            first, parts = draw(st.integers(0, len(current) - count)), 1
        else:
            count = draw(st.integers(1, min(3, len(current))))
            first, parts = draw(st.integers(0, len(current) - count)), draw(st.integers(1, 4))
        low = history.segments[current[first]].low
        high = history.segments[current[first + count - 1]].high
        history.scale(first, count, [low + (high - low) * i / parts for i in range(1, parts)])
    return history


def oracle_compare(history: ScalingHistory, a: StreamCut, b: StreamCut) -> str:
    """BEFORE / EQUAL / AFTER / OVERLAPPING, computed key point by key point along each key's chain."""
    before = after = False
    for point in history.probe_points():
        pa, pb = history.position_at(a, point), history.position_at(b, point)
        before |= pa < pb
        after |= pa > pb
    if before and after:
        return "OVERLAPPING"
    return "BEFORE" if before else "AFTER" if after else "EQUAL"


# -- the reader-group history checker ----------------------------------------------------------------


def event_text(writer: int, key: int, seq: int) -> str:
    return f"w{writer}:k{key}:{seq}"


def parse_event(text: str) -> tuple[str, str, int]:
    writer, key, seq = text.split(":")
    return writer, key, int(seq)


@dataclass
class Read:
    gseq: int
    reader: str
    event: str


NOT_STORED, UNKNOWN, UNPROVEN = "not stored", "unknown", "unproven"  # what a failed future claims


def failure_outcome(error: BaseException) -> str:
    """What a failed future claims. OutcomeUnknown: maybe stored. A typed refusal (a 4xx that repeating
    cannot change) proves the event is not stored. Anything else (a 5xx, a throttle, a transport or
    untyped error) proves nothing, which the outcome rule does not allow a future to fail with."""
    if isinstance(error, rillet.OutcomeUnknown):
        return UNKNOWN
    if isinstance(error, rillet.RilletError) and 400 <= error.status < 500 and not error.retryable:
        return NOT_STORED
    return UNPROVEN


@dataclass
class Anomalies:
    """What a history shows, by kind (event lists sorted; ``reordered_keys`` are "w<writer>:k<key>")."""

    attempted: int
    acknowledged: int
    failed_not_stored: int  # futures failed with an error that claims the event is not stored
    outcome_unknown: int  # futures failed with OutcomeUnknown
    outcome_unknown_read: int  # ... of which the readers saw the event (allowed)
    failed_unproven: list[str]  # futures failed with an error that proves nothing (should be OutcomeUnknown)
    unresolved: list[str]  # futures that neither succeeded nor failed by the end of the run
    lost: list[str]  # acknowledged, never read
    duplicated: list[str]  # read more than once
    reordered_keys: list[str]  # a (writer, key) whose events were read out of write order
    unknown_read_late: list[str]  # OutcomeUnknown events read after later events of their key (allowed: below)
    failed_but_stored: list[str]  # failed with anything but OutcomeUnknown, yet read
    phantoms: list[str]  # read, never written
    failure_types: dict[str, int]  # failed futures per error type

    @property
    def violations(self) -> int:
        return (len(self.lost) + len(self.duplicated) + len(self.reordered_keys) + len(self.failed_but_stored)
                + len(self.phantoms) + len(self.unresolved) + len(self.failed_unproven))


class History:
    """Writes and reads of a concurrent run, recorded under one lock; ``check`` lists the violations."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempted: set[str] = set()
        self.acknowledged: set[str] = set()
        self.failed: dict[str, tuple[str, str]] = {}  # event -> (error type, NOT_STORED/UNKNOWN/UNPROVEN)
        self.write_order: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.reads: list[Read] = []
        self.checkpoints: list[tuple[int, str, str]] = []  # (global seq, reader, checkpoint name)
        self._gseq = 0

    def attempt(self, event: str) -> None:
        writer, key, seq = parse_event(event)
        with self.lock:
            self.attempted.add(event)
            self.write_order[(writer, key)].append(seq)

    def acknowledge(self, event: str) -> None:
        with self.lock:
            self.acknowledged.add(event)

    def fail(self, event: str, error_type: str, outcome: str) -> None:
        """The event's future failed, claiming ``outcome``: NOT_STORED, UNKNOWN or UNPROVEN."""
        with self.lock:
            self.failed[event] = (error_type, outcome)

    def read(self, reader: str, event: str) -> int:
        with self.lock:
            self._gseq += 1
            self.reads.append(Read(self._gseq, reader, event))
            return self._gseq

    def checkpoint(self, reader: str, name: str) -> None:
        with self.lock:
            self._gseq += 1
            self.checkpoints.append((self._gseq, reader, name))

    def read_count(self) -> int:
        with self.lock:
            return len(self.reads)

    def unread_acknowledged(self) -> set[str]:
        with self.lock:
            return self.acknowledged - {r.event for r in self.reads}

    def check(self) -> list[str]:
        """Every acknowledged event read exactly once; nothing read that was not written; per
        (writer, key) events read in the order they were written (by the global read sequence)."""
        problems: list[str] = []
        with self.lock:
            reads = sorted(self.reads, key=lambda r: r.gseq)
            counts = Counter(r.event for r in reads)
            for event, n in sorted(counts.items()):
                if n > 1:
                    who = [(r.gseq, r.reader) for r in reads if r.event == event]
                    problems.append(f"{event} read {n} times: {who}")
                if event not in self.attempted:
                    problems.append(f"{event} read but never written")
            for event in sorted(self.acknowledged - set(counts)):
                problems.append(f"acknowledged {event} never read")
            for event, (error_type, outcome) in sorted(self.failed.items()):
                if outcome != UNKNOWN and event in counts:
                    problems.append(f"{event} failed with {error_type} (not OutcomeUnknown) but was read")
                if outcome == UNPROVEN:
                    problems.append(f"{event} failed with {error_type}, which proves nothing: it should have "
                                    "been resent, or ended as OutcomeUnknown")
            last: dict[tuple[str, str], tuple[int, Read]] = {}
            for r in reads:
                writer, key, seq = parse_event(r.event)
                previous = last.get((writer, key))
                if previous is not None and seq < previous[0] and self._unknown(r.event):
                    pass  # an unknown outcome's late commit (see Anomalies.unknown_read_late)
                elif previous is not None and seq <= previous[0]:
                    problems.append(f"{writer}:{key}: seq {seq} read (gseq {r.gseq} by {r.reader}) after seq "
                                    f"{previous[0]} (gseq {previous[1].gseq} by {previous[1].reader})")
                if previous is None or seq > previous[0]:
                    last[(writer, key)] = (seq, r)
            for (writer, key), seqs in self.write_order.items():
                if seqs != sorted(seqs):
                    problems.append(f"{writer}:{key} written out of order by the test itself: {seqs}")
        return problems

    def _unknown(self, event: str) -> bool:
        """Whether the event's future failed with OutcomeUnknown (lock held). Such an event may be stored
        after later events of its key: its request may still be under way on the server when the writer
        gives up on it and sends what follows (docs/sdk.md, "Outcome unknown"), as a Kafka producer's or
        a Kinesis client's retried record may land after later ones. Acknowledged events keep their order."""
        return self.failed.get(event, (None, None))[1] == UNKNOWN

    def anomalies(self) -> Anomalies:
        """The history's violations counted by kind (``check`` lists the same ones, one line each)."""
        with self.lock:
            reads = sorted(self.reads, key=lambda r: r.gseq)
            counts = Counter(r.event for r in reads)
            highest: dict[tuple[str, str], int] = {}
            reordered: set[str] = set()
            late: list[str] = []
            for r in reads:
                writer, key, seq = parse_event(r.event)
                if seq < highest.get((writer, key), -1):
                    if self._unknown(r.event):
                        late.append(r.event)
                    else:
                        reordered.add(f"{writer}:{key}")
                highest[(writer, key)] = max(seq, highest.get((writer, key), -1))
            unknown = [e for e, (_, o) in self.failed.items() if o == UNKNOWN]
            return Anomalies(
                attempted=len(self.attempted),
                acknowledged=len(self.acknowledged),
                failed_not_stored=sum(1 for _, o in self.failed.values() if o == NOT_STORED),
                outcome_unknown=len(unknown),
                outcome_unknown_read=sum(1 for e in unknown if e in counts),
                failed_unproven=sorted(e for e, (_, o) in self.failed.items() if o == UNPROVEN),
                unresolved=sorted(self.attempted - self.acknowledged - set(self.failed)),
                lost=sorted(self.acknowledged - set(counts)),
                duplicated=sorted(e for e, n in counts.items() if n > 1),
                reordered_keys=sorted(reordered),
                unknown_read_late=sorted(late),
                failed_but_stored=sorted(e for e, (_, o) in self.failed.items() if o != UNKNOWN and e in counts),
                phantoms=sorted(e for e in counts if e not in self.attempted),
                failure_types=dict(Counter(t for t, _ in self.failed.values())),
            )
