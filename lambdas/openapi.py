"""Generate the OpenAPI documents of the three APIs from the handlers' code (``make openapi``).

The documents are checked in under docs/openapi/; tests/unit/test_openapi_drift.py fails when the
code and the checked-in documents differ.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from rillet.api import ErrorBody

APIS = {
    "controller": ("lambdas.controller_api.handler", "Rillet control API",
                   ("Scopes, streams and segment queries. Errors are {code, message}: a 4xx for a caller's "
                    "mistake, 429 or 503 with Retry-After when AWS throttles or fails transiently.")),
    "append": ("lambdas.append.handler", "Rillet append API",
               "Binary blocks of length-prefixed events appended to segments, de-duplicated per writer."),
    "read": ("lambdas.read.handler", "Rillet read API",
             "Binary byte ranges of segments, with a bounded long poll at the tail."),
}
OUT_DIR = Path(__file__).resolve().parent.parent / "docs" / "openapi"


ERROR_STATUSES = {
    "400": "Invalid request (InvalidArgument)",
    "404": "No such scope, stream, segment or route (*NotFound)",
    "409": "Conflicting state (IllegalState, WriteConflict, SegmentSealed, ...)",
    "429": "AWS throttled the request (Throttled): outcome unknown, repeat it after Retry-After",
    "500": "Unexpected server error (InternalError, never with a stack trace)",
    "503": "AWS failed transiently (ServiceUnavailable): outcome unknown, repeat it after Retry-After",
}
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before repeating the request.",
                               "schema": {"type": "integer", "minimum": 1}}}


def _document_errors(schema: dict) -> dict:
    """Describe the typed errors the handlers really answer with (powertools documents a 422 instead)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["ErrorBody"] = ErrorBody.model_json_schema()
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status, text in ERROR_STATUSES.items():
                response = {"description": text, "content": error}
                if status in ("429", "503"):
                    response["headers"] = RETRY_AFTER
                responses.setdefault(status, response)
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    schema["components"]["schemas"].pop("ResponseValidationError", None)
    return schema


def render(name: str) -> str:
    module, title, description = APIS[name]
    app = importlib.import_module(module).app
    schema = json.loads(app.get_openapi_json_schema(title=title, version="1", description=description))
    return json.dumps(_document_errors(schema), indent=2, sort_keys=True) + "\n"


API_DOC = OUT_DIR.parent / "api.md"
API_INTRO = """# Rillet APIs

Three HTTPS APIs, each a Lambda Function URL on AWS (AWS_IAM auth: requests are SigV4-signed for
the `lambda` service; the SDK does it from the standard credential chain) and a loopback port in
standalone. The SDK needs only the controller's URL: `GET /v1/endpoints` names the other two.

* **Control API** (JSON): scopes, streams, segments, scaling, truncation, reader groups.
* **Append API** (binary): `POST /v1/segments/{scope}/{stream}/{segment}` with a body of
  length-prefixed events (a 4-byte big-endian length before each event, or raw bytes with
  `x-rillet-raw: true` for byte streams) and the headers `x-rillet-writer-id`,
  `x-rillet-event-number` (of the block's first event), `x-rillet-event-count` and optionally
  `x-rillet-expected-offset` (a conditional append) and `x-rillet-after-event` (the writer's last
  event number before this block, -1 for its first: the block waits for it, so a writer may pipeline
  blocks; `OutOfOrder` if it never arrives). The answer is `{"offset", "length", "duplicate"}`.
* **Read API** (binary): `GET /v1/segments/{scope}/{stream}/{segment}?offset=&max_bytes=&wait_ms=`
  answers the bytes, with `x-rillet-offset`, `x-rillet-next-offset`, `x-rillet-start-offset`,
  `x-rillet-length`, `x-rillet-sealed` and `x-rillet-end-of-segment` headers.

Errors are JSON `{"code": ..., "message": ..., "details": {...}}` with a stable `code`
(`InvalidArgument` 400, `*NotFound` 404, `IllegalState`/`WriteConflict`/`SegmentSealed`/
`AlreadyExists`/`OutOfOrder` 409, `Truncated` 410, `OffsetMismatch` 412, `TooLarge` 413, `Throttled` 429,
`InternalError` 500, `ServiceUnavailable` 503); never a stack trace. The full types are in
`client/rillet/errors.py`.

* **429 `Throttled`** (DynamoDB or S3 throttled a request) and **503 `ServiceUnavailable`** (an AWS
  request failed transiently: a 5xx, a timeout, a dropped connection) come with `Retry-After` (seconds).
  Their outcome is unknown: the request may or may not have been applied. Repeat the same request after
  that pause; appends are de-duplicated by writer id and event number, control operations are idempotent.
  A 502 (the function itself crashed or timed out) is just as unknown. `InternalError` 500 is a bug.
* **Bounds.** Event numbers, event counts, offsets and times (`x-rillet-event-number`,
  `x-rillet-event-count`, `x-rillet-expected-offset`, `x-rillet-after-event`, `offset`, `from`, `to`,
  `at_ms`, and in control-API bodies cut offsets, batch ids and noted or commit times) are 63-bit: 0 to
  2^63 - 1, and a block's last event number (`event-number + event-count - 1`) is at most 2^63 - 1.
  Segment ids are 64-bit (epoch << 32 | number), epochs 32-bit. A value out of range, or not an
  integer, is `InvalidArgument` 400.
* **Bodies.** A request body must be exactly `Content-Length` bytes. The standalone gateway answers
  `InvalidArgument` 400, without invoking the function, to a body that ends early, a malformed
  `Content-Length` or a `Transfer-Encoding` body, so a truncated block is never appended.
* **Routing keys** are text with a UTF-8 form (`segment-for-key?routing_key=`, at most 4096
  characters); the SDK refuses anything else with `InvalidArgument` before sending.

The OpenAPI documents below are generated from the handlers' code (`make openapi`); a test fails if
they drift from it.
"""


def render_markdown() -> str:
    lines = [API_INTRO]
    for name, (_, title, description) in APIS.items():
        schema = json.loads(render(name))
        lines += [f"## {title}", "", description, "", f"OpenAPI: [openapi/{name}.json](openapi/{name}.json)", "",
                  "| method | path | what |", "|---|---|---|"]
        for path, operations in sorted(schema["paths"].items()):
            for method, operation in sorted(operations.items()):
                lines.append(f"| {method.upper()} | `{path}` | {operation.get('summary', '')} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in APIS:
        (OUT_DIR / f"{name}.json").write_text(render(name))
        print(f"wrote {OUT_DIR / f'{name}.json'}")
    API_DOC.write_text(render_markdown())
    print(f"wrote {API_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
