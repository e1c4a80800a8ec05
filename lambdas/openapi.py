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
                   "Scopes, streams and segment queries. Errors are {code, message} with a 4xx status."),
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
    "500": "Unexpected server error (InternalError, never with a stack trace)",
}


def _document_errors(schema: dict) -> dict:
    """Describe the typed errors the handlers really answer with (powertools documents a 422 instead)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["ErrorBody"] = ErrorBody.model_json_schema()
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status, text in ERROR_STATUSES.items():
                responses.setdefault(status, {"description": text, "content": error})
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    schema["components"]["schemas"].pop("ResponseValidationError", None)
    return schema


def render(name: str) -> str:
    module, title, description = APIS[name]
    app = importlib.import_module(module).app
    schema = json.loads(app.get_openapi_json_schema(title=title, version="1", description=description))
    return json.dumps(_document_errors(schema), indent=2, sort_keys=True) + "\n"


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in APIS:
        (OUT_DIR / f"{name}.json").write_text(render(name))
        print(f"wrote {OUT_DIR / f'{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
