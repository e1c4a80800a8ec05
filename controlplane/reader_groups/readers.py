"""Online readers: joining a group, leaving it, and being taken offline when their lease ends.

A name is one reader, as in Pravega; each join records the joining instance's token, so a second
process under the same name is refused rather than reading the same segments. Leaving
(``reader_offline(reader, position)``) returns the reader's segments to the group at that position.

Leases, not goodbyes: a reader not heard from for ``config.reader_lease_ms`` (default 60 s; every
read syncs at least every ``group_refresh_time_ms``) is taken offline at its last reported position
by the next sync or join of another reader, or by the control plane's lease job (the Dagster sensor
``reader_lease_sensor``, see controlplane.reader_groups.leases), whichever comes first. Pravega leaves
this to the application's ``readerOffline``; serverless readers are killed without saying goodbye. A
reader taken offline that syncs again gets ReaderNotInReaderGroup, as in Pravega: its segments are
another's. These are pure transitions of :class:`GroupState`.
"""

from __future__ import annotations

import uuid

from controlplane.reader_groups.checkpoints import finish_checkpoints
from controlplane.reader_groups.state import GroupState, ReaderEntry
from rillet.api import SegmentOffset
from rillet.errors import AlreadyExists

# The most readers one change takes offline by their leases. The change is one transaction that checks
# each leaving reader's item (groups.ReaderGroups._write), beside the record and up to 7 page writes,
# and DynamoDB takes at most 100 actions in one: a fleet stopped at once leaves over a few changes
# rather than in one transaction DynamoDB refuses. A reader rejoining under its name after its lease
# ended is taken offline by its own join, whatever the cap leaves (add_reader).
MAX_EXPIRED_PER_WRITE = 64


def add_reader(state: GroupState, reader: str, now: int, instance: str | None = None) -> None:
    """A reader joins (it takes segments at its first sync, so that readers joining together share
    them); it is not asked to pass checkpoints begun before it joined (it held nothing then).

    A name is one reader, as in Pravega: a join carrying another ``instance`` token than the online
    reader of that name is refused (two would read the same segments), unless that reader's lease has
    ended; the same token is the same reader repeating a join whose answer it lost. A join without a
    token, or to a reader that joined without one, is accepted by name.
    """
    entry = state.readers.get(reader)
    another = entry is not None and another_instance(entry, instance)
    if another and now - entry.seen_ms >= state.config.reader_lease_ms:
        reader_offline(state, reader, None)  # its lease ended: whichever others the capped expiry takes
    expire_readers(state, now, sparing=reader)
    if another and reader in state.readers:
        raise AlreadyExists(f"reader {reader} is already online in this reader group (another instance joined "
                            "under that name); take it offline first (reader_offline) or wait for its lease "
                            "to end", reader=reader)
    state.readers.setdefault(reader, ReaderEntry(instance=instance, join=uuid.uuid4().hex[:16])).seen_ms = now


def another_instance(entry: ReaderEntry, instance: str | None) -> bool:
    """Whether a request carrying ``instance`` comes from another reader than the one online under the
    entry's name (unknowable, so no, when either side has no token)."""
    return None not in (instance, entry.instance) and entry.instance != instance


def expire_readers(state: GroupState, now: int, sparing: str | None = None) -> list[str]:
    """Take offline, at their last reported positions, the readers not seen for the group's reader lease:
    at most MAX_EXPIRED_PER_WRITE, those unseen longest first; the next change takes the rest (their
    lease check is then due at once: leases.schedule_lease_check).

    ``sparing`` is the reader whose own request this is: it is alive, whenever it was last seen.
    """
    lease = state.config.reader_lease_ms
    expired = sorted((entry.seen_ms, name) for name, entry in state.readers.items()
                     if name != sparing and now - entry.seen_ms >= lease)[:MAX_EXPIRED_PER_WRITE]
    expired = sorted(name for _seen, name in expired)
    for name in expired:
        reader_offline(state, name, None)
    return expired


def reader_offline(state: GroupState, reader: str, position: list[SegmentOffset] | None,
                   instance: str | None = None) -> None:
    """The reader leaves; with ``instance``, only if that instance is the one online under the name."""
    entry = state.readers.get(reader)
    if entry is None or another_instance(entry, instance):
        return
    del state.readers[reader]
    given = {f"{p.stream}/{p.segment_id}": p.offset for p in position or []}
    for key, held in entry.segments.items():
        if key in given:
            held.offset = given[key]
        state.unassigned[key] = held
    for checkpoint in state.checkpoints:
        if reader in checkpoint.pending:
            checkpoint.pending.remove(reader)
            for key, held in entry.segments.items():
                checkpoint.positions[key] = held.model_copy()
    finish_checkpoints(state)
