"""``rillet rg list``, ``rg describe`` positions, ``txn list``, ``retention status`` decisions and
time-based cuts, against the standalone stack over HTTP."""

from __future__ import annotations

import json
import time

import pytest
from test_retention_subscribers_e2e import bound_to

from rillet import EventStreamClientFactory, StreamManager, UTF8StringSerializer
from rillet.cli import main
from rillet.models import StreamDataRetention
from rillet.reader_group import ReaderGroupManager, group_config


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stream(capsys, url, unique):
    assert main(["--endpoint", url, "scope", "create", unique]) == 0
    assert main(["--endpoint", url, "stream", "create", f"{unique}/s", "--retention-time", "7d",
                 "--subscriber-timeout", "1h"]) == 0
    capsys.readouterr()
    return f"{unique}/s"


def test_rg_list_names_the_groups_of_a_scope(capsys, url, stream, unique):
    assert run(capsys, url, "rg", "list", unique) == (0, "(no reader groups)\n", "")
    for name in ("b", "a", "c"):
        run(capsys, url, "rg", "create", f"{unique}/{name}", "--stream", stream)
    run(capsys, url, "rg", "delete", f"{unique}/c")
    assert run(capsys, url, "rg", "list", unique) == (0, "a\nb\n", "")
    code, out, _ = run(capsys, url, "--json", "rg", "list", unique)
    assert (code, json.loads(out)) == (0, ["a", "b"])

    code, out, err = run(capsys, url, "rg", "list", f"{unique}-missing")
    assert code != 0 and out == "" and err.startswith("error: ScopeNotFound: ")
    code, out, err = run(capsys, url, "--json", "rg", "list", "no/such")
    assert code != 0 and out == "" and json.loads(err)["code"] == "InvalidArgument"


def test_txn_list_shows_unfinished_transactions_with_deadlines(capsys, url, stream, unique):
    assert run(capsys, url, "txn", "list", stream) == (0, "(no open transactions)\n", "")
    writer = EventStreamClientFactory(unique, url).create_transactional_writer("s", UTF8StringSerializer())
    kept, aborted, committed = writer.begin(), writer.begin(), writer.begin()
    aborted.abort()
    committed.commit()

    code, out, err = run(capsys, url, "txn", "list", stream)
    assert (code, err) == (0, "")
    assert out.startswith(f"transaction {kept.txn_id} of {stream}: OPEN, epoch 0, 1 segment, lease ends in ")
    assert out.count("\n") == 1
    code, out, _ = run(capsys, url, "--json", "txn", "list", stream)
    listed = json.loads(out)
    assert [t["txn_id"] for t in listed] == [kept.txn_id]
    assert listed[0]["lease_expiry_ms"] <= listed[0]["max_expiry_ms"]

    code, out, err = run(capsys, url, "txn", "list", f"{unique}/missing")
    assert code != 0 and out == "" and err.startswith("error: StreamNotFound: ")


def test_rg_describe_shows_reader_positions_lag_and_the_acknowledged_cut(capsys, url, stream, unique):
    scope, name = stream.split("/")
    manager = StreamManager(url)
    run(capsys, url, "stream", "write", stream, "hello", "--key", "k", "--no-key-and-time")  # 9 B framed
    middle = manager.get_tail(scope, name)
    run(capsys, url, "stream", "write", stream, "world", "--key", "k", "--no-key-and-time")
    groups = ReaderGroupManager(scope, url)
    groups.create_reader_group("g", group_config(
        [stream], group_refresh_time_ms=0, retention_type=StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT))
    groups.get_reader_group("g").update_retention_stream_cut(middle)
    reader = EventStreamClientFactory(scope, url).create_reader("r1", "g", UTF8StringSerializer())
    assert reader.read_next_event(timeout_ms=5000).event == "hello"
    assert reader.read_next_event(timeout_ms=5000).event == "world"  # synced at offset 9 first

    code, out, err = run(capsys, url, "rg", "describe", f"{scope}/g")
    assert (code, err) == (0, "")
    assert "\nreaders       r1 (seen " in out
    table = out.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["SEGMENT", "RANGE", "OFFSET", "END", "LAG", "OWNER"]
    assert table[1].split() == ["0", "[0.00,", "1.00)", "9", "18", "9", "B", "r1"]
    assert f"\nacknowledged  {stream} 0@9 (" in out and "silent-" not in out and "|" not in out
    code, out, _ = run(capsys, url, "--json", "rg", "describe", f"{scope}/g")
    described = json.loads(out)
    [r1] = described["readers"]
    assert (r1["reader"], r1["unread_bytes"]) == ("r1", 9)
    assert [(s["offset"], s["unread_bytes"]) for s in r1["segments"]] == [(9, 9)]
    assert described["acknowledged_cuts"][stream]["cut"] == middle.to_text()
    assert run(capsys, url, "rg", "lag", f"{scope}/g") == (0, f"{scope}/g  9 B unread\n", "")
    reader.close()

    run(capsys, url, "rg", "create", f"{scope}/plain", "--stream", stream)
    code, out, _ = run(capsys, url, "--json", "rg", "describe", f"{scope}/plain")
    assert (json.loads(out)["readers"], json.loads(out)["acknowledged_cuts"]) == ([], {})
    # no reader online: the table still shows where the group is and what it has yet to read
    assert [(r["segment"], r["offset"], r["end"], r["lag_bytes"], r["owner"]) for r in json.loads(out)["segments"]] == [
        (0, 0, 18, 18, None)]
    code, out, _ = run(capsys, url, "rg", "lag", scope)  # g's reader left at the end it had read to
    assert code == 0 and f"{scope}/g      0 B unread\n" in out and f"{scope}/plain  18 B unread\n" in out
    code, out, err = run(capsys, url, "rg", "describe", "no-scope-separator")
    assert code != 0 and out == "" and err.startswith("error: InvalidArgument: ")


def test_retention_status_shows_the_last_decision_and_subscriber_lag(capsys, stack, url, stream, unique):
    code, out, _ = run(capsys, url, "retention", "status", stream)
    assert "\ndecision   none yet (no retention cycle has run)\n" in out
    run(capsys, url, "stream", "create", f"{unique}/unkept")  # no policy: no cycle will ever run for it
    code, out, _ = run(capsys, url, "retention", "status", f"{unique}/unkept")
    assert "\ndecision   none: the stream has no retention policy, so the retention cycle leaves it alone\n" in out
    run(capsys, url, "rg", "create", f"{unique}/sub", "--stream", stream, "--subscriber", "manual")
    run(capsys, url, "stream", "write", stream, "hello", "world", "--no-key-and-time")  # 18 bytes not acknowledged
    with bound_to(stack) as controller:
        decision = controller.retention.cycle(unique, "s")
    assert decision.outcome == "kept"

    code, out, err = run(capsys, url, "retention", "status", stream)
    assert (code, err) == (0, "")
    assert f"\ndecision   kept just now: {decision.reason}\n" in out or f" ago: {decision.reason}\n" in out
    assert f"\nsubscriber {unique}/sub: active, lag 18 B, acknowledged " in out
    code, out, _ = run(capsys, url, "--json", "retention", "status", stream)
    status = json.loads(out)
    assert (status["last_decision"]["outcome"], status["last_decision"]["reason"]) == ("kept", decision.reason)
    assert [(s["group"], s["active"], s["lag_bytes"]) for s in status["subscribers"]] == [(f"{unique}/sub", True, 18)]

    code, out, err = run(capsys, url, "retention", "status", "no-scope-separator")
    assert code != 0 and out == "" and err.startswith("error: InvalidArgument: ")


def test_retention_status_names_the_cut_a_cycle_truncated_at(capsys, stack, url, unique):
    plain = f"{unique}/plain"
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", plain, "--retention-time", "7d")
    run(capsys, url, "stream", "write", plain, "old")
    scope, name = plain.split("/")
    cut = StreamManager(url).get_tail(scope, name)
    with bound_to(stack) as controller:
        now = int(time.time() * 1000)
        controller.retention.cycle(scope, name, now=now)  # records the tail in the retention set
        decision = controller.retention.cycle(scope, name, now=now + 8 * 86_400_000)  # 8 days later
    assert decision.outcome == "truncated"

    last = json.loads(run(capsys, url, "--json", "retention", "status", plain)[1])["last_decision"]
    assert (last["outcome"], last["retained_bytes"]) == ("truncated", 0)
    assert [p["offset"] for p in last["cut"]["positions"]] == [p.offset for p in cut.positions]
    out = run(capsys, url, "retention", "status", plain)[1]
    assert f"\ndecision   truncated just now at {cut.to_text()}: {decision.reason}\n" in out


def _a_moment_after_now() -> int:
    """A time after every block appended so far and before every block appended from now on (the stack
    runs on this host's clock): one millisecond on, and that millisecond reached."""
    moment = int(time.time() * 1000) + 1
    while time.time() * 1000 < moment:
        pass
    return moment


def test_cut_at_time_and_read_from_time(capsys, url, unique):
    events = f"{unique}/timed"
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", events, "--scaling", "fixed:2")
    scope, name = events.split("/")
    manager = StreamManager(url)
    run(capsys, url, "stream", "write", events, "old-a", "--key", "a")
    run(capsys, url, "stream", "write", events, "old-b", "--key", "b")
    between = manager.get_tail(scope, name)
    moment = _a_moment_after_now()
    run(capsys, url, "stream", "write", events, "new-a", "--key", "a")
    run(capsys, url, "stream", "write", events, "new-b", "--key", "b")

    assert run(capsys, url, "stream", "cut", events, "at", str(moment)) == (0, between.to_text() + "\n", "")
    code, out, _ = run(capsys, url, "--json", "stream", "cut", events, "at", str(moment))
    assert (code, json.loads(out)["cut"]) == (0, between.to_text())
    code, out, err = run(capsys, url, "stream", "read", events, "--from-time", str(moment))
    assert (code, sorted(out.splitlines()), err) == (0, ["new-a", "new-b"], "")
    assert sorted(run(capsys, url, "stream", "read", events, "--from-time", "-1d")[1].splitlines()) == [
        "new-a", "new-b", "old-a", "old-b"]
    assert run(capsys, url, "stream", "cut", events, "at", "now")[1] == manager.get_tail(scope, name).to_text() + "\n"

    # after a scale: the new epoch's segments from their start, the kept ones from the first block after
    first = manager.get_stream_info(scope, name).tail[0].segment
    manager.scale_stream(scope, name, [first.segment_id], [(first.low, (first.low + first.high) / 2),
                                                          ((first.low + first.high) / 2, first.high)])
    after_scale = _a_moment_after_now()
    run(capsys, url, "stream", "write", events, "x", "y", "z")
    code, out, _ = run(capsys, url, "stream", "read", events, "--from-time", str(after_scale))
    assert (code, sorted(out.splitlines())) == (0, ["x", "y", "z"])

    # never before the head: a time before it reads from the head
    manager.truncate_stream(scope, name, manager.get_tail(scope, name))
    run(capsys, url, "stream", "write", events, "kept", "--key", "a")
    assert run(capsys, url, "stream", "read", events, "--from-time", "-1d") == (0, "kept\n", "")


def test_time_arguments_are_checked(capsys, url, unique):
    events = f"{unique}/timed"
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", events)
    for bad in (["stream", "cut", events, "at", "yesterday"],
                ["stream", "read", events, "--from-time", "-1y"],
                ["stream", "read", events, "--from", "head", "--from-time", "-1h"]):
        with pytest.raises(SystemExit):
            main(["--endpoint", url, *bad])
        assert "usage:" in capsys.readouterr().err
    code, out, err = run(capsys, url, "stream", "cut", events, "at")
    assert code != 0 and out == "" and err.startswith("error: InvalidArgument: ")
    code, out, err = run(capsys, url, "--json", "stream", "cut", f"{unique}/missing", "at", "-1h")
    assert code != 0 and out == "" and json.loads(err)["code"] == "StreamNotFound"
