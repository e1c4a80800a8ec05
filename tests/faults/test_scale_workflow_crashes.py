"""Invariant 6 for scaling (and truncation): a crash before any mutating request of the workflow leaves
a state that the sweeper, or a retry of the same request, completes.

For k = 1, 2, ... a fresh stream is set up and the request runs with the process "dying" right before
its k-th mutating AWS request (crash.py). Then recovery runs (``Sweeper(grace_ms=0).sweep()`` or the
same request again) and the end state must be the one an uninterrupted request reaches: the stream
ACTIVE at the new epoch, the old segments sealed in the data plane with their sealed sizes recorded,
the new segments created, successors and predecessors recorded, no workflow pending. The loop ends at
the first k the request survives, so every gap between two steps has been crashed in.
"""

from __future__ import annotations

import uuid

import pytest
from crash import CrashInjector, SimulatedCrash

from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from rillet.errors import SegmentNotFound, Truncated
from rillet.framing import frame
from rillet.keyspace import segment_id
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

STREAM = "s"
# framed payload sizes appended to segments 0, 1, 2 before the scale (one of them an S3 object)
PAYLOADS = {0: [10, 5000], 1: [7, 3], 2: [20]}
N1, N2, N3 = (segment_id(1, n) for n in (3, 4, 5))


def pending_for(c: Controller, scope: str) -> list:
    return [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope]


def setup_stream(c: Controller, scope: str) -> dict[int, int]:
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    lengths = {}
    for sid, sizes in PAYLOADS.items():
        name = segment_name(scope, STREAM, sid)
        for i, size in enumerate(sizes):
            c.segments.append(name, "w", i, 1, frame(b"p" * size))
        lengths[sid] = c.segments.info(name).length
    return lengths


def scale_request(c: Controller, scope: str) -> tuple[list[int], list[tuple[float, float]]]:
    """Seal segments 0 and 1 ([0, 1/3) and [1/3, 2/3)); new: [0, .2) [.2, .5) [.5, 2/3) — a split of
    each and a merge of their middle parts."""
    s0, s1, _ = c.streams.current_segments(scope, STREAM)
    return [s0.segment_id, s1.segment_id], [(0.0, 0.2), (0.2, 0.5), (0.5, s1.high)]


def assert_untouched(c: Controller, scope: str, lengths: dict[int, int]) -> None:
    record = c.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.current_epoch == 0 and record.workflow is None
    assert [s.segment_id for s in c.streams.current_segments(scope, STREAM)] == [0, 1, 2]
    for sid, length in lengths.items():
        info = c.segments.info(segment_name(scope, STREAM, sid))
        assert (info.length, info.sealed) == (length, False)
    for sid in (N1, N2, N3):
        with pytest.raises(SegmentNotFound):
            c.segments.info(segment_name(scope, STREAM, sid))
    assert pending_for(c, scope) == []


def assert_scaled(c: Controller, scope: str, lengths: dict[int, int]) -> None:
    tasks = c.streams
    record = c.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value, record.state
    assert record.current_epoch == 1 and record.segment_count == 6
    assert record.workflow is None and record.pending is None and record.pending_since is None
    assert pending_for(c, scope) == []
    assert tasks.scale_status(scope, STREAM, 1) == "DONE"
    current = [(s.segment_id, s.low, s.high) for s in tasks.current_segments(scope, STREAM)]
    third = c.store.get_segments(scope, STREAM, [2])[0]
    assert current == [(N1, 0.0, 0.2), (N2, 0.2, 0.5), (N3, 0.5, third.low), (2, third.low, 1.0)]
    assert [e.epoch for e in c.store.list_epochs(scope, STREAM)] == [0, 1]
    # old segments: sealed in the data plane, sizes and epoch recorded
    for sid in (0, 1):
        info = c.segments.info(segment_name(scope, STREAM, sid))
        assert info.sealed and info.length == lengths[sid]
        (seg,) = c.store.get_segments(scope, STREAM, [sid])
        assert (seg.sealed_size, seg.sealed_epoch) == (lengths[sid], 1)
    info = c.segments.info(segment_name(scope, STREAM, 2))
    assert not info.sealed and info.length == lengths[2]
    assert c.store.get_segments(scope, STREAM, [2])[0].sealed_size is None
    # new segments: exist, empty, open
    for sid in (N1, N2, N3):
        info = c.segments.info(segment_name(scope, STREAM, sid))
        assert (info.length, info.sealed) == (0, False)
    # successors and predecessors
    assert [s.segment.segment_id for s in tasks.successors(scope, STREAM, 0)] == [N1, N2]
    assert [s.segment.segment_id for s in tasks.successors(scope, STREAM, 1)] == [N2, N3]
    assert tasks.successors(scope, STREAM, 2) == []
    assert [p.segment_id for p in tasks.predecessors(scope, STREAM, N1)] == [0]
    assert [p.segment_id for p in tasks.predecessors(scope, STREAM, N2)] == [0, 1]
    assert [p.segment_id for p in tasks.predecessors(scope, STREAM, N3)] == [1]
    (n2_info,) = [s for s in tasks.successors(scope, STREAM, 0) if s.segment.segment_id == N2]
    assert [p.segment_id for p in n2_info.predecessors] == [0, 1]


@pytest.mark.parametrize("recovery", ["sweeper", "retry"])
def test_scale_crashed_before_every_step_is_recovered(controller: Controller, crash: CrashInjector, recovery: str):
    tasks = controller.streams
    crash_points: list[str] = []
    k = 1
    while True:
        scope = "f" + uuid.uuid4().hex[:12]
        lengths = setup_stream(controller, scope)
        seal, ranges = scale_request(controller, scope)
        crash.arm(k)
        try:
            epoch = tasks.scale_stream(scope, STREAM, seal, ranges)
        except SimulatedCrash as e:
            assert e.k == k
            crash_points.append(e.operation)
        else:
            assert crash.crashed is None and len(crash.mutations) == k - 1
            assert epoch == 1
            assert_scaled(controller, scope, lengths)
            break
        finally:
            crash.disarm()

        where = f"crash before mutating request #{k} ({crash_points[-1]}), recovery by {recovery}"
        if not pending_for(controller, scope):
            # died before the workflow was recorded: nothing happened; the request can simply be sent again
            assert_untouched(controller, scope, lengths)
            assert tasks.scale_stream(scope, STREAM, seal, ranges) == 1, where
        elif recovery == "sweeper":
            record = controller.store.get_stream(scope, STREAM)
            assert record.state == StreamState.SCALING.value, where
            outcomes = [o for o in Sweeper(tasks, grace_ms=0).sweep() if o.subject == f"{scope}/{STREAM}"]
            assert [(o.workflow, o.outcome) for o in outcomes] == [("scale", "completed")], (where, outcomes)
        else:
            assert tasks.scale_stream(scope, STREAM, seal, ranges) == 1, where
        try:
            assert_scaled(controller, scope, lengths)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from e
        # a repeated request is answered from the finished scale; the sweeper has nothing more to do
        assert tasks.scale_stream(scope, STREAM, seal, ranges) == 1, where
        assert [o for o in Sweeper(tasks, grace_ms=0).sweep() if o.subject == f"{scope}/{STREAM}"] == [], where
        k += 1
    assert k > 3, crash_points
    assert crash_points[0] == "UpdateItem"  # the first step records the workflow on the stream


def truncation_setup(c: Controller, scope: str) -> dict[int, int]:
    """One segment (an S3 object and an inline entry) split in two, with data in both halves; returns
    the cut to truncate at (after the first event of each half), which lies wholly after segment 0."""
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    name = segment_name(scope, STREAM, 0)
    c.segments.append(name, "w", 0, 1, frame(b"p" * 5000))
    c.segments.append(name, "w", 1, 1, frame(b"q" * 10))
    c.streams.scale_stream(scope, STREAM, [0], [(0.0, 0.5), (0.5, 1.0)])
    cut = {}
    for sid in HALVES:
        name = segment_name(scope, STREAM, sid)
        c.segments.append(name, "w", 0, 1, frame(b"a" * 30))
        c.segments.append(name, "w", 1, 1, frame(b"b" * 40))
        cut[sid] = 34
    return cut


HALVES = (segment_id(1, 1), segment_id(1, 2))


def assert_truncated(c: Controller, scope: str, cut: dict[int, int]) -> None:
    record = c.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None and record.pending is None
    assert pending_for(c, scope) == []
    assert {p.segment.segment_id: p.offset for p in c.streams.head(scope, STREAM)} == cut
    with pytest.raises(SegmentNotFound):
        c.segments.info(segment_name(scope, STREAM, 0))
    for sid, offset in cut.items():
        name = segment_name(scope, STREAM, sid)
        assert c.segments.info(name).start_offset == offset
        with pytest.raises(Truncated):
            c.segments.read(name, offset - 1)
        assert c.segments.read(name, offset).data == frame(b"b" * 40)
    assert sum(s.end_offset - s.start_offset for s in c.streams.slices(scope, STREAM)) == 2 * 44


def test_truncation_crashed_before_every_step_is_recovered(controller: Controller, crash: CrashInjector):
    """Recovery alternates: the sweeper after a crash before an odd-numbered request, a retry of the
    same request after an even-numbered one."""
    tasks = controller.streams
    crash_points: list[str] = []
    k = 1
    while True:
        scope = "f" + uuid.uuid4().hex[:12]
        cut = truncation_setup(controller, scope)
        crash.arm(k)
        try:
            tasks.truncate_stream(scope, STREAM, cut)
        except SimulatedCrash as e:
            crash_points.append(e.operation)
        else:
            assert crash.crashed is None
            assert_truncated(controller, scope, cut)
            break
        finally:
            crash.disarm()
        recovery = "sweeper" if k % 2 else "retry"
        where = f"crash before mutating request #{k} ({crash_points[-1]}), recovery by {recovery}"
        if recovery == "sweeper":
            outcomes = [o for o in Sweeper(tasks, grace_ms=0).sweep() if o.subject == f"{scope}/{STREAM}"]
            assert [o.outcome for o in outcomes] == ([] if k == 1 else ["completed"]), (where, outcomes)
            if k == 1:
                tasks.truncate_stream(scope, STREAM, cut)
        else:
            tasks.truncate_stream(scope, STREAM, cut)
        try:
            assert_truncated(controller, scope, cut)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from e
        k += 1
    assert k > 3, crash_points
