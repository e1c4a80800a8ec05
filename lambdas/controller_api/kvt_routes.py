"""Control API routes of key-value tables: their lifecycle, and reads and updates of their entries.

Entries travel as JSON with base64 keys and values (they are small: see rillet.kvt_models for the
bounds), so the table operations share the controller's Function URL and its typed errors.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import LambdaFunctionUrlRouter

from controlplane.kvtables import KeyValueTables
from controlplane.store import MetadataStore
from dataplane.deployment import Deployment
from lambdas.controller_api.path_names import ScopeName
from rillet.api import Created, Deleted
from rillet.kvt_models import (
    CreateKeyValueTableRequest,
    GetRequest,
    GetResult,
    IteratePage,
    IterateRequest,
    KeyValueTableInfo,
    KeyValueTableList,
    UpdateRequest,
    UpdateResult,
)

router = LambdaFunctionUrlRouter()
tables = KeyValueTables(MetadataStore(Deployment.from_env()))

TABLES = "/v1/scopes/<scope>/key-value-tables"
TABLE = TABLES + "/<table>"
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
Token = Annotated[str | None, Query(max_length=1024, description="next_token of the previous page.")]


@router.post(TABLES, summary="Create a key-value table (false if it exists)")
def create_key_value_table(scope: ScopeName, request: CreateKeyValueTableRequest) -> Created:
    return Created(created=tables.create(scope, request.table, request.configuration))


@router.get(TABLES, summary="List the key-value tables of a scope")
def list_key_value_tables(scope: ScopeName, limit: Limit = 100, token: Token = None) -> KeyValueTableList:
    names, next_token = tables.list(scope, limit, token)
    return KeyValueTableList(tables=names, next_token=next_token)


@router.get(TABLE, summary="A key-value table's state and configuration")
def get_key_value_table(scope: ScopeName, table: str) -> KeyValueTableInfo:
    return tables.info(scope, table)


@router.post(TABLE + "/seal", summary="Seal a key-value table: its entries can be read, no longer changed")
def seal_key_value_table(scope: ScopeName, table: str) -> KeyValueTableInfo:
    return tables.seal(scope, table)


@router.delete(TABLE, summary="Delete a key-value table and its entries (false if it did not exist)")
def delete_key_value_table(scope: ScopeName, table: str) -> Deleted:
    return Deleted(deleted=tables.delete(scope, table))


@router.post(TABLE + "/entries/get", summary="Get entries by key (null where a key does not exist)")
def get_entries(scope: ScopeName, table: str, request: GetRequest) -> GetResult:
    return GetResult(entries=tables.get(scope, table, request.keys))


# Responses given to a route replace powertools' default 200, so it is named again (its schema is the
# route's return type).
CONDITION_FAILED = {200: {"description": "Successful Response"},
                    412: {"description": "A condition failed (BadKeyVersion, NoSuchKey): nothing was applied",
                          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}}


@router.post(TABLE + "/entries/update", responses=CONDITION_FAILED,
             summary="Put, insert, replace or remove entries of one primary key, atomically",
             description="All updates apply or none does. A failed condition is 412 BadKeyVersion (the key has "
                         "another version, or exists for an insert) or 412 NoSuchKey (a version was named for a "
                         "key that does not exist); a sealed or deleting table is 409 IllegalState.")
def update_entries(scope: ScopeName, table: str, request: UpdateRequest) -> UpdateResult:
    return UpdateResult(versions=tables.update(scope, table, request.updates, request.request_id))


@router.post(TABLE + "/entries/iterate", summary="A page of entries (or keys): of one primary key, or all")
def iterate_entries(scope: ScopeName, table: str, request: IterateRequest) -> IteratePage:
    return tables.iterate(scope, table, request.primary_key, request.with_values, request.limit, request.token,
                          request.secondary_prefix)
