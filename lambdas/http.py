"""What the three Lambda handlers share: the resolver, its error mapping, and the powertools utilities.

Handlers stay thin: parse and validate (powertools with ``enable_validation``), call one domain
function, and let the exception handlers here turn typed domain errors into ``{"code", "message"}``
with the error's HTTP status. Anything unexpected is logged with its stack trace and answered with a
bare 500: no stack trace ever reaches the wire.
"""

from __future__ import annotations

import base64
import json
import warnings
from typing import Annotated

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import ValidationError

from rillet.errors import InvalidArgument, NotFound, RilletError, UnsupportedMediaType

# An invocation that records no metric (a read of an empty tail, say) is normal, not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")

JSON = "application/json"
OCTETS = "application/octet-stream"

ScopeName = Annotated[str, Path(pattern=r"^[A-Za-z0-9.\-]{1,255}$")]
StreamName = Annotated[str, Path(pattern=r"^[A-Za-z0-9.\-_]{1,255}$")]
SegmentToken = Annotated[str, Path(pattern=r"^[0-9]{1,20}(\.[0-9a-f]{32})?$",
                                   description="A segment id, or a transaction segment's id.transaction-id")]


def error_response(error: RilletError) -> Response:
    return Response(status_code=error.status, content_type=JSON, body=json.dumps(error.to_wire()))


def _validation_message(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def build_resolver(logger: Logger) -> LambdaFunctionUrlResolver:
    app = LambdaFunctionUrlResolver(enable_validation=True)

    @app.exception_handler(RilletError)
    def _typed(error: RilletError) -> Response:
        if error.status >= 500:
            logger.exception("server error")
        return error_response(error)

    @app.exception_handler(RequestUnsupportedContentType)
    def _content_type(error: RequestUnsupportedContentType) -> Response:
        return error_response(UnsupportedMediaType(f"unsupported content type: {error}"))

    @app.exception_handler([RequestValidationError, ValidationError])
    def _invalid(error: RequestValidationError | ValidationError) -> Response:
        return error_response(InvalidArgument(_validation_message(list(error.errors()))))

    @app.not_found
    def _no_route(_error: Exception) -> Response:
        path = app.current_event.path
        return error_response(NotFound(f"no route {app.current_event.http_method} {path}"))

    @app.exception_handler(Exception)
    def _unexpected(_error: Exception) -> Response:
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
