"""Path parameters that name scopes, streams and reader groups, bounded so every key they form fits DynamoDB.

Only the length is bounded here (the name rules apply where a name is created): 255 characters of at
most 4 UTF-8 bytes each keep a scope or stream name within a sort key's 1,024 bytes, and the longest
composite key a lookup forms, ``stream#<scope>/<stream>``, within a partition key's 2,048. Without the
bound such a lookup is DynamoDB's ValidationException, a 500, instead of a 400.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path

from rillet.names import MAX_GIVEN_NAME_SIZE, MAX_NAME_SIZE

ScopeName = Annotated[str, Path(min_length=1, max_length=MAX_NAME_SIZE, description="A scope's name.")]
StreamName = Annotated[str, Path(min_length=1, max_length=MAX_NAME_SIZE, description="A stream's name.")]
GroupName = Annotated[str, Path(min_length=1, max_length=MAX_GIVEN_NAME_SIZE, description="A reader group's name.")]
