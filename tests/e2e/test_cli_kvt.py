"""``rillet kvt`` against the standalone stack over HTTP: the lifecycle and entries, text and --json."""

from __future__ import annotations

import base64
import json

from rillet.cli import main


def run(capsys, url, *args):
    code = main(["--endpoint", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_kvt_commands(capsys, url, unique):
    table = f"{unique}/carts"
    assert main(["--endpoint", url, "scope", "create", unique]) == 0
    capsys.readouterr()
    assert run(capsys, url, "kvt", "create", table, "--partitions", "2", "--primary-key-length", "4",
               "--secondary-key-length", "2") == (0, f"key-value table {table} created\n", "")
    assert run(capsys, url, "kvt", "list", unique) == (0, "carts\n", "")
    code, out, _ = run(capsys, url, "kvt", "describe", table)
    assert code == 0 and "state       ACTIVE\n" in out and "primary 4 B, secondary 2 B" in out

    code, out, _ = run(capsys, url, "--json", "kvt", "put", table, "anna", "3 apples", "--secondary", "ap")
    version = json.loads(out)["version"]
    assert run(capsys, url, "kvt", "get", table, "anna", "--secondary", "ap") == (0, f"anna/ap\t3 apples\t{version}\n", "")
    code, _, err = run(capsys, url, "kvt", "put", table, "anna", "x", "--secondary", "ap", "--if-absent")
    assert (code, err.startswith("error: BadKeyVersion:")) == (1, True)
    code, out, _ = run(capsys, url, "kvt", "put", table, "anna", "4 apples", "--secondary", "ap", "--version", version)
    assert code == 0 and out.startswith("version ")
    code, _, err = run(capsys, url, "kvt", "remove", table, "anna", "--secondary", "ap", "--version", version)
    assert (code, err.startswith("error: BadKeyVersion:")) == (1, True)  # the version went stale
    run(capsys, url, "kvt", "put", table, "6e6f6168", "0102", "--secondary", "6b6b", "--hex")

    code, out, _ = run(capsys, url, "--json", "kvt", "list-keys", table, "--values")
    entries = {base64.b64decode(e["primary_base64"]): base64.b64decode(e["value_base64"]) for e in json.loads(out)}
    assert entries == {b"anna": b"4 apples", b"noah": b"\x01\x02"}
    code, out, _ = run(capsys, url, "--json", "kvt", "get", table, "anna", "--secondary", "ap")
    entry = json.loads(out)
    assert (entry["primary"], entry["secondary"], entry["value"]) == ("anna", "ap", "4 apples")
    assert base64.b64decode(entry["value_base64"]) == b"4 apples"
    code, out, _ = run(capsys, url, "--json", "kvt", "get", table, "6e6f6168", "--secondary", "6b6b", "--hex")
    assert json.loads(out)["value"] is None and json.loads(out)["value_base64"] == "AQI="  # not UTF-8: base64 only
    code, out, _ = run(capsys, url, "kvt", "list-keys", table, "--primary", "noah")
    assert code == 0 and out.startswith("noah/kk\t\t")

    assert run(capsys, url, "kvt", "remove", table, "anna", "--secondary", "ap") == (0, "removed\n", "")
    # a missing key is an error scripts can tell from others: exit 3, for get and remove alike
    for action in ("get", "remove"):
        assert run(capsys, url, "kvt", action, table, "anna", "--secondary", "ap") == (
            3, "", f"error: NoSuchKey: key anna/ap is not in {table}\n")
    assert run(capsys, url, "kvt", "seal", table) == (0, f"key-value table {table} sealed\n", "")
    code, _, err = run(capsys, url, "kvt", "put", table, "noah", "x", "--secondary", "kk")
    assert (code, err.startswith("error: IllegalState:")) == (1, True)
    assert run(capsys, url, "kvt", "delete", table) == (0, f"key-value table {table} deleted\n", "")
    assert run(capsys, url, "kvt", "delete", table) == (
        3, "", f"error: KeyValueTableNotFound: key-value table {table} does not exist\n")
    code, _, err = run(capsys, url, "kvt", "describe", table)
    assert (code, err.startswith("error: KeyValueTableNotFound:")) == (3, True)


def test_the_readme_kvt_block_runs_as_written(capsys, url, unique):
    """Each command of the README's key-value table block exits as its comment says."""
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"Key-value tables sit beside streams.*?```sh\n(.*?)```", readme, re.DOTALL).group(1)
    assert main(["--endpoint", url, "scope", "create", unique]) == 0
    capsys.readouterr()
    for line in block.splitlines():
        command, _, comment = line.partition("#")
        code, out, err = run(capsys, url, *shlex.split(command.replace("demo", unique))[1:])
        assert code == (1 if "BadKeyVersion" in comment else 0), (line, err)
    assert out.startswith("anna\t3 apples\t")
