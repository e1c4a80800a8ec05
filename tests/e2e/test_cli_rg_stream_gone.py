"""``rillet rg`` once a stream a group reads is deleted (the group outlives it), and ``stream delete``'s
refusal to delete a stream reader groups read, against the standalone stack over HTTP."""

from __future__ import annotations

import json

import pytest

from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def scope(capsys, url, unique, manager):
    """Streams a (deleted) and b (9 B written); groups ``orphan`` over a, ``mixed`` over a and b,
    ``healthy`` over b."""
    for args in (("scope", "create", unique), ("stream", "create", f"{unique}/a"), ("stream", "create", f"{unique}/b"),
                 ("rg", "create", f"{unique}/orphan", "--stream", f"{unique}/a"),
                 ("rg", "create", f"{unique}/mixed", "--stream", f"{unique}/a", "--stream", f"{unique}/b"),
                 ("rg", "create", f"{unique}/healthy", "--stream", f"{unique}/b"),
                 ("stream", "write", f"{unique}/b", "hello", "--no-key-and-time")):  # 5 + 4 bytes
        assert main(["--endpoint", url, *args]) == 0
    manager.seal_stream(unique, "a")
    assert manager.delete_stream(unique, "a")  # through the SDK: no check of the groups
    capsys.readouterr()
    return unique


def test_lag_of_a_scope_shows_every_group_and_names_the_gone_stream(capsys, url, scope):
    code, out, err = run(capsys, url, "rg", "lag", scope)
    assert (code, err) == (0, "")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines[f"{scope}/healthy"].endswith("  9 B unread")
    assert lines[f"{scope}/mixed"].endswith(f"  9 B unread (gone: {scope}/a)")
    assert lines[f"{scope}/orphan"].endswith(f"  0 B unread (gone: {scope}/a)")

    code, out, err = run(capsys, url, "--json", "rg", "lag", scope)
    assert (code, err) == (0, "")
    assert json.loads(out) == {f"{scope}/healthy": 9,
                               f"{scope}/mixed": {"unread_bytes": 9, "gone_streams": [f"{scope}/a"]},
                               f"{scope}/orphan": {"unread_bytes": 0, "gone_streams": [f"{scope}/a"]}}
    code, out, _ = run(capsys, url, "rg", "lag", f"{scope}/mixed")
    assert (code, out) == (0, f"{scope}/mixed  9 B unread (gone: {scope}/a)\n")


def test_describe_shows_the_gone_streams_positions_as_gone(capsys, url, scope):
    code, out, err = run(capsys, url, "rg", "describe", f"{scope}/mixed")
    assert (code, err) == (0, "")
    assert f"streams       {scope}/a (gone), {scope}/b\n" in out and "lag           9 B unread\n" in out
    assert f"gone          {scope}/a: deleted since the group read it" in out
    table = out[out.index("STREAM"):].splitlines()
    assert table[1].split() == [f"{scope}/a", "0", "[0.00,", "1.00)", "0", "gone", "-", "-"]
    assert table[2].split() == [f"{scope}/b", "0", "[0.00,", "1.00)", "0", "9", "9", "B", "-"]

    code, out, err = run(capsys, url, "--json", "rg", "describe", f"{scope}/orphan")
    assert (code, err) == (0, "")
    described = json.loads(out)
    assert described["gone_streams"] == [f"{scope}/a"] and described["unread_bytes"] == 0
    assert [(r["stream"], r["offset"], r["end"], r["lag_bytes"], r["gone"]) for r in described["segments"]] == [
        (f"{scope}/a", 0, None, None, True)]
    assert list(described["positions"]) == [f"{scope}/a"]  # the position the group kept


def test_reset_leaves_the_gone_stream_out_or_tells_to_delete_a_group_with_none_left(capsys, url, scope):
    code, out, err = run(capsys, url, "rg", "reset", f"{scope}/mixed")
    assert (code, err) == (0, "")
    assert out == f"reader group {scope}/mixed reset to head (generation 1); left out {scope}/a (deleted)\n"
    code, out, _ = run(capsys, url, "--json", "rg", "reset", f"{scope}/mixed")  # a is already left out
    assert (code, json.loads(out)["dropped_streams"]) == (0, [])
    code, out, _ = run(capsys, url, "--json", "rg", "describe", f"{scope}/mixed")
    assert json.loads(out)["streams"] == [f"{scope}/b"] and json.loads(out)["gone_streams"] == []

    code, out, err = run(capsys, url, "rg", "reset", f"{scope}/orphan")
    assert (code, out) == (1, "")
    assert err == (f"error: ReaderGroupStreamsGone: every stream reader group {scope}/orphan reads is deleted "
                   f"({scope}/a): nothing to read again; delete the group (rillet rg delete {scope}/orphan)\n")
    assert run(capsys, url, "rg", "delete", f"{scope}/orphan")[0] == 0


def test_stream_delete_is_refused_while_groups_read_it_unless_forced(capsys, url, unique, manager):
    for args in (("scope", "create", unique), ("stream", "create", f"{unique}/s"), ("stream", "create", f"{unique}/t"),
                 ("rg", "create", f"{unique}/g1", "--stream", f"{unique}/s"),
                 ("rg", "create", f"{unique}/g2", "--stream", f"{unique}/t", "--stream", f"{unique}/s"),
                 ("rg", "create", f"{unique}/other", "--stream", f"{unique}/t"),
                 ("stream", "seal", f"{unique}/s"), ("stream", "seal", f"{unique}/t")):
        assert main(["--endpoint", url, *args]) == 0
    capsys.readouterr()

    code, out, err = run(capsys, url, "stream", "delete", f"{unique}/s")
    assert (code, out) == (1, "")
    assert err == (f"error: StreamHasReaderGroups: reader groups read {unique}/s: {unique}/g1, {unique}/g2; delete "
                   "them first (rillet rg delete) or give --force to delete the stream anyway\n")
    code, _, err = run(capsys, url, "--json", "stream", "delete", f"{unique}/s")
    assert code == 1 and json.loads(err)["code"] == "StreamHasReaderGroups"
    assert manager.get_stream_info(unique, "s").state.value == "SEALED"  # refused before any change

    assert run(capsys, url, "stream", "delete", f"{unique}/s", "--force") == (0, f"stream {unique}/s deleted\n", "")
    for group in ("g2", "other"):
        assert run(capsys, url, "rg", "delete", f"{unique}/{group}")[0] == 0
    assert run(capsys, url, "stream", "delete", f"{unique}/t") == (0, f"stream {unique}/t deleted\n", "")
