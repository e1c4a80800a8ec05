"""The stream state machine (controlplane.states) as a barrier between workflows."""

from __future__ import annotations

import itertools

import pytest

from controlplane.states import ALLOWED, check_transition, is_allowed
from rillet.errors import IllegalState
from rillet.models import StreamState as S

# The lifecycle the design brief and Pravega prescribe, written out independently of ALLOWED.
EXPECTED_ALLOWED = {
    (None, S.CREATING),
    (S.CREATING, S.ACTIVE),
    (S.ACTIVE, S.UPDATING), (S.UPDATING, S.ACTIVE),
    (S.ACTIVE, S.SCALING), (S.SCALING, S.ACTIVE),
    (S.ACTIVE, S.COMMITTING_TXN), (S.COMMITTING_TXN, S.ACTIVE),
    (S.ACTIVE, S.TRUNCATING), (S.TRUNCATING, S.ACTIVE),
    (S.ACTIVE, S.SEALING), (S.SEALING, S.SEALED),
}
ALL_PAIRS = set(itertools.product([None, *S], list(S)))


def test_the_table_is_exactly_the_expected_lifecycle():
    table = {(current, target) for current, targets in ALLOWED.items() for target in targets}
    assert table == EXPECTED_ALLOWED
    assert set(ALLOWED) == {None, *S}  # every state has an entry


@pytest.mark.parametrize(("current", "target"), sorted(EXPECTED_ALLOWED, key=str))
def test_allowed_transitions_pass(current, target):
    assert is_allowed(current, target)
    check_transition(current, target, "stream s/t")  # does not raise


@pytest.mark.parametrize(("current", "target"), sorted(ALL_PAIRS - EXPECTED_ALLOWED, key=str))
def test_every_other_transition_raises_illegal_state(current, target):
    assert not is_allowed(current, target)
    with pytest.raises(IllegalState) as raised:
        check_transition(current, target, "stream s/t")
    assert raised.value.details["state"] == (current.value if current else None)
    assert target.value in raised.value.message


@pytest.mark.parametrize(("current", "target"), [
    (S.SEALED, S.ACTIVE),  # sealing is forever
    (S.SEALED, S.SEALING),
    (S.SEALING, S.ACTIVE),  # a seal in flight cannot be abandoned
    (S.CREATING, S.SEALING),  # half-created streams cannot be sealed
    (S.UPDATING, S.SCALING),  # the barrier: one workflow at a time
    (S.SCALING, S.UPDATING),
    (S.TRUNCATING, S.SEALING),
    (S.ACTIVE, S.ACTIVE),
    (S.ACTIVE, S.CREATING),
    (None, S.ACTIVE),
    (S.ACTIVE, S.SEALED),  # only through SEALING
])
def test_notable_disallowed_transitions(current, target):
    with pytest.raises(IllegalState):
        check_transition(current, target, "stream s/t")


def test_sealed_is_terminal():
    assert ALLOWED[S.SEALED] == frozenset()
