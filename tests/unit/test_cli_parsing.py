"""The CLI's option parsers (rillet.cli.streams): durations, sizes and scaling policies. No server involved."""

from __future__ import annotations

import argparse

import pytest

from rillet.cli import main
from rillet.cli.parser import build_parser
from rillet.cli.streams import (
    _configuration_change,
    parse_duration_ms,
    parse_scaling,
    parse_size,
    parse_sublog_shards,
)
from rillet.models import ScaleType, ScalingPolicy


@pytest.mark.parametrize(("text", "ms"), [
    ("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("12h", 43_200_000), ("7d", 604_800_000), ("1234", 1234),
    (" 2s ", 2000),
])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "s", "1.5s", "-1s", "10w", "ten"])
def test_bad_durations(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration_ms(text)


@pytest.mark.parametrize(("text", "size"), [
    ("10", 10), ("10B", 10), ("2KB", 2000), ("2KiB", 2048), ("3MB", 3_000_000), ("512MiB", 512 * 2**20),
    ("1GB", 10**9), ("1TiB", 2**40),
])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MB", "1.5GB", "-1", "10XB"])
def test_bad_sizes(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_scaling_policies():
    assert parse_scaling("fixed:3") == ScalingPolicy.fixed(3)
    events = parse_scaling("events:100,2,3")
    assert (events.scale_type, events.target_rate, events.scale_factor, events.min_num_segments) == (
        ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 3)
    assert parse_scaling("kbytes:10,2,1").scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC


@pytest.mark.parametrize("text", ["fixed:0", "fixed", "fixed:x", "events:1,2", "events:0,2,1", "magic:1", "fixed:1,2"])
def test_bad_scaling_policies(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_scaling(text)


@pytest.mark.parametrize(("text", "shards"), [("8", 8), ("0", 0), ("64", 64), ("default", None)])
def test_sublog_shards(text, shards):
    assert parse_sublog_shards(text) == shards


@pytest.mark.parametrize("text", ["", "-1", "65", "eight", "1.5", "chain"])
def test_bad_sublog_shards(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_sublog_shards(text)


def test_an_update_names_sub_logs_only_when_asked():
    """Absent, the stream keeps its choice; ``default`` hands it back to the deployment (null)."""
    def change(*options: str) -> dict:
        return _configuration_change(build_parser().parse_args(["stream", "update", "s/t", *options]))

    assert "sublog_shards" not in change("--add-tag", "x")
    assert change("--sublog-shards", "8") == {"sublog_shards": 8}
    assert change("--sublog-shards", "default") == {"sublog_shards": None}


def test_bad_option_values_exit_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["stream", "create", "s/t", "--scaling", "fixed:0"])
    assert exited.value.code == 2
    assert "bad scaling policy" in capsys.readouterr().err


def test_a_bad_scoped_name_is_a_typed_error_before_any_request(capsys):
    # Port 9 (discard) on loopback: nothing listens, so a request would fail differently.
    assert main(["--endpoint", "http://127.0.0.1:9", "stream", "create", "no-slash"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: InvalidArgument: ")


def test_retention_max_below_min_is_reported_as_invalid_argument(capsys):
    code = main(["--endpoint", "http://127.0.0.1:9", "stream", "create", "s/t",
                 "--retention-size", "10MB", "--retention-size-max", "1MB"])
    assert code == 2
    assert capsys.readouterr().err == "error: InvalidArgument: retention max must be >= retention min\n"


def test_parser_knows_the_commands():
    args = build_parser().parse_args(["--json", "--endpoint", "http://x", "stream", "list", "sc", "--tag", "t"])
    assert (args.json, args.endpoint, args.command, args.action, args.scope, args.tag) == (
        True, "http://x", "stream", "list", "sc", "t")
