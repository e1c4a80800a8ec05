"""``rillet stream rates`` against the standalone stack over HTTP: why a stream has (not) scaled.

The session's stack has the default windows (2 to 20 minutes), cool-down and mute (10 minutes), so a
new auto-scaled stream's segments are all in their cool-down.
"""

from __future__ import annotations

import json
import re

from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _create(capsys, url, name: str, scaling: str) -> None:
    scope = name.split("/")[0]
    assert main(["--endpoint", url, "scope", "create", scope]) == 0
    assert main(["--endpoint", url, "stream", "create", name, "--scaling", scaling]) == 0
    capsys.readouterr()


def test_a_fixed_stream_says_it_does_not_auto_scale(capsys, url, unique):
    stream = f"{unique}/fixed"
    _create(capsys, url, stream, "fixed:2")
    run(capsys, url, "stream", "write", stream, "a", "b", "c")
    code, out, err = run(capsys, url, "stream", "rates", stream)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"stream     {stream} (ACTIVE, epoch 0)"
    assert lines[1].startswith("scaling    fixed:2: does not auto-scale")
    assert "now        none: the scaling policy is fixed, so the stream never scales by itself" in lines
    assert sum(line.startswith("segment ") for line in lines) == 2
    assert not any(line.lstrip().startswith(("split above", "merge below", "cool-down")) for line in lines)

    code, out, _ = run(capsys, url, "--json", "stream", "rates", stream)
    data = json.loads(out)
    assert code == 0 and data["auto_scaled"] is False and data["unit"] is None
    assert {s["status"] for s in data["segments"]} == {"fixed"}
    # the events written count in the rates, whatever the policy
    assert sum(s["windows"][0]["events_per_s"] for s in data["segments"]) > 0


def test_an_auto_scaled_stream_shows_its_thresholds_and_cool_down_left(capsys, url, unique):
    stream = f"{unique}/auto"
    _create(capsys, url, stream, "events:100,2,1")
    code, out, err = run(capsys, url, "stream", "rates", stream)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1].startswith("scaling    events:100,2,1: auto-scaled by events/s, target 100 events/s a segment")
    assert lines[2].startswith("split      a segment over 500 events/s over 2m or 200 events/s over 5m or "
                               "100 events/s over 10m")
    assert lines[3].startswith("merge      two neighbours each under 100/100/100/50 events/s over 2m/5m/10m/20m")
    assert lines[4].startswith("cool-down  10m: a segment younger than that never scales")
    assert "last       none recorded since epoch 0 began" in out
    (segment,) = [line for line in lines if line.startswith("segment ")]
    left = re.search(r"cool-down (\d+)m(\d+)s left", segment) or re.search(r"cool-down (\d+)m() left", segment)
    assert left is not None and 9 <= int(left.group(1)) <= 10, segment
    rows = {line.strip().rsplit(None, 4)[0]: line.split()[-4:] for line in lines if line.startswith("  ")
            and line.strip().startswith(("window", "split above", "merge below"))}
    assert rows == {"window": ["2m*", "5m*", "10m*", "20m*"], "split above": ["500", "200", "100", "-"],
                    "merge below": ["100", "100", "100", "50"]}

    code, out, _ = run(capsys, url, "--json", "stream", "rates", stream)
    data = json.loads(out)
    assert code == 0 and data["auto_scaled"] is True and data["cooldown_ms"] == 600_000
    (view,) = data["segments"]
    assert 500_000 < view["cooldown_left_ms"] <= 600_000
    assert [w["split_above"] for w in view["windows"]] == [500, 200, 100, None]
    assert data["decision_now"].startswith("none: ")


def test_rates_of_a_missing_stream_exit_3_and_a_bad_name_2(capsys, url, unique):
    code, out, err = run(capsys, url, "stream", "rates", f"{unique}/nope")
    assert (code, out) == (3, "") and err.startswith("error: StreamNotFound: ")
    code, out, err = run(capsys, url, "stream", "rates", f"{unique}/bad name")
    assert (code, out) == (2, "") and err.startswith("error: InvalidArgument: ")
