"""The error taxonomy shared by the SDK and the server.

Every failure that crosses the wire is one of these classes. Its ``code`` is stable and
machine-readable; ``status`` is the HTTP status the server answers with; ``retryable`` tells the
transport whether repeating the same request may succeed. The server raises these types from the
domain code and the Lambda handlers turn them into ``{"code": ..., "message": ...}``; the SDK turns
that JSON back into the same class, so ``except rillet.StreamNotFound`` works on both sides.
"""

from __future__ import annotations

from typing import Any


class RilletError(Exception):
    """Base of all typed Rillet errors."""

    code = "InternalError"
    status = 500
    retryable = False

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        self.details = details

    def to_wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class InvalidArgument(RilletError):
    """The request is malformed or a value is out of range."""

    code, status = "InvalidArgument", 400


class UnsupportedMediaType(InvalidArgument):
    """The body's content type is not what the route takes (JSON for the control API)."""

    code, status = "UnsupportedMediaType", 415


class Unauthorized(RilletError):
    code, status = "Unauthorized", 403


class AccessDenied(Unauthorized):
    """The caller's identity lacks a permission the operation needs. ``details`` names the
    ``permission`` (READ or READ_UPDATE) and the ``resource`` (``prn::/scope:S/stream:T``, ...); the
    answer is the same whether or not the resource exists."""

    code = "AccessDenied"


class NotFound(RilletError):
    code, status = "NotFound", 404


class ScopeNotFound(NotFound):
    code = "ScopeNotFound"


class StreamNotFound(NotFound):
    code = "StreamNotFound"


class ReaderGroupNotFound(NotFound):
    code = "ReaderGroupNotFound"


class SegmentNotFound(NotFound):
    """No such segment in the data plane (never created, or deleted)."""

    code = "SegmentNotFound"


class TxnNotFound(NotFound):
    code = "TxnNotFound"


class KeyValueTableNotFound(NotFound):
    code = "KeyValueTableNotFound"


class AlreadyExists(RilletError):
    code, status = "AlreadyExists", 409


class WriteConflict(RilletError):
    """A conditional write lost a race; repeating the whole operation may succeed."""

    code, status, retryable = "WriteConflict", 409, True


class IllegalState(RilletError):
    """The object is in a state that does not allow the operation (the state machine is a barrier)."""

    code, status = "IllegalState", 409


class ScopeNotEmpty(IllegalState):
    code = "ScopeNotEmpty"


class StreamKindMismatch(IllegalState):
    """A raw (byte stream) append to a segment of an event stream, or framed events to a byte stream:
    mixing the two would desynchronise every event reader of the segment."""

    code = "StreamKindMismatch"


class ReaderNotInReaderGroup(IllegalState):
    """The reader is not (or no longer) a member of the group: it went offline, or its lease expired
    and the control plane handed its segments to the others (Pravega's ReaderNotInReaderGroupException).
    """

    code = "ReaderNotInReaderGroup"


class TxnFailed(RilletError):
    """The transaction is no longer open (committing, committed, aborting, aborted or expired).

    ``details["status"]`` says which (for a ping: COMMITTED, ABORTED or MAX_EXECUTION_TIME_EXCEEDED;
    the last refuses only that ping: the transaction stays open until its current lease ends).
    """

    code, status = "TxnFailed", 409


class LeaseTooLarge(InvalidArgument):
    code = "LeaseTooLarge"


class SegmentSealed(RilletError):
    """The segment accepts no more appends; writers fetch its successors."""

    code, status = "SegmentSealed", 409


class OutOfOrder(RilletError):
    """A block named a previous event of its writer that never got appended (it failed, or is lost)."""

    code, status = "OutOfOrder", 409


class WriterExpired(RilletError):
    """A resend of a block first sent longer ago than the writer expiry window, from a writer id the
    segment no longer remembers: it may have been appended before the id expired, so it is not
    appended again. The outcome of that block is unknown; new blocks need a new writer id."""

    code, status = "WriterExpired", 409


class OffsetMismatch(RilletError):
    """A conditional append expected a different segment length."""

    code, status = "OffsetMismatch", 412


class Truncated(RilletError):
    """The requested offset lies below the segment's start offset."""

    code, status = "Truncated", 410


class StreamRecreated(RilletError):
    """A position, cut or group was taken on another incarnation of the stream than the one the name
    holds now: the stream was deleted and created again (Kafka's topic ids answer the same problem).
    ``details`` name both incarnations (``expected``: the position's, ``current``: the stream's now).
    Nothing at that position belongs to the new stream; start again from one of its cuts (a reader
    group: ``reset``)."""

    code, status = "StreamRecreated", 410


class TooLarge(RilletError):
    code, status = "TooLarge", 413


class ConditionalTableUpdate(RilletError):
    """A conditional key-value table update did not hold, so none of the request's updates was applied
    (Pravega's ConditionalTableUpdateException). ``details["key"]`` names the key, as base64 JSON."""

    code, status = "ConditionalTableUpdate", 412


class BadKeyVersion(ConditionalTableUpdate):
    """The key exists with another version than the one named (or exists when it must not):
    Pravega's BadKeyVersionException."""

    code = "BadKeyVersion"


class NoSuchKey(ConditionalTableUpdate):
    """A version was named for a key that does not exist: Pravega's NoSuchKeyException."""

    code = "NoSuchKey"


class BadKeyLength(InvalidArgument):
    """A key's primary or secondary part is not exactly the length the table was created with."""

    code = "BadKeyLength"


class ValueTooLong(InvalidArgument):
    """A key-value table value is longer than a DynamoDB item can hold (rillet.kvt_models.MAX_VALUE_LENGTH)."""

    code = "ValueTooLong"


class TooManyUpdates(InvalidArgument):
    """More updates (or bytes) in one atomic key-value table request than one DynamoDB transaction takes."""

    code = "TooManyUpdates"


class Throttled(RilletError):
    code, status, retryable = "Throttled", 429, True


class ServiceUnavailable(RilletError):
    code, status, retryable = "ServiceUnavailable", 503, True


class OutcomeUnknown(RilletError):
    """Raised by the SDK, never sent by a server: every attempt within the writer's retry deadline
    ended without proof of the outcome (5xx, timeout, reset, throttling), so the event may or may not
    be stored. ``details["deadline_s"]`` is the deadline that passed."""

    code, status, retryable = "OutcomeUnknown", 503, False


class WriterBufferFull(RilletError):
    """Raised by the SDK's ``write_event``, never sent by a server: the writer already holds
    ``EventWriterConfig.buffer_bytes`` of events not yet acknowledged, and none was resolved within
    ``max_block_s`` (Kafka's ``buffer.memory`` and ``max.block.ms``). The event was not queued, so it is
    not stored; writing it again later may succeed."""

    code, status, retryable = "WriterBufferFull", 503, True


class NotSent(RilletError):
    """Raised by the SDK's event writer, never sent by a server: the event waited its writer's
    ``retry_timeout_s`` for its turn (queued behind blocks of its segment that went unanswered) and was
    never in a request that could be appended, so it is not stored (a refusal, hence a 4xx: 408, the
    request was not made in time); writing it again may succeed."""

    code, status = "NotSent", 408


class EventsNotAcknowledged(RilletError):
    """Raised by the SDK's ``flush()`` and ``close()`` (so on leaving a writer's ``with`` block), never
    sent by a server: events written failed and nobody looked at their futures. ``details`` count them
    (``failed``; ``outcome_unknown`` of them may or may not be stored, the rest are not stored) and
    name the first cause, which is also the exception's ``__cause__``."""

    code, status = "EventsNotAcknowledged", 500


def _all_subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


ERRORS_BY_CODE: dict[str, type[RilletError]] = {
    c.code: c for c in [RilletError, *_all_subclasses(RilletError)]
}


_GENERIC_BY_STATUS: dict[int, type[RilletError]] = {
    400: InvalidArgument, 403: Unauthorized, 404: NotFound, 429: Throttled, 503: ServiceUnavailable}


def from_wire(status: int, body: dict[str, Any] | None) -> RilletError:
    """Rebuild the typed error from an error response (unknown codes keep their status class)."""
    body = body or {}
    code = str(body.get("code", ""))
    message = str(body.get("message", f"HTTP {status}"))
    cls = ERRORS_BY_CODE.get(code)
    if cls is not None:
        return cls(message, **(body.get("details") or {}))
    # A code this SDK does not know (a newer server): the generic class of its status, if there is one
    # (never a specific one such as AlreadyExists), keeping the code and status as they came.
    error = _GENERIC_BY_STATUS.get(status, RilletError)(message, **(body.get("details") or {}))
    error.code, error.status = code or f"HTTP{status}", status
    error.retryable = status == 429 or status >= 500
    return error
