"""Errors that say what the user did wrong (issue 30, item 9), against the standalone stack."""

from __future__ import annotations

from rillet import EventStreamClientFactory, StreamManager, UTF8StringSerializer
from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_truncating_behind_the_head_and_another_streams_cut(capsys, url, unique):
    stream, other = f"{unique}/s", f"{unique}/other"
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", stream)
    run(capsys, url, "stream", "create", other)
    run(capsys, url, "stream", "write", stream, "one", "--key", "k")
    early = StreamManager(url).get_tail(unique, "s").to_text()
    run(capsys, url, "stream", "write", stream, "two", "--key", "k")
    assert run(capsys, url, "stream", "truncate", stream, "--cut", "tail")[0] == 0

    code, out, err = run(capsys, url, "stream", "truncate", stream, "--cut", early)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "lies before the stream's head" in err and "only moves forward" in err and "start cut" not in err

    cut_of_other = StreamManager(url).get_tail(unique, "other").to_text()
    code, _, err = run(capsys, url, "stream", "truncate", stream, "--cut", cut_of_other)
    assert code == 2 and f"the cut is of {other}, not of {stream}" in err and "tile" not in err


def test_a_finished_transaction_shows_no_lease(capsys, url, unique):
    run(capsys, url, "scope", "create", unique)
    run(capsys, url, "stream", "create", f"{unique}/s")
    writer = EventStreamClientFactory(unique, url).create_transactional_writer("s", UTF8StringSerializer())
    txn = writer.begin()
    txn.write_event("x")
    txn.commit()
    code, out, _ = run(capsys, url, "txn", "info", f"{unique}/s", txn.txn_id)
    assert code == 0 and ": COMMITTED, " in out and "lease" not in out
