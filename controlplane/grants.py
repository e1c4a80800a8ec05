"""Authorization: the grants store, and the decision whether a caller may do an operation.

Grants live in the metadata table (controlplane/grant_models.py). Deciding a request needs the
deployment's grant count (zero grants: everything is allowed, as before authorization existed) and
the caller's grants (one query: at most ``MAX_GRANTS_PER_PRINCIPAL`` items, one page). Both are cached
per function instance for ``RILLET_GRANTS_CACHE_S`` seconds (default 30), so a warm function makes no
request for them at all, and a grant or revocation applies everywhere within that time (at once in
the function instance that changed it).

Two rules keep admins from locking themselves out: the first grant of a deployment must make an
admin (READ_UPDATE on ``prn::/``), and the last admin grant can only go with the last grant.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from controlplane.grant_models import (
    GRANTS_PK,
    MAX_PARTITION_KEY_BYTES,
    MAX_PRINCIPAL_BYTES,
    MAX_SORT_KEY_BYTES,
    SUMMARY_SK,
    GrantPrincipalRecord,
    GrantRecord,
    GrantSummaryRecord,
    bind,
    grant_pk,
    grant_sk,
    principal_sk,
)
from controlplane.store import _decode_token, _encode_token
from dataplane.deployment import Deployment
from rillet.errors import AccessDenied, IllegalState, InvalidArgument, WriteConflict
from rillet.grants import ROOT, Grant, Permission, PrincipalGrants

# A principal's grants are read in one query page per request (1 MB; a grant item is under 2 KB)
# and checked one by one: 100 is far beyond a role's needs (a wildcard pattern covers many streams)
# and keeps both the page and the check small.
MAX_GRANTS_PER_PRINCIPAL = 100
DEFAULT_CACHE_S = 30.0
# Principals remembered per function instance (LRU beyond that): bounds the instance's memory.
MAX_CACHED_PRINCIPALS = 1000
PRINCIPALS_PREFIX = principal_sk("")  # the sort keys of the principals listing
_CHANGE_ATTEMPTS = 5  # a removal races only with other changes of the same principal's grants


@dataclass(frozen=True)
class Need:
    """A permission an operation needs on a resource."""

    resource: str
    permission: Permission


@lru_cache(maxsize=4096)
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def matches(pattern: str, resource: str) -> bool:
    """Whether a grant's pattern names a resource (``*`` matches any characters, including none)."""
    return _pattern(pattern).fullmatch(resource) is not None


def allows(grants: Iterable[Grant], need: Need) -> bool:
    """READ_UPDATE includes READ."""
    return any(matches(g.resource, need.resource)
               and (g.permission == Permission.READ_UPDATE or need.permission == Permission.READ)
               for g in grants)


def is_admin_grant(grant: Grant) -> bool:
    return allows([grant], Need(ROOT, Permission.READ_UPDATE))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _cancelled_by(error: TransactWriteError, index: int) -> bool:
    reasons = error.cancellation_reasons or []
    return len(reasons) > index and reasons[index] is not None and reasons[index].code == "ConditionalCheckFailed"


def _check_keys(grant: Grant) -> None:
    """InvalidArgument for a grant whose keys DynamoDB would refuse (a ValidationException, a 500): the
    principal's listing entry has it in its sort key, a grant its resource pattern."""
    if len(grant.principal.encode()) > MAX_PRINCIPAL_BYTES:
        raise InvalidArgument(f"the principal is {len(grant.principal.encode())} bytes long; at most "
                              f"{MAX_PRINCIPAL_BYTES} are accepted")
    if len(grant_sk(grant.permission, grant.resource).encode()) > MAX_SORT_KEY_BYTES:
        raise InvalidArgument(f"the resource pattern is {len(grant.resource.encode())} bytes long: too long to store")


class GrantStore:
    def __init__(self, deployment: Deployment) -> None:
        bind(deployment)
        self.connection = Connection(region=deployment.region, host=deployment.endpoint_url)

    def grant_count(self) -> int:
        try:
            return GrantSummaryRecord.get(GRANTS_PK, SUMMARY_SK).grants
        except DoesNotExist:
            return 0

    def grants_of(self, principal: str) -> list[Grant]:
        if len(grant_pk(principal).encode()) > MAX_PARTITION_KEY_BYTES:
            return []  # no principal that long has grants (add refuses it)
        records = GrantRecord.query(grant_pk(principal), limit=MAX_GRANTS_PER_PRINCIPAL)
        return [Grant(principal=r.principal, resource=r.resource, permission=r.permission) for r in records]

    def principals(self, limit: int, token: str | None) -> tuple[list[PrincipalGrants], str | None]:
        result = GrantPrincipalRecord.query(GRANTS_PK, GrantPrincipalRecord.sk.startswith(PRINCIPALS_PREFIX),
                                            limit=limit,
                                            last_evaluated_key=_decode_token(token, GRANTS_PK, PRINCIPALS_PREFIX))
        records = [PrincipalGrants(principal=r.principal, grants=r.grants) for r in result]
        return records, _encode_token(result.last_evaluated_key)

    def add(self, grant: Grant) -> bool:
        """Store a grant, counting it; False when it existed already (adding is idempotent)."""
        _check_keys(grant)
        admin = int(is_admin_grant(grant))
        record = GrantRecord(grant_pk(grant.principal), grant_sk(grant.permission, grant.resource),
                             principal=grant.principal, resource=grant.resource,
                             permission=grant.permission.value, created_ms=_now_ms())
        summary = GrantSummaryRecord(GRANTS_PK, SUMMARY_SK)
        try:
            with TransactWrite(connection=self.connection) as tx:
                tx.save(record, condition=GrantRecord.pk.does_not_exist())
                tx.update(GrantPrincipalRecord(GRANTS_PK, principal_sk(grant.principal)),
                          actions=[GrantPrincipalRecord.principal.set(grant.principal),
                                   GrantPrincipalRecord.kind.set(GrantPrincipalRecord),
                                   GrantPrincipalRecord.grants.add(1)],
                          condition=GrantPrincipalRecord.pk.does_not_exist()
                          | (GrantPrincipalRecord.grants < MAX_GRANTS_PER_PRINCIPAL))
                tx.update(summary, actions=[GrantSummaryRecord.kind.set(GrantSummaryRecord),
                                            GrantSummaryRecord.grants.add(1),
                                            GrantSummaryRecord.admin_grants.add(admin)],
                          condition=None if admin else GrantSummaryRecord.grants > 0)
        except TransactWriteError as e:
            if _cancelled_by(e, 0):
                return False
            if _cancelled_by(e, 1):
                raise IllegalState(f"{grant.principal} has {MAX_GRANTS_PER_PRINCIPAL} grants already, the most a "
                                   "principal may have: remove one, or cover several resources with a * pattern"
                                   ) from e
            if _cancelled_by(e, 2):
                raise IllegalState(f"the first grant must make an admin (READ_UPDATE on {ROOT}, or prn::*): once "
                                   "a grant exists only admins may manage grants") from e
            raise
        return True

    def remove(self, grant: Grant) -> bool:
        """Delete a grant, counting it out; False when there was none. Each write is conditioned on the
        counts read, so a racing change makes this retry, never miscount."""
        _check_keys(grant)
        admin = int(is_admin_grant(grant))
        for _ in range(_CHANGE_ATTEMPTS):
            try:
                holder = GrantPrincipalRecord.get(GRANTS_PK, principal_sk(grant.principal), consistent_read=True)
            except DoesNotExist:
                return False
            holder_key = GrantPrincipalRecord(GRANTS_PK, principal_sk(grant.principal))
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.delete(GrantRecord(grant_pk(grant.principal), grant_sk(grant.permission, grant.resource)),
                              condition=GrantRecord.pk.exists())
                    if holder.grants <= 1:
                        tx.delete(holder_key, condition=GrantPrincipalRecord.grants == holder.grants)
                    else:
                        tx.update(holder_key, actions=[GrantPrincipalRecord.grants.add(-1)],
                                  condition=GrantPrincipalRecord.grants == holder.grants)
                    tx.update(GrantSummaryRecord(GRANTS_PK, SUMMARY_SK),
                              actions=[GrantSummaryRecord.grants.add(-1), GrantSummaryRecord.admin_grants.add(-admin)],
                              condition=(GrantSummaryRecord.admin_grants > 1) | (GrantSummaryRecord.grants == 1)
                              if admin else None)
            except TransactWriteError as e:
                if _cancelled_by(e, 0):
                    return False
                if _cancelled_by(e, 1):
                    continue
                if _cancelled_by(e, 2):
                    raise IllegalState("this is the last admin grant: grant another admin first, or remove every "
                                       "other grant (with no grants at all, authorization is off)") from e
                raise
            return True
        raise WriteConflict(f"the grants of {grant.principal} kept changing while one was being removed")


class _Expiring:
    """A value remembered until a deadline."""

    __slots__ = ("deadline", "value")

    def __init__(self, value: object, ttl_s: float) -> None:
        self.value = value
        self.deadline = time.monotonic() + ttl_s


class Authorizer:
    """Decides whether a principal may do an operation, from grants cached per function instance."""

    def __init__(self, store: GrantStore, ttl_s: float = DEFAULT_CACHE_S) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._count: _Expiring | None = None
        self._grants: dict[str, _Expiring] = {}

    @classmethod
    def from_env(cls, deployment: Deployment) -> Authorizer:
        return cls(GrantStore(deployment), float(os.environ.get("RILLET_GRANTS_CACHE_S", DEFAULT_CACHE_S)))

    def check(self, principal: str | None, needs: Sequence[Need]) -> None:
        """Raise AccessDenied naming the first permission the principal lacks (None: an unsigned caller,
        who has no grants). Decided before any lookup of the resources, so the answer says nothing about
        whether they exist."""
        if not needs or self._grant_count() == 0:
            return
        grants = self._grants_of(principal) if principal else []
        for need in needs:
            if not allows(grants, need):
                who = principal or "an unauthenticated caller"
                raise AccessDenied(f"{who} lacks {need.permission.value} on {need.resource}",
                                   permission=need.permission.value, resource=need.resource)

    def forget(self) -> None:
        """Drop what is cached (after this instance changed a grant)."""
        self._count = None
        self._grants.clear()

    def _grant_count(self) -> int:
        if self._count is None or self._count.deadline <= time.monotonic():
            self._count = _Expiring(self.store.grant_count(), self.ttl_s)
        return self._count.value

    def _grants_of(self, principal: str) -> list[Grant]:
        cached = self._grants.pop(principal, None)  # re-inserted below: the dict's order is recency
        if cached is None or cached.deadline <= time.monotonic():
            cached = _Expiring(self.store.grants_of(principal), self.ttl_s)
        self._grants[principal] = cached
        while len(self._grants) > MAX_CACHED_PRINCIPALS:
            del self._grants[next(iter(self._grants))]
        return cached.value
