"""Reader-group syncs and leaves whose DynamoDB answers are lost (issue 27's reader items), with the
answer of each mutating request lost in turn (botocore resends it, and the resend is refused by what
the first attempt applied): a reader's item renewal, the leave's transaction with its item check, the
item's delete, the acquiring sync's group write. The outcome is always as if nothing was lost: the
leaving reader's segment goes on from its last reported offset, only the other reader stays online."""

from __future__ import annotations

import uuid

from test_lost_answers_control import lose_each

from rillet.api import SegmentOffset, SyncRequest
from rillet.models import ReaderGroupConfig, ScalingPolicy, StreamConfiguration, StreamRange


def test_reader_item_writes_and_a_leave_with_lost_answers(controller):
    groups = controller.reader_groups

    def report(scope, offsets, token):
        return SyncRequest(positions=[SegmentOffset(stream=f"{scope}/s", segment_id=s, offset=o)
                                      for s, o in offsets.items()], instance=token)

    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        groups.create(scope, "g", ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")],
                                                    automatic_checkpoint_interval_ms=0, group_refresh_time_ms=100))
        held = {}
        for reader in ("r1", "r2"):
            groups.add_reader(scope, "g", reader, reader)
        for reader in ("r1", "r2"):
            (held[reader],) = [a.segment.segment_id for a in groups.sync(scope, "g", reader, report(scope, {}, reader)).segments]
        return scope, held

    def run(ctx):
        scope, held = ctx
        groups.sync(scope, "g", "r1", report(scope, {held["r1"]: 50}, "r1"))  # only r1's item changes
        groups.sync(scope, "g", "r2", report(scope, {held["r2"]: 0}, "r2"))  # nothing changes: no write
        groups.reader_offline(scope, "g", "r1", None, instance="r1")  # r1 closes at its last report
        return {a.segment.segment_id: a.offset for a in groups.sync(scope, "g", "r2", report(scope, {}, "r2")).segments}

    def check(ctx, taken):
        scope, held = ctx
        assert taken == {held["r1"]: 50, held["r2"]: 0}, taken
        assert groups.info(scope, "g").online_readers == ["r2"]
        assert sorted(groups.items.all(scope, "g")) in ([], ["r2"])

    lost = lose_each(setup, run, check, lambda ctx: [])
    assert any("PutItem" in op for op in lost) and any("TransactWriteItems" in op for op in lost), lost
