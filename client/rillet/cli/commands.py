"""The top-level commands of ``rillet`` that live in modules of their own: each command's help, and
the module that adds it. ``rillet.cli`` imports a module only when the arguments name one of its
commands (or every command is needed: completion), so a command loads only the SDK it uses and
``rillet --version`` or ``--help`` none of it."""

from __future__ import annotations

HELP = {
    "rg": "reader groups: list, create, describe, reset, delete",
    "txn": "transactions: list, info, abort",
    "retention": "a stream's retention",
    "kvt": "key-value tables: lifecycle and entries",
    "grant": "permission grants: add, list, remove",
}
# module -> the commands its register(commands) adds
MODULES = {
    "rillet.cli.admin": ("rg", "txn", "retention"),
    "rillet.cli.kvt": ("kvt",),
    "rillet.cli.grants": ("grant",),
}
