"""Permission grants: who may do what, per scope, stream, reader group and key-value table.

A grant gives an IAM principal READ or READ_UPDATE (which includes READ) on the resources a pattern
names, in Pravega's resource syntax:

* ``prn::/`` -- the deployment: listing scopes (READ); creating and deleting scopes and managing grants
  (READ_UPDATE, which makes an *admin*);
* ``prn::/scope:S`` -- a scope: describing it and listing its streams and groups (READ); creating
  streams, reader groups and tables in it (READ_UPDATE);
* ``prn::/scope:S/stream:T``, ``prn::/scope:S/reader-group:G``, ``prn::/scope:S/key-value-table:K``.

``*`` matches any characters, as in Pravega's ACLs: ``prn::*`` is everything, ``prn::/scope:S/*``
everything inside scope S, ``prn::/scope:S/stream:orders-*`` every stream whose name starts so.

Principals are IAM ARNs as the Function URL reports the caller. An assumed-role session
(``arn:aws:sts::123456789012:assumed-role/Producer/i-0abc``) counts as its role
(``arn:aws:iam::123456789012:role/Producer``), so grant roles by that ARN, without the role's path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum

from pydantic import Field, field_validator

from rillet.api import Created, Deleted, _Body, parse_answer
from rillet.transport import Transport

ROOT = "prn::/"
# Names as the API accepts them, plus * anywhere in a name.
_NAME = r"[A-Za-z0-9._*\-]{1,255}"
RESOURCE_PATTERN = (rf"^prn::(\*|/(\*|scope:{_NAME}(/(\*|(stream|reader-group|key-value-table):{_NAME}))?)?)$")
PRINCIPAL_PATTERN = r"^arn:aws[a-z\-]*:(iam|sts)::[0-9]{12}:[A-Za-z0-9+=,.@_/\-]{1,900}$"
_ASSUMED_ROLE = re.compile(
    r"^arn:(?P<partition>aws[a-z\-]*):sts::(?P<account>[0-9]{12}):assumed-role/(?P<role>[^/]+)/[^/]+$")


class Permission(StrEnum):
    READ = "READ"
    READ_UPDATE = "READ_UPDATE"


def normalize_principal(arn: str) -> str:
    """The principal a grant names for a caller: an assumed-role session is its role (the session
    name changes with every session; the role is what an administrator grants to). Anything else is
    itself. The session ARN does not carry the role's path, so neither does the result."""
    match = _ASSUMED_ROLE.match(arn)
    if match is None:
        return arn
    return f"arn:{match['partition']}:iam::{match['account']}:role/{match['role']}"


def scope_resource(scope: str) -> str:
    return f"prn::/scope:{scope}"


def stream_resource(scope: str, stream: str) -> str:
    return f"prn::/scope:{scope}/stream:{stream}"


def reader_group_resource(scope: str, group: str) -> str:
    return f"prn::/scope:{scope}/reader-group:{group}"


def key_value_table_resource(scope: str, table: str) -> str:
    return f"prn::/scope:{scope}/key-value-table:{table}"


class Grant(_Body):
    principal: str = Field(pattern=PRINCIPAL_PATTERN, max_length=1014, description=(  # ASCII; its key principal#<it> within 1 KB
        "An IAM ARN: a user, a role (an assumed-role session ARN is stored as its role), an account root."))
    resource: str = Field(pattern=RESOURCE_PATTERN, max_length=600, description=(
        "prn::/ (the deployment), prn::/scope:S, prn::/scope:S/stream:T, prn::/scope:S/reader-group:G or "
        "prn::/scope:S/key-value-table:K; * matches any characters (prn::* is everything)."))
    permission: Permission = Field(description="READ, or READ_UPDATE (which includes READ).")

    @field_validator("principal")
    @classmethod
    def _as_caller(cls, principal: str) -> str:
        return normalize_principal(principal)


class GrantList(_Body):
    grants: list[Grant]


class PrincipalGrants(_Body):
    principal: str
    grants: int = Field(description="How many grants the principal has.")


class PrincipalList(_Body):
    principals: list[PrincipalGrants]
    next_token: str | None = None


class GrantsClient:
    """Grant management through the control API (the caller must be an admin once any grant exists)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def add(self, principal: str, resource: str, permission: Permission | str) -> bool:
        """Add a grant; False when it already existed."""
        body = Grant(principal=principal, resource=resource, permission=permission).model_dump(mode="json")
        return parse_answer(Created, self.transport.json("POST", "/v1/grants", json_body=body)).created

    def remove(self, principal: str, resource: str, permission: Permission | str) -> bool:
        """Remove a grant; False when there was none."""
        grant = Grant(principal=principal, resource=resource, permission=permission)
        return parse_answer(Deleted, self.transport.json("DELETE", "/v1/grants", params=grant.model_dump(
            mode="json"))).deleted

    def of(self, principal: str) -> list[Grant]:
        """The grants of one principal (an assumed-role session ARN means its role)."""
        page = self.transport.json("GET", "/v1/grants", params={"principal": principal})
        return parse_answer(GrantList, page).grants

    def principals(self) -> Iterator[PrincipalGrants]:
        """Every principal with grants, and how many each has."""
        token = None
        while True:
            page = parse_answer(PrincipalList, self.transport.json("GET", "/v1/grants/principals",
                                                                      params={"token": token}))
            yield from page.principals
            if not page.next_token:
                return
            token = page.next_token
