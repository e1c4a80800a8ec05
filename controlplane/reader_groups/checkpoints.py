"""Checkpoints: a stream cut per stream that every online reader of the group agreed on.

As in Pravega: every online reader must pass a checkpoint, and reports its positions when it does;
when the last one has, the checkpoint's stream cuts are fixed (``GroupState.last_checkpoint``). While
a checkpoint is outstanding no segment is handed out, so the cut stays consistent; a reader with more
than its fair share releases the surplus when it passes one (rebalancing happens at checkpoints).
A pass that releases nothing and is not the last is stored in the reader's own item rather than in the
group record (controlplane.reader_groups.groups.ReaderGroups.sync), so the readers of a large group do
not each rewrite the record once per checkpoint; the pass expected to be the last folds them all in.
These are pure transitions of :class:`GroupState`; an automatic subscriber's acknowledged cut follows
the completed ones (controlplane.reader_groups.subscriptions).
"""

from __future__ import annotations

from controlplane.reader_groups.state import (
    Checkpoint,
    GroupState,
    ReaderEntry,
    forget_superseded_completions,
)
from rillet.api import CheckpointInfo
from rillet.errors import AlreadyExists, IllegalState, NotFound


def initiate_checkpoint(state: GroupState, name: str, silent: bool, now: int) -> None:
    if any(c.name == name for c in state.checkpoints) or (state.last_checkpoint and state.last_checkpoint.name == name):
        raise AlreadyExists(f"checkpoint {name} already exists")
    if len(state.checkpoints) >= state.config.max_outstanding_checkpoint_request:
        raise IllegalState(f"the group already has {len(state.checkpoints)} outstanding checkpoints "
                           f"(maximum {state.config.max_outstanding_checkpoint_request})")
    state.checkpoints.append(Checkpoint(name=name, silent=silent, pending=sorted(state.readers), created_ms=now))
    finish_checkpoints(state)


def pass_checkpoint(state: GroupState, reader: str, entry: ReaderEntry, name: str) -> None:
    """``reader`` passes checkpoint ``name`` at the positions it holds, releasing any surplus."""
    checkpoint = pending_checkpoint(state, reader, name)
    if checkpoint is None:
        return  # already passed (a retried request) or a checkpoint that no longer exists
    record_pass(state, reader, checkpoint, {key: held.offset for key, held in entry.segments.items()})
    if releases_surplus(state, reader):
        surplus = len(entry.segments) - state.fair_share()
        for key in sorted(entry.segments)[-surplus:]:
            state.unassigned[key] = entry.segments.pop(key)
    finish_checkpoints(state)


def record_pass(state: GroupState, reader: str, checkpoint: Checkpoint, offsets: dict[str, int]) -> None:
    """Mark ``reader``, pending on ``checkpoint``, passed at ``offsets`` (of the segments it holds)."""
    entry = state.readers[reader]
    checkpoint.pending.remove(reader)
    for key, offset in offsets.items():
        held = entry.segments.get(key)
        previous = checkpoint.positions.get(key)
        if held is not None and (previous is None or offset > previous.offset):
            checkpoint.positions[key] = held.model_copy(update={"offset": offset})


def record_item_passes(state: GroupState, reader: str, passes: dict[str, dict[str, int]]) -> None:
    """Mark ``reader`` passed the checkpoints its own item says it passed ({Checkpoint.key: offsets}),
    where it is still pending on them (controlplane.reader_groups.leases.overlay)."""
    for checkpoint in state.checkpoints:
        if checkpoint.key in passes and reader in checkpoint.pending:
            record_pass(state, reader, checkpoint, passes[checkpoint.key])


def pending_checkpoint(state: GroupState, reader: str, name: str) -> Checkpoint | None:
    """The outstanding checkpoint ``name`` if ``reader`` has yet to pass it."""
    return next((c for c in state.checkpoints if c.name == name and reader in c.pending), None)


def releases_surplus(state: GroupState, reader: str) -> bool:
    """Whether ``reader`` gives up segments when it passes a checkpoint: it holds more than its fair
    share while another reader holds less."""
    share = state.fair_share()
    return (len(state.readers[reader].segments) > share
            and any(len(r.segments) < share for n, r in state.readers.items() if n != reader))


def finish_checkpoints(state: GroupState) -> None:
    """Fix the cuts of the oldest checkpoints that no reader has left to pass, in order."""
    while state.checkpoints and not state.checkpoints[0].pending:
        checkpoint = state.checkpoints.pop(0)
        state.last_checkpoint = CheckpointInfo(name=checkpoint.name, complete=True, silent=checkpoint.silent,
                                               cuts=state.cuts(checkpoint.positions))
    forget_superseded_completions(state)


def maybe_auto_checkpoint(state: GroupState, now: int) -> None:
    """Begin the next automatic checkpoint once ``automatic_checkpoint_interval_ms`` passed since the last."""
    interval = state.config.automatic_checkpoint_interval_ms
    if interval <= 0 or state.checkpoints or not state.readers:
        return
    if state.last_auto_checkpoint_ms == 0:
        state.last_auto_checkpoint_ms = now
        return
    if now - state.last_auto_checkpoint_ms >= interval:
        state.checkpoint_counter += 1
        state.last_auto_checkpoint_ms = now
        initiate_checkpoint(state, f"auto-{state.checkpoint_counter}", False, now)


def checkpoint_info(state: GroupState, name: str) -> CheckpointInfo:
    if state.last_checkpoint and state.last_checkpoint.name == name:
        return state.last_checkpoint
    if any(c.name == name for c in state.checkpoints):
        return CheckpointInfo(name=name, complete=False)
    raise NotFound(f"no outstanding or last checkpoint named {name}")
