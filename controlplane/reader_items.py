"""Each online reader's own small item: its lease renewals and positions between group record writes.

A reader's sync that changes nothing the group shares (its assignment, checkpoints, the unassigned
and completed segments, the lease deadline) writes no group record: what it reports -- that it is
alive, and its offsets in the segments it holds -- goes to this item, about 200 bytes (one write
unit) where the group record is tens of kilobytes. The item is rewritten only when the offsets moved
or the reader's lease needs renewing (see controlplane.reader_groups.RENEW_FRACTION).

Key: ``rg#<scope>/<group>`` / ``reader#<reader>``, beside the group record: at most one item per
reader name. The item of a reader that goes offline is deleted by the operation that took it offline;
one left by a crash or a race is deleted by the next operation that reads all of a group's items
(a lease fold, the lease job, a reset, a delete), and is ignored meanwhile.

An item counts only for the reader entry it was written for: the group's ``generation`` and the
entry's ``join`` id (random, new with every join) must both match the group record, so an item left
by a reader taken offline, by an earlier generation (a reset) or by a deleted group of the same name
never lends its positions or its liveness to anyone.
"""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute, VersionAttribute
from pynamodb.connection.table import TableConnection
from pynamodb.exceptions import DeleteError, PutError

from controlplane.models import MetadataItem, reader_group_pk
from controlplane.store import failed_condition

READER_PREFIX = "reader#"


def reader_sk(reader: str) -> str:
    return f"{READER_PREFIX}{reader}"


class ReaderItemRecord(MetadataItem, discriminator="rg-reader"):
    """One online reader's last renewal and offsets (see the module docstring)."""

    generation = NumberAttribute()  # the group's generation when it was written
    join = UnicodeAttribute()  # the reader entry's join id it belongs to
    seen_ms = NumberAttribute()
    offsets = JSONAttribute()  # {"scope/stream/segment id": offset} of the segments it holds: its fair share
    # {Checkpoint.key (its name and creation time): offsets as above when it passed it}, for the group's
    # outstanding checkpoints only (at most ReaderGroupConfig.max_outstanding_checkpoint_request, itself
    # at most 10), until the group record takes them in (controlplane.reader_groups.checkpoints.record_pass)
    passes = JSONAttribute(null=True)
    version = VersionAttribute()

    @property
    def reader(self) -> str:
        return self.sk[len(READER_PREFIX):]

    @classmethod
    def _get_connection(cls) -> TableConnection:
        """The metadata table's connection, wherever controlplane.models.bind pointed the models last."""
        return MetadataItem._get_connection()


class ReaderItems:
    """Reads and conditional writes of a group's reader items."""

    def one(self, scope: str, group: str, reader: str) -> dict[str, ReaderItemRecord]:
        """The reader's item (consistent), as {reader: item}, or {} if it has none."""
        try:
            return {reader: ReaderItemRecord.get(reader_group_pk(scope, group), reader_sk(reader),
                                                 consistent_read=True)}
        except ReaderItemRecord.DoesNotExist:
            return {}

    def all(self, scope: str, group: str) -> dict[str, ReaderItemRecord]:
        """Every reader item of the group (consistent): one query, bounded by the reader names online
        (plus the few a crash left)."""
        items = ReaderItemRecord.query(reader_group_pk(scope, group), ReaderItemRecord.sk.startswith(READER_PREFIX),
                                       consistent_read=True)
        return {item.reader: item for item in items}

    def write(self, scope: str, group: str, reader: str, read: ReaderItemRecord | None, generation: int, join: str,
              seen_ms: int, offsets: dict[str, int], passes: dict[str, dict[str, int]]) -> bool:
        """Replace the reader's item, conditioned on the version and join id read (absent if ``read`` is
        None); False if refused: another request of the same reader wrote it meanwhile (or a resend of this
        one whose answer was lost), and the next sync reads it and writes again if it must. The join id
        keeps a stalled request of a deleted group from replacing the item a reader of the group created
        again under the name wrote at the same version."""
        item = read or ReaderItemRecord(reader_group_pk(scope, group), reader_sk(reader))
        condition = None if read is None else ReaderItemRecord.join == read.join
        item.generation, item.join, item.seen_ms, item.offsets = generation, join, seen_ms, offsets
        item.passes = passes or None
        try:
            item.save(condition=condition)
        except PutError as e:
            if not failed_condition(e):
                raise
            return False
        return True

    def delete(self, items: Any) -> None:
        """Delete these items, each conditioned on the version and join id read: one rewritten meanwhile
        stays, and so does one that a reader of a group created again under the name wrote at the same
        version (a stalled delete of the deleted group's items)."""
        for item in items:
            try:
                item.delete(condition=ReaderItemRecord.join == item.join)  # and on its version (a VersionAttribute)
            except DeleteError as e:
                if not failed_condition(e):
                    raise
