"""The sweeper (controlplane.sweeper) on moto: grace period, finishing and reverting workflows.

These tests use their own tables: a sweep with a zero grace period picks up *every* pending workflow,
so other tests' leftovers must not be in the way.
"""

from __future__ import annotations

import pytest

from controlplane.models import ScopeRecord, workflow_shard
from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

pytestmark = pytest.mark.usefixtures("fast_botocore_sessions")  # speed only; see tests/conftest.py


class Interrupted(Exception):
    pass


@pytest.fixture
def controller(isolated_deployment):  # overrides the shared one: private tables
    return Controller.for_deployment(isolated_deployment("sweeper"))


@pytest.fixture
def scope(controller, unique) -> str:
    controller.streams.create_scope(unique)
    return unique


def _interrupt_segment_creation_after(controller, monkeypatch, n: int) -> None:
    created = []
    original = controller.segments.create

    def create(name, *args, **kwargs):
        if len(created) == n:
            raise Interrupted(name)
        created.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(controller.segments, "create", create)


def test_sweeper_respects_the_grace_period_then_finishes_a_create(controller, scope, monkeypatch):
    _interrupt_segment_creation_after(controller, monkeypatch, 1)
    with pytest.raises(Interrupted):
        controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    monkeypatch.undo()
    assert controller.store.get_stream(scope, "s").state == StreamState.CREATING.value

    # Young workflows probably still have a live caller: a sweep with a grace period leaves them alone.
    outcomes = Sweeper(controller.streams, grace_ms=60_000).sweep()
    assert [o for o in outcomes if o.subject == f"{scope}/s"] == []
    assert controller.store.get_stream(scope, "s").state == StreamState.CREATING.value

    outcomes = Sweeper(controller.streams, grace_ms=0).sweep()
    assert [(o.workflow, o.outcome) for o in outcomes if o.subject == f"{scope}/s"] == [("create", "completed")]
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.ACTIVE.value and record.workflow is None and record.pending is None
    for sid in range(3):
        assert controller.segments.info(segment_name(scope, "s", sid)).length == 0
    # Nothing is left for the next sweep.
    assert [i for i in controller.store.pending_workflows(now_ms()) if getattr(i, "stream", None) == "s"
            and i.scope == scope] == []
    assert [o for o in Sweeper(controller.streams, grace_ms=0).sweep() if o.subject == f"{scope}/s"] == []


def test_sweeper_finishes_an_interrupted_seal(controller, scope, monkeypatch):
    tasks = controller.streams
    tasks.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    original = controller.segments.seal
    calls = []

    def seal(name, *incarnation):
        if calls:
            raise Interrupted(name)
        calls.append(name)
        return original(name, *incarnation)

    monkeypatch.setattr(controller.segments, "seal", seal)
    with pytest.raises(Interrupted):
        tasks.seal_stream(scope, "s")
    monkeypatch.undo()
    assert controller.store.get_stream(scope, "s").state == StreamState.SEALING.value

    outcomes = Sweeper(tasks, grace_ms=0).sweep()
    assert [(o.workflow, o.outcome) for o in outcomes if o.subject == f"{scope}/s"] == [("seal", "completed")]
    assert controller.store.get_stream(scope, "s").state == StreamState.SEALED.value
    assert all(controller.segments.info(segment_name(scope, "s", sid)).sealed for sid in (0, 1))


def test_sweeper_reverts_a_scope_delete_that_found_streams(controller, scope):
    tasks, store = controller.streams, controller.store
    tasks.create_stream(scope, "s", StreamConfiguration())
    # A delete that marked the scope and then died before checking for streams.
    record = store.get_scope(scope)
    store.update(record, [ScopeRecord.state.set("DELETING"), ScopeRecord.pending.set(workflow_shard(record.pk, record.sk)),
                                          ScopeRecord.pending_since.set(now_ms())], "test")
    outcomes = Sweeper(tasks, grace_ms=0).sweep()
    assert [(o.workflow, o.outcome) for o in outcomes if o.subject == scope] == [("delete-scope", "reverted")]
    record = store.get_scope(scope)
    assert record.state == "ACTIVE" and record.pending is None


def test_sweeper_completes_a_scope_delete(controller, scope):
    store = controller.store
    record = store.get_scope(scope)
    store.update(record, [ScopeRecord.state.set("DELETING"), ScopeRecord.pending.set(workflow_shard(record.pk, record.sk)),
                                          ScopeRecord.pending_since.set(now_ms())], "test")
    outcomes = Sweeper(controller.streams, grace_ms=0).sweep()
    assert [(o.workflow, o.outcome) for o in outcomes if o.subject == scope] == [("delete-scope", "completed")]
    assert controller.streams.delete_scope(scope) is False  # gone
