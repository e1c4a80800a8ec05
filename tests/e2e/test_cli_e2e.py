"""The ``rillet`` CLI against the standalone stack: in-process through ``main`` and once as the real
console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_scopes_and_streams_from_the_command_line(capsys, url, unique):
    scope, stream = unique, f"{unique}/events"

    assert run(capsys, url, "scope", "create", scope) == (0, f"scope {scope} created\n", "")
    assert run(capsys, url, "scope", "create", scope) == (0, f"scope {scope} already exists\n", "")
    code, out, _ = run(capsys, url, "--json", "scope", "list")
    assert code == 0 and scope in [s["scope"] for s in json.loads(out)]

    code, out, err = run(capsys, url, "stream", "create", stream, "--scaling", "fixed:3", "--tag", "red",
                         "--tag", "blue", "--retention-time", "1d")
    assert (code, out, err) == (0, f"stream {stream} created\n", "")
    code, out, _ = run(capsys, url, "--json", "stream", "create", stream, "--scaling", "fixed:3", "--tag", "red",
                       "--tag", "blue", "--retention-time", "1d")
    assert code == 0 and json.loads(out)["created"] is False

    assert run(capsys, url, "stream", "list", scope) == (0, "events\n", "")
    assert run(capsys, url, "stream", "list", scope, "--tag", "red") == (0, "events\n", "")
    assert run(capsys, url, "stream", "list", scope, "--tag", "nope") == (0, "(no streams)\n", "")
    code, out, _ = run(capsys, url, "--json", "stream", "list", scope, "--tag", "blue")
    assert json.loads(out) == ["events"]

    code, out, _ = run(capsys, url, "--json", "stream", "info", stream)
    assert code == 0
    info = json.loads(out)
    assert info["state"] == "ACTIVE"
    assert len(info["current_segments"]) == 3
    assert [s["segment_id"] for s in info["current_segments"]] == [0, 1, 2]
    assert sorted(info["configuration"]["tags"]) == ["blue", "red"]
    assert info["configuration"]["retention_policy"]["retention_param"] == 86_400_000
    assert [p["offset"] for p in info["tail"]] == [0, 0, 0]

    code, out, _ = run(capsys, url, "stream", "info", stream)
    assert code == 0
    assert "state       ACTIVE" in out and "tags        blue, red" in out
    assert out.count("[0.") == 3  # one line per segment

    code, out, _ = run(capsys, url, "stream", "update", stream, "--tag", "green")
    assert code == 0 and out.startswith(f"stream {stream} updated (ACTIVE)\n")
    assert "scaling    fixed:3" in out and "retention  time >= 1d" in out
    assert run(capsys, url, "stream", "list", scope, "--tag", "green")[1] == "events\n"
    assert run(capsys, url, "stream", "list", scope, "--tag", "red")[1] == "(no streams)\n"

    assert run(capsys, url, "stream", "seal", stream) == (0, f"stream {stream} sealed\n", "")
    code, out, _ = run(capsys, url, "--json", "stream", "info", stream)
    assert json.loads(out)["state"] == "SEALED"
    assert run(capsys, url, "stream", "delete", stream) == (0, f"stream {stream} deleted\n", "")
    assert run(capsys, url, "stream", "list", scope) == (0, "(no streams)\n", "")
    assert run(capsys, url, "scope", "delete", scope) == (0, f"scope {scope} deleted\n", "")
    assert run(capsys, url, "scope", "delete", scope) == (3, "", f"error: ScopeNotFound: scope {scope} does not exist\n")


def test_failing_commands_exit_non_zero_with_a_readable_error(capsys, url, unique):
    code, out, err = run(capsys, url, "stream", "info", f"{unique}/missing")
    assert code != 0 and out == ""
    assert err.startswith("error: StreamNotFound: ") and err.count("\n") == 1

    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", f"{unique}/s")
    code, out, err = run(capsys, url, "stream", "delete", f"{unique}/s")  # not sealed
    assert code != 0 and out == ""
    assert err.startswith("error: IllegalState: ") and "seal" in err
    code, _, err = run(capsys, url, "scope", "delete", unique)
    assert code != 0 and err.startswith("error: ScopeNotEmpty: ")

    code, out, err = run(capsys, url, "--json", "stream", "delete", f"{unique}/s")
    assert code != 0 and out == ""
    body = json.loads(err)
    assert body["code"] == "IllegalState" and body["message"]
    for text in (err,):
        assert "Traceback" not in text


def test_a_configuration_the_model_rejects_is_one_line_or_a_json_error(capsys, url, unique):
    run(capsys, url, "scope", "create", unique)
    sizes = ["stream", "create", f"{unique}/x", "--retention-size", "10MB", "--retention-size-max", "1MB"]
    assert run(capsys, url, *sizes) == (2, "", "error: InvalidArgument: retention max must be >= retention min\n")
    code, out, err = run(capsys, url, "--json", *sizes)
    assert (code, out) == (2, "")
    assert json.loads(err) == {"code": "InvalidArgument", "message": "retention max must be >= retention min"}

    fallback = ["stream", "create", f"{unique}/x", "--retention-time", "1d", "--subscriber-timeout", "1h",
                "--fallback-after", "0"]
    assert run(capsys, url, *fallback) == (
        2, "", "error: InvalidArgument: fallback_after_ms: Input should be greater than 0\n")
    code, out, err = run(capsys, url, "--json", *fallback)
    assert (code, out) == (2, "") and json.loads(err)["message"] == "fallback_after_ms: Input should be greater than 0"
    assert run(capsys, url, "stream", "list", unique) == (0, "(no streams)\n", "")  # nothing was created


def test_the_console_script(url, unique):
    rillet = Path(sys.executable).with_name("rillet")
    assert rillet.exists()
    ok = subprocess.run([str(rillet), "--endpoint", url, "--json", "scope", "create", unique],
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"scope": unique, "created": True}

    failed = subprocess.run([str(rillet), "--endpoint", url, "stream", "info", f"{unique}/missing"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert failed.returncode == 3  # what it names does not exist
    assert failed.stderr.startswith("error: StreamNotFound: ")
    assert "Traceback" not in failed.stderr


def test_the_moto_port_is_not_taken_for_a_controller(capsys, stack, unique):
    """Pointed at the stack's moto server, a command says so in one line, not "not found" (exit 3)."""
    for args in (("scope", "list"), ("stream", "info", f"{unique}/s"), ("scope", "delete", unique)):
        code, out, err = run(capsys, stack.moto.url, *args)
        assert (code, out) == (1, "") and err.count("\n") == 1, (args, err)
        assert err.startswith(f"error: NotARilletController: {stack.moto.url} is not a Rillet controller"), err
