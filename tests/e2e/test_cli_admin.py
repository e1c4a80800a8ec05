"""``rillet rg``, ``rillet txn`` and ``rillet retention`` against the standalone stack over HTTP."""

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
                 "--subscriber-timeout", "1h", "--fallback-after", "7d"]) == 0
    capsys.readouterr()
    return f"{unique}/s"


def test_reader_group_create_describe_reset_delete(capsys, url, stream, unique):
    group = f"{unique}/g"
    assert run(capsys, url, "rg", "create", group, "--stream", stream, "--subscriber", "manual") == (
        0, f"reader group {group} created\n", "")
    run(capsys, url, "stream", "write", stream, "hello", "world", "--no-key-and-time")  # 2 x (5 + 4) bytes unread

    code, out, err = run(capsys, url, "rg", "describe", group)
    assert (code, err) == (0, "")
    assert f"streams       {stream}\n" in out
    assert "subscriber    MANUAL_RELEASE_AT_USER_STREAMCUT\n" in out
    assert "readers       (none online)\n" in out and "lag           18 B unread\n" in out
    code, out, _ = run(capsys, url, "--json", "rg", "describe", group)
    described = json.loads(out)
    assert described["unread_bytes"] == 18 and described["generation"] == 0
    assert sum(row["lag_bytes"] for row in described["segments"]) == 18  # one figure: the summary sums the rows
    assert list(described["positions"]) == [stream]

    code, out, _ = run(capsys, url, "rg", "reset", group, "--from", "tail")
    assert (code, out) == (0, f"reader group {group} reset to tail (generation 1)\n")
    code, out, _ = run(capsys, url, "--json", "rg", "describe", group)
    assert json.loads(out)["unread_bytes"] == 0 and json.loads(out)["generation"] == 1
    code, out, err = run(capsys, url, "--json", "rg", "reset", group, "--from", "head")
    assert (code, err) == (0, "") and json.loads(out) == {"group": group, "generation": 2, "dropped_streams": []}
    code, out, _ = run(capsys, url, "--json", "rg", "describe", group)
    assert json.loads(out)["unread_bytes"] == 18 and json.loads(out)["generation"] == 2

    assert run(capsys, url, "rg", "delete", group) == (0, f"reader group {group} deleted\n", "")
    code, out, err = run(capsys, url, "rg", "describe", group)
    assert code != 0 and out == "" and err.startswith("error: ReaderGroupNotFound: ")
    assert run(capsys, url, "rg", "delete", group) == (
        3, "", f"error: ReaderGroupNotFound: reader group {group} does not exist\n")


def test_reader_group_commands_in_json(capsys, url, stream, unique):
    group = f"{unique}/j"
    code, out, err = run(capsys, url, "--json", "rg", "create", group, "--stream", stream)
    assert (code, err) == (0, "") and json.loads(out) == {"group": group, "created": True}
    code, out, _ = run(capsys, url, "--json", "rg", "create", group, "--stream", stream)
    assert code == 0 and json.loads(out) == {"group": group, "created": False}
    code, out, _ = run(capsys, url, "--json", "rg", "list", unique)
    assert code == 0 and json.loads(out) == ["j"]
    code, out, err = run(capsys, url, "--json", "rg", "delete", group)
    assert (code, err) == (0, "") and json.loads(out) == {"group": group, "deleted": True}
    code, out, err = run(capsys, url, "--json", "rg", "delete", group)
    assert (code, out) == (3, "") and json.loads(err)["code"] == "ReaderGroupNotFound"


def test_transaction_info_and_abort(capsys, url, stream, unique):
    writer = EventStreamClientFactory(unique, url).create_transactional_writer("s", UTF8StringSerializer())
    txn = writer.begin()
    txn.write_event("never seen")
    txn.flush()
    code, out, err = run(capsys, url, "txn", "info", stream, txn.txn_id)
    assert (code, err) == (0, "")
    assert out.startswith(f"transaction {txn.txn_id} of {stream}: OPEN, epoch 0, 1 segment, lease ends in ")
    code, out, _ = run(capsys, url, "--json", "txn", "abort", stream, txn.txn_id)
    assert code == 0 and json.loads(out)["state"] == "ABORTED"
    code, out, _ = run(capsys, url, "txn", "abort", stream, txn.txn_id)  # again: reported, harmless
    assert code == 0 and ": ABORTED, " in out
    assert run(capsys, url, "stream", "read", stream) == (0, "", "")

    code, out, err = run(capsys, url, "txn", "abort", stream, "not-a-txn")
    assert code != 0 and out == "" and err.startswith("error: ") and err.count("\n") == 1


def test_transaction_info_in_json(capsys, url, stream, unique):
    writer = EventStreamClientFactory(unique, url).create_transactional_writer("s", UTF8StringSerializer())
    txn = writer.begin()
    code, out, err = run(capsys, url, "--json", "txn", "info", stream, txn.txn_id)
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert (info["txn_id"], info["scope"], info["stream"], info["state"], info["epoch"]) == (
        txn.txn_id, unique, "s", "OPEN", 0)
    assert [s["segment_id"] for s in info["segments"]] == [0] and info["lease_expiry_ms"] <= info["max_expiry_ms"]
    txn.abort()
    code, out, _ = run(capsys, url, "--json", "txn", "info", stream, txn.txn_id)
    assert code == 0 and json.loads(out)["state"] == "ABORTED"


def test_transaction_info_bad_input(capsys, url, stream, unique):
    malformed = "path.txn_id: String should match pattern '^[0-9a-f]{32}$'"
    assert run(capsys, url, "txn", "info", stream, "not-a-txn") == (2, "", f"error: InvalidArgument: {malformed}\n")
    code, out, err = run(capsys, url, "--json", "txn", "info", stream, "not-a-txn")
    assert (code, out) == (2, "") and json.loads(err) == {"code": "InvalidArgument", "message": malformed}

    unknown = "0" * 32
    code, out, err = run(capsys, url, "txn", "info", stream, unknown)
    assert (code, out) == (3, "") and err.startswith("error: TxnNotFound: ") and err.count("\n") == 1
    code, out, err = run(capsys, url, "--json", "txn", "info", f"{unique}/missing", unknown)
    assert (code, out) == (3, "") and json.loads(err)["code"] == "TxnNotFound"  # the server looks up the txn only
    code, out, err = run(capsys, url, "--json", "txn", "info", "no-slash", unknown)
    assert (code, out) == (2, "")
    assert json.loads(err) == {"code": "InvalidArgument", "message": "expected '<scope>/<stream>', got 'no-slash'"}


def test_retention_in_human_terms(capsys, url, stream, unique):
    run(capsys, url, "stream", "write", stream, "abc", "--no-key-and-time")  # 4 + 3 bytes
    code, out, err = run(capsys, url, "retention", "status", stream)
    assert (code, err) == (0, "")
    assert out.splitlines()[:3] == [
        f"stream     {stream}",
        "policy     consumption-based, subscribers timeout 1h, fallback after 7d; time >= 7d",
        "retained   7 B between head and tail"]
    code, out, _ = run(capsys, url, "stream", "info", stream)
    assert "retention   consumption-based, subscribers timeout 1h, fallback after 7d; time >= 7d\n" in out

    run(capsys, url, "stream", "create", f"{unique}/sized", "--retention-size", "10GB", "--retention-size-max", "100GB")
    code, out, _ = run(capsys, url, "--json", "retention", "status", f"{unique}/sized")
    status = json.loads(out)
    assert status["policy"] == "size 10 GB..100 GB" and status["retained_bytes"] == 0
    run(capsys, url, "stream", "create", f"{unique}/plain")
    assert "policy     none (kept forever)\n" in run(capsys, url, "retention", "status", f"{unique}/plain")[1]

    code, out, err = run(capsys, url, "retention", "status", f"{unique}/missing")
    assert code != 0 and out == "" and err.startswith("error: StreamNotFound: ")


def test_reader_group_bad_input(capsys, url, stream, unique):
    code, out, err = run(capsys, url, "rg", "create", f"{unique}/g", "--stream", f"{unique}/missing")
    assert code != 0 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert "Traceback" not in err
    run(capsys, url, "rg", "create", f"{unique}/g", "--stream", stream)
    code, out, err = run(capsys, url, "rg", "reset", f"{unique}/g", "--from", "not a cut")
    assert code != 0 and out == "" and err.startswith("error: InvalidArgument: ")
    code, out, err = run(capsys, url, "--json", "rg", "describe", f"{unique}/nope")
    assert code != 0 and out == "" and json.loads(err)["code"] == "ReaderGroupNotFound"
    with pytest.raises(SystemExit):
        main(["--endpoint", url, "rg", "create", f"{unique}/g2"])  # no --stream
    assert "--stream" in capsys.readouterr().err


def test_reader_group_delete_bad_input(capsys, url, unique):
    assert run(capsys, url, "rg", "delete", "no-slash") == (
        2, "", "error: InvalidArgument: expected '<scope>/<reader-group>', got 'no-slash'\n")
    code, out, err = run(capsys, url, "--json", "rg", "delete", f"{unique}/bad name!")
    assert (code, out) == (2, "")
    body = json.loads(err)
    assert body["code"] == "InvalidArgument" and body["message"].startswith("Reader group name 'bad name!'")
    code, out, err = run(capsys, url, "rg", "delete", f"{unique}/bad name!")
    assert (code, out) == (2, "") and err == f"error: InvalidArgument: {body['message']}\n"
