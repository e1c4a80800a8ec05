"""``rillet kvt``: key-value tables from a shell.

Keys and values are given as text (UTF-8), or as hex with ``--hex``. Text output shows them as text
where they are UTF-8, else as ``0x``-prefixed hex; ``--json`` gives each as text (null where it is not
UTF-8) and base64 (``value_base64``), as the API sends it. A key that does not exist is an error
(``NoSuchKey``, exit 3) for ``get`` and ``remove``, so scripts can tell.
"""

from __future__ import annotations

import argparse
import base64
import json

from rillet.cli.commands import HELP
from rillet.errors import KeyValueTableNotFound, NoSuchKey
from rillet.kvt import KeyValueTable, KeyValueTableManager, TableEntry, Version, table_key
from rillet.kvt_models import KeyValueTableConfiguration, TableKey
from rillet.names import split_scoped_name


def _show(data: bytes) -> str:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if text.isprintable() else "0x" + data.hex()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _text(data: bytes | None) -> str | None:
    """The bytes as text, if they are UTF-8 text (control characters but line breaks and tabs: binary)."""
    try:
        text = None if data is None else data.decode()
    except UnicodeDecodeError:
        return None
    return text if text is not None and all(c.isprintable() or c in "\n\r\t" for c in text) else None


def _print(args: argparse.Namespace, data: object, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)


def _part(args: argparse.Namespace, text: str) -> bytes:
    return bytes.fromhex(text) if args.hex else text.encode()


def _key(args: argparse.Namespace) -> TableKey:
    return table_key(_part(args, args.key), _part(args, args.secondary or ""))


def _table(args: argparse.Namespace) -> KeyValueTable:
    scope, name = split_scoped_name(args.table)
    return KeyValueTable(KeyValueTableManager(args.endpoint).controller, scope, name)


def _entry_json(entry: TableEntry) -> dict:
    parts = {"primary": entry.key.primary, "secondary": entry.key.secondary, "value": entry.value}
    return {"version": str(entry.version), **{name: _text(data) for name, data in parts.items()},
            **{f"{name}_base64": _b64(data) for name, data in parts.items()}}


def _entry_text(entry: TableEntry) -> str:
    key = _show(entry.key.primary) + (f"/{_show(entry.key.secondary)}" if entry.key.secondary else "")
    return f"{key}\t{_show(entry.value) if entry.value is not None else ''}\t{entry.version}"


def kvt_create(args: argparse.Namespace) -> None:
    scope, name = split_scoped_name(args.table)
    config = KeyValueTableConfiguration(partition_count=args.partitions, primary_key_length=args.primary_key_length,
                                        secondary_key_length=args.secondary_key_length)
    created = KeyValueTableManager(args.endpoint).create_key_value_table(scope, name, config)
    _print(args, {"table": args.table, "created": created, "configuration": config.model_dump()},
           f"key-value table {args.table} {'created' if created else 'already exists'}")


def kvt_list(args: argparse.Namespace) -> None:
    names = list(KeyValueTableManager(args.endpoint).list_key_value_tables(args.scope))
    _print(args, names, "\n".join(names) or "(no key-value tables)")


def kvt_describe(args: argparse.Namespace) -> None:
    scope, name = split_scoped_name(args.table)
    info = KeyValueTableManager(args.endpoint).get_key_value_table_info(scope, name)
    c = info.configuration
    _print(args, info.model_dump(mode="json"),
           f"key-value table {scope}/{name}\nstate       {info.state.value}\npartitions  {c.partition_count}\n"
           f"keys        primary {c.primary_key_length} B, secondary {c.secondary_key_length} B")


def kvt_seal(args: argparse.Namespace) -> None:
    scope, name = split_scoped_name(args.table)
    info = KeyValueTableManager(args.endpoint).seal_key_value_table(scope, name)
    _print(args, {"table": args.table, "state": info.state.value}, f"key-value table {args.table} sealed")


def kvt_delete(args: argparse.Namespace) -> None:
    scope, name = split_scoped_name(args.table)
    if not KeyValueTableManager(args.endpoint).delete_key_value_table(scope, name):  # exit 3, as every delete
        raise KeyValueTableNotFound(f"key-value table {args.table} does not exist")
    _print(args, {"table": args.table, "deleted": True}, f"key-value table {args.table} deleted")


def kvt_put(args: argparse.Namespace) -> None:
    table, key, value = _table(args), _key(args), _part(args, args.value)
    if args.if_absent:
        version = table.put_if_absent(key, value)
    elif args.version:
        version = table.replace(key, value, Version(args.version))
    else:
        version = table.put(key, value)
    _print(args, {"version": str(version)}, f"version {version}")


def _missing(args: argparse.Namespace, key: TableKey) -> NoSuchKey:
    shown = _show(key.primary) + (f"/{_show(key.secondary)}" if key.secondary else "")
    return NoSuchKey(f"key {shown} is not in {args.table}")


def kvt_get(args: argparse.Namespace) -> None:
    key = _key(args)
    entry = _table(args).get(key)
    if entry is None:
        raise _missing(args, key)
    _print(args, _entry_json(entry), _entry_text(entry))


def kvt_remove(args: argparse.Namespace) -> None:
    """Without ``--version``, the entry as read now: so a missing key is NoSuchKey rather than a silent
    success, and a change made meanwhile is BadKeyVersion rather than lost."""
    table, key = _table(args), _key(args)
    if args.version:
        version = Version(args.version)
    else:
        entry = table.get(key)
        if entry is None:
            raise _missing(args, key)
        version = entry.version
    table.remove(key, version)
    _print(args, {"removed": True, "version": str(version)}, "removed")


def kvt_list_keys(args: argparse.Namespace) -> None:
    table = _table(args)
    primary = None if args.primary is None else _part(args, args.primary)
    found = list(table.entries(primary) if args.values else table.keys(primary))
    _print(args, [_entry_json(e) for e in found], "\n".join(_entry_text(e) for e in found) or "(no entries)")


def register(commands: argparse._SubParsersAction) -> None:
    """Adds ``rillet kvt`` with create, list, describe, seal, delete, put, get, remove and list-keys."""
    actions = commands.add_parser("kvt", help=HELP["kvt"]).add_subparsers(
        dest="action", required=True)

    p = actions.add_parser("create", help="create a key-value table")
    p.add_argument("table", help="SCOPE/TABLE")
    p.add_argument("--partitions", type=int, default=1, help="partition count (default 1)")
    p.add_argument("--primary-key-length", type=int, required=True, help="bytes in every primary key")
    p.add_argument("--secondary-key-length", type=int, default=0, help="bytes in every secondary key (default 0)")
    p.set_defaults(func=kvt_create)

    p = actions.add_parser("list", help="list the key-value tables of a scope")
    p.add_argument("scope")
    p.set_defaults(func=kvt_list)

    for name, fn, help_text in (("describe", kvt_describe, "state and configuration"),
                                ("seal", kvt_seal, "make a table read-only"),
                                ("delete", kvt_delete, "delete a table and its entries")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("table", help="SCOPE/TABLE")
        p.set_defaults(func=fn)

    def entry_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help_text)
        p.add_argument("table", help="SCOPE/TABLE")
        p.add_argument("key", help="the primary key")
        p.add_argument("--secondary", help="the secondary key (tables with a secondary key length)")
        p.add_argument("--hex", action="store_true", help="keys and values are hex, not text")
        return p

    p = entry_parser("put", "set a key's value (prints its new version)")
    p.add_argument("value")
    condition = p.add_mutually_exclusive_group()
    condition.add_argument("--if-absent", action="store_true", help="only if the key does not exist")
    condition.add_argument("--version", help="only if the key has this version")
    p.set_defaults(func=kvt_put)

    entry_parser("get", "a key's value and version").set_defaults(func=kvt_get)

    p = entry_parser("remove", "remove a key")
    p.add_argument("--version", help="only if the key has this version")
    p.set_defaults(func=kvt_remove)

    p = actions.add_parser("list-keys", help="the keys (and versions) of a table, or of one primary key")
    p.add_argument("table", help="SCOPE/TABLE")
    p.add_argument("--primary", help="only this primary key's entries")
    p.add_argument("--values", action="store_true", help="print the values too")
    p.add_argument("--hex", action="store_true", help="--primary is hex, not text")
    p.set_defaults(func=kvt_list_keys)
