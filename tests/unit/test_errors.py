"""The error taxonomy (rillet.errors): stable codes, HTTP statuses, and the wire round trip."""

from __future__ import annotations

import json

import pytest

from rillet import errors
from rillet.errors import (
    ERRORS_BY_CODE,
    AlreadyExists,
    IllegalState,
    InvalidArgument,
    NotFound,
    OffsetMismatch,
    RilletError,
    ScopeNotEmpty,
    ScopeNotFound,
    SegmentNotFound,
    SegmentSealed,
    ServiceUnavailable,
    StreamNotFound,
    Throttled,
    TooLarge,
    Truncated,
    Unauthorized,
    WriteConflict,
    from_wire,
)

# code -> (class, status), written out so a renamed code or changed status fails here.
EXPECTED = {
    "InternalError": (RilletError, 500),
    "InvalidArgument": (InvalidArgument, 400),
    "Unauthorized": (Unauthorized, 403),
    "NotFound": (NotFound, 404),
    "ScopeNotFound": (ScopeNotFound, 404),
    "StreamNotFound": (StreamNotFound, 404),
    "SegmentNotFound": (SegmentNotFound, 404),
    "AlreadyExists": (AlreadyExists, 409),
    "WriteConflict": (WriteConflict, 409),
    "IllegalState": (IllegalState, 409),
    "ScopeNotEmpty": (ScopeNotEmpty, 409),
    "SegmentSealed": (SegmentSealed, 409),
    "OffsetMismatch": (OffsetMismatch, 412),
    "Truncated": (Truncated, 410),
    "TooLarge": (TooLarge, 413),
    "Throttled": (Throttled, 429),
    "ServiceUnavailable": (ServiceUnavailable, 503),
}


def _all_error_classes():
    seen, todo = [], [RilletError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in seen if c.__module__ == errors.__name__]


def test_codes_and_statuses_are_stable():
    """The codes above never change meaning (new codes may be added)."""
    actual = {code: (cls, cls.status) for code, cls in ERRORS_BY_CODE.items()}
    assert {code: actual.get(code) for code in EXPECTED} == EXPECTED
    assert all(400 <= cls.status < 600 for cls in ERRORS_BY_CODE.values())


def test_every_error_class_has_a_unique_code():
    classes = _all_error_classes()
    assert len({c.code for c in classes}) == len(classes)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_from_wire_maps_each_code_back_to_its_class(code):
    cls, status = EXPECTED[code]
    error = from_wire(status, {"code": code, "message": "what happened"})
    assert type(error) is cls
    assert error.code == code
    assert error.message == "what happened"
    assert str(error) == "what happened"


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_to_wire_then_from_wire_is_the_identity(code):
    cls, status = EXPECTED[code]
    original = cls("boom", length=12, state="SEALED")
    assert original.status == status
    wire = json.loads(json.dumps(original.to_wire()))  # through real JSON
    assert wire == {"code": code, "message": "boom", "details": {"length": 12, "state": "SEALED"}}
    back = from_wire(original.status, wire)
    assert type(back) is cls
    assert (back.message, back.details) == ("boom", {"length": 12, "state": "SEALED"})


def test_to_wire_omits_empty_details():
    assert StreamNotFound("gone").to_wire() == {"code": "StreamNotFound", "message": "gone"}


def test_the_code_wins_over_the_status():
    """A known code is trusted even if a proxy changed the status."""
    assert type(from_wire(500, {"code": "StreamNotFound", "message": "x"})) is StreamNotFound


@pytest.mark.parametrize(("status", "cls"), [
    (400, InvalidArgument),
    (403, Unauthorized),
    (404, NotFound),
    (409, RilletError),  # never a specific class such as AlreadyExists: a caller could take it for success
    (410, RilletError),
    (412, RilletError),
    (413, RilletError),
    (429, Throttled),
    (500, RilletError),
    (503, ServiceUnavailable),
    (418, RilletError),  # no class has this status
    (502, RilletError),
])
def test_unknown_codes_map_by_status(status, cls):
    error = from_wire(status, {"code": "SomethingNewer", "message": "from a newer server"})
    assert type(error) is cls
    assert error.message == "from a newer server"
    assert (error.code, error.status) == ("SomethingNewer", status)


def test_unknown_409_is_still_a_typed_conflict_error():
    error = from_wire(409, {"code": "SomethingNewer", "message": "m"})
    assert isinstance(error, RilletError) and error.status == 409


@pytest.mark.parametrize("body", [None, {}, {"unexpected": "shape"}])
def test_missing_or_odd_bodies_still_give_a_typed_error(body):
    error = from_wire(404, body)
    assert type(error) is NotFound
    assert error.message == "HTTP 404"


def test_retryable_is_only_set_for_transient_errors():
    retryable = {code for code in EXPECTED if ERRORS_BY_CODE[code].retryable}
    assert retryable == {"WriteConflict", "Throttled", "ServiceUnavailable"}


def test_hierarchy_lets_callers_catch_families():
    assert issubclass(StreamNotFound, NotFound) and issubclass(ScopeNotFound, NotFound)
    assert issubclass(SegmentNotFound, NotFound)
    assert issubclass(ScopeNotEmpty, IllegalState)
    assert all(issubclass(c, Exception) for c in ERRORS_BY_CODE.values())


def test_caller_mistakes_are_4xx():
    for cls in (InvalidArgument, NotFound, AlreadyExists, IllegalState, ScopeNotEmpty, TooLarge, Truncated,
                OffsetMismatch, SegmentSealed, WriteConflict):
        assert 400 <= cls.status < 500, cls
