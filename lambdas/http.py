"""What the three Lambda handlers share: the resolver, its error mapping, and the powertools utilities.

Handlers stay thin: parse and validate (powertools with ``enable_validation``), call one domain
function, and let the exception handlers here turn typed domain errors into ``{"code", "message"}``
with the error's HTTP status. Every route is authorized (lambdas/authorization.py) once its request is
validated and before it runs. A throttled or transiently failing AWS call (after the AWS clients' own
retries) is answered 429 ``Throttled`` or 503 ``ServiceUnavailable`` with ``Retry-After``: its outcome
is unknown, and repeating the request is safe (appends are de-duplicated, control operations are
idempotent). Anything else unexpected is a bug: logged with its stack trace and answered with a bare
500. No stack trace ever reaches the wire.
"""

from __future__ import annotations

import base64
import builtins
import json
import warnings
from collections.abc import Iterator
from typing import Annotated

import botocore.exceptions
import urllib3.exceptions
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import ValidationError

from lambdas.authorization import authorize
from rillet.errors import (
    InvalidArgument,
    NotFound,
    RilletError,
    ServiceUnavailable,
    Throttled,
    UnsupportedMediaType,
)

# An invocation that records no metric (a read of an empty tail, say) is normal, not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")

JSON = "application/json"
OCTETS = "application/octet-stream"

ScopeName = Annotated[str, Path(pattern=r"^[A-Za-z0-9.\-]{1,255}$")]
StreamName = Annotated[str, Path(pattern=r"^[A-Za-z0-9.\-_]{1,255}$")]
SegmentToken = Annotated[str, Path(pattern=r"^[0-9]{1,20}(\.[0-9a-f]{32})?$",
                                   description="A segment id, or a transaction segment's id.transaction-id")]
# The stream incarnation a reader's position was taken on (rillet.StreamCut.incarnation): a segment of
# another incarnation answers StreamRecreated. Absent: any (positions kept before incarnations were).
Incarnation = Annotated[int | None, Query(ge=0, le=2**63 - 1, description=(
    "The incarnation of the stream (its created_at_ms) the caller's position was taken on; a segment of "
    "another incarnation answers 410 StreamRecreated."))]


# How long a client should wait before repeating a throttled or transiently failed request. The AWS
# clients have already retried with backoff inside the invocation, so a second is a fair pause.
RETRY_AFTER_S = 1

_THROTTLING_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "Throttling", "RequestLimitExceeded",
    "SlowDown", "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
    # what DynamoDB puts in a cancelled transaction's reasons
    "ThrottlingError", "ProvisionedThroughputExceeded",
})
_TRANSIENT_CODES = frozenset({
    "InternalServerError", "InternalFailure", "InternalError", "ServiceUnavailable",
    "ServiceUnavailableException", "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
    "TransactionInProgressException", "TransactionConflict",
})
_TRANSPORT_ERRORS = (
    botocore.exceptions.HTTPClientError,  # read timeouts, connections closed mid-response
    botocore.exceptions.ConnectionError,  # endpoint unreachable, connect timeouts
    botocore.exceptions.IncompleteReadError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    builtins.ConnectionError,
    builtins.TimeoutError,
)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """The error and what it wraps: PynamoDB keeps the botocore error in ``cause``, Python in the chain.

    Bounded by a seen set, so a cyclic chain ends."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [e for e in (getattr(current, "cause", None), current.__cause__, current.__context__)
                    if isinstance(e, BaseException)]


def _client_error_codes(error: botocore.exceptions.ClientError) -> list[str]:
    """The error's code, and for a cancelled DynamoDB transaction the codes of its reasons."""
    codes = [str(error.response.get("Error", {}).get("Code", ""))]
    reasons = getattr(error, "cancellation_reasons", None)  # PynamoDB's VerboseClientError
    if reasons is not None:
        codes += [r.code for r in reasons if r is not None and r.code]
    else:
        codes += [str(r.get("Code")) for r in error.response.get("CancellationReasons", []) if r.get("Code")]
    return codes


def transient_error(error: BaseException) -> Throttled | ServiceUnavailable | None:
    """The typed answer to an AWS call that was throttled or failed transiently, or None for anything
    else (a genuine bug, or an AWS error that repeating the request would not cure).

    The whole chain counts: an error raised while handling such a failure (PynamoDB's
    ``cause_response_code`` fails on a timeout, say) leaves the outcome just as unknown."""
    for cause in _causes(error):
        if isinstance(cause, botocore.exceptions.ClientError):
            codes = _client_error_codes(cause)
            status = cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status == 429 or _THROTTLING_CODES.intersection(codes):
                return Throttled(f"AWS throttled a request ({codes[0] or status}); retry after {RETRY_AFTER_S} s")
            if status >= 500 or _TRANSIENT_CODES.intersection(codes):
                return ServiceUnavailable(
                    f"an AWS request failed transiently ({codes[0] or status}); retry after {RETRY_AFTER_S} s")
        elif isinstance(cause, _TRANSPORT_ERRORS):
            return ServiceUnavailable(
                f"an AWS request got no answer ({type(cause).__name__}); retry after {RETRY_AFTER_S} s")
    return None


def error_response(error: RilletError) -> Response:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(error, Throttled | ServiceUnavailable) else None
    return Response(status_code=error.status, content_type=JSON, body=json.dumps(error.to_wire()), headers=headers)


def _validation_message(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def build_resolver(logger: Logger) -> LambdaFunctionUrlResolver:
    app = LambdaFunctionUrlResolver(enable_validation=True)
    app.use([authorize])  # every route: validated first, then authorized, then run

    @app.exception_handler(RilletError)
    def _typed(error: RilletError) -> Response:
        if error.status >= 500 and not error.retryable:
            logger.exception("server error")
        return error_response(error)

    @app.exception_handler(RequestUnsupportedContentType)
    def _content_type(error: RequestUnsupportedContentType) -> Response:
        return error_response(UnsupportedMediaType(f"unsupported content type: {error}"))

    @app.exception_handler([RequestValidationError, ValidationError])
    def _invalid(error: RequestValidationError | ValidationError) -> Response:
        return error_response(InvalidArgument(_validation_message(list(error.errors()))))

    @app.exception_handler(UnicodeDecodeError)
    def _not_text(error: UnicodeDecodeError) -> Response:
        try:  # a JSON route decodes the body as UTF-8 text before validating it
            raw_body(app).decode()
        except UnicodeDecodeError:
            return error_response(InvalidArgument("the request body is not UTF-8 text"))
        return _unexpected(error)

    @app.exception_handler(ValueError)
    def _unparsable_form(error: ValueError) -> Response:
        content_type = app.current_event.headers.get("content-type", "")
        if content_type.startswith("multipart/"):  # powertools fails to parse one without a boundary
            return error_response(UnsupportedMediaType(f"unsupported content type {content_type[:100]!r}: "
                                                       f"send {JSON}"))
        return _unexpected(error)

    @app.not_found
    def _no_route(_error: Exception) -> Response:
        path = app.current_event.path
        return error_response(NotFound(f"no route {app.current_event.http_method} {path}"))

    @app.exception_handler(Exception)
    def _unexpected(error: Exception) -> Response:
        transient = transient_error(error)
        if transient is not None:
            logger.warning(transient.message, exc_info=error)
            return error_response(transient)
        logger.exception("unexpected error")
        return error_response(RilletError("internal error"))

    return app


def raw_body(app: LambdaFunctionUrlResolver) -> bytes:
    """The request body as bytes (Function URLs base64-encode binary bodies)."""
    event = app.current_event
    body = event.body or ""
    return base64.b64decode(body) if event.is_base64_encoded else body.encode()


def powertools(service: str) -> tuple[Logger, Metrics, Tracer]:
    return Logger(service=service), Metrics(namespace="Rillet", service=service), Tracer(service=service)
