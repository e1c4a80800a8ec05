"""``rillet stream segments|scale|cut|truncate`` against the standalone stack over HTTP."""

from __future__ import annotations

import json

import pytest

import rillet
from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stream(capsys, url, unique):
    assert main(["--endpoint", url, "scope", "create", unique]) == 0
    assert main(["--endpoint", url, "stream", "create", f"{unique}/s", "--scaling", "fixed:2"]) == 0
    capsys.readouterr()
    return f"{unique}/s"


def test_split_and_merge_drawn_as_epochs(capsys, url, stream):
    code, out, err = run(capsys, url, "stream", "scale", stream, "--split", "1", "--into", "2")
    assert (code, err) == (0, "")
    assert out == f"{stream}: epoch 1 (DONE): sealed segment 1; 2 new: [0.5000, 0.7500), [0.7500, 1.0000)\n"
    code, out, _ = run(capsys, url, "--json", "stream", "scale", stream, "--merge", "0", "2")
    assert code == 0
    assert json.loads(out) == {"stream": stream, "epoch": 2, "status": "DONE", "sealed": [0, 1 << 32 | 2],
                               "new_ranges": [[0.0, 0.75]]}

    code, out, _ = run(capsys, url, "stream", "segments", stream)
    rows = [line.split(maxsplit=2)[2] for line in out.splitlines() if line.startswith("epoch")]
    assert code == 0
    assert rows == [  # '=' marks the segments an epoch created: 1 split into 2 and 3, then 0 and 2 merged into 4
        "|" + "0".center(31, "=") + "|" + "1".center(31, "=") + "|",
        "|" + "0".center(31, "-") + "|" + "2".center(15, "=") + "|" + "3".center(15, "=") + "|",
        "|" + "4".center(47, "=") + "|" + "3".center(15, "-") + "|",
    ]
    assert [line.split()[0] for line in out.splitlines() if line.startswith("  ")] == ["4", "3"]

    code, out, _ = run(capsys, url, "--json", "stream", "segments", stream, "--epochs", "2")
    history = json.loads(out)["epochs"]
    assert [e["epoch"] for e in history] == [1, 2]
    assert [(s["number"], s["low"], s["high"], s["created_in_epoch"]) for s in history[1]["segments"]] == [
        (4, 0.0, 0.75, True), (3, 0.75, 1.0, False)]


def test_cuts_and_truncation(capsys, url, stream):
    run(capsys, url, "stream", "write", stream, "one", "two", "--key", "k", "--no-key-and-time")  # 2 x (4 + 3) B
    code, tail, err = run(capsys, url, "stream", "cut", stream, "tail")
    incarnation = rillet.StreamManager(url).get_stream_info(*stream.split("/")).created_at_ms
    assert (code, err) == (0, "") and tail.startswith(f"{stream}@{incarnation}|")  # the stream's incarnation
    tail = tail.strip()
    code, out, _ = run(capsys, url, "--json", "stream", "cut", stream, "head")
    assert code == 0 and [p["offset"] for p in json.loads(out)["positions"]] == [0, 0]
    run(capsys, url, "stream", "write", stream, "three", "--key", "k")

    assert run(capsys, url, "stream", "truncate", stream, "--cut", tail) == (
        0, f"{stream} truncated: 14 B before the cut released\n", "")
    assert run(capsys, url, "stream", "read", stream) == (0, "three\n", "")
    code, out, _ = run(capsys, url, "--json", "stream", "cut", stream, "head")
    assert json.loads(out)["cut"] == tail

    code, later, _ = run(capsys, url, "stream", "cut", stream, "tail")
    later = later.strip()
    code, out, err = run(capsys, url, "--json", "stream", "truncate", stream, "--cut", later)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"stream": stream, "truncated_at": later, "released_bytes": 21}  # 9 B framed + 12 kept
    assert run(capsys, url, "stream", "read", stream) == (0, "", "")


def test_bad_input(capsys, url, stream, unique):
    code, out, err = run(capsys, url, "stream", "scale", stream, "--split", "7")
    assert code != 0 and out == "" and err == "error: InvalidArgument: no current segment 7 (current: 0, 1)\n"
    run(capsys, url, "stream", "scale", stream, "--split", "0", "--into", "2")  # now 1, 2, 3
    code, _, err = run(capsys, url, "stream", "scale", stream, "--merge", "1", "2")
    assert code != 0 and err.startswith("error: InvalidArgument: --merge takes neighbouring segments")
    code, _, err = run(capsys, url, "stream", "scale", stream, "--split", "1", "--into", "1")
    assert code != 0 and err.startswith("error: InvalidArgument: --into takes 2 or more")
    code, _, err = run(capsys, url, "stream", "truncate", stream, "--cut", f"{unique}/other|0:0.0:1.0:0")
    assert code != 0 and err.startswith("error: InvalidArgument: the cut is of")
    code, _, err = run(capsys, url, "stream", "truncate", stream, "--cut", f"{stream}|0:0.0:0.5:0")
    assert code != 0 and err.startswith("error: InvalidArgument: invalid stream cut")
    code, out, err = run(capsys, url, "--json", "stream", "truncate", stream, "--cut", f"{stream}|0:0.0:0.5:0")
    assert (code, out) == (2, "")
    assert json.loads(err)["code"] == "InvalidArgument" and json.loads(err)["message"].startswith("invalid stream cut")
    code, _, err = run(capsys, url, "stream", "segments", f"{unique}/missing")
    assert code != 0 and err.startswith("error: StreamNotFound: ")


def test_cut_bad_input(capsys, url, stream, unique):
    with pytest.raises(SystemExit):
        main(["--endpoint", url, "stream", "cut", stream, "middle"])
    assert "invalid choice: 'middle'" in capsys.readouterr().err
    code, out, err = run(capsys, url, "--json", "stream", "cut", f"{unique}/missing", "head")
    assert code != 0 and out == "" and json.loads(err)["code"] == "StreamNotFound"
