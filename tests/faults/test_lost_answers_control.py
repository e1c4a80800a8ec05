"""A lost answer at each step of the control plane's background workflows.

botocore resends a request whose answer it never got (PynamoDB's 30 s read timeout, a reset
connection); when the first attempt was applied, the resend of a conditional write is refused
(ConditionalCheckFailed, TransactionCanceled, a stale version) although nothing else changed anything.
``lose_answer(k)`` (tests/dataplane_model.py) does exactly that to the k-th mutating request of the
current thread. For k = 1, 2, ... a fresh subject is set up and the workflow runs with the k-th
answer lost; the loop ends at the first k past its last mutating request. Each time the workflow must
complete as the call that ran it (no error for a step that was applied), with the end state of an
undisturbed run, no event lost or duplicated, and nothing left for the sweeper.

Covered: the workflows of tests/faults/test_workflow_crashes.py (create, update, seal, delete of
streams, delete of scopes), scale (auto-scaling's job), truncation (direct and by a retention cycle),
commits (merged, rolled with companions, applied by a seal), the timeout job's abort, workflows the
sweeper resumes (scale, truncation, commit, seal, delete), reader-lease reaping (with the checkpoint
it completes acknowledged to retention), watermarks, and the delete of a key-value table (by the
request and by the sweeper).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import test_scale_workflow_crashes as scale_crashes
from dataplane_model import lose_answer, segment_events
from test_commit_crashes import STREAM, Setup, commits_left_waiting
from test_kvt_crashes import CONFIG, TABLE, _entries_left, _fill
from test_workflow_crashes import WORKFLOWS, Ctx

from controlplane.kvtables import KeyValueTables
from controlplane.models import (
    MetadataItem,
    ReaderLeaseRecord,
    RetentionDecisionRecord,
    RetentionRecord,
    TxnRecord,
    reader_group_pk,
    stream_pk,
    txn_sk,
)
from controlplane.reader_groups import LEASE_KEY
from controlplane.reader_groups import groups as reader_groups_module
from controlplane.retention import DECISION_KEY, RetentionSettings, RetentionTasks
from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from controlplane.txn_commits import AppliedBatch
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import KeyValueTableNotFound, SegmentNotFound, StreamNotFound
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamDataRetention,
    StreamRange,
    StreamState,
    TxnState,
)
from rillet.names import mark_stream_name, segment_name


@pytest.fixture
def controller(isolated_deployment, request):
    """Tables of this test's own: the sweeps here take every pending workflow they find."""
    name = "flost-" + hashlib.blake2b(request.node.name.encode(), digest_size=4).hexdigest()
    return Controller.for_deployment(isolated_deployment(name))


def lose_each(setup: Callable[[], Any], run: Callable[[Any], Any], check: Callable[[Any, Any], None],
              leftovers: Callable[[Any], list], first: int = 1, step: int = 1, limit: int = 200) -> list[str]:
    """For k = first, first + step, ...: ``ctx = setup()``, ``result = run(ctx)`` with the k-th mutating
    request's answer lost, then ``check(ctx, result)`` and no pending workflow in ``leftovers(ctx)``,
    until k is past the last mutating request. Collects every failure and fails with all of them;
    returns the operations whose answers were lost."""
    lost: list[str] = []
    failures: list[str] = []
    for k in range(first, limit, step):
        ctx = setup()
        error = None
        with lose_answer(k) as seen:
            try:
                result = run(ctx)
            except Exception as e:  # noqa: BLE001
                error, result = e, None
        past = len(seen) < k
        where = "no answer lost" if past else f"answer of mutating request #{k} ({seen[k - 1]}) lost"
        if not past:
            lost.append(seen[k - 1])
        if error is not None:
            failures.append(f"{where}: the workflow raised {error!r}")
        else:
            try:
                check(ctx, result)
            except AssertionError as e:
                failures.append(f"{where}: {e}")
            left = leftovers(ctx)
            if left:
                failures.append(f"{where}: left pending: {[(i.pk, i.sk) for i in left]}")
        if past:
            break
    else:
        raise AssertionError("the workflow never ran past its last mutating request")
    assert not failures, "\n".join(failures)
    return lost


def pending_in(c: Controller, scope: str) -> list:
    return [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope
            or getattr(i, "sk", None) == scope]


def sweep(c: Controller) -> list:
    return Sweeper(c.streams, grace_ms=0).sweep()


# -- the stream and scope workflows of test_workflow_crashes ------------------------------------------


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda w: w.name)
def test_stream_workflows(controller, workflow):
    def setup():
        ctx = Ctx(scope="f" + uuid.uuid4().hex[:12])
        workflow.setup(controller, ctx)
        return ctx

    lose_each(setup, lambda ctx: workflow.run(controller, ctx), lambda ctx, _: workflow.done(controller, ctx),
              lambda ctx: pending_in(controller, ctx.scope))


# -- scale and truncation ---------------------------------------------------------------------------


def test_scale(controller):
    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        return scope, scale_crashes.setup_stream(controller, scope)

    def run(ctx):
        scope, _ = ctx
        return controller.streams.scale_stream(scope, scale_crashes.STREAM, *scale_crashes.scale_request(controller, scope))

    def check(ctx, epoch):
        assert epoch == 1
        scale_crashes.assert_scaled(controller, *ctx)

    lost = lose_each(setup, run, check, lambda ctx: pending_in(controller, ctx[0]))
    assert len(lost) > 8, lost


def test_truncation(controller):
    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        return scope, scale_crashes.truncation_setup(controller, scope)

    lose_each(setup, lambda ctx: controller.streams.truncate_stream(ctx[0], scale_crashes.STREAM, ctx[1]),
              lambda ctx, _: scale_crashes.assert_truncated(controller, *ctx),
              lambda ctx: pending_in(controller, ctx[0]))


# -- transactions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["merge", "roll-with-companions-odd", "roll-with-companions-even"])
def test_commit(controller, mode):
    """A merge in place, and a commit that drives two batches: the older epoch's two transactions
    stamped and rolled together, then the newer one merged in place (its answers lost in two halves,
    the odd-numbered and the even-numbered requests, to keep each test short)."""
    roll = mode != "merge"

    def check(s, info):
        assert info.state == TxnState.COMMITTED
        s.assert_committed()

    lost = lose_each(lambda: Setup(controller, roll, segments=1 if roll else 3, companions=roll),
                     lambda s: controller.transactions.commit(s.scope, STREAM, s.txn.txn_id), check,
                     lambda s: s.pending(), first=2 if mode.endswith("even") else 1, step=1 if mode == "merge" else 2)
    assert ({"TransactWriteItems", "PutItem"} <= set(lost)) if mode == "merge" else len(lost) > 10, lost


def test_seal_applying_a_rolling_batch(controller):
    """A seal that finds a commit requested applies it itself: the batch is recorded in the seal's
    workflow, rolled, then the seal goes on."""
    def setup():
        s = Setup(controller, roll=True, segments=1)
        with commits_left_waiting(controller):
            assert controller.transactions.commit(s.scope, STREAM, s.txn.txn_id).state == TxnState.COMMITTING
        return s

    def run(s):
        with commits_left_waiting(controller):
            controller.streams.seal_stream(s.scope, STREAM)

    lose_each(setup, run, lambda s, _: s.assert_committed(StreamState.SEALED), lambda s: s.pending())


def expire(s: Setup) -> None:
    """The transaction's lease ran out."""
    txn = TxnRecord.get(stream_pk(s.scope, STREAM), txn_sk(s.txn.txn_id), consistent_read=True)
    past = now_ms() - 1
    txn.update(actions=[TxnRecord.lease_expiry_ms.set(past), TxnRecord.deadline_ms.set(past)])


def test_timeout_abort(controller):
    def setup():
        s = Setup(controller, roll=False, segments=3)
        expire(s)
        return s

    def check(s, aborted):
        assert aborted == [(f"{s.scope}/{STREAM}", s.txn.txn_id)]
        s.assert_aborted()

    lose_each(setup, lambda s: controller.transactions.abort_expired(), check, lambda s: s.pending())


# -- workflows the sweeper resumes ------------------------------------------------------------------


def interrupted(owner: Any, finisher: str, start: Callable[[], Any]) -> None:
    """Run ``start`` with ``owner.<finisher>`` doing nothing: the workflow is recorded, nothing more."""
    with pytest.MonkeyPatch.context() as patch:
        # A commit's finisher answers what it closed: nothing.
        nothing = AppliedBatch([], others_waiting=True) if finisher == "finish_commit_stream" else None
        patch.setattr(owner, finisher, lambda *args, **kwargs: nothing)
        start()


def swept(c: Controller, subject: str) -> list[tuple[str, str]]:
    outcomes = sweep(c)
    assert all(o.outcome == "completed" for o in outcomes), outcomes
    return [(o.workflow, o.outcome) for o in outcomes if o.subject == subject]


def test_sweeper_resumes_a_scale(controller):
    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        lengths = scale_crashes.setup_stream(controller, scope)
        seal, ranges = scale_crashes.scale_request(controller, scope)
        interrupted(controller.streams, "finish_scale_stream",
                    lambda: controller.streams.scale_stream(scope, scale_crashes.STREAM, seal, ranges))
        return scope, lengths

    def check(ctx, outcomes):
        assert outcomes == [("scale", "completed")]
        scale_crashes.assert_scaled(controller, *ctx)

    lose_each(setup, lambda ctx: swept(controller, f"{ctx[0]}/{scale_crashes.STREAM}"), check,
              lambda ctx: pending_in(controller, ctx[0]))


def test_sweeper_resumes_a_truncation(controller):
    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        cut = scale_crashes.truncation_setup(controller, scope)
        interrupted(controller.streams, "finish_truncate_stream",
                    lambda: controller.streams.truncate_stream(scope, scale_crashes.STREAM, cut))
        return scope, cut

    def check(ctx, outcomes):
        assert outcomes == [("truncate", "completed")]
        scale_crashes.assert_truncated(controller, *ctx)

    lose_each(setup, lambda ctx: swept(controller, f"{ctx[0]}/{scale_crashes.STREAM}"), check,
              lambda ctx: pending_in(controller, ctx[0]))


def test_sweeper_resumes_a_rolling_commit(controller):
    """The stream is COMMITTING_TXN with its batch recorded, nothing of it applied."""
    def setup():
        s = Setup(controller, roll=True, segments=1)
        interrupted(controller.transactions, "finish_commit_stream",
                    lambda: controller.transactions.commit(s.scope, STREAM, s.txn.txn_id))
        assert controller.store.get_stream(s.scope, STREAM).state == StreamState.COMMITTING_TXN.value
        return s

    def check(s, outcomes):
        assert outcomes and all(outcome == "completed" for _, outcome in outcomes), outcomes
        s.assert_committed()

    lose_each(setup, lambda s: swept(controller, f"{s.scope}/{STREAM}"), check, lambda s: s.pending())


def test_sweeper_resumes_a_seal(controller):
    """A seal recorded with a commit requested and another transaction open."""
    def setup():
        s = Setup(controller, roll=False, segments=2)
        other = controller.transactions.begin(s.scope, STREAM, lease_ms=60_000)
        with commits_left_waiting(controller):
            controller.transactions.commit(s.scope, STREAM, s.txn.txn_id)
        interrupted(controller.streams, "finish_seal_stream",
                    lambda: controller.streams.seal_stream(s.scope, STREAM))
        return s, other

    def check(ctx, outcomes):
        s, other = ctx
        assert outcomes and all(outcome == "completed" for _, outcome in outcomes), outcomes
        s.assert_committed(StreamState.SEALED)
        assert controller.transactions.status(s.scope, STREAM, other.txn_id).state == TxnState.ABORTED

    lose_each(setup, lambda ctx: swept(controller, f"{ctx[0].scope}/{STREAM}"), check,
              lambda ctx: ctx[0].pending())


def test_sweeper_resumes_a_delete(controller):
    """The delete of a sealed stream (an inline event and one in S3) with a watermark stream, which goes
    with it."""
    def setup():
        ctx = Ctx(scope="f" + uuid.uuid4().hex[:12])
        controller.streams.create_scope(ctx.scope)
        controller.streams.create_stream(ctx.scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
        name = segment_name(ctx.scope, STREAM, 0)
        controller.segments.append(name, "w", 0, 1, frame(b"x" * 10))
        controller.segments.append(name, "w", 1, 1, frame(b"x" * 5000))
        controller.watermarks.note_time(ctx.scope, STREAM, "w", 1_000, {0: controller.segments.info(name).length})
        controller.streams.seal_stream(ctx.scope, STREAM)
        interrupted(controller.streams, "finish_delete_stream",
                    lambda: controller.streams.delete_stream(ctx.scope, STREAM))
        return ctx

    def check(ctx, outcomes):
        assert outcomes == [("delete", "completed")]
        for stream in (STREAM, mark_stream_name(STREAM)):
            with pytest.raises(StreamNotFound):
                controller.store.get_stream(ctx.scope, stream)
            assert not any(True for _ in MetadataItem.query(stream_pk(ctx.scope, stream), consistent_read=True))
            with pytest.raises(SegmentNotFound):
                controller.segments.info(segment_name(ctx.scope, stream, 0))
        listed = controller.deployment.s3.list_objects_v2(Bucket=controller.deployment.bucket,
                                                          Prefix=f"segments/{ctx.scope}/")
        assert listed.get("KeyCount", 0) == 0
        assert controller.streams.delete_scope(ctx.scope) is True

    lose_each(setup, lambda ctx: swept(controller, f"{ctx.scope}/{STREAM}"), check,
              lambda ctx: pending_in(controller, ctx.scope))


# -- retention, reader leases, watermarks, key-value tables ------------------------------------------


EVENT = frame(b"x" * 96)  # 100 bytes


def test_retention_cycle_that_truncates(controller):
    """Three cycles record the tail at 100, 200 and 300 bytes; the fourth, at 400 bytes, truncates at
    100 (the most recent cut that keeps at least 250 bytes) and drops the record at it."""
    retention = RetentionTasks(controller.streams, RetentionSettings(frequency_ms=1))

    def append(scope: str, n: int) -> None:
        controller.segments.append(segment_name(scope, "s", 0), "w", n, 1, EVENT)

    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(1), retention_policy=RetentionPolicy.by_size(250)))
        for t in range(3):
            append(scope, t)
            assert retention.cycle(scope, "s", now=(t + 1) * 1000).outcome == "kept"
        append(scope, 3)
        return scope

    def check(scope, decision):
        assert (decision.outcome, decision.retained_bytes) == ("truncated", 300), decision
        assert {p.segment.segment_id: p.offset for p in controller.streams.head(scope, "s")} == {0: 100}
        record = controller.store.get_stream(scope, "s")
        assert record.state == StreamState.ACTIVE.value and record.workflow is None
        assert controller.segments.info(segment_name(scope, "s", 0)).start_offset == 100
        kept = RetentionRecord.query(stream_pk(scope, "s"), RetentionRecord.sk.startswith("rs#"), consistent_read=True)
        assert [r.size for r in kept] == [200, 300, 400]
        remembered = RetentionDecisionRecord.get(stream_pk(scope, "s"), DECISION_KEY, consistent_read=True)
        assert (remembered.outcome, remembered.decided_ms) == ("truncated", 4000)

    lose_each(setup, lambda scope: retention.cycle(scope, "s", now=4000), check,
              lambda scope: pending_in(controller, scope))


LEASE_MS = 2_000


def test_reader_lease_reaping(controller, monkeypatch):
    """Two readers die, one after passing a checkpoint the other never passes: the lease job takes both
    offline, which completes the checkpoint, and the group (a subscriber that releases at its last
    checkpoint) acknowledges the checkpoint's cut to retention."""
    groups = controller.reader_groups

    def report(scope, offsets, **kwargs):
        return SyncRequest(positions=[SegmentOffset(stream=f"{scope}/s", segment_id=s, offset=o)
                                      for s, o in offsets.items()], **kwargs)

    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        for sid in (0, 1):
            for n in range(4):
                controller.segments.append(segment_name(scope, "s", sid), "w", n, 1, EVENT)
        groups.create(scope, "g", ReaderGroupConfig(
            streams=[StreamRange(scope=scope, stream="s")], automatic_checkpoint_interval_ms=0,
            group_refresh_time_ms=100, reader_lease_ms=LEASE_MS,
            retention_type=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT))
        groups.add_reader(scope, "g", "r1")
        groups.add_reader(scope, "g", "r2")
        held = {}
        for reader in ("r1", "r2"):
            (held[reader],) = [a.segment.segment_id for a in groups.sync(scope, "g", reader, SyncRequest()).segments]
        groups.sync(scope, "g", "r2", report(scope, {held["r2"]: 200}))
        groups.initiate_checkpoint(scope, "g", "cp")
        groups.sync(scope, "g", "r1", report(scope, {held["r1"]: 300}, checkpoint="cp"))
        return scope, {held["r1"]: 300, held["r2"]: 200}

    def run(ctx):
        later = reader_groups_module._now() + LEASE_MS + 1
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(reader_groups_module, "_now", lambda: later)
            return groups.expire_readers(ctx[0], "g")

    def check(ctx, expired):
        scope, cut = ctx
        info = groups.checkpoint(scope, "g", "cp")
        assert info.complete and {p.segment.segment_id: p.offset for p in info.cuts[0].positions} == cut
        assert groups.info(scope, "g").online_readers == []
        (acknowledged,) = groups.acknowledged_cuts(scope, "g")
        assert {p.segment.segment_id: p.offset for p in acknowledged.cut.positions} == cut, "cut not published"
        assert expired == ["r1", "r2"]
        lease = ReaderLeaseRecord.get(reader_group_pk(scope, "g"), LEASE_KEY, consistent_read=True)
        assert lease.deadline_ms is None and lease.deadline_shard is None

    lose_each(setup, run, check, lambda ctx: pending_in(controller, ctx[0]))


def test_watermark(controller):
    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
        controller.segments.append(segment_name(scope, "s", 0), "w", 0, 1, EVENT)
        controller.watermarks.note_time(scope, "s", "w1", 1_000, {0: len(EVENT)})
        return scope

    def check(scope, watermark):
        assert watermark is not None and (watermark.lower_ms, watermark.upper_ms) == (1_000, 1_000)
        marks = segment_events(controller.segments, segment_name(scope, mark_stream_name("s"), 0))
        assert marks == [watermark.to_json()]
        record = controller.store.get_stream(scope, "s")
        assert record.watermark_count == 1 and record.last_watermark["lower_ms"] == 1_000
        assert controller.watermarks.compute(scope, "s") is None  # nothing moved since

    lose_each(setup, lambda scope: controller.watermarks.compute(scope, "s"), check,
              lambda scope: pending_in(controller, scope))


@pytest.mark.parametrize("by", ["request", "sweeper"])
def test_key_value_table_delete(controller, by):
    tables = KeyValueTables(controller.store)

    def setup():
        scope = "f" + uuid.uuid4().hex[:12]
        controller.streams.create_scope(scope)
        tables.create(scope, TABLE, CONFIG)
        _fill(tables, scope)
        if by == "sweeper":
            interrupted(KeyValueTables, "finish_delete", lambda: tables.delete(scope, TABLE))
        return scope

    def run(scope):
        if by == "request":
            return tables.delete(scope, TABLE)
        return swept(controller, f"{scope}/{TABLE}")

    def check(scope, result):
        assert result == (True if by == "request" else [("delete-kvt", "completed")])
        with pytest.raises(KeyValueTableNotFound):
            tables.info(scope, TABLE)
        assert _entries_left(scope) == 0
        assert controller.streams.delete_scope(scope) is True

    lose_each(setup, run, check, lambda scope: pending_in(controller, scope))
