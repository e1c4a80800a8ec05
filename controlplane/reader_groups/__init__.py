"""Reader groups: which reader reads which segment, checkpoints, and the group's position.

The group's whole shared state is one versioned record; every change is a pure function applied to
it and written back on the condition that nobody changed it meanwhile (the role Pravega's State
Synchronizer plays, with the logic on the controller so that readers only need HTTPS). The modules,
each readable on its own:

* ``state``: the state (:class:`GroupState`), its parts, its record (in pages when large) and what
  keeps it bounded;
* ``readers``: readers joining, leaving and being taken offline when their lease ends;
* ``assignment``: a reader's sync, and which segments it is handed (fair share, successors, end cuts);
* ``checkpoints``: checkpoints every online reader passes, and the cuts they fix;
* ``leases``: readers' renewals in their own items, and when the lease job looks at the group;
* ``subscriptions``: where a group starts, and its acknowledged cuts for consumption-based retention;
* ``groups``: :class:`ReaderGroups`, the operations the API, lambdas and jobs call, each a
  conditional read-modify-write of the record through the modules above.

What the rest of the project uses is exported here.
"""

from controlplane.reader_groups.assignment import sync
from controlplane.reader_groups.checkpoints import checkpoint_info, initiate_checkpoint
from controlplane.reader_groups.groups import ReaderGroups
from controlplane.reader_groups.leases import (
    LEASE_KEY,
    LEASE_RUN_LIMIT,
    LEASE_WORKERS,
    RENEW_FRACTION,
    LeaseRun,
    schedule_lease_check,
)
from controlplane.reader_groups.readers import add_reader, expire_readers, reader_offline
from controlplane.reader_groups.state import GROUP_KEY, MAX_STATE_BYTES, GroupState, new_state
from controlplane.reader_groups.subscriptions import MAX_SUBSCRIBED_STREAMS

__all__ = [
    "GROUP_KEY",
    "LEASE_KEY",
    "LEASE_RUN_LIMIT",
    "LEASE_WORKERS",
    "MAX_STATE_BYTES",
    "MAX_SUBSCRIBED_STREAMS",
    "RENEW_FRACTION",
    "GroupState",
    "LeaseRun",
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
