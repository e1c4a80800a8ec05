"""``rillet rg list``, ``rg describe`` positions, ``txn list``, ``retention status`` decisions and
time-based cuts, against the standalone stack over HTTP."""

from __future__ import annotations

import json

import pytest

from rillet import EventStreamClientFactory, UTF8StringSerializer
from rillet.cli import main


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
    assert out.startswith(f"transaction {kept.txn_id} of {stream}: OPEN, epoch 0, 1 segments, lease ends in ")
    assert out.count("\n") == 1
    code, out, _ = run(capsys, url, "--json", "txn", "list", stream)
    listed = json.loads(out)
    assert [t["txn_id"] for t in listed] == [kept.txn_id]
    assert listed[0]["lease_expiry_ms"] <= listed[0]["max_expiry_ms"]

    code, out, err = run(capsys, url, "txn", "list", f"{unique}/missing")
    assert code != 0 and out == "" and err.startswith("error: StreamNotFound: ")
