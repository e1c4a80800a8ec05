"""``rillet stream write|read|tail`` against the standalone stack over HTTP."""

from __future__ import annotations

import io
import json
import threading
import time

import pytest

from rillet import EventStreamClientFactory, StreamManager, UTF8StringSerializer
from rillet.cli import main


class Terminal(io.StringIO):
    """stderr as a terminal: the progress line is drawn on it."""

    def isatty(self) -> bool:
        return True


def run(capsys, url, *args, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stream(capsys, url, unique):
    assert main(["--endpoint", url, "scope", "create", unique]) == 0
    assert main(["--endpoint", url, "stream", "create", f"{unique}/events", "--scaling", "fixed:3"]) == 0
    capsys.readouterr()
    return f"{unique}/events"


def test_write_from_arguments_and_stdin_then_read_head_to_tail(capsys, url, stream, monkeypatch):
    written_from = time.time() * 1000 - 1
    assert run(capsys, url, "stream", "write", stream, "a1", "a2", "--key", "a") == (
        0, f"wrote 2 events (4 B) to {stream}\n", "")
    lines = "".join(json.dumps({"user": u, "n": n}) + "\n" for n, u in enumerate("xyxyx"))
    code, out, err = run(capsys, url, "--json", "stream", "write", stream, "--key-field", "user",
                         stdin=lines + "\n", monkeypatch=monkeypatch)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"stream": stream, "events": 5, "bytes": len(lines) - 5}

    code, out, err = run(capsys, url, "stream", "read", stream)
    assert (code, err) == (0, "")
    events = out.splitlines()
    assert sorted(events) == sorted(["a1", "a2", *lines.splitlines()])
    assert events.index("a1") < events.index("a2")  # one key: in order
    by_user = [json.loads(e)["n"] for e in events if e.startswith("{") and json.loads(e)["user"] == "x"]
    assert by_user == [0, 2, 4]

    code, out, _ = run(capsys, url, "--json", "stream", "read", stream)
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(records) == 7
    assert all(set(r) == {"segment_id", "offset", "event", "routing_key", "timestamp_ms"} for r in records)
    keys = {r["event"]: r["routing_key"] for r in records}
    assert keys["a1"] == keys["a2"] == "a"
    assert [keys[line] for line in lines.splitlines()] == list("xyxyx")
    assert all(written_from <= r["timestamp_ms"] <= time.time() * 1000 for r in records)

    bare = stream + "-bare"
    run(capsys, url, "stream", "create", bare, "--scaling", "fixed:1")
    run(capsys, url, "stream", "write", bare, "b1", "--key", "b", "--no-key-and-time")
    code, out, _ = run(capsys, url, "--json", "stream", "read", bare, "--max-events", "1")
    assert json.loads(out) == {"segment_id": 0, "offset": 0, "event": "b1", "routing_key": None, "timestamp_ms": None}


def test_read_between_cuts_stops_at_the_end_cut(capsys, url, stream):
    run(capsys, url, "stream", "write", stream, "before", "--key", "k")
    assert run(capsys, url, "stream", "read", stream, "--to", "tail") == (0, "before\n", "")
    scope, name = stream.split("/")
    middle = StreamManager(url).get_tail(scope, name).to_text()
    run(capsys, url, "stream", "write", stream, "after", "--key", "k")

    assert run(capsys, url, "stream", "read", stream, "--to", middle) == (0, "before\n", "")
    assert run(capsys, url, "stream", "read", stream, "--from", middle) == (0, "after\n", "")
    assert run(capsys, url, "stream", "read", stream, "--from", middle, "--to", middle) == (0, "", "")


def test_tail_follows_new_events(capsys, url, stream):
    """``tail -f`` starts at the tail and prints what is appended after; it stops after --max-events."""
    run(capsys, url, "stream", "write", stream, "old")
    result: list[int] = []
    tail = threading.Thread(target=lambda: result.append(
        main(["--endpoint", url, "stream", "tail", "-f", stream, "--max-events", "1"])))
    tail.start()
    scope, name = stream.split("/")
    with EventStreamClientFactory(scope, url).create_event_writer(name, UTF8StringSerializer()) as writer:
        for _ in range(600):  # until the tail has started and seen one (bounded, not timed)
            writer.write_event("new", routing_key="k").result()
            tail.join(timeout=0.1)
            if not tail.is_alive():
                break
    assert result == [0]
    out, _ = capsys.readouterr()
    assert out == "new\n"

    assert run(capsys, url, "stream", "tail", stream) == (0, "", "")  # not following: nothing new, done
    code, out, _ = run(capsys, url, "--json", "stream", "tail", stream, "--from", "head", "--max-events", "1")
    assert code == 0 and json.loads(out)["event"] == "old"


def test_bad_input_is_one_clear_line(capsys, url, stream, monkeypatch, unique):
    code, out, err = run(capsys, url, "stream", "write", stream, "--key-field", "user",
                         stdin='{"user": "x"}\nnot json\n', monkeypatch=monkeypatch)
    assert code != 0 and out == ""
    assert err.startswith("error: InvalidArgument: event 2 is not a JSON object with field 'user'")
    assert err.count("\n") == 1

    code, out, err = run(capsys, url, "stream", "read", stream, "--from", "nonsense")
    assert code != 0 and out == "" and err.startswith("error: InvalidArgument: ")
    code, out, err = run(capsys, url, "stream", "read", f"{unique}/missing")
    assert code != 0 and err.startswith("error: StreamNotFound: ")
    code, out, err = run(capsys, url, "stream", "write", f"{unique}/missing", "x")
    assert code != 0 and err.startswith("error: StreamNotFound: ")
    with pytest.raises(SystemExit):
        main(["--endpoint", url, "stream", "read", stream, "--max-events", "0"])
    assert "not a positive number" in capsys.readouterr().err


def test_an_error_is_printed_on_a_line_of_its_own_after_the_progress_line(capsys, url, stream, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    code, out, _ = run(capsys, url, "stream", "write", stream, "--key-field", "user",
                       stdin='{"user": "x"}\nnot json\n', monkeypatch=monkeypatch)
    assert code == 2 and out == ""
    progress, error = terminal.getvalue().split("\n", 1)  # the progress line ends before the error
    assert progress.startswith("\rwrote 1 events, 13 B, ")
    assert error.startswith("error: InvalidArgument: event 2 is not a JSON object") and error.count("\n") == 1


def test_tail_bad_input(capsys, url, stream, unique):
    missing = f"{unique}/missing"
    assert run(capsys, url, "stream", "tail", missing) == (
        3, "", f"error: StreamNotFound: stream {missing} does not exist\n")
    code, out, err = run(capsys, url, "--json", "stream", "tail", missing)
    assert (code, out) == (3, "")
    assert json.loads(err) == {"code": "StreamNotFound", "message": f"stream {missing} does not exist"}

    not_a_cut = "error: InvalidArgument: not a cut: 'nonsense' (use head, tail or a stream cut as `rillet stream cut` "
    assert run(capsys, url, "stream", "tail", stream, "--from", "nonsense") == (2, "", not_a_cut + "prints it)\n")
    code, out, err = run(capsys, url, "--json", "stream", "tail", stream, "--from", "nonsense")
    assert (code, out) == (2, "")
    assert json.loads(err) == {"code": "InvalidArgument", "message": not_a_cut.removeprefix(
        "error: InvalidArgument: ") + "prints it)"}

    code, out, err = run(capsys, url, "--json", "stream", "tail", "no-slash")
    assert (code, out) == (2, "")
    assert json.loads(err) == {"code": "InvalidArgument", "message": "expected '<scope>/<stream>', got 'no-slash'"}
    for args in (["stream", "tail", stream, "--max-events", "0"], ["--json", "stream", "tail", stream, "--max-events", "x"]):
        with pytest.raises(SystemExit) as exited:
            main(["--endpoint", url, *args])
        assert exited.value.code == 2
        out, err = capsys.readouterr()
        assert out == "" and "--max-events: not a positive number" in err


def test_an_event_too_large_names_its_line_of_the_input(capsys, url, stream, monkeypatch):
    """A 5 MB line among small ones: refused (TooLarge, over the 4 MiB event limit), naming which line."""
    code, out, err = run(capsys, url, "stream", "write", stream, stdin="small\n" + "x" * 5_000_000 + "\nafter\n",
                         monkeypatch=monkeypatch)
    assert code != 0 and out == ""
    assert err.startswith("error: TooLarge: event 2 of the input: event of 5000000 bytes exceeds"), err[:200]
    assert err.count("\n") == 1
