"""The one place that says which permission each route needs, and the middleware that enforces it.

Every route of the three functions passes through :func:`authorize` (registered by
``lambdas.http.build_resolver``) after powertools has validated the request's syntax and before the
route runs, so before any lookup: a caller who may not read a stream gets the same 403 whether or
not it exists. The caller is only ever the IAM identity the Function URL service puts in
``requestContext.authorizer.iam`` (the standalone gateway can simulate it); no header is read here.

The rules (Pravega's, in its resource names; see docs/authorization.md):

* a route's resource is the most specific object in its path: a key-value table, a reader group, a
  stream, a scope, or ``prn::/`` when the path names none of them;
* GET needs READ on it, anything else READ_UPDATE: so reads of data and metadata need READ, appends,
  transactions, truncation, scaling, sealing, updates and deletes READ_UPDATE on the stream, creating
  a stream (or a table) READ_UPDATE on its scope;
* exceptions: creating and deleting scopes and managing grants need admin (READ_UPDATE on
  ``prn::/``); the endpoints route needs nothing; a reader's own operations on its group (join, sync,
  offline, checkpoints, acknowledging a cut) need READ on the group, as Pravega lets readers update
  their group's state with read permission; reading a key-value table's entries (a POST that sends
  the keys) needs READ on the table; creating a group or resetting its configuration needs
  READ_UPDATE on the group and READ on every stream the configuration names (deleting it, READ_UPDATE
  on the group). A reader's data reads still need READ on each stream, from the read function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from controlplane.grants import Authorizer, Need
from dataplane.deployment import Deployment
from rillet.grants import (
    ROOT,
    Permission,
    key_value_table_resource,
    normalize_principal,
    reader_group_resource,
    scope_resource,
    stream_resource,
)

READ, READ_UPDATE = Permission.READ, Permission.READ_UPDATE
ADMIN = (Need(ROOT, READ_UPDATE),)
GROUP = "/v1/scopes/<scope>/reader-groups/<group>"
TABLE = "/v1/scopes/<scope>/key-value-tables/<table>"
_READER_ROUTES = (GROUP + "/readers/<reader>", GROUP + "/readers/<reader>/sync",
                  GROUP + "/readers/<reader>/offline", GROUP + "/checkpoints", GROUP + "/truncation-cut")

Body = Callable[[], Any]  # the request's JSON body, parsed only by the rules that look at it
Rule = Callable[[dict[str, str], Body], tuple[Need, ...]]


def _group_needs(scope: str, group: str, config: dict) -> tuple[Need, ...]:
    streams = tuple(Need(stream_resource(s["scope"], s["stream"]), READ) for s in config["streams"])
    return (Need(reader_group_resource(scope, group), READ_UPDATE), *streams)


def _create_group(args: dict[str, str], body: Body) -> tuple[Need, ...]:
    request = body()
    return _group_needs(args["scope"], request["group"], request["config"])


def _reset_group(args: dict[str, str], body: Body) -> tuple[Need, ...]:
    return _group_needs(args["scope"], args["group"], body())


def _reader_of_group(args: dict[str, str], body: Body) -> tuple[Need, ...]:
    return (Need(reader_group_resource(args["scope"], args["group"]), READ),)


def _read_table(args: dict[str, str], body: Body) -> tuple[Need, ...]:
    return (Need(key_value_table_resource(args["scope"], args["table"]), READ),)


# Routes anyone may call, grants or not (the OpenAPI documents declare no 403 on them).
OPEN_ROUTES = frozenset({("GET", "/v1/endpoints")})

_EXCEPTIONS: dict[tuple[str, str], Rule] = {
    **{route: (lambda args, body: ()) for route in OPEN_ROUTES},
    ("POST", "/v1/scopes"): lambda args, body: ADMIN,
    ("DELETE", "/v1/scopes/<scope>"): lambda args, body: ADMIN,
    ("POST", "/v1/scopes/<scope>/reader-groups"): _create_group,
    ("PUT", GROUP + "/config"): _reset_group,
    # reads of a table's entries that send their keys in a body
    ("POST", TABLE + "/entries/get"): _read_table,
    ("POST", TABLE + "/entries/iterate"): _read_table,
    **{(method, path): _reader_of_group for path in _READER_ROUTES for method in ("GET", "POST")},
}


def _resource(args: dict[str, str]) -> str:
    scope = args.get("scope")
    if scope is None:
        return ROOT
    if "table" in args:
        return key_value_table_resource(scope, args["table"])
    if "group" in args:
        return reader_group_resource(scope, args["group"])
    if "stream" in args:
        return stream_resource(scope, args["stream"])
    return scope_resource(scope)


def required(method: str, path: str, args: dict[str, str], body: Body) -> tuple[Need, ...]:
    """What a request needs: ``path`` is the route's rule (``/v1/scopes/<scope>``), ``args`` its
    parameters, ``body`` gives the JSON body (powertools validated it against the route's model)."""
    if path.startswith("/v1/grants"):
        return ADMIN
    rule = _EXCEPTIONS.get((method, path))
    if rule is not None:
        return rule(args, body)
    return (Need(_resource(args), READ if method in ("GET", "HEAD") else READ_UPDATE),)


def caller(app: LambdaFunctionUrlResolver) -> str | None:
    """The caller's principal, from the request context alone (None for a URL without AWS_IAM auth)."""
    arn = app.current_event.request_context.authorizer.iam.user_arn
    return normalize_principal(arn) if arn else None


_authorizer: Authorizer | None = None


def authorizer() -> Authorizer:
    """This function instance's authorizer (its cache lives as long as the instance)."""
    global _authorizer
    if _authorizer is None:
        _authorizer = Authorizer.from_env(Deployment.from_env())
    return _authorizer


def authorize(app: LambdaFunctionUrlResolver, next_middleware: NextMiddleware) -> Response:
    route = app.context["_route"]
    needs = required(route.method, route.path, app.context.get("_route_args", {}), lambda: app.current_event.json_body)
    authorizer().check(caller(app), needs)
    return next_middleware(app)
