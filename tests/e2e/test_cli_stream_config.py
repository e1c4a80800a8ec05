"""`rillet stream create|update` against the standalone stack: an update changes only what it names
(issue 30, item 1), an existing stream's other configuration is an error naming the difference, and
options that contradict each other are refused in one line (item 2)."""

from __future__ import annotations

import json
import threading

import pytest

from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def info(capsys, url, stream):
    code, out, _ = run(capsys, url, "--json", "stream", "info", stream)
    assert code == 0
    return json.loads(out)["configuration"]


def test_update_changes_only_what_it_names(capsys, url, unique):
    stream = f"{unique}/tmp"
    run(capsys, url, "scope", "create", unique)
    assert run(capsys, url, "stream", "create", stream, "--retention-time", "7d", "--tag", "a",
               "--scaling", "events:100,2,2")[0] == 0

    code, out, err = run(capsys, url, "stream", "update", stream, "--add-tag", "b")
    assert code == 0, err
    assert "retention  time >= 7d" in out and "scaling    events:100,2,2" in out
    config = info(capsys, url, stream)
    assert config["retention_policy"]["retention_param"] == 7 * 86_400_000
    assert config["scaling_policy"]["scale_type"] == "BY_RATE_IN_EVENTS_PER_SEC"
    assert sorted(config["tags"]) == ["a", "b"]
    code, out, _ = run(capsys, url, "stream", "info", stream)  # in the form --scaling takes
    assert "scaling     events:100,2,2\n" in out and "retention   time >= 7d\n" in out

    assert run(capsys, url, "stream", "update", stream, "--tag", "c", "--retention-size", "10GB")[0] == 0
    config = info(capsys, url, stream)
    assert config["tags"] == ["c"] and config["retention_policy"]["retention_type"] == "SIZE"
    assert config["scaling_policy"]["min_num_segments"] == 2

    assert run(capsys, url, "stream", "update", stream, "--no-retention")[0] == 0
    config = info(capsys, url, stream)
    assert config["retention_policy"] is None and config["tags"] == ["c"]


def test_concurrent_partial_updates_are_all_kept(capsys, url, unique):
    """Each update is applied to the configuration as stored, conditioned on the version read: none of
    eight concurrent tag additions is lost."""
    stream = f"{unique}/s"
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", stream, "--retention-time", "1d")
    codes = []
    threads = [threading.Thread(target=lambda i=i: codes.append(
        main(["--endpoint", url, "stream", "update", stream, "--add-tag", f"t{i}"]))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    capsys.readouterr()
    assert codes == [0] * 8
    config = info(capsys, url, stream)
    assert sorted(config["tags"]) == [f"t{i}" for i in range(8)]
    assert config["retention_policy"]["retention_param"] == 86_400_000


def test_create_of_an_existing_stream_with_another_configuration_is_an_error(capsys, url, unique):
    stream = f"{unique}/s"
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", stream, "--retention-time", "7d", "--tag", "a")
    assert run(capsys, url, "stream", "create", stream, "--retention-time", "7d", "--tag", "a") == (
        0, f"stream {stream} already exists, with this configuration\n", "")
    code, out, err = run(capsys, url, "stream", "create", stream, "--tag", "a")
    assert code == 1 and out == ""
    assert err.startswith(f"error: AlreadyExists: stream {stream} already exists with another configuration")
    assert "retention: time >= 7d, asked none (kept forever)" in err and "tags" not in err
    assert "rillet stream update" in err and err.count("\n") == 1


def test_contradicting_options_are_refused_in_one_line(capsys, url, unique):
    stream = f"{unique}/s"
    run(capsys, url, "scope", "create", unique)
    for args, both in ((("--retention-time", "7d", "--retention-size", "10GB"), ("--retention-time", "--retention-size")),
                       (("--subscriber-timeout", "1h"), ("--subscriber-timeout", "--retention-time")),
                       (("--retention-time", "1d", "--fallback-after", "7d"), ("--fallback-after", "--subscriber-timeout")),
                       (("--retention-size-max", "1GB",), ("--retention-size-max", "--retention-size"))):
        code, out, err = run(capsys, url, "stream", "create", stream, *args)
        assert (code, out) == (2, ""), args
        assert err.startswith("error: InvalidArgument: ") and err.count("\n") == 1
        assert all(flag in err for flag in both), err
    assert run(capsys, url, "stream", "info", stream)[0] == 3  # nothing was created: StreamNotFound

    run(capsys, url, "stream", "create", stream)
    code, _, err = run(capsys, url, "stream", "update", stream, "--no-retention", "--retention-time", "1d")
    assert code == 2 and "--no-retention and --retention-time" in err
    code, _, err = run(capsys, url, "stream", "update", stream)
    assert code == 2 and "nothing to update" in err
    with pytest.raises(SystemExit) as exit_:
        main(["--endpoint", url, "stream", "create", stream, "--scaling", "fixed:0"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "errors.pydantic.dev" not in err and "fixed:0" in err
