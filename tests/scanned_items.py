"""Items read by the metadata table's queries, as DynamoDB charges them: a test's measure of what a
request reads."""

from __future__ import annotations

from typing import Self

from controlplane.models import MODELS


class ScannedItems:
    """Items scanned by the metadata table's queries while it is registered (botocore's after-call on
    the client of every model of the table: each has a connection of its own)."""

    def __init__(self) -> None:
        self.items = 0
        self.clients = {id(c): c for c in (model._get_connection().connection.client for model in MODELS)}.values()

    def __call__(self, parsed=None, **_) -> None:
        self.items += int((parsed or {}).get("ScannedCount", 0))

    def __enter__(self) -> Self:
        for client in self.clients:
            client.meta.events.register("after-call.dynamodb.Query", self)
        return self

    def __exit__(self, *_) -> None:
        for client in self.clients:
            client.meta.events.unregister("after-call.dynamodb.Query", self)
