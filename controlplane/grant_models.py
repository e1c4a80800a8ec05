"""Permission grants as items of the metadata table (PynamoDB models of their own, no index).

Keys (``pk`` / ``sk``):

* ``grant#<principal>`` / ``<permission>#<pattern>`` -- :class:`GrantRecord`: one grant. A principal's
  grants share a partition, so deciding a request is one query; there are at most
  ``MAX_GRANTS_PER_PRINCIPAL`` of them, which :class:`GrantPrincipalRecord` enforces.
* ``grants`` / ``principal#<principal>`` -- :class:`GrantPrincipalRecord`: how many grants a principal
  has; deleted with its last grant, so listing principals lists only those with grants.
* ``grants`` / ``summary`` -- :class:`GrantSummaryRecord`: how many grants exist and how many make an
  admin. Zero grants means the deployment is open (authorization off); it is read once per cache
  period by every function instance.

The counters change in the same DynamoDB transaction as the grant they count, so they are exact.
"""

from __future__ import annotations

from pynamodb.attributes import DiscriminatorAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from dataplane.deployment import Deployment, point_models

GRANTS_PK = "grants"
SUMMARY_SK = "summary"


MAX_PARTITION_KEY_BYTES = 2048  # DynamoDB's bounds on a key's attributes, in UTF-8 bytes
MAX_SORT_KEY_BYTES = 1024


def grant_pk(principal: str) -> str:
    return f"grant#{principal}"


def grant_sk(permission: str, pattern: str) -> str:
    return f"{permission}#{pattern}"


def principal_sk(principal: str) -> str:
    return f"principal#{principal}"


# The longest principal whose keys DynamoDB accepts: its listing entry's sort key is the tightest.
MAX_PRINCIPAL_BYTES = MAX_SORT_KEY_BYTES - len(principal_sk("").encode())


class GrantItem(Model):
    class Meta:
        table_name = Deployment.metadata_table
        region = Deployment.region
        billing_mode = "PAY_PER_REQUEST"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = DiscriminatorAttribute()


class GrantRecord(GrantItem, discriminator="grant"):
    principal = UnicodeAttribute()
    resource = UnicodeAttribute()  # a pattern: prn::/scope:S/stream:T, with * matching any characters
    permission = UnicodeAttribute()  # READ or READ_UPDATE
    created_ms = NumberAttribute()


class GrantPrincipalRecord(GrantItem, discriminator="grant-principal"):
    principal = UnicodeAttribute()
    grants = NumberAttribute()


class GrantSummaryRecord(GrantItem, discriminator="grant-summary"):
    grants = NumberAttribute(default=0)
    admin_grants = NumberAttribute(default=0)


def bind(deployment: Deployment) -> None:
    """Point the grant models at a deployment's metadata table."""
    point_models((GrantItem, GrantRecord, GrantPrincipalRecord, GrantSummaryRecord), deployment.metadata_table, deployment)
