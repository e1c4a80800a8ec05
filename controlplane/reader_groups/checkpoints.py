"""Checkpoints: a stream cut per stream that every online reader of the group agreed on.

As in Pravega: every online reader must pass a checkpoint, and reports its positions when it does;
when the last one has, the checkpoint's stream cuts are fixed (``GroupState.last_checkpoint``). While
a checkpoint is outstanding no segment is handed out, so the cut stays consistent; a reader with more
than its fair share releases the surplus when it passes one (rebalancing happens at checkpoints).
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
    checkpoint = next((c for c in state.checkpoints if c.name == name), None)
    if checkpoint is None or reader not in checkpoint.pending:
        return  # already passed (a retried request) or a checkpoint that no longer exists
    checkpoint.pending.remove(reader)
    for key, held in entry.segments.items():
        previous = checkpoint.positions.get(key)
        if previous is None or held.offset > previous.offset:
            checkpoint.positions[key] = held.model_copy()
    surplus = len(entry.segments) - state.fair_share()
    others_short = any(len(r.segments) < state.fair_share() for n, r in state.readers.items() if n != reader)
    if surplus > 0 and others_short:
        for key in sorted(entry.segments)[-surplus:]:
            state.unassigned[key] = entry.segments.pop(key)
    finish_checkpoints(state)


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
