"""Control API: permission grants (admin only once any grant exists; see lambdas/authorization.py)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import LambdaFunctionUrlRouter

from controlplane.grant_models import MAX_PRINCIPAL_BYTES
from controlplane.grants import GrantStore
from dataplane.deployment import Deployment
from lambdas.authorization import authorizer
from rillet.api import Created, Deleted
from rillet.grants import (
    PRINCIPAL_PATTERN,
    RESOURCE_PATTERN,
    Grant,
    GrantList,
    Permission,
    PrincipalList,
    normalize_principal,
)

router = LambdaFunctionUrlRouter()
grants = GrantStore(Deployment.from_env())

# A principals page token is the base64 of a key whose sort key names a principal (at most 1,024 bytes,
# DynamoDB's bound on a sort key): about 1,420 characters at most.
MAX_TOKEN_LENGTH = 2048
Principal = Annotated[str, Query(pattern=PRINCIPAL_PATTERN, max_length=MAX_PRINCIPAL_BYTES, description="An IAM ARN.")]


@router.post("/v1/grants", summary="Grant a principal a permission on the resources a pattern names",
             description="Idempotent (created is false when the grant existed). The first grant of a deployment "
                         "must make an admin (READ_UPDATE on prn::/ or prn::*): from then on only admins may "
                         "manage grants, and everything else needs a grant.")
def add_grant(grant: Grant) -> Created:
    created = grants.add(grant)
    authorizer().forget()
    return Created(created=created)


@router.delete("/v1/grants", summary="Revoke a grant (other function instances apply it within their cache period)",
               description="The last admin grant can only be removed as the last grant: with no grants at all, "
                           "authorization is off.")
def remove_grant(principal: Principal,
                 resource: Annotated[str, Query(pattern=RESOURCE_PATTERN, max_length=600)],
                 permission: Annotated[Permission, Query()]) -> Deleted:
    deleted = grants.remove(Grant(principal=principal, resource=resource, permission=permission))
    authorizer().forget()
    return Deleted(deleted=deleted)


@router.get("/v1/grants", summary="The grants of a principal (an assumed-role session ARN means its role)")
def list_grants(principal: Principal) -> GrantList:
    return GrantList(grants=grants.grants_of(normalize_principal(principal)))


@router.get("/v1/grants/principals", summary="The principals that have grants, with how many each has")
def list_principals(limit: Annotated[int, Query(ge=1, le=1000, description="Page size.")] = 100,
                    token: Annotated[str | None, Query(max_length=MAX_TOKEN_LENGTH,
                                                       description="next_token of the previous page.")] = None,
                    ) -> PrincipalList:
    principals, next_token = grants.principals(limit, token)
    return PrincipalList(principals=principals, next_token=next_token)
