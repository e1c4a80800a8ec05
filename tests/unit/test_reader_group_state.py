"""The reader group's shared state: pure transitions of controlplane.reader_groups with fake successors.

Segments come from a :class:`history.ScalingHistory`; ``successors`` answers from it as the controller
would. Keys of held segments are ``"sc/st/<segment id>"``.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controlplane.reader_groups import (
    MAX_STATE_BYTES,
    GroupState,
    add_reader,
    checkpoint_info,
    expire_readers,
    initiate_checkpoint,
    new_state,
    reader_offline,
    schedule_lease_check,
    sync,
)
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import AlreadyExists, IllegalState, NotFound, ReaderNotInReaderGroup
from rillet.models import (
    MAX_OUTSTANDING_CHECKPOINTS,
    ReaderGroupConfig,
    SegmentPosition,
    StreamRange,
    SuccessorInfo,
)
from rillet.stream_cut import Ordering, StreamCut, compare_positions, validity_problem

try:
    from history import ScalingHistory, histories
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import ScalingHistory, histories

STREAM = "sc/st"


class Group:
    """A GroupState with a fake controller answering successors from a ScalingHistory."""

    def __init__(self, history: ScalingHistory, start: dict[int, int] | None = None,
                 end: dict[int, int] | None = None, **config) -> None:
        self.history = history
        start = start if start is not None else {s: 0 for s in history.epochs[0]}
        end_positions = None if end is None else [SegmentPosition(segment=history.segments[s], offset=o)
                                                  for s, o in end.items()]
        config.setdefault("automatic_checkpoint_interval_ms", 0)
        cfg = ReaderGroupConfig(streams=[StreamRange(scope="sc", stream="st", end=end_positions)], **config)
        self.state: GroupState = new_state(cfg, {STREAM: [
            SegmentPosition(segment=history.segments[s], offset=o) for s, o in start.items()]})
        self.now = 1_000_000
        self.successor_calls: list[int] = []

    def successors(self, stream: str, sid: int, incarnation: int | None) -> list[SuccessorInfo]:
        assert stream == STREAM
        self.successor_calls.append(sid)
        return [SuccessorInfo(segment=self.history.segments[s],
                              predecessors=[self.history.segments[p] for p in self.history.predecessors(s)])
                for s in self.history.successors(sid)]

    def add(self, *readers: str) -> None:
        for reader in readers:
            add_reader(self.state, reader, self.now)

    def sync(self, reader: str, positions: dict[int, int] | None = None, completed: dict[int, int] | None = None,
             checkpoint: str | None = None, now: int | None = None):
        request = SyncRequest(
            positions=[SegmentOffset(stream=STREAM, segment_id=s, offset=o) for s, o in (positions or {}).items()],
            completed=[SegmentOffset(stream=STREAM, segment_id=s, offset=o) for s, o in (completed or {}).items()],
            checkpoint=checkpoint)
        return sync(self.state, reader, request, self.now if now is None else now, self.successors)

    def held(self, reader: str) -> dict[int, int]:
        return {h.segment.segment_id: h.offset for h in self.state.readers[reader].segments.values()}

    def unassigned(self) -> dict[int, int]:
        return {h.segment.segment_id: h.offset for h in self.state.unassigned.values()}

    def future(self) -> set[int]:
        return {w.held.segment.segment_id for w in self.state.future.values()}

    def offline(self, reader: str, position: dict[int, int] | None) -> None:
        reader_offline(self.state, reader, None if position is None else [
            SegmentOffset(stream=STREAM, segment_id=s, offset=o) for s, o in position.items()])

    def checkpoint(self, name: str) -> None:
        initiate_checkpoint(self.state, name, False, self.now)

    def last_cut(self) -> dict[int, int]:
        info = self.state.last_checkpoint
        assert info is not None and info.complete
        (cut,) = info.cuts
        assert validity_problem([p.segment for p in cut.positions]) is None
        return {p.segment.segment_id: p.offset for p in cut.positions}


def seed_004() -> tuple[ScalingHistory, int, int, int]:
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s1, s2 = history.current
    history.scale(0, 2, [])
    return history, s1, s2, history.current[0]


def ids(assignment) -> set[int]:
    return {a.segment.segment_id for a in assignment.segments}


# -- successors and their predecessors -----------------------------------------------------------


def test_seed_004_merged_successor_is_held_until_the_other_predecessor_is_read():
    """R1 reads S1, R2 reads S2; S1 and S2 merge into S3. S3 is not handed out until S2 completes."""
    history, s1, s2, s3 = seed_004()
    g = Group(history)
    g.add("r1", "r2")
    assert ids(g.sync("r1")) == {s1}
    assert ids(g.sync("r2")) == {s2}
    assert ids(g.sync("r1", completed={s1: 100})) == set()
    assert g.future() == {s3} and g.unassigned() == {}
    for _ in range(2):  # nobody gets S3 while R2 still reads S2
        assert ids(g.sync("r1")) == set()
        assert ids(g.sync("r2", positions={s2: 50})) == {s2}
    assert g.held("r2") == {s2: 50}
    assert not g.state.end_of_data()
    # S2 done: S3 becomes available at its beginning and is acquired
    assert ids(g.sync("r2", completed={s2: 80})) == {s3}
    assert g.held("r2") == {s3: 0} and g.future() == set()


def test_completions_are_remembered_while_a_successor_waits_and_forgotten_once_it_is_handed_out():
    """The group's record must not grow with the streams' history: S1's completion is needed while S3
    waits for S2 (to release S3 and as the group's position on S1's keys), and by nothing once S3 is
    handed out."""
    history, s1, s2, s3 = seed_004()
    g = Group(history)
    g.add("r1", "r2")
    g.sync("r1")
    g.sync("r2")
    g.sync("r1", completed={s1: 100})
    assert set(g.state.completed) == {f"{STREAM}/{s1}"}
    (cut,) = g.state.cuts(g.state.current_positions())
    assert {p.segment.segment_id: p.offset for p in cut.positions} == {s1: 100, s2: 0}
    g.sync("r2", completed={s2: 80})
    assert g.held("r2") == {s3: 0}
    assert g.state.completed == {}
    (cut,) = g.state.cuts(g.state.current_positions())
    assert {p.segment.segment_id: p.offset for p in cut.positions} == {s3: 0}


def test_completions_stay_bounded_through_many_scale_events():
    """A stream that splits and merges 300 times: the group remembers only the completions that are
    its newest position on some key, never more than the stream's width."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    g = Group(history)
    g.add("r1", "r2")
    for i in range(300):
        current = history.current
        if len(current) < 4 or i % 3 == 0:
            s = history.segments[current[i % len(current)]]
            history.scale(i % len(current), 1, [(s.low + s.high) / 2])
        else:
            history.scale(i % (len(current) - 1), 2, [])
        for reader in ("r1", "r2"):
            sealed = {s: 10 for s in g.held(reader) if s not in history.current}
            g.sync(reader, completed=sealed)
        assert len(g.state.completed) <= len(history.current), i
    g.checkpoint("cp")
    g.sync("r1", checkpoint="cp")
    g.sync("r2", checkpoint="cp")
    assert set(g.last_cut()) == set(g.held("r1")) | set(g.held("r2")) | set(g.unassigned())


def test_split_successors_are_released_at_once_and_shared_fairly():
    history = ScalingHistory.start([0.0, 1.0])
    (s0,) = history.current
    history.scale(0, 1, [0.25, 0.5, 0.75])
    g = Group(history)
    g.add("r1", "r2")
    assert ids(g.sync("r1")) == {s0}
    assert ids(g.sync("r2")) == set()
    assignment = g.sync("r1", completed={s0: 10})
    assert g.future() == set()
    assert len(assignment.segments) == 2  # fair share of 4 successors between 2 readers
    assert all(a.offset == 0 for a in assignment.segments)
    assert len(g.sync("r2").segments) == 2
    assert set(g.held("r1")) | set(g.held("r2")) == set(history.current)


def test_successors_are_asked_for_once_per_completed_segment():
    history, s1, s2, s3 = seed_004()
    g = Group(history)
    g.add("r1")
    g.sync("r1")
    g.sync("r1", completed={s1: 1, s2: 2})
    assert sorted(g.successor_calls) == sorted([s1, s2])
    assert g.held("r1") == {s3: 0}
    # a retried completion (the reader no longer holds it) is ignored
    g.sync("r1", completed={s1: 1})
    assert g.held("r1") == {s3: 0} and g.unassigned() == {}


def test_successors_beyond_the_end_cut_are_never_handed_out():
    history = ScalingHistory.start([0.0, 1.0])
    (s0,) = history.current
    history.scale(0, 1, [0.5])
    a, b = history.current
    history.scale(0, 2, [])
    (m,) = history.current
    history.scale(0, 1, [0.5])
    # end cut at the split segments: S0 is read to its end, A and B up to the cut, M never
    g = Group(history, end={a: 30, b: 40})
    g.add("r1")
    assert ids(g.sync("r1")) == {s0}
    assignment = g.sync("r1", completed={s0: 99})
    assert {x.segment.segment_id: x.end_offset for x in assignment.segments} == {a: 30, b: 40}
    g.sync("r1", completed={a: 30})
    assert g.future() == set() and g.unassigned() == {}
    assignment = g.sync("r1", completed={b: 40})
    assert assignment.segments == [] and assignment.end_of_data
    assert g.future() == set() and g.unassigned() == {}
    assert sorted(g.successor_calls) == [s0]  # nothing past the end cut was even looked up

    # end cut at the merged segment: M is handed out with its end offset, its successors are not
    g = Group(history, end={m: 10})
    g.add("r1")
    g.sync("r1")
    g.sync("r1", completed={s0: 99})
    g.sync("r1", completed={a: 5})
    assignment = g.sync("r1", completed={b: 7})
    assert [(x.segment.segment_id, x.end_offset) for x in assignment.segments] == [(m, 10)]
    assignment = g.sync("r1", completed={m: 10})
    assert assignment.segments == [] and assignment.end_of_data and g.future() == set()


def test_start_segments_past_the_end_cut_are_not_read_and_those_at_it_are_complete():
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    left, right = history.current
    history.scale(1, 1, [0.75])  # right splits into r1, r2
    r1, r2 = history.current[1:]
    # start at {left@5, r1@0, r2@0}; end at {left@5, right@20}: r1 and r2 lie after the end cut
    g = Group(history, start={left: 5, r1: 0, r2: 0}, end={left: 5, right: 20})
    assert g.unassigned() == {} and g.state.end_of_data()
    g.add("r1")
    assert g.sync("r1").end_of_data


# -- assignment -------------------------------------------------------------------------------------


def test_fair_share_acquisition():
    history = ScalingHistory.start([i / 5 for i in range(5)] + [1.0])
    g = Group(history)
    g.add("a", "b", "c")
    for reader in ("a", "b", "c"):
        g.sync(reader)
    counts = [len(g.held(r)) for r in ("a", "b", "c")]
    assert max(counts) <= math.ceil(5 / 3) and sum(counts) == 5
    held = [s for r in ("a", "b", "c") for s in g.held(r)]
    assert sorted(held) == sorted(history.current)  # each segment to exactly one reader
    g = Group(history)
    g.add(*"abcde")
    for reader in "abcde":
        assert len(g.sync(reader).segments) == 1


def test_no_acquisition_while_a_checkpoint_is_outstanding():
    history = ScalingHistory.start([0.0, 0.25, 0.5, 0.75, 1.0])
    g = Group(history)
    g.add("r1", "r2")
    assert len(g.sync("r1").segments) == 2
    g.checkpoint("cp")
    assignment = g.sync("r2")
    assert assignment.segments == [] and assignment.checkpoint == "cp" and not assignment.silent
    assert len(g.unassigned()) == 2
    assert g.sync("r1", checkpoint="cp").checkpoint is None
    assert g.sync("r2").segments == []  # r2 has not passed it yet
    assert checkpoint_info(g.state, "cp").complete is False
    assignment = g.sync("r2", checkpoint="cp")  # the last one passes: done, and r2 acquires
    assert checkpoint_info(g.state, "cp").complete is True
    assert len(assignment.segments) == 2 and g.unassigned() == {}


def test_checkpoint_completes_when_every_online_reader_passed_with_their_positions():
    history = ScalingHistory.start([0.0, 1 / 3, 2 / 3, 1.0])
    s0, s1, s2 = history.current
    g = Group(history)
    g.add("r1", "r2")
    g.sync("r1")
    g.sync("r2")
    g.sync("r1", positions={s0: 10, s1: 20})
    g.sync("r2", positions={s2: 5})
    assert g.held("r1") == {s0: 10, s1: 20}
    g.checkpoint("cp")
    g.add("late")  # joined after the checkpoint began: not waited for
    assert g.sync("late").checkpoint is None
    g.sync("r1", positions={s0: 12, s1: 20}, checkpoint="cp")
    g.sync("r1", positions={s0: 15, s1: 21})  # reads on past the checkpoint
    assert g.state.last_checkpoint is None
    with pytest.raises(NotFound):
        checkpoint_info(g.state, "nope")
    g.sync("r2", positions={s2: 7}, checkpoint="cp")
    assert g.state.checkpoints == []
    assert g.last_cut() == {s0: 12, s1: 20, s2: 7}
    # passing a checkpoint twice (a retried request) changes nothing
    g.sync("r1", checkpoint="cp")
    assert g.last_cut() == {s0: 12, s1: 20, s2: 7}


def test_checkpoint_with_no_reader_online_completes_at_once():
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    g = Group(history)
    g.checkpoint("cp")
    assert g.last_cut() == {s: 0 for s in history.current}


def test_segment_completed_before_passing_counts_at_its_end():
    history = ScalingHistory.start([0.0, 1.0])
    (s0,) = history.current
    history.scale(0, 1, [0.5])
    a, b = history.current
    g = Group(history)
    g.add("r1", "r2")
    g.sync("r1")
    g.sync("r2")
    g.checkpoint("cp")
    g.sync("r2", checkpoint="cp")
    g.sync("r1", completed={s0: 70})  # finished S0, then passes
    assert g.unassigned() == {a: 0, b: 0}  # released, but not acquired during the checkpoint
    assert g.held("r1") == {}
    g.sync("r1", checkpoint="cp")
    assert g.last_cut() == {s0: 70}
    g.sync("r2")
    assert set(g.held("r1")) | set(g.held("r2")) == {a, b}


def test_checkpoint_cut_covers_segments_read_past_a_split_while_the_merge_waits():
    """A splits into A1, A2; A1, A2 and B then merge into M. With A, A1 and A2 read to their ends and B
    still being read, the group's position is {A1@end, A2@end, B@x}: a cut at A's end instead would
    make a group restarted from it read A1 and A2 again."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    a, b = history.current
    history.scale(0, 1, [0.25])
    a1, a2 = history.current[:2]
    history.scale(0, 3, [])
    (m,) = history.current
    g = Group(history)
    g.add("r1", "r2")
    assert ids(g.sync("r1")) == {a}
    assert ids(g.sync("r2")) == {b}
    assert ids(g.sync("r1", completed={a: 50})) == {a1, a2}
    g.sync("r1", completed={a1: 7, a2: 9})
    assert g.future() == {m}
    g.sync("r2", positions={b: 40})
    frontier = {a1: 7, a2: 9, b: 40}

    (cut,) = g.state.cuts(g.state.current_positions())
    assert {p.segment.segment_id: p.offset for p in cut.positions} == frontier
    g.checkpoint("cp")
    g.sync("r1", checkpoint="cp")
    g.sync("r2", positions={b: 40}, checkpoint="cp")
    assert g.last_cut() == frontier

    # Restarting from the checkpoint reads on from there: nothing of A1 or A2 again.
    restarted = Group(history, start=g.last_cut())
    restarted.add("x")
    restarted.sync("x")
    assert restarted.held("x") == {a1: 7, a2: 9, b: 40}


def test_checkpoint_cut_is_never_before_what_was_read():
    """The same, checked against the positions actually read, with the stream cut comparison."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    a, b = history.current
    history.scale(0, 1, [0.25])
    a1, a2 = history.current[:2]
    history.scale(0, 3, [])
    g = Group(history)
    g.add("r1", "r2")
    g.sync("r1")
    g.sync("r2")
    g.sync("r1", completed={a: 50})
    g.sync("r1", completed={a1: 7, a2: 9})
    g.checkpoint("cp")
    g.sync("r1", checkpoint="cp")
    g.sync("r2", positions={b: 40}, checkpoint="cp")
    (body,) = g.state.last_checkpoint.cuts
    cut = StreamCut.of("sc", "st", list(body.positions))
    read = [SegmentPosition(segment=history.segments[s], offset=o) for s, o in {a1: 7, a2: 9, b: 40}.items()]
    assert compare_positions(list(cut.positions), read) in (Ordering.EQUAL, Ordering.AFTER)


def test_a_checkpoint_has_a_cut_of_the_stream_after_a_scale_that_splits_and_merges_at_once():
    """F [0,.5) and N [.5,1) are replaced in one scale by G1 [0,.25) and G2 [.25,1): G1's only
    predecessor is F, so G1 is handed out once F is read, while G2 waits for N. The group's position
    (G1 at x on [0,.25), F at its end on [.25,.5), N at y) must still give the checkpoint (and
    get_stream_cuts, and unread bytes) a valid cut of the stream; without one the checkpoint is
    useless for resuming and unread_bytes counts nothing for the stream."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    f, n = history.current
    history.scale(0, 2, [0.25])
    g1, g2 = history.current
    g = Group(history)
    g.add("r1", "r2")
    assert ids(g.sync("r1")) == {f}
    assert ids(g.sync("r2")) == {n}
    assert ids(g.sync("r1", completed={f: 50})) == {g1}
    assert g.future() == {g2}
    g.sync("r1", positions={g1: 3})
    g.sync("r2", positions={n: 5})
    g.checkpoint("cp")
    g.sync("r1", positions={g1: 3}, checkpoint="cp")
    g.sync("r2", positions={n: 5}, checkpoint="cp")
    assert checkpoint_info(g.state, "cp").complete
    assert len(g.state.last_checkpoint.cuts) == 1, "the completed checkpoint has no cut of the stream"
    g.last_cut()  # valid
    assert len(g.state.cuts(g.state.current_positions())) == 1, "the group has no position in the stream"


def test_rebalance_at_a_checkpoint_releases_the_surplus_to_a_new_reader():
    history = ScalingHistory.start([0.0, 0.25, 0.5, 0.75, 1.0])
    g = Group(history)
    g.add("r1")
    assert len(g.sync("r1").segments) == 4  # alone: takes everything
    g.sync("r1", positions={s: 10 + i for i, s in enumerate(history.current)})
    reported = g.held("r1")
    g.add("r2")
    assert g.sync("r2").segments == []  # nothing unassigned: it must wait for a checkpoint
    g.checkpoint("cp")
    assignment = g.sync("r1", checkpoint="cp")
    assert len(assignment.segments) == 2
    released = g.unassigned()
    assert len(released) == 2 and all(reported[s] == o for s, o in released.items())
    g.sync("r2", checkpoint="cp")
    assert g.held("r2") == released  # at the positions r1 had reached
    assert set(g.held("r1")).isdisjoint(g.held("r2"))


def test_no_rebalance_without_a_short_reader():
    history = ScalingHistory.start([0.0, 0.25, 0.5, 0.75, 1.0])
    g = Group(history)
    g.add("r1")
    g.sync("r1")
    g.checkpoint("cp")
    assert len(g.sync("r1", checkpoint="cp").segments) == 4


# -- readers going offline --------------------------------------------------------------------------


def test_reader_offline_with_a_position_puts_its_segments_back_there():
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s0, s1 = history.current
    g = Group(history)
    g.add("r1")
    g.sync("r1")
    g.sync("r1", positions={s0: 10, s1: 20})
    g.offline("r1", {s0: 15, s1: 25})
    assert g.unassigned() == {s0: 15, s1: 25} and "r1" not in g.state.readers
    g.add("r2")
    g.sync("r2")
    assert g.held("r2") == {s0: 15, s1: 25}
    # no position: the last reported one; a position for a segment it does not hold is ignored
    g.sync("r2", positions={s0: 30, s1: 31})
    g.offline("r2", None)
    assert g.unassigned() == {s0: 30, s1: 31}
    g.add("r3")
    g.sync("r3")
    g.offline("r3", {s0: 40, 12345: 9})
    assert g.unassigned() == {s0: 40, s1: 31}
    g.offline("ghost", {s0: 99})  # unknown reader: nothing happens
    assert g.unassigned() == {s0: 40, s1: 31}
    with pytest.raises(IllegalState):
        g.sync("r3")


def test_reader_offline_releases_a_pending_checkpoint():
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s0, s1 = history.current
    g = Group(history)
    g.add("r1", "r2")
    g.sync("r1")
    g.sync("r2")
    g.checkpoint("cp")
    g.sync("r1", positions={s0: 3}, checkpoint="cp")
    assert g.state.checkpoints
    g.offline("r2", {s1: 8})
    assert g.state.checkpoints == []
    assert g.last_cut() == {s0: 3, s1: 8}


# -- checkpoint limits and automatic checkpoints ----------------------------------------------------


def test_max_outstanding_checkpoints_and_unique_names():
    history = ScalingHistory.start([0.0, 1.0])
    g = Group(history, max_outstanding_checkpoint_request=2)
    g.add("r1")
    g.sync("r1")
    g.checkpoint("a")
    with pytest.raises(AlreadyExists):
        g.checkpoint("a")
    g.checkpoint("b")
    with pytest.raises(IllegalState):
        g.checkpoint("c")
    assert [c.name for c in g.state.checkpoints] == ["a", "b"]
    assert g.sync("r1", checkpoint="a").checkpoint == "b"
    g.checkpoint("c")  # room again
    g.sync("r1", checkpoint="b")
    g.sync("r1", checkpoint="c")
    assert g.state.checkpoints == [] and g.state.last_checkpoint.name == "c"
    with pytest.raises(AlreadyExists):
        g.checkpoint("c")


def test_max_outstanding_checkpoint_request_has_a_ceiling():
    """The group record keeps every outstanding checkpoint, so their number is capped: 10 at most."""
    stream = StreamRange(scope="sc", stream="st")
    assert ReaderGroupConfig(streams=[stream], max_outstanding_checkpoint_request=MAX_OUTSTANDING_CHECKPOINTS)
    assert MAX_OUTSTANDING_CHECKPOINTS == 10
    with pytest.raises(ValidationError, match="less than or equal to 10"):
        ReaderGroupConfig(streams=[stream], max_outstanding_checkpoint_request=11)


def test_the_most_outstanding_checkpoints_fit_the_group_record_of_a_hundred_readers_and_segments():
    """Why the ceiling is 10: every outstanding checkpoint holds a position per live segment, and ten
    of them, passed by all but one of 100 readers on 100 segments, still fit the group's one item."""
    history = ScalingHistory.start([i / 100 for i in range(101)])
    g = Group(history, max_outstanding_checkpoint_request=MAX_OUTSTANDING_CHECKPOINTS)
    readers = [f"reader-{i:032d}" for i in range(100)]
    for reader in readers:
        add_reader(g.state, reader, g.now, instance="f" * 32)
        g.sync(reader)
    names = [f"checkpoint-{i}" for i in range(MAX_OUTSTANDING_CHECKPOINTS)]
    for name in names:
        g.checkpoint(name)
    for reader in readers[:-1]:
        for name in names:
            g.sync(reader, positions={s: 2**40 for s in g.held(reader)}, checkpoint=name)
    assert len(g.state.checkpoints) == MAX_OUTSTANDING_CHECKPOINTS
    assert len(json.dumps(g.state.model_dump(mode="json"))) < MAX_STATE_BYTES


def test_automatic_checkpoints_after_the_interval():
    history = ScalingHistory.start([0.0, 1.0])
    g = Group(history, automatic_checkpoint_interval_ms=1000)
    g.add("r1")
    t = 5_000_000
    assert g.sync("r1", now=t).checkpoint is None
    assert g.sync("r1", now=t + 999).checkpoint is None
    assignment = g.sync("r1", now=t + 1000)
    assert assignment.checkpoint == "auto-1"
    assert g.sync("r1", now=t + 1500).checkpoint == "auto-1"  # no second one while it is outstanding
    assert g.sync("r1", checkpoint="auto-1", now=t + 1600).checkpoint is None
    assert g.state.last_checkpoint.name == "auto-1"
    assert g.sync("r1", now=t + 1999).checkpoint is None
    assert g.sync("r1", now=t + 2000).checkpoint == "auto-2"  # the interval counts from the last one's start

    g = Group(history, automatic_checkpoint_interval_ms=0)
    g.add("r1")
    for dt in (0, 10**6, 10**9):
        assert g.sync("r1", now=t + dt).checkpoint is None
    assert g.state.checkpoints == [] and g.state.last_checkpoint is None


# -- a random walk of the whole protocol ------------------------------------------------------------


def frontier(g: Group, completed: dict[int, int]) -> dict[int, int] | None:
    """The oracle of the group's position: for every key, the newest segment the group holds or has
    ever completed (``completed``: every completion so far, which the group itself forgets once newer
    segments cover it), at its offset (a completed one at its end). None if those segments do not tile
    the key space (a scale that split one segment and merged another part of it with a neighbour)."""
    known = {h.segment.segment_id: h.offset for h in g.state.current_positions().values()}
    for sid, end in completed.items():
        known.setdefault(sid, end)
    chosen = {}
    for point in g.history.probe_points():
        chain = g.history.chain(point)
        newest = max((s for s in chain if s in known), key=chain.index)
        chosen[newest] = known[newest]
    if validity_problem([g.history.segments[s] for s in chosen]) is not None:
        return None
    return chosen


def positions(g: Group, offsets: dict[int, int]) -> list[SegmentPosition]:
    return [SegmentPosition(segment=g.history.segments[s], offset=o) for s, o in offsets.items()]


@settings(max_examples=150, deadline=None)
@given(histories(max_events=6), st.data())
def test_random_group_runs_keep_the_invariants(history, data):
    """Readers join, read, complete, checkpoint and leave at random. Invariants: a segment is held by at
    most one reader; it is handed out only after all its predecessors were completed; nothing is
    handed out while a checkpoint is outstanding; the group's stream cut is exactly its frontier (the
    newest position read on every key); a completed checkpoint's cut is valid, not before the frontier
    when it began and not after the frontier when it completed; every segment is eventually completed
    exactly once."""
    g = Group(history)
    lengths = {s: 10 + (s % 7) for s in history.segments}
    completed: list[int] = []
    names = iter(range(10**6))
    at_start: dict[str, dict[int, int] | None] = {}
    last_seen = None

    def check_position() -> None:
        nonlocal last_seen
        now = frontier(g, {s: lengths[s] for s in completed})
        cuts = g.state.cuts(g.state.current_positions())
        if now is not None:
            assert len(cuts) == 1
            assert {p.segment.segment_id: p.offset for p in cuts[0].positions} == now
        last = g.state.last_checkpoint
        if last is not None and last.name != last_seen:
            last_seen = last.name
            for cut in last.cuts:
                assert validity_problem([p.segment for p in cut.positions]) is None
            began = at_start[last.name]
            if began is not None and now is not None:
                assert len(last.cuts) == 1, "a checkpoint lost its cut"
                cut = list(last.cuts[0].positions)
                assert compare_positions(cut, positions(g, began)) in (Ordering.EQUAL, Ordering.AFTER)
                assert compare_positions(cut, positions(g, now)) in (Ordering.EQUAL, Ordering.BEFORE)

    g.add("r0")
    for _ in range(data.draw(st.integers(5, 60))):
        readers = sorted(g.state.readers)
        action = data.draw(st.sampled_from(["read", "read", "read", "join", "leave", "checkpoint"]))
        if action == "join" or not readers:
            g.add(f"r{next(names) + 1}")
            continue
        reader = data.draw(st.sampled_from(readers))
        if action == "leave":
            g.offline(reader, None)
            check_position()
            continue
        if action == "checkpoint":
            if len(g.state.checkpoints) < g.state.config.max_outstanding_checkpoint_request:
                name = f"cp{next(names)}"
                at_start[name] = frontier(g, {s: lengths[s] for s in completed})
                g.checkpoint(name)
                check_position()
            continue
        before = {k: {h.segment.segment_id for h in r.segments.values()} for k, r in g.state.readers.items()}
        outstanding = bool(g.state.checkpoints)
        held = g.held(reader)
        done = {s: lengths[s] for s in held if data.draw(st.booleans())}
        moved = {s: min(lengths[s], o + data.draw(st.integers(0, 5))) for s, o in held.items() if s not in done}
        pending = next((c.name for c in g.state.checkpoints if reader in c.pending), None)
        assignment = g.sync(reader, positions=moved, completed=done,
                            checkpoint=pending if data.draw(st.booleans()) else None)
        completed.extend(done)
        new = ids(assignment) - before[reader]
        if outstanding and g.state.checkpoints:
            assert not new, "acquired during a checkpoint"
        for s in new:
            assert set(history.predecessors(s)) <= set(completed), s
        owners = [s for r in g.state.readers.values() for s in r.segments]
        assert len(owners) == len(set(owners))
        check_position()
    # drain: everyone passes every checkpoint, one reader reads everything to the end
    for reader in sorted(g.state.readers):
        if reader != "drain":
            g.offline(reader, None)
    g.add("drain")
    for _ in range(len(history.segments) + 2):
        held = g.held("drain")
        pending = next((c.name for c in g.state.checkpoints if "drain" in c.pending), None)
        g.sync("drain", completed={s: lengths[s] for s in held}, checkpoint=pending)
        completed.extend(held)
    assert g.state.end_of_data()
    assert sorted(completed) == sorted(history.segments)


# -- reader leases ------------------------------------------------------------------------------------


def test_a_reader_not_seen_for_its_lease_is_taken_offline_by_another_readers_sync():
    """A reader killed without reader_offline: the next sync of another reader after its lease takes it
    offline at its last reported position, and its segments go to the others; coming back it is told
    it is no longer in the group (never a second copy of what another reader now reads)."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s0, s1 = history.current
    g = Group(history, reader_lease_ms=1_000, group_refresh_time_ms=100)
    t = g.now
    g.add("r1", "r2")
    assert ids(g.sync("r1", now=t)) == {s0}
    assert ids(g.sync("r2", now=t)) == {s1}
    g.sync("r1", positions={s0: 10}, now=t + 100)  # r1's last word
    assert ids(g.sync("r2", now=t + 1_099)) == {s1}  # within r1's lease: nothing changes
    assert "r1" in g.state.readers
    assert g.sync("r2", positions={s1: 5}, now=t + 1_100).segments  # r1's lease is over
    assert "r1" not in g.state.readers
    assert g.held("r2") == {s0: 10, s1: 5}
    with pytest.raises(ReaderNotInReaderGroup):
        g.sync("r1", positions={s0: 12}, now=t + 1_200)
    assert g.held("r2") == {s0: 10, s1: 5}


def test_expiring_leases_completes_the_checkpoint_a_dead_reader_held_up():
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s0, s1 = history.current
    g = Group(history, reader_lease_ms=1_000, group_refresh_time_ms=100)
    t = g.now
    g.add("r1", "r2")
    g.sync("r1", now=t)
    g.sync("r2", positions={}, now=t)
    g.sync("r2", positions={s1: 7}, now=t + 10)
    g.checkpoint("cp")
    g.sync("r1", positions={s0: 3}, checkpoint="cp", now=t + 500)
    assert expire_readers(g.state, t + 1_009) == []
    assert checkpoint_info(g.state, "cp").complete is False
    assert expire_readers(g.state, t + 1_010) == ["r2"]
    assert checkpoint_info(g.state, "cp").complete is True
    assert g.last_cut() == {s0: 3, s1: 7}
    assert g.unassigned() == {s1: 7}


def test_the_lease_deadline_is_at_or_before_every_online_readers_expiry_and_rarely_rewritten():
    """The group's lease deadline (what the control plane's sensor looks up) never lies after a reader's
    lease ends, moves only about twice per lease while readers stay alive, and is None with no reader."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    lease = 10_000
    g = Group(history, reader_lease_ms=lease, group_refresh_time_ms=1_000)
    t = g.now
    assert schedule_lease_check(g.state, t) is None
    g.add("r1")
    assert schedule_lease_check(g.state, t) == t + lease
    changes = 0
    for step in range(1, 51):  # 50 s of syncs every second; r2 joins at 30 s and stops at 44 s
        now = t + step * 1_000
        g.sync("r1", now=now)
        if step == 30:
            add_reader(g.state, "r2", now)
        if "r2" in g.state.readers and step < 45:
            g.sync("r2", now=now)
        before = g.state.lease_deadline_ms
        deadline = schedule_lease_check(g.state, now)
        changes += deadline != before
        assert deadline == g.state.lease_deadline_ms
        assert deadline > now
        assert all(deadline <= r.seen_ms + lease for r in g.state.readers.values())
    assert changes <= 50_000 // (lease // 2) + 2
    assert g.state.lease_deadline_ms <= t + 44_000 + lease
    assert expire_readers(g.state, t + 44_000 + lease - 1) == []
    assert expire_readers(g.state, t + 44_000 + lease) == ["r2"]
    g.offline("r1", None)
    assert schedule_lease_check(g.state, t + 60_000) is None


# -- reader names: one online instance each ---------------------------------------------------------


def test_a_second_instance_under_an_online_readers_name_is_refused():
    """Two readers created at once with one name: the first join wins, the second (another instance
    token) is refused with AlreadyExists naming the reader, and the group is as the first left it --
    never two readers sharing one entry's segments (a second copy of the data)."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    g = Group(history)
    add_reader(g.state, "r1", g.now, instance="a")
    assert len(g.sync("r1").segments) == 2
    before = g.state.model_dump()
    with pytest.raises(AlreadyExists, match="r1") as refused:
        add_reader(g.state, "r1", g.now + 1, instance="b")
    assert refused.value.status == 409 and refused.value.details["reader"] == "r1"
    assert g.state.model_dump() == before


def test_a_repeated_join_of_the_same_instance_is_accepted_and_changes_nothing():
    """A join whose answer was lost is sent again with the same token: accepted, same state."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    g = Group(history)
    add_reader(g.state, "r1", g.now, instance="a")
    add_reader(g.state, "r2", g.now, instance="c")
    g.sync("r1")
    before = g.state.model_dump()
    add_reader(g.state, "r1", g.now, instance="a")
    assert g.state.model_dump() == before


def test_joins_without_an_instance_token_stay_idempotent_by_name():
    """Older SDKs send no token: their joins are accepted by name, as before tokens existed."""
    history = ScalingHistory.start([0.0, 1.0])
    g = Group(history)
    add_reader(g.state, "r1", g.now)
    add_reader(g.state, "r1", g.now)
    add_reader(g.state, "r1", g.now, instance="a")
    add_reader(g.state, "r2", g.now, instance="a")
    add_reader(g.state, "r2", g.now)
    assert sorted(g.state.readers) == ["r1", "r2"]


def test_a_name_taken_offline_or_whose_lease_ended_can_join_again_as_another_instance():
    history = ScalingHistory.start([0.0, 1.0])
    g = Group(history, reader_lease_ms=1_000, group_refresh_time_ms=100)
    t = g.now
    add_reader(g.state, "r1", t, instance="a")
    g.offline("r1", None)
    add_reader(g.state, "r1", t, instance="b")  # reader_offline freed the name
    assert g.state.readers["r1"].instance == "b"
    with pytest.raises(AlreadyExists):
        add_reader(g.state, "r1", t + 999, instance="c")
    add_reader(g.state, "r1", t + 1_000, instance="c")  # b's lease ended: taken offline by this join
    assert g.state.readers["r1"].instance == "c" and g.state.readers["r1"].seen_ms == t + 1_000


def test_an_instance_whose_name_another_instance_took_over_is_not_in_the_group():
    """A reader frozen past its lease comes back after a new reader joined under its id: its syncs are
    refused (it would read the newcomer's segments a second time) and its goodbye takes nobody
    offline. Syncs and goodbyes without a token (older SDKs, the admin's reader_offline) go by name."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    g = Group(history, reader_lease_ms=1_000, group_refresh_time_ms=100)
    t = g.now
    add_reader(g.state, "r1", t, instance="a")
    g.sync("r1", now=t)
    add_reader(g.state, "r1", t + 1_000, instance="b")
    request = SyncRequest(instance="a")
    with pytest.raises(ReaderNotInReaderGroup):
        sync(g.state, "r1", request, t + 1_001, g.successors)
    reader_offline(g.state, "r1", None, instance="a")
    assert g.state.readers["r1"].instance == "b"
    assert len(sync(g.state, "r1", SyncRequest(instance="b"), t + 1_002, g.successors).segments) == 2
    assert len(g.sync("r1", now=t + 1_003).segments) == 2
    reader_offline(g.state, "r1", None)
    assert "r1" not in g.state.readers


def test_a_process_keeps_copies_of_group_records_within_its_byte_budget():
    """Pages let a state store in up to MAX_STATE_BYTES, so what a process keeps is bounded in bytes as
    well as in groups: the least recently read copies go first."""
    from controlplane.models import ReaderGroupRecord
    from controlplane.reader_groups.state import _RecordCopies

    def record(pk: str, size: int) -> ReaderGroupRecord:
        noise = random.Random(pk).randbytes(size).hex()  # deflates only to about size: 23 KB stored
        return ReaderGroupRecord(pk, "rg", scope="s", group=pk, state={"noise": noise}, version=1)

    copies = _RecordCopies(limit=64, limit_bytes=30_000)
    for pk in ("a", "b", "c"):
        copies.put(pk, "token", record(pk, 15_000), taken_ms=0)
    assert copies.get("a", "token", 1, 0) is None and copies.get("b", "token", 1, 0) is None
    assert copies.get("c", "token", 1, 0).state["noise"] == record("c", 15_000).state["noise"]
