"""Where a group starts on its streams, and its subscriptions there (consumption-based retention).

A group whose retention type is not NONE is a *subscriber* of each of its streams. Its subscriber
records change only in one transaction with the group's record (controlplane.reader_groups.groups): a
create writes them with the new group, a reset writes them at the new generation (and removes those of
streams it drops) with the new state, conditioned on the version it read, and a delete removes them
with the group. So a group and its subscriptions are never at two generations, whatever stops a reset
part way, and a delete that loses a race (a reader's sync) leaves the group subscribed.

Each registration moves the stream's subscriber fence (controlplane.retention), read before the head
it starts at: a retention cycle deciding meanwhile truncates nothing, and a registration racing a
truncation reads the head again. The acknowledged cut then follows every completed checkpoint
(AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT) or the application's explicit cuts
(MANUAL_RELEASE_AT_USER_STREAMCUT). A subscriber never acknowledges bytes already truncated: a start
or a published cut behind the head is taken at the head there, key by key.
"""

from __future__ import annotations

from typing import Any

from pynamodb.transactions import TransactWrite

from controlplane.cuts import upper_bound
from controlplane.reader_groups.state import GroupState, read_record
from rillet.api import CheckpointInfo
from rillet.errors import (
    IllegalState,
    InvalidArgument,
    NotFound,
    ReaderGroupNotFound,
    StreamNotFound,
    StreamRecreated,
    WriteConflict,
)
from rillet.models import (
    AcknowledgedCut,
    ReaderGroupConfig,
    SegmentPosition,
    StreamCutBody,
    StreamDataRetention,
    StreamRange,
)
from rillet.stream_cut import Ordering, compare_positions, validity_problem

# A subscriber group's create or reset is one DynamoDB transaction, of at most 100 writes: the group's
# record (and its head and listing entry), two per subscribed stream (its subscriber record and the
# stream's subscriber fence), up to 7 page writes of a large state (state.PAGE_BYTES) and, for a reset,
# one per stream it stops subscribing to: 3 + 2 x 32 + 7 < 100, and 1 + 2 x 32 + 32 < 100 without pages.
# A reset that would pass 100 with pages is refused (ReaderGroups.reset).
MAX_SUBSCRIBED_STREAMS = 32
MAX_TRANSACTION_WRITES = 100  # DynamoDB's TransactWriteItems


def check_subscription_count(config: ReaderGroupConfig) -> None:
    """InvalidArgument for a subscriber group of more streams than its create or reset can write at once."""
    if len(_subscribed(config)) > MAX_SUBSCRIBED_STREAMS:
        raise InvalidArgument(f"a reader group with retention type {config.retention_type.value} reads at most "
                              f"{MAX_SUBSCRIBED_STREAMS} streams (it has {len(config.streams)}); use NONE for more")


def _subscribed(config: ReaderGroupConfig) -> list[StreamRange]:
    """The streams the group subscribes to (none unless its retention type asks for it)."""
    return [] if config.retention_type == StreamDataRetention.NONE else list(config.streams)


def _offsets(positions: list[SegmentPosition]) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in positions}


def _behind(cut: list[SegmentPosition], head: list[SegmentPosition]) -> bool:
    """Whether ``cut`` lies before ``head`` on some key (part of it is truncated already)."""
    return compare_positions(cut, head) in (Ordering.BEFORE, Ordering.OVERLAPPING)


class Subscriptions:
    """A group's start on each stream, its subscriber records, and the cuts it acknowledges."""

    def __init__(self, streams: Any, retention: Any) -> None:  # StreamTasks, RetentionTasks
        self.streams = streams
        self.retention = retention

    # -- registering (in the group's create, reset and delete transactions) -------------------------

    def starts(self, config: ReaderGroupConfig) -> tuple[ReaderGroupConfig, dict[str, list[SegmentPosition]]]:
        """Where the group starts on each stream, and the configuration naming the incarnation of each
        stream it reads. The stream's record is read before its head: a name deleted and created again
        in between gives positions of the new stream under the old incarnation, which every read then
        refuses (StreamRecreated), never the other way round (old positions read on the new stream)."""
        starts, streams = {}, []
        for spec in config.streams:
            record = self.streams.record(spec.scope, spec.stream)
            self.streams.check_incarnation(record, spec.incarnation)
            head = self.streams.head(spec.scope, spec.stream, record)
            starts[spec.scoped_name] = head
            if spec.start:
                start = self.streams.resolve_cut(spec.scope, spec.stream, _offsets(spec.start))
                # Part of it may be truncated already (perhaps by a truncation decided a moment ago, whose
                # fence move came before this registration's fence read): the group acknowledges no
                # earlier than the head, where its readers start anyway.
                starts[spec.scoped_name] = self._no_earlier_than(head, spec.scope, spec.stream, start)
            if spec.end:
                problem = validity_problem([p.segment for p in spec.end])
                if problem:
                    raise InvalidArgument(f"invalid end stream cut for {spec.scoped_name}: {problem}")
            streams.append(spec.model_copy(update={"incarnation": int(record.created_ms)}))
        return config.model_copy(update={"streams": streams}), starts

    def fences(self, config: ReaderGroupConfig) -> dict[str, int | None]:
        """The subscriber fence of each stream the group subscribes to (read before :meth:`starts`)."""
        return {spec.scoped_name: self.retention.fence(spec.scope, spec.stream) for spec in _subscribed(config)}

    def subscribe(self, tx: TransactWrite, scope: str, group: str, config: ReaderGroupConfig,
                  starts: dict[str, list[SegmentPosition]], fences: dict[str, int | None], token: str,
                  dropping: ReaderGroupConfig | None, incarnation: str | None) -> None:
        """Add to ``tx`` the subscription of the group's ``incarnation`` to each stream of ``config`` at its
        start, moving each stream's fence from the value read, and the removal of those of ``dropping``
        that it lacks."""
        name, kept = f"{scope}/{group}", set()
        for spec in _subscribed(config):
            self.retention.subscribe(tx, spec.scope, spec.stream, name, config.generation, starts[spec.scoped_name],
                                     fences[spec.scoped_name], token, incarnation=incarnation)
            kept.add(spec.scoped_name)
        for spec in _subscribed(dropping) if dropping else []:
            if spec.scoped_name not in kept:
                self.retention.unsubscribe(tx, spec.scope, spec.stream, name)

    @staticmethod
    def writes(config: ReaderGroupConfig, dropping: ReaderGroupConfig | None) -> int:
        """How many writes :meth:`subscribe` adds to a transaction."""
        kept = {spec.scoped_name for spec in _subscribed(config)}
        return 2 * len(kept) + sum(1 for spec in (_subscribed(dropping) if dropping else []) if spec.scoped_name not in kept)

    def unsubscribe(self, tx: TransactWrite, scope: str, group: str, config: ReaderGroupConfig) -> None:
        """Add to ``tx`` the removal of every subscription of the group (it is being deleted)."""
        for spec in _subscribed(config):
            self.retention.unsubscribe(tx, spec.scope, spec.stream, f"{scope}/{group}")

    # -- acknowledging ---------------------------------------------------------------------------

    def publish_checkpoint(self, scope: str, group: str, before: CheckpointInfo | None, state: GroupState,
                           incarnation: str | None) -> None:
        """After a completed checkpoint, an automatic subscriber acknowledges its cuts, as the group's
        ``incarnation`` (the record's create_id the state was read with): it runs after the state's write,
        so the group may have been deleted and created again meanwhile, and the new group's subscriptions
        are not this state's to move."""
        done = state.last_checkpoint
        if (state.config.retention_type != StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT
                or done is None or done.silent or (before is not None and before.name == done.name)):
            return
        for cut in done.cuts:
            try:
                self.retention.update_truncation_cut(cut.scope, cut.stream, f"{scope}/{group}",
                                                     state.config.generation, _offsets(cut.positions), incarnation)
            except StreamNotFound:
                pass  # the stream was deleted: nothing of it is retained for anyone
            except ReaderGroupNotFound:
                self._check_incarnation(scope, group, cut, state.config.generation, incarnation)
                return  # the group was deleted (and created again): its cuts are nobody's
            except (InvalidArgument, NotFound):
                self._check_subscription(scope, group, cut, state.config.generation, incarnation)
            except WriteConflict:
                pass  # contended: the subscriber's cut lags (it never runs ahead); the next checkpoint publishes

    def _check_subscription(self, scope: str, group: str, cut: StreamCutBody, generation: int,
                            incarnation: str | None) -> None:
        """Judge a refused publish: stale (the group was reset or deleted since, or a later checkpoint's
        cut got there first) unless the group is still ``incarnation`` at ``generation`` and its
        subscription of the stream is gone or of another generation. Then retention no longer follows the
        group's checkpoints, and the caller hears it (IllegalState) instead of the refusal being swallowed."""
        acknowledged = self.retention.acknowledged_cut(cut.scope, cut.stream, f"{scope}/{group}")
        if (acknowledged is not None and acknowledged.generation == generation
                or not _still(scope, group, incarnation, generation)):
            return
        found = "none" if acknowledged is None else f"generation {acknowledged.generation}'s"
        raise IllegalState(f"reader group {scope}/{group} (generation {generation}) has {found} subscription of "
                           f"{cut.scope}/{cut.stream}: retention does not follow its checkpoints there; reset "
                           "the group to subscribe again", stream=f"{cut.scope}/{cut.stream}", generation=generation)

    @staticmethod
    def _check_incarnation(scope: str, group: str, cut: StreamCutBody, generation: int,
                           incarnation: str | None) -> None:
        """Judge a publish refused as another incarnation's: stale (the group was deleted, perhaps created
        again) unless the group is still ``incarnation`` at ``generation``. Then its subscription of the
        stream is another incarnation's (one a deleted group's late publish wrote into a subscription a
        previous release made), retention no longer follows the group there, and the caller hears it
        (IllegalState) instead of the refusal being swallowed."""
        if _still(scope, group, incarnation, generation):
            raise IllegalState(f"reader group {scope}/{group} (generation {generation}) has a subscription of "
                               f"{cut.scope}/{cut.stream} of another incarnation of the group: retention does not "
                               "follow its checkpoints there; reset the group to subscribe again",
                               stream=f"{cut.scope}/{cut.stream}", generation=generation)

    def publish_cut(self, scope: str, group: str, state: GroupState, group_incarnation: str | None,
                    cut: StreamCutBody) -> StreamCutBody:
        """A MANUAL_RELEASE_AT_USER_STREAMCUT group (``group_incarnation``: the one its caller knows, or
        else the one ``state`` was read from) acknowledges consumption up to ``cut``; what it
        acknowledged is answered. Where ``cut`` is behind the head (truncated already) it is taken at the
        head, as a start cut is: a group started at a truncated start is subscribed at the head, and
        publishing that start must not count as moving backwards. A cut behind one the group published
        itself is refused (InvalidArgument), as always."""
        config = state.config
        if config.retention_type != StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT:
            raise IllegalState(f"reader group {scope}/{group} is {config.retention_type.value}: "
                               "only MANUAL_RELEASE_AT_USER_STREAMCUT groups publish cuts themselves")
        if f"{cut.scope}/{cut.stream}" not in {s.scoped_name for s in config.streams}:
            raise InvalidArgument(f"reader group {scope}/{group} does not read {cut.scope}/{cut.stream}")
        incarnation = state.incarnation(f"{cut.scope}/{cut.stream}")
        if None not in (cut.incarnation, incarnation) and cut.incarnation != incarnation:
            raise StreamRecreated(f"the cut is of incarnation {cut.incarnation} of {cut.scope}/{cut.stream}; reader "
                                  f"group {scope}/{group} reads its incarnation {incarnation}",
                                  expected=cut.incarnation, current=incarnation)
        positions = cut.positions
        head = self.streams.head(cut.scope, cut.stream)
        if _behind(positions, head):  # as the caller's segment ranges say: it is resolved before it is moved
            resolved = self.streams.resolve_cut(cut.scope, cut.stream, _offsets(positions))
            positions = self._no_earlier_than(head, cut.scope, cut.stream, resolved)
        positions = self.retention.update_truncation_cut(cut.scope, cut.stream, f"{scope}/{group}", config.generation,
                                                         _offsets(positions), group_incarnation)
        return StreamCutBody(scope=cut.scope, stream=cut.stream, positions=positions, incarnation=incarnation)

    def acknowledged_cuts(self, scope: str, group: str, config: ReaderGroupConfig) -> list[AcknowledgedCut]:
        """A subscriber's acknowledged cut in each of its streams (none for a group that is no subscriber)."""
        cuts = (self.retention.acknowledged_cut(s.scope, s.stream, f"{scope}/{group}") for s in _subscribed(config))
        return [cut for cut in cuts if cut is not None]

    def _no_earlier_than(self, head: list[SegmentPosition], scope: str, stream: str,
                         cut: list[SegmentPosition]) -> list[SegmentPosition]:
        """``cut`` (valid, resolved), or where it lies before ``head``, the head there, key by key."""
        if not _behind(cut, head):
            return cut
        records = {r.segment_id: r for r in self.streams.store.list_segments(scope, stream)}
        return upper_bound([cut, head], records)


def _still(scope: str, group: str, incarnation: str | None, generation: int) -> bool:
    """Whether the group's record is still of ``incarnation`` (its create_id) at ``generation``."""
    try:
        record = read_record(scope, group)
    except ReaderGroupNotFound:
        return False
    return record.create_id == incarnation and GroupState.model_validate(record.state).config.generation == generation
