"""Consumption-based retention and reader groups under races (issue 31 #1, #2, #4; issue 25 #3 and its
"also close" items), staged with the real controller on moto.

Each test names the step it pauses (a wrapped method, or a hook before an actor's n-th mutating AWS
request that runs another actor to completion in a thread), or the step before which it crashes, and
checks what the promise is about: no truncation past a subscriber's acknowledged cut, a subscriber
exactly for each live group at the group's generation, an answer that says what happened.
"""

from __future__ import annotations

import threading

import pytest
from dataplane_model import SimulatedCrash, inject_crash, lose_answer
from interleave import Actor, explore

from controlplane import retention as retention_module
from controlplane.models import (
    ReaderLeaseRecord,
    RetentionRecord,
    SubscriberRecord,
    reader_group_pk,
    stream_pk,
)
from controlplane.reader_groups import LEASE_KEY
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import IllegalState, InvalidArgument, RilletError, WriteConflict
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamDataRetention,
    StreamRange,
)
from rillet.names import segment_name
from rillet.stream_cut import Ordering, compare_positions

EVENT = frame(b"c" * 96)  # 100 bytes
AUTO = StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT
MANUAL = StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def controller(deployment):
    return Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))


def _stream(controller: Controller, scope: str, events: int = 8, stream: str = "s") -> None:
    """A one-segment stream under consumption-based retention (minimum 0 bytes) holding ``events``."""
    controller.streams.create_scope(scope)
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
    controller.streams.create_stream(scope, stream, StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(1), retention_policy=policy))
    for n in range(events):
        controller.segments.append(segment_name(scope, stream, 0), "w", n, 1, EVENT)


def _config(controller: Controller, scope: str, start: int | None = None, retention=AUTO) -> ReaderGroupConfig:
    positions = None if start is None else controller.streams.resolve_cut(scope, "s", {0: start})
    return ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s", start=positions)],
                             automatic_checkpoint_interval_ms=0, retention_type=retention)


def _head(controller: Controller, scope: str) -> int:
    (position,) = controller.streams.head(scope, "s")
    return position.offset


def _subscribers(controller: Controller, scope: str) -> dict[str, tuple[int, int]]:
    """group -> (generation, acknowledged offset in segment 0)."""
    return {s.group: (int(s.generation), int(s.cut[0][3])) for s in controller.retention.subscribers(scope, "s")}


def _assert_nothing_truncated_past_a_subscriber(controller: Controller, scope: str) -> None:
    head = controller.streams.head(scope, "s")
    for sub in controller.retention.subscribers(scope, "s"):
        cut = retention_module._positions(sub.cut)
        assert compare_positions(head, cut) in (Ordering.BEFORE, Ordering.EQUAL), (
            f"truncated to {head[0].offset} past subscriber {sub.group}'s acknowledged {cut[0].offset}")


def _in_thread(work) -> object:
    """Run ``work`` to completion in another thread (its AWS requests are not the armed thread's)."""
    outcome: dict[str, object] = {}

    def body():
        try:
            outcome["result"] = work()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            outcome["error"] = e

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def _before_mutating_call(n: int, work):
    """An inject_crash hook that runs ``work`` in another thread right before the armed thread's n-th
    mutating request."""
    def hook(operation: str, count: int) -> None:
        if count == n:
            _in_thread(work)
    return hook


def _while_the_cycle_reads_subscribers(controller: Controller, monkeypatch, change) -> None:
    """Pause the retention cycle right after it read the subscriber set, and run ``change`` then."""
    read = controller.retention.subscribers

    def subscribers_then_change(scope, stream):
        found = read(scope, stream)
        change()
        return found

    monkeypatch.setattr(controller.retention, "subscribers", subscribers_then_change)


# -- issue 31 #1: a subscriber registered while a retention cycle computes ------------------------------


def test_a_group_created_at_the_head_while_a_cycle_computes_is_not_truncated_past(controller, unique, monkeypatch):
    _stream(controller, unique)
    # No subscriber yet: the cycle's plain rule would truncate at the tail (800).
    _while_the_cycle_reads_subscribers(
        controller, monkeypatch, lambda: controller.reader_groups.create(unique, "g", _config(controller, unique)))
    try:
        controller.retention.cycle(unique, "s", now=1_000)
    except RilletError:
        pass  # a cycle may give up; what matters is what it truncated
    assert _subscribers(controller, unique) == {f"{unique}/g": (0, 0)}
    _assert_nothing_truncated_past_a_subscriber(controller, unique)
    # the next cycle sees the group and keeps what it has yet to read
    monkeypatch.undo()
    controller.retention.cycle(unique, "s", now=2_000)
    assert _head(controller, unique) == 0


def test_a_reset_back_to_an_earlier_start_while_a_cycle_computes_is_not_truncated_past(controller, unique,
                                                                                      monkeypatch):
    _stream(controller, unique)
    controller.reader_groups.create(unique, "g", _config(controller, unique, start=400))
    _while_the_cycle_reads_subscribers(
        controller, monkeypatch,
        lambda: controller.reader_groups.reset(unique, "g", _config(controller, unique, start=100)))
    try:
        controller.retention.cycle(unique, "s", now=1_000)  # the lower bound it read: 400
    except RilletError:
        pass
    assert _subscribers(controller, unique) == {f"{unique}/g": (1, 100)}
    _assert_nothing_truncated_past_a_subscriber(controller, unique)


def test_a_group_created_after_a_cycle_decided_starts_at_the_head_the_cycle_made(controller, unique):
    """The other order: the cycle truncates first, the create read the head before it; the create must
    not register a start the truncation already released."""
    _stream(controller, unique)
    groups = controller.reader_groups
    starts = groups.subscriptions.starts

    def starts_then_cycle(config):
        found = starts(config)
        controller.retention.cycle(unique, "s", now=1_000)  # no subscriber yet: truncates at 800
        groups.subscriptions.starts = starts
        return found

    groups.subscriptions.starts = starts_then_cycle
    assert groups.create(unique, "g", _config(controller, unique))
    assert _head(controller, unique) == 800
    _assert_nothing_truncated_past_a_subscriber(controller, unique)


# -- issue 31 #2: resets are one step; deletes leave no subscriber behind ---------------------------------


def test_a_reset_that_stops_part_way_leaves_the_group_and_its_subscription_at_one_generation(controller, unique):
    groups = controller.reader_groups
    for crash_at in range(1, 10):
        scope = f"{unique}{crash_at}"
        _stream(controller, scope)
        groups.create(scope, "g", _config(controller, scope, start=200))
        with inject_crash(crash_at) as injector:
            try:
                groups.reset(scope, "g", _config(controller, scope, start=600))
            except SimulatedCrash:
                pass
        generation = groups.state(scope, "g").config.generation
        group = f"{scope}/g"
        assert {g: gen for g, (gen, _) in _subscribers(controller, scope).items()} == {group: generation}, (
            f"crashed before {injector.crashed_before}")
        # the live group checkpoints at 500: it is acknowledged, and retention follows it, not the reset
        groups.add_reader(scope, "g", "r")
        assignment = groups.sync(scope, "g", "r", SyncRequest())
        offset = 500 if generation == 0 else 700
        positions = [SegmentOffset(stream=f"{scope}/s", segment_id=a.segment.segment_id, offset=offset)
                     for a in assignment.segments]
        groups.initiate_checkpoint(scope, "g", "cp")
        groups.sync(scope, "g", "r", SyncRequest(positions=positions, checkpoint="cp"))
        assert _subscribers(controller, scope) == {group: (generation, offset)}
        controller.retention.cycle(scope, "s", now=1_000)
        assert _head(controller, scope) == offset
        # a delete leaves no subscriber of any generation
        assert groups.delete(scope, "g")
        assert _subscribers(controller, scope) == {}
        if injector.crashed_before is None:
            break
    else:
        pytest.fail("the reset never finished")


def test_a_reset_racing_a_delete_leaves_no_subscriber_for_the_gone_group(controller, unique):
    _stream(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", _config(controller, unique, start=200))
    hook = _before_mutating_call(1, lambda: groups.delete(unique, "g"))
    with inject_crash(None, hook=hook), pytest.raises(RilletError):
        groups.reset(unique, "g", _config(controller, unique, start=100))
    assert groups.list_groups(unique, 10, None)[0] == []
    assert _subscribers(controller, unique) == {}


def test_a_checkpoint_publish_refused_because_the_subscription_is_wrong_is_reported(controller, unique):
    _stream(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", _config(controller, unique))
    groups.add_reader(unique, "g", "r")
    groups.sync(unique, "g", "r", SyncRequest())
    # the live group's subscription is gone (what a lost race used to leave): its cuts go nowhere
    SubscriberRecord.get(stream_pk(unique, "s"), f"sub#{unique}/g").delete()
    groups.initiate_checkpoint(unique, "g", "cp")
    with pytest.raises(IllegalState):
        groups.sync(unique, "g", "r", SyncRequest(
            positions=[SegmentOffset(stream=f"{unique}/s", segment_id=0, offset=300)], checkpoint="cp"))


# -- issue 31 #4: a stale publish never undoes a reset, whatever the clocks say ------------------------


def test_a_stale_checkpoint_publish_does_not_undo_a_reset_stamped_in_the_same_millisecond(controller, unique,
                                                                                       monkeypatch):
    _stream(controller, unique)
    groups, group = controller.reader_groups, f"{unique}/g"
    monkeypatch.setattr(retention_module, "now_ms", lambda: 5_000)  # every write in one millisecond
    groups.create(unique, "g", _config(controller, unique, start=300, retention=MANUAL))
    incarnation = groups.info(unique, "g").incarnation
    hook = _before_mutating_call(
        1, lambda: groups.reset(unique, "g", _config(controller, unique, start=100, retention=MANUAL)))
    with inject_crash(None, hook=hook), pytest.raises((InvalidArgument, WriteConflict)):
        # read before the reset
        controller.retention.update_truncation_cut(unique, "s", group, 0, {0: 600}, incarnation)
    assert _subscribers(controller, unique) == {group: (1, 100)}
    controller.retention.cycle(unique, "s", now=1_000)
    assert _head(controller, unique) == 100


# -- issue 25 #3: a delete that loses the race to a sync leaves the group subscribed -----------------------


def test_a_delete_that_loses_to_a_sync_leaves_the_group_subscribed(controller, unique):
    _stream(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", _config(controller, unique))
    groups.add_reader(unique, "g", "r")
    hook = _before_mutating_call(1, lambda: groups.sync(unique, "g", "r", SyncRequest()))
    with inject_crash(None, hook=hook), pytest.raises(WriteConflict):
        groups.delete(unique, "g")
    assert groups.info(unique, "g").online_readers == ["r"]
    assert _subscribers(controller, unique) == {f"{unique}/g": (0, 0)}
    controller.retention.cycle(unique, "s", now=1_000)
    assert _head(controller, unique) == 0


# -- issue 25, also close: lost answers of create and delete; the retention set across incarnations -------


def test_a_create_whose_answer_was_lost_answers_created(controller, unique):
    groups = controller.reader_groups
    for at in range(1, 10):
        scope = f"{unique}{at}"
        _stream(controller, scope, events=2)
        with lose_answer(at) as seen:
            created = groups.create(scope, "g", _config(controller, scope))
        assert created, f"the create whose answer of request #{at} ({seen[at - 1]}) was lost answered 'existed'"
        assert _subscribers(controller, scope) == {f"{scope}/g": (0, 0)}
        assert groups.list_groups(scope, 10, None)[0] == ["g"]
        if len(seen) < at:
            break


def test_a_delete_whose_answer_was_lost_finishes(controller, unique):
    groups = controller.reader_groups
    for at in range(1, 10):
        scope = f"{unique}{at}"
        _stream(controller, scope, events=2)
        groups.create(scope, "g", _config(controller, scope))
        groups.add_reader(scope, "g", "r")
        with lose_answer(at) as seen:
            assert groups.delete(scope, "g")
        assert groups.list_groups(scope, 10, None)[0] == []
        assert _subscribers(controller, scope) == {}
        with pytest.raises(ReaderLeaseRecord.DoesNotExist):
            ReaderLeaseRecord.get(reader_group_pk(scope, "g"), LEASE_KEY, consistent_read=True)
        if len(seen) < at:
            break


def test_a_cycle_racing_delete_and_create_again_records_no_cut_of_the_old_stream(controller, unique):
    _stream(controller, unique)
    streams = controller.streams

    def delete_and_create_again():
        streams.seal_stream(unique, "s")
        streams.delete_stream(unique, "s")
        streams.create_stream(unique, "s", StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(1),
            retention_policy=RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)))

    with inject_crash(None, hook=_before_mutating_call(1, delete_and_create_again)):
        try:
            controller.retention.cycle(unique, "s", now=1_000)
        except RilletError:
            pass
    recorded = list(RetentionRecord.query(stream_pk(unique, "s"), RetentionRecord.sk.startswith("rs#"),
                                          consistent_read=True))
    assert [r.cut[0][3] for r in recorded] == [], "the old stream's tail (800) is in the new stream's set"


# -- every interleaving of a cycle with a create or a reset (at most one preemption) ----------------------


@pytest.mark.parametrize("change", ["create at the head", "reset back"])
def test_every_interleaving_of_a_cycle_and_a_registration_keeps_the_subscribers_data(controller, unique, change):
    """A deterministic scheduler runs a retention cycle and a group's registration request by request,
    in every order with at most one preemption. After each: the group's subscription is at the group's
    generation, and nothing is truncated past it. A reset that committed after the truncation (it moved
    the fence last) to an explicit start the truncation had already released acknowledges the head the
    truncation left, not its start: a subscriber never acknowledges bytes that are gone (its readers
    skip to the head, as from any truncated start)."""
    groups, cases, made = controller.reader_groups, iter(range(10_000)), [""]

    def make_actors() -> list[Actor]:
        scope = made[0] = f"{unique}{next(cases)}"
        _stream(controller, scope)
        if change == "reset back":
            groups.create(scope, "g", _config(controller, scope, start=400))

        def register():
            if change == "reset back":
                return groups.reset(scope, "g", _config(controller, scope, start=100))
            return groups.create(scope, "g", _config(controller, scope))

        return [Actor("cycle", lambda: controller.retention.cycle(scope, "s", now=1_000)), Actor("group", register)]

    def check(actors: list[Actor], schedule: list[str]) -> None:
        scope = made[0]
        for actor in actors:
            assert actor.error is None or isinstance(actor.error, RilletError), (schedule, actor.error)
        generation = groups.state(scope, "g").config.generation
        assert [gen for gen, _ in _subscribers(controller, scope).values()] == [generation], schedule
        subscription = SubscriberRecord.get(stream_pk(scope, "s"), f"sub#{scope}/g", consistent_read=True)
        fence = SubscriberRecord.get(stream_pk(scope, "s"), retention_module.FENCE_KEY, consistent_read=True)
        if change == "reset back" and fence.write_id == subscription.write_id:
            (head,) = controller.streams.head(scope, "s")
            assert _subscribers(controller, scope) == {f"{scope}/g": (1, max(100, head.offset))}, schedule
        _assert_nothing_truncated_past_a_subscriber(controller, scope)

    assert explore(make_actors, check, max_switches=1) > 2


def test_a_reset_whose_answer_was_lost_is_applied_once(controller, unique):
    groups = controller.reader_groups
    for at in range(1, 10):
        scope = f"{unique}{at}"
        _stream(controller, scope)
        groups.create(scope, "g", _config(controller, scope, start=200))
        with lose_answer(at) as seen:
            assert groups.reset(scope, "g", _config(controller, scope, start=600)).generation == 1
        assert groups.state(scope, "g").config.generation == 1
        assert _subscribers(controller, scope) == {f"{scope}/g": (1, 600)}
        if len(seen) < at:
            break


# -- issue 39: a refused truncation is judged by the item DynamoDB names ----------------------------------


@pytest.mark.parametrize("change", ["create at the head", "reset back"])
def test_a_cycle_whose_fence_moved_records_kept(controller, unique, monkeypatch, change):
    """The truncation's transaction is refused on the fence (sent first by PynamoDB, as a put before the
    stream record's update): the cycle keeps everything and remembers why, instead of retrying with
    the fence it read until it gives up."""
    _stream(controller, unique)
    groups = controller.reader_groups
    if change == "reset back":
        groups.create(unique, "g", _config(controller, unique, start=400))

    def register():
        if change == "reset back":
            return groups.reset(unique, "g", _config(controller, unique, start=100))
        return groups.create(unique, "g", _config(controller, unique))

    _while_the_cycle_reads_subscribers(controller, monkeypatch, register)
    decision = controller.retention.cycle(unique, "s", now=1_000)
    assert (decision.outcome, decision.cut) == ("kept", None)
    assert "a subscriber registered or moved back" in decision.reason
    assert _head(controller, unique) == 0
    last = controller.retention.status(unique, "s").last_decision
    assert (last.decided_ms, last.outcome, last.reason) == (1_000, "kept", decision.reason)


def test_a_cycle_whose_stream_record_changed_unrelatedly_truncates_on_the_fresh_record(controller, unique,
                                                                                       monkeypatch):
    """A writer's first time note (the stream joins the watermarking index) changes the stream record's
    version while the cycle decides, and nothing it decided from: the truncation's transaction is
    refused on the stream record, not the fence, and is retried on the fresh record."""
    _stream(controller, unique)
    assert controller.streams.store.get_stream(unique, "s").watermarked is None
    _while_the_cycle_reads_subscribers(
        controller, monkeypatch, lambda: controller.watermarks.note_time(unique, "s", "w", 1, {0: 800}))
    decision = controller.retention.cycle(unique, "s", now=1_000)
    assert controller.streams.store.get_stream(unique, "s").watermarked is not None
    assert decision.outcome == "truncated", decision.reason
    assert _head(controller, unique) == 800
    assert controller.retention.status(unique, "s").last_decision.outcome == "truncated"
