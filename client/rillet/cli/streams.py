"""``rillet scope`` and ``rillet stream create|update|seal|delete|list|info``: scopes and the life of
streams, with their configuration given as options in human terms (``--retention-time 7d``,
``--scaling events:100,2,1``) and shown the same way."""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING, Any

from rillet.cli.format import counted, describe_retention, describe_scaling, one_line
from rillet.errors import AlreadyExists, InvalidArgument, RilletError, ScopeNotFound
from rillet.names import split_scoped_name
from rillet.units import human_duration, human_size

if TYPE_CHECKING:
    from rillet.manager import StreamManager
    from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}
_SIZE = re.compile(r"^(\d+)(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$")
_SIZE_BYTES = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``12h``, ``7d`` or plain milliseconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 15m, 12h, 7d)")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


def parse_size(text: str) -> int:
    """``10GB``, ``512MiB`` or plain bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 512MiB, 10GB)")
    return int(match.group(1)) * _SIZE_BYTES[match.group(2)]


def parse_scaling(text: str) -> ScalingPolicy:
    """``fixed:N``, ``events:TARGET,FACTOR,MIN`` or ``kbytes:TARGET,FACTOR,MIN``."""
    from rillet.models import ScalingPolicy

    kind, _, args = text.partition(":")
    try:
        numbers = [int(x) for x in args.split(",")]
        if kind == "fixed" and len(numbers) == 1:
            return ScalingPolicy.fixed(numbers[0])
        if kind == "events" and len(numbers) == 3:
            return ScalingPolicy.by_event_rate(*numbers)
        if kind == "kbytes" and len(numbers) == 3:
            return ScalingPolicy.by_data_rate(*numbers)
    except ValueError as e:  # not a number, or a policy the model refuses (fixed:0)
        raise argparse.ArgumentTypeError(f"bad scaling policy {text!r}: {one_line(e)}") from e
    raise argparse.ArgumentTypeError(f"bad scaling policy {text!r} (fixed:N, events:T,F,MIN or kbytes:T,F,MIN)")


_DEPLOYMENT_CHOICE = "default"
_KEEP = object()  # on update, an option not given


def parse_sublog_shards(text: str) -> int | None:
    """``8`` (sub-log mode with 8 pending shards), ``0`` (the chain) or ``default`` (the deployment's
    choice: None)."""
    from rillet.models import MAX_SUBLOG_SHARDS

    if text.strip() == _DEPLOYMENT_CHOICE:
        return None
    if not text.strip().isdigit() or not 0 <= int(text) <= MAX_SUBLOG_SHARDS:
        raise argparse.ArgumentTypeError(f"not a number of sub-log shards: {text!r} "
                                         f"(0 to {MAX_SUBLOG_SHARDS}, or default)")
    return int(text)


def describe_sublog_shards(shards: int | None) -> str:
    if shards is None:
        return "the deployment's"
    return "0 (the chain)" if shards == 0 else f"{shards} shards"


class UsageError(InvalidArgument):
    """Options that parse but cannot go together: refused before any request, exit 2 as argparse's errors."""


def _exclusive(args: argparse.Namespace, *pairs: tuple[str, str], why: str) -> None:
    """Refuse, in one line naming both, two options given together that cannot both apply."""
    for first, second in pairs:
        if getattr(args, first) not in (None, False, []) and getattr(args, second) not in (None, False, []):
            raise UsageError(f"{_flag(first)} and {_flag(second)} cannot be given together: {why}")


def _requires(args: argparse.Namespace, option: str, *needed: str, why: str) -> None:
    if getattr(args, option) is not None and all(getattr(args, n) is None for n in needed):
        raise UsageError(f"{_flag(option)} needs {' or '.join(_flag(n) for n in needed)} ({why})")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _retention(args: argparse.Namespace) -> RetentionPolicy | None:
    """The retention policy the options name, refusing those that contradict each other or would be
    ignored; None if they name none."""
    _exclusive(args, ("retention_time", "retention_size"), ("retention_time", "retention_size_max"),
               ("retention_size", "retention_time_max"), why="a stream has one retention policy, by time or by size")
    _requires(args, "retention_time_max", "retention_time", why="the maximum of a time policy")
    _requires(args, "retention_size_max", "retention_size", why="the maximum of a size policy")
    _requires(args, "subscriber_timeout", "retention_time", "retention_size",
              why="consumption-based retention keeps within a time or size policy's limits")
    _requires(args, "fallback_after", "subscriber_timeout", why="the fallback of consumption-based retention")
    for option in ("retention_time", "retention_size"):
        if getattr(args, option) == 0:  # a policy that keeps nothing, which retention would never apply as such
            raise UsageError(f"{_flag(option)} must be more than 0: it is what a stream keeps at least "
                             "(to keep everything, give no retention policy)")
    from rillet.models import RetentionPolicy

    if args.retention_time is not None:
        retention = RetentionPolicy.by_time(args.retention_time, args.retention_time_max)
    elif args.retention_size is not None:
        retention = RetentionPolicy.by_size(args.retention_size, args.retention_size_max)
    else:
        return None
    if args.subscriber_timeout is not None:
        retention = retention.with_consumption(args.subscriber_timeout, args.fallback_after)
    return retention


def _configuration(args: argparse.Namespace) -> StreamConfiguration:
    from rillet.models import ScalingPolicy, StreamConfiguration

    return StreamConfiguration(scaling_policy=args.scaling or ScalingPolicy.fixed(1), retention_policy=_retention(args),
                               tags=frozenset(args.tag), sublog_shards=args.sublog_shards)


def _configuration_change(args: argparse.Namespace) -> dict[str, Any]:
    """The body of a partial update: only what the options name (``PATCH .../configuration``)."""
    retention = _retention(args)
    if args.no_retention:
        _exclusive(args, *(("no_retention", name) for name in (
            "retention_time", "retention_size", "retention_time_max", "retention_size_max")),
                   why="--no-retention removes the retention policy")
    _exclusive(args, ("tag", "add_tag"), ("tag", "remove_tag"), why="--tag replaces every tag")
    change: dict[str, Any] = {}
    if args.scaling is not None:
        change["scaling_policy"] = args.scaling.model_dump(mode="json")
    if retention is not None:
        change["retention_policy"] = retention.model_dump(mode="json")
    elif args.no_retention:
        change["retention_policy"] = None
    if args.tag is not None:
        change["tags"] = sorted(set(args.tag))
    if args.add_tag:
        change["add_tags"] = sorted(set(args.add_tag))
    if args.remove_tag:
        change["remove_tags"] = sorted(set(args.remove_tag))
    if args.sublog_shards is not _KEEP:
        change["sublog_shards"] = args.sublog_shards
    if not change:
        raise UsageError("nothing to update: name what changes (--scaling, --retention-time, --retention-size, "
                              "--no-retention, --tag, --add-tag, --remove-tag, --sublog-shards)")
    return change


def _configuration_lines(config: StreamConfiguration) -> dict[str, str]:
    return {"scaling": describe_scaling(config.scaling_policy),
            "retention": describe_retention(config.retention_policy),
            "tags": ", ".join(sorted(config.tags)) or "-",
            "timestamp aggregation timeout": human_duration(config.timestamp_aggregation_timeout_ms),
            "rollover size": human_size(config.rollover_size_bytes),
            "sub-logs": describe_sublog_shards(config.sublog_shards)}


def configuration_differences(existing: StreamConfiguration, asked: StreamConfiguration) -> list[str]:
    """``retention: none (kept forever), asked time >= 7d``: each setting where the two differ."""
    have, want = _configuration_lines(existing), _configuration_lines(asked)
    return [f"{name}: {have[name]}, asked {want[name]}" for name in have if have[name] != want[name]]


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(text)


def _manager(args: argparse.Namespace) -> StreamManager:
    from rillet.manager import StreamManager

    return StreamManager(args.endpoint)


def _scope_create(args: argparse.Namespace) -> None:
    created = _manager(args).create_scope(args.scope)
    _emit(args, {"scope": args.scope, "created": created},
          f"scope {args.scope} {'created' if created else 'already exists'}")


def _scope_delete(args: argparse.Namespace) -> None:
    if not _manager(args).delete_scope(args.scope):  # exit 3, as `stream delete` of a missing stream
        raise ScopeNotFound(f"scope {args.scope} does not exist")
    _emit(args, {"scope": args.scope, "deleted": True}, f"scope {args.scope} deleted")


def _scope_list(args: argparse.Namespace) -> None:
    scopes = list(_manager(args).list_scopes())
    _emit(args, [s.model_dump(mode="json") for s in scopes], "\n".join(s.scope for s in scopes) or "(no scopes)")


def _stream_create(args: argparse.Namespace) -> None:
    """Idempotent for the same configuration (exit 0, ``already exists``); an existing stream with
    another configuration is an error naming each difference, as ``kubectl create`` and
    ``kafka-topics --create`` refuse an existing name, rather than a silent success."""
    scope, stream = split_scoped_name(args.stream)
    config = _configuration(args)
    manager = _manager(args)
    created = manager.create_stream(scope, stream, config)
    if not created:
        existing = manager.get_stream_info(scope, stream).configuration
        differences = configuration_differences(existing, config)
        if differences:
            raise AlreadyExists(f"stream {args.stream} already exists with another configuration ("
                                + "; ".join(differences) + "): change it with `rillet stream update`")
    _emit(args, {"stream": args.stream, "created": created, "configuration": config.model_dump(mode="json")},
          f"stream {args.stream} {'created' if created else 'already exists, with this configuration'}")


def _stream_update(args: argparse.Namespace) -> None:
    """Only what the options name changes; the server applies it to the configuration as stored,
    conditioned on the version it read, so a concurrent update is not lost."""
    scope, stream = split_scoped_name(args.stream)
    from rillet.models import StreamConfigurationChange

    change = StreamConfigurationChange.model_validate(_configuration_change(args))
    info = _manager(args).change_stream_configuration(scope, stream, change)
    lines = _configuration_lines(info.configuration)
    _emit(args, {"stream": args.stream, "state": info.state.value, "configuration": info.configuration.model_dump(mode="json")},
          f"stream {args.stream} updated ({info.state.value})\n"
          + "\n".join(f"  {name:<10} {lines[name]}" for name in ("scaling", "retention", "tags")
                      + (("sub-logs",) if "sublog_shards" in change.model_fields_set else ())))


def _stream_seal(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    state = _manager(args).seal_stream(scope, stream)
    _emit(args, {"stream": args.stream, "state": state.value}, f"stream {args.stream} {state.value.lower()}")


class StreamHasReaderGroups(RilletError):
    """``stream delete`` of a stream reader groups of its scope read, without ``--force``: refused by
    the CLI before any change (exit 1), as deleting it would leave the groups reading nothing there."""

    code, status = "StreamHasReaderGroups", 409


def _groups_reading(args: argparse.Namespace, scope: str, stream: str) -> list[str]:
    """The reader groups of the scope that read the stream, read just before the delete: best effort,
    a group created after this read is not seen (the controller does not refuse the delete itself)."""
    from rillet.connection import Connection
    from rillet.errors import ReaderGroupNotFound
    from rillet.reader_group import ReaderGroup

    connection = Connection(args.endpoint)
    reading = []
    for name in connection.controller.list_reader_groups(scope):
        try:
            streams = ReaderGroup(connection, scope, name).info().config.streams
        except ReaderGroupNotFound:  # deleted since the listing: it reads nothing
            continue
        if any((s.scope, s.stream) == (scope, stream) for s in streams):
            reading.append(f"{scope}/{name}")
    return reading


def _stream_delete(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    if not args.force and (reading := _groups_reading(args, scope, stream)):
        raise StreamHasReaderGroups(f"reader groups read {args.stream}: {', '.join(reading)}; delete them first "
                                    "(rillet rg delete) or give --force to delete the stream anyway")
    _manager(args).delete_stream(scope, stream)
    _emit(args, {"stream": args.stream, "deleted": True}, f"stream {args.stream} deleted")


def _stream_list(args: argparse.Namespace) -> None:
    names = list(_manager(args).list_streams(args.scope, args.tag))
    _emit(args, names, "\n".join(names) or "(no streams)")


def _stream_info(args: argparse.Namespace) -> None:
    scope, stream = split_scoped_name(args.stream)
    info = _manager(args).get_stream_info(scope, stream)
    policy = info.configuration.scaling_policy
    lines = [
        f"stream      {info.scope}/{info.stream}",
        f"state       {info.state.value}",
        f"scaling     {describe_scaling(policy)}",
        f"retention   {describe_retention(info.configuration.retention_policy)}",
        f"tags        {', '.join(sorted(info.configuration.tags)) or '-'}",
        f"sub-logs    {describe_sublog_shards(info.configuration.sublog_shards)} (new segments)",
        f"epoch       {info.current_epoch}",
        f"segments    {counted(len(info.tail), 'segment')}",
    ]
    heads = {p.segment.segment_id: p.offset for p in info.head}
    table = [["id", "range", "head", "tail"]] + [
        [str(p.segment.segment_id), f"[{p.segment.low:.4f}, {p.segment.high:.4f})",
         str(heads.get(p.segment.segment_id, "-")), str(p.offset)] for p in info.tail]
    widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]  # each under its header
    lines += ["            " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
              for row in table]
    _emit(args, info.model_dump(mode="json"), "\n".join(lines))


def _add_configuration_options(parser: argparse.ArgumentParser, *, update: bool) -> None:
    """The same options for create and update; on update each one absent leaves its setting as it is."""
    keep = "; absent, it stays as it is" if update else ""
    parser.add_argument("--scaling", type=parse_scaling,
                        help="fixed:N" + ("" if update else " (default fixed:1)")
                             + f", events:TARGET,FACTOR,MIN or kbytes:TARGET,FACTOR,MIN{keep}")
    retention = parser.add_argument_group(
        "retention", "one policy, by time or by size" + ("; any of these replaces the whole retention policy"
                                                          if update else ""))
    retention.add_argument("--retention-time", type=parse_duration_ms, help="keep at least this long (e.g. 7d)")
    retention.add_argument("--retention-time-max", type=parse_duration_ms, help="keep at most this long")
    retention.add_argument("--retention-size", type=parse_size, help="keep at least this many bytes (e.g. 10GB)")
    retention.add_argument("--retention-size-max", type=parse_size, help="keep at most this many bytes")
    retention.add_argument("--subscriber-timeout", type=parse_duration_ms,
                           help="consumption-based retention: ignore subscribers silent for this long")
    retention.add_argument("--fallback-after", type=parse_duration_ms,
                           help="consumption-based retention: apply the time/size policy after this long without subscribers")
    if update:
        retention.add_argument("--no-retention", action="store_true", help="remove the retention policy (keep forever)")
        parser.add_argument("--tag", action="append", help="replace the tags by these (repeatable)")
        parser.add_argument("--add-tag", action="append", default=[], help="add a tag (repeatable)")
        parser.add_argument("--remove-tag", action="append", default=[], help="remove a tag (repeatable)")
    else:
        parser.add_argument("--tag", action="append", default=[], help="a stream tag (repeatable)")
    parser.add_argument("--sublog-shards", type=parse_sublog_shards, default=_KEEP if update else None,
                        metavar="N|default",
                        help="sub-log mode for the segments created from now on, for many writers a segment: "
                             "N pending shards (8 to start with), 0 for the chain, default for the deployment's "
                             f"choice{keep or ' (the default)'}")


def add_scope_commands(commands: argparse._SubParsersAction) -> None:
    scope = commands.add_parser("scope", help="create, delete and list scopes").add_subparsers(dest="action", required=True)
    for name, fn, help_text in (("create", _scope_create, "create a scope"), ("delete", _scope_delete, "delete an empty scope")):
        p = scope.add_parser(name, help=help_text)
        p.add_argument("scope")
        p.set_defaults(func=fn)
    scope.add_parser("list", help="list scopes").set_defaults(func=_scope_list)


def register(actions: argparse._SubParsersAction) -> None:
    """The actions on a stream's life: create, update, seal, delete, info, list."""
    for name, fn, help_text in (("create", _stream_create, "create a stream"),
                                ("update", _stream_update, "change what the options name in a stream's configuration")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("stream", help="SCOPE/STREAM")
        _add_configuration_options(p, update=name == "update")
        p.set_defaults(func=fn)
    for name, fn, help_text in (("seal", _stream_seal, "seal a stream"), ("delete", _stream_delete, "delete a sealed stream"),
                                ("info", _stream_info, "state, configuration, segments, head and tail")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("stream", help="SCOPE/STREAM")
        p.set_defaults(func=fn)
        if name == "delete":
            p.add_argument("--force", action="store_true",
                           help="delete it even if reader groups of its scope read it. Without it the delete is "
                                "refused when one does: a best-effort check, read just before the delete (a group "
                                "created meanwhile is not seen)")
    p = actions.add_parser("list", help="list the streams of a scope")
    p.add_argument("scope")
    p.add_argument("--tag", help="only streams with this tag")
    p.set_defaults(func=_stream_list)
