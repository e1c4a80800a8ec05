"""Invariant 6: a crash between any two steps of a workflow leaves a state that the sweeper, or a
retry of the same request, brings to completion (or cleanly back).

For each workflow and each k = 1, 2, ...: fresh objects are set up, the workflow runs with the
process "dying" right before its k-th mutating AWS request (see crash.py), and then recovery runs:
either ``Sweeper(grace_ms=0).sweep()`` or the original request again. The end state must be the one
the uncrashed workflow reaches. The loop stops at the first k that the workflow survives (it needed
fewer than k mutating requests), so every gap between steps has been covered.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from crash import CrashInjector, SimulatedCrash

from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from rillet.errors import ScopeNotEmpty, ScopeNotFound, SegmentNotFound, StreamNotFound
from rillet.framing import frame
from rillet.keyspace import covers_exactly
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

STREAM = "s"
OLD = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2), tags=frozenset({"old", "kept"}))
NEW = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2), tags=frozenset({"new", "kept"}),
                          retention_policy=RetentionPolicy.by_size(1000, 10_000))
# Payload sizes appended to each segment before sealing/deleting: inline entries and an S3 object.
PAYLOADS = {0: [10, 5000], 1: [7]}


@dataclass
class Ctx:
    scope: str
    version: int | None = None  # the stream or scope record's version right after set-up
    lengths: dict[int, int] | None = None


@dataclass
class Workflow:
    name: str
    setup: Callable[[Controller, Ctx], None]
    run: Callable[[Controller, Ctx], Any]  # the original request; a retry sends it again
    untouched: Callable[[Controller, Ctx], None]  # what a crash before the first step leaves
    done: Callable[[Controller, Ctx], None]  # the workflow's end state
    subject: Callable[[Ctx], str]  # the sweeper's name for what it finishes
    sweep_outcome: str = "completed"
    min_steps: int = 2


@pytest.fixture
def controller(isolated_deployment) -> Controller:
    """Tables of this module's own: its sweeps must find only what its own crashes left behind."""
    return Controller.for_deployment(isolated_deployment("wfcrash"))


# -- helpers ----------------------------------------------------------------------------------------


def pending_for(c: Controller, ctx: Ctx, stream: str | None) -> list:
    found = []
    for item in c.store.pending_workflows(now_ms()):
        if stream is None and getattr(item, "stream", None) is None and item.sk == ctx.scope or stream is not None and getattr(item, "stream", None) == stream and item.scope == ctx.scope:
            found.append(item)
    return found


def fill(c: Controller, ctx: Ctx) -> None:
    ctx.lengths = {}
    for sid, sizes in PAYLOADS.items():
        name = segment_name(ctx.scope, STREAM, sid)
        for i, size in enumerate(sizes):
            c.segments.append(name, "writer", i, 1, frame(b"x" * size))
        ctx.lengths[sid] = c.segments.info(name).length
    assert ctx.lengths == {0: 14 + 5004, 1: 11}


def s3_keys(c: Controller, ctx: Ctx) -> list[str]:
    response = c.deployment.s3.list_objects_v2(Bucket=c.deployment.bucket, Prefix=f"segments/{ctx.scope}/{STREAM}/")
    return [o["Key"] for o in response.get("Contents", [])]


def tags_listed(c: Controller, ctx: Ctx, tag: str) -> list[str]:
    return c.streams.list_streams(ctx.scope, tag=tag)[0]


# -- create stream ----------------------------------------------------------------------------------

CREATE_CONFIG = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3), tags=frozenset({"t"}))


def create_setup(c, ctx):
    c.streams.create_scope(ctx.scope)


def create_run(c, ctx):
    return c.streams.create_stream(ctx.scope, STREAM, CREATE_CONFIG)


def create_untouched(c, ctx):
    with pytest.raises(StreamNotFound):
        c.store.get_stream(ctx.scope, STREAM)
    with pytest.raises(SegmentNotFound):
        c.segments.info(segment_name(ctx.scope, STREAM, 0))


def create_done(c, ctx):
    record = c.store.get_stream(ctx.scope, STREAM)
    assert record.state == StreamState.ACTIVE.value
    assert record.workflow is None and record.pending is None and record.pending_since is None
    assert pending_for(c, ctx, STREAM) == []
    info = c.streams.stream_info(ctx.scope, STREAM)
    assert info.configuration == CREATE_CONFIG
    assert [s.segment_id for s in info.current_segments] == [0, 1, 2]
    assert covers_exactly([s.key_range for s in info.current_segments], 0.0, 1.0)
    assert sorted(r.segment_id for r in c.store.list_segments(ctx.scope, STREAM)) == [0, 1, 2]
    for sid in (0, 1, 2):
        segment = c.segments.info(segment_name(ctx.scope, STREAM, sid))
        assert (segment.length, segment.sealed) == (0, False)
    assert tags_listed(c, ctx, "t") == [STREAM]


# -- update stream ----------------------------------------------------------------------------------


def update_setup(c, ctx):
    c.streams.create_scope(ctx.scope)
    c.streams.create_stream(ctx.scope, STREAM, OLD)
    ctx.version = c.store.get_stream(ctx.scope, STREAM).version


def update_run(c, ctx):
    return c.streams.update_stream(ctx.scope, STREAM, NEW)


def update_untouched(c, ctx):
    record = c.store.get_stream(ctx.scope, STREAM)
    assert (record.state, record.version, record.workflow) == (StreamState.ACTIVE.value, ctx.version, None)
    assert c.streams.stream_info(ctx.scope, STREAM).configuration == OLD


def update_done(c, ctx):
    record = c.store.get_stream(ctx.scope, STREAM)
    assert record.state == StreamState.ACTIVE.value
    assert record.workflow is None and record.pending is None
    assert pending_for(c, ctx, STREAM) == []
    assert c.streams.stream_info(ctx.scope, STREAM).configuration == NEW
    assert tags_listed(c, ctx, "new") == [STREAM]
    assert tags_listed(c, ctx, "old") == []


# -- seal stream ------------------------------------------------------------------------------------


def seal_setup(c, ctx):
    c.streams.create_scope(ctx.scope)
    c.streams.create_stream(ctx.scope, STREAM, OLD)
    fill(c, ctx)
    ctx.version = c.store.get_stream(ctx.scope, STREAM).version


def seal_run(c, ctx):
    return c.streams.seal_stream(ctx.scope, STREAM)


def seal_untouched(c, ctx):
    record = c.store.get_stream(ctx.scope, STREAM)
    assert (record.state, record.version) == (StreamState.ACTIVE.value, ctx.version)
    for segment in c.store.list_segments(ctx.scope, STREAM):
        assert segment.sealed_size is None
        assert not c.segments.info(segment_name(ctx.scope, STREAM, segment.segment_id)).sealed


def seal_done(c, ctx):
    record = c.store.get_stream(ctx.scope, STREAM)
    assert record.state == StreamState.SEALED.value
    assert record.workflow is None and record.pending is None
    assert pending_for(c, ctx, STREAM) == []
    segments = c.store.list_segments(ctx.scope, STREAM)
    assert sorted(s.segment_id for s in segments) == [0, 1]
    for segment in segments:
        assert segment.sealed_size == ctx.lengths[segment.segment_id]
        info = c.segments.info(segment_name(ctx.scope, STREAM, segment.segment_id))
        assert info.sealed and info.length == ctx.lengths[segment.segment_id]
    tail = {p.segment.segment_id: p.offset for p in c.streams.stream_info(ctx.scope, STREAM).tail}
    assert tail == ctx.lengths


# -- delete stream ----------------------------------------------------------------------------------


def delete_setup(c, ctx):
    seal_setup(c, ctx)
    c.streams.seal_stream(ctx.scope, STREAM)
    assert s3_keys(c, ctx)  # the large event lives in S3
    ctx.version = c.store.get_stream(ctx.scope, STREAM).version


def delete_run(c, ctx):
    return c.streams.delete_stream(ctx.scope, STREAM)


def delete_untouched(c, ctx):
    record = c.store.get_stream(ctx.scope, STREAM)
    assert (record.state, record.version, record.workflow) == (StreamState.SEALED.value, ctx.version, None)
    for sid, length in ctx.lengths.items():
        assert c.segments.info(segment_name(ctx.scope, STREAM, sid)).length == length
    assert c.segments.read(segment_name(ctx.scope, STREAM, 0), 0).data == frame(b"x" * 10) + frame(b"x" * 5000)


def delete_done(c, ctx):
    with pytest.raises(StreamNotFound):
        c.store.get_stream(ctx.scope, STREAM)
    assert pending_for(c, ctx, STREAM) == []
    assert c.store.list_segments(ctx.scope, STREAM) == []
    assert c.store.list_epochs(ctx.scope, STREAM) == []
    for sid in PAYLOADS:
        with pytest.raises(SegmentNotFound):
            c.segments.info(segment_name(ctx.scope, STREAM, sid))
    assert s3_keys(c, ctx) == []
    assert not c.store.scope_has_streams(ctx.scope)
    assert c.streams.delete_scope(ctx.scope) is True  # nothing left behind in the scope


# -- delete scope -----------------------------------------------------------------------------------


def scope_setup(c, ctx):
    c.streams.create_scope(ctx.scope)
    ctx.version = c.store.get_scope(ctx.scope).version


def scope_run(c, ctx):
    assert c.streams.delete_scope(ctx.scope) is True


def scope_untouched(c, ctx):
    record = c.store.get_scope(ctx.scope)
    assert (record.state, record.version, record.pending) == ("ACTIVE", ctx.version, None)


def scope_done(c, ctx):
    with pytest.raises(ScopeNotFound):
        c.store.get_scope(ctx.scope)
    assert pending_for(c, ctx, None) == []
    assert c.streams.delete_scope(ctx.scope) is False


def busy_scope_setup(c, ctx):
    c.streams.create_scope(ctx.scope)
    c.streams.create_stream(ctx.scope, STREAM, OLD)
    ctx.version = c.store.get_scope(ctx.scope).version


def busy_scope_run(c, ctx):
    with pytest.raises(ScopeNotEmpty):
        c.streams.delete_scope(ctx.scope)


def busy_scope_done(c, ctx):
    record = c.store.get_scope(ctx.scope)
    assert record.state == "ACTIVE" and record.pending is None and record.pending_since is None
    assert pending_for(c, ctx, None) == []
    assert c.store.get_stream(ctx.scope, STREAM).state == StreamState.ACTIVE.value
    # The scope is fully usable again: new streams can be created in it.
    assert c.streams.create_stream(ctx.scope, "another", OLD) is True


WORKFLOWS = [
    Workflow("create-stream", create_setup, create_run, create_untouched, create_done,
             lambda ctx: f"{ctx.scope}/{STREAM}", min_steps=5),
    Workflow("update-stream", update_setup, update_run, update_untouched, update_done,
             lambda ctx: f"{ctx.scope}/{STREAM}"),
    Workflow("seal-stream", seal_setup, seal_run, seal_untouched, seal_done,
             lambda ctx: f"{ctx.scope}/{STREAM}", min_steps=4),
    Workflow("delete-stream", delete_setup, delete_run, delete_untouched, delete_done,
             lambda ctx: f"{ctx.scope}/{STREAM}", min_steps=5),
    Workflow("delete-scope", scope_setup, scope_run, scope_untouched, scope_done, lambda ctx: ctx.scope),
    Workflow("delete-busy-scope", busy_scope_setup, busy_scope_run, scope_untouched, busy_scope_done,
             lambda ctx: ctx.scope, sweep_outcome="reverted"),
]


@pytest.mark.parametrize("recovery", ["sweeper", "retry"])
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda w: w.name)
def test_crash_before_every_step_is_recovered(controller: Controller, crash: CrashInjector, workflow: Workflow,
                                              recovery: str):
    tasks = controller.streams
    crash_points: list[str] = []  # the request each crash prevented, in order
    k = 1
    while True:
        ctx = Ctx(scope="f" + uuid.uuid4().hex[:12])
        workflow.setup(controller, ctx)
        crash.arm(k)
        try:
            workflow.run(controller, ctx)
        except SimulatedCrash as e:
            assert e.k == k
            crash_points.append(e.operation)
        finally:
            crash.disarm()
        if crash.crashed is None:
            # Survived: it needed fewer than k mutating requests, so every gap has been crashed in.
            assert len(crash.mutations) == k - 1, (crash.mutations, crash_points)
            workflow.done(controller, ctx)
            break

        if k == 1:
            # Crashed before its first durable step: nothing happened, and a plain retry works.
            workflow.untouched(controller, ctx)
            assert [o for o in Sweeper(tasks, grace_ms=0).sweep() if o.subject == workflow.subject(ctx)] == []
            workflow.run(controller, ctx)
        elif recovery == "sweeper":
            outcomes = Sweeper(tasks, grace_ms=0).sweep()
            mine = [o for o in outcomes if o.subject == workflow.subject(ctx)]
            assert [o.outcome for o in mine] == [workflow.sweep_outcome], (k, crash_points[-1], outcomes)
            assert all(o.outcome in ("completed", "reverted") for o in outcomes), outcomes
        else:
            workflow.run(controller, ctx)
        try:
            workflow.done(controller, ctx)
        except AssertionError as e:
            raise AssertionError(f"{workflow.name}: after a crash before mutating request #{k} "
                                 f"({crash_points[-1]}) and recovery by {recovery}: {e}") from e
        # Recovery is complete: the sweeper finds nothing more to do for it.
        assert [o for o in Sweeper(tasks, grace_ms=0).sweep() if o.subject == workflow.subject(ctx)] == []
        k += 1

    assert len(crash_points) >= workflow.min_steps, crash_points  # the loop cannot pass vacuously
    assert len(crash_points) > 1
