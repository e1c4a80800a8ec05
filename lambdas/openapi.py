"""Generate the OpenAPI documents of the four APIs from the handlers' code (``make openapi``).

The documents are checked in under docs/openapi/; tests/unit/test_openapi_drift.py fails when the
code and the checked-in documents differ.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

from lambdas.authorization import OPEN_ROUTES
from rillet.api import ErrorBody
from rillet.names import MAX_GIVEN_NAME_SIZE, MAX_NAME_SIZE

APIS = {
    "controller": ("lambdas.controller_api.handler", "Rillet control API",
                   ("Scopes, streams and segment queries. Errors are {code, message}: a 4xx for a caller's "
                    "mistake, 429 or 503 with Retry-After when AWS throttles or fails transiently.")),
    "append": ("lambdas.append.handler", "Rillet append API",
               "Binary blocks of length-prefixed events appended to segments, de-duplicated per writer."),
    "read": ("lambdas.read.handler", "Rillet read API",
             "Binary byte ranges of segments, with a bounded long poll at the tail."),
    "tails": ("lambdas.tails.handler", "Rillet tails API",
              "Tail checks of waiting readers, in a small function of their own (the read API serves them too)."),
}
OUT_DIR = Path(__file__).resolve().parent.parent / "docs" / "openapi"


ERROR_STATUSES = {
    "400": "Invalid request (InvalidArgument)",
    "403": ("The caller lacks a permission the operation needs (AccessDenied; only once the deployment has "
            "grants, and decided before any lookup: the same whether or not the resource exists)"),
    "404": "No such scope, stream, reader group, key-value table, segment or route (*NotFound)",
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
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            authorized = (method.upper(), re.sub(r"{(\w+)}", r"<\1>", path)) not in OPEN_ROUTES
            for status, text in ERROR_STATUSES.items():
                if status == "403" and not authorized:
                    continue
                response = {"description": text, "content": error}
                if status in ("429", "503"):
                    response["headers"] = RETRY_AFTER
                responses.setdefault(status, response)
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    schema["components"]["schemas"].pop("ResponseValidationError", None)
    return schema


# The name rules the handlers enforce (rillet/names.py, as Pravega's NameUtils), stated in the documents
# so that a client generated from them checks names the same way. A stream named in a path or a body
# may be an internal one (a leading '_', such as a watermark stream); a stream a user creates may not.
_CHARS = r"[A-Za-z0-9.\-]"
_USER_STREAM = {"type": "string", "minLength": 1, "maxLength": MAX_GIVEN_NAME_SIZE,
                "pattern": f"^{_CHARS}{{1,{MAX_GIVEN_NAME_SIZE}}}$"}
NAME_RULES = {
    "scope": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_SIZE,
              "pattern": f"^{_CHARS}{{1,{MAX_NAME_SIZE}}}$"},
    "stream": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_SIZE,
               "pattern": f"^(?:{_CHARS}{{1,{MAX_GIVEN_NAME_SIZE}}}|_{_CHARS}{{1,{MAX_NAME_SIZE - 1}}})$"},
    "group": _USER_STREAM,  # reader group names follow the user stream rule
    "table": _USER_STREAM,  # and so do key-value table names (rillet.kvt_models.validate_table_name)
}


def _state_name_rules(schema: dict) -> dict:
    """Give every path parameter and body property named scope, stream, group or table its name rule."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                rule = NAME_RULES.get(parameter["name"])
                if parameter["in"] == "path" and rule and "pattern" not in parameter["schema"]:
                    parameter["schema"] = {**parameter["schema"], **rule}
    for model, definition in schema.get("components", {}).get("schemas", {}).items():
        for name, prop in definition.get("properties", {}).items():
            if name in NAME_RULES and prop.get("type") == "string":
                rule = _USER_STREAM if (model, name) == ("CreateStreamRequest", "stream") else NAME_RULES[name]
                prop.update(rule)
    return schema


# Operations whose success yields a name other operations take in their path: (method, path) -> (that
# path parameter, where its value is). Links from each to the operations under it let a reader, and a
# stateful fuzzer, follow create scope -> create stream -> segments, transactions, reader groups, and
# create scope -> create key-value table -> its entries, ...
PRODUCERS = {
    ("post", "/v1/scopes"): ("scope", "$request.body#/scope"),
    ("post", "/v1/scopes/{scope}/streams"): ("stream", "$request.body#/stream"),
    ("post", "/v1/scopes/{scope}/reader-groups"): ("group", "$request.body#/group"),
    ("post", "/v1/scopes/{scope}/key-value-tables"): ("table", "$request.body#/table"),
    ("post", "/v1/scopes/{scope}/reader-groups/{group}/readers/{reader}"): ("reader", "$request.path.reader"),
    ("post", "/v1/scopes/{scope}/reader-groups/{group}/checkpoints"): ("name", "$request.body#/name"),
    ("post", "/v1/scopes/{scope}/streams/{stream}/transactions"): ("txn_id", "$response.body#/txn_id"),
    ("post", "/v1/scopes/{scope}/streams/{stream}/scale"): ("epoch", "$response.body#/epoch"),
    ("get", "/v1/scopes/{scope}/streams/{stream}/segments"): ("segment_id", "$response.body#/segments/0/segment_id"),
}


def _link_producers(schema: dict) -> dict:
    """OpenAPI links from each producer's 200 answer to every operation under the name it yields."""
    paths = schema.get("paths", {})
    for (method, path), (produced, value) in PRODUCERS.items():
        if path not in paths:
            continue
        under = path + "/" if path.endswith(f"{{{produced}}}") else f"{path}/{{{produced}}}"
        known = set(re.findall(r"{(\w+)}", path)) | {produced}
        links = {}
        for target, operations in sorted(paths.items()):
            if target == path or not target.startswith(under):
                continue
            for operation in operations.values():
                names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
                if not {"scope", "stream", "group", "table"} & set(names) <= known:
                    continue  # it needs a resource this answer does not name (a stream, under a new scope)
                # a name nothing creates (a reader, a writer, a sink) is the caller's choice
                links[operation["operationId"]] = {
                    "operationId": operation["operationId"],
                    "parameters": {n: value if n == produced else f"$request.path.{n}" for n in names if n in known}}
        paths[path][method]["responses"]["200"]["links"] = links
    return schema


def render(name: str) -> str:
    module, title, description = APIS[name]
    app = importlib.import_module(module).app
    schema = json.loads(app.get_openapi_json_schema(title=title, version="1", description=description))
    schema = _link_producers(_state_name_rules(_document_errors(schema)))
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


API_DOC = OUT_DIR.parent / "api.md"
API_INTRO = """# Rillet APIs

Four HTTPS APIs, each a Lambda Function URL on AWS (AWS_IAM auth: requests are SigV4-signed for
the `lambda` service; the SDK does it from the standard credential chain) and a loopback port in
standalone. The SDK needs only the controller's URL: `GET /v1/endpoints` names the other three
(`tails_url` is absent from deployments older than the tails API: then the read API serves tail checks).

* **Control API** (JSON): scopes, streams, segments, scaling, truncation, reader groups.
* **Append API** (binary): `POST /v1/segments/{scope}/{stream}/{segment}` with a body of
  length-prefixed events (a 4-byte big-endian length before each event, or raw bytes with
  `x-rillet-raw: true` for byte streams) and the headers `x-rillet-writer-id`,
  `x-rillet-event-number` (of the block's first event), `x-rillet-event-count` and optionally
  `x-rillet-expected-offset` (a conditional append) and `x-rillet-after-event` (the writer's last
  event number before this block, -1 for its first: the block commits only after it, so a writer may
  pipeline blocks; if that event is not appended within about 100 ms the answer is `OutOfOrder` with
  `details.awaiting_event_number` and `details.last_event_number`, and the writer sends the block again
  while its predecessor is in flight). The answer is `{"offset", "length", "duplicate"}`.
  A segment's first append pins what it holds: framed events, or raw bytes. Raw bytes sent to a
  segment of events (or framed events to a byte segment) answer `StreamKindMismatch` 409.
* **Read API**: `GET /v1/segments/{scope}/{stream}/{segment}/locations?offset=&max_bytes=` answers
  where the bytes from `offset` are (JSON): presigned GETs of S3 objects, each naming one object and
  signed for one `Range` header (send it as given; the URL expires in 5 minutes and is issued only after
  the caller's READ grant on the stream is checked), and the bytes of small appends inline (base64). An
  answer ends where an object ends, so a reader fetches each object once; it holds at most 1 MiB inline
  and 256 locations. `GET /v1/segments/{scope}/{stream}/tails?segments=1,2,3` (at most 100 ids) answers
  each segment's start, length and sealed flag from an eventually consistent read (it may lag a commit by
  a moment, never run ahead of one): the check a reader waiting at the tail makes, for all its segments
  in one request, backing off while nothing changes. The SDK sends it to the **Tails API**, a function
  of its own at 128 MB that serves only this route (same answer, same READ check): a reader idling all
  day sends about 45,000 of them. `GET /v1/segments/{scope}/{stream}/{segment}?offset=&max_bytes=`
  answers the bytes themselves (binary, at most 4 MiB + 4), with `x-rillet-offset`, `x-rillet-next-offset`,
  `x-rillet-start-offset`, `x-rillet-length`, `x-rillet-sealed` and `x-rillet-end-of-segment` headers;
  at the tail it answers empty at once (no request waits on the server: wait with tail checks).

Errors are JSON `{"code": ..., "message": ..., "details": {...}}` with a stable `code`
(`InvalidArgument` 400, `AccessDenied` 403, `*NotFound` 404, `IllegalState`/`WriteConflict`/`SegmentSealed`/
`AlreadyExists`/`OutOfOrder`/`StreamKindMismatch` 409, `Truncated` 410, `OffsetMismatch` 412, `TooLarge` 413, `Throttled` 429,
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
* **Names.** Scope names are 1 to 255 of `A-Z a-z 0-9 . -`; stream, reader group and key-value table
  names 1 to 250 of the same (a stream named in a path may also be an internal one, `_` and up to 254
  more). The documents state these rules on every `scope`, `stream`, `group` and `table` parameter and
  property, so a client generated from them checks names as the handlers do; a name outside them is
  `InvalidArgument` 400 (or `*NotFound` 404 where no such resource can exist).
* **Methods and content types.** A method no route declares (`TRACE`, `OPTIONS`, ...) is
  `MethodNotAllowed` 405 with an `Allow` header; a JSON route sent a body of another type is
  `UnsupportedMediaType` 415, and a JSON body that is not UTF-8 `InvalidArgument` 400.
* **Links.** Each operation that creates something other operations name in their path (a scope, a
  stream, a reader group, a key-value table, a reader, a checkpoint, a transaction, a scale epoch, a
  segment listing) carries OpenAPI `links` from its 200 answer to those operations, so a reader (and a
  stateful fuzzer) can follow create scope -> create stream -> segments, transactions and reader
  groups, and create scope -> create key-value table -> its entries.
  tests/e2e/test_api_fuzz.py runs schemathesis over the control, append and read documents against the standalone stack
  (every phase, links followed, a fixed seed): no input gets a 5xx or a dropped connection.
* **Authorization** ([authorization.md](authorization.md)). Once a deployment has any grant, every
  route needs a permission of the caller's IAM identity (the SigV4 signer, as the Function URL reports
  it; an assumed-role session counts as its role): READ or READ_UPDATE on a resource such as
  `prn::/scope:S/stream:T`, admin (READ_UPDATE on `prn::/`) for scopes and grants. A caller without it
  gets `AccessDenied` 403 with `details.permission` and `details.resource`, decided before any lookup,
  so the answer is the same whether the resource exists or not. Without grants, everything is allowed.
  Every operation but `GET /v1/endpoints` declares that 403 in the documents.
  Admins manage grants with `POST /v1/grants`, `DELETE /v1/grants?principal=&resource=&permission=`,
  `GET /v1/grants?principal=` and `GET /v1/grants/principals`.
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
    # Importing a handler builds its clients (the read function presigns once at start): give them
    # placeholder credentials where none are set; rendering the documents makes no AWS request.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "openapi")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "openapi")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in APIS:
        (OUT_DIR / f"{name}.json").write_text(render(name))
        print(f"wrote {OUT_DIR / f'{name}.json'}")
    API_DOC.write_text(render_markdown())
    print(f"wrote {API_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
