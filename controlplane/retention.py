"""Retention: the retention set, time/size limits, and consumption-based retention (seeds 000, 002).

Each retention cycle of a stream:

1. Records the tail stream cut in the stream's *retention set*, with the time and the stream's size
   from its very beginning up to the cut, unless the latest record is younger than the frequency.
   Past ``max_records`` records it thins the set (``_thin``), so it stays bounded even when nothing
   truncates.
2. Finds the two limit cuts in the retention set, as Pravega does: ``min`` is the most recent cut
   that keeps at least the minimum (bytes or time) and ``max`` the oldest cut that keeps at least the
   minimum and at most the maximum (``min`` if there is none).
3. Without consumption-based retention, truncates at ``min``. With it, computes the *subscriber lower
   bound* (the earliest position of every active subscriber's acknowledged cut, per key) and applies
   cases i to v of seed 000: the lower bound when truncating there keeps between the limits; the min
   cut, or the closest retention-set cut before the lower bound if they overlap, when the lower bound
   keeps too little; the max cut (or a cut relative to it when they overlap) when it keeps too much.
   Subscribers silent for longer than the subscriber timeout are ignored. With no subscriber at all,
   the plain time/size rule applies at once (as Pravega does with an empty lower bound). With
   subscribers that all timed out, the maximum still applies (a maximum is a promise about storage
   and cost, whatever the subscribers do), and the plain rule applies once the fallback timeout has
   passed.
4. Truncates only forward, through the ordinary truncation workflow, then drops the retention record
   it truncated at and every one before it, as Pravega's ``deleteStreamCutBefore`` does.

The subscriber fence: a cycle decides from the subscriber set it read, and a group may register (at
the head, or a reset back to an earlier start) while it decides. Each stream has a fence item (a
counter) that every registration moves in the same transaction that writes the subscriber record,
and that a consumption-based cycle moves in the same transaction that begins its truncation (the
stream record's step to TRUNCATING), each on the condition that the fence still holds the value it
read, the cycle before reading the subscribers, a registration before reading the head it starts at.
Of a cycle and a registration that overlap, the one that commits second is refused: a refused cycle
truncates nothing (the next cycle decides again), a refused registration reads the head again. So no
truncation passes a subscriber registered while it was decided, and no group registers at a head a
truncation already moved. Removing a subscriber never moves the fence: it only allows more truncation.

Every write of a subscriber or retention record is conditioned on the token of the write it read (a
random ``write_id`` each write stores), never on a wall-clock time: two hosts' clocks may stamp the
same millisecond. A retention record is saved only while the stream is the incarnation the cycle read.

Every decision (and why nothing was truncated) is returned, so the Dagster run can show it.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pynamodb.exceptions import DeleteError, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from controlplane.cuts import lower_bound
from controlplane.models import (
    STREAM_SK,
    RetentionDecisionRecord,
    RetentionRecord,
    SegmentRecord,
    StreamRecord,
    SubscriberRecord,
    stream_pk,
    workflow_shard,
)
from controlplane.parallel import in_parallel
from controlplane.store import failed_condition
from controlplane.streams import StreamTasks, _range
from rillet.errors import (
    InvalidArgument,
    NotFound,
    ReaderGroupNotFound,
    RilletError,
    StreamNotFound,
    WriteConflict,
)
from rillet.models import (
    AcknowledgedCut,
    ConsumptionLimits,
    RetentionDecision,
    RetentionPolicy,
    RetentionStatus,
    RetentionType,
    SegmentPosition,
    SegmentRange,
    StreamConfiguration,
    StreamCutBody,
    StreamState,
    SubscriberLag,
)
from rillet.stream_cut import Ordering, compare_positions, segment_is_before, validity_problem
from rillet.units import human_bytes, human_duration, human_size, rounded_duration

DECISION_KEY = "retention-decision"
# The subscriber set's fence: a SubscriberRecord item whose ``generation`` counts the registrations and
# fenced truncations of the stream (see the module docstring). Outside the "sub#" prefix, so it is no
# subscriber; in the stream's partition, so it goes with the stream.
FENCE_KEY = "subscribers"
_ATTEMPTS = 10


_CONDITION = "ConditionalCheckFailed"
_RACES = {_CONDITION, "TransactionConflict"}  # a concurrent write: reading again may help


class _KeyedTransactWrite(TransactWrite):
    """A TransactWrite of metadata items that tells which item a refusal names, by the item's key.

    DynamoDB lists a refusal's reasons in the order of the items sent, and PynamoDB
    (``Connection.transact_write_items``) sends the condition checks, then the deletes, the puts and
    the updates, whatever order they were added in: a write's position is not the order of the calls.
    """

    _SENT_ORDER = ("condition_check", "delete", "save", "update")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._keys: dict[str, list[tuple[str, str]]] = {kind: [] for kind in self._SENT_ORDER}

    def condition_check(self, model_cls, hash_key, range_key=None, condition=None):
        super().condition_check(model_cls, hash_key, range_key, condition)
        self._keys["condition_check"].append((hash_key, range_key))

    def delete(self, model, condition=None, *, add_version_condition=True):
        super().delete(model, condition, add_version_condition=add_version_condition)
        self._keys["delete"].append((model.pk, model.sk))

    def save(self, model, condition=None, return_values=None):
        super().save(model, condition, return_values)
        self._keys["save"].append((model.pk, model.sk))

    def update(self, model, actions, condition=None, return_values=None, *, add_version_condition=True):
        super().update(model, actions, condition, return_values, add_version_condition=add_version_condition)
        self._keys["update"].append((model.pk, model.sk))

    def refusals(self, error: TransactWriteError) -> dict[tuple[str, str], str]:
        """Why DynamoDB refused each item it names, by (pk, sk); empty when it names none (an error
        other than a cancelled transaction)."""
        sent = [key for kind in self._SENT_ORDER for key in self._keys[kind]]
        reasons = error.cancellation_reasons or []
        if len(reasons) != len(sent):
            return {}
        return {key: reason.code for key, reason in zip(sent, reasons) if reason is not None}


def now_ms() -> int:
    return int(time.time() * 1000)


def _positions(cut: list) -> list[SegmentPosition]:
    return [SegmentPosition(segment=SegmentRange(segment_id=int(s), low=lo, high=hi), offset=int(o))
            for s, lo, hi, o in cut]


def _wire(positions: list[SegmentPosition]) -> list[list]:
    return [[p.segment.segment_id, p.segment.low, p.segment.high, p.offset] for p in positions]


@dataclass(frozen=True)
class RetentionSettings:
    frequency_ms: int = 30 * 60_000  # a new retention-set record at most this often
    # The retention set's bound: past it, each new record thins the oldest dense stretch (see _thin), so
    # the set a cycle reads in one Query stays within max_records items even while nothing truncates.
    max_records: int = 500

    @classmethod
    def from_env(cls) -> RetentionSettings:
        value = os.environ.get("RILLET_RETENTION_FREQUENCY_MS")
        return cls(frequency_ms=int(value)) if value else cls()


@dataclass
class SubscriberStatus:
    group: str
    active: bool
    unconsumed_bytes: int
    silent_for_ms: int


@dataclass
class Decision:
    stream: str
    outcome: str  # "truncated", "kept" or "skipped"
    reason: str
    size_bytes: int = 0  # head to tail
    retained_bytes: int = 0  # head to tail after this cycle
    cut: list[SegmentPosition] | None = None
    subscribers: list[SubscriberStatus] = field(default_factory=list)
    consumption: bool = False  # the stream's policy is consumption-based
    limits: ConsumptionLimits | None = None  # its subscriber timeout and fallback, for the operator's metrics
    # False when the cycle decided without reading the stream's segments (it could not truncate yet): the
    # sizes are unknown (0 here), and the last measured decision stays the one ``status`` shows.
    measured: bool = True


def fallback_due_in_ms(limits: ConsumptionLimits, subscribers: list[SubscriberStatus]) -> int | None:
    """How long until a cycle stops honouring the subscribers (0 or less: it already does; None: there is
    no subscriber, the time/size policy applies at once): when every subscriber has been silent for
    longer than the timeout and, with a fallback, the latest acknowledgement is the fallback old (the
    time/size policy applies), or without one, the timeout passed (only the maximum still applies).
    Read-only: the rule ``_choose`` applies, stated for the operator."""
    if not subscribers:
        return None
    latest = min(s.silent_for_ms for s in subscribers)
    return max(limits.subscriber_timeout_ms + 1, limits.fallback_after_ms or 0) - latest


def _as_read(model: type, record: SubscriberRecord | RetentionRecord):
    """The condition that ``record`` is still the write that was read: its token, or, for an item
    written before writes carried one, no token and the same generation (subscriber) or instant
    (retention record, whose key is that instant)."""
    if record.write_id:
        return model.write_id == record.write_id
    same = (model.generation == record.generation if model is SubscriberRecord
            else model.recorded_ms == record.recorded_ms)
    return model.write_id.does_not_exist() & same


class RetentionTasks:
    def __init__(self, streams: StreamTasks, settings: RetentionSettings | None = None) -> None:
        self.streams = streams
        self.store = streams.store
        self.settings = settings or RetentionSettings()

    # -- sizes ---------------------------------------------------------------------------------

    @staticmethod
    def size_till(records: list[SegmentRecord], cut: list[SegmentPosition]) -> int:
        """Bytes of the stream from its very beginning up to ``cut``."""
        offsets = {p.segment.segment_id: p.offset for p in cut}
        segments = [p.segment for p in cut]
        total = 0
        for record in records:
            if record.segment_id in offsets:
                total += offsets[record.segment_id]
            elif segment_is_before(_range(record), segments):
                total += record.sealed_size or 0
        return total

    # -- subscribers -----------------------------------------------------------------------------

    @staticmethod
    def fence(scope: str, stream: str) -> int | None:
        """The stream's subscriber fence (None before anything moved it). Read it before what the
        fenced write depends on: the subscriber set, or the head a registration starts at."""
        try:
            return int(SubscriberRecord.get(stream_pk(scope, stream), FENCE_KEY, consistent_read=True).generation)
        except SubscriberRecord.DoesNotExist:
            return None

    @staticmethod
    def move_fence(tx: TransactWrite, scope: str, stream: str, read: int | None, token: str) -> None:
        """Add to ``tx`` the move of the stream's fence on from ``read``: refused if it moved since."""
        held = SubscriberRecord.pk.does_not_exist() if read is None else SubscriberRecord.generation == read
        tx.save(SubscriberRecord(stream_pk(scope, stream), FENCE_KEY, group=FENCE_KEY, generation=(read or 0) + 1,
                                 cut=[], updated_ms=0, write_id=token), condition=held)

    @staticmethod
    def fence_moved_by(scope: str, stream: str, token: str) -> bool:
        """Whether the fence's last move was the write carrying ``token`` (a lost answer's resend)."""
        try:
            return SubscriberRecord.get(stream_pk(scope, stream), FENCE_KEY, consistent_read=True).write_id == token
        except SubscriberRecord.DoesNotExist:
            return False

    def subscribe(self, tx: TransactWrite, scope: str, stream: str, group: str, generation: int,
                  start: list[SegmentPosition], fence: int | None, token: str, condition=None,
                  incarnation: str | None = None) -> None:
        """Add to ``tx`` two writes: the subscriber record of ``group`` (of ``incarnation``, if it has one)
        acknowledging ``start`` (where it starts reading), then the fence's move from ``fence``."""
        tx.save(SubscriberRecord(stream_pk(scope, stream), f"sub#{group}", group=group, generation=generation,
                                 cut=_wire(start), updated_ms=now_ms(), write_id=token, group_incarnation=incarnation),
                condition=condition)
        self.move_fence(tx, scope, stream, fence, token)

    @staticmethod
    def unsubscribe(tx: TransactWrite, scope: str, stream: str, group: str) -> None:
        """Add to ``tx`` the removal of ``group``'s subscriber record, of whatever generation."""
        tx.delete(SubscriberRecord(stream_pk(scope, stream), f"sub#{group}"))

    def add_subscriber(self, scope: str, stream: str, group: str, generation: int,
                       start: list[SegmentPosition], replace: bool = True) -> None:
        """Register a subscriber on its own (reader groups register in their own transaction); until it
        publishes, its acknowledged cut is where it starts reading.

        Without ``replace`` an existing registration (and the cut it acknowledged) is left alone; with
        it, only a registration of the same or an older generation is replaced (a reset that lost a race
        to a later one must not take its subscription back).
        """
        absent = SubscriberRecord.pk.does_not_exist()
        condition = absent | (SubscriberRecord.generation <= generation) if replace else absent
        own = (stream_pk(scope, stream), f"sub#{group}")
        for _ in range(_ATTEMPTS):
            fence, token = self.fence(scope, stream), uuid.uuid4().hex
            try:
                with _KeyedTransactWrite(connection=self.store.transaction_connection) as tx:
                    self.subscribe(tx, scope, stream, group, generation, start, fence, token, condition)
                return
            except TransactWriteError as e:
                refused = tx.refusals(e)
                if self.fence_moved_by(scope, stream, token) or refused.get(own) == _CONDITION:
                    return  # applied (its answer was lost), or a registration that stays
                if not set(refused.values()) & _RACES:
                    raise
        raise WriteConflict(f"the subscribers of {scope}/{stream} are too contended; try again")

    def remove_subscriber(self, scope: str, stream: str, group: str, generation: int) -> None:
        """Drop the registration of ``generation`` (or older): one a later reset made stays."""
        try:
            SubscriberRecord(stream_pk(scope, stream), f"sub#{group}").delete(
                condition=SubscriberRecord.generation <= generation)
        except DeleteError as e:
            if not failed_condition(e):
                raise

    def subscribers(self, scope: str, stream: str) -> list[SubscriberRecord]:
        return list(SubscriberRecord.query(stream_pk(scope, stream), SubscriberRecord.sk.startswith("sub#"),
                                           consistent_read=True))

    def acknowledged_cut(self, scope: str, stream: str, group: str) -> AcknowledgedCut | None:
        """The cut subscriber ``group`` ("scope/group") acknowledged in a stream; None if it is none of its."""
        try:
            record = SubscriberRecord.get(stream_pk(scope, stream), f"sub#{group}", consistent_read=True)
            incarnation = int(self.store.get_stream(scope, stream).created_ms)  # the stream's items go with it
        except (SubscriberRecord.DoesNotExist, StreamNotFound):
            return None
        return AcknowledgedCut(cut=StreamCutBody(scope=scope, stream=stream, positions=_positions(record.cut),
                                                 incarnation=incarnation),
                               updated_ms=record.updated_ms, generation=record.generation)

    def status(self, scope: str, stream: str) -> RetentionStatus:
        """The last decision and every subscriber with its lag (one query of the stream's subscribers, and
        the segment list and tail once if there is any)."""
        record = self.store.get_stream(scope, stream)
        policy = StreamConfiguration.model_validate(record.configuration).retention_policy
        timeout = policy.consumption.subscriber_timeout_ms if policy and policy.consumption else None
        subscribers, now = self.subscribers(scope, stream), now_ms()
        lags = []
        if subscribers:
            segments = self.store.list_segments(scope, stream)
            tail_size = self.size_till(segments, self.streams.tail(scope, stream, record))
            for sub in subscribers:
                cut = _positions(sub.cut)
                lags.append(SubscriberLag(
                    group=sub.group, generation=sub.generation, updated_ms=sub.updated_ms,
                    cut=StreamCutBody(scope=scope, stream=stream, positions=cut, incarnation=int(record.created_ms)),
                    active=None if timeout is None else now - sub.updated_ms <= timeout,
                    lag_bytes=tail_size - self.size_till(segments, cut)))
        return RetentionStatus(last_decision=self._last_decision(record), subscribers=lags)

    @staticmethod
    def _last_decision(record: StreamRecord) -> RetentionDecision | None:
        try:
            last = RetentionDecisionRecord.get(stream_pk(record.scope, record.stream), DECISION_KEY)
        except RetentionDecisionRecord.DoesNotExist:
            return None
        if last.stream_created_ms != record.created_ms:
            return None  # about an earlier stream of that name, written as it was deleted
        cut = (StreamCutBody(scope=record.scope, stream=record.stream, positions=_positions(last.cut),
                             incarnation=int(last.stream_created_ms)) if last.cut else None)
        return RetentionDecision(decided_ms=last.decided_ms, outcome=last.outcome, reason=last.reason,
                                 retained_bytes=last.retained_bytes, cut=cut)

    def update_truncation_cut(self, scope: str, stream: str, group: str, generation: int,
                              offsets: dict[int, int], incarnation: str | None = None) -> list[SegmentPosition]:
        """A subscriber acknowledges consumption up to a cut: valid, and never behind its previous one.

        Only the subscriber of ``incarnation`` (None: one registered without any) acknowledges: the
        publish of a group deleted meanwhile, landing after a group of that name subscribed again, is
        refused (ReaderGroupNotFound) whatever its generation, rather than becoming the new group's cut.
        A record without an incarnation (written by a previous release: its create, or its reset of a
        group of this release, a full put) takes the publish, as that release did, and the incarnation is
        written back with it, so the group's later publishes are fenced again.
        The write is conditioned on the token of the record it read: a reset, a delete and create again
        (or another publish) in between, in whatever millisecond, makes it read again and judge the cut
        against the new record.
        """
        cut = self.streams.resolve_cut(scope, stream, offsets)
        key = (stream_pk(scope, stream), f"sub#{group}")
        for _ in range(_ATTEMPTS):
            try:
                record = SubscriberRecord.get(*key, consistent_read=True)
            except SubscriberRecord.DoesNotExist:
                raise NotFound(f"{group} is not a subscriber of {scope}/{stream}") from None
            if generation < record.generation:
                raise InvalidArgument(f"generation {generation} is older than the subscriber's {record.generation}")
            if record.group_incarnation not in (incarnation, None):
                raise ReaderGroupNotFound(f"reader group {group} (incarnation {incarnation}) was deleted: the "
                                          f"subscriber of {scope}/{stream} is a group created again under its name",
                                          incarnation=incarnation)
            if compare_positions(cut, _positions(record.cut)) in (Ordering.BEFORE, Ordering.OVERLAPPING):
                raise InvalidArgument("a subscriber's truncation stream cut never moves backwards")
            token = uuid.uuid4().hex
            actions = [SubscriberRecord.cut.set(_wire(cut)), SubscriberRecord.updated_ms.set(now_ms()),
                       SubscriberRecord.generation.set(generation), SubscriberRecord.write_id.set(token)]
            if record.group_incarnation is None and incarnation is not None:
                actions.append(SubscriberRecord.group_incarnation.set(incarnation))
            try:
                record.update(actions=actions, condition=_as_read(SubscriberRecord, record))
                return cut
            except UpdateError as e:
                if not failed_condition(e):
                    raise
            try:
                if SubscriberRecord.get(*key, consistent_read=True).write_id == token:
                    return cut  # applied: a resend after a lost answer was refused by its own first attempt
            except SubscriberRecord.DoesNotExist:
                pass
        raise WriteConflict(f"subscriber {group} of {scope}/{stream} is too contended; try again")

    # -- the cycle ---------------------------------------------------------------------------------

    def streams_in_bucket(self, bucket: int) -> list[StreamRecord]:
        return list(StreamRecord.retention.query(bucket))

    def run_bucket(self, bucket: int, now: int | None = None) -> list[Decision]:
        """The retention cycle of every stream in ``bucket``, several streams at once (each is a few
        round trips: controlplane.parallel), so a bucket's run takes a share of its streams' latency."""
        def one(record: StreamRecord) -> Decision:
            try:
                return self.cycle(record.scope, record.stream, now)
            except RilletError as e:
                return Decision(f"{record.scope}/{record.stream}", "skipped", f"{e.code}: {e.message}")

        return in_parallel(one, self.streams_in_bucket(bucket))

    def cycle(self, scope: str, stream: str, now: int | None = None) -> Decision:
        """Decide and apply one stream's retention, and remember a measured decision for ``status``."""
        now = now if now is not None else now_ms()
        record = self.store.get_stream(scope, stream)
        decision = self._decide(record, now)
        if decision.measured:
            self._remember(record, decision, now)
        return decision

    def _remember(self, record: StreamRecord, decision: Decision, now: int) -> None:
        """Overwrite the stream's last decision, unless a later cycle's is already there (cycles may
        overlap and finish out of order)."""
        remembered = RetentionDecisionRecord(
            stream_pk(record.scope, record.stream), DECISION_KEY, decided_ms=now, stream_created_ms=record.created_ms,
            outcome=decision.outcome, reason=decision.reason, retained_bytes=decision.retained_bytes,
            cut=_wire(decision.cut) if decision.cut else None)
        try:
            remembered.save(condition=RetentionDecisionRecord.pk.does_not_exist()
                            | (RetentionDecisionRecord.decided_ms < now))
        except PutError as e:
            if not failed_condition(e):
                raise

    def _decide(self, record: StreamRecord, now: int) -> Decision:
        scope, stream = record.scope, record.stream
        name = f"{scope}/{stream}"
        policy = StreamConfiguration.model_validate(record.configuration).retention_policy
        if policy is None:
            return Decision(name, "skipped", "no retention policy")
        if StreamState(record.state) != StreamState.ACTIVE:
            return Decision(name, "skipped", f"the stream is {record.state}")
        fenced = policy.consumption is not None
        fence = self.fence(scope, stream) if fenced else None  # before the subscribers are read
        retention_set = self._retention_set(record)
        if self._too_young_to_truncate(policy, retention_set, now):
            oldest = min(retention_set, key=lambda r: r.recorded_ms)
            return Decision(name, "kept", f"no cut to truncate at yet: the oldest recorded cut is "
                            f"{rounded_duration(now - oldest.recorded_ms)} old, the minimum is "
                            f"{human_duration(policy.retention_param)}; {self._cut_spacing()} "
                            f"(not measured this cycle)", measured=False)
        segments = self.store.list_segments(scope, stream)
        by_id = {s.segment_id: s for s in segments}
        head = self.streams.head(scope, stream, record)
        tail = self.streams.tail(scope, stream, record)
        head_size, tail_size = self.size_till(segments, head), self.size_till(segments, tail)
        retention_set = self._record_tail(record, retention_set, tail, tail_size, now)
        decision = Decision(name, "kept", "", size_bytes=tail_size - head_size, retained_bytes=tail_size - head_size)
        target = self._choose(policy, retention_set, tail_size, head, head_size, now, scope, stream, segments,
                              by_id, decision)
        if target is None:
            return decision
        if compare_positions(target, head) != Ordering.AFTER:
            decision.reason = decision.reason or "the chosen cut is not ahead of the head"
            return decision
        if not self._truncate(record, target, fenced, fence):
            decision.reason = ("a subscriber registered or moved back while this cycle decided: nothing is "
                               "truncated, the next cycle decides again")
            return decision
        decision.outcome, decision.cut = "truncated", target
        decision.retained_bytes = tail_size - self.size_till(segments, target)
        for old in retention_set:
            if compare_positions(_positions(old.cut), target) in (Ordering.BEFORE, Ordering.EQUAL):
                self._drop(old)
        return decision

    def _truncate(self, record: StreamRecord, target: list[SegmentPosition], fenced: bool,
                  fence: int | None) -> bool:
        """Truncate at ``target`` through the ordinary truncation workflow, its first step (the stream
        record's move to TRUNCATING at the new head) taken here in one transaction with the move of the
        subscriber fence from ``fence`` when ``fenced``. False when DynamoDB refuses the fence: a
        subscriber registered or moved back since the cycle read the subscribers, and nothing is
        truncated.

        The stream record's step is conditioned on its version and incarnation; when DynamoDB refuses
        the stream record, a change that leaves what the cycle decided from (state, head,
        configuration) as it was (a watermark, a writer's first time note) is retried on the fresh
        record.
        """
        scope, stream = record.scope, record.stream
        fence_key = (stream_pk(scope, stream), FENCE_KEY)
        for _ in range(_ATTEMPTS):
            token = uuid.uuid4().hex
            try:
                with _KeyedTransactWrite(connection=self.store.transaction_connection) as tx:
                    tx.update(record, actions=[
                        StreamRecord.state.set(StreamState.TRUNCATING.value),
                        StreamRecord.workflow.set({"name": "truncate"}), StreamRecord.pending.set(workflow_shard(record.pk, record.sk)),
                        StreamRecord.pending_since.set(now_ms()), StreamRecord.head.set(_wire(target)),
                        StreamRecord.write_id.set(token)], condition=StreamRecord.created_ms == record.created_ms)
                    if fenced:
                        self.move_fence(tx, scope, stream, fence, token)
                break
            except TransactWriteError as e:
                fresh = self.store.get_stream(scope, stream)
                if fresh.write_id == token:
                    break  # applied: a resend after a lost answer was refused by its own first attempt
                refused = tx.refusals(e)
                if refused.get(fence_key) == _CONDITION:
                    return False
                if not set(refused.values()) & _RACES:
                    raise
                decided_from = ("created_ms", "state", "workflow", "head", "configuration")
                if any(getattr(fresh, a) != getattr(record, a) for a in decided_from):
                    raise WriteConflict(f"stream {scope}/{stream} changed while its retention was decided") from e
                record = fresh
        else:
            raise WriteConflict(f"stream {scope}/{stream} is too contended for retention; the next cycle tries again")
        self.streams.truncate_stream(scope, stream, {p.segment.segment_id: p.offset for p in target})
        return True

    @staticmethod
    def _retention_set(record: StreamRecord) -> list[RetentionRecord]:
        return list(RetentionRecord.query(stream_pk(record.scope, record.stream), RetentionRecord.sk.startswith("rs#"),
                                          consistent_read=True))

    def _record_due(self, records: list[RetentionRecord], now: int) -> bool:
        return not records or now - records[-1].recorded_ms >= self.settings.frequency_ms

    def _too_young_to_truncate(self, policy: RetentionPolicy, records: list[RetentionRecord], now: int) -> bool:
        """Whether the cycle can skip the stream's segments and tail: a plain time policy (no subscribers
        to report on), no tail to record yet, and no recorded cut old enough to keep the minimum (the
        only cuts it could truncate at)."""
        return (policy.consumption is None and policy.retention_type == RetentionType.TIME
                and not self._record_due(records, now)
                and all(now - r.recorded_ms < policy.retention_param for r in records))

    def _record_tail(self, record: StreamRecord, records: list[RetentionRecord], tail: list[SegmentPosition],
                     size: int, now: int) -> list[RetentionRecord]:
        """The retention set as read (``records``), with the tail recorded in it when the latest record is
        old enough: only while the stream is the incarnation the cycle read (a cycle racing a delete and
        create again must not put the old stream's cut in the new stream's set)."""
        scope, stream = record.scope, record.stream
        if self._record_due(records, now):
            latest = RetentionRecord(stream_pk(scope, stream), f"rs#{now:015d}", recorded_ms=now, size=size,
                                     cut=_wire(tail), write_id=uuid.uuid4().hex)
            try:
                with _KeyedTransactWrite(connection=self.store.transaction_connection) as tx:
                    tx.condition_check(StreamRecord, stream_pk(scope, stream), STREAM_SK,
                                       condition=StreamRecord.created_ms == record.created_ms)
                    tx.save(latest, condition=RetentionRecord.pk.does_not_exist())
            except TransactWriteError as e:
                refused = tx.refusals(e)
                if refused.get((stream_pk(scope, stream), STREAM_SK)) == _CONDITION:
                    raise StreamNotFound(f"stream {scope}/{stream} was deleted (and perhaps created again) "
                                         "while its retention was decided") from e
                if refused.get((latest.pk, latest.sk)) != _CONDITION:
                    raise
                # there already: this cycle's own write (a lost answer), or a concurrent cycle's of that instant
                latest = RetentionRecord.get(latest.pk, latest.sk, consistent_read=True)
            records = [*records, latest]
        return self._thin(records)

    def _thin(self, records: list[RetentionRecord]) -> list[RetentionRecord]:
        """The set within ``max_records``: drop the record whose neighbours are closest in time (the
        oldest of equals), keeping the first and the last. Sets spaced evenly thin evenly, so a set that
        nothing truncates keeps covering its whole history at a coarser step. A cut chosen from a
        thinned set meets the same limits; it may only lie further from the ideal one (the minimum's
        cut keeps more, the maximum's cut keeps less but still at least the minimum)."""
        records = sorted(records, key=lambda r: r.sk)
        while len(records) > max(self.settings.max_records, 2):
            def span(i: int) -> tuple[int, int]:
                return records[i + 1].recorded_ms - records[i - 1].recorded_ms, i
            dropped = records.pop(min(range(1, len(records) - 1), key=span))
            self._drop(dropped)
        return records

    @staticmethod
    def _drop(record: RetentionRecord) -> None:
        """Delete a retention record only as it was read (a concurrent cycle may have dropped it)."""
        try:
            record.delete(condition=_as_read(RetentionRecord, record))
        except DeleteError as e:
            if not failed_condition(e):
                raise

    def _choose(self, policy: RetentionPolicy, retention_set: list[RetentionRecord], tail_size: int,
                head: list[SegmentPosition], head_size: int, now: int, scope: str, stream: str,
                segments: list[SegmentRecord], by_id: dict[int, SegmentRecord],
                decision: Decision) -> list[SegmentPosition] | None:
        by_size = policy.retention_type == RetentionType.SIZE
        def kept(r: RetentionRecord) -> int:  # bytes or milliseconds kept when truncating at r
            return tail_size - r.size if by_size else now - r.recorded_ms

        lowest, highest = policy.retention_param, policy.retention_max if policy.retention_max is not None else 2**63
        min_cut = min((r for r in retention_set if kept(r) >= lowest), key=kept, default=None)
        max_cut = max((r for r in retention_set if lowest <= kept(r) <= highest), key=kept, default=None) or min_cut
        plain = _positions(min_cut.cut) if min_cut else None
        if policy.consumption is None:
            decision.reason = ("truncate at the most recent cut keeping the minimum" if plain else
                               self._no_cut_reason(by_size, lowest, tail_size, head_size, retention_set, now))
            return plain

        limits = policy.consumption
        decision.consumption, decision.limits = True, limits
        active, statuses = [], []
        for sub in self.subscribers(scope, stream):
            cut = _positions(sub.cut)
            silent = now - sub.updated_ms
            live = silent <= limits.subscriber_timeout_ms
            statuses.append(SubscriberStatus(sub.group, live, tail_size - self.size_till(segments, cut), silent))
            if live:
                active.append(cut)
        decision.subscribers = statuses
        if not active:
            if not statuses:
                decision.reason = "no subscriber: the time/size policy applies"
                return plain
            last_seen = max(now - s.silent_for_ms for s in statuses)
            fallback = limits.fallback_after_ms
            if fallback is not None and now - last_seen >= fallback:
                decision.reason = "no active subscriber for the fallback timeout: time/size policy applies"
                return plain
            if max_cut is not None and self._beyond_max(by_size, highest, tail_size - head_size, head,
                                                        retention_set, now):
                decision.reason = ("no active subscriber: the stream keeps more than the maximum, "
                                   "truncate at the maximum")
                return _positions(max_cut.cut)
            decision.reason = "no active subscriber (and no fallback due): within the maximum, nothing is truncated"
            return None

        bound = lower_bound(active, by_id)
        if validity_problem([p.segment for p in bound]):
            decision.reason = "the subscribers' lower bound is not a valid cut"
            return None
        if by_size:
            # As in Pravega, the limit cuts matter only when the lower bound keeps too little or too much:
            # a lower bound keeping between the limits is a truncation point even in a young retention set.
            return self._by_size(bound, tail_size - self.size_till(segments, bound), plain, min_cut, max_cut,
                                 kept, lowest, highest, retention_set, decision)
        if min_cut is None:
            decision.reason = self._no_cut_reason(by_size, lowest, tail_size, head_size, retention_set, now)
            return None
        return self._by_time(bound, plain, max_cut, retention_set, now, highest, decision)

    def _by_size(self, bound, bound_kept, plain, min_cut, max_cut, kept, lowest, highest, retention_set,
                 decision: Decision) -> list[SegmentPosition] | None:
        if bound_kept < lowest:
            if plain is None:
                decision.reason = "ii: the lower bound keeps less than the minimum and no cut keeps the minimum"
                return None
            if compare_positions(plain, bound) == Ordering.BEFORE:
                decision.reason = "ii: the lower bound keeps less than the minimum: truncate at the minimum"
                return plain
            decision.reason = "iv: the lower bound overlaps the minimum: truncate at the latest cut before it"
            return self._cut_before(bound, retention_set)
        if bound_kept < highest:
            decision.reason = "i: the lower bound keeps between the limits: truncate at the lower bound"
            return bound
        if max_cut is not None and kept(max_cut) < bound_kept:
            decision.reason = "iii: the lower bound keeps more than the maximum: truncate at the maximum"
            return _positions(max_cut.cut)
        decision.reason = "iii: no cut satisfies the maximum: truncate at the lower bound"
        return bound

    def _by_time(self, bound, plain, max_cut, retention_set, now, highest,
                 decision: Decision) -> list[SegmentPosition] | None:
        relation = compare_positions(plain, bound)
        if relation == Ordering.BEFORE:
            decision.reason = "ii: the lower bound keeps less than the minimum: truncate at the minimum"
            return plain
        if relation == Ordering.OVERLAPPING:
            decision.reason = "iv: the lower bound overlaps the minimum: truncate at the latest cut before it"
            return self._cut_before(bound, retention_set)
        too_old = [r for r in retention_set if now - r.recorded_ms >= highest]
        if not too_old:
            decision.reason = "i: the lower bound keeps between the limits: truncate at the lower bound"
            return bound
        max_bound = _positions(max(too_old, key=lambda r: r.recorded_ms).cut)
        relation = compare_positions(bound, max_bound)
        if relation in (Ordering.AFTER, Ordering.EQUAL):
            decision.reason = "i: the lower bound keeps between the limits: truncate at the lower bound"
            return bound
        if relation == Ordering.BEFORE:
            decision.reason = "iii: the lower bound keeps more than the maximum: truncate at the maximum"
            return _positions(max_cut.cut) if max_cut else max_bound
        decision.reason = "v: the lower bound overlaps the maximum: truncate at the maximum bound"
        return max_bound

    def _cut_spacing(self) -> str:
        """How often cuts are recorded: by the retention cycle's runs (Dagster's schedule: every 30 minutes on
        AWS, 5 in standalone), when the last record is ``frequency_ms`` old, so whichever is longer."""
        return f"the retention cycle records a cut at most every {human_duration(self.settings.frequency_ms)}"

    def _no_cut_reason(self, by_size: bool, lowest: int, tail_size: int, head_size: int,
                       retention_set: list[RetentionRecord], now: int) -> str:
        """Why no recorded cut keeps the minimum: the stream holds less than it, or it grew past it after
        its oldest recorded cut (cuts are recorded at most every ``frequency_ms``)."""
        oldest = min(retention_set, key=lambda r: r.recorded_ms)
        every = self._cut_spacing()
        if not by_size:
            return (f"no cut to truncate at yet: the oldest recorded cut is {rounded_duration(now - oldest.recorded_ms)} "
                    f"old, the minimum is {human_duration(lowest)} ({every})")
        held = human_bytes(tail_size - head_size)
        if tail_size - head_size < lowest:
            return f"below the minimum: the stream holds {held}, the minimum is {human_size(lowest)}"
        return (f"no cut to truncate at yet: the stream holds {held}, over the {human_size(lowest)} minimum, "
                f"but truncating at its oldest recorded cut would keep {human_bytes(tail_size - oldest.size)} ({every})")

    @staticmethod
    def _beyond_max(by_size: bool, highest: int, retained: int, head: list[SegmentPosition],
                    retention_set: list[RetentionRecord], now: int) -> bool:
        """Whether the stream now keeps more than the policy's maximum: more bytes, or a recorded cut
        older than the maximum that still lies ahead of the head."""
        if by_size:
            return retained > highest
        return any(now - r.recorded_ms > highest and compare_positions(_positions(r.cut), head) == Ordering.AFTER
                   for r in retention_set)

    @staticmethod
    def _cut_before(bound: list[SegmentPosition], retention_set: list[RetentionRecord]) -> list[SegmentPosition] | None:
        before = [r for r in retention_set if compare_positions(_positions(r.cut), bound) == Ordering.BEFORE]
        return _positions(max(before, key=lambda r: r.recorded_ms).cut) if before else None

    @staticmethod
    def _cut_after(bound: list[SegmentPosition], retention_set: list[RetentionRecord]) -> list[SegmentPosition] | None:
        after = [r for r in retention_set if compare_positions(_positions(r.cut), bound) == Ordering.AFTER]
        return _positions(min(after, key=lambda r: r.recorded_ms).cut) if after else None

