"""``rillet grant``: who may do what (docs/authorization.md). The caller is whoever signs the
requests (the standard AWS credential chain); once any grant exists it must be an admin."""

from __future__ import annotations

import argparse
import json

from rillet.cli.commands import HELP
from rillet.grants import GrantsClient, Permission
from rillet.transport import Transport


def _client(args: argparse.Namespace) -> GrantsClient:
    return GrantsClient(Transport(args.endpoint))


def _print(args: argparse.Namespace, data: object, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)


def grant_add(args: argparse.Namespace) -> None:
    created = _client(args).add(args.principal, args.resource, args.permission)
    _print(args, {"created": created}, f"granted {args.permission} on {args.resource} to {args.principal}"
           if created else "the grant existed already")


def grant_remove(args: argparse.Namespace) -> None:
    deleted = _client(args).remove(args.principal, args.resource, args.permission)
    _print(args, {"deleted": deleted}, f"revoked {args.permission} on {args.resource} from {args.principal}"
           if deleted else "there was no such grant")


def grant_list(args: argparse.Namespace) -> None:
    client = _client(args)
    if args.principal:
        grants = client.of(args.principal)
        _print(args, [g.model_dump(mode="json") for g in grants],
               "\n".join(f"{g.permission.value:<12}{g.resource}" for g in grants) or "(no grants)")
        return
    principals = list(client.principals())
    _print(args, [p.model_dump(mode="json") for p in principals],
           "\n".join(f"{p.grants:>4}  {p.principal}" for p in principals) or "(no grants: authorization is off)")


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``grant add|list|remove`` to ``rillet``."""
    grant = commands.add_parser("grant", help=HELP["grant"]).add_subparsers(
        dest="action", required=True)
    for name, fn, help_text in (("add", grant_add, "grant a principal a permission on resources"),
                                ("remove", grant_remove, "revoke a grant")):
        p = grant.add_parser(name, help=help_text)
        p.add_argument("principal", help="an IAM ARN (a role's sessions count as the role)")
        p.add_argument("resource", help="prn::/scope:S/stream:T, prn::/scope:S/*, prn::* (everything), ...")
        p.add_argument("permission", choices=[p.value for p in Permission], help="READ_UPDATE includes READ")
        p.set_defaults(func=fn)
    p = grant.add_parser("list", help="the principals with grants, or one principal's grants")
    p.add_argument("principal", nargs="?", help="an IAM ARN")
    p.set_defaults(func=grant_list)
