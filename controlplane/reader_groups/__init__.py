"""Reader groups: which reader reads which segment, checkpoints, and the group's position.

The code lives in :mod:`controlplane.reader_groups.groups`; this package exports what the rest of
the project names as ``controlplane.reader_groups.X``.
"""

from controlplane.reader_groups.groups import (
    GROUP_KEY,
    LEASE_KEY,
    LEASE_RUN_LIMIT,
    LEASE_WORKERS,
    MAX_STATE_BYTES,
    MAX_SUBSCRIBED_STREAMS,
    RENEW_FRACTION,
    GroupState,
    ReaderGroups,
    add_reader,
    checkpoint_info,
    expire_readers,
    initiate_checkpoint,
    new_state,
    reader_offline,
    schedule_lease_check,
    sync,
)

__all__ = [
    "GROUP_KEY",
    "LEASE_KEY",
    "LEASE_RUN_LIMIT",
    "LEASE_WORKERS",
    "MAX_STATE_BYTES",
    "MAX_SUBSCRIBED_STREAMS",
    "RENEW_FRACTION",
    "GroupState",
    "ReaderGroups",
    "add_reader",
    "checkpoint_info",
    "expire_readers",
    "initiate_checkpoint",
    "new_state",
    "reader_offline",
    "schedule_lease_check",
    "sync",
]
