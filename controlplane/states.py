"""The stream state machine, which serves as a barrier between workflows.

A workflow that changes a stream first moves it out of ACTIVE into its own state; any other workflow
that finds the stream in a state it may not leave fails with a typed error instead of interleaving.
"""

from __future__ import annotations

from rillet.errors import IllegalState
from rillet.models import StreamState as S

ALLOWED: dict[S | None, frozenset[S]] = {
    None: frozenset({S.CREATING}),
    S.CREATING: frozenset({S.ACTIVE}),
    S.ACTIVE: frozenset({S.UPDATING, S.SCALING, S.COMMITTING_TXN, S.TRUNCATING, S.SEALING}),
    S.UPDATING: frozenset({S.ACTIVE}),
    S.SCALING: frozenset({S.ACTIVE}),
    S.COMMITTING_TXN: frozenset({S.ACTIVE}),
    S.TRUNCATING: frozenset({S.ACTIVE}),
    S.SEALING: frozenset({S.SEALED}),
    S.SEALED: frozenset(),
}


def is_allowed(current: S | None, target: S) -> bool:
    return target in ALLOWED[current]


def check_transition(current: S | None, target: S, what: str) -> None:
    if not is_allowed(current, target):
        raise IllegalState(f"{what} is {current.value if current else 'absent'}; it cannot become {target.value}",
                           state=current.value if current else None)
