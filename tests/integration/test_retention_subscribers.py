"""Subscriber reader groups wired to consumption-based retention (controlplane.reader_groups, in process).

A group whose retention type is not NONE registers a subscriber per stream at its start cut; an
AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT group publishes the cut of each completed non-silent checkpoint;
a MANUAL_RELEASE_AT_USER_STREAMCUT group publishes only through update_truncation_cut; reset to NONE
and delete remove the subscriber. The readers here are driven through the pure sync/checkpoint flow
(add_reader, sync with positions, initiate_checkpoint) of controller.reader_groups.
"""

from __future__ import annotations

import pytest

from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import IllegalState, InvalidArgument
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    SegmentPosition,
    StreamConfiguration,
    StreamCutBody,
    StreamDataRetention,
    StreamRange,
)
from rillet.names import segment_name

EVENT = frame(b"r" * 96)  # 100 bytes
AUTO = StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT
MANUAL = StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def controller(deployment):
    return Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))


class Setup:
    def __init__(self, controller: Controller, scope: str, streams=("s",), segments: int = 2) -> None:
        self.c, self.scope = controller, scope
        controller.streams.create_scope(scope)
        policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
        for s in streams:
            controller.streams.create_stream(scope, s, StreamConfiguration(
                scaling_policy=ScalingPolicy.fixed(segments), retention_policy=policy))
        self.numbers: dict[tuple[str, int], int] = {}

    def ids(self, stream: str = "s") -> list[int]:
        return [s.segment_id for s in self.c.streams.current_segments(self.scope, stream)]

    def append(self, stream: str, sid: int, n: int) -> None:
        for _ in range(n):
            number = self.numbers.get((stream, sid), 0)
            self.c.segments.append(segment_name(self.scope, stream, sid), "w", number, 1, EVENT)
            self.numbers[(stream, sid)] = number + 1

    def config(self, retention: StreamDataRetention, streams=("s",), start: dict[str, dict[int, int]] | None = None):
        ranges = []
        for s in streams:
            positions = None
            if start and s in start:
                positions = self.c.streams.resolve_cut(self.scope, s, start[s])
            ranges.append(StreamRange(scope=self.scope, stream=s, start=positions))
        return ReaderGroupConfig(streams=ranges, automatic_checkpoint_interval_ms=0, retention_type=retention)

    def subscribers(self, stream: str = "s") -> dict[str, dict[int, int]]:
        return {r.group: {int(sid): int(o) for sid, _, _, o in r.cut}
                for r in self.c.retention.subscribers(self.scope, stream)}

    def sync(self, group: str, reader: str, offsets: dict[int, int] | None = None, checkpoint: str | None = None,
             stream: str = "s"):
        positions = [SegmentOffset(stream=f"{self.scope}/{stream}", segment_id=sid, offset=o)
                     for sid, o in (offsets or {}).items()]
        return self.c.reader_groups.sync(self.scope, group, reader, SyncRequest(positions=positions,
                                                                                checkpoint=checkpoint))

    def cut(self, offsets: dict[int, int], stream: str = "s") -> StreamCutBody:
        positions = self.c.streams.resolve_cut(self.scope, stream, offsets)
        return StreamCutBody(scope=self.scope, stream=stream, positions=positions)


def _offsets(positions: list[SegmentPosition]) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in positions}


def test_automatic_group_subscribes_at_its_start_and_publishes_completed_checkpoints(controller, unique):
    setup = Setup(controller, unique, streams=("s", "t"))
    a, b = setup.ids()
    ta, tb = setup.ids("t")
    setup.append("s", a, 4)
    setup.append("s", b, 4)
    setup.append("t", ta, 2)
    group = f"{unique}/g"
    # starts at a cut inside the stream on "s", at the head of "t"
    controller.reader_groups.create(unique, "g", setup.config(AUTO, streams=("s", "t"), start={"s": {a: 100, b: 200}}))
    assert setup.subscribers() == {group: {a: 100, b: 200}}
    assert setup.subscribers("t") == {group: {ta: 0, tb: 0}}

    # one reader takes every segment and reads a bit; nothing is published without a checkpoint
    controller.reader_groups.add_reader(unique, "g", "r1")
    assignment = setup.sync("g", "r1")
    assert len(assignment.segments) == 4
    setup.sync("g", "r1", {a: 200, b: 300})
    assert setup.subscribers() == {group: {a: 100, b: 200}}

    # a checkpoint completes when the reader passes it: its cut becomes the acknowledged cut
    controller.reader_groups.initiate_checkpoint(unique, "g", "cp1")
    assert setup.subscribers() == {group: {a: 100, b: 200}}  # outstanding: not yet
    setup.sync("g", "r1", {a: 300, b: 300}, checkpoint="cp1")
    assert controller.reader_groups.checkpoint(unique, "g", "cp1").complete
    assert setup.subscribers() == {group: {a: 300, b: 300}}
    assert setup.subscribers("t") == {group: {ta: 0, tb: 0}}

    # a silent checkpoint (e.g. generate_stream_cuts) is not an acknowledgement
    setup.sync("g", "r1", {a: 400, b: 400})
    controller.reader_groups.initiate_checkpoint(unique, "g", "quiet", silent=True)
    setup.sync("g", "r1", {a: 400, b: 400}, checkpoint="quiet")
    assert controller.reader_groups.checkpoint(unique, "g", "quiet").complete
    assert setup.subscribers() == {group: {a: 300, b: 300}}

    # the next non-silent checkpoint publishes again, for every stream of the group
    controller.reader_groups.initiate_checkpoint(unique, "g", "cp2")
    setup.sync("g", "r1", {a: 400, b: 400}, checkpoint="cp2")
    assert setup.subscribers() == {group: {a: 400, b: 400}}
    assert setup.subscribers("t") == {group: {ta: 0, tb: 0}}

    # and retention truncates behind it (minimum 0): exactly at the acknowledged cut
    controller.retention.cycle(unique, "s", now=1_000)
    assert _offsets(controller.streams.head(unique, "s")) == {a: 400, b: 400}

    # an AUTOMATIC group cannot publish a cut of its own
    with pytest.raises(IllegalState):
        controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 400, b: 400}))
    assert setup.subscribers() == {group: {a: 400, b: 400}}


def test_checkpoint_with_two_readers_publishes_only_when_both_passed(controller, unique):
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 3)
    setup.append("s", b, 3)
    group = f"{unique}/g"
    controller.reader_groups.create(unique, "g", setup.config(AUTO))
    controller.reader_groups.add_reader(unique, "g", "r1")
    controller.reader_groups.add_reader(unique, "g", "r2")
    held = {}
    for reader in ("r1", "r2"):
        held[reader] = [s.segment.segment_id for s in setup.sync("g", reader).segments]
    assert sorted(held["r1"] + held["r2"]) == sorted([a, b]) and len(held["r1"]) == 1
    controller.reader_groups.initiate_checkpoint(unique, "g", "cp")
    setup.sync("g", "r1", {held["r1"][0]: 200}, checkpoint="cp")
    assert setup.subscribers() == {group: {a: 0, b: 0}}
    setup.sync("g", "r2", {held["r2"][0]: 100}, checkpoint="cp")
    assert setup.subscribers() == {group: {held["r1"][0]: 200, held["r2"][0]: 100}}


def test_manual_group_publishes_only_through_update_truncation_cut(controller, unique):
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 3)
    setup.append("s", b, 3)
    group = f"{unique}/m"
    controller.reader_groups.create(unique, "m", setup.config(MANUAL))
    assert setup.subscribers() == {group: {a: 0, b: 0}}

    # checkpoints do not publish for a MANUAL group
    controller.reader_groups.add_reader(unique, "m", "r1")
    setup.sync("m", "r1")
    controller.reader_groups.initiate_checkpoint(unique, "m", "cp")
    setup.sync("m", "r1", {a: 300, b: 300}, checkpoint="cp")
    assert controller.reader_groups.checkpoint(unique, "m", "cp").complete
    assert setup.subscribers() == {group: {a: 0, b: 0}}

    published = controller.reader_groups.update_truncation_cut(unique, "m", setup.cut({a: 200, b: 100}))
    assert _offsets(published.positions) == {a: 200, b: 100}
    assert setup.subscribers() == {group: {a: 200, b: 100}}
    # never backwards, never overlapping the previous one, always a valid cut of a stream it reads
    with pytest.raises(InvalidArgument):
        controller.reader_groups.update_truncation_cut(unique, "m", setup.cut({a: 100, b: 100}))
    with pytest.raises(InvalidArgument):
        controller.reader_groups.update_truncation_cut(unique, "m", setup.cut({a: 300, b: 0}))
    with pytest.raises(InvalidArgument):
        controller.reader_groups.update_truncation_cut(unique, "m", StreamCutBody(
            scope=unique, stream="s", positions=setup.cut({a: 300, b: 300}).positions[:1]))
    with pytest.raises(InvalidArgument):  # beyond the segment's length
        controller.reader_groups.update_truncation_cut(unique, "m", StreamCutBody(
            scope=unique, stream="s", positions=[p.model_copy(update={"offset": 10_000})
                                                 for p in setup.cut({a: 300, b: 300}).positions]))
    controller.streams.create_stream(unique, "other", StreamConfiguration())
    with pytest.raises(InvalidArgument):  # a stream the group does not read
        controller.reader_groups.update_truncation_cut(unique, "m", StreamCutBody(
            scope=unique, stream="other", positions=controller.streams.head(unique, "other")))
    assert setup.subscribers() == {group: {a: 200, b: 100}}

    controller.reader_groups.update_truncation_cut(unique, "m", setup.cut({a: 300, b: 100}))
    assert setup.subscribers() == {group: {a: 300, b: 100}}
    controller.retention.cycle(unique, "s", now=1_000)
    assert _offsets(controller.streams.head(unique, "s")) == {a: 300, b: 100}


def test_a_none_group_is_not_a_subscriber_and_cannot_publish(controller, unique):
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 2)
    controller.reader_groups.create(unique, "n", setup.config(StreamDataRetention.NONE))
    assert setup.subscribers() == {}
    with pytest.raises(IllegalState):
        controller.reader_groups.update_truncation_cut(unique, "n", setup.cut({a: 100, b: 0}))
    # and a checkpoint of it publishes nothing
    controller.reader_groups.add_reader(unique, "n", "r1")
    setup.sync("n", "r1")
    controller.reader_groups.initiate_checkpoint(unique, "n", "cp")
    setup.sync("n", "r1", {a: 200}, checkpoint="cp")
    assert setup.subscribers() == {}


def test_reset_and_delete_update_the_subscription(controller, unique):
    setup = Setup(controller, unique, streams=("s", "t"))
    a, b = setup.ids()
    setup.append("s", a, 3)
    setup.append("s", b, 3)
    group = f"{unique}/g"
    controller.reader_groups.create(unique, "g", setup.config(AUTO, streams=("s", "t")))
    assert setup.subscribers() and setup.subscribers("t")

    # reset to a MANUAL group reading only "s" from a later start: still a subscriber of "s" (at the new
    # start, with the new generation), no longer of "t"
    config = controller.reader_groups.reset(unique, "g", setup.config(MANUAL, streams=("s",),
                                                                      start={"s": {a: 100, b: 100}}))
    assert config.generation == 1
    assert setup.subscribers() == {group: {a: 100, b: 100}}
    assert setup.subscribers("t") == {}
    (record,) = controller.retention.subscribers(unique, "s")
    assert record.generation == 1
    # a publication of the older generation is refused
    with pytest.raises(InvalidArgument):
        controller.retention.update_truncation_cut(unique, "s", group, 0, {a: 200, b: 200})
    controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 200, b: 200}))
    assert setup.subscribers() == {group: {a: 200, b: 200}}

    # reset to NONE: not a subscriber any more
    controller.reader_groups.reset(unique, "g", setup.config(StreamDataRetention.NONE, streams=("s", "t")))
    assert setup.subscribers() == {} and setup.subscribers("t") == {}

    # back to AUTOMATIC, then delete: the subscription goes with the group
    controller.reader_groups.reset(unique, "g", setup.config(AUTO, streams=("s", "t")))
    assert set(setup.subscribers()) == {group} and set(setup.subscribers("t")) == {group}
    assert controller.reader_groups.delete(unique, "g") is True
    assert setup.subscribers() == {} and setup.subscribers("t") == {}
    assert controller.reader_groups.delete(unique, "g") is False


def test_without_subscribers_left_the_policy_applies_and_with_one_back_it_holds_again(controller, unique):
    """The retention consequence of the wiring, as in Pravega: with no subscriber left the plain size
    policy applies at once (a minimum of 0 bytes: up to the tail); a new subscriber group holds
    truncation at its own start again."""
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 4)
    setup.append("s", b, 4)
    controller.reader_groups.create(unique, "m", setup.config(MANUAL))
    controller.reader_groups.update_truncation_cut(unique, "m", setup.cut({a: 100, b: 100}))
    controller.retention.cycle(unique, "s", now=1_000)
    assert _offsets(controller.streams.head(unique, "s")) == {a: 100, b: 100}
    controller.reader_groups.delete(unique, "m")
    decision = controller.retention.cycle(unique, "s", now=2_000)
    assert decision.outcome == "truncated" and "no subscriber" in decision.reason, decision
    assert _offsets(controller.streams.head(unique, "s")) == {a: 400, b: 400}
    setup.append("s", a, 4)
    setup.append("s", b, 4)
    controller.reader_groups.create(unique, "m2", setup.config(MANUAL, start={"s": {a: 600, b: 500}}))
    decision = controller.retention.cycle(unique, "s", now=3_000)
    assert decision.outcome == "truncated", decision
    assert _offsets(controller.streams.head(unique, "s")) == {a: 600, b: 500}


def test_creating_an_existing_group_again_leaves_its_acknowledged_cut_alone(controller, unique):
    """Applications commonly create their reader group at every start (create returns False when it
    exists). That must not move the subscriber's acknowledged cut back to the group's start cut, nor
    reset its generation: an acknowledged cut never moves backwards."""
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 3)
    setup.append("s", b, 3)
    group = f"{unique}/g"
    assert controller.reader_groups.create(unique, "g", setup.config(AUTO)) is True
    controller.reader_groups.add_reader(unique, "g", "r1")
    setup.sync("g", "r1")
    controller.reader_groups.initiate_checkpoint(unique, "g", "cp")
    setup.sync("g", "r1", {a: 300, b: 200}, checkpoint="cp")
    assert setup.subscribers() == {group: {a: 300, b: 200}}

    assert controller.reader_groups.create(unique, "g", setup.config(AUTO)) is False  # already there
    assert setup.subscribers() == {group: {a: 300, b: 200}}
    # nor does a second create with another configuration change anything
    assert controller.reader_groups.create(unique, "g", setup.config(MANUAL, start={"s": {a: 100, b: 100}})) is False
    assert setup.subscribers() == {group: {a: 300, b: 200}}
    assert controller.reader_groups.state(unique, "g").config.retention_type == AUTO

    # after a reset (generation 1) a repeated create does not bring generation 0 back either
    controller.reader_groups.reset(unique, "g", setup.config(AUTO, start={"s": {a: 300, b: 300}}))
    assert controller.reader_groups.create(unique, "g", setup.config(AUTO)) is False
    (record,) = controller.retention.subscribers(unique, "s")
    assert record.generation == 1 and setup.subscribers() == {group: {a: 300, b: 300}}


def test_creating_an_existing_non_subscriber_group_again_does_not_subscribe_it(controller, unique):
    """create() of an existing NONE group with a subscriber configuration returns False and changes
    nothing: no subscriber appears that no group would ever publish for (it would hold retention back)."""
    setup = Setup(controller, unique)
    a, _ = setup.ids()
    setup.append("s", a, 3)
    assert controller.reader_groups.create(unique, "n", setup.config(StreamDataRetention.NONE)) is True
    assert controller.reader_groups.create(unique, "n", setup.config(AUTO)) is False
    assert controller.reader_groups.state(unique, "n").config.retention_type == StreamDataRetention.NONE
    assert setup.subscribers() == {}


def test_a_group_started_at_a_cut_partly_truncated_acknowledges_the_head_there(controller, unique):
    """A start cut behind the head on some keys (chosen before a truncation that committed first) is
    acknowledged at the head on those keys: a subscriber never acknowledges bytes already gone, so no
    cycle looks as if it truncated past it (the CBR history's checker found such a group)."""
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 4)
    setup.append("s", b, 4)
    controller.streams.truncate_stream(unique, "s", {a: 200, b: 0})
    controller.reader_groups.create(unique, "g", setup.config(MANUAL, start={"s": {a: 100, b: 100}}))
    assert setup.subscribers() == {f"{unique}/g": {a: 200, b: 100}}  # a's part was gone; b's kept
    controller.reader_groups.reset(unique, "g", setup.config(MANUAL, start={"s": {a: 0, b: 300}}))
    assert setup.subscribers() == {f"{unique}/g": {a: 200, b: 300}}


def test_a_manual_group_started_at_a_truncated_cut_publishes_a_cut_behind_the_head_at_the_head(controller, unique):
    """A MANUAL group created at a start cut partly truncated is subscribed at the head there; a cut it
    publishes that is still behind the head (its own start, say) is taken at the head the same way,
    key by key: accepted, never acknowledging bytes already gone."""
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 4)
    setup.append("s", b, 4)
    controller.streams.truncate_stream(unique, "s", {a: 200, b: 0})
    head = _offsets(controller.streams.head(unique, "s"))
    controller.reader_groups.create(unique, "g", setup.config(MANUAL, start={"s": {a: 100, b: 0}}))
    published = controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 100, b: 0}))
    assert _offsets(published.positions) == head
    (acknowledged,) = controller.reader_groups.acknowledged_cuts(unique, "g")
    assert _offsets(acknowledged.cut.positions) == head == {a: 200, b: 0}
    # behind the head on a, ahead on b: the head on a, the cut on b
    published = controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 0, b: 300}))
    assert _offsets(published.positions) == {a: 200, b: 300}
    assert setup.subscribers() == {f"{unique}/g": {a: 200, b: 300}}


def test_a_manual_group_publishing_behind_its_own_cut_is_still_refused(controller, unique):
    """The clamp to the head is no licence to move back: a cut behind what the group published itself
    is refused, whether or not it is also behind the head."""
    setup = Setup(controller, unique)
    a, b = setup.ids()
    setup.append("s", a, 4)
    setup.append("s", b, 4)
    controller.streams.truncate_stream(unique, "s", {a: 200, b: 0})
    controller.reader_groups.create(unique, "g", setup.config(MANUAL, start={"s": {a: 100, b: 0}}))
    controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 300, b: 200}))
    with pytest.raises(InvalidArgument, match="never moves backwards"):  # at or after the head, behind its own
        controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 200, b: 100}))
    with pytest.raises(InvalidArgument, match="never moves backwards"):  # behind the head too
        controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 100, b: 0}))
    with pytest.raises(InvalidArgument, match="never moves backwards"):  # at the head on a, so behind its own
        controller.reader_groups.update_truncation_cut(unique, "g", setup.cut({a: 0, b: 400}))
    assert setup.subscribers() == {f"{unique}/g": {a: 300, b: 200}}


def test_a_reset_too_large_for_one_transaction_is_refused_with_a_typed_error(controller, unique, monkeypatch):
    """A subscriber group's reset is one transaction: the record, two writes per subscribed stream, one
    per stream dropped, and the pages of a large state. With a state in 6 pages (pages made small here),
    a reset from 32 subscribed streams to 32 others would take 103 writes, past DynamoDB's 100: it is
    refused with IllegalState (409) and the group is unchanged, not failed with DynamoDB's validation
    error (an opaque 500)."""
    from controlplane.reader_groups import state as state_module

    monkeypatch.setattr(state_module, "PAGE_BYTES", 250)
    monkeypatch.setattr(state_module, "_FITS_ONE_PAGE_JSON", 0)
    old, new = [f"a{n}" for n in range(32)], [f"b{n}" for n in range(32)]
    setup = Setup(controller, unique, streams=old + new, segments=1)
    groups = controller.reader_groups
    assert groups.create(unique, "g", setup.config(AUTO, streams=old))
    assert 4 <= int(state_module.get_record(unique, "g").pages) <= 7
    with pytest.raises(IllegalState) as refused:
        groups.reset(unique, "g", setup.config(AUTO, streams=new))
    assert refused.value.details["writes"] > 100
    assert [s.stream for s in groups.state(unique, "g").config.streams] == old
